//! The exporter's programs (`exp_*`): instead of sending events, each keeps a request's state
//! from its first bio's Q to its C and folds the finished request into histograms and
//! counters in maps that userspace reads when Prometheus scrapes. The maps are shared by the
//! CPUs and their counters change by atomic adds (`xadd`): a few keys (devices, operations,
//! cgroups) take every request, so per-CPU copies would multiply the memory by the CPUs for
//! nothing a scrape every few seconds needs.
//!
//! What it must not do: anything per event beyond a few map operations. Every observation it
//! cannot make is counted in `EXP_STATS` (`iosched_trace_common::exporter::stat`).

use aya_ebpf::{
    helpers::generated::bpf_ktime_get_ns,
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use iosched_trace_common::exporter::{
    BOUNDS, BOUNDS_NS, BioStart, CG_CLAIMING, CG_FREE, CG_READY, CG_SLOTS, COMPLETED_GROUPS,
    CgSlot, CgroupIo, DEV_CLAIMED, DEV_SLOTS, DevCgroup, DevOpCgroup, DevSlot, DevState, Hist,
    IDLE_MIN_NS, IdleWaste, OP_MASK, RECENT_BIOS, RQ_INSERTED, RQ_ISSUED, RQ_SLOTS, RecentBios,
    RqSlot, RqState, SLOT_PROBES, cg_slot, completed_group, dev_slot, rq_slot, stat,
};

use crate::{Held, bio_cgroup_id, bio_dev, load, rq_dev};

/// Each request's state from its first sight to its completion, direct-mapped by a hash of
/// its pointer (`RqSlot`): an array slot costs a compare-and-swap where a hash map's insert
/// and delete took a bucket lock each, together more than the rest of the request's work.
#[map(name = "EXP_RQ_SLOTS")]
static EXP_RQ_SLOTS: Array<RqSlot> = Array::with_max_entries(RQ_SLOTS, 0);

/// Requests whose slot another request held when they were first seen. Beyond its size, new
/// requests go unaccounted (`stat::RQ_FULL`).
#[map(name = "EXP_RQ")]
static EXP_RQ: HashMap<u64, RqState> = HashMap::with_max_entries(16384, 0);

/// The last bios queued on each CPU (`RecentBios`): where a request's first sight finds its
/// first bio's Q.
#[map(name = "EXP_RECENT")]
static EXP_RECENT: PerCpuArray<RecentBios> = PerCpuArray::with_max_entries(1, 0);

/// Bios queued by a program that interrupted another exporter program on its CPU (which
/// holds the CPU's staging area, and with it `EXP_RECENT`): rare, so a hash map will do.
/// LRU: bios merged into a request or that never become one need no cleanup path; per-CPU
/// LRU lists (`BPF_F_NO_COMMON_LRU`) so that an insert takes no lock other CPUs share.
#[map(name = "EXP_BIO")]
static EXP_BIO: LruHashMap<u64, BioStart> =
    LruHashMap::with_max_entries(16384, aya_ebpf::bindings::BPF_F_NO_COMMON_LRU);

/// Per device, operation and cgroup: the request counts and histograms (`CgSlot`). Keys
/// beyond what fits are counted under cgroup 0 (`stat::CG_FULL`); userspace shows at most
/// its `--cgroups` largest and sums the rest as `other` anyway. Mappable: a scrape reads the
/// table in place instead of one system call per slot.
#[map(name = "EXP_CG_SLOTS")]
static EXP_CG_SLOTS: Array<CgSlot> =
    Array::with_max_entries(CG_SLOTS, aya_ebpf::bindings::BPF_F_MMAPABLE);

/// Per device: depths, the open idle interval, merges, completions (`DevSlot`).
#[map(name = "EXP_DEV_SLOTS")]
static EXP_DEV_SLOTS: Array<DevSlot> =
    Array::with_max_entries(DEV_SLOTS, aya_ebpf::bindings::BPF_F_MMAPABLE);

#[map(name = "EXP_IDLE")]
static EXP_IDLE: HashMap<DevCgroup, IdleWaste> = HashMap::with_max_entries(4096, 0);

#[map(name = "EXP_STATS")]
static EXP_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// `*p += v` as one atomic instruction (BPF_ATOMIC BPF_ADD without fetch: `xadd`, which
/// every kernel and JIT has; core has no atomic add for the BPF target).
///
/// SAFETY: `p` points into a map value.
#[inline(always)]
pub(crate) unsafe fn xadd(p: *mut u64, v: u64) {
    // SAFETY: per the function's contract; the instruction only adds to `*p`.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack),
        )
    };
}

