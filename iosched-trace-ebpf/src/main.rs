//! Kernel side of iosched-trace: one small program per block tracepoint, each turning the
//! tracepoint's `struct request *` / `struct bio *` into a [`RawEvent`] in the `EVENTS` ring.
//!
//! What this side must not do: decide anything userspace can decide later. It filters (device,
//! our own process), reads the few fields the event needs at offsets userspace found in the
//! running kernel's BTF, and counts every failure. It never panics.
//!
//! How it reads kernel memory: directly, through the typed pointers a BTF tracepoint hands
//! over (`struct request *`, `struct bio *`, ...). The verifier knows their BTF types, checks
//! every load against the struct's layout (the offsets are constants to it: they come from
//! the frozen `CONFIG`), and turns each into a plain load that yields 0 if it faults. A
//! `bpf_probe_read_kernel` costs ~40 ns on the machines we measured (a helper call, fault
//! handling set up and torn down); a direct load, one instruction.
#![no_std]
#![no_main]
// `asm!` for the exporter's atomic add (BPF is an experimental asm target; the crate builds
// with nightly anyway, for build-std).
#![cfg_attr(target_arch = "bpf", feature(asm_experimental_arch))]

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_probe_read_kernel,
        generated::{
            bpf_get_current_cgroup_id, bpf_get_current_comm as bpf_get_current_comm_raw,
            bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        },
    },
    macros::{btf_tracepoint, map, raw_tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use iosched_trace_common::{
    BATCH_EVENTS, Config, DEV_KEY_BDEV, DEV_KEY_QUEUE, FOLDED_GETRQ, FOLDED_ISSUE,
    FOLDED_ISSUE_NO_PRIO, NO_OFFSET, Offsets, PLUG_COUNT_DEVICES, PlugCounts, RawBatch, RawEvent,
    STAGED_PLUG_DEVICES, Staging, batch_record_len,
    kind::{self, *},
    stat,
};

/// Filled in by userspace (`EbpfLoader::override_global`) before load. It lives in `.rodata`,
/// which aya freezes, so the verifier sees its fields as constants: unused branches (for
/// example the device filter when tracing every device) cost nothing.
#[unsafe(no_mangle)]
static CONFIG: Config = Config {
    self_tgid: 0,
    filter_devices: 0,
    wakeup_bytes: 0,
    bio_cgroup: 0,
    wakeups: 0,
    plug_events: 0,
    off: Offsets {
        rq_q: NO_OFFSET,
        rq_bio: NO_OFFSET,
        rq_biotail: NO_OFFSET,
        rq_sector: NO_OFFSET,
        rq_data_len: NO_OFFSET,
        rq_cmd_flags: NO_OFFSET,
        rq_ioprio: NO_OFFSET,
        q_disk: NO_OFFSET,
        disk_major: NO_OFFSET,
        disk_first_minor: NO_OFFSET,
        bio_bdev: NO_OFFSET,
        bio_opf: NO_OFFSET,
        bio_sector: NO_OFFSET,
        bio_size: NO_OFFSET,
        bio_ioprio: NO_OFFSET,
        bio_next: NO_OFFSET,
        bio_status: NO_OFFSET,
        bio_blkg: NO_OFFSET,
        bdev_disk: NO_OFFSET,
        blkg_blkcg: NO_OFFSET,
        css_cgroup: NO_OFFSET,
        cgroup_kn: NO_OFFSET,
        kn_id: NO_OFFSET,
        blkcg_css: NO_OFFSET,
        task_pid: NO_OFFSET,
        task_tgid: NO_OFFSET,
        task_comm: NO_OFFSET,
        task_cgroups: NO_OFFSET,
        cset_dfl_cgrp: NO_OFFSET,
        bdi_owner: NO_OFFSET,
        device_devt: NO_OFFSET,
    },
};

/// The event stream. Its size is set by userspace at load (`--ring-size`).
#[map(name = "EVENTS")]
static EVENTS: RingBuf = RingBuf::with_byte_size(16 << 20, 0);

/// Per-CPU counters, indexed by `iosched_trace_common::stat`.
#[map(name = "STATS")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Devices to trace (kernel `dev_t` of whole disks), when `CONFIG.filter_devices` is set.
#[map(name = "DEVICES")]
static DEVICES: HashMap<u32, u8> = HashMap::with_max_entries(256, 0);

/// Plug counters per traced device (`dev_t`), when plug and unplug are not sent as events
/// (`CONFIG.plug_events` 0; `block_unplug` counts, `block_plug` is not attached). Per CPU:
/// an unplug is counted where it happens, with plain adds.
#[map(name = "PLUG_COUNTS")]
static PLUG_COUNTS: PerCpuHashMap<u32, PlugCounts> =
    PerCpuHashMap::with_max_entries(PLUG_COUNT_DEVICES, 0);

/// Where each CPU gathers its events before sending them as one [`RawBatch`] record.
#[map(name = "STAGING")]
static STAGING: PerCpuArray<Staging> = PerCpuArray::with_max_entries(1, 0);

/// Age at which a partly filled batch is sent by the next event on its CPU. Userspace also
/// flushes every CPU about every 20 ms (`flush_staged`), which bounds the delay when a CPU
/// goes quiet.
const MAX_STAGED_NS: u64 = 10_000_000;

/// `struct request_queue *` or `struct block_device *` -> `dev_t | traced << 32 | generation
/// << 33` ([`cached_dev`]). Resolving a device takes three dependent reads; with the cache an
/// event pays one lookup.
#[map(name = "DEVCACHE")]
static DEVCACHE: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// The generation of `DEVICES` (entry 0): userspace adds one after every change to the
/// filter, and a cached verdict of another generation is resolved again. Without it, a CPU
/// that saw a device's first events before userspace added the device (an exporter started
/// under load, a disk hot-added while busy) kept "not traced" in its cache for as long as
/// that device's events kept coming: all of them.
#[map(name = "DEVGEN")]
static DEVGEN: Array<u64> = Array::with_max_entries(1, 0);

/// Entry 0 changes whenever a task is renamed (exec, `prctl(PR_SET_NAME)`, a write to
/// `/proc/PID/comm`): each CPU's cached comm ([`Staging::task`]) is taken with the value it
/// had, and taken again once it differs. Without it, a CPU that staged an event for a forked
/// child still named after its parent (a completion interrupting it) gave that name to the
/// child's first I/O after exec, until the batch was sent: `dd`'s first write showed as its
/// parent's.
#[map(name = "NAMEGEN")]
static NAMEGEN: Array<u64> = Array::with_max_entries(1, 0);

/// Tasks (pid, the thread id) that queued a bio on a traced device -> the kernel `dev_t` of
/// their last one; filled by Q events only with `CONFIG.wakeups`. The `sched_waking` program
/// keeps the wakeups of these tasks, of the system's many. LRU: tasks that stopped doing I/O
/// age out without a cleanup path.
#[map(name = "IO_TASKS")]
static IO_TASKS: LruHashMap<u32, u32> = LruHashMap::with_max_entries(4096, 0);

/// The longest bio chain walked at issue (each step is verified separately, so this bounds
/// the program's verification cost). Longer chains are counted in `stat::CHAIN_TRUNCATED`,
/// never silently cut.
const MAX_CHAIN: u32 = 128;

macro_rules! config {
    ($($field:tt)+) => {
        // SAFETY: CONFIG is a plain static; the volatile read stops the compiler from folding
        // the build-time default, since userspace rewrites it before load.
        unsafe { core::ptr::read_volatile(&$crate::CONFIG.$($field)+) }
    };
}

/// The exporter's programs (after `config!`, which they use).
mod exporter;

#[inline(always)]
fn count(index: u32) {
    add(index, 1);
}

#[inline(always)]
fn add(index: u32, n: u64) {
    if let Some(counter) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, written only by programs on this CPU. (core has no atomic
        // add for the BPF target; a program interrupting this one between load and store could
        // lose its count, a window of a few instructions.)
        unsafe { *counter += n };
    }
}

/// The `T` at `base + off`, loaded directly: `base` must be a BTF-typed kernel pointer (a
/// tracepoint argument, or a pointer field loaded from one) and `T` no wider than the field
/// at `off` (userspace checks the widths against BTF, the verifier again at load). 0 if
/// `base` is null, the field is absent in this kernel (`off` is `NO_OFFSET`, a constant the
/// verifier prunes), or the load faults.
#[inline(always)]
fn load<T: Copy + Default>(base: u64, off: u32) -> T {
    if base == 0 || off == NO_OFFSET {
        return T::default();
    }
    // SAFETY: a BTF pointer load, checked by the verifier and made fault-safe by the JIT.
    unsafe { core::ptr::read_volatile((base + off as u64) as *const T) }
}

/// The u64 at `base + off` through `bpf_probe_read_kernel` (a scalar to the verifier, unlike
/// [`load`]'s typed result); 0 (and a read error counted) if it faults.
#[inline(always)]
fn probe_u64(base: u64, off: u32) -> u64 {
    if base == 0 || off == NO_OFFSET {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel validates the address; a bad one returns an error.
    match unsafe { bpf_probe_read_kernel((base + off as u64) as *const u64) } {
        Ok(value) => value,
        Err(_) => {
            count(stat::READ_ERRORS);
            0
        }
    }
}

/// This CPU's staging area, held: its `busy` flag is set until the guard is dropped, so
/// nothing else on this CPU reads or writes the area meanwhile (programs on one CPU nest only
/// by interruption, and an interrupting program finds the flag set and goes without it).
/// Each program takes it once, first thing, and keeps it to its end: the per-CPU caches in
/// the area are then safe to use for the whole program.
struct Held(*mut Staging);

impl Held {
    #[inline(always)]
    fn acquire() -> Option<Held> {
        let st = STAGING.get_ptr_mut(0)?;
        // SAFETY: per-CPU map value; see the type's comment for the protocol.
        unsafe {
            if core::ptr::read_volatile(&(*st).busy) != 0 {
                return None;
            }
            core::ptr::write_volatile(&mut (*st).busy, 1);
        }
        Some(Held(st))
    }
}

impl Drop for Held {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: we set the flag in `acquire`.
        unsafe { core::ptr::write_volatile(&mut (*self.0).busy, 0) };
    }
}

/// Whole-disk `dev_t` of the queue or block device `key`, if it is one we trace. `disk` is
/// read from `key` at `disk_off`; `kind` is `DEV_KEY_QUEUE` or `DEV_KEY_BDEV`.
#[inline(always)]
fn traced_dev(key: u64, kind: usize, disk_off: u32, held: Option<&Held>) -> Option<u32> {
    if key == 0 {
        return None;
    }
    // Read before the filter (below): a verdict made from a filter older than a change is
    // then cached under the generation before it, and resolved again after.
    let generation = match config!(filter_devices) {
        0 => 0,
        // SAFETY: the value is a plain u64 copied out immediately.
        _ => DEVGEN.get(0).map_or(0, |g| *g & DEV_GENERATION_MASK),
    };
    // The CPU's last device of this kind first (only while the staging area is held: an
    // unguarded cache was tried, and a completion interrupting its update paired a key
    // with another device's value).
    if let Some(h) = held
        && kind < 2
    {
        // SAFETY: held: exclusive use of this CPU's area; `kind` is in bounds.
        let entry = unsafe { &(*h.0).dev_cache[kind] };
        if entry.key == key && entry.value >> DEV_GENERATION_SHIFT == generation {
            return cached_dev(entry.value);
        }
    }
    // SAFETY: the value is a plain u64 copied out immediately.
    let cached = match unsafe { DEVCACHE.get(key) } {
        Some(&cached) if cached >> DEV_GENERATION_SHIFT == generation => cached,
        _ => {
            let disk: u64 = load(key, disk_off);
            if disk == 0 {
                count(stat::READ_ERRORS);
                return None;
            }
            let major: i32 = load(disk, config!(off.disk_major));
            let minor: i32 = load(disk, config!(off.disk_first_minor));
            let dev = ((major as u32) << 20) | (minor as u32 & 0xf_ffff);
            // SAFETY: the value is not kept.
            let traced = config!(filter_devices) == 0 || unsafe { DEVICES.get(dev) }.is_some();
            let cached =
                (dev as u64) | ((traced as u64) << 32) | (generation << DEV_GENERATION_SHIFT);
            let _ = DEVCACHE.insert(key, cached, 0);
            cached
        }
    };
    if let Some(h) = held
        && kind < 2
    {
        // SAFETY: as above.
        unsafe {
            (*h.0).dev_cache[kind].key = key;
            (*h.0).dev_cache[kind].value = cached;
        }
    }
    cached_dev(cached)
}

/// Where a cached device value keeps the filter's generation (bits 33-63).
const DEV_GENERATION_SHIFT: u32 = 33;
const DEV_GENERATION_MASK: u64 = u64::MAX >> DEV_GENERATION_SHIFT;

/// The `dev_t` of a cached value, if the device is traced (bit 32).
#[inline(always)]
fn cached_dev(cached: u64) -> Option<u32> {
    (cached & (1 << 32) != 0).then_some(cached as u32)
}

#[inline(always)]
fn rq_dev(rq: u64, held: Option<&Held>) -> Option<u32> {
    traced_dev(
        load(rq, config!(off.rq_q)),
        DEV_KEY_QUEUE,
        config!(off.q_disk),
        held,
    )
}

#[inline(always)]
fn bio_dev(bio: u64, held: Option<&Held>) -> Option<u32> {
    traced_dev(
        load(bio, config!(off.bio_bdev)),
        DEV_KEY_BDEV,
        config!(off.bdev_disk),
        held,
    )
}

/// The cgroup the block layer charges a bio to (its blkcg), which for writeback is the
/// dirtying task's cgroup, not the flusher's.
#[inline(always)]
fn bio_cgroup_id(blkg: u64, held: Option<&Held>) -> u64 {
    if let Some(h) = held
        && blkg != 0
        // SAFETY: held: exclusive use of this CPU's area.
        && unsafe { (*h.0).blkg } == blkg
    {
        // SAFETY: as above.
        return unsafe { (*h.0).blkg_cgroup };
    }
    let id = (|| {
        let blkcg: u64 = load(blkg, config!(off.blkg_blkcg));
        if blkcg == 0 {
            return None;
        }
        // `css` is embedded in `blkcg`: its `cgroup` is one load from `blkcg`.
        let cgroup: u64 = load(blkcg, config!(off.blkcg_css) + config!(off.css_cgroup));
        let kn: u64 = load(cgroup, config!(off.cgroup_kn));
        let id: u64 = load(kn, config!(off.kn_id));
        (id != 0).then_some(id)
    })();
    match (id, held) {
        (Some(id), Some(h)) => {
            // SAFETY: held: exclusive use of this CPU's area.
            unsafe {
                (*h.0).blkg = blkg;
                (*h.0).blkg_cgroup = id;
            }
            id
        }
        (Some(id), None) => id,
        // SAFETY: helper without arguments.
        (None, _) => unsafe { bpf_get_current_cgroup_id() },
    }
}

/// The cgroup of events that are not charged to one (plug, unplug, chain links, bio
/// completions, kyber): 0, as readers expect.
const NO_CGROUP: Option<u64> = Some(0);

/// Stages one event in this CPU's batch (or, if the program does not hold the staging area
/// because the program it interrupted does, sends it directly); the caller fills the
/// kind-specific fields through `fill`. `pid_tgid`: the current task's (the caller has it
/// already). `cgroup`: the event's cgroup if it is not the current task's.
#[inline(always)]
fn emit(
    held: Option<&Held>,
    kind: u16,
    dev: u32,
    pid_tgid: u64,
    cgroup: Option<u64>,
    fill: impl FnOnce(&mut RawEvent),
) {
    emit_staged::<true>(held, kind, dev, pid_tgid, cgroup, fill)
}

/// [`emit`], for events of the task a previous event of the same program already staged:
/// with `READ_TASK` false its name is taken only from the staging area (all zeros if the
/// batch was sent in between), never read. The chain links at issue use it: reading the task
/// in a loop body multiplied the verifier's work (every load through a `task_struct *` is a
/// walk of that struct's BTF) by the loop's bound.
#[inline(always)]
fn emit_staged<const READ_TASK: bool>(
    held: Option<&Held>,
    kind: u16,
    dev: u32,
    pid_tgid: u64,
    cgroup: Option<u64>,
    fill: impl FnOnce(&mut RawEvent),
) {
    let Some(h) = held else {
        emit_direct::<READ_TASK>(kind, dev, pid_tgid, cgroup, fill);
        return;
    };
    let st = h.0;
    // SAFETY: held: exclusive use of this CPU's staging area.
    unsafe {
        let n = (*st).batch.count as usize;
        if n >= BATCH_EVENTS {
            // Impossible (a full batch is sent at once); keeps the index provably in bounds.
            // Counted as lost, never silent.
            add(stat::LOST, n as u64 + (*st).batch.folded as u64);
            (*st).batch.count = 0;
            (*st).batch.folded = 0;
            emit_direct::<READ_TASK>(kind, dev, pid_tgid, cgroup, fill);
            return;
        }
        let ts = bpf_ktime_get_ns();
        if n == 0 {
            (*st).first_ts = ts;
        }
        let ev = (&raw mut (*st).batch.events).cast::<RawEvent>().add(n);
        let name_generation = if READ_TASK { name_generation() } else { 0 };
        if (*st).task != pid_tgid || (READ_TASK && (*st).task_name_generation != name_generation) {
            if READ_TASK {
                (*st).task_cgroup = current_comm_and_cgroup(&raw mut (*st).task_comm);
                (*st).task = pid_tgid;
                (*st).task_name_generation = name_generation;
                (*ev).comm = (*st).task_comm;
            } else {
                (*ev).comm = [0; 16];
            }
        } else {
            (*ev).comm = (*st).task_comm;
        }
        fill_common(ev, ts, kind, dev, pid_tgid);
        (*ev).cgroup_id = match cgroup {
            Some(id) => id,
            None => (*st).task_cgroup,
        };
        fill(&mut *ev);
        (*st).batch.count = n as u32 + 1;
        if n + 1 == BATCH_EVENTS || ts.wrapping_sub((*st).first_ts) > MAX_STAGED_NS {
            send_batch(st);
        }
    }
}

/// [`NAMEGEN`]'s value.
#[inline(always)]
fn name_generation() -> u64 {
    // SAFETY: the value is a plain u64 copied out immediately.
    NAMEGEN
        .get(0)
        .map_or(0, |g| unsafe { core::ptr::read_volatile(g) })
}

/// Sends the staged batch (if any) as one ring-buffer record and empties it. Lost events are
/// counted per event, like the direct path.
///
/// SAFETY: the caller holds `st` (its busy flag).
#[inline(always)]
unsafe fn send_batch(st: *mut Staging) {
    // SAFETY: per the function's contract.
    unsafe {
        let n = (*st).batch.count as usize;
        if n == 0 || n > BATCH_EVENTS {
            (*st).batch.count = 0;
            (*st).batch.folded = 0;
            return;
        }
        // Each G or D folded into its Q is an event sent (or lost) with the batch.
        let events = n as u64 + (*st).batch.folded as u64;
        // The whole batch, however full: a length computed from `n` is bounded too loosely
        // for the verifier, and partly filled batches are rare (a busy CPU fills one in well
        // under a millisecond). Userspace reads `count` events.
        let flags = wakeup_flags(batch_record_len(n) as u64);
        match EVENTS.output::<RawBatch>(&(*st).batch, flags) {
            Ok(()) => add(stat::SENT, events),
            Err(_) => add(stat::LOST, events),
        }
        (*st).batch.count = 0;
        (*st).batch.folded = 0;
        // The next batch reads comm and cgroup afresh.
        (*st).task = u64::MAX;
    }
}

/// Wake the reader only once enough data waits in the ring: batching wake-ups is much of
/// the difference between a naive and a cheap recorder.
#[inline(always)]
fn wakeup_flags(adding: u64) -> u64 {
    let wakeup = config!(wakeup_bytes);
    if wakeup == 0 {
        0
    } else if EVENTS.query(BPF_RB_AVAIL_DATA as u64) + adding >= wakeup {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// The fields every event has (the kind-specific ones zeroed). Volatile stores: LLVM would
/// merge the zero stores into a `memset`, which becomes a byte-by-byte loop in BPF.
///
/// SAFETY: `ev` points at a writable RawEvent.
#[inline(always)]
unsafe fn fill_common(ev: *mut RawEvent, ts: u64, kind: u16, dev: u32, pid_tgid: u64) {
    use core::ptr::write_volatile as set;
    // SAFETY: per the function's contract.
    unsafe {
        set(&raw mut (*ev).ts_ns, ts);
        set(&raw mut (*ev).rq, 0);
        set(&raw mut (*ev).bio, 0);
        set(&raw mut (*ev).sector, 0);
        set(&raw mut (*ev).aux, 0);
        set(&raw mut (*ev).pid, pid_tgid as u32);
        set(&raw mut (*ev).tgid, (pid_tgid >> 32) as u32);
        set(&raw mut (*ev).dev, dev);
        set(&raw mut (*ev).bytes, 0);
        set(&raw mut (*ev).cmd_flags, 0);
        set(&raw mut (*ev).error, 0);
        set(&raw mut (*ev).kind, kind);
        set(&raw mut (*ev).cpu, bpf_get_smp_processor_id() as u16);
        set(&raw mut (*ev).ioprio, 0);
        set(&raw mut (*ev).folded, 0);
    }
}

/// Writes the current task's name to `comm` and returns its cgroup2 id, loaded from its
/// `task_struct` (what `bpf_get_current_comm` and `bpf_get_current_cgroup_id` return, for a
/// third of their cost); through the helpers where this kernel's BTF lacks a field.
///
/// SAFETY: `comm` is writable.
#[inline(always)]
unsafe fn current_comm_and_cgroup(comm: *mut [u8; 16]) -> u64 {
    // SAFETY: the helper has no arguments and returns the current task, a trusted BTF pointer.
    let task = unsafe { bpf_get_current_task_btf() } as u64;
    let comm_off = config!(off.task_comm);
    // SAFETY: per the function's contract.
    unsafe {
        if comm_off == NO_OFFSET {
            if bpf_get_current_comm_raw(comm.cast(), 16) != 0 {
                core::ptr::write_volatile(comm, [0; 16]);
            }
        } else {
            // `comm` is kept NUL-padded by the kernel (strscpy_pad), as the helper pads it.
            let words = comm.cast::<u64>();
            core::ptr::write_volatile(words, load(task, comm_off));
            core::ptr::write_volatile(words.add(1), load(task, comm_off + 8));
        }
    }
    if config!(off.task_cgroups) == NO_OFFSET || config!(off.cset_dfl_cgrp) == NO_OFFSET {
        // SAFETY: helper without arguments.
        return unsafe { bpf_get_current_cgroup_id() };
    }
    let cset: u64 = load(task, config!(off.task_cgroups));
    let cgroup: u64 = load(cset, config!(off.cset_dfl_cgrp));
    let kn: u64 = load(cgroup, config!(off.cgroup_kn));
    load(kn, config!(off.kn_id))
}

/// Reserves, fills and submits one event on its own: the path of events whose CPU's staging
/// area is in use by the program they interrupted.
#[inline(always)]
fn emit_direct<const READ_TASK: bool>(
    kind: u16,
    dev: u32,
    pid_tgid: u64,
    cgroup: Option<u64>,
    fill: impl FnOnce(&mut RawEvent),
) {
    let Some(mut entry) = EVENTS.reserve::<RawEvent>(0) else {
        count(stat::LOST);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved, exclusively owned RawEvent-sized slot; every field is
    // written before submit.
    unsafe {
        fill_common(ev, bpf_ktime_get_ns(), kind, dev, pid_tgid);
        // Straight into the ring slot: a copy through the stack costs a byte loop here.
        if READ_TASK {
            let task_cgroup = current_comm_and_cgroup(&raw mut (*ev).comm);
            (*ev).cgroup_id = cgroup.unwrap_or(task_cgroup);
        } else {
            (*ev).comm = [0; 16];
            (*ev).cgroup_id = cgroup.unwrap_or(0);
        }
        fill(&mut *ev);
    }
    count(stat::SENT);
    entry.submit(wakeup_flags(size_of::<RawEvent>() as u64));
}

/// Run by userspace on each CPU (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_RUN_ON_CPU`, in an IPI
/// when the CPU is another one): sends what that CPU has staged, so a CPU that goes quiet
/// does not hold its last events back, and nothing stays staged after the tracepoints are
/// detached. Never attached.
#[raw_tracepoint(tracepoint = "block_rq_issue")]
pub fn flush_staged(_ctx: RawTracePointContext) -> i32 {
    // If the area is held, the program we interrupted sends the batch itself when it is full
    // or old.
    let Some(held) = Held::acquire() else {
        return 1;
    };
    // SAFETY: held.
    unsafe { send_batch(held.0) };
    0
}

fn is_self(pid_tgid: u64) -> bool {
    (pid_tgid >> 32) as u32 == config!(self_tgid)
}

/// Events about a bio: Q, G, M, F, and X (`new_sector` is the split point).
#[inline(always)]
fn bio_event(bio: u64, kind: u16, aux: u64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_self(pid_tgid) {
        return;
    }
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = bio_dev(bio, held) else {
        return;
    };
    // Only Q needs the charged cgroup: G/M/F/X of the same bio follow it closely.
    let cgroup = if kind == BIO_QUEUE && config!(bio_cgroup) != 0 {
        Some(bio_cgroup_id(load(bio, config!(off.bio_blkg)), held))
    } else {
        None
    };
    if kind == GETRQ
        && let Some(h) = held
        && fold_getrq(h, bio, dev, pid_tgid)
    {
        return;
    }
    // A constant to the verifier: without `--wakeups` this costs nothing.
    if kind == BIO_QUEUE && config!(wakeups) != 0 {
        let pid = pid_tgid as u32;
        // SAFETY: the value is copied out at once.
        if unsafe { IO_TASKS.get(pid) }.copied() != Some(dev) {
            let _ = IO_TASKS.insert(pid, dev, 0);
        }
    }
    emit(held, kind, dev, pid_tgid, cgroup, |ev| {
        ev.bio = bio;
        ev.sector = load(bio, config!(off.bio_sector));
        ev.bytes = load(bio, config!(off.bio_size));
        ev.cmd_flags = load(bio, config!(off.bio_opf));
        ev.ioprio = load(bio, config!(off.bio_ioprio));
        ev.aux = aux;
    });
}

/// This CPU's last staged event but `back` (the events after it that a fold passes over:
/// [`trailing_plugs`]), if it is a Q of `bio` on `dev` from the current task (`pid_tgid`)
/// that does not yet stand for any of `folds`, and an event of that task staged now would
/// carry the Q's name and cgroup: the Q an event of the same bio can be folded into (see
/// [`FOLDED_GETRQ`]).
#[inline(always)]
fn foldable_queue(
    h: &Held,
    bio: u64,
    dev: u32,
    pid_tgid: u64,
    folds: u16,
    back: usize,
) -> Option<&'static mut RawEvent> {
    let q = staged_event(h, back)?;
    if q.kind != BIO_QUEUE || q.folded & folds != 0 || q.bio != bio || !of_task_on(q, dev, pid_tgid)
    {
        return None;
    }
    // The folded event's name and cgroup would be the staged task's: the Q's task, not
    // renamed since, and charged to its own cgroup.
    let st = h.0;
    // SAFETY: held: exclusive use of this CPU's staging area.
    let (task, generation, cgroup) =
        unsafe { ((*st).task, (*st).task_name_generation, (*st).task_cgroup) };
    if task != pid_tgid || generation != name_generation() || cgroup != q.cgroup_id {
        return None;
    }
    Some(q)
}

/// Whether `ev`'s sector, size and flags are those read now from `base` (a bio or a
/// request) at `offsets`, in that order: what an event of `base` would carry.
#[inline(always)]
fn carries_fields_of(ev: &RawEvent, base: u64, offsets: [u32; 3]) -> bool {
    let [sector, size, flags] = offsets;
    ev.sector == load::<u64>(base, sector)
        && ev.bytes == load::<u32>(base, size)
        && ev.cmd_flags == load::<u32>(base, flags)
}

/// Folds this G into the Q before it ([`FOLDED_GETRQ`]) if [`foldable_queue`] finds one and
/// the bio still reads as the Q read it. Returns whether it did; if not, the G is staged as
/// an event of its own.
#[inline(always)]
fn fold_getrq(h: &Held, bio: u64, dev: u32, pid_tgid: u64) -> bool {
    let Some(q) = foldable_queue(h, bio, dev, pid_tgid, FOLDED_GETRQ | FOLDED_ISSUE, 0) else {
        return false;
    };
    // The bio as the G would read it (a split or a priority set in between changes it).
    let bio_fields = [
        config!(off.bio_sector),
        config!(off.bio_size),
        config!(off.bio_opf),
    ];
    if !carries_fields_of(q, bio, bio_fields)
        || q.ioprio != load::<u16>(bio, config!(off.bio_ioprio))
    {
        return false;
    }
    // SAFETY: helper without arguments.
    q.aux = unsafe { bpf_ktime_get_ns() };
    q.folded |= FOLDED_GETRQ;
    // SAFETY: held: exclusive use of this CPU's staging area.
    unsafe { (*h.0).batch.folded += 1 };
    true
}

/// This CPU's staged event `back` places before the last, if there is one. The index is
/// checked through an opaque copy: LLVM would otherwise check `n - 1 - back` and address the
/// event through `n` itself, which Linux 6.1's verifier cannot bound (it refused the
/// program: "unbounded memory access").
#[inline(always)]
fn staged_event(h: &Held, back: usize) -> Option<&'static mut RawEvent> {
    let st = h.0;
    // SAFETY: held: exclusive use of this CPU's staging area.
    let n = unsafe { (*st).batch.count } as usize;
    // Wraps past the bound when there are not `back + 1` staged events.
    let at = n.wrapping_sub(1 + back);
    // SAFETY: a read of a local.
    let at = unsafe { core::ptr::read_volatile(&at) };
    if at >= BATCH_EVENTS {
        return None;
    }
    // SAFETY: as above; `at` is in bounds. The reference lives while the area is held (the
    // caller's program).
    Some(unsafe { &mut *(&raw mut (*st).batch.events).cast::<RawEvent>().add(at) })
}

/// Whether `ev` is the task `pid_tgid`'s, on `dev`.
#[inline(always)]
fn of_task_on(ev: &RawEvent, dev: u32, pid_tgid: u64) -> bool {
    ev.dev == dev && ev.pid == pid_tgid as u32 && ev.tgid == (pid_tgid >> 32) as u32
}

/// With `--plug-events`, how many of this CPU's last staged events (at most two) are the
/// current task's plug and unplug of `dev`: on a fast device without a scheduler a read's
/// events on the submitting CPU come as Q G P U D (the request waits in the task's plug
/// list), and its D folds into the Q past them. Userspace puts the D back after them.
#[inline(always)]
fn trailing_plugs(h: &Held, dev: u32, pid_tgid: u64) -> usize {
    // A constant to the verifier: without plug events nothing is passed over.
    if config!(plug_events) == 0 {
        return 0;
    }
    let mut back = 0;
    while back < 2 {
        let Some(ev) = staged_event(h, back) else {
            break;
        };
        if (ev.kind != PLUG && ev.kind != UNPLUG) || !of_task_on(ev, dev, pid_tgid) {
            break;
        }
        back += 1;
    }
    back
}

/// Folds this D into the Q of the request's only bio ([`FOLDED_ISSUE`]) if
/// [`foldable_queue`] finds it and the request reads as the D event would carry it: the
/// Q's sector, size, flags and priority. Returns whether it did.
#[inline(always)]
fn fold_issue(h: &Held, rq: u64, dev: u32, pid_tgid: u64) -> bool {
    let bio: u64 = load(rq, config!(off.rq_bio));
    if bio == 0 || bio != load::<u64>(rq, config!(off.rq_biotail)) {
        return false;
    }
    let back = trailing_plugs(h, dev, pid_tgid);
    let Some(q) = foldable_queue(h, bio, dev, pid_tgid, FOLDED_ISSUE, back) else {
        return false;
    };
    let rq_fields = [
        config!(off.rq_sector),
        config!(off.rq_data_len),
        config!(off.rq_cmd_flags),
    ];
    if !carries_fields_of(q, rq, rq_fields) {
        return false;
    }
    // Where the request has no priority of its own (6.x keeps it in the bios; the field
    // reads 0) the D carries 0, the Q its bio's: said by a flag of its own.
    let prio: u16 = load(rq, config!(off.rq_ioprio));
    let no_prio = prio == 0 && q.ioprio != 0;
    if !no_prio && prio != q.ioprio {
        return false;
    }
    // SAFETY: helper without arguments.
    let after = unsafe { bpf_ktime_get_ns() }.wrapping_sub(q.ts_ns);
    if after > u32::MAX as u64 {
        return false;
    }
    q.rq = rq;
    q.error = after as u32 as i32;
    q.folded |= if no_prio {
        FOLDED_ISSUE | FOLDED_ISSUE_NO_PRIO
    } else {
        FOLDED_ISSUE
    };
    // SAFETY: held: exclusive use of this CPU's staging area.
    unsafe { (*h.0).batch.folded += 1 };
    true
}

/// Events about a request: I, D, C, R, M (rq merge), io_start/io_done. Returns the request's
/// first bio, its device and the current task.
#[inline(always)]
fn rq_event(
    held: Option<&Held>,
    rq: u64,
    kind: u16,
    error: i32,
    aux: u64,
) -> Option<(u64, u32, u64)> {
    let dev = rq_dev(rq, held)?;
    let pid_tgid = bpf_get_current_pid_tgid();
    let bio = emit_rq(held, rq, dev, pid_tgid, kind, error, aux);
    Some((bio, dev, pid_tgid))
}

/// Stages a request event of `rq` on `dev`; returns the request's first bio.
#[inline(always)]
fn emit_rq(
    held: Option<&Held>,
    rq: u64,
    dev: u32,
    pid_tgid: u64,
    kind: u16,
    error: i32,
    aux: u64,
) -> u64 {
    let bio: u64 = load(rq, config!(off.rq_bio));
    emit(held, kind, dev, pid_tgid, None, |ev| {
        ev.rq = rq;
        ev.bio = bio;
        ev.sector = load(rq, config!(off.rq_sector));
        ev.bytes = load(rq, config!(off.rq_data_len));
        ev.cmd_flags = load(rq, config!(off.rq_cmd_flags));
        // Recent kernels (6.x) keep the priority only in the bios: there a request's
        // priority is its first bio's, known from that bio's Q event.
        ev.ioprio = load(rq, config!(off.rq_ioprio));
        ev.error = error;
        ev.aux = aux;
    });
    bio
}

// Argument positions are constants: the verifier refuses context reads at offsets it cannot
// prove, and LLVM folds any runtime choice into `ctx + 8 * n`. Userspace checks each
// tracepoint's prototype in the kernel's BTF against these positions before attaching
// (probe::check_prototypes) and refuses a kernel whose layout differs.
fn rq_arg(ctx: &BtfTracePointContext) -> u64 {
    ctx.arg(0)
}

#[btf_tracepoint(function = "block_bio_queue")]
pub fn block_bio_queue(ctx: BtfTracePointContext) -> i32 {
    bio_event(ctx.arg(0), BIO_QUEUE, 0);
    0
}

#[btf_tracepoint(function = "block_getrq")]
pub fn block_getrq(ctx: BtfTracePointContext) -> i32 {
    bio_event(ctx.arg(0), GETRQ, 0);
    0
}

#[btf_tracepoint(function = "block_bio_backmerge")]
pub fn block_bio_backmerge(ctx: BtfTracePointContext) -> i32 {
    bio_event(ctx.arg(0), BIO_BACKMERGE, 0);
    0
}

#[btf_tracepoint(function = "block_bio_frontmerge")]
pub fn block_bio_frontmerge(ctx: BtfTracePointContext) -> i32 {
    bio_event(ctx.arg(0), BIO_FRONTMERGE, 0);
    0
}

#[btf_tracepoint(function = "block_split")]
pub fn block_split(ctx: BtfTracePointContext) -> i32 {
    let new_sector = ctx.arg::<u64>(1) as u32;
    bio_event(ctx.arg(0), SPLIT, new_sector as u64);
    0
}

#[btf_tracepoint(function = "block_rq_merge")]
pub fn block_rq_merge(ctx: BtfTracePointContext) -> i32 {
    let held = Held::acquire();
    rq_event(held.as_ref(), rq_arg(&ctx), RQ_MERGE, 0, 0);
    0
}

#[btf_tracepoint(function = "block_rq_insert")]
pub fn block_rq_insert(ctx: BtfTracePointContext) -> i32 {
    let held = Held::acquire();
    rq_event(held.as_ref(), rq_arg(&ctx), RQ_INSERT, 0, 0);
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq = rq_arg(&ctx);
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = rq_dev(rq, held) else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    if let Some(h) = held
        && fold_issue(h, rq, dev, pid_tgid)
    {
        return 0;
    }
    let first = emit_rq(held, rq, dev, pid_tgid, RQ_ISSUE, 0, 0);
    // Bios merged into this request (M/F) carry no request pointer in their tracepoints; the
    // chain, walked once at issue, links each of them to the request exactly. Most requests
    // hold one bio (`bio == biotail`) and cost one load here. The walk itself reads with
    // `bpf_probe_read_kernel`: pointers loaded directly are typed, and the verifier, unable to
    // merge its states across iterations, took seconds over the bounded loop.
    if first == load::<u64>(rq, config!(off.rq_biotail)) {
        return 0;
    }
    let next_off = config!(off.bio_next);
    let mut bio: u64 = probe_u64(first, next_off);
    let mut pos: u32 = 1;
    while bio != 0 && pos < MAX_CHAIN {
        emit_staged::<false>(held, BIO_IN_RQ, dev, pid_tgid, NO_CGROUP, |ev| {
            ev.rq = rq;
            ev.bio = bio;
            ev.aux = pos as u64;
        });
        bio = probe_u64(bio, next_off);
        pos += 1;
    }
    if bio != 0 {
        count(stat::CHAIN_TRUNCATED);
    }
    0
}

#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_rq_complete(ctx: BtfTracePointContext) -> i32 {
    // (struct request *, blk_status_t, unsigned int nr_bytes); blk_status_t is a u8 in a
    // 64-bit argument slot.
    let status = (ctx.arg::<u64>(1) & 0xff) as i32;
    let nr_bytes = ctx.arg::<u64>(2) & 0xffff_ffff;
    let held = Held::acquire();
    rq_event(held.as_ref(), rq_arg(&ctx), RQ_COMPLETE, status, nr_bytes);
    0
}

#[btf_tracepoint(function = "block_rq_requeue")]
pub fn block_rq_requeue(ctx: BtfTracePointContext) -> i32 {
    let held = Held::acquire();
    rq_event(held.as_ref(), rq_arg(&ctx), RQ_REQUEUE, 0, 0);
    0
}

#[btf_tracepoint(function = "block_io_start")]
pub fn block_io_start(ctx: BtfTracePointContext) -> i32 {
    let held = Held::acquire();
    rq_event(held.as_ref(), ctx.arg(0), IO_START, 0, 0);
    0
}

#[btf_tracepoint(function = "block_io_done")]
pub fn block_io_done(ctx: BtfTracePointContext) -> i32 {
    let held = Held::acquire();
    rq_event(held.as_ref(), ctx.arg(0), IO_DONE, 0, 0);
    0
}

#[btf_tracepoint(function = "block_bio_complete")]
pub fn block_bio_complete(ctx: BtfTracePointContext) -> i32 {
    let bio: u64 = ctx.arg(1);
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = bio_dev(bio, held) else {
        return 0;
    };
    emit(
        held,
        BIO_COMPLETE,
        dev,
        bpf_get_current_pid_tgid(),
        NO_CGROUP,
        |ev| {
            ev.bio = bio;
            ev.sector = load(bio, config!(off.bio_sector));
            ev.bytes = load(bio, config!(off.bio_size));
            ev.cmd_flags = load(bio, config!(off.bio_opf));
            ev.error = load::<u8>(bio, config!(off.bio_status)) as i32;
        },
    );
    0
}

/// This CPU's plug counters of `dev`: in its staging area if the program holds it and the
/// device has a slot there (or a free one to take), else in `PLUG_COUNTS`.
#[inline(always)]
fn plug_counts(dev: u32, held: Option<&Held>) -> Option<*mut PlugCounts> {
    if let Some(h) = held {
        let key = iosched_trace_common::staged_plug_key(dev);
        for i in 0..STAGED_PLUG_DEVICES {
            // SAFETY: held: exclusive use of this CPU's area; `i` is in bounds.
            unsafe {
                let slot = &raw mut (*h.0).plug_counts[i];
                if (*slot).key == 0 {
                    (*slot).key = key;
                }
                if (*slot).key == key {
                    return Some(&raw mut (*slot).counts);
                }
            }
        }
    }
    hashed_plug_counts(dev)
}

/// This CPU's plug counters of `dev` in `PLUG_COUNTS`, created at its first unplug there;
/// `None` (counted in `stat::PLUG_DEVICES_FULL`) if the map is full.
#[inline(always)]
fn hashed_plug_counts(dev: u32) -> Option<*mut PlugCounts> {
    if let Some(counts) = PLUG_COUNTS.get_ptr_mut(dev) {
        return Some(counts);
    }
    // BPF_NOEXIST: a program interrupting this one between the lookup and the insert may
    // have made the entry; either way the lookup after it finds one.
    let _ = PLUG_COUNTS.insert(
        dev,
        PlugCounts::default(),
        aya_ebpf::bindings::BPF_NOEXIST as u64,
    );
    let counts = PLUG_COUNTS.get_ptr_mut(dev);
    if counts.is_none() {
        count(stat::PLUG_DEVICES_FULL);
    }
    counts
}

/// `record --plug-events` only: counting mode leaves this tracepoint unattached and counts a
/// plug per unplug (`block_unplug`), which saves the workload one tracepoint per plug.
#[btf_tracepoint(function = "block_plug")]
pub fn block_plug(ctx: BtfTracePointContext) -> i32 {
    // A constant to the verifier: pruned at load. Never attached in counting mode; were it,
    // a counted recording must not get P events.
    if config!(plug_events) == 0 {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_self(pid_tgid) {
        return 0;
    }
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = traced_dev(ctx.arg(0), DEV_KEY_QUEUE, config!(off.q_disk), held) else {
        return 0;
    };
    emit(held, PLUG, dev, pid_tgid, NO_CGROUP, |_| {});
    0
}

#[btf_tracepoint(function = "block_unplug")]
pub fn block_unplug(ctx: BtfTracePointContext) -> i32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_self(pid_tgid) {
        return 0;
    }
    let depth = ctx.arg::<u64>(1) & 0xffff_ffff;
    let explicit = ctx.arg::<u64>(2) & 0xff != 0;
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = traced_dev(ctx.arg(0), DEV_KEY_QUEUE, config!(off.q_disk), held) else {
        return 0;
    };
    // A constant to the verifier: one of the two paths is pruned at load.
    if config!(plug_events) == 0 {
        if let Some(counts) = plug_counts(dev, held) {
            // SAFETY: this CPU's value; programs on one CPU nest only by interruption (a
            // count lost to an interrupting unplug is a window of a few instructions).
            unsafe {
                // Every plug list that held requests for the device is flushed with an unplug
                // of it, so the plug is counted here and `block_plug` stays unattached (a
                // flush the kernel splits, per CPU queue or on a fallback, counts twice).
                (*counts).plugs += 1;
                if explicit {
                    (*counts).unplugs_explicit += 1;
                } else {
                    (*counts).unplugs_timer += 1;
                }
                (*counts).unplugged_requests += depth;
            }
        }
        return 0;
    }
    emit(held, UNPLUG, dev, pid_tgid, NO_CGROUP, |ev| {
        ev.aux = depth;
        ev.error = explicit as i32;
    });
    0
}

/// Kyber's domain names ("READ", "WRITE", "DISCARD", "OTHER"), sent as their index in that
/// order (their first letters differ): `aux` = index | depth << 32.
///
/// Raw tracepoints, not `tp_btf`: where kyber is a module (Debian's kernels), its
/// tracepoints' BTF is the module's (`/sys/kernel/btf/kyber_iosched`), which a `tp_btf` load
/// must name by its BTF object fd (aya 0.14 only looks in vmlinux); a raw tracepoint is
/// found by name in modules too. The arguments are the same u64 slots; userspace checks their
/// prototype against the module's BTF before attaching, and the domain string is read with
/// `bpf_probe_read_kernel_str` either way.
#[inline(always)]
fn kyber_event(dev: u32, domain_ptr: u64, kind: u16, depth: u32) {
    // SAFETY: the value is not kept.
    if config!(filter_devices) != 0 && unsafe { DEVICES.get(dev) }.is_none() {
        return;
    }
    let mut name = [0u8; 8];
    // SAFETY: bounded read of a kernel string into a stack buffer.
    if unsafe {
        aya_ebpf::helpers::bpf_probe_read_kernel_str_bytes(domain_ptr as *const u8, &mut name)
    }
    .is_err()
    {
        count(stat::READ_ERRORS);
    }
    let index: u64 = match name[0] {
        b'R' => 0,
        b'W' => 1,
        b'D' => 2,
        _ => 3,
    };
    let held = Held::acquire();
    emit(
        held.as_ref(),
        kind,
        dev,
        bpf_get_current_pid_tgid(),
        NO_CGROUP,
        |ev| {
            ev.aux = index | (u64::from(depth) << 32);
        },
    );
}

/// `kyber_throttled(dev_t dev, const char *domain)`.
#[raw_tracepoint(tracepoint = "kyber_throttled")]
pub fn kyber_throttled(ctx: RawTracePointContext) -> i32 {
    kyber_event(ctx.arg::<u64>(0) as u32, ctx.arg(1), KYBER_THROTTLED, 0);
    0
}

/// `kyber_adjust(dev_t dev, const char *domain, unsigned int depth)`.
#[raw_tracepoint(tracepoint = "kyber_adjust")]
pub fn kyber_adjust(ctx: RawTracePointContext) -> i32 {
    let depth = ctx.arg::<u64>(2) as u32;
    kyber_event(ctx.arg::<u64>(0) as u32, ctx.arg(1), KYBER_ADJUST, depth);
    0
}

/// `sched_waking(struct task_struct *p)`, attached only with `--wakeups`: the current task
/// is waking `p`. Kept only if `p` queued I/O on a traced device (`IO_TASKS`). This tracepoint
/// fires on every wakeup of the machine, so the filter (one read, one lookup) comes before
/// the staging area is taken: it touches nothing of that area, and the staging area is then
/// held, exactly as elsewhere, for the event it emits.
///
/// `sched_waking`, not `sched_wakeup`: `sched_waking` fires in `try_to_wake_up` itself, in
/// the waker's context, so the current task is the waker. `sched_wakeup` fires where the
/// wakee is activated, and when the wakee's CPU is idle the kernel queues the wakeup on that
/// CPU's wake list and activates it from the IPI there (`ttwu_queue_wakelist`): the current
/// task is then the idle task (`swapper/N`) or whatever that CPU was running. Measured on
/// 6.18 (bpftrace, `dd oflag=dsync` on ext4, 200 writes, three runs): `sched_waking` named
/// jbd2 for 200 of 200 wakeups of dd each time, `sched_wakeup` for 132-198, the rest
/// `swapper`; the CI failure that found it had 1 of 1003.
#[btf_tracepoint(function = "sched_waking")]
pub fn sched_waking(ctx: BtfTracePointContext) -> i32 {
    let task: u64 = ctx.arg(0);
    let pid: i32 = load(task, config!(off.task_pid));
    if pid == 0 {
        // The idle task, or a null wakee: neither queued I/O.
        return 0;
    }
    // SAFETY: the value is copied out at once.
    let Some(dev) = (unsafe { IO_TASKS.get(pid as u32) }).copied() else {
        return 0;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_self(pid_tgid) {
        return 0;
    }
    let tgid: i32 = load(task, config!(off.task_tgid));
    let held = Held::acquire();
    emit(held.as_ref(), WAKEUP, dev, pid_tgid, None, |ev| {
        ev.aux = (pid as u32 as u64) | ((tgid as u32 as u64) << 32);
    });
    0
}

/// `task_rename(task, comm)`: a task is about to take a new name. Changes [`NAMEGEN`], so
/// that no CPU gives the old name to the task's next event. It fires before the copy: an
/// event interrupting the renaming task in between caches the old name under the new
/// generation (CI saw it once in 400 execs under load), hence [`sched_process_exec`].
#[btf_tracepoint(function = "task_rename")]
pub fn task_rename(_ctx: BtfTracePointContext) -> i32 {
    next_name_generation();
    0
}

/// `sched_process_exec`: an exec is done, its new name in place. Changes [`NAMEGEN`] again,
/// for what was cached between `task_rename` and the copy. (A rename by `prctl` or
/// `/proc/PID/comm` has no such second tracepoint: that window stays, for the renamed
/// task's current batch at most.)
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_process_exec(_ctx: BtfTracePointContext) -> i32 {
    next_name_generation();
    0
}

#[inline(always)]
fn next_name_generation() {
    if let Some(g) = NAMEGEN.get_ptr_mut(0) {
        // SAFETY: an array map value. Atomic because two CPUs can rename at once, and each
        // rename must change the value.
        unsafe { exporter::xadd(g, 1) };
    }
}

/// The traced whole-disk `dev_t` of a wbt event's `struct backing_dev_info *` (its `owner`,
/// the disk's device: its `devt`), or `None`.
#[inline(always)]
fn wbt_dev(bdi: u64) -> Option<u32> {
    let device: u64 = load(bdi, config!(off.bdi_owner));
    let dev: u32 = load(device, config!(off.device_devt));
    if dev == 0 {
        return None;
    }
    // SAFETY: the value is not kept.
    if config!(filter_devices) != 0 && unsafe { DEVICES.get(dev) }.is_none() {
        return None;
    }
    Some(dev)
}

/// `wbt_step(bdi, msg, step, window, bg, normal, max)`: wbt changed its scale step.
#[btf_tracepoint(function = "wbt_step")]
pub fn wbt_step(ctx: BtfTracePointContext) -> i32 {
    let Some(dev) = wbt_dev(ctx.arg(0)) else {
        return 0;
    };
    let step = ctx.arg::<u64>(2) & 0xffff_ffff;
    let window: u64 = ctx.arg(3);
    let max = ctx.arg::<u64>(6) & 0xffff_ffff;
    let held = Held::acquire();
    emit(
        held.as_ref(),
        kind::WBT_STEP,
        dev,
        bpf_get_current_pid_tgid(),
        NO_CGROUP,
        |ev| {
            ev.aux = step | (max << 32);
            ev.sector = window;
        },
    );
    0
}

/// `wbt_timer(bdi, status, step, inflight)`: wbt's monitoring window ended.
#[btf_tracepoint(function = "wbt_timer")]
pub fn wbt_timer(ctx: BtfTracePointContext) -> i32 {
    let Some(dev) = wbt_dev(ctx.arg(0)) else {
        return 0;
    };
    let status = ctx.arg::<u64>(1) as i32;
    let step = ctx.arg::<u64>(2) as u32;
    let inflight = ctx.arg::<u64>(3) & 0xffff_ffff;
    let held = Held::acquire();
    emit(
        held.as_ref(),
        kind::WBT_TIMER,
        dev,
        bpf_get_current_pid_tgid(),
        NO_CGROUP,
        |ev| {
            ev.aux = inflight | (u64::from(step) << 32);
            ev.error = status;
        },
    );
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
