//! The discrete-event simulator: releases the workload's bios by their triggers, builds
//! requests as blk-mq would (plug, plug merge, scheduler bio merge), hands them to a
//! scheduler model, times them on the device model, and writes what happened as our own
//! [`Event`]s (Q, G, M/F, I, D, C with synthetic ids), so a replay is analysed by the same
//! code as a recording.
//!
//! Plugging: bios of one process queued back to back (the next one follows within
//! [`PLUG_NS`] of this one's Q) are held in the process's plug and merged there; the plug is
//! flushed when the batch ends or holds [`PLUG_MAX`] requests.
//!
//! Owns: time, blk-mq plumbing. Must not: decide order (the scheduler does) or aggregate.
//!
//! This file holds the configuration and the result, the simulator's state and its event
//! loop ([`run`]: the agenda, the scheduler's timer and reruns), and the events it writes.
//! - `index`: what the run looks up by bio and by stream, built before it starts
//!   (dependents by trigger, program order, when each process is gone);
//! - `submission`: a released bio's way to its Q: program order, its process's window,
//!   the end of a time-bounded process;
//! - `allocation`: a bio's request: the tags and the scheduler's depths, sleeping for one
//!   (or in wbt) and waking;
//! - `plug`: plug merges, the scheduler's bio merges, the plug's flush into the scheduler;
//! - `driver`: running the queue, issuing to the device model, completions.

mod allocation;
mod driver;
mod index;
mod plug;
mod submission;

use std::{cmp::Reverse, collections::BinaryHeap, num::NonZeroU32};

use rustc_hash::FxHashMap;

use iosched_core::event::{Dev, Event, EventKind};

use super::{
    agenda::Agenda,
    device::DeviceModel,
    sched::{Ctx, Decided, Rq, RqId, Scheduler},
    workload::{StreamKind, Workload},
};

use allocation::Asleep;
use index::{BioIndex, last_io_at_given};

pub(crate) use index::last_io_at;

/// A bio queued this soon after the previous one of its process joins its plug.
pub const PLUG_NS: u64 = 50_000;

/// `BLK_MAX_REQUEST_COUNT`.
pub const PLUG_MAX: usize = 32;

/// A scheduler asked to dispatch with work pending but nothing dispatchable is run again
/// this long after (`BLK_MQ_BUDGET_DELAY`) even without an event.
const RERUN_NS: u64 = 3_000_000;

/// Simulator settings (the keys of `sched::SIM_KEYS`).
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// Driver tags: requests in the device at once.
    pub depth: u32,
    /// Requests that may exist at once (scheduler tags, `nr_requests`; with `none`, the
    /// driver tags). A bio that cannot merge and finds none free sleeps in request
    /// allocation, in FIFO order, and its process submits nothing more until it has one:
    /// such bios merge with nothing (seed 002 under `none`).
    pub max_requests: u32,
    /// 0: all merges; 1: plug merges only; 2: none.
    pub nomerges: u8,
    /// Most bios a process with several in flight keeps in flight, instead of
    /// [`super::workload::Stream::replay_window`] (its recorded maximum, or for a process
    /// the queue held back, at least the requests of this configuration).
    pub iodepth: Option<u32>,
    pub max_sectors: u32,
    /// Writeback throttling: at most this many requests of wbt-tracked bios (buffered
    /// writes, discards: [`super::throttle::wbt_tracked`]) exist at once; a tracked bio
    /// that finds them all in use sleeps before its request is allocated (`rq_qos_throttle`,
    /// between Q and G), and its process with it. `None`: no wbt (the models' default).
    pub wbt_limit: Option<u32>,
    /// wbt wakes its sleepers only once every tracked request has completed (the kernel's
    /// rule on a device with a volatile write cache), not as soon as one is below the limit.
    pub wbt_drain: bool,
    /// Write events for the report (off for speed measurements).
    pub emit: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            depth: 32,
            max_requests: u32::MAX,
            nomerges: 0,
            iodepth: None,
            max_sectors: 2560,
            wbt_limit: None,
            wbt_drain: false,
            emit: true,
        }
    }
}

/// What a run produced.
pub struct SimResult {
    pub events: Vec<Event>,
    pub decisions: Vec<Decided>,
    pub requests: u64,
    pub bios: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Completion time of each bio, ns after the start; empty without events
    /// ([`SimConfig::emit`]).
    pub completion: Vec<u64>,
    /// When each bio was queued (Q), ns after the start; empty without events.
    pub queued: Vec<u64>,
    /// How long each bio the wbt gate put to sleep waited, from its Q to its request.
    pub wbt_waits: Vec<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrive(u32),
    Complete(RqId),
    Timer,
}