/// `*p = new` if `*p == old`, atomically; returns what `*p` was (BPF_CMPXCHG, Linux 5.12).
///
/// SAFETY: `p` points into a map value.
#[cfg(target_arch = "bpf")]
#[inline(always)]
unsafe fn cmpxchg(p: *mut u64, old: u64, new: u64) -> u64 {
    let was: u64;
    // SAFETY: per the function's contract; the instruction only touches `*p` and r0.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") old => was,
            options(nostack),
        )
    };
    was
}

/// The low 32 bits of a kernel pointer as a number. The verifier forbids arithmetic other
/// than adding on pointers, but a 32-bit move of one (allowed to programs that may see
/// pointers, as ours) yields a plain scalar.
#[cfg(target_arch = "bpf")]
#[inline(always)]
fn low_bits(ptr: u64) -> u32 {
    let low: u64;
    // SAFETY: a register move.
    unsafe {
        core::arch::asm!(
            "w2 = w1",
            in("r1") ptr,
            out("r2") low,
            options(nostack, nomem, pure),
        )
    };
    low as u32
}

// The crate is linted for the host too (`cargo clippy -p iosched-trace-ebpf`, no BPF
// target), where BPF's registers (`r0`, `r1`) do not exist: these stand in for the two
// functions above there, with the same meaning. They are never run.
#[cfg(not(target_arch = "bpf"))]
unsafe fn cmpxchg(p: *mut u64, old: u64, new: u64) -> u64 {
    // SAFETY: per the BPF version's contract; `p` is aligned (a map value's u64).
    let a = unsafe { core::sync::atomic::AtomicU64::from_ptr(p) };
    match a.compare_exchange(
        old,
        new,
        core::sync::atomic::Ordering::SeqCst,
        core::sync::atomic::Ordering::SeqCst,
    ) {
        Ok(was) | Err(was) => was,
    }
}

#[cfg(not(target_arch = "bpf"))]
fn low_bits(ptr: u64) -> u32 {
    ptr as u32
}

/// `rq`'s slot in `EXP_RQ_SLOTS` (whoever holds it).
#[inline(always)]
fn slot_of(rq: u64) -> Option<*mut RqSlot> {
    EXP_RQ_SLOTS.get_ptr_mut(rq_slot(u64::from(low_bits(rq))))
}

/// `rq`'s state: in its slot if the slot holds it, else in `EXP_RQ`.
#[inline(always)]
fn rq_state(rq: u64) -> Option<*mut RqState> {
    if let Some(slot) = slot_of(rq) {
        // SAFETY: a pointer into the array's value.
        unsafe {
            if core::ptr::read_volatile(&(*slot).rq) == rq {
                return Some(&raw mut (*slot).st);
            }
        }
    }
    EXP_RQ.get_ptr_mut(rq)
}

/// Keeps `st` as `rq`'s state: in its slot if free (or already `rq`'s: a state left by a
/// lost completion, which the request's next life replaces), else in `EXP_RQ`. False if
/// neither had room.
#[inline(always)]
fn keep_rq_state(rq: u64, st: &RqState) -> bool {
    if let Some(slot) = slot_of(rq) {
        // SAFETY: pointers into the array's value; the slot is ours once claimed, and the
        // request cannot be seen elsewhere before this program returns (the tracepoints
        // fire before the request is handed on).
        unsafe {
            let was = cmpxchg(&raw mut (*slot).rq, 0, rq);
            if was == 0 || was == rq {
                (*slot).st = *st;
                return true;
            }
        }
    }
    EXP_RQ.insert(rq, st, 0).is_ok()
}

