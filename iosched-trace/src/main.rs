//! The `iosched-trace` command. Everything lives in the library; this parses, dispatches and
//! turns errors into one line on stderr and a non-zero exit.

use std::{
    io::{self, BufWriter, Write},
    process::ExitCode,
};

use anyhow::Context;
use clap::Parser;
use iosched_core::{
    analysis, blktrace,
    record::{DeviceInfo, Header, RecordingWriter, Stats},
    synth, trace_file,
    units::{BytesStyle, human_bytes},
};
use iosched_trace::{
    cli::{
        Cli, Command, ConvertArgs, DumpArgs, ExplainArgs, LiveArgs, OutputFormat, RecordArgs,
        ReplayArgs, ReportArgs, SynthArgs,
    },
    devices::Sysfs,
    dump, preflight,
    recorder::{self, RecordConfig},
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
        Command::Report(args) => report(args),
        Command::Synth(args) => synth(args),
        Command::Convert(args) => convert(args),
        Command::Live(args) => live(args),
        Command::Replay(args) => replay(args),
        Command::Explain(args) => explain(args),
        Command::ModelBench(args) => model_bench(&args),
    }
}

fn live(args: LiveArgs) -> anyhow::Result<ExitCode> {
    let config = args.validate(&Sysfs::default())?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    iosched_trace::live::run(config)?;
    Ok(ExitCode::SUCCESS)
}

