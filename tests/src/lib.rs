//! Helpers for the root-only tests on the real kernel: scratch loop devices and the recorder
//! binary run as a child (the test bed's guards, set up as these tests want them), the
//! kernel's own ftrace `blk` tracer as an oracle. Every helper undoes what it did on drop, so
//! a failing test leaves nothing behind.
//!
//! These tests touch only devices they create. They run serially (`--test-threads=1`, as
//! `cargo xtask test` does): ftrace is one global resource.

pub mod hdd;

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, ensure};
use iosched_core::{
    event::{Event, EventKind},
    record::RecordingReader,
};
pub use iosched_testbed::{
    loop_device::{LoopDevice, kernel_has_scheduler},
    recorder::Recorder,
    tempdir::TempDir,
};

/// Set by `cargo xtask test` when running as root or in CI: then a test that cannot run the
/// real kernel fails instead of skipping.
pub const REQUIRE_ENV: &str = "IOSCHED_TRACE_REQUIRE_ROOT_TESTS";

/// `iosched-trace convert INPUT --to FORMAT -o OUTPUT EXTRA...`, which must succeed; its
/// stderr (what it says about the conversion).
pub fn convert_to(format: &str, input: &Path, output: &Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(binary())
        .arg("convert")
        .arg(input)
        .args(["--to", format, "-o"])
        .arg(output)
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "convert --to {format} failed: {stderr}"
    );
    stderr
}

/// Whether python3 can import `module` (an oracle from PyPI's `package`). Missing in CI (or
/// where the real-kernel tests must run) is a failure, never a skip.
pub fn python_module_available(test: &str, module: &str, package: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if ci || std::env::var_os(REQUIRE_ENV).is_some() {
        panic!(
            "{test}: needs python3 with the PyPI `{package}` package (`cargo xtask setup` installs it)"
        );
    }
    eprintln!("SKIPPED {test}: python3 cannot import {module} (pip install {package})");
    false
}

/// Whether `tool` (an oracle such as btt, installed by `cargo xtask setup`) runs here.
/// Missing in CI (or where the real-kernel tests must run) is a failure, never a skip.
pub fn tool_available(test: &str, tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()));
    if found {
        return true;
    }
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if ci || std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test}: needs `{tool}` on PATH (`cargo xtask setup` installs it)");
    }
    eprintln!("SKIPPED {test}: no `{tool}` on PATH (cargo xtask setup)");
    false
}

/// Where a test that cannot run on this kernel for want of a feature it was built without
/// says so (`cargo xtask test` sets it, and prints every line after the real-kernel tests),
/// so that such a skip is never silent.
pub const SKIP_LOG_ENV: &str = "IOSCHED_TRACE_SKIP_LOG";

/// Whether a test of the I/O scheduler `name` can run here. Kernels are built without some
/// (the project's own machines' 6.18 has no bfq: `CONFIG_IOSCHED_BFQ` is not set, and it
/// loads no modules); a test of that scheduler cannot run on them, so it is skipped, said on
/// stderr and written to [`SKIP_LOG_ENV`]'s file. The kernel matrix (`cargo xtask kernels`:
/// Debian's kernels, where bfq is a module) runs the scheduler tests in its guests.
pub fn scheduler_available(test: &str, name: &str) -> bool {
    if kernel_has_scheduler(name) {
        return true;
    }
    let why = format!(
        "SKIPPED {test}: this kernel has no {name} I/O scheduler (not built in, no module)"
    );
    eprintln!("{why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        let logged = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{why}\n").as_bytes()));
        if let Err(e) = logged {
            panic!("{test}: writing {}: {e}", Path::new(&path).display());
        }
    }
    false
}

/// The first of `wanted` this kernel has (for tests to which the scheduler is incidental: a
/// kernel without bfq runs them under the next one), else `none`, which every blk-mq queue
/// has.
pub fn first_scheduler(wanted: &[&'static str]) -> &'static str {
    wanted
        .iter()
        .copied()
        .find(|s| kernel_has_scheduler(s))
        .unwrap_or("none")
}

/// Whether real-kernel tests can run here. Without root they skip with a message, unless
/// [`REQUIRE_ENV`] is set, in which case they fail loudly.
pub fn real_kernel_available(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    if std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test}: needs root to load eBPF programs, and {REQUIRE_ENV} says it must run");
    }
    eprintln!(
        "SKIPPED {test}: not root (real-kernel tests need root; `cargo xtask test` runs them)"
    );
    false
}

