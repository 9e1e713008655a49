//! The Perfetto export of hand-built traces whose drawing is known by construction, read back
//! with a small decoder of the protobuf wire format written here from the schema's field
//! numbers (the independent check with Perfetto's own descriptors is
//! tests/perfetto/decode.py, run by tests/tests/perfetto.rs).

use std::collections::BTreeMap;

use iosched_core::{
    analysis::{Aggregator, Options as ReportOptions},
    driver::{self, Filter},
    event::{Comm, Event, EventKind, Op},
    record::DeviceInfo,
    source::{InputError, MemorySource, TraceSource},
    timeline::sim::{DEV, Sim},
};

use super::*;

// ---- a decoder of the wire format, for these tests ----

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Int(u64),
    Fixed(u64),
    Bytes(Vec<u8>),
}

fn varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return v;
        }
        shift += 7;
    }
}

fn fields(b: &[u8]) -> Vec<(u32, Val)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < b.len() {
        let key = varint(b, &mut at);
        let (num, wt) = ((key >> 3) as u32, key & 7);
        let v = match wt {
            0 => Val::Int(varint(b, &mut at)),
            1 => {
                let v = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
                at += 8;
                Val::Fixed(v)
            }
            2 => {
                let n = varint(b, &mut at) as usize;
                at += n;
                Val::Bytes(b[at - n..at].to_vec())
            }
            _ => panic!("wire type {wt} at {at}"),
        };
        out.push((num, v));
    }
    out
}

/// Field names by (message, number), from Perfetto's schema; `Some(message)` for nested
/// ones, `"str"` for strings.
fn schema(msg: &str, num: u32) -> (String, Option<&'static str>) {
    let (name, nested) = match (msg, num) {
        ("TracePacket", 8) => ("timestamp", None),
        ("TracePacket", 10) => ("seq", None),
        ("TracePacket", 11) => ("track_event", Some("TrackEvent")),
        ("TracePacket", 12) => ("interned_data", Some("InternedData")),
        ("TracePacket", 13) => ("sequence_flags", None),
        ("TracePacket", 60) => ("track_descriptor", Some("TrackDescriptor")),
        ("TracePacket", 87) => ("first_packet_on_sequence", None),
        ("InternedData", 2) => ("event_names", Some("Interned")),
        ("InternedData", 3) => ("debug_annotation_names", Some("Interned")),
        ("Interned", 1) => ("iid", None),
        ("Interned", 2) => ("name", Some("str")),
        ("TrackDescriptor", 1) => ("uuid", None),
        ("TrackDescriptor", 2) => ("name", Some("str")),
        ("TrackDescriptor", 3) => ("process", Some("Process")),
        ("TrackDescriptor", 5) => ("parent_uuid", None),
        ("TrackDescriptor", 8) => ("counter", Some("Counter")),
        ("TrackDescriptor", 11) => ("child_ordering", None),
        ("TrackDescriptor", 12) => ("sibling_order_rank", None),
        ("Process", 1) => ("pid", None),
        ("Process", 6) => ("process_name", Some("str")),
        ("Counter", 3) => ("unit", None),
        ("Counter", 6) => ("unit_name", Some("str")),
        ("TrackEvent", 4) => ("debug_annotations", Some("Annotation")),
        ("TrackEvent", 9) => ("type", None),
        ("TrackEvent", 10) => ("name_iid", None),
        ("TrackEvent", 11) => ("track_uuid", None),
        ("TrackEvent", 23) => ("name", Some("str")),
        ("TrackEvent", 30) => ("counter_value", None),
        ("TrackEvent", 44) => ("double_counter_value", Some("double")),
        ("TrackEvent", 47) => ("flow_ids", None),
        ("TrackEvent", 48) => ("terminating_flow_ids", None),
        ("Annotation", 1) => ("name_iid", None),
        ("Annotation", 3) => ("uint_value", None),
        ("Annotation", 4) => ("int_value", None),
        ("Annotation", 6) => ("string_value", Some("str")),
        _ => return (format!("?{num}"), None),
    };
    (name.to_string(), nested)
}

/// One line per packet, fields by name.
fn render_message(msg: &str, b: &[u8]) -> String {
    let mut parts = Vec::new();
    for (num, v) in fields(b) {
        let (name, nested) = schema(msg, num);
        let text = match (v, nested) {
            (Val::Bytes(b), Some("str")) => format!("{:?}", String::from_utf8(b).unwrap()),
            (Val::Fixed(f), Some("double")) => format!("{}", f64::from_bits(f)),
            (Val::Bytes(b), Some(m)) => format!("{{{}}}", render_message(m, &b)),
            (Val::Int(i), _) => i.to_string(),
            (Val::Fixed(f), _) => format!("0x{f:x}"),
            (Val::Bytes(b), None) => format!("bytes{b:?}"),
        };
        parts.push(format!("{name}: {text}"));
    }
    parts.join(" ")
}

