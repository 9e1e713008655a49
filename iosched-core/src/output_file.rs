//! Files the tool writes a trace into: created private (mode 0600: a trace names every
//! process that did I/O, and its paths), and never through a symbolic link. A recorder runs
//! as root; a link planted where it will write (`/tmp/trace.istrace` -> `/etc/shadow`) would
//! otherwise make it truncate whatever the link names.
//!
//! Owns: opening an output path. Must not: decide names or formats.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

/// Creates `path` for writing: a new file exclusively (`O_EXCL`, mode 0600), or an existing
/// regular file truncated, in both cases refusing a symbolic link as the last component
/// (`O_NOFOLLOW`). An existing file keeps its mode; a symlink is an error that says so.
pub fn create(path: &Path) -> io::Result<File> {
    let fresh = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    match fresh {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        other => return other,
    }
    let existing = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a symbolic link, which is never followed for output (remove it or name the target)",
                )
            } else {
                e
            }
        })?;
    let meta = existing.metadata()?;
    // A FIFO or a character device (/dev/null) is written as it is; only a regular file is
    // cut to nothing first.
    if meta.is_file() {
        existing.set_len(0)?;
    }
    Ok(existing)
}

#[cfg(test)]
mod tests {
    use std::{
        fs,
        io::Write as _,
        os::unix::fs::{PermissionsExt as _, symlink},
    };

    use super::*;

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("iosched-out-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_new_file_is_private() {
        let dir = scratch("new");
        let path = dir.join("t.istrace");
        create(&path).unwrap().write_all(b"x").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_existing_file_is_truncated() {
        let dir = scratch("old");
        let path = dir.join("t.istrace");
        fs::write(&path, b"a much longer old content").unwrap();
        create(&path).unwrap().write_all(b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_untouched() {
        let dir = scratch("link");
        let target = dir.join("precious");
        fs::write(&target, b"keep me").unwrap();
        let link = dir.join("t.istrace");
        symlink(&target, &link).unwrap();
        let err = create(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(fs::read(&target).unwrap(), b"keep me");
        // A dangling link too: O_EXCL refuses to create through it.
        let dangling = dir.join("d.istrace");
        symlink(dir.join("nowhere"), &dangling).unwrap();
        assert!(create(&dangling).is_err());
        assert!(!dir.join("nowhere").exists());
        fs::remove_dir_all(dir).unwrap();
    }
}
