//! Legacy CFQ (block/cfq-iosched.c of 4.x, removed in 4.20 with the legacy block layer),
//! after shared/reference/scheduler-model.md §5:
//! - one sync queue per process, one async queue per (class, level) shared by all
//!   processes;
//! - queues served in time order (`rb_key = now + slice_offset - slice_resid`), RT before
//!   BE before IDLE;
//! - time slices (`cfq_prio_slice`: slice_sync/slice_async scaled by priority), started at
//!   the queue's first completion, scaled down by `low_latency` to fit `target_latency`
//!   (`cfq_scaled_cfqq_slice`); async queues also expire after
//!   `2 x slice_async_rq x (8 - prio)` dispatches when others are busy;
//! - idling (`cfq_should_idle`, `cfq_arm_slice_timer`): on an emptied sync queue with the
//!   idle window (think time below slice_idle, not seeky unless deep), or the last queue on
//!   its service tree, or `group_idle` for the group's only busy queue; never past the
//!   slice; off on non-rotational devices with command queueing;
//! - dispatch limits (`cfq_may_dispatch`: `quantum`, async held while sync is in flight,
//!   the async depth ramp of low_latency), the FIFO checked once per slice
//!   (`fifo_expire_*`), the next request by `cfq_choose_req` (back seeks up to
//!   back_seek_max, charged back_seek_penalty);
//! - preemption on insert (`cfq_should_preempt`): sync over async, RT over BE, the active
//!   queue's slice used, a sync-noidle queue while idling on that tree, metadata, an
//!   empty active queue that should not idle, a request close to the head while idling;
//! - cgroups (blkio, `CONFIG_CFQ_GROUP_IOSCHED`): one group per recorded cgroup, the root
//!   group standing for every cgroup `SchedEnv::root_cgroups` names; groups served in
//!   `vdisktime` order, charged at each expiry for the time their queue used, scaled by
//!   their share of the active weights (`cfq_group_served`); group slices (`target_latency`
//!   x the group's share); `group_idle` on the last busy queue of a group; `wait_busy`,
//!   which keeps an emptied group's last queue until its next request so the group keeps its
//!   place; no preemption from a group that is not an ancestor of the active one. Weights:
//!   blkio.weight, 500 by default, the root's 1000 (`cfq_cpd_init`), `--set weight.ID=W` for
//!   the cgroup of id ID (`root`, `own_group`). The hierarchy is taken as flat: every
//!   non-root group a child of the root.
//!
//! Not modelled: workload slices between the sync/sync-noidle/async trees (one tree
//! ordered by `rb_key` stands for them), close cooperators and queue merging, the IDLE
//! class's idle delay, blkio.leaf_weight.
//!
//! The model is split along cfq-iosched.c's concerns, one a file. This one holds the state
//! ([`Cfq`], its queues and groups, the think times) and the entry points the simulator
//! calls ([`Scheduler`]: insertion with the think time, seek history and idle window it
//! updates, dispatch, completion with the slice it starts, the idle timer).
//! - `service_tree`: busy queues in `rb_key` order, the ready lists, the next queue;
//! - `slices`: time slices: their length, the time used of them, their end;
//! - `idling`: waiting for an emptied queue, the slice timer, the device's queueing;
//! - `dispatch`: `cfq_select_queue`, the dispatch limits, the next request;
//! - `preemption`: whether a new request's queue takes the device over;
//! - `groups`: blkio cgroups: weights, `vdisktime` and charges, `wait_busy`.

mod dispatch;
mod groups;
mod idling;
mod preemption;
mod service_tree;
mod slices;

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use super::{
    Ctx, Decided, Decision, ExpireReason, IdleOutcome, IdleReason, RqId, SchedEnv, Scheduler,
    SettingError, Settings, merges_within_own_queue, reposition_sorted,
};

use groups::{ROOT_KEY, WEIGHT_DEFAULT, group_weights};
use service_tree::{ReadyKey, TREES_PER_GROUP};

