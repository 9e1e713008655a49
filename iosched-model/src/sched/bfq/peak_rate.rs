//! BFQ's peak-rate estimator (bfq-iosched.c `bfq_update_peak_rate`,
//! `bfq_update_rate_reset`, `bfq_calc_max_budget`): the rate the device delivers to this
//! workload, from which the max budget follows.

use crate::sched::SchedEnv;

use super::SEEK_THR;
use super::idling::MIN_TT_NS;
use super::wf2q::DEFAULT_MAX_BUDGET;

/// Peak-rate estimation (`bfq_update_peak_rate`): a sample window closes after 1 s, or
/// when the device went idle for 100 ms; it counts with >= 32 dispatches over >= 300 ms.
const RATE_REF_INTERVAL_NS: u64 = 1_000_000_000;

const RATE_MIN_INTERVAL_NS: u64 = 300_000_000;

const RATE_MIN_SAMPLES: u32 = 32;

const RATE_IDLE_RESET_NS: u64 = 100_000_000;

/// BFQ's peak-rate estimator (`bfq_update_peak_rate`, `bfq_update_rate_reset`): the rate of
/// dispatched sectors over windows of up to 1 s, folded into the peak with a weight that
/// grows with the share of sequential dispatches; a low rate from mostly random I/O is
/// ignored. `bfq_max_budget` is `peak x timeout_sync` (`bfq_calc_max_budget`). So the
/// budgets follow what the device delivers to this workload (a 4 KiB reader at iodepth 1
/// gets ~3000 sectors on a 15 MB/s path), not the disk's media rate.
pub(super) struct RateEstimator {
    /// Sectors/s.
    pub(super) peak: f64,
    pub(super) max_budget: u32,
    /// The trace-driven check sets the max budget from BFQ's log; then the estimate
    /// stays as the log says.
    pub(super) imposed: bool,
    pub(super) timeout_ns: u64,
    first_dispatch: u64,
    last_dispatch: u64,
    samples: u32,
    sequential: u32,
    sectors: u64,
    last_pos: u64,
}

impl RateEstimator {
    pub(super) fn new(env: &SchedEnv, timeout_ns: u64) -> RateEstimator {
        // A fresh BFQ starts at 2/3 of the reference rate (rotational 14000, else 33000
        // sectors/µs << 16); one that already served I/O at the rate its budget says.
        let reference = if env.rotational { 14_000.0 } else { 33_000.0 } / 65536.0 * 1e6;
        let (peak, max_budget) = match env.max_budget_start {
            Some(b) => (f64::from(b) * 1e9 / timeout_ns as f64, b),
            // `bfq_init_queue`: the default max budget until the first estimate.
            None => (reference * 2.0 / 3.0, DEFAULT_MAX_BUDGET),
        };
        RateEstimator {
            peak,
            max_budget,
            imposed: false,
            timeout_ns,
            first_dispatch: 0,
            last_dispatch: 0,
            samples: 0,
            sequential: 0,
            sectors: 0,
            last_pos: 0,
        }
    }

    fn budget_for(peak: f64, timeout_ns: u64) -> u32 {
        ((peak * timeout_ns as f64 / 1e9) as u32).max(64)
    }

    fn reset(&mut self, now: u64, sectors: u32) {
        self.first_dispatch = now;
        self.samples = u32::from(sectors > 0);
        self.sequential = 0;
        self.sectors = u64::from(sectors);
    }

    fn close_window(&mut self, now: u64, last_completion: u64, sectors: u32) {
        if self.imposed {
            self.reset(now, sectors);
            return;
        }
        let span = (now - self.first_dispatch)
            .max(last_completion.saturating_sub(self.first_dispatch))
            .max(1);
        if self.samples >= RATE_MIN_SAMPLES && span >= RATE_MIN_INTERVAL_NS {
            let rate = self.sectors as f64 * 1e9 / span as f64;
            let mostly_random = self.sequential < (3 * self.samples) >> 2;
            if !(mostly_random && rate <= self.peak) {
                let divisor = f64::from(10 - (9 * self.sequential) / self.samples);
                self.peak = (self.peak * (divisor - 1.0) + rate) / divisor;
                self.max_budget = Self::budget_for(self.peak, self.timeout_ns);
            }
        }
        self.reset(now, sectors);
    }

    /// One dispatch of `sectors` at `pos`, with `in_driver` requests already out.
    pub(super) fn dispatched(
        &mut self,
        now: u64,
        pos: u64,
        sectors: u32,
        in_driver: u32,
        last_completion: u64,
    ) {
        if self.samples == 0 {
            self.reset(now, sectors);
        } else if now - self.last_dispatch > RATE_IDLE_RESET_NS && in_driver == 0 {
            self.close_window(now, last_completion, sectors);
        } else {
            self.samples += 1;
            let close = in_driver > 0 || now.saturating_sub(last_completion) < MIN_TT_NS;
            if close && pos.abs_diff(self.last_pos) <= SEEK_THR {
                self.sequential += 1;
            }
            self.sectors += u64::from(sectors);
            if now - self.first_dispatch >= RATE_REF_INTERVAL_NS {
                self.close_window(now, last_completion, sectors);
            }
        }
        self.last_dispatch = now;
        self.last_pos = pos + u64::from(sectors);
    }
}
