//! Writeback throttling: buffered writes that waited between Q and G (`rq_qos_throttle`,
//! before their request was allocated) while requests were free.
//!
//! What-ifs: the recorded configuration plus wbt's limit as the trace shows it (and its
//! drain rule where most waits ended only when the writes had drained). Judged: the
//! replay as recorded (no wbt) against it, for the processes that waited.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{throttle::WbtWaits, workload::Workload};
use super::{
    Evidence as AnyEvidence, Finding,
    parts::{Cause, Fix, mb_s},
    runner::{Context, Diagnosis, Runs, WhatIf},
    throttling::{self, MIN_THROTTLED, MIN_THROTTLED_NS},
};

pub(super) struct Wbt;

/// Writeback throttling (wbt) held `held` buffered writes of `most_waited` (comm, pid)
/// before their requests were allocated: `total_ns` of waiting, p99 `p99_ns`.
/// `pays_less_pct`: it pays, without wbt the model predicts this much less for them (the
/// writes crowding the device).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub held: u64,
    pub most_waited: Option<(String, u32)>,
    pub total_ns: u64,
    pub p99_ns: u64,
    pub pays_less_pct: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The trace: `count` buffered-write bios waited between Q and G while requests were
    /// free (at most `requests_cap` may exist): `total_ns` in all, p99, max.
    Waits {
        count: u64,
        requests_cap: u32,
        total_ns: u64,
        p99_ns: u64,
        max_ns: u64,
    },
    /// The trace: wbt let up to `limit_seen` buffered writes hold requests at once (its max
    /// depth `depth_at_waits` when they waited, from `wbt_step`); `woken_when_drained` of
    /// the `waits` ended only when they had all completed; `tag_bound` more Q->G waits came
    /// with every request in use (tag waits, not counted).
    Limit {
        limit_seen: u32,
        depth_at_waits: Option<u32>,
        woken_when_drained: u64,
        waits: u64,
        tag_bound: u64,
    },
    /// The trace: `events` wbt_step events: scale step up to `step`, limits down to
    /// `background` / `normal` / `max`, window `window_us`.
    Steps {
        events: usize,
        step: i32,
        background: u32,
        normal: u32,
        max: u32,
        window_us: u64,
    },
    /// The tunable: `/sys/block/DEVICE/queue/wbt_lat_usec` (wbt's read-latency target: 0
    /// turns wbt off, a larger one throttles less).
    Tunable { device: String },
    /// The model: the replay as recorded plus a wbt limit of `limit` gives the waiting
    /// processes `with_mb_s`; without wbt `without_mb_s`.
    Model {
        limit: u32,
        with_mb_s: f64,
        without_mb_s: f64,
    },
}

/// The waits, where they are worth a finding.
fn waits(w: &Workload) -> Option<&WbtWaits> {
    let wbt = &w.throttle.wbt;
    (wbt.waits.count >= MIN_THROTTLED && wbt.waits.total_ns >= MIN_THROTTLED_NS).then_some(wbt)
}

/// The depth wbt had when they waited, where the trace has its steps; else the most it
/// let through.
fn limit(wbt: &WbtWaits) -> u32 {
    wbt.max_depth_at_waits.unwrap_or(wbt.limit_seen).max(1)
}

/// The recorded configuration with wbt as the trace shows it.
fn with_wbt(cx: &Context, wbt: &WbtWaits) -> WhatIf {
    let limit = limit(wbt);
    // Most waits ended when the writes had drained: wbt's rule on a device with a write
    // cache; the replay follows it.
    let drain = 2 * wbt.woken_when_drained > wbt.waits.count;
    let mut with = cx.base.clone();
    let settings = &mut with.config.settings.0;
    settings.insert("wbt_limit".into(), limit.to_string());
    if drain {
        settings.insert("wbt_drain".into(), "1".into());
    }
    with.config.label = format!(
        "{}:wbt_limit={limit}{}",
        cx.sched().name(),
        if drain { ",wbt_drain=1" } else { "" }
    );
    with
}

impl Diagnosis for Wbt {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        waits(&cx.r.workload)
            .map(|wbt| with_wbt(cx, wbt))
            .into_iter()
            .collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let w = &cx.r.workload;
        let Some(wbt) = waits(w) else {
            return Vec::new();
        };
        let waits = &wbt.waits;
        let limit = limit(wbt);
        let with = runs.get(&with_wbt(cx, wbt));
        let without = &cx.base_run;
        let waited: Vec<u32> = waits.processes.iter().map(|p| p.pid).collect();
        let (est, others) = throttling::throttle_estimate(
            with,
            without,
            cx.recorded,
            &waited,
            w,
            Fix::WithoutWbt(cx.sched()),
        );
        let mut evidence: Vec<AnyEvidence> = vec![
            Evidence::Waits {
                count: waits.count,
                requests_cap: wbt.requests_cap,
                total_ns: waits.total_ns,
                p99_ns: waits.p99_ns,
                max_ns: waits.max_ns,
            }
            .into(),
            throttling::Evidence::When(waits.intervals.clone()).into(),
            throttling::Evidence::WhoWaited(waits.processes.clone()).into(),
            Evidence::Limit {
                limit_seen: wbt.limit_seen,
                depth_at_waits: wbt.max_depth_at_waits,
                woken_when_drained: wbt.woken_when_drained,
                waits: waits.count,
                tag_bound: wbt.tag_bound,
            }
            .into(),
        ];
        let steps = &w.throttle.wbt_steps;
        if let (Some(lo), Some(hi)) = (
            steps.iter().min_by_key(|s| s.max),
            steps.iter().max_by_key(|s| s.step),
        ) {
            evidence.push(
                Evidence::Steps {
                    events: steps.len(),
                    step: hi.step,
                    background: lo.background,
                    normal: lo.normal,
                    max: lo.max,
                    window_us: lo.window_us,
                }
                .into(),
            );
        }
        evidence.push(
            Evidence::Tunable {
                device: w.device.name.clone(),
            }
            .into(),
        );
        evidence.push(
            Evidence::Model {
                limit,
                with_mb_s: mb_s(&with.summary, &waited),
                without_mb_s: mb_s(&without.summary, &waited),
            }
            .into(),
        );
        evidence.extend(others.map(AnyEvidence::from));
        let pays = throttling::pays(&est);
        let claim = Claim {
            held: waits.count,
            most_waited: waits.processes.first().map(|p| (p.comm.clone(), p.pid)),
            total_ns: waits.total_ns,
            p99_ns: waits.p99_ns,
            pays_less_pct: pays,
        };
        let cause = if pays.is_some() {
            Cause::WbtThrottlingPays
        } else {
            Cause::WbtThrottling
        };
        vec![Finding::new(cause, claim, evidence, Some(est))]
    }
}
