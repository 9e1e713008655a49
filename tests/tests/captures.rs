//! blktrace captures recorded by others (tests/fixtures/blktrace/, sources in its README) and
//! a requeue built by hand: btt, run on the same file at test time, is the oracle for
//! `report`'s stages. Where btt counts otherwise by design (requeues), the difference must be
//! exactly the one docs/BLKTRACE.md explains and the report's warning names.

use std::{collections::BTreeMap, path::Path, process::Command};

use iosched_trace_tests::{report_json, run, scratch_dir, tool_available};

/// One stage as btt prints it in "All Devices": seconds (9 decimals) and the sample count.
#[derive(Debug, Clone, Copy)]
struct BttStage {
    avg: f64,
    max: f64,
    n: u64,
}

/// One stage of `report --json`, over all devices: count, mean and max in ns.
#[derive(Debug, Clone, Copy)]
struct OurStage {
    count: u64,
    mean_ns: f64,
    max_ns: u64,
}

/// btt's "All Devices" table (Q2Q, Q2G, G2I, Q2M, I2D, M2D, D2C, Q2C: those it has samples
/// of), run in a scratch directory: btt drops per-device files where it runs.
fn btt_stages(trace: &Path) -> BTreeMap<String, BttStage> {
    let dir = scratch_dir("captures-btt").unwrap();
    let text = run(Command::new("btt")
        .arg("-i")
        .arg(trace.canonicalize().unwrap())
        .current_dir(dir.path()))
    .unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().take_while(|l| !l.contains("Device Overhead")) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 5
            && f[0].len() == 3
            && f[0].as_bytes()[1] == b'2'
            && let (Ok(avg), Ok(max), Ok(n)) = (f[2].parse(), f[3].parse(), f[4].parse())
        {
            out.insert(f[0].to_lowercase(), BttStage { avg, max, n });
        }
    }
    assert!(!out.is_empty(), "btt printed no stages:\n{text}");
    out
}

fn report_stages(report: &serde_json::Value) -> BTreeMap<String, OurStage> {
    let mut out: BTreeMap<String, OurStage> = BTreeMap::new();
    for dev in report["devices"].as_array().unwrap() {
        for (stage, s) in dev["latency"].as_object().unwrap() {
            let count = s["count"].as_u64().unwrap();
            let mean_ns = s["mean_ns"].as_f64().unwrap();
            let max_ns = s["max_ns"].as_u64().unwrap();
            let e = out.entry(stage.clone()).or_insert(OurStage {
                count: 0,
                mean_ns: 0.0,
                max_ns: 0,
            });
            let total = e.mean_ns * e.count as f64 + mean_ns * count as f64;
            e.count += count;
            e.mean_ns = total / e.count as f64;
            e.max_ns = e.max_ns.max(max_ns);
        }
    }
    out
}

/// btt prints seconds to the ns: a mean or max agrees when within rounding of it.
fn same_ns(btt_s: f64, ours_ns: f64) -> bool {
    (btt_s * 1e9 - ours_ns).abs() <= 1.0
}

fn assert_stage_equal(stage: &str, b: BttStage, o: OurStage) {
    assert_eq!(b.n, o.count, "{stage}: btt N {} vs ours {}", b.n, o.count);
    assert!(
        same_ns(b.avg, o.mean_ns),
        "{stage}: btt avg {:.9} s vs ours {} ns",
        b.avg,
        o.mean_ns
    );
    assert!(
        same_ns(b.max, o.max_ns as f64),
        "{stage}: btt max {:.9} s vs ours {} ns",
        b.max,
        o.max_ns
    );
}

