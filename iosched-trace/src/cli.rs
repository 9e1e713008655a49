//! Command line: clap's raw flags, then a validated configuration per command, so errors in
//! arguments are reported before anything touches the kernel.
//!
//! Owns: argument syntax and validation. Must not: load programs or open recordings.

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand};
use iosched_core::units::parse_size;

use crate::devices::{Disk, Sysfs};

/// `--version`: the release and the commit it was built from (build.rs).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("IOSCHED_TRACE_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "iosched-trace",
    version = VERSION,
    about = "eBPF block-layer tracer: who waited, where, and what the I/O scheduler did meanwhile"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Whether this host can trace, and what a recording will get: kernel, BTF, lockdown,
    /// privileges, tracepoints, the blk tracer, schedulers, devices. Exits non-zero, with the
    /// reasons, when recording will not work.
    Check(CheckArgs),
    /// Record every block-layer event of the given devices into a file.
    Record(RecordArgs),
    /// Print a trace (a recording, or blktrace files) as blkparse-style text (or JSON
    /// lines), in time order.
    Dump(DumpArgs),
    /// Where the time went: latency by stage (btt's Q2G..Q2C plus Q2D), merges, queue depth,
    /// idling waste and service slices, per device, process and cgroup.
    Report(ReportArgs),
    /// Write a synthetic recording (for benchmarks): processes with requests in flight on one
    /// device, complete lives, known counts.
    #[command(hide = true)]
    Synth(SynthArgs),
    /// Convert a trace to another format: blktrace per-CPU files, a recording, or a Perfetto
    /// trace for the Perfetto UI.
    Convert(ConvertArgs),
    /// Watch devices live: per process, throughput, scheduler (Q2D) and device (D2C)
    /// latency, idling waste; refreshed every interval (q quits, ? for keys).
    Live(LiveArgs),
    /// Replay a trace's workload through a scheduler model: predicted throughput, latency,
    /// merges and idling, beside the recording's own numbers.
    Replay(ReplayArgs),
    /// Why the recorded scheduler was slow here: ranked findings with their evidence and a
    /// model-estimated effect of the fix.
    Explain(ExplainArgs),
    /// Measure what each I/O scheduler costs this host per request (a scratch RAM-backed loop
    /// device, about 15 s; root) and write the host profile `record` copies into recordings.
    Calibrate(CalibrateArgs),
    /// Serve block-layer metrics to Prometheus (a daemon; root): latency histograms per
    /// device and operation, requests and bytes per cgroup, idling waste, depths, aggregated
    /// in the kernel (docs/EXPORTER.md).
    Exporter(ExporterArgs),
    /// Replay speed of the scheduler models on a synthetic workload (`cargo xtask bench
    /// replay`): one JSON line per scheduler.
    #[command(hide = true)]
    ModelBench(ModelBenchArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Do not try loading the programs (the kernel's verifier's verdict is then not known).
    #[arg(long)]
    pub no_load: bool,
}

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Where to write the host profile (JSON).
    #[arg(short = 'o', long = "output", value_name = "FILE",
          default_value = crate::calibrate::DEFAULT_PROFILE_PATH)]
    pub output: PathBuf,
    /// Print the profile as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ExporterArgs {
    /// Address to listen on: IP:PORT, [IPv6]:PORT, or :PORT for every IPv4 interface.
    /// Loopback only by default: expose it deliberately.
    #[arg(
        long = "web.listen-address",
        value_name = "ADDR",
        default_value = "127.0.0.1:9436"
    )]
    pub listen_address: String,
    /// Path the metrics are served on.
    #[arg(
        long = "web.telemetry-path",
        value_name = "PATH",
        default_value = "/metrics"
    )]
    pub telemetry_path: String,
    /// Device to trace by name (sda, /dev/sda). Repeatable. Default: every request-based
    /// disk, including ones that appear later.
    #[arg(short = 'd', long = "device", value_name = "NAME")]
    pub devices: Vec<String>,
    /// Cgroups exposed by name, the busiest by requests; the rest are summed as
    /// `cgroup="other"` (1 to 1000).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub cgroups: usize,
}

