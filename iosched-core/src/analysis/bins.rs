//! The report's numbers over time, for `report --html`'s plots: a fixed number of time bins
//! whatever the trace's length, so the page's size and drawing cost are bounded by the
//! screen, not by the number of events.
//!
//! One pass beside the [`Aggregator`](super::Aggregator) (a pair of sinks): the axis starts
//! at the window's start with 1 ns bins and doubles its bin width, merging neighbours, each
//! time an event falls past its end, so it always holds the whole window in at most
//! [`Axis::n`] bins and at least half of them once the trace is longer than `n` ns.
//!
//! Per process (a lane of the timeline): time its bios spent in the scheduler (Q -> D) and in
//! the device (D -> C) within each bin, as ns summed over bios (so per bin the mean number
//! in each part is that over the bin's width), and how many bios were started at all, so a
//! bio shorter than a bin still marks its bin; requests completed and bytes, counted the way
//! the report counts them (requests by their first bio's submitter, bytes by each bio's).
//! Per device: queue depth in the scheduler and in the driver (time integral and maximum per
//! bin), idling waste (idle-with-pending intervals at least the report's threshold long),
//! service slices (time the device was given to each owner, as
//! [`slices`](super::slices) defines a slice), completions; and a decimated sector-against-time
//! grid of dispatches (seekwatcher's view) with the process most of each cell's dispatches
//! came from. For short traces the bios themselves are kept too (at most [`EXACT_CAP`]), for
//! exact drawing when zoomed in.
//!
//! Owns: binning. Must not: read files, lay out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    event::{Dev, Event},
    timeline::{BioLife, DeviceState, Direction, LifeSink, RequestLife, Submitter},
};

use super::{DEFAULT_MIN_IDLE_NS, Options, Window};

/// Time bins of the plots: a few per pixel of a wide screen.
pub const DEFAULT_BINS: usize = 2048;
/// Time columns of the sector grid (one per [`SECTOR_COL_BINS`] time bins).
pub const SECTOR_COL_BINS: usize = 8;
/// Rows of the sector grid.
pub const SECTOR_ROWS: usize = 128;
/// Bios kept one by one for exact drawing; a longer trace keeps none (bins only).
pub const EXACT_CAP: usize = 20_000;

/// `n` bins of `2^shift` ns from `start_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Axis {
    pub start_ns: u64,
    pub shift: u32,
    pub n: usize,
}

impl Axis {
    pub fn width_ns(&self) -> u64 {
        1u64 << self.shift
    }

    /// The first instant past the last bin.
    pub fn end_ns(&self) -> u64 {
        self.start_ns
            .saturating_add((self.n as u64).saturating_mul(self.width_ns()))
    }

    /// The bin of `ts` (which must lie in [start, end)).
    #[inline]
    pub fn index(&self, ts: u64) -> usize {
        ((ts - self.start_ns) >> self.shift) as usize
    }

    /// Calls `f(bin, overlap_ns)` for each bin [a, b) overlaps, b > a, both within the axis.
    #[inline]
    fn spread(&self, a: u64, b: u64, mut f: impl FnMut(usize, u64)) {
        let (first, last) = (self.index(a), self.index(b - 1));
        for i in first..=last {
            let lo = self.start_ns + ((i as u64) << self.shift);
            let hi = lo + self.width_ns();
            f(i, b.min(hi) - a.max(lo));
        }
    }
}

/// Halves a series' resolution: bin i becomes bins 2i and 2i+1 combined.
fn merge_pairs<T: Copy + Default>(v: &mut [T], combine: impl Fn(T, T) -> T) {
    let n = v.len();
    for i in 0..n / 2 {
        v[i] = combine(v[2 * i], v[2 * i + 1]);
    }
    for x in &mut v[n / 2..] {
        *x = T::default();
    }
}

fn add<T: std::ops::Add<Output = T>>(a: T, b: T) -> T {
    a + b
}

