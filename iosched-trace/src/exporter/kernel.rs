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
    maps::{HashMap, MapData, PerCpuArray},
    programs::Program,
};
use iosched_core::record::DeviceInfo;
use iosched_trace_common::{
    Config, MAP_DEVICES,
    exporter::{self, CgroupIo, DevCgroup, DevOpCgroup, DevState, IdleWaste, stat},
};

use super::{
    Collect, ExporterConfig, families,
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
    devcache: HashMap<MapData, u64, u64>,
    cg: HashMap<MapData, DevOpCgroup, CgroupIo>,
    dev: HashMap<MapData, u32, DevState>,
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
    let devcache = take(&mut ebpf, exporter::MAP_DEVCACHE)?;
    let cg = take(&mut ebpf, exporter::MAP_CG)?;
    let dev = take(&mut ebpf, exporter::MAP_DEV)?;
    let idle = take(&mut ebpf, exporter::MAP_IDLE)?;
    let stats = take(&mut ebpf, exporter::MAP_STATS)?;
    for (program, tracepoint) in exporter::PROGRAMS {
        capture::attach_tracepoint(&mut ebpf, program, tracepoint, &btf, false)?;
    }
    Ok(Inner {
        ebpf,
        filter,
        devcache,
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
        // The programs cache queue -> (device, traced): a new disk may have been seen (as
        // untraced) before it was added, and a new disk may reuse a gone one's queue.
        let keys: Vec<u64> = self.devcache.keys().filter_map(Result::ok).collect();
        for key in keys {
            let _ = self.devcache.remove(&key);
        }
        // The completion baselines, from here on (every completion of the device reaches
        // the programs now, unless the kernel skips them): the kernel's counters first, then
        // the programs' counts (`untraced` says why that order).
        for dev in &gone {
            self.untraced.remove(dev);
        }
        for dev in &new {
            if let Ok(counters) = read_disk_counters(&now[dev].name) {
                let seen = self
                    .dev
                    .get(dev, 0)
                    .map(|st| seen_counts(&st.completed))
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
        let cg: Vec<DevOpCgroup> = self.cg.keys().filter_map(Result::ok).collect();
        for k in cg.iter().filter(|k| k.dev == dev) {
            let _ = self.cg.remove(k);
        }
        let idle: Vec<DevCgroup> = self.idle.keys().filter_map(Result::ok).collect();
        for k in idle.iter().filter(|k| k.dev == dev) {
            let _ = self.idle.remove(k);
        }
        let _ = self.dev.remove(&dev);
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
        let dev_state = entries(exporter::MAP_DEV, &self.dev)?;
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
            io: entries(exporter::MAP_CG, &self.cg)?,
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
            .filter_map(|(name, _)| {
                let program: &Program = self.ebpf.program(name)?;
                let info = program.info().ok()?;
                Some(ProgramCost {
                    name,
                    run_ns: info.run_time().as_nanos() as u64,
                    runs: info.run_count(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use iosched_trace_common::exporter::{RQ_SLOTS, rq_slot};

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
}
