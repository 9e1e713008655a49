//! `calibrate`'s table: per scheduler, IOPS with every CPU submitting and with one thread,
//! the machine's CPU time per request, and what the profile keeps (the time added over
//! `none`'s).

use std::{fmt::Write, path::Path};

use iosched_core::record::HostProfile;

use crate::calibrate::Calibration;

pub fn render(cal: &Calibration, profile: &HostProfile, written_to: &Path) -> String {
    let mut out = String::new();
    let threads = cal.runs.first().map_or(0, |r| r.contended.threads);
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
        "{:<12}{:>14}{:>12}{:>16}{:>17}{:>18}",
        "scheduler",
        format!("IOPS {threads} thr"),
        "IOPS 1 thr",
        "CPU µs/request",
        "added over none",
        "added, 1 thread"
    );
    for r in &cal.runs {
        let cost = profile.cost(&r.scheduler).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<12}{:>14.0}{:>12.0}{:>16.2}{:>17.2}{:>18.2}",
            r.scheduler,
            r.contended.iops(),
            r.uncontended.iops(),
            r.contended.busy_ns_per_request() / 1e3,
            cost.cpu_ns_per_request / 1e3,
            cost.serial_ns_per_request / 1e3,
        );
    }
    let others = cal
        .runs
        .iter()
        .map(|r| r.contended.others_share().max(r.uncontended.others_share()))
        .fold(0.0, f64::max);
    if others > 0.1 {
        let _ = writeln!(
            out,
            "warning: other processes used up to {:.0}% of the CPUs meanwhile: the IOPS are \
             lower than on an idle machine (the CPU times leave their time out)",
            others * 100.0
        );
    }
    for (name, why) in &cal.skipped {
        let _ = writeln!(out, "{name:<12}skipped: {why}");
    }
    let _ = writeln!(
        out,
        "(4 KiB O_DIRECT random reads; CPU µs/request: the machine's busy time but other \
         processes' over requests completed with {threads} threads; added: over none's, with \
         {threads} threads and with one)"
    );
    let _ = writeln!(out, "wrote {}", written_to.display());
    out
}
