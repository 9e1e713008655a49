//! Loading and attaching the eBPF programs, and draining their ring buffer into [`Event`]s.
//!
//! Owns: the `Ebpf` object, its maps, the ring-buffer file descriptor registered with tokio,
//! the decoding of raw kernel records, and the kernel's loss counters.
//! Must not: write files or decide what a recording contains.

use std::{collections::BTreeSet, time::Duration};

use aya::{
    Btf, Ebpf, EbpfLoader, VerifierLogLevel,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, ProgramError},
};
use iosched_trace_common::{Config, MAP_DEVICES, MAP_EVENTS, MAP_STATS, RawEvent, stat};
use tokio::io::{Interest, unix::AsyncFd};

use crate::{
    devices::Disk,
    event::{Comm, Dev, Event, EventKind},
    probe::{FlagDecoder, KernelLayout},
    record::Stats,
};

/// The compiled eBPF object, built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/iosched-trace"));

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "this iosched-trace binary contains no eBPF programs (built with AYA_BUILD_SKIP); rebuild it with `cargo xtask build`"
    )]
    NoObject,
    #[error("cannot read the kernel BTF: {0}")]
    Btf(#[source] aya::BtfError),
    #[error("cannot prepare the eBPF object: {0}")]
    Object(#[source] aya::EbpfError),
    #[error(
        "the kernel refused to load program {program} (BPF program type tracing, attach type tp_btf): {reason}{log}"
    )]
    Load {
        program: &'static str,
        reason: String,
        /// The verifier log, only filled in verbose mode.
        log: String,
    },
    #[error("cannot attach program {program} to tracepoint {program}: {source}")]
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
}

/// A program and the tracepoint it hangs on (named alike).
struct ProgramSpec {
    name: &'static str,
    /// Needed for a useful recording; otherwise attached if the kernel has the tracepoint.
    required: bool,
    when: When,
}

#[derive(PartialEq)]
enum When {
    Always,
    /// Only if a traced device is bio-based: request-based devices report their bios through
    /// the request completion instead, and this would double the completion events.
    BioBasedDevice,
    /// Only on request (`--extra-events`): accounting start/end, close to D and C.
    Extra,
}

const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "block_bio_queue",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_getrq",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_bio_backmerge",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_bio_frontmerge",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_rq_merge",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_rq_insert",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_rq_issue",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_rq_complete",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_rq_requeue",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_plug",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_unplug",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_split",
        required: true,
        when: When::Always,
    },
    ProgramSpec {
        name: "block_bio_complete",
        required: false,
        when: When::BioBasedDevice,
    },
    ProgramSpec {
        name: "block_io_start",
        required: false,
        when: When::Extra,
    },
    ProgramSpec {
        name: "block_io_done",
        required: false,
        when: When::Extra,
    },
    ProgramSpec {
        name: "kyber_throttled",
        required: false,
        when: When::Always,
    },
    ProgramSpec {
        name: "kyber_adjust",
        required: false,
        when: When::Always,
    },
];

/// Which programs to attach: each one costs the traced workload on every event it sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgramSet {
    /// Everything a recording holds.
    #[default]
    All,
    /// Only what the timeline needs to rebuild request lives (Q, G, M/F, request merges, I,
    /// D with its bio links, C, R; bio completions on bio-based devices): no plug/unplug,
    /// split or kyber events. The live view's set.
    Lifecycle,
}

/// The programs [`ProgramSet::Lifecycle`] keeps.
const LIFECYCLE: &[&str] = &[
    "block_bio_queue",
    "block_getrq",
    "block_bio_backmerge",
    "block_bio_frontmerge",
    "block_rq_merge",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_complete",
    "block_rq_requeue",
    "block_bio_complete",
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
    pub verbose: bool,
    pub programs: ProgramSet,
}

pub struct Capture {
    // Field order matters on drop: programs (in `ebpf`) detach before the maps close.
    ebpf: Option<Ebpf>,
    ring: AsyncFd<RingBuf<MapData>>,
    stats: PerCpuArray<MapData, u64>,
    decoder: FlagDecoder,
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
        let config = Config {
            self_tgid: std::process::id(),
            filter_devices: u32::from(!options.disks.is_empty()),
            wakeup_bytes: options.wakeup_bytes,
            bio_cgroup: u32::from(layout.bio_cgroup),
            _pad: 0,
            off: layout.offsets,
        };
        let mut loader = EbpfLoader::new();
        loader
            .btf(Some(&btf))
            .override_global(iosched_trace_common::GLOBAL_CONFIG, &config, true)
            .map_max_entries(MAP_EVENTS, options.ring_size);
        if options.verbose {
            loader.verifier_log_level(VerifierLogLevel::VERBOSE | VerifierLogLevel::STATS);
        }
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(CaptureError::Object)?;

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

