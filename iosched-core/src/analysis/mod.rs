//! Numbers from the timeline: per device, process and cgroup, where the time went. One pass,
//! memory bounded by the number of devices, processes and cgroups (histograms, not samples).
//!
//! - [`latency`]: btt's stages and the distributions that hold them.
//! - [`bins`]: the same numbers over time, in a bounded number of bins (for plots).
//! - [`idling`]: idle-with-pending intervals and who they are attributed to.
//! - [`slices`]: runs of dispatches per owner (the scheduler's switching pattern).
//! - [`seeks`]: seek distances.
//! - [`report`]: the report's data (what `--json` prints) and how it is assembled.
//!
//! Owns: aggregation. Must not: read files, print.

pub mod bins;
pub mod by_scheduler;
pub mod idling;
pub mod latency;
pub mod loghist;
pub mod report;
pub mod seeks;
pub mod slices;

use rustc_hash::FxHashMap;

use crate::{
    devmap::DevMap,
    driver::{self, Filter, TraceSink},
    event::{Dev, Event, EventKind, ReqFlags},
    source::{InputError, TraceSource},
    timeline::{Anomalies, BioLife, DeviceState, Direction, LifeSink, RequestLife, Submitter},
};

use idling::{IdleTotals, IdleTracker};
use latency::{Latency, Stage, Stages};
use seeks::Seeks;
use slices::{SliceStats, SliceTracker};

pub use report::Report;

/// What a report covers.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Start of the window, ns after the trace's first event.
    pub from_ns: Option<u64>,
    /// End of the window, ns after the trace's first event.
    pub to_ns: Option<u64>,
    /// Only these devices (names like `loop0`, or `major:minor`); empty: all.
    pub devices: Vec<String>,
    /// Only I/O submitted by these (process, cgroup and latency sections; device totals stay
    /// whole).
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    /// A cgroup path (substring match) or numeric id.
    pub cgroups: Vec<String>,
    /// Slices by cgroup instead of by process.
    pub slices_by_cgroup: bool,
    /// How many of the longest idle-with-pending intervals to list.
    pub top_intervals: usize,
    /// Idle-with-pending gaps shorter than this are block-layer transit, not waste
    /// (`None`: [`DEFAULT_MIN_IDLE_NS`]).
    pub min_idle_ns: Option<u64>,
}

/// See [`idling`]: far below any scheduler's idle timer, far above a request's transit.
pub const DEFAULT_MIN_IDLE_NS: u64 = 50_000;

/// The analyzed time range, absolute trace ns, half open [from, to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub from: u64,
    pub to: u64,
}

impl Window {
    pub const ALL: Window = Window {
        from: 0,
        to: u64::MAX,
    };

    pub fn contains(&self, ts: u64) -> bool {
        ts >= self.from && ts < self.to
    }

    /// Length of [a, b) inside the window.
    pub fn clip(&self, a: u64, b: u64) -> u64 {
        b.min(self.to).saturating_sub(a.max(self.from))
    }
}

/// Reads a whole trace and returns its report.
pub fn analyze(source: &mut dyn TraceSource, opts: &Options) -> Result<Report, InputError> {
    analyze_between(source, opts, 0, u64::MAX)
}

/// [`analyze`] of the events from `from_ns` to `to_ns` only (absolute, both included): an
/// analysis of the span of a workload's I/O, without the timer notes a recording holds
/// before its first request and after its last completion (which would stretch the window
/// its throughput is taken over). Unlike the report's window (`Options::from_ns`), what
/// lies outside does not exist for it: a request started before `from_ns` is not in flight.
pub fn analyze_between(
    source: &mut dyn TraceSource,
    opts: &Options,
    from_ns: u64,
    to_ns: u64,
) -> Result<Report, InputError> {
    let wanted = report::resolve_devices(&source.meta().devices, &opts.devices)?;
    let filter = Filter::ALL.devices(wanted).between(from_ns, to_ns);
    let mut agg = Aggregator::new(opts.clone());
    let anomalies = driver::drive(source, filter, &mut agg)?;
    Ok(report::build(&agg, &anomalies, source))
}

