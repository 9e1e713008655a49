//! `convert --to perfetto` read back by an independent reader of Perfetto's official schema:
//! tests/perfetto/decode.py parses the file with the descriptors the PyPI `perfetto`
//! package ships (`perfetto_trace_pb2`, no network; `cargo xtask setup` installs it), sorts
//! and nests each track's slices as the trace processor does, and prints each process's
//! requests. They must be the timeline's own request lives, one slice per completed request
//! of each process, from its Q to its C, to the nanosecond.
//!
//! The trace processor itself (trace_processor_shell) is not used: the Python package fetches
//! it from the network at run time, which CI has not got.
//!
//! Both tests run the built binary; the synthetic one needs no root, the recording one does.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use iosched_core::{
    driver::{self, Filter, TraceSink},
    event::{EventKind, Op},
    timeline::{LifeSink, RequestLife},
    trace_file,
};
use iosched_trace_tests::{
    Mount, ScratchLoop, binary, convert_to, dd, python_module_available, read_recording,
    real_kernel_available, record, report_json, run, scratch_dir,
};

fn decoder_available(test: &str) -> bool {
    python_module_available(
        test,
        "perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        "perfetto",
    )
}

fn decode_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("perfetto/decode.py")
}

fn decode(trace: &Path) -> serde_json::Value {
    let out = run(Command::new("python3").arg(decode_script()).arg(trace)).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn convert(input: &Path, output: &Path, extra: &[&str]) -> String {
    convert_to("perfetto", input, output, extra)
}

/// A request as a slice: (begin, end, name).
type Slice = (u64, u64, String);

/// The timeline's completed requests of each submitter pid, as the slices they must be.
#[derive(Default)]
struct Lives {
    by_pid: BTreeMap<u32, Vec<Slice>>,
    without_q: u64,
}

impl LifeSink for Lives {
    fn request_done(&mut self, rq: &RequestLife) {
        let Some(s) = rq.submitter else {
            return;
        };
        let name = match rq.op {
            Op::Read => "read",
            Op::Write | Op::WriteZeroes | Op::ZoneAppend => "write",
            Op::Flush => "flush",
            Op::Discard | Op::SecureErase => "discard",
            _ => "other",
        };
        let start = match rq.q {
            Some(q) => q,
            None => {
                self.without_q += 1;
                rq.i.or(rq.first_d).unwrap_or(rq.c)
            }
        };
        self.by_pid
            .entry(s.pid)
            .or_default()
            .push((start, rq.c, name.to_string()));
    }
}

impl TraceSink for Lives {}

fn lives(recording: &Path) -> Lives {
    let mut source = trace_file::open(recording).unwrap();
    let mut l = Lives::default();
    driver::drive(source.as_mut(), Filter::ALL, &mut l).unwrap();
    for v in l.by_pid.values_mut() {
        v.sort();
    }
    l
}

/// The decoded trace's requests per pid.
fn decoded_requests(d: &serde_json::Value) -> BTreeMap<u32, Vec<Slice>> {
    d["processes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(pid, p)| {
            let mut v: Vec<Slice> = p["requests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s[0].as_u64().unwrap(),
                        s[1].as_u64().unwrap(),
                        s[2].as_str().unwrap().to_string(),
                    )
                })
                .collect();
            v.sort();
            (pid.parse().unwrap(), v)
        })
        .filter(|(_, v): &(u32, Vec<Slice>)| !v.is_empty())
        .collect()
}

/// The decoded trace is valid by Perfetto's schema and its requests are the timeline's.
fn assert_same_requests(recording: &Path, d: &serde_json::Value) -> Lives {
    assert_eq!(d["errors"], serde_json::json!([]), "decode errors");
    // A request and its two children: never deeper.
    assert_eq!(d["max_depth"], 2);
    let want = lives(recording);
    let got = decoded_requests(d);
    let counts = |m: &BTreeMap<u32, Vec<Slice>>| -> BTreeMap<u32, usize> {
        m.iter().map(|(p, v)| (*p, v.len())).collect()
    };
    assert_eq!(counts(&got), counts(&want.by_pid), "slices per process");
    for (pid, slices) in &want.by_pid {
        assert_eq!(&got[pid], slices, "pid {pid}: slices differ from the lives");
    }
    // And `report`'s own counts: requests per process, idling-waste intervals.
    let report = report_json(recording, &[]).unwrap();
    let reported: BTreeMap<u32, usize> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["pid"].as_u64().unwrap() as u32,
                p["requests"].as_u64().unwrap() as usize,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(
        counts(&got),
        reported,
        "slices per process against report --json"
    );
    let idle: u64 = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["idle_with_pending_intervals"].as_u64().unwrap())
        .sum();
    let drawn_idle = d["slices_by_track_name"]["idling waste (idle with I/O pending)"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(
        drawn_idle, idle,
        "idling-waste intervals against report --json"
    );
    eprintln!("{idle} idling-waste intervals drawn, as report counts them");
    want
}

