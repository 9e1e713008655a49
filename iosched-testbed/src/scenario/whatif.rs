//! `explain`'s what-ifs against the test bed (`cargo xtask validate`, third table).
//!
//! `iosched-trace explain` names causes and, for each, estimates with the model what a fix
//! would do ("mq-deadline:nomerges=0 would move this workload 61% faster"). A scenario often
//! recorded that fix for real: the same workload under the fix's scheduler and tunables. This
//! module finds those runs, so the estimated effect can be set beside the measured one.
//!
//! Owns: reading explain's findings, matching a what-if to runs. Must not: judge (the
//! caller prints the errors against its target).

use std::path::Path;

use serde_json::Value;

use super::{Run, ScenarioError};

/// One finding of `explain --json`, with its estimate when it has one.
#[derive(Clone, Debug)]
pub struct Finding {
    pub cause: String,
    pub title: String,
    pub estimate: Option<Estimate>,
    /// Other fixes of the same cause, each with its estimate.
    pub alternatives: Vec<Estimate>,
    pub latency_estimate: Option<LatencyEstimate>,
}

#[derive(Clone, Debug)]
pub struct Estimate {
    /// The model configuration of the fix, as `replay --sched` spells it.
    pub what_if: String,
    /// Throughput as recorded and as predicted under the fix (same scope: the affected
    /// processes, or the device), MB/s.
    pub measured_mb_s: f64,
    pub predicted_mb_s: f64,
    /// The prediction had no request taken the latency the recording hid (every request
    /// queued) and the estimate assumed: the other end of its range, when explain gives one.
    pub range_end_mb_s: Option<f64>,
}

impl Estimate {
    /// Predicted throughput over recorded: the effect, as a factor.
    pub fn factor(&self) -> Option<f64> {
        (self.measured_mb_s > 0.0).then(|| self.predicted_mb_s / self.measured_mb_s)
    }

    /// The other end of the range, as a factor ([`Estimate::range_end_mb_s`]).
    pub fn factor_range_end(&self) -> Option<f64> {
        let other = self.range_end_mb_s?;
        (self.measured_mb_s > 0.0).then(|| other / self.measured_mb_s)
    }
}

/// A latency what-if: the highest p99 Q2C of any process, as recorded and as predicted
/// under the fix (a real run of the fix has other pids: the worst is what compares).
#[derive(Clone, Debug)]
pub struct LatencyEstimate {
    pub what_if: String,
    pub measured_worst_p99_ms: f64,
    pub predicted_worst_p99_ms: f64,
}

impl LatencyEstimate {
    /// Predicted over recorded: the effect, as a factor (below 1: shorter waits).
    pub fn factor(&self) -> Option<f64> {
        (self.measured_worst_p99_ms > 0.0)
            .then(|| self.predicted_worst_p99_ms / self.measured_worst_p99_ms)
    }
}

/// What `explain --json` says about one recording.
#[derive(Clone, Debug)]
pub struct Explained {
    pub verdict: String,
    pub findings: Vec<Finding>,
}

/// `iosched-trace explain FILE --json`.
/// `extra`: arguments for `explain` (a `--host-profile`).
pub fn explain(
    trace_bin: &Path,
    file: &Path,
    extra: &[String],
) -> Result<Explained, ScenarioError> {
    let extra: Vec<&std::ffi::OsStr> = extra.iter().map(|a| a.as_ref()).collect();
    let v = super::validate::run_json(trace_bin, "explain", file, &extra, "explain")?;
    parse(&v).ok_or_else(|| ScenarioError::Report {
        path: file.to_owned(),
        err: "explain --json: no `findings` array".into(),
    })
}

fn parse(v: &Value) -> Option<Explained> {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let findings = v
        .get("findings")?
        .as_array()?
        .iter()
        .map(|f| Finding {
            cause: text(f, "cause"),
            title: text(f, "title"),
            estimate: f
                .get("estimate")
                .filter(|e| !e.is_null())
                .map(parse_estimate),
            alternatives: f
                .get("alternatives")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(parse_estimate).collect())
                .unwrap_or_default(),
            latency_estimate: f.get("latency_estimate").filter(|e| !e.is_null()).map(|e| {
                let num = |k: &str| e.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                LatencyEstimate {
                    what_if: text(e, "what_if"),
                    measured_worst_p99_ms: num("measured_p99_q2c_ms"),
                    predicted_worst_p99_ms: num("predicted_worst_p99_q2c_ms"),
                }
            }),
        })
        .collect();
    Some(Explained {
        verdict: text(v, "verdict"),
        findings,
    })
}