/// One pass of the report's [`Aggregator`] and [`bins::TimeBins`] (`n` bins) over the whole
/// trace, for a report with its numbers over time (`report --html`, a replay's run): the
/// aggregator as the pass left it ([`report::build`] makes the report), the bins and the
/// timeline's anomalies.
pub fn analyze_binned(
    source: &mut dyn TraceSource,
    opts: &Options,
    n: usize,
) -> Result<(Aggregator, bins::TimeBins, Anomalies), InputError> {
    let wanted = report::resolve_devices(&source.meta().devices, &opts.devices)?;
    let mut sinks = (Aggregator::new(opts.clone()), bins::TimeBins::new(opts, n));
    let anomalies = driver::drive(source, Filter::ALL.devices(wanted), &mut sinks)?;
    Ok((sinks.0, sinks.1, anomalies))
}

/// Counts by direction.
#[derive(Clone, Copy, Debug, Default)]
pub struct DirCounts {
    pub requests: u64,
    pub bytes: u64,
}

/// One device's aggregates.
#[derive(Default)]
pub struct DeviceAgg {
    pub bios_queued: u64,
    pub requests_dispatched: u64,
    /// With data (btt leaves zero-byte flushes out of its #Q and #D).
    pub data_bios_queued: u64,
    pub data_requests_dispatched: u64,
    pub dispatched_bytes: u64,
    pub completed: [DirCounts; 3],
    pub merges_back: u64,
    pub merges_front: u64,
    pub merges_request: u64,
    pub stages: Stages,
    pub stages_by_dir: [Stages; 3],
    last_q: Option<u64>,
    pub q_seeks: Seeks,
    pub d_seeks: Seeks,
    pub active_at_q_sum: u64,
    pub plugs: u64,
    pub unplugs_explicit: u64,
    pub unplugs_timer: u64,
    pub unplug_depth_sum: u64,
    // Time integrals over the window.
    last_ts: Option<u64>,
    in_driver: u32,
    pending: u32,
    pub driver_area: u128,
    pub pending_area: u128,
    pub max_in_driver: u32,
    pub max_pending: u32,
    pub busy_ns: u64,
    pub idle_empty_ns: u64,
    pub idle: IdleTracker,
    slices: SliceTracker,
    pub errors: u64,
}

/// One process's aggregates (keyed by pid: a task).
pub struct ProcessAgg {
    pub who: Submitter,
    pub bios_queued: u64,
    pub completed: [DirCounts; 3],
    pub bytes_by_dir: [u64; 3],
    pub bytes: u64,
    pub stages: Stages,
    pub stages_by_dir: [Stages; 3],
    pub dispatched: u64,
    pub sequential: u64,
    last_d_end: Option<(Dev, u64)>,
    last_q: Option<u64>,
    pub think: Latency,
    in_flight: u32,
    last_completion: Option<u64>,
    pub devices: Vec<Dev>,
}

/// One cgroup's aggregates.
#[derive(Default)]
pub struct CgroupAgg {
    pub bios_queued: u64,
    pub requests: u64,
    pub bytes: u64,
    pub pids: Vec<u32>,
    pub stages: Stages,
}

/// The finest grain stage samples are recorded at; device, process and cgroup distributions
/// are merged from these cells at the end (one histogram update per sample instead of five).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Cell {
    dev: Dev,
    /// 0: submitter unknown.
    pid: u32,
    cgroup: u64,
    dir: u8,
}

/// The [`LifeSink`] that aggregates everything a report shows.
pub struct Aggregator {
    cells: FxHashMap<Cell, Stages>,
    pub opts: Options,
    pub window: Window,
    pub first_ts: Option<u64>,
    pub last_ts: u64,
    pub events: u64,
    /// The first and last block I/O event in the window (a bio queued, a request inserted,
    /// issued or completed): the span of the I/O itself, which timer and scheduler notes
    /// before and after it do not stretch.
    pub io_first_ns: Option<u64>,
    pub io_last_ns: u64,
    pub devices: DevMap<DeviceAgg>,
    pub processes: FxHashMap<u32, ProcessAgg>,
    pub cgroups: FxHashMap<u64, CgroupAgg>,
    pub idle: IdleTotals,
    pub slices: FxHashMap<u64, SliceStats>,
}

impl Aggregator {
    pub fn new(opts: Options) -> Aggregator {
        let top = opts.top_intervals;
        let min_idle = opts.min_idle_ns.unwrap_or(DEFAULT_MIN_IDLE_NS);
        Aggregator {
            cells: FxHashMap::default(),
            opts,
            window: Window::ALL,
            first_ts: None,
            last_ts: 0,
            events: 0,
            io_first_ns: None,
            io_last_ns: 0,
            devices: DevMap::default(),
            processes: FxHashMap::default(),
            cgroups: FxHashMap::default(),
            idle: IdleTotals::new(top, min_idle),
            slices: FxHashMap::default(),
        }
    }

