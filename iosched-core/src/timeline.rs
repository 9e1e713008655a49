//! Every I/O's life rebuilt from the event stream: Q -> (X) -> G | M/F -> (I) -> D -> C, with
//! requeues (R, then D again), request merges, partial completions, and the device's state
//! (requests in the driver, bios waiting) at every instant.
//!
//! Requests and bios are matched by identity (the kernel's `struct request *` / `struct bio *`,
//! or the blktrace reader's synthetic ids), never by sector. The one exception is a split
//! (X): its tracepoint names only the new front bio, so the bio it was cut from is the one its
//! own task queued last (a split happens in the submitting task, inside the same
//! `submit_bio` call as that bio's Q).
//!
//! Streaming: state is held only for bios and requests in flight, so memory is bounded by the
//! device queues, not by the trace length. Results leave through a [`LifeSink`].
//!
//! Owns: lifecycle state and its anomalies. Must not: aggregate numbers (that is
//! `analysis`).

use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    devmap::DevMap,
    event::{Comm, Dev, Event, EventKind, Op, ReqFlags},
};

/// Who submitted an I/O: the task that queued its first bio (the Q event), not whoever ran
/// when it was inserted, issued or completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Submitter {
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
    pub cgroup_id: u64,
    /// The bio's I/O priority (class << 13 | level), as the Q event carried it.
    pub ioprio: u16,
}

impl Submitter {
    pub fn of(ev: &Event) -> Submitter {
        Submitter {
            pid: ev.pid,
            tgid: ev.tgid,
            comm: ev.comm,
            cgroup_id: ev.cgroup_id,
            ioprio: ev.ioprio,
        }
    }
}

/// Which way data moved, for per-direction numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Read,
    Write,
    /// Flush, discard, zone management, driver-private.
    Other,
}

impl Direction {
    pub const ALL: [Direction; 3] = [Direction::Read, Direction::Write, Direction::Other];

    pub fn of(op: Op) -> Direction {
        match op {
            Op::Read => Direction::Read,
            Op::Write | Op::WriteZeroes | Op::ZoneAppend => Direction::Write,
            _ => Direction::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Other => "other",
        }
    }
}

/// How a bio joined a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    Back,
    Front,
}

/// One bio's completed life. Timestamps are `None` where the event was not seen (before the
/// trace started, or a path that has none: no I with `none`, no G for a merged bio).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BioLife {
    pub dev: Dev,
    /// `None` when the Q event was not seen.
    pub submitter: Option<Submitter>,
    pub op: Op,
    pub flags: ReqFlags,
    pub sector: u64,
    pub bytes: u32,
    pub q: Option<u64>,
    pub g: Option<u64>,
    pub m: Option<(u64, MergeKind)>,
    /// Insert of the request this bio started (btt's I time of a bio).
    pub i: Option<u64>,
    /// Last issue of the request carrying it.
    pub d: Option<u64>,
    pub c: u64,
    /// Cut from a larger bio (X); its Q time is its parent's.
    pub split: bool,
    pub error: i32,
}

/// One request's completed life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestLife {
    pub dev: Dev,
    pub rq: u64,
    /// The submitter of its first bio.
    pub submitter: Option<Submitter>,
    pub op: Op,
    pub flags: ReqFlags,
    /// Start and size when issued (or when first seen).
    pub sector: u64,
    pub bytes: u32,
    /// The earliest Q of the bios it carried (as known at its issues; `None`: none of them
    /// was seen queued). Where a request's life starts for its submitter.
    pub q: Option<u64>,
    pub i: Option<u64>,
    /// First and last issue (they differ after a requeue).
    pub first_d: Option<u64>,
    pub d: Option<u64>,
    pub c: u64,
    pub requeues: u32,
    pub bios: u32,
    /// Request allocated (G) of the bio that started it; `None` where not seen (the request
    /// began before the trace, or a path without G such as a flush).
    pub g: Option<u64>,
    /// Bios merged into it (back or front merges, M) among those it completed.
    pub merges: u32,
    pub error: i32,
}

