//! `cargo xtask bench exporter`: what the always-on exporter costs the capture benchmark's
//! load, scraped every second as Prometheus would (a scrape reads every map), alternated with
//! baseline runs in the same invocation; ratio to baseline IOPS, target 0.90.

use std::{
    io::{BufRead as _, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::Path,
    process::{Command, ExitCode, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context, bail};
use clap::Args;

use super::{
    Load, LoadArgs, READY_TIMEOUT, SHM,
    bpf_stats::{BPF_STATS, BpfStats},
    median,
};
use crate::{BinArgs, scratch};

/// The exporter's target (the fleet issue): IOPS with it running stay >= 0.90 of baseline.
const EXPORTER_MIN_RATIO: f64 = 0.90;

#[derive(Args)]
pub struct ExporterArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Leave out the last run, with `kernel.bpf_stats_enabled=1`, that measures the
    /// programs' own time per request.
    #[arg(long)]
    no_program_cost: bool,
    #[command(flatten)]
    bin: BinArgs,
}

/// The sum of the samples of `name` (with `label` in their labels, if given) in a scrape.
fn sample_sum(text: &str, name: &str, label: Option<&str>) -> f64 {
    text.lines()
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| label.is_none_or(|label| l.contains(label)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// One more run of the exporter with the kernel counting its programs' time
/// (`kernel.bpf_stats_enabled=1`, which slows them a little): each program's ns a run and all
/// of them per request, read from the exporter's own `iosched_bpf_program_*` series. Unlike
/// the ratio, this does not move with the rest of the machine's load, so it shows a change
/// to the programs that the ratio's spread hides.
fn program_cost(bin: &Path, dev_name: &str, load: &mut Load) -> anyhow::Result<()> {
    let _stats = BpfStats::enable()?;
    let exporter = ExporterChild::start(bin, dev_name)?;
    load.measure("with the exporter, programs counted")?;
    let text = get_metrics(exporter.port).context("the program-cost scrape")?;
    exporter.stop()?;
    let requests = sample_sum(&text, "iosched_requests_total", None);
    let programs: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("iosched_bpf_program_runs_total{"))
        .filter_map(|l| {
            l.split_once("program=\"")?
                .1
                .split_once('"')
                .map(|(p, _)| p)
        })
        .collect();
    if programs.is_empty() {
        bail!("the exporter showed no program run times with {BPF_STATS} at 1");
    }
    let mut total_ns = 0.0;
    for program in programs {
        let label = format!("program=\"{program}\"");
        let runs = sample_sum(&text, "iosched_bpf_program_runs_total", Some(&label));
        let ns = sample_sum(&text, "iosched_bpf_program_run_seconds_total", Some(&label)) * 1e9;
        total_ns += ns;
        if runs > 0.0 {
            println!(
                "program cost: {program:<20} {:>6.0} ns a run, {runs:.0} runs",
                ns / runs
            );
        }
    }
    if requests > 0.0 {
        println!(
            "program cost: all programs {:.0} ns a request ({requests:.0} requests; \
             kernel.bpf_stats_enabled=1 for this run only)",
            total_ns / requests
        );
    }
    Ok(())
}

pub fn exporter(args: &ExporterArgs) -> anyhow::Result<ExitCode> {
    let (bin, _dir, loopdev) = super::fio_bench_setup("exporter", &args.bin)?;
    println!(
        "bench exporter: fio 4k randread io_uring iodepth 32 on {} in {SHM}, scheduler none, \
         scraped every 1 s; {}",
        loopdev.name(),
        args.load.describe()
    );
    let mut load = Load::start(&args.load, &loopdev)?;
    let repeat = args.load.repeat;
    let mut ratios = Vec::new();
    for i in 1..=repeat {
        let baseline = load.measure("baseline")?;
        let exporter = ExporterChild::start(&bin, loopdev.name())?;
        let exported = load.measure_traced("with the exporter", Some(exporter.pid()))?;
        let (scrapes, lost) = exporter.stop()?;
        scratch::check_interrupted()?;
        println!(
            "run {i}/{repeat}: baseline {baseline:.0} IOPS, with the exporter {exported:.0} \
             IOPS, ratio {:.3}, {scrapes} scrapes, unaccounted {lost}",
            exported / baseline
        );
        ratios.push(exported / baseline);
    }
    let ratio = median(ratios);
    let of = if repeat > 1 { " (median)" } else { "" };
    let pass = ratio >= EXPORTER_MIN_RATIO;
    if !args.no_program_cost {
        program_cost(&bin, loopdev.name(), &mut load)?;
    }
    println!("ratio: {ratio:.3}{of}");
    println!(
        "target (ratio >= {EXPORTER_MIN_RATIO}): {}",
        if pass { "PASS" } else { "FAIL" }
    );
    Ok(if pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `iosched-trace exporter -d DEV` as a child on a free loopback port, with a thread that
/// scrapes it every second; killed (by pid) on drop.
pub(super) struct ExporterChild {
    child: std::process::Child,
    port: u16,
    stop: Arc<AtomicBool>,
    scrapes: Arc<AtomicU64>,
    scraper: Option<std::thread::JoinHandle<()>>,
}

fn get_metrics(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    Ok(text)
}

impl ExporterChild {
    pub(super) fn start(bin: &Path, dev: &str) -> anyhow::Result<ExporterChild> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new(bin)
            .args(["exporter", "-d", dev])
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting iosched-trace exporter")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                eprintln!("  [exporter] {line}");
                let _ = tx.send(line);
            }
        });
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("listening on") => break,
                Ok(_) => continue,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("the exporter did not start listening within 30 s");
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let scrapes = Arc::new(AtomicU64::new(0));
        let scraper = {
            let (stop, scrapes) = (Arc::clone(&stop), Arc::clone(&scrapes));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if get_metrics(port).is_ok() {
                        scrapes.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        Ok(ExporterChild {
            child,
            port,
            stop,
            scrapes,
            scraper: Some(scraper),
        })
    }

    /// The exporter's process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A last scrape (the requests it could not account, but for those it could not have:
    /// queued before it started, or in flight then), then SIGTERM: (scrapes, lost).
    pub(super) fn stop(mut self) -> anyhow::Result<(u64, f64)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(s) = self.scraper.take() {
            let _ = s.join();
        }
        let text = get_metrics(self.port).context("the last scrape")?;
        let lost = text
            .lines()
            .filter(|l| l.starts_with("iosched_lost_events_total"))
            .filter(|l| !l.contains("no_queue_time") && !l.contains("untracked_request"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the exporter exited {status} on SIGTERM");
        }
        Ok((self.scrapes.load(Ordering::Relaxed), lost))
    }
}

impl Drop for ExporterChild {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
