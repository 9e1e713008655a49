//! Events -> one [`Snapshot`] per interval, with the same code as `report`: one long-lived
//! pass (a [`Driver`], its timeline) for the whole session, and per interval and device a
//! fresh [`Aggregator`] whose window is the interval, started from the device's state at the
//! interval's start. `analysis::report::build` turns each into the report's own data, so an
//! interval's numbers are what `report --from --to` computes for that window of a recording.
//!
//! Owns: time-ordering the captured stream, cutting it into intervals, and the view's extras
//! (latency histograms and recent requests per process, bucketed from the same samples the
//! report uses). Must not: do I/O (the collector feeds it), render.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, VecDeque},
    path::PathBuf,
};

use rustc_hash::FxHashMap;
use serde::Serialize;

use iosched_core::{
    analysis::{Aggregator, Options, Report, Window, latency::Stage, report},
    devmap::DevMap,
    driver::{Driver, Filter, TraceSink},
    event::{Dev, Event, EventKind, Note},
    record::{DeviceInfo, ProcessInfo},
    source::{Identity, InputError, TraceFormat, TraceMeta, TraceSource},
    timeline::{Anomalies, BioLife, DeviceState, LifeSink, RequestLife, Submitter},
};

/// Log2 latency buckets from 1 µs (bucket 0: < 2 µs) to >= 2^(N-1) µs.
pub const HIST_BUCKETS: usize = 16;

/// Q2D and D2C sample counts of one process in one interval, by log2 µs bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencyHist {
    pub q2d: [u64; HIST_BUCKETS],
    pub d2c: [u64; HIST_BUCKETS],
}

impl LatencyHist {
    pub fn bucket(ns: u64) -> usize {
        let us = ns / 1000;
        if us < 2 {
            0
        } else {
            (us.ilog2() as usize).min(HIST_BUCKETS - 1)
        }
    }

    pub fn add(&mut self, other: &LatencyHist) {
        for i in 0..HIST_BUCKETS {
            self.q2d[i] += other.q2d[i];
            self.d2c[i] += other.d2c[i];
        }
    }
}

/// One completed bio of a process, for the strip of recent requests (absolute ns; `q` or
/// `d` missing when the event was not seen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RecentIo {
    pub q: Option<u64>,
    pub d: Option<u64>,
    pub c: u64,
    pub write: bool,
}

/// How many recent I/Os are kept per process and interval.
pub const RECENT_PER_PROCESS: usize = 64;

/// One device over one interval.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceSnapshot {
    pub info: DeviceInfo,
    /// The report of this device for the interval: `devices` has this device (when it did
    /// anything), `processes`/`cgroups` those that did I/O on it.
    pub report: Report,
    /// Requests in the scheduler (bios waiting) and in the driver at the interval's end.
    pub pending_now: u32,
    pub in_driver_now: u32,
    #[serde(skip)]
    pub hist: FxHashMap<u32, LatencyHist>,
    #[serde(skip)]
    pub recent: FxHashMap<u32, VecDeque<RecentIo>>,
}

/// Every traced device over one interval [from_ns, to_ns) of trace time (CLOCK_MONOTONIC).
#[derive(Clone, Debug, Serialize)]
pub struct Snapshot {
    pub from_ns: u64,
    pub to_ns: u64,
    pub devices: Vec<DeviceSnapshot>,
    /// Events lost (ring buffer full, or skipped by the kernel), during this interval and
    /// since the start.
    pub lost: u64,
    pub lost_total: u64,
    /// Completed requests the kernel counted (`/sys/block/X/stat`) that no completion event
    /// reported, since the start (checked about half a second behind; see
    /// `completions::CompletionTally`). Not a loss of ours: the tracepoint did not fire.
    pub untraced_total: u64,
    /// Events that arrived after their interval was closed (not counted in it).
    pub late_total: u64,
}

/// The report's [`Aggregator`] plus the view's extras, for one device and interval.
struct IntervalSink {
    agg: Aggregator,
    /// The view's extras by submitter pid: one lookup per completed bio for both.
    extras: FxHashMap<u32, ProcessExtras>,
}

#[derive(Default)]
struct ProcessExtras {
    hist: LatencyHist,
    recent: VecDeque<RecentIo>,
}

impl IntervalSink {
    fn new(opts: &Options, window: Window, state: Option<(Dev, &DeviceState)>) -> Self {
        IntervalSink {
            agg: Aggregator::starting_from(opts.clone(), window, state),
            extras: FxHashMap::default(),
        }
    }

