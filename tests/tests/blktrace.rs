//! blktrace interoperability on the real kernel: a known workload recorded by our recorder,
//! converted to blktrace files, then read by blktrace's own tools (blkparse, btt) as
//! independent oracles, and read back by us from blkparse's merged dump.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
    process::Command,
};

use iosched_core::{
    blktrace::BlktraceSource,
    event::{Event, EventKind},
    source::TraceSource,
};
use iosched_trace_tests::{
    ScratchLoop, binary, dd, read_recording, real_kernel_available, record, report_json, run,
    scratch_dir,
};

/// Our events by blkparse action letter (kinds blktrace has an action for).
fn our_action_counts(events: &[Event]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for ev in events {
        if iosched_core::blktrace::map::kind_action(ev).is_some() {
            *counts
                .entry(ev.kind.action(ev.error == 1).to_string())
                .or_default() += 1;
        }
    }
    counts
}

/// blkparse's default output, counted per action letter (event lines only).
fn blkparse_action_counts(text: &str, dev: (u32, u32)) -> BTreeMap<String, u64> {
    let prefix = format!("{},{}", dev.0, dev.1);
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "7,0  1  12  0.000252700  4242  G  R 100000 + 128 [dd]"
        if fields.len() >= 6 && fields[0] == prefix && fields[4].parse::<u32>().is_ok() {
            if fields[5] == "m" {
                continue;
            }
            *counts.entry(fields[5].to_string()).or_default() += 1;
        }
    }
    counts
}

/// btt's AVG column of its "All Devices" table, by stage name.
fn btt_averages(text: &str) -> HashMap<String, f64> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() == 5
            && fields[0].len() == 3
            && fields[0].as_bytes()[1] == b'2'
            && let Ok(avg) = fields[2].parse::<f64>()
        {
            out.entry(fields[0].to_string()).or_insert(avg);
        }
    }
    out
}

/// btt's merge ratio line for `dev`: (#Q, #D, ratio).
fn btt_merge(text: &str, dev: (u32, u32)) -> Option<(u64, u64, f64)> {
    let key = format!("( {:>2}, {:>2})", dev.0, dev.1);
    let line = text
        .lines()
        .skip_while(|l| !l.contains("Device Merge Information"))
        .find(|l| l.trim_start().starts_with(&key))?;
    let rest: Vec<&str> = line.split('|').nth(1)?.split_whitespace().collect();
    Some((
        rest[0].parse().ok()?,
        rest[1].parse().ok()?,
        rest[2].parse().ok()?,
    ))
}

/// btt's stages from our own events, paired by exact identities: per bio (Q) for Q2C and
/// D2C, per request for I2D; only I/O that was issued and completed counts, as in btt.
/// Returns (q2c, d2c, i2d) averages in seconds and (#Q, #D).
fn our_stages(events: &[Event]) -> ((f64, f64, f64), (u64, u64)) {
    #[derive(Default)]
    struct Rq {
        insert: Option<u64>,
        issue: Option<u64>,
        queued: Vec<u64>,
    }
    let mut queued_bio: HashMap<u64, u64> = HashMap::new();
    let mut rqs: HashMap<u64, Rq> = HashMap::new();
    let (mut q2c, mut d2c, mut i2d) = (Vec::new(), Vec::new(), Vec::new());
    let mut issues = 0u64;
    for ev in events {
        match ev.kind {
            EventKind::Queue => {
                queued_bio.insert(ev.bio, ev.ts_ns);
            }
            EventKind::Insert => rqs.entry(ev.rq).or_default().insert = Some(ev.ts_ns),
            EventKind::Issue | EventKind::BioInRq => {
                let rq = rqs.entry(ev.rq).or_default();
                if ev.kind == EventKind::Issue {
                    rq.issue = Some(ev.ts_ns);
                    // btt's #D leaves out zero-length requests (flushes).
                    if ev.bytes > 0 {
                        issues += 1;
                    }
                }
                if let Some(q) = queued_bio.remove(&ev.bio) {
                    rq.queued.push(q);
                }
            }
            EventKind::Complete => {
                let Some(rq) = rqs.remove(&ev.rq) else {
                    continue;
                };
                let Some(d) = rq.issue else { continue };
                if let Some(i) = rq.insert {
                    i2d.push(d - i);
                }
                for q in rq.queued {
                    q2c.push(ev.ts_ns - q);
                    d2c.push(ev.ts_ns - d);
                }
            }
            _ => {}
        }
    }
    let avg = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64 / 1e9;
    (
        (avg(&q2c), avg(&d2c), avg(&i2d)),
        (q2c.len() as u64, issues),
    )
}

