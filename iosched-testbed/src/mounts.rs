//! Our mount namespace's mounts, from `/proc/self/mountinfo`: whether a path is a mount point
//! (the emulated disk's FUSE file, a scenario's ext4), where a file system type is mounted
//! (`cargo xtask setup`'s tracefs, a scenario's cgroup hierarchy). Read-only.
//!
//! Mount points are compared as the kernel prints them: it escapes space, tab, newline and
//! backslash as octal (`\040`), which none of our paths contain.

use std::{fs, io, path::Path};

/// One line of mountinfo: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPEROPTIONS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: String,
    pub fs_type: String,
    /// The file system's own options (a cgroup v1 hierarchy's controllers: `rw,blkio`).
    pub super_options: String,
}

/// The mounts of `/proc/self/mountinfo`.
pub fn mounts() -> io::Result<Vec<Mount>> {
    fs::read_to_string("/proc/self/mountinfo").map(|text| parse_mountinfo(&text))
}

/// The mounts of mountinfo `text`, in its order (lines it cannot read left out).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            // Optional fields end at "-", which comes after the six fixed ones.
            let dash = fields.iter().skip(6).position(|f| *f == "-")? + 6;
            Some(Mount {
                mount_point: (*fields.get(4)?).to_owned(),
                fs_type: (*fields.get(dash + 1)?).to_owned(),
                super_options: fields.get(dash + 3).copied().unwrap_or("").to_owned(),
            })
        })
        .collect()
}

/// Whether `path` is a mount point (not when mountinfo cannot be read).
pub fn is_mount_point(path: &Path) -> bool {
    mounts().is_ok_and(|mounts| mounts.iter().any(|m| Path::new(&m.mount_point) == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:5 - proc proc rw
25 1 0:23 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate
26 25 0:24 / /sys/fs/cgroup/blkio rw,nosuid - cgroup cgroup rw,blkio
31 22 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:12 master:3 - tracefs tracefs rw
bad line
";

    #[test]
    fn reads_mount_points_types_and_options() {
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(mounts.len(), 4);
        assert_eq!(
            mounts[2],
            Mount {
                mount_point: "/sys/fs/cgroup/blkio".into(),
                fs_type: "cgroup".into(),
                super_options: "rw,blkio".into(),
            }
        );
        // Several optional fields before the dash.
        assert_eq!(mounts[3].mount_point, "/sys/kernel/tracing");
        assert_eq!(mounts[3].fs_type, "tracefs");
        assert_eq!(mounts[1].fs_type, "cgroup2");
    }

    #[test]
    fn a_path_nobody_mounted_is_no_mount_point() {
        assert!(!is_mount_point(Path::new("/no/such/mount/point")));
    }
}
