//! The exporter's kernel side from userspace: the `exp_*` programs loaded and attached, the
//! traced devices kept in step with /sys/block (a watcher thread, once a second), and the
//! maps read into a [`Snapshot`] at each scrape.
//!
//! Owns: the `Ebpf` object of the exporter (dropping the collector detaches every program),
//! the device filter, the removal of a gone device's entries (its series go away).
//! Must not: name or lay out metrics (`families`).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context;
use aya::{
    Btf, Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray},
};
use iosched_core::record::DeviceInfo;
use iosched_trace_common::{
    Config, MAP_DEVICES,
    exporter::{
        self, CG_FREE, CG_READY, CgSlot, CgroupIo, DEV_CLAIMED, DevCgroup, DevOpCgroup, DevSlot,
        DevState, Hist, IdleWaste, SLOT_PROBES, stat,
    },
};

use super::{
    Collect, ExporterConfig, families,
    slots::SlotTable,
    snapshot::{ProgramCost, Snapshot},
    untraced::{UntracedCompletions, seen_counts},
};
use crate::{
    capture::{self, CaptureError},
    devices::{Disk, Sysfs},
    probe::{FlagDecoder, KernelLayout},
    system::{CgroupPaths, read_disk_counters},
    views::metrics::Family,
};

/// How often the watcher brings the traced devices in line with /sys/block: a device that
/// appears is traced from then on (its first second of I/O may be missed).
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The smallest ring the object's `EVENTS` map can have: the exporter sends nothing on it.
const UNUSED_RING_BYTES: u32 = 4096;

/// The maps and the device filter; shared by the scrape and the device watcher.
struct Inner {
    // Field order matters on drop: the programs (in `ebpf`) detach before the maps close.
    ebpf: Ebpf,
    filter: HashMap<MapData, u32, u8>,
    devgen: Array<MapData, u64>,
    cg: SlotTable<CgSlot>,
    dev: SlotTable<DevSlot>,
    idle: HashMap<MapData, DevCgroup, IdleWaste>,
    stats: PerCpuArray<MapData, u64>,
    traced: BTreeMap<u32, Disk>,
    /// Per traced device whose counters could be read when it was first traced: the
    /// completions it made that the programs never saw.
    untraced: BTreeMap<u32, UntracedCompletions>,
    /// `-d` names; empty: every request-based disk.
    wanted: Vec<String>,
    sysfs: Sysfs,
}

/// The product's [`Collect`]: the kernel's aggregates as metric families.
pub struct KernelCollector {
    inner: Arc<Mutex<Inner>>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    decoder: FlagDecoder,
    cgroups: CgroupPaths,
    /// The v1 blkio mount whose ids the cgroups are, on hybrid hosts.
    blkio_v1: Option<std::path::PathBuf>,
    max_cgroups: usize,
}

fn cgroup_paths(blkio_v1: &Option<std::path::PathBuf>) -> CgroupPaths {
    match blkio_v1 {
        Some(root) => CgroupPaths::in_hierarchy(root.clone()),
        None => CgroupPaths::default(),
    }
}

/// Map `name` taken out of the object, as the map type `T` it is used as.
fn take<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, CaptureError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| CaptureError::Map(name, "missing from the object".into()))?;
    T::try_from(map).map_err(|e| CaptureError::Map(name, e.to_string()))
}

