//! The two text expositions of [`Family`]s: OpenMetrics 1.0 and the classic Prometheus text
//! format 0.0.4, and which one a scrape's `Accept` header asks for.
//!
//! The formats differ only in naming and metadata: OpenMetrics' `# TYPE` names the family
//! (`iosched_requests`) and its samples carry the suffix (`iosched_requests_total`), the
//! classic format names the sample in `# TYPE` and has no `info` type (an info family is a
//! gauge `<name>_info`), no `# UNIT` and no `# EOF`. OpenMetrics' `# HELP` escapes `"` as
//! well; the classic parser refuses that escape, so there it stays as is.
//!
//! Everything a parser would refuse is refused here first, as an [`EncodeError`] naming the
//! family: a bad metric or label name, a value of another kind than its family, a negative or
//! NaN counter, histogram buckets out of order, two series with the same labels. A scrape
//! then fails whole (HTTP 500) rather than half-parsed by Prometheus.

use std::{collections::HashSet, fmt::Write as _};

use super::{Family, Histogram, MetricType, Series, Value};

/// Which exposition a scrape gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
    /// The classic Prometheus text format, version 0.0.4.
    Prometheus,
}

impl Format {
    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: its media ranges by `q`, highest first (ties in
    /// the header's order, as Prometheus' own client library negotiates), the first that is
    /// OpenMetrics text (version 1.0.0, 0.0.1 or none; the text is the same) or that the
    /// classic text matches (`text/plain` of version 0.0.4 or none, `text/*`, `*/*`). Nothing
    /// matching, or no header: the classic format, which every scraper reads.
    pub fn negotiate(accept: &str) -> Format {
        let mut ranges: Vec<(f64, usize, Option<Format>)> = accept
            .split(',')
            .enumerate()
            .filter_map(|(i, range)| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next()?.to_ascii_lowercase();
                let (mut q, mut version) = (1.0, None);
                for p in parts {
                    let Some((k, v)) = p.split_once('=') else {
                        continue;
                    };
                    let v = v.trim().trim_matches('"');
                    match k.trim().to_ascii_lowercase().as_str() {
                        "q" => q = v.parse().unwrap_or(0.0),
                        "version" => version = Some(v.to_string()),
                        _ => {}
                    }
                }
                let format = match (media.as_str(), version.as_deref()) {
                    ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => {
                        Some(Format::OpenMetrics)
                    }
                    ("text/plain", None | Some("0.0.4")) | ("text/*" | "*/*", _) => {
                        Some(Format::Prometheus)
                    }
                    _ => None,
                };
                (q > 0.0).then_some((q, i, format))
            })
            .collect();
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        ranges
            .into_iter()
            .find_map(|(_, _, f)| f)
            .unwrap_or(Format::Prometheus)
    }
}

