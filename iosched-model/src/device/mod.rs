//! The device side of a replay: how long a request takes, fitted from the trace's own D2C, or
//! given as a profile.
//!
//! - Rotational: one actuator, requests served one at a time in issue order;
//!   `overhead + positioning(distance) + sectors x transfer`, positioning 0 when a request
//!   starts where the previous one ended. Before that, each request spends `latency` on its
//!   way to the disk and back (the host's driver path, a loop device's backing file, a
//!   transport): a request queued behind another covers it while the other is served, one
//!   dispatched to an idle disk pays it in full. Positioning is a table over log2 distance bins
//!   (Disk Mimic, Popovici et al., USENIX ATC'03): it needs no geometry and follows whatever
//!   seek curve and rotation the disk has.
//! - Non-rotational: `latency + sectors x transfer` on `parallelism` independent servers,
//!   reads and writes each with their own latency and transfer (flash programs slower than it
//!   reads; a write cache acknowledges sooner). A request that finds every server busy waits
//!   for the first free one, so at `n` in flight each takes `service x max(1, n / parallelism)`.
//!
//! Fitting uses service times, not D2C: on a device that serves in issue order a request's
//! service is `C - max(D, previous C)`, so queued requests count too. The latency shows as
//! the difference between requests of one kind dispatched to an idle device and queued ones.
//!
//! Owns: the device model's types and its service-time arithmetic. Must not: know about
//! schedulers. The fit from a trace is in `fit/` ([`fit()`]), the loading of a profile in
//! `profile.rs` ([`DeviceModel::load`]).

use serde::{Deserialize, Serialize};

mod fit;
mod profile;

pub use fit::{ASSUMED_LATENCY_NS, ASSUMED_OVERHEAD_NS, fit};

/// log2 distance bins (sectors): 2^0 .. 2^47.
const BINS: usize = 48;

/// A fitted or given device model.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DeviceModel {
    Rotational(RotationalModel),
    /// A profile in the test bed's terms (`iosched_disk::DiskParams`).
    Disk {
        #[serde(flatten)]
        params: iosched_disk::DiskParams,
        capacity_bytes: u64,
    },
    Flash(FlashModel),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RotationalModel {
    pub overhead_ns: f64,
    pub ns_per_sector: f64,
    /// Positioning time by floor(log2(distance in sectors)); `None` where the trace had no
    /// sample (filled from neighbours at use).
    pub positioning_ns: Vec<Option<f64>>,
    /// Time from dispatch until the disk can start the request, and from its end to the
    /// completion, which a queued request overlaps with the one before it (so it costs no
    /// throughput under a queue, but every request of a process that waits for its previous
    /// one pays it). 0 in profiles that predate it.
    #[serde(default)]
    pub latency_ns: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FlashModel {
    /// A read's fixed time, ns, and its transfer time per sector.
    pub latency_ns: f64,
    pub ns_per_sector: f64,
    pub parallelism: u32,
    /// A write's, where they differ from a read's (`None`: as a read; profiles before
    /// writes were fitted apart have neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency_ns: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_ns_per_sector: Option<f64>,
}

impl FlashModel {
    /// Latency and transfer per sector of a read, or of a write.
    pub fn costs(&self, write: bool) -> (f64, f64) {
        if write {
            (
                self.write_latency_ns.unwrap_or(self.latency_ns),
                self.write_ns_per_sector.unwrap_or(self.ns_per_sector),
            )
        } else {
            (self.latency_ns, self.ns_per_sector)
        }
    }
}

/// How well the model explains the trace's service times.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FitQuality {
    pub samples: u64,
    /// Coefficient of determination of per-request service times.
    pub r2: f64,
    /// Mean |predicted - observed| / mean observed.
    pub mean_abs_error_pct: f64,
    /// (sum predicted - sum observed) / sum observed: the busy time the model would give.
    pub total_error_pct: f64,
    pub notes: Vec<String>,
    /// Whether the model is a rotational one, and why: the device's behaviour (what seeks
    /// cost against contiguous requests) or its sysfs flag.
    pub rotational_basis: String,
    /// Nearly every request waited in the device's queue, which hides the latency
    /// ([`RotationalModel::latency_ns`]): it could not be fitted and [`ASSUMED_LATENCY_NS`]
    /// was assumed, so what a process served alone would see is uncertain by that much per
    /// request.
    pub latency_unseen: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{path}: {reason}")]
    Profile { path: String, reason: String },
    #[error("the trace has no completed request to fit a device model on; give --device-profile")]
    NoSamples,
}

/// Where the head is and when each server is free; owned by the simulator.
#[derive(Clone, Debug, Default)]
pub struct DeviceState {
    pub head: u64,
    /// Busy-until per server.
    pub free_at: Vec<u64>,
}

impl DeviceModel {
    /// Servers the device has (requests it works on at once).
    pub fn servers(&self) -> usize {
        match self {
            DeviceModel::Flash(f) => f.parallelism.max(1) as usize,
            _ => 1,
        }
    }

