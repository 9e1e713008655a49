//! `report --html`: one self-contained page (no network: our own script and styles inlined,
//! so it works from `file://` and as an e-mail attachment). The data goes in as one JSON
//! document in a `<script type="application/json">` tag: the report exactly as `--json`
//! prints it, plus [`analysis::bins`](iosched_core::analysis::bins)' binned series, the
//! idle-with-pending intervals to draw and the latency curves. The page's size is bounded
//! by the number of bins, processes and devices, not by the trace's length.
//!
//! `report.js` draws it: the timeline in SVG (a lane per process: scheduler and device
//! parts; a band per device: service slices and idling waste, with whom the device idled for
//! and who waited), the dense plots on canvases (throughput, IOPS, queue depth, sector
//! against time, latency histograms and percentile curves), the report's tables beside them;
//! zoom (wheel) and pan (drag) on time.

use serde::Serialize;

use iosched_core::analysis::{
    Report,
    bins::{Axis, LatencyCurve, SECTOR_COL_BINS, TimeBins},
    idling::IdleInterval,
};

const SCRIPT: &str = include_str!("report.js");
const STYLE: &str = include_str!("style.css");

/// What the page shows.
pub struct Page<'a> {
    pub report: &'a Report,
    pub bins: &'a TimeBins,
    /// Idle-with-pending intervals to draw (the longest, up to the command's cap).
    pub idle: &'a [IdleInterval],
    pub latency: &'a [LatencyCurve],
    /// For `explain --html` and `replay --html`: the model's results, shown above the plots.
    pub model: Option<Model<'a>>,
}

/// The model's results for the page: `explain` or `replay`, its `--json` document and its
/// text.
#[derive(Clone, Copy, Serialize)]
pub struct Model<'a> {
    pub command: &'static str,
    pub json: &'a serde_json::Value,
    pub text: &'a str,
    /// `explain`'s findings' evidence on the time axis
    /// ([`evidence_times`](crate::views::explain::evidence_times)).
    pub evidence: &'a [crate::views::explain::FindingTimes],
    /// `replay`'s predicted runs, each drawn as a timeline beside the recorded one.
    #[serde(skip)]
    pub predicted: &'a [Predicted<'a>],
}

/// One predicted run of `replay --html`: its label, report and bins.
#[derive(Clone, Copy)]
pub struct Predicted<'a> {
    pub label: &'a str,
    pub report: &'a Report,
    pub bins: &'a TimeBins,
}

#[derive(Serialize)]
struct PredictedOut<'a> {
    label: &'a str,
    axis: AxisOut,
    lanes: Vec<LaneOut<'a>>,
    devices: Vec<DeviceOut<'a>>,
}

#[derive(Serialize)]
struct AxisOut {
    start_ns: u64,
    width_ns: u64,
    /// Bins holding data (the series' length).
    bins: usize,
}

#[derive(Serialize)]
struct LaneOut<'a> {
    pid: u32,
    tgid: u32,
    comm: &'a str,
    sched_ns: &'a [u64],
    device_ns: &'a [u64],
    started: &'a [u32],
    requests: &'a [u32],
    bytes: &'a [u64],
}

#[derive(Serialize)]
struct SliceOut<'a> {
    owner: u64,
    ns: &'a [u64],
}

#[derive(Serialize)]
struct DeviceOut<'a> {
    dev: &'a str,
    name: String,
    pending_area: &'a [u64],
    driver_area: &'a [u64],
    max_pending: &'a [u32],
    max_in_driver: &'a [u32],
    idle_ns: &'a [u64],
    requests: &'a [u32],
    bytes: &'a [u64],
    slices: Vec<SliceOut<'a>>,
}

#[derive(Serialize)]
struct IdleOut<'a> {
    dev: String,
    /// ns after the axis' start.
    start: i64,
    duration: u64,
    after_pid: u32,
    waiting_pids: &'a [u32],
}

#[derive(Serialize)]
struct SectorsOut {
    cols: usize,
    rows: usize,
    row_shift: u32,
    col_bins: usize,
    read: Vec<u64>,
    write: Vec<u64>,
}

#[derive(Serialize)]
struct Data<'a> {
    report: &'a Report,
    axis: AxisOut,
    lanes: Vec<LaneOut<'a>>,
    devices: Vec<DeviceOut<'a>>,
    idle: Vec<IdleOut<'a>>,
    sectors: SectorsOut,
    latency: &'a [LatencyCurve],
    /// Flat `[pid, q, d (-1: none), c, ...]`, ns after the axis' start; `null` when the
    /// trace has too many bios to keep.
    exact: Option<Vec<i64>>,
    model: Option<Model<'a>>,
    /// `replay --html`'s predicted runs.
    predicted: Vec<PredictedOut<'a>>,
}

fn rel(axis: &Axis, ts: u64) -> i64 {
    ts as i64 - axis.start_ns as i64
}

