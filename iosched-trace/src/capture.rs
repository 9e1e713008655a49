//! Loading and attaching the eBPF programs, and draining their ring buffer into [`Event`]s.
//! [`session`]: what `record` and `live` both build on it (the kernel read, the devices
//! described, the completion check of every event drained).
//!
//! Owns: the `Ebpf` object, its maps, the ring-buffer file descriptor registered with tokio,
//! the decoding of raw kernel records, and the kernel's loss counters.
//! Must not: write files or decide what a recording contains.

pub mod session;

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    ops::RangeInclusive,
    os::fd::{AsFd, AsRawFd},
    time::{Duration, Instant},
};

use aya::{
    Btf, Ebpf, EbpfLoader, VerifierLogLevel,
    maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, ProgramError, ProgramFd, RawTracePoint},
};
use iosched_trace_common::{
    BATCH_HEADER_LEN, Config, FOLDED_GETRQ, FOLDED_ISSUE, FOLDED_ISSUE_NO_PRIO, MAP_DEVICES,
    MAP_EVENTS, MAP_PLUG_COUNTS, MAP_STAGING, MAP_STATS, PROG_FLUSH, PlugCounts, RawEvent, Staging,
    stat,
};
use tokio::io::{Interest, unix::AsyncFd};

use crate::{
    devices::Disk,
    probe::{FlagDecoder, KernelLayout},
};
use iosched_core::{
    event::{Comm, Dev, Event, EventKind},
    record::{DevicePlugCounts, Stats},
};

/// The compiled eBPF object, built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/iosched-trace"));

/// Program kinds as a load error names them: a BTF-typed tracepoint, or a raw one (the
/// kyber programs, whose tracepoints may live in a module, and the flush program).
pub const TP_BTF: &str = "tracing, attach type tp_btf";
pub const RAW_TP: &str = "raw_tracepoint";

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "this iosched-trace binary contains no eBPF programs (built with AYA_BUILD_SKIP); rebuild it with `cargo xtask build`"
    )]
    NoObject,
    #[error("cannot read the kernel BTF: {0}")]
    Btf(#[source] aya::BtfError),
    // The cause chain is flattened into the message (see `object_error`): aya's errors repeat
    // their sources in their own text, so `{:#}` would print each level three times.
    #[error("cannot prepare the eBPF object: {0}")]
    Object(String),
    #[error(
        "the kernel refused to load program {program} (BPF program type {kind}): {reason}{log}"
    )]
    Load {
        program: &'static str,
        /// [`TP_BTF`] or [`RAW_TP`]: what the kernel was asked to load.
        kind: &'static str,
        reason: String,
        /// The verifier log, only filled in verbose mode.
        log: String,
    },
    #[error("cannot attach program {program} to its tracepoint: {source}")]
    Attach {
        program: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("{0}")]
    Layout(String),
    #[error("eBPF map {0}: {1}")]
    Map(&'static str, String),
    #[error("ring buffer: {0}")]
    Ring(#[source] std::io::Error),
    #[error("cannot flush the events staged on CPU {cpu}")]
    Flush {
        cpu: u32,
        #[source]
        source: std::io::Error,
    },
    /// `trial`'s second load (`record --plug-events`'s programs) failed; the error is in the
    /// message rather than a source, as for `Object`.
    #[error("with --plug-events: {0}")]
    PlugEvents(Box<CaptureError>),
}

/// How often every CPU's staged events are pushed to the ring buffer: the longest a quiet
/// CPU holds events back (a busy one fills its batch within a millisecond). Well under the
/// 100 ms reordering window of `record::TimeOrdered`.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A program and the tracepoint it hangs on (named alike).
#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    pub name: &'static str,
    /// Needed for a useful recording; otherwise attached if the kernel has the tracepoint.
    pub required: bool,
    pub when: When,
    /// The module that holds the tracepoint where it is not built in (kyber's on Debian):
    /// such a program is a raw tracepoint, which the kernel finds by name in modules too,
    /// and its prototype is checked against that module's BTF.
    pub module: Option<&'static str>,
}

/// When a recording wants a program (beyond the kernel having its tracepoint).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Always,
    /// Only if a traced device is bio-based: request-based devices report their bios through
    /// the request completion instead, and this would double the completion events.
    BioBasedDevice,
    /// Only on request (`--extra-events`): accounting start/end, close to D and C.
    Extra,
    /// Only on request (`--wakeups`): it fires on every wakeup of the machine.
    Wakeups,
    /// Only where plugs are sent as events (`--plug-events`): counting mode counts a plug
    /// per unplug in `block_unplug`, and an attached tracepoint costs the workload even when
    /// its program does nothing.
    PlugEvents,
}

const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "block_bio_queue",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_getrq",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_bio_backmerge",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_bio_frontmerge",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_rq_merge",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_rq_insert",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_rq_issue",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_rq_complete",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_rq_requeue",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_plug",
        required: true,
        when: When::PlugEvents,
        module: None,
    },
    ProgramSpec {
        name: "block_unplug",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_split",
        required: true,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "block_bio_complete",
        required: false,
        when: When::BioBasedDevice,
        module: None,
    },
    ProgramSpec {
        name: "block_io_start",
        required: false,
        when: When::Extra,
        module: None,
    },
    ProgramSpec {
        name: "block_io_done",
        required: false,
        when: When::Extra,
        module: None,
    },
    ProgramSpec {
        name: "kyber_throttled",
        required: false,
        when: When::Always,
        module: Some("kyber_iosched"),
    },
    ProgramSpec {
        name: "kyber_adjust",
        required: false,
        when: When::Always,
        module: Some("kyber_iosched"),
    },
    // wbt's scaling (a few events per 100 ms window while it works): its limits, for
    // `explain`'s throttling evidence.
    ProgramSpec {
        name: "wbt_step",
        required: false,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "wbt_timer",
        required: false,
        when: When::Always,
        module: None,
    },
    // Renames (exec, prctl) and the end of an exec: keep the per-CPU cache of task names
    // true. Without them, a process's first I/O after exec can carry its parent's name.
    ProgramSpec {
        name: "task_rename",
        required: false,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: "sched_process_exec",
        required: false,
        when: When::Always,
        module: None,
    },
    ProgramSpec {
        name: iosched_trace_common::PROG_WAKEUP,
        required: false,
        when: When::Wakeups,
        module: None,
    },
];

/// Every program of the object, in attach order: `check` reports on the same list `record`
/// attaches from.
pub fn programs() -> &'static [ProgramSpec] {
    PROGRAMS
}

/// Whether this binary carries the eBPF object (a build with `AYA_BUILD_SKIP` has none).
pub fn has_programs() -> bool {
    !EBPF_OBJECT.is_empty()
}

/// Size of the embedded eBPF object, bytes.
pub fn object_bytes() -> usize {
    EBPF_OBJECT.len()
}

