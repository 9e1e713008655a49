//! Our recording format (spec: docs/FORMAT.md): what a recording holds ([`Header`],
//! [`DeviceInfo`], [`ProcessInfo`], [`Stats`], [`Footer`]), how it is written
//! ([`RecordingWriter`]) and read back ([`RecordingReader`]), and [`TimeOrdered`], which turns
//! the arrival order of a recording into time order with bounded memory.
//!
//! This module owns the byte layout and the crash-safety rules (a file cut at any byte reads
//! back every complete chunk; a corrupt chunk is skipped with a warning, never misread). It
//! does no tracing and no rendering; `dump` renders, the recorder decides what to write.

mod codec;
mod host;
mod order;
mod reader;
mod sysfs;
mod writer;

use std::{collections::BTreeMap, io, path::PathBuf};

use serde::{Deserialize, Serialize};

use crate::event::{Comm, Dev, EventKind, Op, ReqFlags};

pub use codec::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, EVENT_RECORD_SIZE, EVENTS_PREFIX_LEN, FILE_HEADER_LEN,
    FILE_MAGIC, FORMAT_MAJOR, FORMAT_MINOR, MAX_CHUNK_PAYLOAD, chunk_crc, chunk_type,
};
pub use host::{
    CpuSample, CpuUse, DEFAULT_COSTS_SOURCE, HostProfile, SchedCost, parse_pid_stat_cpu,
};
pub use order::{ChunkOrdered, TimeOrdered, Timed};
pub use reader::{EventRef, RecordingReader};
pub use sysfs::active_scheduler;
pub use writer::{DEFAULT_CHUNK_BYTES, DEFAULT_CHUNK_EVENTS, RecordingWriter};

/// Everything known at the start of a recording. Stored as JSON in the HEADER chunk; readers
/// ignore fields they do not know and default the ones a writer left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// `"<major>.<minor>"` of the file format (the writer fills it in).
    pub format_version: String,
    /// Version of the iosched-trace that wrote the file.
    pub tool_version: String,
    pub host: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// `/proc/sys/kernel/random/boot_id`: monotonic times only compare within one boot.
    pub boot_id: Option<String>,
    pub clock: ClockBase,
    /// Size of one record in EVENTS chunks (the writer fills it in; each EVENTS chunk states
    /// it again).
    pub event_record_size: u32,
    pub command_line: Vec<String>,
    pub devices: Vec<DeviceInfo>,
    /// Our op codes by name (`Event::op`), so the file explains itself.
    pub op_codes: BTreeMap<String, u8>,
    /// Our flag bits by kernel name (`Event::flags`, `ReqFlags::BY_KERNEL_NAME`).
    pub flag_bits: BTreeMap<String, u32>,
    /// Free-form remarks of the recorder (degraded probes, filters, ...).
    pub notes: Vec<String>,
    /// CPUs online when the recording started (format 1.5; `None` in older files).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub online_cpus: Option<u32>,
    /// The host's scheduler costs as `calibrate` measured them, copied by the recorder from
    /// the default profile location (format 1.5; `None` where the host was not calibrated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_profile: Option<HostProfile>,
}

/// The note a recording made without plug and unplug events carries (`record --no-plugs`).
/// Read through [`Header::plugs_traced`]; the text is what older files hold, so it stays.
pub const NOTE_NO_PLUGS: &str = "plug and unplug were not traced (--no-plugs)";

/// The note a recording whose plugs were counted in the kernel, not recorded as events,
/// carries (format 1.6: `record`'s default; `record --plug-events` records the events). Its
/// counts are in [`Stats::plug_counts`].
pub const NOTE_PLUGS_COUNTED: &str = "plug and unplug were counted per device in the kernel, not recorded as events (record --plug-events records them)";

impl Header {
    /// Whether plug and unplug were traced at all, as events or as counters (false for
    /// `record --no-plugs`).
    pub fn plugs_traced(&self) -> bool {
        !self.notes.iter().any(|n| n == NOTE_NO_PLUGS)
    }

    /// Whether plug and unplug were counted in the kernel instead of recorded as events:
    /// the recording holds no P/U events, and its plug figures are [`Stats::plug_counts`].
    pub fn plugs_counted(&self) -> bool {
        self.notes.iter().any(|n| n == NOTE_PLUGS_COUNTED)
    }

    /// Marks the recording as one whose plugs were counted, not recorded as events.
    pub fn mark_plugs_counted(&mut self) {
        self.notes.push(NOTE_PLUGS_COUNTED.into());
    }

