//! The model's check of itself: the recording replayed under its own scheduler and tunables,
//! against the recording. Every estimate `replay` and `explain` give rests on this replay;
//! where it misses the recording, their estimates are not facts, and they say so first.
//!
//! The check compares throughput and mean Q2C, in total and per process, and judges the
//! device fit (R² of per-request service times below 0, or a busy time off by more than
//! [`LIMIT_PCT`]: a failed fit). Where it fails it names what is off, from what the figures
//! show: the device model (its fit failed, or the replay's D2C misses the recording's), the
//! workload (the device time is right, yet the processes' pace is not), the CPU (the
//! recording's machine was CPU-bound, or its CPU use was not recorded on a device fast
//! enough for it to matter).
//!
//! Owns: the comparison and its verdict. Must not: word it (the views do) or replay.

use serde::Serialize;

use crate::{
    cpu::{Bound, CPU_BOUND_SHARE, CpuCharge, CpuModel},
    device::FitQuality,
    replay::{Replayer, Run, Summary},
};

/// Beyond this error on throughput or mean Q2C (%), the model does not reproduce the
/// recording.
pub const LIMIT_PCT: f64 = 25.0;

/// A process is judged on its own when it did at least this share of the bytes.
const MAJOR_PROCESS_SHARE: f64 = 0.1;

/// A device this fast (mean D2C, ms) is one where the CPU's share of a request's time is
/// not negligible.
const FAST_DEVICE_D2C_MS: f64 = 0.5;