    /// The extras split into the snapshot's two tables.
    #[allow(clippy::type_complexity)]
    fn take_extras(
        &mut self,
    ) -> (
        FxHashMap<u32, LatencyHist>,
        FxHashMap<u32, VecDeque<RecentIo>>,
    ) {
        let mut hist = FxHashMap::default();
        let mut recent = FxHashMap::default();
        for (pid, e) in self.extras.drain() {
            hist.insert(pid, e.hist);
            recent.insert(pid, e.recent);
        }
        (hist, recent)
    }
}

// The sink's and the router's calls are marked `#[inline]` so that they fold into the
// timeline's code: it makes four or five of them per event (callgrind, `live_path` example:
// `IntervalBuilder::push` 925.7M -> 891.7M instructions on a 2 s recording of the bench load).
impl TraceSink for IntervalSink {
    #[inline]
    fn see(&mut self, ev: &Event) {
        self.agg.see(ev);
    }
}

impl LifeSink for IntervalSink {
    #[inline]
    fn event(&mut self, ev: &Event) {
        self.agg.event(ev);
    }
    #[inline]
    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        self.agg.queued(ev, state);
    }
    #[inline]
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {
        self.agg.issued(ev, submitter, state);
    }
    #[inline]
    fn bio_done(&mut self, bio: &BioLife) {
        self.agg.bio_done(bio);
        if !self.agg.window.contains(bio.c) {
            return;
        }
        let Some(s) = bio.submitter else {
            return;
        };
        let extras = self.extras.entry(s.pid).or_default();
        let h = &mut extras.hist;
        Stage::for_each_sample(bio, |stage, ns| match stage {
            Stage::Q2D => h.q2d[LatencyHist::bucket(ns)] += 1,
            Stage::D2C => h.d2c[LatencyHist::bucket(ns)] += 1,
            _ => {}
        });
        let r = &mut extras.recent;
        if r.len() == RECENT_PER_PROCESS {
            r.pop_front();
        }
        r.push_back(RecentIo {
            q: bio.q,
            d: bio.d,
            c: bio.c,
            write: iosched_core::timeline::Direction::of(bio.op)
                == iosched_core::timeline::Direction::Write,
        });
    }
    #[inline]
    fn request_done(&mut self, rq: &RequestLife) {
        self.agg.request_done(rq);
    }
    #[inline]
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        self.agg.device_state(dev, ts, state);
    }
}

/// Routes the timeline's results to the device's own sink (each device is its own report).
struct Router<'a> {
    sinks: &'a mut DevMap<IntervalSink>,
    opts: &'a Options,
    window: Window,
}

impl Router<'_> {
    #[inline]
    fn sink(&mut self, dev: Dev) -> &mut IntervalSink {
        let (opts, window) = (self.opts, self.window);
        // A device first seen mid-interval was idle until then.
        self.sinks
            .get_or_insert_with(dev, || IntervalSink::new(opts, window, None))
    }
}

impl TraceSink for Router<'_> {
    #[inline]
    fn see(&mut self, ev: &Event) {
        self.sink(ev.dev).see(ev);
    }
}

impl LifeSink for Router<'_> {
    #[inline]
    fn event(&mut self, ev: &Event) {
        self.sink(ev.dev).event(ev);
    }
    #[inline]
    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        self.sink(ev.dev).queued(ev, state);
    }
    #[inline]
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {
        self.sink(ev.dev).issued(ev, submitter, state);
    }
    #[inline]
    fn bio_done(&mut self, bio: &BioLife) {
        self.sink(bio.dev).bio_done(bio);
    }
    #[inline]
    fn request_done(&mut self, rq: &RequestLife) {
        self.sink(rq.dev).request_done(rq);
    }
    #[inline]
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        self.sink(dev).device_state(dev, ts, state);
    }
}

/// What `report::build` needs to know about the "trace" of one interval.
struct IntervalSource {
    meta: TraceMeta,
    processes: BTreeMap<u32, ProcessInfo>,
    lost: u64,
}