    /// Marks the recording as made without plug and unplug events.
    pub fn mark_plugs_untraced(&mut self) {
        self.notes.push(NOTE_NO_PLUGS.into());
    }

    /// A header for a recording starting now on this host: host name, kernel release, boot
    /// id, clock base and the op/flag tables are filled in.
    pub fn for_this_host(devices: Vec<DeviceInfo>, command_line: Vec<String>) -> Header {
        Header {
            format_version: format!("{FORMAT_MAJOR}.{FORMAT_MINOR}"),
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            host: sysfs::read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
            kernel_release: sysfs::read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
            boot_id: sysfs::read_trimmed("/proc/sys/kernel/random/boot_id").ok(),
            clock: ClockBase::now(),
            event_record_size: EVENT_RECORD_SIZE,
            command_line,
            devices,
            op_codes: op_codes(),
            flag_bits: ReqFlags::BY_KERNEL_NAME
                .iter()
                .map(|&(name, bit)| (name.to_string(), bit))
                .collect(),
            notes: Vec::new(),
            online_cpus: None,
            host_profile: None,
        }
    }
}

fn op_codes() -> BTreeMap<String, u8> {
    [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::SecureErase,
        Op::WriteZeroes,
        Op::ZoneOpen,
        Op::ZoneClose,
        Op::ZoneFinish,
        Op::ZoneAppend,
        Op::ZoneReset,
        Op::ZoneResetAll,
        Op::DrvIn,
        Op::DrvOut,
        Op::Other,
    ]
    .iter()
    .map(|op| (op.name().to_string(), op.code()))
    .collect()
}

/// CLOCK_MONOTONIC and CLOCK_REALTIME sampled together, to put event times on the wall clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockBase {
    pub monotonic_ns: u64,
    /// Nanoseconds since the Unix epoch.
    pub realtime_ns: u64,
}

impl ClockBase {
    /// Samples both clocks now (realtime read on both sides of the monotonic read, the
    /// midpoint kept, so the pair is off by at most half the time of one clock read).
    pub fn now() -> ClockBase {
        let before = clock_ns(libc::CLOCK_REALTIME);
        let monotonic_ns = clock_ns(libc::CLOCK_MONOTONIC);
        let after = clock_ns(libc::CLOCK_REALTIME);
        ClockBase {
            monotonic_ns,
            realtime_ns: before + (after.saturating_sub(before)) / 2,
        }
    }

    /// Wall-clock time (ns since the epoch) of a CLOCK_MONOTONIC timestamp.
    pub fn to_realtime(&self, monotonic_ns: u64) -> u64 {
        let delta = i128::from(monotonic_ns) - i128::from(self.monotonic_ns);
        (i128::from(self.realtime_ns) + delta).clamp(0, i128::from(u64::MAX)) as u64
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec and the clock ids are ones every Linux has;
    // clock_gettime writes only into `ts`.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// One traced device as sysfs described it when the recording started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// Name under /sys/block (`sda`, `loop0`, `nvme0n1`).
    pub name: String,
    pub dev: Dev,
    pub model: Option<String>,
    pub rotational: Option<bool>,
    pub logical_block_size: Option<u32>,
    pub nr_requests: Option<u32>,
    /// `queue/nomerges`: 0 all merges, 1 only the simple one-hit ones (plug and last-merge
    /// cache), 2 none (format 1.3; absent in older recordings).
    pub nomerges: Option<u8>,
    /// `queue/max_sectors_kb`: the largest request the block layer builds, KiB (format
    /// 1.3).
    pub max_sectors_kb: Option<u32>,
    /// The active scheduler (`bfq`, `mq-deadline`, `kyber`, `none`).
    pub scheduler: Option<String>,
    /// Every readable file under `queue/iosched/` (the active scheduler's tunables).
    pub iosched: BTreeMap<String, String>,
    /// blk-mq device (has `/sys/block/<name>/mq`): request events exist. Bio-based devices
    /// (zram, some dm/md setups) only produce bio events.
    pub request_based: bool,
}

/// What we know of a task that appears in the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInfo {
    pub pid: u32,
    pub tgid: u32,
    #[serde(with = "comm_serde")]
    pub comm: Comm,
    pub cgroup_id: u64,
    pub cgroup_path: Option<String>,
}

