//! Wire types shared by the eBPF programs and userspace: plain `#[repr(C)]` data, explicit
//! padding, size asserts and constants. No logic, no `bool`, no Rust enums across the kernel
//! boundary (the kernel side writes raw integers; userspace validates them).
#![no_std]

/// Event kinds, as written by the kernel into [`RawEvent::kind`].
pub mod kind {
    /// `block_bio_queue`: a bio entered the block layer (blktrace Q).
    pub const BIO_QUEUE: u16 = 1;
    /// `block_getrq`: a request was allocated for a bio (G).
    pub const GETRQ: u16 = 2;
    /// `block_bio_backmerge`: bio appended to an existing request (M).
    pub const BIO_BACKMERGE: u16 = 3;
    /// `block_bio_frontmerge`: bio prepended to an existing request (F).
    pub const BIO_FRONTMERGE: u16 = 4;
    /// `block_rq_merge`: a request was merged into another one and disappears (M on the rq).
    pub const RQ_MERGE: u16 = 5;
    /// `block_rq_insert`: request handed to the I/O scheduler (I).
    pub const RQ_INSERT: u16 = 6;
    /// `block_rq_issue`: request issued to the driver (D).
    pub const RQ_ISSUE: u16 = 7;
    /// `block_rq_complete`: (part of) a request completed (C). `aux` = bytes completed.
    pub const RQ_COMPLETE: u16 = 8;
    /// `block_rq_requeue`: request put back by the driver (R).
    pub const RQ_REQUEUE: u16 = 9;
    /// `block_plug`: a plug started on a queue (P).
    pub const PLUG: u16 = 10;
    /// `block_unplug`: plugged requests released. `aux` = depth, `error` = 1 if explicit (U) or
    /// 0 if from the timer/schedule path (UT).
    pub const UNPLUG: u16 = 11;
    /// `block_split`: bio split. `aux` = the new (second part's) start sector (X).
    pub const SPLIT: u16 = 12;
    /// `block_bio_complete`: a bio completed on a bio-based device (C for bios).
    pub const BIO_COMPLETE: u16 = 13;
    /// `block_io_start`: request accounting started (6.5+).
    pub const IO_START: u16 = 14;
    /// `block_io_done`: request accounting finished (6.5+).
    pub const IO_DONE: u16 = 15;
    /// Emitted at issue for every bio chained in the request: links `bio` to `rq`, so bios that
    /// were merged (whose merge tracepoint carries no request) are attributed to their request
    /// exactly. `aux` = position in the chain (0 = first bio).
    pub const BIO_IN_RQ: u16 = 16;
    /// `kyber_throttled`: kyber refused a token for a domain. `aux` = domain index.
    pub const KYBER_THROTTLED: u16 = 17;
    /// `kyber_adjust`: kyber changed a domain's depth. `aux` = domain | depth << 32.
    pub const KYBER_ADJUST: u16 = 18;
    /// `wbt_step`: writeback throttling changed its scale step. `aux` = step (as i32) | max
    /// depth << 32 (its background and normal limits follow from the max depth:
    /// `calc_wb_limits`), `sector` = monitoring window (ns).
    pub const WBT_STEP: u16 = 19;
    /// `wbt_timer`: writeback throttling timer fired. `aux` = inflight | step << 32, `error`
    /// = status (1 latency ok, 2 unknown, 3 unknown with writes, 4 exceeded).
    pub const WBT_TIMER: u16 = 20;
    /// blktrace A (`block_bio_remap`/`block_rq_remap`), read from blktrace files only: `dev`
    /// and `sector` are the target, `aux` = the original sector, `error` = the original
    /// device as a kernel `dev_t`.
    pub const REMAP: u16 = 21;
    /// blktrace S (sleep waiting for a request), read from blktrace files only (no current
    /// kernel emits it).
    pub const SLEEPRQ: u16 = 22;
    /// blktrace B (bounce), read from blktrace files only (no current kernel emits it).
    pub const BOUNCE: u16 = 23;
    /// `sched_waking` (`record --wakeups`): the current task (the event's pid/tgid/comm, the
    /// waker) woke a task that queued I/O on a traced device. `aux` = wakee pid | wakee
    /// tgid << 32; `dev` = the device the wakee last queued a bio on.
    pub const WAKEUP: u16 = 24;
    /// One past the largest kind.
    pub const MAX: u16 = 25;
}

