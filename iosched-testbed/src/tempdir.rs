//! A scratch directory of our own, removed with its contents on drop: where a scenario, a
//! benchmark or a real-kernel test keeps its backing files and recordings. Used by the
//! scenario runner, `cargo xtask` and the real-kernel tests alike.
//!
//! Only a directory this guard created is removed: its name carries our pid and a clock
//! reading, and it is created with `create_dir` (never an existing one).

use std::{
    fs, io,
    os::unix::fs::DirBuilderExt as _,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

/// tmpfs: files there are memory, and their I/O never reaches a real disk's block layer.
const SHM: &str = "/dev/shm";

pub struct TempDir {
    path: PathBuf,
    /// Say on stderr what the drop removed (the xtask workflows narrate their cleanup).
    narrate: bool,
}

impl TempDir {
    /// A fresh directory `<base>/<prefix>.<pid>.<nanos>`, mode 0700.
    pub fn new(base: &Path, prefix: &str) -> io::Result<Self> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = base.join(format!("{prefix}.{}.{nanos}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))?;
        Ok(Self {
            path,
            narrate: false,
        })
    }

    /// [`TempDir::new`] under /dev/shm when there is one, else in the system's temp
    /// directory.
    pub fn in_memory(prefix: &str) -> io::Result<Self> {
        let shm = Path::new(SHM);
        if shm.is_dir() {
            Self::new(shm, prefix)
        } else {
            Self::new(&std::env::temp_dir(), prefix)
        }
    }

    /// Makes the drop say on stderr that it removed the directory.
    pub fn narrated(mut self) -> Self {
        self.narrate = true;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.path) {
            Ok(()) if self.narrate => eprintln!("cleanup: removed {}", self.path.display()),
            Ok(()) => {}
            Err(e) => eprintln!(
                "cleanup: WARNING: could not remove {}: {e}",
                self.path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_directory_is_gone_after_drop() {
        let base = std::env::temp_dir();
        let dir = TempDir::new(&base, "iosched-testbed-tempdir-test").unwrap();
        let path = dir.path().to_owned();
        assert!(path.starts_with(&base));
        fs::write(path.join("file"), "x").unwrap();
        let other = TempDir::new(&base, "iosched-testbed-tempdir-test").unwrap();
        assert_ne!(other.path(), path, "two guards share a directory");
        drop(dir);
        assert!(!path.exists());
        assert!(other.path().exists());
    }
}
