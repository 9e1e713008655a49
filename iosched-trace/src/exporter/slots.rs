//! The exporter's direct-mapped tables (`EXP_DEV_SLOTS`, `EXP_CG_SLOTS`) from userspace: an
//! array map the programs claim slots in, mapped read-only into this process, so that a
//! scrape reads thousands of slots in place instead of making a system call for each.
//!
//! Owns: the mapping and its lifetime, clearing a slot (through the map, not the mapping).
//! Must not: interpret a slot (`kernel` knows which are in use).

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
};

use aya::{
    Pod,
    maps::{Array, Map, MapData},
};

use crate::capture::CaptureError;

/// One slot table: the map and its read-only mapping.
pub struct SlotTable<V: Pod> {
    name: &'static str,
    /// `Map::Array`.
    map: Map,
    base: NonNull<V>,
    slots: u32,
    len: usize,
}

// SAFETY: the mapping is plain memory shared with the kernel, read with volatile loads only;
// nothing in it is tied to a thread.
unsafe impl<V: Pod> Send for SlotTable<V> {}

impl<V: Pod> SlotTable<V> {
    /// Takes the array map `name` (created `BPF_F_MMAPABLE` by the programs) and maps it.
    pub fn new(name: &'static str, map: Option<Map>) -> Result<Self, CaptureError> {
        let map = map.ok_or_else(|| CaptureError::Map(name, "missing from the object".into()))?;
        let Map::Array(data) = &map else {
            return Err(CaptureError::Map(name, "not an array map".into()));
        };
        let info = data
            .info()
            .map_err(|e| CaptureError::Map(name, e.to_string()))?;
        let (slots, value_size) = (info.max_entries(), info.value_size() as usize);
        if value_size != size_of::<V>() || value_size == 0 || !value_size.is_multiple_of(8) {
            return Err(CaptureError::Map(
                name,
                format!(
                    "its values are {value_size} bytes, this build's {}",
                    size_of::<V>()
                ),
            ));
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(1);
        let len = (slots as usize * value_size).div_ceil(page) * page;
        // SAFETY: a new shared read-only mapping of the map's fd, which the kernel allows for
        // an array created mappable; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(CaptureError::Map(
                name,
                format!("mapping it: {}", std::io::Error::last_os_error()),
            ));
        }
        Ok(SlotTable {
            name,
            map,
            base: NonNull::new(ptr.cast()).expect("mmap returned a mapping"),
            slots,
            len,
        })
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Slot `i` as it is now. The programs may be changing it meanwhile: each field is read
    /// once, and a slot read mid-update holds some of an update's counts and not others,
    /// which the next scrape completes.
    pub fn get(&self, i: u32) -> V {
        assert!(i < self.slots, "slot {i} of {}", self.slots);
        // SAFETY: `i` is within the mapping, which holds `slots` values of `V` (checked in
        // `new`), aligned (page-aligned base, sizes multiples of 8); `V` is plain data.
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(i as usize)) }
    }

    /// The first word of slot `i` as it is now: where both tables keep whether (and for
    /// whom) a slot is in use (`DevSlot::key`, `CgSlot::state`), read before copying a slot.
    pub fn head(&self, i: u32) -> u64 {
        assert!(i < self.slots, "slot {i} of {}", self.slots);
        // SAFETY: as in `get`; every `V` here is at least a u64 long and 8-aligned (checked
        // in `new`: a non-zero multiple of 8 bytes).
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(i as usize).cast::<u64>()) }
    }

    /// Frees slot `i` (every field zero), through the map: the mapping is read-only.
    pub fn clear(&mut self, i: u32) -> Result<(), CaptureError> {
        let mut array: Array<&mut MapData, V> = Array::try_from(&mut self.map)
            .map_err(|e| CaptureError::Map(self.name, e.to_string()))?;
        // SAFETY: `V` is plain data, for which all zero bytes are a value.
        let zero: V = unsafe { std::mem::zeroed() };
        array
            .set(i, zero, 0)
            .map_err(|e| CaptureError::Map(self.name, e.to_string()))
    }
}

impl<V: Pod> Drop for SlotTable<V> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, with its length; not used after this.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
