//! A log-linear histogram of u64 values with 1/64 relative resolution (under 1.6%, about two
//! significant digits), exact below 128. Hand-written rather than `hdrhistogram` because the
//! report records several samples per bio and this one costs a couple of nanoseconds per
//! sample (no range checks, no resizing logic on the hot path) while staying small: buckets
//! grow only up to the largest value seen.

/// Values below this are their own bucket.
const LINEAR: u64 = 128;
/// Buckets per power of two above `LINEAR`.
const SUB: u32 = 64;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogHist {
    counts: Vec<u32>,
}

/// The bucket of `v`.
fn index(v: u64) -> usize {
    if v < LINEAR {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= 7
    let shift = e - 6;
    let top = (v >> shift) as usize; // 64..=127
    LINEAR as usize + (e as usize - 7) * SUB as usize + (top - SUB as usize)
}

/// The lowest value of bucket `i`.
fn lowest(i: usize) -> u64 {
    if i < LINEAR as usize {
        return i as u64;
    }
    let k = i - LINEAR as usize;
    let e = 7 + (k / SUB as usize) as u32;
    let top = (SUB as usize + k % SUB as usize) as u64;
    top << (e - 6)
}

impl LogHist {
    #[inline]
    pub fn record(&mut self, v: u64) {
        let i = index(v);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        // A bucket with 4 billion samples saturates rather than wraps.
        self.counts[i] = self.counts[i].saturating_add(1);
    }

    pub fn merge(&mut self, other: &LogHist) {
        if other.counts.len() > self.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| u64::from(*c)).sum()
    }

    /// The lowest value of the bucket holding quantile `q` (0..=1).
    pub fn quantile(&self, q: f64) -> u64 {
        let total = self.total();
        if total == 0 {
            return 0;
        }
        // The rank of the sample at q, 1-based, as hdrhistogram counts it.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += u64::from(*c);
            if seen >= rank {
                return lowest(i);
            }
        }
        lowest(self.counts.len().saturating_sub(1))
    }

    /// Non-empty buckets in ascending order: (lowest value, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (lowest(i), u64::from(*c)))
    }

    /// The lowest value of the fullest bucket (the lowest such bucket on ties).
    pub fn mode(&self) -> u64 {
        let mut best = (0u32, 0usize);
        for (i, c) in self.counts.iter().enumerate() {
            if *c > best.0 {
                best = (*c, i);
            }
        }
        if best.0 == 0 { 0 } else { lowest(best.1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        // Every value falls in a bucket whose lowest value is <= it and within 1/64 of it.
        let mut last = 0;
        for v in (0..200_000u64).chain((20..64).map(|s| (1u64 << s) + 12345)) {
            let i = index(v);
            assert!(i >= last || v > 200_000, "index not monotone at {v}");
            last = i;
            let lo = lowest(i);
            assert!(lo <= v, "{v}: lowest {lo}");
            assert!((v - lo) as f64 <= v as f64 / 64.0, "{v}: lowest {lo}");
            assert_eq!(index(lo), i);
        }
        assert_eq!(index(u64::MAX), LINEAR as usize + 56 * SUB as usize + 63);
    }

    #[test]
    fn quantiles_match_a_sorted_list_within_resolution() {
        let values: Vec<u64> = (1..=5000u64).map(|i| i * i * 37 % 1_000_003).collect();
        let mut h = LogHist::default();
        for v in &values {
            h.record(*v);
        }
        let mut sorted = values.clone();
        sorted.sort_unstable();
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
            let exact = sorted[rank - 1];
            let got = h.quantile(q);
            assert!(
                got <= exact && (exact - got) as f64 <= exact as f64 / 64.0,
                "q {q}: {got} vs {exact}"
            );
        }
    }
}
