//! `iosched-trace model-bench` (hidden, for `cargo xtask bench replay`): the replay speed of
//! each scheduler model on a synthetic mixed workload, one JSON line per model.

use std::process::ExitCode;

use iosched_model::{replay, scenarios, sched::SchedKind};

use crate::cli::ModelBenchArgs;

pub fn run(args: ModelBenchArgs) -> anyhow::Result<ExitCode> {
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
