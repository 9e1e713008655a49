//! How the fio benches measure the load's IOPS in one state (no tracer, or a tracer running).
//!
//! By default one fio job runs for the whole bench and each state is a window of it: the
//! tracer is started and stopped between windows, and a window's figure is the median of its
//! one-second IOPS samples (reads completed, from `/sys/block/DEV/stat`). This machine is
//! shared: other tenants take the CPUs in bursts of a second or so, which moved whole-run
//! ratios by 0.1-0.2 between runs of one build (a baseline run at 315k IOPS beside a traced
//! run at 215k, the next pair 250k and 256k). Adjacent windows of one job see the same
//! machine, and a median leaves out the seconds a burst took. The transitions (a tracer
//! loading or flushing) fall between windows, so a window measures what the tracer costs
//! while it runs; each sample still holds everything it does in a second (the exporter's
//! scrape, `live`'s redraw, the recorder's flushes). `--separate-runs` keeps the old way, a
//! whole fio run per state, its mean IOPS.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use iosched_core::record::{DiskCounters, parse_pid_stat_cpu};
use iosched_testbed::loop_device::LoopDevice;

use super::{fio, fio_command, median};
use crate::{cmd, scratch};

/// How long a window waits, once its state is set up, before its first sample: a tracer's
/// first moments (maps filled, the first batches) are not its steady cost.
const SETTLE: Duration = Duration::from_millis(1000);
/// One sample's length: a whole second, so that every sample holds one of each per-second
/// task a tracer has (a scrape, a redraw).
const SAMPLE: Duration = Duration::from_secs(1);
/// The background job's ramp before the first window.
const WARMUP: Duration = Duration::from_secs(2);

#[derive(Args, Clone, Copy)]
pub struct LoadArgs {
    /// Seconds each state is measured: a window of one long fio run (one-second samples,
    /// their median), or with --separate-runs a whole fio run (its mean IOPS).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=3600))]
    pub runtime: u32,
    /// Baseline/traced pairs to measure; the verdict uses the median of their ratios.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// A fresh fio run for every state instead of windows of one run (the method before
    /// windows; its ratios move with the machine's other load by 0.1-0.2 between runs).
    #[arg(long)]
    pub separate_runs: bool,
}

impl LoadArgs {
    pub fn describe(&self) -> String {
        if self.separate_runs {
            format!(
                "a fio run of {} s per state, {} pair(s)",
                self.runtime, self.repeat
            )
        } else {
            format!(
                "one fio run, a {} s window per state (median of 1 s samples), {} pair(s)",
                self.runtime, self.repeat
            )
        }
    }
}

/// The load a bench measures, in whichever way `LoadArgs` chose.
pub enum Load {
    /// A fresh fio run per measurement.
    Runs { dev: PathBuf, runtime: u32 },
    /// Windows of one fio job running in the background.
    Windows { job: Background, runtime: u32 },
}

impl Load {
    pub fn start(args: &LoadArgs, loopdev: &LoopDevice) -> anyhow::Result<Load> {
        if args.separate_runs {
            return Ok(Load::Runs {
                dev: loopdev.dev().to_path_buf(),
                runtime: args.runtime,
            });
        }
        Ok(Load::Windows {
            job: Background::start(loopdev)?,
            runtime: args.runtime,
        })
    }

    /// The load's read IOPS in the current state (`what` names it in errors).
    pub fn measure(&mut self, what: &str) -> anyhow::Result<f64> {
        self.measure_traced(what, None)
    }

    /// The load's read IOPS while `tracer` (a pid) runs.
    pub fn measure_traced(&mut self, what: &str, tracer: Option<u32>) -> anyhow::Result<f64> {
        Ok(self.measure_with_tracer(what, tracer)?.iops)
    }

    /// The load's read IOPS while `tracer` (a pid) runs, and the tracer's CPU time over the
    /// same span as a share of one CPU ([`CpuClock`]), also printed with the samples. The
    /// share is the tracer's userspace cost measured directly: it does not move with the
    /// machine's other load as the IOPS do, so a change to what userspace does per event
    /// shows in it when the ratios' spread hides it. (The programs' time is the kernel's,
    /// charged to the tasks they interrupt, not here.)
    pub fn measure_with_tracer(
        &mut self,
        what: &str,
        tracer: Option<u32>,
    ) -> anyhow::Result<Measured> {
        let cpu = |share: f64| format!("tracer CPU {:.1}% of a CPU", share * 100.0);
        match self {
            Load::Runs { dev, runtime } => {
                let clock = tracer.map(CpuClock::start).transpose()?;
                let iops = fio(dev, *runtime).with_context(|| format!("fio run, {what}"))?;
                let tracer_cpu = clock.map(|c| c.share()).transpose()?;
                if let Some(share) = tracer_cpu {
                    eprintln!("  [{what}] {}", cpu(share));
                }
                Ok(Measured { iops, tracer_cpu })
            }
            Load::Windows { job, runtime } => {
                let (samples, share) = job
                    .window(*runtime, tracer)
                    .with_context(|| format!("window, {what}"))?;
                eprintln!(
                    "  [{what}] kIOPS each second: {}{}",
                    samples
                        .iter()
                        .map(|s| format!("{:.0}", s / 1000.0))
                        .collect::<Vec<_>>()
                        .join(" "),
                    share.map_or(String::new(), |s| format!("; {}", cpu(s)))
                );
                Ok(Measured {
                    iops: median(samples),
                    tracer_cpu: share,
                })
            }
        }
    }
}

