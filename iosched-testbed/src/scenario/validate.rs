//! Validating the scheduler model against the test bed (`cargo xtask validate`, and the
//! root tests in `tests/tests/model.rs`).
//!
//! A scenario's runs are grouped by workload (same workload, same queue settings outside
//! `iosched/`): the runs of one group differ only in the scheduler and its tunables, so each
//! one is what the model must predict from another. Every group gets a `none` run (the
//! recording the model replays) and a default `bfq` and `mq-deadline` run when the scenario
//! has none. Then:
//! - cross-prediction: the `none` recording replayed under each other run's configuration,
//!   beside that run's recording;
//! - self-consistency: each recording replayed under the configuration it was recorded with.
//!
//! Both sides are measured by `iosched-trace replay --json`, so a recorded and a predicted
//! number share one definition (the report's).
//!
//! Owns: the validation plan and its numbers. Must not: bring disks up (the runner does).

use std::{
    path::Path,
    process::{Command, Stdio},
};

use serde::Serialize;
use serde_json::Value;

use super::{Run, Scenario, ScenarioError, Workload};

/// Runs that differ only in the scheduler and its tunables.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// What the runs share, as their labels say (`2j`, `qd256-nomerges0`; empty when the
    /// scenario has one workload).
    pub name: String,
    /// The `none` run: the recording replayed.
    pub none: String,
    /// The other runs: the realities predicted.
    pub others: Vec<String>,
}

/// The scenario with the runs validation needs added, and its groups.
pub fn plan(scenario: &Scenario) -> (Scenario, Vec<Group>) {
    let mut keys: Vec<String> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, run) in scenario.runs.iter().enumerate() {
        let key = group_key(run);
        match keys.iter().position(|k| *k == key) {
            Some(g) => members[g].push(i),
            None => {
                keys.push(key);
                members.push(vec![i]);
            }
        }
    }
    let mut runs: Vec<Run> = Vec::new();
    let mut groups = Vec::new();
    for idx in members {
        let labels: Vec<&str> = idx
            .iter()
            .map(|&i| scenario.runs[i].label.as_str())
            .collect();
        let suffix = shared_suffix(&labels);
        let first = &scenario.runs[idx[0]];
        let shared_settings: Vec<(&'static str, String)> = first
            .settings
            .iter()
            .filter(|(a, _)| !a.starts_with("iosched/"))
            .cloned()
            .collect();
        let mut group_runs: Vec<Run> = idx.iter().map(|&i| scenario.runs[i].clone()).collect();
        for sched in ["none", "bfq", "mq-deadline"] {
            if !group_runs.iter().any(|r| r.scheduler == sched) {
                group_runs.push(Run {
                    label: format!("{sched}{suffix}"),
                    scheduler: sched,
                    settings: shared_settings.clone(),
                    workload: first.workload.clone(),
                    ioprio: None,
                });
            }
        }
        let none = group_runs
            .iter()
            .find(|r| r.scheduler == "none")
            .map(|r| r.label.clone())
            .expect("added above");
        groups.push(Group {
            name: suffix.trim_start_matches('-').to_owned(),
            others: group_runs
                .iter()
                .filter(|r| r.label != none)
                .map(|r| r.label.clone())
                .collect(),
            none,
        });
        runs.extend(group_runs);
    }
    (
        Scenario {
            runs,
            ..scenario.clone()
        },
        groups,
    )
}

fn group_key(run: &Run) -> String {
    let mut shared: Vec<String> = run
        .settings
        .iter()
        .filter(|(a, _)| !a.starts_with("iosched/"))
        .map(|(a, v)| format!("{a}={v}"))
        .collect();
    shared.sort();
    format!("{} | {}", run.workload, shared.join(","))
}

/// The end the labels of one group share, from a `-` on (`-2j` of `bfq-ll1-2j` and
/// `none-2j`); for a lone run, its label from its first `-` (`-qd32-nomerges0` of
/// `dl-qd32-nomerges0`); empty when they share nothing (`bfq`, `mq-deadline`).
fn shared_suffix(labels: &[&str]) -> String {
    if let [one] = labels {
        return one.find('-').map_or(String::new(), |i| one[i..].to_owned());
    }
    let first = labels[0];
    let mut n = 0;
    while n < first.len()
        && labels.iter().all(|l| {
            l.len() > n && l.as_bytes()[l.len() - 1 - n] == first.as_bytes()[first.len() - 1 - n]
        })
    {
        n += 1;
    }
    let tail = &first[first.len() - n..];
    tail.find('-')
        .map_or(String::new(), |i| tail[i..].to_owned())
}

