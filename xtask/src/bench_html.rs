//! `cargo xtask bench html`: what `report --html` costs against `report --json` on the same
//! long trace (default 50M events, `iosched-trace synth` in /dev/shm): wall and CPU time and
//! peak RSS as ratios measured in the same run, and the page's size, which must not grow
//! with the trace.

use std::{process::Command, process::ExitCode};

use clap::Args;

use crate::{
    BinArgs,
    bench::mib,
    bench_analyze::{measure, synthetic_trace},
    scratch,
};

/// Targets: the binning pass beside the report at most doubles its CPU time and memory (CPU
/// time, not wall: on this shared machine a neighbour's load lengthens one run's wall time
/// and not another's); the page stays under the size the unit test asserts for a million
/// requests.
const MAX_CPU_RATIO: f64 = 2.0;
const MAX_RSS_RATIO: f64 = 2.0;
const MAX_PAGE_BYTES: u64 = 5_000_000;

#[derive(Args)]
pub struct HtmlArgs {
    /// Events in the synthetic trace.
    #[arg(long, default_value_t = 50_000_000)]
    events: u64,
    #[command(flatten)]
    bin: BinArgs,
}

pub fn html(args: &HtmlArgs) -> anyhow::Result<ExitCode> {
    scratch::catch_interrupts()?;
    let bin = args.bin.resolve()?;
    println!("bench html: synthetic trace of {} events", args.events);
    let (dir, trace, _) = synthetic_trace(&bin, args.events, "iosched-trace-bench-html")?;
    let page = dir.path().join("report.html");
    scratch::check_interrupted()?;
    // Each once, JSON first then HTML, then JSON again: the machine is shared, the better
    // JSON run is the baseline (which favours the baseline, not the page).
    let json1 = measure(Command::new(&bin).arg("report").arg("--json").arg(&trace))?;
    scratch::check_interrupted()?;
    let html = measure(
        Command::new(&bin)
            .arg("report")
            .arg(&trace)
            .arg("--html")
            .arg(&page),
    )?;
    scratch::check_interrupted()?;
    let json2 = measure(Command::new(&bin).arg("report").arg("--json").arg(&trace))?;
    let json = if json2.wall_s < json1.wall_s {
        json2
    } else {
        json1
    };
    let size = std::fs::metadata(&page)?.len();
    let time_ratio = html.wall_s / json.wall_s;
    let cpu_ratio = html.cpu_s / json.cpu_s;
    let rss_ratio = html.max_rss_bytes as f64 / json.max_rss_bytes as f64;
    println!(
        "report --json:    {:.2} s wall, {:.2} s CPU, peak RSS {}",
        json.wall_s,
        json.cpu_s,
        mib(json.max_rss_bytes)
    );
    println!(
        "report --html:    {:.2} s wall, {:.2} s CPU, peak RSS {}",
        html.wall_s,
        html.cpu_s,
        mib(html.max_rss_bytes)
    );
    println!("ratio html/json:  wall {time_ratio:.2}, CPU {cpu_ratio:.2}, peak RSS {rss_ratio:.2}");
    println!("page:             {} ({size} bytes)", mib(size));
    let pass = cpu_ratio <= MAX_CPU_RATIO && rss_ratio <= MAX_RSS_RATIO && size < MAX_PAGE_BYTES;
    println!(
        "target:           CPU ratio <= {MAX_CPU_RATIO}, RSS ratio <= {MAX_RSS_RATIO}, page < {}: {}",
        mib(MAX_PAGE_BYTES),
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