impl ExporterArgs {
    pub fn validate(&self) -> Result<crate::exporter::ExporterConfig, ArgError> {
        let addr = self.listen_address.trim();
        let bad_addr = || ArgError::ListenAddress(addr.to_string());
        // `:9436`, as Prometheus exporters take it: every interface (IPv4; `[::]:9436` for
        // both families).
        let listen = match addr.strip_prefix(':') {
            Some(port) => std::net::SocketAddr::from((
                std::net::Ipv4Addr::UNSPECIFIED,
                port.parse::<u16>().map_err(|_| bad_addr())?,
            )),
            None => addr.parse().map_err(|_| bad_addr())?,
        };
        let path = &self.telemetry_path;
        if !path.starts_with('/')
            || path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
        {
            return Err(ArgError::TelemetryPath(path.clone()));
        }
        if !(1..=1000).contains(&self.cgroups) {
            return Err(ArgError::Cgroups(self.cgroups));
        }
        let mut devices: Vec<String> = Vec::new();
        for spec in &self.devices {
            let name = spec.strip_prefix("/dev/").unwrap_or(spec);
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                return Err(ArgError::DeviceName(spec.clone()));
            }
            if !devices.iter().any(|d| d == name) {
                devices.push(name.to_string());
            }
        }
        Ok(crate::exporter::ExporterConfig {
            listen,
            telemetry_path: path.clone(),
            devices,
            max_cgroups: self.cgroups,
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct ModelBenchArgs {
    /// Requests (bios) in the workload.
    #[arg(long, default_value_t = 2_000_000)]
    pub requests: u32,
    #[arg(long, default_value_t = 16)]
    pub processes: u32,
    /// Runs per scheduler; the fastest is reported (the machine is shared).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Only these models (comma-separated names), e.g. to profile one.
    #[arg(long, value_delimiter = ',')]
    pub sched: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A trace (recording or blktrace files).
    pub file: PathBuf,
    /// Scheduler model: none, mq-deadline, bfq, kyber, cfq (legacy, before 4.20) (default:
    /// the recorded one). Settings
    /// may follow a colon: `bfq:slice_idle=0,kernel=5.2`.
    #[arg(long, value_name = "SCHED")]
    pub sched: Option<String>,
    /// A tunable (sysfs name, e.g. slice_idle=0, low_latency=0, fifo_batch=1), or a model
    /// switch (kernel=5.2, depth=32, nomerges=2, iodepth=256, cgroups=0; ioprio=be/5: every
    /// process at that I/O priority; continue=0|1|auto: continue time-bounded regular
    /// processes, such as fio --runtime jobs, to their end, default auto: where the trace
    /// shows such a job). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Several configurations side by side, the recording first: `bfq,mq-deadline,bfq:slice_idle=0`.
    #[arg(long, value_name = "S1,S2,...", value_delimiter = ',')]
    pub compare: Vec<String>,
    /// The device to replay (name or major:minor); needed when the trace has several.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub device: Option<String>,
    /// A device model (JSON) instead of the one fitted from the trace.
    #[arg(long, value_name = "FILE")]
    pub device_profile: Option<PathBuf>,
    /// Scheduler costs of the host the recording was made on (`iosched-trace calibrate`
    /// writes one). Default: the profile in the recording, else this host's
    /// /var/lib/iosched-trace/host-profile.json if the recording was made here, else the
    /// documented defaults (BFQ 1.9 µs, mq-deadline 0.7 µs per request)
    #[arg(long, value_name = "FILE")]
    pub host_profile: Option<PathBuf>,
    /// Print the model's first N decisions (BFQ, CFQ: in-service switches, idling and why,
    /// expirations, injections, CFQ's slices).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub decisions: usize,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the recorded run's report and the predicted runs beside it (totals and per
    /// process) as one self-contained HTML page to FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub html: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// A trace (recording or blktrace files).
    pub file: PathBuf,
    /// The device to explain (name or major:minor); needed when the trace has several.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub device: Option<String>,
    /// A device model (JSON) instead of the one fitted from the trace.
    #[arg(long, value_name = "FILE")]
    pub device_profile: Option<PathBuf>,
    /// Scheduler costs of the host the recording was made on (`iosched-trace calibrate`
    /// writes one). Default: the profile in the recording, else this host's
    /// /var/lib/iosched-trace/host-profile.json if the recording was made here, else the
    /// documented defaults (BFQ 1.9 µs, mq-deadline 0.7 µs per request)
    #[arg(long, value_name = "FILE")]
    pub host_profile: Option<PathBuf>,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the findings and the report of the explained device as one self-contained
    /// HTML page to FILE (as `report --html`, the findings above the plots).
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub html: Option<PathBuf>,
}

/// `2026-12-01T10:00:00` (UTC), `2026-12-01`, or seconds since the epoch: ns since the epoch.
fn parse_wall_clock(s: &str) -> Result<u64, String> {
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(secs * 1_000_000_000);
    }
    let bad = || format!("{s:?}: use YYYY-MM-DDTHH:MM:SS (UTC) or seconds since the epoch");
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let num = |v: &str| v.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.trim_end_matches('Z').split(':').collect();
    if d.len() != 3 || t.len() != 3 {
        return Err(bad());
    }
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (hh, mm, ss) = (num(t[0])?, num(t[1])?, num(t[2])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return Err(bad());
    }
    // Civil date to days since the epoch: H. Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs)
        .map(|s| s * 1_000_000_000)
        .map_err(|_| bad())
}

#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// At least this many events (e.g. 50M).
    #[arg(long, value_parser = parse_size, default_value = "1M")]
    pub events: u64,
    #[arg(long, default_value_t = 8)]
    pub processes: u32,
    #[arg(long, default_value_t = 32)]
    pub depth: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Instead of the random load: a modelled scenario (`dsync-journal`: a dd O_DSYNC writer
    /// and jbd2 waiting on each other; `mixed`: readers and a writer), as the scheduler model would run it.
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,
    /// With --scenario: the scheduler it runs under, with settings (`bfq:kernel=5.2`;
    /// default bfq). Without: the scheduler the device is said to have (default none).
    #[arg(long, value_name = "SCHED")]
    pub sched: Option<String>,
    /// The host name the recording says it was made on (default: this one's).
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// The wall-clock time of the first event, UTC (`2026-12-01T10:00:00`, or seconds
    /// since the epoch); default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_wall_clock)]
    pub wall_clock: Option<u64>,
    /// Random load: added to each request's time in the device, µs.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub service_us: u64,
    /// Random load: every N issues the device idles --idle-ms with requests waiting.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub idle_every: u64,
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub idle_ms: f64,
    /// Random load: one bio per request (no merges).
    #[arg(long)]
    pub single_bio: bool,
    /// With --scenario: how many I/Os (dd writes for dsync-journal).
    #[arg(long, default_value_t = 1000)]
    pub ios: u32,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A trace: an iosched-trace recording (or blktrace files, where supported).
    pub file: PathBuf,
    /// The report as one JSON document (schema: docs/REPORT.md).
    #[arg(long)]
    pub json: bool,
    /// Write the report as one self-contained HTML page to FILE (timelines per process,
    /// sector against time, throughput, queue depth, latency plots, the report's tables);
    /// nothing on stdout.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub html: Option<PathBuf>,
    /// Start of the window, seconds after the trace's first event.
    #[arg(long, value_name = "SECS")]
    pub from: Option<f64>,
    /// End of the window, seconds after the trace's first event.
    #[arg(long, value_name = "SECS")]
    pub to: Option<f64>,
    /// Only this device (name or major:minor). Repeatable.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Only I/O submitted by this pid (or tgid). Repeatable.
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Only I/O submitted by tasks of this name. Repeatable.
    #[arg(long, value_name = "COMM")]
    pub comm: Vec<String>,
    /// Only I/O charged to this cgroup (path substring or numeric id). Repeatable.
    #[arg(long, value_name = "CGROUP")]
    pub cgroup: Vec<String>,
    /// Service slices by cgroup instead of by process.
    #[arg(long)]
    pub slices_by_cgroup: bool,
    /// How many of the longest idle-with-pending intervals to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Idle-with-pending gaps shorter than this many µs count as block-layer transit, not
    /// idling waste.
    #[arg(long, value_name = "USECS", default_value_t = 50.0)]
    pub min_idle_us: f64,
    /// FILE is still being written by `iosched-trace record -o FILE`: read it as it grows
    /// (like `tail -f`), print a line per device for each --interval of trace time as the
    /// events arrive, and the full report once the recorder closes the file; on Ctrl-C, the
    /// report of what was read so far. Waits up to 30 s for FILE to appear.
    #[arg(long)]
    pub follow: bool,
    /// With --follow: seconds of trace time per interval line.
    #[arg(long, value_name = "SECS", default_value_t = 1.0, requires = "follow")]
    pub interval: f64,
}

impl ReportArgs {
    /// `--interval`, checked (used with --follow).
    pub fn interval(&self) -> Result<Duration, ArgError> {
        if self.interval.is_finite() && (0.01..=86_400.0).contains(&self.interval) {
            Ok(Duration::from_secs_f64(self.interval))
        } else {
            Err(ArgError::Interval("--interval", self.interval))
        }
    }

    /// The analysis options, with the window checked.
    pub fn options(&self) -> Result<iosched_core::analysis::Options, ArgError> {
        let secs = |flag: &'static str, v: Option<f64>| match v {
            Some(s) if !(s.is_finite() && s >= 0.0) => Err(ArgError::Window(flag, s)),
            Some(s) => Ok(Some((s * 1e9) as u64)),
            None => Ok(None),
        };
        let from_ns = secs("--from", self.from)?;
        let to_ns = secs("--to", self.to)?;
        if let (Some(f), Some(t)) = (from_ns, to_ns)
            && t <= f
        {
            return Err(ArgError::EmptyWindow);
        }
        Ok(iosched_core::analysis::Options {
            from_ns,
            to_ns,
            devices: self.devices.clone(),
            pids: self.pid.clone(),
            comms: self.comm.clone(),
            cgroups: self.cgroup.clone(),
            slices_by_cgroup: self.slices_by_cgroup,
            top_intervals: self.top,
            min_idle_ns: Some(secs("--min-idle-us", Some(self.min_idle_us / 1e6))?.unwrap_or(0)),
        })
    }
}

/// Output formats of `record` and `convert`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// iosched-trace's own recording (one file).
    #[default]
    Recording,
    /// blktrace per-CPU files `DEV.blktrace.CPU` in a directory (blkparse, btt, fio).
    Blktrace,
}

