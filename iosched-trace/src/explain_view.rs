//! `explain`'s views: its text, and its JSON (`explain --json`: the explanation with each
//! finding's claim and evidence in words, as the text has them).
//!
//! Owns: the wording of findings, and layout. Must not: compute numbers (they come from
//! `model::explain`; units are converted here, nothing else).

use std::fmt::Write;

use serde::Serialize;

use iosched_model::{
    explain::{
        AloneBy, Claim, Estimate, Evidence, Explanation, Finding, Fix, LatencyEstimate, OtherEnd,
        RangeBasis, SelfCheck, Verdict, bfq_idling, cfq_idling, kyber, missing_merges,
        other_scheduler, preemption_storm, seek_bound, slices_too_long, throttling, waker_handled,
        wbt, weight_raising,
    },
    replay::{ContinuedNote, Replayer},
    sched::IdleReason,
    throttle::{Sufferer, Throttling},
    workload::Workload,
};

use crate::replay_view::{continued_text, device_line, workload_lines};

/// `explain`'s text.
pub fn render_explain(r: &Replayer, e: &Explanation) -> String {
    let w = &r.workload;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device {}, recorded under {}, kernel {}.{}",
        e.device,
        e.scheduler.as_deref().unwrap_or("an unknown scheduler"),
        e.kernel / 1000,
        e.kernel % 1000
    );
    let _ = writeln!(out, "device model: {}", device_line(r));
    let s = &e.self_check;
    let _ = writeln!(
        out,
        "model check: replaying as recorded gives {:.3} MB/s (recorded {:.3}), Q2C {:.2} ms \
         (recorded {:.2})",
        s.model_mb_s, s.recorded_mb_s, s.model_q2c_ms, s.recorded_q2c_ms
    );
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
        let _ = writeln!(out, "{}", verdict_text(e.verdict));
        return out;
    }
    for (i, f) in e.findings.iter().enumerate() {
        let _ = writeln!(out, "{}. [{}] {}", i + 1, f.cause.key(), claim_text(w, f));
        for ev in &f.evidence {
            let _ = writeln!(out, "     - {}", evidence_text(w, ev));
        }
        if let Some(est) = &f.estimate {
            let _ = writeln!(
                out,
                "     => with {}: {:.3} MB/s instead of {:.3} ({:+.0}%)",
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
                "     => or with {}: {:.3} MB/s ({:+.0}%)",
                fix_text(w, &est.what_if),
                est.predicted_mb_s,
                est.change_pct
            );
            range_end_line(&mut out, est);
        }
    }
    let _ = writeln!(out, "\n{}", verdict_text(e.verdict));
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
    self_check: &'a SelfCheck,
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
pub fn explain_json<'a>(r: &Replayer, e: &'a Explanation) -> ExplanationJson<'a> {
    let w = &r.workload;
    let estimate = |est: &Estimate| EstimateJson {
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
        self_check: &e.self_check,
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
        verdict: verdict_text(e.verdict),
        continued: e.continued.as_ref(),
        throttling: &e.throttling,
    }
}

fn verdict_text(v: Verdict) -> String {
    match v {
        Verdict::Findings(n) => {
            format!("{n} finding(s); the first has the largest estimated effect")
        }
        Verdict::WakerHandled => "nothing is wrong: BFQ idles, but it recognised the waker and \
                                  serves its I/O (the seed-001 collapse is fixed in this kernel)"
            .to_string(),
        Verdict::WakerInjected => "nothing is wrong: BFQ idled, but it detected the waker and \
                                   injected its I/O, so no time was lost to idling"
            .to_string(),
        Verdict::NoGain => "nothing is wrong: no change of scheduler or tunable the model tried \
                            would gain 10% or more"
            .to_string(),
    }
}

