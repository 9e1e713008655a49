//! The workload as the model must replay it, rebuilt from a recorded trace: every bio with the
//! thing that released it.
//!
//! A recorded time cannot be replayed as such under another scheduler: a process that waits
//! for its previous I/O would issue its next one earlier or later. So each bio keeps a
//! [`Trigger`] instead of a time:
//! - `At`: open loop, at its recorded offset from the trace's start (asynchronous writeback,
//!   a stream's first I/O);
//! - `AfterQueue`: issued `delay` after an earlier bio of the same process was queued (one
//!   submission batch, or a process with several I/Os in flight);
//! - `AfterCompletion`: closed loop, `delay` (think time) after a bio completed. That bio is
//!   usually the process's own previous one, but can be another process's: a process whose
//!   waiting Qs follow another's completions again and again depends on it (dd's `O_DSYNC`
//!   write waits for jbd2's journal commit; jbd2's commit follows dd's data write).
//!
//! Without wakeups, dependencies are inferred from timing only (repeated, within
//! [`DEP_WINDOW_NS`]), which is what a block trace allows. A recording made with
//! `record --wakeups` makes them observed facts: a waiting Q that follows (within the window)
//! its process's wakeup by another process doing I/O on the device depends on that waker's
//! last completion before the wakeup; one without such a wakeup depends on its own.
//!
//! Owns: extraction. Must not: simulate.

use rustc_hash::FxHashMap;
use serde::Serialize;

use iosched_core::{
    driver::{self, Filter, TraceSink},
    event::{Comm, Dev, Event, EventKind, Op, ReqFlags},
    record::DeviceInfo,
    source::{InputError, TraceSource},
    timeline::{BioLife, DeviceState, LifeSink, RequestLife, Submitter},
};

/// A waiting process's Q this soon after another process's completion may have been woken by
/// it (a wake-up and a syscall take tens to hundreds of µs; 2 ms leaves room for a busy CPU).
pub const DEP_WINDOW_NS: u64 = 2_000_000;
/// Bios of one process queued this close together belong to one submission (a plug batch).
pub const BATCH_NS: u64 = 200_000;
/// A process depends on another when at least this share of its waiting Qs follow that
/// process's completions (and at least [`DEP_MIN_COUNT`] of them do).
pub const DEP_MIN_SHARE: f64 = 0.5;
pub const DEP_MIN_COUNT: u32 = 3;

/// What releases a bio in a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Trigger {
    /// Open loop: ns after the workload's start.
    At(u64),
    /// `delay` ns after bio `io` was queued.
    AfterQueue { io: u32, delay: u64 },
    /// `delay` ns after bio `io` completed.
    AfterCompletion { io: u32, delay: u64 },
}

/// One bio to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Io {
    pub stream: u32,
    pub sector: u64,
    pub sectors: u32,
    #[serde(skip)]
    pub op: Op,
    #[serde(skip)]
    pub flags: ReqFlags,
    /// `op_is_sync()`: reads, and writes with SYNC/FUA/PREFLUSH.
    pub sync: bool,
    pub trigger: Trigger,
    /// Its process unplugged after queueing it and before its next bio (the recording's
    /// `U` events): the plug batch ends here whatever the timing. fio's libaio submits
    /// each bio in its own plug, so back-to-back bios do not plug-merge.
    pub plug_end: bool,
    /// Recorded Q and C, absolute trace ns.
    pub rec_q: u64,
    /// When its submission returned: its request allocated (G) or its merge (M); later
    /// than Q when the process slept for a free request.
    #[serde(skip)]
    pub rec_submitted: u64,
    pub rec_c: u64,
}

/// How a process issued its I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// Waits for a completion before each I/O (one in flight).
    ClosedLoop,
    /// Several in flight, next issued on completions.
    Windowed,
    /// Issued at its own pace (asynchronous writeback).
    OpenLoop,
}

/// One process's I/O stream.
#[derive(Clone, Debug, Serialize)]
pub struct Stream {
    pub pid: u32,
    pub tgid: u32,
    #[serde(serialize_with = "comm_str")]
    pub comm: Comm,
    pub cgroup_id: u64,
    pub ios: u32,
    pub kind: StreamKind,
    /// Streams whose completions released this one's I/O, with how many times.
    pub depends_on: Vec<(u32, u32)>,
    /// Mean think time of its closed-loop I/O (own or other's completion -> next Q), ns.
    pub think_mean_ns: f64,
    /// Its Qs that mean is over: those issued with nothing of its own in flight. For a
    /// process with several in flight, only its rare pauses long enough for its I/O to
    /// drain (one on the test bed's BFQ run of seed 002: 3.3 ms in 3 s), not its pace.
    #[serde(default)]
    pub think_samples: u32,
    /// Most bios it had in flight at once.
    pub max_in_flight: u32,
    /// Index of its last bio: after it the process does no more I/O (BFQ does not idle for
    /// a queue whose process is gone).
    pub last_io: u32,
    /// Bios it queued and then slept for a free request (tag): when most did, the process
    /// was held back by the queue, not by its own depth, and `max_in_flight` is only a lower
    /// bound of what it would keep in flight (fio `--iodepth` beyond the device's tags).
    #[serde(default)]
    pub slept_for_request: u32,
    /// Time its bios spent asleep for a request, and the span of its I/O (first Q to last
    /// C), ns.
    #[serde(default)]
    pub slept_ns: u64,
    #[serde(default)]
    pub span_ns: u64,
    /// I/O priority of its first bio (class << 13 | level; 0: none, the kernel's default
    /// best-effort level 4): BFQ's queue weight.
    #[serde(default)]
    pub ioprio: u16,
    /// A time-bounded process (fio `--time_based --runtime`): it issues nothing from this
    /// time on (ns after the workload's start), whatever is left of its bios. Set by
    /// [`super::continuation`] on the streams it continues; `None`: it issues all its bios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ns: Option<u64>,
}

