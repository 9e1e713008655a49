//! `explain`'s views: its text, and its JSON (`explain --json`: the explanation with each
//! finding's claim and evidence in words, as the text has them).
//!
//! A module per cause, as `model::explain` has them, words its claims and evidence.
//!
//! Owns: the wording of findings, and layout. Must not: compute numbers (they come from
//! `model::explain`; units are converted here, nothing else).

mod bfq_idling;
mod cfq_idling;
mod kyber;
mod missing_merges;
mod other_scheduler;
mod preemption_storm;
mod sched_cost;
mod seek_bound;
mod slices_too_long;
mod throttling;
mod waker_handled;
mod wbt;
mod weight_raising;

use std::fmt::Write;

use serde::Serialize;

use iosched_model::{
    cpu::CpuModel,
    explain::{
        AloneBy, Claim, Estimate, Evidence, Explanation, Finding, Fix, LatencyEstimate, OtherEnd,
        RangeBasis, Verdict,
    },
    model_check::ModelCheck,
    replay::{ContinuedNote, Replayer},
    sched::IdleReason,
    throttle::Throttling,
    workload::Workload,
};

use crate::views::{
    model_check::{check_line, cpu_line},
    replay::{continued_text, device_line, workload_lines},
};

/// `explain`'s text.
pub fn render_explain(r: &Replayer, e: &Explanation) -> String {
    let w = &r.workload;
    let mut out = String::new();
    let reliable = e.model_check.reproduces();
    if !reliable {
        // First: nothing below stands without the model.
        let _ = writeln!(out, "{}", check_line(&e.model_check));
    }
    let _ = writeln!(
        out,
        "device {}, recorded under {}, kernel {}.{}",
        e.device,
        e.scheduler.as_deref().unwrap_or("an unknown scheduler"),
        e.kernel / 1000,
        e.kernel % 1000
    );
    let _ = writeln!(out, "device model: {}", device_line(r));
    if reliable {
        let _ = writeln!(out, "{}", check_line(&e.model_check));
    }
    let _ = writeln!(out, "{}", cpu_line(&r.cpu));
    let _ = writeln!(out, "workload:");
    for l in workload_lines(r) {
        let _ = writeln!(out, "{l}");
    }
    if let Some(c) = &e.continued {
        let _ = writeln!(
            out,
            "{}",
            continued_text("replaying as recorded (and every what-if)", c)
        );
    }
    out.push('\n');
    if e.findings.is_empty() {
        let _ = writeln!(out, "{}", verdict_text(&e.verdict));
        return out;
    }
    for (i, f) in e.findings.iter().enumerate() {
        let _ = writeln!(out, "{}. [{}] {}", i + 1, f.cause.key(), claim_text(w, f));
        for ev in &f.evidence {
            let _ = writeln!(out, "     - {}", evidence_text(w, ev));
        }
        let mark = if reliable {
            ""
        } else {
            " (unreliable: the model does not reproduce the recording)"
        };
        if let Some(est) = &f.estimate {
            let _ = writeln!(
                out,
                "     => with {}: {:.3} MB/s instead of {:.3} ({:+.0}%){mark}",
                fix_text(w, &est.what_if),
                est.predicted_mb_s,
                est.measured_mb_s,
                est.change_pct
            );
            range_end_line(&mut out, est);
        }
        for est in &f.alternatives {
            let _ = writeln!(
                out,
                "     => or with {}: {:.3} MB/s ({:+.0}%){mark}",
                fix_text(w, &est.what_if),
                est.predicted_mb_s,
                est.change_pct
            );
            range_end_line(&mut out, est);
        }
    }
    let _ = writeln!(out, "\n{}", verdict_text(&e.verdict));
    out
}

/// An estimate's other end ([`Estimate::range_end`]), under it.
fn range_end_line(out: &mut String, est: &Estimate) {
    if let Some(o) = &est.range_end {
        let _ = writeln!(
            out,
            "        or, by {}: {:.3} MB/s ({:+.0}%)",
            basis_text(o.basis),
            o.predicted_mb_s,
            o.change_pct
        );
    }
}

/// `explain --json`'s document.
#[derive(Serialize)]
pub struct ExplanationJson<'a> {
    device: &'a str,
    scheduler: Option<&'a str>,
    kernel: u32,
    model_check: &'a ModelCheck,
    cpu: &'a CpuModel,
    findings: Vec<FindingJson<'a>>,
    verdict: String,
    continued: Option<&'a ContinuedNote>,
    throttling: &'a Throttling,
}

#[derive(Serialize)]
struct FindingJson<'a> {
    cause: &'static str,
    title: String,
    evidence: Vec<String>,
    estimate: Option<EstimateJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_estimate: Option<&'a LatencyEstimate>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    alternatives: Vec<EstimateJson>,
}

