//! BFQ (block/bfq-iosched.c, bfq-wf2q.c), after the decision structure of the 6.x source,
//! with switches for the kernel versions where a decision changed (see
//! shared/reference/scheduler-model.md §1.16):
//! - per-process sync queues, one async queue per cgroup; B-WF2Q+ virtual time, budgets with
//!   the expiration feedback table, budget timeouts;
//! - the idling decision (`bfq_better_to_idle`) with the clause that held, the idle slice
//!   (`slice_idle`, 2 ms for seeky queues, >= 20 ms for weight-raised ones), the small-request
//!   hold;
//! - injection while plugged: the waker's I/O (5.3+), the woken queue's (5.13+), and limited
//!   injection of others (5.3+, limit 1);
//! - waker detection (5.3: 2 hits within 200 µs; 5.12+: 3 hits within 4 ms);
//! - preemption on activation (hole recovery; higher weight 5.3+; plugging no longer worth
//!   it 5.12+);
//! - interactive weight raising (x30) with large-burst detection; soft real-time raising
//!   (x3000 for 300 ms, budget timeout x1) of a queue back after an isochronous pause, and
//!   its switch back to the interactive period it interrupted; cgroups counted for
//!   asymmetry (`> 0` non-root groups before 6.1, `> 1` after).
//! - the data of a write with REQ_PREFLUSH (6.5+: on BFQ's dispatch list, outside its
//!   queues; [`Scheduler::insert_at_head`]).
//!
//! - queue merging: stable merge of queues created together (5.13+: at once on
//!   non-rotational devices with queueing, else >= 600 ms later unless idling boosts the
//!   queue's throughput), early merge of queues with close I/O (EQM), split of a merged
//!   queue gone seeky (not of stably merged ones); the merged queue inherits weight
//!   raising, the IO_bound flag and the waker (see `queue_merging`);
//! - the 5.12+ IO_bound flag at each sync arrival (`bfq_update_io_intensity`);
//!
//! - budget timeouts on jiffies (`jiffies + bfq_timeout`, HZ `hz=`, 250 by default), with
//!   6.x's rules: `bfq_may_expire_for_budg_timeout`, no timeout expiry for a queue about to
//!   idle (`bfq_bfqq_must_idle`), none right after a dispatch; no asymmetric idling for the
//!   lightest queue (`smallest_weight`, 5.12+ here).
//!
//! Hooks (`force_*`, `decide_dispatch`) let [`crate::bfqcheck`] drive the model with
//! a recording and BFQ's logged state.
//!
//! - a queue emptied by injection while another is in service leaves the busy set.
//!
//! - an empty queue preempted while it needed idling for its guarantees stays busy
//!   (5.3+, `REQUEUE_EMPTY_PREEMPTED`).
//!
//! - the shallower request depths of async I/O and sync writes (`bfq_limit_depth`;
//!   [`Scheduler::request_limit`]), and depth 1 for a queue (or its group) holding its
//!   weight's share of them (`bfqq_request_over_limit`, 5.18+; [`Scheduler::depth_one_tags`]).
//!
//! Not modelled: time charging of slow queues, the inject-limit feedback, ioprio classes,
//! the peak-rate estimator (the fitted device's sequential rate stands for it), queue
//! merging triggered by a bio merge attempt (`bfq_allow_bio_merge`; only at request
//! insertion here), the idle tree's weights in the depth shares.
//!
//! The model is split as the kernel's code is (block/bfq-iosched.c, bfq-wf2q.c,
//! bfq-cgroup.c), one concern a file. This one holds the state ([`Bfq`] and its queues)
//! and the entry points the simulator calls ([`Scheduler`]: insertion with the think time
//! and seekiness it updates, dispatch, completion, the idle timer, request depths).
//! - `queues`: which queue a request goes to, a new queue's state, I/O priority weights;
//! - `activation`: a queue becoming busy: its budget, weight raising on arrival, its
//!   timestamps, preemption of the queue in service;
//! - `wf2q`: B-WF2Q+: the busy set, virtual time, the next queue in service, budgets;
//! - `dispatch`: a dispatch opportunity (`bfq_select_queue`) and the request served;
//! - `expiry`: expiration, the budget feedback, budget timeouts;
//! - `idling`: the idling decision and slice, waker detection, injection;
//! - `weight_raising`: raising periods and their end, soft real-time, large bursts;
//! - `queue_merging`: stable and early queue merging, splits;
//! - `groups`: cgroups: each group's load and the depth shares of `bfq_limit_depth`;
//! - `peak_rate`: the peak-rate estimator behind the max budget;
//! - `check_hooks`: what [`crate::bfqcheck`] drives the model through.

