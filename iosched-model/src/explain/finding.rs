//! A finding as data: its cause, what it claims, its evidence, and the model's estimate of
//! its fix. Claims and evidence are each cause's own kinds ([`super::bfq_idling::Claim`],
//! ...), gathered here in one enum each; the numbers are the ones the evidence cites.
//!
//! Owns: the shapes every diagnosis fills, and the estimate arithmetic they share. Must not:
//! word anything (the view does).

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

#[derive(Clone, Debug)]
pub struct Finding {
    pub cause: Cause,
    pub claim: Claim,
    pub evidence: Vec<Evidence>,
    pub estimate: Option<Estimate>,
    pub latency_estimate: Option<LatencyEstimate>,
    /// Other fixes of the same cause, with the model's estimate of each (as `estimate`).
    pub alternatives: Vec<Estimate>,
}

impl Finding {
    /// A finding with its estimate (or none) and nothing else.
    pub(super) fn new(
        cause: Cause,
        claim: impl Into<Claim>,
        evidence: Vec<Evidence>,
        estimate: Option<Estimate>,
    ) -> Finding {
        Finding {
            cause,
            claim: claim.into(),
            evidence,
            estimate,
            latency_estimate: None,
            alternatives: Vec::new(),
        }
    }
}

/// What a finding says, each cause's own.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    BfqIdling(super::bfq_idling::Claim),
    WakerHandled(super::waker_handled::Claim),
    WeightRaising(super::weight_raising::Claim),
    PreemptionStorm(super::preemption_storm::Claim),
    SlicesTooLong(super::slices_too_long::Claim),
    CfqIdling(super::cfq_idling::Claim),
    MissingMerges(super::missing_merges::Claim),
    Wbt(super::wbt::Claim),
    Kyber(super::kyber::Claim),
    SeekBound(super::seek_bound::Claim),
    OtherScheduler(super::other_scheduler::Claim),
}

/// One piece of a finding's evidence, each cause's own or one causes share.
#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    BfqIdling(super::bfq_idling::Evidence),
    WakerHandled(super::waker_handled::Evidence),
    WeightRaising(super::weight_raising::Evidence),
    PreemptionStorm(super::preemption_storm::Evidence),
    SlicesTooLong(super::slices_too_long::Evidence),
    CfqIdling(super::cfq_idling::Evidence),
    MissingMerges(super::missing_merges::Evidence),
    Wbt(super::wbt::Evidence),
    Kyber(super::kyber::Evidence),
    /// What wbt and Kyber throttling share.
    Throttling(super::throttling::Evidence),
    SeekBound(super::seek_bound::Evidence),
    OtherScheduler(super::other_scheduler::Evidence),
    /// An estimate's other end where the recording hid the per-request latency.
    OtherEnd(OtherEnd),
}

/// `From` each cause's claim and evidence into the enums above.
macro_rules! wraps {
    ($($variant:ident: $claim:ty, $evidence:ty;)*) => {$(
        impl From<$claim> for Claim {
            fn from(c: $claim) -> Claim {
                Claim::$variant(c)
            }
        }
        impl From<$evidence> for Evidence {
            fn from(e: $evidence) -> Evidence {
                Evidence::$variant(e)
            }
        }
    )*};
}

wraps! {
    BfqIdling: super::bfq_idling::Claim, super::bfq_idling::Evidence;
    WakerHandled: super::waker_handled::Claim, super::waker_handled::Evidence;
    WeightRaising: super::weight_raising::Claim, super::weight_raising::Evidence;
    PreemptionStorm: super::preemption_storm::Claim, super::preemption_storm::Evidence;
    SlicesTooLong: super::slices_too_long::Claim, super::slices_too_long::Evidence;
    CfqIdling: super::cfq_idling::Claim, super::cfq_idling::Evidence;
    MissingMerges: super::missing_merges::Claim, super::missing_merges::Evidence;
    Wbt: super::wbt::Claim, super::wbt::Evidence;
    Kyber: super::kyber::Claim, super::kyber::Evidence;
    SeekBound: super::seek_bound::Claim, super::seek_bound::Evidence;
    OtherScheduler: super::other_scheduler::Claim, super::other_scheduler::Evidence;
}

impl From<super::throttling::Evidence> for Evidence {
    fn from(e: super::throttling::Evidence) -> Evidence {
        Evidence::Throttling(e)
    }
}

impl From<OtherEnd> for Evidence {
    fn from(e: OtherEnd) -> Evidence {
        Evidence::OtherEnd(e)
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
