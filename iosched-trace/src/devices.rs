//! Naming block devices the way users do (`/dev/loop0`, `loop0`, `7:0`, a partition) and
//! finding the whole disk behind each, from sysfs.
//!
//! Owns: device-spec parsing and sysfs lookups of disks. Must not: change any device setting.

use std::{
    fs,
    path::{Path, PathBuf},
};

use iosched_core::event::Dev;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("no such block device: {spec} (try a name from /sys/block, e.g. loop0 or sda)")]
    NotFound { spec: String },
    #[error("cannot read {path}: {source}")]
    Sysfs {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A whole disk as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    /// Name under /sys/block (e.g. `loop0`).
    pub name: String,
    pub dev: Dev,
    /// blk-mq devices have request-level events (and a scheduler); bio-based ones (zram,
    /// device-mapper, md) only have bio events.
    pub request_based: bool,
}

/// Where sysfs lives; tests point this elsewhere.
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/sys"),
        }
    }
}

impl Sysfs {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Resolves `/dev/NAME`, `NAME` or `MAJ:MIN`; a partition resolves to its disk.
    pub fn resolve(&self, spec: &str) -> Result<Disk, DeviceError> {
        let not_found = || DeviceError::NotFound {
            spec: spec.to_string(),
        };
        let class = self.root.join("class/block");
        let name = if let Some((major, minor)) = parse_maj_min(spec) {
            // /sys/dev/block/MAJ:MIN links to the device directory.
            let link = self.root.join(format!("dev/block/{major}:{minor}"));
            let target = fs::canonicalize(&link).map_err(|_| not_found())?;
            file_name(&target).ok_or_else(not_found)?
        } else {
            let path = Path::new(spec);
            // /dev/NAME: follow symlinks (/dev/disk/by-id/...) to the node's name.
            let resolved = if spec.starts_with('/') {
                fs::canonicalize(path).map_err(|_| not_found())?
            } else {
                path.to_path_buf()
            };
            file_name(&resolved).ok_or_else(not_found)?
        };
        let device_dir = fs::canonicalize(class.join(&name)).map_err(|_| not_found())?;
        // A partition's directory sits inside its disk's and has a `partition` file.
        let disk_dir = if device_dir.join("partition").exists() {
            device_dir.parent().ok_or_else(not_found)?.to_path_buf()
        } else {
            device_dir
        };
        let disk_name = file_name(&disk_dir).ok_or_else(not_found)?;
        self.disk(&disk_name)
    }