impl Stream {
    /// Asleep for requests most of the time (a process woken by a batch of completions
    /// submits several bios without sleeping, so its share of bios that slept can be
    /// small): its depth is unknown beyond `max_in_flight`.
    pub fn tag_bound(&self) -> bool {
        self.kind == StreamKind::Windowed && self.asleep_most_of_its_run()
    }

    /// Its bios spent at least half its span asleep for a request.
    fn asleep_most_of_its_run(&self) -> bool {
        2 * self.slept_ns >= self.span_ns && self.span_ns > 0
    }

    /// Most bios it keeps in flight in a replay whose queue lets `requests` requests exist
    /// (`nr_requests`; under `none`, the driver tags), unless the configuration sets
    /// `iodepth`.
    ///
    /// A process held back by the queue ([`Stream::tag_bound`]) had more bios ready than
    /// the recorded queue let through, and the trace cannot say how many: only that it kept
    /// every request busy and one more bio asleep for the next. It is replayed as deep as
    /// the queue it is given: one bio per request (`requests`; under `none` the recorded
    /// maximum, the tags and the one asleep, stays), the least depth with which it would
    /// still fill that queue where nothing merges. Replaying it at its recorded maximum (the
    /// lower bound) instead predicts that under an elevator nothing merges, whatever its
    /// depth: with `D` driver tags and `D + 1` bios, one bio at a time waits in the
    /// scheduler, so seed 002 recorded under `none` (fio iodepth 256, 128 tags) came out at
    /// 1.0 bios per request where mq-deadline and BFQ merge 2 (`blk_mq_submit_bio` ->
    /// `blk_mq_sched_bio_merge`: a bio merges only into a request still in the scheduler,
    /// and requests wait there in numbers only while the driver's tags are all busy).
    /// A process within its depth keeps what it was seen with.
    pub fn replay_window(&self, requests: u32) -> u32 {
        if self.tag_bound() && requests != u32::MAX {
            self.max_in_flight.max(requests)
        } else {
            self.max_in_flight
        }
    }
}

fn comm_str<S: serde::Serializer>(c: &Comm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&c.as_str())
}

/// A request as the device saw it, for fitting the device model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceSample {
    pub d: u64,
    pub c: u64,
    pub sector: u64,
    pub sectors: u32,
    pub write: bool,
    /// Requests in the driver when it was issued (itself included).
    pub depth_at_d: u32,
}

/// Everything the model takes from a trace.
#[derive(Clone, Debug)]
pub struct Workload {
    pub device: DeviceInfo,
    pub kernel_release: Option<String>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub streams: Vec<Stream>,
    /// In recorded Q order.
    pub ios: Vec<Io>,
    /// Issued requests in D order.
    pub service: Vec<ServiceSample>,
    pub max_in_driver: u32,
    /// What the trace shows of merging (recordings before format 1.3 do not carry the
    /// queue's `nomerges`).
    pub merges: MergeEvidence,
    /// What the trace shows of wbt and Kyber throttling.
    pub throttle: super::throttle::Throttling,
}

/// Merges the recording made, and those it could have made but did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeEvidence {
    /// Bios merged into a request (M or F).
    pub merged: u64,
    /// Bios queued while a request they continue (same op and sync-ness, ending where the
    /// bio starts) waited inserted and not yet issued: an elevator back-merges such a bio
    /// unless merging is off (`nomerges=2`).
    pub missed: u64,
}

impl MergeEvidence {
    /// Merging was off in the recording: an elevator had many chances and took none.
    /// (Under `none` requests do not wait where bios merge, so only with an elevator.)
    pub fn merging_off(&self, bios: usize) -> bool {
        self.merged == 0 && self.missed >= 20 && self.missed as f64 >= 0.05 * bios as f64
    }
}

/// [`MergeEvidence`] of bios sorted by Q.
fn merge_evidence(bios: &[BioLife]) -> MergeEvidence {
    let mut ev = MergeEvidence::default();
    // Requests by end sector: (op, sync, inserted, issued) of the request the latest bio
    // ending there started or joined.
    let mut by_end: FxHashMap<u64, (Op, bool, u64, u64)> = FxHashMap::default();
    for b in bios {
        let Some(q) = b.q else { continue };
        let sync = is_sync(b.op, b.flags);
        if b.m.is_some() {
            ev.merged += 1;
        } else if b.bytes > 0
            && let Some(&(op, s, inserted, issued)) = by_end.get(&b.sector)
            && op == b.op
            && s == sync
            && inserted <= q
            && q < issued
        {
            ev.missed += 1;
        }
        if let (Some(i), Some(d)) = (b.i.or(b.g), b.d)
            && b.bytes > 0
        {
            by_end.insert(b.sector + u64::from(b.bytes >> 9), (b.op, sync, i, d));
        }
    }
    ev
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(
        "the trace has no complete I/O on {0} (no bio with both its Q and its C): nothing to replay"
    )]
    Empty(String),
    #[error(
        "the trace has I/O on several devices ({0}); choose one with --device (name or major:minor)"
    )]
    SeveralDevices(String),
    #[error("no device {0} in the trace")]
    NoSuchDevice(String),
}

#[derive(Default)]
struct Collect {
    bios: Vec<BioLife>,
    /// Bios whose completion the trace lost (see [`settle_lost`]).
    lost: Vec<BioLife>,
    /// Unplug times by pid.
    unplugs: FxHashMap<u32, Vec<u64>>,
    service: Vec<ServiceSample>,
    open_d: FxHashMap<u64, usize>,
    max_in_driver: u32,
    wakeups: Vec<Wakeup>,
    /// kyber and wbt events.
    throttle_events: Vec<Event>,
}

