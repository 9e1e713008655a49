//! The exporter's expositions read back by parsers that are not ours: the OpenMetrics text
//! through `prometheus_client.openmetrics.parser` (Prometheus' Python client, the format's
//! reference parser), the classic text through `prometheus_client.parser` and through
//! `promtool check metrics` (Prometheus' own Go parser and its linter). Every value, label
//! and help text must come back as it went in.
//!
//! The tools come from `cargo xtask setup`. Without them the tests skip with a message, unless
//! `CI` is set: there a missing tool fails.

use std::{
    collections::BTreeMap,
    io::Write,
    process::{Command, Stdio},
};

use iosched_trace::views::metrics::{
    Family, Histogram, MetricType, Series, Value,
    text::{Format, encode},
};
use serde_json::Value as Json;

/// Whether `check` (a command line) runs; if not, skip (false) or, under CI, fail.
fn tool_available(test: &str, what: &str, check: &mut Command) -> bool {
    let ok = check
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{test}: needs {what} (`cargo xtask setup` installs it)");
    }
    eprintln!("SKIPPED {test}: {what} is missing (`cargo xtask setup` installs it)");
    false
}

fn python_client(test: &str) -> bool {
    tool_available(
        test,
        "python3 with prometheus-client",
        Command::new("python3").args(["-c", "import prometheus_client.openmetrics.parser"]),
    )
}

/// The docs' bucket bounds: 1, 1.5, 2, 3, 5, 7 times each power of ten, 1 µs to 10 s.
fn bounds() -> Vec<f64> {
    let mut b = Vec::new();
    for exp in -6..=1 {
        for m in [1.0, 1.5, 2.0, 3.0, 5.0, 7.0] {
            let v: f64 = format!("{m}e{exp}").parse().unwrap();
            if v <= 10.0 {
                b.push(v);
            }
        }
    }
    b
}