/// What a device is doing at an instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// Requests issued to the driver and not completed.
    pub in_driver: u32,
    /// Bios queued and not yet issued (in a plug, waiting for a request, or in the
    /// scheduler), plus requests without bios (flushes) inserted and not issued.
    pub pending: u32,
    /// Waiting bios by submitting pid (`pending` minus bio-less requests).
    pub pending_by_pid: FxHashMap<u32, u32>,
    /// The keys of `pending_by_pid`, in no particular order: a dense list for observers
    /// that scan the waiters at every state change (iterating a hash map walks its
    /// buckets, however few entries it has).
    pub waiting_pids: Vec<u32>,
    /// Bumped whenever a pid starts waiting (joins `pending_by_pid`): lets observers skip
    /// rescanning the waiters when no one new arrived.
    pub waiters_generation: u64,
    /// The pid that joined `pending_by_pid` last (when `waiters_generation` was last bumped):
    /// an observer one generation behind needs only this one.
    pub last_waiter: u32,
}

impl DeviceState {
    pub fn idle_with_pending(&self) -> bool {
        self.in_driver == 0 && self.pending > 0
    }
}

/// Things that could not be placed in a full life: counted, never guessed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Anomalies {
    /// Completions of requests never seen before (issued before the trace started).
    pub completions_of_unknown_requests: u64,
    /// Bios first seen after their Q (queued before the trace started).
    pub bios_without_queue: u64,
    /// Bios still in flight when the trace ended.
    pub bios_in_flight_at_end: u64,
    /// Requests still in flight when the trace ended.
    pub requests_in_flight_at_end: u64,
    /// An id reused while its previous life was still open: some event of that life was lost.
    pub reused_before_completion: u64,
    /// Splits whose parent bio could not be found.
    pub splits_without_parent: u64,
    /// Completions reporting an error.
    pub errors: u64,
}

/// Receives the timeline's results. Every method has an empty default so a sink takes only
/// what it needs.
#[allow(unused_variables)]
pub trait LifeSink {
    /// Any event, after the timeline processed it (for per-event counts).
    fn event(&mut self, ev: &Event) {}
    /// A bio queued (Q), with its submitter.
    fn queued(&mut self, ev: &Event, state: &DeviceState) {}
    /// A request issued to the driver (D); `submitter` is its first bio's.
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {}
    fn bio_done(&mut self, bio: &BioLife) {}
    /// A bio whose completion was never seen: its id came back for a new bio at `bio.c`,
    /// so it had completed by then (`c` is that bound, not its completion time). Counted in
    /// [`Anomalies::reused_before_completion`]; what to make of it is the sink's call.
    fn bio_lost(&mut self, bio: &BioLife) {}
    fn request_done(&mut self, rq: &RequestLife) {}
    /// The device's state changed at `ts` (called after the change).
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {}
}

#[derive(Clone, Debug)]
struct BioState {
    dev: Dev,
    submitter: Option<Submitter>,
    op: Op,
    flags: ReqFlags,
    sector: u64,
    bytes: u32,
    q: Option<u64>,
    g: Option<u64>,
    m: Option<(u64, MergeKind)>,
    i: Option<u64>,
    d: Option<u64>,
    split: bool,
    /// Counted in its device's `pending` (and must be uncounted exactly once).
    pending: bool,
}

#[derive(Clone, Debug)]
struct RqState {
    dev: Dev,
    op: Op,
    flags: ReqFlags,
    sector: u64,
    bytes: u32,
    /// Earliest Q of its bios known so far.
    q: Option<u64>,
    i: Option<u64>,
    first_d: Option<u64>,
    d: Option<u64>,
    /// Issued and not completed or requeued: counted in `in_driver`.
    in_driver: bool,
    /// A bio-less request counted in `pending`.
    pending: bool,
    requeues: u32,
    /// Bios in chain order (head first), as known at the last issue.
    bios: Vec<u64>,
    submitter: Option<Submitter>,
    error: i32,
    /// G and merges of the bios completed so far (a partial completion finishes some bios
    /// before the request ends).
    g: Option<u64>,
    merges: u32,
}