fn basis_text(b: RangeBasis) -> &'static str {
    match b {
        RangeBasis::NoUnseenLatency => {
            "no time on each request's way to the disk and back (the recording hid it)"
        }
        RangeBasis::OutsideTheStorm => "the recording's own rate outside the storm",
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

/// `0.12-0.50 s, 1.20-1.31 s, ... (N in all)`.
fn intervals_text(iv: &[(u64, u64)]) -> String {
    let mut parts: Vec<String> = iv
        .iter()
        .take(5)
        .map(|(a, b)| format!("{:.3}-{:.3} s", s(*a), s(*b)))
        .collect();
    if iv.len() > 5 {
        parts.push(format!("... ({} periods in all)", iv.len()));
    }
    parts.join(", ")
}

fn sufferers_text(who: &[Sufferer]) -> String {
    let mut parts: Vec<String> = who
        .iter()
        .take(4)
        .map(|p| {
            format!(
                "{}({}) {} x, {:.1} ms",
                p.comm,
                p.pid,
                p.count,
                ms(p.total_ns)
            )
        })
        .collect();
    if who.len() > 4 {
        parts.push(format!("{} more", who.len() - 4));
    }
    parts.join("; ")
}

/// A finding's claim: its title.
fn claim_text(w: &Workload, f: &Finding) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match &f.claim {
        Claim::BfqIdling(c) => match c {
            bfq_idling::Claim::SavesThroughput { stream, less_pct } => format!(
                "BFQ idles on {} and that keeps the disk streaming: without idling \
                 (slice_idle=0) the model predicts {less_pct:.0}% less",
                name(stream)
            ),
            bfq_idling::Claim::OnDependency { stream } => format!(
                "BFQ idles on {} waiting for its next request, but that request depends on \
                 another process's I/O, which the idling holds back",
                name(stream)
            ),
            bfq_idling::Claim::CostsThroughput { stream } => format!(
                "BFQ idles on {} for throughput, but other processes wait meanwhile",
                name(stream)
            ),
            bfq_idling::Claim::ForGuarantees { stream } => {
                format!("BFQ idles on {} to guarantee its share", name(stream))
            }
        },
        Claim::WakerHandled(waker_handled::Claim { stream, waker }) => {
            let waker = name(waker);
            format!(
                "{}'s next I/O waits for {waker}'s, and BFQ knows it: it detected {waker} as the \
                 waker of {}'s queue and injects its I/O instead of idling (since 5.3): nothing \
                 is lost",
                name(stream),
                w.streams[*stream as usize].comm
            )
        }
        Claim::WeightRaising(weight_raising::Claim { change_pct, range }) => match range {
            Some((lo, hi)) => format!(
                "BFQ's low-latency heuristics cost this workload its throughput: with \
                 low_latency=0 the model predicts {lo:.0}% to {hi:.0}% more (the less, the more \
                 time each request spends on its way to the disk: the recording hid it)"
            ),
            None => format!(
                "BFQ's low-latency heuristics cost this workload its throughput: with \
                 low_latency=0 the model predicts {change_pct:.0}% more"
            ),
        },
        Claim::PreemptionStorm(c) => storm_claim_text(c),
        Claim::SlicesTooLong(slices_too_long::Claim {
            busy,
            process,
            p99_q2c_ms,
        }) => format!(
            "{busy} processes share the disk in BFQ slices: {process} waits up to \
             {p99_q2c_ms:.0} ms (p99 Q2C) for its turn"
        ),
        Claim::CfqIdling(c) => match c {
            cfq_idling::Claim::GroupIdles {
                stream,
                other_cgroup,
            } => format!(
                "CFQ group-idles on {} (group_idle: the last busy queue of its cgroup) waiting \
                 for its next request, but that request depends on another process's I/O{}, \
                 which the idling holds back",
                name(stream),
                if *other_cgroup {
                    " in another cgroup"
                } else {
                    ""
                }
            ),
            cfq_idling::Claim::Idles { stream } => format!(
                "CFQ idles on {} waiting for its next request, but that request depends on \
                 another process's I/O, which the idling holds back",
                name(stream)
            ),
        },
        Claim::MissingMerges(c) => match c {
            missing_merges::Claim::Unmerged {
                contiguous,
                bios,
                merge_ratio,
            } => format!(
                "{contiguous} of {bios} bios continue the previous bio of their process, but the \
                 recorded merge ratio is {merge_ratio:.2}"
            ),
            missing_merges::Claim::HeldByTags {
                contiguous,
                bios,
                stream,
                tags,
            } => format!(
                "{contiguous} of {bios} bios continue the previous bio of their process, but \
                 under none they cannot merge: {} was held back by the {tags} tags, so its real \
                 depth, and the merges an elevator would make, are not in the trace",
                w.streams[*stream as usize].comm
            ),
        },
        Claim::Wbt(c) => {
            let title = format!(
                "writeback throttling (wbt) held {} buffered writes of {} before their requests \
                 were allocated: {:.1} ms of waiting, p99 {:.2} ms",
                c.held,
                c.most_waited
                    .as_ref()
                    .map_or_else(String::new, |(comm, pid)| format!("{comm}({pid})")),
                ms(c.total_ns),
                ms(c.p99_ns)
            );
            match c.pays_less_pct {
                Some(less) => format!(
                    "{title}; it pays: without wbt the model predicts {less:.0}% less for them, \
                     the writes crowding the device"
                ),
                None => title,
            }
        }
        Claim::Kyber(c) => {
            let title = format!(
                "Kyber throttled the {} domain{}: {} requests waited for a token, {:.1} ms in \
                 all",
                c.domains.join(" and "),
                if c.domains.len() > 1 { "s" } else { "" },
                c.requests,
                ms(c.total_ns)
            );
            match c.pays_less_pct {
                Some(less) => format!(
                    "{title}; it pays: at its initial depths the model predicts {less:.0}% less \
                     for them"
                ),
                None => title,
            }
        }
        Claim::SeekBound(seek_bound::Claim { positioning_pct }) => format!(
            "the disk spends {positioning_pct:.0}% of its busy time positioning (seeks and \
             rotation)"
        ),
        Claim::OtherScheduler(other_scheduler::Claim {
            sched,
            change_pct,
            range,
        }) => match range {
            Some((lo, hi)) => format!(
                "{} would move this workload {lo:.0}% to {hi:.0}% faster (the more, the less \
                 time each request spends on its way to the disk: the recording hid it)",
                sched.name()
            ),
            None => format!(
                "{} would move this workload {change_pct:.0}% faster",
                sched.name()
            ),
        },
    }
}

