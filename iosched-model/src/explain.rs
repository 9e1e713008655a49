//! "Why is <recorded scheduler> slow here": findings ranked by the model-estimated effect of
//! their fix, each with its evidence from the trace and from the model's decisions. Effects
//! are applied to the measured numbers as ratios (measured x predicted-with-fix /
//! predicted-as-recorded), so a model that is off by a constant factor still ranks causes
//! right.
//!
//! Owns: choosing what-ifs and turning runs into findings. Must not: print.

use std::collections::BTreeSet;

use serde::Serialize;

use iosched_core::analysis::Report;

use super::{
    device::ASSUMED_LATENCY_NS,
    replay::{self, Config, ReplayError, Replayer, Run, Summary},
    sched::{Decision, IdleReason, InjectWhy, SchedKind, Settings},
    storm,
};

/// Findings below this estimated change are not worth a line.
pub const MIN_EFFECT_PCT: f64 = 10.0;

/// Causes that describe the workload or what the scheduler does right: notes, not faults.
const NOTES: [&str; 5] = [
    "seek_bound",
    "waker_handled",
    "idling_saves_throughput",
    "wbt_throttling_pays",
    "kyber_throttling_pays",
];

#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    pub what_if: String,
    /// Throughput of the affected processes (or the device), MB/s.
    pub measured_mb_s: f64,
    pub predicted_mb_s: f64,
    pub change_pct: f64,
    /// The other end of the range the effect may lie in, on the basis it names: where the
    /// recording hid the latency of each request's way to the disk and back
    /// ([`super::device::FitQuality::latency_unseen`]) the estimate assumes
    /// [`super::device::ASSUMED_LATENCY_NS`] of it and this end none; for a preemption
    /// storm, the recording's own rate outside the storm.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_end: Option<RangeEnd>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RangeEnd {
    /// What this end rests on, in words.
    pub basis: String,
    pub predicted_mb_s: f64,
    pub change_pct: f64,
}

/// A latency what-if (slices too long): the worst-waiting process's p99 Q2C as recorded and
/// as the model predicts it under the fix. Not ranked by: the findings rank by throughput.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyEstimate {
    pub what_if: String,
    /// The process with the highest p99 Q2C as recorded.
    pub process: String,
    pub measured_p99_q2c_ms: f64,
    /// That process's p99 Q2C under the fix.
    pub predicted_p99_q2c_ms: f64,
    /// The highest p99 Q2C of any process under the fix: what a real run of the fix, with
    /// other pids, can be compared with.
    pub predicted_worst_p99_q2c_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub cause: &'static str,
    pub title: String,
    pub evidence: Vec<String>,
    pub estimate: Option<Estimate>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_estimate: Option<LatencyEstimate>,
    /// Other fixes of the same cause, with the model's estimate of each (as `estimate`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub alternatives: Vec<Estimate>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub device: String,
    pub scheduler: Option<String>,
    pub kernel: u32,
    /// How well the replay of the recorded configuration reproduces the recording.
    pub self_check: SelfCheck,
    pub findings: Vec<Finding>,
    pub verdict: String,
    /// Time-bounded processes the replays continued to their end (the what-ifs compare
    /// throughput over the recorded duration).
    pub continued: Option<replay::ContinuedNote>,
    /// Throttling the trace shows (wbt's Q->G waits, Kyber's throttled domains), measured.
    pub throttling: super::throttle::Throttling,
}

#[derive(Clone, Debug, Serialize)]
pub struct SelfCheck {
    pub recorded_mb_s: f64,
    pub model_mb_s: f64,
    pub recorded_q2c_ms: f64,
    pub model_q2c_ms: f64,
    pub fit_r2: Option<f64>,
    pub fit_mean_abs_error_pct: Option<f64>,
}

fn cfg(sched: SchedKind, pairs: &[(&str, &str)]) -> Config {
    let mut s = Settings::default();
    for (k, v) in pairs {
        s.0.insert((*k).into(), (*v).into());
    }
    let mut label = sched.name().to_string();
    if !pairs.is_empty() {
        let kv: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        label = format!("{label}:{}", kv.join(","));
    }
    Config {
        label,
        sched,
        settings: s,
    }
}

/// Throughput of some processes (all when `pids` is empty).
fn mb_s(s: &Summary, pids: &[u32]) -> f64 {
    if pids.is_empty() {
        return s.mb_per_s;
    }
    s.processes
        .iter()
        .filter(|p| pids.contains(&p.pid))
        .map(|p| p.mb_per_s)
        .sum()
}

fn estimate(what_if: &Run, base: &Run, recorded: &Summary, pids: &[u32]) -> Estimate {
    let measured = mb_s(recorded, pids);
    let (b, a) = (mb_s(&base.summary, pids), mb_s(&what_if.summary, pids));
    let ratio = if b > 0.0 { a / b } else { 1.0 };
    Estimate {
        what_if: what_if.config.label.clone(),
        measured_mb_s: measured,
        predicted_mb_s: measured * ratio,
        change_pct: 100.0 * (ratio - 1.0),
        range_end: None,
    }
}

/// `r`'s rotational device without the latency its fit assumed because the recording hid
/// it: a what-if that serves processes one request at a time (where every request pays it)
/// from a recording where every request queued (where none showed it) depends on it, and
/// this is its best case.
fn without_unseen_latency(r: &Replayer) -> Option<Replayer> {
    let unseen = r.fit.as_ref().is_some_and(|q| q.latency_unseen);
    match &r.device {
        super::device::DeviceModel::Rotational(m) if unseen && m.latency_ns > 0.0 => {
            let mut m = m.clone();
            m.latency_ns = 0.0;
            Some(r.on_device(super::device::DeviceModel::Rotational(m)))
        }
        _ => None,
    }
}

/// The evidence line of an estimate's other end ([`Estimate::range_end`]).
fn range_end_line(end: &Estimate, served_alone_by: &str) -> String {
    format!(
        "device fit: every request of the recording waited in the queue, which hides the time \
         each spends on its way to the disk and back; {:.2} ms of it is assumed per request, \
         paid wherever {served_alone_by} serves a process alone; with none: {:.3} MB/s \
         ({:+.0}%)",
        ASSUMED_LATENCY_NS / 1e6,
        end.predicted_mb_s,
        end.change_pct
    )
}

/// `end` as the other end of an estimate's range: the what-if without the latency the
/// recording hid.
fn range_end(end: &Estimate) -> RangeEnd {
    RangeEnd {
        basis: "no time on each request's way to the disk and back (the recording hid it)".into(),
        predicted_mb_s: end.predicted_mb_s,
        change_pct: end.change_pct,
    }
}