/// Whether program `name`'s tracepoint can take it on this kernel: present in the kernel's
/// BTF, with the arguments the program reads. `Err` is the reason `record` gives when it
/// leaves an optional program out (and fails on a required one), so `check` says the same.
/// A tracepoint of a module (kyber's where it is not built in) is looked up in that module's
/// BTF, and is missing while the module is not loaded.
pub fn tracepoint_usable(kernel_btf: &crate::btf::Btf, spec: &ProgramSpec) -> Result<(), String> {
    let declared = declaring_btf(kernel_btf, spec)?;
    crate::probe::check_prototype(&declared, spec.name).map_err(|e| e.to_string())
}

/// Whether `record --wakeups` can attach `sched_waking` here: `Err` is why not, as `record`
/// notes it.
pub fn wakeups_usable(kernel_btf: &crate::btf::Btf, layout: &KernelLayout) -> Result<(), String> {
    if !kernel_btf.has_tracepoint(iosched_trace_common::PROG_WAKEUP) {
        Err("tracepoint not in this kernel (--wakeups has no effect)".to_string())
    } else if !layout.has_task_ids() {
        Err(
            "task_struct.pid/tgid not readable in this kernel's BTF (--wakeups has no effect)"
                .to_string(),
        )
    } else {
        Ok(())
    }
}

/// What a trial load found: the programs the kernel took, and those left out with why.
#[derive(Clone, Debug, Default)]
pub struct Trial {
    pub attached: Vec<&'static str>,
    pub skipped: Vec<(&'static str, String)>,
}

/// Loads and attaches every program a recording can use (with `--extra-events` and
/// `--wakeups`, and the bio-based ones), exactly as [`Capture::start`] does, with the device
/// filter set to a device that cannot exist (0:0), so nothing is traced; then detaches.
/// `check` runs it to learn whether the kernel's verifier takes the programs. Two loads:
/// `record`'s default (plugs counted in `block_unplug`), then `--plug-events`'s plug and
/// unplug programs, which alone attach `block_plug` and take the unplug program's other path
/// (the verifier sees only the path the configuration leaves; the other programs are the
/// same in both). Must run inside a tokio runtime, as [`Capture::start`].
pub fn trial(layout: &KernelLayout, kernel_btf: &crate::btf::Btf) -> Result<Trial, CaptureError> {
    let counting = trial_one(layout, kernel_btf, ProgramSet::All, false)?;
    let events = trial_one(layout, kernel_btf, ProgramSet::Plugs, true)
        .map_err(|e| CaptureError::PlugEvents(Box::new(e)))?;
    Ok(merge_trials(&counting, &events))
}

/// Two trial loads as one: each program once, in attach order (`block_unplug` is in both),
/// attached if either load attached it, else skipped with the first load's reason.
fn merge_trials(first: &Trial, second: &Trial) -> Trial {
    let mut trial = Trial::default();
    for spec in PROGRAMS {
        let name = spec.name;
        if first.attached.contains(&name) || second.attached.contains(&name) {
            trial.attached.push(name);
        } else if let Some(skip) = (first.skipped.iter())
            .chain(&second.skipped)
            .find(|(n, _)| *n == name)
        {
            trial.skipped.push(skip.clone());
        }
    }
    trial
}

/// One trial load of `programs`, plugs counted or (`plug_events`) sent as events.
fn trial_one(
    layout: &KernelLayout,
    kernel_btf: &crate::btf::Btf,
    programs: ProgramSet,
    plug_events: bool,
) -> Result<Trial, CaptureError> {
    let options = CaptureOptions {
        disks: vec![Disk {
            name: "trial".into(),
            dev: Dev { major: 0, minor: 0 },
            request_based: false,
        }],
        ring_size: 1 << 16,
        wakeup_bytes: 0,
        extra_events: true,
        wakeups: true,
        verbose: false,
        programs,
        plug_events,
    };
    let mut capture = Capture::start(&options, layout, kernel_btf)?;
    capture.detach()?;
    Ok(Trial {
        attached: std::mem::take(&mut capture.attached),
        skipped: std::mem::take(&mut capture.skipped),
    })
}

/// Which programs to attach: each one costs the traced workload on every event it sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgramSet {
    /// Everything a recording holds.
    #[default]
    All,
    /// Only what the timeline needs for the live view's numbers (Q, M/F, request merges, I,
    /// D with its bio links, C, R; bio completions on bio-based devices): no G, plug/unplug,
    /// split or kyber events. G is one of the four events of each plain read, and the view
    /// shows no stage that ends or starts at it: a bio pends from Q to D, and its request is
    /// known from D (whose first bio it names) as well as from G.
    Lifecycle,
    /// Everything but plug and unplug (`record --no-plugs`): two of the six events of a
    /// plain read on a fast device, measured at about 0.065 of its IOPS (README, Benchmark).
    NoPlugs,
    /// Plug and unplug alone: [`trial`]'s load of `--plug-events`'s programs, which differ
    /// from the default's only there.
    Plugs,
}

/// The programs [`ProgramSet::Lifecycle`] keeps.
const LIFECYCLE: &[&str] = &[
    "block_bio_queue",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_rq_merge",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_complete",
    "block_rq_requeue",
    "block_bio_complete",
    "task_rename",
    "sched_process_exec",
];

#[derive(Clone, Debug)]
pub struct CaptureOptions {
    /// Devices to trace; empty means every device.
    pub disks: Vec<Disk>,
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_size: u32,
    /// Wake the reader once this many bytes wait (0: on every event).
    pub wakeup_bytes: u64,
    pub extra_events: bool,
    /// Attach `sched_waking` and have Q events feed its filter (`record --wakeups`).
    pub wakeups: bool,
    pub verbose: bool,
    pub programs: ProgramSet,
    /// Send plug and unplug as events (`record --plug-events`); otherwise, where their
    /// programs are attached, they only count per device in the kernel (`Capture::stats`'s
    /// `plug_counts`).
    pub plug_events: bool,
}