/// Loss and error counters of the collector, cumulative since the recording started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// Events the kernel could not put into the ring buffer, per CPU.
    pub lost_per_cpu: Vec<u64>,
    /// Kernel reads known to have failed (`iosched_trace_common::stat::READ_ERRORS`).
    pub read_errors: u64,
    /// Events the kernel sent.
    pub sent: u64,
    /// Events the kernel did not hand to our programs because the same program was already
    /// running on that CPU (an event raised by an interrupt inside a program's run): the
    /// programs' `recursion_misses`, summed. Lost before any program saw them. `None` where
    /// the kernel does not report it (before 5.12) and in recordings before format 1.4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_skipped: Option<u64>,
    /// Per traced device, its completions as the kernel counted them next to those traced
    /// (format 1.2; absent in older recordings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub completions: Vec<CompletionCheck>,
    /// Per device, its plugs as the kernel counted them since the recording started, where
    /// plug and unplug were counted rather than recorded as events (format 1.6; see
    /// [`Header::plugs_counted`]). Devices that never plugged are absent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plug_counts: Vec<DevicePlugCounts>,
    /// Unplugs (each with its plug) the kernel could not count because its table of devices
    /// was full (format 1.6; recordings made before 2026-12-06 counted plugs and unplugs
    /// each).
    #[serde(skip_serializing_if = "is_zero")]
    pub plugs_uncounted: u64,
    /// What happened to the traced devices while recording, in time order: a scheduler
    /// switched, a device removed or its loop backing detached (format 1.6; every STATS
    /// chunk holds all of them so far).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_changes: Vec<DeviceChange>,
}

/// A change to a traced device, seen by the recorder's poll of sysfs (every 100 ms): `ts_ns`
/// is the poll that saw it, so it happened at most one poll interval before.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceChange {
    pub ts_ns: u64,
    pub device: String,
    pub dev: Dev,
    #[serde(flatten)]
    pub what: DeviceChangeKind,
}

/// What changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum DeviceChangeKind {
    /// `queue/scheduler` now selects `to`.
    Scheduler { from: String, to: String },
    /// The device is gone from /sys/block (or its name now holds another device).
    Removed,
    /// A loop device lost its backing file (`losetup -d`): it stays, but serves no I/O.
    Detached,
    /// A loop device has a backing file again.
    Reattached,
}

impl DeviceChange {
    /// One line for people, times relative to `base_ns`: `loop0: scheduler mq-deadline ->
    /// bfq at 2.300 s`.
    pub fn describe(&self, base_ns: u64) -> String {
        let at = self.ts_ns.saturating_sub(base_ns) as f64 / 1e9;
        match &self.what {
            DeviceChangeKind::Scheduler { from, to } => {
                format!("{}: scheduler {from} -> {to} at {at:.3} s", self.device)
            }
            DeviceChangeKind::Removed => format!("{}: removed at {at:.3} s", self.device),
            DeviceChangeKind::Detached => {
                format!("{}: backing file detached at {at:.3} s", self.device)
            }
            DeviceChangeKind::Reattached => {
                format!("{}: backing file attached again at {at:.3} s", self.device)
            }
        }
    }
}

/// One device's plug counters (kernel side: `iosched_trace_common::PlugCounts`, summed over
/// CPUs), cumulative since the recording started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DevicePlugCounts {
    pub dev: Dev,
    /// Plugs, counted at each unplug of the device (blktrace's P for a plug of one device's
    /// requests; a plug of several devices' counts for each, and one plug may count twice:
    /// docs/FORMAT.md). Recordings made before 2026-12-06 counted P itself.
    pub plugs: u64,
    /// Unplugs by the submitter (U).
    pub unplugs_explicit: u64,
    /// Unplugs because the submitter slept with a plug (UT).
    pub unplugs_timer: u64,
    /// Requests those unplugs released, summed.
    pub unplugged_requests: u64,
}

/// A device's completed-request counters (`/sys/block/<name>/stat`) at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskCounters {
    /// CLOCK_MONOTONIC ns just after the read: the trace clock.
    pub ts_ns: u64,
    pub reads: u64,
    pub writes: u64,
    pub discards: u64,
    /// Requests in flight at the read: completions racing the read may fall on either side.
    pub in_flight: u64,
}

impl DiskCounters {
    /// One line of `/sys/block/<name>/stat` taken at `ts_ns` (Documentation/block/stat.rst:
    /// fields 1, 5 and 12 are reads, writes and discards completed, field 9 the requests in
    /// flight; kernels before 4.18 have no discard fields). `None` if it is not one.
    pub fn parse_stat(text: &str, ts_ns: u64) -> Option<DiskCounters> {
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        if fields.len() < 11 {
            return None;
        }
        Some(DiskCounters {
            ts_ns,
            reads: fields[0],
            writes: fields[4],
            discards: fields.get(11).copied().unwrap_or(0),
            in_flight: fields[8],
        })
    }
}

