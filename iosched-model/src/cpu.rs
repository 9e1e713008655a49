//! The schedulers' own CPU cost, charged against the CPUs the recording had.
//!
//! On a disk a scheduler's time per request (BFQ's ~2 µs) is nothing; on a RAM-backed or fast
//! flash device it is the bottleneck: each request's insert, dispatch and completion hooks take
//! CPU time the submitters and the device's own work (a loop device's worker) needed, and
//! bfq's and mq-deadline's run under one lock per device. The simulator times requests, not
//! CPUs; this module turns a run's request rate into the CPU time it would need and, where
//! the machine does not have it, stretches the run:
//!
//! - **CPU**: the recording shows its machine's busy CPU time per request, `w` (the CPU
//!   samples of format 1.5: everything the machine did, the tracer included, over the requests
//!   the device issued), and its busy share `u`. Under scheduler `S` each request costs
//!   `w + delta`, `delta = cost(S) - cost(recorded)`. The CPUs' part of each request's cycle
//!   (`u` of it) lengthens by `(w + delta) / w`, the rest (the device, waiting) does not: the
//!   run is stretched by `1 + u delta / w` (shortened where `delta < 0`), and at least by what
//!   the CPUs can give, `R (w + delta) / cpus` at the simulated rate `R`, so a saturated
//!   machine ends at `cpus / (w + delta)` requests/s. Stretched means every interval of the
//!   workload and the device (think times, open-loop arrivals, service times) lengthens and
//!   timers do not.
//! - **Lock**: bfq and mq-deadline serialise every request of a device, kyber every request
//!   of a domain (reads, writes, other), `none` nothing of its own: at most
//!   `1e9 / hold` requests/s per lock, whatever the CPUs ([`lock_hold_ns`]).
//!
//! Costs come from a host profile ([`HostProfile`]: `iosched-trace calibrate`), given,
//! copied into the recording, or the documented defaults; the charge says which.
//!
//! Owns: the arithmetic of the charge. Must not: simulate (the replay reruns the simulator
//! on the stretched workload) or measure.

use serde::Serialize;

use iosched_core::record::{CpuUse, HostProfile, SchedCost};

use crate::sched::SchedKind;

/// A recording this busy (share of all CPUs) was CPU-bound: its timings are what CPU
/// contention made them.
pub const CPU_BOUND_SHARE: f64 = 0.9;

/// Stretches closer to 1 than this are noise, not a bound: the run stands as simulated.
pub const STRETCH_EPSILON: f64 = 0.01;

/// Where a replay's scheduler costs came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "from", content = "path", rename_all = "snake_case")]
pub enum ProfileSource {
    /// `--host-profile PATH`.
    Given(String),
    /// The profile `record` copied into the recording's header.
    Recording,
    /// The host's default profile, on the host the recording was made on.
    HostDefault(String),
    /// [`HostProfile::defaults`].
    Defaults,
}

/// The machine of a recording, as the model charges it.
#[derive(Clone, Debug, Serialize)]
pub struct CpuModel {
    pub profile: HostProfile,
    pub profile_source: ProfileSource,
    /// The recording's CPU use over the workload's span (`None`: not recorded; only the
    /// lock is charged).
    pub recorded: Option<CpuUse>,
    /// Busy CPU ns per request the device issued in the recording.
    pub busy_ns_per_request: Option<f64>,
    /// The recorded scheduler's name and its cost (0 where the profile has none).
    pub recorded_scheduler: Option<String>,
    pub recorded_cost: SchedCost,
    /// Requests/s the device issued over the recording's CPU span: under the recorded
    /// scheduler its lock let at least that many through ([`CpuModel::charge`]).
    pub recorded_iops: Option<f64>,
    /// Kyber's domains the workload uses (each has its own lock); set by the replayer.
    pub kyber_domains: u32,
}

/// What a run was charged.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuCharge {
    pub scheduler: String,
    /// Its cost per request from the profile, and what it adds over the recorded one's, ns.
    pub cost: SchedCost,
    pub added_ns_per_request: f64,
    /// The run's rate before the charge, requests/s.
    pub simulated_iops: f64,
    /// Share of the machine's CPUs that rate would need (`None` without CPU context).
    pub cpu_demand: Option<f64>,
    /// The most the CPUs allow at this scheduler's cost, requests/s.
    pub cpu_cap_iops: Option<f64>,
    /// The recording's busy share: the part of each request's cycle the CPUs took.
    pub cpu_busy_share: Option<f64>,
    /// How long a request holds its lock, ns, and the most that allows, requests/s (`None`:
    /// no lock of its own).
    pub lock_hold_ns: f64,
    pub lock_cap_iops: Option<f64>,
    /// How much longer (> 1) or shorter (< 1) every interval of the run became.
    pub stretch: f64,
    pub bound: Bound,
}

