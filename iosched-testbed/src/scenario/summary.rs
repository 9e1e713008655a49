//! The numbers a scenario compares, taken from `iosched-trace report --json` (schema:
//! docs/REPORT.md), and the comparison table `cargo xtask scenario` prints.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::Run;

/// One process's share of a run.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessSummary {
    pub pid: u64,
    pub comm: String,
    pub requests: u64,
    pub mb_per_s: f64,
    /// Device idle with I/O waiting, after this process's completion.
    pub idle_caused_ns: u64,
    /// Device idle while this process's I/O waited.
    pub idle_suffered_ns: u64,
    pub q2c_max_ns: u64,
    /// Its service slices (runs of consecutive dispatches): how many, and their mean length
    /// in requests. One-request slices mean the device alternated between processes.
    pub slices: u64,
    pub slice_mean_requests: f64,
}

/// "Idle after `after`'s completion while `waiting` waited": the report's idling pairs.
#[derive(Clone, Debug, Serialize)]
pub struct IdlePair {
    pub after: String,
    pub waiting: String,
    pub total_ns: u64,
}

/// One run, as the comparisons need it. Throughputs in MB/s are 10^6 bytes per second.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub label: String,
    pub scheduler: String,
    pub settings: Vec<(String, String)>,
    /// The recording's window (first to last event), seconds.
    pub window_secs: f64,
    pub lost_events: u64,
    /// Device throughput over the window, reads plus writes.
    pub mb_per_s: f64,
    pub iops: f64,
    pub bios_queued: u64,
    pub requests_dispatched: u64,
    pub merge_ratio: f64,
    pub util_pct: f64,
    /// Device idle while I/O waited to be issued (the scheduler holding it back).
    pub idle_with_pending_ns: u64,
    pub idle_with_pending_pct: f64,
    pub q2c_p99_ns: u64,
    pub q2c_max_ns: u64,
    /// What the workload itself measured: fio's bandwidth, or bytes over wall time for dd.
    pub workload_mb_per_s: Option<f64>,
    pub workload_secs: f64,
    /// Processes with requests, most requests first.
    pub processes: Vec<ProcessSummary>,
    /// Largest first.
    pub idle_pairs: Vec<IdlePair>,
}

fn num(v: &Value, what: &str) -> Result<f64, String> {
    v.as_f64()
        .ok_or_else(|| format!("{what}: not a number ({v})"))
}

fn int(v: &Value, what: &str) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("{what}: not a count ({v})"))
}

