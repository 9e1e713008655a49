//! Helpers for the root-only tests on the real kernel: scratch loop devices, the recorder
//! binary run as a child, the kernel's own ftrace `blk` tracer as an oracle. Every helper
//! undoes what it did on drop, so a failing test leaves nothing behind.
//!
//! These tests touch only devices they create. They run serially (`--test-threads=1`, as
//! `cargo xtask test` does): ftrace is one global resource.

pub mod hdd;

use std::{
    collections::{BTreeMap, HashMap},
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use iosched_core::{
    event::{Event, EventKind},
    record::RecordingReader,
};

/// Set by `cargo xtask test` when running as root or in CI: then a test that cannot run the
/// real kernel fails instead of skipping.
pub const REQUIRE_ENV: &str = "IOSCHED_TRACE_REQUIRE_ROOT_TESTS";

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

/// A scratch directory removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Under /dev/shm: a loop device on tmpfs is fast, and its backing I/O never reaches a
    /// real disk's block layer.
    pub fn new(tag: &str) -> anyhow::Result<Self> {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = base.join(format!("iosched-trace-test-{tag}-{}", std::process::id()));
        fs::create_dir_all(&path)?;
        Ok(Self(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A loop device on its own backing file, with direct I/O (so its requests are not the page
/// cache's), detached on drop.
pub struct LoopDevice {
    /// `/dev/loopN`
    pub path: PathBuf,
    /// `loopN`
    pub name: String,
    /// Queue attributes changed, with their values before the first change: a detached loop
    /// device keeps its queue settings for its next user, so they are put back on drop.
    restore: std::cell::RefCell<Vec<(String, String)>>,
    _dir: ScratchDir,
}

impl LoopDevice {
    pub fn new(tag: &str, size_mib: u64, scheduler: &str) -> anyhow::Result<Self> {
        let dir = ScratchDir::new(tag)?;
        let backing = dir.path().join("backing.img");
        let file = fs::File::create(&backing)?;
        file.set_len(size_mib << 20)?;
        drop(file);
        let out = run(Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(&backing))?;
        let path = PathBuf::from(out.trim());
        let name = path
            .file_name()
            .context("losetup printed no device")?
            .to_string_lossy()
            .into_owned();
        let device = Self {
            path,
            name,
            restore: Default::default(),
            _dir: dir,
        };
        device.set_queue("scheduler", scheduler)?;
        // Settle udev's probe of the new device before tests count events.
        let _ = Command::new("udevadm").args(["settle", "-t", "5"]).status();
        Ok(device)
    }

    pub fn queue_path(&self, attr: &str) -> PathBuf {
        PathBuf::from(format!("/sys/block/{}/queue/{attr}", self.name))
    }

    pub fn set_queue(&self, attr: &str, value: &str) -> anyhow::Result<()> {
        if !self.restore.borrow().iter().any(|(a, _)| a == attr) {
            let old = if attr == "scheduler" {
                self.scheduler()?
            } else {
                fs::read_to_string(self.queue_path(attr))?
                    .trim()
                    .to_string()
            };
            self.restore.borrow_mut().push((attr.to_string(), old));
        }
        fs::write(self.queue_path(attr), value)
            .with_context(|| format!("setting {attr}={value} on {}", self.name))
    }

    pub fn scheduler(&self) -> anyhow::Result<String> {
        let text = fs::read_to_string(self.queue_path("scheduler"))?;
        text.split_whitespace()
            .find_map(|s| s.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
            .map(str::to_string)
            .context("no active scheduler")
    }

    /// (major, minor)
    pub fn dev(&self) -> anyhow::Result<(u32, u32)> {
        let text = fs::read_to_string(format!("/sys/block/{}/dev", self.name))?;
        let (a, b) = text.trim().split_once(':').context("bad dev file")?;
        Ok((a.parse()?, b.parse()?))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        for (attr, old) in self.restore.borrow().iter().rev() {
            let _ = fs::write(self.queue_path(attr), old);
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

/// The recorder running as a child process; killed on drop if still running.
pub struct Recorder {
    child: Option<Child>,
    pub output: PathBuf,
    stderr_lines: mpsc::Receiver<String>,
    pub stderr: Vec<String>,
}

impl Recorder {
    /// Starts `iosched-trace record` and waits for it to say its programs are attached.
    pub fn start(devices: &[&str], output: &Path, extra: &[&str]) -> anyhow::Result<Self> {
        let mut cmd = Command::new(binary());
        cmd.arg("record").arg("-o").arg(output);
        for d in devices {
            cmd.args(["-d", d]);
        }
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("spawning the recorder")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut recorder = Self {
            child: Some(child),
            output: output.to_path_buf(),
            stderr_lines: rx,
            stderr: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match recorder.stderr_lines.recv_timeout(left) {
                Ok(line) => {
                    let ready = line.starts_with("recording: ready");
                    recorder.stderr.push(line);
                    if ready {
                        return Ok(recorder);
                    }
                }
                Err(_) => {
                    let status = recorder
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten());
                    bail!(
                        "recorder did not become ready (exit: {status:?}); stderr:\n{}",
                        recorder.stderr.join("\n")
                    );
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Sends `signal` to the recorder (by pid: it is our child) and waits for it to exit.
    pub fn stop_with(&mut self, signal: i32) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("already stopped")?;
        // SAFETY: kill(2) on our own child's pid; the child has not been reaped yet.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait()?;
        while let Ok(line) = self.stderr_lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(line);
        }
        Ok(status)
    }

    pub fn stop(&mut self) -> anyhow::Result<()> {
        let status = self.stop_with(libc::SIGINT)?;
        ensure!(
            status.success(),
            "recorder exited with {status}; stderr:\n{}",
            self.stderr.join("\n")
        );
        Ok(())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
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
    pub footer_total: Option<u64>,
    /// The kernel's completion counters next to the traced completions, per device.
    pub completions: Vec<iosched_core::record::CompletionCheck>,
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
        footer_total: reader.footer().map(|f| f.events_total),
        completions: reader
            .stats()
            .map(|s| s.completions.clone())
            .unwrap_or_default(),
    })
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
        let old_buffer_kb = fs::read_to_string(tracing.join("buffer_size_kb"))?
            .split_whitespace()
            .next()
            .unwrap_or("1408")
            .to_string();
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
