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

use std::{cmp::Reverse, collections::BinaryHeap, num::NonZeroU32};

use rustc_hash::FxHashMap;

use iosched_core::event::{Dev, Event, EventKind, Op, ReqFlags};

use super::{
    agenda::Agenda,
    device::DeviceModel,
    sched::{Ctx, Decided, Rq, RqId, RqState, Scheduler},
    workload::{Io, StreamKind, Trigger, Workload},
};

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

/// The tag depth a bio's request allocation was given (`blk_mq_alloc_data.shallow_depth`),
/// fixed at its first attempt: a bio asleep for a tag retries with the depth it went to
/// sleep with (`blk_mq_get_tag` loops without calling `limit_depth` again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TagDepth {
    /// As many requests as the scheduler lets its kind have ([`Scheduler::request_limit`]).
    Limit,
    /// Cut to 1 ([`Scheduler::depth_one_tags`]): only the first tag of the first `n` words.
    FirstTags(u32),
}

/// A bio asleep in request allocation.
#[derive(Clone, Copy, Debug)]
struct Asleep {
    bio: u32,
    /// Queued (Q) already: the one that went to sleep was; those its process has yet to
    /// submit after it are queued when it wakes.
    queued: bool,
    /// The depth of its first attempt, once it made one.
    depth: Option<TagDepth>,
    /// Its place in the order bios went to sleep, across processes.
    seq: u64,
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

/// What the simulator looks up by bio and by stream, from one pass over the workload's
/// bios (a bio is ~70 bytes, a table of millions of them is read from memory each pass:
/// building each table in its own pass was a twentieth of a replay).
struct BioIndex {
    /// Dependents by trigger, as lists in workload order: of bio `i`, the first bio its Q
    /// releases and the first its completion releases, and of each such bio the next one
    /// released by the same event. Entries are indices plus one: a table
    /// of `None` is zeroed memory, whose pages a workload without such triggers never
    /// touches.
    after_q: Vec<Option<NonZeroU32>>,
    after_c: Vec<Option<NonZeroU32>>,
    sibling: Vec<Option<NonZeroU32>>,
    /// Open-loop bios by their time.
    open: Vec<(u64, u32)>,
    /// Per bio its stream's next one, and per stream its first (`u32::MAX`: none).
    next_of: Vec<u32>,
    first_of: Vec<u32>,
    /// Per stream, [`exits_promptly`] and its last recorded completion.
    prompt: Vec<bool>,
    last_c: Vec<u64>,
}

/// Bio `j` as a list entry.
fn entry(j: usize) -> Option<NonZeroU32> {
    NonZeroU32::new(u32::try_from(j + 1).expect("bio indices are u32"))
}

/// The bio of a list entry.
fn bio_of(entry: NonZeroU32) -> u32 {
    entry.get() - 1
}

impl BioIndex {
    fn new(w: &Workload) -> BioIndex {
        let n = w.ios.len();
        let streams = w.streams.len();
        let mut after_q = vec![None; n];
        let mut after_c = vec![None; n];
        let mut sibling = vec![None; n];
        let mut open = Vec::new();
        let mut next_of = vec![u32::MAX; n];
        let mut first_of = vec![u32::MAX; streams];
        let mut prompt = vec![true; streams];
        let mut last_c = vec![0u64; streams];
        // Back to front: each bio goes to the head of its lists, which end in workload order.
        for (j, io) in w.ios.iter().enumerate().rev() {
            let first = match io.trigger {
                Trigger::At(t) => {
                    open.push((t, j as u32));
                    None
                }
                Trigger::AfterQueue { io, .. } => Some(&mut after_q[io as usize]),
                Trigger::AfterCompletion { io, .. } => Some(&mut after_c[io as usize]),
            };
            if let Some(first) = first {
                sibling[j] = std::mem::replace(first, entry(j));
            }
            let s = io.stream as usize;
            next_of[j] = std::mem::replace(&mut first_of[s], j as u32);
            prompt[s] &= waits_in_submit(io);
            last_c[s] = last_c[s].max(io.rec_c);
        }
        BioIndex {
            after_q,
            after_c,
            sibling,
            open,
            next_of,
            first_of,
            prompt,
            last_c,
        }
    }
}

/// The context parts from the simulator's fields (a macro, so that the scheduler field can be
/// borrowed mutably beside them).
macro_rules! parts {
    ($s:expr) => {
        CtxParts {
            now: $s.now,
            in_driver: $s.in_driver,
            depth: $s.cfg.depth,
            rotational: $s.dev.rotational(),
            remaining: &$s.remaining,
            last_io_at: &$s.last_io_at,
        }
    };
}

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

/// When each stream's last recorded I/O completed, ns after `origin` ([`Ctx::last_io_at`]);
/// `u64::MAX` for a stream whose I/O ended before the last tenth of the workload
/// ([`super::continuation::RAN_TO_END_SHARE`]). A process seen to linger after its last I/O
/// (BFQ's idle timer running out for it) is one whose job ended with the recording (fio's
/// `--runtime`); of one that stopped midway the trace says nothing of the kind: it is
/// taken as gone once its I/O is done, as before. (Completions, not Qs: a reader served in
/// BFQ's slices issues its last read at the end of its last slice, and waits for its turn.)
///
/// Also `u64::MAX` for a process that waited for each of its reads inside the call that
/// submitted it ([`waits_in_submit`]): nothing of its I/O is left to tear down, so it
/// exits as soon as its last read is back. The lingering above is an asynchronous
/// submitter's: in BFQ's logs of the test bed, eight fio libaio readers (`R` bios) each
/// exited (`exit_bfqq`) 28-34 ms after their last completion, past BFQ's 8 ms idle, while
/// of 32 fio psync readers (`RS`) 21 of the 27 exits logged came within 1.5 ms of their last
/// completion, the rest within 9 ms, and BFQ's idle timer never ran out for any of them.
pub(crate) fn last_io_at(w: &Workload, origin: u64) -> Vec<u64> {
    let mut last_c = vec![0u64; w.streams.len()];
    for io in &w.ios {
        let t = &mut last_c[io.stream as usize];
        *t = (*t).max(io.rec_c);
    }
    last_io_at_given(w, origin, &last_c, &exits_promptly(w))
}

/// [`last_io_at`] from each stream's last recorded completion and [`exits_promptly`]'s
/// answer (the simulator gathers both in its one pass over the bios, [`BioIndex`]).
fn last_io_at_given(
    w: &Workload,
    origin: u64,
    last_c: &[u64],
    exits_promptly: &[bool],
) -> Vec<u64> {
    let span = w.end_ns.saturating_sub(w.start_ns) as f64;
    last_c
        .iter()
        .zip(exits_promptly)
        .map(|(&t, &prompt)| {
            let from_start = t.saturating_sub(w.start_ns) as f64;
            if prompt || from_start < super::continuation::RAN_TO_END_SHARE * span {
                u64::MAX
            } else {
                t.saturating_sub(origin)
            }
        })
        .collect()
}

/// Whether each stream's process exits as soon as its last I/O is back: every bio of it is
/// a read it waited for inside the call that submitted it ([`waits_in_submit`]).
pub(crate) fn exits_promptly(w: &Workload) -> Vec<bool> {
    let mut prompt = vec![true; w.streams.len()];
    for io in &w.ios {
        prompt[io.stream as usize] &= waits_in_submit(io);
    }
    prompt
}

/// A read with REQ_SYNC: the kernel's `submit_bio_wait()` sets it on the bio it then sleeps
/// on (block/bio.c), and a synchronous direct read of a block device (`pread`, fio's psync:
/// `__blkdev_direct_IO_simple` in block/fops.c) goes through it; an asynchronous one
/// (libaio, io_uring: `__blkdev_direct_IO_async`) and page-cache reads do not set it.
fn waits_in_submit(io: &Io) -> bool {
    io.op == Op::Read && io.flags.has(ReqFlags::SYNC)
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

    /// A time-bounded process past its end: it submits nothing more. Its bios still to
    /// come are dropped, and the scheduler sees it has no future (BFQ does not idle for it).
    fn ended(&mut self, s: usize) -> bool {
        self.ended_at(s, self.now)
    }

    /// [`Self::ended`] for a process whose next bio would come at `t`: fio checks its clock
    /// before each I/O, so a process that would submit past its end is done already.
    fn ended_at(&mut self, s: usize, t: u64) -> bool {
        if self.w.streams[s].until_ns.is_none_or(|end| t < end) {
            return false;
        }
        self.remaining[s] = 0;
        self.held[s].clear();
        true
    }

    /// A process that exits as soon as its I/O is done ([`exits_promptly`]). When its job
    /// ends (at a completion, before the scheduler hears of it) it has no future, and BFQ
    /// does not idle for it; other processes keep theirs until the bio past their end
    /// would arrive, and linger after it.
    fn exits_promptly(&self, s: usize) -> bool {
        self.exits_promptly[s]
    }

    /// Bio `i` is released: it is submitted in its thread's program order.
    fn arrive(&mut self, i: u32) {
        let s = self.w.ios[i as usize].stream as usize;
        if self.ended(s) {
            return;
        }
        if i != self.expected[s] {
            self.early[s].push(Reverse(i));
            return;
        }
        let mut next = i;
        loop {
            self.expected[s] = self.next_of[next as usize];
            self.admit(next);
            match self.early[s].peek() {
                Some(Reverse(j)) if *j == self.expected[s] => {
                    next = *j;
                    self.early[s].pop();
                }
                _ => break,
            }
        }
    }

    /// Bio `i` is queued (Q) now, for the result and wbt's waits (kept only for them).
    fn stamp_queued(&mut self, i: u32) {
        if let Some(q) = self.queued.get_mut(i as usize) {
            *q = self.now;
        }
    }

    /// Bio `i`'s turn has come: it is queued once its process has room in its window.
    fn admit(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        if self.in_flight[s] >= self.window[s] || !self.held[s].is_empty() {
            self.held[s].push_back(i);
            // Its process waits for a completion: asleep, its plug is flushed (schedule()),
            // or the requests it holds would never go out.
            self.flush_plug(s);
            return;
        }
        self.in_flight[s] += 1;
        self.queue_bio(i);
    }

    /// Bio `i` is queued (Q): merged, or given a request, or asleep waiting for one.
    fn queue_bio(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        self.remaining[s] = self.remaining[s].saturating_sub(1);
        if self.blocked_of[s] > 0 {
            // Its process sleeps (in wbt or in request allocation): this bio is not
            // submitted yet.
            if self.in_wbt[s] > 0 {
                self.wbt_block(i, false);
            } else {
                self.block(i, false, None);
            }
            return;
        }
        self.stamp_queued(i);
        self.emit_bio(EventKind::Queue, i);
        let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
        if !data || !self.try_merge(i) {
            if self.wbt_holds(i) {
                self.flush_plug(s);
                self.wbt_block(i, true);
                return;
            }
            if let Some(depth) = self.refused_depth(i) {
                self.flush_plug(s);
                self.block(i, true, Some(depth));
                return;
            }
            let rq = self.new_rq(i);
            self.plugs[s].push(rq);
        }
        let batch_continues = self.submitted(i);
        if !batch_continues || io.plug_end || self.plugs[s].len() >= PLUG_MAX {
            self.flush_plug(s);
        }
    }

    /// A bio held by its window, now with room.
    fn admit_held(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        if self.ended(s) {
            return;
        }
        if self.in_flight[s] >= self.window[s] {
            self.held[s].push_front(i);
            self.flush_plug(s);
            return;
        }
        self.in_flight[s] += 1;
        self.queue_bio(i);
    }

    /// Bio `i`'s submission returned (merged, or its request allocated): releases what its
    /// process issues next; true when that follows at once (the plug batch goes on).
    fn submitted(&mut self, i: u32) -> bool {
        let mut batch_continues = false;
        let mut next = self.after_q[i as usize];
        while let Some(entry) = next {
            let j = bio_of(entry);
            next = self.sibling[j as usize];
            if let Trigger::AfterQueue { delay, .. } = self.w.ios[j as usize].trigger {
                batch_continues |= delay <= PLUG_NS;
                self.push(self.now + delay, Ev::Arrive(j));
            }
        }
        batch_continues
    }

    fn block(&mut self, i: u32, queued: bool, depth: Option<TagDepth>) {
        let s = self.w.ios[i as usize].stream as usize;
        self.blocked_of[s] += 1;
        if self.blocked[s].is_empty() {
            self.sleepers.push(s);
        }
        self.blocked[s].push_back(Asleep {
            bio: i,
            queued,
            depth,
            seq: self.blocked_seq,
        });
        self.blocked_seq += 1;
        self.asleep += 1;
    }

    /// Wakes sleeping bios while requests are free: each tries a merge first (a woken
    /// process submits its next bios normally), else takes a request. A bio cut to the
    /// first tags ([`TagDepth::FirstTags`]) waits for its own: the bios behind it of other
    /// processes still try, those of its process stay asleep with it.
    ///
    /// The processes' first sleeping bios are tried in the order they went to sleep (a
    /// heap of one entry per process: a pass costs the number of processes asleep, not of
    /// bios). Arrivals are events, so no bio goes to sleep during a pass.
    fn unblock(&mut self) {
        if self.asleep == 0 {
            return;
        }
        let mut next = std::mem::take(&mut self.wake_order);
        next.clear();
        next.extend(
            self.sleepers
                .iter()
                .map(|&s| Reverse((self.blocked[s][0].seq, s))),
        );
        while let Some(Reverse((_, s))) = next.pop() {
            let Asleep {
                bio: i,
                queued,
                depth,
                ..
            } = self.blocked[s][0];
            let io = self.w.ios[i as usize];
            if !queued {
                // Its process, awake, submits it now.
                self.stamp_queued(i);
                self.emit_bio(EventKind::Queue, i);
                self.blocked[s][0].queued = true;
            }
            let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
            let merged = data && self.try_merge(i);
            if !merged {
                let refused = match depth {
                    Some(d) => self.no_request_for(i, d).then_some(d),
                    None => self.refused_depth(i),
                };
                if let Some(depth) = refused {
                    self.blocked[s][0].depth = Some(depth);
                    if matches!(depth, TagDepth::FirstTags(_)) {
                        // Its process stays asleep with it; the others still try.
                        continue;
                    }
                    break;
                }
                let rq = self.new_rq(i);
                self.plugs[s].push(rq);
                self.flush_plug(s);
                // The woken process inserts its request and runs the queue
                // (`blk_mq_submit_bio`; under `none` it issues directly) before it submits
                // its next bio: that bio finds the request in the driver, not waiting where
                // it could merge into it, when the driver has room.
                self.run_queue();
            }
            self.blocked[s].pop_front();
            self.asleep -= 1;
            self.blocked_of[s] -= 1;
            match self.blocked[s].front() {
                Some(a) => next.push(Reverse((a.seq, s))),
                None => {
                    let at = self.sleepers.iter().position(|&o| o == s);
                    self.sleepers
                        .swap_remove(at.expect("a stream with sleepers is listed"));
                }
            }
            self.submitted(i);
        }
        self.wake_order = next;
    }

    /// wbt would put bio `i` to sleep before its request is allocated.
    fn wbt_holds(&self, i: u32) -> bool {
        let io = &self.w.ios[i as usize];
        self.cfg.wbt_limit.is_some_and(|l| {
            super::throttle::wbt_tracked(io.op, io.flags) && self.tracked_live >= l.max(1)
        })
    }

    fn wbt_block(&mut self, i: u32, queued: bool) {
        let s = self.w.ios[i as usize].stream as usize;
        self.blocked_of[s] += 1;
        self.in_wbt[s] += 1;
        self.wbt_asleep.push_back((i, queued));
    }

    /// Wakes bios asleep in wbt while the limit lets them through (and requests are free):
    /// as [`Sim::unblock`].
    fn unblock_wbt(&mut self) {
        if self.cfg.wbt_drain && self.tracked_live > 0 {
            return;
        }
        while let Some(&(i, queued)) = self.wbt_asleep.front() {
            let io = self.w.ios[i as usize];
            let s = io.stream as usize;
            if !queued {
                self.stamp_queued(i);
                self.emit_bio(EventKind::Queue, i);
                if let Some(front) = self.wbt_asleep.front_mut() {
                    front.1 = true;
                }
            }
            let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
            let merged = data && self.try_merge(i);
            if !merged {
                // wbt and BFQ's depth cut never meet (BFQ turns wbt off): a bio asleep
                // in wbt takes the depth of its attempt when wbt lets it through.
                if self.wbt_holds(i) || self.no_request_for(i, self.tag_depth(i)) {
                    break;
                }
                self.wbt_waits.push(self.now - self.queued[i as usize]);
                let rq = self.new_rq(i);
                self.plugs[s].push(rq);
                self.flush_plug(s);
                self.run_queue();
            }
            self.wbt_asleep.pop_front();
            self.in_wbt[s] -= 1;
            self.blocked_of[s] -= 1;
            self.submitted(i);
        }
    }

    /// The depth bio `i`'s first attempt at a request gets when the attempt fails (it
    /// sleeps with that depth), `None` when it gets one. Whatever the depth, a request is
    /// found while the limit has room and the first tag is free (an allocation takes a
    /// free first tag before any other): only otherwise is the scheduler asked
    /// ([`Scheduler::depth_one_tags`], a walk over its queues for BFQ).
    fn refused_depth(&self, i: u32) -> Option<TagDepth> {
        let first_free = self.first_tags.first().is_some_and(Option::is_none);
        let over_limit = self.no_request_for(i, TagDepth::Limit);
        if first_free && !over_limit {
            return None;
        }
        match self.tag_depth(i) {
            // Asked already (the scheduler's answer does not change in between).
            TagDepth::Limit => over_limit.then_some(TagDepth::Limit),
            depth => self.no_request_for(i, depth).then_some(depth),
        }
    }

    /// The depth bio `i`'s request allocation gets now.
    fn tag_depth(&self, i: u32) -> TagDepth {
        if self.first_tags.is_empty() {
            return TagDepth::Limit;
        }
        let io = &self.w.ios[i as usize];
        let cgroup = self.w.streams[io.stream as usize].cgroup_id;
        match self
            .sched
            .depth_one_tags(self.cfg.max_requests, io.stream, cgroup, io.op, io.sync)
        {
            Some(n) => TagDepth::FirstTags(n.clamp(1, self.first_tags.len() as u32)),
            None => TagDepth::Limit,
        }
    }

    /// Bio `i` finds no request it may take at `depth`: all the queue's are allocated, or as
    /// many as the scheduler lets a bio of its kind find allocated
    /// ([`Scheduler::request_limit`]), or, cut to depth 1, the first tags it may take are
    /// all held.
    fn no_request_for(&self, i: u32, depth: TagDepth) -> bool {
        if self.live_requests >= self.cfg.max_requests {
            return true;
        }
        match depth {
            TagDepth::Limit => {
                let io = &self.w.ios[i as usize];
                let limit = self
                    .sched
                    .request_limit(self.cfg.max_requests, io.op, io.sync)
                    .min(self.cfg.max_requests);
                self.live_requests >= limit
            }
            TagDepth::FirstTags(n) => self.first_tags[..n as usize].iter().all(Option::is_some),
        }
    }

    fn new_rq(&mut self, i: u32) -> RqId {
        let io = self.w.ios[i as usize];
        let tracked = super::throttle::wbt_tracked(io.op, io.flags);
        self.tracked_live += u32::from(tracked);
        self.rq_tracked.push(tracked);
        let st = &self.w.streams[io.stream as usize];
        let id = self.rqs.len() as RqId;
        self.live_requests += 1;
        if let Some(free) = self.first_tags.iter_mut().find(|t| t.is_none()) {
            *free = Some(id);
        }
        self.rqs.push(Rq {
            stream: io.stream,
            cgroup: st.cgroup_id,
            sector: io.sector,
            sectors: io.sectors,
            op: io.op,
            sync: io.sync,
            meta: io.flags.has(ReqFlags::META),
            ioprio: 0,
            inserted: self.now,
            state: RqState::Plugged,
            head_io: i,
            tail_io: i,
            bios: 1,
        });
        self.bypassed.push(false);
        self.at_head.push(
            self.write_cache
                && io.sectors > 0
                && io.op == Op::Write
                && io.flags.has(ReqFlags::PREFLUSH),
        );
        self.emit_bio(EventKind::GetRq, i);
        id
    }

    fn mergeable(&self, rq: &Rq, i: u32) -> bool {
        let io = &self.w.ios[i as usize];
        rq.op == io.op && rq.sync == io.sync && rq.sectors + io.sectors <= self.cfg.max_sectors
    }

    /// Plug merge (the stream's plug, back or front), then the scheduler's bio merge.
    fn try_merge(&mut self, i: u32) -> bool {
        if self.cfg.nomerges >= 2 {
            return false;
        }
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        let end = io.sector + u64::from(io.sectors);
        let plug_hit = self.plugs[s].iter().rev().find_map(|&r| {
            let rq = &self.rqs[r as usize];
            if !self.mergeable(rq, i) {
                None
            } else if rq.end() == io.sector {
                Some((r, true))
            } else if rq.sector == end {
                Some((r, false))
            } else {
                None
            }
        });
        if let Some((r, back)) = plug_hit {
            self.do_merge(r, i, back);
            return true;
        }
        if self.cfg.nomerges >= 1 {
            return false;
        }
        let parts = parts!(self);
        let ctx = parts.ctx(&self.rqs);
        let candidate = self
            .by_end
            .get(&io.sector)
            .map(|r| (*r, true))
            .filter(|(r, _)| {
                self.mergeable(&self.rqs[*r as usize], i)
                    && self.sched.allow_merge(&ctx, *r, io.stream, io.sync)
            })
            .or_else(|| {
                if !self.sched.front_merges() {
                    return None;
                }
                self.by_start
                    .get(&end)
                    .map(|r| (*r, false))
                    .filter(|(r, _)| {
                        self.mergeable(&self.rqs[*r as usize], i)
                            && self.sched.allow_merge(&ctx, *r, io.stream, io.sync)
                    })
            });
        match candidate {
            Some((r, back)) => {
                let old_sector = self.rqs[r as usize].sector;
                let old_end = self.rqs[r as usize].end();
                self.by_end.remove(&old_end);
                self.by_start.remove(&old_sector);
                self.do_merge(r, i, back);
                let rq = &self.rqs[r as usize];
                self.by_end.insert(rq.end(), r);
                self.by_start.insert(rq.sector, r);
                if !back {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    self.sched.repositioned(&ctx, r, old_sector);
                }
                true
            }
            None => false,
        }
    }

    fn do_merge(&mut self, r: RqId, i: u32, back: bool) {
        let io = self.w.ios[i as usize];
        let rq = &mut self.rqs[r as usize];
        rq.sectors += io.sectors;
        rq.bios += 1;
        if back {
            self.next_in_rq[rq.tail_io as usize] = i;
            rq.tail_io = i;
        } else {
            self.next_in_rq[i as usize] = rq.head_io;
            rq.head_io = i;
            rq.sector = io.sector;
        }
        self.emit_bio(
            if back {
                EventKind::BackMerge
            } else {
                EventKind::FrontMerge
            },
            i,
        );
    }

    fn flush_plug(&mut self, s: usize) {
        let mut plug = std::mem::take(&mut self.plugs[s]);
        for &r in &plug {
            let rq = &mut self.rqs[r as usize];
            rq.state = RqState::Queued;
            rq.inserted = self.now;
            let (sector, end, head, sectors) = (rq.sector, rq.end(), rq.head_io, rq.sectors);
            let bioless = sectors == 0 || rq.op == Op::Flush;
            self.emit(EventKind::Insert, |ev| {
                ev.rq = RQ_ID + u64::from(r);
                ev.bio = BIO_ID + u64::from(head);
                ev.sector = sector;
                ev.bytes = sectors << 9;
            });
            if bioless || self.at_head[r as usize] {
                // Flushes go through the flush machinery, ahead of the scheduler, and so
                // does the data of a preflush write (after its flush, not modelled).
                self.bypassed[r as usize] = true;
                self.bypass.push_back(r);
                if !bioless {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    self.sched.insert_at_head(&ctx, r);
                }
                continue;
            }
            self.by_end.insert(end, r);
            self.by_start.insert(sector, r);
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.insert(&ctx, r);
        }
        // The plug goes back with its capacity: taking a fresh one made every request's
        // first push an allocation.
        if self.plugs[s].is_empty() {
            plug.clear();
            self.plugs[s] = plug;
        }
    }

    fn run_queue(&mut self) {
        let mut dispatched = false;
        while self.in_driver < self.cfg.depth {
            let r = match self.bypass.pop_front() {
                Some(r) => r,
                None => {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    match self.sched.dispatch(&ctx) {
                        Some(r) => r,
                        None => break,
                    }
                }
            };
            dispatched = true;
            self.issue(r);
        }
        let want = self.sched.next_timer();
        if want != self.timer_at {
            self.timer_at = want;
            if let Some(t) = want {
                self.push(t.max(self.now), Ev::Timer);
            }
        }
        // Work pending, nothing dispatchable, nothing in flight or armed to wake us.
        if !dispatched
            && self.in_driver == 0
            && self.timer_at.is_none()
            && self.sched.has_work()
            && self.rerun_at.is_none()
        {
            let t = self.now + RERUN_NS;
            self.rerun_at = Some(t);
            self.push(t, Ev::Timer);
        }
    }

    fn issue(&mut self, r: RqId) {
        let rq = &mut self.rqs[r as usize];
        rq.state = RqState::Dispatched;
        let (sector, end, sectors, op, head) = (rq.sector, rq.end(), rq.sectors, rq.op, rq.head_io);
        if !self.bypassed[r as usize] {
            self.by_end.remove(&end);
            self.by_start.remove(&sector);
        }
        self.in_driver += 1;
        if self.at_head[r as usize] {
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.dispatched_at_head(&ctx, r);
        }
        // The server free first takes it; a rotational device serves in issue order.
        let (k, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, f)| *f)
            .expect("at least one server");
        // A queued request's way to the disk overlaps the service before it; an idle disk
        // waits for it.
        let start = free.max(self.now + self.dev.latency_ns());
        let svc = if sectors == 0 {
            0
        } else {
            let t = self.dev.service_ns(self.head, sector, sectors);
            self.head = end;
            t
        };
        self.free_at[k] = start + svc;
        self.push(start + svc, Ev::Complete(r));
        if self.cfg.emit {
            let io = self.w.ios[head as usize];
            self.emit(EventKind::Issue, |ev| {
                ev.rq = RQ_ID + u64::from(r);
                ev.bio = BIO_ID + u64::from(head);
                ev.sector = sector;
                ev.bytes = sectors << 9;
                ev.op = op;
                ev.flags = io.flags;
            });
            let mut pos = 1u64;
            let mut b = self.next_in_rq[head as usize];
            while b != u32::MAX {
                self.emit(EventKind::BioInRq, |ev| {
                    ev.rq = RQ_ID + u64::from(r);
                    ev.bio = BIO_ID + u64::from(b);
                    ev.aux = pos;
                });
                pos += 1;
                b = self.next_in_rq[b as usize];
            }
        }
    }

