//! `iosched-trace report`: where the time went ([`iosched_core::analysis`]), as
//! [`crate::views::report`]'s text or JSON, or [`crate::views::html`]'s page. With
//! `--follow`, of a recording still being written ([`crate::follow`]), with a line per
//! interval as it is read (`follow`).

use std::{path::Path, process::ExitCode};

use anyhow::Context as _;
use iosched_core::{
    analysis::{self, Options, Report, bins},
    source::TraceSource,
    trace_file,
};

use crate::{cli::ReportArgs, views};

/// Idle-with-pending intervals the page draws one by one (the longest): bounds its size.
pub const HTML_IDLE_INTERVALS: usize = 10_000;

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options()?;
    let mut source: Box<dyn TraceSource> = if args.follow {
        let interval = args.interval()?;
        // With --json, stdout holds the one JSON document: the lines go to stderr.
        let out: Box<dyn std::io::Write> = if args.json {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        };
        let lines = follow::Intervals::new(opts.devices.clone(), interval, out);
        Box::new(crate::follow::open(
            &args.file,
            "report",
            Some(Box::new(lines)),
        )?)
    } else {
        crate::system::let_interrupt_pass_for_stream(&args.file);
        trace_file::open(&args.file)?
    };
    let mut opts = opts;
    // Cgroup filters by path: find the ids in the trace's process table.
    let by_path: Vec<u64> = source
        .processes()
        .values()
        .filter(|p| {
            p.cgroup_path
                .as_deref()
                .is_some_and(|path| opts.cgroups.iter().any(|c| path.contains(c.as_str())))
        })
        .map(|p| p.cgroup_id)
        .collect();
    opts.cgroups.extend(by_path.iter().map(|i| i.to_string()));
    if let Some(path) = &args.html {
        let (report, page) = html_page(source.as_mut(), &opts)?;
        for w in &report.trace.warnings {
            eprintln!("warning: {w}");
        }
        write_page(path, &page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut report = analysis::analyze(source.as_mut(), &opts)?;
    // A followed recording is read again only once it is closed (its footer read): before,
    // the file holds more than was reported.
    let unfinished = args.follow && source.footer().is_none();
    split_by_scheduler(&mut report, &opts, &args.file, unfinished);
    for w in &report.trace.warnings {
        eprintln!("warning: {w}");
    }
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else if args.follow {
        // Below the interval lines.
        format!("\n{}", crate::views::report::render(&report))
    } else {
        crate::views::report::render(&report)
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Where a device's scheduler was switched while recording, its figures span by span
/// ([`analysis::by_scheduler`]), read again from the file: not for a stream (read once), a
/// recording followed and left `unfinished` (the file holds more by now) or a window the
/// user chose (the spans are the recording's), which get a warning instead.
fn split_by_scheduler(report: &mut Report, opts: &Options, file: &Path, unfinished: bool) {
    if analysis::by_scheduler::spans(report).is_empty() {
        return;
    }
    let why_not = if trace_file::is_stream(file) {
        Some("the trace came from a stream, read once: run report on a file of it")
    } else if unfinished {
        Some("following stopped before the recording was closed: run report on it once it is")
    } else if opts.from_ns.is_some() || opts.to_ns.is_some() {
        Some("a --from/--until window is set")
    } else {
        None
    };
    if let Some(why) = why_not {
        report.trace.warnings.push(format!(
            "a device's scheduler was switched while recording, and its figures mix both \
             (not split by scheduler: {why})"
        ));
        return;
    }
    if let Err(e) = analysis::by_scheduler::split(report, opts, &mut || trace_file::open(file)) {
        report
            .trace
            .warnings
            .push(format!("splitting the figures by scheduler failed: {e}"));
    }
}

/// The report (exactly [`analysis::analyze`]'s) and its HTML page, from one pass: the
/// [`Aggregator`] and the [`TimeBins`] side by side.
pub fn html_page(source: &mut dyn TraceSource, opts: &Options) -> anyhow::Result<(Report, String)> {
    html_page_with(source, opts, None)
}

/// [`html_page`] with the model's results (`explain`'s or `replay`'s) above the plots.
pub fn html_page_with(
    source: &mut dyn TraceSource,
    opts: &Options,
    model: Option<views::html::Model>,
) -> anyhow::Result<(Report, String)> {
    // The page draws many more idle intervals than the table lists; the report keeps its own.
    let mut agg_opts = opts.clone();
    agg_opts.top_intervals = opts.top_intervals.max(HTML_IDLE_INTERVALS);
    let (agg, time_bins, anomalies) =
        analysis::analyze_binned(source, &agg_opts, bins::DEFAULT_BINS)?;
    let mut report = analysis::report::build(&agg, &anomalies, source);
    // Longest first, as a run with `top_intervals` alone keeps them.
    report.idling.top_intervals.truncate(opts.top_intervals);
    let idle = agg.idle.top();
    let latency = bins::latency_curves(&agg);
    let page = views::html::render(&views::html::Page {
        report: &report,
        bins: &time_bins,
        idle: &idle,
        latency: &latency,
        model,
    })?;
    Ok((report, page))
}

/// `explain --html` and `replay --html`: the recording's page for `device`, the model's
/// results above it, written to `path`.
pub fn write_model_page(
    path: &Path,
    trace: &Path,
    device: &str,
    model: views::html::Model,
) -> anyhow::Result<()> {
    let mut source = trace_file::open(trace)?;
    let opts = Options {
        devices: vec![device.to_string()],
        top_intervals: 10,
        ..Default::default()
    };
    let (_, page) = html_page_with(source.as_mut(), &opts, Some(model))?;
    write_page(path, &page)
}

/// Writes the page and says where, with its size (stderr: stdout stays empty).
pub fn write_page(path: &Path, page: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    iosched_core::output_file::create(path)
        .and_then(|mut f| f.write_all(page.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "report: wrote {} ({})",
        path.display(),
        iosched_core::units::human_bytes(
            page.len() as f64,
            iosched_core::units::BytesStyle::UpToGib
        )
    );
    Ok(())
}

mod follow;

#[cfg(test)]
mod tests;