    pub fn rotational(&self) -> bool {
        !matches!(self, DeviceModel::Flash(_))
    }

    /// How long after its dispatch a request can start being served at the earliest
    /// ([`RotationalModel::latency_ns`]).
    pub fn latency_ns(&self) -> u64 {
        match self {
            DeviceModel::Rotational(m) => m.latency_ns.max(0.0) as u64,
            _ => 0,
        }
    }

    /// Service time of a read at `sector` after a request that ended at `head`.
    pub fn service_ns(&self, head: u64, sector: u64, sectors: u32) -> u64 {
        self.service_ns_of(head, sector, sectors, false)
    }

    /// Service time of a read or a write at `sector` after a request that ended at `head`
    /// (only a flash model tells them apart).
    pub fn service_ns_of(&self, head: u64, sector: u64, sectors: u32, write: bool) -> u64 {
        let s = f64::from(sectors);
        let t = match self {
            DeviceModel::Rotational(m) => {
                let pos = if sector == head {
                    0.0
                } else {
                    m.positioning(sector.abs_diff(head))
                };
                m.overhead_ns + pos + s * m.ns_per_sector
            }
            DeviceModel::Disk {
                params,
                capacity_bytes,
            } => {
                // The test bed's own arithmetic (iosched_disk::DiskModel::serve).
                let model = iosched_disk::DiskModel::new(params.clone(), (*capacity_bytes).max(1))
                    .expect("validated when loaded");
                let mut h = iosched_disk::Head { pos: head << 9 };
                return model
                    .serve(&mut h, sector << 9, u64::from(sectors) << 9)
                    .as_nanos() as u64;
            }
            DeviceModel::Flash(f) => {
                let (latency, per_sector) = f.costs(write);
                latency + s * per_sector
            }
        };
        t.max(1.0) as u64
    }

    /// The same device with every time `f` times as long ([`crate::cpu`]: a loop device's
    /// service is its worker's CPU time, which a saturated machine stretches).
    pub fn stretched(&self, f: f64) -> DeviceModel {
        match self {
            DeviceModel::Rotational(m) => DeviceModel::Rotational(RotationalModel {
                overhead_ns: m.overhead_ns * f,
                ns_per_sector: m.ns_per_sector * f,
                positioning_ns: m.positioning_ns.iter().map(|p| p.map(|v| v * f)).collect(),
                latency_ns: m.latency_ns * f,
            }),
            DeviceModel::Disk {
                params,
                capacity_bytes,
            } => DeviceModel::Disk {
                params: iosched_disk::DiskParams {
                    rpm: params.rpm / f,
                    transfer_mb_s: params.transfer_mb_s / f,
                    overhead_us: params.overhead_us * f,
                    seek_min_ms: params.seek_min_ms * f,
                    seek_max_ms: params.seek_max_ms * f,
                    ..params.clone()
                },
                capacity_bytes: *capacity_bytes,
            },
            DeviceModel::Flash(m) => DeviceModel::Flash(FlashModel {
                latency_ns: m.latency_ns * f,
                ns_per_sector: m.ns_per_sector * f,
                parallelism: m.parallelism,
                write_latency_ns: m.write_latency_ns.map(|v| v * f),
                write_ns_per_sector: m.write_ns_per_sector.map(|v| v * f),
            }),
        }
    }

    /// Sequential bandwidth in sectors per second (BFQ's peak rate, budgets).
    pub fn peak_sectors_per_sec(&self) -> f64 {
        let per_sector = match self {
            DeviceModel::Rotational(m) => m.ns_per_sector + m.overhead_ns / 256.0,
            DeviceModel::Disk { params, .. } => {
                512.0 / (params.transfer_mb_s * 1e6) * 1e9 + params.overhead_us * 1e3 / 256.0
            }
            DeviceModel::Flash(f) => {
                (f.ns_per_sector + f.latency_ns / 256.0) / f64::from(f.parallelism.max(1))
            }
        };
        1e9 / per_sector.max(1e-3)
    }
}

impl RotationalModel {
    fn positioning(&self, distance: u64) -> f64 {
        let bin = (63 - distance.max(1).leading_zeros()) as usize;
        let bin = bin.min(BINS - 1);
        if let Some(v) = self.positioning_ns.get(bin).copied().flatten() {
            return v;
        }
        // Nearest known bins on each side, linear in bin index between them.
        let below = (0..bin).rev().find_map(|b| {
            self.positioning_ns
                .get(b)
                .copied()
                .flatten()
                .map(|v| (b, v))
        });
        let above = (bin + 1..self.positioning_ns.len())
            .find_map(|b| self.positioning_ns[b].map(|v| (b, v)));
        match (below, above) {
            (Some((b0, v0)), Some((b1, v1))) => {
                v0 + (v1 - v0) * (bin - b0) as f64 / (b1 - b0) as f64
            }
            (Some((_, v)), None) | (None, Some((_, v))) => v,
            // No seek ever seen: a 7200 rpm disk's average (seek + half a turn).
            (None, None) => 8_000_000.0,
        }
    }
}
