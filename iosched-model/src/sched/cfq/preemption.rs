//! Preemption on insertion (cfq-iosched.c `cfq_should_preempt`): whether a request's
//! queue takes the device from the active one. The expiration that follows, and the new
//! queue's place at the front of the tree, are the insertion's.

use crate::sched::{Ctx, RqId};

use super::{CLASS_IDLE, CLASS_RT, Cfq, WorkloadType};

/// `CFQQ_CLOSE_THR`: a request this close to the head may preempt an idling queue.
const CLOSE_THR: u64 = 8192;

impl Cfq {
    /// `cfq_should_preempt`: may a request for `new` (not active) take over?
    pub(super) fn should_preempt(&self, ctx: &Ctx, new: usize, rq: RqId) -> bool {
        let Some(a) = self.active else {
            return false;
        };
        let (nq, aq) = (&self.queues[new], &self.queues[a]);
        let r = &ctx.rqs[rq as usize];
        if nq.class == CLASS_IDLE {
            return false;
        }
        if aq.class == CLASS_IDLE {
            return true;
        }
        if aq.class == CLASS_RT && nq.class != CLASS_RT {
            return false;
        }
        if r.sync && !aq.sync && nq.sync {
            return true;
        }
        // Fairness among cgroups: only the active queue's group or its ancestors preempt.
        if !self.may_preempt_group(aq.group, nq.group) {
            return false;
        }
        if self.slice_used(a, ctx.now) {
            return true;
        }
        if nq.class == CLASS_RT && aq.class != CLASS_RT {
            return true;
        }
        if aq.wl_type() == WorkloadType::SyncNoIdle
            && nq.wl_type() == WorkloadType::SyncNoIdle
            && aq.sorted.is_empty()
        {
            return true;
        }
        let active_meta = aq.sorted.iter().any(|(_, x)| ctx.rqs[*x as usize].meta);
        if r.meta && !active_meta {
            return true;
        }
        if aq.sorted.is_empty() && self.should_idle(a).is_none() {
            return true;
        }
        if !self.wait_request {
            return false;
        }
        // `cfq_rq_close`: as good as the active queue's own next request.
        r.sector.abs_diff(aq.last_pos) <= CLOSE_THR
    }
}
