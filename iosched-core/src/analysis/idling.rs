//! Idling waste: time when a device had nothing in its driver while requests waited to be
//! issued. A scheduler that idles (BFQ's slice_idle, CFQ's) creates exactly these gaps; so do
//! throttling and dependencies between processes. "Idle with nothing pending" is tracked
//! apart: that is the workload thinking, not the scheduler's doing.
//!
//! Every request crosses an idle device for a few microseconds between its Q and its D (plug,
//! scheduler insert, dispatch); gaps shorter than a threshold (default 50 µs, far below any
//! scheduler's idling: BFQ idles at least 2 ms, CFQ 8 ms) are counted apart as block-layer
//! transit, not waste.

use std::{cmp::Reverse, collections::BinaryHeap};

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::{event::Dev, timeline::DeviceState};

use super::Window;

/// One idle-with-pending interval.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct IdleInterval {
    pub duration_ns: u64,
    pub start_ns: u64,
    #[serde(skip)]
    pub dev: Dev,
    /// The process whose request completed last before the gap: the one a scheduler most
    /// likely idled for (0: none seen yet).
    pub after_pid: u32,
    /// Processes with I/O waiting during the gap.
    pub waiting_pids: Vec<u32>,
}

/// Tracks one device's idle periods.
#[derive(Clone, Debug, Default)]
pub struct IdleTracker {
    /// Open interval: start and culprit; its waiters so far are in `waiters` (reused between
    /// intervals: most are short transit gaps, and they must not allocate).
    open: Option<(u64, u32)>,
    waiters: Vec<u32>,
    /// `DeviceState::waiters_generation` when `waiters` was last brought up to date.
    waiters_seen: u64,
    last_completer: u32,
    pub idle_with_pending_ns: u64,
    pub intervals: u64,
    /// Gaps shorter than the threshold: a request's trip through the block layer (Q -> D
    /// takes microseconds even when nothing holds it back), not a scheduler's choice.
    pub short_gaps_ns: u64,
    pub short_gaps: u64,
}

/// Where closed intervals go: the report's totals ([`IdleTotals`]), or an exporter that draws
/// each one (`convert --to perfetto`). Both then see the same intervals.
pub trait IdleSink {
    /// Gaps shorter than this are transit, not waste (counted in the tracker only).
    fn min_interval_ns(&self) -> u64;
    fn interval(&mut self, iv: IdleInterval);
}

impl IdleSink for IdleTotals {
    fn min_interval_ns(&self) -> u64 {
        self.min_interval_ns
    }
    fn interval(&mut self, iv: IdleInterval) {
        self.add(iv);
    }
}

/// Totals over all devices: per process and per (culprit, waiter) pair, and the longest
/// intervals.
#[derive(Clone, Debug, Default)]
pub struct IdleTotals {
    top: BinaryHeap<Reverse<IdleInterval>>,
    top_n: usize,
    /// Shorter gaps are not counted as waste (see [`IdleTracker::short_gaps_ns`]).
    pub min_interval_ns: u64,
    pub caused_by_pid: FxHashMap<u32, u64>,
    pub suffered_by_pid: FxHashMap<u32, u64>,
    pub by_pair: FxHashMap<(u32, u32), u64>,
}

impl IdleTotals {
    pub fn new(top_n: usize, min_interval_ns: u64) -> IdleTotals {
        IdleTotals {
            top_n,
            min_interval_ns,
            ..Default::default()
        }
    }

    fn add(&mut self, iv: IdleInterval) {
        *self.caused_by_pid.entry(iv.after_pid).or_insert(0) += iv.duration_ns;
        for w in &iv.waiting_pids {
            *self.suffered_by_pid.entry(*w).or_insert(0) += iv.duration_ns;
            *self.by_pair.entry((iv.after_pid, *w)).or_insert(0) += iv.duration_ns;
        }
        if self.top_n == 0 {
            return;
        }
        self.top.push(Reverse(iv));
        if self.top.len() > self.top_n {
            self.top.pop();
        }
    }

    /// The longest intervals, longest first.
    pub fn top(&self) -> Vec<IdleInterval> {
        let mut v: Vec<_> = self.top.iter().map(|r| r.0.clone()).collect();
        v.sort_by(|a, b| b.cmp(a));
        v
    }
}

impl IdleTracker {
    /// A request of `pid` completed (the candidate culprit of the next gap).
    pub fn completed(&mut self, pid: u32) {
        self.last_completer = pid;
    }

    /// The device's state at `ts` after a change (`was` is the state before).
    pub fn update(
        &mut self,
        dev: Dev,
        ts: u64,
        was_idle_pending: bool,
        now: &DeviceState,
        window: &Window,
        totals: &mut impl IdleSink,
    ) {
        let is = now.idle_with_pending();
        match (was_idle_pending, is) {
            (false, true) => {
                self.waiters.clear();
                self.add_waiters(now);
                self.open = Some((ts, self.last_completer));
            }
            (true, true) => self.add_waiters(now),
            (true, false) => self.close(dev, ts, window, totals),
            (false, false) => {}
        }
    }

    #[inline]
    fn add_waiters(&mut self, now: &DeviceState) {
        if !self.waiters.is_empty() {
            if self.waiters_seen == now.waiters_generation {
                return;
            }
            // One pid joined since the last look (the usual case): no need to scan them all.
            if self.waiters_seen + 1 == now.waiters_generation {
                self.waiters_seen = now.waiters_generation;
                if !self.waiters.contains(&now.last_waiter) {
                    self.waiters.push(now.last_waiter);
                }
                return;
            }
        }
        self.waiters_seen = now.waiters_generation;
        if self.waiters.is_empty() {
            self.waiters.extend_from_slice(&now.waiting_pids);
            return;
        }
        for pid in &now.waiting_pids {
            if !self.waiters.contains(pid) {
                self.waiters.push(*pid);
            }
        }
    }

    /// Closes the open interval at `ts` (a change, or the end of the trace).
    pub fn close(&mut self, dev: Dev, ts: u64, window: &Window, totals: &mut impl IdleSink) {
        let Some((start, after_pid)) = self.open.take() else {
            return;
        };
        let duration_ns = window.clip(start, ts);
        if duration_ns == 0 {
            return;
        }
        if duration_ns < totals.min_interval_ns() {
            self.short_gaps_ns += duration_ns;
            self.short_gaps += 1;
            return;
        }
        self.idle_with_pending_ns += duration_ns;
        self.intervals += 1;
        let mut waiting_pids = self.waiters.clone();
        waiting_pids.sort_unstable();
        totals.interval(IdleInterval {
            duration_ns,
            start_ns: start.max(window.from),
            dev,
            after_pid,
            waiting_pids,
        });
    }
}