    /// The disk `name` (as in /sys/block).
    pub fn disk(&self, name: &str) -> Result<Disk, DeviceError> {
        let dir = self.root.join("block").join(name);
        let dev_path = dir.join("dev");
        let text = fs::read_to_string(&dev_path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                DeviceError::NotFound {
                    spec: name.to_string(),
                }
            } else {
                DeviceError::Sysfs {
                    path: dev_path.clone(),
                    source,
                }
            }
        })?;
        let (major, minor) = parse_maj_min(text.trim()).ok_or_else(|| DeviceError::NotFound {
            spec: name.to_string(),
        })?;
        Ok(Disk {
            name: name.to_string(),
            dev: Dev { major, minor },
            request_based: dir.join("mq").is_dir(),
        })
    }

    /// Every disk in /sys/block, request-based or not, sorted by name.
    pub fn disks(&self) -> Result<Vec<Disk>, DeviceError> {
        let dir = self.root.join("block");
        let entries = fs::read_dir(&dir).map_err(|source| DeviceError::Sysfs {
            path: dir.clone(),
            source,
        })?;
        let mut disks: Vec<Disk> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| self.disk(&e.file_name().to_string_lossy()).ok())
            .collect();
        disks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(disks)
    }

    /// Whether disk `name` has a medium: a size above 0. A detached loop device, an nbd not
    /// connected and an empty drive stay in /sys/block with size 0 and can do no I/O.
    pub fn has_medium(&self, name: &str) -> bool {
        fs::read_to_string(self.root.join("block").join(name).join("size"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .is_some_and(|sectors| sectors > 0)
    }

    /// Every disk in /sys/block that has request-level events (blk-mq), sorted by name.
    pub fn request_based_disks(&self) -> Result<Vec<Disk>, DeviceError> {
        let mut disks = self.disks()?;
        disks.retain(|d| d.request_based);
        Ok(disks)
    }
}

fn file_name(path: &Path) -> Option<String> {
    Some(path.file_name()?.to_string_lossy().into_owned())
}

fn parse_maj_min(spec: &str) -> Option<(u32, u32)> {
    let (major, minor) = spec.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake sysfs with a disk `vdz` (253:0) holding partition `vdz1` (253:1), and a
    /// bio-based `zram9` (252:0).
    fn fake_sysfs() -> (tempdir::Dir, Sysfs) {
        let dir = tempdir::Dir::new();
        let root = dir.path();
        let devices = root.join("devices/virtual/block");
        let vdz = devices.join("vdz");
        let vdz1 = vdz.join("vdz1");
        let zram = devices.join("zram9");
        for d in [&vdz1, &vdz.join("mq"), &zram] {
            fs::create_dir_all(d).unwrap();
        }
        fs::write(vdz.join("dev"), "253:0\n").unwrap();
        fs::write(vdz1.join("dev"), "253:1\n").unwrap();
        fs::write(vdz1.join("partition"), "1\n").unwrap();
        fs::write(zram.join("dev"), "252:0\n").unwrap();
        for sub in ["block", "class/block", "dev/block"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        let link = |target: &Path, at: PathBuf| std::os::unix::fs::symlink(target, at).unwrap();
        link(&vdz, root.join("block/vdz"));
        link(&zram, root.join("block/zram9"));
        link(&vdz, root.join("class/block/vdz"));
        link(&vdz1, root.join("class/block/vdz1"));
        link(&zram, root.join("class/block/zram9"));
        link(&vdz, root.join("dev/block/253:0"));
        link(&vdz1, root.join("dev/block/253:1"));
        let sysfs = Sysfs::at(root);
        (dir, sysfs)
    }

    #[test]
    fn all_spellings_resolve_to_the_disk() {
        let (_dir, sysfs) = fake_sysfs();
        let want = Disk {
            name: "vdz".into(),
            dev: Dev {
                major: 253,
                minor: 0,
            },
            request_based: true,
        };
        for spec in ["vdz", "vdz1", "253:0", "253:1"] {
            assert_eq!(sysfs.resolve(spec).unwrap(), want, "{spec}");
        }
    }

    #[test]
    fn bio_based_and_missing_devices() {
        let (_dir, sysfs) = fake_sysfs();
        assert!(!sysfs.resolve("zram9").unwrap().request_based);
        let err = sysfs.resolve("nvme7n1").unwrap_err().to_string();
        assert!(err.starts_with("no such block device: nvme7n1"), "{err}");
        assert!(sysfs.resolve("9:9").is_err());
        assert!(sysfs.resolve("/dev/definitely-not-here").is_err());
        let names: Vec<_> = sysfs
            .request_based_disks()
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names, ["vdz"]);
        let all: Vec<_> = sysfs.disks().unwrap().into_iter().map(|d| d.name).collect();
        assert_eq!(all, ["vdz", "zram9"]);
    }

    #[test]
    fn real_sysfs_loop_control_is_not_a_disk() {
        // Whatever this machine has, resolving a character device name fails cleanly.
        assert!(Sysfs::default().resolve("/dev/null").is_err());
    }

    /// A temporary directory removed on drop (no extra dependency for one test helper).
    mod tempdir {
        use std::path::{Path, PathBuf};

        pub struct Dir(PathBuf);

        impl Dir {
            pub fn new() -> Self {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let path = std::env::temp_dir()
                    .join(format!("iosched-trace-devices-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&path).unwrap();
                Self(path)
            }

            pub fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
