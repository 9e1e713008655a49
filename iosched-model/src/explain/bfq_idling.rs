//! BFQ's idling, per process: what the model says BFQ idled for and why, and whether it
//! costs (idling held back a process this one depends on, or others waited) or pays (it
//! keeps the disk streaming).
//!
//! What-ifs: BFQ without idling (`slice_idle=0`); without weight raising
//! (`low_latency=0`) where it idled for a raised queue; with 5.3's waker detection where
//! the processes depend on each other on an older kernel. Judged: the best of them against
//! the replay as recorded.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use iosched_core::analysis::Report;

use super::super::{
    replay,
    sched::{Decision, IdleOutcome, IdleReason, InjectWhy, SchedKind},
    workload::{DEP_WINDOW_NS, Workload},
};
use super::{
    Evidence as AnyEvidence, Finding, MIN_EFFECT_PCT,
    parts::Cause,
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct BfqIdling;

/// What BFQ's idling on a process does.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// It keeps the disk streaming: without idling (slice_idle=0) the model predicts
    /// `less_pct` less.
    SavesThroughput { stream: u32, less_pct: f64 },
    /// It waits for a request that depends on another process's I/O, which it holds back.
    OnDependency { stream: u32 },
    /// It idles for throughput while other processes wait.
    CostsThroughput { stream: u32 },
    /// It idles to guarantee the process's share.
    ForGuarantees { stream: u32 },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model's BFQ idled `times` on `stream`, `idle_ns` in all, `timer_waste_ns` of it
    /// until the idle timer fired with nothing to do, for these reasons (how often each).
    Idled {
        stream: u32,
        times: u64,
        idle_ns: u64,
        timer_waste_ns: u64,
        reasons: Vec<(IdleReason, u64)>,
    },
    /// The trace: `ios` of `stream`'s I/Os were issued right after a completion of `on`
    /// (within `within_us`).
    DependsOn {
        stream: u32,
        on: u32,
        ios: u32,
        within_us: u64,
    },
    /// The trace: the device sat idle with I/O pending for `idle_ns` after `stream`'s
    /// completions.
    DeviceIdleAfter { stream: u32, idle_ns: u64 },
    /// The model's BFQ detected `stream`'s waker and injected its I/O while idling.
    WakerInjected { stream: u32 },
}

fn no_idling() -> WhatIf {
    WhatIf::spec(SchedKind::Bfq, &[("slice_idle", "0")])
}

fn no_raising() -> WhatIf {
    WhatIf::spec(SchedKind::Bfq, &[("low_latency", "0")])
}

/// What the 5.3 fix (waker detection and injection) would do.
fn waker_detection() -> WhatIf {
    WhatIf::spec(SchedKind::Bfq, &[("kernel", "5.3")])
}

/// Stream `s` depends on another's I/O, or another on its.
fn in_dependency(w: &Workload, s: u32) -> bool {
    !w.streams[s as usize].depends_on.is_empty()
        || w.streams
            .iter()
            .any(|o| o.depends_on.iter().any(|(d, _)| *d == s))
}

/// The what-ifs stream `s`'s idling is judged by (none where BFQ never idled on it).
fn what_ifs_of(cx: &Context, s: u32) -> Vec<WhatIf> {
    let (n, _, reasons) = replay::idle_episodes(&cx.base_run.decisions, s);
    if n == 0 {
        return Vec::new();
    }
    let mut out = vec![no_idling()];
    if reasons.contains_key(&IdleReason::WeightRaised) {
        out.push(no_raising());
    }
    if in_dependency(&cx.r.workload, s) && cx.r.env.kernel < 5003 {
        out.push(waker_detection());
    }
    out
}

impl Diagnosis for BfqIdling {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        if cx.sched() != SchedKind::Bfq {
            return Vec::new();
        }
        (0..cx.r.workload.streams.len() as u32)
            .flat_map(|s| what_ifs_of(cx, s))
            .collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        if cx.sched() != SchedKind::Bfq {
            return Vec::new();
        }
        (0..cx.r.workload.streams.len() as u32)
            .filter_map(|s| judge_stream(cx, runs, s))
            .collect()
    }
}

