//! `convert --to parquet`: a trace as two Parquet tables a SQL engine reads across many
//! hosts (docs/FLEET.md): one row per completed request, and one per idling-waste interval,
//! hive-partitioned by host and date (`DIR/host=H/date=D/part-N.parquet`,
//! `DIR/idle/host=H/date=D/part-N.parquet`), the recording's identity (host, kernel, boot
//! id, clock base, devices with their schedulers and tunables, losses) in each file's
//! key-value metadata.
//!
//! - [`columns`]: both tables' columns (the schema), the row-group buffers.
//! - [`partition`]: a table as partitioned files.
//! - [`rows`]: the timeline's pass collected into rows.
//!
//! Owns: the Parquet export. Must not: print, or compute figures `report` computes
//! otherwise (idling waste comes from the report's own tracker).

pub mod columns;
pub mod partition;
pub mod rows;

use std::path::{Path, PathBuf};

use serde_json::json;

use iosched_core::{
    analysis::DEFAULT_MIN_IDLE_NS,
    driver::{Driver, Filter},
    source::{InputError, TraceFormat, TraceSource},
    timeline::Anomalies,
};

pub use partition::Written;
use partition::{ROW_GROUP_ROWS, TableWriter};
use rows::{Collector, Context};

/// The schema name in every file's metadata (`iosched.schema`); bumped when a column's
/// meaning changes.
pub const SCHEMA: &str = "iosched-trace-fleet/1";

/// Where the idle table goes under the output directory.
pub const IDLE_DIR: &str = "idle";

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The `host=` partition; default: the recording's host name.
    pub host: Option<String>,
    /// The `date=` partition of every row (`YYYY-MM-DD`); default: each row's UTC date on
    /// the recording's wall clock.
    pub date: Option<String>,
    /// Rows per row group (default [`ROW_GROUP_ROWS`]; tests use small ones).
    pub row_group_rows: Option<usize>,
}

#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub host: String,
    pub requests: u64,
    pub idle_intervals: u64,
    pub idle_ns: u64,
    pub request_files: Vec<Written>,
    pub idle_files: Vec<Written>,
    pub anomalies: Anomalies,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
    #[error("writing Parquet to {0}: {1}")]
    Parquet(PathBuf, parquet::errors::ParquetError),
    #[error(
        "the trace names no host (blktrace files do not): give the host partition with --host NAME"
    )]
    NoHost,
    #[error(
        "host {0:?} cannot be a partition name: use letters, digits, '.', '-' and '_' (--host NAME)"
    )]
    BadHost(String),
    #[error(
        "the trace has no wall clock (blktrace files have none): give the date partition with --date YYYY-MM-DD"
    )]
    NoClock,
    #[error("--date {0:?} is not a date: use YYYY-MM-DD")]
    BadDate(String),
}

fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h != "."
        && h != ".."
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
}

fn valid_date(d: &str) -> bool {
    let b = d.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(n, c)| n == 4 || n == 7 || c.is_ascii_digit())
        && (1..=12).contains(&d[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&d[8..10].parse::<u32>().unwrap_or(0))
}