#[test]
fn synthetic_recording_reads_back_with_perfettos_schema() {
    if !decoder_available("synthetic_recording_reads_back_with_perfettos_schema") {
        return;
    }
    let dir = scratch_dir("perfetto-synth").unwrap();
    let rec = dir.path().join("synth.istrace");
    run(Command::new(binary())
        .args([
            "synth",
            "--events",
            "60000",
            "--processes",
            "6",
            "--depth",
            "16",
            "-o",
        ])
        .arg(&rec))
    .unwrap();
    let trace = dir.path().join("synth.pftrace");
    let stderr = convert(&rec, &trace, &[]);
    let d = decode(&trace);
    let want = assert_same_requests(&rec, &d);
    assert_eq!(want.by_pid.len(), 6);
    assert_eq!(want.without_q, 0);
    // 16 requests in flight over 6 processes: some process had several at once.
    let lanes = d["processes"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p["lanes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(lanes >= 2, "{lanes} lanes");
    let total: usize = want.by_pid.values().map(Vec::len).sum();
    assert!(
        stderr.contains(&format!("wrote {total} requests of 6 processes")),
        "{stderr}"
    );

    // --pid: only that process's requests, the device's tracks whole.
    let pid = *want.by_pid.keys().next().unwrap();
    let only = dir.path().join("one.pftrace");
    convert(&rec, &only, &["--pid", &pid.to_string()]);
    let d1 = decode(&only);
    let got = decoded_requests(&d1);
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![pid]);
    assert_eq!(got[&pid], want.by_pid[&pid]);
    assert_eq!(
        d1["slices_by_track_name"]["service slices"],
        d["slices_by_track_name"]["service slices"]
    );
}

/// A real recording of a dsync dd on ext4 on a loop device of its own, with wakeups: the
/// same requests, and one flow arrow per recorded wakeup (jbd2 waking dd).
#[test]
fn real_recording_with_wakeups_reads_back_with_perfettos_schema() {
    let test = "real_recording_with_wakeups_reads_back_with_perfettos_schema";
    if !real_kernel_available(test) || !decoder_available(test) {
        return;
    }
    let disk = ScratchLoop::new("perfetto", 64, "mq-deadline").unwrap();
    let mount = Mount::ext4(&disk, "perfetto-mnt").unwrap();
    let out = scratch_dir("perfetto-out").unwrap();
    let rec = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &rec, &["--wakeups"]).unwrap();
    let target = mount.point.join("f");
    let dd_pid = dd(&[
        "if=/dev/zero",
        &format!("of={}", target.display()),
        "bs=4k",
        "count=100",
        "oflag=dsync",
    ])
    .unwrap();
    recorder.stop().unwrap();
    drop(mount);

    let trace = out.path().join("rec.pftrace");
    convert(&rec, &trace, &[]);
    let d = decode(&trace);
    let want = assert_same_requests(&rec, &d);
    // dd's 100 writes at least (ext4 may add its own), each a slice.
    assert!(
        want.by_pid[&dd_pid].len() >= 100,
        "{:?}",
        want.by_pid.keys()
    );
    let wakeups = read_recording(&rec)
        .unwrap()
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Wakeup)
        .count();
    assert!(wakeups >= 50, "{wakeups} wakeups recorded");
    assert_eq!(d["flows"], wakeups);
    let jbd2 = d["processes"]
        .as_object()
        .unwrap()
        .values()
        .any(|p| p["name"].as_str().unwrap().starts_with("jbd2/"));
    assert!(jbd2, "no jbd2 process track");
    eprintln!(
        "{} requests of {} processes, {wakeups} wakeups drawn as flows",
        want.by_pid.values().map(Vec::len).sum::<usize>(),
        want.by_pid.len()
    );
}
