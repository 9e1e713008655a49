//! Another scheduler: the first of the current kernels' schedulers (in [`SchedKind::ALL`]'s
//! order) under which the model moves the workload 25% or more faster.
//!
//! What-ifs: every other scheduler with its defaults; where the recording hid the
//! per-request latency, the one cited also without it. Judged: against the replay as
//! recorded.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::sched::SchedKind;
use super::{
    Evidence as AnyEvidence, Finding,
    parts::{AloneBy, Cause, OtherEnd, range_end},
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct OtherScheduler;

/// A gain below this is no reason to change scheduler.
const MIN_GAIN_PCT: f64 = 25.0;

/// `sched` would move this workload `change_pct` faster; `range`: the lower and higher of
/// that and its other end, where the recording hid the per-request latency (the more, the
/// less time each request spends on its way to the disk).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub sched: SchedKind,
    pub change_pct: f64,
    pub range: Option<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model: `mb_s` under `sched` vs `base_mb_s` as recorded.
    Model {
        sched: SchedKind,
        mb_s: f64,
        base_mb_s: f64,
    },
}

fn others(cx: &Context) -> impl Iterator<Item = SchedKind> {
    let recorded = cx.sched();
    SchedKind::ALL.into_iter().filter(move |s| *s != recorded)
}

fn under(sched: SchedKind) -> WhatIf {
    WhatIf::spec(sched, &[])
}

/// The scheduler cited: the first that gains enough.
fn cited(cx: &Context, runs: &Runs) -> Option<SchedKind> {
    others(cx).find(|&s| cx.estimate(runs, &under(s), &[]).change_pct >= MIN_GAIN_PCT)
}

impl Diagnosis for OtherScheduler {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        others(cx).map(under).collect()
    }

    fn follow_ups(&self, cx: &Context, runs: &Runs) -> Vec<WhatIf> {
        cited(cx, runs)
            .map(|s| cx.other_end_what_ifs(&under(s)))
            .unwrap_or_default()
    }

    fn judge(&self, cx: &Context, runs: &Runs, earlier: &[Finding]) -> Vec<Finding> {
        // The scheduler's own cost already names the cheaper scheduler and why.
        if earlier.iter().any(|f| f.cause == Cause::SchedulerCost) {
            return Vec::new();
        }
        let Some(alt) = cited(cx, runs) else {
            return Vec::new();
        };
        let what_if = under(alt);
        let mut e = cx.estimate(runs, &what_if, &[]);
        let mut evidence: Vec<AnyEvidence> = vec![
            Evidence::Model {
                sched: alt,
                mb_s: runs.get(&what_if).summary.mb_per_s,
                base_mb_s: cx.base_run.summary.mb_per_s,
            }
            .into(),
        ];
        if let Some(le) = cx.other_end(runs, &what_if) {
            evidence.push(OtherEnd::of(&le, AloneBy::Scheduler(alt)).into());
            e.range_end = Some(range_end(&le));
        }
        let claim = Claim {
            sched: alt,
            change_pct: e.change_pct,
            range: e.range_end.as_ref().map(|l| {
                (
                    l.change_pct.min(e.change_pct),
                    l.change_pct.max(e.change_pct),
                )
            }),
        };
        vec![Finding::new(
            Cause::OtherScheduler,
            claim,
            evidence,
            Some(e),
        )]
    }
}
