//! The service time of one rotational disk: pure arithmetic over offsets and sizes, no clock,
//! no I/O. The daemon asks it how long each request takes; tests ask it what throughput a
//! workload should see.
//!
//! The disk has one actuator, so requests are served one at a time, in the order given. A
//! request costs
//!
//! ```text
//! overhead + positioning + len / transfer_rate
//! positioning = 0                                   if it starts where the last one ended
//!             = seek(distance) + half a rotation    otherwise
//! ```
//!
//! - **Seek**: `distance` is the byte distance from the end of the previous request, as a
//!   fraction of the device size: the emulated device spans the whole stroke, whatever its
//!   size, so a random access anywhere in it costs a full-disk average seek. Short seeks grow
//!   with the square root of distance (the arm accelerates, then brakes), long ones linearly
//!   (it coasts at top speed): `seek_min + k·sqrt(x)` below the knee `x_k`, a straight line
//!   to `seek_max` at `x = 1` above it, with `k` chosen so the two pieces meet with the same
//!   slope (the curve is smooth and increasing).
//! - **Rotation**: the expected latency, half a revolution, on every non-contiguous request.
//!   Deterministic on purpose: runs are repeatable and predictions exact. A platter angle
//!   derived from the clock would make service times depend on the daemon's own latency.
//! - **Contiguous requests** stream at the media rate with no positioning at all, even after
//!   an idle gap: real disks keep a track buffer and read ahead, so a sequential reader that
//!   comes back a little late does not wait a revolution.
//!
//! Reads and writes cost the same (no write cache); flushes are free.
//!
//! [`flash`] is the other device kind: parallel channels, fixed latencies, no positioning.

pub mod flash;

pub use flash::{FlashModel, FlashParams};

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Every knob of the model. Units are in the names; MB is 10^6 bytes, as disk makers count.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskParams {
    /// Spindle speed, revolutions per minute: rotational latency is half a revolution.
    pub rpm: f64,
    /// Media transfer rate, MB/s.
    pub transfer_mb_s: f64,
    /// Fixed cost of every request (command processing, controller), µs.
    pub overhead_us: f64,
    /// Shortest seek (track to track), ms.
    pub seek_min_ms: f64,
    /// Full-stroke seek, ms.
    pub seek_max_ms: f64,
    /// Seek distance (fraction of the stroke, 0..1) where square-root growth turns linear.
    pub seek_knee: f64,
}

