//! Seek distances between consecutive I/Os, btt-style: the distance from where the previous
//! one ended to where this one starts, in sectors.

use serde::Serialize;

use super::latency::Latency;

#[derive(Clone, Debug, Default)]
pub struct Seeks {
    last_end: Option<u64>,
    dist: Latency,
    nonzero: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SeekSummary {
    /// Distances measured (one per I/O after the first).
    pub count: u64,
    /// Of which not zero (true seeks).
    pub seeks: u64,
    pub mean_sectors: f64,
    pub median_sectors: u64,
    /// The most frequent distance (to the histogram's 1% resolution; exact for 0).
    pub mode_sectors: u64,
}

impl Seeks {
    /// An I/O of `sectors` at `sector`.
    pub fn add(&mut self, sector: u64, sectors: u64) {
        if let Some(end) = self.last_end {
            let d = sector.abs_diff(end);
            self.dist.record(d);
            if d != 0 {
                self.nonzero += 1;
            }
        }
        self.last_end = Some(sector + sectors);
    }

    pub fn summary(&self) -> SeekSummary {
        let mode = self.dist.mode();
        SeekSummary {
            count: self.dist.count(),
            seeks: self.nonzero,
            mean_sectors: self.dist.mean(),
            median_sectors: self.dist.quantile(0.5),
            mode_sectors: mode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_stream_has_no_seeks() {
        let mut s = Seeks::default();
        for i in 0..100 {
            s.add(i * 8, 8);
        }
        let sum = s.summary();
        assert_eq!(sum.count, 99);
        assert_eq!(sum.seeks, 0);
        assert_eq!(sum.mode_sectors, 0);
    }

    #[test]
    fn alternating_streams_seek_every_time() {
        let mut s = Seeks::default();
        for i in 0..50u64 {
            s.add(i * 8, 8);
            s.add(1_000_000 + i * 8, 8);
        }
        let sum = s.summary();
        assert_eq!(sum.count, 99);
        assert_eq!(sum.seeks, 99);
        // Forward: 1_000_000 - 8; backward: 1_000_000.
        // (The mode has the histogram's 1% resolution.)
        assert!(
            sum.mode_sectors.abs_diff(1_000_000) < 10_000,
            "{}",
            sum.mode_sectors
        );
        assert!((sum.mean_sectors - 999_996.0).abs() < 10.0);
    }
}