    fn complete(&mut self, r: RqId) {
        self.in_driver -= 1;
        self.live_requests -= 1;
        if let Some(tag) = self.first_tags.iter_mut().find(|t| **t == Some(r)) {
            *tag = None;
        }
        if self.rq_tracked[r as usize] {
            self.tracked_live -= 1;
        }
        let rq = &mut self.rqs[r as usize];
        rq.state = RqState::Done;
        let (sectors, op, head) = (rq.sectors, rq.op, rq.head_io);
        self.emit(EventKind::Complete, |ev| {
            ev.rq = RQ_ID + u64::from(r);
            ev.bytes = sectors << 9;
            ev.aux = u64::from(sectors) << 9;
            ev.op = op;
        });
        let mut b = head;
        let mut released = Vec::new();
        while b != u32::MAX {
            if let Some(c) = self.completion.get_mut(b as usize) {
                *c = self.now;
            }
            let s = self.w.ios[b as usize].stream as usize;
            self.in_flight[s] -= 1;
            if self.exits_promptly(s) {
                self.ended(s);
            }
            if let Some(j) = self.held[s].pop_front() {
                released.push(j);
            }
            let mut next = self.after_c[b as usize];
            while let Some(entry) = next {
                let j = bio_of(entry);
                next = self.sibling[j as usize];
                if let Trigger::AfterCompletion { delay, .. } = self.w.ios[j as usize].trigger {
                    let sj = self.w.ios[j as usize].stream as usize;
                    if self.exits_promptly(sj) && self.ended_at(sj, self.now + delay) {
                        continue;
                    }
                    self.push(self.now + delay, Ev::Arrive(j));
                }
            }
            b = self.next_in_rq[b as usize];
        }
        if !self.bypassed[r as usize] || self.at_head[r as usize] {
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.completed(&ctx, r);
        }
        self.unblock();
        self.unblock_wbt();
        for j in released {
            self.admit_held(j);
        }
    }
}

/// The device a replay's events are on, as the source's device list names it.
pub fn device_for(w: &Workload) -> Dev {
    w.device.dev
}
