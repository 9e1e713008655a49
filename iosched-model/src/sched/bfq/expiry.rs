//! A queue's expiration (bfq-iosched.c `bfq_bfqq_expire`, `__bfq_bfqq_expire`): the budget
//! feedback (`__bfq_bfqq_recalc_budget`), charging the service received to its timestamps,
//! requeueing an empty preempted queue that still needs idling, and the budget timeout
//! (`bfq_bfqq_budget_timeout`, `bfq_may_expire_for_budg_timeout`).

use crate::sched::{Ctx, Decision, ExpireReason, IdleOutcome};

use super::Bfq;
use super::wf2q::ASYNC_CHARGE;

impl Bfq {
    pub(super) fn expire(&mut self, ctx: &Ctx, q: usize, reason: ExpireReason) {
        let outcome = match reason {
            ExpireReason::TooIdle => IdleOutcome::TimerExpired,
            ExpireReason::Preempted => IdleOutcome::Preempted,
            _ => IdleOutcome::Arrived,
        };
        self.end_idle(outcome);
        // `__bfq_bfqq_expire`: an empty queue preempted while idling was needed for its
        // service guarantees stays busy (requeued): B-WF2Q+ may pick it again at once, and
        // it then expires for having no requests (BFQ's log shows expire 4, set, expire 3).
        // (`idling_needed_for_service_guarantees`, which first asks whether the process
        // is still there: here, whether it has I/O to come.)
        let requeue_empty = super::REQUEUE_EMPTY_PREEMPTED
            && self.kernel >= 5003
            && reason == ExpireReason::Preempted
            && self.queues[q].queued() == 0
            && self.queues[q].sync
            && self.queues[q]
                .members
                .iter()
                .any(|m| ctx.stream_has_future(*m))
            && self.guarantees(q, ctx.in_driver).is_some();
        // `bfq_bfqq_expire`: an empty queue with nothing in flight is isochronous so far:
        // when it may next be deemed soft real-time; with requests in flight, that waits
        // for their completion.
        if self.low_latency && self.queues[q].queued() == 0 {
            if self.queues[q].dispatched == 0 {
                self.queues[q].soft_rt_next_start = self.softrt_next_start(q, ctx.now);
            } else {
                self.queues[q].softrt_update = true;
            }
        }
        let max = self.bfq_max_budget();
        let min = self.min_budget();
        let old_rules = self.kernel < 5012;
        let qq = &mut self.queues[q];
        // `__bfq_bfqq_expire`: a shared queue gone seeky is to be split.
        if qq.shared && qq.seeky() {
            qq.split_coop = true;
        }
        let served = qq.service;
        let (stream, sync, shared) = (qq.stream, qq.sync, qq.shared);
        if old_rules && reason == ExpireReason::TooIdle && served <= 2 * qq.budget / 10 {
            qq.io_bound_flag = false;
            qq.requests_within_timer = 0;
        }
        // Budget feedback (`__bfq_bfqq_recalc_budget`).
        if !qq.sync {
            qq.max_budget = max;
        } else if qq.wr_coeff > 1 {
            qq.max_budget = 2 * min;
        } else {
            let b = qq.max_budget;
            qq.max_budget = match reason {
                ExpireReason::TooIdle if qq.dispatched > 0 => (2 * b).min(max),
                ExpireReason::TooIdle if b > 5 * min => b - 4 * min,
                ExpireReason::TooIdle => min,
                ExpireReason::BudgetTimeout => (2 * b).min(max),
                ExpireReason::BudgetExhausted => (4 * b).min(max),
                ExpireReason::NoMoreRequests => served.max(min),
                // CFQ's reasons; BFQ never gives them.
                ExpireReason::Preempted | ExpireReason::SliceUsed | ExpireReason::AsyncRqLimit => b,
            };
        }
        // Timestamps: charge what was served, then reposition for the next budget.
        let weight = qq.weight();
        qq.start += f64::from(served) / weight;
        qq.finish = qq.start;
        let still_busy = qq.queued() > 0 || requeue_empty;
        qq.non_blocking_wait_rq = !still_busy
            && !matches!(
                reason,
                ExpireReason::BudgetTimeout | ExpireReason::BudgetExhausted
            );
        // Kept for a queue that may come back in time to use the rest of its budget.
        if !qq.non_blocking_wait_rq {
            qq.service = 0;
        }
        if still_busy {
            // Never below its next request's charge (`__bfq_bfqq_recalc_budget`: budget =
            // max(max_budget, serv_to_charge(next_rq))), or a raised queue whose merged
            // request outgrew 2 x min_budget would expire for ever without serving it.
            let next_charge = qq
                .sorted
                .iter()
                .next()
                .map_or(0, |(_, r)| ctx.rqs[*r as usize].sectors);
            let next_charge = if !sync && qq.wr_coeff == 1 {
                next_charge * ASYNC_CHARGE
            } else {
                next_charge
            };
            qq.budget = qq.max_budget.max(next_charge).max(1);
            qq.finish = qq.start + f64::from(qq.budget) / weight;
        } else {
            // `__bfq_bfqq_expire`: `budget_timeout`, overloaded, keeps when the queue was
            // left with nothing queued or in flight (weight raising's "idle for long").
            if self.queues[q].dispatched == 0 {
                self.queues[q].budget_timeout = ctx.now.max(1);
            }
            self.leave_busy(q);
        }
        self.in_service = None;
        self.log(Decision::Expire {
            stream,
            sync,
            reason,
            served,
            shared,
        });
    }

    /// `bfq_bfqq_budget_timeout`: `jiffies >= budget_timeout`.
    pub(super) fn budget_timed_out(&self, q: usize, now: u64) -> bool {
        now >= self.queues[q].budget_timeout
    }

    /// `bfq_may_expire_for_budg_timeout`: timed out, and not idling with less than a third
    /// of the budget left (a queue waiting for its next request with most of its budget
    /// used keeps its slot).
    pub(super) fn may_expire_for_budget_timeout(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        let left = qq.budget.saturating_sub(qq.service);
        (!self.wait_request || left >= qq.budget / 3) && self.budget_timed_out(q, now)
    }
}
