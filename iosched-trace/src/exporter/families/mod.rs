//! A [`Snapshot`] of the kernel's aggregates, with sysfs and the cgroup tree, as the metric
//! families of docs/EXPORTER.md.
//!
//! Owns: the metric names and labels, the cgroup cap (the top N by requests keep their
//! path; the rest are summed as `other`), the units (ns in the kernel, seconds exposed).
//! Must not: read the kernel or sysfs itself (the snapshot holds what was read).

use std::collections::{BTreeMap, HashMap};

use iosched_core::event::{Dev, Op};
use iosched_trace_common::exporter::{BOUNDS_NS, BUCKETS, Hist, stat};

use super::snapshot::Snapshot;
use crate::views::metrics::{Family, Histogram, MetricType, Series, Value};

/// The label a request's operation gets: the ones dashboards split by, and `other`.
pub fn operation(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::Flush => "flush",
        Op::Discard => "discard",
        Op::WriteZeroes => "write_zeroes",
        _ => "other",
    }
}

/// The `cgroup` label of cgroups outside the top N, and of requests whose cgroup is unknown.
pub const OTHER_CGROUP: &str = "other";

/// `(name, stat index)` of `iosched_events_total`'s `event` label.
const EVENTS: [(&str, u32); 6] = [
    ("queue", stat::QUEUE),
    ("insert", stat::INSERT),
    ("issue", stat::ISSUE),
    ("complete", stat::COMPLETE),
    ("requeue", stat::REQUEUE),
    ("merge", stat::MERGE),
];

/// `(reason, stat index)` of `iosched_lost_events_total`.
const LOST: [(&str, u32); 5] = [
    ("untracked_request", stat::UNTRACKED),
    ("request_map_full", stat::RQ_FULL),
    ("no_queue_time", stat::NO_QUEUE_TIME),
    ("cgroup_map_full", stat::CG_FULL),
    ("map_full", stat::MAP_FULL),
];

const NS: f64 = 1e9;

/// Accumulates one histogram series from the kernel's non-cumulative buckets.
#[derive(Clone, Default)]
struct HistSum {
    buckets: Vec<u64>,
    sum_ns: u64,
}

impl HistSum {
    fn add(&mut self, h: &Hist) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
        }
        for (a, b) in self.buckets.iter_mut().zip(h.buckets.iter()) {
            *a += b;
        }
        self.sum_ns += h.sum_ns;
    }

    fn exposed(&self) -> Histogram {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(BOUNDS_NS.len());
        for (i, bound) in BOUNDS_NS.iter().enumerate() {
            cumulative += self.buckets.get(i).copied().unwrap_or(0);
            buckets.push((*bound as f64 / NS, cumulative));
        }
        Histogram {
            buckets,
            count: self.buckets.iter().sum(),
            sum: self.sum_ns as f64 / NS,
        }
    }
}