impl KernelCollector {
    /// Checks the host, loads the exporter's programs, starts tracing the devices and the
    /// watcher. Needs root (or CAP_BPF and CAP_PERFMON) and the kernel's BTF.
    pub fn start(config: &ExporterConfig) -> anyhow::Result<Self> {
        crate::preflight::check_privileges()?;
        crate::preflight::check_btf()?;
        let kernel = crate::capture::session::Kernel::prepare()?;
        let sysfs = Sysfs::default();
        // Named devices must exist at the start (a typo is told at once); later they may
        // come and go.
        for name in &config.devices {
            let disk = sysfs.resolve(name)?;
            anyhow::ensure!(
                disk.request_based,
                "{} is a bio-based device (device-mapper, md, zram...): it has no requests, so \
                 none of the exporter's figures; name the disks below it",
                disk.name
            );
        }
        // The exporter labels cgroups by path, so it can follow the block layer's own
        // charging (the bio's blkcg) on hybrid hosts too: their ids and paths are the v1
        // blkio hierarchy's. (`record` keeps one id space, cgroup2's, in its events instead.)
        let blkio_v1 = if kernel.blkio_v1 {
            crate::system::blkio_v1_root()
        } else {
            None
        };
        let bio_charged = kernel.layout.offsets.bio_blkg != iosched_trace_common::NO_OFFSET;
        let inner = load(&kernel.layout, bio_charged, &kernel.btf, config, sysfs)?;
        let inner = Arc::new(Mutex::new(inner));
        inner
            .lock()
            .expect("not poisoned at start")
            .sync_devices()
            .context("tracing the devices")?;
        let stop = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (inner, stop) = (Arc::clone(&inner), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("device-watch".into())
                .spawn(move || watch(&inner, &stop))
                .context("starting the device watcher")?
        };
        Ok(KernelCollector {
            inner,
            stop,
            watcher: Some(watcher),
            decoder: kernel.layout.flags.clone(),
            cgroups: cgroup_paths(&blkio_v1),
            blkio_v1,
            max_cgroups: config.max_cgroups,
        })
    }

    /// Reads every map now.
    pub fn snapshot(&self) -> anyhow::Result<Snapshot> {
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| anyhow::anyhow!("a thread panicked"))?;
        // A device gone since the watcher last looked must not be reported with stale data.
        inner.sync_devices()?;
        inner.read()
    }
}

impl Collect for KernelCollector {
    fn collect(&mut self) -> anyhow::Result<Vec<Family>> {
        let snapshot = self.snapshot()?;
        let decoder = &self.decoder;
        let cgroups = &mut self.cgroups;
        Ok(families::families(
            &snapshot,
            &|code| decoder.decode(code).0,
            &mut |id| cgroups.path(id),
            self.max_cgroups,
        ))
    }

    fn reload(&mut self) -> anyhow::Result<()> {
        // New cgroups are found by the next scrape's walk anyway; a fresh table also forgets
        // the removed ones' names.
        self.cgroups = cgroup_paths(&self.blkio_v1);
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| anyhow::anyhow!("a thread panicked"))?;
        inner.sync_devices()
    }
}

impl Drop for KernelCollector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        // `inner` (and with it every program) goes when the last Arc does: now.
    }
}

/// `into += from`, field by field.
fn add_io(into: &mut CgroupIo, from: &CgroupIo) {
    fn add_hist(into: &mut Hist, from: &Hist) {
        for (a, b) in into.buckets.iter_mut().zip(&from.buckets) {
            *a += b;
        }
        into.sum_ns += from.sum_ns;
    }
    into.requests += from.requests;
    into.bytes += from.bytes;
    add_hist(&mut into.latency, &from.latency);
    add_hist(&mut into.queue, &from.queue);
    add_hist(&mut into.device, &from.device);
}

fn watch(inner: &Mutex<Inner>, stop: &AtomicBool) {
    let mut last_error = String::new();
    while !stop.load(Ordering::Relaxed) {
        // Short sleeps: SIGTERM's drop waits for this thread.
        for _ in 0..10 {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(WATCH_EVERY / 10);
        }
        let Ok(mut guard) = inner.lock() else {
            return;
        };
        match guard.sync_devices() {
            Ok(()) => last_error.clear(),
            Err(e) => {
                let text = format!("{e:#}");
                if text != last_error {
                    eprintln!("iosched-trace exporter: watching devices: {text}");
                    last_error = text;
                }
            }
        }
    }
}