fn storm_claim_text(c: &preemption_storm::Claim) -> String {
    let from = s(c.from_ns);
    let kind = match &c.seen {
        preemption_storm::Seen::Inferred => format!(
            "the trace shows BFQ's queues taking the disk from each other at almost every \
             request from {from:.3} s (inferred without BFQ's log: a preemption storm)"
        ),
        preemption_storm::Seen::Log { after } => format!(
            "BFQ's log shows its queues preempting each other at almost every request from \
             {from:.3} s{}, without raised weights (a preemption storm)",
            after.map_or_else(String::new, |(pid, reason)| format!(
                ", after queue {pid} expired {}",
                reason.name()
            ))
        ),
    };
    match &c.out {
        Some(out) => {
            let range = match out {
                preemption_storm::OutOfIt::Range {
                    lo,
                    hi,
                    lo_pct,
                    hi_pct,
                } => format!("{lo:.1} to {hi:.1} MB/s ({lo_pct:+.0}% to {hi_pct:+.0}%)"),
                preemption_storm::OutOfIt::Rate { mb_s, change_pct } => {
                    format!("{mb_s:.1} MB/s ({change_pct:+.0}%)")
                }
            };
            format!(
                "{kind}: out of it this workload runs at {range} instead of {:.1} MB/s",
                c.measured_mb_s
            )
        }
        None => format!("{kind}; the model enters it too, even with a longer slice_idle"),
    }
}

