//! The `iosched-trace` command. Everything lives in the library; this parses, dispatches and
//! turns errors into one line on stderr and a non-zero exit.

use std::{
    io::{self, BufWriter, Write},
    process::ExitCode,
};

use anyhow::Context;
use clap::Parser;
use iosched_trace::{
    cli::{Cli, Command, DumpArgs, RecordArgs},
    devices::Sysfs,
    dump, preflight,
    record::RecordingReader,
    recorder::{self, RecordConfig, human_bytes},
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed pipe (`dump | head`) is not an error worth a message.
            if err
                .downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("iosched-trace: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Record(args) => record(args),
        Command::Dump(args) => dump(args),
    }
}

fn record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let valid = args.validate(&Sysfs::default())?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    let config = RecordConfig {
        disks: valid.disks,
        output: args.output.clone(),
        duration: valid.duration,
        ring_size: valid.ring_size,
        wakeup_bytes: valid.wakeup,
        extra_events: args.extra_events,
        verbose: args.verbose,
        progress: true,
        command_line: std::env::args().collect(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let summary = runtime.block_on(recorder::record(config))?;
    let lost = summary.stats.lost();
    eprintln!(
        "recorded {} events ({}) in {:.1}s to {} [{}]; lost {} events{}",
        summary.events,
        human_bytes(summary.bytes),
        summary.duration.as_secs_f64(),
        args.output.display(),
        summary.ended_by,
        lost,
        if lost > 0 {
            " (the ring buffer overflowed: try a larger --ring-size)"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn dump(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let mut reader = RecordingReader::open(&args.file)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = if args.json {
        dump::write_json(&mut out, &mut reader)
    } else {
        dump::write_text(&mut out, &mut reader)
    };
    match result {
        // `dump | head` closes the pipe: not an error worth a message.
        Err(e) if e.is_broken_pipe() => return Ok(ExitCode::SUCCESS),
        other => other?,
    };
    if let Err(e) = out.flush()
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}
