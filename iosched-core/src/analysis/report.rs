//! The report's data: exactly what `report --json` prints (schema in docs/REPORT.md), and
//! its assembly from the aggregates.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    event::Dev,
    record::DeviceInfo,
    source::{Identity, InputError, TraceFormat, TraceSource},
    timeline::{Anomalies, Direction},
};

use super::{
    Aggregator, DeviceAgg, ProcessAgg,
    idling::IdleInterval,
    latency::{LatencySummary, Stages},
    seeks::SeekSummary,
    slices::SliceSummary,
};

pub const SCHEMA: &str = "iosched-trace-report/1";

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub schema: &'static str,
    pub trace: TraceSummary,
    pub devices: Vec<DeviceReport>,
    pub processes: Vec<ProcessReport>,
    pub cgroups: Vec<CgroupReport>,
    pub idling: IdlingReport,
    /// Devices whose scheduler was switched while recording, span by span
    /// ([`super::by_scheduler`]; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_scheduler: Vec<SchedulerSpan>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceSummary {
    pub path: String,
    pub format: &'static str,
    /// True when requests were paired by (device, sector, size), as btt does, because the
    /// format carries no request identity.
    pub paired_by_sector: bool,
    pub kernel_release: Option<String>,
    /// Absolute trace times (CLOCK_MONOTONIC ns) of the analyzed window.
    pub from_ns: u64,
    pub to_ns: u64,
    pub duration_ns: u64,
    /// From the window's first block I/O event to its last (a bio queued ... the last
    /// completion): the throughputs are over `duration_ns`, which timer and scheduler notes
    /// before and after the I/O lengthen. `None` without block I/O.
    pub io_span_ns: Option<u64>,
    pub events: u64,
    /// Events the recorder lost; `None` when the trace does not say.
    pub lost_events: Option<u64>,
    /// Completed requests the kernel counted with no completion event (whole recording, all
    /// checked devices); `None` when the trace holds no such check. They show in the
    /// anomalies as requests that never complete.
    pub untraced_completions: Option<u64>,
    /// The checks behind `untraced_completions`, per device.
    pub completion_checks: Vec<crate::record::CompletionCheck>,
    /// False when the recording left plug and unplug out (`record --no-plugs`): the plug
    /// figures are then zero for want of events, not of plugging.
    pub plugs_recorded: bool,
    /// What happened to the traced devices while recording (scheduler switched, removed,
    /// detached), from the recorder's device watch (format 1.6).
    pub device_changes: Vec<crate::record::DeviceChange>,
    /// Where the plug figures come from: `"events"` (P/U events, so a `--from/--until`
    /// window applies), `"kernel counters"` (format 1.6 `record`'s default: counted per
    /// device in the kernel over the whole recording, whatever the window), `"kernel
    /// counters, last checkpoint"` (the same, from a recording without its footer: the counts
    /// the recorder wrote last, so plugs after that checkpoint are missing), `"unknown"`
    /// (counted in the kernel, but the recording ends before any counts were written; the
    /// figures are then zero for want of counts), or `"none"`.
    pub plugs_from: &'static str,
    /// The CPU context the recording was made in (format 1.5 and later; `None` for older
    /// recordings and blktrace files).
    pub cpu: Option<CpuContext>,
    pub anomalies: Anomalies,
    pub warnings: Vec<String>,
    pub filters: Vec<String>,
}

/// The machine's CPU over the analyzed window, from the recording's CPU samples
/// (`record::CpuUse` between the samples around the window), and whether the recording
/// carries the host's measured scheduler costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuContext {
    /// CPUs online (the header's, else the samples').
    pub online_cpus: Option<u32>,
    /// The span the CPU use covers (between the samples around the window), ns; 0 when the
    /// recording holds fewer than two samples.
    pub span_ns: u64,
    /// Share of all CPUs' time that was busy, 0..1; `None` without two samples.
    pub busy_share: Option<f64>,
    /// Share of all CPUs' time the recorder itself used, 0..1.
    pub recorder_share: Option<f64>,
    /// The header's host profile's `source` (`calibrate on HOST, DATE`), if it has one.
    pub host_profile: Option<String>,
}

