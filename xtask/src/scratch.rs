//! Scratch resources for demo and bench, each a guard that undoes itself on drop: a temporary
//! directory, a loop device we attached (and whose scheduler we changed), and a running
//! `iosched-trace record`. Also the Ctrl-C flag that turns an interrupt into an ordinary error,
//! so that the guards' drops run instead of the process dying with a device still attached.
//!
//! Declare guards in acquisition order; Rust drops them in reverse: recorder stopped, then the
//! loop device restored and detached, then the directory removed. Only resources created here
//! are touched, and only processes we spawned are signalled, by pid.

use std::{
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};

use crate::cmd;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Turns SIGINT and SIGTERM into a flag checked by [`check_interrupted`]; the scratch guards then
/// clean up as the error unwinds the stack. Children in our process group get the terminal's
/// SIGINT too: dd and fio stop, the recorder stops as if we had signalled it.
pub fn catch_interrupts() -> anyhow::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: `action` is fully initialised (zeroed, then handler and an empty mask set)
        // before sigaction reads it; the handler only does an atomic store, which is
        // async-signal-safe. No SA_RESTART: an interrupted blocking call returns EINTR, and
        // std's wrappers (waitpid, read) retry it, so nothing observes a spurious failure.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error()).context("installing a signal handler");
        }
    }
    Ok(())
}

/// Whether Ctrl-C (or SIGTERM) has been received.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Fails once Ctrl-C (or SIGTERM) has been received.
pub fn check_interrupted() -> anyhow::Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// A fresh directory `<base>/<prefix>.<pid>.<nanos>`, removed with its contents on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(base: &Path, prefix: &str) -> anyhow::Result<Self> {
        use std::os::unix::fs::DirBuilderExt as _;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!("{prefix}.{}.{nanos}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.path) {
            Ok(()) => eprintln!("cleanup: removed {}", self.path.display()),
            Err(e) => eprintln!(
                "cleanup: WARNING: could not remove {}: {e}",
                self.path.display()
            ),
        }
    }
}

/// Creates `path` with `len` bytes. `allocate` reserves real blocks (fallocate), so that a
/// tmpfs-backed file reads real pages and a full file system fails now rather than mid-run;
/// otherwise the file is sparse.
pub fn create_file(path: &Path, len: u64, allocate: bool) -> anyhow::Result<()> {
    use std::os::fd::AsRawFd as _;
    let file =
        fs::File::create_new(path).with_context(|| format!("creating {}", path.display()))?;
    if allocate {
        let len = libc::off_t::try_from(len).context("file too large")?;
        // SAFETY: the fd is valid for the lifetime of `file`; fallocate only reads its arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("allocating {len} bytes for {}", path.display()));
        }
    } else {
        file.set_len(len)
            .with_context(|| format!("sizing {}", path.display()))?;
    }
    Ok(())
}

/// A loop device we attached to a scratch file. On drop: restores the scheduler if we changed
/// it, then detaches, but only if the device is still backed by our file.
pub struct LoopDevice {
    /// e.g. `/dev/loop3`.
    dev: PathBuf,
    /// e.g. `loop3`.
    name: String,
    backing: PathBuf,
    /// The scheduler to put back on drop.
    old_scheduler: Option<String>,
}

impl LoopDevice {
    /// `losetup -f --show --direct-io=on FILE`.
    pub fn attach(file: &Path) -> anyhow::Result<Self> {
        let backing = file
            .canonicalize()
            .with_context(|| format!("resolving {}", file.display()))?;
        let out = cmd::output(
            Command::new("losetup")
                .args(["-f", "--show", "--direct-io=on"])
                .arg(&backing),
        )
        .context("attaching a loop device")?;
        let dev = PathBuf::from(out.trim());
        let name = dev
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.starts_with("loop"))
            .with_context(|| format!("losetup printed {out:?}, not a /dev/loopN path"))?
            .to_owned();
        let this = Self {
            dev,
            name,
            backing,
            old_scheduler: None,
        };
        eprintln!(
            "scratch: attached {} to {}",
            this.dev.display(),
            this.backing.display()
        );
        match fs::read_to_string(this.sysfs("loop/dio")) {
            Ok(dio) if dio.trim() == "1" => {}
            _ => eprintln!(
                "scratch: WARNING: {} does not use direct I/O (the file system of {} may not \
                 support it); I/O goes through the page cache",
                this.name,
                this.backing.display()
            ),
        }
        Ok(this)
    }

    /// `/dev/loopN`.
    pub fn dev(&self) -> &Path {
        &self.dev
    }

    /// `loopN`.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn sysfs(&self, attr: &str) -> PathBuf {
        Path::new("/sys/block").join(&self.name).join(attr)
    }

    /// Sets `queue/scheduler`, remembering the first old value to restore on drop.
    pub fn set_scheduler(&mut self, scheduler: &str) -> anyhow::Result<()> {
        let path = self.sysfs("queue/scheduler");
        let current =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let old = active_scheduler(&current)
            .with_context(|| format!("{} says {current:?}", path.display()))?
            .to_owned();
        fs::write(&path, scheduler).with_context(|| {
            format!(
                "setting {} to {scheduler} (available: {})",
                path.display(),
                current.trim()
            )
        })?;
        self.old_scheduler.get_or_insert(old);
        eprintln!("scratch: {} scheduler set to {scheduler}", self.name);
        Ok(())
    }

    /// Whether the device is still the one we attached (nobody detached and reused it).
    fn still_ours(&self) -> bool {
        fs::read_to_string(self.sysfs("loop/backing_file"))
            .is_ok_and(|f| Path::new(f.trim()) == self.backing)
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if !self.still_ours() {
            eprintln!(
                "cleanup: WARNING: {} is no longer backed by {}; leaving it alone",
                self.dev.display(),
                self.backing.display()
            );
            return;
        }
        if let Some(old) = &self.old_scheduler {
            match fs::write(self.sysfs("queue/scheduler"), old) {
                Ok(()) => eprintln!("cleanup: {} scheduler restored to {old}", self.name),
                Err(e) => eprintln!(
                    "cleanup: WARNING: restoring {} scheduler to {old}: {e}",
                    self.name
                ),
            }
        }
        match cmd::output(Command::new("losetup").arg("-d").arg(&self.dev)) {
            Ok(_) => eprintln!("cleanup: detached {}", self.dev.display()),
            Err(e) => eprintln!("cleanup: WARNING: {e:#}"),
        }
    }
}

