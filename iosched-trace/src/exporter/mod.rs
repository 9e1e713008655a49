//! The exporter (`iosched-trace exporter`): an always-on daemon that serves in-kernel
//! aggregates of the block layer as Prometheus metrics (docs/EXPORTER.md).
//!
//! Unlike `record` and `live`, nothing per event reaches userspace: the exporter's programs
//! (in the same eBPF object, `exp_*`) keep per-request state, histograms and counters in BPF
//! maps, and a scrape reads the maps. That is what makes it cheap enough to leave running.
//!
//! - [`kernel`]: loading and attaching the exporter's programs, reading their maps into a
//!   [`snapshot::Snapshot`], forgetting devices that went away.
//! - [`families`]: a snapshot, sysfs and the cgroup tree into the metric families of
//!   `views::metrics`.
//! - `slots`: the programs' direct-mapped tables, mapped into this process for the scrape.
//! - [`untraced`]: the completions the programs never saw, from the kernel's own counters.
//! - [`daemon`]: binding, signals (SIGHUP reload, SIGTERM or SIGINT stop, which drops the
//!   collector), one scrape at a time, the daemon's own families.
//! - [`http`]: the endpoint: `GET`/`HEAD` on the telemetry path in the format the `Accept`
//!   header asks for, a landing page, limits on what a slow or hostile client can hold.

pub mod daemon;
pub mod families;
pub mod http;
pub mod kernel;
mod slots;
pub mod snapshot;
pub mod untraced;

use crate::views::metrics::Family;

/// What the daemon needs from whatever produces the metrics: the kernel collector in the
/// product, a fake one in the daemon's tests.
pub trait Collect: Send {
    /// Every family, read now (called once per scrape, never concurrently).
    fn collect(&mut self) -> anyhow::Result<Vec<Family>>;
    /// SIGHUP: re-read what may have changed outside (the devices to trace, cgroup names).
    fn reload(&mut self) -> anyhow::Result<()>;
}

/// The exporter's validated settings (from `cli`).
#[derive(Clone, Debug)]
pub struct ExporterConfig {
    /// Where to listen (`--web.listen-address`, default `127.0.0.1:9436`).
    pub listen: std::net::SocketAddr,
    /// The path metrics are served on (`--web.telemetry-path`, default `/metrics`).
    pub telemetry_path: String,
    /// Devices to trace by name (`-d`); empty: every request-based disk, including ones that
    /// appear later.
    pub devices: Vec<String>,
    /// Cgroups exposed by name; the rest are summed as `other` (`--cgroups`, default 20).
    pub max_cgroups: usize,
}
