//! A dispatch opportunity (cfq-iosched.c `cfq_select_queue`, `cfq_may_dispatch`,
//! `cfq_check_fifo`, `cfq_choose_req`): whether the active queue keeps its slice, waits
//! or expires; how many requests it may have in the driver; which of its requests is next.

use crate::sched::{Ctx, ExpireReason, IdleOutcome, RqId, expired_fifo_head};

use super::{CLASS_IDLE, Cfq};

impl Cfq {
    /// `cfq_select_queue`.
    pub(super) fn select_queue(&mut self, ctx: &Ctx) -> Option<usize> {
        for _ in 0..(self.queues.len() * 2 + 4) {
            let Some(q) = self.active else {
                self.pick_next()?;
                continue;
            };
            let g = self.queues[q].group;
            // The group's last queue waited for its next request (`wait_busy`): it has it,
            // so the group keeps its place on the tree as the queue expires.
            if self.queues[q].wait_busy && !self.queues[q].sorted.is_empty() {
                // Its slice was used (or nearly) when it began to wait.
                self.expire(q, ExpireReason::SliceUsed, false);
                continue;
            }
            let used = self.slice_used(q, ctx.now);
            if used {
                // The group's only queue, emptied, idling with requests in flight: it used
                // its slice idling, so it waits for them (the group stays backlogged).
                let qq = &self.queues[q];
                if self.groups[g].busy == 1
                    && qq.sorted.is_empty()
                    && qq.dispatched > 0
                    && self.should_idle(q).is_some()
                {
                    return None;
                }
            } else if !self.queues[q].sorted.is_empty() {
                self.end_idle(IdleOutcome::Arrived);
                return Some(q);
            } else if self.wait_request {
                return None;
            }
            if !used && self.check_idle_on_empty(ctx, q) {
                return None;
            }
            // check_group_idle: the group's only queue waits for its requests in flight.
            let gg = &self.groups[g];
            if self.group_idle > 0
                && gg.busy == 1
                && gg.dispatched > 0
                && !gg.ttime.big(self.group_idle)
            {
                return None;
            }
            let reason = if used {
                ExpireReason::SliceUsed
            } else {
                ExpireReason::NoMoreRequests
            };
            self.expire(q, reason, false);
        }
        None
    }

    /// `cfq_may_dispatch`.
    pub(super) fn may_dispatch(&self, ctx: &Ctx, q: usize) -> bool {
        let qq = &self.queues[q];
        if self.in_flight[1] > 0 && !qq.sync {
            return false;
        }
        if self.in_flight[0] > 0 && self.should_idle(q).is_some() {
            return false;
        }
        let mut max = (self.quantum / 2).max(1);
        if qq.class == CLASS_IDLE {
            max = 1;
        }
        if qq.dispatched >= max {
            if qq.class == CLASS_IDLE {
                return false;
            }
            let busy_sync = self.busy_sync;
            let promote_sync = qq.sync && busy_sync == 1;
            // `cfq_slice_used_soon`.
            let used_soon =
                qq.slice_new || ctx.now + self.slice_idle * u64::from(qq.dispatched) > qq.slice_end;
            if self.busy > 1 && used_soon && !promote_sync {
                return false;
            }
            max = if self.busy == 1 || promote_sync {
                u32::MAX
            } else {
                self.quantum
            };
        }
        // Async depth ramps up with the time since a sync request was last delayed.
        if !qq.sync && self.low_latency {
            let mut depth = (ctx.now.saturating_sub(self.last_delayed_sync) / self.slice[1])
                .min(u64::from(u32::MAX)) as u32;
            if depth == 0 && qq.dispatched == 0 {
                depth = 1;
            }
            max = max.min(depth);
        }
        qq.dispatched < max
    }

    /// The queue's next request: the FIFO's head once per slice if expired, else
    /// `cfq_choose_req` between the next request ahead of the head and the one behind it.
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
        let head = qq.last_pos;
        let ahead = qq.sorted.range((head, 0)..).next().copied();
        let behind = qq.sorted.range(..(head, 0)).next_back().copied();
        let back = behind.filter(|(s, _)| head - s <= self.back_seek_max);
        match (ahead, back) {
            (Some((a, ra)), Some((b, rb))) => {
                if (head - b) * self.back_seek_penalty < a - head {
                    Some(rb)
                } else {
                    Some(ra)
                }
            }
            (Some((_, r)), None) | (None, Some((_, r))) => Some(r),
            // Only requests behind, beyond back_seek_max: wrap to the lowest.
            (None, None) => qq.sorted.iter().next().map(|(_, r)| *r),
        }
    }
}