        let any_bio_based = options.disks.iter().any(|d| !d.request_based);
        let mut attached = Vec::new();
        let mut skipped = Vec::new();
        for spec in PROGRAMS {
            let wanted = match spec.when {
                When::Always => true,
                When::BioBasedDevice => any_bio_based,
                When::Extra => options.extra_events,
            };
            let in_set = match options.programs {
                ProgramSet::All => true,
                ProgramSet::Lifecycle => LIFECYCLE.contains(&spec.name),
            };
            if !wanted || !in_set {
                continue;
            }
            if !spec.required && !kernel_btf.has_tracepoint(spec.name) {
                skipped.push((spec.name, "tracepoint not in this kernel".to_string()));
                continue;
            }
            let attached_one = crate::probe::check_prototype(kernel_btf, spec.name)
                .map_err(|e| CaptureError::Layout(e.to_string()))
                .and_then(|()| attach(&mut ebpf, spec.name, &btf, options.verbose));
            match attached_one {
                Ok(()) => attached.push(spec.name),
                Err(e) if !spec.required => skipped.push((spec.name, e.to_string())),
                Err(e) => return Err(e),
            }
        }

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
        Ok(Self {
            ebpf: Some(ebpf),
            ring,
            stats,
            decoder: layout.flags.clone(),
            attached,
            skipped,
        })
    }

    /// Waits until the kernel signals data (or `timeout` passes: with batched wake-ups the
    /// last few events of a quiet period sit below the wake-up threshold), then drains every
    /// complete record into `out`.
    pub async fn next_batch(
        &mut self,
        out: &mut Vec<Event>,
        timeout: Duration,
    ) -> Result<(), CaptureError> {
        if let Ok(guard) = tokio::time::timeout(timeout, self.ring.readable_mut()).await {
            let mut guard = guard.map_err(CaptureError::Ring)?;
            guard.clear_ready();
        }
        self.drain(out);
        Ok(())
    }

    /// Takes every record currently in the ring, without waiting.
    pub fn drain(&mut self, out: &mut Vec<Event>) {
        let decoder = &self.decoder;
        let ring = self.ring.get_mut();
        while let Some(item) = ring.next() {
            if let Some(ev) = decode(&item, decoder) {
                out.push(ev);
            }
        }
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
            sent: get(stat::SENT)?.iter().sum(),
        })
    }

    /// Detaches every program; the ring buffer stays readable so the last events can be
    /// drained.
    pub fn detach(&mut self) {
        self.ebpf = None;
    }
}

fn attach(
    ebpf: &mut Ebpf,
    name: &'static str,
    btf: &Btf,
    verbose: bool,
) -> Result<(), CaptureError> {
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| CaptureError::Load {
            program: name,
            reason: "not in the eBPF object".into(),
            log: String::new(),
        })?
        .try_into()
        .map_err(|e: ProgramError| CaptureError::Load {
            program: name,
            reason: e.to_string(),
            log: String::new(),
        })?;
    program
        .load(name, btf)
        .map_err(|e| load_error(name, e, verbose))?;
    program.attach().map_err(|source| CaptureError::Attach {
        program: name,
        source,
    })?;
    Ok(())
}

fn load_error(program: &'static str, error: ProgramError, verbose: bool) -> CaptureError {
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
        reason,
        log,
    }
}

/// Turns one ring-buffer record into an [`Event`]. Records of a foreign size or an unknown kind
/// (impossible unless the object and this binary disagree) are dropped.
fn decode(bytes: &[u8], decoder: &FlagDecoder) -> Option<Event> {
    if bytes.len() < size_of::<RawEvent>() {
        return None;
    }
    // SAFETY: the length is checked; RawEvent is plain data valid for any bit pattern, and
    // read_unaligned copes with the ring's 8-byte alignment.
    let raw: RawEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let kind = EventKind::from_code(raw.kind)?;
    let (op, flags) = decoder.decode(raw.cmd_flags);
    Some(Event {
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
    })
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
                _ => return None,
            })
        })
        .collect()
}