/// A recorded scheduler wakeup ([`EventKind::Wakeup`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wakeup {
    pub ts: u64,
    pub waker_pid: u32,
    pub wakee_pid: u32,
}

impl LifeSink for Collect {
    /// Wakeups, unplugs and throttling events have no part in a life: the timeline passes
    /// them by.
    fn event(&mut self, ev: &Event) {
        if let Some((wakee_pid, _)) = ev.wakee() {
            self.wakeups.push(Wakeup {
                ts: ev.ts_ns,
                waker_pid: ev.pid,
                wakee_pid,
            });
            return;
        }
        match ev.kind {
            EventKind::Unplug => self.unplugs.entry(ev.pid).or_default().push(ev.ts_ns),
            EventKind::KyberThrottled
            | EventKind::KyberAdjust
            | EventKind::WbtStep
            | EventKind::WbtTimer => self.throttle_events.push(*ev),
            _ => {}
        }
    }
    fn issued(&mut self, ev: &Event, _s: Option<&Submitter>, state: &DeviceState) {
        self.max_in_driver = self.max_in_driver.max(state.in_driver);
        self.open_d.insert(ev.rq, self.service.len());
        self.service.push(ServiceSample {
            d: ev.ts_ns,
            c: 0,
            sector: ev.sector,
            sectors: ev.sectors(),
            write: ev.op.is_write(),
            depth_at_d: state.in_driver,
        });
    }
    fn bio_done(&mut self, bio: &BioLife) {
        if bio.q.is_some() && bio.submitter.is_some() {
            self.bios.push(*bio);
        }
    }
    fn bio_lost(&mut self, bio: &BioLife) {
        if bio.q.is_some() && bio.submitter.is_some() {
            self.lost.push(*bio);
        }
    }
    fn request_done(&mut self, rq: &RequestLife) {
        if let Some(i) = self.open_d.remove(&rq.rq) {
            self.service[i].c = rq.c;
        }
    }
}

/// Each device's [`Collect`]: what the timeline makes of an event goes to the event's
/// device's, even a life of another device it ends (a bio whose id the event reuses).
#[derive(Default)]
struct PerDevice {
    collects: FxHashMap<Dev, Collect>,
    /// The device of the event being processed.
    current: Dev,
}

impl PerDevice {
    fn current(&mut self) -> &mut Collect {
        self.collects
            .get_mut(&self.current)
            .expect("made when its event was seen")
    }
}

impl TraceSink for PerDevice {
    fn see(&mut self, ev: &Event) {
        self.current = ev.dev;
        self.collects.entry(ev.dev).or_default();
    }
}

impl LifeSink for PerDevice {
    fn event(&mut self, ev: &Event) {
        self.current().event(ev);
    }
    fn issued(&mut self, ev: &Event, s: Option<&Submitter>, state: &DeviceState) {
        self.current().issued(ev, s, state);
    }
    fn bio_done(&mut self, bio: &BioLife) {
        self.current().bio_done(bio);
    }
    fn bio_lost(&mut self, bio: &BioLife) {
        self.current().bio_lost(bio);
    }
    fn request_done(&mut self, rq: &RequestLife) {
        self.current().request_done(rq);
    }
}

/// `op_is_sync()`.
pub fn is_sync(op: Op, flags: ReqFlags) -> bool {
    op == Op::Read || flags.0 & (ReqFlags::SYNC | ReqFlags::FUA | ReqFlags::PREFLUSH) != 0
}

/// Reads a trace and extracts the workload of one device (`device`: name or major:minor;
/// `None`: the only device with I/O).
pub fn extract(
    source: &mut dyn TraceSource,
    device: Option<&str>,
) -> Result<Workload, WorkloadError> {
    let meta = source.meta().clone();
    let wanted = match device {
        Some(d) => Some(
            iosched_core::analysis::report::resolve_devices(&meta.devices, &[d.to_string()])
                .map_err(|_| WorkloadError::NoSuchDevice(d.to_string()))?
                .and_then(|v| v.first().copied())
                .ok_or_else(|| WorkloadError::NoSuchDevice(d.to_string()))?,
        ),
        None => None,
    };
    let mut per_dev = PerDevice::default();
    driver::drive(
        source,
        Filter::ALL.devices(wanted.map(|w| vec![w])),
        &mut per_dev,
    )?;
    let mut per_dev = per_dev.collects;
    let dev = match wanted {
        Some(d) => d,
        None => {
            let mut with_io: Vec<Dev> = per_dev
                .iter()
                .filter(|(_, c)| !c.bios.is_empty())
                .map(|(d, _)| *d)
                .collect();
            with_io.sort();
            match with_io.len() {
                0 => return Err(WorkloadError::Empty(meta.path.display().to_string())),
                1 => with_io[0],
                _ => {
                    let names: Vec<String> =
                        with_io.iter().map(|d| name_of(&meta.devices, *d)).collect();
                    return Err(WorkloadError::SeveralDevices(names.join(", ")));
                }
            }
        }
    };
    let mut collect = per_dev.remove(&dev).unwrap_or_default();
    settle_lost(&mut collect.bios, std::mem::take(&mut collect.lost));
    let info = meta
        .devices
        .iter()
        .find(|d| d.dev == dev)
        .cloned()
        .unwrap_or_else(|| DeviceInfo {
            name: name_of(&meta.devices, dev),
            dev,
            request_based: true,
            ..Default::default()
        });
    if collect.bios.is_empty() {
        return Err(WorkloadError::Empty(info.name.clone()));
    }
    let mut service: Vec<ServiceSample> =
        collect.service.into_iter().filter(|s| s.c >= s.d).collect();
    service.sort_by_key(|s| s.d);
    let start = collect.bios.iter().filter_map(|b| b.q).min().unwrap_or(0);
    let kyber = super::throttle::kyber_waits(&collect.bios, &collect.throttle_events, start);
    let wbt_steps = super::throttle::wbt_steps(&collect.throttle_events, start);
    let mut w = from_bios_and_wakeups(info, collect.bios, &collect.wakeups);
    w.throttle.kyber = kyber;
    w.throttle.wbt.max_depth_at_waits = super::throttle::max_depth_at(
        &wbt_steps,
        w.ios
            .iter()
            .zip(&w.throttle.wbt.waited)
            .filter(|(_, waited)| **waited)
            .map(|(io, _)| io.rec_q.saturating_sub(start)),
    );
    w.throttle.wbt_steps = wbt_steps;
    mark_plug_ends(&mut w, &collect.unplugs);
    w.service = service;
    w.max_in_driver = collect.max_in_driver;
    w.kernel_release = meta.kernel_release.clone();
    Ok(w)
}