/// The model configuration of a run, as `iosched-trace replay --sched` takes it:
/// `bfq:low_latency=0`, `mq-deadline:nomerges=2`; `bfq:own_group=dd` for a dsync-journal run.
pub fn replay_spec(run: &Run) -> String {
    let mut pairs: Vec<String> = run
        .settings
        .iter()
        .map(|(a, v)| format!("{}={v}", a.trim_start_matches("iosched/")))
        .chain(run.ioprio.map(|p| format!("ioprio={p}")))
        .collect();
    // The runner starts a dsync-journal's dd in a blkio cgroup of its own, which a recording
    // on a host with a v1 blkio hierarchy cannot see (it records cgroup v2 ids): the model
    // is told. Of the schedulers run here only BFQ schedules by group.
    if run.scheduler == "bfq" && matches!(run.workload, Workload::DsyncJournal { .. }) {
        pairs.push("own_group=dd".into());
    }
    if pairs.is_empty() {
        run.scheduler.to_owned()
    } else {
        format!("{}:{}", run.scheduler, pairs.join(","))
    }
}

/// The numbers compared, for a recording or a prediction.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Numbers {
    pub mb_per_s: f64,
    pub q2c_mean_ms: f64,
    pub q2c_max_ms: f64,
    /// Device idle while I/O waited, % of the run.
    pub idle_pct: f64,
    pub merge_ratio: f64,
    pub requests: u64,
    /// The highest p99 Q2C of any process, ms (0 without processes).
    pub worst_p99_q2c_ms: f64,
    /// Mean seek between consecutive dispatches, MiB (`d2d_seek_mean_sectors`).
    pub seek_mib: f64,
}

impl Numbers {
    fn of(summary: &Value) -> Numbers {
        let f = |k: &str| summary.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let dur = f("duration_s");
        Numbers {
            mb_per_s: f("mb_per_s"),
            q2c_mean_ms: f("q2c_mean_ms"),
            q2c_max_ms: f("q2c_max_ms"),
            idle_pct: if dur > 0.0 {
                f("idle_with_pending_ms") / 10.0 / dur
            } else {
                0.0
            },
            merge_ratio: f("merge_ratio"),
            requests: summary.get("requests").and_then(Value::as_u64).unwrap_or(0),
            seek_mib: f("d2d_seek_mean_sectors") / 2048.0,
            worst_p99_q2c_ms: summary
                .get("processes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("q2c_p99_ms").and_then(Value::as_f64))
                .fold(0.0, f64::max),
        }
    }
}

/// One replay: the recording's own numbers and the model's under `spec`, with the model's
/// decision counts (JSON, as `replay --json` gives them).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Replayed {
    pub recorded: Numbers,
    pub predicted: Numbers,
    pub decisions: Value,
    /// The recording carries BFQ's own log and `spec` is a BFQ configuration (the replay
    /// compared its decisions with the log).
    pub has_bfq_log: bool,
    /// The trace-driven decision check against that log, when the replay made one.
    pub agreement: Option<Agreement>,
    /// Each process of the recorded workload: its `comm` and I/O priority.
    pub processes: Vec<(String, u16)>,
}

/// The agreement a recording with BFQ's log must reach: % of expirations at the same point
/// with the same reason (issue 7).
pub const AGREEMENT_TARGET_PCT: f64 = 90.0;

/// The trace-driven decision check of a BFQ recording against BFQ's own log, as
/// `replay --json` gives it (`runs[0].decision_check`, computed by the library's
/// `model::bfqcheck`): read here, not recomputed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Agreement {
    /// Queues BFQ put in service (`set_in_service_queue` notes), and the model's.
    pub log_switches: u64,
    pub model_switches: u64,
    /// Expirations: BFQ's, the model's, and those at the same point with the same reason.
    pub log_expirations: u64,
    pub model_expirations: u64,
    pub matched: u64,
    /// `matched` over the larger of the two expiration counts, %.
    pub agreement_pct: f64,
    /// At the same point whatever the reason, %.
    pub points_agreement_pct: f64,
    /// BFQ's switches where the model named the next queue, and the % it named BFQ's.
    pub next_queue_checked: u64,
    pub next_queue_agreement_pct: f64,
}