/// The recorder binary: `IOSCHED_TRACE_BIN`, else the workspace's release then debug build.
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IOSCHED_TRACE_BIN") {
        return PathBuf::from(path);
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    for profile in ["release", "debug"] {
        let path = target.join(profile).join("iosched-trace");
        if path.exists() {
            return path;
        }
    }
    panic!(
        "no iosched-trace binary: run `cargo build --release -p iosched-trace` or set IOSCHED_TRACE_BIN"
    );
}

pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("spawning {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A scratch directory for test `tag`, in memory (/dev/shm) when it can, removed on drop.
pub fn scratch_dir(tag: &str) -> std::io::Result<TempDir> {
    TempDir::in_memory(&format!("iosched-trace-test-{tag}"))
}

/// `queue/read_ahead_kb` of a loop device never used before (the kernel's default window).
pub const FRESH_LOOP_READ_AHEAD_KB: &str = "128";

/// A loop device on its own sparse backing file in a scratch directory, with direct I/O and
/// the readahead of a new loop device: detached (its queue settings restored) and then the
/// directory removed on drop. Derefs to the [`LoopDevice`].
pub struct ScratchLoop {
    // Dropped in this order: the device before the directory holding its file.
    device: LoopDevice,
    _dir: TempDir,
}

impl ScratchLoop {
    /// On a file in memory (/dev/shm): the RAM-backed kind.
    pub fn new(tag: &str, size_mib: u64, scheduler: &str) -> anyhow::Result<Self> {
        Self::in_dir(scratch_dir(tag)?, size_mib, scheduler)
    }

    /// On a file of the root filesystem (/var/tmp), the other kind of loop device people
    /// have: its I/O goes through that filesystem and its disk.
    pub fn on_root_fs(tag: &str, size_mib: u64, scheduler: &str) -> anyhow::Result<Self> {
        let dir = TempDir::new(Path::new("/var/tmp"), &format!("iosched-trace-test-{tag}"))?;
        Self::in_dir(dir, size_mib, scheduler)
    }

    fn in_dir(dir: TempDir, size_mib: u64, scheduler: &str) -> anyhow::Result<Self> {
        let backing = dir.path().join("backing.img");
        fs::File::create(&backing)?.set_len(size_mib << 20)?;
        let device = Self {
            device: LoopDevice::attach(&backing)?,
            _dir: dir,
        };
        device.set_queue("scheduler", scheduler)?;
        // A loop device keeps the readahead its last user left (one that last backed a file
        // of the root filesystem reads ahead 2560 KiB here, from the virtio disk's optimal
        // I/O size), and buffered reads plug once per readahead window: every test starts
        // from what a new loop device on a tmpfs file has, restored on drop.
        device.set_queue("read_ahead_kb", FRESH_LOOP_READ_AHEAD_KB)?;
        // Settle udev's probe of the new device before tests count events.
        let _ = Command::new("udevadm").args(["settle", "-t", "5"]).status();
        Ok(device)
    }
}

impl std::ops::Deref for ScratchLoop {
    type Target = LoopDevice;

    fn deref(&self) -> &LoopDevice {
        &self.device
    }
}

/// How long the recorder may take to load and attach its programs.
const RECORDER_READY: Duration = Duration::from_secs(30);

/// Starts `iosched-trace record -d DEVICE... -o OUTPUT EXTRA...` and waits for it to say its
/// programs are attached. Killed on drop if still running.
pub fn record(devices: &[&str], output: &Path, extra: &[&str]) -> anyhow::Result<Recorder> {
    let command = Recorder::command(&binary(), devices, output, extra);
    let mut recorder = Recorder::spawn(command, None)?;
    recorder.wait_ready(RECORDER_READY, &|| false)?;
    Ok(recorder)
}

/// Everything a recording holds, read back, in time order.
pub struct Recording {
    pub events: Vec<Event>,
    pub warnings: Vec<String>,
    pub lost: u64,
    /// Of `lost`, the events the kernel skipped for a program already running on the CPU
    /// (`record::Stats::kernel_skipped`).
    pub kernel_skipped: Option<u64>,
    pub sent: Option<u64>,
    /// Kernel pointers our programs could not read (`record::Stats::read_errors`): each may
    /// be an event that was never sent.
    pub read_errors: Option<u64>,
    pub footer_total: Option<u64>,
    /// The kernel's completion counters next to the traced completions, per device.
    pub completions: Vec<iosched_core::record::CompletionCheck>,
    /// The kernel's plug counters per device (plugs counted, not recorded as events).
    pub plug_counts: Vec<iosched_core::record::DevicePlugCounts>,
    /// The header says plugs were counted in the kernel rather than recorded as events.
    pub plugs_counted: bool,
}

pub fn read_recording(path: &Path) -> anyhow::Result<Recording> {
    let mut reader = RecordingReader::open(path)?;
    let mut events = Vec::new();
    while let Some(ev) = reader.next_event() {
        events.push(ev?);
    }
    events.sort_by_key(|e| e.ts_ns);
    Ok(Recording {
        events,
        warnings: reader.warnings().to_vec(),
        lost: reader.stats().map_or(0, |s| s.lost()),
        kernel_skipped: reader.stats().and_then(|s| s.kernel_skipped),
        sent: reader.stats().map(|s| s.sent),
        read_errors: reader.stats().map(|s| s.read_errors),
        footer_total: reader.footer().map(|f| f.events_total),
        completions: reader
            .stats()
            .map(|s| s.completions.clone())
            .unwrap_or_default(),
        plug_counts: reader
            .stats()
            .map(|s| s.plug_counts.clone())
            .unwrap_or_default(),
        plugs_counted: reader.header().plugs_counted(),
    })
}

/// A filesystem mounted on a scratch directory, unmounted on drop (also when a test fails).
pub struct Mount {
    pub point: PathBuf,
    _dir: TempDir,
}

impl Mount {
    /// A fresh ext4 on `disk`, mounted.
    pub fn ext4(disk: &ScratchLoop, tag: &str) -> anyhow::Result<Self> {
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(disk.dev()))?;
        let dir = scratch_dir(tag)?;
        let point = dir.path().join("mnt");
        fs::create_dir(&point)?;
        run(Command::new("mount").arg(disk.dev()).arg(&point))?;
        Ok(Self { point, _dir: dir })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.point).status();
    }
}