/// Puts back the bios whose completion the trace lost (an event from interrupt context
/// that never reached the probe) for processes that keep one bio in flight, completed at
/// the latest instant the trace allows: the process's next Q (or the reuse of the bio's
/// id, if earlier). Dropped, such a bio would vanish from the replay, and its process's
/// next Q would seem to follow the completion before it after the whole gap: a think time
/// the process never had. In the recordings these gaps are 1-9 ms (0.2 ms after a seen
/// completion), long enough for BFQ's idle timer (8 ms) to expire in the replay where, in
/// the one case seen, BFQ kept serving the queue and nothing else was dispatched
/// meanwhile: the request was still in flight. A process with several in flight has no
/// such bound (its next Q does not wait for this completion): its lost bios stay out, as
/// before. Their service samples stay out of the device fit (no C, no D2C).
fn settle_lost(bios: &mut Vec<BioLife>, lost: Vec<BioLife>) {
    if lost.is_empty() {
        return;
    }
    // Per process: its Qs in time order, and whether its seen lives ever overlapped.
    let mut lives: FxHashMap<u32, Vec<(u64, u64)>> = FxHashMap::default();
    for b in bios.iter() {
        if let (Some(s), Some(q)) = (b.submitter, b.q) {
            lives.entry(s.pid).or_default().push((q, b.c));
        }
    }
    for b in &lost {
        if let (Some(s), Some(q)) = (b.submitter, b.q) {
            lives.entry(s.pid).or_default().push((q, u64::MAX));
        }
    }
    let mut one_at_a_time: FxHashMap<u32, bool> = FxHashMap::default();
    for (pid, l) in lives.iter_mut() {
        l.sort_unstable();
        let single = l.windows(2).all(|w| w[0].1 == u64::MAX || w[0].1 <= w[1].0);
        one_at_a_time.insert(*pid, single);
    }
    for mut b in lost {
        let (Some(s), Some(q)) = (b.submitter, b.q) else {
            continue;
        };
        if !one_at_a_time[&s.pid] {
            continue;
        }
        let l = &lives[&s.pid];
        let next_q = l.get(l.partition_point(|(t, _)| *t <= q)).map(|(t, _)| *t);
        b.c = next_q
            .map_or(b.c, |n| n.min(b.c))
            .max(b.d.unwrap_or(q))
            .max(q);
        bios.push(b);
    }
}

/// Sets [`Io::plug_end`] from the recorded unplugs of each process.
fn mark_plug_ends(w: &mut Workload, unplugs: &FxHashMap<u32, Vec<u64>>) {
    let mut last: Vec<Option<usize>> = vec![None; w.streams.len()];
    let mark = |ios: &mut [Io], prev: usize, until: u64| {
        let pid_unplugs = unplugs.get(&w.streams[ios[prev].stream as usize].pid);
        if let Some(ts) = pid_unplugs {
            let from = ios[prev].rec_q;
            let k = ts.partition_point(|t| *t < from);
            ios[prev].plug_end = ts.get(k).is_some_and(|t| *t <= until);
        }
    };
    for i in 0..w.ios.len() {
        let s = w.ios[i].stream as usize;
        if let Some(prev) = last[s] {
            let q = w.ios[i].rec_q;
            mark(&mut w.ios, prev, q);
        }
        last[s] = Some(i);
    }
    for prev in last.into_iter().flatten() {
        mark(&mut w.ios, prev, u64::MAX);
    }
}

fn name_of(devices: &[DeviceInfo], dev: Dev) -> String {
    devices
        .iter()
        .find(|d| d.dev == dev)
        .map_or_else(|| dev.to_string(), |d| d.name.clone())
}

/// Builds the streams and triggers from completed bios of one device, with dependencies
/// inferred from timing.
pub fn from_bios(device: DeviceInfo, bios: Vec<BioLife>) -> Workload {
    from_bios_and_wakeups(device, bios, &[])
}

