//! `iosched-trace calibrate`'s measurement: what each I/O scheduler costs this host per
//! request, measured where that cost is the bottleneck, on a scratch RAM-backed loop device
//! (a file in /dev/shm), and where the profile it writes lives ([`DEFAULT_PROFILE_PATH`],
//! which `record` copies into a recording's header).
//!
//! For each scheduler the device offers, a fixed load generated in-process (threads doing
//! O_DIRECT 4 KiB random reads, no fio) runs twice: contended (two threads per online CPU)
//! and uncontended (one thread); in rounds, each round measuring every scheduler in turn
//! (starting with another one each round). Each run counts the reads completed and the
//! machine's busy CPU time (`/proc/stat`) less what other user-space processes used
//! meanwhile (a busy machine's other work is not the I/O's). A scheduler's cost is that busy
//! time per request minus `none`'s in the same round, the median over the rounds
//! ([`profile`]): on a shared machine the other tenants' load drifts within seconds, and a
//! difference of two runs a second apart cancels most of it, where each scheduler's best run
//! of the whole calibration (how it was done before) compared runs made under different
//! loads (mq-deadline's cost came out 2.0 and 5.0 µs in two calibrations 5 minutes apart).
//!
//! Owns: the scratch device and its cleanup (a guard: detached, its scheduler put back and
//! its file removed on every exit, SIGINT and SIGTERM included; the device is attached with
//! autoclear and its file unlinked at once, so even a kill -9 leaves nothing attached), the
//! load, the profile's arithmetic. Must not: touch a device it did not create, print (the
//! command and `views::calibrate` do).

use std::{
    collections::BTreeMap,
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::{
        fd::{AsRawFd, OwnedFd},
        unix::fs::{FileExt, OpenOptionsExt},
    },
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use iosched_core::record::{CpuSample, HostProfile, SchedCost, active_scheduler};

use crate::system;

/// Where `calibrate` writes the host's profile and `record` looks for it.
pub const DEFAULT_PROFILE_PATH: &str = "/var/lib/iosched-trace/host-profile.json";

/// Reads a host profile written by `calibrate`.
pub fn read_profile(path: &Path) -> anyhow::Result<HostProfile> {
    let text =
        fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    HostProfile::from_text(&text)
        .map_err(|reason| anyhow::anyhow!("{} is not a host profile: {reason}", path.display()))
}

/// The profile `record` copies into the header: `explicit` (`--host-profile`; an unreadable
/// one is an error), else the default location if a file is there (a malformed one: a
/// one-line warning on stderr, and none), else none.
pub fn profile_for_record(explicit: Option<&Path>) -> anyhow::Result<Option<HostProfile>> {
    profile_for_record_at(explicit, Path::new(DEFAULT_PROFILE_PATH))
}

/// [`profile_for_record`] with another default location (tests).
fn profile_for_record_at(
    explicit: Option<&Path>,
    path: &Path,
) -> anyhow::Result<Option<HostProfile>> {
    if let Some(path) = explicit {
        return read_profile(path).map(Some).context("--host-profile");
    }
    if !path.exists() {
        return Ok(None);
    }
    match read_profile(path) {
        Ok(p) => Ok(Some(p)),
        Err(e) => {
            eprintln!(
                "warning: {e:#}; recording without a host profile (run `iosched-trace \
                 calibrate` to write a new one)"
            );
            Ok(None)
        }
    }
}

/// How long each run lasts.
#[derive(Clone, Copy, Debug)]
pub struct Durations {
    /// Load before the measurement starts (the scheduler settles, threads start).
    pub warmup: Duration,
    /// Two submitters per online CPU.
    pub contended: Duration,
    /// One submitter.
    pub uncontended: Duration,
    /// How many times each scheduler is measured (the cost is the median of the rounds').
    pub rounds: u32,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            warmup: Duration::from_millis(100),
            contended: Duration::from_millis(700),
            uncontended: Duration::from_millis(400),
            rounds: 3,
        }
    }
}

/// One measured run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Run {
    pub threads: u32,
    /// Reads completed during the measurement.
    pub requests: u64,
    pub elapsed_ns: u64,
    /// The machine's busy and idle CPU time meanwhile (all CPUs).
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// Of `busy_ns`, what other user-space processes used
    /// ([`system::other_processes_cpu_ns`]): not the I/O's.
    pub others_ns: u64,
}