/// One state's figures: the load's IOPS and, with a tracer, its CPU share.
#[derive(Clone, Copy, Debug)]
pub struct Measured {
    pub iops: f64,
    /// The tracer's CPU time over the window per wall second (1.0: one CPU kept busy).
    pub tracer_cpu: Option<f64>,
}

impl Measured {
    /// The tracer's CPU share over the window's IOPS, in ns per read: its userspace cost per
    /// request, which neither the machine's other load (as the IOPS) nor the load's own rate
    /// moves much, where the ratio moves with both.
    pub fn tracer_ns_per_request(&self) -> Option<f64> {
        let share = self.tracer_cpu?;
        (self.iops > 0.0).then(|| share * 1e9 / self.iops)
    }
}

/// A process's CPU time (`/proc/PID/stat`: user and system, all its threads) from a start
/// to now, over the wall time between.
struct CpuClock {
    pid: u32,
    cpu_s: f64,
    at: Instant,
}

impl CpuClock {
    fn start(pid: u32) -> anyhow::Result<CpuClock> {
        Ok(CpuClock {
            pid,
            cpu_s: cpu_seconds(pid)?,
            at: Instant::now(),
        })
    }

    /// CPU seconds used since the start per wall second: 1.0 is one CPU kept busy.
    fn share(&self) -> anyhow::Result<f64> {
        let used = cpu_seconds(self.pid)? - self.cpu_s;
        Ok(used / self.at.elapsed().as_secs_f64().max(1e-9))
    }
}

/// CPU seconds of process `pid` so far (all its threads, and its children reaped).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let text = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_pid_stat_cpu(&text)
        .map(|(_, ticks)| ticks as f64 / clock_ticks_per_second())
        .with_context(|| format!("{path}: no CPU time fields"))
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The bench's fio job running until dropped (then stopped, by its pid).
pub struct Background {
    child: Option<Child>,
    stat: PathBuf,
}

/// fio's runtime for the background job: far beyond any bench; it is stopped at the end.
const BACKGROUND_RUNTIME: u32 = 86_400;

impl Background {
    fn start(loopdev: &LoopDevice) -> anyhow::Result<Background> {
        let mut command = fio_command(loopdev.dev(), BACKGROUND_RUNTIME);
        command.stdout(Stdio::null());
        eprintln!("+ {} &", cmd::display(&command));
        let child = command.spawn().context("starting the background fio job")?;
        let mut job = Background {
            child: Some(child),
            stat: Path::new("/sys/block").join(loopdev.name()).join("stat"),
        };
        thread::sleep(WARMUP);
        job.check_running()?;
        Ok(job)
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut()
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            bail!("the background fio job exited early ({status}); see its output above");
        }
        Ok(())
    }

    /// Reads completed on the device so far (the first field of its `stat`).
    fn reads(&self) -> anyhow::Result<u64> {
        let text = fs::read_to_string(&self.stat)
            .with_context(|| format!("reading {}", self.stat.display()))?;
        DiskCounters::parse_stat(&text, 0)
            .map(|c| c.reads)
            .with_context(|| format!("{}: not a block device stat line", self.stat.display()))
    }

    /// After [`SETTLE`], `seconds` one-second samples of the read IOPS, and `tracer`'s CPU
    /// share over the same seconds.
    fn window(
        &mut self,
        seconds: u32,
        tracer: Option<u32>,
    ) -> anyhow::Result<(Vec<f64>, Option<f64>)> {
        thread::sleep(SETTLE);
        let clock = tracer.map(CpuClock::start).transpose()?;
        let mut samples = Vec::new();
        let (mut before, mut at) = (self.reads()?, Instant::now());
        for _ in 0..seconds {
            thread::sleep(SAMPLE);
            scratch::check_interrupted()?;
            self.check_running()?;
            let (now, now_at) = (self.reads()?, Instant::now());
            samples.push(now.saturating_sub(before) as f64 / (now_at - at).as_secs_f64());
            (before, at) = (now, now_at);
        }
        let share = clock.map(|c| c.share()).transpose()?;
        if samples.iter().all(|&s| s <= 0.0) {
            bail!("no reads completed on the device during the window");
        }
        Ok((samples, share))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SIGINT first: fio stops its job and reaps its I/O; SIGKILL if it lingers.
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let started = Instant::now();
            while matches!(child.try_wait(), Ok(None)) {
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracer_cost_per_request_is_its_cpu_time_over_the_reads() {
        // 10% of a CPU while the load completed 200k reads a second: 100 ms / 200k = 500 ns.
        let m = Measured {
            iops: 200_000.0,
            tracer_cpu: Some(0.1),
        };
        assert_eq!(m.tracer_ns_per_request(), Some(500.0));
        // No tracer, or no reads: no figure (never an infinite or made-up one).
        let none = Measured {
            iops: 200_000.0,
            tracer_cpu: None,
        };
        assert_eq!(none.tracer_ns_per_request(), None);
        let idle = Measured {
            iops: 0.0,
            tracer_cpu: Some(0.1),
        };
        assert_eq!(idle.tracer_ns_per_request(), None);
    }

    #[test]
    fn this_process_uses_cpu_time_it_can_measure() {
        let clock = CpuClock::start(std::process::id()).unwrap();
        let started = Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(200) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        // A busy loop of 200 ms: some of a CPU, never more than the machine's CPUs.
        let share = clock.share().unwrap();
        assert!(share > 0.0 && share <= 64.0, "{share}");
    }
}
