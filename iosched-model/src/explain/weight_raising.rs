//! BFQ's weight raising (low_latency) costing throughput without any idling to show for it:
//! fresh sequential readers each get raised weights and take the disk from one another at
//! every arrival (a preemption and a seek per request). A raised queue that becomes busy
//! takes the disk from the one in service (`bfq_bfqq_handle_idle_busy_switch`).
//!
//! What-ifs: BFQ with low_latency=0; where that gains [`MIN_EFFECT_PCT`], the per-process
//! alternative (the raised processes at a lower I/O priority, 5.12+) and, where the
//! recording hid the per-request latency, both without it. Judged: low_latency=0 against
//! the replay as recorded, unless an earlier finding already cites that what-if.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use std::collections::BTreeSet;

use super::super::sched::{Decision, SchedKind};
use super::{
    Evidence as AnyEvidence, Finding, MIN_EFFECT_PCT,
    parts::{AloneBy, Cause, OtherEnd, range_end},
    runner::{Context, Diagnosis, On, Runs, WhatIf},
};

pub(super) struct WeightRaising;

/// BFQ's low-latency heuristics cost this workload its throughput: with low_latency=0 the
/// model predicts `change_pct` more; `range`: the lower and higher of that and its other
/// end, where the recording hid the per-request latency.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub change_pct: f64,
    pub range: Option<(f64, f64)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// As recorded the model's BFQ raised `raises` queue weights; `preempted`: (service
    /// slots ended by preemption, all its service slots), when any were.
    Raised {
        raises: u64,
        preempted: Option<(u64, u64)>,
    },
    /// The model with low_latency=0: its throughput and the replay's as recorded; its
    /// preemptions where they differ from the recorded replay's; (bios per request there, as
    /// recorded) where it merges more than 5% more.
    WithoutRaising {
        mb_s: f64,
        base_mb_s: f64,
        preemptions: Option<u64>,
        merge_ratio: Option<(f64, f64)>,
    },
    /// The model with the `raised` processes (`pids`, sorted) at I/O priority best-effort 5
    /// instead of the default, low_latency left on for the rest (since 5.12 BFQ raises no
    /// queue whose weight the user set).
    LowerPriority {
        raised: usize,
        pids: Vec<u32>,
        predicted_mb_s: f64,
        change_pct: f64,
    },
}

/// The fix: the recorded configuration with low_latency=0.
fn no_raising(cx: &Context) -> WhatIf {
    let mut off = cx.base.clone();
    off.config
        .settings
        .0
        .insert("low_latency".into(), "0".into());
    off.config.label = "bfq:low_latency=0".into();
    off
}

/// BFQ with low_latency on and queues it raised.
fn applies(cx: &Context) -> bool {
    cx.sched() == SchedKind::Bfq
        && cx
            .base
            .config
            .settings
            .0
            .get("low_latency")
            .map(String::as_str)
            != Some("0")
        && cx.base_run.decision_counts.raises > 0
}

/// Best-effort 5: one level below the default, the smallest change of weight.
const IOPRIO_BE5: u16 = (2 << 13) | 5;

/// The per-process alternative to low_latency=0: the raised streams at a lower priority.
struct Lowering {
    raised: Vec<u32>,
    /// They are every process of the device: the what-if is a configuration
    /// (`ioprio=be/5`, which a run of the whole workload under `ionice -c2 -n5` realises),
    /// with an estimate of its own.
    every: bool,
    what_if: WhatIf,
}

/// Since 5.12 BFQ raises only queues of the default weight ("the user wanted to control
/// its weight explicitly" otherwise), so a lower I/O priority on the raised processes alone
/// spares them the raising, and leaves the low-latency heuristics on for every other
/// process of the device. Offered when all the raised processes ran at the default
/// priority.
fn lowering(cx: &Context) -> Option<Lowering> {
    if cx.r.env.kernel < 5012 {
        return None;
    }
    let raised: BTreeSet<u32> = cx
        .base_run
        .decisions
        .iter()
        .filter_map(|d| match d.d {
            Decision::Raise { stream, .. } => Some(stream),
            _ => None,
        })
        .collect();
    let streams = &cx.r.workload.streams;
    // Class none (the priority follows nice 0) or best-effort 4.
    let default_priority = |s: &u32| {
        streams
            .get(*s as usize)
            .is_some_and(|st| st.ioprio >> 13 == 0 || st.ioprio == (2 << 13) | 4)
    };
    if raised.is_empty() || !raised.iter().all(default_priority) {
        return None;
    }
    let raised: Vec<u32> = raised.into_iter().collect();
    let every = raised.len() == streams.len();
    let what_if = if every {
        let mut w = cx.base.clone();
        w.config.settings.0.insert("ioprio".into(), "be/5".into());
        w.config.label = format!("{}:ioprio=be/5", cx.sched().name());
        w
    } else {
        cx.base.on(On::AtPriority {
            streams: raised.clone(),
            ioprio: IOPRIO_BE5,
        })
    };
    Some(Lowering {
        raised,
        every,
        what_if,
    })
}

