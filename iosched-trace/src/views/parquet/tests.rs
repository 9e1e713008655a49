//! The writer read back with the parquet crate's own reader: a row per completed request,
//! each row the timeline's life of that request column by column; an idle row per interval
//! `report` counts, adding up to its idling waste per idled-for process; the metadata; the
//! partitions by host and date.

use std::{
    collections::BTreeMap,
    fs::File,
    io::BufWriter,
    path::{Path, PathBuf},
};

use parquet::{
    file::reader::{FileReader, SerializedFileReader},
    record::Field,
};

use iosched_core::{
    analysis,
    driver::{self, Filter},
    event::{Comm, Dev},
    record::{ClockBase, DeviceInfo, Header, ProcessInfo, RecordingWriter, Stats},
    synth,
    timeline::{LifeSink, RequestLife},
    trace_file,
};

use super::{Options, columns, export, partition::utc_date};

const DEV: Dev = Dev { major: 7, minor: 3 };
/// 2026-12-01T00:00:00Z, ns.
const DEC_1: u64 = 1_796_083_200_000_000_000;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "iosched-parquet-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn device() -> DeviceInfo {
    DeviceInfo {
        name: "loop3".into(),
        dev: DEV,
        scheduler: Some("bfq".into()),
        iosched: [("slice_idle".to_string(), "8".to_string())].into(),
        request_based: true,
        ..Default::default()
    }
}

/// A synthetic recording written to `path` as `record` would, its first event at
/// `wall` on the wall clock; returns its events' requests as the timeline sees them.
fn recording(path: &Path, spec: &synth::Spec, wall: u64) -> Vec<RequestLife> {
    let mut header = Header::for_this_host(vec![device()], vec!["test".into()]);
    header.host = "db-7".into();
    header.boot_id = Some("0b0e1d".into());
    header.clock = ClockBase {
        monotonic_ns: 1_000_000_000,
        realtime_ns: wall,
    };
    let file = File::create(path).unwrap();
    let mut w = RecordingWriter::new(BufWriter::new(file), &header).unwrap();
    for p in 0..spec.processes {
        let pid = 1000 + p;
        w.add_process(&ProcessInfo {
            pid,
            tgid: pid,
            comm: Comm::new(&format!("synth{p}")),
            cgroup_id: 100 + u64::from(pid % 3),
            // One cgroup of the three has no path: the id stands for it, as in `report`.
            cgroup_path: (pid % 3 != 2).then(|| format!("/cg{}", pid % 3)),
        })
        .unwrap();
    }
    let mut events = Vec::new();
    synth::generate(spec, |e| {
        events.push(*e);
        w.push(e)
    })
    .unwrap();
    let stats = Stats {
        sent: events.len() as u64,
        lost_per_cpu: vec![0, 3],
        ..Default::default()
    };
    w.write_stats(&stats).unwrap();
    let footer = w.footer(stats, 0, "test");
    w.finish(&footer).unwrap();

    #[derive(Default)]
    struct Lives(Vec<RequestLife>);
    impl LifeSink for Lives {
        fn request_done(&mut self, rq: &RequestLife) {
            self.0.push(rq.clone());
        }
    }
    impl driver::TraceSink for Lives {}
    let mut lives = Lives::default();
    let mut d = driver::Driver::new(&[device()], Filter::ALL);
    for ev in &events {
        d.push(ev, &mut lives);
    }
    d.finish(&mut lives);
    lives.0
}

fn spec() -> synth::Spec {
    synth::Spec {
        events: 30_000,
        processes: 5,
        depth: 6,
        seed: 7,
        dev: DEV,
        service_ns: 20_000,
        idle_every: 9,
        idle_ns: 300_000,
        single_bio: false,
    }
}

type Row = BTreeMap<String, Field>;

