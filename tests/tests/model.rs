//! Real kernel: `record --sched-log` captures BFQ's own decision log through the ftrace blk
//! tracer and leaves tracefs as it found it; and the model against seed scenarios recorded
//! on the emulated disk (only effects large enough to be stable on a noisy shared machine).
//! Run as root, serially (`cargo xtask test`).

use std::{fs, path::PathBuf, process::Command};

use iosched_core::record::RecordingReader;
use iosched_model::bfqlog::{self, BfqLogged};
use iosched_testbed::scenario::{
    self, RunOptions, Tools,
    validate::{self, Replayed},
};
use iosched_trace_tests::{
    ScratchLoop, TempDir, binary, dd, hdd::daemon_binary, real_kernel_available, record,
    scheduler_available, scratch_dir,
};
use serde_json::Value;

fn tracefs_state(disk: &str) -> Vec<(PathBuf, String)> {
    let t = PathBuf::from("/sys/kernel/tracing");
    let b = PathBuf::from(format!("/sys/block/{disk}/trace"));
    [
        t.join("current_tracer"),
        t.join("trace_clock"),
        t.join("buffer_size_kb"),
        t.join("tracing_on"),
        b.join("enable"),
        b.join("act_mask"),
    ]
    .into_iter()
    .map(|p| {
        let v = fs::read_to_string(&p).unwrap_or_default();
        (p, v)
    })
    .collect()
}

/// Every setting as it was; `buffer_size_kb` as the size it stood for. Before tracing is
/// first used after boot (Debian's 6.1) it reads `7 (expanded: 1408)`: the buffer is minimal
/// and takes 1408 KiB at first use, and that is what the recorder writes back (the boot-time
/// buffer cannot be asked for again). The kernel rounds a size up to whole buffer pages
/// (4080 bytes of data each), so 1408 then reads 1410, as it does after a first use that
/// expanded it on its own: equal within one page. The bug this guards against left 16384.
fn assert_tracefs_restored(before: &[(PathBuf, String)], after: &[(PathBuf, String)]) {
    assert_eq!(before.len(), after.len());
    for ((path, was), (_, now)) in before.iter().zip(after) {
        if path.ends_with("buffer_size_kb") {
            let kib = |text: &str| -> u64 {
                iosched_trace::schedlog::current_value(text)
                    .parse()
                    .unwrap_or_else(|_| panic!("{}: {text:?}", path.display()))
            };
            let (was_kib, now_kib) = (kib(was), kib(now));
            assert!(
                now_kib.abs_diff(was_kib) < 4,
                "{} not restored: was {was:?}, now {now:?}",
                path.display()
            );
        } else {
            assert_eq!(now, was, "{} not restored", path.display());
        }
    }
}

#[test]
fn sched_log_keeps_bfqs_decisions_and_restores_tracefs() {
    if !real_kernel_available("sched_log_keeps_bfqs_decisions_and_restores_tracefs")
        || !scheduler_available("sched_log_keeps_bfqs_decisions_and_restores_tracefs", "bfq")
    {
        return;
    }
    let disk = ScratchLoop::new("schedlog", 64, "bfq").unwrap();
    let before = tracefs_state(disk.name());
    let out = scratch_dir("schedlog-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &["--sched-log"]).unwrap();
    let pid = dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        "count=200",
        "oflag=direct",
    ])
    .unwrap();
    // Ctrl-C: the path a user takes.
    recorder.stop().unwrap();
    assert_tracefs_restored(&before, &tracefs_state(disk.name()));

    let mut reader = RecordingReader::open(&file).unwrap();
    while let Some(ev) = reader.next_event() {
        ev.unwrap();
    }
    let notes = reader.notes();
    let parsed: Vec<BfqLogged> = notes.iter().map(|n| bfqlog::parse(&n.text)).collect();
    let ours = |p: u32| p == pid || p == bfqlog::SHARED;
    let switches = parsed
        .iter()
        .filter(|d| matches!(d, BfqLogged::InService { pid, .. } if ours(*pid)))
        .count();
    assert!(
        switches >= 1,
        "no set_in_service_queue for dd ({pid}) in {} notes",
        notes.len()
    );
    // Message times are on the events' clock (trace_clock mono while recording).
    let first_event = {
        let mut r = RecordingReader::open(&file).unwrap();
        r.next_event().unwrap().unwrap().ts_ns
    };
    let n = &notes[0];
    assert!(
        n.ts_ns.abs_diff(first_event) < 60_000_000_000,
        "note at {} ns, events from {first_event} ns: not the same clock",
        n.ts_ns
    );

    // The model's replay compares itself with this log.
    let text = iosched_trace_tests::run(
        Command::new(binary())
            .args(["replay", "--sched", "bfq"])
            .arg(&file),
    )
    .unwrap();
    assert!(text.contains("against BFQ's own log"), "{text}");
}