#[derive(Serialize)]
struct EstimateJson {
    what_if: String,
    measured_mb_s: f64,
    predicted_mb_s: f64,
    change_pct: f64,
    /// False where the model does not reproduce the recording ([`ModelCheck`]).
    reliable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    range_end: Option<RangeEndJson>,
}

#[derive(Serialize)]
struct RangeEndJson {
    basis: &'static str,
    predicted_mb_s: f64,
    change_pct: f64,
}

/// `e` as `explain --json` gives it.
pub fn explain_json<'a>(r: &'a Replayer, e: &'a Explanation) -> ExplanationJson<'a> {
    let w = &r.workload;
    let reliable = e.model_check.reproduces();
    let estimate = |est: &Estimate| EstimateJson {
        reliable,
        what_if: fix_text(w, &est.what_if),
        measured_mb_s: est.measured_mb_s,
        predicted_mb_s: est.predicted_mb_s,
        change_pct: est.change_pct,
        range_end: est.range_end.as_ref().map(|o| RangeEndJson {
            basis: basis_text(o.basis),
            predicted_mb_s: o.predicted_mb_s,
            change_pct: o.change_pct,
        }),
    };
    ExplanationJson {
        device: &e.device,
        scheduler: e.scheduler.as_deref(),
        kernel: e.kernel,
        model_check: &e.model_check,
        cpu: &r.cpu,
        findings: e
            .findings
            .iter()
            .map(|f| FindingJson {
                cause: f.cause.key(),
                title: claim_text(w, f),
                evidence: f.evidence.iter().map(|ev| evidence_text(w, ev)).collect(),
                estimate: f.estimate.as_ref().map(estimate),
                latency_estimate: f.latency_estimate.as_ref(),
                alternatives: f.alternatives.iter().map(estimate).collect(),
            })
            .collect(),
        verdict: verdict_text(&e.verdict),
        continued: e.continued.as_ref(),
        throttling: &e.throttling,
    }
}

fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Findings(n) => {
            format!("{n} finding(s); the first has the largest estimated effect")
        }
        Verdict::WakerHandled => "nothing is wrong: BFQ idles, but it recognised the waker and \
                                  serves its I/O (the collapse of a dsync writer waiting \
                                  for jbd2 under BFQ before 5.3 does not happen here)"
            .to_string(),
        Verdict::WakerInjected => "nothing is wrong: BFQ idled, but it detected the waker and \
                                   injected its I/O, so no time was lost to idling"
            .to_string(),
        Verdict::NoGain => "nothing is wrong: no change of scheduler or tunable the model tried \
                            would gain 10% or more"
            .to_string(),
        Verdict::Unnamed {
            what_if,
            change_pct,
        } => format!(
            "no cause named: none of the causes explain knows fits, yet under {what_if} the \
             model moves the workload {change_pct:+.0}% (`replay --compare {what_if}` shows it)"
        ),
        Verdict::Unreliable(n) => format!(
            "no conclusion: the model does not reproduce this recording (see the first line), so \
             it cannot say what is wrong or that nothing is; {n} finding(s) above are its \
             unreliable guesses"
        ),
    }
}

fn basis_text(b: RangeBasis) -> &'static str {
    match b {
        RangeBasis::NoUnseenLatency => {
            "no time on each request's way to the disk and back (the recording hid it)"
        }
        RangeBasis::OutsideTheStorm => "the recording's own rate outside the storm",
        RangeBasis::SchedulerCpuFreed => {
            "every µs of CPU the scheduler saves given back to the requests (the CPUs were not \
             saturated: how much of it was on their path the recording cannot tell)"
        }
    }
}