impl Run {
    pub fn iops(&self) -> f64 {
        if self.elapsed_ns == 0 {
            0.0
        } else {
            self.requests as f64 * 1e9 / self.elapsed_ns as f64
        }
    }

    /// The machine's busy time but other processes': the load's, the kernel threads' and
    /// interrupts' (the I/O path's), ns.
    pub fn io_busy_ns(&self) -> u64 {
        self.busy_ns.saturating_sub(self.others_ns)
    }

    /// The I/O path's busy time per request, ns.
    pub fn busy_ns_per_request(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.io_busy_ns() as f64 / self.requests as f64
        }
    }

    /// The machine's busy share, 0..1 (other processes' work included).
    pub fn busy_share(&self) -> f64 {
        self.share(self.busy_ns)
    }

    /// The I/O path's share of all CPUs' time, 0..1.
    pub fn io_busy_share(&self) -> f64 {
        self.share(self.io_busy_ns())
    }

    /// Other processes' share of all CPUs' time, 0..1.
    pub fn others_share(&self) -> f64 {
        self.share(self.others_ns.min(self.busy_ns))
    }

    fn share(&self, ns: u64) -> f64 {
        let total = self.busy_ns + self.idle_ns;
        if total == 0 {
            0.0
        } else {
            ns as f64 / total as f64
        }
    }
}

/// A scheduler's runs, every round's.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedRuns {
    pub scheduler: String,
    /// (contended, uncontended) of each round, in round order; at least one.
    pub rounds: Vec<(Run, Run)>,
}

impl SchedRuns {
    /// The least disturbed contended run: the most IOPS (other work on the machine only
    /// ever slows a run down).
    pub fn contended(&self) -> Run {
        Self::best(self.rounds.iter().map(|r| r.0))
    }

    /// The least disturbed uncontended run.
    pub fn uncontended(&self) -> Run {
        Self::best(self.rounds.iter().map(|r| r.1))
    }

    fn best(runs: impl Iterator<Item = Run>) -> Run {
        runs.max_by(|a, b| a.iops().total_cmp(&b.iops()))
            .unwrap_or_default()
    }
}

/// What a calibration measured.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// `none` first.
    pub runs: Vec<SchedRuns>,
    /// Schedulers not measured, and why.
    pub skipped: Vec<(String, String)>,
    /// The scratch device (`loop3`) and whether it did direct I/O on its file.
    pub device: String,
    pub direct_io: bool,
    pub online_cpus: u32,
    pub elapsed: Duration,
}

#[cfg(test)]
impl Calibration {
    /// A calibration of these runs on a 2-CPU host, for tests of what is made of it.
    pub(crate) fn of_runs(runs: Vec<SchedRuns>) -> Calibration {
        Calibration {
            runs,
            skipped: vec![],
            device: "loop9".into(),
            direct_io: true,
            online_cpus: 2,
            elapsed: Duration::ZERO,
        }
    }
}

/// The schedulers calibrate measures, in this order (`none` is the baseline), and the module
/// that provides each where it is not built in.
const SCHEDULERS: [(&str, &str); 4] = [
    ("none", ""),
    ("mq-deadline", "mq-deadline"),
    ("bfq", "bfq"),
    ("kyber", "kyber-iosched"),
];

/// Size of the scratch device: large enough that random 4 KiB reads rarely repeat, small
/// enough to fill in a few tens of milliseconds.
const DEVICE_BYTES: u64 = 256 << 20;
const BLOCK: usize = 4096;