fn packets(trace: &[u8]) -> Vec<Vec<u8>> {
    fields(trace)
        .into_iter()
        .map(|(num, v)| {
            assert_eq!(num, 1, "a Trace holds only packets");
            match v {
                Val::Bytes(b) => b,
                other => panic!("packet is {other:?}"),
            }
        })
        .collect()
}

fn render(trace: &[u8]) -> String {
    packets(trace)
        .iter()
        .map(|p| render_message("TracePacket", p) + "\n")
        .collect()
}

#[derive(Clone, Debug, Default)]
struct Track {
    name: String,
    parent: Option<u64>,
    pid: Option<u64>,
}

#[derive(Clone, Debug, PartialEq)]
struct Ev {
    ts: u64,
    track: u64,
    kind: u64,
    name: String,
    flows_out: Vec<u64>,
    flows_in: Vec<u64>,
    counter: Option<f64>,
}

/// The tracks and events of a trace, names resolved.
#[derive(Debug, Default)]
struct Decoded {
    tracks: BTreeMap<u64, Track>,
    events: Vec<Ev>,
}

fn sub(b: &[u8], num: u32) -> Vec<Val> {
    fields(b)
        .into_iter()
        .filter(|(n, _)| *n == num)
        .map(|(_, v)| v)
        .collect()
}

fn int(b: &[u8], num: u32) -> Option<u64> {
    sub(b, num).into_iter().find_map(|v| match v {
        Val::Int(i) | Val::Fixed(i) => Some(i),
        _ => None,
    })
}

fn bytes(b: &[u8], num: u32) -> Option<Vec<u8>> {
    sub(b, num).into_iter().find_map(|v| match v {
        Val::Bytes(b) => Some(b),
        _ => None,
    })
}

fn string(b: &[u8], num: u32) -> Option<String> {
    bytes(b, num).map(|b| String::from_utf8(b).unwrap())
}

fn decode(trace: &[u8]) -> Decoded {
    let mut d = Decoded::default();
    let mut names = BTreeMap::new();
    for p in packets(trace) {
        if let Some(i) = bytes(&p, 12) {
            for n in sub(&i, 2) {
                let Val::Bytes(n) = n else { panic!() };
                names.insert(int(&n, 1).unwrap(), string(&n, 2).unwrap());
            }
        }
        if let Some(t) = bytes(&p, 60) {
            let uuid = int(&t, 1).unwrap();
            let pid = bytes(&t, 3).and_then(|pr| int(&pr, 1));
            let name = string(&t, 2)
                .or_else(|| bytes(&t, 3).and_then(|pr| string(&pr, 6)))
                .unwrap_or_default();
            let old = d.tracks.insert(
                uuid,
                Track {
                    name,
                    parent: int(&t, 5),
                    pid,
                },
            );
            assert!(old.is_none(), "track {uuid} described twice");
        }
        if let Some(e) = bytes(&p, 11) {
            let track = int(&e, 11).unwrap();
            assert!(d.tracks.contains_key(&track), "event before its track");
            let name = match int(&e, 10) {
                Some(iid) => names[&iid].clone(),
                None => string(&e, 23).unwrap_or_default(),
            };
            let all = |num| {
                sub(&e, num)
                    .into_iter()
                    .map(|v| match v {
                        Val::Fixed(f) => f,
                        other => panic!("flow id {other:?}"),
                    })
                    .collect()
            };
            let counter = int(&e, 30)
                .map(|v| v as f64)
                .or_else(|| int(&e, 44).map(f64::from_bits));
            d.events.push(Ev {
                ts: int(&p, 8).unwrap(),
                track,
                kind: int(&e, 9).unwrap(),
                name,
                flows_out: all(47),
                flows_in: all(48),
                counter,
            });
        }
    }
    d
}

impl Decoded {
    fn track_named(&self, name: &str, parent: Option<u64>) -> Vec<u64> {
        self.tracks
            .iter()
            .filter(|(_, t)| t.name == name && (parent.is_none() || t.parent == parent))
            .map(|(u, _)| *u)
            .collect()
    }

