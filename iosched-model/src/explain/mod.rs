//! "Why is <recorded scheduler> slow here": findings ranked by the model-estimated effect of
//! their fix, each with its evidence from the trace and from the model's decisions. Effects
//! are applied to the measured numbers as ratios (measured x predicted-with-fix /
//! predicted-as-recorded), so a model that is off by a constant factor still ranks causes
//! right.
//!
//! One diagnosis per cause, each in its own module: the what-ifs it needs (configurations
//! to replay) and how it judges their runs. [`runner`] gathers every diagnosis's what-ifs,
//! replays each distinct one once and hands the runs back. Findings are data ([`finding`]):
//! which cause, what it claims, its evidence, as enums and numbers; their wording is the
//! view's.
//!
//! Owns: choosing what-ifs and turning runs into findings, ranked. Must not: print, or word
//! a finding.

pub mod bfq_idling;
pub mod cfq_idling;
pub mod kyber;
pub mod missing_merges;
pub mod other_scheduler;
pub mod parts;
pub mod preemption_storm;
mod runner;
pub mod sched_cost;
pub mod seek_bound;
pub mod slices_too_long;
pub mod throttling;
pub mod waker_handled;
pub mod wbt;
pub mod weight_raising;

use iosched_core::analysis::Report;

pub use parts::{AloneBy, Cause, Estimate, Fix, LatencyEstimate, OtherEnd, RangeBasis, RangeEnd};

use super::{
    model_check::ModelCheck,
    replay::{self, ReplayError, Replayer, Summary},
    sched::{Decision, InjectWhy},
};
use runner::{Context, Diagnosis};

/// Findings below this estimated change are not worth a line.
pub const MIN_EFFECT_PCT: f64 = 10.0;

/// Every diagnosis, in the order their findings are gathered (the ranking is stable: among
/// findings of the same effect, this order stands). A diagnosis judges with the findings of
/// those before it in hand.
const DIAGNOSES: &[&dyn Diagnosis] = &[
    &bfq_idling::BfqIdling,
    &waker_handled::WakerHandled,
    &weight_raising::WeightRaising,
    &preemption_storm::PreemptionStorm,
    &slices_too_long::SlicesTooLong,
    &cfq_idling::CfqIdling,
    &missing_merges::MissingMerges,
    &wbt::Wbt,
    &kyber::Kyber,
    &seek_bound::SeekBound,
    &sched_cost::SchedCost,
    &other_scheduler::OtherScheduler,
];

#[derive(Clone, Debug)]
pub struct Explanation {
    pub device: String,
    pub scheduler: Option<String>,
    pub kernel: u32,
    /// How well the replay of the recorded configuration reproduces the recording: where
    /// it does not, every estimate is unreliable ([`Verdict::Unreliable`]).
    pub model_check: ModelCheck,
    pub findings: Vec<Finding>,
    pub verdict: Verdict,
    /// Time-bounded processes the replays continued to their end (the what-ifs compare
    /// throughput over the recorded duration).
    pub continued: Option<replay::ContinuedNote>,
    /// Throttling the trace shows (wbt's Q->G waits, Kyber's throttled domains), measured.
    pub throttling: super::throttle::Throttling,
    /// Replays explain ran: each distinct what-if once, the replay as recorded included.
    pub replays: usize,
}

/// What the findings come to.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// This many findings are faults worth their fix ([`MIN_EFFECT_PCT`] or more, or no
    /// estimate), the first the largest.
    Findings(usize),
    /// Nothing is wrong: BFQ idles, but it recognised the waker ([`Cause::WakerHandled`]).
    WakerHandled,
    /// Nothing is wrong: BFQ idled, but it detected the waker and injected its I/O.
    WakerInjected,
    /// Nothing is wrong: no what-if gains [`MIN_EFFECT_PCT`].
    NoGain,
    /// No cause is named, yet under `what_if` (a configuration's label) the model moves the
    /// workload `change_pct` faster, [`MIN_EFFECT_PCT`] or more: not "nothing is wrong".
    Unnamed { what_if: String, change_pct: f64 },
    /// The model does not reproduce the recording ([`ModelCheck`]): its findings (this
    /// many) are guesses, and "nothing is wrong" is not a conclusion it can draw.
    Unreliable(usize),
}

/// Explains the recorded scheduler's behaviour on `r`'s workload. `recorded`: the
/// recording's own summary (same device).
pub fn explain(
    r: &Replayer,
    recorded: &Summary,
    recorded_report: &Report,
) -> Result<Explanation, ReplayError> {
    let cx = Context::new(r, recorded, recorded_report)?;
    let runner::Diagnosed {
        mut findings,
        replays,
        fastest,
    } = runner::diagnose(&cx, DIAGNOSES)?;
    findings.sort_by(|a, b| {
        let e = |f: &Finding| f.estimate.as_ref().map_or(0.0, |e| e.change_pct.abs());
        e(b).total_cmp(&e(a))
    });
    let base = &cx.base_run;
    // Characteristics of the workload (seek-bound) are notes, not faults.
    let significant = findings
        .iter()
        .filter(|f| {
            !f.cause.is_note()
                && f.estimate.as_ref().is_none_or(|e| {
                    // The scheduler's cost where the CPUs were not saturated is a range up to
                    // all of it freed: its upper end is the finding.
                    e.change_pct.abs() >= MIN_EFFECT_PCT
                        || (f.cause == Cause::SchedulerCost
                            && e.range_end
                                .as_ref()
                                .is_some_and(|r| r.change_pct.abs() >= MIN_EFFECT_PCT))
                })
        })
        .count();
    let injected = base.decisions.iter().any(|d| {
        matches!(
            d.d,
            Decision::Inject {
                why: InjectWhy::Waker,
                ..
            }
        )
    });
    let model_check = crate::model_check::check(r, recorded, base);
    let verdict = verdict(
        model_check.reproduces(),
        significant,
        findings.iter().any(|f| f.cause == Cause::WakerHandled),
        injected,
        fastest,
    );
    let w = &r.workload;
    Ok(Explanation {
        continued: base.continued.clone(),
        device: w.device.name.clone(),
        scheduler: r.recorded_scheduler.clone(),
        kernel: r.env.kernel,
        model_check,
        findings,
        verdict,
        throttling: w.throttle.clone(),
        replays,
    })
}