/// Runs the calibration: needs root and loop device support.
pub fn calibrate(durations: Durations) -> anyhow::Result<Calibration> {
    let started = Instant::now();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "calibrate needs root: it creates a scratch loop device and sets its I/O scheduler \
             (run it with sudo)"
        );
    }
    let _signals = StopOnSignal::install()?;
    let file = ScratchFile::create(DEVICE_BYTES)?;
    let dev = ScratchLoop::attach(&file.path)?;
    // The device holds the file open; unlinked now, nothing is left behind whatever happens.
    drop(file);
    let online_cpus = system::online_cpus();
    let mut skipped = Vec::new();
    let mut measured = Vec::new();
    for (name, module) in SCHEDULERS {
        let mut offered = dev.offered()?;
        if !offered.iter().any(|s| s == name) && !module.is_empty() {
            load_module(module);
            offered = dev.offered()?;
        }
        if offered.iter().any(|s| s == name) {
            measured.push(name);
            continue;
        }
        if name == "none" {
            bail!(
                "{} does not offer the `none` scheduler (it offers {}): nothing to compare \
                 with",
                dev.name,
                offered.join(", ")
            );
        }
        let why = if module.is_empty() {
            "not offered by this kernel".to_string()
        } else {
            format!("not offered by this kernel (`modprobe {module}` did not add it)")
        };
        skipped.push((name.to_string(), why));
    }
    // Each scheduler is measured in every round, in turn, each round starting one scheduler
    // further on (a run right after a switch or first in a round is not always the same
    // scheduler's).
    let mut runs: Vec<SchedRuns> = Vec::new();
    for round in 0..durations.rounds as usize {
        for i in 0..measured.len() {
            let name = measured[(round + i) % measured.len()];
            dev.set_scheduler(name)?;
            let threads = 2 * online_cpus;
            let contended = run_load(&dev.path, threads, durations.warmup, durations.contended)
                .with_context(|| format!("{name}, {threads} threads"))?;
            let uncontended = run_load(&dev.path, 1, durations.warmup / 2, durations.uncontended)
                .with_context(|| format!("{name}, 1 thread"))?;
            match runs.iter_mut().find(|r| r.scheduler == name) {
                Some(r) => r.rounds.push((contended, uncontended)),
                None => runs.push(SchedRuns {
                    scheduler: name.to_string(),
                    rounds: vec![(contended, uncontended)],
                }),
            }
        }
    }
    // `none` first, as the table lists them.
    runs.sort_by_key(|r| measured.iter().position(|m| *m == r.scheduler));
    let direct_io = dev.direct_io();
    let device = dev.name.clone();
    drop(dev);
    Ok(Calibration {
        runs,
        skipped,
        device,
        direct_io,
        online_cpus,
        elapsed: started.elapsed(),
    })
}

/// The profile of a calibration: per scheduler, the I/O path's busy time per request over
/// `none`'s in the same round, the median over the rounds ([`added_over_none`]), with every
/// CPU submitting (`cpu_ns_per_request`) and with one submitter (`serial_ns_per_request`),
/// clamped at 0; its best contended run's IOPS and the machine's busy share then
/// (`busy_share`, other processes' work included, as `SchedCost` defines it).
pub fn profile(
    cal: &Calibration,
    host: &str,
    kernel_release: &str,
    when: &str,
) -> anyhow::Result<HostProfile> {
    let Some(none) = cal.runs.iter().find(|r| r.scheduler == "none") else {
        bail!("no measurement of `none` to compare with");
    };
    let schedulers: BTreeMap<String, SchedCost> = cal
        .runs
        .iter()
        .map(|r| {
            let added = added_over_none(r, none);
            let cost = SchedCost {
                cpu_ns_per_request: added.contended.max(0.0),
                serial_ns_per_request: added.uncontended.max(0.0),
                iops: r.contended().iops(),
                busy_share: r.contended().busy_share(),
            };
            (r.scheduler.clone(), cost)
        })
        .collect();
    Ok(HostProfile {
        profile_version: 1,
        host: host.to_string(),
        kernel_release: kernel_release.to_string(),
        online_cpus: cal.online_cpus,
        source: format!("calibrate on {host}, {when}"),
        schedulers,
    })
}

/// A scheduler's busy time per request over `none`'s: each round's difference, and their
/// median (not clamped).
#[derive(Clone, Debug, PartialEq)]
pub struct Added {
    pub contended: f64,
    pub uncontended: f64,
    /// Each round's (contended, uncontended) difference.
    pub rounds: Vec<(f64, f64)>,
}

