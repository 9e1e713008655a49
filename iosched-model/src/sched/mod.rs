//! Scheduler models: pure, deterministic state machines the simulator drives. Each owns the
//! requests inserted into it until it hands them out, decides in what order, and may hold
//! the device idle (returning nothing while it has work) with a timer to wake it. What each
//! decided and why is kept in a [`Decision`] log.
//!
//! - [`none`] is FIFO, blk-mq's software queue.
//! - [`deadline`] is mq-deadline.
//! - [`bfq`] is BFQ (per-process queues, B-WF2Q+, budgets, idling, injection, raising).
//! - [`kyber`] is Kyber's per-domain token pools.
//! - [`cfq`] is legacy CFQ (time slices per process, idling; removed in 4.20).
//!
//! Owns: scheduling decisions. Must not: time the device, emit events.

pub mod bfq;
pub mod cfq;
pub mod deadline;
pub mod kyber;
pub mod none;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use iosched_core::event::Op;

pub type RqId = u32;

/// Whether a bio may merge into `rq` under a scheduler with a queue per process: a sync
/// bio only into a request of its own process's queue (`bfq_allow_bio_merge`, and
/// `cfq_allow_bio_merge` before it), async only with async.
pub(crate) fn merges_within_own_queue(ctx: &Ctx, rq: RqId, stream: u32, sync: bool) -> bool {
    let r = &ctx.rqs[rq as usize];
    r.sync == sync && (!sync || r.stream == stream)
}

/// The head of a per-process queue's FIFO if it has expired, looked at once per service
/// period (`checked`), after dropping heads already dispatched (their `rq_pos` is
/// `u64::MAX`): `bfq_check_fifo` / `cfq_check_fifo`, which BFQ inherited from CFQ.
pub(crate) fn expired_fifo_head(
    fifo: &mut VecDeque<RqId>,
    checked: &mut bool,
    rq_pos: &[u64],
    ctx: &Ctx,
    expire: u64,
) -> Option<RqId> {
    while let Some(&f) = fifo.front() {
        if rq_pos.get(f as usize).is_some_and(|p| *p != u64::MAX) {
            break;
        }
        fifo.pop_front();
    }
    if *checked {
        return None;
    }
    *checked = true;
    fifo.front()
        .copied()
        .filter(|f| ctx.rqs[*f as usize].inserted + expire <= ctx.now)
}

/// Moves a queued request to its new start in a queue's sector-sorted set after a front
/// merge (`rq_pos` keeps each queued request's key in that set).
pub(crate) fn reposition_sorted(
    sorted: &mut BTreeSet<(u64, RqId)>,
    rq_pos: &mut [u64],
    ctx: &Ctx,
    rq: RqId,
    old_sector: u64,
) {
    if sorted.remove(&(old_sector, rq)) {
        let s = ctx.rqs[rq as usize].sector;
        sorted.insert((s, rq));
        rq_pos[rq as usize] = s;
    }
}

/// Where a request is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqState {
    Plugged,
    Queued,
    Dispatched,
    Done,
}

/// A request as the simulator keeps it; schedulers read these, the simulator writes them.
#[derive(Clone, Debug)]
pub struct Rq {
    pub stream: u32,
    pub cgroup: u64,
    pub sector: u64,
    pub sectors: u32,
    pub op: Op,
    pub sync: bool,
    pub meta: bool,
    pub ioprio: u16,
    /// When it entered the scheduler.
    pub inserted: u64,
    pub state: RqState,
    pub head_io: u32,
    pub tail_io: u32,
    pub bios: u32,
}

impl Rq {
    pub fn end(&self) -> u64 {
        self.sector + u64::from(self.sectors)
    }
    pub fn is_write(&self) -> bool {
        self.op.is_write()
    }
}

/// What a scheduler sees of the world when called.
pub struct Ctx<'a> {
    pub now: u64,
    pub rqs: &'a [Rq],
    /// Requests in the driver.
    pub in_driver: u32,
    /// The device's depth (driver tags).
    pub depth: u32,
    pub rotational: bool,
    /// Bios each stream has still to issue.
    pub remaining: &'a [u32],
    /// When each stream's last I/O completed in the recording (ns on the replay's clock;
    /// `u64::MAX`: gone as soon as its I/O is done); empty: never gone.
    pub last_io_at: &'a [u64],
}

