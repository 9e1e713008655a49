//! The parts of a finding that every diagnosis shares: what it names ([`Cause`]), the
//! model's estimate of its fix ([`Estimate`], [`Fix`], ranges), and the estimate arithmetic.
//! The finding itself, and the enums that gather each cause's own claims and evidence, are
//! the parent's (`explain::Finding`): they name every cause, and every cause uses these.
//!
//! Owns: the shapes every diagnosis fills, and the estimate arithmetic they share. Must not:
//! know any one cause; word anything (the view does).

use super::super::{
    device::ASSUMED_LATENCY_NS,
    replay::{Run, Summary},
    sched::SchedKind,
};

/// What a finding names. Its [`Cause::key`] is the word `explain --json` and scripts use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    IdlingSavesThroughput,
    IdlingOnDependency,
    IdlingCostsThroughput,
    IdlingForGuarantees,
    WakerHandled,
    WeightRaisingCostsThroughput,
    PreemptionStorm,
    SlicesTooLong,
    MissingMerges,
    WbtThrottling,
    WbtThrottlingPays,
    KyberThrottling,
    KyberThrottlingPays,
    SeekBound,
    SchedulerCost,
    OtherScheduler,
}

impl Cause {
    pub fn key(self) -> &'static str {
        match self {
            Cause::IdlingSavesThroughput => "idling_saves_throughput",
            Cause::IdlingOnDependency => "idling_on_dependency",
            Cause::IdlingCostsThroughput => "idling_costs_throughput",
            Cause::IdlingForGuarantees => "idling_for_guarantees",
            Cause::WakerHandled => "waker_handled",
            Cause::WeightRaisingCostsThroughput => "weight_raising_costs_throughput",
            Cause::PreemptionStorm => "preemption_storm",
            Cause::SlicesTooLong => "slices_too_long",
            Cause::MissingMerges => "missing_merges",
            Cause::WbtThrottling => "wbt_throttling",
            Cause::WbtThrottlingPays => "wbt_throttling_pays",
            Cause::KyberThrottling => "kyber_throttling",
            Cause::KyberThrottlingPays => "kyber_throttling_pays",
            Cause::SeekBound => "seek_bound",
            Cause::SchedulerCost => "scheduler_cost",
            Cause::OtherScheduler => "other_scheduler",
        }
    }

    /// Causes that describe the workload or what the scheduler does right: notes, not
    /// faults.
    pub fn is_note(self) -> bool {
        matches!(
            self,
            Cause::SeekBound
                | Cause::WakerHandled
                | Cause::IdlingSavesThroughput
                | Cause::WbtThrottlingPays
                | Cause::KyberThrottlingPays
        )
    }
}