/// The lifecycle state machine. Feed it events in time order with [`push`](Self::push), then
/// call [`finish`](Self::finish).
pub struct Timeline {
    bios: FxHashMap<u64, BioState>,
    rqs: FxHashMap<u64, RqState>,
    devices: DevMap<DeviceState>,
    /// Devices without request events (zram...): a bio there goes Q -> C, nothing pends.
    bio_based: FxHashSet<Dev>,
    /// Last bio each task queued, for finding a split's parent.
    last_queued: FxHashMap<u32, u64>,
    anomalies: Anomalies,
    /// Emptied bio lists of finished requests, reused by new ones, and the list of bios a
    /// completion finishes: a request's life should not cost two allocations.
    spare_bio_lists: Vec<Vec<u64>>,
    finished_bios: Vec<u64>,
}

impl Timeline {
    pub fn new(bio_based: impl IntoIterator<Item = Dev>) -> Timeline {
        Timeline {
            bios: FxHashMap::default(),
            rqs: FxHashMap::default(),
            devices: DevMap::default(),
            bio_based: bio_based.into_iter().collect(),
            last_queued: FxHashMap::default(),
            anomalies: Anomalies::default(),
            spare_bio_lists: Vec::new(),
            finished_bios: Vec::new(),
        }
    }

    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// Every device's state now (after the last event pushed): what a window starting here
    /// inherits (see `Aggregator::starting_from`).
    pub fn device_states(&self) -> impl Iterator<Item = (Dev, &DeviceState)> {
        self.devices.iter().map(|(d, s)| (*d, s))
    }

    /// Bios and requests currently held (the memory bound).
    pub fn in_flight(&self) -> (usize, usize) {
        (self.bios.len(), self.rqs.len())
    }

    pub fn push(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        match ev.kind {
            EventKind::Queue => self.on_queue(ev, sink),
            EventKind::Split => self.on_split(ev, sink),
            EventKind::GetRq => self.on_getrq(ev, sink),
            EventKind::BackMerge => self.on_bio_merge(ev, MergeKind::Back, sink),
            EventKind::FrontMerge => self.on_bio_merge(ev, MergeKind::Front, sink),
            EventKind::RqMerge => self.on_rq_merge(ev, sink),
            EventKind::Insert => self.on_insert(ev, sink),
            EventKind::Issue => self.on_issue(ev, sink),
            EventKind::BioInRq => self.on_bio_in_rq(ev, sink),
            EventKind::Complete => self.on_complete(ev, sink),
            EventKind::Requeue => self.on_requeue(ev, sink),
            EventKind::BioComplete => self.on_bio_complete(ev, sink),
            _ => {}
        }
        sink.event(ev);
    }

    /// Ends the trace: whatever is still open is counted, not completed.
    pub fn finish(&mut self) -> &Anomalies {
        self.anomalies.bios_in_flight_at_end += self.bios.len() as u64;
        self.anomalies.requests_in_flight_at_end += self.rqs.len() as u64;
        self.bios.clear();
        self.rqs.clear();
        &self.anomalies
    }

    fn device(&mut self, dev: Dev) -> &mut DeviceState {
        self.devices.entry_or_default(dev)
    }

    fn report_state(&mut self, dev: Dev, ts: u64, sink: &mut impl LifeSink) {
        let state = self.devices.entry_or_default(dev);
        sink.device_state(dev, ts, state);
    }

    fn add_pending(&mut self, dev: Dev, pid: Option<u32>) {
        Self::add_pending_in(&mut self.devices, dev, pid);
    }