mod activation;
mod check_hooks;
mod dispatch;
mod expiry;
mod groups;
mod idling;
mod peak_rate;
mod queue_merging;
mod queues;
#[cfg(test)]
mod tests;
mod weight_raising;
mod wf2q;

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

use iosched_core::event::Op;

use super::{
    Ctx, Decided, Decision, ExpireReason, IdleOutcome, MergeWhy, RqId, SchedEnv, Scheduler,
    SettingError, Settings, merges_within_own_queue, reposition_sorted,
};

use groups::GroupLoad;
use peak_rate::RateEstimator;
use queue_merging::SavedState;
use weight_raising::WR_COEFF;

pub const KEYS: &[&str] = &[
    "slice_idle",
    "slice_idle_us",
    "timeout_sync",
    "max_budget",
    "low_latency",
    "strict_guarantees",
    "back_seek_max",
    "back_seek_penalty",
    "fifo_expire_sync",
    "fifo_expire_async",
    "kernel",
    "cgroups",
    "hz",
];

/// Requeueing an empty preempted queue (`__bfq_bfqq_expire`, 5.3+: one that still needs
/// idling for its service guarantees stays busy): BFQ's log shows it ("expire (4)",
/// the same queue set in service again, then "expire (3)" at its next chance). Off gives a
/// switch to the preempting queue there instead.
const REQUEUE_EMPTY_PREEMPTED: bool = true;

const SEEK_THR: u64 = 800;

/// `queue_of` of a request no queue holds.
const NO_QUEUE: u32 = u32::MAX;

struct Queue {
    stream: u32,
    /// From the I/O priority: `(8 - level) * 10`, 40 by default.
    orig_weight: f64,
    sync: bool,
    cgroup: u64,
    root_group: bool,
    /// Its group's index in `Bfq::groups` (from `root_group` and `cgroup`, which a queue
    /// keeps for life).
    group: usize,
    sorted: BTreeSet<(u64, RqId)>,
    fifo: VecDeque<RqId>,
    dispatched: u32,
    busy: bool,
    start: f64,
    finish: f64,
    budget: u32,
    max_budget: u32,
    service: u32,
    budget_timeout: u64,
    fifo_checked: bool,
    last_pos: u64,
    seek_hist: u32,
    /// Over 19 of the last 32 requests seeky (`BFQQ_SEEKY`), kept with `seek_hist`
    /// ([`Queue::push_seek`]): asked at every dispatch and idling decision, and a count of
    /// bits is a dozen instructions without the popcount one.
    seeky: bool,
    ttime_samples: u64,
    ttime_total: u64,
    ttime_mean: u64,
    last_end_request: u64,
    /// The next think-time sample is the queue's first, taken at the insertion that
    /// created it: since 6.9 it is 2 x slice_idle, whatever the process's think time.
    /// `bfq_init_bfqq` stamps `last_end_request = blk_time_get_ns() + 1`, and
    /// `bfq_update_io_thinktime` subtracts that from `blk_time_get_ns()` again: under the
    /// submitter's plug both read the time the plug cached ("block: cache current nsec
    /// time in struct blk_plug"), so the difference is -1, which wraps as a u64 and is
    /// capped at 2 x slice_idle. Three samples make the mean valid (`bfq_sample_valid`),
    /// so a new queue has a long think time at its third request, whatever its process
    /// does (in BFQ's log of 32 random readers every queue's third expiration says
    /// `short_ttime 0` and its others `short_ttime 1`), and is not idled for then.
    first_ttime_sample_wraps: bool,
    /// 5.12+ I/O intensity (`bfq_update_io_intensity`): the start of the observation
    /// window, the time it spent empty with nothing in flight, and the IO_bound flag
    /// this gave at its last request.
    io_start_time: u64,
    tot_idle_time: u64,
    io_bound_now: bool,
    wr_coeff: u32,
    /// `last_wr_start_finish` while raised: the raising period runs from it for `wr_dur`.
    wr_start: u64,
    /// `wr_cur_max_time`: [`WR_RT_MAX_TIME_NS`] marks soft real-time raising.
    ///
    /// [`WR_RT_MAX_TIME_NS`]: weight_raising::WR_RT_MAX_TIME_NS
    wr_dur: u64,
    /// Where the interactive raising a switch to soft real-time interrupted began
    /// (`wr_start_at_switch_to_srt`); `None`: minus infinity (none to go back to).
    wr_start_at_switch_to_srt: Option<u64>,
    /// Soft real-time detection: the queue may be deemed soft real-time when it becomes
    /// busy after this instant (`soft_rt_next_start`; `u64::MAX` until an expiration
    /// found it isochronous); when it last became busy and the service since.
    soft_rt_next_start: u64,
    last_idle_bklogged: u64,
    service_from_backlogged: u64,
    /// Expired empty with requests in flight: `soft_rt_next_start` is computed when they
    /// are done.
    softrt_update: bool,
    wr_service: u64,
    waker: Option<usize>,
    waker_cand: Option<usize>,
    waker_hits: u32,
    waker_first: u64,
    in_large_burst: bool,
    /// Before 5.12: the IO_bound flag and its counter of requests arriving soon after a
    /// completion.
    io_bound_flag: bool,
    requests_within_timer: u32,
    /// Shared by several processes (queue merging): BFQ logs it as `bfqSHARED-`.
    shared: bool,
    /// The streams whose I/O goes to this queue (its process references).
    members: Vec<u32>,
    /// I/O priority (class, level) as BFQ sees it, for stable merging.
    ioprio: (u16, u16),
    /// Created at (`creation_time`).
    created: u64,
    /// Not yet activated by a request (`just_created`).
    just_created: bool,
    /// When the first sector of `service_from_backlogged` was dispatched (`first_IO_time`):
    /// a queue served for longer than `bfq_merge_time_limit` is too late for merging.
    first_io_time: u64,
    /// Merged away (`new_bfqq`): its processes' next requests go there.
    merged_into: Option<(usize, MergeWhy)>,
    /// Found seeky at an expiration while shared (`split_coop`).
    split_coop: bool,
    /// A process got it back from a split at this time (`split_time`).
    split_time: Option<u64>,
    /// Expired because it ran out of requests (may recover its slot if it comes back soon).
    non_blocking_wait_rq: bool,
}