impl Default for DiskParams {
    /// A 7200 rpm SATA disk: ~120 MB/s sequential, ~8 ms per random 4 KiB access (see the
    /// tests below for the figures these give).
    fn default() -> Self {
        Self {
            rpm: 7200.0,
            transfer_mb_s: 120.0,
            overhead_us: 100.0,
            seek_min_ms: 0.8,
            seek_max_ms: 8.0,
            seek_knee: 0.2,
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ModelError {
    #[error("{name} must be a finite number > 0 (got {value})")]
    NotPositive { name: &'static str, value: f64 },
    #[error("{name} must be a finite number >= 0 (got {value})")]
    Negative { name: &'static str, value: f64 },
    #[error("seek_knee must be strictly between 0 and 1 (got {0})")]
    Knee(f64),
    #[error("seek_min_ms ({min}) must not exceed seek_max_ms ({max})")]
    SeekOrder { min: f64, max: f64 },
    #[error("the device size must be > 0 bytes")]
    EmptyDevice,
}

impl DiskParams {
    /// Checks every parameter; the model is only built from valid ones.
    pub fn validate(&self) -> Result<(), ModelError> {
        let positive = |name, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ModelError::NotPositive { name, value })
            }
        };
        let non_negative = |name, value: f64| {
            if value.is_finite() && value >= 0.0 {
                Ok(())
            } else {
                Err(ModelError::Negative { name, value })
            }
        };
        positive("rpm", self.rpm)?;
        positive("transfer_mb_s", self.transfer_mb_s)?;
        non_negative("overhead_us", self.overhead_us)?;
        non_negative("seek_min_ms", self.seek_min_ms)?;
        non_negative("seek_max_ms", self.seek_max_ms)?;
        if !(self.seek_knee > 0.0 && self.seek_knee < 1.0) {
            return Err(ModelError::Knee(self.seek_knee));
        }
        if self.seek_min_ms > self.seek_max_ms {
            return Err(ModelError::SeekOrder {
                min: self.seek_min_ms,
                max: self.seek_max_ms,
            });
        }
        Ok(())
    }
}

/// Where the head is: the byte just past the last request served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    pub pos: u64,
}

/// The model for one device of a given size.
#[derive(Clone, Debug)]
pub struct DiskModel {
    params: DiskParams,
    capacity: u64,
    /// Seek time at the knee, seconds: where the sqrt piece hands over to the line.
    seek_knee_s: f64,
}

impl DiskModel {
    pub fn new(params: DiskParams, capacity: u64) -> Result<Self, ModelError> {
        params.validate()?;
        if capacity == 0 {
            return Err(ModelError::EmptyDevice);
        }
        // sqrt piece: t(x) = t0 + (tk - t0)·sqrt(x/xk), slope at xk = (tk - t0)/(2·xk).
        // line: from (xk, tk) to (1, tmax), slope (tmax - tk)/(1 - xk).
        // Equal slopes give tk = (t0·(1 - xk) + 2·xk·tmax) / (1 + xk), which lies between t0
        // and tmax, so both pieces increase.
        let (t0, tmax, xk) = (
            params.seek_min_ms / 1e3,
            params.seek_max_ms / 1e3,
            params.seek_knee,
        );
        let seek_knee_s = (t0 * (1.0 - xk) + 2.0 * xk * tmax) / (1.0 + xk);
        Ok(Self {
            params,
            capacity,
            seek_knee_s,
        })
    }

    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Seek time, seconds, for a distance given as a fraction of the stroke (clamped to
    /// 0..=1). Zero distance is no seek at all.
    pub fn seek_secs(&self, fraction: f64) -> f64 {
        let x = fraction.clamp(0.0, 1.0);
        if x == 0.0 {
            return 0.0;
        }
        let t0 = self.params.seek_min_ms / 1e3;
        let tmax = self.params.seek_max_ms / 1e3;
        let (xk, tk) = (self.params.seek_knee, self.seek_knee_s);
        if x < xk {
            t0 + (tk - t0) * (x / xk).sqrt()
        } else {
            tk + (tmax - tk) * (x - xk) / (1.0 - xk)
        }
    }

    /// Seek time, seconds, between two byte offsets of this device.
    pub fn seek_secs_between(&self, from: u64, to: u64) -> f64 {
        self.seek_secs(from.abs_diff(to) as f64 / self.capacity as f64)
    }

    /// Expected rotational latency, seconds: half a revolution.
    pub fn rotation_secs(&self) -> f64 {
        0.5 * 60.0 / self.params.rpm
    }

    pub fn transfer_secs(&self, len: u64) -> f64 {
        len as f64 / (self.params.transfer_mb_s * 1e6)
    }

    pub fn overhead_secs(&self) -> f64 {
        self.params.overhead_us / 1e6
    }

    /// The service time of a request of `len` bytes at `offset`, and the head moved past it.
    pub fn serve(&self, head: &mut Head, offset: u64, len: u64) -> Duration {
        let positioning = if offset == head.pos {
            0.0
        } else {
            self.seek_secs_between(head.pos, offset) + self.rotation_secs()
        };
        head.pos = offset.saturating_add(len);
        Duration::from_secs_f64(self.overhead_secs() + positioning + self.transfer_secs(len))
    }

    /// Mean seek time, seconds, between two independent uniformly random positions: the
    /// distance x then has density 2·(1 - x) on 0..1. Midpoint rule on a fine grid (the
    /// integrand is smooth apart from sqrt's vertical tangent at 0, which costs < 1e-6 s).
    pub fn mean_random_seek_secs(&self) -> f64 {
        const STEPS: u32 = 100_000;
        let h = 1.0 / f64::from(STEPS);
        (0..STEPS)
            .map(|i| {
                let x = (f64::from(i) + 0.5) * h;
                self.seek_secs(x) * 2.0 * (1.0 - x) * h
            })
            .sum()
    }

    /// Mean service time of one `len`-byte request at a uniformly random position, seconds.
    pub fn random_access_secs(&self, len: u64) -> f64 {
        self.overhead_secs()
            + self.mean_random_seek_secs()
            + self.rotation_secs()
            + self.transfer_secs(len)
    }

    /// Predicted requests/s of one reader issuing `len`-byte requests at uniformly random
    /// positions, one at a time.
    pub fn random_iops(&self, len: u64) -> f64 {
        1.0 / self.random_access_secs(len)
    }

    /// Predicted bytes/s of one sequential reader or writer issuing back-to-back `len`-byte
    /// requests (contiguous, so no positioning after the first).
    pub fn sequential_bytes_per_sec(&self, len: u64) -> f64 {
        len as f64 / (self.overhead_secs() + self.transfer_secs(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn model(params: DiskParams) -> DiskModel {
        DiskModel::new(params, GIB).unwrap()
    }

    fn default_model() -> DiskModel {
        model(DiskParams::default())
    }

    #[test]
    fn seek_curve_is_increasing_and_spans_min_to_max() {
        let m = default_model();
        assert_eq!(m.seek_secs(0.0), 0.0);
        let mut last = 0.0;
        for i in 1..=10_000 {
            let t = m.seek_secs(f64::from(i) / 10_000.0);
            assert!(t > last, "seek not increasing at {i}: {t} <= {last}");
            last = t;
        }
        assert!((m.seek_secs(1.0) - 8e-3).abs() < 1e-12);
        assert!((m.seek_secs(1e-9) - 0.8e-3).abs() < 1e-5);
    }

    #[test]
    fn short_seeks_grow_as_sqrt_long_ones_linearly() {
        let m = default_model();
        let t0 = m.params().seek_min_ms / 1e3;
        // Below the knee (0.2): quadrupling the distance doubles the part above t0.
        for x in [0.001, 0.01, 0.04] {
            let ratio = (m.seek_secs(4.0 * x) - t0) / (m.seek_secs(x) - t0);
            assert!((ratio - 2.0).abs() < 1e-9, "x={x}: ratio {ratio}");
        }
        // Above it: equal steps in distance give equal steps in time.
        let steps: Vec<f64> = [0.3, 0.5, 0.7, 0.9]
            .windows(2)
            .map(|w| m.seek_secs(w[1]) - m.seek_secs(w[0]))
            .collect();
        for s in &steps {
            assert!((s - steps[0]).abs() < 1e-12, "{steps:?}");
        }
        // The two pieces meet with the same slope.
        let (xk, eps) = (0.2, 1e-7);
        let left = (m.seek_secs(xk) - m.seek_secs(xk - eps)) / eps;
        let right = (m.seek_secs(xk + eps) - m.seek_secs(xk)) / eps;
        assert!((left - right).abs() / right < 1e-3, "{left} vs {right}");
    }

    #[test]
    fn defaults_are_a_7200_rpm_sata_disk() {
        let m = default_model();
        let seq = m.sequential_bytes_per_sec(1 << 20) / 1e6;
        assert!((115.0..=125.0).contains(&seq), "sequential {seq} MB/s");
        let random_ms = m.random_access_secs(4096) * 1e3;
        assert!(
            (7.5..=8.5).contains(&random_ms),
            "random access {random_ms} ms"
        );
        assert!((m.rotation_secs() - 60.0 / 7200.0 / 2.0).abs() < 1e-15);
    }

    #[test]
    fn mean_seek_matches_a_closed_form() {
        // With seek_min = seek_max the curve is flat: the mean is that value.
        let flat = model(DiskParams {
            seek_min_ms: 5.0,
            seek_max_ms: 5.0,
            ..DiskParams::default()
        });
        assert!((flat.mean_random_seek_secs() - 5e-3).abs() < 1e-9);
        // A Monte Carlo estimate over random pairs agrees with the integral.
        let m = default_model();
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng >> 11) as f64 / (1u64 << 53) as f64
        };
        let n = 200_000;
        let mc: f64 = (0..n)
            .map(|_| m.seek_secs((next() - next()).abs()))
            .sum::<f64>()
            / f64::from(n);
        let exact = m.mean_random_seek_secs();
        assert!((mc - exact).abs() / exact < 0.01, "{mc} vs {exact}");
    }

    #[test]
    fn contiguous_requests_stream_and_others_pay_positioning() {
        let m = default_model();
        let mut head = Head::default();
        let len = 64 << 10;
        let first = m.serve(&mut head, 0, len);
        let second = m.serve(&mut head, len, len);
        assert_eq!(head.pos, 2 * len);
        let streaming = m.overhead_secs() + m.transfer_secs(len);
        assert!((first.as_secs_f64() - streaming).abs() < 1e-9);
        assert!((second.as_secs_f64() - streaming).abs() < 1e-9);
        // Back to the start: a seek of 128 KiB plus half a rotation.
        let back = m.serve(&mut head, 0, len).as_secs_f64();
        let expected = streaming + m.seek_secs_between(2 * len, 0) + m.rotation_secs();
        assert!((back - expected).abs() < 1e-9);
        // A far seek costs more than a near one.
        let mut near = Head { pos: 0 };
        let mut far = Head { pos: 0 };
        assert!(m.serve(&mut far, GIB - len, len) > m.serve(&mut near, 1 << 20, len));
    }

    #[test]
    fn rejects_bad_parameters() {
        let bad = |p: DiskParams| DiskModel::new(p, GIB).unwrap_err();
        let d = DiskParams::default;
        assert!(matches!(
            bad(DiskParams { rpm: 0.0, ..d() }),
            ModelError::NotPositive { name: "rpm", .. }
        ));
        assert!(matches!(
            bad(DiskParams {
                transfer_mb_s: f64::NAN,
                ..d()
            }),
            ModelError::NotPositive { .. }
        ));
        assert!(matches!(
            bad(DiskParams {
                overhead_us: -1.0,
                ..d()
            }),
            ModelError::Negative { .. }
        ));
        assert_eq!(
            bad(DiskParams {
                seek_knee: 1.0,
                ..d()
            }),
            ModelError::Knee(1.0)
        );
        assert!(matches!(
            bad(DiskParams {
                seek_min_ms: 9.0,
                ..d()
            }),
            ModelError::SeekOrder { .. }
        ));
        assert_eq!(DiskModel::new(d(), 0).unwrap_err(), ModelError::EmptyDevice);
    }
}
