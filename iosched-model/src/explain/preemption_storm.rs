//! BFQ's queues taking the disk from one another at (almost) every request without raised
//! weights: the hole-recovery preemption ([`storm`]), named from the recording itself, from
//! BFQ's log when it has one, else inferred from the trace's service slices. A replay need
//! not enter the storm (it hangs on events microseconds apart, and a replay's timing is not
//! the recording's), so the model gives the other side only: the workload's throughput out
//! of the storm, from the replay as recorded when it stays out, else from the replay with
//! slice_idle doubled (long enough for the pause that started it). That estimate is the
//! model's throughput itself, not a ratio to the replay as recorded: the storm is a state
//! the recording was in and a replay may not be, not a constant factor between them. The
//! recording's own rate outside the storm is the other end of the range.
//!
//! What-ifs: BFQ with slice_idle doubled. Judged: whether it, and the replay as recorded,
//! storm; not at all where weight raising was found to cost (its preemptions are the
//! raising's).
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{
    replay::Run,
    sched::{ExpireReason, SchedKind},
    storm::{self, Storm},
    workload::Workload,
};
use super::{
    Evidence as AnyEvidence, Finding,
    parts::{Cause, Estimate, Fix, RangeBasis, RangeEnd},
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct PreemptionStorm;

/// BFQ's queues took the disk from each other at almost every request from `from_ns` (after
/// the trace's start), without raised weights; out of the storm this workload runs at `out`
/// instead of `measured_mb_s` (`None`: the model enters it too, even with a longer
/// slice_idle).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub seen: Seen,
    pub from_ns: u64,
    pub out: Option<OutOfIt>,
    pub measured_mb_s: f64,
}

/// Where the storm was seen.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// In BFQ's log; `after`: the queue (pid) whose expiration (for this reason) started it.
    Log { after: Option<(u32, ExpireReason)> },
    /// Inferred from the trace, without BFQ's log.
    Inferred,
}

/// The workload's throughput out of the storm.
#[derive(Clone, Debug, PartialEq)]
pub enum OutOfIt {
    /// Between these, MB/s, and their changes against the recording, %.
    Range {
        lo: f64,
        hi: f64,
        lo_pct: f64,
        hi_pct: f64,
    },
    /// This rate (its range is narrower than 5%).
    Rate { mb_s: f64, change_pct: f64 },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// BFQ's log: `preempted` of its `expirations` were `preempted` (reason 4),
    /// `in_a_row` of them in a row, none of their queues raised.
    LogPreemptions {
        preempted: u64,
        expirations: u64,
        in_a_row: u64,
    },
    /// BFQ's log: the run began at `at_ns` when queue `pid` expired for `reason` (`line`);
    /// the first preemption came `first_after_ns` later (`first_line`).
    LogStartedBy {
        at_ns: u64,
        pid: u32,
        reason: ExpireReason,
        line: String,
        first_after_ns: u64,
        first_line: String,
    },
    /// BFQ's log: the run began with the log's first expiration, at `at_ns` (`line`).
    LogBeganWithIt { at_ns: u64, line: String },
    /// The trace, without BFQ's log: from `from_ns` to `to_ns`, `requests` requests of
    /// `streams` came in `slices` service slices of at most `short_slice` requests,
    /// alternating between sequential processes, `seeks` of the `switches` a seek; BFQ idles
    /// `slice_idle_ms` for a sequential process and serves it in slices of hundreds of
    /// requests (`slices_before`: the shortest and longest of this recording's before it).
    Inferred {
        from_ns: u64,
        to_ns: u64,
        requests: u64,
        streams: Vec<u32>,
        slices: u64,
        short_slice: u32,
        seeks: u64,
        switches: u64,
        slice_idle_ms: f64,
        slices_before: Option<(u32, u32)>,
    },
    /// `stream` paused `pause_ns` (`from_ns` to `to_ns`, its completion to its next
    /// request), longer than slice_idle: BFQ expired its queue waiting, and its next
    /// request took the disk back. `inferred`: the storm is.
    Pause {
        inferred: bool,
        stream: u32,
        pause_ns: u64,
        from_ns: u64,
        to_ns: u64,
        slice_idle_ms: f64,
    },
    /// No process paused longer than slice_idle around its start; the longest: `stream`'s
    /// `pause_ns` at `at_ns`. What started it is not in the trace.
    NoLongPause {
        inferred: bool,
        stream: u32,
        pause_ns: u64,
        at_ns: u64,
        slice_idle_ms: f64,
    },
    /// The kernel's rule: a queue expired empty, whose next request arrives within
    /// `window_ms` (3 x slice_idle) of its last completion with budget left, expires the
    /// queue in service.
    KernelRule { window_ms: f64 },
    /// The trace's throughput in the storm, and outside it where that is long enough.
    Rates {
        in_it_mb_s: f64,
        outside_mb_s: Option<f64>,
    },
    /// The model's replay as recorded enters the storm or stays out of it: `preempted` of
    /// its `slots` service slots ended by preemption; its throughput.
    ModelAsRecorded {
        enters: bool,
        preempted: u64,
        slots: u64,
        mb_s: f64,
    },
    /// The model with `what_if` (slice_idle doubled): its preemptions and throughput;
    /// `pause_fits`: the pause that started the storm fits in the idling.
    ModelLongerIdle {
        what_if: String,
        pause_fits: bool,
        preemptions: u64,
        mb_s: f64,
    },
}