/// What bounds a charged run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Neither the CPUs nor the lock: the run stands as simulated.
    #[default]
    Neither,
    /// The CPUs: the run would need more than the machine has.
    Cpu,
    /// The CPUs' share of each request's cycle: more CPU time per request lengthens the part
    /// of the cycle the CPUs took (the recording's busy share of it).
    CpuShare,
    Lock,
    /// Less CPU time per request than the recorded scheduler: that part of the cycle shorter.
    CpuFreed,
}

impl CpuModel {
    /// The model of `recorded` (CPU use over the workload's span, with the requests the
    /// device issued in it) under `profile`.
    pub fn new(
        profile: HostProfile,
        profile_source: ProfileSource,
        recorded: Option<CpuUse>,
        requests: u64,
        recorded_scheduler: Option<&str>,
    ) -> CpuModel {
        let recorded = recorded.filter(|c| c.online_cpus > 0 && c.busy_ns + c.idle_ns > 0);
        let busy_ns_per_request = recorded
            .filter(|_| requests > 0)
            .map(|c| c.busy_ns as f64 / requests as f64);
        let recorded_cost = recorded_scheduler
            .and_then(|s| profile.cost(s))
            .unwrap_or_default();
        CpuModel {
            profile,
            profile_source,
            recorded,
            busy_ns_per_request,
            recorded_scheduler: recorded_scheduler.map(str::to_string),
            recorded_cost,
            recorded_iops: recorded
                .filter(|c| c.span_ns > 0 && requests > 0)
                .map(|c| requests as f64 * 1e9 / c.span_ns as f64),
            kyber_domains: 1,
        }
    }

    /// The recording was CPU-bound.
    pub fn cpu_bound(&self) -> bool {
        self.recorded
            .is_some_and(|c| c.busy_share() >= CPU_BOUND_SHARE)
    }

    /// The charge of a run under `sched` that simulated `iops` requests/s.
    pub fn charge(&self, sched: SchedKind, iops: f64, domains: u32) -> CpuCharge {
        let cost = self.profile.cost(sched.name()).unwrap_or_default();
        let added = cost.cpu_ns_per_request - self.recorded_cost.cpu_ns_per_request;
        let cpus = self.recorded.map(|c| f64::from(c.online_cpus));
        let (cpu_demand, cpu_cap_iops) = match (self.busy_ns_per_request, cpus) {
            (Some(w), Some(cpus)) => {
                let per_request = (w + added).max(1.0);
                (
                    Some(iops * per_request / (cpus * 1e9)),
                    Some(cpus * 1e9 / per_request),
                )
            }
            _ => (None, None),
        };
        let mut stretch = 1.0;
        let mut bound = Bound::Neither;
        if let (Some(d), Some(w), Some(c)) = (cpu_demand, self.busy_ns_per_request, self.recorded) {
            // The share of each request's cycle the CPUs took is the machine's busy share:
            // that part lengthens with the CPU time per request, the rest (waiting for the
            // device, idle) does not.
            let share = c.busy_share();
            let partly = 1.0 + share * added / w.max(1.0);
            if d > 1.0 + STRETCH_EPSILON && d >= partly * (1.0 - 1e-9) {
                stretch = d;
                bound = Bound::Cpu;
            } else if partly > 1.0 + STRETCH_EPSILON {
                stretch = partly;
                bound = Bound::CpuShare;
            } else if partly < 1.0 - STRETCH_EPSILON {
                stretch = partly.max(0.1);
                bound = Bound::CpuFreed;
            }
        }
        let LockHold {
            locks,
            hold_ns: hold,
            ..
        } = self.lock_hold(sched, domains);
        let lock_cap_iops = locks.filter(|_| hold > 0.0).map(|n| n * 1e9 / hold);
        if let Some(cap) = lock_cap_iops {
            let after = iops / stretch;
            if after > cap * (1.0 + STRETCH_EPSILON) {
                stretch *= after / cap;
                bound = Bound::Lock;
            }
        }
        CpuCharge {
            scheduler: sched.name().to_string(),
            cost,
            added_ns_per_request: added,
            simulated_iops: iops,
            cpu_demand,
            cpu_cap_iops,
            cpu_busy_share: self.recorded.map(|c| c.busy_share()),
            lock_hold_ns: if locks.is_some() { hold } else { 0.0 },
            lock_cap_iops,
            stretch,
            bound,
        }
    }
}