/// `record --format`, in the recorder's terms.
impl From<OutputFormat> for crate::recorder::Format {
    fn from(format: OutputFormat) -> Self {
        match format {
            OutputFormat::Recording => crate::recorder::Format::Recording,
            OutputFormat::Blktrace => crate::recorder::Format::Blktrace,
        }
    }
}

/// Formats `convert` writes: those of `record`, and Perfetto's for viewing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ConvertFormat {
    /// iosched-trace's own recording (one file).
    Recording,
    /// blktrace per-CPU files `DEV.blktrace.CPU` in a directory (blkparse, btt, fio).
    Blktrace,
    /// A Perfetto trace (protobuf) for the Perfetto UI (ui.perfetto.dev, "Open trace file"):
    /// a track per process with each request as a slice, device counters, idling waste,
    /// service slices, wakeups as arrows.
    Perfetto,
    /// Parquet tables for SQL engines over many hosts (docs/FLEET.md): a row per request
    /// under DIR/host=H/date=D/, a row per idling-waste interval under DIR/idle/host=H/date=D/.
    Parquet,
}

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// A recording, or blktrace files (a file, a directory, or the DEV of DEV.blktrace.N).
    pub file: PathBuf,
    /// Output format.
    #[arg(long = "to", value_enum, value_name = "FORMAT")]
    pub to: ConvertFormat,
    /// Output: a directory for blktrace and parquet, a file for a recording or a Perfetto
    /// trace.
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: PathBuf,
    /// Perfetto: start of the span drawn, seconds after the trace's first event.
    #[arg(long, value_name = "SECS")]
    pub from: Option<f64>,
    /// Perfetto: end of the span drawn, seconds after the trace's first event (`--to` is
    /// the format).
    #[arg(long, value_name = "SECS")]
    pub until: Option<f64>,
    /// Perfetto: only this device (name or major:minor). Repeatable.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Perfetto: only the tracks of I/O submitted by this pid (or tgid); device tracks
    /// stay whole. Repeatable.
    #[arg(long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// Perfetto: only the tracks of I/O submitted by tasks of this name. Repeatable.
    #[arg(long, value_name = "COMM")]
    pub comm: Vec<String>,
    /// Parquet: the host partition (`host=NAME`); default: the recording's host name.
    #[arg(long, value_name = "NAME")]
    pub host: Option<String>,
    /// Parquet: the date partition of every row (`date=YYYY-MM-DD`); default: each row's
    /// UTC date on the recording's wall clock (needed for blktrace files, which have none).
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub date: Option<String>,
}