pub struct Capture {
    // Field order matters on drop: programs (in `ebpf`) detach before the maps close.
    ebpf: Option<Ebpf>,
    ring: AsyncFd<RingBuf<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    /// Read (never written) to see which CPUs hold staged events worth a flush.
    staging: PerCpuArray<MapData, Staging>,
    /// The kernel's plug counters, when plug and unplug are counted rather than sent.
    plug_counts: Option<PerCpuHashMap<MapData, u32, PlugCounts>>,
    decoder: FlagDecoder,
    /// `flush_staged`, kept apart from `ebpf` so it can still run after the tracepoints
    /// are detached.
    flush: ProgramFd,
    cpus: Vec<u32>,
    last_flush: Instant,
    /// The programs' recursion misses as read when they were detached.
    skipped_at_detach: Option<u64>,
    /// The programs' own kernel time as read when they were detached.
    program_costs: Vec<ProgramCost>,
    /// The recording's window on the trace clock: from when the last program was attached
    /// to when the first was detached (`u64::MAX` until then). Events outside it are dropped.
    ready_ns: u64,
    stop_ns: u64,
    /// Events dropped for coming before `ready_ns` or after `stop_ns`.
    outside_window: u64,
    /// Programs attached, and optional ones left out with the reason.
    pub attached: Vec<&'static str>,
    pub skipped: Vec<(&'static str, String)>,
}

impl Capture {
    /// Loads and attaches everything. Must run inside a tokio runtime (the ring buffer's fd is
    /// registered with its reactor).
    pub fn start(
        options: &CaptureOptions,
        layout: &KernelLayout,
        kernel_btf: &crate::btf::Btf,
    ) -> Result<Self, CaptureError> {
        if EBPF_OBJECT.is_empty() {
            return Err(CaptureError::NoObject);
        }
        let btf = Btf::from_sys_fs().map_err(CaptureError::Btf)?;
        // Without the tracepoint or the task fields, Q events need not feed the filter.
        let mut skipped = Vec::new();
        let wakeups = options.wakeups
            && match wakeups_usable(kernel_btf, layout) {
                Ok(()) => true,
                Err(why) => {
                    skipped.push((iosched_trace_common::PROG_WAKEUP, why));
                    false
                }
            };
        let config = Config {
            self_tgid: std::process::id(),
            filter_devices: u32::from(!options.disks.is_empty()),
            wakeup_bytes: options.wakeup_bytes,
            bio_cgroup: u32::from(layout.bio_cgroup),
            wakeups: u32::from(wakeups),
            plug_events: u32::from(options.plug_events),
            off: layout.offsets,
        };
        let mut ebpf = load_object(&config, &btf, options.ring_size, options.verbose)?;

        // The device filter must be in place before the first program attaches.
        {
            let map = ebpf
                .map_mut(MAP_DEVICES)
                .ok_or_else(|| CaptureError::Map(MAP_DEVICES, "missing from the object".into()))?;
            let mut devices: HashMap<_, u32, u8> = HashMap::try_from(map)
                .map_err(|e| CaptureError::Map(MAP_DEVICES, e.to_string()))?;
            for disk in &options.disks {
                devices
                    .insert(disk.dev.to_kernel(), 1, 0)
                    .map_err(|e| CaptureError::Map(MAP_DEVICES, e.to_string()))?;
            }
        }

        let flush = load_flush(&mut ebpf, options.verbose)?;
        let cpus = aya::util::online_cpus().map_err(|(path, e)| {
            CaptureError::Layout(format!("cannot read the online CPUs from {path}: {e}"))
        })?;

        let any_bio_based = options.disks.iter().any(|d| !d.request_based);
        let mut attached = Vec::new();
        for spec in PROGRAMS {
            let wanted = match spec.when {
                When::Always => true,
                When::BioBasedDevice => any_bio_based,
                When::Extra => options.extra_events,
                When::Wakeups => wakeups,
                When::PlugEvents => options.plug_events,
            };
            let in_set = match options.programs {
                ProgramSet::All => true,
                ProgramSet::Lifecycle => LIFECYCLE.contains(&spec.name),
                ProgramSet::NoPlugs => !matches!(spec.name, "block_plug" | "block_unplug"),
                ProgramSet::Plugs => matches!(spec.name, "block_plug" | "block_unplug"),
            };
            if !wanted || !in_set {
                continue;
            }
            if let Err(why) = tracepoint_usable(kernel_btf, spec) {
                if spec.required {
                    return Err(CaptureError::Layout(format!("{}: {why}", spec.name)));
                }
                skipped.push((spec.name, why));
                continue;
            }
            let attached_one = match spec.module {
                Some(_) => attach_raw(&mut ebpf, spec.name, options.verbose),
                None => attach(&mut ebpf, spec.name, &btf, options.verbose),
            };
            match attached_one {
                Ok(()) => attached.push(spec.name),
                Err(e) if !spec.required => skipped.push((spec.name, e.to_string())),
                Err(e) => return Err(e),
            }
        }

        // The programs attach one after another, tens of milliseconds apart under load: a
        // request whose D came before the completion program was attached, or a bio queued
        // before the issue program was, would have a life with holes. Time starts once all
        // of them are in place; what they sent before is left out, like any event from
        // before a recording (a life then in progress is one in flight at the start).
        let ready_ns = monotonic_ns();
        let events = ebpf
            .take_map(MAP_EVENTS)
            .ok_or_else(|| CaptureError::Map(MAP_EVENTS, "missing from the object".into()))?;
        let ring =
            RingBuf::try_from(events).map_err(|e| CaptureError::Map(MAP_EVENTS, e.to_string()))?;
        // SAFETY: the RingBuf owns its map fd, which stays open and unchanged until the RingBuf
        // (moved into the AsyncFd here) is dropped together with the AsyncFd.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| CaptureError::Ring(e.into_parts().1))?;
        let stats = ebpf
            .take_map(MAP_STATS)
            .ok_or_else(|| CaptureError::Map(MAP_STATS, "missing from the object".into()))?;
        let stats = PerCpuArray::try_from(stats)
            .map_err(|e| CaptureError::Map(MAP_STATS, e.to_string()))?;
        let staging = ebpf
            .take_map(MAP_STAGING)
            .ok_or_else(|| CaptureError::Map(MAP_STAGING, "missing from the object".into()))?;
        let staging = PerCpuArray::try_from(staging)
            .map_err(|e| CaptureError::Map(MAP_STAGING, e.to_string()))?;
        // `block_unplug` counts both plugs and unplugs (`block_plug` is not attached).
        let counting_plugs = !options.plug_events && attached.contains(&"block_unplug");
        let plug_counts = if counting_plugs {
            let map = ebpf.take_map(MAP_PLUG_COUNTS).ok_or_else(|| {
                CaptureError::Map(MAP_PLUG_COUNTS, "missing from the object".into())
            })?;
            Some(
                PerCpuHashMap::try_from(map)
                    .map_err(|e| CaptureError::Map(MAP_PLUG_COUNTS, e.to_string()))?,
            )
        } else {
            None
        };
        Ok(Self {
            ebpf: Some(ebpf),
            ring,
            stats,
            staging,
            plug_counts,
            decoder: layout.flags.clone(),
            flush,
            cpus,
            last_flush: Instant::now(),
            skipped_at_detach: None,
            program_costs: Vec::new(),
            ready_ns,
            stop_ns: u64::MAX,
            outside_window: 0,
            attached,
            skipped,
        })
    }