    fn process_track(&self, pid: u64) -> u64 {
        let found: Vec<u64> = self
            .tracks
            .iter()
            .filter(|(_, t)| t.pid == Some(pid))
            .map(|(u, _)| *u)
            .collect();
        assert_eq!(found.len(), 1, "process track of {pid}: {found:?}");
        found[0]
    }

    fn children(&self, parent: u64) -> Vec<(u64, &Track)> {
        self.tracks
            .iter()
            .filter(|(_, t)| t.parent == Some(parent))
            .map(|(u, t)| (*u, t))
            .collect()
    }

    /// A track's slices as the trace processor nests them (sorted by time, ties in file
    /// order): (begin, end, name, depth). Panics on an end without a begin or a slice left
    /// open.
    fn slices(&self, track: u64) -> Vec<(u64, u64, String, usize)> {
        let mut evs: Vec<(usize, &Ev)> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.track == track)
            .collect();
        evs.sort_by_key(|(i, e)| (e.ts, *i));
        let mut stack: Vec<(u64, String)> = Vec::new();
        let mut out = Vec::new();
        for (_, e) in evs {
            match e.kind {
                1 => stack.push((e.ts, e.name.clone())),
                2 => {
                    let (b, n) = stack.pop().expect("end without begin");
                    out.push((b, e.ts, n, stack.len()));
                }
                _ => {}
            }
        }
        assert!(stack.is_empty(), "slices left open on {track}: {stack:?}");
        out.sort();
        out
    }

    fn instants(&self, track: u64) -> Vec<&Ev> {
        self.events
            .iter()
            .filter(|e| e.track == track && e.kind == 3)
            .collect()
    }
}

// ---- the traces ----

const T0: u64 = 1_000_000_000;

fn loop7() -> Vec<DeviceInfo> {
    vec![DeviceInfo {
        name: "loop7".into(),
        dev: DEV,
        request_based: true,
        ..Default::default()
    }]
}

fn wakeup(s: &mut Sim, waker: u32, wakee: u32) {
    s.events.push(Event {
        ts_ns: s.t,
        kind: EventKind::Wakeup,
        pid: waker,
        tgid: waker,
        comm: Comm::new(&format!("p{waker}")),
        dev: DEV,
        aux: u64::from(wakee) | (u64::from(wakee) << 32),
        ..Event::blank()
    });
}

/// pid 10: two overlapping writes (the first with a back-merged bio, the second requeued
/// once); then pid 20 wakes pid 10 and reads, waiting 200 µs on an idle device.
fn small_trace() -> Sim {
    let mut s = Sim::default();
    s.at(0)
        .q(1, 10, 0, 4096, Op::Write)
        .g(1)
        .i(101, 1, 0, 4096)
        .at(5_000)
        .q(2, 10, 8, 4096, Op::Write)
        .back_merge(2)
        .at(10_000)
        .q(3, 10, 1000, 4096, Op::Write)
        .g(3)
        .i(103, 3, 1000, 4096)
        .at(20_000)
        .d(101, &[1, 2], 0, 8192, Op::Write)
        .at(25_000)
        .d(103, &[3], 1000, 4096, Op::Write)
        .at(40_000)
        .requeue(103)
        .at(45_000)
        .d(103, &[3], 1000, 4096, Op::Write)
        .at(60_000)
        .c(101, 8192, 8192)
        .at(70_000)
        .c(103, 4096, 4096)
        .at(100_000);
    wakeup(&mut s, 20, 10);
    s.q(4, 20, 5000, 4096, Op::Read)
        .g(4)
        .at(101_000)
        .i(104, 4, 5000, 4096)
        .at(300_000)
        .d(104, &[4], 5000, 4096, Op::Read)
        .at(400_000)
        .c(104, 4096, 4096);
    s
}

fn export_sim(s: &Sim, opts: &Options) -> (Vec<u8>, Summary) {
    let mut src = MemorySource::new(loop7(), s.events.clone());
    export(&mut src, opts, Vec::new(), &mut |_| {}).unwrap()
}