/// `bio_charged`: the bio's blkcg chain is readable (whichever hierarchy it is in).
fn load(
    layout: &KernelLayout,
    bio_charged: bool,
    kernel_btf: &crate::btf::Btf,
    config: &ExporterConfig,
    sysfs: Sysfs,
) -> anyhow::Result<Inner> {
    for (_, tracepoint) in exporter::PROGRAMS {
        crate::probe::check_prototype(kernel_btf, tracepoint)
            .with_context(|| format!("tracepoint {tracepoint}"))?;
    }
    let btf = Btf::from_sys_fs().map_err(CaptureError::Btf)?;
    let globals = Config {
        self_tgid: std::process::id(),
        // Always filtered: the watcher keeps the request-based disks in the filter, so bios
        // of bio-based devices (which never become requests) cost one lookup and nothing else.
        filter_devices: 1,
        wakeup_bytes: 0,
        bio_cgroup: u32::from(bio_charged),
        wakeups: 0,
        plug_events: 0,
        off: layout.offsets,
    };
    let mut ebpf = capture::load_object(&globals, &btf, UNUSED_RING_BYTES, false)?;
    let filter = take(&mut ebpf, MAP_DEVICES)?;
    let devgen = take(&mut ebpf, exporter::MAP_DEVGEN)?;
    let cg = SlotTable::new(
        exporter::MAP_CG_SLOTS,
        ebpf.take_map(exporter::MAP_CG_SLOTS),
    )?;
    let dev = SlotTable::new(
        exporter::MAP_DEV_SLOTS,
        ebpf.take_map(exporter::MAP_DEV_SLOTS),
    )?;
    let idle = take(&mut ebpf, exporter::MAP_IDLE)?;
    let stats = take(&mut ebpf, exporter::MAP_STATS)?;
    for (program, tracepoint) in exporter::PROGRAMS {
        capture::attach_tracepoint(&mut ebpf, program, tracepoint, &btf, false)?;
    }
    Ok(Inner {
        ebpf,
        filter,
        devgen,
        cg,
        dev,
        idle,
        stats,
        traced: BTreeMap::new(),
        untraced: BTreeMap::new(),
        wanted: config.devices.clone(),
        sysfs,
    })
}

impl Inner {
    /// The disks to trace now: the named ones that exist, or every request-based disk; only
    /// those with a medium (a detached loop device stays in /sys/block with size 0: it is
    /// gone for the exporter, and new when attached again).
    fn wanted_disks(&self) -> anyhow::Result<Vec<Disk>> {
        let mut disks = if self.wanted.is_empty() {
            self.sysfs.request_based_disks()?
        } else {
            self.wanted
                .iter()
                .filter_map(|name| self.sysfs.resolve(name).ok())
                .filter(|d| d.request_based)
                .collect()
        };
        disks.retain(|d| self.sysfs.has_medium(&d.name));
        Ok(disks)
    }

    /// Brings the filter in line with the disks now: new ones traced, gone ones untraced and
    /// their entries deleted (their series disappear). A disk whose name now has another
    /// `dev_t` (detached and attached again) counts as gone and new.
    fn sync_devices(&mut self) -> anyhow::Result<()> {
        let now: BTreeMap<u32, Disk> = self
            .wanted_disks()?
            .into_iter()
            .map(|d| (d.dev.to_kernel(), d))
            .collect();
        let gone: Vec<u32> = self
            .traced
            .keys()
            .filter(|dev| !now.contains_key(dev))
            .copied()
            .collect();
        let new: Vec<u32> = now
            .keys()
            .filter(|dev| !self.traced.contains_key(dev))
            .copied()
            .collect();
        if gone.is_empty() && new.is_empty() {
            return Ok(());
        }
        for dev in &new {
            self.filter
                .insert(dev, 1, 0)
                .map_err(|e| CaptureError::Map(MAP_DEVICES, e.to_string()))?;
        }
        for dev in &gone {
            let _ = self.filter.remove(dev);
            self.forget(*dev);
        }
        // The programs cache queue -> (device, traced), per CPU and shared: a new disk may
        // have been seen (as untraced) before it was added, and a new disk may reuse a gone
        // one's queue. A new generation, after the filter changed, voids every entry.
        let generation = self.devgen.get(&0, 0).unwrap_or(0);
        self.devgen
            .set(0, generation.wrapping_add(1), 0)
            .map_err(|e| CaptureError::Map(exporter::MAP_DEVGEN, e.to_string()))?;
        // The completion baselines, from here on (every completion of the device reaches
        // the programs now, unless the kernel skips them): the kernel's counters first, then
        // the programs' counts (`untraced` says why that order).
        for dev in &gone {
            self.untraced.remove(dev);
        }
        for dev in &new {
            if let Ok(counters) = read_disk_counters(&now[dev].name) {
                let seen = self
                    .dev_slot_of(*dev)
                    .map(|i| seen_counts(&self.dev.get(i).st.completed))
                    .unwrap_or_default();
                self.untraced
                    .insert(*dev, UntracedCompletions::new(counters, seen));
            }
        }
        self.traced = now;
        Ok(())
    }