/// One process's lane.
#[derive(Clone, Debug, Serialize)]
pub struct Lane {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// Per bin: ns its bios spent queued but not issued (Q -> D), summed over bios.
    pub sched_ns: Vec<u64>,
    /// Per bin: ns its bios spent issued but not completed (D -> C), summed over bios.
    pub device_ns: Vec<u64>,
    /// Per bin: bios whose life (Q -> C) starts in the bin (at Q, or at the window's start).
    /// With the two time sums, which are non-zero in every bin a life overlaps, a bin any
    /// bio touched is never empty, also for a life of zero length.
    pub started: Vec<u32>,
    /// Per bin: requests completed whose first bio it queued.
    pub requests: Vec<u32>,
    /// Per bin: bytes of its bios completed.
    pub bytes: Vec<u64>,
}

impl Lane {
    fn new(s: &Submitter, n: usize) -> Lane {
        Lane {
            pid: s.pid,
            tgid: s.tgid,
            comm: s.comm.as_str().into_owned(),
            sched_ns: vec![0; n],
            device_ns: vec![0; n],
            started: vec![0; n],
            requests: vec![0; n],
            bytes: vec![0; n],
        }
    }

    fn halve(&mut self) {
        merge_pairs(&mut self.sched_ns, add);
        merge_pairs(&mut self.device_ns, add);
        merge_pairs(&mut self.started, add);
        merge_pairs(&mut self.requests, add);
        merge_pairs(&mut self.bytes, add);
    }
}

/// One device's series.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceBins {
    pub dev: String,
    /// Per bin: integral of bios waiting (queued, not issued) over time, count x ns.
    pub pending_area: Vec<u64>,
    /// Per bin: integral of requests in the driver over time, count x ns.
    pub driver_area: Vec<u64>,
    pub max_pending: Vec<u32>,
    pub max_in_driver: Vec<u32>,
    /// Per bin: ns of idle-with-pending intervals at least the threshold long.
    pub idle_ns: Vec<u64>,
    /// Per bin: requests completed and their bytes (all submitters).
    pub requests: Vec<u32>,
    pub bytes: Vec<u64>,
    /// Per owner (pid, or cgroup id with `slices_by_cgroup`; 0 unknown): ns of the bin the
    /// device was given to it (its slices).
    pub slices: BTreeMap<u64, Vec<u64>>,
    #[serde(skip)]
    state: DevTrack,
}

#[derive(Clone, Debug, Default)]
struct DevTrack {
    last_ts: Option<u64>,
    in_driver: u32,
    pending: u32,
    idle_since: Option<u64>,
    /// Open slice: owner, first dispatch, last dispatch.
    slice: Option<(u64, u64, u64)>,
}

impl DeviceBins {
    fn new(dev: Dev, n: usize) -> DeviceBins {
        DeviceBins {
            dev: format!("{}:{}", dev.major, dev.minor),
            pending_area: vec![0; n],
            driver_area: vec![0; n],
            max_pending: vec![0; n],
            max_in_driver: vec![0; n],
            idle_ns: vec![0; n],
            requests: vec![0; n],
            bytes: vec![0; n],
            slices: BTreeMap::new(),
            state: DevTrack::default(),
        }
    }

    fn halve(&mut self) {
        merge_pairs(&mut self.pending_area, add);
        merge_pairs(&mut self.driver_area, add);
        merge_pairs(&mut self.max_pending, u32::max);
        merge_pairs(&mut self.max_in_driver, u32::max);
        merge_pairs(&mut self.idle_ns, add);
        merge_pairs(&mut self.requests, add);
        merge_pairs(&mut self.bytes, add);
        for v in self.slices.values_mut() {
            merge_pairs(v, add);
        }
    }
}

/// A cell of the sector grid: dispatches, and the pid most of them came from (Boyer-Moore
/// majority vote: exact when one pid has more than half, some frequent pid otherwise).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SectorCell {
    pub count: u32,
    pub pid: u32,
    votes: u32,
}

impl SectorCell {
    fn add(&mut self, pid: u32) {
        self.count += 1;
        if self.votes == 0 {
            self.pid = pid;
            self.votes = 1;
        } else if self.pid == pid {
            self.votes += 1;
        } else {
            self.votes -= 1;
        }
    }