/// Frees `rq`'s state (after it completed or was merged away).
#[inline(always)]
fn forget_rq(rq: u64) {
    if let Some(slot) = slot_of(rq) {
        // SAFETY: a pointer into the array's value.
        unsafe {
            if core::ptr::read_volatile(&(*slot).rq) == rq {
                core::ptr::write_volatile(&raw mut (*slot).rq, 0);
                return;
            }
        }
    }
    let _ = EXP_RQ.remove(rq);
}

#[inline(always)]
fn count(index: u32) {
    if let Some(c) = EXP_STATS.get_ptr_mut(index) {
        // SAFETY: this CPU's slot (an interrupting program may lose one count in a window of
        // a few instructions, as in the recorder's STATS).
        unsafe { *c += 1 };
    }
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// The bucket of `ns`: the first bound at least `ns`, or the overflow bucket. A binary
/// search over the 43 bounds, six steps, each provably in bounds for the verifier.
#[inline(always)]
fn bucket(ns: u64) -> usize {
    let mut lo = 0usize;
    let mut hi = BOUNDS;
    let mut step = 0;
    while step < 6 && lo < hi {
        let mid = (lo + hi) / 2;
        if mid >= BOUNDS {
            break;
        }
        if ns <= BOUNDS_NS[mid] {
            hi = mid;
        } else {
            lo = mid + 1;
        }
        step += 1;
    }
    if lo > BOUNDS { BOUNDS } else { lo }
}

/// SAFETY: `h` points into a map value.
#[inline(always)]
unsafe fn observe(h: *mut Hist, ns: u64) {
    let i = bucket(ns);
    // SAFETY: per the function's contract; `i` <= BOUNDS < BUCKETS.
    unsafe {
        xadd((&raw mut (*h).buckets).cast::<u64>().add(i), 1);
        xadd(&raw mut (*h).sum_ns, ns);
    }
}

// The zero value new `EXP_IDLE` entries are made from, in `.rodata`.
static ZERO_IDLE: IdleWaste = IdleWaste {
    ns: 0,
    intervals: 0,
};

/// The map value at `key`, created from `zero` if absent; `None` if the map is full.
#[inline(always)]
fn value_of<K, V>(map: &HashMap<K, V>, key: &K, zero: &'static V) -> Option<*mut V> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(v);
    }
    // BPF_NOEXIST: another CPU may have created it meanwhile; the lookup after finds it.
    let _ = map.insert(key, zero, aya_ebpf::bindings::BPF_NOEXIST as u64);
    map.get_ptr_mut(key)
}

/// Device `dev`'s state: in the slot that holds it, else in the first free one of its
/// [`SLOT_PROBES`] (claimed). `None` (counted) if all are taken by other devices.
#[inline(always)]
fn dev_state(dev: u32) -> Option<*mut DevState> {
    let key = u64::from(dev) | DEV_CLAIMED;
    let first = dev_slot(dev);
    let mut p = 0;
    while p < SLOT_PROBES {
        if let Some(slot) = EXP_DEV_SLOTS.get_ptr_mut((first + p) & (DEV_SLOTS - 1)) {
            // SAFETY: a pointer into the array's value.
            unsafe {
                if core::ptr::read_volatile(&(*slot).key) == key {
                    return Some(&raw mut (*slot).st);
                }
            }
        }
        p += 1;
    }
    // First sight: the first free slot. Another CPU claiming it for the same device at the
    // same moment makes the compare-and-swap return our key: the slot is ours to share.
    let mut p = 0;
    while p < SLOT_PROBES {
        if let Some(slot) = EXP_DEV_SLOTS.get_ptr_mut((first + p) & (DEV_SLOTS - 1)) {
            // SAFETY: as above.
            unsafe {
                let was = cmpxchg(&raw mut (*slot).key, 0, key);
                if was == 0 || was == key {
                    return Some(&raw mut (*slot).st);
                }
            }
        }
        p += 1;
    }
    count(stat::MAP_FULL);
    None
}