fn s(labels: &[(&'static str, &str)], value: Value) -> Series {
    Series {
        labels: labels.iter().map(|(n, v)| (*n, v.to_string())).collect(),
        value,
    }
}

/// All four types, every escape in labels and help, a series with many labels, values at
/// the edges (big counts, tiny fractions, negative, NaN, infinities), a family without series.
fn families() -> Vec<Family> {
    let b = bounds();
    let hist = |scale: u64| {
        Value::Histogram(Histogram {
            buckets: b
                .iter()
                .enumerate()
                .map(|(i, &le)| (le, i as u64 * scale))
                .collect(),
            count: b.len() as u64 * scale + 3,
            sum: 0.123_456_789 * scale as f64,
        })
    };
    let many: Vec<(&'static str, String)> = [
        "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "b0", "b1", "b2", "b3", "b4",
        "b5", "b6", "b7", "b8", "b9",
    ]
    .iter()
    .enumerate()
    .map(|(i, n)| (*n, format!("v{i}")))
    .collect();
    vec![
        Family {
            name: "iosched_request_latency_seconds",
            help: "Q->C, end to end.",
            unit: Some("seconds"),
            kind: MetricType::Histogram,
            series: vec![
                s(
                    &[("device", "sda"), ("operation", "read"), ("cgroup", "/")],
                    hist(1),
                ),
                s(
                    &[
                        ("device", "nvme0n1"),
                        ("operation", "write"),
                        (
                            "cgroup",
                            "/system.slice/a \"quoted\" \\ back\nslash.service",
                        ),
                    ],
                    hist(1000),
                ),
            ],
        },
        Family {
            name: "iosched_requests",
            help: "Requests completed; \"quotes\", a back\\slash,\nand a new line.",
            unit: None,
            kind: MetricType::Counter,
            series: vec![
                s(
                    &[("device", "sda"), ("operation", "read")],
                    Value::Counter(0.0),
                ),
                s(
                    &[("device", "sda"), ("operation", "write")],
                    Value::Counter(9_007_199_254_740_991.0),
                ),
                s(
                    &[("device", "sdb"), ("operation", "flush")],
                    Value::Counter(1.8e19),
                ),
                s(
                    &[("device", ""), ("operation", "ünï©ødé ✓")],
                    Value::Counter(7.0),
                ),
            ],
        },
        Family {
            name: "iosched_idle_waste_seconds",
            help: "Idle with requests waiting.",
            unit: Some("seconds"),
            kind: MetricType::Counter,
            series: vec![s(
                &[("device", "sda"), ("cgroup", "other")],
                Value::Counter(1.5e-9),
            )],
        },
        Family {
            name: "iosched_driver_depth",
            help: "In the driver.",
            unit: None,
            kind: MetricType::Gauge,
            series: vec![
                s(&[("device", "sda")], Value::Gauge(-2.5)),
                s(&[("device", "sdb")], Value::Gauge(f64::NAN)),
                s(&[("device", "sdc")], Value::Gauge(f64::INFINITY)),
                s(&[("device", "sdd")], Value::Gauge(f64::NEG_INFINITY)),
                s(&[("device", "sde")], Value::Gauge(1e300)),
            ],
        },
        Family {
            name: "iosched_scheduler_tunable",
            help: "Tunables.",
            unit: None,
            kind: MetricType::Gauge,
            series: vec![Series {
                labels: many,
                value: Value::Gauge(3.0),
            }],
        },
        Family {
            name: "iosched_device",
            help: "One per device.",
            unit: None,
            kind: MetricType::Info,
            series: vec![s(
                &[
                    ("device", "sda"),
                    ("dev", "8:0"),
                    ("scheduler", "mq-deadline"),
                    ("rotational", "1"),
                    ("nr_requests", "64"),
                ],
                Value::Info,
            )],
        },
        Family {
            name: "iosched_requeues",
            help: "No series yet.",
            unit: None,
            kind: MetricType::Counter,
            series: vec![],
        },
    ]
}

/// What a parser gave back: per family (name, type, unit, help), its samples as
/// (sample name, sorted labels) -> value.
type Parsed = BTreeMap<
    String,
    (
        String,
        String,
        String,
        BTreeMap<(String, Vec<(String, String)>), f64>,
    ),
>;

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics import parser as om
from prometheus_client import parser as classic
text = sys.stdin.read()
p = om if sys.argv[1] == "om" else classic
out = []
for f in p.text_string_to_metric_families(text):
    out.append({"name": f.name, "type": f.type, "unit": getattr(f, "unit", ""),
                "help": f.documentation,
                "samples": [[s.name, s.labels, repr(float(s.value))] for s in f.samples]})
print(json.dumps(out))
"#;

fn python_parse(text: &str, which: &str) -> Parsed {
    let mut child = Command::new("python3")
        .args(["-c", PARSE, which])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the {which} parser refused our text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: Json = serde_json::from_slice(&out.stdout).unwrap();
    let mut parsed = Parsed::new();
    for f in families.as_array().unwrap() {
        let mut samples = BTreeMap::new();
        for s in f["samples"].as_array().unwrap() {
            let mut labels: Vec<(String, String)> = s[1]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            labels.sort();
            let value: f64 = s[2].as_str().unwrap().parse().unwrap();
            let key = (s[0].as_str().unwrap().to_string(), labels);
            assert!(samples.insert(key, value).is_none(), "a sample twice");
        }
        let text = |k: &str| f[k].as_str().unwrap_or("").to_string();
        parsed.insert(
            text("name"),
            (text("type"), text("unit"), text("help"), samples),
        );
    }
    parsed
}

/// What the parsers should give back, from the families themselves: the family name each
/// format's parser reports (the classic one drops a counter's `_total`, and knows an info
/// family only as the gauge `<name>_info`), the type, and every sample.
fn expected(format: Format) -> Parsed {
    let om = format == Format::OpenMetrics;
    let mut want = Parsed::new();
    for f in families() {
        let (name, kind) = match f.kind {
            MetricType::Counter => (f.name.to_string(), "counter"),
            MetricType::Gauge => (f.name.to_string(), "gauge"),
            MetricType::Histogram => (f.name.to_string(), "histogram"),
            MetricType::Info if om => (f.name.to_string(), "info"),
            MetricType::Info => (format!("{}_info", f.name), "gauge"),
        };
        let mut samples = BTreeMap::new();
        for series in &f.series {
            let labels = |extra: Option<(&str, String)>| {
                let mut l: Vec<(String, String)> = series
                    .labels
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.clone()))
                    .chain(extra.map(|(n, v)| (n.to_string(), v)))
                    .collect();
                l.sort();
                l
            };
            match &series.value {
                Value::Counter(v) => {
                    samples.insert((format!("{}_total", f.name), labels(None)), *v);
                }
                Value::Gauge(v) => {
                    samples.insert((f.name.to_string(), labels(None)), *v);
                }
                Value::Info => {
                    samples.insert((format!("{}_info", f.name), labels(None)), 1.0);
                }
                Value::Histogram(h) => {
                    for &(le, n) in &h.buckets {
                        let le = iosched_trace::views::metrics::text::canonical(le);
                        samples.insert(
                            (format!("{}_bucket", f.name), labels(Some(("le", le)))),
                            n as f64,
                        );
                    }
                    let inf = Some(("le", "+Inf".to_string()));
                    samples.insert((format!("{}_bucket", f.name), labels(inf)), h.count as f64);
                    samples.insert((format!("{}_count", f.name), labels(None)), h.count as f64);
                    samples.insert((format!("{}_sum", f.name), labels(None)), h.sum);
                }
            }
        }
        let unit = if om { f.unit.unwrap_or("") } else { "" };
        want.insert(
            name,
            (
                kind.to_string(),
                unit.to_string(),
                f.help.to_string(),
                samples,
            ),
        );
    }
    want
}