    fn combine(a: SectorCell, b: SectorCell) -> SectorCell {
        let (hi, lo) = if a.votes >= b.votes { (a, b) } else { (b, a) };
        let votes = if hi.pid == lo.pid {
            hi.votes + lo.votes
        } else {
            hi.votes - lo.votes
        };
        SectorCell {
            count: a.count + b.count,
            pid: if hi.count == 0 { lo.pid } else { hi.pid },
            votes,
        }
    }
}

/// Dispatches by time column and sector row, reads and writes apart (other ops left out).
#[derive(Clone, Debug, Serialize)]
pub struct SectorGrid {
    pub cols: usize,
    pub rows: usize,
    /// Sectors per row: `2^row_shift`.
    pub row_shift: u32,
    /// Row-major (`row * cols + col`), `cols * rows` cells.
    #[serde(skip)]
    pub read: Vec<SectorCell>,
    #[serde(skip)]
    pub write: Vec<SectorCell>,
}

impl SectorGrid {
    fn new(cols: usize, rows: usize) -> SectorGrid {
        SectorGrid {
            cols,
            rows,
            row_shift: 0,
            read: vec![SectorCell::default(); cols * rows],
            write: vec![SectorCell::default(); cols * rows],
        }
    }

    fn halve_cols(&mut self) {
        let cols = self.cols;
        for g in [&mut self.read, &mut self.write] {
            for row in g.chunks_mut(cols) {
                merge_pairs(row, SectorCell::combine);
            }
        }
    }

    fn halve_rows(&mut self) {
        let (cols, rows) = (self.cols, self.rows);
        for g in [&mut self.read, &mut self.write] {
            for r in 0..rows / 2 {
                for c in 0..cols {
                    g[r * cols + c] =
                        SectorCell::combine(g[2 * r * cols + c], g[(2 * r + 1) * cols + c]);
                }
            }
            for x in &mut g[rows / 2 * cols..] {
                *x = SectorCell::default();
            }
        }
        self.row_shift += 1;
    }

    fn add(&mut self, col: usize, sector: u64, write: bool, pid: u32) {
        while (sector >> self.row_shift) >= self.rows as u64 {
            self.halve_rows();
        }
        let i = (sector >> self.row_shift) as usize * self.cols + col;
        if write {
            self.write[i].add(pid);
        } else {
            self.read[i].add(pid);
        }
    }

    /// Non-empty cells as flat `[col, row, count, pid, ...]`.
    pub fn cells(&self, write: bool) -> Vec<u64> {
        let g = if write { &self.write } else { &self.read };
        let mut out = Vec::new();
        for (i, c) in g.iter().enumerate() {
            if c.count > 0 {
                out.extend([
                    (i % self.cols) as u64,
                    (i / self.cols) as u64,
                    u64::from(c.count),
                    u64::from(c.pid),
                ]);
            }
        }
        out
    }
}

/// A bio as drawn when exact: submitter pid and its Q, D, C (absolute ns; D may be absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ExactBio {
    pub pid: u32,
    pub q: u64,
    pub d: Option<u64>,
    pub c: u64,
}

/// The [`LifeSink`] that bins a pass. Its window is the [`Aggregator`](super::Aggregator)'s
/// for the same options (relative to the first event the pass sees).
#[derive(Clone, Debug)]
pub struct TimeBins {
    opts: Options,
    window: Window,
    axis: Option<Axis>,
    n: usize,
    /// The last event's time in the window (the axis covers it).
    last_ts: u64,
    /// Where the analysis ends: the last event, or the window's end if events go past it.
    end_ns: u64,
    pub lanes: BTreeMap<u32, Lane>,
    pub devices: BTreeMap<Dev, DeviceBins>,
    pub sectors: SectorGrid,
    /// `None` once more than [`EXACT_CAP`] bios were seen.
    pub exact: Option<Vec<ExactBio>>,
}