/// The counters and histograms of `key`: in the ready slot that holds it, else in the first
/// free one of its [`SLOT_PROBES`] (claimed, the key written, then ready). `None` if all are
/// taken by other keys.
#[inline(always)]
fn cg_io(key: &DevOpCgroup) -> Option<*mut CgroupIo> {
    let first = cg_slot(key);
    let mut p = 0;
    while p < SLOT_PROBES {
        if let Some(slot) = EXP_CG_SLOTS.get_ptr_mut((first + p) & (CG_SLOTS - 1)) {
            // SAFETY: a pointer into the array's value.
            unsafe {
                if core::ptr::read_volatile(&(*slot).state) == CG_READY && (*slot).key == *key {
                    return Some(&raw mut (*slot).io);
                }
            }
        }
        p += 1;
    }
    let mut p = 0;
    while p < SLOT_PROBES {
        if let Some(slot) = EXP_CG_SLOTS.get_ptr_mut((first + p) & (CG_SLOTS - 1)) {
            // SAFETY: as above; the key is written only by the CPU that claimed the slot,
            // and compared by others only once the slot is ready (both steps are atomic
            // instructions, which order the key's stores before the slot turns ready).
            unsafe {
                if cmpxchg(&raw mut (*slot).state, CG_FREE, CG_CLAIMING) == CG_FREE {
                    (*slot).key = *key;
                    cmpxchg(&raw mut (*slot).state, CG_CLAIMING, CG_READY);
                    return Some(&raw mut (*slot).io);
                }
            }
        }
        p += 1;
    }
    None
}

/// `block_bio_queue`: remember when the bio entered the block layer and whom it is charged
/// to, for the request it will start or join.
#[btf_tracepoint(function = "block_bio_queue")]
pub fn exp_bio_queue(ctx: BtfTracePointContext) -> i32 {
    let bio: u64 = ctx.arg(0);
    let held = Held::acquire();
    let held = held.as_ref();
    if bio_dev(bio, held).is_none() {
        return 0;
    }
    count(stat::QUEUE);
    let cgroup = if config!(bio_cgroup) != 0 {
        bio_cgroup_id(load(bio, config!(off.bio_blkg)), held)
    } else {
        // SAFETY: helper without arguments.
        unsafe { aya_ebpf::helpers::generated::bpf_get_current_cgroup_id() }
    };
    let start = BioStart {
        q_ns: now(),
        cgroup,
    };
    // Held: this program owns the CPU's staging area, and with it `EXP_RECENT`.
    if held.is_some()
        && let Some(r) = EXP_RECENT.get_ptr_mut(0)
    {
        // SAFETY: this CPU's value, exclusively ours while held.
        unsafe {
            let i = ((*r).next as usize) & (RECENT_BIOS - 1);
            (*r).bio[i] = bio;
            (*r).start[i] = start;
            (*r).next = (*r).next.wrapping_add(1);
        }
    } else {
        let _ = EXP_BIO.insert(bio, start, 0);
    }
    0
}