/// Explains the recorded scheduler's behaviour on `r`'s workload. `recorded`: the
/// recording's own summary (same device).
pub fn explain(
    r: &Replayer,
    recorded: &Summary,
    recorded_report: &Report,
) -> Result<Explanation, ReplayError> {
    let w = &r.workload;
    let base_cfg = r
        .recorded_config()
        .unwrap_or_else(|| cfg(SchedKind::None, &[]));
    let base = r.run(&base_cfg)?;
    // Where the recording hid the per-request latency: the replayer without it, and the
    // recorded configuration replayed there (the base of every what-if's other end).
    let unseen = match without_unseen_latency(r) {
        Some(lr) => {
            let lb = lr.run(&base_cfg)?;
            Some((lr, lb))
        }
        None => None,
    };
    let mut findings: Vec<Finding> = Vec::new();
    let name = |s: u32| w.stream_name(s);

    if base_cfg.sched == SchedKind::Bfq {
        // Idling: per stream, what the model says BFQ idled for and why.
        let no_idle = r.run(&Config {
            label: "bfq:slice_idle=0".into(),
            ..cfg(SchedKind::Bfq, &[("slice_idle", "0")])
        })?;
        for (s, st) in w.streams.iter().enumerate() {
            let s = s as u32;
            let (n, idle_ns, reasons) = replay::idle_episodes(&base.decisions, s);
            if n == 0 {
                continue;
            }
            let timer_waste: u64 = base
                .decisions
                .iter()
                .filter_map(|d| match &d.d {
                    Decision::IdleEnd {
                        stream,
                        outcome: super::sched::IdleOutcome::TimerExpired,
                        waited_ns,
                        ..
                    } if *stream == s => Some(*waited_ns),
                    _ => None,
                })
                .sum();
            let reasons: Vec<String> = reasons
                .iter()
                .map(|(r, k)| format!("{} x{k}", r.name()))
                .collect();
            let mut evidence = vec![format!(
                "model: BFQ idled {n} times on {} ({:.1} ms in all, {:.1} ms until the idle \
                 timer fired with nothing to do); idling because: {}",
                name(s),
                idle_ns as f64 / 1e6,
                timer_waste as f64 / 1e6,
                reasons.join(", ")
            )];
            for (dep, count) in &st.depends_on {
                evidence.push(format!(
                    "trace: {count} of {}'s I/Os were issued right after a completion of {} \
                     (within {} µs): its next I/O depends on that process",
                    name(s),
                    name(*dep),
                    super::workload::DEP_WINDOW_NS / 1000
                ));
            }
            let pair_idle: u64 = recorded_pairs(recorded_report, st.pid);
            if pair_idle > 0 {
                evidence.push(format!(
                    "trace: the device sat idle with I/O pending for {:.1} ms after {}'s \
                     completions",
                    pair_idle as f64 / 1e6,
                    name(s)
                ));
            }
            let dependency = !st.depends_on.is_empty()
                || w.streams
                    .iter()
                    .any(|o| o.depends_on.iter().any(|(d, _)| *d == s));
            let pids: Vec<u32> = Vec::new();
            let injected_waker = base.decisions.iter().any(|d| {
                matches!(d.d, Decision::Inject { into, why: InjectWhy::Waker, .. } if into == s)
            });
            let mut est = estimate(&no_idle, &base, recorded, &pids);
            let raised = reasons
                .iter()
                .any(|r| r.starts_with(IdleReason::WeightRaised.name()));
            if raised {
                let fixed = r.run(&cfg(SchedKind::Bfq, &[("low_latency", "0")]))?;
                let e = estimate(&fixed, &base, recorded, &pids);
                if e.change_pct > est.change_pct {
                    est = e;
                }
            }
            if dependency && r.env.kernel < 5003 {
                // What the 5.3 fix (waker detection and injection) would do.
                let fixed = r.run(&cfg(SchedKind::Bfq, &[("kernel", "5.3")]))?;
                let e = estimate(&fixed, &base, recorded, &pids);
                if e.change_pct > est.change_pct {
                    est = e;
                }
            }
            // The what-if is global: cite it only for streams whose idling is a real share
            // of the run (5%), not every queue BFQ ever idled on.
            let share = idle_ns as f64 / (base.summary.duration_s * 1e9).max(1.0);
            if share >= 0.05 && est.change_pct <= -25.0 && !dependency {
                findings.push(Finding {
                    cause: "idling_saves_throughput",
                    title: format!(
                        "BFQ idles on {} and that keeps the disk streaming: without idling \
                         (slice_idle=0) the model predicts {:.0}% less",
                        name(s),
                        -est.change_pct
                    ),
                    evidence,
                    estimate: Some(est),
                    latency_estimate: None,
                    alternatives: Vec::new(),
                });
                continue;
            }
            // Idling the model finds harmless is kept as evidence only when the idle timer
            // fired with nothing to do while another process could have used the disk: with
            // one process there is no one else to wait (a lone reader under BFQ idles
            // thousands of times for nothing lost).
            let alone = w.streams.len() < 2;
            if share < 0.05
                || ((timer_waste == 0 || base.decision_counts.wakers > 0 || alone)
                    && est.change_pct < MIN_EFFECT_PCT)
            {
                continue;
            }
            let (cause, title) = if dependency {
                (
                    "idling_on_dependency",
                    format!(
                        "BFQ idles on {} waiting for its next request, but that request \
                         depends on another process's I/O, which the idling holds back",
                        name(s)
                    ),
                )
            } else if reasons
                .iter()
                .any(|r| r.starts_with(IdleReason::BoostsThroughput.name()))
            {
                (
                    "idling_costs_throughput",
                    format!(
                        "BFQ idles on {} for throughput, but other processes wait meanwhile",
                        name(s)
                    ),
                )
            } else {
                (
                    "idling_for_guarantees",
                    format!("BFQ idles on {} to guarantee its share", name(s)),
                )
            };
            if injected_waker {
                evidence.push(format!(
                    "model: BFQ detected {}'s waker and injected its I/O while idling",
                    name(s)
                ));
            }
            findings.push(Finding {
                cause,
                title,
                evidence,
                estimate: Some(est),
                latency_estimate: None,
                alternatives: Vec::new(),
            });
        }
        // Since 5.3 BFQ finds a queue's waker and injects its I/O while idling for the
        // queue: the seed-001 cycle costs nothing. Say so, with what the old rules cost.
        if r.env.kernel >= 5003 && base.decision_counts.wakers > 0 {
            for st in w.streams.iter().filter(|st| !st.depends_on.is_empty()) {
                let waker = name(st.depends_on[0].0);
                let comm = st.comm.as_str().to_string();
                let old = r.run(&cfg(
                    SchedKind::Bfq,
                    &[("kernel", "5.2"), ("own_group", comm.as_str())],
                ))?;
                let e = estimate(&old, &base, recorded, &[st.pid]);
                findings.push(Finding {
                    cause: "waker_handled",
                    title: format!(
                        "{}'s next I/O waits for {waker}'s, and BFQ knows it: it detected {waker} \
                         as the waker of {}'s queue and injects its I/O instead of idling (since \
                         5.3): nothing is lost",
                        name(w.streams.iter().position(|x| x.pid == st.pid).unwrap_or(0) as u32),
                        st.comm
                    ),
                    evidence: vec![format!(
                        "model: with pre-5.3 rules (no waker injection) and {} in a cgroup of \
                         its own, as in seed 001, {} would get {:.3} MB/s instead of {:.3} \
                         ({:+.0}%)",
                        st.comm, st.comm, e.predicted_mb_s, e.measured_mb_s, e.change_pct
                    )],
                    estimate: None,
                    latency_estimate: None,
                    alternatives: Vec::new(),
                });
            }
        }
        // Weight raising (low_latency) that costs throughput without any idling to show for
        // it: seed 000, where fresh sequential readers each get raised weights and take the
        // disk from one another at every arrival (a preemption and a seek per request).
        if let Some(f) =
            weight_raising_costs(r, &base_cfg, &base, unseen.as_ref(), recorded, &findings)?
        {
            findings.push(f);
        }
        if let Some(f) = preemption_storm(r, &base_cfg, &base, recorded, &findings)? {
            findings.push(f);
        }
        // Slices too long for the number of processes.
        let busy = w.streams.iter().filter(|s| s.ios > 10).count();
        if busy >= 3 {
            let worst = recorded
                .processes
                .iter()
                .max_by(|a, b| a.q2c_p99_ms.total_cmp(&b.q2c_p99_ms));
            if let Some(p) = worst
                && p.q2c_p99_ms > 100.0
            {
                let alt = r.run(&cfg(SchedKind::MqDeadline, &[]))?;
                let alt_p99 = alt.summary.process(p.pid).map_or(0.0, |q| q.q2c_p99_ms);
                let alt_worst = alt
                    .summary
                    .processes
                    .iter()
                    .map(|q| q.q2c_p99_ms)
                    .fold(0.0, f64::max);
                findings.push(Finding {
                    cause: "slices_too_long",
                    title: format!(
                        "{busy} processes share the disk in BFQ slices: {} waits up to {:.0} \
                         ms (p99 Q2C) for its turn",
                        p.name, p.q2c_p99_ms
                    ),
                    evidence: vec![format!(
                        "model: under mq-deadline its p99 Q2C would be {alt_p99:.0} ms"
                    )],
                    estimate: None,
                    latency_estimate: Some(LatencyEstimate {
                        what_if: alt.config.label.clone(),
                        process: p.name.clone(),
                        measured_p99_q2c_ms: p.q2c_p99_ms,
                        predicted_p99_q2c_ms: alt_p99,
                        predicted_worst_p99_q2c_ms: alt_worst,
                    }),
                    alternatives: Vec::new(),
                });
            }
        }
    }

    if base_cfg.sched == SchedKind::Cfq {
        findings.extend(cfq_idling(r, &base, recorded)?);
    }

    // Missing merges: contiguous bios of one process that went out as separate requests.
    let recorded_ratio = recorded.merge_ratio;
    let contiguous = contiguous_bios(r);
    // Under `none`, a process asleep for a free tag most of its run had more bios ready than
    // the trace shows: its depth is unknown, and so are the merges an elevator would make.
    let held_by_tags = (base_cfg.sched == SchedKind::None)
        .then(|| {
            w.streams
                .iter()
                .filter(|st| st.tag_bound())
                .max_by_key(|st| st.ios)
        })
        .flatten();
    if contiguous.0 > 0
        && recorded_ratio < 1.5
        && let Some(st) = held_by_tags
    {
        findings.extend(merges_if_deeper(r, &base, recorded, st, contiguous)?);
    } else if contiguous.0 > 0 && recorded_ratio < 1.5 {
        let alt = r.run(&cfg(SchedKind::MqDeadline, &[("nomerges", "0")]))?;
        if alt.summary.merge_ratio >= 1.1 * recorded_ratio.max(1.0) {
            let e = estimate(&alt, &base, recorded, &[]);
            findings.push(Finding {
                cause: "missing_merges",
                title: format!(
                    "{} of {} bios continue the previous bio of their process, but the recorded \
                     merge ratio is {:.2}",
                    contiguous.0, contiguous.1, recorded_ratio
                ),
                evidence: vec![format!(
                    "model: under mq-deadline with merging on (nomerges=0) they would merge \
                     ({:.2} bios per request)",
                    alt.summary.merge_ratio
                )],
                estimate: Some(e),
                latency_estimate: None,
                alternatives: Vec::new(),
            });
        }
    }

    findings.extend(wbt_throttling(r, &base_cfg, &base, recorded)?);
    if base_cfg.sched == SchedKind::Kyber {
        findings.extend(kyber_throttling(r, &base_cfg, &base, recorded)?);
    }

    // Seek-bound: positioning's share of the device's time.
    if let Some(share) = positioning_share(r)
        && share > 0.5
    {
        findings.push(Finding {
            cause: "seek_bound",
            title: format!(
                "the disk spends {:.0}% of its busy time positioning (seeks and rotation)",
                share * 100.0
            ),
            evidence: vec![format!(
                "device model: {} requests, fitted from the trace's service times",
                w.service.len()
            )],
            estimate: None,
            latency_estimate: None,
            alternatives: Vec::new(),
        });
    }

    // Other schedulers.
    for alt in SchedKind::ALL {
        if alt == base_cfg.sched {
            continue;
        }
        let run = r.run(&cfg(alt, &[]))?;
        let mut e = estimate(&run, &base, recorded, &[]);
        if e.change_pct >= 25.0 && !findings.iter().any(|f| f.cause == "other_scheduler") {
            let mut evidence = vec![format!(
                "model: {:.2} MB/s under {} vs {:.2} MB/s as recorded",
                run.summary.mb_per_s,
                alt.name(),
                base.summary.mb_per_s
            )];
            if let Some((lr, lb)) = &unseen {
                let le = estimate(&lr.run(&cfg(alt, &[]))?, lb, recorded, &[]);
                evidence.push(range_end_line(&le, alt.name()));
                e.range_end = Some(range_end(&le));
            }
            findings.push(Finding {
                cause: "other_scheduler",
                title: match &e.range_end {
                    Some(l) => format!(
                        "{} would move this workload {:.0}% to {:.0}% faster (the more, the \
                         less time each request spends on its way to the disk: the recording \
                         hid it)",
                        alt.name(),
                        l.change_pct.min(e.change_pct),
                        l.change_pct.max(e.change_pct)
                    ),
                    None => format!(
                        "{} would move this workload {:.0}% faster",
                        alt.name(),
                        e.change_pct
                    ),
                },
                evidence,
                estimate: Some(e),
                latency_estimate: None,
                alternatives: Vec::new(),
            });
        }
    }

    findings.sort_by(|a, b| {
        let e = |f: &Finding| f.estimate.as_ref().map_or(0.0, |e| e.change_pct.abs());
        e(b).total_cmp(&e(a))
    });
    // Characteristics of the workload (seek-bound) are notes, not faults.
    let significant = findings
        .iter()
        .filter(|f| {
            !NOTES.contains(&f.cause)
                && f.estimate
                    .as_ref()
                    .is_none_or(|e| e.change_pct.abs() >= MIN_EFFECT_PCT)
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
    let verdict = if significant == 0 {
        if findings.iter().any(|f| f.cause == "waker_handled") {
            "nothing is wrong: BFQ idles, but it recognised the waker and serves its I/O (the \
             seed-001 collapse is fixed in this kernel)"
                .to_string()
        } else if injected {
            "nothing is wrong: BFQ idled, but it detected the waker and injected its I/O, so no \
             time was lost to idling"
                .to_string()
        } else {
            "nothing is wrong: no change of scheduler or tunable the model tried would gain \
             10% or more"
                .to_string()
        }
    } else {
        format!("{significant} finding(s); the first has the largest estimated effect")
    };
    Ok(Explanation {
        continued: base.continued.clone(),
        device: w.device.name.clone(),
        scheduler: r.recorded_scheduler.clone(),
        kernel: r.env.kernel,
        self_check: SelfCheck {
            recorded_mb_s: recorded.mb_per_s,
            model_mb_s: base.summary.mb_per_s,
            recorded_q2c_ms: recorded.q2c_mean_ms,
            model_q2c_ms: base.summary.q2c_mean_ms,
            fit_r2: r.fit.as_ref().map(|f| f.r2),
            fit_mean_abs_error_pct: r.fit.as_ref().map(|f| f.mean_abs_error_pct),
        },
        findings,
        verdict,
        throttling: w.throttle.clone(),
    })
}

/// The missing-merges finding for a process held back by `none`'s tags: its measured depth
/// is a lower bound, so the trace cannot say how many of its bios would wait in an elevator
/// and merge. What it can say: what merging gives at that measured depth, and what it gives
/// if the process keeps as many in flight as mq-deadline lets exist (`nr_requests`, twice the
/// tags up to 128: `blk_mq_init_sched`), the most an elevator holds before it too puts the
/// process to sleep. The estimate is conditional on that depth, and says so.
fn merges_if_deeper(
    r: &Replayer,
    base: &Run,
    recorded: &Summary,
    st: &super::workload::Stream,
    contiguous: (u64, u64),
) -> Result<Option<Finding>, ReplayError> {
    let tags = r.recorded_depth();
    let nr_requests = 2 * tags.min(128);
    let seen = st.max_in_flight.to_string();
    let measured = r.run(&cfg(
        SchedKind::MqDeadline,
        &[("nomerges", "0"), ("iodepth", seen.as_str())],
    ))?;
    // What a replay does by default ([`super::workload::Stream::replay_window`]), made
    // explicit so that the finding says which depth it assumed.
    let depth = nr_requests.to_string();
    let deeper = r.run(&cfg(
        SchedKind::MqDeadline,
        &[("nomerges", "0"), ("iodepth", depth.as_str())],
    ))?;
    if deeper.summary.merge_ratio < 1.1 * recorded.merge_ratio.max(1.0) {
        return Ok(None);
    }
    let mut e = estimate(&deeper, base, recorded, &[]);
    e.what_if = format!("mq-deadline, if {} keeps {nr_requests} in flight", st.comm);
    let asleep_pct = 100.0 * st.slept_ns as f64 / st.span_ns.max(1) as f64;
    Ok(Some(Finding {
        cause: "missing_merges",
        title: format!(
            "{} of {} bios continue the previous bio of their process, but under none they \
             cannot merge: {} was held back by the {tags} tags, so its real depth, and the \
             merges an elevator would make, are not in the trace",
            contiguous.0, contiguous.1, st.comm
        ),
        evidence: vec![
            format!(
                "measured: at most {} in flight; asleep for a free request before {} of its \
                 {} bios, {asleep_pct:.0}% of its run",
                st.max_in_flight, st.slept_for_request, st.ios
            ),
            format!(
                "model at that depth: under mq-deadline {:.2} bios per request, {:.2} MB/s",
                measured.summary.merge_ratio, measured.summary.mb_per_s
            ),
            format!(
                "model if it keeps {nr_requests} in flight (mq-deadline's nr_requests, twice \
                 the {tags} tags; --set iodepth=N for another depth): {:.2} bios per request, \
                 {:.2} MB/s",
                deeper.summary.merge_ratio, deeper.summary.mb_per_s
            ),
        ],
        estimate: Some(e),
        latency_estimate: None,
        alternatives: Vec::new(),
    }))
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

/// (bios contiguous with their process's previous bio, all bios).
fn contiguous_bios(r: &Replayer) -> (u64, u64) {
    let w = &r.workload;
    let mut last_end = vec![u64::MAX; w.streams.len()];
    let mut n = 0;
    for io in &w.ios {
        if last_end[io.stream as usize] == io.sector && io.sectors > 0 {
            n += 1;
        }
        last_end[io.stream as usize] = io.sector + u64::from(io.sectors);
    }
    (n, w.ios.len() as u64)
}

/// Share of the device's modelled service time spent positioning (rotational only).
fn positioning_share(r: &Replayer) -> Option<f64> {
    if !r.device.rotational() {
        return None;
    }
    let mut head = None;
    let (mut pos, mut total) = (0.0, 0.0);
    for s in &r.workload.service {
        if let Some(h) = head {
            let t = r.device.service_ns(h, s.sector, s.sectors) as f64;
            let stream = r.device.service_ns(s.sector, s.sector, s.sectors) as f64;
            pos += t - stream;
            total += t;
        }
        head = Some(s.sector + u64::from(s.sectors));
    }
    (total > 0.0).then(|| pos / total)
}

/// CFQ's idling (slice_idle, group_idle) on a process whose next I/O waits for another
/// process's: the idle timer runs out while the other process's request waits. With
/// cgroups, `group_idle` holds the device for the last busy queue of a cgroup, and a request
/// of another cgroup (not an ancestor) may not preempt it (seed 001: dd in its own blkio
/// cgroup, jbd2 in the root one).
fn cfq_idling(r: &Replayer, base: &Run, recorded: &Summary) -> Result<Vec<Finding>, ReplayError> {
    let w = &r.workload;
    let name = |s: u32| w.stream_name(s);
    let no_idle = r.run(&cfg(
        SchedKind::Cfq,
        &[("slice_idle", "0"), ("group_idle", "0")],
    ))?;
    let est = estimate(&no_idle, base, recorded, &[]);
    let group_idled = base.decisions.iter().any(|d| {
        matches!(
            d.d,
            Decision::Idle {
                reason: IdleReason::GroupIdle,
                ..
            }
        )
    });
    let no_group_idle = if group_idled {
        Some(r.run(&cfg(SchedKind::Cfq, &[("group_idle", "0")]))?)
    } else {
        None
    };
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
            .get(&super::sched::ExpireReason::TooIdle)
            .copied()
            .unwrap_or(0);
        let group_idles = reasons.get(&IdleReason::GroupIdle).copied().unwrap_or(0);
        let reasons: Vec<String> = reasons
            .iter()
            .map(|(r, k)| format!("{} x{k}", r.name()))
            .collect();
        let mut evidence = vec![format!(
            "model: CFQ idled {n} times on {} ({:.1} ms in all; {too_idle} slices ended \
             by the idle timer); idling because: {}",
            name(s),
            idle_ns as f64 / 1e6,
            reasons.join(", ")
        )];
        let st_cg = st.cgroup_id;
        let other_group = partners
            .iter()
            .find(|p| w.streams[**p as usize].cgroup_id != st_cg)
            .copied();
        let title = if group_idles > 0 && group_idles * 2 >= n {
            if let Some(p) = other_group {
                // `cfqg_is_descendant`: only the idling queue's group or its ancestors
                // preempt it; every group descends from the root.
                let blocked = !is_root(p);
                evidence.push(format!(
                    "trace: {} is in cgroup {}{}, {} in cgroup {}{}: {}",
                    name(s),
                    st_cg,
                    if is_root(s) { " (root)" } else { "" },
                    name(p),
                    w.streams[p as usize].cgroup_id,
                    if is_root(p) { " (root)" } else { "" },
                    if blocked {
                        format!(
                            "CFQ does not let {}'s request preempt a group idle of another \
                             cgroup, so it waits for the idle timer",
                            name(p)
                        )
                    } else {
                        "a request of the root group preempts the idle of a child group".to_string()
                    }
                ));
            }
            if let Some(run) = &no_group_idle {
                let e = estimate(run, base, recorded, &[]);
                evidence.push(format!(
                    "model: with group_idle=0 {:.3} MB/s instead of {:.3} ({:+.0}%)",
                    e.predicted_mb_s, e.measured_mb_s, e.change_pct
                ));
            }
            format!(
                "CFQ group-idles on {} (group_idle: the last busy queue of its cgroup) waiting \
                 for its next request, but that request depends on another process's I/O{}, \
                 which the idling holds back",
                name(s),
                if other_group.is_some() {
                    " in another cgroup"
                } else {
                    ""
                }
            )
        } else {
            format!(
                "CFQ idles on {} waiting for its next request, but that request depends on \
                 another process's I/O, which the idling holds back",
                name(s)
            )
        };
        findings.push(Finding {
            cause: "idling_on_dependency",
            title,
            evidence,
            estimate: Some(est.clone()),
            latency_estimate: None,
            alternatives: Vec::new(),
        });
    }
    Ok(findings)
}

/// Throttle waits below these are noise (a Q->G stretched by preemption that happened to
/// span a completion), not throttling worth a finding.
const MIN_THROTTLED: u64 = 5;
const MIN_THROTTLED_NS: u64 = 1_000_000;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// `0.12-0.50 s, 1.20-1.31 s, ... (N in all)`.
fn intervals_text(iv: &[(u64, u64)]) -> String {
    let mut parts: Vec<String> = iv
        .iter()
        .take(5)
        .map(|(a, b)| format!("{:.3}-{:.3} s", *a as f64 / 1e9, *b as f64 / 1e9))
        .collect();
    if iv.len() > 5 {
        parts.push(format!("... ({} periods in all)", iv.len()));
    }
    parts.join(", ")
}

fn sufferers_text(w: &super::throttle::Waits) -> String {
    let mut parts: Vec<String> = w
        .processes
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
    if w.processes.len() > 4 {
        parts.push(format!("{} more", w.processes.len() - 4));
    }
    parts.join("; ")
}

/// The throttle's effect: `with` replays the recording with the throttle as the trace
/// shows it, `without` with it relaxed; measured numbers scaled by their ratio, for the
/// processes that waited. The other processes' change is told as evidence: relaxing a
/// throttle that protects them can cost them.
fn throttle_estimate(
    with: &Run,
    without: &Run,
    recorded: &Summary,
    waited: &[u32],
    w: &super::workload::Workload,
    without_label: String,
) -> (Estimate, Option<String>) {
    let mut est = estimate(without, with, recorded, waited);
    est.what_if = without_label;
    let others: Vec<u32> = w
        .streams
        .iter()
        .map(|s| s.pid)
        .filter(|p| !waited.contains(p))
        .collect();
    let note = (!others.is_empty()).then(|| {
        let o = estimate(without, with, recorded, &others);
        let p99 = |run: &Run| {
            run.summary
                .processes
                .iter()
                .filter(|p| others.contains(&p.pid))
                .map(|p| p.q2c_p99_ms)
                .fold(0.0, f64::max)
        };
        format!(
            "model: the other processes get {:.3} MB/s instead of {:.3} ({:+.0}%), their worst \
             p99 Q2C {:.1} ms instead of {:.1}",
            o.predicted_mb_s,
            o.measured_mb_s,
            o.change_pct,
            p99(without),
            p99(with)
        )
    });
    (est, note)
}

/// Writeback throttling: buffered writes that waited between Q and G with requests free.
fn wbt_throttling(
    r: &Replayer,
    base_cfg: &Config,
    base: &Run,
    recorded: &Summary,
) -> Result<Option<Finding>, ReplayError> {
    let w = &r.workload;
    let wbt = &w.throttle.wbt;
    let waits = &wbt.waits;
    if waits.count < MIN_THROTTLED || waits.total_ns < MIN_THROTTLED_NS {
        return Ok(None);
    }
    // The depth wbt had when they waited, where the trace has its steps; else the most it
    // let through.
    let limit = wbt.max_depth_at_waits.unwrap_or(wbt.limit_seen).max(1);
    // Most waits ended when the writes had drained: wbt's rule on a device with a write
    // cache; the replay follows it.
    let drain = 2 * wbt.woken_when_drained > waits.count;
    let mut with_cfg = base_cfg.clone();
    with_cfg
        .settings
        .0
        .insert("wbt_limit".into(), limit.to_string());
    if drain {
        with_cfg.settings.0.insert("wbt_drain".into(), "1".into());
    }
    with_cfg.label = format!(
        "{} with wbt (at most {limit} buffered writes{})",
        base_cfg.label,
        if drain {
            ", sleepers woken when they drain"
        } else {
            ""
        }
    );
    let with = r.run(&with_cfg)?;
    let without = base;
    let label = format!(
        "{} without wbt (queue/wbt_lat_usec=0)",
        base_cfg.sched.name()
    );
    let waited: Vec<u32> = waits.processes.iter().map(|p| p.pid).collect();
    let (est, others) = throttle_estimate(&with, without, recorded, &waited, w, label);
    let mut evidence = vec![
        format!(
            "trace: {} buffered-write bios waited between Q and G (rq_qos_throttle, before \
             their request was allocated) while requests were free (at most {} may exist): \
             {:.1} ms in all, p99 {:.2} ms, max {:.2} ms",
            waits.count,
            wbt.requests_cap,
            ms(waits.total_ns),
            ms(waits.p99_ns),
            ms(waits.max_ns)
        ),
        format!("trace: when: {}", intervals_text(&waits.intervals)),
        format!("trace: who waited: {}", sufferers_text(waits)),
        format!(
            "trace: wbt let up to {} buffered writes hold requests at once{}; {} of the {} \
             waits ended only when they had all completed{}",
            wbt.limit_seen,
            wbt.max_depth_at_waits.map_or_else(String::new, |d| format!(
                ", its max depth was {d} when they waited (wbt_step)"
            )),
            wbt.woken_when_drained,
            waits.count,
            if wbt.tag_bound > 0 {
                format!(
                    "; {} more Q->G waits of buffered writes came with every request in use \
                     (tag waits, not counted)",
                    wbt.tag_bound
                )
            } else {
                String::new()
            }
        ),
    ];
    let steps = &w.throttle.wbt_steps;
    if let (Some(lo), Some(hi)) = (
        steps.iter().min_by_key(|s| s.max),
        steps.iter().max_by_key(|s| s.step),
    ) {
        evidence.push(format!(
            "trace: {} wbt_step events: scale step up to {}, limits down to background {} / \
             normal {} / max {}, window {} µs",
            steps.len(),
            hi.step,
            lo.background,
            lo.normal,
            lo.max,
            lo.window_us
        ));
    }
    evidence.push(format!(
        "tunable: /sys/block/{}/queue/wbt_lat_usec (wbt's read-latency target: 0 turns wbt \
         off, a larger one throttles less)",
        w.device.name
    ));
    evidence.push(format!(
        "model: the replay as recorded plus a wbt limit of {limit} gives the waiting \
         processes {:.3} MB/s; without wbt {:.3} MB/s",
        mb_s(&with.summary, &waited),
        mb_s(&without.summary, &waited)
    ));
    evidence.extend(others);
    let title = format!(
        "writeback throttling (wbt) held {} buffered writes of {} before their requests were \
         allocated: {:.1} ms of waiting, p99 {:.2} ms",
        waits.count,
        waits
            .processes
            .first()
            .map_or_else(String::new, |p| format!("{}({})", p.comm, p.pid)),
        ms(waits.total_ns),
        ms(waits.p99_ns)
    );
    Ok(Some(throttle_finding(
        ["wbt_throttling", "wbt_throttling_pays"],
        title,
        ("without wbt", ", the writes crowding the device"),
        evidence,
        est,
    )))
}

/// A throttling finding; throttling that the model says pays for itself (removing it costs
/// [`MIN_EFFECT_PCT`] or more) is a note, not a fault: `causes[1]`, and the title says so
/// (`fix`: the what-if in words, and what follows the figure).
fn throttle_finding(
    causes: [&'static str; 2],
    title: String,
    fix: (&str, &str),
    evidence: Vec<String>,
    est: Estimate,
) -> Finding {
    let pays = est.change_pct <= -MIN_EFFECT_PCT;
    Finding {
        cause: causes[usize::from(pays)],
        title: if pays {
            format!(
                "{title}; it pays: {} the model predicts {:.0}% less for them{}",
                fix.0, -est.change_pct, fix.1
            )
        } else {
            title
        },
        evidence,
        estimate: Some(est),
        latency_estimate: None,
        alternatives: Vec::new(),
    }
}

/// BFQ with low_latency on, where the model predicts that turning it off gains at least
/// [`MIN_EFFECT_PCT`] and no finding already cites that what-if: what weight raising did
/// (preemptions above all: a raised queue that becomes busy takes the disk from the one in
/// service, `bfq_bfqq_handle_idle_busy_switch`), against the run without it.
fn weight_raising_costs(
    r: &Replayer,
    base_cfg: &Config,
    base: &Run,
    unseen: Option<&(Replayer, Run)>,
    recorded: &Summary,
    findings: &[Finding],
) -> Result<Option<Finding>, ReplayError> {
    if base_cfg.settings.0.get("low_latency").map(String::as_str) == Some("0")
        || base.decision_counts.raises == 0
    {
        return Ok(None);
    }
    const WHAT_IF: &str = "bfq:low_latency=0";
    if findings
        .iter()
        .any(|f| f.estimate.as_ref().is_some_and(|e| e.what_if == WHAT_IF))
    {
        return Ok(None);
    }
    let mut off = base_cfg.clone();
    off.settings.0.insert("low_latency".into(), "0".into());
    off.label = WHAT_IF.into();
    let plain = r.run(&off)?;
    let mut est = estimate(&plain, base, recorded, &[]);
    if est.change_pct < MIN_EFFECT_PCT {
        return Ok(None);
    }
    let expirations = |run: &Run| -> (u64, u64) {
        let e = &run.decision_counts.expirations;
        (e.values().sum(), e.get("preempted").copied().unwrap_or(0))
    };
    let ((all, preempted), (_, preempted_off)) = (expirations(base), expirations(&plain));
    let mut evidence = vec![format!(
        "model: as recorded, BFQ raised {} queue weight(s)",
        base.decision_counts.raises
    )];
    if preempted > 0 {
        evidence[0].push_str(&format!(
            "; {preempted} of its {all} service slots ended by preemption (a queue with raised \
             weight that becomes busy takes the disk from the one in service: a switch, and \
             on a disk a seek)"
        ));
    }
    let mut off_line = format!(
        "model: with low_latency=0, {:.3} MB/s instead of {:.3}",
        plain.summary.mb_per_s, base.summary.mb_per_s
    );
    if preempted_off != preempted {
        off_line.push_str(&format!(", {preempted_off} preemptions"));
    }
    let (m, m_off) = (base.summary.merge_ratio, plain.summary.merge_ratio);
    if m_off > 1.05 * m {
        off_line.push_str(&format!(
            ", {m_off:.2} bios per request instead of {m:.2} (while a raised queue is busy, BFQ \
             lets async I/O and sync writes use fewer requests, `bfq_limit_depth`: fewer wait \
             long enough to merge)"
        ));
    }
    evidence.push(off_line);
    let alternative = lower_priority_alternative(r, base_cfg, base, recorded, unseen)?;
    if let Some((line, _)) = &alternative {
        evidence.push(line.clone());
    }
    // As for another scheduler: where the recording hid the per-request latency, the other
    // end of the estimate has none of it (a streaming queue pays it on every request).
    if let Some((lr, lb)) = unseen {
        let le = estimate(&lr.run(&off)?, lb, recorded, &[]);
        evidence.push(range_end_line(&le, "BFQ with low_latency=0"));
        est.range_end = Some(range_end(&le));
    }
    Ok(Some(Finding {
        cause: "weight_raising_costs_throughput",
        title: match &est.range_end {
            Some(l) => format!(
                "BFQ's low-latency heuristics cost this workload its throughput: with \
                 low_latency=0 the model predicts {:.0}% to {:.0}% more (the less, the more \
                 time each request spends on its way to the disk: the recording hid it)",
                l.change_pct.min(est.change_pct),
                l.change_pct.max(est.change_pct)
            ),
            None => format!(
                "BFQ's low-latency heuristics cost this workload its throughput: with \
                 low_latency=0 the model predicts {:.0}% more",
                est.change_pct
            ),
        },
        evidence,
        estimate: Some(est),
        latency_estimate: None,
        alternatives: alternative.and_then(|(_, e)| e).into_iter().collect(),
    }))
}

/// BFQ's slice_idle as recorded (`slice_idle_us`, else `slice_idle` in ms; 8 ms when the
/// recording does not say).
fn recorded_slice_idle_ns(w: &super::workload::Workload) -> u64 {
    let get = |k: &str| {
        w.device
            .iosched
            .get(k)
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    get("slice_idle_us")
        .map(|us| us * 1000)
        .or_else(|| get("slice_idle").map(|ms| ms * 1_000_000))
        .unwrap_or(8_000_000)
}

/// The model's own run is in a preemption storm: most of its service slots ended by
/// preemption, at least [`storm::MIN_SWITCHES`] of them.
fn model_storms(run: &Run) -> (bool, u64, u64) {
    let e = &run.decision_counts.expirations;
    let all: u64 = e.values().sum();
    let preempted = e.get("preempted").copied().unwrap_or(0);
    (
        preempted >= storm::MIN_SWITCHES && 2 * preempted >= all,
        preempted,
        all,
    )
}

/// BFQ's queues taking the disk from one another at (almost) every request without raised
/// weights: the hole-recovery preemption ([`storm`]), named from the recording itself, from
/// BFQ's log when it has one, else inferred from the trace's service slices. A replay need
/// not enter the storm (it hangs on events microseconds apart, and a replay's timing is not
/// the recording's), so the model gives the other side only: the workload's throughput out
/// of the storm, from the replay as recorded when it stays out, else from the replay with
/// slice_idle doubled (long enough for the pause that started it). That estimate is the
/// model's throughput itself, not a ratio to the replay as recorded: the storm is a state
/// the recording was in and a replay may not be, not a constant factor between them. The
/// recording's own rate outside the storm is the other end of the range.
fn preemption_storm(
    r: &Replayer,
    base_cfg: &Config,
    base: &Run,
    recorded: &Summary,
    findings: &[Finding],
) -> Result<Option<Finding>, ReplayError> {
    if findings
        .iter()
        .any(|f| f.cause == "weight_raising_costs_throughput")
    {
        return Ok(None);
    }
    let w = &r.workload;
    let slice_idle_ns = recorded_slice_idle_ns(w);
    if slice_idle_ns == 0 {
        return Ok(None);
    }
    let Some(storm) = storm::find(w, &r.notes, slice_idle_ns) else {
        return Ok(None);
    };
    // Without BFQ's word, turns taken among queues the model raises are the raising's.
    let inferred = storm.source == storm::Source::Inferred;
    if inferred && base.decision_counts.raises > 0 {
        return Ok(None);
    }
    let name = |s: u32| w.stream_name(s);
    let at = |t: u64| t.saturating_sub(w.start_ns) as f64 / 1e9;
    let slice_idle_ms = ms(slice_idle_ns);
    let mut evidence = Vec::new();
    let began = match &storm.log {
        Some(l) => {
            evidence.push(format!(
                "BFQ's log: {} of its {} expirations were `preempted` (reason 4), {} of them \
                 in a row, and none of their queues had a raised weight",
                l.preempted, l.expirations, l.in_a_row
            ));
            match &l.started_by {
                Some((t, pid, reason, line)) => {
                    evidence.push(format!(
                        "BFQ's log: the run began at {:.3} s, when queue {pid} expired {}: \
                         `{line}`; the first preemption came {:.2} ms later: `{}`",
                        at(*t),
                        reason.name(),
                        ms(l.first.0.saturating_sub(*t)),
                        l.first.1
                    ));
                    format!(", after queue {pid} expired {}", reason.name())
                }
                None => {
                    evidence.push(format!(
                        "BFQ's log: the run began with the log's first expiration, at {:.3} \
                         s: `{}`",
                        at(l.first.0),
                        l.first.1
                    ));
                    String::new()
                }
            }
        }
        None => {
            let before = storm.slices_before.map_or_else(String::new, |(lo, hi)| {
                format!(" (before it, this recording's slices had {lo} to {hi} requests)")
            });
            evidence.push(format!(
                "trace (inferred: the recording has no BFQ log; `record --sched-log` keeps \
                 it): from {:.3} s to {:.3} s, {} requests of {} came in {} service slices of \
                 at most {} requests, alternating between sequential processes, {} of the {} \
                 switches a seek. BFQ idles (slice_idle {slice_idle_ms} ms) for a sequential \
                 process and serves it in slices of hundreds of requests{before}: slices this \
                 short say its queues took the disk from each other",
                at(storm.start_ns),
                at(storm.end_ns),
                storm.requests,
                storm
                    .streams
                    .iter()
                    .map(|&s| name(s))
                    .collect::<Vec<_>>()
                    .join(", "),
                storm.slices,
                storm::SHORT_SLICE,
                storm.seeks,
                storm.slices.saturating_sub(1)
            ));
            String::new()
        }
    };
    let label = if inferred {
        "trace (inferred)"
    } else {
        "trace"
    };
    match storm.pause {
        Some(p) if p.ns() > slice_idle_ns => evidence.push(format!(
            "{label}: {} paused {:.2} ms ({:.3} s to {:.3} s, its completion to its next \
             request), longer than slice_idle ({slice_idle_ms} ms): BFQ expired its queue \
             waiting, and its next request, within 3 x slice_idle, took the disk back",
            name(p.stream),
            ms(p.ns()),
            at(p.from_ns),
            at(p.to_ns)
        )),
        Some(p) => evidence.push(format!(
            "{label}: no process paused longer than slice_idle ({slice_idle_ms} ms) around \
             its start (the longest: {} {:.2} ms, at {:.3} s): what started it is not in \
             the trace",
            name(p.stream),
            ms(p.ns()),
            at(p.from_ns)
        )),
        None => {}
    }
    evidence.push(format!(
        "kernel: a queue expired empty (too idle, or preempted with its one request in \
         flight) is marked non_blocking_wait_rq, and its next request, arriving within 3 x \
         slice_idle ({} ms) of its last completion with budget left, expires the queue in \
         service (bfq_bfqq_update_budg_for_activation, bfq_bfqq_handle_idle_busy_switch): a \
         switch, and on a disk a seek, per request until a budget runs out",
        3.0 * slice_idle_ms
    ));
    evidence.push(format!(
        "trace: {:.3} MB/s during it{}",
        storm.mb_s_in,
        storm
            .mb_s_outside
            .map_or_else(String::new, |m| format!(", {m:.3} MB/s outside it"))
    ));
    let (base_storms, n, all) = model_storms(base);
    evidence.push(if base_storms {
        format!(
            "model: its replay as recorded enters it too ({n} of {all} service slots ended \
             by preemption): {:.3} MB/s",
            base.summary.mb_per_s
        )
    } else {
        format!(
            "model: its replay as recorded stays out of it ({n} of {all} service slots ended \
             by preemption): {:.3} MB/s, the workload without the storm",
            base.summary.mb_per_s
        )
    });
    let (key, value) = if slice_idle_ns.is_multiple_of(1_000_000) {
        ("slice_idle", (2 * slice_idle_ns / 1_000_000).to_string())
    } else {
        ("slice_idle_us", (2 * slice_idle_ns / 1000).to_string())
    };
    let what_if = format!("bfq:{key}={value}");
    let mut longer = base_cfg.clone();
    longer.settings.0.remove("slice_idle_us");
    longer.settings.0.insert(key.into(), value);
    longer.label = what_if.clone();
    let fixed = r.run(&longer)?;
    let (fixed_storms, fixed_n, _) = model_storms(&fixed);
    let fits = storm
        .pause
        .is_some_and(|p| p.ns() > slice_idle_ns && p.ns() <= 2 * slice_idle_ns);
    evidence.push(format!(
        "model: with {what_if}{}, {fixed_n} preemptions and {:.3} MB/s",
        if fits {
            " (the pause fits in the idling)"
        } else {
            ""
        },
        fixed.summary.mb_per_s
    ));
    let measured = recorded.mb_per_s;
    let absolute = |label: &str, mb_s: f64| Estimate {
        what_if: label.to_owned(),
        measured_mb_s: measured,
        predicted_mb_s: mb_s,
        change_pct: if measured > 0.0 {
            100.0 * (mb_s / measured - 1.0)
        } else {
            0.0
        },
        range_end: None,
    };
    let outside = storm.mb_s_outside.map(|m| RangeEnd {
        basis: "the recording's own rate outside the storm".into(),
        predicted_mb_s: m,
        change_pct: absolute("", m).change_pct,
    });
    const OUT_OF_IT: &str = "bfq as recorded, out of the storm";
    let mut alternatives = Vec::new();
    let mut est = if !base_storms {
        if !fixed_storms {
            alternatives.push(absolute(&what_if, fixed.summary.mb_per_s));
        }
        Some(absolute(OUT_OF_IT, base.summary.mb_per_s))
    } else if !fixed_storms {
        Some(absolute(&what_if, fixed.summary.mb_per_s))
    } else {
        // The model storms either way: the recording's own rate outside it is all there is.
        outside
            .as_ref()
            .map(|o| absolute(OUT_OF_IT, o.predicted_mb_s))
    };
    if let Some(e) = est.as_mut()
        && !(base_storms && fixed_storms)
    {
        e.range_end = outside.clone();
    }
    let from = at(storm.start_ns);
    let kind = if inferred {
        format!(
            "the trace shows BFQ's queues taking the disk from each other at almost every \
             request from {from:.3} s (inferred without BFQ's log: a preemption storm)"
        )
    } else {
        format!(
            "BFQ's log shows its queues preempting each other at almost every request from \
             {from:.3} s{began}, without raised weights (a preemption storm)"
        )
    };
    let title = match &est {
        Some(e) => {
            let (lo, hi) = match &e.range_end {
                Some(o) => (
                    o.predicted_mb_s.min(e.predicted_mb_s),
                    o.predicted_mb_s.max(e.predicted_mb_s),
                ),
                None => (e.predicted_mb_s, e.predicted_mb_s),
            };
            let range = if hi - lo >= 0.05 * hi {
                format!(
                    "{lo:.1} to {hi:.1} MB/s ({:+.0}% to {:+.0}%)",
                    100.0 * (lo / measured.max(1e-9) - 1.0),
                    100.0 * (hi / measured.max(1e-9) - 1.0)
                )
            } else {
                format!("{:.1} MB/s ({:+.0}%)", e.predicted_mb_s, e.change_pct)
            };
            format!("{kind}: out of it this workload runs at {range} instead of {measured:.1} MB/s")
        }
        None => format!("{kind}; the model enters it too, even with a longer slice_idle"),
    };
    Ok(Some(Finding {
        cause: "preemption_storm",
        title,
        evidence,
        estimate: est,
        latency_estimate: None,
        alternatives,
    }))
}

/// Best-effort 5: one level below the default, the smallest change of weight.
const IOPRIO_BE5: u16 = (2 << 13) | 5;

/// Since 5.12 BFQ raises only queues of the default weight ("the user wanted to control
/// its weight explicitly" otherwise), so a lower I/O priority on the raised processes alone
/// spares them the raising, and leaves the low-latency heuristics on for every other
/// process of the device: the per-process alternative to low_latency=0. When all the raised
/// processes ran at the default priority: the model's effect of it as an evidence line, and,
/// when they are every process of the device, as an estimate (`ioprio=be/5`, which a run of
/// the whole workload under `ionice -c2 -n5` realises).
fn lower_priority_alternative(
    r: &Replayer,
    base_cfg: &Config,
    base: &Run,
    recorded: &Summary,
    unseen: Option<&(Replayer, Run)>,
) -> Result<Option<(String, Option<Estimate>)>, ReplayError> {
    if r.env.kernel < 5012 {
        return Ok(None);
    }
    let raised: BTreeSet<u32> = base
        .decisions
        .iter()
        .filter_map(|d| match d.d {
            Decision::Raise { stream, .. } => Some(stream),
            _ => None,
        })
        .collect();
    let streams = &r.workload.streams;
    // Class none (the priority follows nice 0) or best-effort 4.
    let default_priority = |s: &u32| {
        streams
            .get(*s as usize)
            .is_some_and(|st| st.ioprio >> 13 == 0 || st.ioprio == (2 << 13) | 4)
    };
    if raised.is_empty() || !raised.iter().all(default_priority) {
        return Ok(None);
    }
    let raised: Vec<u32> = raised.into_iter().collect();
    let every = raised.len() == streams.len();
    let (lowered, est) = if every {
        let mut cfg = base_cfg.clone();
        cfg.settings.0.insert("ioprio".into(), "be/5".into());
        cfg.label = format!("{}:ioprio=be/5", base_cfg.sched.name());
        let run = r.run(&cfg)?;
        let mut est = estimate(&run, base, recorded, &[]);
        if let Some((lr, lb)) = unseen {
            let le = estimate(&lr.run(&cfg)?, lb, recorded, &[]);
            est.range_end = Some(range_end(&le));
        }
        (run, Some(est))
    } else {
        (r.with_ioprio(&raised, IOPRIO_BE5).run(base_cfg)?, None)
    };
    let e = est
        .clone()
        .unwrap_or_else(|| estimate(&lowered, base, recorded, &[]));
    let mut pids: Vec<u32> = raised
        .iter()
        .filter_map(|&s| streams.get(s as usize).map(|st| st.pid))
        .collect();
    pids.sort_unstable();
    let shown: Vec<String> = pids.iter().take(4).map(u32::to_string).collect();
    let more = if pids.len() > 4 { " ..." } else { "" };
    let line = format!(
        "model: the {} raised process(es) at I/O priority best-effort 5 instead of the \
         default (`ionice -c2 -n5 -p {}{more}`), low_latency left on for the rest: {:.3} MB/s \
         ({:+.0}%); since 5.12 BFQ raises no queue whose weight the user set",
        raised.len(),
        shown.join(" "),
        e.predicted_mb_s,
        e.change_pct
    );
    Ok(Some((line, est)))
}

/// Kyber: requests that waited in a domain whose tokens had run out.
fn kyber_throttling(
    r: &Replayer,
    base_cfg: &Config,
    base: &Run,
    recorded: &Summary,
) -> Result<Option<Finding>, ReplayError> {
    use super::throttle::{KYBER_DEPTH, KYBER_DOMAINS};
    let w = &r.workload;
    let domains: Vec<&super::throttle::KyberDomain> = w
        .throttle
        .kyber
        .iter()
        .filter(|d| d.waits.count >= MIN_THROTTLED && d.waits.total_ns >= MIN_THROTTLED_NS)
        .collect();
    if domains.is_empty() {
        return Ok(None);
    }
    let mut with_cfg = base_cfg.clone();
    let mut depths = Vec::new();
    for d in &domains {
        if let Some(depth) = d.depth_at_throttle {
            with_cfg
                .settings
                .0
                .insert(format!("{}_depth", d.name), depth.to_string());
            depths.push(format!("{} {depth}", d.name));
        }
    }
    with_cfg.label = format!("{} with depths {}", base_cfg.label, depths.join(", "));
    let with = r.run(&with_cfg)?;
    let without = base;
    let label = format!(
        "kyber at its initial depths ({})",
        domains
            .iter()
            .map(|d| {
                let k = KYBER_DOMAINS.iter().position(|n| *n == d.name).unwrap_or(3);
                format!("{} {}", d.name, KYBER_DEPTH[k])
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut waited: Vec<u32> = domains
        .iter()
        .flat_map(|d| d.waits.processes.iter().map(|p| p.pid))
        .collect();
    waited.sort_unstable();
    waited.dedup();
    let (est, others) = throttle_estimate(&with, without, recorded, &waited, w, label);
    let mut evidence = Vec::new();
    for d in &domains {
        evidence.push(format!(
            "trace: {} kyber_throttled events for the {} domain; {} of its requests waited \
             between I and D while its tokens were out: {:.1} ms in all, p99 {:.2} ms, max \
             {:.2} ms",
            d.throttled_events,
            d.name,
            d.waits.count,
            ms(d.waits.total_ns),
            ms(d.waits.p99_ns),
            ms(d.waits.max_ns)
        ));
        evidence.push(format!(
            "trace: {} depth {}; when: {}; who waited: {}",
            d.name,
            match (d.depth_range, d.depth_at_throttle) {
                (Some((lo, hi)), Some(at)) =>
                    format!("set by kyber_adjust between {lo} and {hi}, {at} at most throttles"),
                (_, Some(at)) => format!("{at} at the throttles (no kyber_adjust seen)"),
                _ => "unknown".to_string(),
            },
            intervals_text(&d.waits.intervals),
            sufferers_text(&d.waits)
        ));
    }
    let lat = |k: &str| {
        w.device
            .iosched
            .get(k)
            .map_or_else(|| "?".to_string(), |v| v.trim().to_string())
    };
    evidence.push(format!(
        "tunable: /sys/block/{}/queue/iosched/read_lat_nsec ({}) and write_lat_nsec ({}): \
         Kyber shrinks a domain's depth when latencies exceed them; larger targets throttle \
         less",
        w.device.name,
        lat("read_lat_nsec"),
        lat("write_lat_nsec")
    ));
    evidence.push(format!(
        "model: Kyber held at those depths gives the waiting processes {:.3} MB/s; at its \
         initial depths {:.3} MB/s",
        mb_s(&with.summary, &waited),
        mb_s(&without.summary, &waited)
    ));
    evidence.extend(others);
    let total: u64 = domains.iter().map(|d| d.waits.count).sum();
    let total_ns: u64 = domains.iter().map(|d| d.waits.total_ns).sum();
    let title = format!(
        "Kyber throttled the {} domain{}: {total} requests waited for a token, {:.1} ms in all",
        domains
            .iter()
            .map(|d| d.name)
            .collect::<Vec<_>>()
            .join(" and "),
        if domains.len() > 1 { "s" } else { "" },
        ms(total_ns)
    );
    Ok(Some(throttle_finding(
        ["kyber_throttling", "kyber_throttling_pays"],
        title,
        ("at its initial depths", ""),
        evidence,
        est,
    )))
}