/// The agenda's lane of completions: a server completes its requests in the order they
/// were issued, and with several servers a request waits at most behind the others in
/// the driver ([`super::agenda`]).
const COMPLETION_LANE: usize = 0;

/// Lanes of timers, one per delay a timer was armed with (a scheduler arms its timers
/// a few fixed delays ahead: BFQ's and CFQ's idle slices, the rerun); timers of other
/// delays go to the agenda's heap.
const TIMER_LANES: usize = 4;

/// Base of synthetic ids; bios and requests never collide.
const BIO_ID: u64 = 1 << 40;

const RQ_ID: u64 = 1 << 20;

/// The workload index of the bio a replay's event names (`Event::bio`).
pub fn bio_index(bio: u64) -> Option<u32> {
    bio.checked_sub(BIO_ID).and_then(|i| u32::try_from(i).ok())
}

/// Events are stamped from here (CLOCK_MONOTONIC-like, non-zero).
pub const T0: u64 = 1_000_000_000;

struct Sim<'a> {
    w: &'a Workload,
    dev: &'a DeviceModel,
    cfg: SimConfig,
    sched: Box<dyn Scheduler + 'a>,
    agenda: Agenda<Ev>,
    /// The delay each timer lane after [`COMPLETION_LANE`] takes, as lanes are given out.
    timer_delays: Vec<u64>,
    now: u64,
    rqs: Vec<Rq>,
    next_in_rq: Vec<u32>,
    /// Dependents by trigger: bios released by a Q / by a completion ([`BioIndex`]).
    after_q: Vec<Option<NonZeroU32>>,
    after_c: Vec<Option<NonZeroU32>>,
    sibling: Vec<Option<NonZeroU32>>,
    plugs: Vec<Vec<RqId>>,
    /// Bios of each stream still to arrive (its future).
    remaining: Vec<u32>,
    /// Each stream's last recorded completion, ns after the start ([`Ctx::last_io_at`]).
    last_io_at: Vec<u64>,
    /// Each stream exits as soon as its I/O is done ([`exits_promptly`]).
    ///
    /// [`exits_promptly`]: index::exits_promptly
    exits_promptly: Vec<bool>,
    by_end: FxHashMap<u64, RqId>,
    by_start: FxHashMap<u64, RqId>,
    bypass: std::collections::VecDeque<RqId>,
    bypassed: Vec<bool>,
    /// Of the bypassing requests, the data of writes with REQ_PREFLUSH: at the head of the
    /// scheduler's dispatch list ([`Scheduler::insert_at_head`]), so the scheduler sees
    /// their issue and completion.
    at_head: Vec<bool>,
    /// The recording issued flushes: the device has a write cache, so REQ_PREFLUSH data
    /// goes through the flush machinery (without one the flag is dropped).
    write_cache: bool,
    in_driver: u32,
    free_at: Vec<u64>,
    head: u64,
    timer_at: Option<u64>,
    rerun_at: Option<u64>,
    /// Requests allocated and not completed.
    live_requests: u32,
    /// The request holding the first tag of each word of the tag bitmap
    /// ([`super::sched::sbitmap_words`]), the only tags a bio whose depth the scheduler cut
    /// to 1 may take. An allocation takes a free one before any other tag: once a search
    /// starts past a word's allowed bits it wraps to the word's lowest free bit, and a
    /// failed one restarts at tag 0 (`__sbitmap_get_word`, `update_alloc_hint_after_get`).
    first_tags: Vec<Option<RqId>>,
    /// Bios asleep in request allocation, per stream in its program order (they wake in
    /// the order they went to sleep, [`Asleep::seq`]), and the next `seq`. Per stream, how
    /// many bios are asleep here or in wbt.
    blocked: Vec<std::collections::VecDeque<Asleep>>,
    blocked_seq: u64,
    /// Bios in `blocked`, all processes: none, and a pass has nothing to look at.
    asleep: usize,
    /// The streams with a bio in `blocked`, in no order: a pass starts from their first
    /// sleepers, without a look at every stream's queue.
    sleepers: Vec<usize>,
    /// Scratch for [`Sim::unblock`]'s order of processes to wake, kept between passes: a
    /// pass runs at every completion, and most find a sleeper.
    wake_order: BinaryHeap<Reverse<(u64, usize)>>,
    blocked_of: Vec<u32>,
    /// Bios asleep in wbt (as `blocked`, a queue of its own: wbt's wait queue is not the
    /// tags'), per stream how many of them, requests of tracked bios that exist, and per
    /// request whether it is one.
    wbt_asleep: std::collections::VecDeque<(u32, bool)>,
    in_wbt: Vec<u32>,
    tracked_live: u32,
    rq_tracked: Vec<bool>,
    wbt_waits: Vec<u64>,
    /// Per stream: most bios it keeps in flight (its recorded maximum, for processes with
    /// several in flight: fio's iodepth), bios in flight, and bios held back until one
    /// completes. Without the window a replay under a scheduler that lets bios through
    /// faster than the recorded one would flood the device with the whole future.
    window: Vec<u32>,
    in_flight: Vec<u32>,
    held: Vec<std::collections::VecDeque<u32>>,
    /// Program order: a thread submits its bios in the recorded order, whatever released
    /// each. Per stream the bio expected next, and bios released before their turn; per
    /// bio the stream's next one.
    expected: Vec<u32>,
    early: Vec<BinaryHeap<Reverse<u32>>>,
    next_of: Vec<u32>,
    events: Vec<Event>,
    completion: Vec<u64>,
    queued: Vec<u64>,
    template: Event,
}