/// `bio`'s Q among this CPU's recent bios (the slot after the last one found, then newest
/// first: the request's first bio is nearly always among the last few queued), then in
/// `EXP_BIO`.
#[inline(always)]
fn bio_start(bio: u64, held: Option<&Held>) -> Option<BioStart> {
    if held.is_some()
        && let Some(r) = EXP_RECENT.get_ptr_mut(0)
    {
        // SAFETY: this CPU's value, exclusively ours while held.
        unsafe {
            let after = ((*r).found as usize).wrapping_add(1) & (RECENT_BIOS - 1);
            if (*r).bio[after] == bio {
                (*r).found = after as u64;
                return Some((*r).start[after]);
            }
            let next = (*r).next as usize;
            let mut k = 1usize;
            while k <= RECENT_BIOS {
                let i = next.wrapping_sub(k) & (RECENT_BIOS - 1);
                if (*r).bio[i] == bio {
                    (*r).found = i as u64;
                    return Some((*r).start[i]);
                }
                k += 1;
            }
        }
    }
    // SAFETY: the value is copied out at once.
    let start = unsafe { EXP_BIO.get(bio) }.copied()?;
    let _ = EXP_BIO.remove(bio);
    Some(start)
}

/// A first sight of request `rq`: its state with its first bio's Q and cgroup (`bio_start`),
/// and `d_ns` and `flags` as given. `None` if `EXP_RQ` is full.
#[inline(always)]
fn new_rq_state(rq: u64, d_ns: u64, flags: u32, held: Option<&Held>) -> Option<RqState> {
    let bio: u64 = load(rq, config!(off.rq_bio));
    let mut st = RqState {
        d_ns,
        flags,
        ..RqState::default()
    };
    match bio_start(bio, held) {
        Some(start) => {
            st.q_ns = start.q_ns;
            st.cgroup = start.cgroup;
        }
        None => count(stat::NO_QUEUE_TIME),
    }
    if !keep_rq_state(rq, &st) {
        count(stat::RQ_FULL);
        return None;
    }
    Some(st)
}

#[inline(always)]
fn merge(ctx: &BtfTracePointContext, field: fn(*mut DevState) -> *mut u64) {
    let bio: u64 = ctx.arg(0);
    let held = Held::acquire();
    let Some(dev) = bio_dev(bio, held.as_ref()) else {
        return;
    };
    count(stat::MERGE);
    if let Some(st) = dev_state(dev) {
        // SAFETY: a pointer into EXP_DEV_SLOTS' value.
        unsafe { xadd(field(st), 1) };
    }
}

/// `block_bio_backmerge`: the bio joined a request's tail (its Q is not the request's).
#[btf_tracepoint(function = "block_bio_backmerge")]
pub fn exp_bio_backmerge(ctx: BtfTracePointContext) -> i32 {
    // SAFETY (closure): field address within the value.
    merge(&ctx, |st| unsafe { &raw mut (*st).merges_back });
    0
}

/// `block_bio_frontmerge`: the bio became a request's first bio. Its entry stays: a request
/// first seen after this (still in a plug) takes this bio's Q, a little later than its
/// earlier bio's (docs/EXPORTER.md).
#[btf_tracepoint(function = "block_bio_frontmerge")]
pub fn exp_bio_frontmerge(ctx: BtfTracePointContext) -> i32 {
    // SAFETY (closure): as above.
    merge(&ctx, |st| unsafe { &raw mut (*st).merges_front });
    0
}

/// `block_rq_merge`: request `rq` was merged into another and is freed without completing.
#[btf_tracepoint(function = "block_rq_merge")]
pub fn exp_rq_merge(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let held = Held::acquire();
    let Some(dev) = rq_dev(rq, held.as_ref()) else {
        return 0;
    };
    count(stat::MERGE);
    let Some(dst) = dev_state(dev) else {
        return 0;
    };
    // SAFETY: pointers into EXP_DEV_SLOTS' and EXP_RQ's values.
    unsafe {
        xadd(&raw mut (*dst).merges_rq, 1);
        match rq_state(rq) {
            Some(st) => {
                if (*st).flags & RQ_INSERTED != 0 {
                    xadd(&raw mut (*dst).in_sched, u64::MAX);
                }
                forget_rq(rq);
            }
            None => count(stat::UNTRACKED),
        }
    }
    0
}