/// The 4.19 sysfs attributes of CFQ.
pub const KEYS: &[&str] = &[
    "quantum",
    "fifo_expire_sync",
    "fifo_expire_async",
    "back_seek_max",
    "back_seek_penalty",
    "slice_sync",
    "slice_sync_us",
    "slice_async",
    "slice_async_us",
    "slice_async_rq",
    "slice_idle",
    "slice_idle_us",
    "group_idle",
    "group_idle_us",
    "low_latency",
    "target_latency",
    "target_latency_us",
];

const MS: u64 = 1_000_000;

/// `CFQQ_SEEK_THR`: a request farther than this from the previous one is a seek.
const SEEK_THR: u64 = 800;

/// `CFQQ_SECT_THR_NONROT`: on non-rotational devices small requests count as seeky.
const SECT_THR_NONROT: u32 = 64;

/// One jiffy, at HZ=250 (the least a queue is charged, `cfq_cfqq_slice_usage`; the
/// `wait_busy` margin).
const HZ: u64 = 250;

const JIFFY_NS: u64 = 1_000_000_000 / HZ;

const CLASS_RT: u8 = 1;

const CLASS_BE: u8 = 2;

const CLASS_IDLE: u8 = 3;

/// CFQ's decaying think-time average (`struct cfq_ttime`), fixed point as in the kernel.
#[derive(Clone, Copy, Default)]
struct Ttime {
    last_end_request: u64,
    samples: u64,
    total: u64,
    mean: u64,
}

