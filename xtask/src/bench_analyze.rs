//! `cargo xtask bench analyze`: how fast `report` reads and analyzes a long trace, and how
//! much memory it needs. A synthetic recording (default 50M events; `iosched-trace synth`) is
//! written to /dev/shm, read once with `cat` as the baseline (what merely reading the bytes
//! costs), then analyzed by `iosched-trace report`. Each child's CPU time and peak RSS come
//! from wait4(2).

use std::{
    path::Path,
    process::{Command, ExitCode, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{
    BinArgs,
    bench::{free_bytes, mib},
    cmd, scratch,
};

/// Targets from the issue: events per second of CPU time on one core, and peak RSS.
const MIN_EVENTS_PER_SEC: f64 = 10e6;
const MAX_RSS_BYTES: u64 = 200 << 20;
/// Bytes per event in a recording (record + chunk framing), for the space check.
pub const BYTES_PER_EVENT: u64 = 110;

#[derive(Args)]
pub struct AnalyzeArgs {
    /// Events in the synthetic trace.
    #[arg(long, default_value_t = 50_000_000)]
    events: u64,
    #[command(flatten)]
    bin: BinArgs,
}

/// What one child cost.
pub struct Cost {
    pub wall_s: f64,
    pub cpu_s: f64,
    pub max_rss_bytes: u64,
}

/// Runs `cmd` to completion, its stdout discarded, and measures it.
pub fn measure(cmd: &mut Command) -> anyhow::Result<Cost> {
    let start = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", cmd::display(cmd)))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it for our own child, which we reap here
    // (the `Child` is then dropped without waiting: dropping never waits).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; pointers are to live locals.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if rc != pid {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{} failed (status {status:#x})", cmd::display(cmd));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Cost {
        wall_s: start.elapsed().as_secs_f64(),
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        // ru_maxrss is in KiB on Linux.
        max_rss_bytes: usage.ru_maxrss as u64 * 1024,
    })
}

pub fn analyze(args: &AnalyzeArgs) -> anyhow::Result<ExitCode> {
    scratch::catch_interrupts()?;
    let bin = args.bin.resolve()?;
    println!(
        "bench analyze: synthetic trace of {} events (8 processes, 32 requests in flight)",
        args.events
    );
    // The directory goes when `_dir` does, at the end.
    let (_dir, trace, gen_cost) =
        synthetic_trace(&bin, args.events, "iosched-trace-bench-analyze")?;
    scratch::check_interrupted()?;
    let bytes = std::fs::metadata(&trace)?.len();
    println!("generated {} in {:.1} s", mib(bytes), gen_cost.wall_s);
    let cat = measure(Command::new("cat").arg(&trace))?;
    scratch::check_interrupted()?;
    let report = measure(Command::new(&bin).arg("report").arg("--json").arg(&trace))?;

    let events = args.events as f64;
    let per_cpu_s = events / report.cpu_s;
    let per_wall_s = events / report.wall_s;
    let cat_rate = bytes as f64 / cat.wall_s;
    let report_rate = bytes as f64 / report.wall_s;
    println!(
        "baseline (cat):   {:.2} s wall, {:.0} MiB/s",
        cat.wall_s,
        cat_rate / f64::from(1 << 20)
    );
    println!(
        "report:           {:.2} s wall, {:.2} s CPU, {:.0} MiB/s ({:.2}x of cat's rate)",
        report.wall_s,
        report.cpu_s,
        report_rate / f64::from(1 << 20),
        report_rate / cat_rate
    );
    println!("events/s:         {per_cpu_s:.0} per CPU-second, {per_wall_s:.0} per wall second");
    println!("peak RSS:         {}", mib(report.max_rss_bytes));
    let pass = per_cpu_s >= MIN_EVENTS_PER_SEC && report.max_rss_bytes < MAX_RSS_BYTES;
    println!(
        "target:           >= {:.0}M events/s on one core, peak RSS < {}: {}",
        MIN_EVENTS_PER_SEC / 1e6,
        mib(MAX_RSS_BYTES),
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A synthetic trace of `events` events (`iosched-trace synth`) in a scratch directory of
/// /dev/shm named after `tag` (removed with the returned guard), and what generating it cost.
/// Refuses when /dev/shm lacks the room.
pub fn synthetic_trace(
    bin: &Path,
    events: u64,
    tag: &str,
) -> anyhow::Result<(iosched_testbed::tempdir::TempDir, std::path::PathBuf, Cost)> {
    let shm = Path::new("/dev/shm");
    let need = events * BYTES_PER_EVENT;
    let free = free_bytes(shm)?;
    if free < need + (256 << 20) {
        bail!(
            "/dev/shm has {} free; a {}-event trace needs about {}",
            mib(free),
            events,
            mib(need)
        );
    }
    let dir = scratch::temp_dir(shm, tag)?;
    let trace = dir.path().join("synth.istrace");
    let cost = measure(
        Command::new(bin)
            .arg("synth")
            .arg("--events")
            .arg(events.to_string())
            .arg("-o")
            .arg(&trace),
    )?;
    Ok((dir, trace, cost))
}