impl TraceSource for IntervalSource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }
    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        None
    }
    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        &self.processes
    }
    fn notes(&self) -> &[Note] {
        &[]
    }
    fn lost(&self) -> Option<u64> {
        Some(self.lost)
    }
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Cuts a time-ordered stream into intervals of `interval_ns` starting at `start_ns`.
pub struct IntervalBuilder {
    devices: Vec<DeviceInfo>,
    opts: Options,
    interval_ns: u64,
    window: Window,
    /// One pass for the whole session, every event kept.
    driver: Driver,
    sinks: DevMap<IntervalSink>,
    /// The last pid added to `processes` (most events come in runs from one task).
    last_pid: u32,
    /// Tasks seen (comm, cgroup), for cgroup paths in the reports.
    pub processes: BTreeMap<u32, ProcessInfo>,
    lost_total: u64,
    untraced_total: u64,
    lost_at_start: u64,
    late: u64,
    session_start: u64,
}

impl IntervalBuilder {
    pub fn new(devices: Vec<DeviceInfo>, start_ns: u64, interval_ns: u64) -> Self {
        let opts = Options {
            top_intervals: 5,
            ..Default::default()
        };
        let window = Window {
            from: start_ns,
            to: start_ns + interval_ns.max(1),
        };
        let mut b = IntervalBuilder {
            driver: Driver::new(&devices, Filter::ALL),
            devices,
            opts,
            interval_ns: interval_ns.max(1),
            window,
            sinks: DevMap::default(),
            last_pid: 0,
            processes: BTreeMap::new(),
            lost_total: 0,
            untraced_total: 0,
            lost_at_start: 0,
            late: 0,
            session_start: start_ns,
        };
        b.open(start_ns);
        b
    }

    /// Where the first interval started.
    pub fn start_ns(&self) -> u64 {
        self.session_start
    }

    /// The interval being filled.
    pub fn window(&self) -> Window {
        self.window
    }

    fn open(&mut self, from: u64) {
        self.window = Window {
            from,
            to: from + self.interval_ns,
        };
        self.sinks.take_entries();
        for info in &self.devices {
            self.sinks
                .insert(info.dev, IntervalSink::new(&self.opts, self.window, None));
        }
        for (dev, state) in self.driver.timeline().device_states() {
            self.sinks.insert(
                dev,
                IntervalSink::new(&self.opts, self.window, Some((dev, state))),
            );
        }
        self.lost_at_start = self.lost_total;
    }

    /// The kernel's cumulative loss counter, as last read.
    pub fn set_lost(&mut self, lost_total: u64) {
        self.lost_total = lost_total;
    }

    /// The completion check's count so far (see [`Snapshot::untraced_total`]).
    pub fn set_untraced(&mut self, untraced_total: u64) {
        self.untraced_total = untraced_total;
    }

    /// One event, in time order. Intervals it moves past are closed into `out`.
    pub fn push(&mut self, ev: &Event, out: &mut Vec<Snapshot>) {
        self.advance_to(ev.ts_ns, out);
        if ev.ts_ns < self.window.from && ev.ts_ns >= self.session_start {
            // Too late for its interval: the timeline still needs it to stay consistent.
            // (Events from before the session's start, captured while the programs were
            // being attached, only set up the timeline's state.)
            self.late += 1;
        }
        // Submitters are what the report names; they are the tasks of Q events (a D or C
        // runs in whoever dispatched or completed it, and would only cost a lookup).
        if ev.kind == EventKind::Queue
            && ev.pid != self.last_pid
            && ev.pid != 0
            && let std::collections::btree_map::Entry::Vacant(e) = self.processes.entry(ev.pid)
        {
            e.insert(ProcessInfo {
                pid: ev.pid,
                tgid: ev.tgid,
                comm: ev.comm,
                cgroup_id: ev.cgroup_id,
                cgroup_path: None,
            });
        }
        if ev.kind == EventKind::Queue {
            self.last_pid = ev.pid;
        }
        let mut router = Router {
            sinks: &mut self.sinks,
            opts: &self.opts,
            window: self.window,
        };
        self.driver.push(ev, &mut router);
    }

    /// Every event before `ts` has been pushed: close each interval that ends at or before it.
    pub fn advance_to(&mut self, ts: u64, out: &mut Vec<Snapshot>) {
        while ts >= self.window.to {
            out.push(self.close());
        }
    }