/// A scheduler's locks and how long each request holds one ([`CpuModel::lock_hold`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LockHold {
    /// Locks the device's requests are spread over (kyber: one per domain); `None`: the
    /// scheduler has none of its own (`none`).
    pub locks: Option<f64>,
    /// The hold to charge, ns: the calibrated one ([`lock_hold_ns`]), no longer than the
    /// recording proved (see `contradicted`).
    pub hold_ns: f64,
    /// The scheduler is the recorded one and the calibrated hold would cap it below the rate
    /// the recording reached: the recording is evidence against the calibration, so the
    /// hold is clamped to what that rate allows, and nothing may be concluded from it (the
    /// recording cannot be called lock-bound on it).
    pub contradicted: bool,
}

impl CpuModel {
    /// `sched`'s lock hold, for both users of it: the replay's charge and `explain`'s
    /// scheduler-cost finding, so that the two never judge the lock differently. Under the
    /// recorded scheduler the recording is evidence: its lock let the recorded rate through,
    /// so a calibrated hold that would cap it lower is not this workload's (a bfq recording
    /// of 90k IOPS was replayed at the 40k a calibrated 25 µs allows).
    pub fn lock_hold(&self, sched: SchedKind, domains: u32) -> LockHold {
        let locks = match sched {
            SchedKind::Bfq | SchedKind::MqDeadline | SchedKind::Cfq => Some(1.0),
            SchedKind::Kyber => Some(f64::from(domains.max(1))),
            SchedKind::None => None,
        };
        let calibrated = self
            .profile
            .cost(sched.name())
            .map_or(0.0, |c| lock_hold_ns(&c));
        let proved = match (locks, self.recorded_iops) {
            (Some(n), Some(r))
                if r > 0.0 && self.recorded_scheduler.as_deref() == Some(sched.name()) =>
            {
                Some(n * 1e9 / r)
            }
            _ => None,
        };
        let contradicted = proved.is_some_and(|p| calibrated > p);
        LockHold {
            locks,
            hold_ns: proved.map_or(calibrated, |p| calibrated.min(p)),
            contradicted,
        }
    }
}

/// How long each request holds its scheduler's lock: the larger of the uncontended cost and
/// the cost with every CPU submitting. The contended figure is mostly waiting for the lock
/// (on this 2-CPU machine bfq's is 5-10 µs where its uncontended cost is under 2 µs), and a
/// lock its waiters spin on is held, for the rest of the machine, as long as they wait: the
/// device's requests go through it one at a time at that pace (bfq on a RAM-backed loop
/// device: 96k IOPS recorded, 9.1 µs each, 87% of the 110k that allows).
pub fn lock_hold_ns(cost: &SchedCost) -> f64 {
    cost.serial_ns_per_request.max(cost.cpu_ns_per_request)
}

