//! `cargo xtask bench replay`: how fast the scheduler models replay a workload. Runs the
//! hidden `iosched-trace model-bench` (a synthetic mixed workload replayed under each model
//! without writing events) and judges requests per second against the target.

use std::process::ExitCode;

use anyhow::Context;

use crate::{BinArgs, cmd};

/// Requests per second every model must replay at.
const TARGET: f64 = 2_000_000.0;

#[derive(clap::Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    bin: BinArgs,
    /// Bios in the synthetic workload.
    #[arg(long, default_value_t = 2_000_000)]
    requests: u32,
}

pub fn replay(args: &ReplayArgs) -> anyhow::Result<ExitCode> {
    let bin = args.bin.resolve()?;
    let out = cmd::output(std::process::Command::new(&bin).args([
        "model-bench",
        "--requests",
        &args.requests.to_string(),
    ]))?;
    let mut ok = true;
    println!(
        "bench replay: {} bios, 16 processes (one open-loop writer)",
        args.requests
    );
    for line in out.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("model-bench printed {line:?}"))?;
        let sched = v["sched"].as_str().unwrap_or("?");
        let requests = v["requests"].as_f64().unwrap_or(0.0);
        let secs = v["seconds"].as_f64().unwrap_or(f64::INFINITY);
        let rate = requests / secs;
        let pass = rate >= TARGET;
        ok &= pass;
        println!(
            "  {sched:<12} {requests:>9.0} requests in {secs:.3} s = {:.2}M requests/s {}",
            rate / 1e6,
            if pass { "ok" } else { "BELOW TARGET" }
        );
    }
    println!("target: >= {:.1}M requests/s per model", TARGET / 1e6);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
