//! The model's check of itself and its CPU charge, in words: the first lines of `replay` and
//! `explain` ([`iosched_model::model_check`], [`iosched_model::cpu`]).
//!
//! Owns: the wording. Must not: judge (the verdict is the model's).

use iosched_model::{
    cpu::{Bound, CpuCharge, CpuModel, ProfileSource},
    model_check::{CheckVerdict, ModelCheck, Off},
};

/// The check in one line: what the replay as recorded gives against the recording, and the
/// verdict with what is off.
pub fn check_line(c: &ModelCheck) -> String {
    let figures = format!(
        "replaying as recorded ({}) gives {:.3} MB/s against {:.3} recorded ({:+.0}%), mean Q2C \
         {:.3} ms against {:.3} ({:+.0}%)",
        c.config,
        c.replayed.mb_per_s,
        c.recorded.mb_per_s,
        c.throughput_error_pct,
        c.replayed.q2c_mean_ms,
        c.recorded.q2c_mean_ms,
        c.q2c_error_pct
    );
    match c.verdict {
        CheckVerdict::Reproduces => format!("model check: {figures}: it reproduces the recording"),
        CheckVerdict::Unreliable => format!(
            "MODEL CHECK FAILED: the model does not reproduce this recording, so every estimate \
             below is unreliable: {figures}; off: {}",
            c.off.iter().map(off_text).collect::<Vec<_>>().join("; ")
        ),
    }
}

fn off_text(o: &Off) -> String {
    match o {
        Off::DeviceFit {
            r2,
            busy_time_error_pct,
        } => format!(
            "the device model (its fit failed: R² {r2:.2}, busy time {busy_time_error_pct:+.0}%; \
             give --device-profile)"
        ),
        Off::DeviceTime {
            recorded_d2c_ms,
            replayed_d2c_ms,
        } => format!(
            "the device model (D2C {replayed_d2c_ms:.3} ms against {recorded_d2c_ms:.3} \
             recorded)"
        ),
        Off::Workload {
            throughput_error_pct,
            q2c_error_pct,
        } => format!(
            "the workload as extracted (device time right, yet throughput \
             {throughput_error_pct:+.0}% and Q2C {q2c_error_pct:+.0}%: the processes' pace, \
             their dependencies or what they keep in flight)"
        ),
        Off::Processes { names } => format!("processes off on their own: {}", names.join(", ")),
        Off::CpuBound { busy_share } => format!(
            "the CPU (the machine was {:.0}% busy: CPU-bound, every time in the recording is \
             what contention made it)",
            busy_share * 100.0
        ),
        Off::CpuUnknown { d2c_mean_ms } => format!(
            "the CPU, perhaps (a device this fast, D2C {d2c_mean_ms:.3} ms, can be bound by CPU \
             time, and this recording has no CPU samples: recordings of format 1.5 and later \
             have them)"
        ),
    }
}

/// What the CPU model had: the machine's CPUs and where the scheduler costs come from.
pub fn cpu_line(m: &CpuModel) -> String {
    let machine = match m.recorded {
        Some(c) => format!(
            "{} CPUs, {:.0}% busy over the workload (the recorder {:.1}%), {:.1} µs of CPU per \
             request",
            c.online_cpus,
            c.busy_share() * 100.0,
            c.recorder_share() * 100.0,
            m.busy_ns_per_request.unwrap_or(0.0) / 1e3
        ),
        None => "CPU use not recorded (only the schedulers' locks are charged)".to_string(),
    };
    let costs = match &m.profile_source {
        ProfileSource::Given(p) => format!("host profile {p}"),
        ProfileSource::Recording => "the host profile in the recording".to_string(),
        ProfileSource::HostDefault(p) => format!("this host's profile {p}"),
        ProfileSource::Defaults => "documented defaults".to_string(),
    };
    let per: Vec<String> = m
        .profile
        .schedulers
        .iter()
        .map(|(k, c)| format!("{k} {:.1} µs", c.cpu_ns_per_request / 1e3))
        .collect();
    format!(
        "CPU: {machine}; scheduler costs per request from {costs} ({}; {})",
        per.join(", "),
        m.profile.source
    )
}

/// A run's charge in a line, where it bound the run (`None` where it did not).
pub fn charge_line(label: &str, c: &CpuCharge) -> Option<String> {
    let what = match c.bound {
        Bound::Neither => return None,
        Bound::Cpu => format!(
            "CPU-bound: {:+.1} µs of CPU per request against the recorded scheduler needs \
             {:.0}% of the CPUs at the simulated {:.0} IOPS; they allow {:.0}",
            c.added_ns_per_request / 1e3,
            c.cpu_demand.unwrap_or(0.0) * 100.0,
            c.simulated_iops,
            c.cpu_cap_iops.unwrap_or(0.0)
        ),
        Bound::CpuShare => format!(
            "partly CPU-bound: {:+.1} µs of CPU per request against the recorded scheduler, on \
             a machine whose CPUs took {:.0}% of each request's cycle",
            c.added_ns_per_request / 1e3,
            c.cpu_busy_share.unwrap_or(0.0) * 100.0
        ),
        Bound::Lock => format!(
            "lock-bound: {:.1} µs per request under its lock caps it at {:.0} IOPS",
            c.lock_hold_ns / 1e3,
            c.lock_cap_iops.unwrap_or(0.0)
        ),
        Bound::CpuFreed => format!(
            "CPU freed: {:.1} µs less CPU per request than the recorded scheduler, on a machine \
             whose CPUs took {:.0}% of each request's cycle",
            -c.added_ns_per_request / 1e3,
            c.cpu_busy_share.unwrap_or(0.0) * 100.0
        ),
    };
    Some(format!(
        "{label}: {what}; replayed with every interval x{:.2}",
        c.stretch
    ))
}