/// Indices into the per-CPU `STATS` array.
pub mod stat {
    /// Events that could not be reserved in the ring buffer (lost).
    pub const LOST: u32 = 0;
    /// Kernel reads known to have failed: a device whose disk could not be read (its
    /// events are dropped), a faulting `bpf_probe_read_kernel` in the issue's bio-chain walk
    /// or of a kyber domain name (the event is sent with zeroed fields). The fields loaded
    /// directly through BTF pointers read as 0 when they fault, and are not counted.
    pub const READ_ERRORS: u32 = 1;
    /// Events submitted to the ring buffer.
    pub const SENT: u32 = 2;
    /// Requests whose bio chain was longer than the issue program walks: their later bios
    /// have no BIO_IN_RQ link.
    pub const CHAIN_TRUNCATED: u32 = 3;
    /// Unplugs (and the plugs counted with them) not counted because `PLUG_COUNTS` had no room
    /// for their device.
    pub const PLUG_DEVICES_FULL: u32 = 4;
    pub const COUNT: u32 = 5;
}

/// Map and global names, so both sides agree.
pub const MAP_EVENTS: &str = "EVENTS";
pub const MAP_STATS: &str = "STATS";
pub const MAP_DEVICES: &str = "DEVICES";
/// The raw tracepoint program userspace runs (`BPF_PROG_TEST_RUN` on each CPU) to push out
/// the events staged on that CPU.
pub const PROG_FLUSH: &str = "flush_staged";
pub const GLOBAL_CONFIG: &str = "CONFIG";
/// The `sched_waking` program (`record --wakeups`): the tracepoint that fires in the
/// waker's context.
pub const PROG_WAKEUP: &str = "sched_waking";
/// The request completion program: it runs once per request.
pub const PROG_COMPLETE: &str = "block_rq_complete";

/// Absent field marker in [`Offsets`]: the program skips the read and leaves the field zero.
pub const NO_OFFSET: u32 = u32::MAX;

/// Byte offsets of the kernel struct fields the programs read, found in the running kernel's
/// BTF at load time (never hard-coded: they differ between kernels and configs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Offsets {
    pub rq_q: u32,
    pub rq_bio: u32,
    /// `request.biotail`: a request whose first bio is its last has no chain to walk.
    pub rq_biotail: u32,
    pub rq_sector: u32,
    pub rq_data_len: u32,
    pub rq_cmd_flags: u32,
    pub rq_ioprio: u32,
    pub q_disk: u32,
    pub disk_major: u32,
    pub disk_first_minor: u32,
    pub bio_bdev: u32,
    pub bio_opf: u32,
    pub bio_sector: u32,
    pub bio_size: u32,
    pub bio_ioprio: u32,
    pub bio_next: u32,
    pub bio_status: u32,
    pub bio_blkg: u32,
    pub bdev_disk: u32,
    pub blkg_blkcg: u32,
    pub css_cgroup: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
    /// Offset of `css` inside `struct blkcg` (usually 0).
    pub blkcg_css: u32,
    /// `task_struct.pid` and `.tgid` (the wakee of `sched_waking`).
    pub task_pid: u32,
    pub task_tgid: u32,
    /// `task_struct.comm`, `task_struct.cgroups`, `css_set.dfl_cgrp`: the current task's
    /// name and cgroup2 id, read directly (two helper calls cost more on every task change).
    pub task_comm: u32,
    pub task_cgroups: u32,
    pub cset_dfl_cgrp: u32,
    /// `backing_dev_info.owner` (the disk's device; its `dev` is the bdi's own class device,
    /// numbered 0:0) and `device.devt`: the disk of a wbt event.
    pub bdi_owner: u32,
    pub device_devt: u32,
}

/// Global configuration handed to the programs with `EbpfLoader::override_global`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Our own process: its bios are not traced.
    pub self_tgid: u32,
    /// 1: only devices in the `DEVICES` map produce events; 0: every device.
    pub filter_devices: u32,
    /// Submit with a wake-up only once this many bytes wait in the ring (batching wake-ups is
    /// most of the cost difference between a naive and a cheap recorder).
    pub wakeup_bytes: u64,
    /// Read the cgroup from the bio's blkcg (1) or from the current task (0).
    pub bio_cgroup: u32,
    /// 1 (`record --wakeups`): Q events remember their task in `IO_TASKS`, for the
    /// `sched_waking` program's filter. 0: the Q path skips that insert entirely.
    pub wakeups: u32,
    /// 1 (`record --plug-events`): plug and unplug are sent as events. 0: they are only
    /// counted per device in `PLUG_COUNTS` by `block_unplug`, and `block_plug` is not attached
    /// (what btt's plug figures need, for a fraction of the cost: two of the six events of a
    /// plain read, and one tracepoint fewer).
    pub plug_events: u32,
    pub off: Offsets,
}