fn within(ours: f64, theirs: f64, rel: f64) -> bool {
    (ours - theirs).abs() <= rel * theirs.abs().max(1e-12)
}

fn read_source(path: &Path) -> (Vec<Event>, Vec<String>) {
    let mut src = BlktraceSource::open(path).unwrap();
    let mut events = Vec::new();
    while let Some(ev) = src.next_event() {
        events.push(ev.unwrap());
    }
    (events, src.warnings())
}

#[test]
fn blkparse_and_btt_agree_with_our_recording() {
    if !real_kernel_available("blkparse_and_btt_agree_with_our_recording") {
        return;
    }
    let disk = ScratchLoop::new("blktrace", 64, "mq-deadline").unwrap();
    let dev = disk.dev_numbers().unwrap();
    let out = scratch_dir("blktrace-out").unwrap();
    let rec_file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &rec_file, &[]).unwrap();
    let of = format!("of={}", disk.dev().display());
    let iff = format!("if={}", disk.dev().display());
    // Direct writes (one request each), buffered writes flushed at the end (merges), direct
    // reads.
    dd(&["if=/dev/zero", &of, "bs=4096", "count=200", "oflag=direct"]).unwrap();
    dd(&[
        "if=/dev/zero",
        &of,
        "bs=4096",
        "count=300",
        "seek=1000",
        "conv=fsync",
    ])
    .unwrap();
    dd(&[&iff, "of=/dev/null", "bs=4096", "count=100", "iflag=direct"]).unwrap();
    recorder.stop().unwrap();
    let rec = read_recording(&rec_file).unwrap();
    assert_eq!(rec.lost, 0);

    let dir = out.path().join("bt");
    let stderr = Command::new(binary())
        .arg("convert")
        .arg(&rec_file)
        .args(["--to", "blktrace", "-o"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(stderr.status.success(), "{stderr:?}");
    let said = String::from_utf8_lossy(&stderr.stderr);
    assert!(said.contains("blktrace files cannot hold"), "{said}");

    // blkparse: every action counted as we count it.
    let merged = out.path().join("merged.bin");
    let text = run(Command::new("blkparse")
        .arg("-i")
        .arg(disk.name())
        .arg("-D")
        .arg(&dir)
        .arg("-d")
        .arg(&merged))
    .unwrap();
    let ours = our_action_counts(&rec.events);
    let theirs = blkparse_action_counts(&text, dev);
    assert_eq!(ours, theirs, "per-action counts, ours vs blkparse");
    for action in ["Q", "G", "I", "D", "C", "M"] {
        assert!(
            ours.get(action).copied().unwrap_or(0) > 0,
            "no {action}: {ours:?}"
        );
    }
    let total: u64 = ours.values().sum();
    assert!(
        text.contains(&format!("Events ({}): {} entries", disk.name(), total)),
        "blkparse's own total differs"
    );

    // btt on blkparse's merged dump: stage averages and merge counts.
    // btt writes per-device .dat files into its working directory: keep them in scratch.
    let btt = run(Command::new("btt")
        .current_dir(out.path())
        .arg("-i")
        .arg(&merged))
    .unwrap();
    let avgs = btt_averages(&btt);
    let ((q2c, d2c, i2d), (nq, nd)) = our_stages(&rec.events);
    for (stage, ours) in [("Q2C", q2c), ("D2C", d2c), ("I2D", i2d)] {
        let theirs = avgs
            .get(stage)
            .unwrap_or_else(|| panic!("btt printed no {stage}:\n{btt}"));
        eprintln!("{stage}: ours {ours:.9} s, btt {theirs:.9} s");
        assert!(
            within(ours, *theirs, 0.005),
            "{stage}: ours {ours:.9} s vs btt {theirs:.9} s"
        );
    }
    // `report` on the recording (exact identities) and on the blktrace files (paired by
    // sector) gives btt's numbers.
    for (input, paired) in [(rec_file.clone(), false), (dir.join(disk.name()), true)] {
        let report = report_json(&input, &[]).unwrap();
        assert_eq!(report["trace"]["paired_by_sector"], paired);
        let device = &report["devices"][0];
        for stage in ["Q2C", "D2C", "I2D"] {
            let ours = device["latency"][stage.to_lowercase()]["mean_ns"]
                .as_f64()
                .unwrap()
                / 1e9;
            let theirs = avgs[stage];
            eprintln!("report {stage} (paired {paired}): {ours:.9} s, btt {theirs:.9} s");
            assert!(
                within(ours, theirs, 0.005),
                "report {stage}: {ours:.9} s vs btt {theirs:.9} s"
            );
        }
        // btt prints its ratio rounded; its #Q and #D are exact.
        let (bq, bd, _) = btt_merge(&btt, dev).expect("btt merge line");
        let ours = device["merge_ratio"].as_f64().unwrap();
        let theirs = bq as f64 / bd as f64;
        assert!(
            within(ours, theirs, 0.005),
            "merge ratio {ours} vs btt {bq}/{bd}"
        );
    }
    let (bq, bd, ratio) = btt_merge(&btt, dev).expect("btt merge line");
    assert_eq!((nq, nd), (bq, bd), "#Q/#D, ours vs btt");
    assert!(
        within(nq as f64 / nd as f64, ratio, 0.05),
        "merge ratio {ratio}"
    );

    // fio replays the merged dump: one I/O per queued bio with data.
    let fio = run(Command::new("fio")
        .current_dir(out.path())
        .args(["--name=replay", "--ioengine=psync", "--direct=1"])
        .arg(format!("--read_iolog={}", merged.display()))
        .arg(format!("--filename={}", disk.dev().display()))
        .arg(format!("--replay_redirect={}", disk.dev().display())))
    .unwrap();
    let queued = |write: bool| {
        rec.events
            .iter()
            .filter(|e| e.kind == EventKind::Queue && e.bytes > 0 && e.op.is_write() == write)
            .count()
    };
    let issued = format!("issued rwts: total={},{},", queued(false), queued(true));
    assert!(fio.contains(&issued), "fio did not replay {issued}:\n{fio}");

    // The merged dump reads back as the per-CPU files do (its event times rebased to the
    // first event).
    let (per_cpu, warnings) = read_source(&dir.join(disk.name()));
    assert!(warnings.is_empty(), "{warnings:?}");
    let (from_dump, warnings) = read_source(&merged);
    assert!(warnings.is_empty(), "{warnings:?}");
    let key = |events: &[Event]| {
        let base = events.first().map_or(0, |e| e.ts_ns);
        let mut v: Vec<_> = events
            .iter()
            .map(|e| {
                (
                    e.ts_ns - base,
                    e.kind.code(),
                    e.cpu,
                    e.sector,
                    e.bytes,
                    e.pid,
                    e.comm.to_string(),
                    e.op.code(),
                    e.flags.0,
                    e.error,
                    e.aux,
                )
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(per_cpu.len(), from_dump.len());
    assert_eq!(key(&per_cpu), key(&from_dump));
    // The pairing found every request: the read-back stages equal the exact ones.
    let (back, _) = our_stages(&per_cpu);
    assert!(
        within(back.0, q2c, 0.005) && within(back.1, d2c, 0.005),
        "{back:?}"
    );
}

/// `record --format blktrace` writes blktrace files directly; blkparse reads exactly the
/// known direct writes from them.
#[test]
fn record_format_blktrace_is_read_by_blkparse() {
    if !real_kernel_available("record_format_blktrace_is_read_by_blkparse") {
        return;
    }
    const N: u64 = 64;
    let disk = ScratchLoop::new("blktrace-rec", 64, "none").unwrap();
    let dev = disk.dev_numbers().unwrap();
    let out = scratch_dir("blktrace-rec-out").unwrap();
    let dir = out.path().join("bt");
    let mut recorder = record(&[disk.name()], &dir, &["--format", "blktrace"]).unwrap();
    let of = format!("of={}", disk.dev().display());
    dd(&[
        "if=/dev/zero",
        &of,
        "bs=4096",
        &format!("count={N}"),
        "seek=10",
        "oflag=direct",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let listing: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let text = run(Command::new("blkparse")
        .arg("-i")
        .arg(disk.name())
        .arg("-D")
        .arg(&dir))
    .unwrap_or_else(|e| panic!("{e:#}; files {listing:?}; recorder: {:?}", recorder.said()));
    let writes = |action: &str| {
        text.lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() >= 8
                    && f[0] == format!("{},{}", dev.0, dev.1)
                    && f[5] == action
                    && f[6].contains('W')
                    && f[7]
                        .parse::<u64>()
                        .is_ok_and(|s| (80..80 + N * 8).contains(&s))
            })
            .count() as u64
    };
    assert_eq!((writes("Q"), writes("D"), writes("C")), (N, N, N), "{text}");
    let (events, warnings) = read_source(&dir);
    assert!(warnings.is_empty(), "{warnings:?}");
    let issued = events
        .iter()
        .filter(|e| e.kind == EventKind::Issue && e.op.is_write())
        .count() as u64;
    assert_eq!(issued, N);
}