/// A family no parser would take as it is.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EncodeError {
    #[error("metric family {0:?}: not a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")]
    MetricName(String),
    #[error("metric family {0}: label name {1:?} is not valid ([a-zA-Z_][a-zA-Z0-9_]*, not __*)")]
    LabelName(&'static str, String),
    #[error("metric family {0}: label {1} is reserved for its type")]
    ReservedLabel(&'static str, &'static str),
    #[error("metric family {0}: label {1} appears twice in one series")]
    RepeatedLabel(&'static str, &'static str),
    #[error("metric family {0}: two series with the same labels")]
    DuplicateSeries(&'static str),
    #[error("metric family {0} appears twice")]
    DuplicateFamily(&'static str),
    #[error("metric family {0}: the name must not end in {1} (the encoder adds it)")]
    Suffix(&'static str, &'static str),
    #[error("metric family {0}: unit {1:?} must end the name, and info families have none")]
    Unit(&'static str, &'static str),
    #[error("metric family {0}: a series' value is not of the family's type")]
    WrongValue(&'static str),
    #[error("metric family {0}: {1}")]
    BadValue(&'static str, &'static str),
}

/// The exposition of `families`, in their order, in `format`. Families with no series keep
/// their metadata lines (both formats allow that), so a scraper sees what exists.
pub fn encode(families: &[Family], format: Format) -> Result<String, EncodeError> {
    let mut out = String::with_capacity(families.iter().map(|f| 128 + 96 * f.series.len()).sum());
    let mut seen = HashSet::new();
    for family in families {
        if !seen.insert(family.name) {
            return Err(EncodeError::DuplicateFamily(family.name));
        }
        check_family(family)?;
        family_text(&mut out, family, format);
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    Ok(out)
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Prometheus' label-name rule; names starting with `__` are its own.
pub fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

fn check_family(f: &Family) -> Result<(), EncodeError> {
    if !is_metric_name(f.name) {
        return Err(EncodeError::MetricName(f.name.to_string()));
    }
    let (suffixes, reserved): (&[&'static str], &[&'static str]) = match f.kind {
        MetricType::Counter => (&["_total"], &[]),
        MetricType::Gauge => (&[], &[]),
        MetricType::Histogram => (&["_bucket", "_count", "_sum"], &["le"]),
        MetricType::Info => (&["_info"], &[]),
    };
    if let Some(s) = suffixes.iter().find(|s| f.name.ends_with(**s)) {
        return Err(EncodeError::Suffix(f.name, s));
    }
    if let Some(unit) = f.unit
        && (unit.is_empty()
            || f.kind == MetricType::Info
            || !f.name.ends_with(&format!("_{unit}"))
            || !is_metric_name(unit))
    {
        return Err(EncodeError::Unit(f.name, unit));
    }
    let mut label_sets = HashSet::with_capacity(f.series.len());
    for s in &f.series {
        for (i, &(name, _)) in s.labels.iter().enumerate() {
            if !is_label_name(name) {
                return Err(EncodeError::LabelName(f.name, name.to_string()));
            }
            if let Some(r) = reserved.iter().find(|r| **r == name) {
                return Err(EncodeError::ReservedLabel(f.name, r));
            }
            if s.labels[..i].iter().any(|&(n, _)| n == name) {
                return Err(EncodeError::RepeatedLabel(f.name, name));
            }
        }
        check_value(f, s)?;
        let mut key: Vec<(&str, &str)> = s.labels.iter().map(|(n, v)| (*n, v.as_str())).collect();
        key.sort_unstable();
        if !label_sets.insert(key) {
            return Err(EncodeError::DuplicateSeries(f.name));
        }
    }
    Ok(())
}

fn check_value(f: &Family, s: &Series) -> Result<(), EncodeError> {
    let bad = |why| Err(EncodeError::BadValue(f.name, why));
    match (&s.value, f.kind) {
        (Value::Counter(v), MetricType::Counter) => {
            if v.is_nan() || *v < 0.0 {
                return bad("a counter must be a number >= 0");
            }
        }
        (Value::Gauge(_), MetricType::Gauge) | (Value::Info, MetricType::Info) => {}
        (Value::Histogram(h), MetricType::Histogram) => {
            if h.sum.is_nan() {
                return bad("a histogram's sum must be a number");
            }
            let mut last: Option<(f64, u64)> = None;
            for &(le, n) in &h.buckets {
                if !le.is_finite() {
                    return bad("bucket bounds must be finite (+Inf is added)");
                }
                if let Some((l, c)) = last
                    && (le <= l || n < c)
                {
                    return bad("buckets must ascend, with cumulative counts");
                }
                last = Some((le, n));
            }
            if last.is_some_and(|(_, c)| c > h.count) {
                return bad("a bucket counts more than the histogram's count");
            }
        }
        _ => return Err(EncodeError::WrongValue(f.name)),
    }
    Ok(())
}

fn family_text(out: &mut String, f: &Family, format: Format) {
    let om = format == Format::OpenMetrics;
    // The name metadata lines carry, and the type they say.
    let (meta_name, kind) = match (f.kind, om) {
        (MetricType::Counter, true) => (f.name.to_string(), "counter"),
        (MetricType::Counter, false) => (format!("{}_total", f.name), "counter"),
        (MetricType::Gauge, _) => (f.name.to_string(), "gauge"),
        (MetricType::Histogram, _) => (f.name.to_string(), "histogram"),
        (MetricType::Info, true) => (f.name.to_string(), "info"),
        (MetricType::Info, false) => (format!("{}_info", f.name), "gauge"),
    };
    let _ = writeln!(out, "# HELP {meta_name} {}", escape_help(f.help, om));
    let _ = writeln!(out, "# TYPE {meta_name} {kind}");
    if om && let Some(unit) = f.unit {
        let _ = writeln!(out, "# UNIT {meta_name} {unit}");
    }
    for s in &f.series {
        match &s.value {
            Value::Counter(v) => sample(out, f.name, "_total", &s.labels, None, &number(*v)),
            Value::Gauge(v) => sample(out, f.name, "", &s.labels, None, &number(*v)),
            Value::Info => sample(out, f.name, "_info", &s.labels, None, "1"),
            Value::Histogram(h) => histogram(out, f.name, &s.labels, h),
        }
    }
}

fn histogram(out: &mut String, name: &str, labels: &[(&'static str, String)], h: &Histogram) {
    for &(le, n) in &h.buckets {
        let le = canonical(le);
        sample(out, name, "_bucket", labels, Some(&le), &n.to_string());
    }
    let count = h.count.to_string();
    sample(out, name, "_bucket", labels, Some("+Inf"), &count);
    sample(out, name, "_count", labels, None, &count);
    sample(out, name, "_sum", labels, None, &number(h.sum));
}

/// One sample line: `name{labels} value`, `le` last (after the series' own labels).
fn sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&'static str, String)],
    le: Option<&str>,
    value: &str,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let le = le.map(|v| ("le", v));
        for (i, (n, v)) in labels
            .iter()
            .map(|(n, v)| (*n, v.as_str()))
            .chain(le)
            .enumerate()
        {
            if i > 0 {
                out.push(',');
            }
            out.push_str(n);
            out.push_str("=\"");
            escape_label_value(out, v);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// A label value inside its quotes, in both formats: `\` `"` and line feed escaped.
pub fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `# HELP` text: `\` and line feed escaped in both formats, `"` too in OpenMetrics (whose
/// grammar has no bare quote there; the classic parser refuses `\"`).
fn escape_help(help: &str, om: bool) -> String {
    let mut out = String::with_capacity(help.len());
    for c in help.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if om => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A sample's value: integral values as integers (no `.0`, no exponent: counts read as
/// counts), anything else as [`canonical`].
pub fn number(v: f64) -> String {
    // 2^53: every integer below is exact in an f64.
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 {
        format!("{}", v as i64)
    } else {
        canonical(v)
    }
}

/// The one spelling of a float both parsers read and `le` labels need to be the same series
/// from scrape to scrape: the shortest digits that round-trip, positional between 1e-4 and
/// 1e16 (integers with `.0`: `1.0`, `10.0`), else `1e-06`-style exponents (sign, at least two
/// digits), and `+Inf`, `-Inf`, `NaN`. This is what Prometheus' Python client writes, and
/// what Prometheus 3 normalizes `le` values to.
pub fn canonical(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("{:e}'s exponent is an integer");
    if v == 0.0 || (-4..16).contains(&exp) {
        let mut s = format!("{v}");
        if !s.contains('.') {
            s.push_str(".0");
        }
        s
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn fam(name: &'static str, kind: MetricType, series: Vec<Series>) -> Family {
        Family {
            name,
            help: "Help.",
            unit: None,
            kind,
            series,
        }
    }

    fn series(labels: &[(&'static str, &str)], value: Value) -> Series {
        Series {
            labels: labels.iter().map(|(n, v)| (*n, v.to_string())).collect(),
            value,
        }
    }

    /// One family of each type, a label value with every escape, a help with every escape.
    fn sample_families() -> Vec<Family> {
        vec![
            Family {
                name: "iosched_requests",
                help: "Requests completed.",
                unit: None,
                kind: MetricType::Counter,
                series: vec![
                    series(
                        &[("device", "sda"), ("operation", "read")],
                        Value::Counter(42.0),
                    ),
                    series(
                        &[("device", "a\\b\"c\nd"), ("operation", "write")],
                        Value::Counter(0.5),
                    ),
                ],
            },
            Family {
                name: "iosched_request_latency_seconds",
                help: "Q->C, \"end to end\"\\ns.\nSecond line.",
                unit: Some("seconds"),
                kind: MetricType::Histogram,
                series: vec![series(
                    &[("device", "sda")],
                    Value::Histogram(Histogram {
                        buckets: vec![(1e-6, 0), (0.0015, 3), (1.0, 4), (10.0, 5)],
                        count: 6,
                        sum: 12.25,
                    }),
                )],
            },
            fam(
                "iosched_driver_depth",
                MetricType::Gauge,
                vec![
                    series(&[("device", "sda")], Value::Gauge(-3.0)),
                    series(&[("device", "sdb")], Value::Gauge(f64::NAN)),
                ],
            ),
            fam(
                "iosched_device",
                MetricType::Info,
                vec![series(
                    &[("device", "sda"), ("scheduler", "bfq")],
                    Value::Info,
                )],
            ),
            fam("iosched_requeues", MetricType::Counter, vec![]),
            fam(
                "iosched_exporter_scrape_duration_seconds",
                MetricType::Gauge,
                vec![series(&[], Value::Gauge(0.000123))],
            ),
        ]
    }

    #[test]
    fn openmetrics_exposition_is_byte_exact() {
        let text = encode(&sample_families(), Format::OpenMetrics).unwrap();
        insta::assert_snapshot!(text, @r#"
        # HELP iosched_requests Requests completed.
        # TYPE iosched_requests counter
        iosched_requests_total{device="sda",operation="read"} 42
        iosched_requests_total{device="a\\b\"c\nd",operation="write"} 0.5
        # HELP iosched_request_latency_seconds Q->C, \"end to end\"\\ns.\nSecond line.
        # TYPE iosched_request_latency_seconds histogram
        # UNIT iosched_request_latency_seconds seconds
        iosched_request_latency_seconds_bucket{device="sda",le="1e-06"} 0
        iosched_request_latency_seconds_bucket{device="sda",le="0.0015"} 3
        iosched_request_latency_seconds_bucket{device="sda",le="1.0"} 4
        iosched_request_latency_seconds_bucket{device="sda",le="10.0"} 5
        iosched_request_latency_seconds_bucket{device="sda",le="+Inf"} 6
        iosched_request_latency_seconds_count{device="sda"} 6
        iosched_request_latency_seconds_sum{device="sda"} 12.25
        # HELP iosched_driver_depth Help.
        # TYPE iosched_driver_depth gauge
        iosched_driver_depth{device="sda"} -3
        iosched_driver_depth{device="sdb"} NaN
        # HELP iosched_device Help.
        # TYPE iosched_device info
        iosched_device_info{device="sda",scheduler="bfq"} 1
        # HELP iosched_requeues Help.
        # TYPE iosched_requeues counter
        # HELP iosched_exporter_scrape_duration_seconds Help.
        # TYPE iosched_exporter_scrape_duration_seconds gauge
        iosched_exporter_scrape_duration_seconds 0.000123
        # EOF
        "#);
    }

    #[test]
    fn prometheus_exposition_is_byte_exact() {
        let text = encode(&sample_families(), Format::Prometheus).unwrap();
        insta::assert_snapshot!(text, @r#"
        # HELP iosched_requests_total Requests completed.
        # TYPE iosched_requests_total counter
        iosched_requests_total{device="sda",operation="read"} 42
        iosched_requests_total{device="a\\b\"c\nd",operation="write"} 0.5
        # HELP iosched_request_latency_seconds Q->C, "end to end"\\ns.\nSecond line.
        # TYPE iosched_request_latency_seconds histogram
        iosched_request_latency_seconds_bucket{device="sda",le="1e-06"} 0
        iosched_request_latency_seconds_bucket{device="sda",le="0.0015"} 3
        iosched_request_latency_seconds_bucket{device="sda",le="1.0"} 4
        iosched_request_latency_seconds_bucket{device="sda",le="10.0"} 5
        iosched_request_latency_seconds_bucket{device="sda",le="+Inf"} 6
        iosched_request_latency_seconds_count{device="sda"} 6
        iosched_request_latency_seconds_sum{device="sda"} 12.25
        # HELP iosched_driver_depth Help.
        # TYPE iosched_driver_depth gauge
        iosched_driver_depth{device="sda"} -3
        iosched_driver_depth{device="sdb"} NaN
        # HELP iosched_device_info Help.
        # TYPE iosched_device_info gauge
        iosched_device_info{device="sda",scheduler="bfq"} 1
        # HELP iosched_requeues_total Help.
        # TYPE iosched_requeues_total counter
        # HELP iosched_exporter_scrape_duration_seconds Help.
        # TYPE iosched_exporter_scrape_duration_seconds gauge
        iosched_exporter_scrape_duration_seconds 0.000123
        "#);
    }

    #[test]
    fn numbers_are_spelled_as_the_parsers_expect() {
        let c = |v: f64| canonical(v);
        assert_eq!(
            [
                c(1.0),
                c(10.0),
                c(0.0),
                c(1e-6),
                c(1.5e-6),
                c(7e-5),
                c(1e-4)
            ],
            ["1.0", "10.0", "0.0", "1e-06", "1.5e-06", "7e-05", "0.0001"]
        );
        assert_eq!([c(0.0015), c(1.5), c(3.0)], ["0.0015", "1.5", "3.0"]);
        assert_eq!(
            [c(1e16), c(2.5e300), c(-1e-300)],
            ["1e+16", "2.5e+300", "-1e-300"]
        );
        assert_eq!(
            [c(f64::INFINITY), c(f64::NEG_INFINITY), c(f64::NAN)],
            ["+Inf", "-Inf", "NaN"]
        );
        let n = |v: f64| number(v);
        assert_eq!([n(0.0), n(-0.0), n(42.0), n(-3.0)], ["0", "0", "42", "-3"]);
        assert_eq!(n(18_446_744_073_709_551_615.0), "1.8446744073709552e+19");
        assert_eq!(
            [n(0.25), n(1e-9), n(f64::INFINITY)],
            ["0.25", "1e-09", "+Inf"]
        );
        for v in [1e-6, 0.3, 123.456, 1e20, 5e-324, f64::MAX] {
            assert_eq!(c(v).parse::<f64>().unwrap(), v);
            assert_eq!(n(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn what_a_parser_would_refuse_is_refused() {
        let err = |f: Family| encode(&[f], Format::OpenMetrics).unwrap_err().to_string();
        let counter = |labels: &[(&'static str, &str)], v: f64| {
            fam(
                "x",
                MetricType::Counter,
                vec![series(labels, Value::Counter(v))],
            )
        };
        assert!(err(fam("1x", MetricType::Gauge, vec![])).contains("not a valid metric name"));
        assert!(err(fam("x-y", MetricType::Gauge, vec![])).contains("not a valid metric name"));
        assert!(err(fam("x_total", MetricType::Counter, vec![])).contains("_total"));
        assert!(err(fam("x_info", MetricType::Info, vec![])).contains("_info"));
        assert!(err(counter(&[("a-b", "1")], 1.0)).contains("label name \"a-b\""));
        assert!(err(counter(&[("__x", "1")], 1.0)).contains("label name \"__x\""));
        assert!(err(counter(&[("", "1")], 1.0)).contains("label name \"\""));
        assert!(err(counter(&[("a", "1"), ("a", "2")], 1.0)).contains("appears twice"));
        assert!(err(counter(&[], -1.0)).contains(">= 0"));
        assert!(err(counter(&[], f64::NAN)).contains(">= 0"));
        let two = fam(
            "x",
            MetricType::Gauge,
            vec![
                series(&[("a", "1"), ("b", "2")], Value::Gauge(1.0)),
                series(&[("b", "2"), ("a", "1")], Value::Gauge(2.0)),
            ],
        );
        assert!(err(two).contains("same labels"));
        let wrong = fam(
            "x",
            MetricType::Gauge,
            vec![series(&[], Value::Counter(1.0))],
        );
        assert!(err(wrong).contains("not of the family's type"));
        let hist = |buckets: Vec<(f64, u64)>, count, labels: &[(&'static str, &str)]| {
            fam(
                "h",
                MetricType::Histogram,
                vec![series(
                    labels,
                    Value::Histogram(Histogram {
                        buckets,
                        count,
                        sum: 1.0,
                    }),
                )],
            )
        };
        assert!(err(hist(vec![(1.0, 1), (1.0, 2)], 2, &[])).contains("ascend"));
        assert!(err(hist(vec![(1.0, 2), (2.0, 1)], 2, &[])).contains("ascend"));
        assert!(err(hist(vec![(1.0, 3)], 2, &[])).contains("more than"));
        assert!(err(hist(vec![(f64::INFINITY, 3)], 3, &[])).contains("finite"));
        assert!(err(hist(vec![], 0, &[("le", "1")])).contains("reserved"));
        let mut unit = fam("x_bytes", MetricType::Gauge, vec![]);
        unit.unit = Some("seconds");
        assert!(err(unit.clone()).contains("unit"));
        unit.unit = Some("bytes");
        assert!(encode(&[unit.clone()], Format::OpenMetrics).is_ok());
        let mut info = fam("x_bytes", MetricType::Info, vec![]);
        info.unit = Some("bytes");
        assert!(err(info).contains("unit"));
        let twice = encode(&[unit.clone(), unit], Format::Prometheus).unwrap_err();
        assert_eq!(twice, EncodeError::DuplicateFamily("x_bytes"));
    }

    #[test]
    fn accept_headers_choose_the_format() {
        use Format::*;
        let n = Format::negotiate;
        // Prometheus 2.x and 3.x, as they send it.
        assert_eq!(
            n(
                "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            ),
            OpenMetrics
        );
        assert_eq!(
            n(
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
            ),
            OpenMetrics
        );
        // Prometheus configured for the classic format only.
        assert_eq!(n("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Prometheus);
        assert_eq!(n(""), Prometheus);
        assert_eq!(n("*/*"), Prometheus);
        assert_eq!(n("text/html"), Prometheus);
        assert_eq!(n("application/openmetrics-text"), OpenMetrics);
        assert_eq!(
            n("Application/OpenMetrics-Text; Version=1.0.0"),
            OpenMetrics
        );
        // A version we do not write is not taken; q=0 means "not this".
        assert_eq!(n("application/openmetrics-text;version=2.0.0"), Prometheus);
        assert_eq!(n("application/openmetrics-text;q=0,text/plain"), Prometheus);
        // Higher q wins whatever the order; a tie goes to the first.
        assert_eq!(
            n("text/plain;q=0.4,application/openmetrics-text;q=0.9"),
            OpenMetrics
        );
        assert_eq!(n("text/plain,application/openmetrics-text"), Prometheus);
        assert_eq!(n("application/openmetrics-text,text/plain"), OpenMetrics);
        assert_eq!(n(";;,q=,=;,"), Prometheus);
        assert!(
            OpenMetrics
                .content_type()
                .starts_with("application/openmetrics-text; version=1.0.0")
        );
        assert!(
            Prometheus
                .content_type()
                .starts_with("text/plain; version=0.0.4")
        );
    }

    /// Undoes [`escape_label_value`] the way the parsers read it; `None` on a dangling or
    /// unknown escape.
    fn unescape(s: &str) -> Option<String> {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                out.push(match chars.next()? {
                    '\\' => '\\',
                    '"' => '"',
                    'n' => '\n',
                    _ => return None,
                });
            } else {
                out.push(c);
            }
        }
        Some(out)
    }

    proptest! {
        #[test]
        fn label_values_round_trip(v in any::<String>()) {
            let mut escaped = String::new();
            escape_label_value(&mut escaped, &v);
            prop_assert!(!escaped.contains('\n'));
            // No unescaped quote can end the value early.
            let bare_quote = escaped.char_indices().any(|(i, c)| {
                c == '"' && escaped[..i].chars().rev().take_while(|&b| b == '\\').count() % 2 == 0
            });
            prop_assert!(!bare_quote);
            prop_assert_eq!(unescape(&escaped), Some(v));
        }

        #[test]
        fn every_sample_line_is_one_line(v in any::<String>(), x in any::<f64>()) {
            let f = fam("x", MetricType::Gauge, vec![series(&[("a", &v)], Value::Gauge(x))]);
            let text = encode(&[f], Format::OpenMetrics).unwrap();
            prop_assert_eq!(text.lines().count(), 4);
            let line = text.lines().nth(2).unwrap();
            let value = line.rsplit(' ').next().unwrap();
            let parsed: f64 = value.parse().unwrap();
            prop_assert!(parsed == x || (parsed.is_nan() && x.is_nan()));
        }

        #[test]
        fn canonical_round_trips(x in any::<f64>()) {
            let parsed: f64 = canonical(x).replace("Inf", "inf").parse().unwrap();
            prop_assert!(parsed == x || (parsed.is_nan() && x.is_nan()));
        }
    }
}
