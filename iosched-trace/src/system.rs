//! What the host says about itself, read from `/proc` and `/sys`: its mount table, its
//! cgroup hierarchies (where cgroup2 is, whether the io controller is on v1, a cgroup id's
//! path), this process's capabilities, and a disk's completion counters.
//!
//! Owns: reading and parsing those files, each in one place. Must not: change anything
//! (raising limits is `preflight`'s, tracefs settings `schedlog`'s), nor decide what a fact
//! means for a capture. Naming disks from sysfs is `devices`'s; a device's settings for the
//! recording header are read by `iosched_core::record` (`DeviceInfo::from_sysfs`).

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use iosched_core::record::DiskCounters;

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount point, as the kernel writes it (spaces and such octal-escaped, `\040`).
    pub dir: PathBuf,
    pub fstype: String,
    /// Mount options (`rw`, `nosuid`, and for a cgroup v1 hierarchy its controllers).
    pub options: Vec<String>,
}

/// This process's mount table (`/proc/self/mounts`); empty if it cannot be read.
pub fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|text| parse_mounts(&text))
        .unwrap_or_default()
}

/// The lines of a `/proc/self/mounts` (fstab format: device, directory, type, options, ...);
/// lines without a type are skipped.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_device, dir, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            Some(Mount {
                dir: PathBuf::from(dir),
                fstype: fstype.to_string(),
                options: fields
                    .next()
                    .map(|o| o.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` or `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Option<PathBuf> {
    cgroup2_root_in(&mounts())
}

fn cgroup2_root_in(mounts: &[Mount]) -> Option<PathBuf> {
    mounts
        .iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.dir.clone())
}

/// Whether the block I/O controller is on a cgroup v1 hierarchy (a `blkio` mount, on
/// hybrid hosts): a bio's blkcg is then a v1 cgroup, whose ids are not cgroup2 ids.
pub fn blkio_on_cgroup_v1() -> bool {
    blkio_on_cgroup_v1_in(&mounts())
}

fn blkio_on_cgroup_v1_in(mounts: &[Mount]) -> bool {
    mounts
        .iter()
        .any(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "blkio"))
}

/// cgroup v2 id -> path. The id is the cgroup directory's inode number in the cgroup2
/// filesystem, so a walk of that mount finds it (only that mount: hybrid hosts also mount a
/// tmpfs and v1 hierarchies under /sys/fs/cgroup, whose inode numbers collide). The walk is
/// redone, at most once a second, for ids not yet known.
#[derive(Default)]
pub struct CgroupPaths {
    known: HashMap<u64, String>,
    last_walk: Option<Instant>,
}

impl CgroupPaths {
    /// The path of cgroup `id` below the cgroup2 root (`/` for the root), if it is known or
    /// a walk finds it; `None` for id 0 (no cgroup).
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.known.contains_key(&id)
            && self
                .last_walk
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.walk();
        }
        self.known.get(&id).cloned()
    }

    fn walk(&mut self) {
        use std::os::unix::fs::MetadataExt;
        self.last_walk = Some(Instant::now());
        let Some(root) = cgroup2_root() else {
            return;
        };
        let Ok(root_meta) = std::fs::metadata(&root) else {
            return;
        };
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            if meta.dev() != root_meta.dev() {
                continue;
            }
            let relative = dir
                .strip_prefix(&root)
                .map(|p| format!("/{}", p.display()))
                .unwrap_or_default();
            self.known.insert(meta.ino(), relative);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .filter_map(|e| e.ok())
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
}

/// This process's effective capabilities (`CapEff` of `/proc/self/status`).
pub fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Reads `/sys/block/<name>/stat` now (Documentation/block/stat.rst: fields 1, 5 and 12
/// are reads, writes and discards completed, field 9 the requests in flight; kernels
/// before 4.18 have no discard fields).
pub fn read_disk_counters(name: &str) -> io::Result<DiskCounters> {
    read_disk_counters_at(Path::new("/sys/block"), name)
}

/// As [`read_disk_counters`] under another root than `/sys/block` (tests).
pub fn read_disk_counters_at(root: &Path, name: &str) -> io::Result<DiskCounters> {
    let path = root.join(name).join("stat");
    let text = std::fs::read_to_string(&path)?;
    let ts_ns = iosched_core::record::ClockBase::now().monotonic_ns;
    DiskCounters::parse_stat(&text, ts_ns).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a block device stat line: {text:?}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid host's table (systemd's layout): a tmpfs, cgroup2 at `unified`, v1
    /// hierarchies beside it, one of them with the io controller.
    const HYBRID: &str = "\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/blkio cgroup rw,nosuid,nodev,noexec,relatime,blkio 0 0
";

    #[test]
    fn mounts_are_parsed_and_cgroup_hierarchies_found() {
        let mounts = parse_mounts(HYBRID);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[2].fstype, "cgroup2");
        assert_eq!(
            cgroup2_root_in(&mounts).as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(blkio_on_cgroup_v1_in(&mounts));
        // cgroup2 only: no v1 blkio, and cgroup2's options never count as controllers.
        let unified = parse_mounts(
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,blkio 0 0\n\
             short line\n",
        );
        assert_eq!(unified.len(), 1);
        assert_eq!(
            cgroup2_root_in(&unified).as_deref(),
            Some(Path::new("/sys/fs/cgroup"))
        );
        assert!(!blkio_on_cgroup_v1_in(&unified));
        // A line without options is still a mount, with none.
        assert_eq!(
            parse_mounts("none /x cgroup\n")[0].options,
            Vec::<String>::new()
        );
    }

    #[test]
    fn cgroup_root_resolves_when_cgroup2_is_mounted() {
        use std::os::unix::fs::MetadataExt;
        let Some(meta) = cgroup2_root().and_then(|r| std::fs::metadata(r).ok()) else {
            return;
        };
        let mut paths = CgroupPaths::default();
        assert_eq!(paths.path(meta.ino()).as_deref(), Some("/"));
        assert_eq!(paths.path(0), None);
    }
}
