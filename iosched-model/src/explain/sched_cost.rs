//! The scheduler's own cost: on a fast device the recorded scheduler's CPU time per request,
//! or its lock, is what caps the device ([`crate::cpu`]).
//!
//! Fires when the recorded scheduler has a cost of its own (not `none`) and either the
//! recording's machine was CPU-bound (its busy share at [`crate::cpu::CPU_BOUND_SHARE`] or more) or the
//! recorded rate is within 20% of what the scheduler's lock allows, or the scheduler took
//! [`CPU_SHARE`] of the machine's CPU time (then its estimate is a range up to every µs it
//! saves given back); and the model, its cost charged, moves the workload [`MIN_EFFECT_PCT`]
//! or more faster under a cheaper scheduler. Where none of the three holds but the model's
//! own estimate (not the range's end) is that large, it fires as the third.
//! The evidence: the busy share, what the scheduler costs per request here and what that
//! caps IOPS at, and the device kept below its parallelism while requests waited in the
//! scheduler.
//!
//! What-ifs: none, mq-deadline and kyber (those cheaper than the recorded one), with their
//! defaults. Judged: against the replay as recorded.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay, or word the finding.

use super::super::{device::DeviceModel, sched::SchedKind};
use super::{
    Evidence as AnyEvidence, Finding, MIN_EFFECT_PCT,
    parts::{Cause, RangeBasis, RangeEnd},
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct SchedCost;

/// The recorded rate this close to the lock's cap (share of it) is bound by the lock.
const LOCK_BOUND_SHARE: f64 = 0.8;

/// The scheduler's CPU time this large a share of the machine's is a cost worth naming even
/// where the CPUs were not saturated.
const CPU_SHARE: f64 = 0.2;

#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub sched: SchedKind,
    /// What it costs per request here (over none), ns.
    pub cost_ns: f64,
    /// What the CPUs allowed at the recorded cost, IOPS (the recorded rate, where CPU-bound).
    pub cpu_cap_iops: Option<f64>,
    /// What its lock allows, IOPS.
    pub lock_cap_iops: Option<f64>,
    /// Share of the machine's CPU time the scheduler took at the recorded rate.
    pub cpu_share: Option<f64>,
    pub bound: Bound,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The CPUs were saturated.
    Cpu,
    /// The recorded rate is near what its lock allows.
    Lock,
    /// Neither, but the scheduler took [`CPU_SHARE`] or more of the machine's CPU time, or
    /// less and the model's own estimate under a cheaper scheduler is [`MIN_EFFECT_PCT`] or
    /// more: how much of it was on the requests' path the recording cannot tell, so the
    /// estimate is a range up to all of it.
    Share,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The machine: `cpus` CPUs, `busy_share` of them busy, the recorder's share of that.
    CpuBusy {
        cpus: u32,
        busy_share: f64,
        recorder_share: f64,
        busy_ns_per_request: f64,
    },
    /// Requests in the driver (mean) against the device's parallelism, while this many
    /// bios (mean) waited in the scheduler.
    DeviceUnderused {
        driver_mean: f64,
        parallelism: u32,
        scheduler_mean: f64,
    },
    /// Where the costs come from.
    Costs { source: String },
}

/// Cheaper schedulers to try, in order.
fn cheaper(cx: &Context) -> Vec<SchedKind> {
    let recorded = cx.sched();
    let cost = |s: SchedKind| {
        cx.r.cpu
            .profile
            .cost(s.name())
            .map_or(0.0, |c| c.cpu_ns_per_request)
    };
    [SchedKind::None, SchedKind::MqDeadline, SchedKind::Kyber]
        .into_iter()
        .filter(|s| *s != recorded && cost(*s) < cost(recorded))
        .collect()
}

fn under(sched: SchedKind) -> WhatIf {
    WhatIf::spec(sched, &[])
}

