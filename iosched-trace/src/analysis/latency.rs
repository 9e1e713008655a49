//! Latency distributions: btt's stages, and a compact histogram with an exact mean.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::timeline::BioLife;

/// btt's stages (per bio, as btt measures them) plus Q2D, the time a bio spent before its
/// request reached the driver (plug + scheduler).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// Between consecutive Qs (of the same device, process...).
    Q2Q,
    /// Queued -> request allocated.
    Q2G,
    /// Request allocated -> inserted into the scheduler.
    G2I,
    /// Queued -> merged into an existing request.
    Q2M,
    /// Inserted -> issued to the driver.
    I2D,
    /// Merged -> issued.
    M2D,
    /// Issued -> completed: the device's time.
    D2C,
    /// Queued -> completed: the whole life.
    Q2C,
    /// Queued -> issued: plug and scheduler.
    Q2D,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Q2Q,
        Stage::Q2G,
        Stage::G2I,
        Stage::Q2M,
        Stage::I2D,
        Stage::M2D,
        Stage::D2C,
        Stage::Q2C,
        Stage::Q2D,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Q2Q => "q2q",
            Stage::Q2G => "q2g",
            Stage::G2I => "g2i",
            Stage::Q2M => "q2m",
            Stage::I2D => "i2d",
            Stage::M2D => "m2d",
            Stage::D2C => "d2c",
            Stage::Q2C => "q2c",
            Stage::Q2D => "q2d",
        }
    }

    /// The stage samples one completed bio gives, following btt: I2D for the bio that
    /// started its request (it has an I time), M2D for bios merged into one; Q2Q is not
    /// a property of one bio and comes from elsewhere. Zero-byte bios (empty flushes) give
    /// none, as in btt.
    pub fn samples_of(bio: &BioLife) -> impl Iterator<Item = (Stage, u64)> {
        let mut out: [Option<(Stage, u64)>; 8] = [None; 8];
        if bio.bytes > 0 {
            let span = |a: Option<u64>, b: Option<u64>| match (a, b) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                _ => None,
            };
            let c = Some(bio.c);
            let m = bio.m.map(|(t, _)| t);
            out[0] = span(bio.q, bio.g).map(|v| (Stage::Q2G, v));
            out[1] = span(bio.g, bio.i).map(|v| (Stage::G2I, v));
            out[2] = span(bio.q, m).map(|v| (Stage::Q2M, v));
            out[3] = if bio.i.is_some() {
                span(bio.i, bio.d).map(|v| (Stage::I2D, v))
            } else {
                span(m, bio.d).map(|v| (Stage::M2D, v))
            };
            out[4] = span(bio.d, c).map(|v| (Stage::D2C, v));
            out[5] = span(bio.q, c).map(|v| (Stage::Q2C, v));
            out[6] = span(bio.q, bio.d).map(|v| (Stage::Q2D, v));
        }
        out.into_iter().flatten()
    }
}

/// One latency distribution: count, exact sum (for an exact mean), min/max, and an HDR
/// histogram (2 significant digits: percentiles within 1%) for the quantiles.
#[derive(Clone)]
pub struct Latency {
    count: u64,
    sum: u128,
    max: u64,
    hist: Histogram<u32>,
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latency")
            .field("count", &self.count)
            .field("mean", &self.mean())
            .field("max", &self.max)
            .finish()
    }
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            count: 0,
            sum: 0,
            max: 0,
            // Auto-resizing from 1 ns; 2 digits keep each histogram a few KiB, so thousands
            // of (process, stage) pairs stay cheap.
            hist: Histogram::new(2).expect("2 significant digits is valid"),
        }
    }
}

impl Latency {
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum += u128::from(ns);
        self.max = self.max.max(ns);
        // The histogram resizes itself; the only error left is a bucket counter overflowing
        // u32, and then `count`/`sum` above still hold the sample.
        let _ = self.hist.record(ns);
    }

    pub fn merge(&mut self, other: &Latency) {
        self.count += other.count;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        // Both auto-resize, so adding cannot fail.
        let _ = self.hist.add(&other.hist);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1), never above the true maximum.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        self.hist.value_at_quantile(q).min(self.max)
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count,
            mean_ns: self.mean(),
            p50_ns: self.quantile(0.50),
            p90_ns: self.quantile(0.90),
            p99_ns: self.quantile(0.99),
            p999_ns: self.quantile(0.999),
            max_ns: self.max,
        }
    }
}

/// What a report shows of one distribution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// One distribution per stage, created on first use.
#[derive(Clone, Debug, Default)]
pub struct Stages {
    by_stage: [Option<Box<Latency>>; 9],
}

impl Stages {
    pub fn record(&mut self, stage: Stage, ns: u64) {
        self.by_stage[stage as usize]
            .get_or_insert_with(Default::default)
            .record(ns);
    }

    pub fn record_bio(&mut self, bio: &BioLife) {
        for (stage, ns) in Stage::samples_of(bio) {
            self.record(stage, ns);
        }
    }

    pub fn get(&self, stage: Stage) -> Option<&Latency> {
        self.by_stage[stage as usize].as_deref()
    }

    pub fn merge(&mut self, other: &Stages) {
        for stage in Stage::ALL {
            if let Some(o) = other.get(stage) {
                self.by_stage[stage as usize]
                    .get_or_insert_with(Default::default)
                    .merge(o);
            }
        }
    }

    /// Stages with samples, by name, for JSON.
    pub fn summaries(&self) -> std::collections::BTreeMap<&'static str, LatencySummary> {
        Stage::ALL
            .iter()
            .filter_map(|s| self.get(*s).map(|l| (s.name(), l.summary())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_is_exact_and_quantiles_within_one_percent() {
        let mut l = Latency::default();
        for v in 1..=10_000u64 {
            l.record(v * 1000);
        }
        assert_eq!(l.count(), 10_000);
        assert_eq!(l.mean(), 5_000_500.0);
        let p50 = l.quantile(0.5) as f64;
        assert!((p50 - 5_000_000.0).abs() / 5_000_000.0 < 0.01, "{p50}");
        let p99 = l.quantile(0.99) as f64;
        assert!((p99 - 9_900_000.0).abs() / 9_900_000.0 < 0.01, "{p99}");
        assert_eq!(l.max(), 10_000_000);
        assert!(l.quantile(1.0) <= l.max());
    }

    #[test]
    fn merge_equals_recording_into_one() {
        let (mut a, mut b, mut all) = (Latency::default(), Latency::default(), Latency::default());
        for v in 0..1000u64 {
            let x = v * 7919 % 100_000 + 1;
            if v % 3 == 0 { &mut a } else { &mut b }.record(x);
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
    }

    #[test]
    fn empty_distribution_reports_zeros() {
        let l = Latency::default();
        assert_eq!(l.summary(), LatencySummary::default());
    }
}
