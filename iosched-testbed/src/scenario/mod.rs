//! The seed scenarios: the situations our users reported on the mailing lists
//! (`shared/seeds/`), set up on the emulated disk with the kernel's real schedulers.
//!
//! This module says *what* each scenario runs (runs = scheduler + queue settings +
//! workload); [`runner`] brings the disk up, records each run with `iosched-trace record` and
//! reports it with `iosched-trace report --json`; [`summary`] pulls the numbers the
//! comparisons need out of that report and prints them as one table. `cargo xtask scenario
//! NAME` and the root tests in `tests/tests/scenarios.rs` both go through here, so a
//! scenario is defined once. What each one shows on this kernel: `docs/SCENARIOS.md`.

pub mod bed;
pub mod priority;
pub mod runner;
pub mod summary;
pub mod validate;
pub mod whatif;

use std::fmt;

pub use bed::Bed;
pub use runner::{RunOptions, RunOutcome, ScenarioError, Tools, run};
pub use summary::{RunSummary, table};

/// One run of a scenario: a scheduler, its settings, one workload, one recording.
#[derive(Clone, Debug)]
pub struct Run {
    /// Short and unique within the scenario; also the recording's file name.
    pub label: String,
    /// `queue/scheduler`.
    pub scheduler: &'static str,
    /// Queue attributes written after the scheduler is set, e.g. `("iosched/slice_idle",
    /// "0")`, `("nomerges", "2")`.
    pub settings: Vec<(&'static str, String)>,
    pub workload: Workload,
    /// The workload's I/O priority as the model's `ioprio=` switch spells it (`be/5`);
    /// `None`: the default (nice 0, no priority set), whatever the caller's.
    pub ioprio: Option<&'static str>,
}

/// What runs against the emulated disk while the recorder records.
#[derive(Clone, Debug)]
pub enum Workload {
    /// fio on the raw device: `--filename` is added; its JSON report is kept.
    Fio(Vec<String>),
    /// `dd if=DEV of=/dev/null bs=BS count=COUNT`, buffered (readahead at work), after the
    /// device's own page cache is flushed (`blockdev --flushbufs`, this device only).
    DdRead { bs: &'static str, count: u32 },
    /// ext4 made on the disk and mounted; `dd if=/dev/zero of=FILE bs=512 count=COUNT
    /// oflag=dsync` run in a child blkio cgroup of its own (jbd2 stays in the root group).
    DsyncJournal { count: u32 },
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Fio(args) => write!(f, "fio {}", args.join(" ")),
            Workload::DdRead { bs, count } => {
                write!(f, "dd if=DEV of=/dev/null bs={bs} count={count}")
            }
            Workload::DsyncJournal { count } => write!(
                f,
                "ext4; dd if=/dev/zero of=FILE bs=512 count={count} oflag=dsync (own blkio cgroup)"
            ),
        }
    }
}

/// A seed scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: &'static str,
    /// The seed thread it reproduces (file in `shared/seeds/`).
    pub seed: &'static str,
    /// One line: the question the runs answer.
    pub about: &'static str,
    /// Size of the emulated disk.
    pub disk_size: u64,
    pub runs: Vec<Run>,
}

impl Scenario {
    /// Drops the runs whose scheduler this kernel does not have (`kernel_has_scheduler`: a
    /// kernel built without bfq, as on this project's current machines) and returns their
    /// labels, so that the caller can say which were left out rather than fail on the first.
    pub fn keep_runnable(&mut self, has: impl Fn(&str) -> bool) -> Vec<String> {
        let mut known: Vec<(&str, bool)> = Vec::new();
        let mut dropped = Vec::new();
        self.runs.retain(|r| {
            let keep = match known.iter().find(|(name, _)| *name == r.scheduler) {
                Some(&(_, ok)) => ok,
                None => {
                    let ok = r.scheduler == "none" || has(r.scheduler);
                    known.push((r.scheduler, ok));
                    ok
                }
            };
            if !keep {
                dropped.push(r.label.clone());
            }
            keep
        });
        dropped
    }
}