impl ConvertArgs {
    /// The Perfetto export's options, with the span checked; filters are refused for the
    /// formats that convert whole traces.
    pub fn perfetto_options(&self) -> Result<crate::views::perfetto::Options, ArgError> {
        let secs = |flag: &'static str, v: Option<f64>| match v {
            Some(s) if !(s.is_finite() && s >= 0.0) => Err(ArgError::Window(flag, s)),
            Some(s) => Ok(Some((s * 1e9) as u64)),
            None => Ok(None),
        };
        let from_ns = secs("--from", self.from)?;
        let until_ns = secs("--until", self.until)?;
        if let (Some(f), Some(u)) = (from_ns, until_ns)
            && u <= f
        {
            return Err(ArgError::EmptySpan);
        }
        Ok(crate::views::perfetto::Options {
            from_ns,
            until_ns,
            devices: self.devices.clone(),
            select: crate::views::perfetto::Selection {
                pids: self.pid.clone(),
                comms: self.comm.clone(),
            },
            warn_bytes: PERFETTO_WARN_BYTES,
        })
    }

    /// Refuses filters with a format that converts whole traces.
    pub fn check_whole(&self) -> Result<(), ArgError> {
        let filtered = self.from.is_some()
            || self.until.is_some()
            || !self.devices.is_empty()
            || !self.pid.is_empty()
            || !self.comm.is_empty();
        if filtered && self.to != ConvertFormat::Perfetto {
            return Err(ArgError::FiltersNeedPerfetto);
        }
        if (self.host.is_some() || self.date.is_some()) && self.to != ConvertFormat::Parquet {
            return Err(ArgError::PartitionsNeedParquet);
        }
        Ok(())
    }
}