/// Requests completed, by the kernel's stat groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionCounts {
    pub reads: u64,
    pub writes: u64,
    pub discards: u64,
    /// Traced only: zero-byte write completions, the end of a request that went through the
    /// flush machinery (an fsync's empty PREFLUSH, or data written with a preflush or FUA on
    /// a device with a write cache). Such a request completes once with its data and once
    /// empty, or only empty, and the kernel counts it once: which of them it was cannot be
    /// told from the completions, so when any is present writes are not compared.
    #[serde(skip_serializing_if = "is_zero")]
    pub writes_through_flush: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl CompletionCounts {
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.discards
    }
}

/// The check that catches completions no event reported: the kernel's own count of completed
/// requests between two snapshots of its counters, against the final completion events traced
/// between the same instants. A completion the block tracepoints never delivered (seen on
/// 6.18 with loop devices backed by FUSE files) shows here, whereas the ring buffer's loss
/// counter cannot see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionCheck {
    pub device: String,
    pub dev: Dev,
    pub start: DiskCounters,
    pub end: DiskCounters,
    /// Final completion events (one per request life) with `start.ts_ns < ts <= end.ts_ns`.
    pub traced: CompletionCounts,
}

/// [`CompletionCheck::untraced`] summed over devices.
pub fn untraced_total(checks: &[CompletionCheck]) -> u64 {
    checks.iter().map(CompletionCheck::untraced).sum()
}

impl CompletionCheck {
    /// What the kernel counted between the snapshots (zeros if its counters went backwards).
    pub fn kernel(&self) -> CompletionCounts {
        CompletionCounts {
            reads: self.end.reads.saturating_sub(self.start.reads),
            writes: self.end.writes.saturating_sub(self.start.writes),
            discards: self.end.discards.saturating_sub(self.start.discards),
            writes_through_flush: 0,
        }
    }

    /// Whether writes are compared (see [`CompletionCounts::writes_through_flush`]).
    pub fn writes_compared(&self) -> bool {
        self.traced.writes_through_flush == 0
    }

    /// Completions the kernel counted and no event reported, by group (a group where more
    /// were traced than counted contributes nothing: see [`uncertainty`](Self::uncertainty)).
    pub fn untraced(&self) -> u64 {
        let (k, t) = (self.kernel(), self.traced);
        let writes = if self.writes_compared() {
            k.writes.saturating_sub(t.writes)
        } else {
            0
        };
        k.reads.saturating_sub(t.reads) + writes + k.discards.saturating_sub(t.discards)
    }

    /// How many more than [`untraced`](Self::untraced) there may be: the kernel counts a
    /// request a few microseconds after its completion event, so a request completing while a
    /// snapshot was read can be traced before it and counted after it. That can hide an
    /// untraced completion, never invent one; each request in flight at a snapshot may hide
    /// one.
    pub fn uncertainty(&self) -> u64 {
        self.start.in_flight + self.end.in_flight
    }

    /// The kernel's counters did not move although completions were traced: I/O statistics
    /// are off for the device (`queue/iostats` = 0), and the check says nothing.
    pub fn counters_disabled(&self) -> bool {
        self.kernel().total() == 0 && self.traced.total() > 0
    }

    /// One line for people: `loop0: 1 completed request has no completion event (kernel
    /// counted 256 reads, 0 writes, 0 discards; traced 255, 0, 0)`; `None` when all agree.
    pub fn describe_untraced(&self) -> Option<String> {
        let n = self.untraced();
        if n == 0 || self.counters_disabled() {
            return None;
        }
        let (k, t) = (self.kernel(), self.traced);
        let give_or_take = match self.uncertainty() {
            0 => String::new(),
            u => format!(
                ", and up to {u} more may hide behind requests in flight at the counter reads"
            ),
        };
        let writes_note = if self.writes_compared() {
            ""
        } else {
            ", writes not compared: some went through the flush machinery"
        };
        Some(format!(
            "{}: {n} completed request{} counted by the kernel ha{} no completion event \
             (kernel: {} reads, {} writes, {} discards; traced: {}, {}, {}{give_or_take}\
             {writes_note}); \
             no block_rq_complete event for {} reached the recorder (which lost none it was \
             given)",
            self.device,
            if n == 1 { "" } else { "s" },
            if n == 1 { "s" } else { "ve" },
            k.reads,
            k.writes,
            k.discards,
            t.reads,
            t.writes,
            t.discards,
            if n == 1 { "it" } else { "them" },
        ))
    }
}

