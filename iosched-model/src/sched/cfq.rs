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

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use super::{
    Ctx, Decided, Decision, ExpireReason, IdleOutcome, IdleReason, RqId, SchedEnv, Scheduler,
    SettingError, Settings, expired_fifo_head, merges_within_own_queue, reposition_sorted,
};

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
/// `CFQ_SLICE_SCALE`.
const SLICE_SCALE: u64 = 5;
/// `CFQQ_SEEK_THR`: a request farther than this from the previous one is a seek.
const SEEK_THR: u64 = 800;
/// `CFQQ_SECT_THR_NONROT`: on non-rotational devices small requests count as seeky.
const SECT_THR_NONROT: u32 = 64;
/// `CFQQ_CLOSE_THR`: a request this close to the head may preempt an idling queue.
const CLOSE_THR: u64 = 8192;
/// `CFQ_HW_QUEUE_MIN`, and the samples before deciding `hw_tag`.
const HW_QUEUE_MIN: u32 = 5;
const HW_SAMPLES: u32 = 50;
/// Preemption puts the new queue this far ahead of the first one (`-HZ`).
const FRONT_NS: i64 = 1_000_000_000;

/// `CFQ_SERVICE_SHIFT`: `vdisktime` and a group's share (`vfraction`) are fixed point.
const SERVICE_SHIFT: u32 = 12;
/// `CFQ_WEIGHT_LEGACY_DFL`; the root group's is twice it (`cfq_cpd_init`).
const WEIGHT_DEFAULT: u32 = 500;
/// The range blkio.weight accepts.
const WEIGHT_RANGE: std::ops::RangeInclusive<u32> = 10..=1000;
/// `CFQ_SLICE_MODE_GROUP_DELAY`: how far behind the last group a group joining the tree
/// starts. The kernel adds it unshifted to the shifted `vdisktime` (so it is worth ~49 µs
/// of a whole device's time): kept as it is.
const GROUP_DELAY: u64 = 1_000_000_000 / 5;
/// `CFQ_IOPS_MODE_GROUP_DELAY` (`HZ / 5`, in jiffies, also unshifted).
const GROUP_DELAY_IOPS: u64 = HZ / 5;
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

/// `(class, rb_key, queue)` as one number ordered as the tuple: the `ready` lists are
/// searched at every insertion and dispatch, and one wide comparison is several times
/// cheaper than the tuple's three (`relist` was a tenth of a CFQ replay).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ReadyKey(u128);

impl ReadyKey {
    /// Bits of the queue index, below the class's 8 and the key's 64.
    const QUEUE_BITS: u32 = 56;

    fn new(class: u8, rb_key: i64, q: usize) -> ReadyKey {
        assert!(
            (q as u128) < 1 << Self::QUEUE_BITS,
            "queue {q} beyond the ready key"
        );
        // The sign bit flipped: i64 order as u64 order.
        let key = (rb_key as u64) ^ (1 << 63);
        ReadyKey(
            (u128::from(class) << (64 + Self::QUEUE_BITS))
                | (u128::from(key) << Self::QUEUE_BITS)
                | q as u128,
        )
    }

