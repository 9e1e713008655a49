//! SIGINT and SIGTERM end `live` like `q` does: programs detached, the terminal restored,
//! the last line of `--batch` output complete. Handlers are installed explicitly because a
//! `live --batch` started in the background by a script inherits SIGINT *ignored* (shells
//! ignore it for background jobs), and the default action of SIGTERM would skip the cleanup.
//! The loops poll [`requested`] between waits of at most a tenth of a second.
//!
//! `report --follow` and `dump --follow` stop following on the same signals
//! ([`install_once`]: a second one then ends the process as usual).

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    REQUESTED.store(true, Ordering::Relaxed);
}

/// Installs the handlers for SIGINT and SIGTERM.
pub fn install() -> std::io::Result<()> {
    install_with(libc::SA_RESTART)
}

/// Installs the handlers for the first SIGINT or SIGTERM only: after one, the signal's
/// default action is back (a second Ctrl-C ends the process at once).
pub fn install_once() -> std::io::Result<()> {
    install_with(libc::SA_RESTART | libc::SA_RESETHAND)
}

fn install_with(flags: libc::c_int) -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is valid; the handler only stores to an atomic.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            action.sa_flags = flags;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Whether SIGINT or SIGTERM arrived.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}