/// The context parts from the simulator's fields (a macro, so that the scheduler field can be
/// borrowed mutably beside them).
macro_rules! parts {
    ($s:expr) => {
        $crate::sim::CtxParts {
            now: $s.now,
            in_driver: $s.in_driver,
            depth: $s.cfg.depth,
            rotational: $s.dev.rotational(),
            remaining: &$s.remaining,
            last_io_at: &$s.last_io_at,
        }
    };
}

// A path for the submodules (`use super::parts`): they are declared above the macro, out of
// its textual scope.
use parts;

/// The parts of a [`Ctx`] that do not borrow the request table (so the scheduler, also in
/// the simulator, can be borrowed mutably beside it).
struct CtxParts<'a> {
    now: u64,
    in_driver: u32,
    depth: u32,
    rotational: bool,
    remaining: &'a [u32],
    last_io_at: &'a [u64],
}

impl<'a> CtxParts<'a> {
    fn ctx<'b>(&'b self, rqs: &'b [Rq]) -> Ctx<'b> {
        Ctx {
            now: self.now,
            rqs,
            in_driver: self.in_driver,
            depth: self.depth,
            rotational: self.rotational,
            remaining: self.remaining,
            last_io_at: self.last_io_at,
        }
    }
}

/// Replays `w` under `sched` on `dev`.
pub fn run(
    w: &Workload,
    dev: &DeviceModel,
    sched: Box<dyn Scheduler + '_>,
    cfg: SimConfig,
) -> SimResult {
    let n = w.ios.len();
    let BioIndex {
        after_q,
        after_c,
        sibling,
        open,
        next_of,
        first_of,
        prompt,
        last_c,
    } = BioIndex::new(w);
    let mut sched = sched;
    // Without events nobody reads the decisions either.
    sched.keep_decisions(cfg.emit);
    let mut sim = Sim {
        w,
        dev,
        cfg,
        sched,
        agenda: Agenda::new(),
        timer_delays: Vec::with_capacity(TIMER_LANES),
        now: 0,
        rqs: Vec::with_capacity(n),
        next_in_rq: vec![u32::MAX; n],
        after_q,
        after_c,
        sibling,
        plugs: vec![Vec::new(); w.streams.len()],
        remaining: w.streams.iter().map(|s| s.ios).collect(),
        last_io_at: last_io_at_given(w, w.start_ns, &last_c, &prompt),
        exits_promptly: prompt,
        by_end: FxHashMap::default(),
        by_start: FxHashMap::default(),
        bypass: Default::default(),
        bypassed: Vec::with_capacity(n),
        at_head: Vec::with_capacity(n),
        // A flush is the one request issued without data.
        write_cache: w.service.iter().any(|s| s.sectors == 0),
        in_driver: 0,
        free_at: vec![0; dev.servers()],
        head: 0,
        timer_at: None,
        rerun_at: None,
        live_requests: 0,
        first_tags: vec![
            None;
            if cfg.max_requests == u32::MAX {
                0
            } else {
                super::sched::sbitmap_words(cfg.max_requests) as usize
            }
        ],
        blocked: vec![Default::default(); w.streams.len()],
        blocked_seq: 0,
        asleep: 0,
        sleepers: Vec::new(),
        wake_order: BinaryHeap::new(),
        blocked_of: vec![0; w.streams.len()],
        wbt_asleep: Default::default(),
        in_wbt: vec![0; w.streams.len()],
        tracked_live: 0,
        rq_tracked: Vec::with_capacity(n),
        wbt_waits: Vec::new(),
        window: w
            .streams
            .iter()
            .map(|s| match s.kind {
                StreamKind::Windowed => cfg
                    .iodepth
                    .unwrap_or_else(|| s.replay_window(cfg.max_requests))
                    .max(1),
                _ => u32::MAX,
            })
            .collect(),
        in_flight: vec![0; w.streams.len()],
        held: vec![Default::default(); w.streams.len()],
        expected: first_of,
        early: vec![BinaryHeap::new(); w.streams.len()],
        next_of,
        events: Vec::with_capacity(if cfg.emit { n * 6 } else { 0 }),
        // Per-bio times for the result, and Q times for wbt's waits: a run without events
        // (speed measurements) has no use for them, and its time went into their pages.
        completion: vec![0; if cfg.emit { n } else { 0 }],
        queued: vec![
            0;
            if cfg.emit || cfg.wbt_limit.is_some() {
                n
            } else {
                0
            }
        ],
        template: Event {
            dev: w.device.dev,
            ..Event::blank()
        },
    };
    // Open-loop bios come from a sorted list, not the agenda: a writeback stream can hold
    // most of a trace's bios, and the agenda stays as small as what is in flight.
    let mut open = open;
    open.sort_unstable();
    let mut open = open.into_iter().peekable();
    let mut stalled_reruns = 0u32;
    loop {
        let (t, ev) = match sim.agenda.pop_before(open.peek().map(|(t, _)| *t)) {
            Some(due) => due,
            None => match open.next() {
                Some((t, i)) => (t, Ev::Arrive(i)),
                None => break,
            },
        };
        sim.now = t;
        match ev {
            Ev::Arrive(i) => {
                stalled_reruns = 0;
                sim.arrive(i);
            }
            Ev::Complete(rq) => {
                stalled_reruns = 0;
                sim.complete(rq);
            }
            Ev::Timer => {
                if sim.timer_at == Some(t) {
                    sim.timer_at = None;
                    let ctx = parts!(sim);
                    sim.sched.timer(&ctx.ctx(&sim.rqs));
                } else if sim.rerun_at == Some(t) {
                    sim.rerun_at = None;
                    // Nothing left to arrive or complete, and the scheduler still holds
                    // work it will not dispatch: a model bug; stop rather than spin.
                    stalled_reruns += 1;
                    if stalled_reruns > 10_000 && sim.agenda.is_empty() && open.peek().is_none() {
                        break;
                    }
                } else {
                    continue;
                }
            }
        }
        sim.run_queue();
    }
    let decisions = sim.sched.take_decisions();
    SimResult {
        requests: sim.rqs.len() as u64,
        bios: n as u64,
        start_ns: T0,
        end_ns: T0 + sim.now,
        events: sim.events,
        decisions,
        completion: sim.completion,
        queued: sim.queued,
        wbt_waits: sim.wbt_waits,
    }
}

