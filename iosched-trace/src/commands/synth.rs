//! `iosched-trace synth` (hidden, for `cargo xtask bench analyze`): a synthetic
//! recording, either random requests in flight with known counts (`iosched_core::synth`) or
//! a modelled scenario as if recorded under a scheduler (`--scenario`).

use std::{io::BufWriter, process::ExitCode};

use anyhow::Context;
use iosched_core::{
    record::{DeviceInfo, Header, RecordingWriter, Stats},
    synth,
};

use crate::cli::SynthArgs;

pub fn run(args: SynthArgs) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.scenario {
        return scenario(&args, name);
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
    let file = iosched_core::output_file::create(&args.output)
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
fn scenario(args: &SynthArgs, name: &str) -> anyhow::Result<ExitCode> {
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
    let file = iosched_core::output_file::create(&args.output)
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