fn judge_stream(cx: &Context, runs: &Runs, s: u32) -> Option<Finding> {
    let (w, base) = (&cx.r.workload, &cx.base_run);
    let st = &w.streams[s as usize];
    let (n, idle_ns, reasons) = replay::idle_episodes(&base.decisions, s);
    if n == 0 {
        return None;
    }
    let timer_waste_ns: u64 = base
        .decisions
        .iter()
        .filter_map(|d| match &d.d {
            Decision::IdleEnd {
                stream,
                outcome: IdleOutcome::TimerExpired,
                waited_ns,
                ..
            } if *stream == s => Some(*waited_ns),
            _ => None,
        })
        .sum();
    let mut evidence: Vec<AnyEvidence> = vec![
        Evidence::Idled {
            stream: s,
            times: n,
            idle_ns,
            timer_waste_ns,
            reasons: reasons.iter().map(|(r, k)| (*r, *k)).collect(),
        }
        .into(),
    ];
    for (dep, count) in &st.depends_on {
        evidence.push(
            Evidence::DependsOn {
                stream: s,
                on: *dep,
                ios: *count,
                within_us: DEP_WINDOW_NS / 1000,
            }
            .into(),
        );
    }
    let pair_idle = recorded_pairs(cx.report, st.pid);
    if pair_idle > 0 {
        evidence.push(
            Evidence::DeviceIdleAfter {
                stream: s,
                idle_ns: pair_idle,
            }
            .into(),
        );
    }
    let dependency = in_dependency(w, s);
    let injected_waker = base
        .decisions
        .iter()
        .any(|d| matches!(d.d, Decision::Inject { into, why: InjectWhy::Waker, .. } if into == s));
    // The best of the what-ifs.
    let mut est = cx.estimate(runs, &no_idling(), &[]);
    for fix in what_ifs_of(cx, s).iter().skip(1) {
        let e = cx.estimate(runs, fix, &[]);
        if e.change_pct > est.change_pct {
            est = e;
        }
    }
    // The what-if is global: cite it only for streams whose idling is a real share of the
    // run (5%), not every queue BFQ ever idled on.
    let share = idle_ns as f64 / (base.summary.duration_s * 1e9).max(1.0);
    if share >= 0.05 && est.change_pct <= -25.0 && !dependency {
        let claim = Claim::SavesThroughput {
            stream: s,
            less_pct: -est.change_pct,
        };
        return Some(Finding::new(
            Cause::IdlingSavesThroughput,
            claim,
            evidence,
            Some(est),
        ));
    }
    // Idling the model finds harmless is kept as evidence only when the idle timer fired
    // with nothing to do while another process could have used the disk: with one process
    // there is no one else to wait (a lone reader under BFQ idles thousands of times for
    // nothing lost).
    let alone = w.streams.len() < 2;
    if share < 0.05
        || ((timer_waste_ns == 0 || base.decision_counts.wakers > 0 || alone)
            && est.change_pct < MIN_EFFECT_PCT)
    {
        return None;
    }
    let (cause, claim) = if dependency {
        (Cause::IdlingOnDependency, Claim::OnDependency { stream: s })
    } else if reasons.contains_key(&IdleReason::BoostsThroughput) {
        (
            Cause::IdlingCostsThroughput,
            Claim::CostsThroughput { stream: s },
        )
    } else {
        (
            Cause::IdlingForGuarantees,
            Claim::ForGuarantees { stream: s },
        )
    };
    if injected_waker {
        evidence.push(Evidence::WakerInjected { stream: s }.into());
    }
    Some(Finding::new(cause, claim, evidence, Some(est)))
}

/// Idle-with-pending time the recording attributes to `pid`'s completions (from the
/// workload's own trace: measured, not modelled).
fn recorded_pairs(report: &Report, pid: u32) -> u64 {
    report
        .idling
        .pairs
        .iter()
        .filter(|p| p.after_pid == pid && p.waiting_pid != pid)
        .map(|p| p.total_ns)
        .sum()
}