impl<'a> Sim<'a> {
    /// `ev` is due at `t` (not before now).
    fn push(&mut self, t: u64, ev: Ev) {
        let lane = match ev {
            Ev::Arrive(_) => None,
            Ev::Complete(_) => Some(COMPLETION_LANE),
            Ev::Timer => {
                let delay = t.saturating_sub(self.now);
                match self.timer_delays.iter().position(|d| *d == delay) {
                    Some(k) => Some(1 + k),
                    None if self.timer_delays.len() < TIMER_LANES => {
                        self.timer_delays.push(delay);
                        Some(self.timer_delays.len())
                    }
                    None => None,
                }
            }
        };
        self.agenda.push(t, ev, lane);
    }

    fn emit(&mut self, kind: EventKind, f: impl FnOnce(&mut Event)) {
        if !self.cfg.emit {
            return;
        }
        let mut ev = self.template;
        ev.ts_ns = T0 + self.now;
        ev.kind = kind;
        f(&mut ev);
        self.events.push(ev);
    }

    fn emit_bio(&mut self, kind: EventKind, i: u32) {
        if !self.cfg.emit {
            return;
        }
        let io = self.w.ios[i as usize];
        let st = &self.w.streams[io.stream as usize];
        let (pid, tgid, comm, cg) = (st.pid, st.tgid, st.comm, st.cgroup_id);
        self.emit(kind, |ev| {
            ev.pid = pid;
            ev.tgid = tgid;
            ev.comm = comm;
            ev.cgroup_id = cg;
            ev.bio = BIO_ID + u64::from(i);
            ev.sector = io.sector;
            ev.bytes = io.sectors << 9;
            ev.op = io.op;
            ev.flags = io.flags;
        });
    }
}

/// The device a replay's events are on, as the source's device list names it.
pub fn device_for(w: &Workload) -> Dev {
    w.device.dev
}