pub const NAMES: [&str; 5] = [
    "multi-reader",
    "dsync-journal",
    "tiny-seq-writes",
    "single-reader-idle",
    "many-readers-latency",
];

/// The fast-device scenarios: what `cargo xtask validate` runs on the emulated flash device
/// and on a RAM-backed loop device, each under none, mq-deadline, bfq and kyber. No mailing
/// list thread behind them: workloads where a fast device's schedulers differ in their own
/// cost (issue 20).
pub const FAST_NAMES: [&str; 3] = ["fast-randread", "fast-seq-rand", "fast-randrw"];

/// The scenario called `name`, or `None`.
pub fn by_name(name: &str) -> Option<Scenario> {
    Some(match name {
        "fast-randread" => fast(
            "fast-randread",
            "2 fio jobs, 4 KiB random reads, libaio, iodepth 8",
            &[
                "--name=randread",
                "--rw=randread",
                "--bs=4k",
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=8",
                "--numjobs=2",
                "--randrepeat=0",
            ],
        ),
        "fast-seq-rand" => fast(
            "fast-seq-rand",
            "one sequential 128 KiB reader (iodepth 4) beside one 4 KiB random reader (iodepth 1)",
            &[
                "--direct=1",
                "--ioengine=libaio",
                "--randrepeat=0",
                "--name=seq",
                "--rw=read",
                "--bs=128k",
                "--iodepth=4",
                "--name=rand",
                "--rw=randread",
                "--bs=4k",
                "--iodepth=1",
            ],
        ),
        "fast-randrw" => fast(
            "fast-randrw",
            "2 fio jobs, 4 KiB random 70% reads / 30% writes, libaio, iodepth 8",
            &[
                "--name=randrw",
                "--rw=randrw",
                "--rwmixread=70",
                "--bs=4k",
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=8",
                "--numjobs=2",
                "--randrepeat=0",
            ],
        ),
        "multi-reader" => multi_reader(),
        "dsync-journal" => dsync_journal(),
        "tiny-seq-writes" => tiny_seq_writes(),
        "single-reader-idle" => single_reader_idle(),
        "many-readers-latency" => many_readers_latency(),
        _ => return None,
    })
}

const GIB: u64 = 1 << 30;

/// How long each fast-device run's workload runs, seconds.
pub const FAST_RUNTIME_S: u32 = 3;

/// A fast-device scenario: one fio workload (`args`, the time limit added) under none,
/// mq-deadline, bfq and kyber, on a 512 MiB device.
fn fast(name: &'static str, about: &'static str, args: &[&str]) -> Scenario {
    let runtime = format!("--runtime={FAST_RUNTIME_S}");
    let mut all: Vec<&str> = vec!["--time_based", &runtime, "--size=512m"];
    all.extend_from_slice(args);
    let runs = ["none", "mq-deadline", "bfq", "kyber"]
        .into_iter()
        .map(|sched| define(sched, sched, &[], fio(&all)))
        .collect();
    Scenario {
        name,
        seed: "",
        about,
        disk_size: GIB / 2,
        runs,
    }
}

/// Queue attributes a run writes: `(attribute, value)`.
type Settings<'a> = &'a [(&'static str, &'a str)];

fn define(
    label: impl Into<String>,
    scheduler: &'static str,
    settings: Settings<'_>,
    workload: Workload,
) -> Run {
    Run {
        label: label.into(),
        scheduler,
        settings: settings.iter().map(|&(a, v)| (a, v.to_owned())).collect(),
        workload,
        ioprio: None,
    }
}

fn fio(args: &[&str]) -> Workload {
    Workload::Fio(args.iter().map(|s| (*s).to_owned()).collect())
}

