//! BFQ's slices too long for the number of processes: with three or more busy, the
//! worst-waiting one waits over 100 ms (p99 Q2C) for its turn.
//!
//! What-ifs: mq-deadline. Judged: that process's p99 Q2C there (a latency estimate; the
//! findings rank by throughput, so it ranks as one without an estimate).
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{replay::ProcessSummary, sched::SchedKind};
use super::{
    Finding,
    parts::{Cause, LatencyEstimate},
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct SlicesTooLong;

/// `busy` processes share the disk in BFQ slices: `process` waits up to `p99_q2c_ms`
/// (p99 Q2C) for its turn.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub busy: usize,
    pub process: String,
    pub p99_q2c_ms: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model: under mq-deadline its p99 Q2C would be this.
    UnderMqDeadline { p99_q2c_ms: f64 },
}

fn mq_deadline() -> WhatIf {
    WhatIf::spec(SchedKind::MqDeadline, &[])
}

/// Where it applies: the busy processes, and the worst-waiting one as recorded.
struct WorstWait<'a> {
    busy: usize,
    process: &'a ProcessSummary,
}

fn worst_wait<'a>(cx: &Context<'a>) -> Option<WorstWait<'a>> {
    if cx.sched() != SchedKind::Bfq {
        return None;
    }
    let busy = cx.r.workload.streams.iter().filter(|s| s.ios > 10).count();
    if busy < 3 {
        return None;
    }
    let p = cx
        .recorded
        .processes
        .iter()
        .max_by(|a, b| a.q2c_p99_ms.total_cmp(&b.q2c_p99_ms))?;
    (p.q2c_p99_ms > 100.0).then_some(WorstWait { busy, process: p })
}

impl Diagnosis for SlicesTooLong {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        worst_wait(cx).map(|_| mq_deadline()).into_iter().collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let Some(WorstWait { busy, process: p }) = worst_wait(cx) else {
            return Vec::new();
        };
        let what_if = mq_deadline();
        let alt = runs.get(&what_if);
        let alt_p99 = alt.summary.process(p.pid).map_or(0.0, |q| q.q2c_p99_ms);
        let alt_worst = alt
            .summary
            .processes
            .iter()
            .map(|q| q.q2c_p99_ms)
            .fold(0.0, f64::max);
        let claim = Claim {
            busy,
            process: p.name.clone(),
            p99_q2c_ms: p.q2c_p99_ms,
        };
        let evidence = vec![
            Evidence::UnderMqDeadline {
                p99_q2c_ms: alt_p99,
            }
            .into(),
        ];
        vec![Finding {
            latency_estimate: Some(LatencyEstimate {
                what_if: what_if.config.label,
                process: p.name.clone(),
                measured_p99_q2c_ms: p.q2c_p99_ms,
                predicted_p99_q2c_ms: alt_p99,
                predicted_worst_p99_q2c_ms: alt_worst,
            }),
            ..Finding::new(Cause::SlicesTooLong, claim, evidence, None)
        }]
    }
}
