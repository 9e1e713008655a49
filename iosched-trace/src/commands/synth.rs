//! `iosched-trace synth` (hidden, for `cargo xtask bench analyze`): a synthetic
//! recording, either random requests in flight with known counts (`iosched_core::synth`) or
//! a modelled scenario as if recorded under a scheduler (`--scenario`).

use std::{io::BufWriter, process::ExitCode};

use anyhow::Context;
use iosched_core::{
    event::Comm,
    record::{ClockBase, DeviceInfo, Header, ProcessInfo, RecordingWriter, Stats},
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
        service_ns: args.service_us * 1000,
        idle_every: args.idle_every,
        idle_ns: (args.idle_ms * 1e6) as u64,
        single_bio: args.single_bio,
        ..Default::default()
    };
    let device = DeviceInfo {
        name: "synth0".into(),
        dev: spec.dev,
        rotational: Some(false),
        scheduler: Some(args.sched.clone().unwrap_or_else(|| "none".into())),
        request_based: true,
        ..Default::default()
    };
    let mut header = Header::for_this_host(vec![device], std::env::args().collect());
    identity(&mut header, &args);
    let file = iosched_core::output_file::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let mut writer = RecordingWriter::new(BufWriter::with_capacity(1 << 20, file), &header)?;
    // The generator's tasks, with cgroup paths (its cgroup ids are 100 + pid % 3).
    for p in 0..spec.processes {
        let pid = 1000 + p;
        writer.add_process(&ProcessInfo {
            pid,
            tgid: pid,
            comm: Comm::new(&format!("synth{p}")),
            cgroup_id: 100 + u64::from(pid % 3),
            cgroup_path: Some(format!("/synth.slice/cg{}", pid % 3)),
        })?;
    }
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

/// `--host` and `--wall-clock`: the recording said to come from another machine and time
/// (the generator's first event is at 1 s on the trace clock).
fn identity(header: &mut Header, args: &SynthArgs) {
    if let Some(h) = &args.host {
        header.host = h.clone();
    }
    if let Some(wall) = args.wall_clock {
        header.clock = ClockBase {
            monotonic_ns: 1_000_000_000,
            realtime_ns: wall,
        };
    }
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
    let sched = args.sched.as_deref().unwrap_or("bfq");
    let cfg = iosched_model::replay::Config::parse(sched, &Default::default())?;
    let events = scenarios::trace(&w, &dev, cfg.sched, &cfg.settings)?;
    let mut device = w.device.clone();
    device.scheduler = Some(cfg.sched.name().to_string());
    device.iosched = cfg.settings.0.clone();
    let mut header = Header::for_this_host(vec![device], std::env::args().collect());
    identity(&mut header, args);
    if let Some(k) = cfg.settings.0.get("kernel") {
        header.kernel_release = format!("{k}.0-model");
    }
    header
        .notes
        .push(format!("modelled scenario {name} under {sched}"));
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
        "scenario {name} under {sched}: {} events -> {}",
        events.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
