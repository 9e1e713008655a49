//! The device a scenario runs on: the emulated rotational disk (the default), the emulated
//! flash device, or a RAM-backed loop device (a file in /dev/shm, direct I/O, marked
//! non-rotational). One guard whichever it is: queue settings put back and everything
//! detached and removed on drop.
//!
//! Owns: bringing the chosen device up and down. Must not: know about runs or workloads.

use std::{
    fs::File,
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use iosched_disk::FlashParams;

use super::ScenarioError;
use crate::{
    args::DeviceKind,
    loop_device::LoopDevice,
    rig::{Hdd, HddConfig},
};

/// Which device a scenario runs on.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Bed {
    /// The emulated rotational disk with its default parameters.
    #[default]
    Hdd,
    /// The emulated flash device.
    Flash(FlashParams),
    /// A loop device on a file in /dev/shm: as fast as the host's memory and CPUs.
    Ram,
}

impl Bed {
    /// `hdd`, `flash`, `ram`.
    pub fn name(&self) -> &'static str {
        match self {
            Bed::Hdd => "hdd",
            Bed::Flash(_) => "flash",
            Bed::Ram => "ram",
        }
    }
}

/// A device brought up for a scenario.
pub enum Device {
    Emulated(Hdd),
    Ram(LoopDevice),
}

impl Device {
    /// Brings `bed` up with its files in `dir` (on tmpfs; `dir` exists, and is removed by
    /// the caller after this guard is dropped).
    pub fn up(bed: &Bed, daemon_bin: &Path, dir: &Path, size: u64) -> Result<Self, ScenarioError> {
        match bed {
            Bed::Hdd | Bed::Flash(_) => {
                let mut config = HddConfig::new(daemon_bin, dir.join("disk"), size);
                if let Bed::Flash(params) = bed {
                    config.kind = DeviceKind::Flash;
                    config.flash = params.clone();
                }
                Ok(Device::Emulated(Hdd::up(&config)?))
            }
            Bed::Ram => {
                let file = dir.join("ram.img");
                allocate(&file, size)?;
                let dev = LoopDevice::attach(&file)?;
                if !dev.direct_io() {
                    return Err(ScenarioError::Io {
                        what: format!("{} did not enable direct I/O on tmpfs", dev.name()),
                        err: std::io::ErrorKind::Unsupported.into(),
                    });
                }
                dev.set_queue("rotational", "0")?;
                Ok(Device::Ram(dev))
            }
        }
    }

    pub fn set_queue(&mut self, attr: &str, value: &str) -> Result<(), ScenarioError> {
        match self {
            Device::Emulated(hdd) => Ok(hdd.set_queue(attr, value)?),
            Device::Ram(dev) => Ok(dev.set_queue(attr, value)?),
        }
    }

    pub fn queue_path(&self, attr: &str) -> PathBuf {
        match self {
            Device::Emulated(hdd) => hdd.queue_path(attr),
            Device::Ram(dev) => dev.queue_path(attr),
        }
    }

    /// `/dev/loopN`.
    pub fn device(&self) -> &Path {
        match self {
            Device::Emulated(hdd) => hdd.device(),
            Device::Ram(dev) => dev.dev(),
        }
    }

    /// `loopN`.
    pub fn name(&self) -> &str {
        match self {
            Device::Emulated(hdd) => hdd.name(),
            Device::Ram(dev) => dev.name(),
        }
    }

    /// Tears down now, reporting what could not be undone (the RAM device's guard reports
    /// on stderr).
    pub fn down(self) -> Result<(), ScenarioError> {
        match self {
            Device::Emulated(hdd) => Ok(hdd.down()?),
            Device::Ram(dev) => {
                drop(dev);
                Ok(())
            }
        }
    }
}

/// A file of `size` bytes whose memory is allocated now (tmpfs: zeroed pages), so that
/// reads of it cost what reads of data do, not of holes.
fn allocate(path: &Path, size: u64) -> Result<(), ScenarioError> {
    let err = |err| ScenarioError::Io {
        what: format!("allocating {} bytes for {}", size, path.display()),
        err,
    };
    let file = File::create(path).map_err(err)?;
    let len =
        libc::off_t::try_from(size).map_err(|_| err(std::io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: a valid open descriptor; fallocate has no memory-safety preconditions.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}