impl TimeBins {
    /// `n` time bins (rounded up to a multiple of [`SECTOR_COL_BINS`], at least 2 columns).
    pub fn new(opts: &Options, n: usize) -> TimeBins {
        let n = n.max(2 * SECTOR_COL_BINS).next_multiple_of(SECTOR_COL_BINS);
        TimeBins {
            opts: opts.clone(),
            window: Window::ALL,
            axis: None,
            n,
            last_ts: 0,
            end_ns: 0,
            lanes: BTreeMap::new(),
            devices: BTreeMap::new(),
            sectors: SectorGrid::new(n / SECTOR_COL_BINS, SECTOR_ROWS),
            exact: Some(Vec::new()),
        }
    }

    /// The axis; `None` before any event in the window.
    pub fn axis(&self) -> Option<Axis> {
        self.axis
    }

    /// Bins up to the last event (the rest of the axis is empty).
    pub fn used_bins(&self) -> usize {
        match self.axis {
            Some(a) if self.last_ts >= a.start_ns => a.index(self.last_ts) + 1,
            _ => 0,
        }
    }

    /// The covered window: the axis' start to the last event (or the window's end).
    pub fn window(&self) -> Window {
        let from = self.axis.map_or(0, |a| a.start_ns);
        Window {
            from,
            to: self.end_ns.max(from),
        }
    }

    fn grow_to(&mut self, ts: u64) {
        let Some(axis) = self.axis.as_mut() else {
            return;
        };
        while ts >= axis.end_ns() {
            axis.shift += 1;
            for l in self.lanes.values_mut() {
                l.halve();
            }
            for d in self.devices.values_mut() {
                d.halve();
            }
            self.sectors.halve_cols();
        }
    }

    /// [a, b) cut to the window and to what the axis covers (up to the last event seen).
    fn clip(&self, a: u64, b: u64) -> Option<(Axis, u64, u64)> {
        let axis = self.axis?;
        let a = a.max(self.window.from).max(axis.start_ns);
        let b = b.min(self.window.to).min(self.last_ts.saturating_add(1));
        (b > a).then_some((axis, a, b))
    }

    fn device(&mut self, dev: Dev) -> &mut DeviceBins {
        let n = self.n;
        self.devices
            .entry(dev)
            .or_insert_with(|| DeviceBins::new(dev, n))
    }

    fn owner(&self, s: Option<&Submitter>) -> u64 {
        match s {
            Some(s) if self.opts.slices_by_cgroup => s.cgroup_id,
            Some(s) => u64::from(s.pid),
            None => 0,
        }
    }

    /// Credits [a, b) of the device to `owner`'s slices.
    fn slice_time(&mut self, dev: Dev, owner: u64, a: u64, b: u64) {
        let Some((axis, a, b)) = self.clip(a, b) else {
            return;
        };
        let n = self.n;
        let d = self.device(dev);
        let v = d.slices.entry(owner).or_insert_with(|| vec![0; n]);
        axis.spread(a, b, |i, ns| v[i] += ns);
    }

    fn idle_time(&mut self, dev: Dev, a: u64, b: u64) {
        let min = self.opts.min_idle_ns.unwrap_or(DEFAULT_MIN_IDLE_NS);
        // The report's rule (`idling`): the interval's length within the window decides.
        if self.window.clip(a, b) < min {
            return;
        }
        let Some((axis, a, b)) = self.clip(a, b) else {
            return;
        };
        let d = self.device(dev);
        axis.spread(a, b, |i, ns| d.idle_ns[i] += ns);
    }

    /// Integrates the device's depth up to `ts`.
    fn integrate(&mut self, dev: Dev, ts: u64) {
        let d = self.device(dev);
        let (Some(last), pending, in_driver) =
            (d.state.last_ts, d.state.pending, d.state.in_driver)
        else {
            d.state.last_ts = Some(ts);
            return;
        };
        if ts <= last {
            return;
        }
        d.state.last_ts = Some(ts);
        let Some((axis, a, b)) = self.clip(last, ts) else {
            return;
        };
        let d = self.device(dev);
        axis.spread(a, b, |i, ns| {
            d.pending_area[i] += ns * u64::from(pending);
            d.driver_area[i] += ns * u64::from(in_driver);
            d.max_pending[i] = d.max_pending[i].max(pending);
            d.max_in_driver[i] = d.max_in_driver[i].max(in_driver);
        });
    }