/// One piece of evidence: its line.
fn evidence_text(w: &Workload, ev: &Evidence) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match ev {
        Evidence::BfqIdling(e) => match e {
            bfq_idling::Evidence::Idled {
                stream,
                times,
                idle_ns,
                timer_waste_ns,
                reasons,
            } => format!(
                "model: BFQ idled {times} times on {} ({:.1} ms in all, {:.1} ms until the idle \
                 timer fired with nothing to do); idling because: {}",
                name(stream),
                ms(*idle_ns),
                ms(*timer_waste_ns),
                reasons_text(reasons)
            ),
            bfq_idling::Evidence::DependsOn {
                stream,
                on,
                ios,
                within_us,
            } => format!(
                "trace: {ios} of {}'s I/Os were issued right after a completion of {} (within \
                 {within_us} µs): its next I/O depends on that process",
                name(stream),
                name(on)
            ),
            bfq_idling::Evidence::DeviceIdleAfter { stream, idle_ns } => format!(
                "trace: the device sat idle with I/O pending for {:.1} ms after {}'s \
                 completions",
                ms(*idle_ns),
                name(stream)
            ),
            bfq_idling::Evidence::WakerInjected { stream } => format!(
                "model: BFQ detected {}'s waker and injected its I/O while idling",
                name(stream)
            ),
        },
        Evidence::WakerHandled(waker_handled::Evidence::OldRulesOwnGroup {
            stream,
            predicted_mb_s,
            measured_mb_s,
            change_pct,
        }) => {
            let comm = &w.streams[*stream as usize].comm;
            format!(
                "model: with pre-5.3 rules (no waker injection) and {comm} in a cgroup of its \
                 own, as in seed 001, {comm} would get {predicted_mb_s:.3} MB/s instead of \
                 {measured_mb_s:.3} ({change_pct:+.0}%)"
            )
        }
        Evidence::WeightRaising(e) => weight_raising_text(e),
        Evidence::PreemptionStorm(e) => storm_evidence_text(w, e),
        Evidence::SlicesTooLong(slices_too_long::Evidence::UnderMqDeadline { p99_q2c_ms }) => {
            format!("model: under mq-deadline its p99 Q2C would be {p99_q2c_ms:.0} ms")
        }
        Evidence::CfqIdling(e) => match e {
            cfq_idling::Evidence::Idled {
                stream,
                times,
                idle_ns,
                too_idle,
                reasons,
            } => format!(
                "model: CFQ idled {times} times on {} ({:.1} ms in all; {too_idle} slices ended \
                 by the idle timer); idling because: {}",
                name(stream),
                ms(*idle_ns),
                reasons_text(reasons)
            ),
            cfq_idling::Evidence::Cgroups {
                stream,
                cgroup,
                root,
                partner,
                partner_cgroup,
                partner_root,
                blocked,
            } => {
                let root_text = |root: bool| if root { " (root)" } else { "" };
                format!(
                    "trace: {} is in cgroup {cgroup}{}, {} in cgroup {partner_cgroup}{}: {}",
                    name(stream),
                    root_text(*root),
                    name(partner),
                    root_text(*partner_root),
                    if *blocked {
                        format!(
                            "CFQ does not let {}'s request preempt a group idle of another \
                             cgroup, so it waits for the idle timer",
                            name(partner)
                        )
                    } else {
                        "a request of the root group preempts the idle of a child group".to_string()
                    }
                )
            }
            cfq_idling::Evidence::WithoutGroupIdle {
                predicted_mb_s,
                measured_mb_s,
                change_pct,
            } => format!(
                "model: with group_idle=0 {predicted_mb_s:.3} MB/s instead of {measured_mb_s:.3} \
                 ({change_pct:+.0}%)"
            ),
        },
        Evidence::MissingMerges(e) => match e {
            missing_merges::Evidence::WouldMerge { merge_ratio } => format!(
                "model: under mq-deadline with merging on (nomerges=0) they would merge \
                 ({merge_ratio:.2} bios per request)"
            ),
            missing_merges::Evidence::HeldBack {
                max_in_flight,
                slept_for_request,
                ios,
                asleep_pct,
            } => format!(
                "measured: at most {max_in_flight} in flight; asleep for a free request before \
                 {slept_for_request} of its {ios} bios, {asleep_pct:.0}% of its run"
            ),
            missing_merges::Evidence::AtMeasuredDepth { merge_ratio, mb_s } => format!(
                "model at that depth: under mq-deadline {merge_ratio:.2} bios per request, \
                 {mb_s:.2} MB/s"
            ),
            missing_merges::Evidence::AtNrRequests {
                nr_requests,
                tags,
                merge_ratio,
                mb_s,
            } => format!(
                "model if it keeps {nr_requests} in flight (mq-deadline's nr_requests, twice \
                 the {tags} tags; --set iodepth=N for another depth): {merge_ratio:.2} bios per \
                 request, {mb_s:.2} MB/s"
            ),
        },
        Evidence::Wbt(e) => wbt_text(e),
        Evidence::Kyber(e) => kyber_text(e),
        Evidence::Throttling(e) => match e {
            throttling::Evidence::When(iv) => format!("trace: when: {}", intervals_text(iv)),
            throttling::Evidence::WhoWaited(who) => {
                format!("trace: who waited: {}", sufferers_text(who))
            }
            throttling::Evidence::Others {
                predicted_mb_s,
                measured_mb_s,
                change_pct,
                p99_without_ms,
                p99_with_ms,
            } => format!(
                "model: the other processes get {predicted_mb_s:.3} MB/s instead of \
                 {measured_mb_s:.3} ({change_pct:+.0}%), their worst p99 Q2C \
                 {p99_without_ms:.1} ms instead of {p99_with_ms:.1}"
            ),
        },
        Evidence::SeekBound(seek_bound::Evidence::FittedOn { requests }) => {
            format!("device model: {requests} requests, fitted from the trace's service times")
        }
        Evidence::OtherScheduler(other_scheduler::Evidence::Model {
            sched,
            mb_s,
            base_mb_s,
        }) => format!(
            "model: {mb_s:.2} MB/s under {} vs {base_mb_s:.2} MB/s as recorded",
            sched.name()
        ),
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

fn weight_raising_text(e: &weight_raising::Evidence) -> String {
    match e {
        weight_raising::Evidence::Raised { raises, preempted } => {
            let mut line = format!("model: as recorded, BFQ raised {raises} queue weight(s)");
            if let Some((preempted, all)) = preempted {
                let _ = write!(
                    line,
                    "; {preempted} of its {all} service slots ended by preemption (a queue with \
                     raised weight that becomes busy takes the disk from the one in service: a \
                     switch, and on a disk a seek)"
                );
            }
            line
        }
        weight_raising::Evidence::WithoutRaising {
            mb_s,
            base_mb_s,
            preemptions,
            merge_ratio,
        } => {
            let mut line =
                format!("model: with low_latency=0, {mb_s:.3} MB/s instead of {base_mb_s:.3}");
            if let Some(n) = preemptions {
                let _ = write!(line, ", {n} preemptions");
            }
            if let Some((m_off, m)) = merge_ratio {
                let _ = write!(
                    line,
                    ", {m_off:.2} bios per request instead of {m:.2} (while a raised queue is \
                     busy, BFQ lets async I/O and sync writes use fewer requests, \
                     `bfq_limit_depth`: fewer wait long enough to merge)"
                );
            }
            line
        }
        weight_raising::Evidence::LowerPriority {
            raised,
            pids,
            predicted_mb_s,
            change_pct,
        } => {
            let shown: Vec<String> = pids.iter().take(4).map(u32::to_string).collect();
            let more = if pids.len() > 4 { " ..." } else { "" };
            format!(
                "model: the {raised} raised process(es) at I/O priority best-effort 5 instead of \
                 the default (`ionice -c2 -n5 -p {}{more}`), low_latency left on for the rest: \
                 {predicted_mb_s:.3} MB/s ({change_pct:+.0}%); since 5.12 BFQ raises no queue \
                 whose weight the user set",
                shown.join(" ")
            )
        }
    }
}

fn storm_evidence_text(w: &Workload, e: &preemption_storm::Evidence) -> String {
    use preemption_storm::Evidence as E;
    let name = |s: &u32| w.stream_name(*s);
    let label = |inferred: bool| {
        if inferred {
            "trace (inferred)"
        } else {
            "trace"
        }
    };
    match e {
        E::LogPreemptions {
            preempted,
            expirations,
            in_a_row,
        } => format!(
            "BFQ's log: {preempted} of its {expirations} expirations were `preempted` (reason \
             4), {in_a_row} of them in a row, and none of their queues had a raised weight"
        ),
        E::LogStartedBy {
            at_ns,
            pid,
            reason,
            line,
            first_after_ns,
            first_line,
        } => format!(
            "BFQ's log: the run began at {:.3} s, when queue {pid} expired {}: `{line}`; the \
             first preemption came {:.2} ms later: `{first_line}`",
            s(*at_ns),
            reason.name(),
            ms(*first_after_ns)
        ),
        E::LogBeganWithIt { at_ns, line } => format!(
            "BFQ's log: the run began with the log's first expiration, at {:.3} s: `{line}`",
            s(*at_ns)
        ),
        E::Inferred {
            from_ns,
            to_ns,
            requests,
            streams,
            slices,
            short_slice,
            seeks,
            switches,
            slice_idle_ms,
            slices_before,
        } => {
            let before = slices_before.map_or_else(String::new, |(lo, hi)| {
                format!(" (before it, this recording's slices had {lo} to {hi} requests)")
            });
            format!(
                "trace (inferred: the recording has no BFQ log; `record --sched-log` keeps it): \
                 from {:.3} s to {:.3} s, {requests} requests of {} came in {slices} service \
                 slices of at most {short_slice} requests, alternating between sequential \
                 processes, {seeks} of the {switches} switches a seek. BFQ idles (slice_idle \
                 {slice_idle_ms} ms) for a sequential process and serves it in slices of \
                 hundreds of requests{before}: slices this short say its queues took the disk \
                 from each other",
                s(*from_ns),
                s(*to_ns),
                streams.iter().map(name).collect::<Vec<_>>().join(", ")
            )
        }
        E::Pause {
            inferred,
            stream,
            pause_ns,
            from_ns,
            to_ns,
            slice_idle_ms,
        } => format!(
            "{}: {} paused {:.2} ms ({:.3} s to {:.3} s, its completion to its next request), \
             longer than slice_idle ({slice_idle_ms} ms): BFQ expired its queue waiting, and its \
             next request, within 3 x slice_idle, took the disk back",
            label(*inferred),
            name(stream),
            ms(*pause_ns),
            s(*from_ns),
            s(*to_ns)
        ),
        E::NoLongPause {
            inferred,
            stream,
            pause_ns,
            at_ns,
            slice_idle_ms,
        } => format!(
            "{}: no process paused longer than slice_idle ({slice_idle_ms} ms) around its start \
             (the longest: {} {:.2} ms, at {:.3} s): what started it is not in the trace",
            label(*inferred),
            name(stream),
            ms(*pause_ns),
            s(*at_ns)
        ),
        E::KernelRule { window_ms } => format!(
            "kernel: a queue expired empty (too idle, or preempted with its one request in \
             flight) is marked non_blocking_wait_rq, and its next request, arriving within 3 x \
             slice_idle ({window_ms} ms) of its last completion with budget left, expires the \
             queue in service (bfq_bfqq_update_budg_for_activation, \
             bfq_bfqq_handle_idle_busy_switch): a switch, and on a disk a seek, per request \
             until a budget runs out"
        ),
        E::Rates {
            in_it_mb_s,
            outside_mb_s,
        } => format!(
            "trace: {in_it_mb_s:.3} MB/s during it{}",
            outside_mb_s.map_or_else(String::new, |m| format!(", {m:.3} MB/s outside it"))
        ),
        E::ModelAsRecorded {
            enters: true,
            preempted,
            slots,
            mb_s,
        } => format!(
            "model: its replay as recorded enters it too ({preempted} of {slots} service slots \
             ended by preemption): {mb_s:.3} MB/s"
        ),
        E::ModelAsRecorded {
            enters: false,
            preempted,
            slots,
            mb_s,
        } => format!(
            "model: its replay as recorded stays out of it ({preempted} of {slots} service slots \
             ended by preemption): {mb_s:.3} MB/s, the workload without the storm"
        ),
        E::ModelLongerIdle {
            what_if,
            pause_fits,
            preemptions,
            mb_s,
        } => format!(
            "model: with {what_if}{}, {preemptions} preemptions and {mb_s:.3} MB/s",
            if *pause_fits {
                " (the pause fits in the idling)"
            } else {
                ""
            }
        ),
    }
}

fn wbt_text(e: &wbt::Evidence) -> String {
    match e {
        wbt::Evidence::Waits {
            count,
            requests_cap,
            total_ns,
            p99_ns,
            max_ns,
        } => format!(
            "trace: {count} buffered-write bios waited between Q and G (rq_qos_throttle, before \
             their request was allocated) while requests were free (at most {requests_cap} may \
             exist): {:.1} ms in all, p99 {:.2} ms, max {:.2} ms",
            ms(*total_ns),
            ms(*p99_ns),
            ms(*max_ns)
        ),
        wbt::Evidence::Limit {
            limit_seen,
            depth_at_waits,
            woken_when_drained,
            waits,
            tag_bound,
        } => format!(
            "trace: wbt let up to {limit_seen} buffered writes hold requests at once{}; \
             {woken_when_drained} of the {waits} waits ended only when they had all completed{}",
            depth_at_waits.map_or_else(String::new, |d| format!(
                ", its max depth was {d} when they waited (wbt_step)"
            )),
            if *tag_bound > 0 {
                format!(
                    "; {tag_bound} more Q->G waits of buffered writes came with every request \
                     in use (tag waits, not counted)"
                )
            } else {
                String::new()
            }
        ),
        wbt::Evidence::Steps {
            events,
            step,
            background,
            normal,
            max,
            window_us,
        } => format!(
            "trace: {events} wbt_step events: scale step up to {step}, limits down to background \
             {background} / normal {normal} / max {max}, window {window_us} µs"
        ),
        wbt::Evidence::Tunable { device } => format!(
            "tunable: /sys/block/{device}/queue/wbt_lat_usec (wbt's read-latency target: 0 turns \
             wbt off, a larger one throttles less)"
        ),
        wbt::Evidence::Model {
            limit,
            with_mb_s,
            without_mb_s,
        } => format!(
            "model: the replay as recorded plus a wbt limit of {limit} gives the waiting \
             processes {with_mb_s:.3} MB/s; without wbt {without_mb_s:.3} MB/s"
        ),
    }
}

fn kyber_text(e: &kyber::Evidence) -> String {
    match e {
        kyber::Evidence::Waits {
            domain,
            events,
            count,
            total_ns,
            p99_ns,
            max_ns,
        } => format!(
            "trace: {events} kyber_throttled events for the {domain} domain; {count} of its \
             requests waited between I and D while its tokens were out: {:.1} ms in all, p99 \
             {:.2} ms, max {:.2} ms",
            ms(*total_ns),
            ms(*p99_ns),
            ms(*max_ns)
        ),
        kyber::Evidence::Depth {
            domain,
            range,
            at_throttles,
            when,
            who,
        } => format!(
            "trace: {domain} depth {}; when: {}; who waited: {}",
            match (range, at_throttles) {
                (Some((lo, hi)), Some(at)) =>
                    format!("set by kyber_adjust between {lo} and {hi}, {at} at most throttles"),
                (_, Some(at)) => format!("{at} at the throttles (no kyber_adjust seen)"),
                _ => "unknown".to_string(),
            },
            intervals_text(when),
            sufferers_text(who)
        ),
        kyber::Evidence::Tunable {
            device,
            read_lat_nsec,
            write_lat_nsec,
        } => format!(
            "tunable: /sys/block/{device}/queue/iosched/read_lat_nsec ({}) and write_lat_nsec \
             ({}): Kyber shrinks a domain's depth when latencies exceed them; larger targets \
             throttle less",
            read_lat_nsec.as_deref().unwrap_or("?"),
            write_lat_nsec.as_deref().unwrap_or("?")
        ),
        kyber::Evidence::Model {
            with_mb_s,
            without_mb_s,
        } => format!(
            "model: Kyber held at those depths gives the waiting processes {with_mb_s:.3} MB/s; \
             at its initial depths {without_mb_s:.3} MB/s"
        ),
    }
}