impl Ctx<'_> {
    /// Whether stream `s` will issue more I/O after now (a process that exited has no
    /// future: BFQ does not idle for it).
    pub fn stream_has_future(&self, s: u32) -> bool {
        self.remaining.get(s as usize).is_some_and(|r| *r > 0)
    }

    /// Whether stream `s` is taken to have exited: it has no I/O to come, and the replay is
    /// not yet at the instant its last recorded I/O completed. The replay ran out of its I/O early
    /// (the recorded scheduler starved it, and nothing continues it): the process that would
    /// have gone on issuing is not modelled, so no scheduler waits for it. Past that
    /// instant a process without I/O is still there (it exits some time after its last
    /// I/O; the trace shows no exits).
    pub fn stream_gone(&self, s: u32) -> bool {
        !self.stream_has_future(s)
            && self
                .last_io_at
                .get(s as usize)
                .is_some_and(|t| self.now < *t)
    }
}

/// The scheduler interface.
pub trait Scheduler {
    fn name(&self) -> &'static str;
    /// May a bio of `stream` (sync or not) join the queued request `rq`?
    fn allow_merge(&self, ctx: &Ctx, rq: RqId, stream: u32, sync: bool) -> bool {
        let _ = (ctx, rq, stream, sync);
        true
    }
    /// Whether front merges are attempted (mq-deadline's `front_merges`).
    fn front_merges(&self) -> bool {
        true
    }
    /// A queued request's start moved (front merge) from `old_sector`.
    fn repositioned(&mut self, ctx: &Ctx, rq: RqId, old_sector: u64) {
        let _ = (ctx, rq, old_sector);
    }
    fn insert(&mut self, ctx: &Ctx, rq: RqId);
    /// The data of a write with REQ_PREFLUSH on a device with a write cache: the flush
    /// machinery inserts it at the head of the scheduler's dispatch list (6.5+), so it is
    /// served first, outside the scheduler's queues, and never goes through
    /// [`Scheduler::dispatch`]. A scheduler that keeps per-process state (BFQ) sees it
    /// here, at its issue ([`Scheduler::dispatched_at_head`]) and at its completion.
    fn insert_at_head(&mut self, ctx: &Ctx, rq: RqId) {
        let _ = (ctx, rq);
    }
    fn dispatched_at_head(&mut self, ctx: &Ctx, rq: RqId) {
        let _ = (ctx, rq);
    }
    /// The next request for the driver, or `None` (nothing, or holding the device idle).
    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId>;
    fn completed(&mut self, ctx: &Ctx, rq: RqId);
    /// When the scheduler wants to be called back ([`Scheduler::timer`]).
    fn next_timer(&self) -> Option<u64> {
        None
    }
    fn timer(&mut self, ctx: &Ctx) {
        let _ = ctx;
    }
    /// Of `nr_requests`, how many may be allocated when a bio of this kind still gets one:
    /// the elevator's `limit_depth`, a shallower tag depth for all but sync reads. A bio
    /// that finds that many allocated sleeps for one as if none were free. Default: all.
    fn request_limit(&self, nr_requests: u32, op: Op, sync: bool) -> u32 {
        let _ = (op, sync);
        nr_requests
    }
    /// The elevator's `limit_depth` cuts this bio's tag depth to 1 (BFQ: its queue already
    /// holds its share of [`Scheduler::request_limit`]): `Some(n)`, the bio may take only
    /// the first tag of the first `n` words of the tag bitmap ([`sbitmap_words`]), and asleep
    /// it waits for one of those, not for any tag. `None`: no cut. Default: never.
    fn depth_one_tags(
        &self,
        nr_requests: u32,
        stream: u32,
        cgroup: u64,
        op: Op,
        sync: bool,
    ) -> Option<u32> {
        let _ = (nr_requests, stream, cgroup, op, sync);
        None
    }
    /// Whether it holds requests not yet dispatched.
    fn has_work(&self) -> bool;
    fn take_decisions(&mut self) -> Vec<Decided> {
        Vec::new()
    }
    /// Whether to keep the decision log ([`Scheduler::take_decisions`]); on by default.
    /// A run whose decisions nobody reads (the replay benchmark) turns it off: BFQ and
    /// CFQ log several decisions per request, hundreds of MB on a long replay.
    fn keep_decisions(&mut self, keep: bool) {
        let _ = keep;
    }
}

/// Why BFQ expired a queue (`enum bfqq_expiration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpireReason {
    TooIdle,
    BudgetTimeout,
    BudgetExhausted,
    NoMoreRequests,
    Preempted,
    /// CFQ: the queue's time slice ran out.
    SliceUsed,
    /// CFQ: an async queue dispatched its `slice_async_rq`-derived request quota.
    AsyncRqLimit,
}

