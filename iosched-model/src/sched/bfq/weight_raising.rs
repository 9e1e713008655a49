//! Weight raising (bfq-iosched.c): how long an interactive period lasts
//! (`bfq_wr_duration`), when raising ends (`bfq_update_wr_data`, and the switch back from
//! soft real-time, `switch_back_to_interactive_wr`), soft real-time detection
//! (`bfq_bfqq_softrt_next_start`), large-burst detection (`bfq_handle_burst`), and a change
//! of coefficient with the busy counts kept right. Raising on arrival is `activation`'s.

use super::Bfq;
use super::groups::whole_weight;

pub(super) const WR_COEFF: u32 = 30;

/// Soft real-time raising (`BFQ_SOFTRT_WEIGHT_FACTOR` x `bfq_wr_coeff`, for
/// `bfq_wr_rt_max_time`), for a queue that comes back, with nothing in flight, after an
/// idle pause long enough for its rate since it last became busy to stay under
/// `bfq_wr_max_softrt_rate` sectors/s.
pub(super) const SOFTRT_COEFF: u32 = WR_COEFF * 100;

pub(super) const WR_RT_MAX_TIME_NS: u64 = 300_000_000;

const WR_MAX_SOFTRT_RATE: u64 = 7000;

pub(super) const WR_MIN_IDLE_NS: u64 = 2_000_000_000;

const MAX_SERVICE_FROM_WR: u64 = 120_000;

pub(super) const BURST_INTERVAL_NS: u64 = 180_000_000;

const LARGE_BURST: usize = 8;

impl Bfq {
    pub(super) fn wr_duration(&self) -> u64 {
        // rate_dur_prod / peak_rate: rotational 14000 x 7 s, else 33000 x 2.5 s, with the
        // reference rates in sectors/µs << 16.
        let (ref_rate, ref_dur) = if self.rotational {
            (14_000.0, 7.0)
        } else {
            (33_000.0, 2.5)
        };
        let ref_sps = ref_rate / 65536.0 * 1e6;
        let d = ref_sps * ref_dur / self.rate.peak.max(1.0);
        (d.clamp(3.0, 25.0) * 1e9) as u64
    }

    pub(super) fn handle_burst(&mut self, q: usize, now: u64) {
        match self.burst_last {
            Some(t) if now - t <= BURST_INTERVAL_NS => {
                self.burst.push(q);
                if self.burst_large || self.burst.len() >= LARGE_BURST {
                    self.burst_large = true;
                    for m in self.burst.clone() {
                        self.queues[m].in_large_burst = true;
                    }
                }
            }
            _ => {
                self.burst.clear();
                self.burst.push(q);
                self.burst_large = false;
            }
        }
        self.burst_last = Some(now);
    }

    /// `bfq_bfqq_softrt_next_start`: not before its service since it last became busy
    /// would have taken at [`WR_MAX_SOFTRT_RATE`], nor before an idle slice (and 4
    /// jiffies) from now, nor before the previous bound.
    pub(super) fn softrt_next_start(&self, q: usize, now: u64) -> u64 {
        let qq = &self.queues[q];
        let by_rate =
            qq.last_idle_bklogged + qq.service_from_backlogged * 1_000_000_000 / WR_MAX_SOFTRT_RATE;
        let by_idle = now + self.slice_idle + 4 * self.jiffy_ns;
        let prev = if qq.soft_rt_next_start == u64::MAX {
            0
        } else {
            qq.soft_rt_next_start
        };
        prev.max(by_rate).max(by_idle)
    }

    /// `bfq_update_wr_data`: raising ends in a large burst, with time, or (interactive
    /// only) with service; a soft real-time period that ends within the interactive one
    /// it interrupted goes back to it (`switch_back_to_interactive_wr`).
    pub(super) fn end_raising_if_due(&mut self, q: usize, now: u64) {
        // At every dispatch: most queues are not raised, and the duration takes a division.
        if self.queues[q].wr_coeff == 1 {
            return;
        }
        let wr_duration = self.wr_duration();
        let qq = &mut self.queues[q];
        let raised = qq.weight();
        let soft_rt = qq.wr_dur == WR_RT_MAX_TIME_NS;
        let mut end = qq.in_large_burst;
        if !end && now > qq.wr_start + qq.wr_dur {
            match qq.wr_start_at_switch_to_srt {
                Some(t) if soft_rt && now <= t + wr_duration => {
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_dur = wr_duration;
                    qq.wr_start = t;
                }
                _ => end = true,
            }
        }
        end |= qq.wr_dur != WR_RT_MAX_TIME_NS && qq.wr_service > MAX_SERVICE_FROM_WR;
        if end {
            qq.wr_coeff = 1;
        }
        if qq.busy {
            if end {
                self.wr_busy -= 1;
            }
            self.busy_weight += qq.weight() - raised;
            let load = &mut self.groups[qq.group];
            load.busy_weight = load.busy_weight + whole_weight(qq.weight()) - whole_weight(raised);
        }
    }

    /// Sets a queue's raising coefficient, keeping the busy counts right.
    pub(super) fn set_wr_coeff(&mut self, q: usize, coeff: u32) {
        let qq = &mut self.queues[q];
        let (was, weight) = (qq.wr_coeff, qq.weight());
        qq.wr_coeff = coeff;
        if qq.busy {
            self.busy_weight += qq.weight() - weight;
            let load = &mut self.groups[qq.group];
            load.busy_weight = load.busy_weight + whole_weight(qq.weight()) - whole_weight(weight);
            match (was > 1, coeff > 1) {
                (false, true) => self.wr_busy += 1,
                (true, false) => self.wr_busy -= 1,
                _ => {}
            }
        }
    }
}