fn read(path: &Path) -> (Vec<Row>, BTreeMap<String, String>, usize) {
    let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
    let meta = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| {
            kv.iter()
                .map(|k| (k.key.clone(), k.value.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let groups = reader.num_row_groups();
    let rows = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| {
            r.unwrap()
                .get_column_iter()
                .map(|(n, f)| (n.clone(), f.clone()))
                .collect()
        })
        .collect();
    (rows, meta, groups)
}

/// Every `part-*.parquet` under `dir`, sorted.
fn parts(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn long(r: &Row, k: &str) -> Option<i64> {
    match &r[k] {
        Field::Long(v) => Some(*v),
        Field::Null => None,
        f => panic!("{k}: {f:?}"),
    }
}

fn int(r: &Row, k: &str) -> Option<i32> {
    match &r[k] {
        Field::Int(v) => Some(*v),
        Field::Null => None,
        f => panic!("{k}: {f:?}"),
    }
}

fn text(r: &Row, k: &str) -> Option<String> {
    match &r[k] {
        Field::Str(v) => Some(v.clone()),
        Field::Null => None,
        f => panic!("{k}: {f:?}"),
    }
}

#[test]
fn each_request_is_one_row_holding_its_life() {
    let dir = Scratch::new("rows");
    let trace = dir.0.join("t.istrace");
    let lives = recording(&trace, &spec(), DEC_1 + 3_600_000_000_000);
    assert!(lives.iter().any(|l| l.merges > 0) && lives.iter().any(|l| l.g.is_some()));
    let out = dir.0.join("fleet");
    let mut src = trace_file::open(&trace).unwrap();
    let opts = Options {
        row_group_rows: Some(1000),
        ..Default::default()
    };
    let summary = export(src.as_mut(), &out, &opts).unwrap();
    assert_eq!(summary.requests, lives.len() as u64);
    let file = out.join("host=db-7/date=2026-12-01/part-0.parquet");
    assert_eq!(summary.request_files.len(), 1);
    assert_eq!(summary.request_files[0].path, file);
    let (rows, meta, groups) = read(&file);
    assert_eq!(rows.len(), lives.len());
    assert_eq!(groups, lives.len().div_ceil(1000));
    // Rows in completion order, as the lives.
    for (r, l) in rows.iter().zip(&lives) {
        let s = l.submitter.unwrap();
        assert_eq!(text(r, "device").as_deref(), Some("loop3"));
        assert_eq!(text(r, "dev").as_deref(), Some("7:3"));
        assert_eq!(text(r, "scheduler").as_deref(), Some("bfq"));
        assert_eq!(text(r, "op").as_deref(), Some(l.op.name()));
        let sync = l.flags.has(iosched_core::event::ReqFlags::SYNC);
        assert_eq!(text(r, "flags").unwrap(), if sync { "SYNC" } else { "" });
        assert_eq!(long(r, "sector"), Some(l.sector as i64));
        assert_eq!(long(r, "bytes"), Some(i64::from(l.bytes)));
        assert_eq!(int(r, "pid"), Some(s.tgid as i32));
        assert_eq!(int(r, "tid"), Some(s.pid as i32));
        assert_eq!(text(r, "comm"), Some(s.comm.as_str().into_owned()));
        assert_eq!(long(r, "cgroup_id"), Some(s.cgroup_id as i64));
        let path = match s.pid % 3 {
            2 => s.cgroup_id.to_string(),
            n => format!("/cg{n}"),
        };
        assert_eq!(text(r, "cgroup"), Some(path));
        assert_eq!(long(r, "q_ns"), l.q.map(|v| v as i64));
        assert_eq!(long(r, "g_ns"), l.g.map(|v| v as i64));
        assert_eq!(long(r, "i_ns"), l.i.map(|v| v as i64));
        assert_eq!(long(r, "d_ns"), l.d.map(|v| v as i64));
        assert_eq!(long(r, "c_ns"), Some(l.c as i64));
        assert_eq!(int(r, "bios"), Some(l.bios as i32));
        assert_eq!(int(r, "merges"), Some(l.merges as i32));
        assert_eq!(int(r, "requeues"), Some(0));
        assert_eq!(int(r, "error"), Some(0));
    }
    // The generator's order: Q, then G, then I, for the request's first bio.
    assert!(rows.iter().all(|r| {
        let (q, g, i) = (long(r, "q_ns"), long(r, "g_ns"), long(r, "i_ns"));
        q.is_some() && q < g && g < i
    }));
    // A two-bio request of the generator: its second bio back-merged.
    assert!(
        rows.iter()
            .all(|r| int(r, "merges") == int(r, "bios").map(|b| b - 1))
    );
    assert_eq!(meta["iosched.table"], "requests");
    assert_eq!(meta["iosched.host"], "db-7");
    assert_eq!(meta["iosched.boot_id"], "0b0e1d");
    assert_eq!(meta["iosched.lost_events"], "3");
    assert_eq!(
        meta["iosched.clock_offset_ns"],
        (DEC_1 + 3_600_000_000_000 - 1_000_000_000).to_string()
    );
    let devices: serde_json::Value = serde_json::from_str(&meta["iosched.devices"]).unwrap();
    assert_eq!(devices[0]["scheduler"], "bfq");
    assert_eq!(devices[0]["tunables"]["slice_idle"], "8");
}

#[test]
fn idle_rows_are_the_reports_idling_waste() {
    let dir = Scratch::new("idle");
    let trace = dir.0.join("t.istrace");
    recording(&trace, &spec(), DEC_1);
    let out = dir.0.join("fleet");
    let mut src = trace_file::open(&trace).unwrap();
    let summary = export(src.as_mut(), &out, &Options::default()).unwrap();
    let report = analysis::analyze(
        trace_file::open(&trace).unwrap().as_mut(),
        &analysis::Options::default(),
    )
    .unwrap();
    let files = parts(&out.join("idle"));
    assert_eq!(
        files,
        vec![out.join("idle/host=db-7/date=2026-12-01/part-0.parquet")]
    );
    let (rows, meta, _) = read(&files[0]);
    assert_eq!(meta["iosched.table"], "idle");
    let d = &report.devices[0];
    // By construction: one interval per 9 issues but those of the final drain (the queue
    // of 6 issued when no more come; the 7 requests queued before the first issue take
    // less than the 50 µs an interval needs).
    let requests = summary.requests;
    assert_eq!(d.idle_with_pending_intervals, (requests - 6) / 9);
    assert_eq!(rows.len() as u64, d.idle_with_pending_intervals);
    assert_eq!(summary.idle_intervals, rows.len() as u64);
    let total: i64 = rows.iter().map(|r| long(r, "duration_ns").unwrap()).sum();
    assert_eq!(total as u64, d.idle_with_pending_ns);
    assert_eq!(total as u64, summary.idle_ns);
    // Per idled-for task, as the report's processes have it.
    let mut by_tid: BTreeMap<u32, u64> = BTreeMap::new();
    for r in &rows {
        if let Some(t) = int(r, "after_tid") {
            *by_tid.entry(t as u32).or_default() += long(r, "duration_ns").unwrap() as u64;
            let p = report.processes.iter().find(|p| p.pid == t as u32).unwrap();
            assert_eq!(text(r, "after_comm").unwrap(), p.comm);
            assert_eq!(text(r, "after_cgroup").unwrap(), p.cgroup);
        } else {
            // Only the first interval: before any completion.
            assert_eq!(long(r, "start_ns"), long(&rows[0], "start_ns"));
        }
        let Field::ListInternal(w) = &r["waiting_tids"] else {
            panic!("{:?}", r["waiting_tids"])
        };
        assert!(!w.elements().is_empty());
    }
    for p in &report.processes {
        assert_eq!(
            by_tid.get(&p.pid).copied().unwrap_or(0),
            p.idle_waste_caused_ns,
            "{}",
            p.pid
        );
    }
}

#[test]
fn rows_go_to_the_partition_of_their_date_and_a_second_recording_beside_the_first() {
    let dir = Scratch::new("dates");
    let trace = dir.0.join("t.istrace");
    // About 0.3 s of I/O, starting 0.1 s before midnight.
    let lives = recording(&trace, &spec(), DEC_1 - 100_000_000);
    let span = lives.last().unwrap().c - lives[0].c;
    assert!(span > 200_000_000, "{span}");
    let out = dir.0.join("fleet");
    let opts = Options {
        host: Some("web-1".into()),
        ..Default::default()
    };
    let s = export(trace_file::open(&trace).unwrap().as_mut(), &out, &opts).unwrap();
    let f30 = out.join("host=web-1/date=2026-11-30/part-0.parquet");
    let f01 = out.join("host=web-1/date=2026-12-01/part-0.parquet");
    let paths: Vec<_> = s.request_files.iter().map(|w| w.path.clone()).collect();
    assert_eq!(paths, vec![f30.clone(), f01.clone()]);
    let (before, meta, _) = read(&f30);
    let (after, _, _) = read(&f01);
    assert_eq!(before.len() + after.len(), lives.len());
    assert_eq!(meta["iosched.host"], "web-1");
    let offset: i64 = meta["iosched.clock_offset_ns"].parse().unwrap();
    let midnight = DEC_1 as i64;
    assert!(
        before
            .iter()
            .all(|r| long(r, "c_ns").unwrap() + offset < midnight)
    );
    assert!(
        after
            .iter()
            .all(|r| long(r, "c_ns").unwrap() + offset >= midnight)
    );
    assert!(!before.is_empty() && !after.is_empty());

    // Converted again: part-1 beside part-0, nothing overwritten.
    let again = export(trace_file::open(&trace).unwrap().as_mut(), &out, &opts).unwrap();
    assert_eq!(
        again.request_files[0].path,
        out.join("host=web-1/date=2026-11-30/part-1.parquet")
    );
    assert_eq!(read(&f30).0.len(), before.len());
}

#[test]
fn bad_partitions_are_refused_before_anything_is_written() {
    let dir = Scratch::new("bad");
    let trace = dir.0.join("t.istrace");
    recording(&trace, &spec(), DEC_1);
    let out = dir.0.join("fleet");
    for (host, date) in [
        (Some("a/b"), None),
        (Some(".."), None),
        (Some(""), None),
        (None, Some("2026-13-01")),
        (None, Some("yesterday")),
    ] {
        let opts = Options {
            host: host.map(str::to_string),
            date: date.map(str::to_string),
            ..Default::default()
        };
        let e = export(trace_file::open(&trace).unwrap().as_mut(), &out, &opts).unwrap_err();
        assert!(
            e.to_string().contains("--host") || e.to_string().contains("--date"),
            "{e}"
        );
    }
    assert!(!out.exists());
}

#[test]
fn utc_dates() {
    for (secs, date) in [
        (0u64, "1970-01-01"),
        (951_782_400, "2000-02-29"),
        (951_868_799, "2000-02-29"),
        (951_868_800, "2000-03-01"),
        (1_796_083_199, "2026-11-30"),
        (1_796_083_200, "2026-12-01"),
        (4_107_542_400, "2100-03-01"),
    ] {
        assert_eq!(utc_date(secs * 1_000_000_000), date, "{secs}");
    }
}

#[test]
fn the_schema_is_parquets_and_has_each_column_once() {
    for (name, specs) in [("request", columns::REQUESTS), ("idle", columns::IDLE)] {
        let t = parquet::schema::parser::parse_message_type(&columns::message_type(name, specs))
            .unwrap();
        assert_eq!(t.get_fields().len(), specs.len());
        let mut names: Vec<_> = specs.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), specs.len());
    }
}

const FLEET_MD: &str = include_str!("../../../../docs/FLEET.md");

/// The rows of the table after `<!-- marker -->` in docs/FLEET.md: each row's cells.
fn doc_table(marker: &str) -> Vec<Vec<String>> {
    let start = FLEET_MD
        .find(&format!("<!-- {marker} -->"))
        .unwrap_or_else(|| panic!("docs/FLEET.md has no <!-- {marker} -->"));
    FLEET_MD[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect()
}

#[test]
fn docs_fleet_md_gives_the_schema_written() {
    for (marker, specs) in [
        ("schema: requests", columns::REQUESTS),
        ("schema: idle", columns::IDLE),
    ] {
        let doc: Vec<(String, String, bool)> = doc_table(marker)
            .into_iter()
            .map(|c| (c[0].clone(), c[1].clone(), c[2] == "yes"))
            .collect();
        let code: Vec<(String, String, bool)> = specs
            .iter()
            .map(|c| (c.name.to_string(), c.kind.sql().to_string(), c.nullable))
            .collect();
        assert_eq!(doc, code, "docs/FLEET.md {marker}");
    }
}

#[test]
fn docs_fleet_md_lists_the_metadata_keys_written() {
    let dir = Scratch::new("keys");
    let trace = dir.0.join("t.istrace");
    recording(&trace, &spec(), DEC_1);
    let out = dir.0.join("fleet");
    let s = export(
        trace_file::open(&trace).unwrap().as_mut(),
        &out,
        &Options::default(),
    )
    .unwrap();
    let (_, meta, _) = read(&s.request_files[0].path);
    let doc: Vec<String> = doc_table("metadata keys")
        .into_iter()
        .map(|c| c[0].clone())
        .collect();
    for k in meta.keys().filter(|k| k.starts_with("iosched.")) {
        assert!(doc.contains(k), "{k} is written but not in docs/FLEET.md");
    }
    // Those this recording has no figure for (no kernel counters in it).
    let absent = ["iosched.kernel_skipped", "iosched.untraced_completions"];
    for k in &doc {
        assert!(
            meta.contains_key(k) || absent.contains(&k.as_str()),
            "{k} is in docs/FLEET.md but not written"
        );
    }
}