type Labels = Vec<(&'static str, String)>;

fn histogram_family(
    name: &'static str,
    help: &'static str,
    series: BTreeMap<Labels, HistSum>,
) -> Family {
    Family {
        name,
        help,
        unit: Some("seconds"),
        kind: MetricType::Histogram,
        series: series
            .into_iter()
            .map(|(labels, h)| Series {
                labels,
                value: Value::Histogram(h.exposed()),
            })
            .collect(),
    }
}

fn counter_family(
    name: &'static str,
    help: &'static str,
    unit: Option<&'static str>,
    series: BTreeMap<Labels, f64>,
) -> Family {
    Family {
        name,
        help,
        unit,
        kind: MetricType::Counter,
        series: series
            .into_iter()
            .map(|(labels, v)| Series {
                labels,
                value: Value::Counter(v),
            })
            .collect(),
    }
}

fn gauge_family(name: &'static str, help: &'static str, series: Vec<(Labels, f64)>) -> Family {
    Family {
        name,
        help,
        unit: None,
        kind: MetricType::Gauge,
        series: series
            .into_iter()
            .map(|(labels, v)| Series {
                labels,
                value: Value::Gauge(v),
            })
            .collect(),
    }
}

/// Every family of the snapshot. `op_of` names the kernel's `REQ_OP_*` codes (from BTF),
/// `cgroup_path` a cgroup id (`None`: not found, then the id is its name).
pub fn families(
    snapshot: &Snapshot,
    op_of: &dyn Fn(u32) -> Op,
    cgroup_path: &mut dyn FnMut(u64) -> Option<String>,
    max_cgroups: usize,
) -> Vec<Family> {
    let device = |dev: u32| {
        snapshot
            .devices
            .get(&dev)
            .map(|(disk, _)| disk.name.clone())
    };

    // The top cgroups by requests, over every device and operation.
    let mut by_cgroup: HashMap<u64, u64> = HashMap::new();
    for (key, io) in &snapshot.io {
        if key.cgroup != 0 {
            *by_cgroup.entry(key.cgroup).or_default() += io.requests;
        }
    }
    let mut ranked: Vec<(u64, u64)> = by_cgroup.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let named: HashMap<u64, String> = ranked
        .into_iter()
        .take(max_cgroups)
        .map(|(id, _)| (id, cgroup_path(id).unwrap_or_else(|| id.to_string())))
        .collect();
    let cgroup = |id: u64| {
        named
            .get(&id)
            .cloned()
            .unwrap_or_else(|| OTHER_CGROUP.to_string())
    };

    let mut queue = BTreeMap::<Labels, HistSum>::new();
    let mut in_device = BTreeMap::<Labels, HistSum>::new();
    let mut latency = BTreeMap::<Labels, HistSum>::new();
    let mut requests = BTreeMap::<Labels, f64>::new();
    let mut bytes = BTreeMap::<Labels, f64>::new();
    for (key, io) in &snapshot.io {
        let Some(name) = device(key.dev) else {
            continue;
        };
        let by_op = vec![
            ("device", name),
            ("operation", operation(op_of(key.op)).to_string()),
        ];
        queue.entry(by_op.clone()).or_default().add(&io.queue);
        in_device.entry(by_op.clone()).or_default().add(&io.device);
        let mut labels = by_op;
        labels.push(("cgroup", cgroup(key.cgroup)));
        latency.entry(labels.clone()).or_default().add(&io.latency);
        *requests.entry(labels.clone()).or_default() += io.requests as f64;
        *bytes.entry(labels).or_default() += io.bytes as f64;
    }

    let mut merges = BTreeMap::<Labels, f64>::new();
    let mut requeues = BTreeMap::<Labels, f64>::new();
    let mut sched_depth = Vec::new();
    let mut driver_depth = Vec::new();
    for (dev, st) in &snapshot.dev_state {
        let Some(name) = device(*dev) else {
            continue;
        };
        for (kind, n) in [
            ("back", st.merges_back),
            ("front", st.merges_front),
            ("request", st.merges_rq),
        ] {
            merges.insert(
                vec![("device", name.clone()), ("kind", kind.to_string())],
                n as f64,
            );
        }
        requeues.insert(vec![("device", name.clone())], st.requeues as f64);
        // Signed in the kernel; a request the exporter saw leave but not arrive (it started
        // before the exporter) can leave a depth below zero for a moment.
        let depth = |v: u64| (v as i64).max(0) as f64;
        sched_depth.push((vec![("device", name.clone())], depth(st.in_sched)));
        driver_depth.push((vec![("device", name)], depth(st.in_driver)));
    }

    let untraced = snapshot
        .untraced
        .iter()
        .filter_map(|(dev, n)| Some((vec![("device", device(*dev)?)], *n as f64)))
        .collect();

    let mut idle_ns = BTreeMap::<Labels, f64>::new();
    let mut idle_n = BTreeMap::<Labels, f64>::new();
    for (key, w) in &snapshot.idle {
        let Some(name) = device(key.dev) else {
            continue;
        };
        let labels = vec![("device", name), ("cgroup", cgroup(key.cgroup))];
        *idle_ns.entry(labels.clone()).or_default() += w.ns as f64 / NS;
        *idle_n.entry(labels).or_default() += w.intervals as f64;
    }

    let mut info = Vec::new();
    let mut tunables = Vec::new();
    for (dev, (disk, settings)) in &snapshot.devices {
        let scheduler = settings
            .as_ref()
            .and_then(|s| s.scheduler.clone())
            .unwrap_or_default();
        let rotational = match settings.as_ref().and_then(|s| s.rotational) {
            Some(true) => "1",
            Some(false) => "0",
            None => "",
        };
        let nr_requests = settings
            .as_ref()
            .and_then(|s| s.nr_requests)
            .map(|n| n.to_string())
            .unwrap_or_default();
        info.push(Series {
            labels: vec![
                ("device", disk.name.clone()),
                ("dev", Dev::from_kernel(*dev).to_string()),
                ("scheduler", scheduler.clone()),
                ("rotational", rotational.to_string()),
                ("nr_requests", nr_requests),
            ],
            value: Value::Info,
        });
        for (tunable, text) in settings.iter().flat_map(|s| s.iosched.iter()) {
            if let Ok(v) = text.trim().parse::<f64>() {
                tunables.push((
                    vec![
                        ("device", disk.name.clone()),
                        ("scheduler", scheduler.clone()),
                        ("tunable", tunable.clone()),
                    ],
                    v,
                ));
            }
        }
    }

    let stat_of = |i: u32| snapshot.stats.get(i as usize).copied().unwrap_or(0) as f64;
    let events = EVENTS
        .iter()
        .map(|(name, i)| (vec![("event", name.to_string())], stat_of(*i)))
        .collect();
    let lost = LOST
        .iter()
        .map(|(name, i)| (vec![("reason", name.to_string())], stat_of(*i)))
        .collect();
    let run_time = snapshot
        .programs
        .iter()
        .map(|p| (vec![("program", p.name.to_string())], p.run_ns as f64 / NS))
        .collect();
    let runs = snapshot
        .programs
        .iter()
        .map(|p| (vec![("program", p.name.to_string())], p.runs as f64))
        .collect();

    vec![
        histogram_family(
            "iosched_request_queue_seconds",
            "Q->D: from a request's first bio entering the block layer to its issue to the driver.",
            queue,
        ),
        histogram_family(
            "iosched_request_device_seconds",
            "D->C: from a request's issue to the driver to its completion.",
            in_device,
        ),
        histogram_family(
            "iosched_request_latency_seconds",
            "Q->C: from a request's first bio entering the block layer to its completion.",
            latency,
        ),
        counter_family("iosched_requests", "Requests completed.", None, requests),
        counter_family(
            "iosched_request_bytes",
            "Bytes completed.",
            Some("bytes"),
            bytes,
        ),
        counter_family(
            "iosched_merges",
            "Bios merged into requests (back, front) and requests merged into requests.",
            None,
            merges,
        ),
        counter_family(
            "iosched_requeues",
            "Requests the driver handed back.",
            None,
            requeues,
        ),
        counter_family(
            "iosched_idle_waste_seconds",
            "Time the device had nothing in its driver while requests waited in the scheduler \
             (gaps of 50us or more), by the cgroup it idled for.",
            Some("seconds"),
            idle_ns,
        ),
        counter_family(
            "iosched_idle_waste_intervals",
            "Gaps counted in iosched_idle_waste_seconds_total.",
            None,
            idle_n,
        ),
        gauge_family(
            "iosched_scheduler_depth",
            "Requests inserted into the I/O scheduler and not yet issued.",
            sched_depth,
        ),
        gauge_family(
            "iosched_driver_depth",
            "Requests issued to the driver and not yet completed.",
            driver_depth,
        ),
        Family {
            name: "iosched_device",
            help: "A traced device, its scheduler and settings.",
            unit: None,
            kind: MetricType::Info,
            series: info,
        },
        gauge_family(
            "iosched_scheduler_tunable",
            "Each numeric file of /sys/block/DEV/queue/iosched/.",
            tunables,
        ),
        counter_family(
            "iosched_bpf_program_run_seconds",
            "Kernel time in each of the exporter's programs (while kernel.bpf_stats_enabled=1).",
            Some("seconds"),
            run_time,
        ),
        counter_family(
            "iosched_bpf_program_runs",
            "Runs of each of the exporter's programs (while kernel.bpf_stats_enabled=1).",
            None,
            runs,
        ),
        counter_family(
            "iosched_events",
            "Tracepoint hits the exporter's programs handled on traced devices.",
            None,
            events,
        ),
        counter_family(
            "iosched_lost_events",
            "What the exporter's programs could not account, by reason.",
            None,
            lost,
        ),
        counter_family(
            "iosched_untraced_completions",
            "Requests the kernel counted as completed (/sys/block/DEV/stat) whose completion \
             never reached the exporter's programs, missing from every other count: a lower \
             bound (a completion racing a scrape may hide one until a later scrape).",
            None,
            untraced,
        ),
    ]
}

#[cfg(test)]
mod tests;