impl Queue {
    fn queued(&self) -> usize {
        self.sorted.len()
    }
    fn weight(&self) -> f64 {
        self.orig_weight * f64::from(self.wr_coeff)
    }
    fn seeky(&self) -> bool {
        self.seeky
    }
    /// Shifts a request's seekiness into the history; [`Queue::seeky`] follows.
    fn push_seek(&mut self, seeky: bool) {
        self.seek_hist = (self.seek_hist << 1) | u32::from(seeky);
        self.seeky = Self::seeky_history(self.seek_hist);
    }
    fn seeky_history(seek_hist: u32) -> bool {
        seek_hist.count_ones() > 19
    }
}

pub struct Bfq {
    slice_idle: u64,
    /// `bfq_timeout` in jiffies (`HZ / 8` by default; sysfs `timeout_sync` is in ms).
    timeout_jiffies: u64,
    /// One jiffy, ns (`CONFIG_HZ`, 250 by default): budget timeouts are jiffy-granular.
    jiffy_ns: u64,
    user_max_budget: u32,
    low_latency: bool,
    strict: bool,
    fifo_expire: [u64; 2],
    kernel: u32,
    cgroups: bool,
    rotational: bool,
    rate: RateEstimator,
    stream_ioprio: Vec<u16>,
    root_cgroups: Vec<u64>,
    queues: Vec<Queue>,
    /// Async queues by (cgroup, false); sync queues by stream in `sync_queue`
    /// (see `queue_by_key`).
    by_key: FxHashMap<(u64, bool), usize>,
    sync_queue: Vec<Option<usize>>,
    queue_of: Vec<u32>,
    in_service: Option<usize>,
    vtime: f64,
    busy: u32,
    wr_busy: u32,
    /// The weights of the busy queues, summed (B-WF2Q+'s virtual time advances by service
    /// over it at each dispatch). Weights are whole numbers, so the running sum is exactly
    /// what summing them afresh gives.
    busy_weight: f64,
    /// Per group, indexed by `Queue::group` ([`ROOT_GROUP`] first), and the index of
    /// each cgroup's group.
    ///
    /// [`ROOT_GROUP`]: groups::ROOT_GROUP
    groups: Vec<GroupLoad>,
    group_index: FxHashMap<u64, usize>,
    /// Cgroups' groups (not the root group) with a busy queue.
    active_groups: u32,
    wait_request: bool,
    timer: Option<u64>,
    idle_since: u64,
    hw_samples: u32,
    max_in_driver: u32,
    hw_tag: Option<bool>,
    last_completed: Option<usize>,
    last_completion: u64,
    budgets_assigned: u32,
    burst_last: Option<u64>,
    burst: Vec<usize>,
    burst_large: bool,
    decisions: Vec<Decided>,
    /// Off: `log` drops decisions ([`Scheduler::keep_decisions`]).
    keep_decisions: bool,
    now: u64,
    /// Requests held in all queues.
    total_queued: usize,
    /// The last sync queue created in each group (`last_bfqq_created`; `None` is the
    /// root group), for stable merging.
    last_created: FxHashMap<Option<u64>, usize>,
    /// Per stream (its `bfq_io_cq`): the queue a delayed stable merge is scheduled with
    /// (`stable_merge_bfqq`), whether its queue was stably merged (`stably_merged`: never
    /// split), and the state saved when its queue was merged (`bfq_bfqq_save_state`).
    stable_target: Vec<Option<usize>>,
    stably_merged: Vec<bool>,
    saved: Vec<Option<SavedState>>,
    /// End of the in-service queue's last dispatch (`in_serv_last_pos`), 0 when none yet.
    in_serv_last_pos: u64,
    /// Trace-driven check: a merge BFQ made is being imposed (not logged as the model's).
    merges_imposed: bool,
    /// Per stream: a stable merge was scheduled for it at its queue's creation.
    stable_scheduled: Vec<bool>,
    /// Sort key (sector) of each request held, `u64::MAX` once dispatched.
    rq_pos: Vec<u64>,
    /// The request [`Bfq::select_queue`] found next in the queue it returned, when asking
    /// [`Bfq::next_rq`] again gives it again (taken by the dispatch that follows: a second
    /// search of the queue's sector tree was a twentieth of a BFQ replay).
    picked: Option<(usize, RqId)>,
}

