//! `iosched-trace record`: drives a capture [`Session`] into a [`RecordingWriter`] (or
//! blktrace files) until a signal, the duration or an error stops it, and keeps every
//! complete event on the way out.
//!
//! Owns: the record loop, the process table, progress output, periodic flushes.
//! Must not: know how events are encoded (record) or read from the kernel (capture).

use std::{
    collections::HashSet,
    fs::File,
    hash::BuildHasherDefault,
    io::{BufWriter, IsTerminal, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    capture::{
        CaptureOptions, ProgramSet,
        session::{Kernel, Session, describe_devices},
    },
    devices::Disk,
};
use iosched_core::{
    blktrace::BlktraceWriter,
    event::Event,
    record::{ClockBase, CpuSample, Header, HostProfile, ProcessInfo, RecordingWriter, Stats},
    units::{BytesStyle, human_bytes},
};

/// What `record` writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Our recording, one file.
    #[default]
    Recording,
    /// blktrace per-CPU files `DEV.blktrace.CPU` in a directory.
    Blktrace,
}

/// How a recording traces plug and unplug.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlugTracing {
    /// Counted per device in the kernel, written at each checkpoint (the default: btt's plug
    /// figures are counts and depths, and two events of the six of a plain read cost a
    /// fifth of a fast device's IOPS).
    Counted,
    /// Every plug and unplug as an event (`--plug-events`; implied by `--format blktrace`,
    /// whose readers expect P and U).
    Events,
    /// Not at all (`--no-plugs`).
    Off,
}

#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// Devices to trace; empty: every device.
    pub disks: Vec<Disk>,
    pub output: PathBuf,
    /// Our recording (a file) or blktrace per-CPU files (`output` is then a directory).
    pub format: Format,
    pub duration: Option<Duration>,
    pub ring_size: u32,
    pub wakeup_bytes: u64,
    pub extra_events: bool,
    /// How plug and unplug are traced.
    pub plugs: PlugTracing,
    /// Trace wakeups of tasks doing I/O (`--wakeups`).
    pub wakeups: bool,
    pub verbose: bool,
    /// One progress line, rewritten in place (only on a TTY).
    pub progress: bool,
    pub command_line: Vec<String>,
    /// Capture the scheduler's own messages (BFQ's decision log) through the ftrace blk
    /// tracer ([`crate::schedlog`]).
    pub sched_log: bool,
    /// Drop every drained event instead of storing it (`--discard-events`, for the
    /// capture benchmark's split of the cost between the kernel side and the recorder).
    pub discard_events: bool,
    /// The host's measured scheduler costs (`calibrate`), copied into the header.
    pub host_profile: Option<HostProfile>,
}

#[derive(Clone, Debug)]
pub struct RecordSummary {
    pub events: u64,
    pub bytes: u64,
    pub stats: Stats,
    pub duration: Duration,
    pub ended_by: String,
    /// The programs' own kernel time (all zero unless `kernel.bpf_stats_enabled` was 1).
    pub program_costs: Vec<crate::capture::ProgramCost>,
}

