//! What the throttling diagnoses ([`super::wbt`], [`super::kyber`]) share: which waits are
//! worth a finding, the estimate of relaxing a throttle, and whether it pays.
//!
//! Owns: the throttle estimate and its judgement. Must not: choose what-ifs (each
//! throttle's diagnosis does).

use super::super::{
    replay::{Run, Summary},
    throttle::Sufferer,
    workload::Workload,
};
use super::{
    MIN_EFFECT_PCT,
    parts::{Estimate, Fix, estimate},
};

/// Throttle waits below these are noise (a Q->G stretched by preemption that happened to
/// span a completion), not throttling worth a finding.
pub(super) const MIN_THROTTLED: u64 = 5;
pub(super) const MIN_THROTTLED_NS: u64 = 1_000_000;

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The trace: when someone waited, (from, to) ns after the first Q.
    When(Vec<(u64, u64)>),
    /// The trace: who waited, most waited first.
    WhoWaited(Vec<Sufferer>),
    /// The model: the processes that did not wait, with the throttle relaxed and as
    /// recorded (their throughput, its change, and their worst p99 Q2C in each).
    Others {
        predicted_mb_s: f64,
        measured_mb_s: f64,
        change_pct: f64,
        p99_without_ms: f64,
        p99_with_ms: f64,
    },
}

/// The throttle's effect: `with` replays the recording with the throttle as the trace
/// shows it, `without` with it relaxed; measured numbers scaled by their ratio, for the
/// processes that waited. The other processes' change is told as evidence: relaxing a
/// throttle that protects them can cost them.
pub(super) fn throttle_estimate(
    with: &Run,
    without: &Run,
    recorded: &Summary,
    waited: &[u32],
    w: &Workload,
    fix: Fix,
) -> (Estimate, Option<Evidence>) {
    let est = estimate(fix.clone(), without, with, recorded, waited);
    let others: Vec<u32> = w
        .streams
        .iter()
        .map(|s| s.pid)
        .filter(|p| !waited.contains(p))
        .collect();
    let note = (!others.is_empty()).then(|| {
        let o = estimate(fix, without, with, recorded, &others);
        let p99 = |run: &Run| {
            run.summary
                .processes
                .iter()
                .filter(|p| others.contains(&p.pid))
                .map(|p| p.q2c_p99_ms)
                .fold(0.0, f64::max)
        };
        Evidence::Others {
            predicted_mb_s: o.predicted_mb_s,
            measured_mb_s: o.measured_mb_s,
            change_pct: o.change_pct,
            p99_without_ms: p99(without),
            p99_with_ms: p99(with),
        }
    });
    (est, note)
}

/// Throttling that the model says pays for itself (removing it costs [`MIN_EFFECT_PCT`] or
/// more) is a note, not a fault: how much less the waiting processes get without it.
pub(super) fn pays(est: &Estimate) -> Option<f64> {
    (est.change_pct <= -MIN_EFFECT_PCT).then_some(-est.change_pct)
}