impl Ttime {
    fn update(&mut self, now: u64, slice_idle: u64) {
        let elapsed = now
            .saturating_sub(self.last_end_request)
            .min(2 * slice_idle);
        self.samples = (7 * self.samples + 256) / 8;
        self.total = (7 * self.total + 256 * elapsed) / 8;
        self.mean = (self.total + 128) / self.samples.max(1);
    }
    /// `sample_valid`.
    fn valid(&self) -> bool {
        self.samples > 80
    }
    /// `cfq_io_thinktime_big`.
    fn big(&self, limit: u64) -> bool {
        self.valid() && self.mean > limit
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WorkloadType {
    Sync,
    SyncNoIdle,
    Async,
}

struct Queue {
    stream: u32,
    /// Index in `Cfq::groups`.
    group: usize,
    sync: bool,
    class: u8,
    prio: u64,
    sorted: BTreeSet<(u64, RqId)>,
    fifo: VecDeque<RqId>,
    dispatched: u32,
    on_rr: bool,
    rb_key: i64,
    /// Its entry in its group's `ready` list, while it is on the service tree with requests.
    listed: Option<(u8, i64)>,
    slice_resid: i64,
    slice_new: bool,
    /// When it became active, and the slice it was given (`cfq_group_served`'s charge).
    dispatch_start: u64,
    allocated_slice: u64,
    slice_start: u64,
    slice_end: u64,
    /// `wait_busy`: the group's last queue, kept past its slice for its next request.
    wait_busy: bool,
    slice_dispatch: u32,
    /// Sectors dispatched in this slice (logged at expiry).
    slice_sectors: u32,
    fifo_checked: bool,
    idle_window: bool,
    deep: bool,
    seek_history: u32,
    last_request_pos: u64,
    /// End of the last request dispatched (the head position for `cfq_choose_req`).
    last_pos: u64,
    /// The process's think time (`cic->ttime`).
    ttime: Ttime,
}

impl Queue {
    fn seeky(&self) -> bool {
        self.seek_history.count_ones() > 32 / 8
    }
    fn wl_type(&self) -> WorkloadType {
        if !self.sync {
            WorkloadType::Async
        } else if self.idle_window {
            WorkloadType::Sync
        } else {
            WorkloadType::SyncNoIdle
        }
    }
}

/// A blkio cgroup as CFQ serves it (`struct cfq_group`).
struct Group {
    cgroup: u64,
    weight: u64,
    /// On the group service tree (it has busy queues).
    on_tree: bool,
    /// Service received, scaled by the inverse of its share (fixed point).
    vdisktime: u64,
    /// Its share of the weights on the tree when it joined (fixed point), `vfraction`.
    vfraction: u64,
    /// Its queues on the service tree (`nr_cfqq`).
    busy: u32,
    /// Its requests in the driver.
    dispatched: u32,
    /// Think time of the group (any of its processes), against `group_idle`.
    ttime: Ttime,
    /// `busy_queues_avg` per [BE/IDLE, RT].
    busy_avg: [u64; 2],
    /// Its busy queues per [BE/IDLE, RT], and its busy sync queues not of the IDLE class
    /// (kept as queues join and leave the tree: counted per slice, they cost a scan).
    busy_by_rt: [u32; 2],
    busy_sync_non_idle: u32,
    /// Its queues on the tree with requests, by (class, rb_key, queue) ([`ReadyKey`]): the
    /// next queue to serve is the first of the group chosen (see `pick_next`).
    ready: Vec<ReadyKey>,
}

pub struct Cfq {
    quantum: u32,
    fifo_expire: [u64; 2],
    back_seek_max: u64,
    back_seek_penalty: u64,
    /// [async, sync].
    slice: [u64; 2],
    slice_async_rq: u64,
    slice_idle: u64,
    group_idle: u64,
    low_latency: bool,
    target_latency: u64,
    rotational: bool,
    queues: Vec<Queue>,
    /// Async queues by (group, class, level); sync queues by stream in `sync_queue`.
    by_key: FxHashMap<(u64, bool), usize>,
    sync_queue: Vec<Option<usize>>,
    queue_of: Vec<u32>,
    rq_pos: Vec<u64>,
    active: Option<usize>,
    wait_request: bool,
    idle_reason: IdleReason,
    timer: Option<u64>,
    idle_since: u64,
    busy: u32,
    /// Busy sync queues.
    busy_sync: u32,
    /// Group 0 is the root group.
    groups: Vec<Group>,
    group_by_cgroup: FxHashMap<u64, usize>,
    root_cgroups: Vec<u64>,
    /// blkio.weight given for some cgroups.
    weights: FxHashMap<u64, u64>,
    /// The group tree's `min_vdisktime`.
    min_vdisktime: u64,
    in_flight: [u32; 2],
    last_delayed_sync: u64,
    hw_tag: Option<bool>,
    hw_tag_est_depth: u32,
    hw_samples: u32,
    total_queued: usize,
    /// Think time of each (group, class, workload type) service tree, at `tree_index`.
    tree_ttime: Vec<Ttime>,
    decisions: Vec<Decided>,
    /// Off: `log` drops decisions ([`Scheduler::keep_decisions`]).
    keep_decisions: bool,
    now: u64,
}

/// `name` in ms, or `name_us` in µs when given; as ns.
fn ms_or_us(s: &Settings, name: &str, default_ms: u64) -> Result<u64, SettingError> {
    let us = format!("{name}_us");
    match s.0.get(&us) {
        Some(_) => Ok(s.u64_or(&us, default_ms * 1000)? * 1000),
        None => Ok(s.u64_or(name, default_ms)? * MS),
    }
}

impl Group {
    fn new(cgroup: u64, weight: u64) -> Group {
        Group {
            cgroup,
            weight,
            on_tree: false,
            vdisktime: 0,
            vfraction: 0,
            busy: 0,
            dispatched: 0,
            ttime: Ttime::default(),
            busy_avg: [0; 2],
            busy_by_rt: [0; 2],
            busy_sync_non_idle: 0,
            ready: Vec::new(),
        }
    }
}

impl Cfq {
    pub fn new(s: &Settings, env: &SchedEnv) -> Result<Cfq, SettingError> {
        let (plain, weights) = group_weights(s)?;
        plain.check("cfq", KEYS)?;
        let root = Group::new(
            0,
            weights
                .get(&ROOT_KEY)
                .copied()
                .unwrap_or(2 * u64::from(WEIGHT_DEFAULT)),
        );
        // `cfq_registered_queue` turns idling off on non-rotational devices; a value given
        // stands for one written to sysfs afterwards.
        let idle_default = if env.rotational { 8 } else { 0 };
        Ok(Cfq {
            quantum: (s.u64_or("quantum", 8)? as u32).max(1),
            fifo_expire: [
                s.u64_or("fifo_expire_async", 250)? * MS,
                s.u64_or("fifo_expire_sync", 125)? * MS,
            ],
            back_seek_max: s.u64_or("back_seek_max", 16384)? * 2,
            back_seek_penalty: s.u64_or("back_seek_penalty", 2)?.max(1),
            slice: [
                ms_or_us(s, "slice_async", 40)?.max(1),
                ms_or_us(s, "slice_sync", 100)?.max(1),
            ],
            slice_async_rq: s.u64_or("slice_async_rq", 2)?.max(1),
            slice_idle: ms_or_us(s, "slice_idle", idle_default)?,
            group_idle: ms_or_us(s, "group_idle", 8)?,
            low_latency: s.bool_or("low_latency", true)?,
            target_latency: ms_or_us(s, "target_latency", 300)?,
            rotational: env.rotational,
            queues: Vec::new(),
            by_key: FxHashMap::default(),
            sync_queue: Vec::new(),
            queue_of: Vec::new(),
            rq_pos: Vec::new(),
            active: None,
            wait_request: false,
            idle_reason: IdleReason::IdleWindow,
            timer: None,
            idle_since: 0,
            busy: 0,
            busy_sync: 0,
            groups: vec![root],
            group_by_cgroup: FxHashMap::default(),
            root_cgroups: env.root_cgroups.clone(),
            weights,
            min_vdisktime: 0,
            in_flight: [0; 2],
            last_delayed_sync: 0,
            hw_tag: None,
            hw_tag_est_depth: 0,
            hw_samples: 0,
            total_queued: 0,
            tree_ttime: vec![Ttime::default(); TREES_PER_GROUP],
            decisions: Vec::new(),
            keep_decisions: true,
            now: 0,
        })
    }

    fn log(&mut self, d: Decision) {
        if self.keep_decisions {
            self.decisions.push(Decided { t: self.now, d });
        }
    }

    fn queue_for(&mut self, ctx: &Ctx, rq: RqId) -> usize {
        let r = &ctx.rqs[rq as usize];
        // ioprio: class in the top 3 bits; none means best effort at level 4 (nice 0).
        let (class, prio) = match r.ioprio >> 13 {
            1 => (CLASS_RT, u64::from(r.ioprio & 7)),
            3 => (CLASS_IDLE, 7),
            2 => (CLASS_BE, u64::from(r.ioprio & 7)),
            _ => (CLASS_BE, 4),
        };
        let (stream, sync, sector, cgroup) = (r.stream, r.sync, r.sector, r.cgroup);
        let group = self.group_for(cgroup, ctx.now);
        // Async queues are per group (`cfq_async_queue_prio`).
        let key = if sync {
            (u64::from(stream), true)
        } else {
            ((group as u64) << 16 | u64::from(class) << 8 | prio, false)
        };
        let known = if sync {
            self.sync_queue.get(stream as usize).copied().flatten()
        } else {
            self.by_key.get(&key).copied()
        };
        if let Some(q) = known {
            return q;
        }
        let id = self.queues.len();
        self.queues.push(Queue {
            stream,
            group,
            sync,
            class,
            prio,
            sorted: BTreeSet::new(),
            fifo: VecDeque::new(),
            dispatched: 0,
            on_rr: false,
            rb_key: 0,
            listed: None,
            slice_resid: 0,
            slice_new: true,
            dispatch_start: 0,
            allocated_slice: 0,
            slice_start: 0,
            slice_end: 0,
            wait_busy: false,
            slice_dispatch: 0,
            slice_sectors: 0,
            fifo_checked: false,
            // `cfq_init_cfqq`: sync queues start with the idle window.
            idle_window: sync && class != CLASS_IDLE,
            deep: false,
            seek_history: 0,
            last_request_pos: sector,
            last_pos: sector,
            ttime: Ttime {
                last_end_request: ctx.now,
                ..Default::default()
            },
        });
        if sync {
            if self.sync_queue.len() <= stream as usize {
                self.sync_queue.resize(stream as usize + 1, None);
            }
            self.sync_queue[stream as usize] = Some(id);
        } else {
            self.by_key.insert(key, id);
        }
        id
    }
}

impl Scheduler for Cfq {
    fn name(&self) -> &'static str {
        "cfq"
    }

    fn allow_merge(&self, ctx: &Ctx, rq: RqId, stream: u32, sync: bool) -> bool {
        merges_within_own_queue(ctx, rq, stream, sync)
    }

    fn repositioned(&mut self, ctx: &Ctx, rq: RqId, old_sector: u64) {
        if let Some(q) = self.queue_of.get(rq as usize).map(|q| *q as usize) {
            let sorted = &mut self.queues[q].sorted;
            reposition_sorted(sorted, &mut self.rq_pos, ctx, rq, old_sector);
        }
    }

    fn insert(&mut self, ctx: &Ctx, rq: RqId) {
        self.now = ctx.now;
        let q = self.queue_for(ctx, rq);
        if self.queue_of.len() <= rq as usize {
            self.queue_of.resize(rq as usize + 1, 0);
            self.rq_pos.resize(rq as usize + 1, u64::MAX);
        }
        self.queue_of[rq as usize] = q as u32;
        let r = &ctx.rqs[rq as usize];
        let (sector, sectors, sync) = (r.sector, r.sectors, r.sync);
        let slice_idle = self.slice_idle;
        let rotational = self.rotational;
        {
            let qq = &mut self.queues[q];
            qq.sorted.insert((sector, rq));
            qq.fifo.push_back(rq);
        }
        self.rq_pos[rq as usize] = sector;
        self.total_queued += 1;
        self.relist(q);
        if !self.queues[q].on_rr {
            self.add_rr(q, ctx.now, false);
        }
        // `cfq_rq_enqueued`: think time, seek history, idle window.
        let group_idle = self.group_idle;
        let g = self.queues[q].group;
        self.groups[g].ttime.update(ctx.now, group_idle);
        if sync {
            let tk = self.tree_index(q);
            self.tree_ttime[tk].update(ctx.now, slice_idle);
            let qq = &mut self.queues[q];
            qq.ttime.update(ctx.now, slice_idle);
            let sdist = sector.abs_diff(qq.last_request_pos);
            let seek = if rotational {
                sdist > SEEK_THR
            } else {
                sectors < SECT_THR_NONROT
            };
            qq.seek_history = (qq.seek_history << 1) | u32::from(seek);
            qq.last_request_pos = sector + u64::from(sectors);
            if qq.sorted.len() >= 4 {
                qq.deep = true;
            }
            if qq.class != CLASS_IDLE {
                let enable = if slice_idle == 0 || (!qq.deep && qq.seeky()) {
                    false
                } else if qq.ttime.valid() {
                    qq.ttime.mean <= slice_idle
                } else {
                    qq.idle_window
                };
                qq.idle_window = enable;
            }
        }
        if self.active == Some(q) {
            if self.wait_request {
                self.end_idle(IdleOutcome::Arrived);
            }
        } else if self.should_preempt(ctx, q, rq) {
            let a = self.active.expect("preemption needs an active queue");
            self.expire(a, ExpireReason::Preempted, true);
            self.add_rr(q, ctx.now, true);
            let qq = &mut self.queues[q];
            qq.slice_new = true;
            qq.slice_end = 0;
        }
    }

    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId> {
        self.now = ctx.now;
        self.update_hw_tag(ctx);
        let q = self.select_queue(ctx)?;
        if !self.may_dispatch(ctx, q) {
            return None;
        }
        let rq = self.next_rq(ctx, q)?;
        let sync = ctx.rqs[rq as usize].sync;
        let qq = &mut self.queues[q];
        qq.sorted.remove(&(self.rq_pos[rq as usize], rq));
        self.rq_pos[rq as usize] = u64::MAX;
        self.total_queued -= 1;
        qq.dispatched += 1;
        self.groups[qq.group].dispatched += 1;
        self.relist(q);
        let qq = &mut self.queues[q];
        qq.slice_dispatch += 1;
        qq.slice_sectors += ctx.rqs[rq as usize].sectors;
        qq.last_pos = ctx.rqs[rq as usize].end();
        self.in_flight[usize::from(sync)] += 1;
        // An async queue expires after its request quota when others wait; an idle-class
        // queue after every request.
        let qq = &self.queues[q];
        let quota = 2 * self.slice_async_rq * (8 - qq.prio.min(7));
        if self.busy > 1
            && ((!qq.sync && u64::from(qq.slice_dispatch) >= quota) || qq.class == CLASS_IDLE)
        {
            self.queues[q].slice_end = ctx.now + 1;
            self.queues[q].slice_new = false;
            self.expire(q, ExpireReason::AsyncRqLimit, false);
        }
        Some(rq)
    }

    fn completed(&mut self, ctx: &Ctx, rq: RqId) {
        self.now = ctx.now;
        let Some(q) = self.queue_of.get(rq as usize).map(|q| *q as usize) else {
            return;
        };
        let r = &ctx.rqs[rq as usize];
        let sync = r.sync;
        self.in_flight[usize::from(sync)] = self.in_flight[usize::from(sync)].saturating_sub(1);
        if sync {
            let tk = self.tree_index(q);
            self.tree_ttime[tk].last_end_request = ctx.now;
            self.queues[q].ttime.last_end_request = ctx.now;
            // A sync request that waited past its FIFO expiry delays async depth ramping.
            if r.inserted + self.fifo_expire[1] <= ctx.now {
                self.last_delayed_sync = ctx.now;
            }
        }
        self.queues[q].dispatched = self.queues[q].dispatched.saturating_sub(1);
        let gg = &mut self.groups[self.queues[q].group];
        gg.dispatched = gg.dispatched.saturating_sub(1);
        gg.ttime.last_end_request = ctx.now;
        if self.active != Some(q) {
            return;
        }
        if self.queues[q].slice_new {
            let slice = self.scaled_slice(q);
            let qq = &mut self.queues[q];
            qq.slice_new = false;
            qq.slice_start = ctx.now;
            qq.slice_end = ctx.now + slice;
            qq.allocated_slice = slice;
            let (stream, sync) = (qq.stream, qq.sync);
            self.log(Decision::Slice {
                stream,
                sync,
                slice_ns: slice,
            });
        }
        if self.should_wait_busy(q) {
            // Past (or about to pass) its slice, the group's last queue waits for its next
            // request rather than let the group leave the tree.
            let extend = if self.slice_idle > 0 {
                self.slice_idle
            } else {
                self.group_idle
            };
            let qq = &mut self.queues[q];
            qq.slice_end = ctx.now + extend;
            qq.wait_busy = true;
            let (stream, cgroup) = (qq.stream, self.groups[qq.group].cgroup);
            self.log(Decision::WaitBusy {
                stream,
                cgroup,
                extend_ns: extend,
            });
        }
        if self.slice_used(q, ctx.now) || self.queues[q].class == CLASS_IDLE {
            self.expire(q, ExpireReason::SliceUsed, true);
        } else if sync && self.queues[q].sorted.is_empty() && !self.wait_request {
            self.arm_slice_timer(ctx, q);
        }
    }

    fn next_timer(&self) -> Option<u64> {
        self.timer
    }

    /// `cfq_idle_slice_timer`.
    fn timer(&mut self, ctx: &Ctx) {
        self.now = ctx.now;
        self.timer = None;
        if !self.wait_request {
            return;
        }
        let Some(q) = self.active else {
            self.wait_request = false;
            return;
        };
        if self.slice_used(q, ctx.now) {
            self.expire(q, ExpireReason::SliceUsed, false);
        } else if !self.queues[q].sorted.is_empty() {
            self.end_idle(IdleOutcome::Arrived);
        } else {
            // The idle did not pay: the queue is no longer "deep".
            self.queues[q].deep = false;
            self.expire(q, ExpireReason::TooIdle, false);
        }
    }

    fn has_work(&self) -> bool {
        self.total_queued > 0
    }

    fn take_decisions(&mut self) -> Vec<Decided> {
        std::mem::take(&mut self.decisions)
    }

    fn keep_decisions(&mut self, keep: bool) {
        self.keep_decisions = keep;
    }
}