    /// Waits until the kernel signals data (or `timeout` passes: with batched wake-ups the
    /// last few events of a quiet period sit below the wake-up threshold), then drains every
    /// complete record into `out`. Events staged on the CPUs are flushed at least every
    /// [`FLUSH_EVERY`].
    pub async fn next_batch(
        &mut self,
        out: &mut Vec<Event>,
        timeout: Duration,
    ) -> Result<(), CaptureError> {
        let until_flush = FLUSH_EVERY.saturating_sub(self.last_flush.elapsed());
        if let Ok(guard) =
            tokio::time::timeout(timeout.min(until_flush), self.ring.readable_mut()).await
        {
            let mut guard = guard.map_err(CaptureError::Ring)?;
            guard.clear_ready();
        }
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush_staged(false)?;
        }
        self.drain(out);
        Ok(())
    }

    /// Has CPUs send the events they staged to the ring buffer: every CPU holding any when
    /// `all` (at the end), else only those whose batch has waited [`FLUSH_EVERY`] (a busy
    /// CPU sends its own batches as they fill). A flush runs on its CPU by IPI, and the
    /// caller waits for it: on an overloaded host that wait can be long, so the staging
    /// areas are read first (no IPI) and idle CPUs are left alone.
    pub fn flush_staged(&mut self, all: bool) -> Result<(), CaptureError> {
        self.last_flush = Instant::now();
        let staged = self
            .staging
            .get(&0, 0)
            .map_err(|e| CaptureError::Map(MAP_STAGING, e.to_string()))?;
        let now = monotonic_ns();
        for &cpu in &self.cpus {
            let Some(st) = staged.get(cpu as usize) else {
                continue;
            };
            let waited = now.saturating_sub(st.first_ts);
            if st.batch.count == 0 || (!all && waited < FLUSH_EVERY.as_nanos() as u64) {
                continue;
            }
            match run_on_cpu(&self.flush, cpu) {
                Ok(()) => {}
                // Gone offline since we started: whatever it staged is out of reach.
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(source) => return Err(CaptureError::Flush { cpu, source }),
            }
        }
        Ok(())
    }

    /// Takes every record currently in the ring, without waiting.
    pub fn drain(&mut self, out: &mut Vec<Event>) {
        let decoder = &self.decoder;
        let ring = self.ring.get_mut();
        let window = self.ready_ns..=self.stop_ns;
        let mut outside = 0;
        while let Some(item) = ring.next() {
            outside += decode_record(&item, decoder, &window, out);
        }
        self.outside_window += outside;
    }

    /// Events left out for coming from before the last program was attached or after the
    /// first was detached.
    pub fn outside_window(&self) -> u64 {
        self.outside_window
    }

    /// The programs' own kernel time, as read when they were detached (empty before).
    pub fn program_costs(&self) -> &[ProgramCost] {
        &self.program_costs
    }

    /// The kernel's counters, summed over CPUs (lost per CPU kept apart).
    pub fn stats(&self) -> Result<Stats, CaptureError> {
        let get = |index: u32| {
            self.stats
                .get(&index, 0)
                .map(|values| values.iter().copied().collect::<Vec<u64>>())
                .map_err(|e| CaptureError::Map(MAP_STATS, e.to_string()))
        };
        let lost_per_cpu = get(stat::LOST)?;
        Ok(Stats {
            lost_per_cpu,
            read_errors: get(stat::READ_ERRORS)?.iter().sum(),
            // Those the recording holds: the kernel also sent the attach and detach
            // windows' events, which `drain` left out.
            sent: get(stat::SENT)?
                .iter()
                .sum::<u64>()
                .saturating_sub(self.outside_window),
            kernel_skipped: match &self.ebpf {
                Some(ebpf) => recursion_misses(ebpf),
                None => self.skipped_at_detach,
            },
            completions: Vec::new(),
            plug_counts: self.plug_counts()?,
            plugs_uncounted: get(stat::PLUG_DEVICES_FULL)?.iter().sum(),
            // The recorder's device watch fills it.
            device_changes: Vec::new(),
        })
    }

    /// The kernel's plug counters per device, summed over CPUs (empty when plugs are sent as
    /// events or not traced).
    fn plug_counts(&self) -> Result<Vec<DevicePlugCounts>, CaptureError> {
        let Some(map) = &self.plug_counts else {
            return Ok(Vec::new());
        };
        let mut by_dev: BTreeMap<u32, DevicePlugCounts> = BTreeMap::new();
        for entry in map.iter() {
            let (dev, per_cpu) =
                entry.map_err(|e| CaptureError::Map(MAP_PLUG_COUNTS, e.to_string()))?;
            for v in per_cpu.iter() {
                add_plug_counts(&mut by_dev, dev, v);
            }
        }
        // And what each CPU counted in its staging area (the first devices it unplugged).
        let staged = self
            .staging
            .get(&0, 0)
            .map_err(|e| CaptureError::Map(MAP_STAGING, e.to_string()))?;
        for st in staged.iter() {
            for slot in st.plug_counts.iter().filter(|s| s.key != 0) {
                add_plug_counts(&mut by_dev, slot.key as u32, &slot.counts);
            }
        }
        Ok(by_dev.into_values().collect())
    }

    /// Detaches every program and flushes what the CPUs staged; the ring buffer stays
    /// readable so the last events can be drained.
    pub fn detach(&mut self) -> Result<(), CaptureError> {
        if let Some(ebpf) = &self.ebpf {
            self.skipped_at_detach = recursion_misses(ebpf);
            self.program_costs = self
                .attached
                .iter()
                .filter_map(|&name| program_cost(ebpf, name))
                .collect();
            // The programs detach one after another, as they attached: events from then on
            // would again make lives with holes (a G whose Q program is gone).
            self.stop_ns = monotonic_ns();
        }
        self.ebpf = None;
        self.flush_staged(true)
    }
}

/// Adds one CPU's counters of the kernel `dev_t` `dev` to its device's sums.
fn add_plug_counts(by_dev: &mut BTreeMap<u32, DevicePlugCounts>, dev: u32, v: &PlugCounts) {
    let c = by_dev.entry(dev).or_insert_with(|| DevicePlugCounts {
        dev: Dev::from_kernel(dev),
        ..DevicePlugCounts::default()
    });
    c.plugs += v.plugs;
    c.unplugs_explicit += v.unplugs_explicit;
    c.unplugs_timer += v.unplugs_timer;
    c.unplugged_requests += v.unplugged_requests;
}

/// The events the kernel did not run our programs for, summed over them: each program's
/// `recursion_misses` (the kernel runs a tracing program at most once per CPU at a time, and
/// counts an event that arrives while it runs, from an interrupt, as a miss). Read from
/// `/proc/self/fdinfo/<program fd>`; `None` when a program's entry has no such line (kernels
/// before 5.12) or cannot be read.
fn recursion_misses(ebpf: &Ebpf) -> Option<u64> {
    ebpf.programs()
        // Loaded ones only: optional programs this recording left out have no fd.
        .filter_map(|(_, program)| program.fd().ok())
        .map(|fd| {
            let fd = fd.as_fd().as_raw_fd();
            let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
            parse_recursion_misses(&info)
        })
        .sum()
}