#[test]
fn the_size_warning_comes_once_when_the_output_passes_the_limit() {
    let sim = small_trace();
    let mut warnings = Vec::new();
    let mut src = MemorySource::new(loop7(), sim.events.clone());
    let opts = Options {
        warn_bytes: 1000,
        ..Default::default()
    };
    let (out, _) = export(&mut src, &opts, Vec::new(), &mut |w| warnings.push(w)).unwrap();
    assert!(out.len() > 1000);
    // One batch: checked once, at its end, before the end of the trace closes what is open
    // (a memory source has no footer to predict from).
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let SizeWarning::Reached(at) = warnings[0] else {
        panic!("{warnings:?}")
    };
    assert!((1000..=out.len() as u64).contains(&at), "{at}");
    // Under the limit: nothing.
    let mut warnings = Vec::new();
    let mut src = MemorySource::new(loop7(), sim.events);
    let opts = Options {
        warn_bytes: 1 << 20,
        ..Default::default()
    };
    export(&mut src, &opts, Vec::new(), &mut |w| warnings.push(w)).unwrap();
    assert!(warnings.is_empty());
}

#[test]
fn golden_small_trace() {
    let (bytes, summary) = export_sim(&small_trace(), &Options::default());
    assert_eq!(summary.drawn.requests(), 3);
    insta::assert_snapshot!(render(&bytes));
}

#[test]
fn each_request_is_a_slice_from_q_to_c_with_scheduler_and_device_children() {
    let (bytes, _) = export_sim(&small_trace(), &Options::default());
    let d = decode(&bytes);
    let p10 = d.process_track(10);
    assert_eq!(d.tracks[&p10].name, "p10");
    let lanes: Vec<u64> = d
        .children(p10)
        .iter()
        .filter(|(_, t)| t.name.starts_with("requests"))
        .map(|(u, _)| *u)
        .collect();
    // The two writes overlap (10 µs to 60 µs): two lanes.
    assert_eq!(lanes.len(), 2);
    let s = |n: &str| n.to_string();
    assert_eq!(
        d.slices(lanes[0]),
        vec![
            // rq 101: inserted with its Q, issued at 20 µs, completed at 60 µs.
            (T0, T0 + 20_000, s("in scheduler"), 1),
            (T0, T0 + 60_000, s("write"), 0),
            (T0 + 20_000, T0 + 60_000, s("in device"), 1),
        ]
    );
    assert_eq!(
        d.slices(lanes[1]),
        vec![
            (T0 + 10_000, T0 + 25_000, s("in scheduler"), 1),
            (T0 + 10_000, T0 + 70_000, s("write"), 0),
            // From the first issue, through the requeue, to C.
            (T0 + 25_000, T0 + 70_000, s("in device"), 1),
        ]
    );
    let p20 = d.process_track(20);
    let lanes20: Vec<u64> = d
        .children(p20)
        .iter()
        .filter(|(_, t)| t.name.starts_with("requests"))
        .map(|(u, _)| *u)
        .collect();
    assert_eq!(
        d.slices(lanes20[0]),
        vec![
            (T0 + 100_000, T0 + 400_000, s("read"), 0),
            (T0 + 101_000, T0 + 300_000, s("in scheduler"), 1),
            (T0 + 300_000, T0 + 400_000, s("in device"), 1),
        ]
    );
}

#[test]
fn merges_requeues_and_wakeups_are_instants_with_a_flow_from_waker_to_wakee() {
    let (bytes, summary) = export_sim(&small_trace(), &Options::default());
    let d = decode(&bytes);
    let events = |pid| {
        let p = d.process_track(pid);
        let t = d.track_named("merges, requeues, wakeups", Some(p));
        assert_eq!(t.len(), 1);
        d.instants(t[0])
    };
    let mut e10 = events(10);
    e10.sort_by_key(|e| e.ts);
    let named: Vec<(u64, &str)> = e10.iter().map(|e| (e.ts - T0, e.name.as_str())).collect();
    assert_eq!(
        named,
        vec![
            (5_000, "back merge"),
            (40_000, "requeue"),
            (100_000, "woken by")
        ]
    );
    let e20 = events(20);
    assert_eq!(e20.len(), 1);
    assert_eq!(e20[0].name, "wakes");
    assert_eq!(e20[0].flows_out.len(), 1);
    assert_eq!(e20[0].flows_out, e10[2].flows_in);
    assert!(e10[2].flows_out.is_empty() && e20[0].flows_in.is_empty());
    assert_eq!(summary.drawn.wakeups, 1);
}