impl Agreement {
    /// From a `decision_check` object; an error names the first field missing.
    pub fn from_decision_check(check: &Value) -> Result<Agreement, String> {
        let e = check
            .get("expirations")
            .ok_or("decision_check has no expirations")?;
        let num = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_f64)
                .ok_or(format!("decision_check has no {k}"))
        };
        let count = |v: &Value, k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or(format!("decision_check has no {k}"))
        };
        // Expirations by reason: their sum.
        let total = |k: &str| -> Result<u64, String> {
            let by_reason = e
                .get(k)
                .and_then(Value::as_object)
                .ok_or(format!("decision_check has no {k}"))?;
            Ok(by_reason.values().filter_map(Value::as_u64).sum())
        };
        Ok(Agreement {
            log_switches: count(e, "log_switches")?,
            model_switches: count(e, "model_switches")?,
            log_expirations: total("log_expirations")?,
            model_expirations: total("model_expirations")?,
            matched: count(e, "matched")?,
            agreement_pct: num(e, "agreement_pct")?,
            points_agreement_pct: num(e, "points_agreement_pct")?,
            next_queue_checked: count(check, "next_queue_checked")?,
            next_queue_agreement_pct: num(check, "next_queue_agreement_pct")?,
        })
    }

    /// At [`AGREEMENT_TARGET_PCT`] or above.
    pub fn meets_target(&self) -> bool {
        self.agreement_pct >= AGREEMENT_TARGET_PCT
    }
}

/// One BFQ recording in the decision-agreement table: where it is, and its check (`None`:
/// recorded without BFQ's log).
#[derive(Clone, Debug)]
pub struct AgreementRow {
    pub scenario: String,
    /// `LABEL (SPEC)`.
    pub run: String,
    pub has_log: bool,
    pub agreement: Option<Agreement>,
}

/// The decision-agreement table of `cargo xtask validate`: one line per BFQ recording that
/// carries BFQ's log, the count at the target, and one line naming those without a log.
pub fn agreement_table(rows: &[AgreementRow]) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "\ndecision agreement: each BFQ recording with BFQ's own log (`--sched-log`), the \
         model driven by its requests and BFQ's state (`replay --sched SPEC`'s \
         decision_check): switches (queues put in service), expirations, those at the same \
         point with the same reason, agreement = matched / larger expiration count (! = \
         below {AGREEMENT_TARGET_PCT}%), at the same point whatever the reason, and the \
         next queue named as BFQ's\n\n"
    );
    let _ = writeln!(
        out,
        "{:<21} {:<42} {:>13} {:>13} {:>7} {:>10} {:>8} {:>14}",
        "scenario",
        "run (configuration)",
        "switch l/m",
        "expire l/m",
        "matched",
        "agreement",
        "points",
        "next queue"
    );
    let (mut n, mut within) = (0, 0);
    for row in rows {
        let Some(a) = &row.agreement else { continue };
        n += 1;
        if a.meets_target() {
            within += 1;
        }
        let _ = writeln!(
            out,
            "{:<21} {:<42} {:>6}/{:<6} {:>6}/{:<6} {:>7} {:>7.1}%{:<2} {:>7.1}% {:>6.1}% of {:<4}",
            row.scenario,
            row.run,
            a.log_switches,
            a.model_switches,
            a.log_expirations,
            a.model_expirations,
            a.matched,
            a.agreement_pct,
            if a.meets_target() { "" } else { " !" },
            a.points_agreement_pct,
            a.next_queue_agreement_pct,
            a.next_queue_checked,
        );
    }
    let _ = writeln!(
        out,
        "\n{within} of {n} BFQ recordings at >= {AGREEMENT_TARGET_PCT}%"
    );
    let unchecked = |has_log: bool| -> Vec<String> {
        rows.iter()
            .filter(|r| r.agreement.is_none() && r.has_log == has_log)
            .map(|r| format!("{} {}", r.scenario, r.run.split(' ').next().unwrap_or("")))
            .collect()
    };
    let without = unchecked(false);
    if !without.is_empty() {
        let _ = writeln!(
            out,
            "{} BFQ recordings without BFQ's log (recorded without --sched-log), not checked: {}",
            without.len(),
            without.join(", ")
        );
    }
    let no_requests = unchecked(true);
    if !no_requests.is_empty() {
        let _ = writeln!(
            out,
            "{} BFQ recordings with BFQ's log but no request through the scheduler, not \
             checked: {}",
            no_requests.len(),
            no_requests.join(", ")
        );
    }
    out
}