fn assert_same(got: &Parsed, want: &Parsed, format: Format) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{format:?}: families"
    );
    for (name, (kind, unit, help, samples)) in want {
        let (gk, gu, gh, gs) = &got[name];
        assert_eq!((gk, gu, gh), (kind, unit, help), "{format:?}: {name}");
        assert_eq!(
            gs.keys().collect::<Vec<_>>(),
            samples.keys().collect::<Vec<_>>(),
            "{format:?}: {name}'s samples"
        );
        for (key, v) in samples {
            let g = gs[key];
            assert!(
                g == *v || (g.is_nan() && v.is_nan()),
                "{format:?}: {name} {key:?}: {g} instead of {v}"
            );
        }
    }
}

#[test]
fn openmetrics_text_reads_back_through_the_reference_parser() {
    if !python_client("openmetrics_text_reads_back_through_the_reference_parser") {
        return;
    }
    let text = encode(&families(), Format::OpenMetrics).unwrap();
    let got = python_parse(&text, "om");
    assert_same(&got, &expected(Format::OpenMetrics), Format::OpenMetrics);
}

#[test]
fn classic_text_reads_back_through_the_python_parser() {
    if !python_client("classic_text_reads_back_through_the_python_parser") {
        return;
    }
    let text = encode(&families(), Format::Prometheus).unwrap();
    let got = python_parse(&text, "classic");
    // The classic parser names a counter family without `_total`, as OpenMetrics does.
    assert_same(&got, &expected(Format::Prometheus), Format::Prometheus);
}

#[test]
fn classic_text_passes_promtool_check_metrics() {
    const TEST: &str = "classic_text_passes_promtool_check_metrics";
    if !tool_available(
        TEST,
        "promtool (Debian's prometheus package)",
        Command::new("promtool").arg("--version"),
    ) {
        return;
    }
    let text = encode(&families(), Format::Prometheus).unwrap();
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Parsed, and nothing for its linter to say (names, units, help, suffixes).
    assert!(
        out.status.success() && said.trim().is_empty(),
        "{said}\n{text}"
    );

    // It does read what it checks: a broken line is refused.
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{text}broken{{a=\"b}} 1\n").as_bytes())
        .unwrap();
    assert!(!child.wait().unwrap().success());
}
