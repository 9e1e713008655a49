//! `cargo xtask bench capture`: what recording costs the workload, and whether it loses events.
//!
//! fio 4 KiB random reads (io_uring, iodepth 32) on a loop device over a file in /dev/shm with
//! scheduler `none`: the fastest block device we can make here, so the tracer's per-event cost
//! shows. Baseline and recording runs alternate; the verdict uses the median ratio.

mod bpf_stats;
pub mod exporter;
mod load;
mod peers;

pub use load::LoadArgs;
use load::{Load, Measured};

use std::{
    ffi::CString,
    fs,
    os::unix::ffi::OsStrExt as _,
    path::Path,
    process::{Command, ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use iosched_testbed::{loop_device::LoopDevice, tempdir::TempDir};

use crate::{
    BinArgs, cmd,
    scratch::{self, Recorder},
    trace_stats,
};

const SHM: &str = "/dev/shm";
const IMAGE_SIZE: u64 = 1 << 30;
/// Room to leave for the recording, per second of fio runtime: the naive recorder of
/// TOOLCHAIN.md wrote ~1.1M events/s; at 64-100 bytes per event that is ~100 MiB/s.
const RECORDING_BYTES_PER_SEC: u64 = 128 << 20;
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The target: recording (plugs counted, `record`'s default) keeps at least this fraction of
/// baseline IOPS, and loses nothing.
const MIN_RATIO: f64 = 0.80;
/// The target with `--record-option=--plug-events` (every event; issue 25).
const PLUG_EVENTS_MIN_RATIO: f64 = 0.72;

/// The target for a recorder run with `options`.
fn min_ratio(options: &[String]) -> f64 {
    if options.iter().any(|o| o == "--plug-events") {
        PLUG_EVENTS_MIN_RATIO
    } else {
        MIN_RATIO
    }
}

#[derive(Args)]
pub struct CaptureArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// More options for `record` (e.g. `--record-option=--no-plugs`), repeatable.
    #[arg(
        long = "record-option",
        value_name = "OPTION",
        allow_hyphen_values = true
    )]
    record_options: Vec<String>,
    /// Also run, between baseline and recording, a recorder that drains and decodes every
    /// event but stores none (`record --discard-events`): the split of the cost between the
    /// kernel side (hooks, programs, ring) and the recorder's storing.
    #[arg(long)]
    split: bool,
    /// Instead: one table of our recorder (plugs counted, and every event), `live --batch`
    /// and the peers (bpftrace biosnoop- and biolatency-style scripts, the ftrace blk tracer
    /// read from trace_pipe), each run alternated with a baseline run, `--repeat` rounds.
    #[arg(long, conflicts_with = "split")]
    peers: bool,
    /// Leave out the last window, with `kernel.bpf_stats_enabled=1`, that measures the
    /// programs' own kernel time per request.
    #[arg(long)]
    no_program_cost: bool,
    #[command(flatten)]
    bin: BinArgs,
}

/// One baseline + recording pair (+ the drain-only run with `--split`).
struct Run {
    baseline_iops: f64,
    drain_only_iops: Option<f64>,
    /// The recorder's window: the load's IOPS and the recorder's CPU share.
    recording: Measured,
    events: u64,
    lost: Option<u64>,
    /// Completions the kernel counted on the device and the recording has no event for
    /// (the recording's completion check), and program runs the kernel skipped.
    untraced: Option<u64>,
    skipped: Option<u64>,
    file_bytes: u64,
}

impl Run {
    fn ratio(&self) -> f64 {
        self.recording.iops / self.baseline_iops
    }
}