/// The Perfetto UI holds a trace in the browser's memory, about 2 GB at most: warn well
/// before.
pub const PERFETTO_WARN_BYTES: u64 = 1_500_000_000;

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Device to trace: /dev/sda, sda, 8:0 (a partition means its disk). Repeatable. Default:
    /// every request-based (blk-mq) device.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Output file (with `--format blktrace`: a directory for the per-CPU files).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Recording, value_name = "FORMAT")]
    pub format: OutputFormat,
    /// Stop after this many seconds (otherwise on Ctrl-C / SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Ring buffer size shared by all CPUs, e.g. 64M (a power of two, at least 64K).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size)]
    pub ring_size: u64,
    /// Wake the reader once this much data waits in the ring (0: on every event). Larger
    /// batches cost less per event; the reader also drains every 100 ms regardless.
    #[arg(long, value_name = "BYTES", default_value = "256K", value_parser = parse_size)]
    pub wakeup: u64,
    /// Also trace block_io_start/block_io_done (request accounting start/end).
    #[arg(long)]
    pub extra_events: bool,
    /// Record every plug and unplug as an event (blktrace P/U/UT). By default they are only
    /// counted per device in the kernel: on a fast device they are a third of the events of
    /// a plain read, and btt's plug figures (plugs, unplugs, requests per unplug) need only
    /// the counts. Implied by `--format blktrace`.
    #[arg(long, conflicts_with = "no_plugs")]
    pub plug_events: bool,
    /// Leave out plug and unplug entirely, not even counted: the report then has no plug
    /// figures.
    #[arg(long)]
    pub no_plugs: bool,
    /// Also record scheduler wakeups of tasks that queued I/O on a traced device (who woke
    /// whom: jbd2 waking a writer after its journal commit, for example). Not to be confused
    /// with --wakeup, the ring buffer's reader wake-up threshold.
    #[arg(long)]
    pub wakeups: bool,
    /// Print notes on optional probes, and the verifier log if a program is refused.
    #[arg(short, long)]
    pub verbose: bool,
    /// Also record the I/O scheduler's own decision log (BFQ's messages, through the ftrace
    /// blk tracer; tracefs settings are restored afterwards).
    #[arg(long)]
    pub sched_log: bool,
    /// Benchmark only (`cargo xtask bench capture --split`): drain and decode every event,
    /// store none. What is left of the workload's speed is the cost of the kernel side.
    #[arg(long, hide = true)]
    pub discard_events: bool,
    /// Host profile to copy into the recording's header (written by `calibrate`). Default:
    /// /var/lib/iosched-trace/host-profile.json, if it exists.
    #[arg(long, value_name = "FILE")]
    pub host_profile: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// A recording made by `iosched-trace record`, or blktrace files (a file, a directory,
    /// or the DEV of DEV.blktrace.N).
    pub file: PathBuf,
    /// One JSON object per event (and a final summary object) instead of text.
    #[arg(long)]
    pub json: bool,
    /// FILE is still being written by `iosched-trace record -o FILE`: print its events as
    /// they arrive (like `tail -f`), until the recorder closes the file or Ctrl-C. Waits up
    /// to 30 s for FILE to appear.
    #[arg(long)]
    pub follow: bool,
}

