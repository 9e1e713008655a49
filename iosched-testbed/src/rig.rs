//! The emulated disk as one resource: a directory of our own, the `iosched-hdd` daemon serving
//! a file in it, and a direct-I/O loop device on that file, marked rotational (or not, for
//! the flash kind). [`Hdd`] brings
//! it up and tears it down on drop (also when a test panics); [`State`] is the same thing
//! written to a file, so that `cargo xtask disk down` can tear down what `disk up` left
//! running.
//!
//! Teardown order matters: the loop device holds the file open, so it is detached first;
//! then the FUSE file is unmounted, which ends the daemon (its read of /dev/fuse fails with
//! ENODEV); then the directory goes. Every step is attempted even if an earlier one failed,
//! and touches only what is still ours (the loop device still backed by our file, the
//! daemon pid still running our binary on our file). Queue settings changed through the
//! guard are put back before detaching: a detached loop device keeps them for its next user.

use std::{
    fs::{self, File},
    io,
    os::unix::{ffi::OsStrExt as _, fs::DirBuilderExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use iosched_core::record::active_scheduler;
use iosched_disk::{DiskModel, DiskParams, FlashModel, FlashParams, ModelError};

use crate::{
    args::{DeviceKind, flash_flags, model_flags},
    daemon::MAX_REQUEST,
    mounts::is_mount_point,
};

/// How long the daemon may take to mount and answer its first GETATTR.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long each teardown step waits for the kernel or the daemon.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// The file the daemon serves, inside the directory.
const DISK_FILE: &str = "disk";
const LOG_FILE: &str = "daemon.log";

#[derive(Debug, Error)]
pub enum RigError {
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    #[error("bad disk parameters")]
    Model(#[from] ModelError),
    #[error("the iosched-hdd daemon exited ({status}) before the disk was ready; its log:\n{log}")]
    DaemonExited { status: String, log: String },
    #[error("timed out after {secs} s: {what}")]
    Timeout { what: String, secs: u64 },
    #[error(
        "{0} did not enable direct I/O; the page cache would hide the disk model (does the \
         kernel's FUSE support O_DIRECT?)"
    )]
    NotDirect(String),
    #[error("teardown incomplete: {}", .0.join("; "))]
    Teardown(Vec<String>),
    #[error("reading state file {path}: {err}")]
    State { path: PathBuf, err: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RigError {
    let what = what.into();
    move |err| RigError::Io { what, err }
}

/// What to bring up.
#[derive(Clone, Debug)]
pub struct HddConfig {
    /// The `iosched-hdd` binary.
    pub daemon_bin: PathBuf,
    /// A directory to create (it must not exist) for the disk file and the daemon's log;
    /// removed on teardown. Put it on tmpfs (/dev/shm).
    pub dir: PathBuf,
    /// Disk size, bytes (memory is used only for what gets written).
    pub size: u64,
    /// Rotational disk (`params`) or flash device (`flash`).
    pub kind: DeviceKind,
    pub params: DiskParams,
    pub flash: FlashParams,
    /// The daemon answers at once: measures the machinery, not the model.
    pub no_delay: bool,
    /// `queue/scheduler` of the loop device; `None` keeps the kernel's choice.
    pub scheduler: Option<String>,
    /// `queue/read_ahead_kb`: 128 by default, as for a SATA disk (loop's own default is
    /// larger).
    pub read_ahead_kb: u32,
    /// The daemon logs every request (in its log file).
    pub verbose: bool,
    /// The daemon serves at real-time priority (default): its timing holds on a busy
    /// machine, but a task it wakes may wait up to ~0.5 ms for the CPU (see daemon.rs).
    pub realtime: bool,
}

impl HddConfig {
    pub fn new(daemon_bin: impl Into<PathBuf>, dir: impl Into<PathBuf>, size: u64) -> Self {
        Self {
            daemon_bin: daemon_bin.into(),
            dir: dir.into(),
            size,
            kind: DeviceKind::Hdd,
            params: DiskParams::default(),
            flash: FlashParams::default(),
            no_delay: false,
            scheduler: None,
            read_ahead_kb: 128,
            realtime: true,
            verbose: false,
        }
    }
}

/// Everything needed to find and tear down a running emulated disk.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub dir: PathBuf,
    /// The FUSE-mounted file the loop device is attached to.
    pub disk_file: PathBuf,
    pub daemon_pid: Option<u32>,
    /// `/dev/loopN` once attached.
    pub loop_dev: Option<PathBuf>,
    pub size: u64,
    #[serde(default)]
    pub kind: DeviceKind,
    pub params: DiskParams,
    #[serde(default)]
    pub flash: FlashParams,
    pub no_delay: bool,
    /// Queue attributes we changed and their old values, in the order first changed.
    #[serde(default)]
    pub restore: Vec<(String, String)>,
    /// The loop device's `read_ahead_kb` before the attach, written back after the detach:
    /// attaching a FUSE-backed file sets it from the file's I/O size (2048 KiB), and the
    /// detach leaves it there.
    #[serde(default)]
    pub read_ahead_before_attach: Option<String>,
}

impl State {
    /// `loopN`, once attached.
    pub fn loop_name(&self) -> Option<&str> {
        self.loop_dev.as_deref()?.file_name()?.to_str()
    }

    pub fn model(&self) -> Result<DiskModel, ModelError> {
        DiskModel::new(self.params.clone(), self.size)
    }

    pub fn flash_model(&self) -> Result<FlashModel, ModelError> {
        FlashModel::new(self.flash.clone())
    }

    pub fn save(&self, path: &Path) -> Result<(), RigError> {
        let text = serde_json::to_string_pretty(self).expect("State serialises");
        fs::write(path, text).map_err(io_err(format!("writing {}", path.display())))
    }

    pub fn load(path: &Path) -> Result<Self, RigError> {
        let err = |err: String| RigError::State {
            path: path.to_owned(),
            err,
        };
        let text = fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    }

    /// Detaches, unmounts, stops the daemon (by pid, only if it is still ours) and removes
    /// the directory. For a disk brought up by another process (`cargo xtask disk down`).
    pub fn teardown(&self) -> Result<(), RigError> {
        teardown(self, None)
    }
}

/// A running emulated disk, torn down on drop.
pub struct Hdd {
    state: State,
    daemon: Option<Child>,
}

impl Hdd {
    /// Starts the daemon, waits until its file is served, attaches a direct-I/O loop device
    /// and sets its queue up. On any failure, what was already set up is torn down.
    pub fn up(config: &HddConfig) -> Result<Self, RigError> {
        // Validate the parameters here, with a clear error, rather than in the daemon's log.
        DiskModel::new(config.params.clone(), config.size)?;
        FlashModel::new(config.flash.clone())?;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&config.dir)
            .map_err(io_err(format!("creating {}", config.dir.display())))?;
        let dir = config
            .dir
            .canonicalize()
            .map_err(io_err(format!("resolving {}", config.dir.display())))?;
        let disk_file = dir.join(DISK_FILE);
        // From here on the guard owns the directory: an early return tears down.
        let mut hdd = Self {
            state: State {
                dir: dir.clone(),
                disk_file: disk_file.clone(),
                daemon_pid: None,
                loop_dev: None,
                size: config.size,
                kind: config.kind,
                params: config.params.clone(),
                flash: config.flash.clone(),
                no_delay: config.no_delay,
                restore: Vec::new(),
                read_ahead_before_attach: None,
            },
            daemon: None,
        };
        File::create(&disk_file).map_err(io_err(format!("creating {}", disk_file.display())))?;
        hdd.start_daemon(config)?;
        hdd.wait_ready()?;
        hdd.attach_loop()?;
        hdd.setup_queue(config)?;
        // Let udev finish probing the new device before anyone measures it (best effort).
        let _ = Command::new("udevadm")
            .args(["settle", "-t", "5"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        Ok(hdd)
    }

    fn start_daemon(&mut self, config: &HddConfig) -> Result<(), RigError> {
        let log_path = self.state.dir.join(LOG_FILE);
        let log =
            File::create(&log_path).map_err(io_err(format!("creating {}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(io_err("duplicating the log file handle"))?;
        let mut cmd = Command::new(&config.daemon_bin);
        cmd.arg("--mount")
            .arg(&self.state.disk_file)
            .arg("--size")
            .arg(config.size.to_string())
            // A rotational disk is the daemon's default kind (so its command line is as it
            // always was).
            .args(match config.kind {
                DeviceKind::Hdd => model_flags(&config.params),
                DeviceKind::Flash => [vec!["--kind".to_owned(), "flash".to_owned()]]
                    .into_iter()
                    .chain([flash_flags(&config.flash)])
                    .flatten()
                    .collect(),
            })
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Its own process group: a Ctrl-C meant for a test run or for `xtask disk up`
            // must not kill the daemon under a mounted file; teardown stops it.
            .process_group(0);
        if config.no_delay {
            cmd.arg("--no-delay");
        }
        if config.verbose {
            cmd.arg("--verbose");
        }
        if !config.realtime {
            cmd.arg("--no-realtime");
        }
        let child = cmd.spawn().map_err(io_err(format!(
            "starting {} (build it with `cargo build --release -p iosched-testbed`)",
            config.daemon_bin.display()
        )))?;
        self.state.daemon_pid = Some(child.id());
        self.daemon = Some(child);
        Ok(())
    }

    /// Ready when the file is mounted and reports the disk's size (so INIT and GETATTR were
    /// answered).
    fn wait_ready(&mut self) -> Result<(), RigError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let child = self.daemon.as_mut().expect("started");
            if let Some(status) = child.try_wait().map_err(io_err("polling the daemon"))? {
                return Err(RigError::DaemonExited {
                    status: status.to_string(),
                    log: read_log(&self.state.dir),
                });
            }
            if is_mount_point(&self.state.disk_file)
                && fs::metadata(&self.state.disk_file).is_ok_and(|m| m.len() == self.state.size)
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RigError::Timeout {
                    what: format!("iosched-hdd serving {}", self.state.disk_file.display()),
                    secs: READY_TIMEOUT.as_secs(),
                });
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn attach_loop(&mut self) -> Result<(), RigError> {
        // `-f` takes the first free device: its read-ahead now is what to leave behind.
        let first_free = run(Command::new("losetup").arg("-f"))
            .ok()
            .map(|d| d.trim().to_owned());
        let read_ahead = |dev: &str| {
            let name = dev.trim_start_matches("/dev/");
            fs::read_to_string(format!("/sys/block/{name}/queue/read_ahead_kb"))
                .ok()
                .map(|v| v.trim().to_owned())
        };
        let before = first_free.as_deref().and_then(read_ahead);
        let out = run(Command::new("losetup")
            .args(["--direct-io=on", "-f", "--show"])
            .arg(&self.state.disk_file))?;
        let dev = PathBuf::from(out.trim());
        if !dev.to_string_lossy().starts_with("/dev/loop") {
            return Err(RigError::Command {
                command: "losetup".into(),
                stderr: format!("printed {out:?}, not a /dev/loopN path"),
            });
        }
        if first_free.as_deref() == dev.to_str() {
            self.state.read_ahead_before_attach = before;
        }
        self.state.loop_dev = Some(dev);
        let name = self.name().to_owned();
        let dio = fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap_or_default();
        if dio.trim() != "1" {
            return Err(RigError::NotDirect(name));
        }
        Ok(())
    }

    /// Order matters: writing `max_sectors_kb` or switching the scheduler makes the kernel
    /// recompute `read_ahead_kb`, so that goes last (and is restored last).
    fn setup_queue(&mut self, config: &HddConfig) -> Result<(), RigError> {
        // One block request = one FUSE request (mostly; see docs/TESTBED.md), so the model
        // sees the block layer's offsets and sizes.
        self.set_queue("max_sectors_kb", &(MAX_REQUEST / 1024).to_string())?;
        let rotational = if config.kind == DeviceKind::Flash {
            "0"
        } else {
            "1"
        };
        self.set_queue("rotational", rotational)?;
        if let Some(scheduler) = &config.scheduler {
            self.set_queue("scheduler", scheduler).map_err(|e| {
                let offered = fs::read_to_string(self.queue_path("scheduler")).unwrap_or_default();
                RigError::Io {
                    what: format!(
                        "setting scheduler {scheduler} on {} (offered: {})",
                        self.name(),
                        offered.trim()
                    ),
                    err: match e {
                        RigError::Io { err, .. } => err,
                        other => io::Error::other(other.to_string()),
                    },
                }
            })?;
        }
        self.set_queue("read_ahead_kb", &config.read_ahead_kb.to_string())
    }

    /// Writes `/sys/block/loopN/queue/ATTR` (e.g. `nomerges`, `iosched/slice_idle`). The
    /// first old value of each attribute is put back on teardown, before the loop device is
    /// detached: a detached loop device keeps its queue settings for its next user.
    pub fn set_queue(&mut self, attr: &str, value: &str) -> Result<(), RigError> {
        let path = self.queue_path(attr);
        let old =
            fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))?;
        let old = if attr == "scheduler" {
            active_scheduler(&old).unwrap_or("none").to_owned()
        } else {
            old.trim().to_owned()
        };
        // A loop device keeps its elevator when detached, and writing the active one is a
        // no-op: the scheduler would keep what it took from the device's last use (BFQ's
        // `nonrot_with_queueing` from a RAM-backed one merges every new queue at once).
        // Through none it starts on this queue as configured.
        if attr == "scheduler" && value != "none" && old == value {
            fs::write(&path, "none").map_err(io_err(format!("resetting {}", path.display())))?;
        }
        fs::write(&path, value)
            .map_err(io_err(format!("writing {value} to {}", path.display())))?;
        if !self.state.restore.iter().any(|(a, _)| a == attr) {
            self.state.restore.push((attr.to_owned(), old));
        }
        Ok(())
    }

    pub fn queue_path(&self, attr: &str) -> PathBuf {
        Path::new("/sys/block")
            .join(self.name())
            .join("queue")
            .join(attr)
    }

    /// `/dev/loopN`.
    pub fn device(&self) -> &Path {
        self.state.loop_dev.as_deref().expect("attached in up()")
    }

    /// `loopN`.
    pub fn name(&self) -> &str {
        self.state.loop_name().expect("attached in up()")
    }

    pub fn size(&self) -> u64 {
        self.state.size
    }

    /// The rotational model the daemon applies (also when it runs with `no_delay`, for
    /// predictions), or would for `kind` hdd.
    pub fn model(&self) -> DiskModel {
        self.state.model().expect("validated in up()")
    }

    /// The flash model the daemon applies with `kind` flash.
    pub fn flash_model(&self) -> FlashModel {
        self.state.flash_model().expect("validated in up()")
    }

    pub fn kind(&self) -> DeviceKind {
        self.state.kind
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        read_log(&self.state.dir)
    }

    /// Leaves the disk running and returns what is needed to tear it down later
    /// ([`State::teardown`]).
    pub fn into_state(mut self) -> State {
        // Dropping a Child neither kills nor waits for it; the state keeps its pid.
        self.daemon = None;
        let state = self.state.clone();
        std::mem::forget(self);
        state
    }

    /// Tears down now, reporting what could not be undone.
    pub fn down(mut self) -> Result<(), RigError> {
        let daemon = self.daemon.take();
        let result = teardown(&self.state, daemon);
        std::mem::forget(self);
        result
    }
}

impl Drop for Hdd {
    fn drop(&mut self) {
        if let Err(e) = teardown(&self.state, self.daemon.take()) {
            eprintln!("iosched-testbed: WARNING: {e}");
        }
    }
}

fn read_log(dir: &Path) -> String {
    fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_else(|e| format!("(no log: {e})"))
}

/// Runs a command to completion; its stdout, or its stderr as the error.
fn run(cmd: &mut Command) -> Result<String, RigError> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("starting {shown}")))?;
    if !out.status.success() {
        return Err(RigError::Command {
            command: shown,
            stderr: format!(
                "{} ({})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `done` until it holds or [`STEP_TIMEOUT`] passes.
fn wait_for(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn loop_backed_by(name: &str, file: &Path) -> bool {
    fs::read_to_string(format!("/sys/block/{name}/loop/backing_file"))
        .is_ok_and(|f| Path::new(f.trim()) == file)
}

/// Whether `pid` is an `iosched-hdd` serving `disk_file` (so not a recycled pid).
fn is_our_daemon(pid: u32, disk_file: &Path) -> bool {
    let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut args = cmdline.split(|&b| b == 0);
    let is_hdd = args
        .next()
        .is_some_and(|a| Path::new(std::ffi::OsStr::from_bytes(a)).ends_with("iosched-hdd"));
    is_hdd && args.any(|a| a == disk_file.as_os_str().as_bytes())
}

fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; callers checked that the pid is
        // our daemon just before.
        unsafe { libc::kill(pid, sig) };
    }
}

fn teardown(state: &State, mut daemon: Option<Child>) -> Result<(), RigError> {
    let mut problems = Vec::new();

    // 1. The loop device, if it is still ours. `losetup -d` on a device someone holds open
    //    only marks it for autoclear: wait until the kernel has let go of the file.
    if let Some(name) = state.loop_name()
        && loop_backed_by(name, &state.disk_file)
    {
        // In the order they were changed: see `setup_queue`. Attributes of a scheduler
        // instance (iosched/*) vanish with it and need no restoring.
        for (attr, old) in &state.restore {
            let path = Path::new("/sys/block").join(name).join("queue").join(attr);
            if let Err(e) = fs::write(&path, old)
                && !attr.starts_with("iosched/")
            {
                problems.push(format!("restoring {} to {old}: {e}", path.display()));
            }
        }
        let dev = state.loop_dev.as_deref().expect("named");
        if let Err(e) = run(Command::new("losetup").arg("-d").arg(dev)) {
            problems.push(e.to_string());
        } else if !wait_for(|| !loop_backed_by(name, &state.disk_file)) {
            problems.push(format!(
                "{name} still attached to {}",
                state.disk_file.display()
            ));
        } else if let Some(ra) = &state.read_ahead_before_attach {
            let path = Path::new("/sys/block")
                .join(name)
                .join("queue/read_ahead_kb");
            if let Err(e) = fs::write(&path, ra) {
                problems.push(format!("restoring {} to {ra}: {e}", path.display()));
            }
        }
    }

    // 2. The FUSE mount. Busy only while the loop device still holds the file.
    if is_mount_point(&state.disk_file) {
        let target = std::ffi::CString::new(state.disk_file.as_os_str().as_bytes())
            .expect("no NUL in our paths");
        let unmounted = wait_for(|| {
            // SAFETY: a valid NUL-terminated path.
            let rc = unsafe { libc::umount2(target.as_ptr(), 0) };
            rc == 0 || !is_mount_point(&state.disk_file)
        });
        if !unmounted {
            // Lazy: the mount disappears from view now, the kernel frees it when unused.
            // SAFETY: as above.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            problems.push(format!(
                "{} was busy; detached it lazily",
                state.disk_file.display()
            ));
        }
    }

    // 3. The daemon: it exits by itself once unmounted; otherwise SIGTERM, then SIGKILL.
    match (&mut daemon, state.daemon_pid) {
        (Some(child), _) => {
            let exited = wait_for(|| child.try_wait().is_ok_and(|s| s.is_some()));
            if !exited {
                signal(child.id(), libc::SIGTERM);
                if !wait_for(|| child.try_wait().is_ok_and(|s| s.is_some())) {
                    let _ = child.kill();
                    let _ = child.wait();
                    problems.push(format!("daemon {} ignored SIGTERM; killed it", child.id()));
                }
            }
        }
        (None, Some(pid)) => {
            // Not our child (`xtask disk down` in a later process): poll /proc, and signal
            // only while the pid is still our daemon on our file.
            let alive = || is_our_daemon(pid, &state.disk_file);
            if !wait_for(|| !alive()) {
                signal(pid, libc::SIGTERM);
                if !wait_for(|| !alive()) {
                    if alive() {
                        signal(pid, libc::SIGKILL);
                    }
                    problems.push(format!("daemon {pid} ignored SIGTERM; killed it"));
                }
            }
        }
        (None, None) => {}
    }

    // 4. Our directory (the disk file, the log).
    if state.dir.exists()
        && let Err(e) = fs::remove_dir_all(&state.dir)
    {
        problems.push(format!("removing {}: {e}", state.dir.display()));
    }

    if problems.is_empty() {
        Ok(())
    } else {
        Err(RigError::Teardown(problems))
    }
}