    /// An aggregator for the absolute window `window` of a stream already under way (the live
    /// view's intervals): `states` is each device's state at `window.from`, as the timeline
    /// holds it then, so queue depths, utilization and idling start from what is in flight
    /// instead of from an empty device. Events before `window.from` must not be given to it;
    /// the window is taken as covered to its end (`effective_window` is `window`, even if
    /// the last events come earlier).
    pub fn starting_from<'a>(
        opts: Options,
        window: Window,
        states: impl IntoIterator<Item = (Dev, &'a DeviceState)>,
    ) -> Aggregator {
        let mut agg = Aggregator::new(opts);
        agg.window = window;
        agg.first_ts = Some(window.from);
        agg.last_ts = window.to;
        for (dev, state) in states {
            agg.device_state(dev, window.from, state);
        }
        agg
    }

    /// [`io_first_ns`](Self::io_first_ns) to [`io_last_ns`](Self::io_last_ns); `None`
    /// without block I/O in the window.
    pub fn io_span_ns(&self) -> Option<u64> {
        self.io_first_ns.map(|f| self.io_last_ns.saturating_sub(f))
    }

    /// The window actually covered: the requested one cut to the trace.
    pub fn effective_window(&self) -> Window {
        let first = self.first_ts.unwrap_or(0);
        Window {
            from: self.window.from.max(first),
            to: self.window.to.min(self.last_ts.max(first)),
        }
    }

    /// Whether the filters keep `s`'s I/O. Most passes have none: that test is inlined into
    /// every per-event caller, the filters' own checks are not.
    #[inline(always)]
    fn selected(&self, s: &Submitter) -> bool {
        let o = &self.opts;
        (o.pids.is_empty() && o.comms.is_empty() && o.cgroups.is_empty())
            || self.selected_by_filters(s)
    }

    #[inline(never)]
    fn selected_by_filters(&self, s: &Submitter) -> bool {
        let o = &self.opts;
        (o.pids.is_empty() || o.pids.contains(&s.pid) || o.pids.contains(&s.tgid))
            && (o.comms.is_empty() || o.comms.iter().any(|c| *c == s.comm.as_str()))
            && (o.cgroups.is_empty()
                || o.cgroups
                    .iter()
                    .any(|c| c.parse::<u64>().ok() == Some(s.cgroup_id)))
    }

    /// Cgroup filters by path need the process table; resolved ids are added here.
    pub fn add_cgroup_ids(&mut self, ids: impl IntoIterator<Item = u64>) {
        self.opts
            .cgroups
            .extend(ids.into_iter().map(|i| i.to_string()));
    }

    fn device(&mut self, dev: Dev) -> &mut DeviceAgg {
        device_entry(&mut self.devices, self.window, dev)
    }

    fn process(&mut self, s: &Submitter) -> &mut ProcessAgg {
        self.processes.entry(s.pid).or_insert_with(|| ProcessAgg {
            who: *s,
            bios_queued: 0,
            completed: Default::default(),
            bytes_by_dir: [0; 3],
            bytes: 0,
            stages: Stages::default(),
            stages_by_dir: Default::default(),
            dispatched: 0,
            sequential: 0,
            last_d_end: None,
            last_q: None,
            think: Latency::default(),
            in_flight: 0,
            last_completion: None,
            devices: Vec::new(),
        })
    }

    fn slice_owner(&self, s: Option<&Submitter>) -> u64 {
        match s {
            Some(s) if self.opts.slices_by_cgroup => s.cgroup_id,
            Some(s) => u64::from(s.pid),
            None => 0,
        }
    }

    /// Integrates the device's state up to `ts`.
    fn integrate(window: &Window, d: &mut DeviceAgg, ts: u64) {
        let Some(last) = d.last_ts else {
            d.last_ts = Some(ts);
            return;
        };
        if ts <= last {
            return;
        }
        let dt = window.clip(last, ts);
        d.driver_area += u128::from(dt) * u128::from(d.in_driver);
        d.pending_area += u128::from(dt) * u128::from(d.pending);
        if d.in_driver > 0 {
            d.busy_ns += dt;
        } else if d.pending == 0 {
            d.idle_empty_ns += dt;
        }
        d.last_ts = Some(ts);
    }

