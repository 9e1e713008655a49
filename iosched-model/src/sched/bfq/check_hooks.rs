//! The hooks through which [`crate::bfqcheck`] drives the model with a recording and BFQ's
//! logged state: what the model holds (a request's queue, the queue in service, the shared
//! one) and what BFQ did, imposed on the model (a dispatch opportunity, a dispatch, an
//! expiration, a queue put in service, a merge, a max budget). The simulator calls none.

use crate::sched::{Ctx, ExpireReason, IdleOutcome, MergeWhy, RqId};

use super::Bfq;

impl Bfq {
    /// Trace-driven check: the queue a request went to, while it is held.
    pub(crate) fn queue_of_request(&self, rq: RqId) -> Option<usize> {
        let held = self.rq_pos.get(rq as usize).is_some_and(|p| *p != u64::MAX);
        held.then(|| self.queue_of[rq as usize] as usize)
    }

    /// Trace-driven check: the queue in service.
    pub(crate) fn in_service_queue(&self) -> Option<usize> {
        self.in_service
    }

    /// Trace-driven check: the stream a queue is named after.
    pub(crate) fn stream_of_queue(&self, q: usize) -> u32 {
        self.queues[q].stream
    }

    /// Trace-driven check: a dispatch opportunity, decided as `bfq_select_queue` would
    /// (expirations, a new queue in service); what it would serve is not taken.
    pub(crate) fn decide_dispatch(&mut self, ctx: &Ctx) {
        self.now = ctx.now;
        self.sample_hw_tag(ctx);
        self.select_queue(ctx);
    }

    /// Trace-driven check: `rq` went to the driver (whatever the model would have chosen).
    pub(crate) fn force_dispatch(&mut self, ctx: &Ctx, rq: RqId) {
        self.now = ctx.now;
        let Some(q) = self.queue_of_rq(rq) else {
            return;
        };
        if self.rq_pos.get(rq as usize).is_none_or(|p| *p == u64::MAX) {
            return;
        }
        if self.in_service == Some(q) && self.wait_request {
            self.end_idle(IdleOutcome::Arrived);
        }
        self.serve(ctx, q, rq);
    }

    /// Trace-driven check: BFQ's peak-rate estimator set its max budget
    /// (`update_thr_responsiveness_params`: "new max_budget = N"); the model's own
    /// estimate gives way to it from now on.
    pub(crate) fn force_max_budget(&mut self, sectors: u32) {
        self.rate.imposed = true;
        self.rate.max_budget = sectors.max(1);
        self.rate.peak = f64::from(sectors) * 1e9 / self.rate.timeout_ns as f64;
    }

    /// Trace-driven check: BFQ expired the queue in service for `reason`.
    pub(crate) fn force_expire(&mut self, ctx: &Ctx, reason: ExpireReason) {
        self.now = ctx.now;
        if let Some(q) = self.in_service {
            self.expire(ctx, q, reason);
        }
    }

    /// Trace-driven check: the queue B-WF2Q+ would put in service now (none in service).
    pub(crate) fn next_choice(&mut self, ctx: &Ctx) -> Option<usize> {
        self.now = ctx.now;
        self.wf2q_choice(ctx)
    }

    /// Trace-driven check: BFQ put `q` in service; the model's queue in service, if another,
    /// leaves service without an expiration (it never was in service for BFQ).
    pub(crate) fn force_in_service(&mut self, ctx: &Ctx, q: usize) {
        self.now = ctx.now;
        if self.in_service == Some(q) {
            return;
        }
        self.end_idle(IdleOutcome::Preempted);
        // For BFQ the model's queue in service was just a busy queue; an empty one had
        // left the busy set (emptied while not in service).
        if let Some(old) = self.in_service.take()
            && self.queues[old].queued() == 0
            && self.queues[old].busy
        {
            let qq = &mut self.queues[old];
            let weight = qq.weight();
            qq.start += f64::from(qq.service) / weight;
            qq.finish = qq.start;
            qq.service = 0;
            self.leave_busy(old);
        }
        if !self.queues[q].busy {
            let first = self.queues[q].sorted.iter().next().map(|(_, r)| *r);
            let sectors = first.map_or(8, |r| ctx.rqs[r as usize].sectors);
            self.activate(ctx, q, sectors);
            self.in_service = None;
        }
        self.set_in_service(ctx, q);
    }

    /// Trace-driven check: BFQ merged `stream`'s queue into `into` ("merging with
    /// queue") and the model had not; stably if a stable merge had been scheduled for
    /// the stream. Not logged: the decision is BFQ's.
    pub(crate) fn force_merge(&mut self, ctx: &Ctx, stream: u32, into: usize) {
        self.now = ctx.now;
        let Some(q) = self.queue_by_key((u64::from(stream), true)) else {
            return;
        };
        let into = self.merge_chain_end(into);
        if q == into || self.queues[into].members.is_empty() {
            return;
        }
        let stable = self
            .stable_scheduled
            .get(stream as usize)
            .copied()
            .unwrap_or(false);
        let why = if stable {
            self.mark_stably_merged(stream, into);
            MergeWhy::StableDelayed
        } else {
            MergeWhy::Close
        };
        self.queues[q].merged_into = Some((into, why));
        self.merges_imposed = true;
        self.merge_queues(ctx, q, into, stream, why);
        self.merges_imposed = false;
    }

    /// Trace-driven check: whether BFQ's log names queue `q` `SHARED`.
    pub(crate) fn queue_is_shared(&self, q: usize) -> bool {
        self.queues[q].shared
    }

    /// Trace-driven check: the queue BFQ's log calls `SHARED`: the one in service if
    /// shared, else a shared one with requests, else any shared one.
    pub(crate) fn shared_queue(&self) -> Option<usize> {
        let shared = |q: &usize| self.queues[*q].shared && !self.queues[*q].members.is_empty();
        self.in_service
            .filter(shared)
            .or_else(|| {
                (0..self.queues.len())
                    .filter(shared)
                    .find(|q| self.queues[*q].queued() > 0)
            })
            .or_else(|| (0..self.queues.len()).find(shared))
    }
}
