//! Families from snapshots built by hand: the right output is known by construction.

use iosched_core::{
    event::{Dev, Op},
    record::DeviceInfo,
};
use iosched_trace_common::exporter::{
    BUCKETS, CgroupIo, DevCgroup, DevOpCgroup, DevState, Hist, IdleWaste,
};

use super::*;
use crate::{devices::Disk, exporter::snapshot::Snapshot};

const SDA: u32 = 8 << 20;
const LOOP0: u32 = 7 << 20;

fn disk(name: &str, dev: u32) -> Disk {
    Disk {
        name: name.into(),
        dev: Dev::from_kernel(dev),
        request_based: true,
    }
}

fn info(scheduler: &str) -> DeviceInfo {
    let mut i = DeviceInfo {
        rotational: Some(true),
        nr_requests: Some(64),
        scheduler: Some(scheduler.into()),
        request_based: true,
        ..DeviceInfo::default()
    };
    i.iosched.insert("slice_idle".into(), "8".into());
    i.iosched.insert("not_a_number".into(), "[on] off".into());
    i
}

/// A histogram with `n` values of `ns` each.
fn hist(ns: u64, n: u64) -> Hist {
    let mut h = Hist::default();
    let i = BOUNDS_NS
        .iter()
        .position(|b| ns <= *b)
        .unwrap_or(BUCKETS - 1);
    h.buckets[i] = n;
    h.sum_ns = ns * n;
    h
}

fn op_of(code: u32) -> Op {
    Op::from_code(code as u8)
}

fn snapshot() -> Snapshot {
    let mut s = Snapshot::default();
    s.devices.insert(SDA, (disk("sda", SDA), Some(info("bfq"))));
    s.devices.insert(LOOP0, (disk("loop0", LOOP0), None));
    let io = |cgroup, requests, ns| {
        (
            DevOpCgroup {
                dev: SDA,
                op: 0,
                cgroup,
            },
            CgroupIo {
                requests,
                bytes: requests * 4096,
                latency: hist(ns, requests),
                // Q->D 2 µs for cgroup 100's requests only.
                queue: if cgroup == 100 {
                    hist(2_000, requests)
                } else {
                    Hist::default()
                },
                device: hist(4_000_000, requests),
            },
        )
    };
    s.io = vec![io(100, 10, 5_000_000), io(200, 5, 1_000), io(300, 1, 1_000)];
    s.dev_state = vec![(
        SDA,
        DevState {
            in_sched: 3,
            in_driver: u64::MAX, // -1: clamped to 0
            merges_back: 7,
            ..DevState::default()
        },
    )];
    s.idle = vec![(
        DevCgroup {
            dev: SDA,
            _pad: 0,
            cgroup: 100,
        },
        IdleWaste {
            ns: 2_500_000_000,
            intervals: 4,
        },
    )];
    s.untraced.insert(SDA, 2);
    s.stats = vec![0; iosched_trace_common::exporter::stat::COUNT as usize];
    s
}

fn family<'a>(all: &'a [Family], name: &str) -> &'a Family {
    all.iter().find(|f| f.name == name).expect(name)
}

fn label<'a>(series: &'a Series, name: &str) -> &'a str {
    series
        .labels
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn paths(id: u64) -> Option<String> {
    (id == 100).then(|| "/system.slice/db.service".to_string())
}

#[test]
fn histograms_are_cumulative_in_seconds() {
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    let q = family(&all, "iosched_request_queue_seconds");
    assert_eq!(q.series.len(), 1);
    assert_eq!(label(&q.series[0], "device"), "sda");
    assert_eq!(label(&q.series[0], "operation"), "read");
    let Value::Histogram(h) = &q.series[0].value else {
        panic!("not a histogram")
    };
    // Summed over the cgroups: cgroup 100's ten requests.
    assert_eq!(h.count, 10);
    assert!((h.sum - 20e-6).abs() < 1e-12);
    // 2 µs is the third bound: nothing below it, all ten from it on.
    assert_eq!(h.buckets[1], (1.5e-6, 0));
    assert_eq!(h.buckets[2], (2e-6, 10));
    assert_eq!(h.buckets.last(), Some(&(10.0, 10)));
    let Value::Histogram(d) = &family(&all, "iosched_request_device_seconds").series[0].value
    else {
        panic!("not a histogram")
    };
    assert_eq!(d.count, 16);
    assert!(
        h.buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
    );
}

