//! `cargo xtask demo`: the most striking scheduler effect this kernel shows on the emulated
//! rotational disk, recorded and reported by iosched-trace, two runs side by side.
//!
//! On 6.18 the 2019 dsync/jbd2 pathology (seed 001) no longer happens, and bfq's
//! low_latency effect on two readers (seed 000) comes and goes from run to run
//! (docs/SCENARIOS.md). What is large and stable is seed 004's: 32 random readers, the same
//! throughput under bfq and mq-deadline, and bfq's worst latency about ten times
//! mq-deadline's. The two runs are the `many-readers-latency` scenario's, so the demo,
//! `cargo xtask scenario many-readers-latency` and its test measure the same thing.

use std::{fmt::Write as _, path::PathBuf};

use anyhow::Context as _;
use clap::Args;
use iosched_testbed::{
    loop_device::kernel_has_scheduler,
    scenario::{self, RunOptions, RunOutcome, Tools, summary::ms},
};
use serde_json::Value;

use crate::{BinArgs, cmd, disk, scratch};

/// The runs of the `many-readers-latency` scenario the demo shows, left and right; the
/// left one's scheduler is `RUNS[0]`'s prefix.
const RUNS: [&str; 2] = ["bfq-rand", "mq-deadline-rand"];
/// The left run on a kernel built without bfq (the project's own machines' 6.18): kyber, the
/// other scheduler with a policy of its own, so the demo still shows two schedulers at work.
const RUNS_WITHOUT_BFQ: [&str; 2] = ["kyber-rand", "mq-deadline-rand"];
const LEFT: usize = 34;
const COLUMN: usize = 36;

#[derive(Args)]
pub struct DemoArgs {
    /// Keep both recordings and reports (text, JSON, HTML) in DIR/many-readers-latency/
    /// (default: target/demo/ of this workspace).
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    #[command(flatten)]
    bin: BinArgs,
}

pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    cmd::require_root(
        "demo",
        "it mounts FUSE, attaches a loop device and loads eBPF programs",
    )?;
    scratch::catch_interrupts()?;
    let tools = Tools {
        trace_bin: args.bin.resolve()?,
        daemon_bin: disk::build_daemon()?,
    };
    scratch::check_interrupted()?;
    let has_bfq = kernel_has_scheduler("bfq");
    let runs = if has_bfq { RUNS } else { RUNS_WITHOUT_BFQ };
    let mut demo = scenario::many_readers_latency();
    demo.runs.retain(|r| runs.contains(&r.label.as_str()));
    demo.runs
        .sort_by_key(|r| runs.iter().position(|l| *l == r.label));
    if !has_bfq {
        eprintln!(
            "demo: this kernel has no bfq (not built in, no module): kyber stands in for it \
             (bfq's effect shown below needs a kernel with bfq)"
        );
    }
    eprintln!(
        "demo: 32 readers of random 4 KiB blocks (fio psync, direct, 4 s) on an emulated 7200 \
         rpm disk, under {} and under mq-deadline; each run recorded by iosched-trace",
        heading(runs[0])
    );
    let keep = args
        .keep
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/demo"));
    std::fs::create_dir_all(&keep).with_context(|| format!("creating {}", keep.display()))?;
    // The paths it prints are a person's to open: without `..` in them.
    let keep = keep.canonicalize().unwrap_or(keep);
    let outcomes = scenario::run(
        &demo,
        &tools,
        &RunOptions {
            keep: Some(keep.clone()),
            interrupted: &scratch::interrupted,
            verbose: false,
            sched_log: false,
            bed: Default::default(),
        },
    )
    .context("demo runs")?;
    print!("{}", side_by_side(&outcomes, has_bfq));
    eprintln!(
        "demo: recordings and reports (text, JSON, HTML) kept in {}",
        keep.join(demo.name).display()
    );
    for o in &outcomes {
        if let Some(html) = &o.html {
            println!("{}: HTML report {}", o.run.label, html.display());
        }
    }
    Ok(())
}

/// A run's column heading: its scheduler (the label without the pattern).
fn heading(label: &str) -> &str {
    label.strip_suffix("-rand").unwrap_or(label)
}