impl RunSummary {
    /// Reads the report of one run (one recorded device).
    pub fn from_report(
        run: &Run,
        report: &Value,
        workload_secs: f64,
        fio: Option<&Value>,
    ) -> Result<Self, String> {
        let devices = report["devices"]
            .as_array()
            .ok_or("no `devices` in the report")?;
        let [dev] = devices.as_slice() else {
            return Err(format!(
                "expected one device, the report has {}",
                devices.len()
            ));
        };
        let rw = |field: &str| -> Result<f64, String> {
            Ok(num(&dev["read"][field], field)? + num(&dev["write"][field], field)?)
        };
        let mut processes = Vec::new();
        for p in report["processes"].as_array().ok_or("no `processes`")? {
            let requests = int(&p["requests"], "requests")?;
            if requests == 0 {
                continue;
            }
            processes.push(ProcessSummary {
                pid: int(&p["pid"], "pid")?,
                comm: p["comm"].as_str().unwrap_or("?").to_owned(),
                requests,
                mb_per_s: num(&p["mb_per_s"], "mb_per_s")?,
                idle_caused_ns: int(&p["idle_waste_caused_ns"], "idle_waste_caused_ns")?,
                idle_suffered_ns: int(&p["idle_waste_suffered_ns"], "idle_waste_suffered_ns")?,
                q2c_max_ns: p["latency"]["q2c"]["max_ns"].as_u64().unwrap_or(0),
                slices: p["slices"]["slices"].as_u64().unwrap_or(0),
                slice_mean_requests: p["slices"]["length_requests"]["mean_ns"]
                    .as_f64()
                    .unwrap_or(0.0),
            });
        }
        processes.sort_by_key(|p| std::cmp::Reverse(p.requests));
        let mut idle_pairs = Vec::new();
        for pair in report["idling"]["pairs"].as_array().into_iter().flatten() {
            let name = |comm: &str, pid: &str| {
                format!(
                    "{} ({})",
                    pair[comm].as_str().unwrap_or("?"),
                    pair[pid].as_u64().unwrap_or(0)
                )
            };
            idle_pairs.push(IdlePair {
                after: name("after_comm", "after_pid"),
                waiting: name("waiting_comm", "waiting_pid"),
                total_ns: int(&pair["total_ns"], "total_ns")?,
            });
        }
        idle_pairs.sort_by_key(|p| std::cmp::Reverse(p.total_ns));
        let workload_mb_per_s = match (fio, &run.workload) {
            (Some(fio), _) => Some(fio_mb_per_s(fio)?),
            (None, super::Workload::DdRead { bs, count }) => {
                parse_bs(bs).map(|b| (b * u64::from(*count)) as f64 / workload_secs / 1e6)
            }
            (None, super::Workload::DsyncJournal { count }) => {
                Some(f64::from(*count) * 512.0 / workload_secs / 1e6)
            }
            (None, super::Workload::Fio(_)) => None,
        };
        Ok(Self {
            label: run.label.clone(),
            scheduler: dev["scheduler"].as_str().unwrap_or("?").to_owned(),
            settings: run
                .settings
                .iter()
                .map(|(a, v)| ((*a).to_owned(), v.clone()))
                .collect(),
            window_secs: num(&report["trace"]["duration_ns"], "duration_ns")? / 1e9,
            lost_events: int(&report["trace"]["lost_events"], "lost_events")?,
            mb_per_s: rw("mb_per_s")?,
            iops: rw("iops")?,
            bios_queued: int(&dev["bios_queued"], "bios_queued")?,
            requests_dispatched: int(&dev["requests_dispatched"], "requests_dispatched")?,
            merge_ratio: num(&dev["merge_ratio"], "merge_ratio")?,
            util_pct: num(&dev["util_pct"], "util_pct")?,
            idle_with_pending_ns: int(&dev["idle_with_pending_ns"], "idle_with_pending_ns")?,
            idle_with_pending_pct: num(&dev["idle_with_pending_pct"], "idle_with_pending_pct")?,
            q2c_p99_ns: int(&dev["latency"]["q2c"]["p99_ns"], "q2c p99")?,
            q2c_max_ns: int(&dev["latency"]["q2c"]["max_ns"], "q2c max")?,
            workload_mb_per_s,
            workload_secs,
            processes,
            idle_pairs,
        })
    }

    /// The process called `comm` (prefix match: `jbd2` finds `jbd2/loop1-8`) with the most
    /// requests.
    pub fn process(&self, comm: &str) -> Option<&ProcessSummary> {
        self.processes.iter().find(|p| p.comm.starts_with(comm))
    }

    /// Idle time after a completion of `after` while `waiting` waited (prefix matches on
    /// the command names), summed over pids.
    pub fn idle_between(&self, after: &str, waiting: &str) -> u64 {
        self.idle_pairs
            .iter()
            .filter(|p| p.after.starts_with(after) && p.waiting.starts_with(waiting))
            .map(|p| p.total_ns)
            .sum()
    }

    pub fn one_line(&self) -> String {
        format!(
            "{}: {:.2} MB/s, {} bios -> {} requests (merge {:.2}), idle with I/O waiting {} \
             ({:.1}%), Q2C p99 {} max {}{}",
            self.label,
            self.mb_per_s,
            self.bios_queued,
            self.requests_dispatched,
            self.merge_ratio,
            ms(self.idle_with_pending_ns),
            self.idle_with_pending_pct,
            ms(self.q2c_p99_ns),
            ms(self.q2c_max_ns),
            if self.lost_events > 0 {
                format!(", LOST {} events", self.lost_events)
            } else {
                String::new()
            }
        )
    }
}