#[test]
fn report_equals_btt_on_captures_from_other_machines() {
    if !tool_available("report_equals_btt_on_captures_from_other_machines", "btt") {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/blktrace");
    for name in ["takeoverjp-nvme.bin"] {
        let trace = fixtures.join(name);
        let btt = btt_stages(&trace);
        let ours = report_stages(&report_json(&trace, &[]).unwrap());
        eprintln!("{name}: btt {btt:?}\nours {ours:?}");
        let btt_names: Vec<&String> = btt.keys().collect();
        let our_names: Vec<&String> = ours.keys().filter(|s| btt.contains_key(*s)).collect();
        assert_eq!(btt_names, our_names, "{name}: stages btt has that we lack");
        for (stage, b) in &btt {
            assert_stage_equal(&format!("{name} {stage}"), *b, ours[stage]);
        }
        // The fixture's whole point: its I/O is there, not an empty agreement.
        assert!(btt["q2c"].n > 900 && btt["d2c"].n > 900, "{name}: {btt:?}");
    }
}

/// A blktrace version 7 record, little-endian, on sda (8,0), as docs/BLKTRACE.md lays it
/// out: a read of `sectors` at `sector`, category READ|FS plus the action's own.
fn record(seq: u32, ts: u64, action: u16, sector: u64, sectors: u32) -> Vec<u8> {
    let category: u32 = match action {
        1 | 4 | 12 => 1 << 4, // Q, G, I: QUEUE
        6 => 1 << 5,          // R: REQUEUE
        7 => 1 << 6,          // D: ISSUE
        8 => 1 << 7,          // C: COMPLETE
        _ => unreachable!(),
    };
    let mut r = Vec::with_capacity(48);
    r.extend(0x6561_7407u32.to_le_bytes());
    r.extend(seq.to_le_bytes());
    r.extend(ts.to_le_bytes());
    r.extend(sector.to_le_bytes());
    r.extend((sectors * 512).to_le_bytes());
    r.extend((((category | 1 | 1 << 8) << 16) | u32::from(action)).to_le_bytes());
    r.extend(100u32.to_le_bytes()); // pid
    r.extend((8u32 << 20).to_le_bytes()); // dev 8,0
    r.extend(0u32.to_le_bytes()); // cpu
    r.extend(0u16.to_le_bytes()); // error
    r.extend(0u16.to_le_bytes()); // pdu_len
    r
}

#[test]
fn requeue_differs_from_btt_exactly_as_documented() {
    if !tool_available("requeue_differs_from_btt_exactly_as_documented", "btt") {
        return;
    }
    const Q: u16 = 1;
    const G: u16 = 4;
    const R: u16 = 6;
    const D: u16 = 7;
    const C: u16 = 8;
    const I: u16 = 12;
    // Two plain reads around one that the driver requeues once: Q G I D R I D C.
    let (g, i1, d1, i2) = (3_100u64, 3_200, 4_000, 4_600);
    let mut events = vec![
        (1_000, Q, 1_000),
        (1_100, G, 1_000),
        (1_200, I, 1_000),
        (2_000, D, 1_000),
        (12_000, C, 1_000),
        (3_000, Q, 5_000),
        (g, G, 5_000),
        (i1, I, 5_000),
        (d1, D, 5_000),
        (4_500, R, 5_000),
        (i2, I, 5_000),
        (20_000, D, 5_000),
        (30_000, C, 5_000),
        (40_000, Q, 9_000),
        (40_100, G, 9_000),
        (40_200, I, 9_000),
        (41_000, D, 9_000),
        (46_000, C, 9_000),
    ];
    events.sort();
    let dir = scratch_dir("captures-requeue").unwrap();
    let trace = dir.path().join("sda.blktrace.0");
    let bytes: Vec<u8> = events
        .iter()
        .enumerate()
        .flat_map(|(k, &(ts, a, s))| record(k as u32 + 1, ts, a, s, 8))
        .collect();
    std::fs::write(&trace, bytes).unwrap();

    let btt = btt_stages(&trace);
    let report = report_json(&trace, &[]).unwrap();
    let ours = report_stages(&report);
    eprintln!("btt {btt:?}\nours {ours:?}");
    for stage in ["q2q", "q2g", "d2c", "q2c"] {
        assert_stage_equal(stage, btt[stage], ours[stage]);
    }
    // G2I and I2D: btt has one more sample each, the insert before the requeue measured from
    // the G and to the issue that the requeue undid; ours are per bio, from the last insert.
    for (stage, extra) in [("g2i", i1 - g), ("i2d", d1 - i1)] {
        let (b, o) = (btt[stage], ours[stage]);
        assert_eq!(
            b.n,
            o.count + 1,
            "{stage}: btt N {} vs ours {}",
            b.n,
            o.count
        );
        let btt_sum = b.avg * 1e9 * b.n as f64;
        let our_sum = o.mean_ns * o.count as f64;
        assert!(
            (btt_sum - our_sum - extra as f64).abs() <= b.n as f64,
            "{stage}: btt sum {btt_sum} - ours {our_sum} is not the extra {extra} ns"
        );
    }
    // Ours measures the requeued request's I2D from its second insert to its last issue.
    assert_eq!(ours["i2d"].max_ns, 20_000 - i2);
    let warnings: Vec<&str> = report["trace"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("1 requeues (R): btt counts G2I and I2D once per insert")),
        "{warnings:?}"
    );
}