/// Per-device plug counters (the `PLUG_COUNTS` per-CPU hash map, keyed by the whole disk's
/// kernel `dev_t`), kept when plug and unplug are not sent as events. Cumulative since load;
/// userspace sums the CPUs.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PlugCounts {
    /// Plug lists flushed holding requests for the device, counted on each `block_unplug`
    /// (blktrace's P where a plug holds one device's requests; `block_plug` is not attached).
    pub plugs: u64,
    /// `block_unplug` with `explicit` set: the submitter flushed its plug (U).
    pub unplugs_explicit: u64,
    /// `block_unplug` from the schedule path: the submitter slept with a plug (UT).
    pub unplugs_timer: u64,
    /// Requests the unplugs released (the tracepoint's `depth`), summed.
    pub unplugged_requests: u64,
}

/// The per-CPU hash map of [`PlugCounts`].
pub const MAP_PLUG_COUNTS: &str = "PLUG_COUNTS";

/// Devices whose plug counters a CPU keeps in its staging area ([`Staging::plug_counts`]),
/// the first ones it unplugs; the rest go to `PLUG_COUNTS`.
pub const STAGED_PLUG_DEVICES: usize = 2;

/// One device's plug counters in a CPU's staging area.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StagedPlugCounts {
    /// [`staged_plug_key`] of the device (its `dev_t` and a bit that tells a used slot from a
    /// free one, 0).
    pub key: u64,
    pub counts: PlugCounts,
}

/// [`StagedPlugCounts::key`] of the kernel `dev_t` `dev`.
pub const fn staged_plug_key(dev: u32) -> u64 {
    dev as u64 | 1 << 32
}
/// Devices `PLUG_COUNTS` holds at most (more are counted in `stat::PLUG_DEVICES_FULL`).
pub const PLUG_COUNT_DEVICES: u32 = 1024;

/// One event, as the kernel writes it into the ring buffer. 96 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC).
    pub ts_ns: u64,
    /// `struct request *` (0 if the event is about a bio only): the request identity.
    pub rq: u64,
    /// `struct bio *` (0 if none).
    pub bio: u64,
    pub sector: u64,
    /// cgroup v2 id (kernfs node id) of the bio's blkcg or of the current task.
    pub cgroup_id: u64,
    /// Kind-specific value, see [`kind`].
    pub aux: u64,
    pub pid: u32,
    pub tgid: u32,
    /// Kernel `dev_t`: `major << 20 | minor`, of the whole disk.
    pub dev: u32,
    pub bytes: u32,
    /// Raw `blk_opf_t` (`REQ_OP_*` in the low bits and `REQ_*` flags); decoded in userspace
    /// with the bit numbers read from the kernel's BTF.
    pub cmd_flags: u32,
    /// Completion status (`blk_status_t`) for completions; see [`kind`] for others.
    pub error: i32,
    pub kind: u16,
    pub cpu: u16,
    pub ioprio: u16,
    /// On a Q event, the events after it that it also stands for: [`FOLDED_GETRQ`],
    /// [`FOLDED_ISSUE`]; otherwise 0.
    pub folded: u16,
    pub comm: [u8; 16],
}

/// In [`RawEvent::folded`] of a Q event (`kind::BIO_QUEUE`): the `block_getrq` of the same bio
/// followed on the same CPU, from the same task, with no event staged in between, and
/// every field its own event would have had is this event's (the bio's sector, size, flags
/// and priority read again at G and found unchanged; the task's cgroup, which a G carries,
/// equal to the bio's, which a Q carries), but for its time, which is this event's `aux`.
/// Userspace makes the G event of it. It saves the G a staging slot and 96 bytes of ring,
/// about a fifth of its program's time (docs/PERFORMANCE.md): with one request per bio,
/// every request has a G.
pub const FOLDED_GETRQ: u16 = 1;

/// In [`RawEvent::folded`] of a Q event: the `block_rq_issue` (D) of the request made of this
/// bio alone followed on the same CPU, from the same task, with nothing staged in between
/// but its G (folded too, or none) and, with plug events, the task's plug and unplug of the
/// device (staged after this event: the D belongs after them in time order, where userspace
/// puts it), and every field its own event would have had is this event's (the request's
/// sector, size, flags and priority read at D equal to the bio's, or its priority 0:
/// [`FOLDED_ISSUE_NO_PRIO`]; the task's cgroup equal to the bio's), but for the request
/// pointer, which is this event's `rq`, and its time, this event's time plus `error` (as a
/// u32, ns). The common life of a read on a fast device with no scheduler (Q, G and D in one
/// `submit_bio`) then takes one staging slot instead of three.
pub const FOLDED_ISSUE: u16 = 2;

