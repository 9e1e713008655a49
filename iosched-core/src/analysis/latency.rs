//! Latency distributions: btt's stages, and a compact histogram with an exact mean.

use serde::Serialize;

use crate::timeline::BioLife;

use super::loghist::LogHist;

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
        let mut n = 0;
        Self::for_each_sample(bio, |stage, ns| {
            out[n] = Some((stage, ns));
            n += 1;
        });
        out.into_iter().flatten()
    }

    /// [`samples_of`](Self::samples_of) as calls of `f`, in the same order: the per-bio path
    /// of the report, which should not build and scan an array of options for each bio.
    #[inline]
    pub fn for_each_sample(bio: &BioLife, mut f: impl FnMut(Stage, u64)) {
        if bio.bytes == 0 {
            return;
        }
        let span = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        let c = Some(bio.c);
        let m = bio.m.map(|(t, _)| t);
        let mut put = |stage, v: Option<u64>| {
            if let Some(v) = v {
                f(stage, v);
            }
        };
        put(Stage::Q2G, span(bio.q, bio.g));
        put(Stage::G2I, span(bio.g, bio.i));
        put(Stage::Q2M, span(bio.q, m));
        if bio.i.is_some() {
            put(Stage::I2D, span(bio.i, bio.d));
        } else {
            put(Stage::M2D, span(m, bio.d));
        }
        put(Stage::D2C, span(bio.d, c));
        put(Stage::Q2C, span(bio.q, c));
        put(Stage::Q2D, span(bio.q, bio.d));
    }
}

/// One latency distribution: count, exact sum (for an exact mean), min/max, and an HDR
/// histogram ([`LogHist`]: quantiles within 1.6%) for the quantiles.
#[derive(Clone, Default)]
pub struct Latency {
    count: u64,
    sum: u128,
    max: u64,
    hist: LogHist,
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

impl Latency {
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum += u128::from(ns);
        self.max = self.max.max(ns);
        self.hist.record(ns);
    }

    pub fn merge(&mut self, other: &Latency) {
        self.count += other.count;
        self.sum += other.sum;
        self.max = self.max.max(other.max);
        self.hist.merge(&other.hist);
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
        self.hist.quantile(q).min(self.max)
    }

    /// The distribution as `per_octave` log-spaced bins: (lowest value, count) of each
    /// non-empty bin, ascending; the bin of a value v is floor(per_octave * log2(v + 1)), so
    /// zero has its own. For plots (a few hundred points at most, whatever the count).
    pub fn log_bins(&self, per_octave: u32) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut last_bin = None;
        for (lo, count) in self.hist.buckets() {
            let bin = (f64::from(per_octave) * ((lo as f64) + 1.0).log2()).floor() as u64;
            match out.last_mut() {
                Some(last) if last_bin == Some(bin) => last.1 += count,
                _ => out.push((lo, count)),
            }
            last_bin = Some(bin);
        }
        out
    }

    /// The most frequent value (the lowest of the fullest bucket: exact for small values).
    pub fn mode(&self) -> u64 {
        self.hist.mode()
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
    // Inline, not boxed: an empty `Latency` is a few words (its histogram grows on first use),
    // and this is on the per-bio path.
    by_stage: [Latency; 9],
}

impl Stages {
    #[inline]
    pub fn record(&mut self, stage: Stage, ns: u64) {
        self.by_stage[stage as usize].record(ns);
    }

    pub fn record_bio(&mut self, bio: &BioLife) {
        Stage::for_each_sample(bio, |stage, ns| self.record(stage, ns));
    }

    /// The stage's distribution, if it has samples.
    pub fn get(&self, stage: Stage) -> Option<&Latency> {
        Some(&self.by_stage[stage as usize]).filter(|l| l.count() > 0)
    }

    pub fn merge(&mut self, other: &Stages) {
        for (a, b) in self.by_stage.iter_mut().zip(&other.by_stage) {
            if b.count() > 0 {
                a.merge(b);
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
    fn log_bins_keep_every_sample_in_a_bounded_number_of_bins() {
        let mut l = Latency::default();
        for v in 0..100_000u64 {
            l.record(v * v);
        }
        let bins = l.log_bins(4);
        assert_eq!(bins.iter().map(|b| b.1).sum::<u64>(), 100_000);
        // 0 .. 10^10: about 33 octaves, 4 bins each.
        assert!(bins.len() <= 4 * 34 + 1, "{}", bins.len());
        assert_eq!(bins[0], (0, 1));
        assert!(bins.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn empty_distribution_reports_zeros() {
        let l = Latency::default();
        assert_eq!(l.summary(), LatencySummary::default());
    }
}