/// Records the runs `labels` of scenario `name` (validation plan: its runs and the added
/// ones) on a fresh emulated disk; returns the directory that holds `LABEL.istrace`.
fn record_runs(name: &str, labels: &[&str]) -> (TempDir, PathBuf) {
    record_runs_with(name, labels, false)
}

/// [`record_runs`], with BFQ's own decision log in the BFQ runs' recordings when
/// `sched_log`.
fn record_runs_with(name: &str, labels: &[&str], sched_log: bool) -> (TempDir, PathBuf) {
    let (mut planned, _) = validate::plan(&scenario::by_name(name).unwrap());
    planned.runs.retain(|r| labels.contains(&r.label.as_str()));
    assert_eq!(
        planned.runs.len(),
        labels.len(),
        "{name}: unknown label in {labels:?}"
    );
    let keep = scratch_dir(&format!("model-{name}")).unwrap();
    let tools = Tools {
        trace_bin: binary(),
        daemon_bin: daemon_binary(),
    };
    let options = RunOptions {
        keep: Some(keep.path().to_owned()),
        sched_log,
        ..RunOptions::default()
    };
    scenario::run(&planned, &tools, &options).unwrap_or_else(|e| panic!("scenario {name}: {e}"));
    let dir = keep.path().join(name);
    (keep, dir)
}