    fn close(&mut self) -> Snapshot {
        let window = self.window;
        let states: FxHashMap<Dev, DeviceState> = self
            .driver
            .timeline()
            .device_states()
            .map(|(d, s)| (d, s.clone()))
            .collect();
        let lost = self.lost_total - self.lost_at_start.min(self.lost_total);
        let mut sinks = self.sinks.take_entries();
        sinks.sort_by_key(|(d, _)| *d);
        let mut devices = Vec::new();
        for (dev, mut sink) in sinks {
            sink.agg.finish();
            let info = self
                .devices
                .iter()
                .find(|d| d.dev == dev)
                .cloned()
                .unwrap_or_else(|| DeviceInfo {
                    name: format!("{}:{}", dev.major, dev.minor),
                    dev,
                    request_based: true,
                    ..Default::default()
                });
            let source = IntervalSource {
                meta: TraceMeta {
                    path: PathBuf::from("(live)"),
                    format: TraceFormat::Recording,
                    identity: Identity::Exact,
                    devices: vec![info.clone()],
                    kernel_release: None,
                    notes: Vec::new(),
                },
                processes: self.processes.clone(),
                lost,
            };
            let report = report::build(&sink.agg, &Anomalies::default(), &source);
            let state = states.get(&dev).cloned().unwrap_or_default();
            let (hist, recent) = sink.take_extras();
            devices.push(DeviceSnapshot {
                info,
                report,
                pending_now: state.pending,
                in_driver_now: state.in_driver,
                hist,
                recent,
            });
        }
        self.open(window.to);
        Snapshot {
            from_ns: window.from,
            to_ns: window.to,
            devices,
            lost,
            lost_total: self.lost_total,
            untraced_total: self.untraced_total,
            late_total: self.late,
        }
    }
}

/// Arrival order -> time order for a stream that never ends: events from different CPUs
/// reach the ring buffer slightly out of order. `record::TimeOrdered` does this for a pulled
/// iterator that ends; here events are pushed in batches and released up to a watermark
/// (the collector's clock minus a delay), so an interval closes once nothing older can
/// still come.
///
/// Each CPU sends its events in batches, in the order they happened on it: so each CPU's
/// events form a run, and releasing is a merge of a few runs (a comparison per CPU per
/// event). A single run with a heap for the rest was tried: with two CPUs, every other batch
/// went to the heap, which held ~100 ms of events, and the heap's moves were a third of the
/// collector's time. The few events that are out of order within their CPU (sent directly
/// while that CPU's batch was in use) still go to a heap. The order released is by (time,
/// arrival), as before.
#[derive(Default)]
pub struct Reorder {
    /// Per CPU, its in-order arrivals with their arrival numbers.
    runs: Vec<VecDeque<(u64, Event)>>,
    /// Stragglers, by (time, arrival).
    held: BinaryHeap<Reverse<(u64, u64, EventBox)>>,
    arrivals: u64,
    len: usize,
}

/// An event ordered only by the key beside it in the heap.
struct EventBox(Event);

impl PartialEq for EventBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for EventBox {}
impl PartialOrd for EventBox {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for EventBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// CPUs beyond this share the heap (a bound on the runs kept, whatever `cpu` says).
const MAX_RUNS: usize = 1024;

impl Reorder {
    pub fn push(&mut self, ev: Event) {
        self.arrivals += 1;
        self.len += 1;
        let cpu = usize::from(ev.cpu);
        if cpu < MAX_RUNS {
            if self.runs.len() <= cpu {
                self.runs.resize_with(cpu + 1, VecDeque::new);
            }
            let run = &mut self.runs[cpu];
            if run.back().is_none_or(|(_, b)| b.ts_ns <= ev.ts_ns) {
                run.push_back((self.arrivals, ev));
                return;
            }
        }
        self.held
            .push(Reverse((ev.ts_ns, self.arrivals, EventBox(ev))));
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Hands every held event older than `watermark` to `f`, oldest first.
    pub fn release(&mut self, watermark: u64, mut f: impl FnMut(&Event)) {
        loop {
            // The oldest (time, arrival) among the runs' heads and the heap's top.
            let mut best: Option<((u64, u64), Option<usize>)> =
                self.held.peek().map(|Reverse((t, a, _))| ((*t, *a), None));
            for (cpu, run) in self.runs.iter().enumerate() {
                if let Some((a, ev)) = run.front() {
                    let key = (ev.ts_ns, *a);
                    if best.is_none_or(|(b, _)| key < b) {
                        best = Some((key, Some(cpu)));
                    }
                }
            }
            let Some(((ts, _), from)) = best else {
                return;
            };
            if ts >= watermark {
                return;
            }
            self.len -= 1;
            match from {
                Some(cpu) => {
                    let (_, ev) = self.runs[cpu].pop_front().expect("peeked");
                    f(&ev);
                }
                None => {
                    let Reverse((_, _, EventBox(ev))) = self.held.pop().expect("peeked");
                    f(&ev);
                }
            }
        }
    }
}
