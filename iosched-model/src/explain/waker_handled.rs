//! A process whose next I/O waits for another's, on a BFQ that knows it: since 5.3 BFQ finds
//! a queue's waker and injects its I/O while idling for the queue, so the dependency cycle
//! that costs an idle timeout per request under older rules costs nothing. A note, with
//! what the old rules would cost.
//!
//! What-ifs: per dependent process, BFQ with pre-5.3 rules and the process in a cgroup of
//! its own (`kernel=5.2,own_group=COMM`). Judged: its throughput there against the replay
//! as recorded.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::sched::SchedKind;
use super::{
    Finding,
    parts::Cause,
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct WakerHandled;

/// `stream`'s next I/O waits for `waker`'s, and BFQ detected `waker` as the waker of
/// `stream`'s queue and injects its I/O instead of idling (since 5.3): nothing is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub stream: u32,
    pub waker: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model with pre-5.3 rules (no waker injection) and `stream` in a cgroup of its
    /// own: `stream`'s throughput there, and as recorded.
    OldRulesOwnGroup {
        stream: u32,
        predicted_mb_s: f64,
        measured_mb_s: f64,
        change_pct: f64,
    },
}

/// The dependent streams, where BFQ handles their wakers.
fn dependent(cx: &Context) -> Vec<u32> {
    if cx.sched() != SchedKind::Bfq
        || cx.r.env.kernel < 5003
        || cx.base_run.decision_counts.wakers == 0
    {
        return Vec::new();
    }
    let w = &cx.r.workload;
    (0..w.streams.len() as u32)
        .filter(|&s| !w.streams[s as usize].depends_on.is_empty())
        .collect()
}

fn old_rules_own_group(cx: &Context, s: u32) -> WhatIf {
    let comm = cx.r.workload.streams[s as usize].comm.as_str().to_string();
    WhatIf::spec(
        SchedKind::Bfq,
        &[("kernel", "5.2"), ("own_group", comm.as_str())],
    )
}

impl Diagnosis for WakerHandled {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        dependent(cx)
            .into_iter()
            .map(|s| old_rules_own_group(cx, s))
            .collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let w = &cx.r.workload;
        dependent(cx)
            .into_iter()
            .map(|s| {
                let st = &w.streams[s as usize];
                let e = cx.estimate(runs, &old_rules_own_group(cx, s), &[st.pid]);
                Finding::new(
                    Cause::WakerHandled,
                    Claim {
                        stream: s,
                        waker: st.depends_on[0].0,
                    },
                    vec![
                        Evidence::OldRulesOwnGroup {
                            stream: s,
                            predicted_mb_s: e.predicted_mb_s,
                            measured_mb_s: e.measured_mb_s,
                            change_pct: e.change_pct,
                        }
                        .into(),
                    ],
                    None,
                )
            })
            .collect()
    }
}
