//! The emulated rotational disk (crate `iosched-testbed`) for real-kernel tests: a
//! configuration with a fresh directory under /dev/shm and the daemon binary found, and a
//! check that a torn-down disk left nothing behind.
//!
//! ```ignore
//! let mut config = hdd::config("seq", 1 << 30);
//! config.scheduler = Some("bfq".into());
//! let disk = Hdd::up(&config)?; // torn down on drop, also on panic
//! run_fio(disk.device());
//! ```

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

pub use iosched_disk::{DiskModel, DiskParams, FlashModel, FlashParams, flash::Op};
pub use iosched_testbed::args::DeviceKind;
use iosched_testbed::mounts;
pub use iosched_testbed::rig::{Hdd, HddConfig, State};

/// The `iosched-hdd` daemon: `IOSCHED_HDD_BIN`, else the workspace's release then debug build.
pub fn daemon_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("IOSCHED_HDD_BIN") {
        return PathBuf::from(path);
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    for profile in ["release", "debug"] {
        let path = target.join(profile).join("iosched-hdd");
        if path.exists() {
            return path;
        }
    }
    panic!(
        "no iosched-hdd binary: run `cargo build --release -p iosched-testbed` or set IOSCHED_HDD_BIN"
    );
}

/// A default (7200 rpm) disk of `size` bytes in a new directory
/// `/dev/shm/iosched-hdd-test-TAG-PID-N`; change fields before [`Hdd::up`].
pub fn config(tag: &str, size: u64) -> HddConfig {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = PathBuf::from(format!(
        "/dev/shm/iosched-hdd-test-{tag}-{}-{n}",
        std::process::id()
    ));
    HddConfig::new(daemon_binary(), dir, size)
}

/// What of a torn-down disk is still around: a loop device on its file, a mount in its
/// directory, its daemon, its directory. Empty when teardown was complete.
pub fn leftovers(state: &State) -> Vec<String> {
    let mut found = Vec::new();
    let dir = state.dir.to_string_lossy().into_owned();
    if let Ok(out) = Command::new("losetup").arg("-a").output() {
        found.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains(&dir))
                .map(|l| format!("loop device: {l}")),
        );
    }
    if let Ok(mounts) = mounts::mounts() {
        found.extend(
            mounts
                .iter()
                .filter(|m| m.mount_point.contains(&dir))
                .map(|m| format!("mount: {} ({})", m.mount_point, m.fs_type)),
        );
    }
    if let Some(pid) = state.daemon_pid {
        // A zombie has an empty cmdline; a recycled pid runs something else.
        let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&dir) {
            found.push(format!("daemon still running: pid {pid}"));
        }
    }
    if state.dir.exists() {
        found.push(format!("directory: {dir}"));
    }
    found
}
