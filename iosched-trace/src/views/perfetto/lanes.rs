//! Lanes: requests of one process that overlap in time go on separate tracks, so that on
//! each track slices follow one another and their children nest (the trace processor
//! rejects a slice that ends after its parent).
//!
//! Requests arrive in completion order (they are drawn when they complete), so every
//! request already on a lane ended no later than the new one: the new one fits on a lane
//! iff it starts at or after that lane's last end. The lowest such lane is taken, a new
//! one opened when none fits. Memory: one timestamp per lane.
//!
//! Owns: lane choice. Must not: write anything.

#[derive(Clone, Debug, Default)]
pub struct Lanes {
    /// The end of the last request on each lane.
    ends: Vec<u64>,
}

impl Lanes {
    /// The lane for a request from `start` to `end`, given in order of `end`.
    pub fn assign(&mut self, start: u64, end: u64) -> usize {
        debug_assert!(start <= end);
        match self.ends.iter().position(|e| *e <= start) {
            Some(lane) => {
                self.ends[lane] = end;
                lane
            }
            None => {
                self.ends.push(end);
                self.ends.len() - 1
            }
        }
    }

    pub fn count(&self) -> usize {
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_one_after_another_share_lane_zero() {
        let mut l = Lanes::default();
        assert_eq!(l.assign(0, 10), 0);
        assert_eq!(l.assign(10, 20), 0);
        assert_eq!(l.assign(25, 30), 0);
        assert_eq!(l.count(), 1);
    }

    #[test]
    fn overlapping_requests_get_separate_lanes_and_free_lanes_are_reused() {
        let mut l = Lanes::default();
        // Three in flight at once, completing at 10, 12, 14.
        assert_eq!(l.assign(0, 10), 0);
        assert_eq!(l.assign(1, 12), 1);
        assert_eq!(l.assign(2, 14), 2);
        // Started after lane 0's and lane 1's requests ended: the lowest is taken.
        assert_eq!(l.assign(13, 20), 0);
        // Overlaps lane 0's (to 20) but not lane 1's (to 12).
        assert_eq!(l.assign(15, 21), 1);
        assert_eq!(l.count(), 3);
    }

    proptest! {
        /// Whatever the requests, no two on one lane overlap (so each lane's slices nest),
        /// and there are never more lanes than requests.
        #[test]
        fn no_lane_holds_overlapping_requests(
            spans in proptest::collection::vec((0u64..1000, 0u64..200), 1..200)
        ) {
            let mut rqs: Vec<(u64, u64)> = spans.iter().map(|(s, d)| (*s, s + d)).collect();
            rqs.sort_by_key(|r| r.1);
            let mut l = Lanes::default();
            let mut on_lane: Vec<Vec<(u64, u64)>> = Vec::new();
            for &(s, e) in &rqs {
                let lane = l.assign(s, e);
                if on_lane.len() <= lane {
                    on_lane.resize(lane + 1, Vec::new());
                }
                on_lane[lane].push((s, e));
            }
            prop_assert!(l.count() <= rqs.len());
            for lane in &on_lane {
                for (i, a) in lane.iter().enumerate() {
                    for b in &lane[i + 1..] {
                        prop_assert!(a.1 <= b.0 || b.1 <= a.0, "{a:?} overlaps {b:?}");
                    }
                }
            }
            // As any valid choice: at least as many lanes as requests in flight at once.
            let max_overlap = rqs.iter().map(|&(s, _)| {
                rqs.iter().filter(|&&(s2, e2)| s2 <= s && s < e2).count()
            }).max().unwrap_or(0);
            prop_assert!(l.count() >= max_overlap);
        }
    }
}