/// Reads all of `source` and writes both tables under `dir`.
pub fn export(
    source: &mut dyn TraceSource,
    dir: &Path,
    opts: &Options,
) -> Result<Summary, ExportError> {
    let header = source.header().cloned();
    let host = match (&opts.host, header.as_ref().map(|h| h.host.as_str())) {
        (Some(h), _) => h.clone(),
        (None, Some(h)) if !h.is_empty() => h.to_string(),
        _ => return Err(ExportError::NoHost),
    };
    if !valid_host(&host) {
        return Err(ExportError::BadHost(host));
    }
    if let Some(d) = &opts.date
        && !valid_date(d)
    {
        return Err(ExportError::BadDate(d.clone()));
    }
    let clock = header
        .as_ref()
        .map(|h| h.clock)
        .filter(|c| c.realtime_ns != 0);
    if clock.is_none() && opts.date.is_none() {
        return Err(ExportError::NoClock);
    }
    let rg = opts.row_group_rows.unwrap_or(ROW_GROUP_ROWS);
    let mut requests = TableWriter::new(dir, "request", columns::REQUESTS, &host, rg)?;
    let mut idle = TableWriter::new(&dir.join(IDLE_DIR), "idle", columns::IDLE, &host, rg)?;

    let devices = source.meta().devices.clone();
    let mut driver = Driver::new(&devices, Filter::ALL);
    let mut sink = Collector::default();
    let mut batch = Vec::with_capacity(4096);
    let no_changes = Vec::new();
    let lay = |source: &dyn TraceSource,
               sink: &mut Collector,
               requests: &mut TableWriter,
               idle: &mut TableWriter| {
        let ctx = Context {
            devices: &devices,
            changes: source.stats().map_or(&no_changes, |s| &s.device_changes),
            processes: source.processes(),
            clock,
            date: opts.date.as_deref(),
        };
        sink.lay(&ctx, requests, idle)
    };
    loop {
        batch.clear();
        source.next_batch(&mut batch, 4096)?;
        if batch.is_empty() {
            break;
        }
        for ev in &batch {
            driver.push(ev, &mut sink);
        }
        // Laid out a row group at a time: cgroup paths and scheduler switches are read
        // as the trace goes, and a group's worth of rows is far behind the reading.
        if sink.pending() >= rg {
            lay(&*source, &mut sink, &mut requests, &mut idle)?;
        }
    }
    driver.finish(&mut sink);
    lay(&*source, &mut sink, &mut requests, &mut idle)?;

    let (n_requests, n_intervals, idle_ns) = sink.totals();
    let anomalies = sink.anomalies().clone();
    let meta = metadata(source, &host, &anomalies);
    let with_table = |table: &str| {
        let mut m = vec![("iosched.table".to_string(), table.to_string())];
        m.extend(meta.iter().cloned());
        m
    };
    Ok(Summary {
        host,
        requests: n_requests,
        idle_intervals: n_intervals,
        idle_ns,
        request_files: requests.finish(&with_table("requests"))?,
        idle_files: idle.finish(&with_table("idle"))?,
        anomalies,
    })
}

/// The key-value metadata of every file (docs/FLEET.md lists the keys).
pub fn metadata(
    source: &dyn TraceSource,
    host: &str,
    anomalies: &Anomalies,
) -> Vec<(String, String)> {
    let meta = source.meta();
    let header = source.header();
    let stats = source.stats();
    let devices: Vec<_> = meta
        .devices
        .iter()
        .map(|d| {
            json!({
                "name": d.name,
                "dev": d.dev.to_string(),
                "scheduler": d.scheduler,
                "tunables": d.iosched,
                "rotational": d.rotational,
                "model": d.model,
            })
        })
        .collect();
    let mut m: Vec<(&str, String)> = vec![
        ("iosched.schema", SCHEMA.into()),
        ("iosched.tool_version", env!("CARGO_PKG_VERSION").into()),
        ("iosched.source", meta.path.display().to_string()),
        (
            "iosched.source_format",
            match meta.format {
                TraceFormat::Recording => format!(
                    "iosched-trace {}",
                    header.map_or("", |h| h.format_version.as_str())
                ),
                TraceFormat::Blktrace => "blktrace".into(),
            },
        ),
        ("iosched.host", host.into()),
        (
            "iosched.kernel_release",
            meta.kernel_release.clone().unwrap_or_default(),
        ),
        (
            "iosched.devices",
            serde_json::Value::Array(devices).to_string(),
        ),
        (
            "iosched.idle_min_interval_ns",
            DEFAULT_MIN_IDLE_NS.to_string(),
        ),
        (
            "iosched.anomalies",
            serde_json::to_string(anomalies).unwrap_or_default(),
        ),
    ];
    if let Some(h) = header {
        if let Some(b) = &h.boot_id {
            m.push(("iosched.boot_id", b.clone()));
        }
        if h.clock.realtime_ns != 0 {
            let offset = i128::from(h.clock.realtime_ns) - i128::from(h.clock.monotonic_ns);
            m.push((
                "iosched.clock_monotonic_ns",
                h.clock.monotonic_ns.to_string(),
            ));
            m.push(("iosched.clock_realtime_ns", h.clock.realtime_ns.to_string()));
            m.push(("iosched.clock_offset_ns", offset.to_string()));
        }
    }
    if let Some(lost) = source.lost() {
        m.push(("iosched.lost_events", lost.to_string()));
    }
    if let Some(s) = stats {
        m.push((
            "iosched.lost_per_cpu",
            serde_json::to_string(&s.lost_per_cpu).unwrap_or_default(),
        ));
        m.push(("iosched.events_sent", s.sent.to_string()));
        if let Some(k) = s.kernel_skipped {
            m.push(("iosched.kernel_skipped", k.to_string()));
        }
        if let Some(u) = s.untraced_completions() {
            m.push(("iosched.untraced_completions", u.to_string()));
        }
        m.push((
            "iosched.device_changes",
            serde_json::to_string(&s.device_changes).unwrap_or_default(),
        ));
    }
    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests;
