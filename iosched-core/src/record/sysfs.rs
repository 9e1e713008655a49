//! Describing a block device from sysfs for the recording header.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use super::DeviceInfo;
use crate::event::Dev;

pub(super) fn read_trimmed(path: impl AsRef<Path>) -> io::Result<String> {
    Ok(fs::read_to_string(path)?.trim().to_string())
}

impl DeviceInfo {
    /// Reads `/sys/block/<name>`: the device number is required, every other attribute is
    /// optional (older kernels and some drivers lack some).
    pub fn from_sysfs(name: &str) -> io::Result<DeviceInfo> {
        Self::from_sysfs_root(Path::new("/sys/block"), name)
    }

    /// As [`from_sysfs`](Self::from_sysfs) with another root than `/sys/block` (tests).
    pub fn from_sysfs_root(root: &Path, name: &str) -> io::Result<DeviceInfo> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a block device name (expected e.g. sda, loop0)"),
            ));
        }
        let dir = root.join(name);
        let dev_path = dir.join("dev");
        let dev_text = read_trimmed(&dev_path).map_err(|e| {
            let hint = if e.kind() == io::ErrorKind::NotFound {
                ": no such whole block device (partitions are traced through their disk; \
                 see /sys/block for names)"
            } else {
                ""
            };
            io::Error::new(e.kind(), format!("{}: {e}{hint}", dev_path.display()))
        })?;
        let dev = parse_dev(&dev_text).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: expected MAJOR:MINOR, found {dev_text:?}",
                    dev_path.display()
                ),
            )
        })?;
        let queue = dir.join("queue");
        let opt = |p: PathBuf| read_trimmed(p).ok().filter(|s| !s.is_empty());
        let num = |file: &str| opt(queue.join(file)).and_then(|s| s.parse::<u32>().ok());
        Ok(DeviceInfo {
            name: name.to_string(),
            dev,
            model: opt(dir.join("device/model")),
            rotational: opt(queue.join("rotational")).and_then(|s| match s.as_str() {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            }),
            logical_block_size: num("logical_block_size"),
            nr_requests: num("nr_requests"),
            nomerges: num("nomerges").and_then(|n| u8::try_from(n).ok()),
            max_sectors_kb: num("max_sectors_kb"),
            scheduler: opt(queue.join("scheduler"))
                .and_then(|s| active_scheduler(&s).map(str::to_owned)),
            iosched: read_iosched(&queue.join("iosched")),
            request_based: dir.join("mq").is_dir(),
        })
    }
}

fn parse_dev(s: &str) -> Option<Dev> {
    let (major, minor) = s.split_once(':')?;
    Some(Dev {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
    })
}

/// The active entry of a `queue/scheduler` file: `mq-deadline kyber [bfq] none` -> `bfq`; a
/// lone unbracketed entry (a bio-based device's `none`) is active too.
pub fn active_scheduler(contents: &str) -> Option<&str> {
    let mut entries = contents.split_whitespace();
    let bracketed = entries
        .clone()
        .find_map(|s| s.strip_prefix('[')?.strip_suffix(']'));
    match (bracketed, entries.next(), entries.next()) {
        (Some(active), _, _) => Some(active),
        (None, Some(only), None) => Some(only),
        _ => None,
    }
}

/// Every readable file under `queue/iosched/`; unreadable ones (write-only, EPERM) are left out.
fn read_iosched(dir: &Path) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return values;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        if let (Some(name), Ok(value)) = (entry.file_name().to_str(), read_trimmed(&path)) {
            values.insert(name.to_string(), value);
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "iosched-trace-test-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        fn write(&self, rel: &str, text: &str) {
            let p = self.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_a_blk_mq_device() {
        let t = TempDir::new("sda");
        t.write("sda/dev", "8:0\n");
        t.write("sda/device/model", "Samsung SSD 870 \n");
        t.write("sda/queue/rotational", "0\n");
        t.write("sda/queue/logical_block_size", "512\n");
        t.write("sda/queue/nr_requests", "64\n");
        t.write("sda/queue/nomerges", "2\n");
        t.write("sda/queue/max_sectors_kb", "1280\n");
        t.write("sda/queue/scheduler", "mq-deadline kyber [bfq] none\n");
        t.write("sda/queue/iosched/slice_idle", "8\n");
        t.write("sda/queue/iosched/low_latency", "1\n");
        fs::create_dir_all(t.0.join("sda/mq/0")).unwrap();
        let d = DeviceInfo::from_sysfs_root(&t.0, "sda").unwrap();
        assert_eq!(d.name, "sda");
        assert_eq!(d.dev, Dev { major: 8, minor: 0 });
        assert_eq!(d.model.as_deref(), Some("Samsung SSD 870"));
        assert_eq!(d.rotational, Some(false));
        assert_eq!(d.logical_block_size, Some(512));
        assert_eq!(d.nr_requests, Some(64));
        assert_eq!(d.nomerges, Some(2));
        assert_eq!(d.max_sectors_kb, Some(1280));
        assert_eq!(d.scheduler.as_deref(), Some("bfq"));
        assert_eq!(d.iosched.get("slice_idle").map(String::as_str), Some("8"));
        assert_eq!(d.iosched.len(), 2);
        assert!(d.request_based);
    }

    #[test]
    fn reads_a_bio_based_device_and_names_missing_ones() {
        let t = TempDir::new("zram");
        t.write("zram0/dev", "252:0\n");
        t.write("zram0/queue/scheduler", "none\n");
        let d = DeviceInfo::from_sysfs_root(&t.0, "zram0").unwrap();
        assert_eq!(d.scheduler.as_deref(), Some("none"));
        assert!(!d.request_based);
        assert_eq!(d.model, None);
        assert!(d.iosched.is_empty());
        assert_eq!((d.nomerges, d.max_sectors_kb), (None, None));

        let err = DeviceInfo::from_sysfs_root(&t.0, "sdz").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("sdz/dev"), "{err}");
        assert!(DeviceInfo::from_sysfs_root(&t.0, "../etc").is_err());
    }

    #[test]
    fn active_scheduler_forms() {
        assert_eq!(active_scheduler("[none] mq-deadline"), Some("none"));
        assert_eq!(active_scheduler("none"), Some("none"));
        assert_eq!(active_scheduler("mq-deadline kyber"), None);
        assert_eq!(
            active_scheduler("none [mq-deadline] kyber bfq\n"),
            Some("mq-deadline")
        );
        assert_eq!(active_scheduler("none\n"), Some("none"));
        assert_eq!(active_scheduler(""), None);
    }
}