    fn queue(self) -> usize {
        (self.0 & ((1 << Self::QUEUE_BITS) - 1)) as usize
    }
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

/// Splits `weight.ID=W` settings (blkio.weight of cgroup ID, `root` or `own_group`) from
/// the others.
fn group_weights(s: &Settings) -> Result<(Settings, FxHashMap<u64, u64>), SettingError> {
    let mut rest = Settings::default();
    let mut weights = FxHashMap::default();
    for (k, v) in &s.0 {
        let Some(id) = k.strip_prefix("weight.") else {
            rest.0.insert(k.clone(), v.clone());
            continue;
        };
        let bad = |why| SettingError::Bad {
            key: k.clone(),
            value: v.clone(),
            why,
        };
        let cgroup =
            match id {
                "root" => None,
                "own_group" => Some(super::OWN_GROUP_CGROUP),
                _ => Some(id.parse::<u64>().map_err(|_| {
                    bad("expected weight.ID with ID a cgroup id, root or own_group")
                })?),
            };
        let w = v
            .parse::<u32>()
            .ok()
            .filter(|w| WEIGHT_RANGE.contains(w))
            .ok_or_else(|| bad("a blkio.weight is 10..1000"))?;
        // The root group's key: no recorded cgroup has it.
        weights.insert(cgroup.unwrap_or(ROOT_KEY), u64::from(w));
    }
    Ok((rest, weights))
}

/// `weights`' key for the root group.
const ROOT_KEY: u64 = u64::MAX;

/// Service trees per group in `Cfq::tree_ttime`: by class (1..=3) and workload type.
const TREES_PER_GROUP: usize = 4 * 3;

fn wl_index(t: WorkloadType) -> u8 {
    match t {
        WorkloadType::Sync => 0,
        WorkloadType::SyncNoIdle => 1,
        WorkloadType::Async => 2,
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

    fn hw_tag(&self) -> bool {
        // Unknown counts as queueing (the kernel's -1 is truthy).
        self.hw_tag.unwrap_or(true)
    }

    fn nonrot_queueing(&self) -> bool {
        !self.rotational && self.hw_tag()
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

    /// The group of `cgroup` (`cfq_lookup_cfqg`), made on its first request.
    fn group_for(&mut self, cgroup: u64, now: u64) -> usize {
        if self.root_cgroups.contains(&cgroup) {
            return 0;
        }
        if let Some(g) = self.group_by_cgroup.get(&cgroup) {
            return *g;
        }
        let weight = self
            .weights
            .get(&cgroup)
            .copied()
            .unwrap_or(u64::from(WEIGHT_DEFAULT));
        let mut g = Group::new(cgroup, weight);
        g.ttime.last_end_request = now;
        self.groups.push(g);
        self.tree_ttime
            .resize(self.groups.len() * TREES_PER_GROUP, Ttime::default());
        self.group_by_cgroup.insert(cgroup, self.groups.len() - 1);
        self.groups.len() - 1
    }

    /// `iops_mode`: no idling on a queueing device; groups are charged by requests.
    fn iops_mode(&self) -> bool {
        self.slice_idle == 0 && self.hw_tag()
    }

    /// `cfq_group_service_tree_add`: on the tree, with its share of the weights there
    /// (the hierarchy flat: its weight over the sum of the groups' on the tree).
    fn group_tree_add(&mut self, g: usize) {
        self.groups[g].on_tree = true;
        let total: u64 = self
            .groups
            .iter()
            .filter(|x| x.on_tree)
            .map(|x| x.weight)
            .sum();
        let gg = &mut self.groups[g];
        gg.vfraction = ((gg.weight << SERVICE_SHIFT) / total.max(1)).max(1);
    }

    /// `cfq_group_notify_queue_add`: a queue of `g` joined the service tree; a group not on
    /// its tree joins it behind the last one.
    fn group_queue_added(&mut self, g: usize) {
        self.groups[g].busy += 1;
        if self.groups[g].on_tree {
            return;
        }
        let delay = if self.iops_mode() {
            GROUP_DELAY_IOPS
        } else {
            GROUP_DELAY
        };
        let min = self.min_vdisktime;
        self.groups[g].vdisktime = self
            .groups
            .iter()
            .filter(|x| x.on_tree)
            .map(|x| x.vdisktime)
            .max_by_key(|v| v.wrapping_sub(min) as i64)
            .map_or(min, |v| v.wrapping_add(delay));
        self.group_tree_add(g);
    }

    /// `cfq_group_notify_queue_del`: the group leaves the tree with its last queue.
    fn group_queue_removed(&mut self, g: usize) {
        let gg = &mut self.groups[g];
        gg.busy = gg.busy.saturating_sub(1);
        if gg.busy == 0 {
            gg.on_tree = false;
            gg.vfraction = 0;
        }
    }

    /// `cfq_cfqq_slice_usage`: the time `q` used of its slice.
    fn slice_usage(&self, q: usize) -> u64 {
        let (qq, now) = (&self.queues[q], self.now);
        if qq.slice_new || qq.slice_start == now {
            // Expired before its first completion: charge the time since it was chosen.
            now.saturating_sub(qq.dispatch_start).max(JIFFY_NS)
        } else {
            now.saturating_sub(qq.slice_start).min(qq.allocated_slice)
        }
    }

    /// `cfq_group_served`: charges `q`'s group for the queue's service, in time (requests
    /// in IOPS mode; a lone async queue its whole slice), scaled by the inverse of the
    /// group's share, and moves it on the tree.
    fn group_served(&mut self, q: usize) {
        let g = self.queues[q].group;
        let nr_sync = self.groups[g].busy_sync_non_idle;
        let used = self.slice_usage(q);
        let qq = &self.queues[q];
        let charge = if self.iops_mode() {
            u64::from(qq.slice_dispatch)
        } else if !qq.sync && nr_sync == 0 {
            qq.allocated_slice
        } else {
            used
        };
        let (stream, sync) = (qq.stream, qq.sync);
        let gg = &mut self.groups[g];
        let vfr = gg.vfraction.max(1);
        gg.vdisktime = gg
            .vdisktime
            .wrapping_add((charge << (2 * SERVICE_SHIFT)) / vfr);
        if gg.on_tree {
            self.group_tree_add(g);
        }
        let gg = &self.groups[g];
        let (cgroup, weight, share) = (gg.cgroup, gg.weight, gg.vfraction);
        // Only worth a line when there are groups to tell apart.
        if self.groups.len() > 1 {
            self.log(Decision::GroupServed {
                stream,
                sync,
                cgroup,
                weight: weight as u32,
                share_pct: ((100 * share) >> SERVICE_SHIFT) as u32,
                charge,
                iops: self.iops_mode(),
            });
        }
    }

    /// `cfqg_is_descendant(active, new)`: a request of `new`'s group may preempt only a
    /// queue of its own group or of a group below it (every group is below the root).
    fn may_preempt_group(&self, active: usize, new: usize) -> bool {
        active == new || new == 0
    }

    /// `cfq_prio_slice`.
    fn prio_slice(&self, sync: bool, prio: u64) -> u64 {
        let base = self.slice[usize::from(sync)];
        let step = base / SLICE_SCALE;
        (base + step * 4).saturating_sub(step * prio)
    }

    /// `cfq_scaled_cfqq_slice`: with low_latency, shrink slices so that all busy queues of
    /// the class are served within target_latency.
    fn scaled_slice(&mut self, q: usize) -> u64 {
        let (sync, prio, class) = (
            self.queues[q].sync,
            self.queues[q].prio,
            self.queues[q].class,
        );
        let mut slice = self.prio_slice(sync, prio);
        if !self.low_latency {
            return slice;
        }
        let rt = usize::from(class == CLASS_RT);
        let g = self.queues[q].group;
        let busy = u64::from(self.groups[g].busy_by_rt[rt]);
        // `cfq_group_get_avg_queues`: follows increases fast, decreases slowly.
        let gg = &mut self.groups[g];
        let avg = gg.busy_avg[rt];
        let (lo, hi) = (avg.min(busy), avg.max(busy));
        gg.busy_avg[rt] = (3 * hi + lo + 2) / 4;
        let iq = gg.busy_avg[rt];
        let sync_slice = self.slice[1];
        let expect_latency = sync_slice * iq;
        // `cfq_group_slice`: the group's share of target_latency.
        let group_slice = (self.target_latency * gg.vfraction.max(1)) >> SERVICE_SHIFT;
        if expect_latency > group_slice {
            let low_slice = slice.min(2 * self.slice_idle * slice / sync_slice);
            slice = (slice * group_slice / expect_latency).max(low_slice);
        }
        slice
    }

    fn slice_used(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        !qq.slice_new && now >= qq.slice_end
    }

    /// Busy queues on `q`'s service tree (same group, class and workload type).
    fn tree_count(&self, q: usize) -> usize {
        let qq = &self.queues[q];
        let (g, class, t) = (qq.group, qq.class, qq.wl_type());
        self.queues
            .iter()
            .filter(|o| o.on_rr && o.group == g && o.class == class && o.wl_type() == t)
            .count()
    }

    /// `q`'s service tree in `tree_ttime`.
    fn tree_index(&self, q: usize) -> usize {
        let qq = &self.queues[q];
        qq.group * TREES_PER_GROUP + usize::from(qq.class) * 3 + usize::from(wl_index(qq.wl_type()))
    }

    /// `cfq_should_idle`, with the clause that held.
    fn should_idle(&self, q: usize) -> Option<IdleReason> {
        let qq = &self.queues[q];
        if self.slice_idle == 0 || qq.class == CLASS_IDLE {
            return None;
        }
        if qq.idle_window && !self.nonrot_queueing() {
            return Some(IdleReason::IdleWindow);
        }
        let tree_big = self.tree_ttime[self.tree_index(q)].big(self.slice_idle);
        (qq.sync && self.tree_count(q) == 1 && !tree_big).then_some(IdleReason::TreeIdle)
    }

    /// Another queue holds requests (`total_queued` counts every queue's).
    fn others_pending(&self, q: usize) -> bool {
        self.total_queued > self.queues[q].sorted.len()
    }

    /// Onto the service tree (`cfq_service_tree_add`).
    fn add_rr(&mut self, q: usize, now: u64, front: bool) {
        let g = self.queues[q].group;
        let key = if front {
            let first = self
                .queues
                .iter()
                .enumerate()
                .filter(|(i, o)| *i != q && o.on_rr && o.group == g)
                .map(|(_, o)| o.rb_key)
                .min()
                .unwrap_or(now as i64);
            first - FRONT_NS
        } else {
            // `cfq_slice_offset`: (other busy queues of the group) x (the longest slice -
            // this queue's): lower priorities start later.
            let qq = &self.queues[q];
            let others = self.groups[g].busy.saturating_sub(u32::from(qq.on_rr));
            let offset = u64::from(others)
                * self
                    .prio_slice(true, 0)
                    .saturating_sub(self.prio_slice(qq.sync, qq.prio));
            let k = now as i64 + offset as i64 - qq.slice_resid;
            self.queues[q].slice_resid = 0;
            k
        };
        let qq = &mut self.queues[q];
        qq.rb_key = key;
        if !qq.on_rr {
            qq.on_rr = true;
            self.busy += 1;
            self.count_busy(q, true);
            self.group_queue_added(g);
        }
        self.relist(q);
    }

    fn del_rr(&mut self, q: usize) {
        if self.queues[q].on_rr {
            self.queues[q].on_rr = false;
            self.busy -= 1;
            self.count_busy(q, false);
            self.group_queue_removed(self.queues[q].group);
        }
        self.relist(q);
    }

    /// The busy-queue counters, as `q` joins (`on`) or leaves the service tree.
    fn count_busy(&mut self, q: usize, on: bool) {
        let qq = &self.queues[q];
        let (sync, class) = (qq.sync, qq.class);
        let gg = &mut self.groups[qq.group];
        let step = |n: &mut u32| {
            if on { *n += 1 } else { *n -= 1 }
        };
        step(&mut gg.busy_by_rt[usize::from(class == CLASS_RT)]);
        if sync {
            step(&mut self.busy_sync);
            if class != CLASS_IDLE {
                step(&mut gg.busy_sync_non_idle);
            }
        }
    }

    /// Keeps `q`'s entry in its group's `ready` list in step with its state: listed by
    /// (class, rb_key) while on the tree with requests. Called after every change of
    /// `on_rr`, `rb_key` or the emptiness of `sorted`.
    fn relist(&mut self, q: usize) {
        let qq = &self.queues[q];
        let want = (qq.on_rr && !qq.sorted.is_empty()).then_some((qq.class, qq.rb_key));
        if want == qq.listed {
            return;
        }
        let ready = &mut self.groups[qq.group].ready;
        if let Some((class, key)) = qq.listed {
            let at = ready
                .binary_search(&ReadyKey::new(class, key, q))
                .expect("a listed queue is in its group's list");
            ready.remove(at);
        }
        if let Some((class, key)) = want {
            let entry = ReadyKey::new(class, key, q);
            let at = ready
                .binary_search(&entry)
                .expect_err("an unlisted queue is not in its group's list");
            ready.insert(at, entry);
        }
        self.queues[q].listed = want;
    }

    fn end_idle(&mut self, outcome: IdleOutcome) {
        if !self.wait_request {
            return;
        }
        self.wait_request = false;
        self.timer = None;
        if let Some(q) = self.active {
            let others_pending = self.others_pending(q);
            let stream = self.queues[q].stream;
            let waited_ns = self.now - self.idle_since;
            self.log(Decision::IdleEnd {
                stream,
                outcome,
                waited_ns,
                others_pending,
            });
        }
    }

    /// `cfq_slice_expired`; `timed_out` keeps the slice's remainder (or overrun) for the
    /// queue's next position.
    fn expire(&mut self, q: usize, reason: ExpireReason, timed_out: bool) {
        let outcome = match reason {
            ExpireReason::TooIdle => IdleOutcome::TimerExpired,
            ExpireReason::Preempted => IdleOutcome::Preempted,
            _ => IdleOutcome::Arrived,
        };
        self.end_idle(outcome);
        let now = self.now;
        let qq = &mut self.queues[q];
        qq.wait_busy = false;
        if timed_out && !qq.slice_new {
            qq.slice_resid = qq.slice_end as i64 - now as i64;
        }
        let (stream, sync, served) = (qq.stream, qq.sync, qq.slice_sectors);
        self.group_served(q);
        let qq = &self.queues[q];
        if qq.sorted.is_empty() {
            self.del_rr(q);
        } else {
            self.add_rr(q, now, false);
        }
        self.active = None;
        self.log(Decision::Expire {
            stream,
            sync,
            reason,
            served,
            shared: false,
        });
    }

    /// The next queue: of the group with the least `vdisktime` (`cfq_choose_cfqg`), RT,
    /// then BE, then IDLE; in each, the smallest `rb_key`.
    fn pick_next(&mut self) -> Option<usize> {
        let min = self.min_vdisktime;
        // The least (vdisktime, group), then the group's first by (class, rb_key, queue):
        // the least (vdisktime, group, class, rb_key, queue) over queues on the tree with
        // requests.
        let (_, g) = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, gg)| !gg.ready.is_empty())
            .map(|(g, gg)| (gg.vdisktime.wrapping_sub(min) as i64, g))
            .min()?;
        let q = self.groups[g].ready[0].queue();
        // `update_min_vdisktime`: it only moves forward.
        let vt = self.groups[self.queues[q].group].vdisktime;
        if vt.wrapping_sub(min) as i64 > 0 {
            self.min_vdisktime = vt;
        }
        let now = self.now;
        let qq = &mut self.queues[q];
        qq.slice_new = true;
        qq.dispatch_start = now;
        qq.allocated_slice = 0;
        qq.slice_start = 0;
        qq.wait_busy = false;
        qq.slice_end = 0;
        qq.slice_dispatch = 0;
        qq.slice_sectors = 0;
        qq.fifo_checked = false;
        let (stream, sync) = (qq.stream, qq.sync);
        self.active = Some(q);
        self.log(Decision::InService {
            stream,
            sync,
            budget: 0,
        });
        Some(q)
    }

    /// `cfq_select_queue`.
    fn select_queue(&mut self, ctx: &Ctx) -> Option<usize> {
        for _ in 0..(self.queues.len() * 2 + 4) {
            let Some(q) = self.active else {
                self.pick_next()?;
                continue;
            };
            let g = self.queues[q].group;
            // The group's last queue waited for its next request (`wait_busy`): it has it,
            // so the group keeps its place on the tree as the queue expires.
            if self.queues[q].wait_busy && !self.queues[q].sorted.is_empty() {
                // Its slice was used (or nearly) when it began to wait.
                self.expire(q, ExpireReason::SliceUsed, false);
                continue;
            }
            let used = self.slice_used(q, ctx.now);
            if used {
                // The group's only queue, emptied, idling with requests in flight: it used
                // its slice idling, so it waits for them (the group stays backlogged).
                let qq = &self.queues[q];
                if self.groups[g].busy == 1
                    && qq.sorted.is_empty()
                    && qq.dispatched > 0
                    && self.should_idle(q).is_some()
                {
                    return None;
                }
            } else if !self.queues[q].sorted.is_empty() {
                self.end_idle(IdleOutcome::Arrived);
                return Some(q);
            } else if self.wait_request {
                return None;
            }
            if !used && self.check_idle_on_empty(ctx, q) {
                return None;
            }
            // check_group_idle: the group's only queue waits for its requests in flight.
            let gg = &self.groups[g];
            if self.group_idle > 0
                && gg.busy == 1
                && gg.dispatched > 0
                && !gg.ttime.big(self.group_idle)
            {
                return None;
            }
            let reason = if used {
                ExpireReason::SliceUsed
            } else {
                ExpireReason::NoMoreRequests
            };
            self.expire(q, reason, false);
        }
        None
    }

    /// An emptied active queue, its slice not used: whether to keep it for the requests it
    /// has in flight (`cfq_should_idle`), after a deep seeky queue the device outruns
    /// loses its idle window.
    fn check_idle_on_empty(&mut self, ctx: &Ctx, q: usize) -> bool {
        let qq = &mut self.queues[q];
        if qq.seeky()
            && qq.idle_window
            && (qq.slice_new
                || qq.slice_end.saturating_sub(ctx.now) > ctx.now.saturating_sub(qq.slice_start))
        {
            qq.deep = false;
            qq.idle_window = false;
        }
        self.queues[q].dispatched > 0 && self.should_idle(q).is_some()
    }

    /// `cfq_may_dispatch`.
    fn may_dispatch(&self, ctx: &Ctx, q: usize) -> bool {
        let qq = &self.queues[q];
        if self.in_flight[1] > 0 && !qq.sync {
            return false;
        }
        if self.in_flight[0] > 0 && self.should_idle(q).is_some() {
            return false;
        }
        let mut max = (self.quantum / 2).max(1);
        if qq.class == CLASS_IDLE {
            max = 1;
        }
        if qq.dispatched >= max {
            if qq.class == CLASS_IDLE {
                return false;
            }
            let busy_sync = self.busy_sync;
            let promote_sync = qq.sync && busy_sync == 1;
            // `cfq_slice_used_soon`.
            let used_soon =
                qq.slice_new || ctx.now + self.slice_idle * u64::from(qq.dispatched) > qq.slice_end;
            if self.busy > 1 && used_soon && !promote_sync {
                return false;
            }
            max = if self.busy == 1 || promote_sync {
                u32::MAX
            } else {
                self.quantum
            };
        }
        // Async depth ramps up with the time since a sync request was last delayed.
        if !qq.sync && self.low_latency {
            let mut depth = (ctx.now.saturating_sub(self.last_delayed_sync) / self.slice[1])
                .min(u64::from(u32::MAX)) as u32;
            if depth == 0 && qq.dispatched == 0 {
                depth = 1;
            }
            max = max.min(depth);
        }
        qq.dispatched < max
    }

    /// The queue's next request: the FIFO's head once per slice if expired, else
    /// `cfq_choose_req` between the next request ahead of the head and the one behind it.
    fn next_rq(&mut self, ctx: &Ctx, q: usize) -> Option<RqId> {
        let expire = self.fifo_expire[usize::from(self.queues[q].sync)];
        let qq = &mut self.queues[q];
        if let Some(f) = expired_fifo_head(
            &mut qq.fifo,
            &mut qq.fifo_checked,
            &self.rq_pos,
            ctx,
            expire,
        ) {
            return Some(f);
        }
        let head = qq.last_pos;
        let ahead = qq.sorted.range((head, 0)..).next().copied();
        let behind = qq.sorted.range(..(head, 0)).next_back().copied();
        let back = behind.filter(|(s, _)| head - s <= self.back_seek_max);
        match (ahead, back) {
            (Some((a, ra)), Some((b, rb))) => {
                if (head - b) * self.back_seek_penalty < a - head {
                    Some(rb)
                } else {
                    Some(ra)
                }
            }
            (Some((_, r)), None) | (None, Some((_, r))) => Some(r),
            // Only requests behind, beyond back_seek_max: wrap to the lowest.
            (None, None) => qq.sorted.iter().next().map(|(_, r)| *r),
        }
    }

    /// `cfq_arm_slice_timer`.
    fn arm_slice_timer(&mut self, ctx: &Ctx, q: usize) {
        if self.nonrot_queueing() && self.group_idle == 0 {
            return;
        }
        let reason = match self.should_idle(q) {
            Some(r) => r,
            None if self.group_idle > 0 => IdleReason::GroupIdle,
            None => return,
        };
        let qq = &self.queues[q];
        if qq.dispatched > 0 || !ctx.stream_has_future(qq.stream) {
            return;
        }
        // Not past the slice: a think time longer than what is left is not waited for.
        if qq.ttime.valid() && qq.slice_end.saturating_sub(ctx.now) < qq.ttime.mean {
            return;
        }
        // Group idle only for the group's last queue, and not when processes of its service
        // tree think longer than group_idle.
        let tree_big = self.tree_ttime[self.tree_index(q)].big(self.group_idle);
        if reason == IdleReason::GroupIdle && (self.groups[qq.group].busy > 1 || tree_big) {
            return;
        }
        let sl = if reason == IdleReason::GroupIdle {
            self.group_idle
        } else {
            self.slice_idle
        };
        let stream = qq.stream;
        self.wait_request = true;
        self.idle_reason = reason;
        self.timer = Some(ctx.now + sl);
        self.idle_since = ctx.now;
        let others_pending = self.others_pending(q);
        self.log(Decision::Idle {
            stream,
            reason,
            slice_ns: sl,
            others_pending,
        });
    }

    /// `cfq_should_preempt`: may a request for `new` (not active) take over?
    fn should_preempt(&self, ctx: &Ctx, new: usize, rq: RqId) -> bool {
        let Some(a) = self.active else {
            return false;
        };
        let (nq, aq) = (&self.queues[new], &self.queues[a]);
        let r = &ctx.rqs[rq as usize];
        if nq.class == CLASS_IDLE {
            return false;
        }
        if aq.class == CLASS_IDLE {
            return true;
        }
        if aq.class == CLASS_RT && nq.class != CLASS_RT {
            return false;
        }
        if r.sync && !aq.sync && nq.sync {
            return true;
        }
        // Fairness among cgroups: only the active queue's group or its ancestors preempt.
        if !self.may_preempt_group(aq.group, nq.group) {
            return false;
        }
        if self.slice_used(a, ctx.now) {
            return true;
        }
        if nq.class == CLASS_RT && aq.class != CLASS_RT {
            return true;
        }
        if aq.wl_type() == WorkloadType::SyncNoIdle
            && nq.wl_type() == WorkloadType::SyncNoIdle
            && aq.sorted.is_empty()
        {
            return true;
        }
        let active_meta = aq.sorted.iter().any(|(_, x)| ctx.rqs[*x as usize].meta);
        if r.meta && !active_meta {
            return true;
        }
        if aq.sorted.is_empty() && self.should_idle(a).is_none() {
            return true;
        }
        if !self.wait_request {
            return false;
        }
        // `cfq_rq_close`: as good as the active queue's own next request.
        r.sector.abs_diff(aq.last_pos) <= CLOSE_THR
    }

    /// `cfq_should_wait_busy`: the emptied active queue is its group's last, the group
    /// thinks less than group_idle, and the slice is used or about to be.
    fn should_wait_busy(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let gg = &self.groups[qq.group];
        if !qq.sorted.is_empty() || gg.busy > 1 || gg.ttime.big(self.group_idle) {
            return false;
        }
        if self.slice_used(q, self.now) {
            return true;
        }
        let left = qq.slice_end.saturating_sub(self.now);
        (qq.ttime.valid() && left < qq.ttime.mean) || left <= JIFFY_NS
    }

    fn update_hw_tag(&mut self, ctx: &Ctx) {
        self.hw_tag_est_depth = self.hw_tag_est_depth.max(ctx.in_driver);
        if self.hw_tag == Some(true) {
            return;
        }
        if self.total_queued as u32 <= HW_QUEUE_MIN && ctx.in_driver <= HW_QUEUE_MIN {
            return;
        }
        self.hw_samples += 1;
        if self.hw_samples < HW_SAMPLES {
            return;
        }
        self.hw_tag = Some(self.hw_tag_est_depth >= HW_QUEUE_MIN);
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
