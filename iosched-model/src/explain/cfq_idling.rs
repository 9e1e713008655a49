//! CFQ's idling (slice_idle, group_idle) on a process whose next I/O waits for another
//! process's: the idle timer runs out while the other process's request waits. With
//! cgroups, `group_idle` holds the device for the last busy queue of a cgroup, and a request
//! of another cgroup (not an ancestor) may not preempt it (dd in its own blkio cgroup, jbd2
//! in the root one).
//!
//! What-ifs: CFQ without idling (`slice_idle=0,group_idle=0`); without group idling
//! (`group_idle=0`) where the replay group-idled. Judged: no idling against the replay as
//! recorded, per process in a dependency.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{
    replay,
    sched::{Decision, ExpireReason, IdleReason, SchedKind},
};
use super::{
    Evidence as AnyEvidence, Finding, MIN_EFFECT_PCT,
    parts::Cause,
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct CfqIdling;

/// CFQ idles on `stream` waiting for its next request, but that request depends on another
/// process's I/O, which the idling holds back.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// By group_idle (the last busy queue of its cgroup); `other_cgroup`: the process it
    /// depends on is in another cgroup.
    GroupIdles {
        stream: u32,
        other_cgroup: bool,
    },
    Idles {
        stream: u32,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model's CFQ idled `times` on `stream`, `idle_ns` in all; `too_idle` slices ended
    /// by the idle timer; for these reasons (how often each).
    Idled {
        stream: u32,
        times: u64,
        idle_ns: u64,
        too_idle: u64,
        reasons: Vec<(IdleReason, u64)>,
    },
    /// The trace: the cgroups of `stream` and of `partner` (the process in a dependency with
    /// it), each whether the root one; `blocked`: CFQ does not let `partner`'s request
    /// preempt a group idle of another cgroup, so it waits for the idle timer (only the
    /// idling queue's group or its ancestors preempt it: `cfqg_is_descendant`).
    Cgroups {
        stream: u32,
        cgroup: u64,
        root: bool,
        partner: u32,
        partner_cgroup: u64,
        partner_root: bool,
        blocked: bool,
    },
    /// The model with group_idle=0: the throughput, and as recorded.
    WithoutGroupIdle {
        predicted_mb_s: f64,
        measured_mb_s: f64,
        change_pct: f64,
    },
}

fn no_idling() -> WhatIf {
    WhatIf::spec(SchedKind::Cfq, &[("slice_idle", "0"), ("group_idle", "0")])
}

fn no_group_idling() -> WhatIf {
    WhatIf::spec(SchedKind::Cfq, &[("group_idle", "0")])
}

fn group_idled(cx: &Context) -> bool {
    cx.base_run.decisions.iter().any(|d| {
        matches!(
            d.d,
            Decision::Idle {
                reason: IdleReason::GroupIdle,
                ..
            }
        )
    })
}

impl Diagnosis for CfqIdling {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        if cx.sched() != SchedKind::Cfq {
            return Vec::new();
        }
        let mut out = vec![no_idling()];
        if group_idled(cx) {
            out.push(no_group_idling());
        }
        out
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        if cx.sched() != SchedKind::Cfq {
            return Vec::new();
        }
        let (r, base) = (cx.r, &cx.base_run);
        let w = &r.workload;
        let est = cx.estimate(runs, &no_idling(), &[]);
        let no_group_idle = group_idled(cx).then(|| cx.estimate(runs, &no_group_idling(), &[]));
        let is_root = |s: u32| {
            r.env
                .root_cgroups
                .contains(&w.streams[s as usize].cgroup_id)
        };
        let mut findings = Vec::new();
        for (s, st) in w.streams.iter().enumerate() {
            let s = s as u32;
            let (n, idle_ns, reasons) = replay::idle_episodes(&base.decisions, s);
            let share = idle_ns as f64 / (base.summary.duration_s * 1e9).max(1.0);
            // The processes this one's I/O waits for, or that wait for its I/O.
            let partners: Vec<u32> = st
                .depends_on
                .iter()
                .map(|(d, _)| *d)
                .chain(
                    w.streams
                        .iter()
                        .enumerate()
                        .filter(|(_, o)| o.depends_on.iter().any(|(d, _)| *d == s))
                        .map(|(o, _)| o as u32),
                )
                .filter(|o| *o != s)
                .collect();
            if n == 0 || share < 0.05 || partners.is_empty() || est.change_pct < MIN_EFFECT_PCT {
                continue;
            }
            let too_idle = replay::expirations(&base.decisions, s)
                .get(&ExpireReason::TooIdle)
                .copied()
                .unwrap_or(0);
            let group_idles = reasons.get(&IdleReason::GroupIdle).copied().unwrap_or(0);
            let mut evidence: Vec<AnyEvidence> = vec![
                Evidence::Idled {
                    stream: s,
                    times: n,
                    idle_ns,
                    too_idle,
                    reasons: reasons.iter().map(|(r, k)| (*r, *k)).collect(),
                }
                .into(),
            ];
            let st_cg = st.cgroup_id;
            let other_group = partners
                .iter()
                .find(|p| w.streams[**p as usize].cgroup_id != st_cg)
                .copied();
            let claim = if group_idles > 0 && group_idles * 2 >= n {
                if let Some(p) = other_group {
                    evidence.push(
                        Evidence::Cgroups {
                            stream: s,
                            cgroup: st_cg,
                            root: is_root(s),
                            partner: p,
                            partner_cgroup: w.streams[p as usize].cgroup_id,
                            partner_root: is_root(p),
                            // Every group descends from the root.
                            blocked: !is_root(p),
                        }
                        .into(),
                    );
                }
                if let Some(e) = &no_group_idle {
                    evidence.push(
                        Evidence::WithoutGroupIdle {
                            predicted_mb_s: e.predicted_mb_s,
                            measured_mb_s: e.measured_mb_s,
                            change_pct: e.change_pct,
                        }
                        .into(),
                    );
                }
                Claim::GroupIdles {
                    stream: s,
                    other_cgroup: other_group.is_some(),
                }
            } else {
                Claim::Idles { stream: s }
            };
            findings.push(Finding::new(
                Cause::IdlingOnDependency,
                claim,
                evidence,
                Some(est.clone()),
            ));
        }
        findings
    }
}