#[derive(Clone, Debug, Serialize)]
pub struct ModelCheck {
    /// The configuration replayed: the recorded scheduler and tunables.
    pub config: String,
    pub recorded: Figures,
    pub replayed: Figures,
    pub throughput_error_pct: f64,
    pub q2c_error_pct: f64,
    pub processes: Vec<ProcessCheck>,
    /// The device fit's quality (`None` with a given device profile).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitCheck>,
    pub verdict: CheckVerdict,
    /// What is off, where the verdict is not [`CheckVerdict::Reproduces`].
    pub off: Vec<Off>,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Figures {
    pub mb_per_s: f64,
    pub iops: f64,
    pub q2c_mean_ms: f64,
    pub d2c_mean_ms: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessCheck {
    pub name: String,
    pub pid: u32,
    pub recorded_mb_s: f64,
    pub replayed_mb_s: f64,
    pub throughput_error_pct: f64,
    pub recorded_q2c_ms: f64,
    pub replayed_q2c_ms: f64,
    pub q2c_error_pct: f64,
    /// Judged on its own (did [`MAJOR_PROCESS_SHARE`] of the bytes or more).
    pub major: bool,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct FitCheck {
    pub r2: f64,
    pub busy_time_error_pct: f64,
    pub failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    /// Within [`LIMIT_PCT`] on throughput and mean Q2C, every major process within it, and
    /// the fit holds.
    Reproduces,
    /// It does not: estimates are unreliable.
    Unreliable,
}

/// What in the model is off.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "part", rename_all = "snake_case")]
pub enum Off {
    /// The device fit failed: its per-request service times do not explain the trace's.
    DeviceFit { r2: f64, busy_time_error_pct: f64 },
    /// The replay's device time per request misses the recording's.
    DeviceTime {
        recorded_d2c_ms: f64,
        replayed_d2c_ms: f64,
    },
    /// The device time is right and the throughput or Q2C is not: the processes' pace
    /// (think times, dependencies, how many they keep in flight) as extracted.
    Workload {
        throughput_error_pct: f64,
        q2c_error_pct: f64,
    },
    /// Processes off on their own (those with a share of the bytes).
    Processes { names: Vec<String> },
    /// The recording's machine was CPU-bound: every time in it is what CPU contention made
    /// it, and the model charges only the schedulers' share of it.
    CpuBound { busy_share: f64 },
    /// The machine's CPU use was not recorded (recordings before format 1.5) on a device
    /// fast enough for it to matter.
    CpuUnknown { d2c_mean_ms: f64 },
}

fn error_pct(predicted: f64, measured: f64) -> f64 {
    if measured.abs() < 1e-12 {
        if predicted.abs() < 1e-12 { 0.0 } else { 100.0 }
    } else {
        100.0 * (predicted - measured) / measured
    }
}

fn figures(s: &Summary) -> Figures {
    Figures {
        mb_per_s: s.mb_per_s,
        iops: s.iops,
        q2c_mean_ms: s.q2c_mean_ms,
        d2c_mean_ms: s.d2c_mean_ms,
    }
}

/// A fit with R² below 0 (to two decimals) or a busy time off by more than [`LIMIT_PCT`].
pub fn fit_failed(q: &FitQuality) -> bool {
    q.samples > 0 && (q.r2 < -0.005 || q.total_error_pct.abs() > LIMIT_PCT)
}

/// Checks `as_recorded` (the replay of the recorded configuration) against `recorded`.
pub fn check(r: &Replayer, recorded: &Summary, as_recorded: &Run) -> ModelCheck {
    check_summaries(
        r.fit.as_ref(),
        &r.cpu,
        recorded,
        &as_recorded.summary,
        as_recorded.cpu.as_ref(),
        &as_recorded.config.label,
    )
}

/// [`check`] from its parts: the fit, the CPU model, the two summaries, the charge of the
/// replay and its label.
pub fn check_summaries(
    fit: Option<&FitQuality>,
    cpu: &CpuModel,
    recorded: &Summary,
    replayed: &Summary,
    charge: Option<&CpuCharge>,
    label: &str,
) -> ModelCheck {
    let throughput_error_pct = error_pct(replayed.mb_per_s, recorded.mb_per_s);
    let q2c_error_pct = error_pct(replayed.q2c_mean_ms, recorded.q2c_mean_ms);
    let total_bytes: u64 = recorded.processes.iter().map(|p| p.bytes).sum();
    let processes: Vec<ProcessCheck> = recorded
        .processes
        .iter()
        .map(|p| {
            let m = replayed.process(p.pid);
            let replayed_mb_s = m.map_or(0.0, |m| m.mb_per_s);
            let replayed_q2c_ms = m.map_or(0.0, |m| m.q2c_mean_ms);
            ProcessCheck {
                name: p.name.clone(),
                pid: p.pid,
                recorded_mb_s: p.mb_per_s,
                replayed_mb_s,
                throughput_error_pct: error_pct(replayed_mb_s, p.mb_per_s),
                recorded_q2c_ms: p.q2c_mean_ms,
                replayed_q2c_ms,
                q2c_error_pct: error_pct(replayed_q2c_ms, p.q2c_mean_ms),
                major: total_bytes > 0
                    && p.bytes as f64 >= MAJOR_PROCESS_SHARE * total_bytes as f64,
            }
        })
        .collect();
    let fit = fit.filter(|q| q.samples > 0).map(|q| FitCheck {
        r2: q.r2,
        busy_time_error_pct: q.total_error_pct,
        failed: fit_failed(q),
    });
    let mut off = Vec::new();
    if let Some(f) = fit.filter(|f| f.failed) {
        off.push(Off::DeviceFit {
            r2: f.r2,
            busy_time_error_pct: f.busy_time_error_pct,
        });
    }
    let totals_off = throughput_error_pct.abs() > LIMIT_PCT || q2c_error_pct.abs() > LIMIT_PCT;
    let off_processes: Vec<String> = processes
        .iter()
        .filter(|p| {
            p.major
                && (p.throughput_error_pct.abs() > LIMIT_PCT || p.q2c_error_pct.abs() > LIMIT_PCT)
        })
        .map(|p| p.name.clone())
        .collect();
    if totals_off || !off_processes.is_empty() {
        let d2c_error = error_pct(replayed.d2c_mean_ms, recorded.d2c_mean_ms);
        if d2c_error.abs() > LIMIT_PCT {
            off.push(Off::DeviceTime {
                recorded_d2c_ms: recorded.d2c_mean_ms,
                replayed_d2c_ms: replayed.d2c_mean_ms,
            });
        } else if totals_off {
            off.push(Off::Workload {
                throughput_error_pct,
                q2c_error_pct,
            });
        }
        if !off_processes.is_empty() {
            off.push(Off::Processes {
                names: off_processes,
            });
        }
        match cpu.recorded {
            Some(c) if c.busy_share() >= CPU_BOUND_SHARE => off.push(Off::CpuBound {
                busy_share: c.busy_share(),
            }),
            None if recorded.d2c_mean_ms < FAST_DEVICE_D2C_MS => off.push(Off::CpuUnknown {
                d2c_mean_ms: recorded.d2c_mean_ms,
            }),
            _ => {}
        }
        // The replay as recorded hit the CPUs' bound the recording itself stayed under: the
        // CPU charge is off (its per-request figure is the recording's own, so this is the
        // sim running faster than the machine could).
        if charge.is_some_and(|c| c.bound == Bound::Cpu)
            && !off.iter().any(|o| matches!(o, Off::CpuBound { .. }))
        {
            off.push(Off::CpuBound {
                busy_share: cpu.recorded.map_or(0.0, |c| c.busy_share()),
            });
        }
    }
    let verdict = if off.is_empty() {
        CheckVerdict::Reproduces
    } else {
        CheckVerdict::Unreliable
    };
    ModelCheck {
        config: label.to_string(),
        recorded: figures(recorded),
        replayed: figures(replayed),
        throughput_error_pct,
        q2c_error_pct,
        processes,
        fit,
        verdict,
        off,
    }
}

impl ModelCheck {
    pub fn reproduces(&self) -> bool {
        self.verdict == CheckVerdict::Reproduces
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::ProfileSource;
    use crate::replay::ProcessSummary;
    use iosched_core::record::{CpuUse, HostProfile};

    fn summary(mb_s: f64, q2c_ms: f64, d2c_ms: f64) -> Summary {
        Summary {
            mb_per_s: mb_s,
            iops: mb_s * 256.0,
            q2c_mean_ms: q2c_ms,
            d2c_mean_ms: d2c_ms,
            processes: vec![ProcessSummary {
                name: "fio(1)".into(),
                pid: 1,
                bytes: 1 << 30,
                mb_per_s: mb_s,
                q2c_mean_ms: q2c_ms,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn cpu(busy_share: Option<f64>) -> CpuModel {
        let use_ = busy_share.map(|b| CpuUse::with_busy_share(1_000_000_000, 2, b));
        CpuModel::new(
            HostProfile::defaults(),
            ProfileSource::Defaults,
            use_,
            1000,
            Some("none"),
        )
    }

    fn good_fit() -> FitQuality {
        FitQuality {
            samples: 1000,
            r2: 0.8,
            ..Default::default()
        }
    }

    #[test]
    fn a_replay_within_ten_percent_passes() {
        let fit = good_fit();
        let c = check_summaries(
            Some(&fit),
            &cpu(Some(0.5)),
            &summary(100.0, 1.0, 0.8),
            &summary(92.0, 1.08, 0.82),
            None,
            "none (as recorded)",
        );
        assert_eq!(c.verdict, CheckVerdict::Reproduces, "{c:?}");
        assert!(c.off.is_empty());
        assert!((c.throughput_error_pct + 8.0).abs() < 1e-9);
    }

    #[test]
    fn a_replay_thirty_percent_off_is_refused_and_says_what_is_off() {
        let fit = good_fit();
        // Throughput 30% low with the device time right: the workload's pace.
        let c = check_summaries(
            Some(&fit),
            &cpu(Some(0.5)),
            &summary(100.0, 1.0, 0.8),
            &summary(70.0, 1.0, 0.8),
            None,
            "none (as recorded)",
        );
        assert_eq!(c.verdict, CheckVerdict::Unreliable);
        assert!(matches!(c.off[0], Off::Workload { .. }), "{:?}", c.off);
        assert!(c.off.contains(&Off::Processes {
            names: vec!["fio(1)".into()]
        }));
        // Q2C 30% high with the device time off too, on a CPU-bound machine: device and CPU.
        let c = check_summaries(
            Some(&fit),
            &cpu(Some(0.97)),
            &summary(100.0, 1.0, 0.1),
            &summary(100.0, 1.3, 0.2),
            None,
            "x",
        );
        assert_eq!(c.verdict, CheckVerdict::Unreliable);
        assert!(matches!(c.off[0], Off::DeviceTime { .. }), "{:?}", c.off);
        assert!(c.off.iter().any(|o| matches!(o, Off::CpuBound { .. })));
        // No CPU context on a fast device: said.
        let c = check_summaries(
            Some(&fit),
            &cpu(None),
            &summary(100.0, 1.0, 0.05),
            &summary(60.0, 1.0, 0.05),
            None,
            "x",
        );
        assert!(
            c.off.iter().any(|o| matches!(o, Off::CpuUnknown { .. })),
            "{:?}",
            c.off
        );
    }

    #[test]
    fn a_failed_fit_is_reported_even_when_the_totals_agree() {
        let fit = FitQuality {
            samples: 1000,
            r2: -0.5,
            ..Default::default()
        };
        let c = check_summaries(
            Some(&fit),
            &cpu(Some(0.5)),
            &summary(100.0, 1.0, 0.8),
            &summary(100.0, 1.0, 0.8),
            None,
            "x",
        );
        assert_eq!(c.verdict, CheckVerdict::Unreliable);
        assert!(matches!(c.off[0], Off::DeviceFit { .. }));
        let busy = FitQuality {
            samples: 1000,
            r2: 0.5,
            total_error_pct: 40.0,
            ..Default::default()
        };
        assert!(fit_failed(&busy));
        assert!(!fit_failed(&good_fit()));
    }
}
