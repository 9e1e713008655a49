//! Kyber: requests that waited in a domain whose tokens had run out.
//!
//! What-ifs: Kyber held at the depths the trace shows at its throttles. Judged: the replay
//! as recorded (Kyber at its initial depths) against it, for the processes that waited.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{
    sched::SchedKind,
    throttle::{KYBER_DEPTH, KYBER_DOMAINS, KyberDomain, Sufferer},
};
use super::{
    Evidence as AnyEvidence, Finding,
    parts::{Cause, Fix, mb_s},
    runner::{Context, Diagnosis, Runs, WhatIf},
    throttling::{self, MIN_THROTTLED, MIN_THROTTLED_NS},
};

pub(super) struct Kyber;

/// Kyber throttled `domains`: `requests` requests waited for a token, `total_ns` in all.
/// `pays_less_pct`: it pays, at its initial depths the model predicts this much less for
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub domains: Vec<&'static str>,
    pub requests: u64,
    pub total_ns: u64,
    pub pays_less_pct: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The trace: `events` kyber_throttled events for `domain`; `count` of its requests
    /// waited between I and D while its tokens were out: `total_ns` in all, p99, max.
    Waits {
        domain: &'static str,
        events: u64,
        count: u64,
        total_ns: u64,
        p99_ns: u64,
        max_ns: u64,
    },
    /// The trace: `domain`'s depth (the range kyber_adjust set, the one at most throttles);
    /// when its requests waited ((from, to) ns after the first Q), and who.
    Depth {
        domain: &'static str,
        range: Option<(u32, u32)>,
        at_throttles: Option<u32>,
        when: Vec<(u64, u64)>,
        who: Vec<Sufferer>,
    },
    /// The tunables: `/sys/block/DEVICE/queue/iosched/read_lat_nsec` and `write_lat_nsec`
    /// as recorded: Kyber shrinks a domain's depth when latencies exceed them; larger
    /// targets throttle less.
    Tunable {
        device: String,
        read_lat_nsec: Option<String>,
        write_lat_nsec: Option<String>,
    },
    /// The model: Kyber held at those depths gives the waiting processes `with_mb_s`; at
    /// its initial depths `without_mb_s`.
    Model { with_mb_s: f64, without_mb_s: f64 },
}

/// The domains whose waits are worth a finding, under Kyber.
fn throttled<'a>(cx: &Context<'a>) -> Vec<&'a KyberDomain> {
    if cx.sched() != SchedKind::Kyber {
        return Vec::new();
    }
    cx.r.workload
        .throttle
        .kyber
        .iter()
        .filter(|d| d.waits.count >= MIN_THROTTLED && d.waits.total_ns >= MIN_THROTTLED_NS)
        .collect()
}

/// The recorded configuration held at the depths of the throttles.
fn held(cx: &Context, domains: &[&KyberDomain]) -> WhatIf {
    let mut with = cx.base.clone();
    let mut depths = Vec::new();
    for d in domains {
        if let Some(depth) = d.depth_at_throttle {
            let key = format!("{}_depth", d.name);
            with.config
                .settings
                .0
                .insert(key.clone(), depth.to_string());
            depths.push(format!("{key}={depth}"));
        }
    }
    with.config.label = format!("{}:{}", cx.sched().name(), depths.join(","));
    with
}

impl Diagnosis for Kyber {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        let domains = throttled(cx);
        if domains.is_empty() {
            return Vec::new();
        }
        vec![held(cx, &domains)]
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let domains = throttled(cx);
        if domains.is_empty() {
            return Vec::new();
        }
        let w = &cx.r.workload;
        let with = runs.get(&held(cx, &domains));
        let without = &cx.base_run;
        let initial = domains
            .iter()
            .map(|d| {
                let k = KYBER_DOMAINS.iter().position(|n| *n == d.name).unwrap_or(3);
                (d.name, KYBER_DEPTH[k])
            })
            .collect();
        let mut waited: Vec<u32> = domains
            .iter()
            .flat_map(|d| d.waits.processes.iter().map(|p| p.pid))
            .collect();
        waited.sort_unstable();
        waited.dedup();
        let (est, others) = throttling::throttle_estimate(
            with,
            without,
            cx.recorded,
            &waited,
            w,
            Fix::KyberInitialDepths(initial),
        );
        let mut evidence: Vec<AnyEvidence> = Vec::new();
        for d in &domains {
            evidence.push(
                Evidence::Waits {
                    domain: d.name,
                    events: d.throttled_events,
                    count: d.waits.count,
                    total_ns: d.waits.total_ns,
                    p99_ns: d.waits.p99_ns,
                    max_ns: d.waits.max_ns,
                }
                .into(),
            );
            evidence.push(
                Evidence::Depth {
                    domain: d.name,
                    range: d.depth_range,
                    at_throttles: d.depth_at_throttle,
                    when: d.waits.intervals.clone(),
                    who: d.waits.processes.clone(),
                }
                .into(),
            );
        }
        let lat = |k: &str| w.device.iosched.get(k).map(|v| v.trim().to_string());
        evidence.push(
            Evidence::Tunable {
                device: w.device.name.clone(),
                read_lat_nsec: lat("read_lat_nsec"),
                write_lat_nsec: lat("write_lat_nsec"),
            }
            .into(),
        );
        evidence.push(
            Evidence::Model {
                with_mb_s: mb_s(&with.summary, &waited),
                without_mb_s: mb_s(&without.summary, &waited),
            }
            .into(),
        );
        evidence.extend(others.map(AnyEvidence::from));
        let pays = throttling::pays(&est);
        let claim = Claim {
            domains: domains.iter().map(|d| d.name).collect(),
            requests: domains.iter().map(|d| d.waits.count).sum(),
            total_ns: domains.iter().map(|d| d.waits.total_ns).sum(),
            pays_less_pct: pays,
        };
        let cause = if pays.is_some() {
            Cause::KyberThrottlingPays
        } else {
            Cause::KyberThrottling
        };
        vec![Finding::new(cause, claim, evidence, Some(est))]
    }
}