#[test]
fn cgroups_beyond_the_cap_are_summed_as_other() {
    let all = families(&snapshot(), &op_of, &mut paths, 1);
    let requests = family(&all, "iosched_requests");
    let by_cgroup: Vec<(&str, f64)> = requests
        .series
        .iter()
        .map(|s| {
            let Value::Counter(v) = s.value else {
                panic!("not a counter")
            };
            (label(s, "cgroup"), v)
        })
        .collect();
    // 100 has the most requests and keeps its path; 200 and 300 become one `other`.
    assert_eq!(
        by_cgroup,
        vec![("/system.slice/db.service", 10.0), ("other", 6.0)]
    );
    let lat = family(&all, "iosched_request_latency_seconds");
    let other = lat
        .series
        .iter()
        .find(|s| label(s, "cgroup") == "other")
        .unwrap();
    let Value::Histogram(h) = &other.value else {
        panic!()
    };
    assert_eq!(h.count, 6);
    // With room for all, an unnamed cgroup is shown by its id.
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    let names: Vec<&str> = family(&all, "iosched_requests")
        .series
        .iter()
        .map(|s| label(s, "cgroup"))
        .collect();
    assert_eq!(names, vec!["/system.slice/db.service", "200", "300"]);
}

#[test]
fn a_device_not_traced_any_more_has_no_series() {
    let mut s = snapshot();
    s.devices.remove(&SDA);
    let all = families(&s, &op_of, &mut paths, 20);
    for f in &all {
        assert!(
            f.series.iter().all(|s| label(s, "device") != "sda"),
            "{} still shows sda",
            f.name
        );
    }
    // loop0 is still there, with its info line.
    assert_eq!(family(&all, "iosched_device").series.len(), 1);
}

#[test]
fn device_gauges_info_and_tunables() {
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    let gauge = |name| match family(&all, name).series[0].value {
        Value::Gauge(v) => v,
        _ => panic!("not a gauge"),
    };
    assert_eq!(gauge("iosched_scheduler_depth"), 3.0);
    assert_eq!(gauge("iosched_driver_depth"), 0.0);
    let info = &family(&all, "iosched_device").series;
    let sda = info.iter().find(|s| label(s, "device") == "sda").unwrap();
    assert_eq!(label(sda, "scheduler"), "bfq");
    assert_eq!(label(sda, "dev"), "8:0");
    assert_eq!(label(sda, "rotational"), "1");
    assert_eq!(label(sda, "nr_requests"), "64");
    let tunables = &family(&all, "iosched_scheduler_tunable").series;
    assert_eq!(tunables.len(), 1, "only numeric tunables");
    assert_eq!(label(&tunables[0], "tunable"), "slice_idle");
    let idle = &family(&all, "iosched_idle_waste_seconds").series[0];
    assert_eq!(idle.value, Value::Counter(2.5));
    assert_eq!(label(idle, "cgroup"), "/system.slice/db.service");
    let merges = &family(&all, "iosched_merges").series;
    let back = merges.iter().find(|s| label(s, "kind") == "back").unwrap();
    assert_eq!(back.value, Value::Counter(7.0));
}

#[test]
fn bpf_costs_only_when_the_kernel_counts_them() {
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    assert!(family(&all, "iosched_bpf_program_runs").series.is_empty());
}

#[test]
fn untraced_completions_by_device() {
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    let f = family(&all, "iosched_untraced_completions");
    assert_eq!(f.kind, MetricType::Counter);
    assert_eq!(f.series.len(), 1, "loop0 has no baseline: no series");
    assert_eq!(label(&f.series[0], "device"), "sda");
    assert_eq!(f.series[0].value, Value::Counter(2.0));
}

/// The Grafana dashboard in the repo queries only series the exporter exposes: each metric it
/// names is one of the families (with its type's suffix) or the daemon's own two.
#[test]
fn the_dashboard_queries_only_exposed_metrics() {
    let dashboard = include_str!("../../../../docs/grafana/iosched-trace.json");
    let all = families(&snapshot(), &op_of, &mut paths, 20);
    let mut exposed: Vec<String> = vec![
        "iosched_exporter_build_info".into(),
        "iosched_exporter_scrape_duration_seconds".into(),
    ];
    for f in &all {
        let suffixes: &[&str] = match f.kind {
            MetricType::Counter => &["_total"],
            MetricType::Histogram => &["_bucket", "_sum", "_count"],
            MetricType::Info => &["_info"],
            MetricType::Gauge => &[""],
        };
        exposed.extend(suffixes.iter().map(|s| format!("{}{s}", f.name)));
    }
    let mut named = 0;
    for (i, _) in dashboard.match_indices("iosched_") {
        let name: String = dashboard[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        // The product's name in titles and descriptions, not a metric.
        if name == "iosched_" {
            continue;
        }
        named += 1;
        assert!(
            exposed.contains(&name),
            "the dashboard queries {name}, which the exporter does not expose"
        );
    }
    assert!(
        named > 10,
        "only {named} metric names found in the dashboard"
    );
}
