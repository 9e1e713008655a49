//! A capture as `record` and `live` both run it: the running kernel read as the programs
//! need it here ([`Kernel`]), the traced devices described, and a [`Session`]: the
//! programs attached, every event drained checked against the disks' own completion
//! counters ([`CompletionTally`]), and the loss counters read with that check.
//!
//! Owns: that setup, in order, and feeding every drained event to the check. Must not:
//! choose the programs (the caller's [`CaptureOptions`]) or do anything with the events
//! (the recorder stores them, the live collector cuts them into intervals).

use anyhow::Context;

use super::{Capture, CaptureError, CaptureOptions};
use crate::{btf::Btf, completions::CompletionTally, devices::Disk, probe::KernelLayout};
use iosched_core::{
    event::Event,
    record::{DeviceInfo, Stats},
};

/// The running kernel, as the programs are to see it.
pub struct Kernel {
    pub btf: Btf,
    pub layout: KernelLayout,
    /// The io controller is on a cgroup v1 hierarchy here: `layout.bio_cgroup` is off.
    pub blkio_v1: bool,
    /// Why RLIMIT_MEMLOCK could not be raised, if it could not (fine on kernels >= 5.11).
    pub memlock_error: Option<std::io::Error>,
}

impl Kernel {
    /// Reads the kernel's BTF and the layout the programs need, and raises the memlock
    /// limit for the maps.
    pub fn prepare() -> anyhow::Result<Kernel> {
        let btf = Btf::from_sys()?;
        let mut layout = KernelLayout::from_btf(&btf)?;
        // A bio's blkcg lives in the hierarchy that holds the io controller. When that is a
        // v1 `blkio` mount (hybrid hosts), its ids are not cgroup2 ids, and mixing the two in
        // one field would attribute I/O to the wrong cgroup: use the submitting task's
        // cgroup2 id.
        let blkio_v1 = crate::system::blkio_on_cgroup_v1();
        if blkio_v1 {
            layout.bio_cgroup = false;
        }
        let memlock_error = crate::preflight::bump_memlock().err();
        Ok(Kernel {
            btf,
            layout,
            blkio_v1,
            memlock_error,
        })
    }
}

/// The traced disks' settings (scheduler, tunables), for the recording's header and the
/// live view.
pub fn describe_devices(disks: &[Disk]) -> anyhow::Result<Vec<DeviceInfo>> {
    disks
        .iter()
        .map(|d| DeviceInfo::from_sysfs(&d.name))
        .collect::<Result<_, _>>()
        .context("reading device settings from sysfs")
}

/// Attached programs and the completion check of what they send.
pub struct Session {
    capture: Capture,
    tally: CompletionTally,
}

impl Session {
    /// Loads and attaches the programs (inside a tokio runtime, as [`Capture::start`]),
    /// then reads the disks' completion counters: a completion from here on is either
    /// traced or missing from the trace. No disks (every device traced): every
    /// request-based disk is checked.
    pub fn start(options: &CaptureOptions, kernel: &Kernel) -> Result<Session, CaptureError> {
        let capture = Capture::start(options, &kernel.layout, &kernel.btf)?;
        let tally = if options.disks.is_empty() {
            CompletionTally::start(
                &crate::devices::Sysfs::default()
                    .request_based_disks()
                    .unwrap_or_default(),
            )
        } else {
            CompletionTally::start(&options.disks)
        };
        Ok(Session { capture, tally })
    }

    /// Programs attached.
    pub fn attached(&self) -> &[&'static str] {
        &self.capture.attached
    }

    /// Events from before the last program was attached or after the first was detached,
    /// left out ([`Capture::outside_window`]).
    pub fn outside_window(&self) -> u64 {
        self.capture.outside_window()
    }

    /// Optional programs left out, with why.
    pub fn skipped(&self) -> &[(&'static str, String)] {
        &self.capture.skipped
    }

    /// [`Capture::program_costs`], once stopped.
    pub fn program_costs(&self) -> &[crate::capture::ProgramCost] {
        self.capture.program_costs()
    }

    /// [`Capture::next_batch`]: appends what the kernel sent to `out`, each event also
    /// passed to the completion check.
    pub async fn next_batch(
        &mut self,
        out: &mut Vec<Event>,
        timeout: std::time::Duration,
    ) -> Result<(), CaptureError> {
        let from = out.len();
        // The only await is before anything is appended: a caller's `select!` dropping
        // this future loses no event to the check.
        self.capture.next_batch(out, timeout).await?;
        for ev in &out[from..] {
            self.tally.event(ev);
        }
        Ok(())
    }

    /// The loss counters now, with the completion check as of `settled_ns` (every event
    /// produced before it has been drained) and a new snapshot of the disks' counters.
    pub fn checkpoint(&mut self, settled_ns: u64) -> Result<Stats, CaptureError> {
        self.tally.settle(settled_ns);
        self.tally.snapshot();
        self.stats()
    }

    /// Detaches the programs and appends what was still in the ring to `out`; returns the
    /// final counters and check. Detached first, then drained: nothing produced before the
    /// detach is left behind.
    pub fn stop(&mut self, out: &mut Vec<Event>) -> Result<Stats, CaptureError> {
        self.tally.snapshot();
        self.capture.detach()?;
        let from = out.len();
        self.capture.drain(out);
        for ev in &out[from..] {
            self.tally.event(ev);
        }
        self.tally.settle(u64::MAX);
        self.stats()
    }

    fn stats(&self) -> Result<Stats, CaptureError> {
        let mut stats = self.capture.stats()?;
        stats.completions = self.tally.checks();
        Ok(stats)
    }
}