    /// Deletes every entry of `dev`.
    fn forget(&mut self, dev: u32) {
        for i in 0..self.cg.slots() {
            if self.cg.head(i) != CG_FREE && self.cg.get(i).key.dev == dev {
                let _ = self.cg.clear(i);
            }
        }
        let idle: Vec<DevCgroup> = self.idle.keys().filter_map(Result::ok).collect();
        for k in idle.iter().filter(|k| k.dev == dev) {
            let _ = self.idle.remove(k);
        }
        if let Some(i) = self.dev_slot_of(dev) {
            let _ = self.dev.clear(i);
        }
    }

    /// The slot holding device `dev`, if the programs claimed one.
    fn dev_slot_of(&self, dev: u32) -> Option<u32> {
        let key = u64::from(dev) | DEV_CLAIMED;
        (0..SLOT_PROBES)
            .map(|p| (exporter::dev_slot(dev) + p) % self.dev.slots())
            .find(|&i| self.dev.head(i) == key)
    }

    /// Every claimed device slot's state, by device.
    fn dev_states(&self) -> Vec<(u32, DevState)> {
        let mut out: Vec<(u32, DevState)> = (0..self.dev.slots())
            .filter(|&i| self.dev.head(i) & DEV_CLAIMED != 0)
            .map(|i| {
                let slot = self.dev.get(i);
                (slot.key as u32, slot.st)
            })
            .collect();
        out.sort_by_key(|(dev, _)| *dev);
        out
    }

