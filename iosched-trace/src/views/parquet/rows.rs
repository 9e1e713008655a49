//! What a row holds: the timeline's completed requests and the idling-waste intervals its
//! [`IdleTracker`]s close (the same tracker, fed the same way, as `report` and `convert --to
//! perfetto`: the waste in the table is the report's), collected by a [`TraceSink`] and laid
//! into the tables' columns with what is known of the recording ([`Context`]).
//!
//! Owns: the mapping from lives and intervals to cells. Must not: compute idling its own way.

use rustc_hash::FxHashMap;

use iosched_core::{
    analysis::{
        DEFAULT_MIN_IDLE_NS, Window,
        idling::{IdleInterval, IdleSink, IdleTracker},
    },
    devmap::DevMap,
    driver::TraceSink,
    event::{Dev, Event, ReqFlags},
    record::{ClockBase, DeviceChange, DeviceChangeKind, DeviceInfo, ProcessInfo},
    timeline::{Anomalies, DeviceState, LifeSink, RequestLife, Submitter},
};

use super::{
    ExportError,
    columns::Cell,
    partition::{TableWriter, utc_date},
};

#[derive(Default)]
struct DeviceIdle {
    was_idle_pending: bool,
    idle: IdleTracker,
}

/// The closed intervals, as the report's totals would take them (held until laid out),
/// and their count and length so far.
#[derive(Default)]
struct Intervals {
    held: Vec<IdleInterval>,
    count: u64,
    ns: u64,
}

impl IdleSink for Intervals {
    fn min_interval_ns(&self) -> u64 {
        DEFAULT_MIN_IDLE_NS
    }
    fn interval(&mut self, iv: IdleInterval) {
        self.count += 1;
        self.ns += iv.duration_ns;
        self.held.push(iv);
    }
}

/// The sink over the timeline's pass: completed requests and idle intervals, held until
/// [`Collector::lay`] writes them out.
#[derive(Default)]
pub struct Collector {
    devices: DevMap<DeviceIdle>,
    /// Each submitter as its first Q showed it (the idled-for task's comm and cgroup).
    who: FxHashMap<u32, Submitter>,
    requests: Vec<RequestLife>,
    intervals: Intervals,
    last_ts: u64,
    requests_total: u64,
    anomalies: Anomalies,
}

/// What the rows are resolved against when laid out: read from the source as it goes
/// (processes and device changes arrive with the chunks that hold them).
pub struct Context<'a> {
    pub devices: &'a [DeviceInfo],
    pub changes: &'a [DeviceChange],
    pub processes: &'a std::collections::BTreeMap<u32, ProcessInfo>,
    /// The recording's clock base (wall clock of its monotonic times), unless `date` is
    /// given for every row.
    pub clock: Option<ClockBase>,
    pub date: Option<&'a str>,
}

impl Context<'_> {
    fn device(&self, dev: Dev) -> Option<&DeviceInfo> {
        self.devices.iter().find(|d| d.dev == dev)
    }

    fn device_name(&self, dev: Dev) -> String {
        self.device(dev)
            .map_or_else(|| dev.to_string(), |d| d.name.clone())
    }

    /// The device's scheduler at `ts`: its recorded one, then each switch the recorder saw
    /// up to `ts` (as `report`'s spans by scheduler take them).
    fn scheduler(&self, dev: Dev, name: &str, ts: u64) -> Option<String> {
        let mut s = self.device(dev).and_then(|d| d.scheduler.clone());
        for c in self
            .changes
            .iter()
            .filter(|c| c.device == name && c.ts_ns <= ts)
        {
            if let DeviceChangeKind::Scheduler { to, .. } = &c.what {
                s = Some(to.clone());
            }
        }
        s
    }

    /// The cgroup's path where some process table entry has it, else its id (as `report`).
    fn cgroups(&self) -> FxHashMap<u64, String> {
        let mut out = FxHashMap::default();
        for p in self.processes.values() {
            if let Some(path) = &p.cgroup_path {
                out.entry(p.cgroup_id).or_insert_with(|| path.clone());
            }
        }
        out
    }

    fn date(&self, ts: u64) -> String {
        match (self.date, self.clock) {
            (Some(d), _) => d.to_string(),
            (None, Some(c)) => utc_date(c.to_realtime(ts)),
            (None, None) => unreachable!("export checks there is a clock or a date"),
        }
    }
}

fn cgroup_name(paths: &FxHashMap<u64, String>, id: u64) -> String {
    paths.get(&id).cloned().unwrap_or_else(|| id.to_string())
}

fn flag_names(flags: ReqFlags) -> String {
    ReqFlags::BY_KERNEL_NAME
        .iter()
        .filter(|(_, bit)| flags.has(*bit))
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(",")
}

fn ns(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}

impl Collector {
    /// Rows held, not yet laid out.
    pub fn pending(&self) -> usize {
        self.requests.len() + self.intervals.held.len()
    }

