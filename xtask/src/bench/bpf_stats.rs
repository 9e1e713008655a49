//! `kernel.bpf_stats_enabled`, switched on for one window of a bench: the kernel then counts
//! each program's runs and time (two clock reads a run, so not for the windows whose ratio
//! is the verdict).

use anyhow::Context as _;

pub(super) const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// `kernel.bpf_stats_enabled` set to 1 while it lives, restored to what it was on drop.
pub(super) struct BpfStats {
    before: String,
}

impl BpfStats {
    pub(super) fn enable() -> anyhow::Result<BpfStats> {
        let before = std::fs::read_to_string(BPF_STATS)
            .with_context(|| format!("reading {BPF_STATS}"))?
            .trim()
            .to_string();
        std::fs::write(BPF_STATS, "1").with_context(|| format!("writing 1 to {BPF_STATS}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, &self.before) {
            eprintln!("warning: restoring {BPF_STATS} to {}: {e}", self.before);
        }
    }
}
