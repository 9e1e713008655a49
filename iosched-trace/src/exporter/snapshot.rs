//! What a scrape read out of the kernel: the exporter's maps and the devices they were
//! about, as plain data (`kernel` fills it, `families` names it).

use std::collections::BTreeMap;

use iosched_core::record::DeviceInfo;
use iosched_trace_common::exporter::{CgroupIo, DevCgroup, DevOpCgroup, DevState, IdleWaste};

use crate::devices::Disk;

/// What the maps held at one scrape, with the devices they were about.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Traced devices by kernel `dev_t`, with their sysfs settings now (`None`: could not
    /// be read, the device is going away).
    pub devices: BTreeMap<u32, (Disk, Option<DeviceInfo>)>,
    pub dev_state: Vec<(u32, DevState)>,
    /// Per device: completions the kernel counted that the programs never saw (a lower
    /// bound, `untraced`).
    pub untraced: BTreeMap<u32, u64>,
    pub io: Vec<(DevOpCgroup, CgroupIo)>,
    pub idle: Vec<(DevCgroup, IdleWaste)>,
    /// `EXP_STATS`, summed over CPUs, by `exporter::stat` index.
    pub stats: Vec<u64>,
    /// Each program's run time (ns) and runs, while `kernel.bpf_stats_enabled` is 1.
    pub programs: Vec<ProgramCost>,
}

pub use crate::capture::ProgramCost;
