//! The exporter's metrics as data, and their two text expositions: OpenMetrics 1.0
//! (`application/openmetrics-text; version=1.0.0`) and the classic Prometheus text format
//! (`text/plain; version=0.0.4`). The exporter (`crate::exporter`) builds [`Family`]s from what
//! it read out of the kernel; this module only lays them out.
//!
//! Names follow the Prometheus conventions: one prefix (`iosched_`), base units (seconds,
//! bytes), counters' samples end in `_total` (the family name does not: OpenMetrics names the
//! family, and the classic format's `# TYPE` line names the sample). docs/EXPORTER.md lists
//! every family.
//!
//! - [`text`]: both expositions, and which one a scrape's `Accept` header asks for.

pub mod text;

/// What kind of metric a family is, as both formats name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// Monotonic; samples are `<name>_total`.
    Counter,
    Gauge,
    /// Cumulative buckets, `_bucket{le=...}`, `_count`, `_sum`.
    Histogram,
    /// Labels only; the sample is `<name>_info 1` (classic format: a gauge `<name>_info`).
    Info,
}

/// One metric family: every series of one name.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The family name without the `_total` or `_info` suffix, prefix included
    /// (`iosched_requests`, `iosched_request_latency_seconds`, `iosched_device`). Where there
    /// is a unit it ends the name (`_seconds`, `_bytes`), as OpenMetrics requires.
    pub name: &'static str,
    pub help: &'static str,
    /// `seconds`, `bytes`, ...: the name's last word, exposed as OpenMetrics' `# UNIT`.
    pub unit: Option<&'static str>,
    pub kind: MetricType,
    pub series: Vec<Series>,
}

/// One labelled series of a family.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// In the order exposed. Values are escaped by the encoders (`\\`, `\"`, `\n`).
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// A series' value; its variant matches its family's [`MetricType`].
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    Histogram(Histogram),
    /// An info series: its labels are its content.
    Info,
}

/// A histogram as exposed: cumulative counts at each upper bound (ascending, finite; the
/// encoders add `+Inf` = `count`).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}
