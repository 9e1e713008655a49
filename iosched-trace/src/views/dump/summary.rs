//! The `#` lines a text dump ends with: counts per kind, lost events and why, kernel read
//! errors, each device's completion check, missing events, how the recording ended, and
//! every warning.
//!
//! Owns the summary's wording. Must not compute it: [`DumpSummary`] is filled by the
//! driver in the parent module.

use iosched_core::{event::EventKind, source::TraceFormat};

use super::{DumpSummary, secs};

pub(super) fn text_summary(s: &mut String, sum: &DumpSummary, format: TraceFormat) {
    use std::fmt::Write as _;
    let span = match (sum.first_ts_ns, sum.last_ts_ns) {
        (Some(a), Some(b)) => format!(" over {} s", secs(b - a)),
        _ => String::new(),
    };
    let _ = writeln!(s, "# summary: {} events{span}", sum.events);
    for kind in EventKind::ALL {
        if let Some(n) = sum.events_per_kind.get(kind.name()) {
            let _ = writeln!(s, "#   {:<16} {n:>10}", kind.name());
        }
    }
    match sum.lost {
        Some(lost) => {
            let _ = write!(s, "# lost events: {lost}");
            let per_cpu: Vec<String> = sum
                .lost_per_cpu
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(cpu, n)| format!("cpu{cpu} {n}"))
                .collect();
            let skipped = sum.kernel_skipped.unwrap_or(0);
            let mut parts = Vec::new();
            if lost > skipped {
                parts.push(if per_cpu.is_empty() {
                    format!("{} with the ring buffer full", lost - skipped)
                } else {
                    format!(
                        "{} with the ring buffer full: {}",
                        lost - skipped,
                        per_cpu.join(", ")
                    )
                });
            }
            if skipped > 0 {
                parts.push(format!(
                    "{skipped} the kernel did not run our programs for (already running on that \
                     CPU)"
                ));
            }
            if !parts.is_empty() {
                let _ = write!(s, " ({}): the trace is incomplete", parts.join("; "));
            }
            s.push('\n');
        }
        None if format == TraceFormat::Blktrace => {
            s.push_str("# lost events: unknown (blktrace files do not record drops)\n")
        }
        None => s.push_str("# lost events: unknown (the recording holds no statistics)\n"),
    }
    if let Some(errors) = sum.read_errors {
        let _ = writeln!(s, "# kernel read errors: {errors}");
    }
    for p in &sum.plug_counts {
        let c = &p.counts;
        let _ = writeln!(
            s,
            "# {}: plugs counted in the kernel: {} plugs, {} explicit + {} timer unplugs, {} \
             requests unplugged",
            p.device, c.plugs, c.unplugs_explicit, c.unplugs_timer, c.unplugged_requests
        );
    }
    if sum.plugs_uncounted > 0 {
        let _ = writeln!(
            s,
            "# plugs not counted: {} (the kernel's table of devices was full)",
            sum.plugs_uncounted
        );
    }
    for c in &sum.device_changes {
        // The dump's own time 0: its first event.
        let base = sum.first_ts_ns.unwrap_or(0);
        let _ = writeln!(s, "# device change: {}", c.describe(base));
    }
    for c in &sum.completion_checks {
        let (k, t) = (c.kernel(), c.traced);
        let _ = writeln!(
            s,
            "# {}: completed requests by the kernel's count {} (r {} w {} d {}), traced {}{}",
            c.device,
            k.total(),
            k.reads,
            k.writes,
            k.discards,
            t.total(),
            match (c.counters_disabled(), c.untraced()) {
                (true, _) => ": the device's I/O statistics are off, no check".to_string(),
                (false, 0) => String::new(),
                (false, n) => format!(": {n} without a completion event"),
            } + &if c.writes_compared() {
                String::new()
            } else {
                format!(
                    " (writes not compared: {} ended through the flush machinery)",
                    c.traced.writes_through_flush
                )
            }
        );
    }
    if sum.cpu_samples > 0 {
        let _ = write!(s, "# cpu samples: {}", sum.cpu_samples);
        if let Some(u) = &sum.cpu_use {
            let _ = write!(
                s,
                " over {} s: machine {:.1}% busy, recorder {:.1}% ({} CPUs)",
                secs(u.span_ns),
                u.busy_share() * 100.0,
                u.recorder_share() * 100.0,
                u.online_cpus
            );
        }
        s.push('\n');
    }
    if sum.events_missing > 0 {
        let _ = writeln!(
            s,
            "# events missing from the file: {} (damaged or unwritten chunks)",
            sum.events_missing
        );
    }
    if sum.notes > 0 {
        let _ = writeln!(s, "# notes: {}", sum.notes);
    }
    match &sum.ended_by {
        Some(by) => {
            let _ = writeln!(s, "# recording closed cleanly (ended by {by})");
        }
        None if format == TraceFormat::Recording => {
            s.push_str("# recording was not closed cleanly\n")
        }
        None => {}
    }
    for w in &sum.warnings {
        let _ = writeln!(s, "# warning: {w}");
    }
}
