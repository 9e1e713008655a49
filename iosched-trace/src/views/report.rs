//! `report`'s text: the [`Report`] laid out for reading (sections, aligned columns,
//! units). The JSON form is the same data serialized (docs/REPORT.md).

use std::{collections::BTreeMap, fmt::Write};

use iosched_core::{
    analysis::{
        Report,
        latency::LatencySummary,
        report::{
            CpuContext, DeviceReport, DirectionReport, PLUGS_COUNTED, PLUGS_LAST_CHECKPOINT,
            PLUGS_NONE, PLUGS_UNKNOWN, ProcessReport,
        },
        seeks::SeekSummary,
    },
    units::{BytesStyle, human_bytes, human_ns},
};

fn mib_s(bytes_per_s_mb: f64) -> String {
    // Reports carry MB/s (10^6); show MiB/s like iostat -m does not, but fio does.
    format!("{:.2} MiB/s", bytes_per_s_mb * 1e6 / (1024.0 * 1024.0))
}

fn dir_line(name: &str, d: &DirectionReport) -> String {
    format!(
        "{name:<5} {:>9.0} IOPS {:>13}  {:>9} requests {:>11}",
        d.iops,
        mib_s(d.mb_per_s),
        d.requests,
        human_bytes(d.bytes as f64, BytesStyle::UpToGib)
    )
}

/// `cpu: 2 online; machine 61.0% busy, recorder 2.3% (over 5.00 s); host profile: ...`.
fn cpu_line(c: &CpuContext) -> String {
    let online = c
        .online_cpus
        .map_or_else(|| "? online".to_string(), |n| format!("{n} online"));
    let use_ = match (c.busy_share, c.recorder_share) {
        (Some(busy), Some(rec)) => format!(
            "machine {:.1}% busy, recorder {:.1}% (over {})",
            busy * 100.0,
            rec * 100.0,
            human_ns(c.span_ns as f64)
        ),
        _ => "machine use not sampled".to_string(),
    };
    let profile = match &c.host_profile {
        Some(source) => format!("host profile in the header ({source})"),
        None => "no host profile in the header".to_string(),
    };
    format!("cpu: {online}; {use_}; {profile}")
}

fn seek_line(s: &SeekSummary) -> String {
    format!(
        "{} distances, {} seeks; mean {:.0}, median {}, mode {} sectors",
        s.count, s.seeks, s.mean_sectors, s.median_sectors, s.mode_sectors
    )
}

fn latency_table(out: &mut String, indent: &str, stages: &BTreeMap<&'static str, LatencySummary>) {
    if stages.is_empty() {
        let _ = writeln!(out, "{indent}(no latency samples)");
        return;
    }
    let _ = writeln!(
        out,
        "{indent}{:<6}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "stage", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
    );
    // btt's order, then Q2D.
    for name in [
        "q2q", "q2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2d",
    ] {
        if let Some(s) = stages.get(name) {
            let _ = writeln!(
                out,
                "{indent}{:<6}{:>9}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
                name.to_uppercase(),
                s.count,
                human_ns(s.mean_ns),
                human_ns(s.p50_ns as f64),
                human_ns(s.p90_ns as f64),
                human_ns(s.p99_ns as f64),
                human_ns(s.p999_ns as f64),
                human_ns(s.max_ns as f64),
            );
        }
    }
}