#[derive(Debug, clap::Args)]
pub struct LiveArgs {
    /// Device to watch: /dev/sda, sda, 8:0. Repeatable (`d` switches). Default: every
    /// request-based (blk-mq) device.
    #[arg(short = 'd', long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Seconds per interval (one refresh, one batch snapshot).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// Plain text on stdout every interval, no terminal needed (like `top -b`).
    #[arg(long)]
    pub batch: bool,
    /// With --batch: one JSON object per interval (each device's report as `report --json`).
    #[arg(long, requires = "batch")]
    pub json: bool,
    /// With --batch: stop after this many intervals.
    #[arg(long, value_name = "N", requires = "batch")]
    pub count: Option<u64>,
    /// Seconds of history in the charts.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub history: f64,
    /// Ring buffer size shared by all CPUs (a power of two, at least 64K).
    #[arg(long, value_name = "BYTES", default_value = "64M", value_parser = parse_size)]
    pub ring_size: u64,
    /// Wake the collector once this much data waits in the ring (it also drains every
    /// 50 ms).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    pub wakeup: u64,
    /// Print notes on optional probes before starting.
    #[arg(short, long)]
    pub verbose: bool,
    /// Benchmark only (`cargo xtask bench live --split`): drain and decode every event, then
    /// drop it; the view stays empty. What is left of the workload's speed is the cost of the
    /// kernel side.
    #[arg(long, hide = true)]
    pub discard_events: bool,
}