/// The `recursion_misses:` line of a BPF program's fdinfo.
fn parse_recursion_misses(fdinfo: &str) -> Option<u64> {
    fdinfo.lines().find_map(|line| {
        line.strip_prefix("recursion_misses:")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// A program's own kernel time: its run time and runs (`bpf_prog_info`), which the kernel
/// counts only while `kernel.bpf_stats_enabled` is 1 (both stay 0 otherwise: the counting
/// costs two clock reads a run). What a tracer costs the traced I/O, measured by the kernel
/// rather than inferred from the load's throughput, which moves with everything else the
/// machine runs. The recorder reports it when it stops, the exporter at each scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramCost {
    pub name: &'static str,
    pub run_ns: u64,
    pub runs: u64,
}

/// [`ProgramCost`] of the loaded program `name` of `ebpf`; `None` if it is not loaded or the
/// kernel does not say.
pub(crate) fn program_cost(ebpf: &Ebpf, name: &'static str) -> Option<ProgramCost> {
    let info = ebpf.program(name)?.info().ok()?;
    Some(ProgramCost {
        name,
        run_ns: info.run_time().as_nanos() as u64,
        runs: info.run_count(),
    })
}

/// The object's program `name` as the kind `T` it is loaded as (`kind` names it in errors).
fn program_of<'a, T>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
    kind: &'static str,
) -> Result<&'a mut T, CaptureError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let load_error = |reason: String| CaptureError::Load {
        program: name,
        kind,
        reason,
        log: String::new(),
    };
    ebpf.program_mut(name)
        .ok_or_else(|| load_error("not in the eBPF object".into()))?
        .try_into()
        .map_err(|e: ProgramError| load_error(e.to_string()))
}

fn load_flush(ebpf: &mut Ebpf, verbose: bool) -> Result<ProgramFd, CaptureError> {
    let program: &mut RawTracePoint = program_of(ebpf, PROG_FLUSH, RAW_TP)?;
    program
        .load()
        .map_err(|e| load_error(PROG_FLUSH, RAW_TP, e, verbose))?;
    let fd = program
        .fd()
        .map_err(|e| load_error(PROG_FLUSH, RAW_TP, e, verbose))?;
    fd.try_clone().map_err(CaptureError::Ring)
}

/// CLOCK_MONOTONIC now, in ns: the clock of `bpf_ktime_get_ns()`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs a raw tracepoint program once on `cpu` (`BPF_PROG_TEST_RUN` with
/// `BPF_F_TEST_RUN_ON_CPU`; the kernel runs it in an IPI there). aya 0.14 has no wrapper.
fn run_on_cpu(program: &ProgramFd, cpu: u32) -> std::io::Result<()> {
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    const BPF_F_TEST_RUN_ON_CPU: u32 = 1 << 0;
    /// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h); unused fields 0.
    #[repr(C)]
    #[derive(Default)]
    struct TestRunAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        _pad: u32,
    }
    let mut attr = TestRunAttr {
        prog_fd: program.as_fd().as_raw_fd() as u32,
        flags: BPF_F_TEST_RUN_ON_CPU,
        cpu,
        ..Default::default()
    };
    // SAFETY: `attr` is a valid, fully initialised bpf_attr prefix of the size passed; the
    // kernel reads it and writes `retval` only.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &raw mut attr,
            size_of::<TestRunAttr>() as libc::c_uint,
        )
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Decodes one ring-buffer record: a single event, or a batch of one CPU's events (see
/// `iosched_trace_common::RawBatch`), keeping those with a time in `window`; returns how
/// many it left out. Malformed records (impossible unless the object and this binary
/// disagree) yield nothing.
fn decode_record(
    bytes: &[u8],
    decoder: &FlagDecoder,
    window: &RangeInclusive<u64>,
    out: &mut Vec<Event>,
) -> u64 {
    const EVENT: usize = size_of::<RawEvent>();
    let raws = if bytes.len() == EVENT {
        bytes
    } else {
        let Some(count) = bytes.get(..4) else {
            return 0;
        };
        let count = u32::from_le_bytes(count.try_into().expect("4 bytes")) as usize;
        let Some(events) = bytes.get(BATCH_HEADER_LEN..BATCH_HEADER_LEN + count * EVENT) else {
            return 0;
        };
        out.reserve(count);
        events
    };
    let mut outside = 0;
    let mut keep = |ev: Event| {
        if window.contains(&ev.ts_ns) {
            out.push(ev);
        } else {
            outside += 1;
        }
    };
    // A D unfolded from a Q waits for the events staged after that Q but before the D (a
    // plug and an unplug, with plug events), so that a CPU's events stay in time order.
    let mut held_issue: Option<Event> = None;
    for raw in raws.chunks_exact(EVENT) {
        let Some((ev, folded)) = decode(raw, decoder) else {
            continue;
        };
        if let Some(d) = held_issue.take_if(|d| d.ts_ns <= ev.ts_ns) {
            keep(d);
        }
        if folded == 0 || ev.kind != EventKind::Queue {
            keep(ev);
            continue;
        }
        // A Q standing for the G and D after it (FOLDED_GETRQ, FOLDED_ISSUE): each has the
        // Q's fields but for its time (the G's in `aux`, the D's `error` ns after the Q)
        // and, for the D, the request.
        keep(Event {
            aux: 0,
            error: 0,
            rq: 0,
            ..ev
        });
        if folded & FOLDED_GETRQ != 0 {
            keep(Event {
                ts_ns: ev.aux,
                kind: EventKind::GetRq,
                aux: 0,
                error: 0,
                rq: 0,
                ..ev
            });
        }
        if folded & FOLDED_ISSUE != 0 {
            if let Some(d) = held_issue.take() {
                keep(d);
            }
            held_issue = Some(Event {
                ts_ns: ev.ts_ns + u64::from(ev.error as u32),
                kind: EventKind::Issue,
                aux: 0,
                error: 0,
                ioprio: if folded & FOLDED_ISSUE_NO_PRIO != 0 {
                    0
                } else {
                    ev.ioprio
                },
                ..ev
            });
        }
    }
    if let Some(d) = held_issue {
        keep(d);
    }
    outside
}

fn attach(
    ebpf: &mut Ebpf,
    name: &'static str,
    btf: &Btf,
    verbose: bool,
) -> Result<(), CaptureError> {
    attach_tracepoint(ebpf, name, name, btf, verbose)
}

