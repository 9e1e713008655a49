//! The completions the exporter's programs never saw, per device: the kernel's own count of
//! completed requests (`/sys/block/DEV/stat`) since the device was first traced, against the
//! final completions the programs counted (`DevState::completed`) over the same time.
//!
//! Why: a completion can fire where the kernel runs no BPF program (docs/REPORT.md, "Where
//! untraced completions come from"). Its request is then missing from every count and
//! histogram, and nothing inside the maps can tell; the recorder catches the same gap with
//! its completion check (`iosched_core::record::CompletionCheck`), whose rules this uses.
//!
//! What is exposed is a lower bound, never an invention. The kernel counts a request a few
//! microseconds after its completion tracepoint, so:
//! - at each scrape the counters are read before the maps: a request completing between the
//!   two reads is in the programs' count and not yet in the kernel's, which can hide an
//!   untraced one until a later scrape, never add one;
//! - at the baseline (the same order) such a request is in the programs' baseline and
//!   counted by the kernel after it, which would add one: at most the requests in flight
//!   then, which are taken off.
//!
//! A lower bound that grows and shrinks as requests race the scrapes is shown as its
//! largest value so far, so that the exposed counter never goes back.
//!
//! Owns: the arithmetic. Must not: read sysfs or the maps (`kernel` does).

use iosched_core::record::{CompletionCheck, CompletionCounts, DiskCounters};
use iosched_trace_common::exporter::{
    COMPLETED_DISCARD, COMPLETED_GROUPS, COMPLETED_READ, COMPLETED_WRITE,
    COMPLETED_WRITE_THROUGH_FLUSH,
};

/// `DevState::completed` as the recording's completion counts.
pub fn seen_counts(completed: &[u64; COMPLETED_GROUPS]) -> CompletionCounts {
    CompletionCounts {
        reads: completed[COMPLETED_READ],
        writes: completed[COMPLETED_WRITE],
        discards: completed[COMPLETED_DISCARD],
        writes_through_flush: completed[COMPLETED_WRITE_THROUGH_FLUSH],
    }
}

fn since(now: CompletionCounts, base: CompletionCounts) -> CompletionCounts {
    CompletionCounts {
        reads: now.reads.saturating_sub(base.reads),
        writes: now.writes.saturating_sub(base.writes),
        discards: now.discards.saturating_sub(base.discards),
        writes_through_flush: now
            .writes_through_flush
            .saturating_sub(base.writes_through_flush),
    }
}

/// One device's count of untraced completions since its baseline.
#[derive(Clone, Debug)]
pub struct UntracedCompletions {
    base_counters: DiskCounters,
    base_seen: CompletionCounts,
    shown: u64,
}

impl UntracedCompletions {
    /// The baseline: the kernel's counters, read before the programs' counts `seen`.
    pub fn new(counters: DiskCounters, seen: CompletionCounts) -> Self {
        UntracedCompletions {
            base_counters: counters,
            base_seen: seen,
            shown: 0,
        }
    }

    /// Takes the kernel's counters and the programs' counts now (the counters read first)
    /// and returns the count to show.
    pub fn update(&mut self, counters: DiskCounters, seen: CompletionCounts) -> u64 {
        let check = CompletionCheck {
            start: self.base_counters,
            end: counters,
            traced: since(seen, self.base_seen),
            ..CompletionCheck::default()
        };
        let lower = check
            .untraced()
            .saturating_sub(self.base_counters.in_flight);
        self.shown = self.shown.max(lower);
        self.shown
    }

    /// The count shown by the last [`update`](Self::update).
    pub fn shown(&self) -> u64 {
        self.shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(reads: u64, writes: u64, in_flight: u64) -> DiskCounters {
        DiskCounters {
            ts_ns: 0,
            reads,
            writes,
            discards: 0,
            in_flight,
        }
    }

    fn seen(reads: u64, writes: u64, through_flush: u64) -> CompletionCounts {
        CompletionCounts {
            reads,
            writes,
            discards: 0,
            writes_through_flush: through_flush,
        }
    }

    #[test]
    fn counts_what_the_kernel_completed_and_the_programs_did_not_see() {
        // Before the baseline: 1000 reads counted, 10 seen (the programs started late).
        let mut u = UntracedCompletions::new(counters(1000, 50, 0), seen(10, 0, 0));
        // Since: 4096 reads completed, 4095 seen; 7 writes, all seen.
        assert_eq!(
            u.update(counters(5096, 57, 0), seen(4105, 7, 0)),
            1,
            "one read the programs missed"
        );
        assert_eq!(u.update(counters(5096, 57, 0), seen(4105, 7, 0)), 1);
    }

    #[test]
    fn a_completion_racing_the_scrape_hides_one_and_never_adds_one() {
        let mut u = UntracedCompletions::new(counters(0, 0, 0), seen(0, 0, 0));
        // Seen by the programs (read second) but not yet counted by the kernel (read first).
        assert_eq!(u.update(counters(100, 0, 2), seen(102, 0, 0)), 0);
        // A missed one, hidden while two others raced: shown once the race is over.
        assert_eq!(u.update(counters(200, 0, 3), seen(201, 0, 0)), 0);
        assert_eq!(u.update(counters(300, 0, 0), seen(299, 0, 0)), 1);
    }

    #[test]
    fn requests_in_flight_at_the_baseline_are_not_counted_as_missed() {
        // Two requests were between their tracepoint and the kernel's count at the
        // baseline: in the programs' baseline, counted by the kernel after it.
        let mut u = UntracedCompletions::new(counters(1000, 0, 2), seen(1002, 0, 0));
        assert_eq!(u.update(counters(1102, 0, 0), seen(1102, 0, 0)), 0);
        // Three real misses beyond them: the kernel's 205 since the baseline hold the two
        // racing requests, the programs' 200 do not.
        assert_eq!(u.update(counters(1205, 0, 0), seen(1202, 0, 0)), 3);
    }

    #[test]
    fn never_goes_back() {
        let mut u = UntracedCompletions::new(counters(0, 0, 0), seen(0, 0, 0));
        assert_eq!(u.update(counters(10, 0, 0), seen(7, 0, 0)), 3);
        // Counters that went backwards (a device reset) give a lower bound of 0.
        assert_eq!(u.update(counters(0, 0, 0), seen(7, 0, 0)), 3);
        assert_eq!(u.shown(), 3);
    }

    #[test]
    fn writes_that_went_through_the_flush_machinery_leave_writes_uncompared() {
        let mut u = UntracedCompletions::new(counters(0, 0, 0), seen(0, 0, 0));
        // 10 writes counted, 8 seen with data and 2 empty through a flush: which the kernel
        // counted cannot be told, so writes are not compared; reads still are.
        assert_eq!(u.update(counters(5, 10, 0), seen(4, 8, 2)), 1);
    }
}