/// Runs `dd` with these arguments as a child and returns its pid once it has exited.
pub fn dd(args: &[&str]) -> anyhow::Result<u32> {
    let mut child = Command::new("dd")
        .args(args)
        .arg("status=none")
        .stdin(Stdio::null())
        .spawn()
        .context("spawning dd")?;
    let pid = child.id();
    let status = child.wait()?;
    ensure!(status.success(), "dd {args:?} failed: {status}");
    Ok(pid)
}

/// The action letters the ftrace `blk` tracer and our recording share, for oracle checks:
/// (action, sector, sectors) -> count.
pub type ActionMultiset = BTreeMap<(String, u64, u32), u64>;

/// Our events as the blk tracer would print them: M for both bio back merges and request
/// merges (blktrace logs `block_rq_merge` as a back merge), C with the bytes completed.
pub fn our_multiset(events: &[Event], dev: (u32, u32), actions: &[&str]) -> ActionMultiset {
    let mut set = ActionMultiset::new();
    for ev in events.iter().filter(|e| (e.dev.major, e.dev.minor) == dev) {
        let (action, sectors) = match ev.kind {
            EventKind::Queue => ("Q", ev.sectors()),
            EventKind::GetRq => ("G", ev.sectors()),
            EventKind::BackMerge | EventKind::RqMerge => ("M", ev.sectors()),
            EventKind::FrontMerge => ("F", ev.sectors()),
            EventKind::Insert => ("I", ev.sectors()),
            EventKind::Issue => ("D", ev.sectors()),
            EventKind::Complete => ("C", (ev.aux >> 9) as u32),
            _ => continue,
        };
        if actions.contains(&action) {
            // Zero-length events (flushes) print no sector in blk's format, except C.
            let sector = if sectors == 0 && action != "C" {
                0
            } else {
                ev.sector
            };
            *set.entry((action.to_string(), sector, sectors))
                .or_default() += 1;
        }
    }
    set
}