/// `block_rq_insert`: into the scheduler (or a hardware queue's list). With nothing in the
/// driver, an idle interval opens: requests wait and the device has none.
#[btf_tracepoint(function = "block_rq_insert")]
pub fn exp_rq_insert(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = rq_dev(rq, held) else {
        return 0;
    };
    count(stat::INSERT);
    let Some(dst) = dev_state(dev) else {
        return 0;
    };
    // SAFETY: pointers into EXP_RQ's and EXP_DEV_SLOTS' values.
    unsafe {
        match rq_state(rq) {
            // Inserted again after a requeue (or twice: counted once).
            Some(st) => {
                if (*st).flags & RQ_INSERTED != 0 {
                    return 0;
                }
                (*st).flags |= RQ_INSERTED;
            }
            None => {
                if new_rq_state(rq, 0, RQ_INSERTED, held).is_none() {
                    return 0;
                }
            }
        }
        xadd(&raw mut (*dst).in_sched, 1);
        if (*dst).in_driver == 0 && (*dst).idle_since == 0 {
            (*dst).idle_cgroup = (*dst).last_cgroup;
            (*dst).idle_since = now();
        }
    }
    0
}

/// `block_rq_issue`: to the driver. Closes the device's open idle interval, counted as waste
/// if it lasted [`IDLE_MIN_NS`] or more.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn exp_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let held = Held::acquire();
    let held = held.as_ref();
    let Some(dev) = rq_dev(rq, held) else {
        return 0;
    };
    count(stat::ISSUE);
    let Some(dst) = dev_state(dev) else {
        return 0;
    };
    let t = now();
    // SAFETY: pointers into EXP_RQ's and EXP_DEV_SLOTS' values.
    unsafe {
        match rq_state(rq) {
            Some(st) => {
                (*st).d_ns = t;
                if (*st).flags & RQ_INSERTED != 0 {
                    xadd(&raw mut (*dst).in_sched, u64::MAX);
                }
                let was_issued = (*st).flags & RQ_ISSUED != 0;
                (*st).flags = RQ_ISSUED;
                if !was_issued {
                    xadd(&raw mut (*dst).in_driver, 1);
                }
            }
            // Issued directly, never inserted: the common path of a fast device.
            None => {
                if new_rq_state(rq, t, RQ_ISSUED, held).is_none() {
                    return 0;
                }
                xadd(&raw mut (*dst).in_driver, 1);
            }
        }
        let since = (*dst).idle_since;
        if since != 0 {
            (*dst).idle_since = 0;
            let idle = t.wrapping_sub(since);
            // A start after `t` (another CPU's, racing) is no interval.
            if (IDLE_MIN_NS..1 << 62).contains(&idle) {
                let key = DevCgroup {
                    dev,
                    _pad: 0,
                    cgroup: (*dst).idle_cgroup,
                };
                match value_of(&EXP_IDLE, &key, &ZERO_IDLE) {
                    Some(w) => {
                        xadd(&raw mut (*w).ns, idle);
                        xadd(&raw mut (*w).intervals, 1);
                    }
                    None => count(stat::MAP_FULL),
                }
            }
        }
    }
    0
}

/// Where the driver just emptied (or was already empty): open an idle interval if requests
/// wait, else make sure none is open. Every completion and requeue writes it, so a start left
/// by a race between CPUs (a few nanoseconds wide) lives only until the device's next
/// completion or issue.
///
/// SAFETY: `dst` points into EXP_DEV_SLOTS' value.
#[inline(always)]
unsafe fn driver_left(dst: *mut DevState, cgroup: u64) {
    // SAFETY: per the function's contract.
    unsafe {
        if (*dst).in_driver != 0 {
            (*dst).idle_since = 0;
        } else if (*dst).in_sched as i64 > 0 {
            (*dst).idle_cgroup = cgroup;
            (*dst).idle_since = now();
            // Issued meanwhile on another CPU: not idle after all.
            if (*dst).in_driver != 0 {
                (*dst).idle_since = 0;
            }
        } else {
            (*dst).idle_since = 0;
        }
    }
}