/// The active entry of a `queue/scheduler` file: `none [mq-deadline] kyber` -> `mq-deadline`; a
/// lone unbracketed entry (a device that offers only `none`) is active too.
fn active_scheduler(contents: &str) -> Option<&str> {
    let mut entries = contents.split_whitespace();
    let bracketed = entries
        .clone()
        .find_map(|s| s.strip_prefix('[')?.strip_suffix(']'));
    match (bracketed, entries.next(), entries.next()) {
        (Some(active), _, _) => Some(active),
        (None, Some(only), None) => Some(only),
        _ => None,
    }
}

/// What the recorder prints on stderr once its programs are attached.
const READY_LINE: &str = "recording: ready";
/// How long the recorder may take to exit after SIGINT before we SIGKILL it.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `iosched-trace record`. Its stderr is echoed with a prefix. On drop (an error or
/// Ctrl-C path) it is stopped like [`Recorder::stop`] does.
pub struct Recorder {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    echo: Option<thread::JoinHandle<()>>,
}

impl Recorder {
    /// `bin record -d loopN -o output [options]`, in the background.
    pub fn start_with(
        bin: &Path,
        dev: &LoopDevice,
        output: &Path,
        options: &[String],
    ) -> anyhow::Result<Self> {
        let mut command = Command::new(bin);
        command
            .args(["record", "-d", dev.name(), "-o"])
            .arg(output)
            .args(options)
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        let shown = cmd::display(&command);
        eprintln!("+ {shown} &");
        let mut child = command
            .spawn()
            .with_context(|| format!("could not start `{shown}`"))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        let echo = thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  [record] {line}");
                // The receiver may be gone (Recorder dropped); keep echoing regardless.
                let _ = tx.send(line);
            }
        });
        Ok(Self {
            child: Some(child),
            lines,
            echo: Some(echo),
        })
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("child is present until stop")
    }

    /// Waits for the ready line on stderr, failing if the recorder exits first, on timeout, or
    /// on Ctrl-C.
    pub fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            check_interrupted()?;
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(line) if line.contains(READY_LINE) => return check_interrupted(),
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                // stderr closed: the recorder is exiting; try_wait below reports it.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    thread::sleep(Duration::from_millis(50))
                }
            }
            if let Some(status) = self.child().try_wait().context("polling the recorder")? {
                bail!("the recorder exited before it was ready ({status}); see its output above");
            }
            if Instant::now() >= deadline {
                bail!(
                    "the recorder did not print {READY_LINE:?} within {} s",
                    timeout.as_secs()
                );
            }
        }
    }

    /// Sends SIGINT, waits (bounded) and returns its exit status.
    pub fn stop(mut self) -> anyhow::Result<ExitStatus> {
        let mut child = self.child.take().expect("child is present until stop");
        let status = stop_child(&mut child)?;
        if let Some(echo) = self.echo.take() {
            let _ = echo.join();
        }
        Ok(status)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id();
            match stop_child(&mut child) {
                Ok(status) => eprintln!("cleanup: recorder (pid {pid}) ended ({status})"),
                Err(e) => eprintln!("cleanup: WARNING: {e:#}"),
            }
        }
    }
}

/// SIGINT, then up to [`STOP_TIMEOUT`] for the child to exit, then SIGKILL.
fn stop_child(child: &mut Child) -> anyhow::Result<ExitStatus> {
    let pid = child.id();
    if let Some(status) = child.try_wait().context("polling the recorder")? {
        return Ok(status);
    }
    let pid_t = libc::pid_t::try_from(pid).context("pid out of range")?;
    // SAFETY: kill has no memory-safety preconditions. `pid` is our own child and has not been
    // reaped (we hold the Child and have not seen it exit), so it cannot name another process.
    // ESRCH is impossible for the same reason; any error is reported by the wait below.
    unsafe { libc::kill(pid_t, libc::SIGINT) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the recorder")? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the recorder (pid {pid}) did not exit within {} s of SIGINT; killed it",
                STOP_TIMEOUT.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_active_scheduler() {
        assert_eq!(
            active_scheduler("[none] mq-deadline kyber bfq\n"),
            Some("none")
        );
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n"),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("none\n"), Some("none"));
        assert_eq!(active_scheduler("none mq-deadline\n"), None);
        assert_eq!(active_scheduler(""), None);
    }
}