impl Diagnosis for SchedCost {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        cheaper(cx).into_iter().map(under).collect()
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let recorded = cx.sched();
        if recorded == SchedKind::None {
            return Vec::new();
        }
        let cpu = &cx.r.cpu;
        let cost = cpu.recorded_cost;
        if cost.cpu_ns_per_request <= 0.0 && cost.serial_ns_per_request <= 0.0 {
            return Vec::new();
        }
        // The replay's own judgement of the lock (`CpuModel::lock_hold`): a calibrated hold
        // the recording contradicts (it went faster than that hold allows) is no evidence
        // that the lock bound it.
        let hold = cpu.lock_hold(recorded, cpu.kyber_domains);
        let lock_cap_iops =
            (hold.hold_ns > 0.0 && !hold.contradicted && recorded != SchedKind::Kyber)
                .then(|| 1e9 / hold.hold_ns);
        let cpu_share = cpu.recorded.map(|c| {
            cost.cpu_ns_per_request * cx.recorded.iops / (f64::from(c.online_cpus.max(1)) * 1e9)
        });
        let bound = if cpu.cpu_bound() {
            Some(Bound::Cpu)
        } else if lock_cap_iops.is_some_and(|cap| cx.recorded.iops >= LOCK_BOUND_SHARE * cap) {
            Some(Bound::Lock)
        } else if cpu_share.is_some_and(|s| s >= CPU_SHARE) {
            Some(Bound::Share)
        } else {
            None
        };
        let schedulers = cheaper(cx);
        let mut estimates: Vec<_> = schedulers
            .iter()
            .map(|s| {
                let mut e = cx.estimate(runs, &under(*s), &[]);
                if bound != Some(Bound::Cpu) {
                    e.range_end = freed_end(cx, *s, e.measured_mb_s);
                }
                e
            })
            .collect();
        let bound = match bound {
            Some(b) => b,
            // A smaller share, but the model, the cost charged, itself moves the workload
            // MIN_EFFECT_PCT or more faster under a cheaper scheduler: the cost is on the
            // requests' path whatever its share. (Two fio jobs of random reads and writes on a
            // RAM-backed loop device: mq-deadline 17% of the machine's CPU, its replay under
            // none +21%, and none measured +28%; explain said nothing was wrong.)
            None if cpu_share.is_some()
                && estimates
                    .first()
                    .is_some_and(|e| e.change_pct >= MIN_EFFECT_PCT) =>
            {
                Bound::Share
            }
            None => return Vec::new(),
        };
        let best = |e: &super::Estimate| {
            e.range_end
                .as_ref()
                .map_or(e.change_pct, |r| r.change_pct.max(e.change_pct))
        };
        if estimates.is_empty() || best(&estimates[0]) < MIN_EFFECT_PCT {
            return Vec::new();
        }
        let first = estimates.remove(0);
        let cpu_cap_iops = cpu
            .recorded
            .zip(cpu.busy_ns_per_request)
            .map(|(c, w)| f64::from(c.online_cpus) * 1e9 / w.max(1.0));
        let mut evidence: Vec<AnyEvidence> = Vec::new();
        if let (Some(c), Some(w)) = (cpu.recorded, cpu.busy_ns_per_request) {
            evidence.push(
                Evidence::CpuBusy {
                    cpus: c.online_cpus,
                    busy_share: c.busy_share(),
                    recorder_share: c.recorder_share(),
                    busy_ns_per_request: w,
                }
                .into(),
            );
        }
        if let Some(d) = cx.report.devices.first() {
            let parallelism = match &cx.r.device {
                DeviceModel::Flash(f) => f.parallelism,
                _ => 1,
            };
            let q = d.queue_depth;
            if q.driver_mean < f64::from(parallelism) && q.scheduler_mean > 0.5 {
                evidence.push(
                    Evidence::DeviceUnderused {
                        driver_mean: q.driver_mean,
                        parallelism,
                        scheduler_mean: q.scheduler_mean,
                    }
                    .into(),
                );
            }
        }
        evidence.push(
            Evidence::Costs {
                source: cpu.profile.source.clone(),
            }
            .into(),
        );
        let mut f = Finding::new(
            Cause::SchedulerCost,
            Claim {
                sched: recorded,
                cost_ns: cost.cpu_ns_per_request,
                cpu_cap_iops: (bound == Bound::Cpu).then_some(cpu_cap_iops).flatten(),
                lock_cap_iops,
                cpu_share,
                bound,
            },
            evidence,
            Some(first),
        );
        f.alternatives = estimates;
        vec![f]
    }
}

/// The most `sched` could give where the CPUs were not saturated: the recorded rate with
/// every µs it saves per request taken off each request's CPU time ([`RangeBasis::SchedulerCpuFreed`]).
fn freed_end(cx: &Context, sched: SchedKind, measured_mb_s: f64) -> Option<RangeEnd> {
    let cpu = &cx.r.cpu;
    let w = cpu.busy_ns_per_request?;
    let saved = cpu.recorded_cost.cpu_ns_per_request
        - cpu
            .profile
            .cost(sched.name())
            .map_or(0.0, |c| c.cpu_ns_per_request);
    let left = (w - saved).max(0.1 * w);
    let predicted_mb_s = measured_mb_s * w / left;
    Some(RangeEnd {
        basis: RangeBasis::SchedulerCpuFreed,
        predicted_mb_s,
        change_pct: 100.0 * (predicted_mb_s / measured_mb_s - 1.0),
    })
}
