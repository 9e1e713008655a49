//! A global allocator that asks for transparent huge pages behind large allocations
//! (`madvise(MADV_HUGEPAGE)`, what glibc's `glibc.malloc.hugetlb=1` tunable does): a replay
//! fills a few hundred MB of fresh per-request tables (the simulator's requests, per-bio
//! times, the scheduler models' per-request positions), and with 4 KiB pages about a sixth
//! of the replay benchmark's time went to page faults, tens of thousands per model run.
//! With the usual THP setting (`madvise`, this machine's and most distributions' default)
//! only advised memory gets huge pages; under `always` the advice changes nothing, under
//! `never` it is ignored.
//!
//! Owns: the advice. Must not: change what is allocated, or where.

use std::alloc::{GlobalAlloc, Layout, System};

/// The huge page size on x86-64 and arm64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;
/// Allocations from this size on are advised: large enough that the huge pages inside
/// them are most of them, and that the extra syscall is rare.
const ADVISE_FROM: usize = HUGE_PAGE;

/// [`System`], with large allocations advised to be backed by huge pages.
pub struct HugePageAlloc;

fn advise(ptr: *mut u8, size: usize) {
    if ptr.is_null() || size < ADVISE_FROM {
        return;
    }
    // Only whole huge pages inside the allocation: the advice must not reach memory that
    // is not ours.
    let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
    let end = (ptr as usize + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation just made, which this thread
        // owns; MADV_HUGEPAGE changes how it is backed, never its contents. A failure
        // (THP not built in) leaves it as it was, which is fine.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

// SAFETY: every call is forwarded to `System` with the same arguments; `advise` only
// advises memory of the allocation returned.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let ptr = unsafe { System.alloc(layout) };
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        advise(ptr, layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        advise(new, new_size);
        new
    }
}