    fn add_pending_in(devices: &mut DevMap<DeviceState>, dev: Dev, pid: Option<u32>) {
        let d = devices.entry_or_default(dev);
        d.pending += 1;
        if let Some(pid) = pid {
            let n = d.pending_by_pid.entry(pid).or_insert(0);
            if *n == 0 {
                d.waiters_generation += 1;
                d.last_waiter = pid;
                d.waiting_pids.push(pid);
            }
            *n += 1;
        }
    }

    fn remove_pending(&mut self, dev: Dev, pid: Option<u32>) {
        let d = self.device(dev);
        d.pending = d.pending.saturating_sub(1);
        if let Some(pid) = pid
            && let Some(n) = d.pending_by_pid.get_mut(&pid)
        {
            *n -= 1;
            if *n == 0 {
                d.pending_by_pid.remove(&pid);
                if let Some(at) = d.waiting_pids.iter().position(|p| *p == pid) {
                    d.waiting_pids.swap_remove(at);
                }
            }
        }
    }

    /// A bio starts pending (if it is not already and its device has a queue to pend in).
    fn mark_pending(&mut self, bio: u64) {
        let Some(b) = self.bios.get_mut(&bio) else {
            return;
        };
        if b.pending || (!self.bio_based.is_empty() && self.bio_based.contains(&b.dev)) {
            return;
        }
        b.pending = true;
        let (dev, pid) = (b.dev, b.submitter.map(|s| s.pid));
        self.add_pending(dev, pid);
    }

    fn unmark_pending(&mut self, bio: u64) {
        let Some(b) = self.bios.get_mut(&bio) else {
            return;
        };
        if !b.pending {
            return;
        }
        b.pending = false;
        let (dev, pid) = (b.dev, b.submitter.map(|s| s.pid));
        self.remove_pending(dev, pid);
    }

    fn new_bio(ev: &Event, submitter: Option<Submitter>) -> BioState {
        BioState {
            dev: ev.dev,
            submitter,
            op: ev.op,
            flags: ev.flags,
            sector: ev.sector,
            bytes: ev.bytes,
            q: None,
            g: None,
            m: None,
            i: None,
            d: None,
            split: false,
            pending: false,
        }
    }

    /// Starts a new bio's life at `ts`, pending unless its device is bio-based, in one hash
    /// map operation. A bio already under this id is dropped first (and handed to the sink
    /// as lost): the id is being reused, so its completion was never seen.
    fn insert_bio(&mut self, id: u64, mut b: BioState, ts: u64, sink: &mut impl LifeSink) {
        let pends = !self.is_bio_based(b.dev);
        b.pending = pends;
        let (dev, pid) = (b.dev, b.submitter.map(|s| s.pid));
        if let Some(old) = self.bios.insert(id, b) {
            if old.pending {
                self.remove_pending(old.dev, old.submitter.map(|s| s.pid));
            }
            self.anomalies.reused_before_completion += 1;
            sink.bio_lost(&Self::bio_life(&old, ts, 0));
        }
        if pends {
            self.add_pending(dev, pid);
        }
    }

    fn is_bio_based(&self, dev: Dev) -> bool {
        // Most traces have none: skip hashing the device for each bio.
        !self.bio_based.is_empty() && self.bio_based.contains(&dev)
    }