/// [`from_bios`], with the recorded wakeups of the device's processes: when there are any,
/// they, not timing, say which process released a waiting Q.
pub fn from_bios_and_wakeups(
    device: DeviceInfo,
    mut bios: Vec<BioLife>,
    wakeups: &[Wakeup],
) -> Workload {
    bios.sort_by_key(|b| (b.q.unwrap_or(0), b.c));
    let merges = merge_evidence(&bios);
    let start_ns = bios.first().and_then(|b| b.q).unwrap_or(0);
    let wbt = super::throttle::wbt_waits(&bios, device.nr_requests, start_ns);
    let end_ns = bios.iter().map(|b| b.c).max().unwrap_or(start_ns);

    // Streams by pid, in order of first appearance.
    let mut stream_of: FxHashMap<u32, u32> = FxHashMap::default();
    let mut streams: Vec<Stream> = Vec::new();
    let mut ios: Vec<Io> = Vec::with_capacity(bios.len());
    for b in &bios {
        let s = b.submitter.expect("filtered on collection");
        let id = *stream_of.entry(s.pid).or_insert_with(|| {
            streams.push(Stream {
                pid: s.pid,
                tgid: s.tgid,
                comm: s.comm,
                cgroup_id: s.cgroup_id,
                ios: 0,
                kind: StreamKind::OpenLoop,
                depends_on: Vec::new(),
                think_mean_ns: 0.0,
                think_samples: 0,
                max_in_flight: 0,
                last_io: 0,
                slept_for_request: 0,
                slept_ns: 0,
                span_ns: 0,
                ioprio: s.ioprio,
                until_ns: None,
            });
            (streams.len() - 1) as u32
        });
        streams[id as usize].ios += 1;
        streams[id as usize].last_io = ios.len() as u32;
        if let Some((q, g)) = b.q.zip(b.g)
            && g > q + super::throttle::SLEPT_NS
        {
            streams[id as usize].slept_for_request += 1;
            streams[id as usize].slept_ns += g - q;
        }
        ios.push(Io {
            stream: id,
            sector: b.sector,
            sectors: b.bytes >> 9,
            op: b.op,
            flags: b.flags,
            sync: is_sync(b.op, b.flags),
            trigger: Trigger::At(0),
            plug_end: false,
            rec_q: b.q.unwrap_or(0),
            rec_submitted: b
                .q
                .unwrap_or(0)
                .max(b.g.unwrap_or(0))
                .max(b.m.map_or(0, |(t, _)| t)),
            rec_c: b.c,
        });
    }

    let mut wbt_held = vec![false; streams.len()];
    for (io, waited) in ios.iter().zip(&wbt.waited) {
        wbt_held[io.stream as usize] |= *waited;
    }
    let mut first_q: Vec<Option<u64>> = vec![None; streams.len()];
    for io in &ios {
        let st = &mut streams[io.stream as usize];
        let from = *first_q[io.stream as usize].get_or_insert(io.rec_q);
        st.span_ns = st.span_ns.max(io.rec_c.saturating_sub(from));
    }
    // Processes the queue held back (asleep for requests most of their run): the most they
    // had in flight was the queue's limit, not theirs, so a full window is no sign that
    // they waited for a completion, and a pause between two of their submissions is their
    // own (fio preempted on a busy CPU), not a wait for the completion that happened to
    // precede it: with a completion every few hundred µs one always does. Tied to it, a
    // replay that lets them keep more in flight (an elevator's requests) would drain their
    // queue at every such pause, down to the bios queued since that completion.
    let held_by_queue: Vec<bool> = streams.iter().map(Stream::asleep_most_of_its_run).collect();

    // Sweep Qs, Cs and wakeups in time order (completions, then wakeups, then Qs at equal
    // times). Only wakeups between two of the device's processes tell anything here.
    const C: u8 = 0;
    const W: u8 = 1;
    let observed = !wakeups.is_empty();
    let mut marks: Vec<(u64, u8, u32)> = Vec::with_capacity(ios.len() * 2 + wakeups.len());
    for (i, io) in ios.iter().enumerate() {
        marks.push((io.rec_q, 2, i as u32));
        marks.push((io.rec_c, C, i as u32));
    }
    for (i, wk) in wakeups.iter().enumerate() {
        if wk.waker_pid != wk.wakee_pid
            && stream_of.contains_key(&wk.waker_pid)
            && stream_of.contains_key(&wk.wakee_pid)
        {
            marks.push((wk.ts, W, i as u32));
        }
    }
    marks.sort_unstable();
    let n = streams.len();
    // Each process's window: the most bios it had in flight at once. A process at its window
    // (fio with `iodepth` reached) issues its next bio when one completes, not when it likes.
    let mut window = vec![0u32; n];
    let mut in_flight = vec![0u32; n];
    for &(_, kind, i) in &marks {
        if kind == W {
            continue;
        }
        let s = ios[i as usize].stream as usize;
        if kind == C {
            in_flight[s] = in_flight[s].saturating_sub(1);
        } else {
            in_flight[s] += 1;
            window[s] = window[s].max(in_flight[s]);
        }
    }
    in_flight.fill(0);
    // Per process: its window was full when its last submission returned.
    let mut full = vec![false; n];
    let mut last_own_c: Vec<Option<(u64, u32)>> = vec![None; n];
    // Each process's last submission: when it returned (the next bio of a process that
    // slept in request allocation follows its wake-up, not its Q), and the bio.
    let mut last_q: Vec<Option<(u64, u32)>> = vec![None; n];
    let mut last_c: Option<(u64, u32)> = None;
    /// A completion that released a waiting Q: its time, its bio, its stream.
    type Release = (u64, u32, u32);
    // Each process's last wakeup by another one of the device's processes: its time, and the
    // waker's completion just before it (a wakeup that follows none of the waker's I/O does
    // not make the wakee depend on that I/O).
    let mut woken: Vec<Option<(u64, Option<Release>)>> = vec![None; n];
    // Waiting Qs: the io, its process's last completion, and another process's completion
    // just before it (with that process's stream).
    struct Waiting {
        io: u32,
        q: u64,
        /// When the process's previous submission returned: it slept from then on.
        asleep_from: Option<u64>,
        own: Option<(u64, u32)>,
        other: Option<Release>,
    }
    let mut waiting: Vec<Vec<Waiting>> = (0..n).map(|_| Vec::new()).collect();
    let mut windowed = vec![false; n];
    for (t, kind, i) in marks {
        if kind == W {
            let wk = wakeups[i as usize];
            let waker = stream_of[&wk.waker_pid];
            let wakee = stream_of[&wk.wakee_pid] as usize;
            let waker_c = last_own_c[waker as usize]
                .filter(|(tc, _)| t - tc <= DEP_WINDOW_NS)
                .map(|(tc, c)| (tc, c, waker));
            woken[wakee] = Some((t, waker_c));
            continue;
        }
        let io = ios[i as usize];
        let s = io.stream as usize;
        if kind == C {
            in_flight[s] = in_flight[s].saturating_sub(1);
            last_own_c[s] = Some((t, i));
            last_c = Some((t, i));
            continue;
        }
        // The process had its window full after its last submission, and one of its bios
        // completed since: this Q waited for that completion (a slot), whatever the gap to
        // its previous Q. Read as "after the previous Q", a replay on a faster path would
        // still issue at the recorded (device-bound) pace, and bios would never pile up
        // where they merge.
        // A process whose last bio slept for a request was held back by the queue, not by
        // its window: it goes on as soon as its submission returns.
        let slot_freed_by = last_own_c[s].filter(|(tc, _)| {
            full[s]
                && !held_by_queue[s]
                && t - tc <= DEP_WINDOW_NS
                && last_q[s].is_none_or(|(tq, q)| {
                    *tc > tq
                        && ios[q as usize].rec_submitted
                            <= ios[q as usize].rec_q + super::throttle::SLEPT_NS
                })
        });
        let trigger = if !io.sync {
            match last_q[s] {
                // A writer wbt held back: it goes on when its submission returns, not at
                // its recorded (throttled) pace, so a replay without the throttle lets it
                // run ahead.
                Some((tq, q)) if wbt_held[s] && t.saturating_sub(tq) <= BATCH_NS => {
                    Trigger::AfterQueue {
                        io: q,
                        delay: t.saturating_sub(tq),
                    }
                }
                _ => Trigger::At(t - start_ns),
            }
        } else if let Some((tc, c)) = slot_freed_by.filter(|_| in_flight[s] > 0) {
            windowed[s] = true;
            Trigger::AfterCompletion {
                io: c,
                delay: t - tc,
            }
        } else if in_flight[s] > 0 {
            windowed[s] = true;
            match (last_q[s], last_own_c[s]) {
                (Some((tq, q)), _) if t.saturating_sub(tq) <= BATCH_NS => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (_, Some((tc, c))) if t - tc <= DEP_WINDOW_NS && !held_by_queue[s] => {
                    Trigger::AfterCompletion {
                        io: c,
                        delay: t - tc,
                    }
                }
                (Some((tq, q)), _) => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (None, _) => Trigger::At(t - start_ns),
            }
        } else {
            let other = if observed {
                // The waker's completion, if the process was woken by another one just
                // before this Q (each wakeup releases one Q).
                match woken[s].take() {
                    Some((tw, waker_c)) if t - tw <= DEP_WINDOW_NS => waker_c,
                    _ => None,
                }
            } else {
                last_c
                    .filter(|(tc, c)| {
                        ios[*c as usize].stream != io.stream
                            && t - tc <= DEP_WINDOW_NS
                            && last_own_c[s].is_none_or(|(own, _)| own <= *tc)
                    })
                    .map(|(tc, c)| (tc, c, ios[c as usize].stream))
            };
            waiting[s].push(Waiting {
                io: i,
                q: t,
                asleep_from: last_q[s].map(|(tq, _)| tq),
                own: last_own_c[s],
                other,
            });
            // Resolved below, once the dependencies are known.
            Trigger::At(t - start_ns)
        };
        ios[i as usize].trigger = trigger;
        in_flight[s] += 1;
        streams[s].max_in_flight = streams[s].max_in_flight.max(in_flight[s]);
        full[s] = window[s] > 1 && in_flight[s] >= window[s];
        last_q[s] = Some((io.rec_submitted.clamp(t, t.max(io.rec_c)), i));
    }

    // Dependencies: a stream whose completions released most of this stream's waiting Qs.
    for (s, waits) in waiting.iter().enumerate() {
        let mut counts: FxHashMap<u32, u32> = FxHashMap::default();
        for w in waits {
            if let Some((_, _, ws)) = w.other {
                *counts.entry(ws).or_insert(0) += 1;
            }
        }
        // Observed wakeups need no threshold: each one is a fact.
        let mut deps: Vec<(u32, u32)> = counts
            .into_iter()
            .filter(|(_, k)| {
                observed
                    || (*k >= DEP_MIN_COUNT && f64::from(*k) >= DEP_MIN_SHARE * waits.len() as f64)
            })
            .collect();
        deps.sort_by_key(|(w, k)| (std::cmp::Reverse(*k), *w));
        // Each released Q: its io, the completion that released it, how long the process
        // slept before that completion, and the gap.
        let mut released: Vec<(u32, u32, ThinkGap)> = Vec::new();
        for w in waits {
            let chosen = match w.other {
                Some((tc, c, ws)) if deps.iter().any(|(d, _)| *d == ws) => Some((tc, c)),
                _ => w.own,
            };
            if let Some((tc, c)) = chosen {
                released.push((
                    w.io,
                    c,
                    ThinkGap {
                        slept_ns: w.asleep_from.map_or(0, |from| tc.saturating_sub(from)),
                        gap_ns: w.q - tc,
                    },
                ));
            }
        }
        let gaps: Vec<ThinkGap> = released.iter().map(|r| r.2).collect();
        let delays = think_delays(&gaps);
        let think_n = released.len() as u32;
        for ((io, c, _), delay) in released.into_iter().zip(&delays) {
            ios[io as usize].trigger = Trigger::AfterCompletion {
                io: c,
                delay: *delay,
            };
        }
        let st = &mut streams[s];
        st.depends_on = deps;
        st.think_samples = think_n;
        st.think_mean_ns = if think_n == 0 {
            0.0
        } else {
            delays.iter().sum::<u64>() as f64 / f64::from(think_n)
        };
        st.kind = if windowed[s] && st.max_in_flight > 1 {
            StreamKind::Windowed
        } else if think_n > 0 {
            StreamKind::ClosedLoop
        } else {
            StreamKind::OpenLoop
        };
    }
    Workload {
        device,
        kernel_release: None,
        start_ns,
        end_ns,
        streams,
        ios,
        service: Vec::new(),
        max_in_driver: 0,
        merges,
        throttle: super::throttle::Throttling {
            wbt,
            ..Default::default()
        },
    }
}

