//! The `#` lines a text dump opens with: what the trace is (our recording's header, or what
//! is known of a blktrace trace), its devices and notes, and where time 0 is.
//!
//! Owns the prologue's wording and the wall-clock dates in it. Must not read the trace: it
//! is given the header or metadata and the first event's time.

use super::secs;
use iosched_core::{
    event::Event,
    record::Header,
    source::{TraceFormat, TraceMeta},
};

pub(super) fn text_prologue(s: &mut String, h: &Header, first_ts: Option<u64>) {
    use std::fmt::Write as _;
    s.clear();
    let _ = writeln!(
        s,
        "# iosched-trace recording, format {}, written by iosched-trace {}",
        h.format_version, h.tool_version
    );
    let _ = write!(s, "# host {}, kernel {}", h.host, h.kernel_release);
    if let Some(boot) = &h.boot_id {
        let _ = write!(s, ", boot {boot}");
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "# started {} (monotonic {})",
        wall_clock(h.clock.realtime_ns),
        secs(h.clock.monotonic_ns)
    );
    if !h.command_line.is_empty() {
        let _ = writeln!(s, "# command: {}", h.command_line.join(" "));
    }
    for d in &h.devices {
        let _ = write!(
            s,
            "# device {} {} scheduler {}",
            d.name,
            d.dev,
            d.scheduler.as_deref().unwrap_or("?")
        );
        if !d.request_based {
            s.push_str(", bio-based (no request events)");
        }
        match d.rotational {
            Some(true) => s.push_str(", rotational"),
            Some(false) => s.push_str(", non-rotational"),
            None => {}
        }
        if let Some(lbs) = d.logical_block_size {
            let _ = write!(s, ", {lbs}-byte blocks");
        }
        if let Some(n) = d.nr_requests {
            let _ = write!(s, ", nr_requests {n}");
        }
        if let Some(n) = d.nomerges {
            let _ = write!(s, ", nomerges {n}");
        }
        if let Some(n) = d.max_sectors_kb {
            let _ = write!(s, ", max_sectors_kb {n}");
        }
        if let Some(model) = &d.model {
            let _ = write!(s, ", model {model:?}");
        }
        s.push('\n');
        if !d.iosched.is_empty() {
            let values: Vec<String> = d.iosched.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "#   iosched: {}", values.join(" "));
        }
    }
    if let Some(n) = h.online_cpus {
        let _ = writeln!(s, "# cpus online: {n}");
    }
    if let Some(p) = &h.host_profile {
        let costs: Vec<String> = p
            .schedulers
            .iter()
            .map(|(name, c)| format!("{name} +{:.0} ns", c.cpu_ns_per_request))
            .collect();
        let _ = writeln!(
            s,
            "# host profile: {} (CPU per request over none: {})",
            p.source,
            costs.join(", ")
        );
    }
    for note in &h.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    match first_ts {
        Some(ts) => {
            let _ = writeln!(
                s,
                "# time 0 = first event, monotonic {} = {}",
                secs(ts),
                wall_clock(h.clock.to_realtime(ts))
            );
        }
        None => s.push_str("# no events\n"),
    }
}

/// The prologue of a trace without our header (blktrace files).
pub(super) fn foreign_prologue(s: &mut String, meta: &TraceMeta, first: Option<&Event>) {
    use std::fmt::Write as _;
    s.clear();
    let format = match meta.format {
        TraceFormat::Recording => "recording",
        TraceFormat::Blktrace => "blktrace trace",
    };
    let _ = writeln!(s, "# {format} {}", meta.path.display());
    for d in &meta.devices {
        let _ = writeln!(s, "# device {} {}", d.name, d.dev);
    }
    for note in &meta.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    match first {
        Some(ev) => {
            let _ = writeln!(s, "# time 0 = first event, trace time {}", secs(ev.ts_ns));
        }
        None => s.push_str("# no events\n"),
    }
}

/// `YYYY-MM-DD HH:MM:SS.nnnnnnnnn UTC` (proleptic Gregorian; days-to-civil after Howard
/// Hinnant's algorithm).
fn wall_clock(ns: u64) -> String {
    let t = iosched_core::units::utc(ns);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} UTC",
        t.year, t.month, t.day, t.hour, t.minute, t.second, t.nanos
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_dates() {
        assert_eq!(wall_clock(0), "1970-01-01 00:00:00.000000000 UTC");
        assert_eq!(
            wall_clock(951_782_400_000_000_001),
            "2000-02-29 00:00:00.000000001 UTC"
        );
        assert_eq!(
            wall_clock(1_764_504_000_000_000_000),
            "2025-11-30 12:00:00.000000000 UTC"
        );
    }
}