/// `block_rq_complete`: (part of) a request done. The last part folds the request into the
/// histograms and counters; every last part, of a request seen before or not, is counted by
/// the kernel's accounting group (`DevState::completed`).
#[btf_tracepoint(function = "block_rq_complete")]
pub fn exp_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let nr_bytes = ctx.arg::<u64>(2) & 0xffff_ffff;
    let held = Held::acquire();
    let Some(dev) = rq_dev(rq, held.as_ref()) else {
        return 0;
    };
    count(stat::COMPLETE);
    // The request's remaining size before this completion: the last part leaves none.
    let remaining: u32 = load(rq, config!(off.rq_data_len));
    let last = nr_bytes >= u64::from(remaining);
    let op = load::<u32>(rq, config!(off.rq_cmd_flags)) & OP_MASK;
    let dst = dev_state(dev);
    if last
        && let Some(dst) = dst
        && let Some(group) = completed_group(op, remaining)
        && group < COMPLETED_GROUPS
    {
        // SAFETY: a pointer into EXP_DEV_SLOTS' value; `group` is in bounds.
        unsafe { xadd((&raw mut (*dst).completed).cast::<u64>().add(group), 1) };
    }
    let Some(st) = rq_state(rq) else {
        count(stat::UNTRACKED);
        return 0;
    };
    let t = now();
    // SAFETY: pointers into map values.
    unsafe {
        let s = *st;
        let cg_key = DevOpCgroup {
            dev,
            op,
            cgroup: s.cgroup,
        };
        let cg = match cg_io(&cg_key) {
            Some(cg) => Some(cg),
            None => {
                count(stat::CG_FULL);
                cg_io(&DevOpCgroup {
                    cgroup: 0,
                    ..cg_key
                })
            }
        };
        if let Some(cg) = cg {
            xadd(&raw mut (*cg).bytes, nr_bytes);
            if last {
                xadd(&raw mut (*cg).requests, 1);
                if s.q_ns != 0 {
                    observe(&raw mut (*cg).latency, t.wrapping_sub(s.q_ns));
                }
                if s.d_ns != 0 {
                    if s.q_ns != 0 {
                        observe(&raw mut (*cg).queue, s.d_ns.wrapping_sub(s.q_ns));
                    }
                    observe(&raw mut (*cg).device, t.wrapping_sub(s.d_ns));
                }
            }
        } else {
            count(stat::MAP_FULL);
        }
        if !last {
            return 0;
        }
        forget_rq(rq);
        if let Some(dst) = dst {
            if s.flags & RQ_INSERTED != 0 {
                xadd(&raw mut (*dst).in_sched, u64::MAX);
            }
            if s.flags & RQ_ISSUED != 0 {
                xadd(&raw mut (*dst).in_driver, u64::MAX);
            }
            (*dst).last_cgroup = s.cgroup;
            driver_left(dst, s.cgroup);
        }
    }
    0
}

/// `block_rq_requeue`: the driver handed the request back; it is inserted again later.
#[btf_tracepoint(function = "block_rq_requeue")]
pub fn exp_rq_requeue(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let held = Held::acquire();
    let Some(dev) = rq_dev(rq, held.as_ref()) else {
        return 0;
    };
    count(stat::REQUEUE);
    let Some(dst) = dev_state(dev) else {
        return 0;
    };
    // SAFETY: pointers into map values.
    unsafe {
        xadd(&raw mut (*dst).requeues, 1);
        let Some(st) = rq_state(rq) else {
            count(stat::UNTRACKED);
            return 0;
        };
        if (*st).flags & RQ_ISSUED != 0 {
            (*st).flags &= !RQ_ISSUED;
            xadd(&raw mut (*dst).in_driver, u64::MAX);
        }
        driver_left(dst, (*st).cgroup);
    }
    0
}