/// The two reports' key numbers in two columns, then what they show (`has_bfq`: the left
/// run is bfq's, else kyber's).
fn side_by_side(outcomes: &[RunOutcome], has_bfq: bool) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&RunOutcome) -> String| {
        rows.push((name.to_owned(), outcomes.iter().map(f).collect()));
    };
    let dev = |o: &RunOutcome| o.report["devices"][0].clone();
    let ns = |v: &Value| v.as_u64().map_or_else(|| "?".to_owned(), ms);
    row("throughput (device)", &|o| {
        format!("{:.2} MB/s", o.summary.mb_per_s)
    });
    row("requests", &|o| {
        format!(
            "{} ({:.0} IOPS)",
            o.summary.requests_dispatched, o.summary.iops
        )
    });
    row("device busy", &|o| format!("{:.0}%", o.summary.util_pct));
    row("idle while I/O waited", &|o| {
        format!(
            "{} ({:.1}%, {} times)",
            ms(o.summary.idle_with_pending_ns),
            o.summary.idle_with_pending_pct,
            dev(o)["idle_with_pending_intervals"]
        )
    });
    row("Q2C p50 / p99 / max", &|o| {
        let q2c = &dev(o)["latency"]["q2c"];
        format!(
            "{} / {} / {}",
            ns(&q2c["p50_ns"]),
            ns(&q2c["p99_ns"]),
            ns(&q2c["max_ns"])
        )
    });
    row("readers", &|o| o.summary.processes.len().to_string());
    row("fastest / slowest reader", &|o| {
        let rates = o.summary.processes.iter().map(|p| p.mb_per_s * 1e3);
        let (lo, hi) = rates.fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(r), hi.max(r)));
        format!("{hi:.0} / {lo:.0} kB/s")
    });
    row("worst Q2C of one reader", &|o| {
        o.summary
            .processes
            .iter()
            .max_by_key(|p| p.q2c_max_ns)
            .map_or(String::new(), |p| {
                format!("{} ({} {})", ms(p.q2c_max_ns), p.comm, p.pid)
            })
    });
    for i in 0..2 {
        let name = if i == 0 { "who waited for whom" } else { "" };
        row(name, &|o| {
            o.summary.idle_pairs.get(i).map_or(
                if i == 0 {
                    "nobody".to_owned()
                } else {
                    String::new()
                },
                |p| format!("{}: {} idle", short(&p.waiting), ms(p.total_ns)),
            )
        });
        row("", &|o| {
            o.summary
                .idle_pairs
                .get(i)
                .map_or(String::new(), |p| format!("  after {}", short(&p.after)))
        });
    }

    let mut out = String::new();
    let _ = write!(out, "\n{:<LEFT$}", "");
    for o in outcomes {
        let _ = write!(out, "{:<COLUMN$}", heading(&o.run.label));
    }
    out.push('\n');
    for (name, cells) in rows {
        if cells.iter().all(String::is_empty) {
            continue;
        }
        let _ = write!(out, "{name:<LEFT$}");
        for cell in cells {
            let _ = write!(out, "{cell:<COLUMN$}");
        }
        out.push('\n');
    }
    out.push_str(
        "\nThe disk does ~125 random reads a second whatever the scheduler, so throughput is \
         the same. mq-deadline serves the readers' requests about in arrival order: a request \
         waits about one round of the 32 readers (32 x ~8 ms). ",
    );
    out.push_str(if has_bfq {
        "bfq serves one reader at a time (per-process queues, budgets, idling, weight \
         raising): in most runs a reader waits many rounds, and the worst Q2C is several \
         times longer; in some runs bfq is as even as mq-deadline (docs/SCENARIOS.md). More: \
         `cargo xtask scenario many-readers-latency`.\n"
    } else {
        "kyber throttles by latency targets per domain, not by process: on one rotational \
         disk with a single domain of reads it serves them about as evenly as mq-deadline. \
         This kernel has no bfq, whose one-reader-at-a-time service makes the worst Q2C \
         several times longer on a kernel that has it (docs/SCENARIOS.md).\n"
    });
    out
}

/// "fio (1234)" -> "fio 1234", to fit a column.
fn short(who: &str) -> String {
    who.replace(" (", " ").replace(')', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_runs_exist_in_the_scenario() {
        let labels: Vec<String> = scenario::many_readers_latency()
            .runs
            .into_iter()
            .map(|r| r.label)
            .collect();
        for run in RUNS.into_iter().chain(RUNS_WITHOUT_BFQ) {
            assert!(labels.iter().any(|l| l == run), "{run} not in the scenario");
        }
    }

    #[test]
    fn short_names() {
        assert_eq!(short("fio (1234)"), "fio 1234");
    }
}
