//! A dispatch opportunity (bfq-iosched.c `bfq_select_queue`, `bfq_check_fifo`,
//! `bfq_dispatch_rq_from_bfqq`): the queue in service keeps the device while its budget
//! and time last and its next request fits them, else it expires, idles or lets another
//! queue's I/O in (the decisions are `expiry`'s and `idling`'s); the request served is
//! charged to its queue and to the virtual time.

use crate::sched::{Ctx, Decision, ExpireReason, IdleOutcome, RqId, expired_fifo_head};

use super::Bfq;

impl Bfq {
    /// `bfqq->next_rq`: the FIFO's head when it has expired, looked at once per service
    /// period (`bfq_check_fifo`), else the first in sector order from the last position.
    pub(super) fn next_rq(&mut self, ctx: &Ctx, q: usize) -> Option<RqId> {
        let expire = self.fifo_expire[usize::from(self.queues[q].sync)];
        let qq = &mut self.queues[q];
        if let Some(f) = expired_fifo_head(
            &mut qq.fifo,
            &mut qq.fifo_checked,
            &self.rq_pos,
            ctx,
            expire,
        ) {
            return Some(f);
        }
        qq.sorted
            .range((qq.last_pos, 0)..)
            .next()
            .or_else(|| qq.sorted.iter().next())
            .map(|(_, r)| *r)
    }

    pub(super) fn select_queue(&mut self, ctx: &Ctx) -> Option<usize> {
        self.picked = None;
        for _ in 0..(self.queues.len() * 4 + 8) {
            let q = match self.in_service {
                Some(q) => q,
                None => {
                    self.pick_next(ctx)?;
                    continue;
                }
            };
            let left = self.queues[q].budget.saturating_sub(self.queues[q].service);
            // 6.x `bfq_select_queue`: an empty queue about to enjoy idling is not expired
            // for its timeout (the arrival or the idle timer will, as a budget timeout);
            // any other timed-out one is, even when empty.
            if self.may_expire_for_budget_timeout(q, ctx.now) && !self.must_idle(ctx, q) {
                self.expire(ctx, q, ExpireReason::BudgetTimeout);
                continue;
            }
            if let Some(next) = self.next_rq(ctx, q) {
                if self.charge(q, ctx.rqs[next as usize].sectors) > left {
                    self.expire(ctx, q, ExpireReason::BudgetExhausted);
                    continue;
                }
                // What is dispatched: the request checked here, as the kernel dispatches
                // `bfqq->next_rq`, the one its budget was checked against. The FIFO is looked
                // at once per service period, so a second look would not find an expired
                // head again and would serve the sector-order one instead.
                self.picked = Some((q, next));
                if self.wait_request {
                    // A small request arrived while idling did not end the idling
                    // (`bfq_rq_enqueued` leaves the timer armed, hoping for merges), but
                    // blk-mq runs the queue right after the insert, and `bfq_select_queue`
                    // then clears the wait and serves it ("the device is unplugged").
                    self.end_idle(IdleOutcome::Arrived);
                }
                return Some(q);
            }
            if self.wait_request
                || (self.queues[q].dispatched > 0 && self.better_to_idle(ctx, q).is_some())
            {
                if let Some((w, why)) = self.injection(ctx, q) {
                    let (into, from) = (self.queues[q].stream, self.queues[w].stream);
                    self.log(Decision::Inject { into, from, why });
                    return Some(w);
                }
                return None;
            }
            self.expire(ctx, q, ExpireReason::NoMoreRequests);
        }
        None
    }

    /// Hands `rq` of queue `q` to the driver (`bfq_dispatch_rq_from_bfqq`): charges it.
    pub(super) fn serve(&mut self, ctx: &Ctx, q: usize, rq: RqId) {
        let sectors = ctx.rqs[rq as usize].sectors;
        let pos = ctx.rqs[rq as usize].sector;
        self.rate
            .dispatched(ctx.now, pos, sectors, ctx.in_driver, self.last_completion);
        let charge = self.charge(q, sectors);
        let wsum = self.busy_weight;
        debug_assert_eq!(
            wsum,
            self.queues
                .iter()
                .filter(|o| o.busy)
                .map(|o| o.weight())
                .sum::<f64>()
        );
        self.vtime += f64::from(charge) / wsum.max(1.0);
        let allocated = self.allocated(q);
        let qq = &mut self.queues[q];
        qq.sorted.remove(&(self.rq_pos[rq as usize], rq));
        self.rq_pos[rq as usize] = u64::MAX;
        self.total_queued -= 1;
        qq.dispatched += 1;
        self.allocated_changed(q, allocated);
        let qq = &mut self.queues[q];
        qq.service += charge;
        if qq.service_from_backlogged == 0 {
            qq.first_io_time = ctx.now;
        }
        qq.service_from_backlogged += u64::from(charge);
        qq.last_pos = ctx.rqs[rq as usize].end();
        if self.in_service == Some(q) {
            self.in_serv_last_pos = qq.last_pos;
        }
        if qq.wr_coeff > 1 {
            qq.wr_service += u64::from(sectors);
        }
        // 6.x expires nothing here (`bfq_dispatch_rq_from_bfqq`: only idle-class queues):
        // a timed-out queue left empty expires at its completion, arrival or idle timer.
        self.end_raising_if_due(q, ctx.now);
        // A queue served while another is in service (injected) and left empty leaves
        // the busy set at once (`bfq_remove_request`: `bfq_del_bfqq_busy`, with its
        // budget and service reset): it no longer counts as busy for idling decisions,
        // and comes back with a fresh budget.
        if self.in_service != Some(q) && self.queues[q].busy && self.queues[q].queued() == 0 {
            self.leave_busy_charged(q);
        }
    }
}