fn fix_text(w: &Workload, fix: &Fix) -> String {
    match fix {
        Fix::Config(label) => label.clone(),
        Fix::MqDeadlineAtDepth { stream, depth } => format!(
            "mq-deadline, if {} keeps {depth} in flight",
            w.streams[*stream as usize].comm
        ),
        Fix::OutOfTheStorm => "bfq as recorded, out of the storm".to_string(),
        Fix::WithoutWbt(sched) => format!("{} without wbt (queue/wbt_lat_usec=0)", sched.name()),
        Fix::KyberInitialDepths(depths) => format!(
            "kyber at its initial depths ({})",
            depths
                .iter()
                .map(|(d, n)| format!("{d} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// ns after the trace's start, in seconds.
fn s(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// `name x3, other x1`.
fn reasons_text(reasons: &[(IdleReason, u64)]) -> String {
    reasons
        .iter()
        .map(|(r, k)| format!("{} x{k}", r.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A finding's claim: its title.
fn claim_text(w: &Workload, f: &Finding) -> String {
    match &f.claim {
        Claim::BfqIdling(c) => bfq_idling::claim(w, c),
        Claim::WakerHandled(c) => waker_handled::claim(w, c),
        Claim::WeightRaising(c) => weight_raising::claim(c),
        Claim::PreemptionStorm(c) => preemption_storm::claim(c),
        Claim::SlicesTooLong(c) => slices_too_long::claim(c),
        Claim::CfqIdling(c) => cfq_idling::claim(w, c),
        Claim::MissingMerges(c) => missing_merges::claim(w, c),
        Claim::Wbt(c) => wbt::claim(c),
        Claim::Kyber(c) => kyber::claim(c),
        Claim::SeekBound(c) => seek_bound::claim(c),
        Claim::SchedCost(c) => sched_cost::claim(c),
        Claim::OtherScheduler(c) => other_scheduler::claim(c),
    }
}

/// One piece of evidence: its line.
fn evidence_text(w: &Workload, ev: &Evidence) -> String {
    match ev {
        Evidence::BfqIdling(e) => bfq_idling::evidence(w, e),
        Evidence::WakerHandled(e) => waker_handled::evidence(w, e),
        Evidence::WeightRaising(e) => weight_raising::evidence(e),
        Evidence::PreemptionStorm(e) => preemption_storm::evidence(w, e),
        Evidence::SlicesTooLong(e) => slices_too_long::evidence(e),
        Evidence::CfqIdling(e) => cfq_idling::evidence(w, e),
        Evidence::MissingMerges(e) => missing_merges::evidence(e),
        Evidence::Wbt(e) => wbt::evidence(e),
        Evidence::Kyber(e) => kyber::evidence(e),
        Evidence::Throttling(e) => throttling::evidence(e),
        Evidence::SeekBound(e) => seek_bound::evidence(e),
        Evidence::SchedCost(e) => sched_cost::evidence(e),
        Evidence::OtherScheduler(e) => other_scheduler::evidence(e),
        Evidence::OtherEnd(e) => other_end_text(e),
    }
}

fn other_end_text(e: &OtherEnd) -> String {
    let served_alone_by = match e.served_alone_by {
        AloneBy::Scheduler(s) => s.name(),
        AloneBy::BfqWithoutLowLatency => "BFQ with low_latency=0",
    };
    format!(
        "device fit: every request of the recording waited in the queue, which hides the time \
         each spends on its way to the disk and back; {:.2} ms of it is assumed per request, \
         paid wherever {served_alone_by} serves a process alone; with none: {:.3} MB/s \
         ({:+.0}%)",
        e.assumed_latency_ns / 1e6,
        e.predicted_mb_s,
        e.change_pct
    )
}

/// What one finding's evidence cites on the trace's time axis, for `explain --html`:
/// intervals (absolute trace ns) and the processes whose recorded idle-with-pending
/// intervals (the device idled after their completions) it cites.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FindingTimes {
    /// Its rank, from 0.
    pub finding: usize,
    pub spans: Vec<(u64, u64, String)>,
    pub idle_after_pids: Vec<u32>,
}

/// [`FindingTimes`] of each finding that cites any. The model's times are ns after the
/// workload's first Q (`Workload::start_ns`).
pub fn evidence_times(w: &Workload, e: &Explanation) -> Vec<FindingTimes> {
    use iosched_model::explain::{bfq_idling, kyber, preemption_storm};
    let abs = |t: u64| w.start_ns.saturating_add(t);
    let pid = |stream: u32| w.streams.get(stream as usize).map_or(0, |s| s.pid);
    let mut out = Vec::new();
    for (i, f) in e.findings.iter().enumerate() {
        let mut t = FindingTimes {
            finding: i,
            ..Default::default()
        };
        for ev in &f.evidence {
            match ev {
                Evidence::BfqIdling(bfq_idling::Evidence::DeviceIdleAfter { stream, .. }) => {
                    t.idle_after_pids.push(pid(*stream));
                }
                Evidence::Kyber(kyber::Evidence::Depth { domain, when, .. }) => {
                    for (a, b) in when {
                        t.spans
                            .push((abs(*a), abs(*b), format!("{domain} requests waited")));
                    }
                }
                Evidence::PreemptionStorm(preemption_storm::Evidence::Inferred {
                    from_ns,
                    to_ns,
                    ..
                }) => t
                    .spans
                    .push((abs(*from_ns), abs(*to_ns), "the storm (inferred)".into())),
                Evidence::PreemptionStorm(preemption_storm::Evidence::Pause {
                    stream,
                    from_ns,
                    to_ns,
                    ..
                }) => t.spans.push((
                    abs(*from_ns),
                    abs(*to_ns),
                    format!("{} paused", pid_name(w, *stream)),
                )),
                _ => {}
            }
        }
        if !t.spans.is_empty() || !t.idle_after_pids.is_empty() {
            out.push(t);
        }
    }
    out
}

fn pid_name(w: &Workload, stream: u32) -> String {
    w.streams.get(stream as usize).map_or_else(
        || format!("stream {stream}"),
        |s| format!("{}({})", s.comm, s.pid),
    )
}
