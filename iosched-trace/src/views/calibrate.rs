//! `calibrate`'s table: per scheduler, IOPS with every CPU submitting and with one thread,
//! the machine's CPU time per request, and what the profile keeps (the time added over
//! `none`'s).

use std::{fmt::Write, path::Path};

use iosched_core::record::HostProfile;

use crate::calibrate::{Calibration, added_over_none};

pub fn render(cal: &Calibration, profile: &HostProfile, written_to: &Path) -> String {
    let mut out = String::new();
    let threads = cal.runs.first().map_or(0, |r| r.contended().threads);
    let _ = writeln!(
        out,
        "calibrated on {} ({} CPUs online, scratch {}{}) in {:.1} s",
        profile.host,
        cal.online_cpus,
        cal.device,
        if cal.direct_io {
            ", direct I/O"
        } else {
            ", buffered"
        },
        cal.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "{:<12}{:>14}{:>12}{:>16}{:>17}{:>18}  added, each round",
        "scheduler",
        format!("IOPS {threads} thr"),
        "IOPS 1 thr",
        "CPU µs/request",
        "added over none",
        "added, 1 thread",
    );
    let none = cal.runs.iter().find(|r| r.scheduler == "none");
    let mut unsteady = Vec::new();
    for r in &cal.runs {
        let cost = profile.cost(&r.scheduler).unwrap_or_default();
        // The rounds' spread says how far to trust the figure on this machine.
        let rounds = match none {
            Some(none) if r.scheduler != "none" => {
                let added = added_over_none(r, none);
                let each: Vec<f64> = added.rounds.iter().map(|(c, _)| c / 1e3).collect();
                let spread = each.iter().copied().fold(f64::MIN, f64::max)
                    - each.iter().copied().fold(f64::MAX, f64::min);
                if each.len() > 1 && spread > (added.contended / 1e3).max(1.0) {
                    unsteady.push(r.scheduler.clone());
                }
                each.iter()
                    .map(|c| format!("{c:.1}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            _ => String::new(),
        };
        let line = format!(
            "{:<12}{:>14.0}{:>12.0}{:>16.2}{:>17.2}{:>18.2}  {}",
            r.scheduler,
            r.contended().iops(),
            r.uncontended().iops(),
            r.contended().busy_ns_per_request() / 1e3,
            cost.cpu_ns_per_request / 1e3,
            cost.serial_ns_per_request / 1e3,
            rounds,
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let others = cal
        .runs
        .iter()
        .map(|r| {
            r.contended()
                .others_share()
                .max(r.uncontended().others_share())
        })
        .fold(0.0, f64::max);
    if others > 0.1 {
        let _ = writeln!(
            out,
            "warning: other processes used up to {:.0}% of the CPUs meanwhile: the IOPS are \
             lower than on an idle machine (the CPU times leave their time out)",
            others * 100.0
        );
    }
    if !unsteady.is_empty() {
        let _ = writeln!(
            out,
            "warning: the rounds disagree by more than the cost itself for {}: this machine's \
             other load moves the figure; the median is kept (run calibrate again when the \
             machine is quieter to check it)",
            unsteady.join(", ")
        );
    }
    for (name, why) in &cal.skipped {
        let _ = writeln!(out, "{name:<12}skipped: {why}");
    }
    let _ = writeln!(
        out,
        "(4 KiB O_DIRECT random reads; CPU µs/request: the machine's busy time but other \
         processes' over requests completed with {threads} threads, the best round's; added: \
         over none's in the same round, the median of the rounds, with {threads} threads and \
         with one; each round: with {threads} threads)"
    );
    let _ = writeln!(out, "wrote {}", written_to.display());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::{Run, SchedRuns, profile};

    fn sched(name: &str, busy_ms: &[u64]) -> SchedRuns {
        // 100k requests in 1 s: busy ms / 100 = µs per request.
        let run = |threads, busy: u64| Run {
            threads,
            requests: 100_000,
            elapsed_ns: 1_000_000_000,
            busy_ns: busy * 1_000_000,
            idle_ns: 0,
            others_ns: 0,
        };
        SchedRuns {
            scheduler: name.into(),
            rounds: busy_ms.iter().map(|&b| (run(4, b), run(1, b))).collect(),
        }
    }

    fn table(dl: &[u64]) -> String {
        let cal = Calibration::of_runs(vec![
            sched("none", &[600, 600, 600]),
            sched("mq-deadline", dl),
        ]);
        let p = profile(&cal, "box", "6.18", "now").unwrap();
        render(&cal, &p, Path::new("/tmp/p.json"))
    }

    #[test]
    fn each_rounds_cost_is_listed_and_rounds_that_disagree_are_warned_of() {
        // +2.0, +2.2, +1.8 µs: steady.
        let steady = table(&[800, 820, 780]);
        let row = steady
            .lines()
            .find(|l| l.starts_with("mq-deadline"))
            .unwrap();
        assert!(row.ends_with("  2.0 2.2 1.8"), "{steady}");
        assert!(row.contains(" 2.00 "), "median kept: {steady}");
        assert!(!steady.contains("warning"), "{steady}");
        assert!(steady.lines().all(|l| l == l.trim_end()), "{steady:?}");
        // +2, +7, +0.5 µs: the spread (6.5) beyond the cost (2): said.
        let unsteady = table(&[800, 1300, 650]);
        assert!(
            unsteady.contains(
                "warning: the rounds disagree by more than the cost itself for mq-deadline"
            ),
            "{unsteady}"
        );
    }
}
