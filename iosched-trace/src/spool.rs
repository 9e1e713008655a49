//! A stream (`-` or a FIFO) kept in a scratch file for the commands that read a trace more
//! than once (`replay`, `explain`: a trace source reads forward only, and each of their
//! passes needs what the one before found).
//!
//! Owns: the scratch file's life. Must not: read a trace's contents.

use std::{
    fs::{File, OpenOptions},
    io::{self, Read},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use anyhow::Context;

/// The stream's bytes in a file of its own (mode 0600, created new, never through an
/// existing name), removed on drop.
pub struct Spooled {
    path: PathBuf,
}

impl Spooled {
    /// Copies all of `stream` (`-`: standard input) into a new file under `$TMPDIR`.
    pub fn copy(stream: &Path) -> anyhow::Result<Spooled> {
        let mut input: Box<dyn Read> = if stream.as_os_str() == "-" {
            Box::new(io::stdin().lock())
        } else {
            Box::new(
                File::open(stream).with_context(|| format!("cannot open {}", stream.display()))?,
            )
        };
        let dir = std::env::temp_dir();
        let (path, mut file) = (0..100u32)
            .find_map(|k| {
                let path = dir.join(format!("iosched-trace-{}-{k}.spool", std::process::id()));
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .ok()
                    .map(|f| (path, f))
            })
            .with_context(|| format!("cannot create a scratch file in {}", dir.display()))?;
        let spooled = Spooled { path };
        io::copy(&mut input, &mut file).with_context(|| {
            format!("copying {} to {}", stream.display(), spooled.path.display())
        })?;
        Ok(spooled)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