impl CpuContext {
    /// From a source's samples and header; `None` when it has neither samples nor the
    /// header's 1.5 fields.
    pub fn of(source: &dyn TraceSource, from_ns: u64, to_ns: u64) -> Option<CpuContext> {
        let samples = source.cpu_samples();
        let header = source.header();
        let online = header.and_then(|h| h.online_cpus);
        let profile = header.and_then(|h| h.host_profile.as_ref());
        if samples.is_empty() && online.is_none() && profile.is_none() {
            return None;
        }
        let used = crate::record::CpuUse::between(samples, from_ns, to_ns);
        Some(CpuContext {
            online_cpus: online.or(used.map(|u| u.online_cpus)),
            span_ns: used.map_or(0, |u| u.span_ns),
            busy_share: used.map(|u| u.busy_share()),
            recorder_share: used.map(|u| u.recorder_share()),
            host_profile: profile.map(|p| p.source.clone()),
        })
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct DirectionReport {
    pub requests: u64,
    pub bytes: u64,
    pub iops: f64,
    pub mb_per_s: f64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Merges {
    pub back: u64,
    pub front: u64,
    pub request: u64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct QueueDepth {
    /// Time-weighted mean of bios waiting (queued, not issued).
    pub scheduler_mean: f64,
    pub scheduler_max: u32,
    /// Time-weighted mean of requests in the driver.
    pub driver_mean: f64,
    pub driver_max: u32,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Plugs {
    pub plugs: u64,
    pub unplugs_explicit: u64,
    pub unplugs_timer: u64,
    pub mean_requests_per_unplug: f64,
}

impl Plugs {
    fn new(plugs: u64, unplugs_explicit: u64, unplugs_timer: u64, unplugged: u64) -> Plugs {
        let unplugs = unplugs_explicit + unplugs_timer;
        Plugs {
            plugs,
            unplugs_explicit,
            unplugs_timer,
            mean_requests_per_unplug: if unplugs == 0 {
                0.0
            } else {
                unplugged as f64 / unplugs as f64
            },
        }
    }

    /// The figures of a device's kernel plug counters.
    fn from_counts(c: &crate::record::DevicePlugCounts) -> Plugs {
        Plugs::new(
            c.plugs,
            c.unplugs_explicit,
            c.unplugs_timer,
            c.unplugged_requests,
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct DeviceReport {
    pub name: String,
    pub dev: String,
    pub scheduler: Option<String>,
    pub rotational: Option<bool>,
    pub bios_queued: u64,
    pub requests_dispatched: u64,
    /// btt's #Q / #D: bios queued per request dispatched, counting those with data (btt
    /// leaves zero-byte flushes out).
    pub merge_ratio: f64,
    pub merges: Merges,
    pub read: DirectionReport,
    pub write: DirectionReport,
    pub other: DirectionReport,
    pub avg_request_bytes: f64,
    pub queue_depth: QueueDepth,
    /// Time with at least one request in the driver.
    pub util_pct: f64,
    /// Time with nothing in the driver while I/O waited to be issued.
    pub idle_with_pending_ns: u64,
    pub idle_with_pending_pct: f64,
    pub idle_with_pending_intervals: u64,
    /// Idle-with-pending gaps below the threshold (block-layer transit), not in the above.
    pub idle_short_gaps_ns: u64,
    pub idle_short_gaps: u64,
    /// Time with nothing in the driver and nothing waiting (the workload's think time).
    pub idle_empty_ns: u64,
    pub idle_empty_pct: f64,
    pub seeks_q2q: SeekSummary,
    pub seeks_d2d: SeekSummary,
    /// btt's "active requests at Q": bios waiting when a new one was queued, mean.
    pub active_at_q_mean: f64,
    pub plugs: Plugs,
    pub errors: u64,
    pub latency: BTreeMap<&'static str, LatencySummary>,
    pub latency_by_direction: BTreeMap<&'static str, BTreeMap<&'static str, LatencySummary>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProcessReport {
    pub pid: u32,
    pub tgid: u32,
    pub comm: String,
    /// Cgroup path where known, else the numeric id.
    pub cgroup: String,
    pub cgroup_id: u64,
    pub devices: Vec<String>,
    pub bios_queued: u64,
    /// Requests completed whose first bio this process queued.
    pub requests: u64,
    /// Bytes of this process's bios completed.
    pub bytes: u64,
    pub read: DirectionReport,
    pub write: DirectionReport,
    pub iops: f64,
    pub mb_per_s: f64,
    /// Requests starting where this process's previous one ended, % of dispatched.
    pub sequential_pct: f64,
    pub think_time: LatencySummary,
    pub idle_waste_caused_ns: u64,
    pub idle_waste_suffered_ns: u64,
    pub slices: Option<SliceSummary>,
    pub latency: BTreeMap<&'static str, LatencySummary>,
    pub latency_by_direction: BTreeMap<&'static str, BTreeMap<&'static str, LatencySummary>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CgroupReport {
    pub cgroup: String,
    pub cgroup_id: u64,
    pub pids: Vec<u32>,
    pub bios_queued: u64,
    pub requests: u64,
    pub bytes: u64,
    pub slices: Option<SliceSummary>,
    pub latency: BTreeMap<&'static str, LatencySummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct IntervalReport {
    pub device: String,
    pub start_ns: u64,
    /// Seconds after the window's start.
    pub start_rel_s: f64,
    pub duration_ns: u64,
    pub after_pid: u32,
    pub after_comm: String,
    pub waiting: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PairReport {
    pub after_pid: u32,
    pub after_comm: String,
    pub waiting_pid: u32,
    pub waiting_comm: String,
    pub total_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct IdlingReport {
    /// Gaps shorter than this were not counted as waste.
    pub min_interval_ns: u64,
    pub total_idle_with_pending_ns: u64,
    pub top_intervals: Vec<IntervalReport>,
    pub pairs: Vec<PairReport>,
}

/// `--device` names (or `major:minor`) to device numbers; `None` means all.
pub fn resolve_devices(
    devices: &[DeviceInfo],
    wanted: &[String],
) -> Result<Option<Vec<Dev>>, InputError> {
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for w in wanted {
        let name = w.trim_start_matches("/dev/");
        let by_name = devices.iter().find(|d| d.name == name).map(|d| d.dev);
        let by_num = name.split_once(':').and_then(|(a, b)| {
            Some(Dev {
                major: a.parse().ok()?,
                minor: b.parse().ok()?,
            })
        });
        match by_name.or(by_num) {
            Some(d) => out.push(d),
            None => {
                let known: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
                return Err(InputError::Unreadable {
                    path: w.into(),
                    reason: format!(
                        "no such device in the trace (it has: {})",
                        if known.is_empty() {
                            "no named devices; use major:minor".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                });
            }
        }
    }
    Ok(Some(out))
}

fn rate(count: u64, duration_ns: u64) -> f64 {
    if duration_ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / duration_ns as f64
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

fn direction(requests: u64, bytes: u64, duration_ns: u64) -> DirectionReport {
    DirectionReport {
        requests,
        bytes,
        iops: rate(requests, duration_ns),
        mb_per_s: rate(bytes, duration_ns) / 1e6,
    }
}

fn by_direction(
    stages: &[Stages; 3],
) -> BTreeMap<&'static str, BTreeMap<&'static str, LatencySummary>> {
    Direction::ALL
        .iter()
        .zip(stages)
        .map(|(d, s)| (d.name(), s.summaries()))
        .filter(|(_, s)| !s.is_empty())
        .collect()
}

fn dev_name(infos: &[DeviceInfo], dev: Dev) -> String {
    infos.iter().find(|d| d.dev == dev).map_or_else(
        || format!("{}:{}", dev.major, dev.minor),
        |d| d.name.clone(),
    )
}

fn device_report(info: Option<&DeviceInfo>, dev: Dev, d: &DeviceAgg, dur: u64) -> DeviceReport {
    let read = d.completed[Direction::Read as usize];
    let write = d.completed[Direction::Write as usize];
    let other = d.completed[Direction::Other as usize];
    let area_mean = |a: u128| {
        if dur == 0 { 0.0 } else { a as f64 / dur as f64 }
    };
    DeviceReport {
        name: info.map_or_else(
            || format!("{}:{}", dev.major, dev.minor),
            |i| i.name.clone(),
        ),
        dev: format!("{}:{}", dev.major, dev.minor),
        scheduler: info.and_then(|i| i.scheduler.clone()),
        rotational: info.and_then(|i| i.rotational),
        bios_queued: d.bios_queued,
        requests_dispatched: d.requests_dispatched,
        merge_ratio: if d.data_requests_dispatched == 0 {
            0.0
        } else {
            d.data_bios_queued as f64 / d.data_requests_dispatched as f64
        },
        merges: Merges {
            back: d.merges_back,
            front: d.merges_front,
            request: d.merges_request,
        },
        read: direction(read.requests, read.bytes, dur),
        write: direction(write.requests, write.bytes, dur),
        other: direction(other.requests, other.bytes, dur),
        avg_request_bytes: if d.requests_dispatched == 0 {
            0.0
        } else {
            d.dispatched_bytes as f64 / d.requests_dispatched as f64
        },
        queue_depth: QueueDepth {
            scheduler_mean: area_mean(d.pending_area),
            scheduler_max: d.max_pending,
            driver_mean: area_mean(d.driver_area),
            driver_max: d.max_in_driver,
        },
        util_pct: pct(d.busy_ns, dur),
        idle_with_pending_ns: d.idle.idle_with_pending_ns,
        idle_with_pending_pct: pct(d.idle.idle_with_pending_ns, dur),
        idle_with_pending_intervals: d.idle.intervals,
        idle_short_gaps_ns: d.idle.short_gaps_ns,
        idle_short_gaps: d.idle.short_gaps,
        idle_empty_ns: d.idle_empty_ns,
        idle_empty_pct: pct(d.idle_empty_ns, dur),
        seeks_q2q: d.q_seeks.summary(),
        seeks_d2d: d.d_seeks.summary(),
        active_at_q_mean: if d.bios_queued == 0 {
            0.0
        } else {
            d.active_at_q_sum as f64 / d.bios_queued as f64
        },
        plugs: Plugs::new(
            d.plugs,
            d.unplugs_explicit,
            d.unplugs_timer,
            d.unplug_depth_sum,
        ),
        errors: d.errors,
        latency: d.stages.summaries(),
        latency_by_direction: by_direction(&d.stages_by_dir),
    }
}

fn process_report(
    p: &ProcessAgg,
    agg: &Aggregator,
    infos: &[DeviceInfo],
    cgroup: String,
    dur: u64,
) -> ProcessReport {
    let pid = p.who.pid;
    let read = p.completed[Direction::Read as usize];
    let write = p.completed[Direction::Write as usize];
    let requests: u64 = p.completed.iter().map(|c| c.requests).sum();
    let slices = if agg.opts.slices_by_cgroup {
        None
    } else {
        agg.slices.get(&u64::from(pid)).map(|s| s.summary())
    };
    ProcessReport {
        pid,
        tgid: p.who.tgid,
        comm: p.who.comm.as_str().into_owned(),
        cgroup,
        cgroup_id: p.who.cgroup_id,
        devices: p.devices.iter().map(|d| dev_name(infos, *d)).collect(),
        bios_queued: p.bios_queued,
        requests,
        bytes: p.bytes,
        read: direction(read.requests, p.bytes_by_dir[Direction::Read as usize], dur),
        write: direction(
            write.requests,
            p.bytes_by_dir[Direction::Write as usize],
            dur,
        ),
        iops: rate(requests, dur),
        mb_per_s: rate(p.bytes, dur) / 1e6,
        sequential_pct: pct(p.sequential, p.dispatched),
        think_time: p.think.summary(),
        idle_waste_caused_ns: agg.idle.caused_by_pid.get(&pid).copied().unwrap_or(0),
        idle_waste_suffered_ns: agg.idle.suffered_by_pid.get(&pid).copied().unwrap_or(0),
        slices,
        latency: p.stages.summaries(),
        latency_by_direction: by_direction(&p.stages_by_dir),
    }
}

/// Assembles the report once the trace is read.
pub fn build(agg: &Aggregator, anomalies: &Anomalies, source: &dyn TraceSource) -> Report {
    let meta = source.meta();
    let w = agg.effective_window();
    let dur = w.to.saturating_sub(w.from);
    let processes_table = source.processes();
    let cgroup_path = |id: u64| {
        processes_table
            .values()
            .find(|p| p.cgroup_id == id && p.cgroup_path.is_some())
            .and_then(|p| p.cgroup_path.clone())
            .unwrap_or_else(|| id.to_string())
    };
    let comm_of = |pid: u32| -> String {
        if pid == 0 {
            return "[none]".into();
        }
        agg.processes
            .get(&pid)
            .map(|p| p.who.comm.as_str().into_owned())
            .or_else(|| {
                processes_table
                    .get(&pid)
                    .map(|p| p.comm.as_str().into_owned())
            })
            .unwrap_or_else(|| "?".into())
    };

    let plugs_recorded = source.header().is_none_or(|h| h.plugs_traced());
    let plugs_counted = source.header().is_some_and(|h| h.plugs_counted());
    let plug_counts = source.stats().map_or(&[][..], |s| &s.plug_counts[..]);
    let plugs_from = plugs_source(
        plugs_recorded,
        plugs_counted,
        source.footer().is_some(),
        source.stats().is_some(),
    );
    let mut devs: Vec<_> = agg.devices.iter().collect();
    devs.sort_by_key(|(d, _)| **d);
    let devices: Vec<DeviceReport> = devs
        .into_iter()
        .filter(|(_, d)| d.bios_queued + d.requests_dispatched + d.plugs > 0 || d.busy_ns > 0)
        .map(|(dev, d)| {
            let mut report =
                device_report(meta.devices.iter().find(|i| i.dev == *dev), *dev, d, dur);
            // Counted in the kernel: the recording has no plug events to count.
            if plugs_counted {
                report.plugs = plug_counts
                    .iter()
                    .find(|c| c.dev == *dev)
                    .map_or_else(Plugs::default, Plugs::from_counts);
            }
            report
        })
        .collect();

    let mut processes: Vec<ProcessReport> = agg
        .processes
        .values()
        .map(|p| process_report(p, agg, &meta.devices, cgroup_path(p.who.cgroup_id), dur))
        .collect();
    processes.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.pid.cmp(&b.pid)));

    let mut cgroups: Vec<CgroupReport> = agg
        .cgroups
        .iter()
        .map(|(id, c)| CgroupReport {
            cgroup: cgroup_path(*id),
            cgroup_id: *id,
            pids: c.pids.clone(),
            bios_queued: c.bios_queued,
            requests: c.requests,
            bytes: c.bytes,
            slices: if agg.opts.slices_by_cgroup {
                agg.slices.get(id).map(|s| s.summary())
            } else {
                None
            },
            latency: c.stages.summaries(),
        })
        .collect();
    cgroups.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.cgroup_id.cmp(&b.cgroup_id)));

    let waiting = |iv: &IdleInterval| {
        iv.waiting_pids
            .iter()
            .map(|p| format!("{} ({p})", comm_of(*p)))
            .collect()
    };
    let top_intervals = agg
        .idle
        .top()
        .iter()
        .map(|iv| IntervalReport {
            device: dev_name(&meta.devices, iv.dev),
            start_ns: iv.start_ns,
            start_rel_s: iv.start_ns.saturating_sub(w.from) as f64 / 1e9,
            duration_ns: iv.duration_ns,
            after_pid: iv.after_pid,
            after_comm: comm_of(iv.after_pid),
            waiting: waiting(iv),
        })
        .collect();
    let mut pairs: Vec<PairReport> = agg
        .idle
        .by_pair
        .iter()
        .map(|((a, b), t)| PairReport {
            after_pid: *a,
            after_comm: comm_of(*a),
            waiting_pid: *b,
            waiting_comm: comm_of(*b),
            total_ns: *t,
        })
        .collect();
    pairs.sort_by_key(|p| std::cmp::Reverse(p.total_ns));

    let mut filters = Vec::new();
    let o = &agg.opts;
    if !o.devices.is_empty() {
        filters.push(format!("devices: {}", o.devices.join(",")));
    }
    if !o.pids.is_empty() {
        filters.push(format!("pids: {:?}", o.pids));
    }
    if !o.comms.is_empty() {
        filters.push(format!("comms: {}", o.comms.join(",")));
    }
    if !o.cgroups.is_empty() {
        filters.push(format!("cgroups: {}", o.cgroups.join(",")));
    }
    let mut warnings = source.warnings();
    // A killed recorder leaves the counts of its last checkpoint (one a second): shown, and
    // said to be short, never passed off as the device's whole count.
    match plugs_from {
        PLUGS_LAST_CHECKPOINT => warnings.push(
            "plug figures are the kernel's counts at the recorder's last checkpoint (the \
             recording has no footer): plugs after it are missing"
                .into(),
        ),
        PLUGS_UNKNOWN => warnings.push(
            "plug figures unknown: they were counted in the kernel, and the recording ends \
             before the recorder wrote any counts (no footer, no statistics snapshot)"
                .into(),
        ),
        _ => {}
    }
    if plugs_counted && (o.from_ns.is_some() || o.to_ns.is_some()) {
        warnings.push(
            "plug figures are the whole recording's: plugs were counted in the kernel, not              recorded as events (record --plug-events records them per event)"
                .into(),
        );
    }
    if meta.identity == Identity::PairedBySector {
        warnings.push(
            "this trace format has no request identity: requests were paired by (device, \
             sector, size) as btt does"
                .into(),
        );
    }
    Report {
        schema: SCHEMA,
        trace: TraceSummary {
            path: meta.path.display().to_string(),
            format: match meta.format {
                TraceFormat::Recording => "iosched-trace",
                TraceFormat::Blktrace => "blktrace",
            },
            paired_by_sector: meta.identity == Identity::PairedBySector,
            kernel_release: meta.kernel_release.clone(),
            from_ns: w.from,
            to_ns: w.to,
            duration_ns: dur,
            io_span_ns: agg.io_span_ns(),
            events: agg.events,
            lost_events: source.lost(),
            untraced_completions: source.stats().and_then(|s| s.untraced_completions()),
            completion_checks: source
                .stats()
                .map(|s| s.completions.clone())
                .unwrap_or_default(),
            plugs_recorded,
            device_changes: source
                .stats()
                .map(|s| s.device_changes.clone())
                .unwrap_or_default(),
            plugs_from,
            cpu: CpuContext::of(source, w.from, w.to),
            anomalies: anomalies.clone(),
            warnings,
            filters,
        },
        devices,
        processes,
        cgroups,
        idling: IdlingReport {
            min_interval_ns: agg.idle.min_interval_ns,
            total_idle_with_pending_ns: agg
                .devices
                .values()
                .map(|d| d.idle.idle_with_pending_ns)
                .sum(),
            top_intervals,
            pairs,
        },
        by_scheduler: Vec::new(),
    }
}

/// The values of [`TraceSummary::plugs_from`].
pub const PLUGS_NONE: &str = "none";
pub const PLUGS_EVENTS: &str = "events";
pub const PLUGS_COUNTED: &str = "kernel counters";
pub const PLUGS_LAST_CHECKPOINT: &str = "kernel counters, last checkpoint";
pub const PLUGS_UNKNOWN: &str = "unknown";

/// Where a report's plug figures come from ([`TraceSummary::plugs_from`]): counted in the
/// kernel, the final counts are the footer's; without a footer, those of the last statistics
/// snapshot, if there is one.
fn plugs_source(recorded: bool, counted: bool, footer: bool, snapshot: bool) -> &'static str {
    match (recorded, counted, footer, snapshot) {
        (false, ..) => PLUGS_NONE,
        (true, false, ..) => PLUGS_EVENTS,
        (true, true, true, _) => PLUGS_COUNTED,
        (true, true, false, true) => PLUGS_LAST_CHECKPOINT,
        (true, true, false, false) => PLUGS_UNKNOWN,
    }
}

/// One device under one scheduler, between two switches (absolute trace ns): filled by
/// [`super::by_scheduler`].
#[derive(Clone, Debug, Serialize)]
pub struct SchedulerSpan {
    pub device: String,
    pub scheduler: String,
    pub from_ns: u64,
    /// `None`: to the end of the trace.
    pub to_ns: Option<u64>,
    pub report: DeviceReport,
}
