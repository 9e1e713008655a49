//! The CPU context a recording was made in, and the host's measured scheduler costs.
//!
//! A scheduler's own CPU time per request is negligible on a disk and the bottleneck on a fast
//! device (BFQ at 150k IOPS where `none` does 300k on a RAM-backed loop device of a 2-CPU
//! machine). To replay a recording under another scheduler the model needs both what the
//! machine had (online CPUs, how busy they were, how much of it was the recorder: format 1.5,
//! [`Header::online_cpus`](super::Header) and a CPU chunk per checkpoint) and what each
//! scheduler costs on it ([`HostProfile`], from `iosched-trace calibrate`, copied into the
//! header by `record`).
//!
//! Owns: these types and their JSON. Must not: measure (the recorder and `calibrate` do) or
//! model (iosched-model charges the costs).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The machine's CPU time at one instant, cumulative since boot. One per CPU chunk
/// (format 1.5), written at each checkpoint; the difference of two is an interval's use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuSample {
    /// CLOCK_MONOTONIC ns when it was read: the trace clock.
    pub ts_ns: u64,
    /// All CPUs' non-idle time (`/proc/stat` `cpu` line: user, nice, system, irq, softirq,
    /// steal), ns.
    pub busy_ns: u64,
    /// All CPUs' idle and iowait time, ns.
    pub idle_ns: u64,
    /// The recorder process's own CPU time (all its threads, user + system), ns.
    pub recorder_ns: u64,
    /// CPUs online when it was read.
    pub online_cpus: u32,
}

/// `(ppid, utime + stime + cutime + cstime)` of a `/proc/PID/stat` line (proc(5): fields
/// 4 and 14-17; the command name in parentheses may hold spaces and parentheses, so fields
/// are counted after the last `)`). The recorder sums it over the machine's other processes;
/// the benches read a tracer's own with it.
pub fn parse_pid_stat_cpu(text: &str) -> Option<(u32, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ppid = u32::try_from(num(1)?).ok()?;
    Some((ppid, num(11)? + num(12)? + num(13)? + num(14)?))
}

/// CPU use over an interval: the difference of two samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuUse {
    pub span_ns: u64,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub recorder_ns: u64,
    pub online_cpus: u32,
}

impl CpuUse {
    /// `online_cpus` CPUs over `span_ns`, `share` (0..1) of their time busy, none of it the
    /// recorder's: a machine as a model's test or what-if describes it.
    pub fn with_busy_share(span_ns: u64, online_cpus: u32, share: f64) -> CpuUse {
        let total = span_ns as f64 * f64::from(online_cpus);
        let busy_ns = (total * share.clamp(0.0, 1.0)).round() as u64;
        CpuUse {
            span_ns,
            busy_ns,
            idle_ns: total as u64 - busy_ns,
            recorder_ns: 0,
            online_cpus,
        }
    }

    /// Use between the samples nearest to `[start_ns, end_ns]` (the last at or before the
    /// start, the first at or after the end; the nearest ones where the samples do not reach).
    /// `None` with fewer than two samples.
    pub fn between(samples: &[CpuSample], start_ns: u64, end_ns: u64) -> Option<CpuUse> {
        if samples.len() < 2 {
            return None;
        }
        let first = samples
            .iter()
            .rev()
            .find(|s| s.ts_ns <= start_ns)
            .unwrap_or(&samples[0]);
        let last = samples
            .iter()
            .find(|s| s.ts_ns >= end_ns)
            .unwrap_or(&samples[samples.len() - 1]);
        (last.ts_ns > first.ts_ns).then(|| CpuUse {
            span_ns: last.ts_ns - first.ts_ns,
            busy_ns: last.busy_ns.saturating_sub(first.busy_ns),
            idle_ns: last.idle_ns.saturating_sub(first.idle_ns),
            recorder_ns: last.recorder_ns.saturating_sub(first.recorder_ns),
            online_cpus: last.online_cpus.max(first.online_cpus),
        })
    }

    /// Share of the machine's CPU time that was busy, 0..1: busy over busy + idle (the
    /// machine's own accounting, immune to a sample read late).
    pub fn busy_share(&self) -> f64 {
        let total = self.busy_ns + self.idle_ns;
        if total == 0 {
            0.0
        } else {
            self.busy_ns as f64 / total as f64
        }
    }

    /// The recorder's share of the machine's CPU time, 0..1.
    pub fn recorder_share(&self) -> f64 {
        let total = self.busy_ns + self.idle_ns;
        if total == 0 {
            0.0
        } else {
            self.recorder_ns as f64 / total as f64
        }
    }
}

/// What each I/O scheduler costs on one host: written by `iosched-trace calibrate`, read by
/// `replay`/`explain` (`--host-profile`, else the recording's header, else the default
/// location), documented in docs/MODEL.md.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostProfile {
    /// Version of this layout (1).
    pub profile_version: u32,
    pub host: String,
    pub kernel_release: String,
    /// CPUs online during the calibration.
    pub online_cpus: u32,
    /// Where the figures come from: `"calibrate on HOST, 2026-12-01T23:59:00Z"`, or the
    /// defaults' source.
    pub source: String,
    /// By scheduler name as sysfs spells it (`none`, `mq-deadline`, `bfq`, `kyber`).
    pub schedulers: BTreeMap<String, SchedCost>,
}