fn parse_estimate(e: &Value) -> Estimate {
    let num = |k: &str| e.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    Estimate {
        what_if: e
            .get("what_if")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        measured_mb_s: num("measured_mb_s"),
        predicted_mb_s: num("predicted_mb_s"),
        range_end_mb_s: e
            .get("range_end")
            .and_then(|l| l.get("predicted_mb_s"))
            .and_then(Value::as_f64),
    }
}

/// A model configuration: `bfq`, `mq-deadline:nomerges=0`, `bfq:slice_idle=0,low_latency=0`.
/// `None` for text that is not one (explain also phrases conditional what-ifs in words).
fn parse_spec(spec: &str) -> Option<(&str, Vec<(&str, &str)>)> {
    let (sched, rest) = spec.split_once(':').unwrap_or((spec, ""));
    if sched.is_empty() || sched.contains(char::is_whitespace) {
        return None;
    }
    let pairs = rest
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('='))
        .collect::<Option<Vec<_>>>()?;
    Some((sched, pairs))
}

/// The runs among `runs` that realise the what-if `spec` applied to the run `from`: the same
/// workload, the fix's scheduler, every tunable the fix sets at the fix's value, and the queue
/// settings outside `iosched/` (nomerges...) as `from` had them unless the fix sets them.
/// Scheduler tunables the fix does not name are left free, so several runs can match
/// (`bfq` is realised by both `bfq-ll0-4j` and `bfq-ll1-4j`). A fix the test bed cannot
/// set (the model's `kernel=5.2`, `own_group=dd`) matches nothing.
pub fn realising_runs<'a>(runs: &'a [Run], from: &Run, spec: &str) -> Vec<&'a Run> {
    let Some((sched, fix)) = parse_spec(spec) else {
        return Vec::new();
    };
    // The model's `ioprio=` switch is the workload's priority, not a queue setting.
    let setting = |run: &Run, key: &str| -> Option<String> {
        if key == "ioprio" {
            return run.ioprio.map(str::to_owned);
        }
        run.settings
            .iter()
            .find(|(k, _)| *k == key || k.strip_prefix("iosched/") == Some(key))
            .map(|(_, v)| v.clone())
    };
    let fixes_ioprio = fix.iter().any(|(k, _)| *k == "ioprio");
    let queue_settings = |run: &Run| -> Vec<(&'static str, String)> {
        let mut q: Vec<_> = run
            .settings
            .iter()
            .filter(|(k, _)| !k.starts_with("iosched/") && !fix.iter().any(|(f, _)| f == k))
            .cloned()
            .collect();
        q.sort();
        q
    };
    runs.iter()
        .filter(|r| r.label != from.label)
        .filter(|r| r.scheduler == sched && r.workload.to_string() == from.workload.to_string())
        .filter(|r| {
            fix.iter()
                .all(|(k, v)| setting(r, k).as_deref() == Some(*v))
        })
        .filter(|r| queue_settings(r) == queue_settings(from))
        .filter(|r| fixes_ioprio || r.ioprio == from.ioprio)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{by_name, validate::plan};

    fn labels(runs: Vec<&Run>) -> Vec<&str> {
        runs.iter().map(|r| r.label.as_str()).collect()
    }

    #[test]
    fn a_what_if_finds_the_runs_that_recorded_it() {
        let (s, _) = plan(&by_name("tiny-seq-writes").unwrap());
        let from = s
            .runs
            .iter()
            .find(|r| r.label == "dl-qd256-nomerges2")
            .unwrap();
        assert_eq!(
            labels(realising_runs(&s.runs, from, "mq-deadline:nomerges=0")),
            ["dl-qd256-nomerges0"]
        );
        // Another scheduler with the queue settings kept: the same queue depth and nomerges.
        assert_eq!(
            labels(realising_runs(&s.runs, from, "bfq")),
            ["bfq-qd256-nomerges2"]
        );
        let (s, _) = plan(&by_name("multi-reader").unwrap());
        let from = s.runs.iter().find(|r| r.label == "mq-deadline-4j").unwrap();
        let mut bfq = labels(realising_runs(&s.runs, from, "bfq"));
        bfq.sort_unstable();
        assert_eq!(bfq, ["bfq-ll0-4j", "bfq-ll1-4j"]);
        assert_eq!(
            labels(realising_runs(&s.runs, from, "bfq:low_latency=0")),
            ["bfq-ll0-4j"]
        );
        // A run at another I/O priority realises only a what-if that sets it.
        let from = s.runs.iter().find(|r| r.label == "bfq-ll1-2j").unwrap();
        assert_eq!(
            labels(realising_runs(&s.runs, from, "bfq:ioprio=be/5")),
            ["bfq-ll1-be5-2j"]
        );
        let from = s.runs.iter().find(|r| r.label == "none-2j").unwrap();
        let mut bfq = labels(realising_runs(&s.runs, from, "bfq"));
        bfq.sort_unstable();
        assert_eq!(bfq, ["bfq-ll0-2j", "bfq-ll1-2j"]);
        let s = by_name("single-reader-idle").unwrap();
        let from = s.runs.iter().find(|r| r.label == "bfq-idle8").unwrap();
        assert_eq!(
            labels(realising_runs(&s.runs, from, "bfq:slice_idle=0")),
            ["bfq-idle0"]
        );
    }

    #[test]
    fn what_ifs_the_test_bed_cannot_set_match_nothing() {
        let (s, _) = plan(&by_name("dsync-journal").unwrap());
        let from = s.runs.iter().find(|r| r.scheduler == "bfq").unwrap();
        assert!(realising_runs(&s.runs, from, "bfq:kernel=5.2").is_empty());
        assert!(realising_runs(&s.runs, from, "mq-deadline, if dd keeps 64 in flight").is_empty());
        // The run itself is no realisation of a fix.
        assert!(realising_runs(&s.runs, from, "bfq").is_empty());
    }

    #[test]
    fn findings_and_estimates_are_read_from_explains_json() {
        let v: Value = serde_json::json!({
            "verdict": "1 finding(s)",
            "findings": [
                {"cause": "missing_merges", "title": "t", "evidence": [],
                 "estimate": {"what_if": "mq-deadline:nomerges=0", "measured_mb_s": 10.0,
                              "predicted_mb_s": 15.0, "change_pct": 50.0}},
                {"cause": "seek_bound", "title": "s", "evidence": [], "estimate": null},
                {"cause": "weight_raising_costs_throughput", "title": "w", "evidence": [],
                 "estimate": {"what_if": "bfq:low_latency=0", "measured_mb_s": 1.0,
                              "predicted_mb_s": 20.0, "change_pct": 1900.0},
                 "alternatives": [{"what_if": "bfq:ioprio=be/5", "measured_mb_s": 1.0,
                                   "predicted_mb_s": 18.0, "change_pct": 1700.0,
                                   "range_end": {"predicted_mb_s": 12.0}}]},
                {"cause": "slices_too_long", "title": "l", "evidence": [], "estimate": null,
                 "latency_estimate": {"what_if": "mq-deadline", "process": "fio(7)",
                                      "measured_p99_q2c_ms": 3000.0,
                                      "predicted_p99_q2c_ms": 200.0,
                                      "predicted_worst_p99_q2c_ms": 250.0}}
            ]
        });
        let e = parse(&v).unwrap();
        assert_eq!(e.findings.len(), 4);
        let [alt] = &e.findings[2].alternatives[..] else {
            panic!("{:?}", e.findings[2])
        };
        assert_eq!(alt.what_if, "bfq:ioprio=be/5");
        assert_eq!(alt.factor(), Some(18.0));
        assert_eq!(alt.factor_range_end(), Some(12.0));
        assert!(e.findings[0].alternatives.is_empty());
        let l = e.findings[3].latency_estimate.as_ref().unwrap();
        assert_eq!(l.what_if, "mq-deadline");
        // The worst process under the fix, against the worst as recorded.
        assert_eq!(l.factor(), Some(250.0 / 3000.0));
        assert!(e.findings[0].latency_estimate.is_none());
        let est = e.findings[0].estimate.as_ref().unwrap();
        assert_eq!(est.what_if, "mq-deadline:nomerges=0");
        assert_eq!(est.factor(), Some(1.5));
        assert_eq!(est.factor_range_end(), None);
        assert!(e.findings[1].estimate.is_none());
        assert!(parse(&serde_json::json!({"verdict": "x"})).is_none());
    }
}