impl Bfq {
    pub fn new(s: &Settings, env: &SchedEnv) -> Result<Bfq, SettingError> {
        s.check("bfq", KEYS)?;
        let slice_idle = match s.0.get("slice_idle_us") {
            Some(_) => s.u64_or("slice_idle_us", 8000)? * 1000,
            None => s.u64_or("slice_idle", 8)? * 1_000_000,
        };
        let strict = s.bool_or("strict_guarantees", false)?;
        s.u64_or("back_seek_max", 16384)?;
        s.u64_or("back_seek_penalty", 2)?;
        let hz = s.u64_or("hz", 250)?.clamp(100, 1000);
        // `msecs_to_jiffies` rounds up; unset, the kernel's default is HZ / 8 (31 jiffies,
        // 124 ms, at HZ=250: what sysfs then shows as timeout_sync).
        let timeout_jiffies = match s.0.get("timeout_sync") {
            Some(_) => (s.u64_or("timeout_sync", 125)?.max(1) * hz).div_ceil(1000),
            None => hz / 8,
        };
        let jiffy_ns = 1_000_000_000 / hz;
        Ok(Bfq {
            slice_idle: if strict {
                slice_idle.max(8_000_000)
            } else {
                slice_idle
            },
            timeout_jiffies,
            jiffy_ns,
            user_max_budget: s.u64_or("max_budget", 0)? as u32,
            low_latency: s.bool_or("low_latency", true)?,
            strict,
            fifo_expire: [
                s.u64_or("fifo_expire_async", 250)? * 1_000_000,
                s.u64_or("fifo_expire_sync", 125)? * 1_000_000,
            ],
            kernel: s.kernel_or("kernel", env.kernel)?,
            cgroups: s.bool_or("cgroups", true)?,
            rotational: env.rotational,
            rate: RateEstimator::new(env, timeout_jiffies * jiffy_ns),
            stream_ioprio: env.stream_ioprio.clone(),
            root_cgroups: env.root_cgroups.clone(),
            queues: Vec::new(),
            by_key: FxHashMap::default(),
            sync_queue: Vec::new(),
            queue_of: Vec::new(),
            in_service: None,
            vtime: 0.0,
            busy: 0,
            wr_busy: 0,
            busy_weight: 0.0,
            groups: vec![GroupLoad::default()],
            group_index: FxHashMap::default(),
            active_groups: 0,
            wait_request: false,
            timer: None,
            idle_since: 0,
            hw_samples: 0,
            max_in_driver: 0,
            hw_tag: None,
            last_completed: None,
            last_completion: 0,
            // A BFQ that served earlier I/O is past its first 194 budgets.
            budgets_assigned: if env.max_budget_start.is_some() {
                256
            } else {
                0
            },
            burst_last: None,
            burst: Vec::new(),
            burst_large: false,
            decisions: Vec::new(),
            keep_decisions: true,
            now: 0,
            total_queued: 0,
            last_created: FxHashMap::default(),
            stable_target: Vec::new(),
            stably_merged: Vec::new(),
            saved: Vec::new(),
            in_serv_last_pos: 0,
            merges_imposed: false,
            stable_scheduled: Vec::new(),
            rq_pos: Vec::new(),
            picked: None,
        })
    }