impl ExpireReason {
    pub fn name(self) -> &'static str {
        match self {
            Self::TooIdle => "too_idle",
            Self::BudgetTimeout => "budget_timeout",
            Self::BudgetExhausted => "budget_exhausted",
            Self::NoMoreRequests => "no_more_requests",
            Self::Preempted => "preempted",
            Self::SliceUsed => "slice_used",
            Self::AsyncRqLimit => "async_rq_limit",
        }
    }
}

/// Which clause of BFQ's idling decision held (`bfq_better_to_idle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleReason {
    /// `strict_guarantees`.
    Strict,
    /// `idling_boosts_thr_without_issues`: sequential, I/O-bound, short think time (or a
    /// rotational device without command queueing).
    BoostsThroughput,
    /// A weight-raised queue must be protected.
    WeightRaised,
    /// Queues of different weights (or classes) are busy.
    AsymmetricWeights,
    /// Non-root cgroups have pending I/O (`num_groups_with_pending_reqs`).
    CgroupsPending,
    /// The only busy queue (5.12+: plugging costs nothing then).
    OnlyBusyQueue,
    /// CFQ: the queue has the idle window (sequential, think time below slice_idle).
    IdleWindow,
    /// CFQ: no idle window, but the last queue on its service tree (`cfq_should_idle`).
    TreeIdle,
    /// CFQ: `group_idle`: the group's only busy queue.
    GroupIdle,
}

impl IdleReason {
    pub fn name(self) -> &'static str {
        match self {
            Self::Strict => "strict_guarantees",
            Self::BoostsThroughput => "boosts_throughput",
            Self::WeightRaised => "weight_raised",
            Self::AsymmetricWeights => "asymmetric_weights",
            Self::CgroupsPending => "cgroups_pending",
            Self::OnlyBusyQueue => "only_busy_queue",
            Self::IdleWindow => "idle_window",
            Self::TreeIdle => "tree_idle",
            Self::GroupIdle => "group_idle",
        }
    }
}

/// How an idle period ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleOutcome {
    /// The queue's own next request came.
    Arrived,
    /// The timer fired: pure waste.
    TimerExpired,
    /// Another queue took over.
    Preempted,
}

/// Why BFQ served another queue while idling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InjectWhy {
    Waker,
    Woken,
    Limit,
}

/// Why BFQ merged two queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeWhy {
    /// Stable merge at creation, on a non-rotational device with queueing
    /// (`bfq_do_early_stable_merge`, 5.13+).
    StableEarly,
    /// Stable merge scheduled at creation, made at a request >= 600 ms later when idling
    /// would not boost the queue's throughput (`bfq_setup_stable_merge`, 5.13+).
    StableDelayed,
    /// Early queue merge: the request was close to the in-service queue's last position
    /// or to another queue's next request (`bfq_setup_cooperator`, EQM).
    Close,
}

/// One decision, as the scheduler would log it. Queues are named after their stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Decision {
    InService {
        stream: u32,
        sync: bool,
        budget: u32,
    },
    Expire {
        stream: u32,
        sync: bool,
        reason: ExpireReason,
        served: u32,
        /// The queue is shared by merged processes (BFQ logs it as `bfqSHARED-`).
        shared: bool,
    },
    /// BFQ redirected `stream`'s sync I/O into the queue named after `into`
    /// (`bfq_merge_bfqqs`): from then on the queue is shared (`bfqSHARED-` in BFQ's log).
    Merge {
        stream: u32,
        into: u32,
        why: MergeWhy,
    },
    /// BFQ gave `stream` back a queue of its own (`bfq_split_bfqq`): the shared queue
    /// named after `from` had turned seeky.
    Split {
        stream: u32,
        from: u32,
    },
    Idle {
        stream: u32,
        reason: IdleReason,
        slice_ns: u64,
        /// Other queues had requests waiting when idling began.
        others_pending: bool,
    },
    IdleEnd {
        stream: u32,
        outcome: IdleOutcome,
        waited_ns: u64,
        others_pending: bool,
    },
    Inject {
        into: u32,
        from: u32,
        why: InjectWhy,
    },
    Waker {
        stream: u32,
        waker: u32,
    },
    Raise {
        stream: u32,
        coeff: u32,
        duration_ns: u64,
    },
    /// CFQ set the in-service queue's time slice (at its first completion), after
    /// `low_latency` scaling.
    Slice {
        stream: u32,
        sync: bool,
        slice_ns: u64,
    },
    /// CFQ charged the group (cgroup) of an expiring queue for its service
    /// (`cfq_group_served`): `charge` ns of device time, or requests in IOPS mode (no
    /// idling on a queueing device), at `weight` and `share_pct` of the weights on the group
    /// tree. Logged when there are groups other than the root; `cgroup` 0 is the root group
    /// (all the cgroups `SchedEnv::root_cgroups` names).
    GroupServed {
        stream: u32,
        sync: bool,
        cgroup: u64,
        weight: u32,
        share_pct: u32,
        charge: u64,
        iops: bool,
    },
    /// CFQ kept the emptied active queue, its group's last, past (or at the end of) its
    /// slice for `extend_ns` more, waiting for its next request so that the group does not
    /// leave the group tree and lose its place (`wait_busy`). It expires (slice_used) when
    /// the request comes.
    WaitBusy {
        stream: u32,
        cgroup: u64,
        extend_ns: u64,
    },
    /// Kyber or mq-deadline: nothing interesting to log for each dispatch, only throttling.
    Throttled {
        domain: &'static str,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Decided {
    pub t: u64,
    #[serde(flatten)]
    pub d: Decision,
}