fn model_bench(args: &iosched_trace::cli::ModelBenchArgs) -> anyhow::Result<ExitCode> {
    use iosched_model::{replay, scenarios, sched::SchedKind};
    let w = scenarios::mixed(args.requests, args.processes);
    let r = replay::Replayer::new(
        w,
        Some(scenarios::flat_disk(100_000.0, 20_000.0)),
        vec![0, 1],
    )?;
    for kind in SchedKind::ALL.into_iter().chain(SchedKind::LEGACY) {
        if !args.sched.is_empty() && !args.sched.iter().any(|s| s == kind.name()) {
            continue;
        }
        let cfg = replay::Config::parse(kind.name(), &Default::default())?;
        let mut secs = f64::INFINITY;
        let mut requests = 0;
        for _ in 0..args.repeat.max(1) {
            let t = std::time::Instant::now();
            requests = r.run_bare(&cfg)?;
            secs = secs.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{}",
            serde_json::json!({
                "sched": kind.name(),
                "bios": r.workload.ios.len(),
                "requests": requests,
                "seconds": secs,
                "bios_per_sec": r.workload.ios.len() as f64 / secs,
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The workload of one device of a trace, ready to replay, and the recording's own numbers.
fn replayer_for(
    file: &std::path::Path,
    device: Option<&str>,
    profile: Option<&std::path::Path>,
) -> anyhow::Result<(
    iosched_model::replay::Replayer,
    iosched_model::replay::Summary,
    analysis::Report,
)> {
    let profile = profile
        .map(iosched_model::device::DeviceModel::load)
        .transpose()?;
    let mut source = trace_file::open(file)?;
    let mut r = iosched_model::replay::Replayer::from_source(source.as_mut(), device, profile)?;
    r.load_recorded_requests(trace_file::open(file)?.as_mut())?;
    let mut again = trace_file::open(file)?;
    let (recorded, report) = iosched_model::replay::recorded_summary(again.as_mut(), &r.workload)?;
    Ok((r, recorded, report))
}

fn write_out(text: &str) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let extra = iosched_model::sched::Settings::parse_pairs(&args.set)?;
    let (r, recorded, _) = replayer_for(
        &args.file,
        args.device.as_deref(),
        args.device_profile.as_deref(),
    )?;
    let specs: Vec<String> = if !args.compare.is_empty() {
        args.compare.clone()
    } else if let Some(s) = &args.sched {
        vec![s.clone()]
    } else {
        vec![
            r.recorded_scheduler
                .clone()
                .context("the trace does not say which scheduler was recorded; give --sched")?,
        ]
    };
    let mut runs = Vec::new();
    for spec in &specs {
        let cfg = iosched_model::replay::Config::parse(spec, &extra)?;
        runs.push(
            r.run(&cfg)
                .with_context(|| format!("replaying under {spec}"))?,
        );
    }
    let text = if args.json {
        let doc = serde_json::json!({
            "schema": "iosched-trace-replay/1",
            "device": r.workload.device.name,
            "device_model": r.device,
            "fit": r.fit,
            "workload": r.workload.streams,
            "recorded": recorded,
            "runs": runs,
        });
        let mut s = serde_json::to_string_pretty(&doc)?;
        s.push('\n');
        s
    } else {
        iosched_trace::replay_view::render_replay(&r, &recorded, &runs, args.decisions)
    };
    write_out(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn explain(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let (r, recorded, report) = replayer_for(
        &args.file,
        args.device.as_deref(),
        args.device_profile.as_deref(),
    )?;
    let e = iosched_model::explain::explain(&r, &recorded, &report)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&e)?;
        s.push('\n');
        s
    } else {
        iosched_trace::replay_view::render_explain(&r, &e)
    };
    write_out(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn synth(args: SynthArgs) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.scenario {
        return synth_scenario(&args, name);
    }
    let spec = synth::Spec {
        events: args.events,
        processes: args.processes.max(1),
        depth: args.depth.max(1),
        seed: args.seed,
        ..Default::default()
    };
    let device = DeviceInfo {
        name: "synth0".into(),
        dev: spec.dev,
        rotational: Some(false),
        scheduler: Some("none".into()),
        request_based: true,
        ..Default::default()
    };
    let header = Header::for_this_host(vec![device], std::env::args().collect());
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, file), &header)?;
    let totals = synth::generate(&spec, |ev| writer.push(ev))?;
    let stats = Stats {
        sent: totals.events,
        ..Default::default()
    };
    let footer = writer.footer(stats, 0, "synthetic");
    writer.finish(&footer)?;
    eprintln!(
        "synthetic trace: {} events, {} requests, {} bios -> {}",
        totals.events,
        totals.requests,
        totals.bios,
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A modelled scenario written as a recording, as if recorded under `--sched`.
fn synth_scenario(args: &SynthArgs, name: &str) -> anyhow::Result<ExitCode> {
    use iosched_model::scenarios;
    let (w, dev) = match name {
        "dsync-journal" => (
            scenarios::dsync_journal(args.ios),
            scenarios::flat_disk(400_000.0, 100_000.0),
        ),
        "mixed" => (
            scenarios::mixed(args.ios, args.processes),
            scenarios::flat_disk(4_000_000.0, 100_000.0),
        ),
        other => anyhow::bail!("unknown scenario {other:?} (known: dsync-journal, mixed)"),
    };
    let cfg = iosched_model::replay::Config::parse(&args.sched, &Default::default())?;
    let events = scenarios::trace(&w, &dev, cfg.sched, &cfg.settings)?;
    let mut device = w.device.clone();
    device.scheduler = Some(cfg.sched.name().to_string());
    device.iosched = cfg.settings.0.clone();
    let mut header = Header::for_this_host(vec![device], std::env::args().collect());
    if let Some(k) = cfg.settings.0.get("kernel") {
        header.kernel_release = format!("{k}.0-model");
    }
    header
        .notes
        .push(format!("modelled scenario {name} under {}", args.sched));
    let file = std::fs::File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, file), &header)?;
    for ev in &events {
        writer.push(ev)?;
    }
    let stats = Stats {
        sent: events.len() as u64,
        ..Default::default()
    };
    let footer = writer.footer(stats, 0, "synthetic");
    writer.finish(&footer)?;
    eprintln!(
        "scenario {name} under {}: {} events -> {}",
        args.sched,
        events.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options()?;
    let mut source = trace_file::open(&args.file)?;
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
    let report = analysis::analyze(source.as_mut(), &opts)?;
    for w in &report.trace.warnings {
        eprintln!("warning: {w}");
    }
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        iosched_trace::report::render(&report)
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn record(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let valid = args.validate(&Sysfs::default())?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    let config = RecordConfig {
        disks: valid.disks,
        output: args.output.clone(),
        format: args.format,
        duration: valid.duration,
        ring_size: valid.ring_size,
        wakeup_bytes: valid.wakeup,
        extra_events: args.extra_events,
        plugs: !args.no_plugs,
        wakeups: args.wakeups,
        verbose: args.verbose,
        progress: true,
        command_line: std::env::args().collect(),
        sched_log: args.sched_log,
        discard_events: args.discard_events,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let summary = runtime.block_on(recorder::record(config))?;
    let stats = &summary.stats;
    let mut why = Vec::new();
    if stats.ring_lost() > 0 {
        why.push(format!(
            "{} with the ring buffer full: try a larger --ring-size",
            stats.ring_lost()
        ));
    }
    match stats.kernel_skipped {
        Some(0) => {}
        Some(n) => why.push(format!(
            "{n} the kernel did not run our programs for, as they were already running on that \
             CPU (an interrupt's event inside another)"
        )),
        None => why.push(
            "events the kernel skipped for a program already running are not counted by this \
             kernel"
                .to_string(),
        ),
    }
    eprintln!(
        "recorded {} events ({}) in {:.1}s to {} [{}]; lost {} events{}",
        summary.events,
        human_bytes(summary.bytes as f64, BytesStyle::UpToTib),
        summary.duration.as_secs_f64(),
        args.output.display(),
        summary.ended_by,
        stats.lost(),
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join("; "))
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn dump(args: DumpArgs) -> anyhow::Result<ExitCode> {
    let mut source = trace_file::open(&args.file)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = if args.json {
        dump::write_json(&mut out, source.as_mut())
    } else {
        dump::write_text(&mut out, source.as_mut())
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

fn convert(args: ConvertArgs) -> anyhow::Result<ExitCode> {
    let mut source = trace_file::open(&args.file)?;
    match args.to {
        OutputFormat::Blktrace => {
            let summary = blktrace::export(source.as_mut(), &args.output)?;
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
            if !summary.skipped.is_empty() {
                let skipped: Vec<String> = summary
                    .skipped
                    .iter()
                    .map(|(k, n)| format!("{k} {n}"))
                    .collect();
                eprintln!(
                    "skipped events blktrace has no action for: {}",
                    skipped.join(", ")
                );
            }
            eprintln!("blktrace files cannot hold:");
            for loss in blktrace::LOSSES {
                eprintln!("  - {loss}");
            }
        }
        OutputFormat::Recording => {
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
        }
    }
    Ok(ExitCode::SUCCESS)
}
