//! `cargo xtask bench capture --peers`: our recorder and live view beside the tools people
//! use today, on the capture benchmark's load, each run alternated with a baseline run in the
//! same invocation, so that "costs less than every per-event tracer" is one table anyone can
//! reproduce.
//!
//! The peers: bpftrace in the shape of bcc's biosnoop (issue and complete hooked, a map from
//! request to issue time, one line per request written to a file) and of biolatency (the
//! same hooks, an in-kernel histogram, nothing per event), and the kernel's ftrace `blk`
//! tracer (blktrace's own code) streamed from `trace_pipe` into a file. A peer that is not
//! installed is skipped with a note. tracefs settings the ftrace peer changes are restored
//! by a guard, also on error or Ctrl-C.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use iosched_testbed::loop_device::LoopDevice;

use super::{Load, fio_while_live, fio_while_recording, median};
use crate::{cmd, scratch, trace_stats};

/// One tracer of the table.
enum Tracer {
    /// `iosched-trace record` with these options.
    Record(&'static str, &'static [&'static str]),
    /// `iosched-trace live --batch`.
    Live,
    /// bpftrace with this script (`DEV` replaced by the device's kernel `dev_t`).
    Bpftrace(&'static str, &'static str),
    /// The ftrace `blk` tracer, read from `trace_pipe`.
    FtraceBlk,
    /// `iosched-trace exporter`, scraped every second: beside biolatency, the other
    /// in-kernel aggregation.
    Exporter,
}

/// bcc's biosnoop, reduced: issue time per request, one output line per completion. (`args->`:
/// Debian 12's bpftrace 0.17 refuses `args.`.)
const SNOOP: &str = r#"tracepoint:block:block_rq_issue /args->dev == DEV/ { @start[args->sector] = nsecs; }
tracepoint:block:block_rq_complete /args->dev == DEV && @start[args->sector]/ {
  printf("%d %d %d\n", args->sector, args->nr_sector, nsecs - @start[args->sector]);
  delete(@start[args->sector]);
}"#;

/// bcc's biolatency: the same hooks, a log2 histogram in the kernel, printed at exit.
const HIST: &str = r#"tracepoint:block:block_rq_issue /args->dev == DEV/ { @start[args->sector] = nsecs; }
tracepoint:block:block_rq_complete /args->dev == DEV && @start[args->sector]/ {
  @usecs = hist((nsecs - @start[args->sector]) / 1000);
  delete(@start[args->sector]);
}"#;

const TRACERS: &[Tracer] = &[
    Tracer::Record("iosched-trace record (plugs counted)", &[]),
    Tracer::Record(
        "iosched-trace record --plug-events (every event)",
        &["--plug-events"],
    ),
    Tracer::Live,
    Tracer::Bpftrace("bpftrace, biosnoop-style (a line per request)", SNOOP),
    Tracer::Bpftrace("bpftrace, biolatency-style (in-kernel histogram)", HIST),
    Tracer::FtraceBlk,
    Tracer::Exporter,
];

impl Tracer {
    fn label(&self) -> &'static str {
        match self {
            Tracer::Record(label, _) | Tracer::Bpftrace(label, _) => label,
            Tracer::Live => "iosched-trace live --batch",
            Tracer::FtraceBlk => "ftrace blk tracer, trace_pipe to a file",
            Tracer::Exporter => "iosched-trace exporter (in-kernel aggregates, scraped 1/s)",
        }
    }

    /// Why it cannot run here, if it cannot.
    fn missing(&self) -> Option<String> {
        match self {
            Tracer::Bpftrace(..) if cmd::find_program("bpftrace").is_none() => {
                Some("bpftrace is not installed (apt-get install bpftrace)".into())
            }
            Tracer::FtraceBlk if !Path::new(TRACEFS).join("trace_pipe").exists() => {
                Some(format!("no tracefs at {TRACEFS}"))
            }
            _ => None,
        }
    }
}

/// One tracer's runs: ratios to the baseline run just before each, and events lost.
struct Row {
    label: &'static str,
    ratios: Vec<f64>,
    lost: Option<u64>,
    skipped: Option<String>,
}

/// Runs `repeat` rounds over every tracer (baseline, then the tracer, for each) and prints
/// the table. Returns our default recorder's median ratio and its lost events.
pub fn run(
    bin: &Path,
    loopdev: &LoopDevice,
    dir: &Path,
    load: &mut Load,
    repeat: u32,
) -> anyhow::Result<(f64, Option<u64>)> {
    let mut rows: Vec<Row> = TRACERS
        .iter()
        .map(|t| Row {
            label: t.label(),
            ratios: Vec::new(),
            lost: Some(0),
            skipped: t.missing(),
        })
        .collect();
    for round in 1..=repeat {
        for (tracer, row) in TRACERS.iter().zip(&mut rows) {
            if row.skipped.is_some() {
                continue;
            }
            let baseline = load.measure("baseline")?;
            let (iops, lost) = with_tracer(tracer, bin, loopdev, dir, load)?;
            scratch::check_interrupted()?;
            let ratio = iops / baseline;
            println!(
                "round {round}/{repeat}: {}: baseline {baseline:.0} IOPS, traced {iops:.0} IOPS, \
                 ratio {ratio:.3}{}",
                row.label,
                lost.map_or(String::new(), |l| format!(", lost {l}"))
            );
            row.ratios.push(ratio);
            row.lost = match (row.lost, lost) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
    }
    println!();
    println!("| tracer | ratio (median of {repeat}) | range | lost |\n|---|---|---|---|");
    for row in &rows {
        match &row.skipped {
            Some(why) => println!("| {} | skipped: {why} | | |", row.label),
            None => {
                let lo = row.ratios.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = row.ratios.iter().copied().fold(0.0, f64::max);
                println!(
                    "| {} | {:.3} | {lo:.2}-{hi:.2} | {} |",
                    row.label,
                    median(row.ratios.clone()),
                    row.lost.map_or("n/a".into(), |l| l.to_string())
                );
            }
        }
    }
    let ours = &rows[0];
    Ok((median(ours.ratios.clone()), ours.lost))
}

/// The load's IOPS with `tracer` running, and what it lost where it says.
fn with_tracer(
    tracer: &Tracer,
    bin: &Path,
    loopdev: &LoopDevice,
    dir: &Path,
    load: &mut Load,
) -> anyhow::Result<(f64, Option<u64>)> {
    match tracer {
        Tracer::Record(label, options) => {
            let trace = dir.join("peers.istrace");
            let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
            let iops = fio_while_recording(bin, loopdev, &trace, &options, load, label)?.iops;
            let lost = trace_stats::from_dump(bin, &trace, false)?.lost;
            fs::remove_file(&trace).with_context(|| format!("removing {}", trace.display()))?;
            Ok((iops, lost))
        }
        Tracer::Live => {
            let (live, lost) = fio_while_live(bin, loopdev, &[], load)?;
            Ok((live.iops, Some(lost)))
        }
        Tracer::Bpftrace(_, script) => {
            let out = dir.join("bpftrace.out");
            let script = script.replace("DEV", &kernel_dev(loopdev)?.to_string());
            let child = Bpftrace::start(&script, &out)?;
            let pid = child.0.as_ref().map(std::process::Child::id);
            let iops = load.measure_traced("with bpftrace", pid)?;
            child.stop()?;
            fs::remove_file(&out).with_context(|| format!("removing {}", out.display()))?;
            Ok((iops, None))
        }
        Tracer::Exporter => {
            let exporter = super::exporter::ExporterChild::start(bin, loopdev.name())?;
            let iops = load.measure_traced("with the exporter", Some(exporter.pid()))?;
            let (_, unaccounted) = exporter.stop()?;
            Ok((iops, Some(unaccounted as u64)))
        }
        Tracer::FtraceBlk => {
            let out = dir.join("ftrace.out");
            let blk = FtraceBlk::start(loopdev.name(), &out)?;
            let iops = load.measure("with the blk tracer")?;
            blk.stop()?;
            fs::remove_file(&out).with_context(|| format!("removing {}", out.display()))?;
            Ok((iops, None))
        }
    }
}

/// The device's kernel `dev_t` (major << 20 | minor), as tracepoints' `dev` fields hold it.
fn kernel_dev(loopdev: &LoopDevice) -> anyhow::Result<u32> {
    let path = format!("/sys/block/{}/dev", loopdev.name());
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let (major, minor) = text
        .trim()
        .split_once(':')
        .with_context(|| format!("{path}: not major:minor"))?;
    Ok((major.parse::<u32>()? << 20) | minor.parse::<u32>()?)
}

/// A bpftrace child writing to a file; killed (by its pid) if dropped unstopped.
struct Bpftrace(Option<Child>);

impl Bpftrace {
    fn start(script: &str, out: &Path) -> anyhow::Result<Bpftrace> {
        let mut command = Command::new("bpftrace");
        command
            .arg("-o")
            .arg(out)
            .arg("-e")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        eprintln!("+ bpftrace -o {} -e '...' &", out.display());
        let mut child = Bpftrace(Some(command.spawn().context("starting bpftrace")?));
        // It writes "Attaching N probes..." once its programs are attached.
        let started = Instant::now();
        loop {
            if fs::read_to_string(out).is_ok_and(|t| t.contains("Attaching")) {
                // The line precedes the attach itself by a little.
                thread::sleep(Duration::from_millis(500));
                return Ok(child);
            }
            if let Some(c) = child.0.as_mut()
                && let Some(status) = c.try_wait()?
            {
                child.0 = None;
                bail!("bpftrace exited with {status} before attaching");
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("bpftrace did not attach within 60 s");
            }
            scratch::check_interrupted()?;
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGINT, as a user ends it (the histogram script prints then), and a bounded wait.
    fn stop(mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.0.take() else {
            return Ok(());
        };
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let started = Instant::now();
        while child.try_wait()?.is_none() {
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("bpftrace did not exit within 30 s of SIGINT");
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

const TRACEFS: &str = "/sys/kernel/tracing";

/// The ftrace `blk` tracer on one device, `trace_pipe` copied to a file by a `cat` child.
/// Dropping it (also unstopped) ends the `cat`, and puts `current_tracer` and the device's
/// `trace/enable` back as they were.
struct FtraceBlk {
    cat: Option<Child>,
    saved: Vec<(PathBuf, String)>,
}

impl FtraceBlk {
    fn start(device: &str, out: &Path) -> anyhow::Result<FtraceBlk> {
        let mut blk = FtraceBlk {
            cat: None,
            saved: Vec::new(),
        };
        blk.set(
            &PathBuf::from(format!("/sys/block/{device}/trace/enable")),
            "1",
        )?;
        blk.set(&Path::new(TRACEFS).join("current_tracer"), "blk")?;
        let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        eprintln!("+ cat {TRACEFS}/trace_pipe > {} &", out.display());
        blk.cat = Some(
            Command::new("cat")
                .arg(Path::new(TRACEFS).join("trace_pipe"))
                .stdin(Stdio::null())
                .stdout(file)
                .spawn()
                .context("starting cat trace_pipe")?,
        );
        Ok(blk)
    }

    fn set(&mut self, path: &Path, value: &str) -> anyhow::Result<()> {
        let before =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        // current_tracer reads back as the tracer's name; enable as 0/1.
        self.saved
            .push((path.to_path_buf(), before.trim().to_string()));
        fs::write(path, value).with_context(|| format!("writing {value} to {}", path.display()))
    }

    fn stop(mut self) -> anyhow::Result<()> {
        self.restore()
    }

    fn restore(&mut self) -> anyhow::Result<()> {
        if let Some(mut cat) = self.cat.take() {
            let _ = cat.kill();
            let _ = cat.wait();
        }
        let mut first_error = None;
        while let Some((path, value)) = self.saved.pop() {
            if let Err(e) = fs::write(&path, &value) {
                first_error.get_or_insert(
                    anyhow::Error::new(e).context(format!("restoring {}", path.display())),
                );
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for FtraceBlk {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("warning: {e:#}");
        }
    }
}