impl CpuCharge {
    /// The run needs rerunning stretched.
    pub fn stretches(&self) -> bool {
        (self.stretch - 1.0).abs() > STRETCH_EPSILON
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(bfq_ns: f64) -> HostProfile {
        let mut p = HostProfile::defaults();
        p.source = "test".into();
        for (k, ns) in [("bfq", bfq_ns), ("mq-deadline", 1000.0), ("none", 0.0)] {
            p.schedulers.insert(
                k.into(),
                SchedCost {
                    cpu_ns_per_request: ns,
                    serial_ns_per_request: ns / 2.0,
                    ..Default::default()
                },
            );
        }
        p
    }

    /// 2 CPUs, `busy` share of them busy for 1 s, 100k requests.
    fn model(busy: f64, scheduler: &str, bfq_ns: f64) -> CpuModel {
        let use_ = CpuUse::with_busy_share(1_000_000_000, 2, busy);
        CpuModel::new(
            profile(bfq_ns),
            ProfileSource::Defaults,
            Some(use_),
            100_000,
            Some(scheduler),
        )
    }

    #[test]
    fn a_cpu_bound_machine_loses_what_the_added_cost_takes() {
        // 20 µs of CPU per request on 2 CPUs: 100k/s. BFQ adds 5 µs: 2 / 25 µs = 80k/s.
        let m = model(1.0, "none", 5_000.0);
        let c = m.charge(SchedKind::Bfq, 100_000.0, 1);
        assert_eq!(c.bound, Bound::Cpu);
        assert!((100_000.0 / c.stretch - 80_000.0).abs() < 1.0, "{c:?}");
        assert!((c.cpu_cap_iops.unwrap() - 80_000.0).abs() < 1.0);
        // The recorded scheduler is charged nothing.
        let same = m.charge(SchedKind::None, 100_000.0, 1);
        assert!(!same.stretches(), "{same:?}");
    }

    #[test]
    fn a_half_busy_machine_loses_half_of_what_a_saturated_one_would() {
        // Half busy (10 µs per request): BFQ's 5 µs more lengthens the CPUs' half of each
        // request's cycle by half: x1.25, though the CPUs would only be 75% busy.
        let m = model(0.5, "none", 5_000.0);
        let c = m.charge(SchedKind::Bfq, 100_000.0, 1);
        assert_eq!(c.bound, Bound::CpuShare, "{c:?}");
        assert!((c.stretch - 1.25).abs() < 1e-9, "{c:?}");
        assert!((c.cpu_demand.unwrap() - 0.75).abs() < 1e-9, "{c:?}");
        // A scheduler that costs nothing more changes nothing.
        assert!(!m.charge(SchedKind::None, 100_000.0, 1).stretches());
    }

    #[test]
    fn a_cheaper_scheduler_frees_a_cpu_bound_recording() {
        // Recorded under bfq at 25 µs per request (5 of them bfq's): none would do 2/20 µs.
        let m = CpuModel::new(
            profile(5_000.0),
            ProfileSource::Defaults,
            Some(CpuUse::with_busy_share(1_000_000_000, 2, 1.0)),
            80_000,
            Some("bfq"),
        );
        let c = m.charge(SchedKind::None, 80_000.0, 1);
        assert_eq!(c.bound, Bound::CpuFreed);
        assert!((80_000.0 / c.stretch - 100_000.0).abs() < 1.0, "{c:?}");
    }

    #[test]
    fn the_lock_caps_a_scheduler_whatever_the_cpus() {
        // bfq holds its lock 50 µs per request: 20k/s at most, on an idle machine.
        let mut p = profile(1_000.0);
        p.schedulers.get_mut("bfq").unwrap().serial_ns_per_request = 50_000.0;
        let mut m = model(0.1, "none", 1_000.0);
        m.profile = p.clone();
        let c = m.charge(SchedKind::Bfq, 50_000.0, 1);
        assert_eq!(c.bound, Bound::Lock, "{c:?}");
        assert!((50_000.0 / c.stretch - 20_000.0).abs() < 1.0, "{c:?}");
        // Kyber's domains each have their own: two domains, twice the cap.
        p.schedulers.get_mut("kyber").unwrap().serial_ns_per_request = 50_000.0;
        m.profile = p.clone();
        let c = m.charge(SchedKind::Kyber, 50_000.0, 2);
        assert!((50_000.0 / c.stretch - 40_000.0).abs() < 1.0, "{c:?}");
        // A bfq recording at 100k/s proves its lock let 100k/s through: replayed under bfq
        // the 50 µs hold is clamped to 10 µs (no cap below the recorded rate); a none
        // recording has no such evidence for bfq.
        let mut under_bfq = model(0.1, "bfq", 1_000.0);
        under_bfq.profile = p.clone();
        let c = under_bfq.charge(SchedKind::Bfq, 100_000.0, 1);
        assert_eq!(c.bound, Bound::Neither, "{c:?}");
        assert!((c.lock_hold_ns - 10_000.0).abs() < 1.0, "{c:?}");
        assert!((c.lock_cap_iops.unwrap() - 100_000.0).abs() < 1.0, "{c:?}");
        let faster = under_bfq.charge(SchedKind::Bfq, 150_000.0, 1);
        assert_eq!(faster.bound, Bound::Lock, "{faster:?}");
        assert!(
            (150_000.0 / faster.stretch - 100_000.0).abs() < 1.0,
            "{faster:?}"
        );
        // Without CPU context the lock is still charged.
        let bare = CpuModel::new(p, ProfileSource::Defaults, None, 0, None);
        let c = bare.charge(SchedKind::Bfq, 50_000.0, 1);
        assert_eq!((c.bound, c.cpu_demand), (Bound::Lock, None));
    }
}