/// `iosched-trace replay FILE --sched SPEC --json`.
pub fn replay(trace_bin: &Path, file: &Path, spec: &str) -> Result<Replayed, ScenarioError> {
    replay_on(trace_bin, file, spec, None, &[])
}

/// [`replay`] on the device model in `profile` (`--device-profile`) instead of the one
/// fitted from the recording, with `extra` arguments given to `replay` as they are (e.g.
/// `--host-profile=FILE`).
pub fn replay_on(
    trace_bin: &Path,
    file: &Path,
    spec: &str,
    profile: Option<&Path>,
    extra: &[String],
) -> Result<Replayed, ScenarioError> {
    let v = replay_json(trace_bin, file, spec, profile, extra)?;
    let bad = |err: String| ScenarioError::Report {
        path: file.to_owned(),
        err,
    };
    let run = v
        .get("runs")
        .and_then(|r| r.get(0))
        .ok_or_else(|| bad("replay --json has no run".into()))?;
    let agreement = match run.get("decision_check") {
        None | Some(Value::Null) => None,
        Some(check) => Some(Agreement::from_decision_check(check).map_err(bad)?),
    };
    Ok(Replayed {
        recorded: Numbers::of(&v["recorded"]),
        predicted: Numbers::of(&run["summary"]),
        decisions: run["decision_counts"].clone(),
        has_bfq_log: run.get("log_comparison").is_some_and(|l| !l.is_null()),
        agreement,
        processes: v["workload"]
            .as_array()
            .map(|streams| {
                streams
                    .iter()
                    .map(|s| {
                        let comm = s["comm"].as_str().unwrap_or("").to_owned();
                        let ioprio = s["ioprio"].as_u64().and_then(|p| u16::try_from(p).ok());
                        (comm, ioprio.unwrap_or(0))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// The recording's fitted device model and how many processes its workload has, as
/// `replay --json` (with `extra` arguments) gives them.
pub fn fitted_device(
    trace_bin: &Path,
    file: &Path,
    extra: &[String],
) -> Result<(Value, usize), ScenarioError> {
    let v = replay_json(trace_bin, file, "none", None, extra)?;
    let streams = v["workload"].as_array().map_or(0, Vec::len);
    Ok((v["device_model"].clone(), streams))
}

/// A rotational device model for a workload of several processes, from two fits of the
/// same disk: `sequential`'s (a one-process recording: contiguous requests, so its
/// per-request overhead and transfer rate are measured) and `seeking`'s (the workload's
/// own recording under `none`, where interleaved processes make every request seek, so
/// its fit cannot tell the overhead from positioning and assumes one). Positioning comes
/// from `seeking`, shifted by the difference of the overheads so that its seeking
/// requests keep the service times it fitted. `None` unless both are rotational fits.
pub fn sequential_and_seeking(sequential: &Value, seeking: &Value) -> Option<Value> {
    let rotational = |v: &Value| v.get("kind").and_then(Value::as_str) == Some("rotational");
    if !rotational(sequential) || !rotational(seeking) {
        return None;
    }
    let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
    let (seq_overhead, ns_per_sector) = (
        num(sequential, "overhead_ns")?,
        num(sequential, "ns_per_sector")?,
    );
    let shift = num(seeking, "overhead_ns")? - seq_overhead;
    let positioning: Vec<Value> = seeking
        .get("positioning_ns")?
        .as_array()?
        .iter()
        .map(|p| match p.as_f64() {
            Some(ns) => Value::from((ns + shift).max(0.0)),
            None => Value::Null,
        })
        .collect();
    Some(serde_json::json!({
        "kind": "rotational",
        "overhead_ns": seq_overhead,
        "ns_per_sector": ns_per_sector,
        "positioning_ns": positioning,
        // The latency a queue hides is the host's, not the seeks': the sequential fit's.
        "latency_ns": num(sequential, "latency_ns").unwrap_or(0.0),
    }))
}

/// `iosched-trace replay FILE --sched SPEC --json [--device-profile PROFILE] EXTRA...`,
/// parsed.
fn replay_json(
    trace_bin: &Path,
    file: &Path,
    spec: &str,
    profile: Option<&Path>,
    extra: &[String],
) -> Result<Value, ScenarioError> {
    let mut args: Vec<&std::ffi::OsStr> = vec!["--sched".as_ref(), spec.as_ref()];
    if let Some(p) = profile {
        args.extend(["--device-profile".as_ref(), p.as_os_str()]);
    }
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    run_json(
        trace_bin,
        "replay",
        file,
        &args,
        &format!("replay --sched {spec}"),
    )
}

/// `iosched-trace COMMAND FILE ARGS... --json`, its output parsed; `what` names the command
/// in errors.
pub(super) fn run_json(
    trace_bin: &Path,
    command: &str,
    file: &Path,
    args: &[&std::ffi::OsStr],
    what: &str,
) -> Result<Value, ScenarioError> {
    let out = Command::new(trace_bin)
        .arg(command)
        .arg(file)
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .map_err(|err| ScenarioError::Io {
            what: format!("running {}", trace_bin.display()),
            err,
        })?;
    let bad = |err: String| ScenarioError::Report {
        path: file.to_owned(),
        err,
    };
    if !out.status.success() {
        return Err(bad(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| bad(e.to_string()))
}

/// Relative error of a prediction, in percent (0 when both are 0).
pub fn rel_err_pct(predicted: f64, real: f64) -> f64 {
    if real == 0.0 {
        if predicted == 0.0 { 0.0 } else { 100.0 }
    } else {
        (predicted / real - 1.0) * 100.0
    }
}

/// The error of an idling-waste prediction: relative when the real waste is at least 5%
/// of the run, else the difference in points of the run (a 0.1% vs 0.3% waste is no 200%
/// error).
pub fn idle_err(predicted_pct: f64, real_pct: f64) -> (f64, &'static str) {
    if real_pct >= 5.0 {
        (rel_err_pct(predicted_pct, real_pct), "%")
    } else {
        (predicted_pct - real_pct, "pt")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{FAST_NAMES, NAMES, by_name};

    #[test]
    fn every_group_has_none_bfq_and_mq_deadline_and_labels_stay_unique() {
        for name in NAMES.into_iter().chain(FAST_NAMES) {
            let (s, groups) = plan(&by_name(name).unwrap());
            let mut labels: Vec<&str> = s.runs.iter().map(|r| r.label.as_str()).collect();
            let n = labels.len();
            labels.sort_unstable();
            labels.dedup();
            assert_eq!(labels.len(), n, "{name}: duplicate labels");
            for g in &groups {
                let sched = |l: &str| s.runs.iter().find(|r| r.label == l).unwrap().scheduler;
                assert_eq!(sched(&g.none), "none");
                for want in ["bfq", "mq-deadline"] {
                    assert!(g.others.iter().any(|l| sched(l) == want), "{name} {g:?}");
                }
            }
        }
    }

    /// The sequential fit's overhead (0.2 ms) and transfer, the seeking fit's positioning
    /// less the 0.1 ms it had put in its assumed overhead: a seek of the seeking recording
    /// costs what its fit said (0.1 + 5 ms + transfer there, 0.2 + 4.9 ms + transfer
    /// here), a contiguous request what the sequential one measured.
    #[test]
    fn a_workloads_device_takes_sequential_costs_from_one_process_and_seeks_from_its_own() {
        let seq = serde_json::json!({"kind": "rotational", "overhead_ns": 200_000.0,
            "ns_per_sector": 4000.0, "positioning_ns": [null, null]});
        let seek = serde_json::json!({"kind": "rotational", "overhead_ns": 100_000.0,
            "ns_per_sector": 4266.0, "positioning_ns": [null, 5_000_000.0, 50_000.0]});
        let m = sequential_and_seeking(&seq, &seek).unwrap();
        assert_eq!(m["overhead_ns"], 200_000.0);
        assert_eq!(m["ns_per_sector"], 4000.0);
        assert_eq!(
            m["positioning_ns"],
            serde_json::json!([null, 4_900_000.0, 0.0])
        );
        let flash = serde_json::json!({"kind": "flash", "latency_ns": 1.0,
            "ns_per_sector": 1.0, "parallelism": 4});
        assert!(sequential_and_seeking(&flash, &seek).is_none());
        assert!(sequential_and_seeking(&seq, &flash).is_none());
    }

    /// A `decision_check` as `replay --json` writes it: 9 expirations in the log, 10 by
    /// the model, 7 at the same point with the same reason.
    fn check_json(agreement_pct: f64) -> Value {
        serde_json::json!({
            "expirations": {
                "log_switches": 10, "model_switches": 11,
                "log_expirations": {"preempted": 4, "too_idle": 3, "budget_exhausted": 1,
                    "no_more_requests": 1},
                "model_expirations": {"preempted": 4, "too_idle": 2, "budget_exhausted": 1,
                    "no_more_requests": 3},
                "matched": 7, "matched_points": 8, "agreement_pct": agreement_pct,
                "expirations_matched_pct": 77.8, "points_agreement_pct": 80.0,
                "log_has_shared_queues": false
            },
            "next_queue_checked": 9, "next_queue_matched": 8,
            "next_queue_agreement_pct": 88.9, "forced_expirations": 0, "forced_switches": 3,
            "requests": 905, "merged_logged": 0, "merged_predicted": 0, "merged_matched": 0
        })
    }

    #[test]
    fn a_decision_check_is_read_with_its_expirations_summed() {
        let a = Agreement::from_decision_check(&check_json(70.0)).unwrap();
        assert_eq!((a.log_switches, a.model_switches), (10, 11));
        assert_eq!(
            (a.log_expirations, a.model_expirations, a.matched),
            (9, 10, 7)
        );
        assert_eq!(
            (a.next_queue_checked, a.next_queue_agreement_pct),
            (9, 88.9)
        );
        assert!(!a.meets_target());
        assert!(
            Agreement::from_decision_check(&check_json(90.0))
                .unwrap()
                .meets_target()
        );
        // A field the library renamed is an error naming it, not a zero.
        let mut renamed = check_json(70.0);
        let e = renamed["expirations"].as_object_mut().unwrap();
        let v = e.remove("matched").unwrap();
        e.insert("matches".into(), v);
        let err = Agreement::from_decision_check(&renamed).unwrap_err();
        assert!(err.contains("matched"), "{err}");
    }

    #[test]
    fn the_agreement_table_counts_recordings_at_the_target_and_names_those_without_a_log() {
        let row = |run: &str, has_log: bool, pct: Option<f64>| AgreementRow {
            scenario: "dsync-journal".into(),
            run: format!("{run} (bfq)"),
            has_log,
            agreement: pct.map(|p| Agreement::from_decision_check(&check_json(p)).unwrap()),
        };
        let table = agreement_table(&[
            row("bfq-a", true, Some(70.0)),
            row("bfq-b", true, Some(95.0)),
            row("bfq-c", false, None),
            row("bfq-d", false, None),
            row("bfq-e", true, None),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        let of = |run: &str| lines.iter().find(|l| l.contains(run)).copied().unwrap();
        assert!(of("bfq-a (bfq)").contains("70.0% !"), "{table}");
        assert!(of("bfq-a (bfq)").contains("10/11"), "{table}");
        assert!(!of("bfq-b (bfq)").contains('!'), "{table}");
        assert!(
            table.contains("\n1 of 2 BFQ recordings at >= 90%\n"),
            "{table}"
        );
        assert!(
            table.contains(
                "2 BFQ recordings without BFQ's log (recorded without --sched-log), not \
                 checked: dsync-journal bfq-c, dsync-journal bfq-d\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("1 BFQ recordings with BFQ's log but no request"),
            "{table}"
        );
        // No BFQ recording with a log: 0 of 0, and the others still named.
        let none = agreement_table(&[row("bfq-c", false, None)]);
        assert!(none.contains("0 of 0 BFQ recordings"), "{none}");
        assert!(
            none.contains("1 BFQ recordings without BFQ's log"),
            "{none}"
        );
    }

    #[test]
    fn groups_and_specs_of_known_scenarios() {
        let (_, groups) = plan(&by_name("multi-reader").unwrap());
        assert_eq!(groups.len(), 4);
        assert_eq!(groups[1].name, "2j");
        assert_eq!(groups[1].none, "none-2j");
        assert!(groups[1].others.contains(&"bfq-ll0-2j".to_owned()));
        let (s, groups) = plan(&by_name("tiny-seq-writes").unwrap());
        assert_eq!(groups.len(), 4);
        assert!(s.runs.iter().any(|r| r.label == "none-qd32-nomerges2"));
        let run = s
            .runs
            .iter()
            .find(|r| r.label == "dl-qd256-nomerges2")
            .unwrap();
        assert_eq!(replay_spec(run), "mq-deadline:nomerges=2");
        let (s, groups) = plan(&by_name("dsync-journal").unwrap());
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].none, "none");
        assert_eq!(s.runs.len(), 3);
        let spec = |label: &str| replay_spec(s.runs.iter().find(|r| r.label == label).unwrap());
        assert_eq!(spec("bfq"), "bfq:own_group=dd");
        assert_eq!(spec("mq-deadline"), "mq-deadline");
        let s = by_name("single-reader-idle").unwrap();
        assert_eq!(replay_spec(&s.runs[1]), "bfq:slice_idle=0");
    }
}