fn device_section(out: &mut String, d: &DeviceReport, plugs_from: &str) {
    let _ = writeln!(
        out,
        "{} ({})  scheduler {}  rotational {}",
        d.name,
        d.dev,
        d.scheduler.as_deref().unwrap_or("?"),
        d.rotational.map_or("?", |r| if r { "yes" } else { "no" })
    );
    for (name, dir) in [("read", &d.read), ("write", &d.write), ("other", &d.other)] {
        if dir.requests > 0 || name != "other" {
            let _ = writeln!(out, "  {}", dir_line(name, dir));
        }
    }
    let _ = writeln!(
        out,
        "  merging   {} bios queued -> {} requests dispatched: merge ratio {:.2} \
         (back {}, front {}, request {}); average request {}",
        d.bios_queued,
        d.requests_dispatched,
        d.merge_ratio,
        d.merges.back,
        d.merges.front,
        d.merges.request,
        human_bytes(d.avg_request_bytes, BytesStyle::UpToGib)
    );
    let _ = writeln!(
        out,
        "  depth     waiting mean {:.2} max {} | in driver mean {:.2} max {} | \
         utilization {:.1}%",
        d.queue_depth.scheduler_mean,
        d.queue_depth.scheduler_max,
        d.queue_depth.driver_mean,
        d.queue_depth.driver_max,
        d.util_pct
    );
    let _ = writeln!(
        out,
        "  idle      with I/O waiting {} ({:.1}%, {} intervals) | nothing waiting {} ({:.1}%) \
         | transit gaps {} ({})",
        human_ns(d.idle_with_pending_ns as f64),
        d.idle_with_pending_pct,
        d.idle_with_pending_intervals,
        human_ns(d.idle_empty_ns as f64),
        d.idle_empty_pct,
        human_ns(d.idle_short_gaps_ns as f64),
        d.idle_short_gaps
    );
    let _ = writeln!(out, "  seeks Q2Q {}", seek_line(&d.seeks_q2q));
    let _ = writeln!(out, "  seeks D2D {}", seek_line(&d.seeks_d2d));
    if plugs_from == PLUGS_UNKNOWN {
        let _ = writeln!(
            out,
            "  plugs     unknown (counted in the kernel; the recording ends before any counts \
             were written); {:.2} bios waiting at each Q",
            d.active_at_q_mean
        );
    } else if plugs_from != PLUGS_NONE {
        // Kernel counters cover the whole recording, whatever the window: say so, and say
        // when they stop at the last checkpoint of a recording that was not closed.
        let counted = match plugs_from {
            PLUGS_COUNTED => " (kernel counters)",
            PLUGS_LAST_CHECKPOINT => {
                " (kernel counters at the last checkpoint: later plugs missing)"
            }
            _ => "",
        };
        let _ = writeln!(
            out,
            "  plugs     {} plugs, {} explicit + {} timer unplugs, {:.1} requests per unplug{counted}; \
             {:.2} bios waiting at each Q",
            d.plugs.plugs,
            d.plugs.unplugs_explicit,
            d.plugs.unplugs_timer,
            d.plugs.mean_requests_per_unplug,
            d.active_at_q_mean
        );
    } else {
        let _ = writeln!(
            out,
            "  plugs     not recorded (--no-plugs); {:.2} bios waiting at each Q",
            d.active_at_q_mean
        );
    }
    if d.errors > 0 {
        let _ = writeln!(out, "  errors    {} completions failed", d.errors);
    }
    latency_table(out, "  ", &d.latency);
    for (dir, stages) in &d.latency_by_direction {
        if d.latency_by_direction.len() > 1 {
            let _ = writeln!(out, "  {dir}:");
            latency_table(out, "    ", stages);
        }
    }
}

fn stage_pair(p: &ProcessReport, stage: &str) -> String {
    p.latency.get(stage).map_or_else(
        || "-".into(),
        |s| {
            format!(
                "{}/{}",
                human_ns(s.p50_ns as f64),
                human_ns(s.p99_ns as f64)
            )
        },
    )
}

fn process_table(out: &mut String, processes: &[ProcessReport]) {
    let _ = writeln!(
        out,
        "{:>7} {:>7} {:<16} {:>8} {:>10} {:>8} {:>12} {:>5} {:>19} {:>19} {:>10} {:>10} {:>10}",
        "PID",
        "TGID",
        "COMM",
        "REQS",
        "BYTES",
        "IOPS",
        "THROUGHPUT",
        "SEQ%",
        "Q2D p50/p99",
        "D2C p50/p99",
        "THINK",
        "IDLE CAUSED",
        "IDLE WAITED"
    );
    for p in processes {
        let _ = writeln!(
            out,
            "{:>7} {:>7} {:<16} {:>8} {:>10} {:>8.0} {:>12} {:>5.1} {:>19} {:>19} {:>10} {:>10} {:>10}",
            p.pid,
            p.tgid,
            p.comm,
            p.requests,
            human_bytes(p.bytes as f64, BytesStyle::UpToGib),
            p.iops,
            mib_s(p.mb_per_s),
            p.sequential_pct,
            stage_pair(p, "q2d"),
            stage_pair(p, "d2c"),
            if p.think_time.count > 0 {
                human_ns(p.think_time.mean_ns)
            } else {
                "-".into()
            },
            human_ns(p.idle_waste_caused_ns as f64),
            human_ns(p.idle_waste_suffered_ns as f64),
        );
    }
}

