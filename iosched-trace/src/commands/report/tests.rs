//! `report --html`'s pass: the same report as `report --json`, and a page whose size does
//! not grow with the trace.

use std::{collections::BTreeMap, sync::mpsc};

use iosched_core::{
    event::{Event, Note, Op},
    record::{DeviceInfo, ProcessInfo},
    source::{InputError, MemorySource, TraceMeta, TraceSource},
    synth,
    timeline::sim::DEV,
};
use serde_json::Value;

use super::*;

fn device() -> DeviceInfo {
    DeviceInfo {
        name: "loop0".into(),
        dev: DEV,
        scheduler: Some("bfq".into()),
        request_based: true,
        ..Default::default()
    }
}

/// Three rounds of: p1 reads, then the device idles 5 ms while p2's and p3's reads wait.
fn idling_trace() -> Vec<Event> {
    iosched_core::timeline::sim::idling_rounds(3, Op::Read)
}

fn data_of(page: &str) -> Value {
    let start = page
        .find(r#"<script type="application/json" id="data">"#)
        .unwrap();
    let rest = &page[start..];
    let json = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(json).unwrap()
}

#[test]
fn the_page_holds_the_json_report_and_every_idle_interval() {
    let opts = Options {
        top_intervals: 2,
        ..Default::default()
    };
    let mut src = MemorySource::new(vec![device()], idling_trace());
    let (report, page) = html_page(&mut src, &opts).unwrap();
    let mut src = MemorySource::new(vec![device()], idling_trace());
    let json = analysis::analyze(&mut src, &opts).unwrap();
    // Exactly what `report --json` prints, also its list of the 2 longest intervals.
    assert_eq!(
        serde_json::to_value(&report).unwrap(),
        serde_json::to_value(&json).unwrap()
    );
    let data = data_of(&page);
    assert_eq!(data["report"], serde_json::to_value(&json).unwrap());
    assert_eq!(
        data["report"]["idling"]["top_intervals"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // The page draws all three, each 5 ms, for p1, with p2 and p3 waiting.
    let idle = data["idle"].as_array().unwrap();
    assert_eq!(idle.len(), 3);
    for iv in idle {
        assert_eq!(iv["duration"], 5_000_000);
        assert_eq!(iv["after_pid"], 1);
        assert_eq!(iv["waiting_pids"], serde_json::json!([2, 3]));
    }
    let lanes: Vec<u64> = data["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(lanes, vec![1, 2, 3]);
    // The binned idle time is the report's.
    let idle_ns: u64 = data["devices"][0]["idle_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(idle_ns, json.devices[0].idle_with_pending_ns);
    assert_eq!(idle_ns, 15_000_000);
    // Self-contained: no URL the browser would fetch (SVG's namespace is a name, not a load).
    let page = page.replace("\"http://www.w3.org/2000/svg\"", "");
    for needle in ["src=", "href=", "http://", "https://", "@import", "url("] {
        assert!(!page.contains(needle), "page contains {needle:?}");
    }
}

#[test]
fn a_process_filter_keeps_only_its_lanes() {
    let opts = Options {
        pids: vec![2],
        ..Default::default()
    };
    let mut src = MemorySource::new(vec![device()], idling_trace());
    let (_, page) = html_page(&mut src, &opts).unwrap();
    let data = data_of(&page);
    assert_eq!(data["lanes"].as_array().unwrap().len(), 1);
    assert_eq!(data["lanes"][0]["pid"], 2);
}

/// A synthetic trace read as it is generated (a thread hands over batches), so a test can
/// analyze millions of events without holding them.
struct SynthSource {
    meta: TraceMeta,
    rx: mpsc::Receiver<Vec<Event>>,
    batch: std::vec::IntoIter<Event>,
    processes: BTreeMap<u32, ProcessInfo>,
}

impl SynthSource {
    fn new(spec: synth::Spec) -> SynthSource {
        let (tx, rx) = mpsc::sync_channel::<Vec<Event>>(8);
        std::thread::spawn(move || {
            let mut buf = Vec::with_capacity(8192);
            let _ = synth::generate(&spec, |e| {
                buf.push(*e);
                if buf.len() == 8192 {
                    tx.send(std::mem::replace(&mut buf, Vec::with_capacity(8192)))
                        .map_err(|_| ())?;
                }
                Ok::<(), ()>(())
            });
            let _ = tx.send(buf);
        });
        let meta = MemorySource::new(vec![device()], Vec::new()).meta().clone();
        SynthSource {
            meta,
            rx,
            batch: Vec::new().into_iter(),
            processes: BTreeMap::new(),
        }
    }
}

impl TraceSource for SynthSource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }
    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        loop {
            if let Some(e) = self.batch.next() {
                return Some(Ok(e));
            }
            self.batch = self.rx.recv().ok()?.into_iter();
        }
    }
    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        &self.processes
    }
    fn notes(&self) -> &[Note] {
        &[]
    }
    fn lost(&self) -> Option<u64> {
        None
    }
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The size bound the issue asks for: a page of a million requests stays under 5 MB (bins,
/// not requests), and has no exact bios.
#[test]
fn a_million_requests_make_a_page_of_bounded_size() {
    let spec = synth::Spec {
        events: 5_800_000,
        processes: 16,
        dev: DEV,
        ..Default::default()
    };
    let mut src = SynthSource::new(spec);
    let (report, page) = html_page(&mut src, &Options::default()).unwrap();
    let requests: u64 = report.devices[0].read.requests + report.devices[0].write.requests;
    assert!(requests >= 1_000_000, "{requests} requests");
    assert!(page.len() < 5_000_000, "{} bytes", page.len());
    let data = data_of(&page);
    assert!(data["exact"].is_null());
    assert_eq!(data["lanes"].as_array().unwrap().len(), 16);
    let bins = data["axis"]["bins"].as_u64().unwrap();
    assert!(bins > 1024 && bins <= 2048, "{bins}");
}