/// At most this many completions may be the kernel's loss in one comparison with the blk
/// tracer ([`compare_with_ftrace`]): the kernel's counters cannot tell its loss from ours,
/// and on these machines it loses 1-8 in 100,000 completions under load (docs/REPORT.md,
/// "Where untraced completions come from"), rarely one in a test's few hundred (CI saw one
/// once); a program of ours dropping completions would likely drop more.
pub const KERNEL_LOSS_AT_MOST: u64 = 2;

/// A recording's multiset ([`our_multiset`]) against the blk tracer's ([`FtraceBlk::collect`]):
/// `Ok(None)` when they are equal; `Ok(Some(note))` when the only difference is completions
/// the tracer holds more of, exactly `untraced` of them (the recording's completion check:
/// completions the kernel counted that reached no BPF program, which tracefs may still
/// record) and at most [`KERNEL_LOSS_AT_MOST`]; otherwise `Err`, a line per differing key.
pub fn compare_with_ftrace(
    ours: &ActionMultiset,
    theirs: &ActionMultiset,
    untraced: u64,
) -> Result<Option<String>, Vec<String>> {
    let keys: std::collections::BTreeSet<_> = ours.keys().chain(theirs.keys()).collect();
    let (mut ftrace_surplus_c, mut other) = (0, 0);
    let mut diff = Vec::new();
    for key in keys {
        let (a, b) = (ours.get(key), theirs.get(key));
        if a != b {
            let (a_n, b_n) = (a.copied().unwrap_or(0), b.copied().unwrap_or(0));
            if key.0 == "C" && b_n > a_n {
                ftrace_surplus_c += b_n - a_n;
            } else {
                other += 1;
            }
            diff.push(format!("{key:?}: ours {a:?} ftrace {b:?}"));
        }
    }
    if diff.is_empty() {
        return Ok(None);
    }
    if other == 0 && ftrace_surplus_c == untraced && untraced <= KERNEL_LOSS_AT_MOST {
        return Ok(Some(format!(
            "ftrace holds {ftrace_surplus_c} completion(s) the kernel never ran our programs \
             for, as the recording's completion check counts: {diff:?}"
        )));
    }
    Err(diff)
}

/// The kernel's ftrace `blk` tracer on one device: the same kernel code blktrace uses,
/// readable under lockdown. Restores the tracer, the device switch and the buffer size on
/// drop.
pub struct FtraceBlk {
    tracing: PathBuf,
    enable: PathBuf,
    old_tracer: String,
    old_buffer_kb: String,
    mounted_here: bool,
}

impl FtraceBlk {
    pub fn start(device: &str) -> anyhow::Result<Self> {
        let tracing = PathBuf::from("/sys/kernel/tracing");
        let mut mounted_here = false;
        if !tracing.join("current_tracer").exists() {
            run(Command::new("mount")
                .args(["-t", "tracefs", "tracefs"])
                .arg(&tracing))?;
            mounted_here = true;
        }
        let old_tracer = fs::read_to_string(tracing.join("current_tracer"))?
            .trim()
            .to_string();
        ensure!(
            old_tracer == "nop",
            "ftrace is in use (current_tracer = {old_tracer}); not touching it"
        );
        // Not the first word: before tracing is first used after boot it reads
        // `7 (expanded: 1408)`, and 7 would shrink the buffer for whoever traces next.
        let old_buffer_kb = iosched_trace::schedlog::current_value(&fs::read_to_string(
            tracing.join("buffer_size_kb"),
        )?);
        let enable = PathBuf::from(format!("/sys/block/{device}/trace/enable"));
        let guard = Self {
            tracing,
            enable,
            old_tracer,
            old_buffer_kb,
            mounted_here,
        };
        fs::write(guard.tracing.join("buffer_size_kb"), "16384")?;
        fs::write(&guard.enable, "1")?;
        fs::write(guard.tracing.join("current_tracer"), "blk")?;
        fs::write(guard.tracing.join("trace"), "")?;
        Ok(guard)
    }