/// Creates the object's maps (the ring `ring_size` bytes) with `config` as the programs'
/// globals; no program is loaded yet. The exporter loads the same object for its own
/// programs (`exp_*`) and maps.
pub(crate) fn load_object(
    config: &Config,
    btf: &Btf,
    ring_size: u32,
    verbose: bool,
) -> Result<Ebpf, CaptureError> {
    if EBPF_OBJECT.is_empty() {
        return Err(CaptureError::NoObject);
    }
    let mut loader = EbpfLoader::new();
    loader
        .btf(Some(btf))
        .override_global(iosched_trace_common::GLOBAL_CONFIG, config, true)
        .map_max_entries(MAP_EVENTS, ring_size);
    if verbose {
        loader.verifier_log_level(VerifierLogLevel::VERBOSE | VerifierLogLevel::STATS);
    }
    loader.load(EBPF_OBJECT).map_err(|e| object_error(&e))
}

/// Loads BTF tracepoint program `program` for `tracepoint` and attaches it.
pub(crate) fn attach_tracepoint(
    ebpf: &mut Ebpf,
    program: &'static str,
    tracepoint: &'static str,
    btf: &Btf,
    verbose: bool,
) -> Result<(), CaptureError> {
    let prog: &mut BtfTracePoint = program_of(ebpf, program, TP_BTF)?;
    prog.load(tracepoint, btf)
        .map_err(|e| load_error(program, TP_BTF, e, verbose))?;
    prog.attach()
        .map_err(|source| CaptureError::Attach { program, source })?;
    Ok(())
}

/// The BTF that declares `spec`'s tracepoint: the kernel's own, or for a program that may hang
/// on a module's tracepoint, the kernel's extended with that loaded module's. The error says
/// why there is none, naming the module to load when the tracepoint's is one.
fn declaring_btf<'a>(
    kernel_btf: &'a crate::btf::Btf,
    spec: &ProgramSpec,
) -> Result<Cow<'a, crate::btf::Btf>, String> {
    if kernel_btf.has_tracepoint(spec.name) {
        return Ok(Cow::Borrowed(kernel_btf));
    }
    let Some(module) = spec.module else {
        return Err("tracepoint not in this kernel".to_string());
    };
    match kernel_btf.with_module_of_tracepoint(spec.name) {
        Ok(Some((_, btf))) => Ok(Cow::Owned(btf)),
        Ok(None) => Err(module_not_loaded(spec.name, module, &modules_dep())),
        Err(e) => Err(e.to_string()),
    }
}

/// This kernel's `modules.dep` (empty if absent: a kernel without modules, or a machine
/// without /lib/modules for it).
fn modules_dep() -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    std::fs::read_to_string(format!("/lib/modules/{}/modules.dep", release.trim()))
        .unwrap_or_default()
}

/// Why `tracepoint`, which lives in `module` where that is not built in, cannot be attached:
/// the module is not loaded (it is in `modules_dep`, the kernel's module list), or the kernel
/// has neither.
fn module_not_loaded(tracepoint: &str, module: &str, modules_dep: &str) -> String {
    let scheduler = tracepoint.split('_').next().unwrap_or(tracepoint);
    // modules.dep names files (`kernel/block/kyber-iosched.ko.xz:`); module names have `_`.
    let file = format!("/{}.ko", module.replace('_', "-"));
    let is_module = modules_dep
        .lines()
        .filter_map(|l| l.split(':').next())
        .any(|f| f.replace('_', "-").contains(&file));
    if is_module {
        format!(
            "{scheduler} is a module in this kernel ({module}) and not loaded yet: it loads when a \
             device's scheduler is set to {scheduler} (`echo {scheduler} > \
             /sys/block/DEV/queue/scheduler`); record again after that"
        )
    } else {
        format!(
            "tracepoint not in this kernel (neither built in nor in a loaded module; {scheduler} \
             may be a module ({module}) not loaded yet)"
        )
    }
}

/// Loads and attaches a raw tracepoint program named after its tracepoint.
fn attach_raw(ebpf: &mut Ebpf, name: &'static str, verbose: bool) -> Result<(), CaptureError> {
    let program: &mut RawTracePoint = program_of(ebpf, name, RAW_TP)?;
    program
        .load()
        .map_err(|e| load_error(name, RAW_TP, e, verbose))?;
    program
        .attach(name)
        .map_err(|source| CaptureError::Attach {
            program: name,
            source,
        })?;
    Ok(())
}

/// One line for a failed object load: each level of the cause chain once (its own text
/// without its source's), and what to do when the kernel said "not permitted".
fn object_error(error: &aya::EbpfError) -> CaptureError {
    let mut parts: Vec<String> = Vec::new();
    let mut eperm = false;
    let mut level: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = level {
        let text = e.to_string();
        let own = match e.source() {
            Some(src) => text
                .strip_suffix(&src.to_string())
                .map(|t| t.trim_end_matches([':', ' ']).to_string())
                .unwrap_or(text),
            None => text,
        };
        if !own.is_empty() && !parts.iter().any(|p| p.contains(&own)) {
            parts.push(own);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            eperm |= io.raw_os_error() == Some(libc::EPERM);
        }
        level = e.source();
    }
    let mut msg = parts.join(": ");
    if eperm {
        msg.push_str(
            " (the kernel refused BPF: run as root in the host's initial user namespace; \
             containers, user namespaces and kernel lockdown can forbid it)",
        );
    }
    CaptureError::Object(msg)
}

fn load_error(
    program: &'static str,
    kind: &'static str,
    error: ProgramError,
    verbose: bool,
) -> CaptureError {
    let (reason, log) = match &error {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let reason = match io_error.raw_os_error() {
                Some(libc::EPERM) => format!(
                    "{io_error} (kernel lockdown or missing CAP_BPF/CAP_PERFMON can cause this)"
                ),
                _ => io_error.to_string(),
            };
            let log = if verbose {
                format!("\nverifier log:\n{verifier_log}")
            } else {
                String::from(" (run with -v for the verifier log)")
            };
            (reason, log)
        }
        other => (other.to_string(), String::new()),
    };
    CaptureError::Load {
        program,
        kind,
        reason,
        log,
    }
}

/// Turns one ring-buffer record into an [`Event`], with its [`RawEvent::folded`] (which
/// `decode_record` unfolds). Records of a foreign size or an unknown kind (impossible unless
/// the object and this binary disagree) are dropped.
fn decode(bytes: &[u8], decoder: &FlagDecoder) -> Option<(Event, u16)> {
    if bytes.len() < size_of::<RawEvent>() {
        return None;
    }
    // SAFETY: the length is checked; RawEvent is plain data valid for any bit pattern, and
    // read_unaligned copes with the ring's 8-byte alignment.
    let raw: RawEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let kind = EventKind::from_code(raw.kind)?;
    let (op, flags) = decoder.decode(raw.cmd_flags);
    let ev = Event {
        ts_ns: raw.ts_ns,
        kind,
        cpu: raw.cpu,
        pid: raw.pid,
        tgid: raw.tgid,
        comm: Comm(raw.comm),
        cgroup_id: raw.cgroup_id,
        dev: Dev::from_kernel(raw.dev),
        // A request without a start sector (a flush) has `__sector == -1`; the kernel's own
        // tracers print 0 for it (blk_rq_trace_sector), and so do we.
        sector: if raw.sector == u64::MAX {
            0
        } else {
            raw.sector
        },
        bytes: raw.bytes,
        op,
        flags,
        ioprio: raw.ioprio,
        rq: raw.rq,
        bio: raw.bio,
        // blk_status_t -> errno, as blktrace reports it.
        error: if kind == EventKind::Complete || kind == EventKind::BioComplete {
            blk_status_to_errno(raw.error)
        } else {
            raw.error
        },
        aux: raw.aux,
    };
    Some((ev, raw.folded))
}