/// Scheduler names the model knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SchedKind {
    None,
    MqDeadline,
    Bfq,
    Kyber,
    /// Legacy CFQ (kernels before 4.20).
    Cfq,
}

impl SchedKind {
    /// The schedulers of current (blk-mq) kernels: the alternatives `explain` tries.
    pub const ALL: [SchedKind; 4] = [
        SchedKind::None,
        SchedKind::MqDeadline,
        SchedKind::Bfq,
        SchedKind::Kyber,
    ];
    /// Schedulers of kernels before 4.20, modelled for old traces and comparisons.
    pub const LEGACY: [SchedKind; 1] = [SchedKind::Cfq];

    pub fn parse(s: &str) -> Option<SchedKind> {
        match s {
            "none" | "noop" => Some(SchedKind::None),
            "mq-deadline" | "deadline" => Some(SchedKind::MqDeadline),
            "bfq" => Some(SchedKind::Bfq),
            "kyber" => Some(SchedKind::Kyber),
            "cfq" => Some(SchedKind::Cfq),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SchedKind::None => "none",
            SchedKind::MqDeadline => "mq-deadline",
            SchedKind::Bfq => "bfq",
            SchedKind::Kyber => "kyber",
            SchedKind::Cfq => "cfq",
        }
    }
}

/// `--set key=value` settings, checked by each scheduler against the keys it knows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Settings(pub BTreeMap<String, String>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingError {
    #[error("{sched} has no tunable {key:?} (known: {known})")]
    Unknown {
        sched: &'static str,
        key: String,
        known: String,
    },
    #[error("{key}={value}: {why}")]
    Bad {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("--set {0:?}: expected key=value")]
    Syntax(String),
}

impl Settings {
    pub fn parse_pairs(pairs: &[String]) -> Result<Settings, SettingError> {
        let mut m = BTreeMap::new();
        for p in pairs {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| SettingError::Syntax(p.clone()))?;
            m.insert(k.trim().to_string(), v.trim().to_string());
        }
        Ok(Settings(m))
    }

    /// Refuses keys not in `known` (plus the simulator's own).
    pub fn check(&self, sched: &'static str, known: &[&str]) -> Result<(), SettingError> {
        for k in self.0.keys() {
            if !known.contains(&k.as_str()) && !SIM_KEYS.contains(&k.as_str()) {
                let mut all: Vec<&str> = known.iter().chain(SIM_KEYS).copied().collect();
                all.sort();
                return Err(SettingError::Unknown {
                    sched,
                    key: k.clone(),
                    known: all.join(", "),
                });
            }
        }
        Ok(())
    }

    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64, SettingError> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| SettingError::Bad {
                key: key.into(),
                value: v.clone(),
                why: "not a non-negative integer",
            }),
        }
    }

    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool, SettingError> {
        match self.0.get(key).map(String::as_str) {
            None => Ok(default),
            Some("1" | "true" | "on") => Ok(true),
            Some("0" | "false" | "off") => Ok(false),
            Some(v) => Err(SettingError::Bad {
                key: key.into(),
                value: v.into(),
                why: "expected 0 or 1",
            }),
        }
    }

    /// An I/O priority as `ioprio_set(2)` takes it, from `be/N` (best-effort, N 0-7),
    /// `rt/N` (real-time), `idle`, or `none` (the priority follows the nice value).
    pub fn ioprio(&self, key: &str) -> Result<Option<u16>, SettingError> {
        let Some(v) = self.0.get(key) else {
            return Ok(None);
        };
        let bad = || SettingError::Bad {
            key: key.into(),
            value: v.clone(),
            why: "expected be/N or rt/N (N 0-7), idle or none",
        };
        let level = |n: &str| n.parse::<u16>().ok().filter(|&n| n < 8).ok_or_else(bad);
        Ok(Some(match v.split_once('/') {
            Some(("rt", n)) => (1 << 13) | level(n)?,
            Some(("be", n)) => (2 << 13) | level(n)?,
            None if v == "idle" => 3 << 13,
            None if v == "none" => 0,
            _ => return Err(bad()),
        }))
    }

    /// A kernel version `major.minor` (e.g. `5.2`, `6.18.0-1-amd64`), as major*1000+minor.
    pub fn kernel_or(&self, key: &str, default: u32) -> Result<u32, SettingError> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => parse_kernel(v).ok_or_else(|| SettingError::Bad {
                key: key.into(),
                value: v.clone(),
                why: "expected a kernel version such as 5.2 or 6.18",
            }),
        }
    }
}

