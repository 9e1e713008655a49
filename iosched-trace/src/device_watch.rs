//! The traced devices watched while a recording runs: a scheduler switched under it, a device
//! removed, a loop device's backing file detached or attached again. No tracepoint reports
//! these, so the recorder polls sysfs (every CPU sample, 100 ms: a few small reads) and
//! writes what changed into the recording's statistics, where `report` splits a device's
//! figures at a scheduler switch and `dump` lists them.
//!
//! Owns: reading that state and telling changes apart. Must not: decide what the recording
//! does about a change (the recorder keeps going: a removed device's events up to then stay,
//! the other devices are still traced).

use std::{
    fs,
    path::{Path, PathBuf},
};

use iosched_core::{
    event::Dev,
    record::{DeviceChange, DeviceChangeKind},
};

use crate::devices::Disk;

/// What sysfs says of one device now.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    /// `None`: gone (no `/sys/block/<name>`, or it is another device now).
    scheduler: Option<String>,
    present: bool,
    /// Loop devices: whether a backing file is attached (`None` for other devices).
    backed: Option<bool>,
}

struct Watched {
    name: String,
    dev: Dev,
    last: Seen,
}

pub struct DeviceWatch {
    root: PathBuf,
    devices: Vec<Watched>,
    changes: Vec<DeviceChange>,
}

impl DeviceWatch {
    /// Starts watching `disks` as they are now.
    pub fn new(disks: &[Disk]) -> DeviceWatch {
        DeviceWatch::at(Path::new("/sys/block"), disks)
    }

    /// As [`new`](Self::new) with another sysfs `block` directory (tests).
    fn at(root: &Path, disks: &[Disk]) -> DeviceWatch {
        let devices = disks
            .iter()
            .map(|d| Watched {
                name: d.name.clone(),
                dev: d.dev,
                last: read(root, &d.name, d.dev),
            })
            .collect();
        DeviceWatch {
            root: root.to_path_buf(),
            devices,
            changes: Vec::new(),
        }
    }

    /// Reads every device again; the changes since the last poll, stamped `ts_ns`.
    pub fn poll(&mut self, ts_ns: u64) -> &[DeviceChange] {
        let before = self.changes.len();
        for d in &mut self.devices {
            if !d.last.present {
                // A removed device's name may be reused by a new device: that is not ours.
                continue;
            }
            let now = read(&self.root, &d.name, d.dev);
            let mut change = |what| {
                self.changes.push(DeviceChange {
                    ts_ns,
                    device: d.name.clone(),
                    dev: d.dev,
                    what,
                })
            };
            if !now.present {
                change(DeviceChangeKind::Removed);
            } else {
                if let (Some(from), Some(to)) = (&d.last.scheduler, &now.scheduler)
                    && from != to
                {
                    change(DeviceChangeKind::Scheduler {
                        from: from.clone(),
                        to: to.clone(),
                    });
                }
                match (d.last.backed, now.backed) {
                    (Some(true), Some(false)) => change(DeviceChangeKind::Detached),
                    (Some(false), Some(true)) => change(DeviceChangeKind::Reattached),
                    _ => {}
                }
            }
            d.last = now;
        }
        &self.changes[before..]
    }

    /// Every change seen so far, in order.
    pub fn changes(&self) -> &[DeviceChange] {
        &self.changes
    }
}

fn read(root: &Path, name: &str, dev: Dev) -> Seen {
    let dir = root.join(name);
    let present = fs::read_to_string(dir.join("dev"))
        .ok()
        .is_some_and(|t| t.trim() == format!("{}:{}", dev.major, dev.minor));
    if !present {
        return Seen {
            scheduler: None,
            present: false,
            backed: None,
        };
    }
    let scheduler = fs::read_to_string(dir.join("queue/scheduler"))
        .ok()
        .and_then(|t| iosched_core::record::active_scheduler(&t).map(str::to_owned));
    // A loop device has `loop/backing_file` only while a file is attached.
    let backed = name
        .starts_with("loop")
        .then(|| dir.join("loop/backing_file").exists());
    Seen {
        scheduler,
        present,
        backed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(name: &str, minor: u32) -> Disk {
        Disk {
            name: name.into(),
            dev: Dev { major: 7, minor },
            request_based: true,
        }
    }

    fn device(root: &Path, name: &str, minor: u32, scheduler: &str, backed: bool) {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("queue")).unwrap();
        fs::create_dir_all(dir.join("loop")).unwrap();
        fs::write(dir.join("dev"), format!("7:{minor}\n")).unwrap();
        fs::write(dir.join("queue/scheduler"), scheduler).unwrap();
        let backing = dir.join("loop/backing_file");
        if backed {
            fs::write(backing, "/dev/shm/x.img\n").unwrap();
        } else {
            let _ = fs::remove_file(backing);
        }
    }

    #[test]
    fn switches_removals_and_detaches_are_seen_once_each() {
        let root = std::env::temp_dir().join(format!("iosched-watch-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        device(&root, "loop0", 0, "none [mq-deadline] kyber bfq\n", true);
        device(&root, "loop1", 1, "[none] mq-deadline kyber bfq\n", true);
        let mut watch = DeviceWatch::at(&root, &[disk("loop0", 0), disk("loop1", 1)]);
        assert!(watch.poll(1).is_empty(), "nothing changed yet");

        device(&root, "loop0", 0, "none mq-deadline kyber [bfq]\n", true);
        device(&root, "loop1", 1, "[none] mq-deadline kyber bfq\n", false);
        let seen: Vec<_> = watch.poll(2).iter().map(|c| c.what.clone()).collect();
        assert_eq!(
            seen,
            [
                DeviceChangeKind::Scheduler {
                    from: "mq-deadline".into(),
                    to: "bfq".into()
                },
                DeviceChangeKind::Detached
            ]
        );
        assert!(watch.poll(3).is_empty(), "a change is reported once");

        // loop1 removed, and its name reused by another device: only the removal counts.
        fs::remove_dir_all(root.join("loop1")).unwrap();
        let gone = watch.poll(4).to_vec();
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].device.as_str(), gone[0].ts_ns), ("loop1", 4));
        assert_eq!(gone[0].what, DeviceChangeKind::Removed);
        device(&root, "loop1", 9, "[none]\n", true);
        assert!(watch.poll(5).is_empty());
        assert_eq!(watch.changes().len(), 3);
        assert_eq!(
            watch.changes()[0].describe(0),
            "loop0: scheduler mq-deadline -> bfq at 0.000 s"
        );
        fs::remove_dir_all(&root).unwrap();
    }
}