/// BFQ's slice_idle as recorded (`slice_idle_us`, else `slice_idle` in ms; 8 ms when the
/// recording does not say).
fn recorded_slice_idle_ns(w: &Workload) -> u64 {
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

/// The storm, and the recorded slice_idle it was found with, where this diagnosis applies:
/// BFQ, idling, a storm, and, without BFQ's word, no raised weights in the replay (turns
/// taken among queues the model raises are the raising's).
fn found(cx: &Context) -> Option<(Storm, u64)> {
    if cx.sched() != SchedKind::Bfq {
        return None;
    }
    let w = &cx.r.workload;
    let slice_idle_ns = recorded_slice_idle_ns(w);
    if slice_idle_ns == 0 {
        return None;
    }
    let storm = storm::find(w, &cx.r.notes, slice_idle_ns)?;
    let inferred = storm.source == storm::Source::Inferred;
    if inferred && cx.base_run.decision_counts.raises > 0 {
        return None;
    }
    Some((storm, slice_idle_ns))
}

/// The recorded configuration with slice_idle doubled.
fn longer_idle(cx: &Context, slice_idle_ns: u64) -> WhatIf {
    let (key, value) = if slice_idle_ns.is_multiple_of(1_000_000) {
        ("slice_idle", (2 * slice_idle_ns / 1_000_000).to_string())
    } else {
        ("slice_idle_us", (2 * slice_idle_ns / 1000).to_string())
    };
    let mut longer = cx.base.clone();
    longer.config.label = format!("bfq:{key}={value}");
    longer.config.settings.0.remove("slice_idle_us");
    longer.config.settings.0.insert(key.into(), value);
    longer
}

/// The model's own run is in a preemption storm: most of its service slots ended by
/// preemption, at least [`storm::MIN_SWITCHES`] of them. (storms, preempted, all).
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

impl Diagnosis for PreemptionStorm {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        found(cx)
            .map(|(_, slice_idle_ns)| longer_idle(cx, slice_idle_ns))
            .into_iter()
            .collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, earlier: &[Finding]) -> Vec<Finding> {
        if earlier
            .iter()
            .any(|f| f.cause == Cause::WeightRaisingCostsThroughput)
        {
            return Vec::new();
        }
        match found(cx) {
            Some((storm, slice_idle_ns)) => vec![judge(cx, runs, &storm, slice_idle_ns)],
            None => Vec::new(),
        }
    }
}