/// A process slept at least this long before the completion that released its next Q: its
/// gap (completion -> Q) includes waking a CPU that went idle meanwhile, not only its think
/// time. On this project's 2-vCPU VM, fio's gap is ~9 µs after a 0.2 ms sleep and 25-130 µs
/// after a 7-60 ms one (the multi-reader recordings, under bfq and none).
pub const LONG_SLEEP_NS: u64 = 1_000_000;
/// A process's think time is the gap below which only this share of its gaps fall: a gap
/// cannot be shorter than the program's own work, so its low end is the work plus the least
/// wake-up latency, where its mean also holds every slow wake-up.
pub const THINK_PERCENTILE: f64 = 0.05;
/// Gaps needed before their low end says anything.
pub const THINK_MIN_GAPS: usize = 20;

/// One released Q of a closed-loop process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThinkGap {
    /// From the process's previous submission to the completion that released it.
    pub slept_ns: u64,
    /// From that completion to the Q.
    pub gap_ns: u64,
}

/// The process's think time: the [`THINK_PERCENTILE`] of its gaps; `None` with fewer than
/// [`THINK_MIN_GAPS`].
pub fn think_floor(gaps: &[ThinkGap]) -> Option<u64> {
    if gaps.len() < THINK_MIN_GAPS {
        return None;
    }
    let mut g: Vec<u64> = gaps.iter().map(|g| g.gap_ns).collect();
    g.sort_unstable();
    Some(g[((g.len() - 1) as f64 * THINK_PERCENTILE) as usize])
}