/// How many processes get their own latency table.
const DETAILED_PROCESSES: usize = 8;

/// A device's figures span by span where its scheduler was switched while recording.
fn scheduler_spans(out: &mut String, r: &Report, device: &str) {
    let spans: Vec<_> = r
        .by_scheduler
        .iter()
        .filter(|s| s.device == device)
        .collect();
    if spans.is_empty() {
        return;
    }
    let _ = writeln!(out, "  by scheduler (switched while recording):");
    let rel = |ns: u64| ns.saturating_sub(r.trace.from_ns) as f64 / 1e9;
    for s in spans {
        let d = &s.report;
        let q2c = d.latency.get("q2c");
        let d2c = d.latency.get("d2c");
        let _ = writeln!(
            out,
            "    {:<12} {:>8.3}-{} s  {} requests, {:.0} IOPS  Q2C mean {} p99 {}  D2C mean {}",
            s.scheduler,
            rel(s.from_ns),
            s.to_ns
                .map_or_else(|| "end".to_string(), |t| format!("{:.3}", rel(t))),
            d.requests_dispatched,
            d.read.iops + d.write.iops + d.other.iops,
            q2c.map_or("-".into(), |l| human_ns(l.mean_ns)),
            q2c.map_or("-".into(), |l| human_ns(l.p99_ns as f64)),
            d2c.map_or("-".into(), |l| human_ns(l.mean_ns)),
        );
    }
}