    /// The trace so far (read before the tracer is switched back: that clears it), as a
    /// multiset, and the number of entries the ring overwrote (must be 0 for a fair oracle).
    pub fn collect(
        &self,
        dev: (u32, u32),
        actions: &[&str],
    ) -> anyhow::Result<(ActionMultiset, u64)> {
        let (events, overrun) = self.events(dev, actions)?;
        let mut set = ActionMultiset::new();
        for e in events {
            *set.entry((e.action, e.sector, e.sectors)).or_default() += 1;
        }
        Ok((set, overrun))
    }

    /// The trace so far as events in trace order (timestamps in µs as ftrace prints them,
    /// converted to ns), and the number of entries the ring overwrote.
    pub fn events(
        &self,
        dev: (u32, u32),
        actions: &[&str],
    ) -> anyhow::Result<(Vec<FtraceEvent>, u64)> {
        let text = fs::read_to_string(self.tracing.join("trace"))?;
        let mut set = Vec::new();
        let mut overrun = 0;
        let prefix = format!("{},{}", dev.0, dev.1);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# entries-in-buffer/entries-written:") {
                // "# entries-in-buffer/entries-written: 120/120   #P:2"
                let counts = rest.split_whitespace().next().unwrap_or("0/0");
                if let Some((a, b)) = counts.split_once('/') {
                    overrun = b
                        .parse::<u64>()
                        .unwrap_or(0)
                        .saturating_sub(a.parse().unwrap_or(0));
                }
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            // "  dd-123 [001] ..... 12.345678: 7,0    Q  WS 2048 + 8 [dd]"
            let Some((head, body)) = line.split_once(": ") else {
                continue;
            };
            let Some(ts_ns) = head
                .split_whitespace()
                .last()
                .and_then(|t| t.split_once('.'))
                .and_then(|(s, us)| {
                    Some(s.parse::<u64>().ok()? * 1_000_000_000 + us.parse::<u64>().ok()? * 1_000)
                })
            else {
                continue;
            };
            let fields: Vec<&str> = body.split_whitespace().collect();
            if fields.len() < 4 || fields[0] != prefix {
                continue;
            }
            let action = fields[1];
            if !actions.contains(&action) {
                continue;
            }
            // "S + N [..]", or for zero-length events "[comm]" (C: "S [err]").
            let (sector, sectors) = match (fields.get(3), fields.get(4), fields.get(5)) {
                (Some(s), Some(&"+"), Some(n)) => match (s.parse::<u64>(), n.parse::<u32>()) {
                    (Ok(s), Ok(n)) => (s, n),
                    _ => continue,
                },
                (Some(s), _, _) => (s.parse::<u64>().unwrap_or(0), 0),
                _ => continue,
            };
            set.push(FtraceEvent {
                ts_ns,
                action: action.to_string(),
                sector,
                sectors,
            });
        }
        Ok((set, overrun))
    }
}

/// One line of the ftrace `blk` tracer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FtraceEvent {
    /// The tracer prints microseconds: multiples of 1000.
    pub ts_ns: u64,
    pub action: String,
    pub sector: u64,
    pub sectors: u32,
}

/// Mean Q2C and D2C of an ftrace blk trace, pairing Q, D and C by sector as btt does (right
/// when no two I/Os cover the same sector at once). Returns (q2c mean, d2c mean, pairs).
pub fn ftrace_q2c_d2c(events: &[FtraceEvent]) -> (f64, f64, u64) {
    let mut q: HashMap<u64, u64> = HashMap::new();
    let mut d: HashMap<u64, u64> = HashMap::new();
    let (mut q2c, mut d2c, mut n_q, mut n_d) = (0u64, 0u64, 0u64, 0u64);
    for e in events {
        match e.action.as_str() {
            "Q" => {
                q.insert(e.sector, e.ts_ns);
            }
            "D" => {
                d.insert(e.sector, e.ts_ns);
            }
            "C" => {
                if let Some(t) = q.remove(&e.sector) {
                    q2c += e.ts_ns - t;
                    n_q += 1;
                }
                if let Some(t) = d.remove(&e.sector) {
                    d2c += e.ts_ns - t;
                    n_d += 1;
                }
            }
            _ => {}
        }
    }
    (
        q2c as f64 / n_q.max(1) as f64,
        d2c as f64 / n_d.max(1) as f64,
        n_q.min(n_d),
    )
}