/// The cgroup id `own_group=COMM` gives the processes it names: no recorded cgroup has it.
pub const OWN_GROUP_CGROUP: u64 = u64::MAX - 1;

/// `continue=0|1|auto`: continue time-bounded processes to their end (`continuation`'s mode).
pub const CONTINUE_KEY: &str = "continue";

/// Keys the simulator itself takes, whatever the scheduler.
/// `own_group=COMM`: the processes named COMM were in a cgroup of their own (a v1 `blkio`
/// group is invisible to a recording, which sees cgroup v2 ids; seed 001's dd).
/// `ioprio=be/5`: every process at that I/O priority (as after `ionice -c2 -n5`).
pub const SIM_KEYS: &[&str] = &[
    "depth",
    "nr_requests",
    "nomerges",
    "max_sectors_kb",
    "own_group",
    "ioprio",
    "iodepth",
    "wbt_limit",
    "wbt_drain",
    CONTINUE_KEY,
];

/// `6.18.0-1-amd64` -> 6018.
pub fn parse_kernel(release: &str) -> Option<u32> {
    let mut parts = release.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    Some(major * 1000 + minor)
}

/// How many words a tag bitmap of `depth` tags has (`sbitmap_calculate_shift`: 64 bits a
/// word, fewer for a small bitmap so that it spans at least 4 words).
pub fn sbitmap_words(depth: u32) -> u32 {
    let mut shift = 6u32;
    if depth >= 4 {
        while (4u64 << shift) > u64::from(depth) {
            shift -= 1;
        }
    }
    depth.div_ceil(1 << shift).max(1)
}

/// Builds a scheduler model from its kind and settings.
pub fn build(
    kind: SchedKind,
    settings: &Settings,
    env: &SchedEnv,
) -> Result<Box<dyn Scheduler>, SettingError> {
    Ok(match kind {
        SchedKind::None => {
            settings.check("none", &[])?;
            Box::new(none::NoneSched::default())
        }
        SchedKind::MqDeadline => Box::new(deadline::Deadline::new(settings, env)?),
        SchedKind::Bfq => Box::new(bfq::Bfq::new(settings, env)?),
        SchedKind::Kyber => Box::new(kyber::Kyber::new(settings)?),
        SchedKind::Cfq => Box::new(cfq::Cfq::new(settings, env)?),
    })
}

/// What a scheduler model may know of the device and workload up front.
#[derive(Clone, Debug)]
pub struct SchedEnv {
    pub rotational: bool,
    /// Kernel version (major*1000+minor) the trace was recorded on.
    pub kernel: u32,
    /// Sequential bandwidth, sectors/s (BFQ's peak rate).
    pub peak_sectors_per_sec: f64,
    /// Cgroup ids BFQ would see as the root group.
    pub root_cgroups: Vec<u64>,
    /// Each stream's I/O priority (class << 13 | level; 0: none): BFQ's weights.
    pub stream_ioprio: Vec<u16>,
    /// BFQ's `bfq_max_budget` when the trace began, when the trace says it (BFQ's own log
    /// of its first budget): a BFQ instance that served earlier I/O has already tuned it
    /// from its peak-rate estimate, and its first budgets are not the fresh 2/3 x 16384.
    pub max_budget_start: Option<u32>,
}