/// What the findings come to: `significant` of them worth their fix, whether BFQ handled or
/// injected for a waker, and the fastest what-if on the recording as it is (its label and
/// throughput change, %).
fn verdict(
    reproduces: bool,
    significant: usize,
    waker_handled: bool,
    injected: bool,
    fastest: Option<(String, f64)>,
) -> Verdict {
    if !reproduces {
        Verdict::Unreliable(significant)
    } else if significant > 0 {
        Verdict::Findings(significant)
    } else if let Some((what_if, change_pct)) = fastest.filter(|(_, c)| *c >= MIN_EFFECT_PCT) {
        // Before BFQ's "nothing is wrong" verdicts too: none may contradict a what-if.
        Verdict::Unnamed {
            what_if,
            change_pct,
        }
    } else if waker_handled {
        Verdict::WakerHandled
    } else if injected {
        Verdict::WakerInjected
    } else {
        Verdict::NoGain
    }
}

/// A finding as data: its cause, what it claims, its evidence, and the model's estimate of
/// its fix. Claims and evidence are each cause's own kinds ([`bfq_idling::Claim`], ...),
/// gathered here in one enum each (here, not in [`parts`], because they name every cause);
/// the numbers are the ones the evidence cites.
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
    pub(crate) fn new(
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
    BfqIdling(bfq_idling::Claim),
    WakerHandled(waker_handled::Claim),
    WeightRaising(weight_raising::Claim),
    PreemptionStorm(preemption_storm::Claim),
    SlicesTooLong(slices_too_long::Claim),
    CfqIdling(cfq_idling::Claim),
    MissingMerges(missing_merges::Claim),
    Wbt(wbt::Claim),
    Kyber(kyber::Claim),
    SeekBound(seek_bound::Claim),
    SchedCost(sched_cost::Claim),
    OtherScheduler(other_scheduler::Claim),
}

/// One piece of a finding's evidence, each cause's own or one causes share.
#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    BfqIdling(bfq_idling::Evidence),
    WakerHandled(waker_handled::Evidence),
    WeightRaising(weight_raising::Evidence),
    PreemptionStorm(preemption_storm::Evidence),
    SlicesTooLong(slices_too_long::Evidence),
    CfqIdling(cfq_idling::Evidence),
    MissingMerges(missing_merges::Evidence),
    Wbt(wbt::Evidence),
    Kyber(kyber::Evidence),
    /// What wbt and Kyber throttling share.
    Throttling(throttling::Evidence),
    SeekBound(seek_bound::Evidence),
    SchedCost(sched_cost::Evidence),
    OtherScheduler(other_scheduler::Evidence),
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
    BfqIdling: bfq_idling::Claim, bfq_idling::Evidence;
    WakerHandled: waker_handled::Claim, waker_handled::Evidence;
    WeightRaising: weight_raising::Claim, weight_raising::Evidence;
    PreemptionStorm: preemption_storm::Claim, preemption_storm::Evidence;
    SlicesTooLong: slices_too_long::Claim, slices_too_long::Evidence;
    CfqIdling: cfq_idling::Claim, cfq_idling::Evidence;
    MissingMerges: missing_merges::Claim, missing_merges::Evidence;
    Wbt: wbt::Claim, wbt::Evidence;
    Kyber: kyber::Claim, kyber::Evidence;
    SeekBound: seek_bound::Claim, seek_bound::Evidence;
    SchedCost: sched_cost::Claim, sched_cost::Evidence;
    OtherScheduler: other_scheduler::Claim, other_scheduler::Evidence;
}

impl From<throttling::Evidence> for Evidence {
    fn from(e: throttling::Evidence) -> Evidence {
        Evidence::Throttling(e)
    }
}

impl From<OtherEnd> for Evidence {
    fn from(e: OtherEnd) -> Evidence {
        Evidence::OtherEnd(e)
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::*;

    #[test]
    fn nothing_is_wrong_only_where_no_what_if_gains_the_minimum() {
        let fast = |c: f64| Some(("none".to_string(), c));
        assert_eq!(
            verdict(true, 0, false, false, fast(21.0)),
            Verdict::Unnamed {
                what_if: "none".into(),
                change_pct: 21.0
            }
        );
        assert_eq!(verdict(true, 0, false, false, fast(9.9)), Verdict::NoGain);
        assert_eq!(verdict(true, 0, false, false, None), Verdict::NoGain);
        // Findings and an unreliable model say what they say first; BFQ's handled waker
        // is "nothing is wrong" only where no what-if gains.
        assert_eq!(
            verdict(true, 2, false, false, fast(50.0)),
            Verdict::Findings(2)
        );
        assert_eq!(
            verdict(false, 0, false, false, fast(50.0)),
            Verdict::Unreliable(0)
        );
        assert!(matches!(
            verdict(true, 0, true, true, fast(50.0)),
            Verdict::Unnamed { .. }
        ));
        assert_eq!(
            verdict(true, 0, true, false, fast(5.0)),
            Verdict::WakerHandled
        );
        assert_eq!(verdict(true, 0, false, true, None), Verdict::WakerInjected);
    }
}