/// fio's bandwidth (reads plus writes, summed over its job entries), MB/s.
fn fio_mb_per_s(fio: &Value) -> Result<f64, String> {
    let jobs = fio["jobs"].as_array().ok_or("fio JSON without jobs")?;
    let mut total = 0.0;
    for job in jobs {
        for dir in ["read", "write"] {
            total += num(&job[dir]["bw_bytes"], "fio bw_bytes")?;
        }
    }
    Ok(total / 1e6)
}

/// dd's `bs=64k` and the like.
fn parse_bs(bs: &str) -> Option<u64> {
    let (digits, unit) = bs.split_at(bs.find(|c: char| !c.is_ascii_digit()).unwrap_or(bs.len()));
    let n: u64 = digits.parse().ok()?;
    let mul = match unit {
        "" | "c" => 1,
        "k" | "K" => 1 << 10,
        "M" => 1 << 20,
        _ => return None,
    };
    Some(n * mul)
}

/// A duration in ns, shown in ms (µs below 1 ms).
pub fn ms(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{} µs", ns / 1000)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

/// The comparison table: one row per run, then who waited for whom.
pub fn table(runs: &[RunSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<11} {:>8} {:>8} {:>8} {:>8} {:>6} {:>15} {:>10} {:>10} {:>9}",
        "RUN",
        "SCHEDULER",
        "MB/s",
        "IOPS",
        "BIOS",
        "REQS",
        "MERGE",
        "IDLE W/ WAITING",
        "Q2C p99",
        "Q2C max",
        "WORKLOAD"
    );
    for r in runs {
        let idle = format!(
            "{} {:>4.1}%",
            ms(r.idle_with_pending_ns),
            r.idle_with_pending_pct
        );
        let workload = match r.workload_mb_per_s {
            Some(mb) if mb < 1.0 => format!("{:.0} kB/s", mb * 1e3),
            Some(mb) => format!("{mb:.1} MB/s"),
            None => format!("{:.1} s", r.workload_secs),
        };
        let _ = writeln!(
            out,
            "{:<22} {:<11} {:>8.2} {:>8.0} {:>8} {:>8} {:>6.2} {:>15} {:>10} {:>10} {:>9}",
            r.label,
            r.scheduler,
            r.mb_per_s,
            r.iops,
            r.bios_queued,
            r.requests_dispatched,
            r.merge_ratio,
            idle,
            ms(r.q2c_p99_ns),
            ms(r.q2c_max_ns),
            workload
        );
    }
    let waits: Vec<&RunSummary> = runs.iter().filter(|r| !r.idle_pairs.is_empty()).collect();
    if !waits.is_empty() {
        let _ = writeln!(
            out,
            "\nwho waited for whom (device idle after X's completion while Y's I/O waited):"
        );
        for r in waits {
            let pairs: Vec<String> = r
                .idle_pairs
                .iter()
                .take(2)
                .map(|p| {
                    format!(
                        "{} after {} while {} waited",
                        ms(p.total_ns),
                        p.after,
                        p.waiting
                    )
                })
                .collect();
            let _ = writeln!(out, "  {:<22} {}", r.label, pairs.join("; "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes() {
        assert_eq!(parse_bs("64k"), Some(65536));
        assert_eq!(parse_bs("512"), Some(512));
        assert_eq!(parse_bs("1M"), Some(1 << 20));
        assert_eq!(parse_bs("x"), None);
    }

    #[test]
    fn durations() {
        assert_eq!(ms(999_999), "999 µs");
        assert_eq!(ms(12_340_000), "12.3 ms");
    }
}