/// With [`FOLDED_ISSUE`]: the D's priority is 0, not the Q's (the request has none of its
/// own on this kernel, as on 6.x, where it stays in the bios).
pub const FOLDED_ISSUE_NO_PRIO: u16 = 4;

/// Events staged per CPU before they go to the ring buffer as one record. Reserving and
/// submitting a ring-buffer record takes the ring's spinlock and touches cache lines shared
/// by every CPU; paid once per batch instead of once per event, it stops being the largest
/// cost of a traced I/O (README, Benchmark). 42 events of 96 bytes fill about one page.
pub const BATCH_EVENTS: usize = 42;

/// A ring-buffer record holding up to [`BATCH_EVENTS`] events of one CPU, in the order they
/// happened on that CPU; the kernel always sends the whole struct, of which the first
/// [`batch_record_len`]`(count)` bytes are meaningful.
/// A record of exactly `size_of::<RawEvent>()` bytes is instead a single event (sent directly
/// when the CPU's staging area was in use by an interrupted program); batch records are
/// `8 + k * 96` bytes long, never 96, so the length tells the two apart.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawBatch {
    /// Events in `events`, 1..=BATCH_EVENTS.
    pub count: u32,
    /// G events folded into the Q events of `events` ([`FOLDED_GETRQ`]): they count as
    /// sent (or lost) with the batch.
    pub folded: u32,
    pub events: [RawEvent; BATCH_EVENTS],
}

/// Bytes of a batch record holding `count` events.
pub const fn batch_record_len(count: usize) -> usize {
    BATCH_HEADER_LEN + count * size_of::<RawEvent>()
}

/// `count` and padding before the events of a [`RawBatch`].
pub const BATCH_HEADER_LEN: usize = 8;

/// A CPU's staging area. Its task fields cache the current task's comm and cgroup for the
/// events of one batch: consecutive events on a CPU mostly come from the same task, and
/// reading comm and cgroup per event costs more than the rest of an event together.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Staging {
    /// Set while a program fills this area. Programs on one CPU nest only by interruption
    /// (tracepoint callbacks run with preemption disabled), so a plain flag is enough: an
    /// interrupting program that finds it set sends its event directly instead.
    pub busy: u64,
    /// `bpf_ktime_get_ns()` of the first staged event: a batch older than
    /// `MAX_STAGED_NS` (eBPF side) is sent at the next event even if it is not full.
    pub first_ts: u64,
    /// pid_tgid whose comm and cgroup are cached below; `u64::MAX`: none (reset per batch,
    /// so a changed comm or cgroup shows within one batch).
    pub task: u64,
    /// The rename generation (eBPF `NAMEGEN`) `task_comm` was read in: the cache holds only
    /// while no task was renamed since.
    pub task_name_generation: u64,
    pub task_cgroup: u64,
    pub task_comm: [u8; 16],
    /// The last device resolved on this CPU, per key kind ([`DEV_KEY_QUEUE`]: a `struct
    /// request_queue *`, [`DEV_KEY_BDEV`]: a `struct block_device *`): `key` and
    /// `dev_t | traced << 32`. Consecutive events on a CPU are nearly always about the same
    /// device, and the shared hash map behind this costs a lookup whose LRU bookkeeping
    /// writes a cache line both CPUs share. Read and written only under `busy`, so an
    /// interrupting program can never pair a key with another device's value.
    pub dev_cache: [CachedDev; 2],
    /// The last bio blkcg resolved on this CPU (`struct blkcg_gq *`) and its cgroup id: four
    /// dependent kernel reads saved per Q of a task that keeps writing. Under `busy` too.
    pub blkg: u64,
    pub blkg_cgroup: u64,
    /// Plug counters of the first devices this CPU unplugged (counting mode). An unplug
    /// counted here costs a compare; one counted in the per-CPU hash map `PLUG_COUNTS`, a
    /// hashed lookup, which was a sixth of the unplug program's time (fio submits one
    /// request per `io_uring_enter`, so one unplug per request). Written only under `busy`;
    /// userspace adds them to `PLUG_COUNTS`'s.
    pub plug_counts: [StagedPlugCounts; STAGED_PLUG_DEVICES],
    pub batch: RawBatch,
}

/// One entry of [`Staging::dev_cache`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CachedDev {
    pub key: u64,
    pub value: u64,
}