pub fn added_over_none(r: &SchedRuns, none: &SchedRuns) -> Added {
    let rounds: Vec<(f64, f64)> = r
        .rounds
        .iter()
        .zip(&none.rounds)
        .map(|(&(c, u), &(nc, nu))| {
            (
                c.busy_ns_per_request() - nc.busy_ns_per_request(),
                u.busy_ns_per_request() - nu.busy_ns_per_request(),
            )
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let m = v.len() / 2;
        if v.is_empty() {
            0.0
        } else if v.len().is_multiple_of(2) {
            (v[m - 1] + v[m]) / 2.0
        } else {
            v[m]
        }
    };
    Added {
        contended: median(rounds.iter().map(|r| r.0).collect()),
        uncontended: median(rounds.iter().map(|r| r.1).collect()),
        rounds,
    }
}

/// Writes `profile` to `path` (creating its directory), through a temporary file renamed
/// into place, so a reader never sees half a profile.
pub fn write_profile(path: &Path, profile: &HostProfile) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut text = serde_json::to_string_pretty(profile)?;
    text.push('\n');
    iosched_core::output_file::create(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

fn load_module(module: &str) {
    // Quietly: a missing module shows as the scheduler not being offered.
    let _ = std::process::Command::new("modprobe")
        .args(["-q", module])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// SIGINT or SIGTERM received during the calibration: the load stops and the guards undo.
static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only atomics: async-signal-safe.
    STOP_SIGNAL.store(sig, Ordering::Relaxed);
    STOP.store(true, Ordering::Relaxed);
}

fn check_stop() -> anyhow::Result<()> {
    if STOP.load(Ordering::Relaxed) {
        let name = match STOP_SIGNAL.load(Ordering::Relaxed) {
            libc::SIGTERM => "SIGTERM",
            _ => "SIGINT",
        };
        bail!("interrupted by {name}");
    }
    Ok(())
}

/// SIGINT and SIGTERM set [`STOP`] while it lives; the previous handlers come back on drop.
struct StopOnSignal {
    old: Vec<(libc::c_int, libc::sigaction)>,
}

impl StopOnSignal {
    fn install() -> anyhow::Result<Self> {
        STOP.store(false, Ordering::Relaxed);
        let mut this = StopOnSignal { old: Vec::new() };
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: an all-zero sigaction is valid (no flags, empty mask); the handler only
            // stores to atomics; `old` receives the previous action.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &action, &mut old) != 0 {
                    return Err(io::Error::last_os_error()).context("installing a signal handler");
                }
                this.old.push((sig, old));
            }
        }
        Ok(this)
    }
}

impl Drop for StopOnSignal {
    fn drop(&mut self) {
        for (sig, old) in &self.old {
            // SAFETY: restoring the action sigaction gave us.
            unsafe { libc::sigaction(*sig, old, std::ptr::null_mut()) };
        }
    }
}

/// The scratch file in /dev/shm, removed on drop.
struct ScratchFile {
    path: PathBuf,
}

impl ScratchFile {
    fn create(bytes: u64) -> anyhow::Result<Self> {
        let path = PathBuf::from(format!(
            "/dev/shm/iosched-trace-calibrate-{}.img",
            std::process::id()
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let this = ScratchFile { path };
        // Real pages rather than holes, so reads copy memory as a RAM disk's do.
        let chunk = vec![0x5au8; 1 << 20];
        for _ in 0..bytes / chunk.len() as u64 {
            file.write_all(&chunk)
                .with_context(|| format!("cannot fill {}", this.path.display()))?;
        }
        Ok(this)
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

// <linux/loop.h>
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_FLAGS_DIRECT_IO: u32 = 16;

/// `struct loop_info64`.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

/// A loop device we attached (LOOP_CONFIGURE, read-only, autoclear, direct I/O where the file
/// allows it). On drop its scheduler is put back and it is detached; with autoclear the
/// kernel detaches it also if this process dies.
struct ScratchLoop {
    /// Held open while measuring; closed on drop, which lets autoclear detach the device.
    fd: Option<OwnedFd>,
    name: String,
    path: PathBuf,
    /// The scheduler it had when attached, if we changed it.
    restore: std::cell::RefCell<Option<String>>,
}

impl ScratchLoop {
    fn attach(backing: &Path) -> anyhow::Result<Self> {
        let ctl = match File::options()
            .read(true)
            .write(true)
            .open("/dev/loop-control")
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                load_module("loop");
                File::options()
                    .read(true)
                    .write(true)
                    .open("/dev/loop-control")
                    .context(
                        "no loop device support: /dev/loop-control is missing and `modprobe \
                         loop` did not add it",
                    )?
            }
            Err(e) => return Err(e).context("cannot open /dev/loop-control"),
        };
        let file = File::open(backing).with_context(|| format!("opening {}", backing.display()))?;
        let mut last_err = None;
        for _ in 0..16 {
            // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
            let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
            if n < 0 {
                return Err(io::Error::last_os_error()).context("LOOP_CTL_GET_FREE");
            }
            let path = PathBuf::from(format!("/dev/loop{n}"));
            let dev = File::options()
                .read(true)
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            let mut result = Ok(());
            for flags in [LO_FLAGS_DIRECT_IO, 0] {
                result = configure(&dev, &file, LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR | flags);
                // A file system without direct I/O may refuse the flag: attach buffered.
                if !matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EINVAL)) {
                    break;
                }
            }
            match result {
                Ok(()) => {
                    return Ok(ScratchLoop {
                        fd: Some(OwnedFd::from(dev)),
                        name: format!("loop{n}"),
                        path,
                        restore: Default::default(),
                    });
                }
                // Someone took that device between GET_FREE and CONFIGURE: try another.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => last_err = Some(e),
                Err(e) => return Err(e).context(format!("LOOP_CONFIGURE {}", path.display())),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("no free loop device")))
            .context("attaching a scratch loop device")
    }