impl Stats {
    /// Every event lost: the ring buffer's overflows and the kernel's skips.
    pub fn lost(&self) -> u64 {
        self.ring_lost() + self.kernel_skipped.unwrap_or(0)
    }

    /// Events lost because the ring buffer was full.
    pub fn ring_lost(&self) -> u64 {
        self.lost_per_cpu.iter().sum()
    }

    /// Completions the kernel counted without an event, over every checked device; `None`
    /// when the recording holds no check.
    pub fn untraced_completions(&self) -> Option<u64> {
        (!self.completions.is_empty()).then(|| untraced_total(&self.completions))
    }
}

/// Written last by [`RecordingWriter::finish`]; its absence means the recording was not
/// closed cleanly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Footer {
    /// Events in the recording by [`EventKind::name`].
    pub events_per_kind: BTreeMap<String, u64>,
    /// Events handed to the writer (readers compare it with what they could read; see
    /// [`RecordingWriter::footer`]).
    pub events_total: u64,
    pub stats: Stats,
    pub duration_ns: u64,
    /// Why the recording stopped ("signal", "duration", "error: ...").
    pub ended_by: String,
}

/// Per-kind counts keyed by kind name, as [`Footer::events_per_kind`] holds them.
pub fn kind_counts(counts: &[u64; EventKind::ALL.len()]) -> BTreeMap<String, u64> {
    EventKind::ALL
        .iter()
        .zip(counts)
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| (k.name().to_string(), *n))
        .collect()
}

/// Errors reading or writing a recording. One line each, naming what to do where there is
/// something to do.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    // The cause is part of this one line, so it is not also a `#[source]` (anyhow's `{:#}`
    // would print it twice).
    #[error("{path}: {cause}")]
    File {
        path: PathBuf,
        cause: Box<FormatError>,
    },
    #[error("empty file: no recording data (was the recorder stopped before it wrote anything?)")]
    Empty,
    #[error("not an iosched-trace recording: {looks_like}")]
    NotARecording { looks_like: String },
    #[error(
        "recording format {major}.{minor} is not supported (this build reads {FORMAT_MAJOR}.x): \
         use a newer iosched-trace"
    )]
    UnsupportedVersion { major: u16, minor: u16 },
    #[error("recording ends inside its header ({len} bytes): it holds no events")]
    TruncatedHeader { len: u64 },
    #[error("corrupt recording header: {reason}")]
    CorruptHeader { reason: String },
    #[error("cannot encode {what}: {reason}")]
    Encode { what: &'static str, reason: String },
}

impl FormatError {
    /// The input has nothing more for now (its `Read` said `WouldBlock`: a recording still
    /// being written, read by `--follow`): not an error, the reader can be called again.
    pub fn is_waiting(&self) -> bool {
        match self {
            FormatError::Io(e) => e.kind() == io::ErrorKind::WouldBlock,
            FormatError::File { cause, .. } => cause.is_waiting(),
            _ => false,
        }
    }

    /// The error [`is_waiting`](Self::is_waiting) recognizes.
    pub fn waiting() -> FormatError {
        FormatError::Io(io::ErrorKind::WouldBlock.into())
    }
}

/// `Comm` as a JSON string when that round-trips exactly, else as its 16 bytes.
mod comm_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::event::Comm;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Text(String),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(comm: &Comm, s: S) -> Result<S::Ok, S::Error> {
        let text = comm.as_str();
        if Comm::new(&text) == *comm {
            Repr::Text(text.into_owned()).serialize(s)
        } else {
            Repr::Bytes(comm.0.to_vec()).serialize(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Comm, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(text) => Ok(Comm::new(&text)),
            Repr::Bytes(bytes) if bytes.len() <= 16 => {
                let mut comm = Comm::default();
                comm.0[..bytes.len()].copy_from_slice(&bytes);
                Ok(comm)
            }
            Repr::Bytes(bytes) => Err(serde::de::Error::invalid_length(
                bytes.len(),
                &"at most 16 bytes",
            )),
        }
    }
}

/// Sample headers, stats and events for tests, here and in the crates above (feature
/// `test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

#[cfg(test)]
mod tests;