/// Index in [`Staging::dev_cache`] for request-queue keys (request events, plug, unplug).
pub const DEV_KEY_QUEUE: usize = 0;
/// Index in [`Staging::dev_cache`] for block-device keys (bio events).
pub const DEV_KEY_BDEV: usize = 1;

/// The per-CPU array holding each CPU's [`Staging`] (one entry).
pub const MAP_STAGING: &str = "STAGING";

const _: () = assert!(core::mem::size_of::<RawEvent>() == 96);
const _: () = assert!(core::mem::offset_of!(RawBatch, events) == BATCH_HEADER_LEN);
// A batch record of one event must not look like a single-event record.
const _: () = assert!(batch_record_len(1) != core::mem::size_of::<RawEvent>());
const _: () = assert!(core::mem::size_of::<Offsets>() == 124);
const _: () = assert!(core::mem::size_of::<Config>() == 152);
const _: () = assert!(core::mem::size_of::<PlugCounts>() == 32);

/// The exporter's kernel side (`iosched-trace exporter`): per-request state and in-kernel
/// aggregates, read by userspace at scrape time. Nothing here goes through the ring buffer.
pub mod exporter {
    /// Upper bounds of the latency histograms' buckets, ns: 1, 1.5, 2, 3, 5 and 7 times each
    /// power of ten from 1 µs to 7 s, then 10 s. A value goes in the first bucket whose bound
    /// is at least the value; past the last bound, in the overflow bucket (`+Inf`).
    pub const BOUNDS_NS: [u64; BOUNDS] = bounds();
    /// Finite bucket bounds.
    pub const BOUNDS: usize = 43;
    /// Buckets per histogram: the finite ones and the overflow.
    pub const BUCKETS: usize = BOUNDS + 1;

    const fn bounds() -> [u64; BOUNDS] {
        const STEPS: [u64; 6] = [10, 15, 20, 30, 50, 70];
        let mut out = [0u64; BOUNDS];
        let mut decade = 100u64; // 1 µs = 10 * 100 ns
        let mut i = 0;
        while i < BOUNDS - 1 {
            out[i] = STEPS[i % 6] * decade;
            i += 1;
            if i % 6 == 0 {
                decade *= 10;
            }
        }
        out[BOUNDS - 1] = 10_000_000_000;
        out
    }