    /// Requests completed, idling-waste intervals and their total length, so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        (self.requests_total, self.intervals.count, self.intervals.ns)
    }

    /// What the timeline could not place (once the pass ended).
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// Lays the held rows into the tables (each into the file of its date: a request's
    /// completion's, an interval's start's).
    pub fn lay(
        &mut self,
        ctx: &Context<'_>,
        requests: &mut TableWriter,
        idle: &mut TableWriter,
    ) -> Result<(), ExportError> {
        let paths = ctx.cgroups();
        let mut names: FxHashMap<Dev, String> = FxHashMap::default();
        for rq in self.requests.drain(..) {
            let device = names
                .entry(rq.dev)
                .or_insert_with(|| ctx.device_name(rq.dev))
                .clone();
            let scheduler = ctx.scheduler(rq.dev, &device, rq.c);
            let s = rq.submitter;
            let cgroup = s.map(|s| cgroup_name(&paths, s.cgroup_id));
            let comm = s.map(|s| s.comm.as_str().into_owned());
            requests.row(
                &ctx.date(rq.c),
                &[
                    Cell::Str(Some(&device)),
                    Cell::Str(Some(&rq.dev.to_string())),
                    Cell::Str(scheduler.as_deref()),
                    Cell::Str(Some(rq.op.name())),
                    Cell::Str(Some(&flag_names(rq.flags))),
                    Cell::I64(Some(rq.sector as i64)),
                    Cell::I64(Some(i64::from(rq.bytes))),
                    Cell::I32(s.map(|s| s.tgid as i32)),
                    Cell::I32(s.map(|s| s.pid as i32)),
                    Cell::Str(comm.as_deref()),
                    Cell::I64(s.map(|s| s.cgroup_id as i64)),
                    Cell::Str(cgroup.as_deref()),
                    Cell::I64(ns(rq.q)),
                    Cell::I64(ns(rq.g)),
                    Cell::I64(ns(rq.i)),
                    Cell::I64(ns(rq.d)),
                    Cell::I64(Some(rq.c as i64)),
                    Cell::I32(Some(rq.bios as i32)),
                    Cell::I32(Some(rq.merges as i32)),
                    Cell::I32(Some(rq.requeues as i32)),
                    Cell::I32(Some(rq.error)),
                ],
            )?;
        }
        for iv in self.intervals.held.drain(..) {
            let device = names
                .entry(iv.dev)
                .or_insert_with(|| ctx.device_name(iv.dev))
                .clone();
            let scheduler = ctx.scheduler(iv.dev, &device, iv.start_ns);
            // 0: no completion seen yet on the device, nobody to have idled for.
            let after = (iv.after_pid != 0).then_some(iv.after_pid);
            let who = after.and_then(|p| {
                self.who.get(&p).copied().or_else(|| {
                    ctx.processes.get(&p).map(|p| Submitter {
                        pid: p.pid,
                        tgid: p.tgid,
                        comm: p.comm,
                        cgroup_id: p.cgroup_id,
                        ioprio: 0,
                    })
                })
            });
            let comm = who.map(|w| w.comm.as_str().into_owned());
            let cgroup = who.map(|w| cgroup_name(&paths, w.cgroup_id));
            let waiting: Vec<i32> = iv.waiting_pids.iter().map(|p| *p as i32).collect();
            idle.row(
                &ctx.date(iv.start_ns),
                &[
                    Cell::Str(Some(&device)),
                    Cell::Str(Some(&iv.dev.to_string())),
                    Cell::Str(scheduler.as_deref()),
                    Cell::I64(Some(iv.start_ns as i64)),
                    Cell::I64(Some(iv.duration_ns as i64)),
                    Cell::I32(after.map(|p| p as i32)),
                    Cell::Str(comm.as_deref()),
                    Cell::I64(who.map(|w| w.cgroup_id as i64)),
                    Cell::Str(cgroup.as_deref()),
                    Cell::ListI32(&waiting),
                ],
            )?;
        }
        Ok(())
    }
}

impl TraceSink for Collector {
    fn see(&mut self, ev: &Event) {
        self.last_ts = self.last_ts.max(ev.ts_ns);
    }

    fn end(&mut self, anomalies: &Anomalies) {
        let end = self.last_ts;
        for (dev, d) in self.devices.iter_mut() {
            d.idle.close(*dev, end, &Window::ALL, &mut self.intervals);
        }
        self.anomalies = anomalies.clone();
    }
}

impl LifeSink for Collector {
    fn queued(&mut self, ev: &Event, _state: &DeviceState) {
        self.who.entry(ev.pid).or_insert_with(|| Submitter::of(ev));
    }

    fn request_done(&mut self, rq: &RequestLife) {
        let d = self.devices.entry_or_default(rq.dev);
        d.idle.completed(rq.submitter.map_or(0, |s| s.pid));
        self.requests_total += 1;
        self.requests.push(rq.clone());
    }

    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        let d = self.devices.entry_or_default(dev);
        let was = d.was_idle_pending;
        d.was_idle_pending = state.idle_with_pending();
        d.idle
            .update(dev, ts, was, state, &Window::ALL, &mut self.intervals);
    }
}