    /// The trace ended: integrate to the window's end, close open intervals and slices.
    pub fn finish(&mut self) {
        for (cell, stages) in std::mem::take(&mut self.cells) {
            let dir = usize::from(cell.dir);
            let d = device_entry(&mut self.devices, self.window, cell.dev);
            d.stages.merge(&stages);
            d.stages_by_dir[dir].merge(&stages);
            if cell.pid == 0 {
                continue;
            }
            // Process entries exist only for selected submitters.
            if let Some(p) = self.processes.get_mut(&cell.pid) {
                p.stages.merge(&stages);
                p.stages_by_dir[dir].merge(&stages);
                self.cgroups
                    .entry(cell.cgroup)
                    .or_default()
                    .stages
                    .merge(&stages);
            }
        }
        let end = self.effective_window().to;
        let window = self.window;
        for (dev, d) in self.devices.iter_mut() {
            Self::integrate(&window, d, end);
            d.idle.close(*dev, end, &window, &mut self.idle);
            d.slices.finish(&mut self.slices);
        }
    }
}

fn device_entry(devices: &mut DevMap<DeviceAgg>, window: Window, dev: Dev) -> &mut DeviceAgg {
    devices.get_or_insert_with(dev, || DeviceAgg {
        // The device is taken as empty from the window's start until its first event.
        last_ts: Some(window.from),
        ..Default::default()
    })
}

fn dir_index(d: Direction) -> usize {
    d as usize
}

/// Every event passes [`see`](TraceSink::see) before the timeline takes it: the window is
/// fixed by the first.
impl TraceSink for Aggregator {
    fn see(&mut self, ev: &Event) {
        if self.first_ts.is_none() {
            self.first_ts = Some(ev.ts_ns);
            let rel = |r: Option<u64>, dflt: u64| r.map_or(dflt, |r| ev.ts_ns.saturating_add(r));
            self.window = Window {
                from: rel(self.opts.from_ns, ev.ts_ns),
                to: rel(self.opts.to_ns, u64::MAX),
            };
        }
        self.last_ts = self.last_ts.max(ev.ts_ns);
        if self.window.contains(ev.ts_ns) {
            self.events += 1;
            if matches!(
                ev.kind,
                EventKind::Queue
                    | EventKind::GetRq
                    | EventKind::Insert
                    | EventKind::Issue
                    | EventKind::Complete
                    | EventKind::BioComplete
            ) {
                self.io_first_ns = Some(self.io_first_ns.map_or(ev.ts_ns, |f| f.min(ev.ts_ns)));
                self.io_last_ns = self.io_last_ns.max(ev.ts_ns);
            }
        }
    }

    fn end(&mut self, _: &Anomalies) {
        self.finish();
    }
}

