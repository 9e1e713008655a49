//! Service slices: the scheduler's switching pattern seen from outside. A slice is a run of
//! consecutive dispatches on one device from the same owner (process or cgroup). Two
//! sequential readers served alternately every request give many one-request slices and a
//! seek at each switch; served 100 ms each, few long slices.
//!
//! A slice's time runs from its first dispatch to the first dispatch of the next slice on the
//! device (the time the device was given to it); the last slice of a trace ends at its last
//! dispatch. At each switch we note the seek (from where the previous owner's last request
//! ended) and the switch gap (from the previous owner's last completion to the new owner's
//! first dispatch, 0 if the new dispatch came first).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::latency::{Latency, LatencySummary};

/// Per-owner slice statistics.
#[derive(Clone, Debug, Default)]
pub struct SliceStats {
    pub slices: u64,
    pub length_ns: Latency,
    pub length_requests: Latency,
    /// Seek paid when the device switched to this owner, in sectors.
    pub switch_seek_sectors: Latency,
    pub switch_gap_ns: Latency,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SliceSummary {
    pub slices: u64,
    pub length_ns: LatencySummary,
    pub length_requests: LatencySummary,
    pub switch_seek_sectors: LatencySummary,
    pub switch_gap_ns: LatencySummary,
}

impl SliceStats {
    pub fn summary(&self) -> SliceSummary {
        SliceSummary {
            slices: self.slices,
            length_ns: self.length_ns.summary(),
            length_requests: self.length_requests.summary(),
            switch_seek_sectors: self.switch_seek_sectors.summary(),
            switch_gap_ns: self.switch_gap_ns.summary(),
        }
    }
}

/// Where slices go: the report's statistics per owner, or an exporter that draws each one
/// (`convert --to perfetto`). Both then see the same slices.
pub trait SliceSink {
    /// A slice of `owner` ended: `requests` dispatches from `start_ns` to `end_ns`.
    fn slice(&mut self, owner: u64, start_ns: u64, end_ns: u64, requests: u64);
    /// The device switched to `owner`, seeking `seek_sectors` and waiting `gap_ns` after the
    /// previous owner's last completion.
    fn switched(&mut self, owner: u64, seek_sectors: u64, gap_ns: u64) {
        let _ = (owner, seek_sectors, gap_ns);
    }
}

impl SliceSink for FxHashMap<u64, SliceStats> {
    fn slice(&mut self, owner: u64, start_ns: u64, end_ns: u64, requests: u64) {
        let s = self.entry(owner).or_default();
        s.slices += 1;
        s.length_ns.record(end_ns.saturating_sub(start_ns));
        s.length_requests.record(requests);
    }
    fn switched(&mut self, owner: u64, seek_sectors: u64, gap_ns: u64) {
        let s = self.entry(owner).or_default();
        s.switch_seek_sectors.record(seek_sectors);
        s.switch_gap_ns.record(gap_ns);
    }
}

struct Open {
    owner: u64,
    start: u64,
    last_d: u64,
    requests: u64,
    last_end_sector: u64,
}

/// Follows one device's dispatches.
#[derive(Default)]
pub struct SliceTracker {
    open: Option<Open>,
    /// Last completion per owner on this device.
    last_completion: FxHashMap<u64, u64>,
}

impl SliceTracker {
    /// A dispatch at `ts` of `sectors` at `sector` owned by `owner`; `counted` says whether
    /// it falls in the report window.
    pub fn issued(
        &mut self,
        owner: u64,
        ts: u64,
        sector: u64,
        sectors: u64,
        stats: &mut impl SliceSink,
    ) {
        match &mut self.open {
            Some(o) if o.owner == owner => {
                o.requests += 1;
                o.last_d = ts;
                o.last_end_sector = sector + sectors;
                return;
            }
            _ => {}
        }
        let mut seek_gap = None;
        if let Some(prev) = self.open.take() {
            Self::close(&prev, ts, stats);
            let gap = self
                .last_completion
                .get(&prev.owner)
                .filter(|c| **c >= prev.last_d)
                .map_or(0, |c| ts.saturating_sub(*c));
            seek_gap = Some((sector.abs_diff(prev.last_end_sector), gap));
        }
        if let Some((seek, gap)) = seek_gap {
            stats.switched(owner, seek, gap);
        }
        self.open = Some(Open {
            owner,
            start: ts,
            last_d: ts,
            requests: 1,
            last_end_sector: sector + sectors,
        });
    }

    pub fn completed(&mut self, owner: u64, ts: u64) {
        self.last_completion.insert(owner, ts);
    }

    fn close(o: &Open, end: u64, stats: &mut impl SliceSink) {
        stats.slice(o.owner, o.start, end, o.requests);
    }

    /// The trace ended: the open slice ends at its last dispatch.
    pub fn finish(&mut self, stats: &mut impl SliceSink) {
        if let Some(o) = self.open.take() {
            Self::close(&o, o.last_d, stats);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternating_owners_make_one_request_slices_with_seeks() {
        let mut t = SliceTracker::default();
        let mut stats = FxHashMap::default();
        for i in 0..10u64 {
            t.issued(1, i * 2000, i * 8, 8, &mut stats);
            t.completed(1, i * 2000 + 500);
            t.issued(2, i * 2000 + 1000, 1_000_000 + i * 8, 8, &mut stats);
            t.completed(2, i * 2000 + 1500);
        }
        t.finish(&mut stats);
        let (a, b) = (&stats[&1], &stats[&2]);
        assert_eq!(a.slices, 10);
        assert_eq!(b.slices, 10);
        assert_eq!(a.length_requests.max(), 1);
        assert_eq!(a.length_ns.quantile(0.5), 1000);
        // Every switch to 2 seeks ~1M sectors forward and waits 500 ns after 1's completion.
        assert_eq!(b.switch_seek_sectors.count(), 10);
        assert_eq!(b.switch_seek_sectors.mean(), 999_992.0);
        assert_eq!(b.switch_gap_ns.max(), 500);
    }

    #[test]
    fn long_runs_make_few_long_slices() {
        let mut t = SliceTracker::default();
        let mut stats = FxHashMap::default();
        let mut ts = 0;
        for owner in [1u64, 2, 1, 2] {
            for i in 0..100u64 {
                t.issued(owner, ts, owner * 1_000_000 + i * 8, 8, &mut stats);
                ts += 10;
            }
        }
        t.finish(&mut stats);
        assert_eq!(stats[&1].slices, 2);
        assert_eq!(stats[&2].slices, 2);
        assert_eq!(stats[&1].length_requests.quantile(0.5), 100);
        assert_eq!(stats[&1].length_ns.max(), 1000);
        // The last slice ends at its last dispatch.
        // (Quantiles are within 1%; the mean is exact.)
        assert_eq!(stats[&2].length_ns.mean(), 995.0);
    }
}
