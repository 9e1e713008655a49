//! `iosched-trace convert`: a trace rewritten as blktrace per-CPU files, or as a recording
//! of ours, saying on stderr what the target format could not hold; or drawn as a Perfetto
//! trace for the Perfetto UI; or as Parquet tables for SQL over many hosts.

use std::{
    io::{BufWriter, Write},
    process::ExitCode,
};

use anyhow::Context;
use iosched_core::{
    blktrace,
    record::{Header, RecordingWriter},
    source::TraceSource,
    trace_file,
};

use crate::{
    cli::{ConvertArgs, ConvertFormat},
    views::{parquet, perfetto},
};

pub fn run(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    crate::system::let_interrupt_pass_for_stream(&args.file);
    args.check_whole()?;
    let perfetto_opts = match args.to {
        ConvertFormat::Perfetto => Some(args.perfetto_options()?),
        _ => None,
    };
    let mut source = trace_file::open(&args.file)?;
    match args.to {
        ConvertFormat::Blktrace => to_blktrace(source.as_mut(), &args)?,
        ConvertFormat::Recording => to_recording(source.as_mut(), &args)?,
        ConvertFormat::Perfetto => to_perfetto(
            source.as_mut(),
            &args,
            &perfetto_opts.expect("made above for perfetto"),
        )?,
        ConvertFormat::Parquet => to_parquet(source.as_mut(), &args)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn to_perfetto(
    source: &mut dyn TraceSource,
    args: &ConvertArgs,
    opts: &perfetto::Options,
) -> anyhow::Result<()> {
    let file = iosched_core::output_file::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let out = args.output.display();
    let mut on_large = |w: perfetto::SizeWarning| {
        let (what, bytes) = match w {
            perfetto::SizeWarning::Predicted(b) => ("will come to about", b),
            perfetto::SizeWarning::Reached(b) => ("has reached", b),
        };
        eprintln!(
            "warning: {out} {what} {:.1} GB: the Perfetto UI holds about 2 GB in the browser \
             and may not load it; narrow it with --from/--until, -d, --pid or --comm",
            bytes as f64 / 1e9
        );
    };
    let (writer, summary) = perfetto::export(source, opts, BufWriter::new(file), &mut on_large)
        .with_context(|| format!("converting {}", args.file.display()))?;
    writer
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", args.output.display()))?;
    for w in source.warnings() {
        eprintln!("warning: {w}");
    }
    let d = &summary.drawn;
    let processes = d.requests_by_pid.keys().filter(|p| **p != 0).count();
    eprintln!(
        "wrote {} requests of {processes} processes, {} idling-waste intervals, {} service \
         slices, {} wakeups ({} packets, {:.1} MB) to {}",
        d.requests(),
        d.idle_intervals,
        d.service_slices,
        d.wakeups,
        summary.packets,
        summary.bytes as f64 / 1e6,
        args.output.display()
    );
    if d.events == 0 {
        eprintln!("warning: no events in the span and devices asked for: the trace is empty");
    } else if d.requests() == 0 {
        eprintln!("warning: no completed request matched: no process tracks were drawn");
    }
    say_not_converted(&summary.anomalies, "drawn");
    eprintln!("open it in the Perfetto UI: https://ui.perfetto.dev, \"Open trace file\"");
    Ok(())
}

fn to_parquet(source: &mut dyn TraceSource, args: &ConvertArgs) -> anyhow::Result<()> {
    let opts = parquet::Options {
        host: args.host.clone(),
        date: args.date.clone(),
        row_group_rows: None,
    };
    let summary = parquet::export(source, &args.output, &opts)
        .with_context(|| format!("converting {}", args.file.display()))?;
    for w in source.warnings() {
        eprintln!("warning: {w}");
    }
    eprintln!(
        "wrote {} requests and {} idling-waste intervals ({:.3} s) of host {} to {}",
        summary.requests,
        summary.idle_intervals,
        summary.idle_ns as f64 / 1e9,
        summary.host,
        args.output.display()
    );
    for w in summary.request_files.iter().chain(&summary.idle_files) {
        eprintln!("  {} ({} rows)", w.path.display(), w.rows);
    }
    say_not_converted(&summary.anomalies, "written");
    Ok(())
}

fn to_blktrace(source: &mut dyn TraceSource, args: &ConvertArgs) -> anyhow::Result<()> {
    let summary = blktrace::export(source, &args.output)?;
    for w in source.warnings() {
        eprintln!("warning: {w}");
    }
    let records: Vec<String> = summary
        .records
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    eprintln!(
        "wrote {} events to {} blktrace files in {} ({})",
        summary.events_written,
        summary.files.len(),
        args.output.display(),
        records.join(", ")
    );
    if let Some(skipped) = summary.skipped_list() {
        eprintln!("skipped events blktrace has no action for: {skipped}");
    }
    eprintln!("blktrace files cannot hold:");
    for loss in blktrace::LOSSES {
        eprintln!("  - {loss}");
    }
    Ok(())
}

fn to_recording(source: &mut dyn TraceSource, args: &ConvertArgs) -> anyhow::Result<()> {
    let mut header = match source.header() {
        Some(h) => h.clone(),
        None => {
            let mut h = Header::for_this_host(source.meta().devices.clone(), Vec::new());
            // Not this host's trace: only its devices and notes are known.
            h.host.clear();
            h.kernel_release = source.meta().kernel_release.clone().unwrap_or_default();
            h.boot_id = None;
            h.clock = Default::default();
            h
        }
    };
    header.notes.extend(source.meta().notes.iter().cloned());
    header
        .notes
        .push(format!("converted from {}", args.file.display()));
    let file = iosched_core::output_file::create(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let mut writer = RecordingWriter::new(BufWriter::new(file), &header)?;
    while let Some(ev) = source.next_event() {
        writer.push(&ev?)?;
    }
    for p in source.processes().values() {
        writer.add_process(p)?;
    }
    if let Some(stats) = source.stats() {
        writer.write_stats(stats)?;
    }
    let footer = writer.footer(source.stats().cloned().unwrap_or_default(), 0, "converted");
    let n = footer.events_total;
    writer.finish(&footer)?.flush()?;
    for w in source.warnings() {
        eprintln!("warning: {w}");
    }
    eprintln!("wrote {n} events to {}", args.output.display());
    Ok(())
}

/// The requests a conversion leaves out because their lives are cut by the trace's ends
/// (`what`: "drawn", "written"), on stderr.
fn say_not_converted(a: &iosched_core::timeline::Anomalies, what: &str) {
    if a.requests_in_flight_at_end > 0 || a.completions_of_unknown_requests > 0 {
        eprintln!(
            "not {what}: {} requests still in flight at the end, {} completions of requests \
             issued before the start",
            a.requests_in_flight_at_end, a.completions_of_unknown_requests
        );
    }
}