impl LiveArgs {
    pub fn validate(&self, sysfs: &Sysfs) -> Result<crate::live::LiveConfig, ArgError> {
        let positive = |flag: &'static str, v: f64| {
            if v.is_finite() && (0.01..=86_400.0).contains(&v) {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(ArgError::Interval(flag, v))
            }
        };
        let interval = positive("--interval", self.interval)?;
        let history = positive("--history", self.history)?;
        if self.count == Some(0) {
            return Err(ArgError::Count);
        }
        let record = RecordArgs {
            devices: self.devices.clone(),
            output: PathBuf::new(),
            format: OutputFormat::Recording,
            duration: None,
            ring_size: self.ring_size,
            wakeup: self.wakeup,
            extra_events: false,
            no_plugs: false,
            plug_events: false,
            wakeups: false,
            sched_log: false,
            discard_events: false,
            host_profile: None,
            verbose: self.verbose,
        };
        let valid = record.validate(sysfs)?;
        if let Some(d) = valid.disks.iter().find(|d| !d.request_based) {
            return Err(ArgError::BioBased(d.name.clone()));
        }
        if valid.disks.is_empty() {
            return Err(ArgError::NoDevices);
        }
        Ok(crate::live::LiveConfig {
            disks: valid.disks,
            interval,
            batch: self.batch,
            json: self.json,
            count: self.count,
            history,
            ring_size: valid.ring_size,
            wakeup_bytes: valid.wakeup,
            verbose: self.verbose,
            discard_events: self.discard_events,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    #[error("{0} {1}: must be a number of seconds between 0.01 and 86400")]
    Interval(&'static str, f64),
    #[error("--count 0: must be at least 1")]
    Count,
    #[error(
        "{0} is bio-based: it has no request events, so there is nothing to show per request; watch a blk-mq device such as loop0 or sda"
    )]
    BioBased(String),
    #[error("no request-based (blk-mq) block devices found; name one with -d")]
    NoDevices,
    #[error("--ring-size {0}: must be a power of two between 64K and 2G")]
    RingSize(u64),
    #[error("--wakeup {0}: must be smaller than the ring size")]
    Wakeup(u64),
    #[error("--duration {0}: must be a positive number of seconds")]
    Duration(f64),
    #[error("{0} {1}: must be a number of seconds >= 0")]
    Window(&'static str, f64),
    #[error("--to must be after --from")]
    EmptyWindow,
    #[error("--until must be after --from")]
    EmptySpan,
    #[error("--from, --until, -d, --pid and --comm apply to --to perfetto only")]
    FiltersNeedPerfetto,
    #[error("--host and --date apply to --to parquet only")]
    PartitionsNeedParquet,
    #[error(
        "--web.listen-address {0:?}: use IP:PORT (127.0.0.1:9436, [::1]:9436) or :PORT for every interface"
    )]
    ListenAddress(String),
    #[error("--web.telemetry-path {0:?}: must start with / and hold no spaces, ? or #")]
    TelemetryPath(String),
    #[error("--cgroups {0}: must be between 1 and 1000")]
    Cgroups(usize),
    #[error("-d {0:?}: a device name such as sda or /dev/sda")]
    DeviceName(String),
    #[error(transparent)]
    Device(#[from] crate::devices::DeviceError),
}

/// `record`, validated.
pub struct ValidRecord {
    pub disks: Vec<Disk>,
    pub ring_size: u32,
    pub wakeup: u64,
    pub duration: Option<Duration>,
}

impl RecordArgs {
    pub fn validate(&self, sysfs: &Sysfs) -> Result<ValidRecord, ArgError> {
        if !self.ring_size.is_power_of_two() || !(64 << 10..=2 << 30).contains(&self.ring_size) {
            return Err(ArgError::RingSize(self.ring_size));
        }
        if self.wakeup >= self.ring_size {
            return Err(ArgError::Wakeup(self.wakeup));
        }
        let duration = match self.duration {
            Some(secs) if !(secs.is_finite() && secs > 0.0) => {
                return Err(ArgError::Duration(secs));
            }
            Some(secs) => Some(Duration::from_secs_f64(secs)),
            None => None,
        };
        let mut disks: Vec<Disk> = Vec::new();
        if self.devices.is_empty() {
            disks = sysfs.request_based_disks()?;
        } else {
            for spec in &self.devices {
                let disk = sysfs.resolve(spec)?;
                if !disks.contains(&disk) {
                    disks.push(disk);
                }
            }
        }
        Ok(ValidRecord {
            disks,
            ring_size: self.ring_size as u32,
            wakeup: self.wakeup,
            duration,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> RecordArgs {
        let mut argv = vec!["iosched-trace", "record", "-o", "x"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Record(r) => r,
            _ => unreachable!(),
        }
    }

    fn convert(extra: &[&str]) -> ConvertArgs {
        let mut argv = vec!["iosched-trace", "convert", "t.istrace", "-o", "x"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Convert(c) => c,
            _ => unreachable!(),
        }
    }

    #[test]
    fn convert_filters_are_checked_and_only_for_perfetto() {
        let p = |a: &[&str]| {
            let mut v = vec!["--to", "perfetto"];
            v.extend_from_slice(a);
            convert(&v)
        };
        let o = p(&[
            "--from", "1.5", "--until", "2", "--pid", "7", "--comm", "dd", "-d", "sda",
        ])
        .perfetto_options()
        .unwrap();
        assert_eq!(
            (o.from_ns, o.until_ns),
            (Some(1_500_000_000), Some(2_000_000_000))
        );
        assert_eq!(o.select.pids, [7]);
        assert_eq!(o.select.comms, ["dd"]);
        assert_eq!(o.devices, ["sda"]);
        assert_eq!(o.warn_bytes, PERFETTO_WARN_BYTES);
        let err = |a: ConvertArgs| a.perfetto_options().err().unwrap().to_string();
        assert!(err(p(&["--from", "2", "--until", "1"])).contains("--until must be after"));
        assert!(err(p(&["--from=-1"])).contains(">= 0"));
        assert!(p(&["--pid", "3"]).check_whole().is_ok());
        let whole = convert(&["--to", "blktrace", "--pid", "3"]).check_whole();
        assert!(
            whole
                .err()
                .unwrap()
                .to_string()
                .contains("--to perfetto only")
        );
        assert!(convert(&["--to", "recording"]).check_whole().is_ok());
        // `record --format` does not take perfetto: it is convert's alone.
        let r = Cli::try_parse_from(["iosched-trace", "record", "-o", "x", "--format", "perfetto"]);
        assert!(r.is_err());
    }

    fn exporter(extra: &[&str]) -> Result<crate::exporter::ExporterConfig, String> {
        let mut argv = vec!["iosched-trace", "exporter"];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Exporter(a) => a.validate().map_err(|e| e.to_string()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn exporter_flags_are_prometheus_style_and_checked() {
        let c = exporter(&[]).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:9436");
        assert_eq!(c.telemetry_path, "/metrics");
        assert!(c.devices.is_empty());
        assert_eq!(c.max_cgroups, 20);
        let c = exporter(&[
            "--web.listen-address=:9500",
            "--web.telemetry-path",
            "/m",
            "-d",
            "sda",
            "--device",
            "/dev/nvme0n1",
            "-d",
            "sda",
            "--cgroups",
            "1000",
        ])
        .unwrap();
        assert_eq!(c.listen.to_string(), "0.0.0.0:9500");
        assert_eq!(c.telemetry_path, "/m");
        assert_eq!(c.devices, ["sda", "nvme0n1"]);
        assert_eq!(c.max_cgroups, 1000);
        let v6 = exporter(&["--web.listen-address", "[::1]:9436"]).unwrap();
        assert_eq!(v6.listen.to_string(), "[::1]:9436");
        let err = |a: &[&str]| exporter(a).unwrap_err();
        for bad in ["localhost:9436", ":", ":99999", "9436", "1.2.3.4"] {
            assert!(
                err(&["--web.listen-address", bad]).contains("use IP:PORT"),
                "{bad}"
            );
        }
        for bad in ["metrics", "/a b", "/m?x"] {
            assert!(err(&["--web.telemetry-path", bad]).contains("must start with /"));
        }
        assert!(err(&["--cgroups", "0"]).contains("between 1 and 1000"));
        assert!(err(&["--cgroups", "1001"]).contains("between 1 and 1000"));
        assert!(err(&["-d", "/dev/"]).contains("a device name"));
        assert!(err(&["-d", "a/b"]).contains("a device name"));
    }

    #[test]
    fn bad_values_are_refused_before_any_device_lookup() {
        let sysfs = Sysfs::at("/nonexistent");
        let err = |a: &[&str]| args(a).validate(&sysfs).err().unwrap().to_string();
        assert!(err(&["--ring-size", "3M"]).contains("power of two"));
        assert!(err(&["--ring-size", "4K"]).contains("power of two"));
        assert!(err(&["--wakeup", "64M"]).contains("smaller than the ring"));
        assert!(err(&["--duration", "0"]).contains("positive"));
        assert!(err(&["-d", "nosuchdisk"]).contains("no such block device: nosuchdisk"));
    }
}