/// One scheduler's cost per request, over what `none` costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedCost {
    /// CPU time per request its insert, dispatch and completion paths add, ns, with the
    /// calibration's submitters on every CPU (lock contention included).
    pub cpu_ns_per_request: f64,
    /// Time per request it holds the lock every request of a device (bfq, mq-deadline) or of
    /// a domain (kyber) takes, ns: the uncontended cost. Caps IOPS at 1e9 / this.
    pub serial_ns_per_request: f64,
    /// IOPS the calibration measured under it with every CPU submitting (0 where not
    /// calibrated), and the machine's busy share then (0..1).
    pub iops: f64,
    pub busy_share: f64,
}

/// The defaults when no host was calibrated, and where they come from.
pub const DEFAULT_COSTS_SOURCE: &str = "defaults from Documentation/block/bfq-iosched.rst \
     (BFQ 1.9 us, mq-deadline 0.7 us per request, single-lock-protected, Intel i7-2760QM); \
     kyber assumed as mq-deadline (no published figure); run `iosched-trace calibrate` \
     for this host's";

impl HostProfile {
    /// A profile from its text (JSON, as `calibrate` writes it), checked: at least one
    /// scheduler, every cost finite and not negative. The error says what is wrong.
    pub fn from_text(text: &str) -> Result<HostProfile, String> {
        let profile: HostProfile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if profile.schedulers.is_empty() {
            return Err("it names no scheduler".into());
        }
        let valid = |ns: f64| ns.is_finite() && ns >= 0.0;
        if let Some((name, _)) = profile
            .schedulers
            .iter()
            .find(|(_, c)| !valid(c.cpu_ns_per_request) || !valid(c.serial_ns_per_request))
        {
            return Err(format!("{name}'s costs must be finite and >= 0"));
        }
        Ok(profile)
    }

    /// The documented defaults ([`DEFAULT_COSTS_SOURCE`]).
    pub fn defaults() -> HostProfile {
        let cost = |ns: f64| SchedCost {
            cpu_ns_per_request: ns,
            serial_ns_per_request: ns,
            ..Default::default()
        };
        HostProfile {
            profile_version: 1,
            source: DEFAULT_COSTS_SOURCE.into(),
            schedulers: [
                ("none", cost(0.0)),
                ("mq-deadline", cost(700.0)),
                ("bfq", cost(1900.0)),
                ("kyber", cost(700.0)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            ..Default::default()
        }
    }

    /// Whether these are [`HostProfile::defaults`] rather than a calibration.
    pub fn is_default(&self) -> bool {
        self.source == DEFAULT_COSTS_SOURCE
    }

    /// The cost of `scheduler` (`cfq`, an old single-queue scheduler, as bfq's: no figure of
    /// its own), or `None` where the profile does not have it.
    pub fn cost(&self, scheduler: &str) -> Option<SchedCost> {
        let name = if scheduler == "cfq" { "bfq" } else { scheduler };
        self.schedulers.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_stat_cpu_is_counted_after_the_command_name() {
        let line = "1234 (a (b) c) S 77 1234 1234 0 -1 4194560 100 0 0 0 30 12 5 3 20 0 1 0 \
                    100 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_pid_stat_cpu(line), Some((77, 50)));
        assert_eq!(parse_pid_stat_cpu("1 (x) S"), None);
        assert_eq!(parse_pid_stat_cpu("no parenthesis"), None);
    }

    fn sample(ts: u64, busy: u64, idle: u64, rec: u64) -> CpuSample {
        CpuSample {
            ts_ns: ts,
            busy_ns: busy,
            idle_ns: idle,
            recorder_ns: rec,
            online_cpus: 2,
        }
    }

    #[test]
    fn use_between_takes_the_samples_around_the_span() {
        let s = [
            sample(0, 0, 0, 0),
            sample(1_000, 1_500, 500, 100),
            sample(2_000, 3_500, 500, 300),
            sample(3_000, 4_000, 2_000, 350),
        ];
        let u = CpuUse::between(&s, 1_200, 1_900).unwrap();
        assert_eq!(
            (u.span_ns, u.busy_ns, u.idle_ns, u.recorder_ns),
            (1_000, 2_000, 0, 200)
        );
        assert_eq!(u.busy_share(), 1.0);
        let all = CpuUse::between(&s, 0, 5_000).unwrap();
        assert_eq!(all.busy_ns, 4_000);
        assert!((all.busy_share() - 4_000.0 / 6_000.0).abs() < 1e-12);
        assert!(CpuUse::between(&s[..1], 0, 1).is_none());
    }

    #[test]
    fn profile_round_trips_and_defaults_name_their_source() {
        let d = HostProfile::defaults();
        assert!(d.is_default());
        assert_eq!(d.cost("bfq").unwrap().cpu_ns_per_request, 1900.0);
        assert_eq!(d.cost("cfq"), d.cost("bfq"));
        let text = serde_json::to_string(&d).unwrap();
        let back: HostProfile = serde_json::from_str(&text).unwrap();
        assert_eq!(back, d);
        // Fields a later writer adds or an older one left out do not stop a reader.
        let partial: HostProfile =
            serde_json::from_str(r#"{"schedulers":{"bfq":{"cpu_ns_per_request":5}},"x":1}"#)
                .unwrap();
        assert_eq!(partial.cost("bfq").unwrap().cpu_ns_per_request, 5.0);
        assert!(partial.cost("kyber").is_none());
    }
}