impl Diagnosis for WeightRaising {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        if !applies(cx) {
            return Vec::new();
        }
        vec![no_raising(cx)]
    }

    fn follow_ups(&self, cx: &Context, runs: &Runs) -> Vec<WhatIf> {
        if !applies(cx) || cx.estimate(runs, &no_raising(cx), &[]).change_pct < MIN_EFFECT_PCT {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(l) = lowering(cx) {
            if l.every {
                out.extend(cx.other_end_what_ifs(&l.what_if));
            }
            out.push(l.what_if);
        }
        out.extend(cx.other_end_what_ifs(&no_raising(cx)));
        out
    }

    fn judge(&self, cx: &Context, runs: &Runs, earlier: &[Finding]) -> Vec<Finding> {
        if !applies(cx) {
            return Vec::new();
        }
        let off = no_raising(cx);
        let fix = off.fix();
        if earlier
            .iter()
            .any(|f| f.estimate.as_ref().is_some_and(|e| e.what_if == fix))
        {
            return Vec::new();
        }
        let mut est = cx.estimate(runs, &off, &[]);
        if est.change_pct < MIN_EFFECT_PCT {
            return Vec::new();
        }
        let (base, plain) = (&cx.base_run, runs.get(&off));
        let expirations = |run: &super::super::replay::Run| -> (u64, u64) {
            let e = &run.decision_counts.expirations;
            (e.values().sum(), e.get("preempted").copied().unwrap_or(0))
        };
        let ((all, preempted), (_, preempted_off)) = (expirations(base), expirations(plain));
        let (m, m_off) = (base.summary.merge_ratio, plain.summary.merge_ratio);
        let mut evidence: Vec<AnyEvidence> = vec![
            Evidence::Raised {
                raises: base.decision_counts.raises,
                preempted: (preempted > 0).then_some((preempted, all)),
            }
            .into(),
            Evidence::WithoutRaising {
                mb_s: plain.summary.mb_per_s,
                base_mb_s: base.summary.mb_per_s,
                preemptions: (preempted_off != preempted).then_some(preempted_off),
                // While a raised queue is busy, BFQ lets async I/O and sync writes use fewer
                // requests (`bfq_limit_depth`): fewer wait long enough to merge.
                merge_ratio: (m_off > 1.05 * m).then_some((m_off, m)),
            }
            .into(),
        ];
        let mut alternatives = Vec::new();
        if let Some(l) = lowering(cx) {
            let e = if l.every {
                cx.estimate_with_other_end(runs, &l.what_if)
            } else {
                cx.estimate(runs, &l.what_if, &[])
            };
            let mut pids: Vec<u32> = l
                .raised
                .iter()
                .filter_map(|&s| cx.r.workload.streams.get(s as usize).map(|st| st.pid))
                .collect();
            pids.sort_unstable();
            evidence.push(
                Evidence::LowerPriority {
                    raised: l.raised.len(),
                    pids,
                    predicted_mb_s: e.predicted_mb_s,
                    change_pct: e.change_pct,
                }
                .into(),
            );
            if l.every {
                alternatives.push(e);
            }
        }
        // As for another scheduler: where the recording hid the per-request latency, the
        // other end of the estimate has none of it (a streaming queue pays it on every
        // request).
        if let Some(le) = cx.other_end(runs, &off) {
            evidence.push(OtherEnd::of(&le, AloneBy::BfqWithoutLowLatency).into());
            est.range_end = Some(range_end(&le));
        }
        let claim = Claim {
            change_pct: est.change_pct,
            range: est.range_end.as_ref().map(|l| {
                (
                    l.change_pct.min(est.change_pct),
                    l.change_pct.max(est.change_pct),
                )
            }),
        };
        vec![Finding {
            alternatives,
            ..Finding::new(
                Cause::WeightRaisingCostsThroughput,
                claim,
                evidence,
                Some(est),
            )
        }]
    }
}