/// Runs `iosched-trace report --json` on a recording and parses it.
pub fn report_json(recording: &Path, extra: &[&str]) -> anyhow::Result<serde_json::Value> {
    let out = run(Command::new(binary())
        .arg("report")
        .arg("--json")
        .arg(recording)
        .args(extra))?;
    Ok(serde_json::from_str(&out)?)
}

/// Runs fio with these arguments (JSON output to a file in `dir`) and returns its report.
pub fn fio(dir: &Path, args: &[&str]) -> anyhow::Result<serde_json::Value> {
    let out = dir.join("fio.json");
    run(Command::new("fio")
        .args(args)
        .arg("--output-format=json")
        .arg(format!("--output={}", out.display())))?;
    let text = fs::read_to_string(&out)?;
    // fio may print notes before the JSON document.
    let start = text.find('{').context("fio wrote no JSON")?;
    Ok(serde_json::from_str(&text[start..])?)
}

impl Drop for FtraceBlk {
    fn drop(&mut self) {
        let _ = fs::write(self.tracing.join("current_tracer"), &self.old_tracer);
        let _ = fs::write(&self.enable, "0");
        let _ = fs::write(self.tracing.join("buffer_size_kb"), &self.old_buffer_kb);
        if self.mounted_here {
            let _ = Command::new("umount").arg(&self.tracing).status();
        }
    }
}

/// A child process killed and reaped on drop, also when the test fails.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// fio reading random 4 KiB blocks from `dev` (io_uring, direct, `iodepth` in flight) for up
/// to `secs`, in the background: the load a device is already under when a tool starts.
pub fn busy_reader(dev: &Path, iodepth: u32, secs: u32) -> anyhow::Result<Reaped> {
    let child = Command::new("fio")
        .args([
            "--name=busy",
            &format!("--filename={}", dev.display()),
            "--direct=1",
            "--ioengine=io_uring",
            &format!("--iodepth={iodepth}"),
            "--rw=randread",
            "--bs=4k",
            "--time_based",
            &format!("--runtime={secs}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting fio")?;
    Ok(Reaped(child))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(entries: &[(&str, u64, u32, u64)]) -> ActionMultiset {
        entries
            .iter()
            .map(|&(a, sector, n, count)| ((a.to_string(), sector, n), count))
            .collect()
    }

    #[test]
    fn the_kernels_counted_loss_is_the_only_difference_allowed() {
        let ours = set(&[("Q", 808, 8, 2), ("D", 808, 8, 2), ("C", 808, 8, 1)]);
        let theirs = set(&[("Q", 808, 8, 2), ("D", 808, 8, 2), ("C", 808, 8, 2)]);
        assert_eq!(compare_with_ftrace(&ours, &ours, 0), Ok(None));
        // One C more in ftrace, and the recording counted one untraced: the kernel's.
        assert!(matches!(
            compare_with_ftrace(&ours, &theirs, 1),
            Ok(Some(_))
        ));
        // Not counted, or counted differently: ours.
        assert!(compare_with_ftrace(&ours, &theirs, 0).is_err());
        assert!(compare_with_ftrace(&ours, &theirs, 2).is_err());
        // A C more in ours, or any other action, is never the kernel's loss.
        assert!(compare_with_ftrace(&theirs, &ours, 1).is_err());
        let theirs_q = set(&[("Q", 808, 8, 3), ("D", 808, 8, 2), ("C", 808, 8, 1)]);
        assert!(compare_with_ftrace(&ours, &theirs_q, 1).is_err());
        // More than the kernel loses here, even if counted, is not allowed.
        let many = set(&[("Q", 808, 8, 2), ("D", 808, 8, 2), ("C", 808, 8, 4)]);
        assert!(compare_with_ftrace(&ours, &many, 3).is_err());
    }
}