/// The kernel's `blk_status_to_errno` (block/blk-core.c `blk_errors`, indexed by the
/// `BLK_STS_*` values of include/linux/blk_types.h; these are `#define`s, absent from BTF).
/// Statuses have only been appended over time; unknown ones map to -EIO as the kernel does.
pub fn blk_status_to_errno(status: i32) -> i32 {
    match status {
        0 => 0,
        1 => -libc::EOPNOTSUPP,
        2 => -libc::ETIMEDOUT,
        3 => -libc::ENOSPC,
        4 => -libc::ENOLINK,
        5 => -libc::EREMOTEIO,
        6 => -libc::EBADE,
        7 => -libc::ENODATA,
        8 => -libc::EILSEQ,
        9 => -libc::ENOMEM,
        11 => -libc::EREMCHG,
        12 => -libc::EAGAIN,
        13 => -libc::EBUSY,
        14 => -libc::ETOOMANYREFS,
        15 => -libc::EOVERFLOW,
        16 => -libc::ENODEV,
        17 => -libc::ETIME,
        19 => -libc::EINVAL,
        _ => -libc::EIO,
    }
}

/// The set of kinds a recording of these programs can contain (for reports of what was
/// traced).
pub fn kinds_of(programs: &[&str]) -> BTreeSet<EventKind> {
    programs
        .iter()
        .filter_map(|p| {
            Some(match *p {
                "block_bio_queue" => EventKind::Queue,
                "block_getrq" => EventKind::GetRq,
                "block_bio_backmerge" => EventKind::BackMerge,
                "block_bio_frontmerge" => EventKind::FrontMerge,
                "block_rq_merge" => EventKind::RqMerge,
                "block_rq_insert" => EventKind::Insert,
                "block_rq_issue" => EventKind::Issue,
                "block_rq_complete" => EventKind::Complete,
                "block_rq_requeue" => EventKind::Requeue,
                "block_plug" => EventKind::Plug,
                "block_unplug" => EventKind::Unplug,
                "block_split" => EventKind::Split,
                "block_bio_complete" => EventKind::BioComplete,
                "block_io_start" => EventKind::IoStart,
                "block_io_done" => EventKind::IoDone,
                "kyber_throttled" => EventKind::KyberThrottled,
                "kyber_adjust" => EventKind::KyberAdjust,
                "wbt_step" => EventKind::WbtStep,
                "wbt_timer" => EventKind::WbtTimer,
                "sched_waking" => EventKind::Wakeup,
                _ => return None,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_module_not_loaded_is_named() {
        // As depmod writes Debian 6.12's (compressed modules, no dependencies).
        let dep = "kernel/block/bfq.ko.xz:\nkernel/block/kyber-iosched.ko.xz:\n";
        let why = module_not_loaded("kyber_throttled", "kyber_iosched", dep);
        assert!(
            why.contains("kyber is a module in this kernel (kyber_iosched) and not loaded yet"),
            "{why}"
        );
        assert!(
            why.contains("echo kyber > /sys/block/DEV/queue/scheduler"),
            "{why}"
        );
        let why = module_not_loaded("kyber_adjust", "kyber_iosched", "kernel/block/bfq.ko:\n");
        assert!(why.starts_with("tracepoint not in this kernel"), "{why}");
    }

    /// A Q event at `ts_ns`, as the kernel stages it.
    fn raw_queue(ts_ns: u64) -> RawEvent {
        RawEvent {
            ts_ns,
            rq: 0,
            bio: 0,
            sector: 0,
            cgroup_id: 0,
            aux: 0,
            pid: 1,
            tgid: 1,
            comm: [0; 16],
            dev: 7 << 20,
            bytes: 4096,
            cmd_flags: 0,
            error: 0,
            kind: iosched_trace_common::kind::BIO_QUEUE,
            cpu: 0,
            ioprio: 0,
            folded: 0,
        }
    }

    /// A ring record as the kernel writes it: one event alone, or a batch of them.
    fn record_of(times: &[u64]) -> Vec<u8> {
        let raws: Vec<RawEvent> = times.iter().map(|&ts| raw_queue(ts)).collect();
        record_of_raws(&raws)
    }

    fn record_of_raws(raws: &[RawEvent]) -> Vec<u8> {
        let bytes = |ev: &RawEvent| {
            // SAFETY: RawEvent is plain data without padding bytes left undefined.
            unsafe {
                std::slice::from_raw_parts(
                    (ev as *const RawEvent).cast::<u8>(),
                    size_of::<RawEvent>(),
                )
            }
            .to_vec()
        };
        if let [raw] = raws {
            return bytes(raw);
        }
        let mut out = (raws.len() as u32).to_le_bytes().to_vec();
        out.resize(BATCH_HEADER_LEN, 0);
        for raw in raws {
            out.extend(bytes(raw));
        }
        out
    }

    #[test]
    fn a_folded_issue_becomes_the_d_event_of_its_request() {
        let decoder = FlagDecoder::without_bits();
        let folded = |ts_ns: u64, folds: u16| RawEvent {
            bio: 0xb10,
            sector: 2048,
            cgroup_id: 42,
            ioprio: 3,
            aux: ts_ns + 30,
            rq: 0xa11,
            error: 50,
            folded: folds,
            ..raw_queue(ts_ns)
        };
        let mut out = Vec::new();
        decode_record(
            &record_of_raws(&[
                folded(100, FOLDED_GETRQ | FOLDED_ISSUE),
                folded(200, FOLDED_ISSUE | FOLDED_ISSUE_NO_PRIO),
            ]),
            &decoder,
            &(0..=1000),
            &mut out,
        );
        let seen: Vec<_> = out
            .iter()
            .map(|e| (e.kind, e.ts_ns, e.rq, e.aux, e.error, e.sector, e.ioprio))
            .collect();
        assert_eq!(
            seen,
            [
                (EventKind::Queue, 100, 0, 0, 0, 2048, 3),
                (EventKind::GetRq, 130, 0, 0, 0, 2048, 3),
                (EventKind::Issue, 150, 0xa11, 0, 0, 2048, 3),
                // D folded without a G (the G was staged as its own event), from a request
                // without a priority of its own.
                (EventKind::Queue, 200, 0, 0, 0, 2048, 3),
                (EventKind::Issue, 250, 0xa11, 0, 0, 2048, 0),
            ]
        );
        assert!(
            out.iter()
                .all(|e| e.cgroup_id == 42 && e.pid == 1 && e.bio == 0xb10)
        );
    }

    #[test]
    fn a_d_folded_past_a_plug_and_unplug_comes_after_them() {
        // With plug events a read's events on the submitting CPU are Q G P U D: the D folds
        // into the Q past the P and U, and comes out after them again, in time order.
        let decoder = FlagDecoder::without_bits();
        let q = RawEvent {
            aux: 130,
            rq: 0xa11,
            error: 90,
            folded: FOLDED_GETRQ | FOLDED_ISSUE,
            ..raw_queue(100)
        };
        let plug = RawEvent {
            kind: iosched_trace_common::kind::PLUG,
            ..raw_queue(150)
        };
        let unplug = RawEvent {
            kind: iosched_trace_common::kind::UNPLUG,
            aux: 1,
            ..raw_queue(170)
        };
        let read = [
            (EventKind::Queue, 100),
            (EventKind::GetRq, 130),
            (EventKind::Plug, 150),
            (EventKind::Unplug, 170),
            (EventKind::Issue, 190),
        ];
        let mut then_next_q = read.to_vec();
        then_next_q.push((EventKind::Queue, 300));
        for (record, expected) in [
            (vec![q, plug, unplug, raw_queue(300)], then_next_q),
            // The D is the record's last event.
            (vec![q, plug, unplug], read.to_vec()),
        ] {
            let mut out = Vec::new();
            decode_record(&record_of_raws(&record), &decoder, &(0..=1000), &mut out);
            let seen: Vec<_> = out.iter().map(|e| (e.kind, e.ts_ns)).collect();
            assert_eq!(seen, expected);
            let issue = out.iter().find(|e| e.kind == EventKind::Issue).unwrap();
            assert_eq!(issue.rq, 0xa11);
        }
    }

    #[test]
    fn a_folded_getrq_becomes_the_g_event_it_stands_for() {
        let decoder = FlagDecoder::without_bits();
        let folded = |ts_ns: u64, g_ns: u64| RawEvent {
            bio: 0xb10,
            sector: 2048,
            cgroup_id: 42,
            comm: *b"fio\0\0\0\0\0\0\0\0\0\0\0\0\0",
            ioprio: 3,
            aux: g_ns,
            folded: FOLDED_GETRQ,
            ..raw_queue(ts_ns)
        };
        let mut out = Vec::new();
        let left_out = decode_record(
            &record_of_raws(&[folded(100, 130), raw_queue(150), folded(190, 210)]),
            &decoder,
            &(100..=200),
            &mut out,
        );
        // The last G is after the window: left out like any event there, its Q kept.
        assert_eq!(left_out, 1);
        let seen: Vec<_> = out.iter().map(|e| (e.kind, e.ts_ns, e.aux)).collect();
        assert_eq!(
            seen,
            [
                (EventKind::Queue, 100, 0),
                (EventKind::GetRq, 130, 0),
                (EventKind::Queue, 150, 0),
                (EventKind::Queue, 190, 0),
            ]
        );
        // Everything but kind, time and aux is the Q's.
        let (q, g) = (&out[0], &out[1]);
        assert_eq!(
            (
                g.bio,
                g.sector,
                g.bytes,
                g.cgroup_id,
                g.ioprio,
                g.pid,
                g.tgid
            ),
            (
                q.bio,
                q.sector,
                q.bytes,
                q.cgroup_id,
                q.ioprio,
                q.pid,
                q.tgid
            )
        );
        assert_eq!(
            (g.comm.0, g.dev, g.cpu, g.op),
            (q.comm.0, q.dev, q.cpu, q.op)
        );
        assert_eq!(g.bio, 0xb10);
        // The flag means nothing on another kind: no G made of a C.
        let mut out = Vec::new();
        let not_a_queue = RawEvent {
            kind: iosched_trace_common::kind::RQ_COMPLETE,
            ..folded(120, 140)
        };
        decode_record(
            &record_of_raws(&[not_a_queue]),
            &decoder,
            &(0..=1000),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, EventKind::Complete);
    }

    #[test]
    fn only_events_inside_the_window_all_programs_were_attached_are_kept() {
        let decoder = FlagDecoder::without_bits();
        let window = 100..=200;
        let mut out = Vec::new();
        // A batch staged across the last attach and the first detach: its ends are left out.
        let left_out = decode_record(
            &record_of(&[99, 100, 150, 200, 201]),
            &decoder,
            &window,
            &mut out,
        );
        assert_eq!(left_out, 2);
        assert_eq!(
            out.iter().map(|e| e.ts_ns).collect::<Vec<_>>(),
            [100, 150, 200]
        );
        // A lone event (sent directly, not staged) is judged the same way.
        assert_eq!(
            decode_record(&record_of(&[50]), &decoder, &window, &mut out),
            1
        );
        assert_eq!(
            decode_record(&record_of(&[180]), &decoder, &window, &mut out),
            0
        );
        assert_eq!(out.len(), 4);
    }

    #[test]
    fn check_trial_merges_the_plug_events_load() {
        let counting = Trial {
            attached: vec!["block_bio_queue", "block_unplug", "wbt_step"],
            skipped: vec![("kyber_adjust", "not loaded".into())],
        };
        let events = Trial {
            attached: vec!["block_plug", "block_unplug"],
            skipped: vec![("kyber_adjust", "again".into())],
        };
        let merged = merge_trials(&counting, &events);
        // block_plug where `record` attaches it (before block_unplug), block_unplug once.
        assert_eq!(
            merged.attached,
            ["block_bio_queue", "block_plug", "block_unplug", "wbt_step"]
        );
        assert_eq!(merged.skipped, [("kyber_adjust", "not loaded".to_string())]);
    }

    #[test]
    fn recursion_misses_are_read_from_a_programs_fdinfo() {
        // As Linux 6.x prints a tracing program's fdinfo.
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t2061\nprog_type:\t26\n\
                    prog_jited:\t1\nprog_tag:\t3b185187f1855c4c\nmemlock:\t4096\nprog_id:\t512\n\
                    run_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t17\nverified_insns:\t1234\n";
        assert_eq!(parse_recursion_misses(info), Some(17));
        // Before 5.12 the line does not exist: unknown, not zero.
        let old = "prog_type:\t26\nprog_jited:\t1\nrun_time_ns:\t0\nrun_cnt:\t0\n";
        assert_eq!(parse_recursion_misses(old), None);
        assert_eq!(parse_recursion_misses("recursion_misses:\tmany\n"), None);
    }
}