/// The fix an estimate is for.
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// A configuration, its label as `replay --sched` spells it (`bfq:slice_idle=0`).
    Config(String),
    /// mq-deadline with merging, if stream `stream` keeps `depth` requests in flight.
    MqDeadlineAtDepth { stream: u32, depth: u32 },
    /// BFQ as recorded, its replay out of the preemption storm.
    OutOfTheStorm,
    /// The recorded scheduler without writeback throttling (`queue/wbt_lat_usec=0`).
    WithoutWbt(SchedKind),
    /// Kyber at its initial depths, of the domains it throttled: (domain, depth).
    KyberInitialDepths(Vec<(&'static str, u32)>),
}

impl Fix {
    /// The configuration's label, for a fix that is one.
    pub fn label(&self) -> Option<&str> {
        match self {
            Fix::Config(l) => Some(l),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub what_if: Fix,
    /// Throughput of the affected processes (or the device), MB/s.
    pub measured_mb_s: f64,
    pub predicted_mb_s: f64,
    pub change_pct: f64,
    /// The other end of the range the effect may lie in, on the basis it names: where the
    /// recording hid the latency of each request's way to the disk and back
    /// ([`super::super::device::FitQuality::latency_unseen`]) the estimate assumes
    /// [`ASSUMED_LATENCY_NS`] of it and this end none; for a preemption storm, the
    /// recording's own rate outside the storm.
    pub range_end: Option<RangeEnd>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RangeEnd {
    pub basis: RangeBasis,
    pub predicted_mb_s: f64,
    pub change_pct: f64,
}

/// What the other end of an estimate's range rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeBasis {
    /// No time on each request's way to the disk and back (the recording hid it).
    NoUnseenLatency,
    /// The recording's own rate outside the preemption storm.
    OutsideTheStorm,
    /// Every µs of the recorded scheduler's CPU time given back to the requests' path (the
    /// recorded machine's CPU time per request less what the cheaper scheduler saves): the
    /// most a cheaper scheduler could gain where the CPUs were not saturated.
    SchedulerCpuFreed,
}

/// A latency what-if (slices too long): the worst-waiting process's p99 Q2C as recorded and
/// as the model predicts it under the fix. Not ranked by: the findings rank by throughput.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LatencyEstimate {
    pub what_if: String,
    /// The process with the highest p99 Q2C as recorded.
    pub process: String,
    pub measured_p99_q2c_ms: f64,
    /// That process's p99 Q2C under the fix.
    pub predicted_p99_q2c_ms: f64,
    /// The highest p99 Q2C of any process under the fix: what a real run of the fix, with
    /// other pids, can be compared with.
    pub predicted_worst_p99_q2c_ms: f64,
}

/// Evidence of an estimate's other end ([`Estimate::range_end`]): every request of the
/// recording waited in the queue, which hides the time each spends on its way to the disk
/// and back; the estimate assumes `assumed_latency_ns` of it per request, paid wherever
/// `served_alone_by` serves a process alone; this is the estimate with none.
#[derive(Clone, Debug, PartialEq)]
pub struct OtherEnd {
    pub served_alone_by: AloneBy,
    pub assumed_latency_ns: f64,
    pub predicted_mb_s: f64,
    pub change_pct: f64,
}

/// Who serves a process alone in an [`OtherEnd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AloneBy {
    Scheduler(SchedKind),
    BfqWithoutLowLatency,
}

impl OtherEnd {
    /// `end`, the estimate without the latency the recording hid, as evidence.
    pub(super) fn of(end: &Estimate, served_alone_by: AloneBy) -> OtherEnd {
        OtherEnd {
            served_alone_by,
            assumed_latency_ns: ASSUMED_LATENCY_NS,
            predicted_mb_s: end.predicted_mb_s,
            change_pct: end.change_pct,
        }
    }
}

/// `end` as the other end of an estimate's range: the what-if without the latency the
/// recording hid.
pub(super) fn range_end(end: &Estimate) -> RangeEnd {
    RangeEnd {
        basis: RangeBasis::NoUnseenLatency,
        predicted_mb_s: end.predicted_mb_s,
        change_pct: end.change_pct,
    }
}

/// Throughput of some processes (all when `pids` is empty).
pub(super) fn mb_s(s: &Summary, pids: &[u32]) -> f64 {
    if pids.is_empty() {
        return s.mb_per_s;
    }
    s.processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .map(|p| p.mb_per_s)
        .sum()
}

/// The effect of `what_if` against `base`, applied to the recording's own throughput as
/// their ratio, for `pids` (all processes when empty).
pub(super) fn estimate(
    fix: Fix,
    what_if: &Run,
    base: &Run,
    recorded: &Summary,
    pids: &[u32],
) -> Estimate {
    let measured = mb_s(recorded, pids);
    let (b, a) = (mb_s(&base.summary, pids), mb_s(&what_if.summary, pids));
    let ratio = if b > 0.0 { a / b } else { 1.0 };
    Estimate {
        what_if: fix,
        measured_mb_s: measured,
        predicted_mb_s: measured * ratio,
        change_pct: 100.0 * (ratio - 1.0),
        range_end: None,
    }
}