/// The delay each released Q is replayed with. A gap after a long sleep
/// ([`LONG_SLEEP_NS`]) is cut to the process's think time ([`think_floor`]): what it holds
/// beyond that is the wake-up of an idle CPU, which a replay that lets the process sleep
/// less (a sequential reader served back to back under BFQ instead of interleaved under
/// none) would not pay, and BFQ would idle through. Where the replay keeps the sleep long,
/// the cut costs tens of µs against milliseconds of sleep. Gaps after short sleeps are kept:
/// they are the process's own pace, whatever it does between I/Os.
pub fn think_delays(gaps: &[ThinkGap]) -> Vec<u64> {
    let floor = think_floor(gaps);
    gaps.iter()
        .map(|g| match floor {
            Some(f) if g.slept_ns >= LONG_SLEEP_NS => g.gap_ns.min(f),
            _ => g.gap_ns,
        })
        .collect()
}

impl Workload {
    /// Stream display name, as `comm(pid)`.
    pub fn stream_name(&self, s: u32) -> String {
        let st = &self.streams[s as usize];
        format!("{}({})", st.comm, st.pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iosched_core::timeline::Submitter;

    const DD: u32 = 100;
    const JBD2: u32 = 200;
    const NOISE: u32 = 300;

    fn bio(pid: u32, comm: &str, sector: u64, q: u64, c: u64) -> BioLife {
        BioLife {
            dev: Dev { major: 7, minor: 0 },
            submitter: Some(Submitter {
                pid,
                tgid: pid,
                comm: Comm::new(comm),
                cgroup_id: 0,
                ioprio: 0,
            }),
            op: Op::Write,
            flags: ReqFlags(ReqFlags::SYNC),
            sector,
            bytes: 4096,
            q: Some(q),
            g: Some(q),
            m: None,
            i: Some(q),
            d: Some(q),
            c,
            split: false,
            error: 0,
        }
    }

    /// Cycles of 1 ms: dd writes, wakes jbd2, jbd2 commits and wakes dd, which writes again
    /// 690 µs later. A third process's sync write completes between jbd2's completion and
    /// dd's next Q, every time: by timing alone, dd seems to wait for it.
    fn cycles(n: u64) -> (Vec<BioLife>, Vec<Wakeup>) {
        let mut bios = Vec::new();
        let mut wakeups = Vec::new();
        for k in 0..n {
            let t = k * 1_000_000;
            bios.push(bio(DD, "dd", 1000 + k * 8, t, t + 100_000));
            bios.push(bio(
                JBD2,
                "jbd2/loop0-8",
                5000 + k * 8,
                t + 120_000,
                t + 300_000,
            ));
            bios.push(bio(NOISE, "noise", 9000 + k * 8, t + 200_000, t + 320_000));
            wakeups.push(Wakeup {
                ts: t + 110_000,
                waker_pid: DD,
                wakee_pid: JBD2,
            });
            wakeups.push(Wakeup {
                ts: t + 310_000,
                waker_pid: JBD2,
                wakee_pid: DD,
            });
        }
        (bios, wakeups)
    }

    fn stream_of(w: &Workload, pid: u32) -> u32 {
        w.streams.iter().position(|s| s.pid == pid).unwrap() as u32
    }

    #[test]
    fn wakeups_replace_timing_when_recorded() {
        let n = 20;
        let (bios, wakeups) = cycles(n);
        let device = DeviceInfo::default();

        // Timing alone: the completion just before each of dd's Qs is the noise's.
        let timed = from_bios(device.clone(), bios.clone());
        let (dd, jbd2, noise) = (
            stream_of(&timed, DD),
            stream_of(&timed, JBD2),
            stream_of(&timed, NOISE),
        );
        assert_eq!(
            timed.streams[dd as usize].depends_on,
            [(noise, n as u32 - 1)]
        );

        // Observed: jbd2 woke dd, 10 µs after its commit write completed.
        let seen = from_bios_and_wakeups(device, bios, &wakeups);
        assert_eq!(stream_of(&seen, DD), dd);
        assert_eq!(seen.streams[dd as usize].depends_on, [(jbd2, n as u32 - 1)]);
        assert_eq!(seen.streams[jbd2 as usize].depends_on, [(dd, n as u32)]);
        // The noise was woken by nobody we saw: its Qs follow its own completions.
        assert!(seen.streams[noise as usize].depends_on.is_empty());
        let dd_ios: Vec<&Io> = seen.ios.iter().filter(|io| io.stream == dd).collect();
        for (k, io) in dd_ios.iter().enumerate().skip(1) {
            let Trigger::AfterCompletion { io: by, delay } = io.trigger else {
                panic!("dd's write {k}: {:?}", io.trigger);
            };
            assert_eq!(seen.ios[by as usize].stream, jbd2, "dd's write {k}");
            assert_eq!(seen.ios[by as usize].rec_c + delay, io.rec_q);
            assert_eq!(delay, 700_000);
        }
        assert_eq!(seen.streams[dd as usize].kind, StreamKind::ClosedLoop);
    }

    /// A wakeup that follows none of its waker's I/O (within the window) does not make the
    /// wakee depend on that I/O: the wakee's Qs follow its own completions.
    #[test]
    fn a_wakeup_long_after_the_wakers_io_is_no_dependency() {
        let n = 10;
        let period = 10_000_000;
        let mut bios = Vec::new();
        let mut wakeups = Vec::new();
        for k in 0..n {
            let t = k * period;
            bios.push(bio(DD, "dd", 1000 + k * 8, t, t + 100_000));
            bios.push(bio(
                JBD2,
                "jbd2/loop0-8",
                5000 + k * 8,
                t + 120_000,
                t + 300_000,
            ));
            // 9.6 ms after jbd2's completion, 100 µs before dd's next write.
            wakeups.push(Wakeup {
                ts: t + period - 100_000,
                waker_pid: JBD2,
                wakee_pid: DD,
            });
        }
        let w = from_bios_and_wakeups(DeviceInfo::default(), bios, &wakeups);
        let dd = stream_of(&w, DD);
        assert!(
            w.streams[dd as usize].depends_on.is_empty(),
            "{:?}",
            w.streams[dd as usize]
        );
        for io in w.ios.iter().filter(|io| io.stream == dd).skip(1) {
            let Trigger::AfterCompletion { io: by, .. } = io.trigger else {
                panic!("{:?}", io.trigger);
            };
            assert_eq!(w.ios[by as usize].stream, dd);
        }
    }

    /// A program with a known think time (10 µs) whose every other gap, after a long sleep,
    /// also holds a wake-up of 20-150 µs; one in ten wake-ups is free (the CPU was awake).
    /// The floor recovers the think time; gaps after long sleeps are replayed with it, gaps
    /// after short sleeps as recorded.
    #[test]
    fn think_time_is_the_low_end_of_gaps_after_long_sleeps() {
        const THINK: u64 = 10_000;
        let mut gaps = Vec::new();
        let mut rng = 7u64;
        for k in 0..400u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let wake = if k % 10 == 0 {
                0
            } else {
                20_000 + (rng >> 33) % 130_000
            };
            gaps.push(ThinkGap {
                slept_ns: 13_000_000,
                gap_ns: THINK + wake,
            });
        }
        // A short sleep: its gap is the program's pace, kept whatever it is.
        gaps.push(ThinkGap {
            slept_ns: 200_000,
            gap_ns: 70_000,
        });
        assert_eq!(think_floor(&gaps), Some(THINK));
        let delays = think_delays(&gaps);
        assert!(delays[..400].iter().all(|d| *d == THINK), "{delays:?}");
        assert_eq!(delays[400], 70_000);
        // Too few gaps to know their low end: all kept.
        let few = &gaps[1..THINK_MIN_GAPS];
        assert_eq!(think_floor(few), None);
        assert_eq!(
            think_delays(few),
            few.iter().map(|g| g.gap_ns).collect::<Vec<_>>()
        );
    }

    /// Two interleaved closed-loop readers, each waiting 13 ms for its own I/O (the device
    /// serves the other's meanwhile), then thinking 10 µs plus a wake-up: extraction replays
    /// each with its think time, not with the mean gap.
    #[test]
    fn interleaved_readers_are_replayed_with_their_think_time() {
        const THINK: u64 = 10_000;
        let mut bios = Vec::new();
        for (r, pid) in [(0u64, 1u32), (1, 2)] {
            let mut q = r * 6_500_000;
            for k in 0..100u64 {
                let c = q + 13_000_000;
                bios.push(bio(pid, "fio", r * 204_800 + k * 8, q, c));
                let wake = if k % 10 == 3 { 0 } else { 40_000 + k * 700 };
                q = c + THINK + wake;
            }
        }
        let w = from_bios(DeviceInfo::default(), bios);
        for s in 0..2 {
            let st = &w.streams[s];
            assert_eq!(st.kind, StreamKind::ClosedLoop, "{st:?}");
            assert!(st.depends_on.is_empty(), "{st:?}");
            assert_eq!(st.think_mean_ns, THINK as f64, "{st:?}");
            assert_eq!(st.think_samples, 99, "{st:?}");
        }
        let released = w
            .ios
            .iter()
            .filter(|io| matches!(io.trigger, Trigger::AfterCompletion { delay: THINK, .. }))
            .count();
        assert_eq!(released, 2 * 99);
    }
}