/// Seed 000 (bfq-mq vs cfq, 2017): N sequential readers, 4 KiB, direct, iodepth 1, each in
/// its own region of the disk (the seed gave each job its own file). 3 s per run: shorter
/// than the shortest weight raising (3 s), so a raised queue stays raised the whole run.
pub fn multi_reader() -> Scenario {
    let configs: [(&str, &'static str, Settings<'_>); 4] = [
        ("bfq-ll1", "bfq", &[("iosched/low_latency", "1")]),
        ("bfq-ll0", "bfq", &[("iosched/low_latency", "0")]),
        ("mq-deadline", "mq-deadline", &[]),
        ("none", "none", &[]),
    ];
    let read = |jobs: u32| {
        let numjobs = format!("--numjobs={jobs}");
        fio(&[
            "--name=seqread",
            "--rw=read",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=1",
            &numjobs,
            "--size=100m",
            "--offset_increment=100m",
            "--runtime=3",
            "--time_based",
            "--group_reporting",
        ])
    };
    let mut runs = Vec::new();
    for (name, scheduler, settings) in configs {
        for jobs in [1, 2, 4, 8] {
            runs.push(define(
                format!("{name}-{jobs}j"),
                scheduler,
                settings,
                read(jobs),
            ));
        }
    }
    // BFQ (5.12+) raises only default-priority queues: the readers one level lower, with
    // low_latency on (explain's per-process alternative to low_latency=0).
    for jobs in [2, 8] {
        runs.push(Run {
            ioprio: Some("be/5"),
            ..define(
                format!("bfq-ll1-be5-{jobs}j"),
                "bfq",
                &[("iosched/low_latency", "1")],
                read(jobs),
            )
        });
    }
    Scenario {
        name: "multi-reader",
        seed: "000_1a6e2d142fd5056c.txt",
        about: "1-8 sequential 4 KiB readers: aggregate throughput under bfq (low_latency 1 and 0), \
                mq-deadline and none",
        disk_size: GIB,
        runs,
    }
}

/// How many 512-byte O_DSYNC writes dd does (each is a data write plus a journal commit:
/// two seeks on this disk, ~20 ms).
pub const DSYNC_COUNT: u32 = 300;

/// Seed 001 (CFQ/BFQ idling kills ext4 dsync in a blkio cgroup, 2019).
pub fn dsync_journal() -> Scenario {
    let dd = || Workload::DsyncJournal { count: DSYNC_COUNT };
    Scenario {
        name: "dsync-journal",
        seed: "001_a6e8b75ed2a208fc.txt",
        about: "dd bs=512 oflag=dsync on ext4 from a blkio cgroup: does bfq idle for dd while \
                jbd2's commit waits (8 ms per write), as in 2019?",
        disk_size: GIB,
        runs: vec![
            define("bfq", "bfq", &[], dd()),
            define("mq-deadline", "mq-deadline", &[], dd()),
        ],
    }
}

/// Seed 002 (blk-mq "reduced latency is killing performance", 2016): 4 KiB sequential direct
/// writes. A bio merges only into a request still held back (plug, scheduler, software
/// queue); at iodepth 32 the loop device (128 tags) takes every request at once, at
/// iodepth 256 requests queue in the scheduler.
pub fn tiny_seq_writes() -> Scenario {
    let write = |depth: &str| {
        let iodepth = format!("--iodepth={depth}");
        fio(&[
            "--name=seqwrite",
            "--rw=write",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            &iodepth,
            "--size=256m",
            "--runtime=3",
            "--time_based",
        ])
    };
    let mut runs = Vec::new();
    for depth in ["32", "256"] {
        for nomerges in ["0", "2"] {
            runs.push(define(
                format!("dl-qd{depth}-nomerges{nomerges}"),
                "mq-deadline",
                &[("nomerges", nomerges)],
                write(depth),
            ));
        }
    }
    runs.push(define(
        "none-qd256-nomerges0",
        "none",
        &[("nomerges", "0")],
        write("256"),
    ));
    Scenario {
        name: "tiny-seq-writes",
        seed: "002_597bf521c4116c07.txt",
        about: "4 KiB sequential direct writes, iodepth 32 and 256, nomerges 0 vs 2: merge ratio, \
                requests dispatched, throughput",
        disk_size: GIB,
        runs,
    }
}