    fn sysfs(&self, attr: &str) -> PathBuf {
        Path::new("/sys/block").join(&self.name).join(attr)
    }

    /// The schedulers `queue/scheduler` lists.
    fn offered(&self) -> anyhow::Result<Vec<String>> {
        let path = self.sysfs("queue/scheduler");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        Ok(text
            .split_whitespace()
            .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_string())
            .collect())
    }

    fn set_scheduler(&self, name: &str) -> anyhow::Result<()> {
        let path = self.sysfs("queue/scheduler");
        if self.restore.borrow().is_none() {
            let text = fs::read_to_string(&path)?;
            *self.restore.borrow_mut() = active_scheduler(&text).map(str::to_string);
        }
        fs::write(&path, name).with_context(|| format!("setting {} to {name}", path.display()))
    }

    fn direct_io(&self) -> bool {
        fs::read_to_string(self.sysfs("loop/dio")).is_ok_and(|d| d.trim() == "1")
    }
}

fn configure(dev: &File, backing: &File, flags: u32) -> io::Result<()> {
    // SAFETY: all-zero is a valid loop_config (no offset, no limit, no name, no key).
    let mut config: LoopConfig = unsafe { std::mem::zeroed() };
    config.fd = backing.as_raw_fd() as u32;
    config.info.lo_flags = flags;
    // SAFETY: LOOP_CONFIGURE reads a loop_config, which `config` is, laid out as the kernel's.
    let rc = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &config) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Drop for ScratchLoop {
    fn drop(&mut self) {
        if let Some(old) = self.restore.borrow_mut().take() {
            let _ = fs::write(self.sysfs("queue/scheduler"), old);
        }
        if let Some(fd) = self.fd.take() {
            // SAFETY: LOOP_CLR_FD on the device we configured; takes no argument.
            unsafe { libc::ioctl(fd.as_raw_fd(), LOOP_CLR_FD as _, 0) };
            // Closing our descriptor lets autoclear finish.
            drop(fd);
        }
        // Wait until the kernel has detached it (`loop/backing_file` disappears), so that
        // the caller can tell it is gone.
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.sysfs("loop/backing_file").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A read counter on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Counter(AtomicU64);

/// A 4 KiB-aligned 4 KiB buffer for O_DIRECT.
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

/// `threads` readers of random 4 KiB blocks of `dev`, O_DIRECT; measured for `measure` after
/// `warmup`.
fn run_load(dev: &Path, threads: u32, warmup: Duration, measure: Duration) -> anyhow::Result<Run> {
    check_stop()?;
    let blocks = DEVICE_BYTES / BLOCK as u64;
    let done = AtomicBool::new(false);
    let counters: Vec<Counter> = (0..threads).map(|_| Counter::default()).collect();
    let sum = |c: &[Counter]| c.iter().map(|c| c.0.load(Ordering::Relaxed)).sum::<u64>();
    std::thread::scope(|scope| -> anyhow::Result<Run> {
        let workers: Vec<_> = counters
            .iter()
            .enumerate()
            .map(|(i, counter)| {
                let done = &done;
                scope.spawn(move || -> io::Result<()> {
                    let file = OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(dev)?;
                    let mut buf = Box::new(Block([0; BLOCK]));
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (i as u64 + 1).wrapping_mul(0xA076_1D64);
                    while !done.load(Ordering::Relaxed) && !STOP.load(Ordering::Relaxed) {
                        // xorshift64
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let offset = (x % blocks) * BLOCK as u64;
                        match file.read_at(&mut buf.0, offset) {
                            Ok(_) => {
                                counter.0.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        let result = (|| {
            sleep_unless_stopped(warmup)?;
            let o0 = system::other_processes_cpu_ns();
            let (t0, c0, s0) = (Instant::now(), sum(&counters), system::cpu_sample());
            sleep_unless_stopped(measure)?;
            let (c1, s1) = (sum(&counters), system::cpu_sample());
            let elapsed = t0.elapsed();
            let o1 = system::other_processes_cpu_ns();
            let mut run = measured(threads, c1 - c0, elapsed, &s0, &s1);
            run.others_ns = o1.saturating_sub(o0);
            Ok(run)
        })();
        done.store(true, Ordering::Relaxed);
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    return Err(e).with_context(|| format!("reading {}", dev.display()));
                }
                Err(_) => bail!("a load thread panicked"),
            }
        }
        result
    })
}

fn measured(threads: u32, requests: u64, elapsed: Duration, a: &CpuSample, b: &CpuSample) -> Run {
    Run {
        threads,
        requests,
        elapsed_ns: elapsed.as_nanos() as u64,
        busy_ns: b.busy_ns.saturating_sub(a.busy_ns),
        idle_ns: b.idle_ns.saturating_sub(a.idle_ns),
        others_ns: 0,
    }
}

fn sleep_unless_stopped(d: Duration) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    loop {
        check_stop()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(20)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threads: u32, requests: u64, busy_ms: u64, idle_ms: u64) -> Run {
        Run {
            threads,
            requests,
            elapsed_ns: 1_000_000_000,
            busy_ns: busy_ms * 1_000_000,
            idle_ns: idle_ms * 1_000_000,
            others_ns: 0,
        }
    }

    #[test]
    fn costs_are_busy_time_per_request_over_none_clamped_at_zero() {
        let cal = Calibration::of_runs(vec![
            SchedRuns {
                scheduler: "none".into(),
                // 2000 ms busy / 300k = 6.67 us; 1 thread 900 ms / 150k = 6 us.
                rounds: vec![(run(4, 300_000, 2000, 0), run(1, 150_000, 900, 1100))],
            },
            SchedRuns {
                scheduler: "bfq".into(),
                // 2000 / 150k = 13.33 us: 6.67 over none; 1 thread 8 us: 2 over.
                rounds: vec![(run(4, 150_000, 2000, 0), run(1, 100_000, 800, 1200))],
            },
            SchedRuns {
                scheduler: "mq-deadline".into(),
                // Cheaper than none by noise: clamped.
                rounds: vec![(run(4, 310_000, 2000, 0), run(1, 150_000, 880, 1120))],
            },
        ]);
        let p = profile(&cal, "box", "6.18", "2026-12-01T23:59:00Z").unwrap();
        assert_eq!(p.source, "calibrate on box, 2026-12-01T23:59:00Z");
        assert_eq!(p.online_cpus, 2);
        let bfq = p.cost("bfq").unwrap();
        assert!(
            (bfq.cpu_ns_per_request - 20_000.0 / 3.0).abs() < 1e-6,
            "{bfq:?}"
        );
        assert!((bfq.serial_ns_per_request - 2_000.0).abs() < 1e-6);
        assert_eq!(bfq.iops, 150_000.0);
        assert_eq!(bfq.busy_share, 1.0);
        let dl = p.cost("mq-deadline").unwrap();
        assert_eq!(
            (dl.cpu_ns_per_request, dl.serial_ns_per_request),
            (0.0, 0.0)
        );
        let none = p.cost("none").unwrap();
        assert_eq!(none.cpu_ns_per_request, 0.0);
        assert!((none.busy_share - 1.0).abs() < 1e-12);
        assert!(
            (p.cost("none").unwrap().iops - 300_000.0).abs() < 1e-6 && p.cost("kyber").is_none()
        );
        // Other processes' CPU time is not the I/O's: left out of the cost, not the share.
        let busy = Run {
            others_ns: 500_000_000,
            ..run(4, 150_000, 2000, 0)
        };
        assert!((busy.busy_ns_per_request() - 10_000.0).abs() < 1e-9);
        assert_eq!((busy.busy_share(), busy.io_busy_share()), (1.0, 0.75));
        assert_eq!(busy.others_share(), 0.25);
        // Without none there is nothing to compare with.
        let mut no_none = cal.clone();
        no_none.runs.remove(0);
        assert!(profile(&no_none, "box", "6.18", "now").is_err());
    }

    /// Three rounds in which the machine's other load moved both schedulers' runs: each
    /// round's difference is 2 µs but one disturbed, and the cost is their median, where the
    /// best run of each (the most IOPS) would pair runs of different rounds.
    #[test]
    fn a_cost_is_the_median_of_each_rounds_difference_to_none() {
        let sched = |name: &str, rounds: Vec<(Run, Run)>| SchedRuns {
            scheduler: name.into(),
            rounds,
        };
        // Busy ms per 100k requests: us per request = ms / 100.
        let r = |busy_ms: u64| run(4, 100_000, busy_ms, 0);
        let u = |busy_ms: u64| run(1, 100_000, busy_ms, 2000 - busy_ms);
        // none: 6, 10 (a disturbed round: busier per request), 6 us; 4 and 4 and 4 with one.
        let none = sched(
            "none",
            vec![(r(600), u(400)), (r(1000), u(400)), (r(600), u(400))],
        );
        // mq-deadline: 8, 12, 7 us: +2, +2, +1 over the same round's none; with one
        // thread +1, +5 (disturbed), +1.
        let dl = sched(
            "mq-deadline",
            vec![(r(800), u(500)), (r(1200), u(900)), (r(700), u(500))],
        );
        let added = added_over_none(&dl, &none);
        assert_eq!(added.rounds.len(), 3);
        assert!((added.contended - 2_000.0).abs() < 1e-6, "{added:?}");
        assert!((added.uncontended - 1_000.0).abs() < 1e-6, "{added:?}");
        let cal = Calibration::of_runs(vec![none.clone(), dl]);
        let p = profile(&cal, "box", "6.18", "now").unwrap();
        let cost = p.cost("mq-deadline").unwrap();
        assert!((cost.cpu_ns_per_request - 2_000.0).abs() < 1e-6);
        assert!((cost.serial_ns_per_request - 1_000.0).abs() < 1e-6);
        // An even number of rounds: the mean of the middle two.
        let two = |a: u64, b: u64| sched("x", vec![(r(a), u(400)), (r(b), u(400))]);
        let none2 = sched("none", vec![(r(600), u(400)), (r(600), u(400))]);
        assert!((added_over_none(&two(700, 900), &none2).contended - 2_000.0).abs() < 1e-6);
    }

    #[test]
    fn profiles_round_trip_through_their_file_and_bad_ones_are_refused() {
        let dir = std::env::temp_dir().join(format!("iosched-calibrate-{}", std::process::id()));
        let path = dir.join("sub/host-profile.json");
        let p = HostProfile::defaults();
        write_profile(&path, &p).unwrap();
        assert_eq!(read_profile(&path).unwrap(), p);
        assert_eq!(profile_for_record(Some(&path)).unwrap(), Some(p));
        fs::write(&path, "{not json").unwrap();
        let e = format!("{:#}", profile_for_record(Some(&path)).unwrap_err());
        assert!(
            e.contains("--host-profile") && e.contains("not a host profile"),
            "{e}"
        );
        // At the default location: a malformed file is left out (with a warning), a missing
        // one is no profile.
        assert_eq!(profile_for_record_at(None, &path).unwrap(), None);
        assert_eq!(
            profile_for_record_at(None, &dir.join("none.json")).unwrap(),
            None
        );
        write_profile(&path, &HostProfile::defaults()).unwrap();
        assert!(profile_for_record_at(None, &path).unwrap().is_some());
        fs::write(&path, "{}").unwrap();
        assert!(read_profile(&path).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