    /// Every ready slot's counters by key, twins (two slots claimed for one key by two CPUs
    /// at once) added together.
    fn cg_entries(&self) -> Vec<(DevOpCgroup, CgroupIo)> {
        let mut by_key: BTreeMap<DevOpCgroup, CgroupIo> = BTreeMap::new();
        for i in 0..self.cg.slots() {
            if self.cg.head(i) != CG_READY {
                continue;
            }
            let slot = self.cg.get(i);
            match by_key.entry(slot.key) {
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(slot.io);
                }
                std::collections::btree_map::Entry::Occupied(mut e) => {
                    add_io(e.get_mut(), &slot.io)
                }
            }
        }
        by_key.into_iter().collect()
    }

    fn read(&mut self) -> anyhow::Result<Snapshot> {
        // The kernel's completion counters before the maps (`untraced`).
        let counters: Vec<_> = self
            .traced
            .iter()
            .filter_map(|(dev, disk)| Some((*dev, read_disk_counters(&disk.name).ok()?)))
            .collect();
        fn entries<K: aya::Pod + Ord + Copy, V: aya::Pod>(
            name: &'static str,
            map: &HashMap<MapData, K, V>,
        ) -> Result<Vec<(K, V)>, CaptureError> {
            let mut out = Vec::new();
            for entry in map.iter() {
                match entry {
                    Ok(kv) => out.push(kv),
                    // Deleted by a program between the key walk and the lookup.
                    Err(aya::maps::MapError::KeyNotFound) => {}
                    Err(e) => return Err(CaptureError::Map(name, e.to_string())),
                }
            }
            out.sort_by_key(|a| a.0);
            Ok(out)
        }
        let stats = (0..stat::COUNT)
            .map(|i| {
                self.stats
                    .get(&i, 0)
                    .map(|per_cpu| per_cpu.iter().sum::<u64>())
                    .map_err(|e| CaptureError::Map(exporter::MAP_STATS, e.to_string()))
            })
            .collect::<Result<Vec<u64>, _>>()?;
        let devices = self
            .traced
            .iter()
            .map(|(dev, disk)| {
                (
                    *dev,
                    (disk.clone(), DeviceInfo::from_sysfs(&disk.name).ok()),
                )
            })
            .collect();
        let dev_state = self.dev_states();
        for (dev, now) in counters {
            let seen = dev_state
                .iter()
                .find(|(d, _)| *d == dev)
                .map(|(_, st)| seen_counts(&st.completed))
                .unwrap_or_default();
            if let Some(u) = self.untraced.get_mut(&dev) {
                u.update(now, seen);
            }
        }
        Ok(Snapshot {
            devices,
            untraced: self
                .untraced
                .iter()
                .map(|(dev, u)| (*dev, u.shown()))
                .collect(),
            dev_state,
            io: self.cg_entries(),
            idle: entries(exporter::MAP_IDLE, &self.idle)?,
            stats,
            programs: self.program_costs(),
        })
    }

    /// The programs' cost counters; empty unless `kernel.bpf_stats_enabled` is 1 (the
    /// kernel counts nothing otherwise, and zeros would read as "free").
    fn program_costs(&self) -> Vec<ProgramCost> {
        let enabled = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
            .is_ok_and(|v| v.trim() == "1");
        if !enabled {
            return Vec::new();
        }
        exporter::PROGRAMS
            .iter()
            .filter_map(|&(name, _)| crate::capture::program_cost(&self.ebpf, name))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use iosched_trace_common::exporter::{
        CG_SLOTS, DEV_SLOTS, DevOpCgroup, RQ_SLOTS, SLOT_PROBES, cg_slot, dev_slot, rq_slot,
    };

    /// The kernel side keeps a request in its slot of `EXP_RQ_SLOTS` unless another request
    /// holds it; one that shares goes to a hash map, the slower path. A tag set's requests
    /// lie at a fixed stride in its pages (the request and the driver's data after it), so
    /// the slots must spread such runs: a queue's 1024 requests, at each stride the kernel's
    /// request sizes give, share slots about as often as random ones would (1024 balls in
    /// 16384 bins: about 31 land in a taken bin).
    #[test]
    fn requests_at_a_fixed_stride_rarely_share_a_slot() {
        for stride in [256u64, 320, 384, 448, 512, 640, 1024] {
            for base in [0xffff_8880_1234_0000u64, 0xffff_9f00_0000_0040] {
                let mut taken = vec![false; RQ_SLOTS as usize];
                let mut shared = 0;
                for i in 0..1024 {
                    // The kernel side hashes the pointer's low 32 bits.
                    let slot = rq_slot(u64::from((base + i * stride) as u32)) as usize;
                    if std::mem::replace(&mut taken[slot], true) {
                        shared += 1;
                    }
                }
                assert!(
                    shared < 64,
                    "stride {stride}: {shared} of 1024 share a slot"
                );
            }
        }
    }

    /// Places keys as the programs do: the first free of a key's `SLOT_PROBES` slots, or
    /// none (the table counts as full for it). Returns how many found none.
    fn unplaced(slots: u32, firsts: impl Iterator<Item = u32>) -> usize {
        let mut taken = vec![false; slots as usize];
        let mut none = 0;
        for first in firsts {
            match (0..SLOT_PROBES)
                .map(|p| ((first + p) % slots) as usize)
                .find(|&i| !taken[i])
            {
                Some(i) => taken[i] = true,
                None => none += 1,
            }
        }
        none
    }

    /// A large host's disks (SCSI majors 8 and 65-71, 16 minors a disk; NVMe namespaces on a
    /// dynamic major; loop devices) all get a slot in `EXP_DEV_SLOTS` with room to spare.
    #[test]
    fn a_large_hosts_disks_all_get_a_device_slot() {
        let kernel_dev = |major: u32, minor: u32| (major << 20) | minor;
        let mut devs: Vec<u32> = Vec::new();
        for major in [8u32, 65, 66, 67, 68, 69, 70, 71] {
            devs.extend((0..16).map(|d| kernel_dev(major, d * 16)));
        }
        devs.extend((0..128).map(|n| kernel_dev(259, n)));
        devs.extend((0..128).map(|n| kernel_dev(7, n)));
        assert_eq!(devs.len(), 384);
        assert_eq!(unplaced(DEV_SLOTS, devs.iter().map(|&d| dev_slot(d))), 0);
    }

    /// Device, operation and cgroup triples (a few devices, reads and writes, many cgroups
    /// with consecutive ids) fill `EXP_CG_SLOTS` to half with few left out (counted under
    /// cgroup 0 by the programs).
    #[test]
    fn cgroup_triples_fill_half_the_table_before_one_is_left_out() {
        let keys = (0..CG_SLOTS / 2).map(|k| DevOpCgroup {
            dev: (8 << 20) | ((k % 4) * 16),
            op: (k / 4) % 2,
            cgroup: 4000 + u64::from(k / 8),
        });
        let none = unplaced(CG_SLOTS, keys.map(|k| cg_slot(&k)));
        // Linear probing at half load: a few keys in a thousand find their eight slots
        // taken (7 here; with four probes, 64).
        assert!(none <= 2048 / 200, "{none} of {} left out", CG_SLOTS / 2);
    }
}