impl LifeSink for Aggregator {
    fn event(&mut self, ev: &Event) {
        if !self.window.contains(ev.ts_ns) {
            return;
        }
        let kind = ev.kind;
        if !matches!(
            kind,
            EventKind::BackMerge
                | EventKind::FrontMerge
                | EventKind::RqMerge
                | EventKind::Plug
                | EventKind::Unplug
                | EventKind::Complete
                | EventKind::BioComplete
        ) {
            return;
        }
        let d = self.device(ev.dev);
        match kind {
            EventKind::BackMerge => d.merges_back += 1,
            EventKind::FrontMerge => d.merges_front += 1,
            EventKind::RqMerge => d.merges_request += 1,
            EventKind::Plug => d.plugs += 1,
            EventKind::Unplug => {
                if ev.error == 1 {
                    d.unplugs_explicit += 1;
                } else {
                    d.unplugs_timer += 1;
                }
                d.unplug_depth_sum += ev.aux;
            }
            EventKind::Complete | EventKind::BioComplete if ev.error != 0 => d.errors += 1,
            _ => {}
        }
    }

    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        if !self.window.contains(ev.ts_ns) {
            return;
        }
        let d = self.device(ev.dev);
        d.bios_queued += 1;
        d.data_bios_queued += u64::from(ev.bytes > 0);
        d.q_seeks.add(ev.sector, u64::from(ev.sectors()));
        d.active_at_q_sum += u64::from(state.pending.saturating_sub(1));
        // Saturating: events out of time order (a damaged trace) are no negative gap.
        if let Some(last) = d.last_q.replace(ev.ts_ns) {
            d.stages.record(Stage::Q2Q, ev.ts_ns.saturating_sub(last));
        }
        let s = Submitter::of(ev);
        if !self.selected(&s) {
            return;
        }
        let sync = ev.op == crate::event::Op::Read || ev.flags.has(ReqFlags::SYNC);
        let p = self.process(&s);
        p.bios_queued += 1;
        if !p.devices.contains(&ev.dev) {
            p.devices.push(ev.dev);
        }
        if let Some(last) = p.last_q.replace(ev.ts_ns) {
            p.stages.record(Stage::Q2Q, ev.ts_ns.saturating_sub(last));
        }
        if p.in_flight == 0
            && sync
            && let Some(c) = p.last_completion
            && ev.ts_ns >= c
        {
            p.think.record(ev.ts_ns.saturating_sub(c));
        }
        p.in_flight += 1;
        let c = self.cgroups.entry(s.cgroup_id).or_default();
        c.bios_queued += 1;
        if !c.pids.contains(&s.pid) && c.pids.len() < 64 {
            c.pids.push(s.pid);
        }
    }

    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, _state: &DeviceState) {
        if !self.window.contains(ev.ts_ns) {
            return;
        }
        let owner = self.slice_owner(submitter);
        let sectors = u64::from(ev.sectors());
        let d = device_entry(&mut self.devices, self.window, ev.dev);
        d.requests_dispatched += 1;
        d.data_requests_dispatched += u64::from(ev.bytes > 0);
        d.dispatched_bytes += u64::from(ev.bytes);
        d.d_seeks.add(ev.sector, sectors);
        d.slices
            .issued(owner, ev.ts_ns, ev.sector, sectors, &mut self.slices);
        if let Some(s) = submitter
            && self.selected(s)
        {
            let p = self.process(s);
            p.dispatched += 1;
            if p.last_d_end == Some((ev.dev, ev.sector)) {
                p.sequential += 1;
            }
            p.last_d_end = Some((ev.dev, ev.sector + sectors));
        }
    }

    fn bio_done(&mut self, bio: &BioLife) {
        let in_window = self.window.contains(bio.c);
        let dir = dir_index(Direction::of(bio.op));
        if in_window {
            let cell = Cell {
                dev: bio.dev,
                pid: bio.submitter.map_or(0, |s| s.pid),
                cgroup: bio.submitter.map_or(0, |s| s.cgroup_id),
                dir: dir as u8,
            };
            self.cells.entry(cell).or_default().record_bio(bio);
        }
        let Some(s) = bio.submitter.filter(|s| self.selected(s)) else {
            return;
        };
        let p = self.process(&s);
        if bio.q.is_some() {
            p.in_flight = p.in_flight.saturating_sub(1);
        }
        p.last_completion = Some(bio.c);
        if !in_window {
            return;
        }
        p.bytes += u64::from(bio.bytes);
        p.bytes_by_dir[dir] += u64::from(bio.bytes);
        self.cgroups.entry(s.cgroup_id).or_default().bytes += u64::from(bio.bytes);
    }

    fn request_done(&mut self, rq: &RequestLife) {
        let owner = self.slice_owner(rq.submitter.as_ref());
        let window = self.window;
        let d = self.device(rq.dev);
        d.idle.completed(rq.submitter.map_or(0, |s| s.pid));
        d.slices.completed(owner, rq.c);
        if !window.contains(rq.c) {
            return;
        }
        let dir = dir_index(Direction::of(rq.op));
        d.completed[dir].requests += 1;
        d.completed[dir].bytes += u64::from(rq.bytes);
        if let Some(s) = rq.submitter.filter(|s| self.selected(s)) {
            let p = self.process(&s);
            p.completed[dir].requests += 1;
            p.completed[dir].bytes += u64::from(rq.bytes);
            self.cgroups.entry(s.cgroup_id).or_default().requests += 1;
        }
    }

    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        let window = self.window;
        let d = device_entry(&mut self.devices, window, dev);
        Self::integrate(&window, d, ts);
        let was_idle_pending = d.in_driver == 0 && d.pending > 0;
        d.in_driver = state.in_driver;
        d.pending = state.pending;
        if window.contains(ts) {
            d.max_in_driver = d.max_in_driver.max(state.in_driver);
            d.max_pending = d.max_pending.max(state.pending);
        }
        d.idle
            .update(dev, ts, was_idle_pending, state, &window, &mut self.idle);
    }
}

#[cfg(test)]
mod tests;