#[test]
fn idling_waste_and_service_slices_are_the_reports() {
    let s = small_trace();
    let (bytes, summary) = export_sim(&s, &Options::default());
    let d = decode(&bytes);
    let dev = d.track_named("loop7 (7:0)", None)[0];
    let idle = d.track_named("idling waste (idle with I/O pending)", Some(dev))[0];
    // The read waited from its Q (100 µs) to its D (300 µs) on an empty driver; the
    // writes' 20 µs before their issue is transit.
    assert_eq!(
        d.slices(idle),
        vec![(
            T0 + 100_000,
            T0 + 300_000,
            "idle with I/O pending".into(),
            0
        )]
    );
    let slices = d.track_named("service slices", Some(dev))[0];
    assert_eq!(
        d.slices(slices),
        vec![
            (T0 + 20_000, T0 + 300_000, "p10 10".into(), 0),
            (T0 + 300_000, T0 + 300_000, "p20 20".into(), 0),
        ]
    );
    // The report, from the same trackers.
    let mut agg = Aggregator::new(ReportOptions::default());
    let mut src = MemorySource::new(loop7(), s.events.clone());
    driver::drive(&mut src, Filter::ALL, &mut agg).unwrap();
    let dev_agg = agg.devices.get(&DEV).unwrap();
    assert_eq!(dev_agg.idle.intervals, summary.drawn.idle_intervals);
    assert_eq!(dev_agg.idle.idle_with_pending_ns, 200_000);
    let report_slices: u64 = agg.slices.values().map(|s| s.slices).sum();
    assert_eq!(report_slices, summary.drawn.service_slices);
}

#[test]
fn device_counters_follow_the_timeline() {
    let (bytes, _) = export_sim(&small_trace(), &Options::default());
    let d = decode(&bytes);
    let dev = d.track_named("loop7 (7:0)", None)[0];
    let counter = |name| {
        let t = d.track_named(name, Some(dev))[0];
        d.events
            .iter()
            .filter(|e| e.track == t)
            .map(|e| (e.ts - T0, e.counter.unwrap()))
            .collect::<Vec<_>>()
    };
    let in_driver = counter("requests in driver");
    assert_eq!(
        in_driver,
        vec![
            (0, 0.0),
            (20_000, 1.0),
            (25_000, 2.0),
            (40_000, 1.0),
            (45_000, 2.0),
            (60_000, 1.0),
            (70_000, 0.0),
            (300_000, 1.0),
            (400_000, 0.0),
        ]
    );
    let waiting = counter("bios waiting to be issued");
    assert_eq!(waiting.iter().map(|w| w.1).fold(0.0, f64::max), 3.0);
    // 12 KiB completed in the first 10 ms bin, 4 KiB more in it at 400 µs: 1.6384 MB/s,
    // then zero.
    let tp = counter("throughput");
    assert_eq!(tp.len(), 2);
    assert!((tp[0].1 - 16384.0 / 1e6 / 0.01).abs() < 1e-9, "{tp:?}");
    assert_eq!(tp[0].0, 0);
    assert_eq!(tp[1], (10_000_000, 0.0));
}

#[test]
fn a_pid_filter_keeps_other_processes_out_and_devices_whole() {
    let opts = Options {
        select: Selection {
            pids: vec![20],
            comms: vec![],
        },
        ..Default::default()
    };
    let (bytes, summary) = export_sim(&small_trace(), &opts);
    let d = decode(&bytes);
    assert_eq!(summary.drawn.requests_by_pid.get(&20), Some(&1));
    assert_eq!(summary.drawn.requests_by_pid.get(&10), None);
    // pid 10's track exists only as the wakee of the arrow, without requests.
    let p10 = d.process_track(10);
    assert!(
        d.children(p10)
            .iter()
            .all(|(_, t)| !t.name.starts_with("requests"))
    );
    // The device's service slices are still both owners'.
    assert_eq!(summary.drawn.service_slices, 2);
}

#[test]
fn a_span_keeps_only_requests_within_it() {
    // From 90 µs: the writes completed before; only the read is drawn.
    let opts = Options {
        from_ns: Some(90_000),
        ..Default::default()
    };
    let (_, summary) = export_sim(&small_trace(), &opts);
    assert_eq!(summary.drawn.requests(), 1);
    assert_eq!(summary.drawn.requests_by_pid.get(&20), Some(&1));
    // Until 65 µs: only the first write had completed.
    let opts = Options {
        until_ns: Some(65_000),
        ..Default::default()
    };
    let (_, summary) = export_sim(&small_trace(), &opts);
    assert_eq!(summary.drawn.requests(), 1);
    assert_eq!(summary.anomalies.requests_in_flight_at_end, 1);
}

#[test]
fn an_unknown_device_is_a_clear_error() {
    let opts = Options {
        devices: vec!["sdz".into()],
        ..Default::default()
    };
    let mut src = MemorySource::new(loop7(), small_trace().events);
    let err = export(&mut src, &opts, Vec::new(), &mut |_| {})
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("sdz"), "{err}");
}