    /// The trace ended: depth integrated to the end, open idle interval and slice closed.
    pub fn finish(&mut self) {
        let end = self.end_ns;
        let devs: Vec<Dev> = self.devices.keys().copied().collect();
        for dev in devs {
            self.integrate(dev, end);
            let st = &mut self.device(dev).state;
            let idle = st.idle_since.take();
            let slice = st.slice.take();
            if let Some(since) = idle {
                self.idle_time(dev, since, end);
            }
            // As `slices`: the last slice ends at its last dispatch.
            if let Some((owner, start, last_d)) = slice {
                self.slice_time(dev, owner, start, last_d);
            }
        }
    }
}

impl crate::driver::TraceSink for TimeBins {
    fn see(&mut self, ev: &Event) {
        if self.axis.is_none() {
            let rel = |r: Option<u64>, dflt: u64| r.map_or(dflt, |r| ev.ts_ns.saturating_add(r));
            self.window = Window {
                from: rel(self.opts.from_ns, ev.ts_ns),
                to: rel(self.opts.to_ns, u64::MAX),
            };
            self.axis = Some(Axis {
                start_ns: self.window.from,
                shift: 0,
                n: self.n,
            });
        }
        if ev.ts_ns >= self.window.from {
            // Past the window only its end counts (as the Aggregator integrates to it).
            let t = ev.ts_ns.min(self.window.to - 1);
            self.grow_to(t);
            self.last_ts = self.last_ts.max(t);
            self.end_ns = self.end_ns.max(ev.ts_ns.min(self.window.to));
        }
    }

    fn end(&mut self, _: &crate::timeline::Anomalies) {
        self.finish();
    }
}

impl LifeSink for TimeBins {
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, _: &DeviceState) {
        let owner = self.owner(submitter);
        let ts = ev.ts_ns;
        let prev = self.device(ev.dev).state.slice;
        match prev {
            Some((o, start, _)) if o == owner => {
                self.device(ev.dev).state.slice = Some((o, start, ts));
            }
            _ => {
                if let Some((o, start, _)) = prev {
                    self.slice_time(ev.dev, o, start, ts);
                }
                self.device(ev.dev).state.slice = Some((owner, ts, ts));
            }
        }
        let dir = Direction::of(ev.op);
        if let (Some(axis), true, false) =
            (self.axis, self.window.contains(ts), dir == Direction::Other)
        {
            let col = axis.index(ts) / SECTOR_COL_BINS;
            let pid = submitter.map_or(0, |s| s.pid);
            self.sectors
                .add(col, ev.sector, dir == Direction::Write, pid);
        }
    }

    fn bio_done(&mut self, bio: &BioLife) {
        let Some(s) = bio.submitter else {
            return;
        };
        let n = self.n;
        let in_window = self.window.contains(bio.c);
        if let Some(q) = bio.q {
            if let Some(exact) = &mut self.exact {
                if exact.len() < EXACT_CAP {
                    exact.push(ExactBio {
                        pid: s.pid,
                        q,
                        d: bio.d,
                        c: bio.c,
                    });
                } else {
                    self.exact = None;
                }
            }
            let d = bio.d.unwrap_or(bio.c).clamp(q, bio.c);
            let sched = self.clip(q, d);
            let device = self.clip(d, bio.c);
            // Started: also for a zero-length life (C == Q).
            let life = self.clip(q, bio.c.max(q + 1));
            let lane = self.lanes.entry(s.pid).or_insert_with(|| Lane::new(&s, n));
            if let Some((axis, a, b)) = sched {
                axis.spread(a, b, |i, ns| lane.sched_ns[i] += ns);
            }
            if let Some((axis, a, b)) = device {
                axis.spread(a, b, |i, ns| lane.device_ns[i] += ns);
            }
            if let Some((axis, a, _)) = life {
                lane.started[axis.index(a)] += 1;
            }
        }
        if in_window && let Some(axis) = self.axis {
            let lane = self.lanes.entry(s.pid).or_insert_with(|| Lane::new(&s, n));
            lane.bytes[axis.index(bio.c)] += u64::from(bio.bytes);
        }
    }

    fn request_done(&mut self, rq: &RequestLife) {
        if !self.window.contains(rq.c) {
            return;
        }
        let Some(axis) = self.axis else {
            return;
        };
        let i = axis.index(rq.c);
        let n = self.n;
        let d = self.device(rq.dev);
        d.requests[i] += 1;
        d.bytes[i] += u64::from(rq.bytes);
        if let Some(s) = rq.submitter {
            self.lanes
                .entry(s.pid)
                .or_insert_with(|| Lane::new(&s, n))
                .requests[i] += 1;
        }
    }

    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        self.integrate(dev, ts);
        let st = &mut self.device(dev).state;
        st.in_driver = state.in_driver;
        st.pending = state.pending;
        let now_idle = state.idle_with_pending();
        let closed = match (st.idle_since, now_idle) {
            (None, true) => {
                st.idle_since = Some(ts);
                None
            }
            (Some(since), false) => {
                st.idle_since = None;
                Some(since)
            }
            _ => None,
        };
        if let Some(since) = closed {
            self.idle_time(dev, since, ts);
        }
        if let (Some(axis), true) = (self.axis, self.window.contains(ts)) {
            let i = axis.index(ts);
            let d = self.device(dev);
            d.max_pending[i] = d.max_pending[i].max(state.pending);
            d.max_in_driver[i] = d.max_in_driver[i].max(state.in_driver);
        }
    }
}

