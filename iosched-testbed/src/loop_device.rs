//! A loop device we attach to a scratch file, with direct I/O (so its requests are not the
//! page cache's), as a guard: queue settings changed through it are put back and the device
//! detached on drop, but only while it is still backed by our file (nobody detached it and
//! reused the number). The benchmarks of `cargo xtask` and the real-kernel tests use it; the
//! emulated disk ([`crate::rig`]) keeps its loop device in its persisted state instead.

use std::{
    cell::RefCell,
    fs, io,
    path::{Path, PathBuf},
    process::Command,
};

use iosched_core::record::active_scheduler;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LoopError {
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("`losetup -f --show --direct-io=on {file}` failed: {stderr}")]
    Losetup { file: String, stderr: String },
    #[error("losetup printed {0:?}, not a /dev/loopN path")]
    NotALoop(String),
    #[error("{path} says {contents:?}: no active scheduler")]
    NoScheduler { path: String, contents: String },
}

/// Whether this kernel has the I/O scheduler `name`: listed in a disk's `queue/scheduler`,
/// or a module that loads (as a write of its name to `queue/scheduler` would load it). Some
/// kernels are built without one (the project's own machines' 6.18 has no bfq:
/// `CONFIG_IOSCHED_BFQ` is not set, and it loads no modules). Touches no queue.
pub fn kernel_has_scheduler(name: &str) -> bool {
    let listed = || {
        fs::read_dir("/sys/block")
            .into_iter()
            .flatten()
            .flatten()
            .any(|disk| {
                fs::read_to_string(disk.path().join("queue/scheduler")).is_ok_and(|offered| {
                    offered
                        .split_whitespace()
                        .any(|s| s.trim_matches(['[', ']']) == name)
                })
            })
    };
    listed()
        || (Command::new("modprobe")
            .args(["-q", &format!("{name}-iosched")])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && listed())
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> LoopError {
    let what = what.into();
    move |err| LoopError::Io { what, err }
}

pub struct LoopDevice {
    /// `/dev/loopN`.
    dev: PathBuf,
    /// `loopN`.
    name: String,
    /// Our file, canonical (as `loop/backing_file` shows it).
    backing: PathBuf,
    /// Queue attributes changed, with their values before the first change, in the order
    /// changed: a detached loop device keeps its queue settings for its next user.
    restore: RefCell<Vec<(String, String)>>,
    /// Say on stderr what is attached and what the drop undoes.
    narrate: bool,
}

impl LoopDevice {
    /// `losetup -f --show --direct-io=on FILE`. Whether direct I/O took is
    /// [`LoopDevice::direct_io`]'s to say (a file system may not support it).
    pub fn attach(file: &Path) -> Result<Self, LoopError> {
        let backing = file
            .canonicalize()
            .map_err(io_err(format!("resolving {}", file.display())))?;
        let out = Command::new("losetup")
            .args(["-f", "--show", "--direct-io=on"])
            .arg(&backing)
            .output()
            .map_err(io_err("running losetup"))?;
        if !out.status.success() {
            return Err(LoopError::Losetup {
                file: backing.display().to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let dev = PathBuf::from(&printed);
        let name = dev
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.starts_with("loop"))
            .ok_or_else(|| LoopError::NotALoop(printed.clone()))?
            .to_owned();
        Ok(Self {
            dev,
            name,
            backing,
            restore: RefCell::default(),
            narrate: false,
        })
    }

    /// Makes the guard say on stderr what it attached, and what its drop restores and
    /// detaches.
    pub fn narrated(mut self) -> Self {
        self.narrate = true;
        eprintln!(
            "scratch: attached {} to {}",
            self.dev.display(),
            self.backing.display()
        );
        self
    }

    /// `/dev/loopN`.
    pub fn dev(&self) -> &Path {
        &self.dev
    }

    /// `loopN`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file behind the device.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// Whether the device reads and writes its file with direct I/O.
    pub fn direct_io(&self) -> bool {
        fs::read_to_string(self.sysfs("loop/dio")).is_ok_and(|dio| dio.trim() == "1")
    }

    fn sysfs(&self, attr: &str) -> PathBuf {
        Path::new("/sys/block").join(&self.name).join(attr)
    }

    /// `/sys/block/loopN/queue/ATTR`.
    pub fn queue_path(&self, attr: &str) -> PathBuf {
        self.sysfs("queue").join(attr)
    }

    /// Writes `queue/ATTR` (`scheduler`, `nomerges`, `iosched/slice_idle`, ...), remembering
    /// the first old value of each attribute to restore on drop.
    pub fn set_queue(&self, attr: &str, value: &str) -> Result<(), LoopError> {
        if !self.restore.borrow().iter().any(|(a, _)| a == attr) {
            let old = if attr == "scheduler" {
                self.scheduler()?
            } else {
                let path = self.queue_path(attr);
                fs::read_to_string(&path)
                    .map_err(io_err(format!("reading {}", path.display())))?
                    .trim()
                    .to_owned()
            };
            self.restore.borrow_mut().push((attr.to_owned(), old));
        }
        let path = self.queue_path(attr);
        // A loop device keeps its elevator when detached, and writing the active one is a
        // no-op: the scheduler would keep what it took from the device's last use (BFQ's
        // `nonrot_with_queueing` from a RAM-backed one). Through none it starts afresh.
        if attr == "scheduler" && value != "none" && self.scheduler()? == value {
            fs::write(&path, "none").map_err(io_err(format!("resetting {}", path.display())))?;
        }
        fs::write(&path, value).map_err(|err| {
            // The scheduler's file lists what the kernel offers: worth saying when refused.
            let offered = if attr == "scheduler" {
                fs::read_to_string(&path)
                    .map(|s| format!(" (available: {})", s.trim()))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            LoopError::Io {
                what: format!("setting {} to {value}{offered}", path.display()),
                err,
            }
        })?;
        if self.narrate && attr == "scheduler" {
            eprintln!("scratch: {} scheduler set to {value}", self.name);
        }
        Ok(())
    }

    /// The active I/O scheduler (`queue/scheduler`'s bracketed entry).
    pub fn scheduler(&self) -> Result<String, LoopError> {
        let path = self.queue_path("scheduler");
        let contents =
            fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))?;
        active_scheduler(&contents)
            .map(str::to_owned)
            .ok_or_else(|| LoopError::NoScheduler {
                path: path.display().to_string(),
                contents,
            })
    }

    /// The device's (major, minor).
    pub fn dev_numbers(&self) -> Result<(u32, u32), LoopError> {
        let path = self.sysfs("dev");
        let text =
            fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))?;
        let bad = || LoopError::Io {
            what: format!("{} says {text:?}", path.display()),
            err: io::ErrorKind::InvalidData.into(),
        };
        let (major, minor) = text.trim().split_once(':').ok_or_else(bad)?;
        Ok((
            major.parse().map_err(|_| bad())?,
            minor.parse().map_err(|_| bad())?,
        ))
    }

    /// Whether the device is still the one we attached.
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
        for (attr, old) in self.restore.borrow().iter().rev() {
            match fs::write(self.queue_path(attr), old) {
                Ok(()) if self.narrate => {
                    eprintln!("cleanup: {} {attr} restored to {old}", self.name)
                }
                Ok(()) => {}
                Err(e) => eprintln!(
                    "cleanup: WARNING: restoring {} {attr} to {old}: {e}",
                    self.name
                ),
            }
        }
        match Command::new("losetup").arg("-d").arg(&self.dev).output() {
            Ok(out) if out.status.success() => {
                if self.narrate {
                    eprintln!("cleanup: detached {}", self.dev.display());
                }
            }
            Ok(out) => eprintln!(
                "cleanup: WARNING: `losetup -d {}` failed: {}",
                self.dev.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => eprintln!("cleanup: WARNING: running losetup -d: {e}"),
        }
    }
}