#[test]
fn many_overlapping_requests_nest_on_their_lanes() {
    // 8 requests of one process in flight at once, completing in another order than they
    // were queued.
    let mut s = Sim::default();
    for i in 0..8u64 {
        s.at(i * 1000)
            .q(i + 1, 10, i * 8, 4096, Op::Read)
            .g(i + 1)
            .i(100 + i, i + 1, i * 8, 4096);
    }
    for i in 0..8u64 {
        s.at(10_000 + i * 100)
            .d(100 + i, &[i + 1], i * 8, 4096, Op::Read);
    }
    for i in (0..8u64).rev() {
        s.at(50_000 + (8 - i) * 1000).c(100 + i, 4096, 4096);
    }
    let (bytes, summary) = export_sim(&s, &Options::default());
    assert_eq!(summary.drawn.requests(), 8);
    assert_eq!(summary.drawn.max_lanes, 8);
    let d = decode(&bytes);
    let p = d.process_track(10);
    let mut tops = Vec::new();
    for (lane, t) in d.children(p) {
        assert!(t.name.starts_with("requests"));
        for sl in d.slices(lane) {
            assert!(sl.3 <= 1);
            if sl.3 == 0 {
                tops.push((sl.0 - T0, sl.1 - T0));
            }
        }
    }
    tops.sort();
    let want: Vec<(u64, u64)> = (0..8u64)
        .map(|i| (i * 1000, 50_000 + (8 - i) * 1000))
        .collect();
    assert_eq!(tops, want);
}

/// A memory source whose footer claims `total` events.
struct WithFooter {
    inner: MemorySource,
    footer: iosched_core::record::Footer,
}

impl TraceSource for WithFooter {
    fn meta(&self) -> &iosched_core::source::TraceMeta {
        self.inner.meta()
    }
    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        self.inner.next_event()
    }
    fn processes(&self) -> &BTreeMap<u32, iosched_core::record::ProcessInfo> {
        self.inner.processes()
    }
    fn notes(&self) -> &[iosched_core::event::Note] {
        self.inner.notes()
    }
    fn lost(&self) -> Option<u64> {
        None
    }
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    fn footer(&self) -> Option<&iosched_core::record::Footer> {
        Some(&self.footer)
    }
}

#[test]
fn a_trace_too_large_for_the_ui_is_predicted_early_from_its_footer() {
    let spec = iosched_core::synth::Spec {
        events: 250_000,
        dev: DEV,
        ..Default::default()
    };
    let mut events = Vec::new();
    iosched_core::synth::generate(&spec, |e| {
        events.push(*e);
        Ok::<(), ()>(())
    })
    .unwrap();
    let n = events.len() as u64;
    let run = |claimed: u64, warn_bytes: u64| {
        let mut src = WithFooter {
            inner: MemorySource::new(loop7(), events.clone()),
            footer: iosched_core::record::Footer {
                events_total: claimed,
                ..Default::default()
            },
        };
        let opts = Options {
            warn_bytes,
            ..Default::default()
        };
        let mut warnings = Vec::new();
        let (out, _) = export(&mut src, &opts, Vec::new(), &mut |w| warnings.push(w)).unwrap();
        (out.len() as u64, warnings)
    };
    let (size, none) = run(n, u64::MAX);
    assert!(none.is_empty());
    // The file is half the limit: a footer telling the truth predicts no trouble...
    assert_eq!(run(n, size * 2).1, vec![]);
    // ...one claiming ten times the events predicts about ten times the size, once, long
    // before the end, and the limit is never reached.
    let (_, w) = run(10 * n, size * 2);
    assert_eq!(w.len(), 1, "{w:?}");
    let SizeWarning::Predicted(p) = w[0] else {
        panic!("{w:?}")
    };
    assert!(p > 8 * size && p < 12 * size, "{p} vs {size}");
    // A filtered export cannot be extrapolated from the whole trace's count.
    let mut src = WithFooter {
        inner: MemorySource::new(loop7(), events.clone()),
        footer: iosched_core::record::Footer {
            events_total: 10 * n,
            ..Default::default()
        },
    };
    let opts = Options {
        warn_bytes: size * 2,
        until_ns: Some(u64::MAX / 4),
        ..Default::default()
    };
    let mut warnings = Vec::new();
    export(&mut src, &opts, Vec::new(), &mut |w| warnings.push(w)).unwrap();
    assert!(warnings.is_empty());
}
