//! `iosched-trace convert`: a trace rewritten as blktrace per-CPU files, or as a recording
//! of ours, saying on stderr what the target format could not hold.

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

use crate::cli::{ConvertArgs, OutputFormat};

pub fn run(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    crate::system::let_interrupt_pass_for_stream(&args.file);
    let mut source = trace_file::open(&args.file)?;
    match args.to {
        OutputFormat::Blktrace => to_blktrace(source.as_mut(), &args)?,
        OutputFormat::Recording => to_recording(source.as_mut(), &args)?,
    }
    Ok(ExitCode::SUCCESS)
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
    let file = std::fs::File::create(&args.output)
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