fn judge(cx: &Context, runs: &Runs, storm: &Storm, slice_idle_ns: u64) -> Finding {
    let (w, base) = (&cx.r.workload, &cx.base_run);
    let inferred = storm.source == storm::Source::Inferred;
    let since_start = |t: u64| t.saturating_sub(w.start_ns);
    let slice_idle_ms = slice_idle_ns as f64 / 1e6;
    let mut evidence: Vec<AnyEvidence> = Vec::new();
    let seen = match &storm.log {
        Some(l) => {
            evidence.push(
                Evidence::LogPreemptions {
                    preempted: l.preempted,
                    expirations: l.expirations,
                    in_a_row: l.in_a_row,
                }
                .into(),
            );
            match &l.started_by {
                Some((t, pid, reason, line)) => {
                    evidence.push(
                        Evidence::LogStartedBy {
                            at_ns: since_start(*t),
                            pid: *pid,
                            reason: *reason,
                            line: line.clone(),
                            first_after_ns: l.first.0.saturating_sub(*t),
                            first_line: l.first.1.clone(),
                        }
                        .into(),
                    );
                    Seen::Log {
                        after: Some((*pid, *reason)),
                    }
                }
                None => {
                    evidence.push(
                        Evidence::LogBeganWithIt {
                            at_ns: since_start(l.first.0),
                            line: l.first.1.clone(),
                        }
                        .into(),
                    );
                    Seen::Log { after: None }
                }
            }
        }
        None => {
            evidence.push(
                Evidence::Inferred {
                    from_ns: since_start(storm.start_ns),
                    to_ns: since_start(storm.end_ns),
                    requests: storm.requests,
                    streams: storm.streams.clone(),
                    slices: storm.slices,
                    short_slice: storm::SHORT_SLICE,
                    seeks: storm.seeks,
                    switches: storm.slices.saturating_sub(1),
                    slice_idle_ms,
                    slices_before: storm.slices_before,
                }
                .into(),
            );
            Seen::Inferred
        }
    };
    match storm.pause {
        Some(p) if p.ns() > slice_idle_ns => evidence.push(
            Evidence::Pause {
                inferred,
                stream: p.stream,
                pause_ns: p.ns(),
                from_ns: since_start(p.from_ns),
                to_ns: since_start(p.to_ns),
                slice_idle_ms,
            }
            .into(),
        ),
        Some(p) => evidence.push(
            Evidence::NoLongPause {
                inferred,
                stream: p.stream,
                pause_ns: p.ns(),
                at_ns: since_start(p.from_ns),
                slice_idle_ms,
            }
            .into(),
        ),
        None => {}
    }
    // A queue expired empty (too idle, or preempted with its one request in flight) is
    // marked non_blocking_wait_rq, and its next request, arriving within 3 x slice_idle of
    // its last completion with budget left, expires the queue in service
    // (bfq_bfqq_update_budg_for_activation, bfq_bfqq_handle_idle_busy_switch): a switch,
    // and on a disk a seek, per request until a budget runs out.
    evidence.push(
        Evidence::KernelRule {
            window_ms: 3.0 * slice_idle_ms,
        }
        .into(),
    );
    evidence.push(
        Evidence::Rates {
            in_it_mb_s: storm.mb_s_in,
            outside_mb_s: storm.mb_s_outside,
        }
        .into(),
    );
    let (base_storms, n, all) = model_storms(base);
    evidence.push(
        Evidence::ModelAsRecorded {
            enters: base_storms,
            preempted: n,
            slots: all,
            mb_s: base.summary.mb_per_s,
        }
        .into(),
    );
    let longer = longer_idle(cx, slice_idle_ns);
    let fixed = runs.get(&longer);
    let (fixed_storms, fixed_n, _) = model_storms(fixed);
    let fits = storm
        .pause
        .is_some_and(|p| p.ns() > slice_idle_ns && p.ns() <= 2 * slice_idle_ns);
    evidence.push(
        Evidence::ModelLongerIdle {
            what_if: longer.config.label.clone(),
            pause_fits: fits,
            preemptions: fixed_n,
            mb_s: fixed.summary.mb_per_s,
        }
        .into(),
    );
    let measured = cx.recorded.mb_per_s;
    let absolute = |fix: Fix, mb_s: f64| Estimate {
        what_if: fix,
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
        basis: RangeBasis::OutsideTheStorm,
        predicted_mb_s: m,
        change_pct: absolute(Fix::OutOfTheStorm, m).change_pct,
    });
    let mut alternatives = Vec::new();
    let mut est = if !base_storms {
        if !fixed_storms {
            alternatives.push(absolute(longer.fix(), fixed.summary.mb_per_s));
        }
        Some(absolute(Fix::OutOfTheStorm, base.summary.mb_per_s))
    } else if !fixed_storms {
        Some(absolute(longer.fix(), fixed.summary.mb_per_s))
    } else {
        // The model storms either way: the recording's own rate outside it is all there is.
        outside
            .as_ref()
            .map(|o| absolute(Fix::OutOfTheStorm, o.predicted_mb_s))
    };
    if let Some(e) = est.as_mut()
        && !(base_storms && fixed_storms)
    {
        e.range_end = outside.clone();
    }
    let out = est.as_ref().map(|e| {
        let (lo, hi) = match &e.range_end {
            Some(o) => (
                o.predicted_mb_s.min(e.predicted_mb_s),
                o.predicted_mb_s.max(e.predicted_mb_s),
            ),
            None => (e.predicted_mb_s, e.predicted_mb_s),
        };
        if hi - lo >= 0.05 * hi {
            OutOfIt::Range {
                lo,
                hi,
                lo_pct: 100.0 * (lo / measured.max(1e-9) - 1.0),
                hi_pct: 100.0 * (hi / measured.max(1e-9) - 1.0),
            }
        } else {
            OutOfIt::Rate {
                mb_s: e.predicted_mb_s,
                change_pct: e.change_pct,
            }
        }
    });
    let claim = Claim {
        seen,
        from_ns: since_start(storm.start_ns),
        out,
        measured_mb_s: measured,
    };
    Finding {
        alternatives,
        ..Finding::new(Cause::PreemptionStorm, claim, evidence, est)
    }
}
