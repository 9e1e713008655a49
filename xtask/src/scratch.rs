//! Scratch resources for demo and bench, each a guard that undoes itself on drop (the test
//! bed's, narrated here): a temporary directory, a loop device we attached (and whose
//! scheduler we changed), and a running `iosched-trace record`. Also the Ctrl-C flag that
//! turns an interrupt into an ordinary error, so that the guards' drops run instead of the
//! process dying with a device still attached.
//!
//! Declare guards in acquisition order; Rust drops them in reverse: recorder stopped, then the
//! loop device restored and detached, then the directory removed. Only resources created here
//! are touched, and only processes we spawned are signalled, by pid.

use std::{
    fs,
    path::Path,
    process::ExitStatus,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use anyhow::{Context as _, bail};
use iosched_testbed::{loop_device::LoopDevice, recorder, tempdir::TempDir};

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
pub fn temp_dir(base: &Path, prefix: &str) -> anyhow::Result<TempDir> {
    Ok(TempDir::new(base, prefix)?.narrated())
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

/// `file` behind a loop device with direct I/O (warning when the file system refuses it).
pub fn attach_loop(file: &Path) -> anyhow::Result<LoopDevice> {
    let dev = LoopDevice::attach(file)
        .context("attaching a loop device")?
        .narrated();
    if !dev.direct_io() {
        eprintln!(
            "scratch: WARNING: {} does not use direct I/O (the file system of {} may not \
             support it); I/O goes through the page cache",
            dev.name(),
            dev.backing().display()
        );
    }
    Ok(dev)
}

/// The prefix of the recorder's stderr lines, echoed on ours.
const ECHO: &str = "  [record] ";

/// A running `iosched-trace record` (the test bed's recorder), its stderr echoed. On drop (an
/// error or Ctrl-C path) it is stopped like [`Recorder::stop`] does, and the cleanup said.
pub struct Recorder(recorder::Recorder);

impl Recorder {
    /// `bin record -d loopN -o output [options]`, in the background.
    pub fn start_with(
        bin: &Path,
        dev: &LoopDevice,
        output: &Path,
        options: &[String],
    ) -> anyhow::Result<Self> {
        let command = recorder::Recorder::command(bin, &[dev.name()], output, options);
        eprintln!("+ {} &", cmd::display(&command));
        Ok(Self(recorder::Recorder::spawn(command, Some(ECHO))?))
    }

    /// Waits for the ready line on stderr, failing if the recorder exits first, on timeout, or
    /// on Ctrl-C.
    pub fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let ready = self.0.wait_ready(timeout, &interrupted);
        // Ctrl-C first, whatever the wait ended with: "interrupted; cleaning up".
        check_interrupted()?;
        Ok(ready?)
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.0.pid()
    }

    /// Sends SIGINT, waits (bounded) and returns its exit status.
    pub fn stop(mut self) -> anyhow::Result<ExitStatus> {
        Ok(self.0.stop_with(libc::SIGINT)?)
    }

    /// [`Recorder::stop`], and every line it printed on stderr.
    pub fn stop_saying(mut self) -> anyhow::Result<(ExitStatus, Vec<String>)> {
        let status = self.0.stop_with(libc::SIGINT)?;
        Ok((status, self.0.said().to_vec()))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(pid) = self.0.pid() {
            match self.0.stop_with(libc::SIGINT) {
                Ok(status) => eprintln!("cleanup: recorder (pid {pid}) ended ({status})"),
                Err(e) => eprintln!("cleanup: WARNING: {e:#}"),
            }
        }
    }
}
