//! B-WF2Q+ (bfq-wf2q.c): the busy set and its weight sum (`bfq_del_bfqq_busy`), the next
//! queue in service, the eligible one (start <= virtual time) of the smallest finish time
//! (`bfq_get_next_queue`, `__bfq_set_in_service_queue`, `bfq_set_budget_timeout`), budgets
//! (`bfq_max_budget`, `bfq_min_budget`) and what a request costs (`bfq_serv_to_charge`).
//! Every busy queue is on one service tree under one virtual time: groups' own schedulers
//! are not modelled. When a queue expires is `expiry`'s; what it dispatches, `dispatch`'s.

use crate::sched::{Ctx, Decision};

use super::weight_raising::WR_COEFF;
use super::{Bfq, Queue};

pub(super) const DEFAULT_MAX_BUDGET: u32 = 16384;

const STATS_MIN_BUDGETS: u32 = 194;

/// Async queues are charged this much more per sector.
pub(super) const ASYNC_CHARGE: u32 = 3;

impl Bfq {
    pub(super) fn bfq_max_budget(&self) -> u32 {
        if self.user_max_budget > 0 {
            self.user_max_budget
        } else if self.budgets_assigned < STATS_MIN_BUDGETS {
            DEFAULT_MAX_BUDGET
        } else {
            self.rate.max_budget
        }
    }

    pub(super) fn min_budget(&self) -> u32 {
        (self.bfq_max_budget() / 32).max(1)
    }

    pub(super) fn charge(&self, q: usize, sectors: u32) -> u32 {
        let qq = &self.queues[q];
        if !qq.sync && qq.wr_coeff == 1 {
            sectors * ASYNC_CHARGE
        } else {
            sectors
        }
    }

    /// The next queue by B-WF2Q+, set in service.
    pub(super) fn pick_next(&mut self, ctx: &Ctx) -> Option<usize> {
        let q = self.wf2q_choice(ctx)?;
        self.set_in_service(ctx, q);
        Some(q)
    }

    /// B-WF2Q+'s choice: among busy queues with S <= V, the smallest F.
    pub(super) fn wf2q_choice(&mut self, ctx: &Ctx) -> Option<usize> {
        // A queue holding requests is busy; bookkeeping that left one idle would strand
        // its requests for ever.
        let is_stranded = |q: &Queue| !q.busy && q.queued() > 0;
        // Looked for at every pick, found hardly ever: no list built unless there is one.
        let stranded: Vec<usize> = if self.queues.iter().any(is_stranded) {
            (0..self.queues.len())
                .filter(|&q| is_stranded(&self.queues[q]))
                .collect()
        } else {
            Vec::new()
        };
        for q in stranded {
            let first = self.queues[q].sorted.iter().next().map(|(_, r)| *r);
            let sectors = first.map_or(8, |r| ctx.rqs[r as usize].sectors);
            self.activate(ctx, q, sectors);
        }
        // Busy queues, also an empty one requeued after a preemption (see `expire`).
        let candidates = || {
            self.queues
                .iter()
                .enumerate()
                .filter(|(_, q)| q.busy && (super::REQUEUE_EMPTY_PREEMPTED || q.queued() > 0))
        };
        let min_start = candidates().map(|(_, q)| q.start).reduce(f64::min)?;
        if min_start > self.vtime {
            self.vtime = min_start;
        }
        let v = self.vtime;
        let (q, _) = candidates()
            .filter(|(_, q)| q.start <= v)
            .min_by(|a, b| a.1.finish.total_cmp(&b.1.finish).then(a.0.cmp(&b.0)))?;
        Some(q)
    }

    /// `__bfq_set_in_service_queue` and `bfq_set_budget_timeout`.
    pub(super) fn set_in_service(&mut self, ctx: &Ctx, q: usize) {
        self.budgets_assigned = (7 * self.budgets_assigned + 256) / 8;
        let timeout = self.timeout_jiffies * self.jiffy_ns;
        // `jiffies + bfq_timeout`: the timeout falls on a tick, so a slot lasts between
        // timeout - 1 jiffy and timeout (ticks taken at multiples of a jiffy on the
        // trace's monotonic clock).
        let tick = ctx.now - ctx.now % self.jiffy_ns;
        let qq = &mut self.queues[q];
        qq.service = 0;
        qq.fifo_checked = false;
        let factor = if qq.wr_coeff == WR_COEFF {
            u64::from(WR_COEFF)
        } else {
            1
        };
        qq.budget_timeout = tick + timeout * factor;
        let (stream, sync, budget) = (qq.stream, qq.sync, qq.budget);
        self.in_service = Some(q);
        self.in_serv_last_pos = 0;
        self.log(Decision::InService {
            stream,
            sync,
            budget,
        });
    }

    /// The queue leaves the busy set (`bfq_del_bfqq_busy`).
    pub(super) fn leave_busy(&mut self, q: usize) {
        let qq = &mut self.queues[q];
        qq.busy = false;
        self.busy -= 1;
        let weight = qq.weight();
        self.busy_weight -= weight;
        if qq.wr_coeff > 1 {
            self.wr_busy -= 1;
        }
        self.group_busy(q, weight, false);
    }

    /// Leaves the busy set emptied while not in service (`bfq_del_bfqq_busy` with its
    /// budget and service reset, as in `bfq_remove_request`).
    pub(super) fn leave_busy_charged(&mut self, q: usize) {
        let qq = &mut self.queues[q];
        let weight = qq.weight();
        qq.start += f64::from(qq.service) / weight;
        qq.finish = qq.start;
        qq.service = 0;
        qq.budget = 0;
        qq.non_blocking_wait_rq = false;
        self.leave_busy(q);
    }
}