    fn log(&mut self, d: Decision) {
        if self.keep_decisions {
            self.decisions.push(Decided { t: self.now, d });
        }
    }
}

impl Scheduler for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    /// `bfq_allow_bio_merge`: a sync bio only into a request of the queue its process's
    /// I/O goes to, which after queue merging holds other processes' requests too.
    fn allow_merge(&self, ctx: &Ctx, rq: RqId, stream: u32, sync: bool) -> bool {
        let queued = self.rq_pos.get(rq as usize).is_some_and(|p| *p != u64::MAX);
        match (queued, self.queue_by_key((u64::from(stream), true))) {
            (true, Some(own)) if sync && ctx.rqs[rq as usize].sync => {
                self.queue_of[rq as usize] as usize == own
            }
            _ => merges_within_own_queue(ctx, rq, stream, sync),
        }
    }

    fn repositioned(&mut self, ctx: &Ctx, rq: RqId, old_sector: u64) {
        if let Some(q) = self.queue_of_rq(rq) {
            let sorted = &mut self.queues[q].sorted;
            reposition_sorted(sorted, &mut self.rq_pos, ctx, rq, old_sector);
        }
    }

    fn insert(&mut self, ctx: &Ctx, rq: RqId) {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        let q = self.queue_for(ctx, rq);
        let (stream, sector) = (ctx.rqs[rq as usize].stream, ctx.rqs[rq as usize].sector);
        let q = self.setup_cooperator(ctx, q, stream, sector);
        if self.queue_of.len() <= rq as usize {
            self.queue_of.resize(rq as usize + 1, NO_QUEUE);
        }
        self.queue_of[rq as usize] = q as u32;
        let r = &ctx.rqs[rq as usize];
        let (sector, sectors) = (r.sector, r.sectors);
        let rotational = self.rotational;
        let slice_idle = self.slice_idle;
        let was_empty = self.queues[q].queued() == 0;
        {
            let qq = &mut self.queues[q];
            // Think time: only from an idle queue (6.x), capped at 2 x slice_idle.
            if qq.sync && was_empty && qq.dispatched == 0 && !qq.busy && slice_idle > 0 {
                let elapsed = if qq.first_ttime_sample_wraps {
                    2 * slice_idle
                } else {
                    ctx.now
                        .saturating_sub(qq.last_end_request)
                        .min(2 * slice_idle)
                };
                qq.ttime_samples = (7 * qq.ttime_samples + 256) / 8;
                qq.ttime_total = (7 * qq.ttime_total + 256 * elapsed) / 8;
                qq.ttime_mean = (qq.ttime_total + 128) / qq.ttime_samples.max(1);
            }
            if ctx.now.saturating_sub(qq.last_end_request) < 3 * slice_idle {
                qq.requests_within_timer += 1;
                if qq.requests_within_timer >= 120 {
                    qq.io_bound_flag = true;
                }
            }
            let seeky = sector.abs_diff(qq.last_pos) > SEEK_THR && (rotational || sectors < 64);
            qq.push_seek(seeky);
            qq.first_ttime_sample_wraps = false;
        }
        if was_empty && self.queues[q].dispatched == 0 {
            self.check_waker(q, ctx.now);
        }
        self.update_io_intensity(q, ctx.now);
        let allocated = self.allocated(q);
        {
            let qq = &mut self.queues[q];
            qq.sorted.insert((sector, rq));
            if self.rq_pos.len() <= rq as usize {
                self.rq_pos.resize(rq as usize + 1, u64::MAX);
            }
            self.rq_pos[rq as usize] = sector;
            qq.fifo.push_back(rq);
        }
        self.allocated_changed(q, allocated);
        self.total_queued += 1;
        if !self.queues[q].busy {
            self.activate(ctx, q, sectors);
        } else if self.in_service == Some(q) && self.wait_request {
            let small = sectors < 32 && self.queues[q].queued() == 1;
            let timed_out = self.budget_timed_out(q, ctx.now);
            if !(small && self.idling_boosts_thr(q) && !timed_out) {
                self.end_idle(IdleOutcome::Arrived);
                if timed_out {
                    self.expire(ctx, q, ExpireReason::BudgetTimeout);
                }
            }
        }
        if self.in_service == Some(q) && self.wait_request && !self.queues[q].busy {
            self.end_idle(IdleOutcome::Arrived);
        }
    }

    /// A request's data the flush machinery inserted at the head (a write with
    /// REQ_PREFLUSH on a device with a write cache). Since 6.5 ("blk-mq: use
    /// the I/O scheduler for writes from the flush state machine") it reaches
    /// `bfq_insert_request` with `BLK_MQ_INSERT_AT_HEAD`: `bfq_init_rq` gives it its
    /// process's queue, but it goes on `bfqd->dispatch`, not into the queue (no
    /// `bfq_add_request`: no activation, think time or waker check). Before, it bypassed
    /// the scheduler (`blk_mq_sched_bypass_insert`, RQF_FLUSH_SEQ) and BFQ never knew it.
    fn insert_at_head(&mut self, ctx: &Ctx, rq: RqId) {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        if self.kernel < 6005 {
            return;
        }
        let q = self.queue_for(ctx, rq);
        if self.queue_of.len() <= rq as usize {
            self.queue_of.resize(rq as usize + 1, NO_QUEUE);
        }
        self.queue_of[rq as usize] = q as u32;
    }

    /// A request of [`Scheduler::insert_at_head`] went to the driver:
    /// `__bfq_dispatch_request` serves the dispatch list first, before selecting a queue,
    /// counting it in its queue's `dispatched` (its completion is the queue's like any
    /// other) without charging any service.
    fn dispatched_at_head(&mut self, ctx: &Ctx, rq: RqId) {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        if let Some(q) = self.queue_of_rq(rq) {
            self.queues[q].dispatched += 1;
            self.groups[self.queues[q].group].allocated += 1;
        }
    }

    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId> {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        if self.strict && ctx.in_driver > 0 {
            return None;
        }
        self.sample_hw_tag(ctx);
        let q = self.select_queue(ctx)?;
        let rq = match self.picked.take() {
            Some((picked_q, rq)) if picked_q == q => rq,
            _ => self.next_rq(ctx, q)?,
        };
        self.serve(ctx, q, rq);
        Some(rq)
    }

    fn completed(&mut self, ctx: &Ctx, rq: RqId) {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        let Some(q) = self.queue_of_rq(rq) else {
            return;
        };
        let allocated = self.allocated(q);
        {
            let qq = &mut self.queues[q];
            qq.dispatched = qq.dispatched.saturating_sub(1);
            qq.last_end_request = ctx.now;
            qq.first_ttime_sample_wraps = false;
        }
        self.allocated_changed(q, allocated);
        self.last_completed = Some(q);
        self.last_completion = ctx.now;
        // `bfq_completed_request`: the deferred soft real-time bound, once nothing is in
        // flight (5.12+: not for an interactive-raised queue, "avoid spurious switches to
        // soft_rt of interactive queues").
        // `bfq_completed_request`: the last request of an idle queue done: the start of
        // its idle time, in the overloaded `budget_timeout`.
        if self.queues[q].dispatched == 0 && !self.queues[q].busy {
            self.queues[q].budget_timeout = ctx.now.max(1);
        }
        let qq = &self.queues[q];
        if qq.softrt_update
            && qq.dispatched == 0
            && qq.queued() == 0
            && (self.kernel < 5012 || qq.wr_coeff != WR_COEFF)
        {
            self.queues[q].soft_rt_next_start = self.softrt_next_start(q, ctx.now);
        }
        if self.in_service != Some(q) {
            // A queue that expired with requests in flight leaves the busy set once they
            // are done only through a new activation; nothing to decide here.
            return;
        }
        let empty = self.queues[q].queued() == 0;
        let idle = if empty {
            self.better_to_idle(ctx, q)
        } else {
            None
        };
        if let Some(reason) = idle {
            if self.queues[q].dispatched == 0 && !self.wait_request {
                self.arm_idle(ctx, q, reason);
            }
        } else if self.may_expire_for_budget_timeout(q, ctx.now) {
            self.expire(ctx, q, ExpireReason::BudgetTimeout);
        } else if empty {
            self.expire(ctx, q, ExpireReason::NoMoreRequests);
        }
    }

    fn next_timer(&self) -> Option<u64> {
        self.timer
    }

    fn timer(&mut self, ctx: &Ctx) {
        self.check_group_loads_in_tests();
        self.now = ctx.now;
        // It fired: whatever follows arms a new one (a timer left set would fire again at
        // the same instant, for ever).
        self.timer = None;
        if !self.wait_request {
            return;
        }
        let Some(q) = self.in_service else {
            self.wait_request = false;
            self.timer = None;
            return;
        };
        if self.budget_timed_out(q, ctx.now) {
            self.expire(ctx, q, ExpireReason::BudgetTimeout);
        } else if self.queues[q].queued() == 0 {
            self.expire(ctx, q, ExpireReason::TooIdle);
        } else {
            self.end_idle(IdleOutcome::Arrived);
        }
    }

    /// `bfq_limit_depth` with the depths of `bfq_update_depths` (6.x): sync reads take any request; async I/O at most 1/2 of them and sync
    /// writes 3/4, or 3/16 and 6/16 while a queue is weight-raised. Seen on this project's
    /// loop device (nr_requests 256): fio's sync writes under BFQ never had more than 192
    /// requests, under mq-deadline 256.
    fn request_limit(&self, nr_requests: u32, op: Op, sync: bool) -> u32 {
        if sync && !op.is_write() {
            return nr_requests;
        }
        let (num, shift) = match (self.wr_busy > 0, sync) {
            (false, false) => (1, 1),
            (false, true) => (3, 2),
            (true, false) => (3, 4),
            (true, true) => (6, 4),
        };
        u32::try_from((u64::from(nr_requests) * num) >> shift)
            .unwrap_or(u32::MAX)
            .max(1)
    }

    /// `bfq_limit_depth` (5.18+, with cgroup support): a bio whose process's queue is over
    /// its share of the depth (`Bfq::request_over_limit`) gets depth 1. Since 6.18
    /// ("lib/sbitmap: convert shallow_depth from one word to the whole sbitmap") a depth
    /// counts over the whole bitmap: depth 1 is tag 0 alone; before, one tag a word. So a
    /// process that fills its limit sleeps for the one request holding tag 0, not for the
    /// next completion, and the queue drains meanwhile. Seen on this project's test bed
    /// (6.18, fio iodepth 256 of sync writes, nr_requests 256): every long Q2G wait ended
    /// with the same request, just after its completion, and on average ~80 requests were
    /// in flight under a limit of 96, not 96.
    fn depth_one_tags(
        &self,
        nr_requests: u32,
        stream: u32,
        cgroup: u64,
        op: Op,
        sync: bool,
    ) -> Option<u32> {
        if self.kernel < 5018 || !self.cgroups {
            return None;
        }
        let q = self.queue_of_stream(stream, sync, cgroup)?;
        let limit = self.request_limit(nr_requests, op, sync);
        self.request_over_limit(q, limit).then(|| {
            if self.kernel >= 6018 {
                1
            } else {
                super::sbitmap_words(nr_requests)
            }
        })
    }

    fn has_work(&self) -> bool {
        self.total_queued > 0
    }

    fn take_decisions(&mut self) -> Vec<Decided> {
        self.check_group_loads_in_tests();
        std::mem::take(&mut self.decisions)
    }

    fn keep_decisions(&mut self, keep: bool) {
        self.keep_decisions = keep;
    }
}