/// `report --follow`'s lines for one interval of trace time, `from_s` to `to_s` seconds
/// after the first event, written with `decimals` decimals: one per device that did I/O in
/// it (its completed requests, their rate and throughput, Q2C and D2C of the I/O completed
/// in it), or one `no I/O` line; each ends with the events lost since the recording
/// started.
pub fn interval_lines(
    from_s: f64,
    to_s: f64,
    decimals: usize,
    devices: &[&DeviceReport],
    lost: u64,
) -> String {
    let when = format!("{:>15}", format!("{from_s:.decimals$}-{to_s:.decimals$} s"));
    if devices.is_empty() {
        return format!("{when}  no I/O  lost {lost}\n");
    }
    let p = |d: &DeviceReport, stage: &str, p99: bool| {
        d.latency.get(stage).map_or_else(
            || "-".to_string(),
            |l| human_ns(if p99 { l.p99_ns } else { l.p50_ns } as f64),
        )
    };
    let mut out = String::new();
    for d in devices {
        let dirs = [&d.read, &d.write, &d.other];
        let requests: u64 = dirs.iter().map(|x| x.requests).sum();
        let iops: f64 = dirs.iter().map(|x| x.iops).sum();
        let mb: f64 = dirs.iter().map(|x| x.mb_per_s).sum();
        let _ = writeln!(
            out,
            "{when}  {:<10} {requests:>8} requests {iops:>8.0} IOPS {:>13}  Q2C p50 {:>9} p99 \
             {:>9}  D2C p50 {:>9} p99 {:>9}  lost {lost}",
            d.name,
            mib_s(mb),
            p(d, "q2c", false),
            p(d, "q2c", true),
            p(d, "d2c", false),
            p(d, "d2c", true),
        );
    }
    out
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let t = &r.trace;
    let _ = writeln!(
        out,
        "iosched-trace report: {} ({}{})",
        t.path,
        t.format,
        t.kernel_release
            .as_deref()
            .map(|k| format!(", kernel {k}"))
            .unwrap_or_default()
    );
    // The I/O's own span, where notes before or after it (wbt's timer, BFQ's messages)
    // make the window longer by more than 1%: the throughputs below are over the window.
    let io_span = t
        .io_span_ns
        .filter(|s| (t.duration_ns as f64) > 1.01 * *s as f64)
        .map(|s| {
            format!(
                "; I/O {} of it (first block I/O event to last)",
                human_ns(s as f64)
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "window {} ({} events{io_span}); lost events: {}",
        human_ns(t.duration_ns as f64),
        t.events,
        t.lost_events.map_or_else(
            || "unknown (the format does not say)".into(),
            |l| l.to_string()
        )
    );
    if let Some(cpu) = &t.cpu {
        let _ = writeln!(out, "{}", cpu_line(cpu));
    }
    for line in t
        .completion_checks
        .iter()
        .filter_map(|c| c.describe_untraced())
    {
        let _ = writeln!(out, "untraced completions (whole recording): {line}");
    }
    for f in &t.filters {
        let _ = writeln!(out, "filter: {f} (device totals cover the whole device)");
    }
    for c in &t.device_changes {
        // Times from the start of the trace, as the spans below.
        let base = t.from_ns;
        let _ = writeln!(out, "device change: {}", c.describe(base));
    }
    let _ = writeln!(out, "\n== Devices ==");
    if r.devices.is_empty() {
        let _ = writeln!(out, "(no block I/O in this window)");
    }
    for d in &r.devices {
        device_section(&mut out, d, t.plugs_from);
        scheduler_spans(&mut out, r, &d.name);
        out.push('\n');
    }

    let _ = writeln!(
        out,
        "== Processes (by submitter: the task that queued each I/O) =="
    );
    if r.processes.is_empty() {
        let _ = writeln!(out, "(none)");
    } else {
        process_table(&mut out, &r.processes);
    }
    for p in r.processes.iter().take(DETAILED_PROCESSES) {
        let _ = writeln!(
            out,
            "\n{} ({}) cgroup {}: {} bios queued, {} requests, {}; {}",
            p.comm,
            p.pid,
            p.cgroup,
            p.bios_queued,
            p.requests,
            human_bytes(p.bytes as f64, BytesStyle::UpToGib),
            if p.think_time.count > 0 {
                format!(
                    "think time mean {} p99 {} ({} gaps)",
                    human_ns(p.think_time.mean_ns),
                    human_ns(p.think_time.p99_ns as f64),
                    p.think_time.count
                )
            } else {
                "no think time (always had I/O in flight, or async)".into()
            }
        );
        latency_table(&mut out, "  ", &p.latency);
    }

    let slices: Vec<_> = r
        .processes
        .iter()
        .filter_map(|p| {
            p.slices
                .as_ref()
                .map(|s| (format!("{} ({})", p.comm, p.pid), s))
        })
        .chain(
            r.cgroups
                .iter()
                .filter_map(|c| c.slices.as_ref().map(|s| (c.cgroup.clone(), s))),
        )
        .collect();
    if !slices.is_empty() {
        let _ = writeln!(
            out,
            "\n== Service slices (runs of consecutive dispatches by one owner) =="
        );
        let _ = writeln!(
            out,
            "{:<28} {:>8} {:>10} {:>10} {:>10} {:>9} {:>9} {:>13} {:>10}",
            "OWNER",
            "SLICES",
            "TIME mean",
            "p50",
            "max",
            "REQS mean",
            "max",
            "SWITCH SEEK",
            "GAP mean"
        );
        for (owner, s) in slices {
            let _ = writeln!(
                out,
                "{:<28} {:>8} {:>10} {:>10} {:>10} {:>9.1} {:>9} {:>13.0} {:>10}",
                owner,
                s.slices,
                human_ns(s.length_ns.mean_ns),
                human_ns(s.length_ns.p50_ns as f64),
                human_ns(s.length_ns.max_ns as f64),
                s.length_requests.mean_ns,
                s.length_requests.max_ns,
                s.switch_seek_sectors.mean_ns,
                human_ns(s.switch_gap_ns.mean_ns),
            );
        }
    }

    let _ = writeln!(
        out,
        "\n== Idling waste (device idle while I/O waited to be issued) =="
    );
    let _ = writeln!(
        out,
        "total {} (gaps of at least {}; shorter ones are a request's transit through the \
         block layer)",
        human_ns(r.idling.total_idle_with_pending_ns as f64),
        human_ns(r.idling.min_interval_ns as f64)
    );
    if !r.idling.top_intervals.is_empty() {
        let _ = writeln!(
            out,
            "longest intervals:\n  {:>10} {:>10} {:<8} {:<24} waiting",
            "AT", "LASTED", "DEVICE", "AFTER (last completion)"
        );
        for iv in &r.idling.top_intervals {
            let _ = writeln!(
                out,
                "  {:>9.3}s {:>10} {:<8} {:<24} {}",
                iv.start_rel_s,
                human_ns(iv.duration_ns as f64),
                iv.device,
                format!("{} ({})", iv.after_comm, iv.after_pid),
                iv.waiting.join(", ")
            );
        }
        let _ = writeln!(out, "by pair (idle after X's completion while Y waited):");
        for p in r.idling.pairs.iter().take(10) {
            let _ = writeln!(
                out,
                "  {:>10}  after {} ({}) while {} ({}) waited",
                human_ns(p.total_ns as f64),
                p.after_comm,
                p.after_pid,
                p.waiting_comm,
                p.waiting_pid
            );
        }
    }

    let a = &t.anomalies;
    let notes = [
        (
            a.completions_of_unknown_requests,
            "completions of requests issued before the trace",
        ),
        (
            a.bios_without_queue,
            "bios first seen after their Q (queued before the trace)",
        ),
        (a.bios_in_flight_at_end, "bios still in flight at the end"),
        (
            a.requests_in_flight_at_end,
            "requests still in flight at the end",
        ),
        (
            a.reused_before_completion,
            "ids reused before their completion was seen (lost or untraced events)",
        ),
        (
            a.splits_without_parent,
            "splits whose parent bio was not seen",
        ),
        (a.errors, "completions with an error"),
    ];
    if notes.iter().any(|(n, _)| *n > 0) || !t.warnings.is_empty() {
        let _ = writeln!(
            out,
            "\n== Trace edges and anomalies (left out of the latencies) =="
        );
        for (n, what) in notes {
            if n > 0 {
                let _ = writeln!(out, "  {n:>8}  {what}");
            }
        }
        for w in &t.warnings {
            let _ = writeln!(out, "  warning: {w}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use iosched_core::analysis::report::PLUGS_EVENTS;

    /// `report` says how long the I/O itself took when notes outside it lengthen its window
    /// by more than 1%, and not otherwise.
    #[test]
    fn the_report_gives_the_ios_own_span_beside_a_window_notes_lengthen() {
        let (info, events, noted) = iosched_model::scenarios::reads_between_notes();
        let report = |events: Vec<iosched_core::event::Event>| {
            let mut src = iosched_core::source::MemorySource::new(vec![info.clone()], events);
            iosched_core::analysis::analyze(&mut src, &iosched_core::analysis::Options::default())
                .unwrap()
        };
        let (plain, with_notes) = (report(events), report(noted));
        assert_eq!(plain.trace.io_span_ns, Some(plain.trace.duration_ns));
        assert_eq!(with_notes.trace.io_span_ns, plain.trace.io_span_ns);
        assert_eq!(
            with_notes.trace.duration_ns,
            plain.trace.duration_ns + 500_000_000
        );
        let header = |r| render(r).lines().nth(1).unwrap().to_owned();
        let span = human_ns(plain.trace.duration_ns as f64);
        assert!(
            header(&with_notes).contains(&format!("I/O {span} of it")),
            "{}",
            header(&with_notes)
        );
        assert!(!header(&plain).contains("I/O"), "{}", header(&plain));
    }

    /// The plug line says where its figures come from, and says it when they stop short (a
    /// killed recorder's last checkpoint) or are missing (no counts written at all).
    #[test]
    fn the_plug_line_says_how_far_its_counts_go() {
        let (info, events, _) = iosched_model::scenarios::reads_between_notes();
        let mut src = iosched_core::source::MemorySource::new(vec![info], events);
        let mut report =
            iosched_core::analysis::analyze(&mut src, &iosched_core::analysis::Options::default())
                .unwrap();
        let mut plug_line = |from: &'static str| {
            report.trace.plugs_from = from;
            render(&report)
                .lines()
                .find(|l| l.trim_start().starts_with("plugs "))
                .unwrap()
                .to_owned()
        };
        assert!(plug_line(PLUGS_COUNTED).contains("unplug (kernel counters);"));
        assert!(
            plug_line(PLUGS_LAST_CHECKPOINT)
                .contains("at the last checkpoint: later plugs missing")
        );
        let unknown = plug_line(PLUGS_UNKNOWN);
        assert!(unknown.contains("plugs     unknown"), "{unknown}");
        assert!(!unknown.contains("0 plugs"), "{unknown}");
        assert!(plug_line(PLUGS_EVENTS).contains("per unplug;"));
        assert!(plug_line(PLUGS_NONE).contains("not recorded"));
    }
}