/// How often the file is flushed and the loss counters are saved: what a kill -9 can cost.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long to wait for a wake-up before draining anyway (events below the wake-up threshold).
/// The recording's write buffer gathers only the small chunks (processes, statistics):
/// an EVENTS chunk is larger, so `BufWriter` hands it to the file as it is, uncopied.
const SMALL_CHUNKS_BUFFER: usize = 16 << 10;
const _: () = assert!(SMALL_CHUNKS_BUFFER < iosched_core::record::DEFAULT_CHUNK_BYTES);
const IDLE_DRAIN: Duration = Duration::from_millis(100);
/// How often the machine's CPU time is sampled (a CPU chunk, besides the one at each
/// checkpoint): the model takes a workload's CPU use from the samples that bracket it, and
/// with a sample a second a 2 s fio run inside a 4 s recording was measured 56% busy where
/// the run itself kept it at least 84% busy (the idle second around it counted in).
/// A sample is a read of /proc/stat and getrusage, and a chunk of about a hundred bytes.
const CPU_SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Age after which every event is surely out of the kernel and stored (what `--follow`
/// readers take the CPU samples' times to promise).
const SETTLED_AFTER_NS: u64 = iosched_core::source::WRITER_SETTLED_NS;

pub async fn record(config: RecordConfig) -> anyhow::Result<RecordSummary> {
    let kernel = Kernel::prepare()?;
    if let Some(e) = &kernel.memlock_error
        && config.verbose
    {
        eprintln!("note: could not raise RLIMIT_MEMLOCK ({e}); fine on kernels >= 5.11");
    }
    let devices = describe_devices(&config.disks)?;
    let mut header = Header::for_this_host(devices, config.command_line.clone());
    header.online_cpus = Some(crate::system::online_cpus());
    header.host_profile = config.host_profile.clone();
    for disk in config.disks.iter().filter(|d| !d.request_based) {
        let note = format!(
            "{} is bio-based: it has no request-level events (no scheduler, no G/I/D/C of requests); only its bio events (Q, bio completion) are recorded",
            disk.name
        );
        eprintln!("warning: {note}");
        header.notes.push(note);
    }
    match config.plugs {
        PlugTracing::Counted => header.mark_plugs_counted(),
        PlugTracing::Events => {}
        PlugTracing::Off => header.mark_plugs_untraced(),
    }
    if kernel.blkio_v1 {
        header.notes.push(
            "cgroup ids are the submitting task's cgroup2 ids: the io controller is mounted as cgroup v1 blkio here"
                .into(),
        );
    } else if !kernel.layout.bio_cgroup {
        header.notes.push(
            "cgroup ids are the current task's: the bio blkcg chain is not readable on this kernel"
                .into(),
        );
    }

    let options = CaptureOptions {
        disks: config.disks.clone(),
        ring_size: config.ring_size,
        wakeup_bytes: config.wakeup_bytes,
        extra_events: config.extra_events,
        wakeups: config.wakeups,
        verbose: config.verbose,
        programs: if config.plugs == PlugTracing::Off {
            ProgramSet::NoPlugs
        } else {
            ProgramSet::All
        },
        plug_events: config.plugs == PlugTracing::Events,
    };
    // The kernel's own completion counters are read once the programs are attached.
    let mut session = Session::start(&options, &kernel)?;
    for (program, why) in session.skipped() {
        let note = format!("optional program {program} not attached: {why}");
        // Asked for by name (--wakeups): said even without -v.
        if config.verbose || *program == iosched_trace_common::PROG_WAKEUP {
            eprintln!("note: {note}");
        }
        header.notes.push(note);
    }
    if session
        .attached()
        .contains(&iosched_trace_common::PROG_WAKEUP)
    {
        // Tells readers that a recording without wakeups between two processes had none.
        header.notes.push(
            "scheduler wakeups of tasks that queued I/O on a traced device were traced (--wakeups)"
                .into(),
        );
    }

    // The scheduler's log: its guard restores tracefs when dropped, also on an error below.
    let sched_log = if config.sched_log {
        let disks: Vec<(String, iosched_core::event::Dev)> = config
            .disks
            .iter()
            .filter(|d| d.request_based)
            .map(|d| (d.name.clone(), d.dev))
            .collect();
        if !header
            .devices
            .iter()
            .any(|d| d.scheduler.as_deref() == Some("bfq"))
        {
            eprintln!(
                "note: --sched-log: no traced device uses bfq; other schedulers log little or nothing"
            );
        }
        Some(crate::schedlog::SchedLog::start(&disks).context("--sched-log")?)
    } else {
        None
    };

    let mut writer: Box<dyn Sink> = match config.format {
        Format::Recording => {
            let file = output_file(&config.output)?;
            Box::new(RecordingWriter::new(
                BufWriter::with_capacity(SMALL_CHUNKS_BUFFER, file),
                &header,
            )?)
        }
        Format::Blktrace => Box::new(BlktraceSink {
            writer: BlktraceWriter::create(&config.output, &header.devices, Some(header.clock))?,
            pushed: 0,
        }),
    };
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    eprintln!(
        "recording: ready ({} programs attached, devices: {}, output {})",
        session.attached().len(),
        if config.disks.is_empty() {
            "all".to_string()
        } else {
            config
                .disks
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        },
        config.output.display()
    );

    // Every request-based disk when tracing all of them (as the completion check does).
    let watched = if config.disks.is_empty() {
        crate::devices::Sysfs::default()
            .request_based_disks()
            .unwrap_or_default()
    } else {
        config.disks.clone()
    };
    let mut watch = crate::device_watch::DeviceWatch::new(&watched);
    let start_ns = ClockBase::now().monotonic_ns;
    writer.cpu(&crate::system::cpu_sample())?;
    let started = Instant::now();
    let deadline = config.duration.map(|d| started + d);
    let mut processes = ProcessTable::default();
    let mut batch = Vec::with_capacity(4096);
    let mut discarded = 0u64;
    let mut next_flush = started + FLUSH_EVERY;
    let mut next_cpu_sample = started + CPU_SAMPLE_EVERY;
    let mut last_progress = (started, 0u64);
    let progress = config.progress && std::io::stderr().is_terminal();

    let ended_by = loop {
        let ended = tokio::select! {
            biased;
            _ = sigint.recv() => Some("signal SIGINT"),
            _ = sigterm.recv() => Some("signal SIGTERM"),
            _ = sleep_until(deadline) => Some("duration"),
            result = session.next_batch(&mut batch, IDLE_DRAIN) => {
                result?;
                None
            }
        };
        if config.discard_events {
            discard(&mut batch, &mut discarded);
        } else {
            store(&mut batch, writer.as_mut(), &mut processes)?;
        }
        if let Some(reason) = ended {
            break reason;
        }
        let now = Instant::now();
        if now >= next_flush || now >= next_cpu_sample {
            for change in watch.poll(ClockBase::now().monotonic_ns) {
                eprintln!(
                    "note: {}; recording goes on (the events up to then are kept)",
                    change.describe(start_ns)
                );
            }
        }
        if now >= next_flush {
            // Everything produced half a second ago has been drained (CPUs send staged
            // events within tens of milliseconds), so the snapshot before that is settled.
            let mut stats = session.checkpoint(
                ClockBase::now()
                    .monotonic_ns
                    .saturating_sub(SETTLED_AFTER_NS),
            )?;
            stats.device_changes = watch.changes().to_vec();
            writer.checkpoint(&stats, &crate::system::cpu_sample())?;
            next_flush = now + FLUSH_EVERY;
            next_cpu_sample = now + CPU_SAMPLE_EVERY;
            if progress {
                let total = writer.events_pushed();
                let rate = (total - last_progress.1) as f64
                    / now.duration_since(last_progress.0).as_secs_f64();
                eprint!(
                    "\r{:>7.1}s  {:>10.0} events/s  {:>10} events  {:>9}  lost {}   ",
                    now.duration_since(started).as_secs_f64(),
                    rate,
                    total,
                    human_bytes(writer.bytes_written() as f64, BytesStyle::UpToTib),
                    stats.lost()
                );
                last_progress = (now, total);
            }
        } else if now >= next_cpu_sample {
            writer.cpu(&crate::system::cpu_sample())?;
            next_cpu_sample = now + CPU_SAMPLE_EVERY;
        }
    };

    let mut stats = session.stop(&mut batch)?;
    if config.verbose {
        eprintln!(
            "{} events from before every program was attached or after the first was detached left \
             out (the recording covers the time all were in place)",
            session.outside_window()
        );
    }
    watch.poll(ClockBase::now().monotonic_ns);
    stats.device_changes = watch.changes().to_vec();
    if config.discard_events {
        discard(&mut batch, &mut discarded);
        eprintln!("--discard-events: {discarded} events drained and dropped, none stored");
    }
    store(&mut batch, writer.as_mut(), &mut processes)?;
    if let Some(log) = sched_log {
        let (notes, warnings) = log.stop();
        for w in warnings {
            eprintln!("warning: --sched-log: {w}");
        }
        writer.notes(&notes)?;
        if config.verbose || notes.is_empty() {
            eprintln!("--sched-log: {} scheduler messages recorded", notes.len());
        }
    }
    for check in &stats.completions {
        if let Some(line) = check.describe_untraced() {
            eprintln!("warning: {line}");
        }
    }
    writer.cpu(&crate::system::cpu_sample())?;
    let bytes = writer.bytes_written();
    let total = writer.finish(&stats, started.elapsed().as_nanos() as u64, ended_by)?;
    if progress {
        eprintln!();
    }
    Ok(RecordSummary {
        events: total,
        bytes,
        stats,
        duration: started.elapsed(),
        ended_by: ended_by.to_string(),
        program_costs: session.program_costs().to_vec(),
    })
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Where recorded events go: our recording file, or blktrace per-CPU files.
trait Sink {
    fn add_process(&mut self, p: &ProcessInfo) -> anyhow::Result<()>;
    fn push(&mut self, ev: &Event) -> anyhow::Result<()>;
    /// Saves the loss counters and the CPU sample (where the format keeps them) and
    /// flushes: what a kill -9 would otherwise cost.
    fn checkpoint(&mut self, stats: &Stats, cpu: &CpuSample) -> anyhow::Result<()>;
    /// Saves a CPU sample (where the format keeps them): at the start and the end.
    fn cpu(&mut self, sample: &CpuSample) -> anyhow::Result<()>;
    fn events_pushed(&self) -> u64;
    fn bytes_written(&self) -> u64;
    /// Stores the scheduler's messages (`--sched-log`).
    fn notes(&mut self, notes: &[iosched_core::event::Note]) -> anyhow::Result<()>;
    /// Writes the end, syncs, and returns the number of events stored.
    fn finish(
        self: Box<Self>,
        stats: &Stats,
        duration_ns: u64,
        ended_by: &str,
    ) -> anyhow::Result<u64>;
}

impl Sink for RecordingWriter<BufWriter<File>> {
    fn add_process(&mut self, p: &ProcessInfo) -> anyhow::Result<()> {
        Ok(RecordingWriter::add_process(self, p)?)
    }

    fn push(&mut self, ev: &Event) -> anyhow::Result<()> {
        Ok(RecordingWriter::push(self, ev)?)
    }

    fn checkpoint(&mut self, stats: &Stats, cpu: &CpuSample) -> anyhow::Result<()> {
        self.write_stats(stats)?;
        self.write_cpu(cpu)?;
        Ok(self.flush()?)
    }

    fn cpu(&mut self, sample: &CpuSample) -> anyhow::Result<()> {
        Ok(self.write_cpu(sample)?)
    }

    fn events_pushed(&self) -> u64 {
        RecordingWriter::events_pushed(self)
    }

    fn bytes_written(&self) -> u64 {
        RecordingWriter::bytes_written(self)
    }

    fn notes(&mut self, notes: &[iosched_core::event::Note]) -> anyhow::Result<()> {
        Ok(self.write_notes(notes)?)
    }

    fn finish(
        mut self: Box<Self>,
        stats: &Stats,
        duration_ns: u64,
        ended_by: &str,
    ) -> anyhow::Result<u64> {
        self.write_stats(stats)?;
        // The writer counted every event it was given, per kind.
        let footer = self.footer(stats.clone(), duration_ns, ended_by);
        let mut out = RecordingWriter::finish(*self, &footer)?;
        out.flush()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        // A pipe has nothing to sync (and refuses it).
        if file.metadata().is_ok_and(|m| m.is_file()) {
            file.sync_all().context("syncing the recording")?;
        }
        Ok(footer.events_total)
    }
}

/// Where a recording goes: `path`, or with `-` standard output (a pipe or a file, never a
/// terminal), as a `File` of its own descriptor so that both take the same path. The format
/// is a sequence of self-checking chunks, so a stream cut anywhere reads back up to its last
/// whole chunk (docs/FORMAT.md).
fn output_file(path: &std::path::Path) -> anyhow::Result<File> {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    if path.as_os_str() != "-" {
        return iosched_core::output_file::create(path)
            .with_context(|| format!("cannot create {}", path.display()));
    }
    let stdout = std::io::stdout();
    anyhow::ensure!(
        !stdout.is_terminal(),
        "-o -: standard output is a terminal; pipe it (`| iosched-trace report -`) or redirect it to a file"
    );
    let fd = stdout
        .as_fd()
        .try_clone_to_owned()
        .context("-o -: duplicating standard output")?;
    Ok(File::from(fd))
}

/// blktrace files have no place for loss counters: the recorder reports them on stderr.
struct BlktraceSink {
    writer: BlktraceWriter,
    pushed: u64,
}

impl Sink for BlktraceSink {
    fn add_process(&mut self, _: &ProcessInfo) -> anyhow::Result<()> {
        // Process notes are written from the events themselves.
        Ok(())
    }

    fn push(&mut self, ev: &Event) -> anyhow::Result<()> {
        self.pushed += 1;
        Ok(self.writer.push(ev)?)
    }

    fn cpu(&mut self, _: &CpuSample) -> anyhow::Result<()> {
        // blktrace files have no place for it.
        Ok(())
    }

    fn checkpoint(&mut self, _: &Stats, _: &CpuSample) -> anyhow::Result<()> {
        // Events are released in time order a window behind the newest: only what is due
        // reaches the files here.
        Ok(self.writer.flush_files()?)
    }

    fn events_pushed(&self) -> u64 {
        self.pushed
    }

    fn bytes_written(&self) -> u64 {
        self.writer.bytes_written()
    }

    fn notes(&mut self, notes: &[iosched_core::event::Note]) -> anyhow::Result<()> {
        if !notes.is_empty() {
            eprintln!(
                "warning: --sched-log: blktrace files written here do not keep scheduler \
                 messages; {} dropped (record in our format to keep them)",
                notes.len()
            );
        }
        Ok(())
    }

    fn finish(self: Box<Self>, _: &Stats, _: u64, _: &str) -> anyhow::Result<u64> {
        let summary = self.writer.finish()?;
        if let Some(skipped) = summary.skipped_list() {
            eprintln!("note: not written (blktrace has no action for them): {skipped}");
        }
        Ok(summary.events_written)
    }
}

/// `--discard-events`: the events have fed the kernel-counter check (the session does that
/// for every event drained: both runs of the benchmark's split pay for it, and its warnings
/// stay true), and are then dropped.
fn discard(batch: &mut Vec<Event>, discarded: &mut u64) {
    *discarded += batch.len() as u64;
    batch.clear();
}

fn store(
    batch: &mut Vec<Event>,
    writer: &mut dyn Sink,
    processes: &mut ProcessTable,
) -> anyhow::Result<()> {
    for ev in batch.drain(..) {
        if let Some(info) = processes.first_sight(&ev) {
            writer.add_process(&info)?;
        }
        writer.push(&ev)?;
    }
    Ok(())
}

/// Tasks seen so far; each new one is written to the recording with its cgroup path.
#[derive(Default)]
struct ProcessTable {
    seen: HashSet<(u32, u64), BuildHasherDefault<TaskHasher>>,
    /// The task of the previous event: most events come in runs from one task, and this
    /// check is a small fraction of a hash lookup (which ran for each of ~1M events/s).
    last: Option<(u32, u64)>,
    cgroups: crate::system::CgroupPaths,
}

impl ProcessTable {
    fn first_sight(&mut self, ev: &Event) -> Option<ProcessInfo> {
        let task = (ev.pid, ev.cgroup_id);
        if self.last == Some(task) {
            return None;
        }
        self.last = Some(task);
        if !self.seen.insert(task) {
            return None;
        }
        Some(ProcessInfo {
            pid: ev.pid,
            tgid: ev.tgid,
            comm: ev.comm,
            cgroup_id: ev.cgroup_id,
            cgroup_path: self.cgroups.path(ev.cgroup_id),
        })
    }
}

/// A hasher for the few (pid, cgroup id) keys of the process table, looked up once per event
/// whose task differs from the previous one's: SipHash's protection against chosen keys is
/// not needed for kernel-assigned ids, and its cost showed in profiles of the recorder.
#[derive(Default)]
struct TaskHasher(u64);

impl std::hash::Hasher for TaskHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // FxHash's step: rotate, mix in, multiply by a large odd constant.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_table_reports_each_task_once_however_events_interleave() {
        let mut table = ProcessTable::default();
        let ev = |pid: u32, cgroup_id: u64| Event {
            pid,
            cgroup_id,
            ..iosched_core::record::test_support::sample_events(1)[0]
        };
        let mut firsts = Vec::new();
        for (pid, cg) in [
            (1, 10),
            (1, 10),
            (2, 10),
            (1, 10),
            (2, 10),
            (1, 11),
            (1, 10),
        ] {
            if let Some(info) = table.first_sight(&ev(pid, cg)) {
                firsts.push((info.pid, info.cgroup_id));
            }
        }
        assert_eq!(firsts, [(1, 10), (2, 10), (1, 11)]);
    }
}