/// The axis, lanes (of the report's processes) and devices of `b`, trimmed to its bins.
fn series<'a>(
    report: &Report,
    b: &'a TimeBins,
) -> (Axis, AxisOut, Vec<LaneOut<'a>>, Vec<DeviceOut<'a>>) {
    let axis = b.axis().unwrap_or(Axis {
        start_ns: report.trace.from_ns,
        shift: 0,
        n: 0,
    });
    let used = b.used_bins();
    // Lanes of the processes the report shows (its filters apply), in pid order.
    let lanes = b
        .lanes
        .values()
        .filter(|l| report.processes.iter().any(|p| p.pid == l.pid))
        .map(|l| LaneOut {
            pid: l.pid,
            tgid: l.tgid,
            comm: &l.comm,
            sched_ns: &l.sched_ns[..used],
            device_ns: &l.device_ns[..used],
            started: &l.started[..used],
            requests: &l.requests[..used],
            bytes: &l.bytes[..used],
        })
        .collect();
    let devices = b
        .devices
        .values()
        .map(|d| DeviceOut {
            dev: &d.dev,
            name: report
                .devices
                .iter()
                .find(|r| r.dev == d.dev)
                .map_or_else(|| d.dev.clone(), |r| r.name.clone()),
            pending_area: &d.pending_area[..used],
            driver_area: &d.driver_area[..used],
            max_pending: &d.max_pending[..used],
            max_in_driver: &d.max_in_driver[..used],
            idle_ns: &d.idle_ns[..used],
            requests: &d.requests[..used],
            bytes: &d.bytes[..used],
            slices: d
                .slices
                .iter()
                .map(|(owner, ns)| SliceOut {
                    owner: *owner,
                    ns: &ns[..used],
                })
                .collect(),
        })
        .collect();
    let out = AxisOut {
        start_ns: axis.start_ns,
        width_ns: axis.width_ns(),
        bins: used,
    };
    (axis, out, lanes, devices)
}

fn data<'a>(page: &Page<'a>) -> Data<'a> {
    let b = page.bins;
    let (axis, axis_out, lanes, devices) = series(page.report, b);
    let idle = page
        .idle
        .iter()
        .map(|iv| IdleOut {
            dev: format!("{}:{}", iv.dev.major, iv.dev.minor),
            start: rel(&axis, iv.start_ns),
            duration: iv.duration_ns,
            after_pid: iv.after_pid,
            waiting_pids: &iv.waiting_pids,
        })
        .collect();
    let exact = b.exact.as_ref().map(|bios| {
        bios.iter()
            .flat_map(|x| {
                [
                    i64::from(x.pid),
                    rel(&axis, x.q),
                    x.d.map_or(-1, |d| rel(&axis, d)),
                    rel(&axis, x.c),
                ]
            })
            .collect()
    });
    Data {
        report: page.report,
        axis: axis_out,
        lanes,
        devices,
        idle,
        sectors: SectorsOut {
            cols: b.sectors.cols,
            rows: b.sectors.rows,
            row_shift: b.sectors.row_shift,
            col_bins: SECTOR_COL_BINS,
            read: b.sectors.cells(false),
            write: b.sectors.cells(true),
        },
        latency: page.latency,
        exact,
        model: page.model,
        predicted: page
            .model
            .map(|m| m.predicted)
            .unwrap_or_default()
            .iter()
            .map(|p| {
                let (_, axis, lanes, devices) = series(p.report, p.bins);
                PredictedOut {
                    label: p.label,
                    axis,
                    lanes,
                    devices,
                }
            })
            .collect(),
    }
}

/// Text for an HTML element's content: `&`, `<` and `>` escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The page.
pub fn render(page: &Page) -> Result<String, serde_json::Error> {
    // In a <script> element nothing may read as a closing tag or a comment: '<' only occurs
    // inside JSON strings, where \u003c means the same.
    let json = serde_json::to_string(&data(page))?.replace('<', "\\u003c");
    let command = page.model.map_or("report", |m| m.command);
    let title = escape(&format!(
        "iosched-trace {command}: {}",
        page.report.trace.path
    ));
    Ok(format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{STYLE}</style>
</head>
<body>
<h1 id="title">{title}</h1>
<div id="summary"></div>
<pre id="errors"></pre>
<noscript>This report draws its plots with JavaScript; the data is in the page's JSON.</noscript>
<div class="controls"><button id="reset">show all</button><span id="viewinfo"></span>
<span class="note"> &mdash; wheel: zoom, drag: pan, double click: all</span></div>
<div id="legend"></div>
<div id="model"></div>
<div class="layout">
<div class="plots">
<h2>Timeline</h2>
<div class="note">Per device: service slices (the colour of the process the device was serving) and idling
waste (red: the device idle while I/O waited). Per process: its bios in the scheduler (Q&rarr;D, orange, above
the line) and in the device (D&rarr;C, blue, below); a bar's height is the mean number there. Red marks on a lane:
the process the device idled for (solid) and those that waited (dashed).</div>
<div id="timeline"></div>
<h2>Throughput, IOPS, queue depth</h2>
<canvas id="tput"></canvas>
<canvas id="iops"></canvas>
<canvas id="depth"></canvas>
<h2>Sector against time</h2>
<canvas id="sect-r"></canvas>
<canvas id="sect-w"></canvas>
<h2>Latency</h2>
<div class="note">Per device (dashed black) and per process (its colour; the 8 with the most samples).</div>
<div id="latency"></div>
</div>
<div id="tables"><h2>Report</h2></div>
</div>
<script type="application/json" id="data">{json}</script>
<script>
{SCRIPT}</script>
</body>
</html>
"#
    ))
}

#[cfg(test)]
mod tests;
