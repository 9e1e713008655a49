//! Real kernel: `record --sched-log` captures BFQ's own decision log through the ftrace blk
//! tracer and leaves tracefs as it found it. Run as root, serially (`cargo xtask test`).

use std::{fs, path::PathBuf, process::Command};

use iosched_trace::{
    model::bfqlog::{self, BfqLogged},
    record::RecordingReader,
};
use iosched_trace_tests::{LoopDevice, Recorder, ScratchDir, binary, dd, real_kernel_available};

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

#[test]
fn sched_log_keeps_bfqs_decisions_and_restores_tracefs() {
    if !real_kernel_available("sched_log_keeps_bfqs_decisions_and_restores_tracefs") {
        return;
    }
    let disk = LoopDevice::new("schedlog", 64, "bfq").unwrap();
    let before = tracefs_state(&disk.name);
    let out = ScratchDir::new("schedlog-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = Recorder::start(&[&disk.name], &file, &["--sched-log"]).unwrap();
    let pid = dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.path.display()),
        "bs=4096",
        "count=200",
        "oflag=direct",
    ])
    .unwrap();
    // Ctrl-C: the path a user takes.
    recorder.stop().unwrap();
    assert_eq!(tracefs_state(&disk.name), before, "tracefs not restored");

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