/// One latency distribution as the plots draw it: log bins and a percentile curve.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyCurve {
    /// `process` or `device`.
    pub scope: &'static str,
    /// The process's pid (0 for a device).
    pub pid: u32,
    /// `comm (pid)`, or the device's `major:minor`.
    pub name: String,
    pub stage: &'static str,
    pub count: u64,
    /// Flat `[lowest ns, count, ...]`, [`LATENCY_BINS_PER_OCTAVE`] bins per octave.
    pub bins: Vec<u64>,
    /// `[percentile, ns]` at [`PERCENTILES`].
    pub percentiles: Vec<(f64, u64)>,
}

pub const LATENCY_BINS_PER_OCTAVE: u32 = 4;
/// Where the percentile curves are sampled: dense towards the tail.
pub const PERCENTILES: [f64; 21] = [
    0.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.0, 98.0, 99.0, 99.5,
    99.8, 99.9, 99.95, 99.99, 100.0,
];

/// The Q2D, D2C and Q2C distributions of each process and device of a finished pass, from
/// the report's own histograms (those its percentiles come from).
pub fn latency_curves(agg: &super::Aggregator) -> Vec<LatencyCurve> {
    use super::latency::{Latency, Stage, Stages};
    let curve = |scope, pid, name: String, stage: Stage, l: &Latency| LatencyCurve {
        scope,
        pid,
        name,
        stage: stage.name(),
        count: l.count(),
        bins: l
            .log_bins(LATENCY_BINS_PER_OCTAVE)
            .into_iter()
            .flat_map(|(lo, n)| [lo, n])
            .collect(),
        percentiles: PERCENTILES
            .iter()
            .map(|p| (*p, l.quantile(p / 100.0)))
            .collect(),
    };
    let mut out = Vec::new();
    let mut add = |scope, pid, name: &str, stages: &Stages| {
        for stage in [Stage::Q2D, Stage::D2C, Stage::Q2C] {
            if let Some(l) = stages.get(stage) {
                out.push(curve(scope, pid, name.to_string(), stage, l));
            }
        }
    };
    let mut devs: Vec<_> = agg.devices.iter().collect();
    devs.sort_by_key(|(d, _)| **d);
    for (dev, d) in devs {
        add(
            "device",
            0,
            &format!("{}:{}", dev.major, dev.minor),
            &d.stages,
        );
    }
    let mut procs: Vec<_> = agg.processes.values().collect();
    procs.sort_by_key(|p| p.who.pid);
    for p in procs {
        let name = format!("{} ({})", p.who.comm.as_str(), p.who.pid);
        add("process", p.who.pid, &name, &p.stages);
    }
    out
}

#[cfg(test)]
mod tests;