    /// The bio `ev` names, created (as first seen mid-life) if unknown.
    fn bio_seen(&mut self, ev: &Event) -> &mut BioState {
        use std::collections::hash_map::Entry;
        let pends = !self.is_bio_based(ev.dev);
        match self.bios.entry(ev.bio) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(v) => {
                self.anomalies.bios_without_queue += 1;
                let b = v.insert(Self::new_bio(ev, None));
                // As `mark_pending` (not callable while `b` is borrowed); no submitter known.
                if pends {
                    b.pending = true;
                    Self::add_pending_in(&mut self.devices, ev.dev, None);
                }
                b
            }
        }
    }

    fn on_queue(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.bio == 0 {
            return;
        }
        let mut b = Self::new_bio(ev, Some(Submitter::of(ev)));
        b.q = Some(ev.ts_ns);
        self.insert_bio(ev.bio, b, ev.ts_ns, sink);
        self.last_queued.insert(ev.pid, ev.bio);
        let state = self.devices.entry_or_default(ev.dev);
        sink.queued(ev, state);
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    /// X: `ev.bio` is the new front part, `aux` the sector where the rest now starts.
    fn on_split(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.bio == 0 {
            return;
        }
        let parent = self
            .last_queued
            .get(&ev.pid)
            .copied()
            .filter(|p| *p != ev.bio)
            .and_then(|p| self.bios.get_mut(&p).map(|b| (p, b)))
            .filter(|(_, b)| b.dev == ev.dev && b.sector == ev.sector);
        let mut child = Self::new_bio(ev, None);
        child.split = true;
        match parent {
            Some((_, p)) => {
                child.submitter = p.submitter;
                child.q = p.q;
                p.sector = ev.aux;
                p.bytes = p.bytes.saturating_sub(ev.bytes);
            }
            None => self.anomalies.splits_without_parent += 1,
        }
        self.insert_bio(ev.bio, child, ev.ts_ns, sink);
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    fn on_getrq(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.bio == 0 {
            return;
        }
        let b = self.bio_seen(ev);
        b.g = Some(ev.ts_ns);
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    fn on_bio_merge(&mut self, ev: &Event, kind: MergeKind, sink: &mut impl LifeSink) {
        if ev.bio == 0 {
            return;
        }
        let b = self.bio_seen(ev);
        b.m = Some((ev.ts_ns, kind));
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    /// A request merged into another and freed: its bios now ride in the survivor and will be
    /// linked to it at its issue.
    fn on_rq_merge(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if let Some(r) = self.rqs.remove(&ev.rq)
            && r.pending
        {
            self.remove_pending(r.dev, None);
            self.report_state(ev.dev, ev.ts_ns, sink);
        }
    }

    /// Starts a new life for `ev.rq` if it has none, or if its old one is issued (then its
    /// completion was lost).
    fn request_seen(&mut self, ev: &Event, fresh_unless: fn(&RqState) -> bool) -> &mut RqState {
        use std::collections::hash_map::Entry;
        let spare = &mut self.spare_bio_lists;
        let mut fresh = || RqState {
            dev: ev.dev,
            op: ev.op,
            flags: ev.flags,
            sector: ev.sector,
            bytes: ev.bytes,
            q: None,
            i: None,
            first_d: None,
            d: None,
            in_driver: false,
            pending: false,
            requeues: 0,
            bios: spare.pop().unwrap_or_default(),
            submitter: None,
            error: 0,
            g: None,
            merges: 0,
        };
        // One hash map operation; the stale life is replaced in place (only fields other
        // than `rqs` are touched meanwhile).
        match self.rqs.entry(ev.rq) {
            Entry::Vacant(v) => v.insert(fresh()),
            Entry::Occupied(o) => {
                let r = o.into_mut();
                if !fresh_unless(r) {
                    let old = std::mem::replace(r, fresh());
                    self.anomalies.reused_before_completion += 1;
                    let d = self.devices.entry_or_default(old.dev);
                    if old.in_driver {
                        d.in_driver = d.in_driver.saturating_sub(1);
                    }
                    if old.pending {
                        // `remove_pending` without a pid.
                        d.pending = d.pending.saturating_sub(1);
                    }
                }
                r
            }
        }
    }

    fn on_insert(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.rq == 0 {
            return;
        }
        // Inserting again after a requeue continues the life; after an issue without requeue
        // it is a new life.
        let r = self.request_seen(ev, |r| !r.in_driver);
        r.i = Some(ev.ts_ns);
        // Its head bio, known before any issue: a request can complete without one (an empty
        // flush is ended by the flush machinery after a separate flush request), and its bio
        // must complete with it.
        if ev.bio != 0 && r.bios.is_empty() {
            r.bios.push(ev.bio);
        }
        let bioless = ev.bio == 0 && !r.pending && r.bios.is_empty();
        if bioless {
            r.pending = true;
            self.add_pending(ev.dev, None);
        }
        if ev.bio != 0 {
            let b = self.bio_seen(ev);
            b.i = Some(ev.ts_ns);
        }
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    fn on_issue(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.rq == 0 {
            return;
        }
        let r = self.request_seen(ev, |r| !r.in_driver);
        r.first_d.get_or_insert(ev.ts_ns);
        r.d = Some(ev.ts_ns);
        r.in_driver = true;
        r.sector = ev.sector;
        r.bytes = ev.bytes;
        r.op = ev.op;
        r.flags = ev.flags;
        r.bios.clear();
        let was_pending = std::mem::take(&mut r.pending);
        if ev.bio != 0 {
            r.bios.push(ev.bio);
        }
        if was_pending {
            self.remove_pending(ev.dev, None);
        }
        self.device(ev.dev).in_driver += 1;
        let submitter = if ev.bio != 0 {
            let b = self.bio_seen(ev);
            b.d = Some(ev.ts_ns);
            let (s, q) = (b.submitter, b.q);
            self.unmark_pending(ev.bio);
            (s, q)
        } else {
            (None, None)
        };
        let (submitter, q) = submitter;
        let r = self.rqs.get_mut(&ev.rq).expect("created above");
        r.q = earliest(r.q, q);
        if r.submitter.is_none() {
            r.submitter = submitter;
        }
        let submitter = r.submitter;
        let state = self.devices.entry_or_default(ev.dev);
        sink.issued(ev, submitter.as_ref(), state);
        self.report_state(ev.dev, ev.ts_ns, sink);
    }

    /// A bio found in a request's chain at issue (position `aux` >= 1).
    fn on_bio_in_rq(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        let Some(r) = self.rqs.get_mut(&ev.rq) else {
            return;
        };
        let d = r.d;
        if !r.bios.contains(&ev.bio) {
            r.bios.push(ev.bio);
        }
        let dev = r.dev;
        let bio_ev = Event { dev, ..*ev };
        let b = self.bio_seen(&bio_ev);
        b.d = d;
        let (s, q) = (b.submitter, b.q);
        self.unmark_pending(ev.bio);
        if let Some(r) = self.rqs.get_mut(&ev.rq) {
            r.q = earliest(r.q, q);
            if r.submitter.is_none() {
                r.submitter = s;
            }
        }
        self.report_state(dev, ev.ts_ns, sink);
    }

    fn on_complete(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.error != 0 {
            self.anomalies.errors += 1;
        }
        if !self.rqs.contains_key(&ev.rq) {
            // A request never inserted or issued can still end: the flush machinery ends an
            // empty flush's request (Q, G, then a separate flush request D/C) without either.
            // Its head bio names it; otherwise it was issued before the trace began.
            if ev.bio != 0 && self.bios.contains_key(&ev.bio) {
                let b = &self.bios[&ev.bio];
                let q = b.q;
                let head = Event {
                    sector: b.sector,
                    bytes: b.bytes,
                    op: b.op,
                    flags: b.flags,
                    ..*ev
                };
                let r = self.request_seen(&head, |_| true);
                r.q = q;
                r.bios.push(ev.bio);
            } else {
                self.anomalies.completions_of_unknown_requests += 1;
                return;
            }
        }
        let r = self.rqs.get_mut(&ev.rq).expect("present or created above");
        if ev.error != 0 {
            r.error = ev.error;
        }
        // `bytes` is what remained before this completion, `aux` what it completed: the
        // request ends when nothing remains.
        let done = ev.aux >= u64::from(ev.bytes);
        let mut budget = ev.aux;
        let mut finished_bios = std::mem::take(&mut self.finished_bios);
        finished_bios.clear();
        let mut keep = 0;
        for (n, bio) in r.bios.iter().enumerate() {
            if done {
                finished_bios.push(*bio);
                continue;
            }
            let Some(b) = self.bios.get_mut(bio) else {
                continue;
            };
            let size = u64::from(b.bytes);
            if budget >= size && budget > 0 {
                budget -= size;
                finished_bios.push(*bio);
                keep = n + 1;
            } else {
                // Partly done: the rest completes later.
                b.sector += budget >> 9;
                b.bytes -= budget as u32;
                break;
            }
        }
        if !done {
            r.bios.drain(..keep);
        }
        let error = r.error;
        let (mut g, mut merges) = (r.g, r.merges);
        for &bio in &finished_bios {
            self.unmark_pending(bio);
            if let Some(b) = self.bios.remove(&bio) {
                g = match (g, b.g) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                merges += u32::from(b.m.is_some());
                sink.bio_done(&Self::bio_life(&b, ev.ts_ns, error));
            }
        }
        self.finished_bios = finished_bios;
        if !done && let Some(r) = self.rqs.get_mut(&ev.rq) {
            (r.g, r.merges) = (g, merges);
        }
        if done {
            let r = self.rqs.remove(&ev.rq).expect("found above");
            if r.in_driver {
                let d = self.device(r.dev);
                d.in_driver = d.in_driver.saturating_sub(1);
            }
            if r.pending {
                self.remove_pending(r.dev, None);
            }
            sink.request_done(&RequestLife {
                dev: r.dev,
                rq: ev.rq,
                submitter: r.submitter,
                op: r.op,
                flags: r.flags,
                sector: r.sector,
                bytes: r.bytes,
                q: r.q,
                i: r.i,
                first_d: r.first_d,
                d: r.d,
                c: ev.ts_ns,
                requeues: r.requeues,
                bios: r.bios.len() as u32,
                g,
                merges,
                error: r.error,
            });
            self.report_state(r.dev, ev.ts_ns, sink);
            self.recycle(r.bios);
        }
    }

    /// Keeps a finished request's bio list for a new request (a few are enough: requests in
    /// flight at once come and go together).
    fn recycle(&mut self, mut bios: Vec<u64>) {
        if self.spare_bio_lists.len() < 64 && bios.capacity() > 0 {
            bios.clear();
            self.spare_bio_lists.push(bios);
        }
    }

    fn bio_life(b: &BioState, c: u64, error: i32) -> BioLife {
        BioLife {
            dev: b.dev,
            submitter: b.submitter,
            op: b.op,
            flags: b.flags,
            sector: b.sector,
            bytes: b.bytes,
            q: b.q,
            g: b.g,
            m: b.m,
            i: b.i,
            d: b.d,
            c,
            split: b.split,
            error,
        }
    }

    /// R: the request leaves the driver and waits again; its bios are pending until the next
    /// issue.
    fn on_requeue(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        let Some(r) = self.rqs.get_mut(&ev.rq) else {
            return;
        };
        r.requeues += 1;
        let was_in_driver = std::mem::take(&mut r.in_driver);
        let bios = r.bios.clone();
        let dev = r.dev;
        if was_in_driver {
            let d = self.device(dev);
            d.in_driver = d.in_driver.saturating_sub(1);
        }
        for bio in bios {
            self.mark_pending(bio);
        }
        self.report_state(dev, ev.ts_ns, sink);
    }

    /// A bio-based device completes bios directly.
    fn on_bio_complete(&mut self, ev: &Event, sink: &mut impl LifeSink) {
        if ev.error != 0 {
            self.anomalies.errors += 1;
        }
        let Some(b) = self.bios.remove(&ev.bio) else {
            return;
        };
        if b.pending {
            self.remove_pending(b.dev, b.submitter.map(|s| s.pid));
        }
        sink.bio_done(&Self::bio_life(&b, ev.ts_ns, ev.error));
        self.report_state(ev.dev, ev.ts_ns, sink);
    }
}

/// The earlier of two optional times.
#[inline]
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A small request simulator that writes events, for tests here and above (feature
/// `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod sim;
#[cfg(test)]
mod tests;