/// Seed 003 (CFQ slice_idle halves a single reader, 2008): one buffered `dd bs=64k`.
pub fn single_reader_idle() -> Scenario {
    let dd = || Workload::DdRead {
        bs: "64k",
        count: 2000,
    };
    Scenario {
        name: "single-reader-idle",
        seed: "003_4b60c5568c27f543.txt",
        about: "one sequential reader (dd bs=64k): bfq slice_idle 8 vs 0, and mq-deadline",
        disk_size: GIB,
        runs: vec![
            define("bfq-idle8", "bfq", &[("iosched/slice_idle", "8")], dd()),
            define("bfq-idle0", "bfq", &[("iosched/slice_idle", "0")], dd()),
            define("mq-deadline", "mq-deadline", &[], dd()),
        ],
    }
}

/// How many concurrent readers seed 004 ran.
pub const MANY_READERS: u32 = 32;

/// Seed 004 (CFQ slices vs latency with 32 readers, 2009): 32 synchronous 4 KiB readers,
/// random and sequential, each in its own 30 MiB region; worst and p99 Q2C per scheduler.
pub fn many_readers_latency() -> Scenario {
    let readers = |rw: &str| {
        let rw = format!("--rw={rw}");
        let numjobs = format!("--numjobs={MANY_READERS}");
        fio(&[
            "--name=readers",
            &rw,
            "--bs=4k",
            "--direct=1",
            "--ioengine=psync",
            &numjobs,
            "--size=30m",
            "--offset_increment=30m",
            "--runtime=4",
            "--time_based",
            "--group_reporting",
        ])
    };
    let mut runs = Vec::new();
    for rw in ["randread", "read"] {
        let pattern = if rw == "read" { "seq" } else { "rand" };
        for scheduler in ["bfq", "mq-deadline", "kyber", "none"] {
            runs.push(define(
                format!("{scheduler}-{pattern}"),
                scheduler,
                &[],
                readers(rw),
            ));
        }
    }
    Scenario {
        name: "many-readers-latency",
        seed: "004_7eaf80fc40ea299d.txt",
        about: "32 concurrent 4 KiB readers (random, then sequential): p99 and max Q2C per \
                scheduler",
        disk_size: GIB,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_under_a_scheduler_the_kernel_lacks_are_dropped_and_named() {
        let mut scenario = by_name("fast-randread").unwrap();
        let before = scenario.runs.len();
        let asked = std::cell::RefCell::new(Vec::new());
        let dropped = scenario.keep_runnable(|s| {
            asked.borrow_mut().push(s.to_owned());
            s != "bfq"
        });
        assert_eq!(dropped, ["bfq"]);
        assert_eq!(scenario.runs.len(), before - 1);
        assert!(scenario.runs.iter().all(|r| r.scheduler != "bfq"));
        // Each scheduler asked once, `none` never (every kernel has it).
        let mut asked = asked.into_inner();
        asked.sort();
        assert_eq!(asked, ["bfq", "kyber", "mq-deadline"]);
    }

    #[test]
    fn every_name_resolves_and_labels_are_unique() {
        for name in NAMES.into_iter().chain(FAST_NAMES) {
            let scenario = by_name(name).unwrap();
            assert_eq!(scenario.name, name);
            let mut labels: Vec<_> = scenario.runs.iter().map(|r| r.label.as_str()).collect();
            let n = labels.len();
            labels.sort_unstable();
            labels.dedup();
            assert_eq!(labels.len(), n, "{name}: duplicate run labels");
        }
        assert!(by_name("no-such").is_none());
    }
}