pub fn capture(args: &CaptureArgs) -> anyhow::Result<ExitCode> {
    cmd::require_root(
        "bench capture",
        "it attaches a loop device and loads eBPF programs",
    )?;
    scratch::catch_interrupts()?;
    let bin = args.bin.resolve()?;
    if cmd::find_program("fio").is_none() {
        bail!("fio is not installed (`cargo xtask setup` installs it as root)");
    }
    // A window's recorder runs a few seconds beyond the window (loading, settling, flushing).
    let need = IMAGE_SIZE + u64::from(args.load.runtime + 3) * RECORDING_BYTES_PER_SEC;
    let free = free_bytes(Path::new(SHM))?;
    if free < need {
        bail!(
            "{SHM} has {} free; this bench needs about {} (1 GiB scratch file + the recording)",
            mib(free),
            mib(need)
        );
    }
    scratch::check_interrupted()?;

    // Guards, dropped in reverse: recorder (inside run_pair), loop device, directory.
    let (dir, loopdev) = scratch_device("iosched-trace-bench")?;
    let trace = dir.path().join("bench.istrace");
    let mut load = Load::start(&args.load, &loopdev)?;
    if args.peers {
        println!(
            "bench capture --peers: fio 4k randread io_uring iodepth 32 on {} in {SHM}, \
             scheduler none; {}",
            loopdev.name(),
            args.load.describe()
        );
        let (ratio, lost) = peers::run(&bin, &loopdev, dir.path(), &mut load, args.load.repeat)?;
        let pass = ratio >= MIN_RATIO && lost == Some(0);
        println!(
            "target (record ratio >= {MIN_RATIO}, lost == 0): {}",
            if pass { "PASS" } else { "FAIL" }
        );
        return Ok(if pass {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    println!(
        "bench capture: fio 4k randread io_uring iodepth 32 on {} in {SHM}, scheduler none; {}",
        loopdev.name(),
        args.load.describe()
    );
    let repeat = args.load.repeat;
    let mut runs = Vec::new();
    for i in 1..=repeat {
        let run = run_pair(&bin, &loopdev, &trace, &mut load, args)?;
        if let Some(drained) = run.drain_only_iops {
            println!(
                "run {i}/{repeat}: drain only (events dropped) {drained:.0} IOPS, ratio {:.3}",
                drained / run.baseline_iops
            );
        }
        let count = |n: Option<u64>| n.map_or("unknown".to_owned(), |n| n.to_string());
        println!(
            "run {i}/{repeat}: baseline {:.0} IOPS, recording {:.0} IOPS, ratio {:.3}, {} events, \
             lost {} (kernel-skipped runs {}), completions untraced {}, file {}",
            run.baseline_iops,
            run.recording.iops,
            run.ratio(),
            run.events,
            count(run.lost),
            count(run.skipped),
            count(run.untraced),
            mib(run.file_bytes)
        );
        runs.push(run);
    }

    if !args.no_program_cost {
        program_cost(&bin, &loopdev, &trace, &args.record_options, &mut load)?;
    }
    let median_of = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let ratio = median_of(Run::ratio);
    let events = median_of(|r| r.events as f64);
    let lost: Option<u64> = runs.iter().map(|r| r.lost).sum();
    let target = min_ratio(&args.record_options);
    let pass = ratio >= target && lost == Some(0);
    let of = if repeat > 1 {
        format!(" (median of {repeat})")
    } else {
        String::new()
    };
    println!(
        "baseline IOPS:    {:.0}{of}",
        median_of(|r| r.baseline_iops)
    );
    println!(
        "recording IOPS:   {:.0}{of}",
        median_of(|r| r.recording.iops)
    );
    println!("ratio:            {ratio:.3}{of}");
    print_spread_and_cpu(
        "recorder",
        &runs.iter().map(|r| r.baseline_iops).collect::<Vec<_>>(),
        &runs.iter().map(|r| r.recording).collect::<Vec<_>>(),
    );
    if args.split {
        let drained = median(
            runs.iter()
                .filter_map(|r| Some(r.drain_only_iops? / r.baseline_iops))
                .collect(),
        );
        println!(
            "drain-only ratio: {drained:.3}{of}: the kernel side and the drain cost {:.3} of \
             baseline, storing the events {:.3}",
            1.0 - drained,
            drained - ratio
        );
    }
    println!("events recorded:  {events:.0}{of}");
    match lost {
        Some(lost) => println!("lost events:      {lost} (all runs)"),
        None => println!("lost events:      unknown (a dump summary had no `lost` field)"),
    }
    // Not in the verdict (the kernel never ran a program for these; docs/REPORT.md), but a
    // recording is exact only where this is 0.
    let untraced: Option<u64> = runs.iter().map(|r| r.untraced).sum();
    println!(
        "untraced:         {} completions counted by the kernel without an event (all runs)",
        untraced.map_or("unknown".to_owned(), |n| n.to_string())
    );
    println!(
        "file size:        {}{of}",
        mib(median_of(|r| r.file_bytes as f64) as u64)
    );
    println!(
        "target (ratio >= {target}, lost == 0): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run_pair(
    bin: &Path,
    loopdev: &LoopDevice,
    trace: &Path,
    load: &mut Load,
    args: &CaptureArgs,
) -> anyhow::Result<Run> {
    let baseline_iops = load.measure("baseline")?;
    let drain_only_iops = if args.split {
        let mut options = args.record_options.clone();
        options.push("--discard-events".into());
        let drained =
            fio_while_recording(bin, loopdev, trace, &options, load, "drain-only recorder")?;
        fs::remove_file(trace).with_context(|| format!("removing {}", trace.display()))?;
        Some(drained.iops)
    } else {
        None
    };
    let recording =
        fio_while_recording(bin, loopdev, trace, &args.record_options, load, "recorder")?;
    scratch::check_interrupted()?;

    let file_bytes = fs::metadata(trace)
        .with_context(|| format!("the recorder left no {}", trace.display()))?
        .len();
    let started = Instant::now();
    let stats = trace_stats::from_dump(bin, trace, false)?;
    eprintln!(
        "bench: counted {} events with `dump --json` in {:.1} s",
        stats.events,
        started.elapsed().as_secs_f64()
    );
    fs::remove_file(trace).with_context(|| format!("removing {}", trace.display()))?;
    Ok(Run {
        baseline_iops,
        drain_only_iops,
        recording,
        events: stats.events,
        lost: stats.lost,
        untraced: stats.untraced_completions,
        skipped: stats.kernel_skipped,
        file_bytes,
    })
}

/// One more recorder window with the kernel counting its programs' time
/// (`kernel.bpf_stats_enabled=1`, which slows them a little): the recorder then says, when it
/// stops, their time per completed request and each one's ns a run (`record`'s
/// `describe_program_costs`). Unlike the ratio, this does not move with the rest of the
/// machine's load, so it shows a change to the programs that the ratio's spread hides.
fn program_cost(
    bin: &Path,
    loopdev: &LoopDevice,
    trace: &Path,
    options: &[String],
    load: &mut Load,
) -> anyhow::Result<()> {
    let stats = bpf_stats::BpfStats::enable()?;
    let mut recorder = Recorder::start_with(bin, loopdev, trace, options)?;
    recorder.wait_ready(READY_TIMEOUT)?;
    load.measure_traced("with the recorder, programs counted", recorder.pid())?;
    let (status, said) = recorder.stop_saying()?;
    drop(stats);
    fs::remove_file(trace).with_context(|| format!("removing {}", trace.display()))?;
    if !status.success() {
        bail!("the recorder exited with {status} after SIGINT; see its output above");
    }
    let from = said
        .iter()
        .position(|l| l.starts_with(PROGRAM_COST_LINE))
        .with_context(|| {
            format!(
                "the recorder said nothing of its programs' time with {} at 1",
                bpf_stats::BPF_STATS
            )
        })?;
    for line in &said[from..] {
        if line.starts_with(PROGRAM_COST_LINE) || line.starts_with("  ") {
            println!("program cost: {}", line.trim_start());
        }
    }
    Ok(())
}

/// How `record` begins its report of the programs' time.
const PROGRAM_COST_LINE: &str = "programs' kernel time";

/// The load's IOPS while `record OPTIONS` writes `trace`; the recorder must then end
/// cleanly on SIGINT (`what` names it in errors).
fn fio_while_recording(
    bin: &Path,
    loopdev: &LoopDevice,
    trace: &Path,
    options: &[String],
    load: &mut Load,
    what: &str,
) -> anyhow::Result<Measured> {
    let mut recorder = Recorder::start_with(bin, loopdev, trace, options)?;
    recorder.wait_ready(READY_TIMEOUT)?;
    let measured = load.measure_with_tracer(&format!("with the {what}"), recorder.pid())?;
    let status = recorder.stop()?;
    if !status.success() {
        bail!("the {what} exited with {status} after SIGINT; see its output above");
    }
    Ok(measured)
}

/// The bench's fio job on `dev` for `runtime` seconds (JSON on stdout).
fn fio_command(dev: &Path, runtime: u32) -> Command {
    let mut command = Command::new("fio");
    command
        .args([
            "--name=bench",
            "--rw=randread",
            "--bs=4k",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--direct=1",
            "--numjobs=1",
            "--time_based",
            "--output-format=json",
        ])
        .arg(format!("--filename={}", dev.display()))
        .arg(format!("--runtime={runtime}"))
        .stdin(Stdio::null());
    command
}

/// Runs the fio job on `dev` and returns its read IOPS.
fn fio(dev: &Path, runtime: u32) -> anyhow::Result<f64> {
    let mut command = fio_command(dev, runtime);
    let shown = cmd::display(&command);
    eprintln!("+ {shown}");
    let out = command
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    scratch::check_interrupted()?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    read_iops(&String::from_utf8_lossy(&out.stdout)).context("reading fio's JSON output")
}

/// Sum of `jobs[].read.iops` in fio's JSON output (which may be preceded by warning lines).
fn read_iops(output: &str) -> anyhow::Result<f64> {
    let start = output.find('{').context("no JSON object in the output")?;
    let json: serde_json::Value = serde_json::from_str(&output[start..])?;
    let jobs = json["jobs"].as_array().context("no `jobs` array")?;
    let mut iops = 0.0;
    for job in jobs {
        if job["error"].as_i64().unwrap_or(0) != 0 {
            bail!("job {} reported error {}", job["jobname"], job["error"]);
        }
        iops += job["read"]["iops"]
            .as_f64()
            .context("a job has no read.iops")?;
    }
    if iops <= 0.0 {
        bail!("fio reported no read IOPS");
    }
    Ok(iops)
}

/// The live view's target (issue 5): IOPS with `live` open stay >= 0.85 of baseline.
const LIVE_MIN_RATIO: f64 = 0.85;

#[derive(Args)]
pub struct LiveArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Also run, between baseline and live, a collector that drains and decodes every event
    /// but drops it (`live --discard-events`): the split of the cost between the kernel side
    /// and the view's aggregation.
    #[arg(long)]
    split: bool,
    #[command(flatten)]
    bin: BinArgs,
}

/// `cargo xtask bench live`: the capture benchmark's load, with `live --batch` (interval 1 s)
/// instead of `record`. Batch mode runs the same collector and per-interval aggregation as
/// the screen; it prints a text block per second instead of drawing one.
pub fn live(args: &LiveArgs) -> anyhow::Result<ExitCode> {
    let (bin, _dir, loopdev) = fio_bench_setup("live", &args.bin)?;
    println!(
        "bench live: fio 4k randread io_uring iodepth 32 on {} in {SHM}, scheduler none; {}",
        loopdev.name(),
        args.load.describe()
    );
    let mut load = Load::start(&args.load, &loopdev)?;
    let repeat = args.load.repeat;
    let mut baselines = Vec::new();
    let mut windows = Vec::new();
    let mut drained_windows = Vec::new();
    for i in 1..=repeat {
        let baseline = load.measure("baseline")?;
        baselines.push(baseline);
        if args.split {
            let (drained, lost) = fio_while_live(&bin, &loopdev, &["--discard-events"], &mut load)?;
            println!(
                "run {i}/{repeat}: drain only (events dropped) {:.0} IOPS, ratio {:.3}, \
                 lost events {lost}",
                drained.iops,
                drained.iops / baseline
            );
            drained_windows.push(drained);
        }
        let (watched, lost) = fio_while_live(&bin, &loopdev, &[], &mut load)?;
        println!(
            "run {i}/{repeat}: baseline {baseline:.0} IOPS, with live {:.0} IOPS, ratio {:.3}, \
             lost events {lost}",
            watched.iops,
            watched.iops / baseline
        );
        windows.push(watched);
    }
    let of = if repeat > 1 { " (median)" } else { "" };
    let ratio = median(ratios(&baselines, &windows));
    let pass = ratio >= LIVE_MIN_RATIO;
    println!("ratio:            {ratio:.3}{of}");
    print_spread_and_cpu("live", &baselines, &windows);
    if args.split {
        if let Some(cpu) = tracer_cpu(&drained_windows) {
            println!("drain-only CPU:   {cpu}");
        }
        let drained = median(ratios(&baselines, &drained_windows));
        println!(
            "drain-only ratio: {drained:.3}{of}: the kernel side and the drain cost {:.3} of \
             baseline, the view's aggregation {:.3}",
            1.0 - drained,
            drained - ratio
        );
    }
    println!(
        "target (ratio >= {LIVE_MIN_RATIO}): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The load's IOPS while `live --batch EXTRA` watches, and the events it lost.
fn fio_while_live(
    bin: &Path,
    loopdev: &LoopDevice,
    extra: &[&str],
    load: &mut Load,
) -> anyhow::Result<(Measured, u64)> {
    let live = LiveChild::start(bin, loopdev, extra)?;
    let measured = load.measure_with_tracer("with live", Some(live.child.id()))?;
    let lost = live.stop()?;
    scratch::check_interrupted()?;
    Ok((measured, lost))
}

/// `iosched-trace live --batch` as a child, killed (by pid) on drop.
struct LiveChild {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl LiveChild {
    /// Starts it and waits for its first interval (programs attached and draining).
    fn start(bin: &Path, dev: &LoopDevice, extra: &[&str]) -> anyhow::Result<LiveChild> {
        use std::io::BufRead as _;
        let mut child = Command::new(bin)
            .args(["live", "--batch", "--interval", "1", "-d", dev.name()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting iosched-trace live")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let live = LiveChild { child, lines };
        live.lines
            .recv_timeout(READY_TIMEOUT)
            .context("live printed nothing within 30 s")?;
        Ok(live)
    }

    /// Stops it; returns the largest cumulative loss count it printed.
    fn stop(mut self) -> anyhow::Result<u64> {
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
        let mut lost = 0;
        while let Ok(line) = self.lines.try_recv() {
            // "... lost N (T total)"
            if let Some(t) = line
                .split_once(" (")
                .and_then(|(_, r)| r.split_once(" total)"))
                .and_then(|(t, _)| t.parse::<u64>().ok())
            {
                lost = lost.max(t);
            }
        }
        Ok(lost)
    }
}

impl Drop for LiveChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The summary's lines beside a median ratio: how far the pairs and the baselines spread
/// (the machine's other tenants move them; a verdict from a run whose baselines spread
/// widely is weak) and the tracer's own CPU, which they move far less.
fn print_spread_and_cpu(tracer: &str, baselines: &[f64], windows: &[Measured]) {
    if let (Some((lo, hi)), Some((blo, bhi))) =
        (range(&ratios(baselines, windows)), range(baselines))
    {
        println!(
            "pairs spread:     ratios {lo:.3}-{hi:.3}, baselines {:.0}k-{:.0}k IOPS",
            blo / 1000.0,
            bhi / 1000.0
        );
    }
    if let Some(cpu) = tracer_cpu(windows) {
        println!("{:<18}{cpu}", format!("{tracer} CPU:"));
    }
}

/// Each traced window's IOPS over its pair's baseline.
fn ratios(baselines: &[f64], windows: &[Measured]) -> Vec<f64> {
    baselines
        .iter()
        .zip(windows)
        .map(|(b, w)| w.iops / b)
        .collect()
}

/// The smallest and largest of `values` (`None` when empty).
fn range(values: &[f64]) -> Option<(f64, f64)> {
    let lo = values.iter().copied().min_by(f64::total_cmp)?;
    let hi = values.iter().copied().max_by(f64::total_cmp)?;
    Some((lo, hi))
}

/// A tracer's CPU over its windows: the median share of a CPU and the median and range of
/// its CPU time per request (`None` if no window measured it).
fn tracer_cpu(windows: &[Measured]) -> Option<String> {
    let shares: Vec<f64> = windows.iter().filter_map(|m| m.tracer_cpu).collect();
    let per_request: Vec<f64> = windows
        .iter()
        .filter_map(Measured::tracer_ns_per_request)
        .collect();
    let (lo, hi) = range(&per_request)?;
    Some(format!(
        "{:.1}% of a CPU, {:.0} ns per request (medians; windows {lo:.0}-{hi:.0} ns)",
        median(shares) * 100.0,
        median(per_request)
    ))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The benches' device: a loop device with direct I/O and scheduler `none` over a
/// [`IMAGE_SIZE`] file in a new directory under /dev/shm. Drop the device before the
/// directory (declaration order in the caller's tuple pattern does this).
/// What `bench NAME` needs before its first run, checked in order (root, fio, room in
/// /dev/shm), then the binary and the scratch device (`iosched-trace-bench-NAME`), with
/// Ctrl-C caught so that the device is cleaned up.
fn fio_bench_setup(
    name: &str,
    bin: &BinArgs,
) -> anyhow::Result<(std::path::PathBuf, TempDir, LoopDevice)> {
    cmd::require_root(
        &format!("bench {name}"),
        "it attaches a loop device and loads eBPF programs",
    )?;
    scratch::catch_interrupts()?;
    let bin = bin.resolve()?;
    if cmd::find_program("fio").is_none() {
        bail!("fio is not installed (`cargo xtask setup` installs it as root)");
    }
    let free = free_bytes(Path::new(SHM))?;
    if free < IMAGE_SIZE + (64 << 20) {
        bail!("{SHM} has {} free; this bench needs about 1 GiB", mib(free));
    }
    let (dir, loopdev) = scratch_device(&format!("iosched-trace-bench-{name}"))?;
    Ok((bin, dir, loopdev))
}

fn scratch_device(prefix: &str) -> anyhow::Result<(TempDir, LoopDevice)> {
    let dir = scratch::temp_dir(Path::new(SHM), prefix)?;
    let image = dir.path().join("scratch.img");
    scratch::create_file(&image, IMAGE_SIZE, true)?;
    let loopdev = scratch::attach_loop(&image)?;
    loopdev.set_queue("scheduler", "none")?;
    Ok((dir, loopdev))
}

pub fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let c_path = CString::new(path.as_os_str().as_bytes()).context("path contains NUL")?;
    // SAFETY: statvfs is plain data, so all-zero is a valid value; statvfs writes into it and
    // reads only the NUL-terminated path, which outlives the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", path.display()));
    }
    #[expect(
        clippy::useless_conversion,
        reason = "u64 on 64-bit Linux, u32 on some 32-bit targets"
    )]
    let free = u64::from(st.f_bavail) * u64::from(st.f_frsize);
    Ok(free)
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_has_its_own_target() {
        assert_eq!(min_ratio(&[]), MIN_RATIO);
        assert_eq!(min_ratio(&["--ring-size=64".into()]), MIN_RATIO);
        assert_eq!(min_ratio(&["--plug-events".into()]), PLUG_EVENTS_MIN_RATIO);
    }

    #[test]
    fn tracer_cpu_is_summarised_from_the_windows_that_measured_it() {
        let w = |iops: f64, cpu: Option<f64>| Measured {
            iops,
            tracer_cpu: cpu,
        };
        // 500, 400 and 1000 ns per request; the window without a figure is left out.
        let windows = [
            w(200_000.0, Some(0.10)),
            w(250_000.0, Some(0.10)),
            w(100_000.0, Some(0.10)),
            w(100_000.0, None),
        ];
        assert_eq!(
            tracer_cpu(&windows).unwrap(),
            "10.0% of a CPU, 500 ns per request (medians; windows 400-1000 ns)"
        );
        assert_eq!(tracer_cpu(&[w(100_000.0, None)]), None);
        assert_eq!(range(&[0.7, 0.5, 0.9]), Some((0.5, 0.9)));
        assert_eq!(range(&[]), None);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn reads_iops_after_warnings() {
        let out = r#"fio: some warning
{"fio version":"fio-3.33","jobs":[{"jobname":"bench","error":0,"read":{"iops":331234.5}}]}"#;
        assert_eq!(read_iops(out).unwrap(), 331234.5);
        let failed = r#"{"jobs":[{"jobname":"bench","error":5,"read":{"iops":0.0}}]}"#;
        assert!(read_iops(failed).is_err());
        assert!(read_iops("no json").is_err());
        assert!(read_iops(r#"{"jobs":[]}"#).is_err());
    }
}