fn replay_json(file: &std::path::Path, spec: &str, extra: &[&str]) -> Value {
    let text = iosched_trace_tests::run(
        Command::new(binary())
            .arg("replay")
            .arg(file)
            .args(["--sched", spec, "--json"])
            .args(extra),
    )
    .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn replayed(file: &std::path::Path, spec: &str) -> Replayed {
    validate::replay(&binary(), file, spec).unwrap()
}

/// Seed 002: 4 KiB sequential writes at iodepth 256 under mq-deadline merge about two bios
/// per request on the test bed. Replaying that recording, the model merges as much (within
/// 25%) and as fast; with nomerges=2 it makes one request per bio, and predicts the large
/// loss the real nomerges=2 run shows (> 1.3 x, as tests/scenarios.rs asserts on the kernel).
#[test]
fn tiny_seq_writes_model_merges_as_recorded_and_not_with_nomerges_2() {
    if !real_kernel_available("tiny_seq_writes_model_merges_as_recorded_and_not_with_nomerges_2") {
        return;
    }
    let (_keep, dir) = record_runs("tiny-seq-writes", &["dl-qd256-nomerges0"]);
    let file = dir.join("dl-qd256-nomerges0.istrace");
    let merged = replayed(&file, "mq-deadline:nomerges=0");
    let split = replayed(&file, "mq-deadline:nomerges=2");
    eprintln!(
        "recorded {:?}\nmerges {:?}\nnomerges=2 {:?}",
        merged.recorded, merged.predicted, split.predicted
    );
    assert!(
        merged.recorded.merge_ratio > 1.5,
        "the kernel did not merge: {:?}",
        merged.recorded
    );
    let ratio_err =
        validate::rel_err_pct(merged.predicted.merge_ratio, merged.recorded.merge_ratio);
    assert!(
        ratio_err.abs() <= 25.0,
        "merge ratio off by {ratio_err:.0}%"
    );
    let thr_err = validate::rel_err_pct(merged.predicted.mb_per_s, merged.recorded.mb_per_s);
    assert!(thr_err.abs() <= 25.0, "throughput off by {thr_err:.0}%");
    assert!(split.predicted.merge_ratio < 1.001, "{:?}", split.predicted);
    assert!(
        merged.predicted.mb_per_s > 1.3 * split.predicted.mb_per_s,
        "merges gain too little in the model: {:.1} vs {:.1} MB/s",
        merged.predicted.mb_per_s,
        split.predicted.mb_per_s
    );
}

/// Seed 001 on this kernel: dd's O_DSYNC writes wait for jbd2's commits; 6.18's BFQ does
/// not collapse (waker injection). Replayed with BFQ's pre-5.3 rules (no waker detection)
/// and dd in a cgroup of its own (the v1 blkio group the recording cannot see), each write
/// costs one idle slice more: the timer runs out while jbd2's commit waits. Replayed with
/// the recorded rules, the model matches the recording; `explain` says nothing is wrong and
/// why.
#[test]
fn dsync_journal_pre_5_3_bfq_costs_an_idle_slice_per_write() {
    if !real_kernel_available("dsync_journal_pre_5_3_bfq_costs_an_idle_slice_per_write")
        || !scheduler_available(
            "dsync_journal_pre_5_3_bfq_costs_an_idle_slice_per_write",
            "bfq",
        )
    {
        return;
    }
    let (_keep, dir) = record_runs("dsync-journal", &["bfq"]);
    let file = dir.join("bfq.istrace");
    let writes = f64::from(scenario::DSYNC_COUNT);
    let now = replay_json(&file, "bfq", &[]);
    let old = replay_json(&file, "bfq:kernel=5.2", &["--set", "own_group=dd"]);
    let dl = replay_json(&file, "mq-deadline", &[]);
    let per_write =
        |v: &Value| v["runs"][0]["summary"]["duration_s"].as_f64().unwrap() / writes * 1e3;
    let recorded = now["recorded"]["duration_s"].as_f64().unwrap() / writes * 1e3;
    let (now_ms, old_ms, dl_ms) = (per_write(&now), per_write(&old), per_write(&dl));
    let counts = &old["runs"][0]["decision_counts"];
    let timer_ms = counts["idle_ms_by_outcome"]["timer_expired"]
        .as_f64()
        .unwrap_or(0.0);
    let too_idle = counts["expirations"]["too_idle"].as_f64().unwrap_or(0.0);
    eprintln!(
        "per write: recorded {recorded:.1} ms, model 6.18 {now_ms:.1}, pre-5.3 {old_ms:.1}, \
         mq-deadline {dl_ms:.1}; pre-5.3 idle timer ran out {too_idle} times, {timer_ms:.0} ms"
    );
    // As recorded: near the measured per-write time (the device fit varies from one
    // recording to the next by more than the self-consistency table's 10%: only gross
    // errors fail here), and no worse than mq-deadline.
    assert!(
        (now_ms / recorded - 1.0).abs() <= 0.5,
        "{now_ms:.1} vs {recorded:.1} ms"
    );
    assert!(now_ms <= 1.1 * dl_ms);
    // Pre-5.3: many writes end with the idle timer; one slice each (slice_idle 8 ms, or
    // 20 ms while dd's queue is weight-raised, since 5.2): on average in between. How many
    // varies with the recording (120 of 300 in one clean-clone CI run, more than 150 in
    // most): the cost per write asserted below is the effect.
    assert!(
        too_idle >= 0.3 * writes,
        "{too_idle} timer expirations for {writes} writes"
    );
    let slice = timer_ms / too_idle;
    assert!((7.5..=20.5).contains(&slice), "idle slice {slice:.1} ms");
    let extra = old_ms - now_ms;
    assert!(
        (0.75 * slice * too_idle / writes..=1.25 * slice).contains(&extra),
        "pre-5.3 costs {extra:.1} ms more per write; slice {slice:.1} ms"
    );

    let text = iosched_trace_tests::run(
        Command::new(binary())
            .args(["explain", "--json"])
            .arg(&file),
    )
    .unwrap();
    let ex: Value = serde_json::from_str(&text).unwrap();
    let causes: Vec<&str> = ex["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["cause"].as_str())
        .collect();
    assert!(causes.contains(&"waker_handled"), "{text}");
    assert!(!causes.contains(&"idling_on_dependency"), "{text}");
    assert!(
        ex["verdict"]
            .as_str()
            .unwrap()
            .starts_with("nothing is wrong"),
        "{text}"
    );
}

/// The BFQ model's decisions against BFQ's own: one sequential 4 KiB reader (seed 000's
/// multi-reader, 1 job, low_latency on) recorded with `--sched-log`, the model driven by
/// the recorded requests and BFQ's logged state (`decision_check`). Its queue is weight
/// raised, so each slot ends when its small budget is used up, about a hundred times in
/// 3 s: the model must place them as BFQ did. Seen at 99.2-99.4% in 5 fresh runs here;
/// the bar is 90%.
#[test]
fn bfq_model_decides_as_bfqs_log_says_for_a_single_reader() {
    if !real_kernel_available("bfq_model_decides_as_bfqs_log_says_for_a_single_reader")
        || !scheduler_available(
            "bfq_model_decides_as_bfqs_log_says_for_a_single_reader",
            "bfq",
        )
    {
        return;
    }
    let (_keep, dir) = record_runs_with("multi-reader", &["bfq-ll1-1j"], true);
    let replay = replay_json(&dir.join("bfq-ll1-1j.istrace"), "bfq", &[]);
    let check = &replay["runs"][0]["decision_check"];
    let exp = &check["expirations"];
    let log_total: u64 = exp["log_expirations"]
        .as_object()
        .unwrap_or_else(|| panic!("no decision check: {check}"))
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let agreement = exp["agreement_pct"].as_f64().unwrap();
    eprintln!("trace-driven agreement {agreement:.1}% over {log_total} logged expirations");
    // A check of a handful of decisions says little.
    assert!(log_total >= 20, "{exp}");
    assert!(agreement >= 90.0, "{check}");
}

/// BFQ's queue merging against the model's: two sequential readers created together
/// (multi-reader, 2 jobs, low_latency on) recorded with `--sched-log`. Their queues are
/// raised, so idling does not boost throughput and BFQ merges them stably at the first
/// request >= 600 ms after their creation (`bfqSHARED-` from then on). The model must merge
/// the same process and agree with BFQ's expirations before and after; without merging it
/// agreed on ~20% (it kept preempting between the readers). Seen at 97-98% on three
/// recordings here; the bar is 90%.
#[test]
fn bfq_model_merges_the_queues_bfq_merges_for_two_readers() {
    if !real_kernel_available("bfq_model_merges_the_queues_bfq_merges_for_two_readers")
        || !scheduler_available(
            "bfq_model_merges_the_queues_bfq_merges_for_two_readers",
            "bfq",
        )
    {
        return;
    }
    let (_keep, dir) = record_runs_with("multi-reader", &["bfq-ll1-2j"], true);
    let replay = replay_json(&dir.join("bfq-ll1-2j.istrace"), "bfq", &[]);
    let check = &replay["runs"][0]["decision_check"];
    let exp = &check["expirations"];
    assert_eq!(
        exp["log_has_shared_queues"], true,
        "BFQ merged no queue: {check}"
    );
    assert_eq!(check["merged_logged"], 1, "{check}");
    assert_eq!(check["merged_matched"], 1, "{check}");
    let agreement = exp["agreement_pct"].as_f64().unwrap();
    eprintln!("trace-driven agreement {agreement:.1}% with merged queues");
    assert!(agreement >= 90.0, "{check}");
}