    /// One histogram: counts per bucket (not cumulative) and the sum of the values, ns.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct Hist {
        pub buckets: [u64; BUCKETS],
        pub sum_ns: u64,
    }

    impl Default for Hist {
        fn default() -> Self {
            Hist {
                buckets: [0; BUCKETS],
                sum_ns: 0,
            }
        }
    }

    /// A request the programs have seen since it entered the scheduler or the driver, in
    /// `EXP_RQ` by its `struct request *`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct RqState {
        /// Q of its first bio (`EXP_BIO`), or 0 if that was not seen.
        pub q_ns: u64,
        /// D: issued (the last issue, after a requeue); 0 while not issued.
        pub d_ns: u64,
        /// The cgroup its first bio was charged to (0: not known).
        pub cgroup: u64,
        /// [`RQ_INSERTED`] and [`RQ_ISSUED`]: what the depth counters hold it in.
        pub flags: u32,
        pub _pad: u32,
    }
    /// One slot of `EXP_RQ_SLOTS`, the direct-mapped request table: the slot of request
    /// `rq` is picked by a hash of the pointer ([`rq_slot`]); a request whose slot another
    /// request holds goes to the `EXP_RQ` hash map instead. A slot is a cache line long:
    /// its neighbours are other requests, issued and completed on other CPUs.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct RqSlot {
        /// The `struct request *` the slot holds, 0: free. Claimed by compare-and-swap.
        pub rq: u64,
        pub st: RqState,
        pub _pad: [u64; 3],
    }

    /// log2 of the slots in `EXP_RQ_SLOTS`.
    pub const RQ_SLOT_BITS: u32 = 14;
    /// Slots in `EXP_RQ_SLOTS`: about ten times the requests a busy host has in flight, so
    /// that few share a slot.
    pub const RQ_SLOTS: u32 = 1 << RQ_SLOT_BITS;

    /// The slot of request `rq` (the pointer's low 32 bits, all the kernel side can compute
    /// on): MurmurHash3's 64-bit finalizer. Requests lie at a fixed stride in their tag set's
    /// pages; a plain multiplicative hash folded some strides (384 bytes) onto a few slots.
    #[inline(always)]
    pub const fn rq_slot(rq: u64) -> u32 {
        let mut x = rq;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        (x & (RQ_SLOTS as u64 - 1)) as u32
    }

    /// In the scheduler: counted in [`DevState::in_sched`].
    pub const RQ_INSERTED: u32 = 1;
    /// In the driver: counted in [`DevState::in_driver`].
    pub const RQ_ISSUED: u32 = 2;

    /// A bio's queueing (`EXP_BIO`, LRU by `struct bio *`): what its request needs of it.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct BioStart {
        pub q_ns: u64,
        pub cgroup: u64,
    }

    /// The operation bits of `cmd_flags` (`REQ_OP_BITS` is 8 since Linux 4.10).
    pub const OP_MASK: u32 = 0xff;

    /// Bios each CPU remembers in `EXP_RECENT` (a power of two).
    pub const RECENT_BIOS: usize = 128;

    /// `EXP_RECENT`'s per-CPU value: the last [`RECENT_BIOS`] bios queued on the CPU, a ring.
    /// A request is first seen (inserted or issued) where its first bio was queued, right
    /// after: at the plug's flush or directly, in the submitter's context. Looking it up here,
    /// newest first, costs a few compares where a hash map's insert at every Q cost more than
    /// the rest of the request together.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct RecentBios {
        /// Slot of the next bio (modulo [`RECENT_BIOS`]).
        pub next: u64,
        /// Slot of the last bio found: a plug's requests are first seen in the order their
        /// bios were queued, so the next one found is most often the slot after it.
        pub found: u64,
        pub bio: [u64; RECENT_BIOS],
        pub start: [BioStart; RECENT_BIOS],
    }

    /// Key of `EXP_CG_SLOTS`: device, operation, cgroup.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct DevOpCgroup {
        pub dev: u32,
        pub op: u32,
        /// cgroup v2 id; 0 when not known, and where `EXP_CG_SLOTS` had no slot for it
        /// (`stat::CG_FULL`).
        pub cgroup: u64,
    }

    /// `EXP_CG_SLOTS`' value: one map for every figure of a completed request, so a completion
    /// pays one lookup (Q->D and D->C are exposed by device and operation only; userspace
    /// sums the cgroups).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CgroupIo {
        /// Requests completed (whole).
        pub requests: u64,
        /// Bytes completed (partial completions included).
        pub bytes: u64,
        /// Q -> C.
        pub latency: Hist,
        /// Q -> D.
        pub queue: Hist,
        /// D -> C.
        pub device: Hist,
    }

    /// `EXP_DEV_SLOTS`' value, per whole disk: depths and the idle interval open now. Shared by
    /// every CPU: the counters change by atomic adds only.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct DevState {
        /// Requests inserted into the scheduler and not issued since (as i64).
        pub in_sched: u64,
        /// Requests issued and not completed or requeued (as i64).
        pub in_driver: u64,
        /// Start of the open idle interval (the driver empty while requests wait), 0: none.
        pub idle_since: u64,
        /// Whom the open interval idles for: the cgroup of the request that completed last.
        pub idle_cgroup: u64,
        /// The cgroup of the last request completed.
        pub last_cgroup: u64,
        pub requeues: u64,
        pub merges_back: u64,
        pub merges_front: u64,
        pub merges_rq: u64,
        /// Final completions the programs saw, whether or not they had seen the request
        /// before, by the kernel's accounting group (`COMPLETED_*`): what userspace holds
        /// against the device's own counters (`/sys/block/DEV/stat`) to count the
        /// completions that never reached the programs.
        pub completed: [u64; COMPLETED_GROUPS],
    }

    /// [`DevState::completed`]'s groups: the kernel's `op_stat_group` (reads, writes,
    /// discards; flushes and passthrough commands are not accounted there), and writes that
    /// ended empty through the flush machinery, which the kernel may count once with their
    /// data part or not at all (the recording's completion check, `CompletionCounts`).
    pub const COMPLETED_READ: usize = 0;
    pub const COMPLETED_WRITE: usize = 1;
    pub const COMPLETED_DISCARD: usize = 2;
    pub const COMPLETED_WRITE_THROUGH_FLUSH: usize = 3;
    pub const COMPLETED_GROUPS: usize = 4;

    /// The group of a final completion of a request of operation `op` (`REQ_OP_*`) that had
    /// `bytes` left before it (0: a request that went through the flush machinery), or `None`
    /// where the kernel does not count it (block/blk-mq.c `blk_account_io_done`: flushes and
    /// passthrough commands (`REQ_OP_DRV_*`) are not accounted; the kernel counts the other
    /// operations by their write bit, and operations the recorder does not know are left
    /// out as it leaves them out).
    #[inline(always)]
    pub const fn completed_group(op: u32, bytes: u32) -> Option<usize> {
        // The recorder's known operations (`iosched_core::event::Op`), by the write bit.
        match op {
            0 | 10 | 12 if bytes == 0 => None,
            0 | 10 | 12 => Some(COMPLETED_READ),
            3 if bytes == 0 => None,
            3 => Some(COMPLETED_DISCARD),
            1 | 5 | 9 | 11 | 13 | 15 | 17 if bytes == 0 => Some(COMPLETED_WRITE_THROUGH_FLUSH),
            1 | 5 | 9 | 11 | 13 | 15 | 17 => Some(COMPLETED_WRITE),
            _ => None,
        }
    }

    /// One slot of `EXP_DEV_SLOTS`, the device table: direct-mapped by a hash of the device
    /// ([`dev_slot`]), the next slots tried when taken (up to [`SLOT_PROBES`] in all). An array slot is found
    /// without a helper call, where a hash map's lookup at every issue and completion cost
    /// about a quarter of those programs (bpf_stats, four alternating runs each: issue 338 ->
    /// 250 ns, completion 306 -> 235). Two cache lines: neighbouring devices' counters change
    /// on every CPU.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct DevSlot {
        /// `dev | DEV_CLAIMED`, 0: free. Claimed by compare-and-swap; freed by userspace
        /// (the whole slot zeroed) once the device is gone.
        pub key: u64,
        pub st: DevState,
        pub _pad: [u64; 2],
    }

    /// [`DevSlot::key`] of a slot that holds `dev` (a device number can be 0).
    pub const DEV_CLAIMED: u64 = 1 << 32;

    /// log2 of the slots in `EXP_DEV_SLOTS`.
    pub const DEV_SLOT_BITS: u32 = 10;
    pub const DEV_SLOTS: u32 = 1 << DEV_SLOT_BITS;

    /// One slot of `EXP_CG_SLOTS`, the device, operation and cgroup table, direct-mapped as
    /// [`DevSlot`] is ([`cg_slot`]). Its key is two words, so a slot is claimed in two
    /// steps ([`CG_CLAIMING`], then [`CG_READY`] once the key is written) and only a ready
    /// slot's key is compared: two CPUs that see the same new key at once may each claim a
    /// slot for it, and userspace adds such twins together.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct CgSlot {
        pub state: u64,
        pub key: DevOpCgroup,
        pub io: CgroupIo,
        pub _pad: [u64; 4],
    }

    pub const CG_FREE: u64 = 0;
    pub const CG_CLAIMING: u64 = 1;
    pub const CG_READY: u64 = 2;

    /// log2 of the slots in `EXP_CG_SLOTS`.
    pub const CG_SLOT_BITS: u32 = 12;
    pub const CG_SLOTS: u32 = 1 << CG_SLOT_BITS;

    /// Slots tried from a key's own before its table counts as full: with four, 4 of a large
    /// host's 384 disks found none free in `EXP_DEV_SLOTS` (linear probing clusters).
    pub const SLOT_PROBES: u32 = 8;

    /// MurmurHash3's 64-bit finalizer.
    #[inline(always)]
    const fn mix(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^= x >> 33;
        x
    }

    /// The first slot of device `dev` in `EXP_DEV_SLOTS`.
    #[inline(always)]
    pub const fn dev_slot(dev: u32) -> u32 {
        (mix(dev as u64) & (DEV_SLOTS as u64 - 1)) as u32
    }

    /// The first slot of `key` in `EXP_CG_SLOTS`.
    #[inline(always)]
    pub const fn cg_slot(key: &DevOpCgroup) -> u32 {
        let x = mix(((key.dev as u64) << 32 | key.op as u64) ^ mix(key.cgroup));
        (x & (CG_SLOTS as u64 - 1)) as u32
    }

    /// Key of `EXP_IDLE`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub struct DevCgroup {
        pub dev: u32,
        pub _pad: u32,
        pub cgroup: u64,
    }

    /// `EXP_IDLE`'s value: idling waste the device spent for a cgroup.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default)]
    pub struct IdleWaste {
        pub ns: u64,
        pub intervals: u64,
    }

    /// Gaps shorter than this are a request's trip through the block layer, not waste (the
    /// report's `idle_min_interval_ns`).
    pub const IDLE_MIN_NS: u64 = 50_000;

    /// Indices into the per-CPU `EXP_STATS` array: the events handled, then what could not
    /// be accounted.
    pub mod stat {
        pub const QUEUE: u32 = 0;
        pub const INSERT: u32 = 1;
        pub const ISSUE: u32 = 2;
        pub const COMPLETE: u32 = 3;
        pub const REQUEUE: u32 = 4;
        pub const MERGE: u32 = 5;
        /// A request completed, requeued or merged that was not seen inserted or issued (it
        /// started before the exporter, or `EXP_RQ` was full then).
        pub const UNTRACKED: u32 = 6;
        /// `EXP_RQ` full (with the request's slot in `EXP_RQ_SLOTS` taken): a request's
        /// state could not be kept.
        pub const RQ_FULL: u32 = 7;
        /// A request whose first bio's Q was not in `EXP_BIO` (queued before the exporter
        /// started, or queued on another CPU than where the request was first seen, or pushed
        /// out of that CPU's recent bios): no Q->D or Q->C for it.
        pub const NO_QUEUE_TIME: u32 = 8;
        /// No slot in `EXP_CG_SLOTS` for the key: counted under cgroup 0 instead (and lost if
        /// that too failed).
        pub const CG_FULL: u32 = 9;
        /// No slot in `EXP_DEV_SLOTS`, or `EXP_IDLE` full: the observation was dropped.
        pub const MAP_FULL: u32 = 10;
        pub const COUNT: u32 = 11;
    }

    pub const MAP_RQ: &str = "EXP_RQ";
    pub const MAP_RQ_SLOTS: &str = "EXP_RQ_SLOTS";
    pub const MAP_BIO: &str = "EXP_BIO";
    pub const MAP_RECENT: &str = "EXP_RECENT";
    pub const MAP_CG_SLOTS: &str = "EXP_CG_SLOTS";
    pub const MAP_DEV_SLOTS: &str = "EXP_DEV_SLOTS";
    pub const MAP_IDLE: &str = "EXP_IDLE";
    pub const MAP_STATS: &str = "EXP_STATS";
    /// The generation of the device filter the programs share with the recorder's (entry 0,
    /// a u64): one more after every change to the traced set, which makes the programs
    /// resolve a device's cached "traced or not" again.
    pub const MAP_DEVGEN: &str = "DEVGEN";

    /// The exporter's programs, each named after its tracepoint with an `exp_` prefix.
    pub const PROGRAMS: [(&str, &str); 8] = [
        ("exp_bio_queue", "block_bio_queue"),
        ("exp_bio_backmerge", "block_bio_backmerge"),
        ("exp_bio_frontmerge", "block_bio_frontmerge"),
        ("exp_rq_merge", "block_rq_merge"),
        ("exp_rq_insert", "block_rq_insert"),
        ("exp_rq_issue", "block_rq_issue"),
        ("exp_rq_complete", "block_rq_complete"),
        ("exp_rq_requeue", "block_rq_requeue"),
    ];

    const _: () = assert!(BOUNDS_NS[0] == 1_000);
    const _: () = assert!(BOUNDS_NS[5] == 7_000);
    const _: () = assert!(BOUNDS_NS[6] == 10_000);
    const _: () = assert!(BOUNDS_NS[41] == 7_000_000_000);
    const _: () = assert!(core::mem::size_of::<RqState>() == 32);
    const _: () = assert!(core::mem::size_of::<RqSlot>() == 64);
    const _: () = assert!(core::mem::size_of::<DevOpCgroup>() == 16);
    const _: () = assert!(core::mem::size_of::<DevCgroup>() == 16);
    const _: () = assert!(core::mem::size_of::<DevSlot>() == 128);
    const _: () = assert!(core::mem::size_of::<CgSlot>() == 1152);

    #[cfg(feature = "user")]
    mod user {
        // SAFETY (all): plain-old-data, `#[repr(C)]`, integers only, explicit padding.
        unsafe impl aya::Pod for super::RqState {}
        unsafe impl aya::Pod for super::RqSlot {}
        unsafe impl aya::Pod for super::DevOpCgroup {}
        unsafe impl aya::Pod for super::CgroupIo {}
        unsafe impl aya::Pod for super::DevState {}
        unsafe impl aya::Pod for super::DevCgroup {}
        unsafe impl aya::Pod for super::IdleWaste {}
        unsafe impl aya::Pod for super::DevSlot {}
        unsafe impl aya::Pod for super::CgSlot {}
    }
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data, `#[repr(C)]`, every bit pattern valid, explicit padding.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above: integers and byte arrays only, `#[repr(C)]`, explicit padding.
    unsafe impl aya::Pod for super::Staging {}
    // SAFETY: as above: four u64s.
    unsafe impl aya::Pod for super::PlugCounts {}
}
