//! Idling (cfq-iosched.c `cfq_should_idle`, `cfq_arm_slice_timer`): whether an emptied
//! queue is waited for (its idle window, the last queue of its service tree, `group_idle`
//! for its group's last one), the slice timer and the end of a wait; a deep seeky queue the
//! device outruns loses its idle window; and whether the device queues commands
//! (`cfq_update_hw_tag`), which turns idling off on non-rotational devices.

use crate::sched::{Ctx, Decision, IdleOutcome, IdleReason};

use super::{CLASS_IDLE, Cfq};

/// `CFQ_HW_QUEUE_MIN`, and the samples before deciding `hw_tag`.
const HW_QUEUE_MIN: u32 = 5;

const HW_SAMPLES: u32 = 50;

impl Cfq {
    pub(super) fn hw_tag(&self) -> bool {
        // Unknown counts as queueing (the kernel's -1 is truthy).
        self.hw_tag.unwrap_or(true)
    }

    fn nonrot_queueing(&self) -> bool {
        !self.rotational && self.hw_tag()
    }

    /// `cfq_should_idle`, with the clause that held.
    pub(super) fn should_idle(&self, q: usize) -> Option<IdleReason> {
        let qq = &self.queues[q];
        if self.slice_idle == 0 || qq.class == CLASS_IDLE {
            return None;
        }
        if qq.idle_window && !self.nonrot_queueing() {
            return Some(IdleReason::IdleWindow);
        }
        let tree_big = self.tree_ttime[self.tree_index(q)].big(self.slice_idle);
        (qq.sync && self.tree_count(q) == 1 && !tree_big).then_some(IdleReason::TreeIdle)
    }

    /// Another queue holds requests (`total_queued` counts every queue's).
    fn others_pending(&self, q: usize) -> bool {
        self.total_queued > self.queues[q].sorted.len()
    }

    pub(super) fn end_idle(&mut self, outcome: IdleOutcome) {
        if !self.wait_request {
            return;
        }
        self.wait_request = false;
        self.timer = None;
        if let Some(q) = self.active {
            let others_pending = self.others_pending(q);
            let stream = self.queues[q].stream;
            let waited_ns = self.now - self.idle_since;
            self.log(Decision::IdleEnd {
                stream,
                outcome,
                waited_ns,
                others_pending,
            });
        }
    }

    /// An emptied active queue, its slice not used: whether to keep it for the requests it
    /// has in flight (`cfq_should_idle`), after a deep seeky queue the device outruns
    /// loses its idle window.
    pub(super) fn check_idle_on_empty(&mut self, ctx: &Ctx, q: usize) -> bool {
        let qq = &mut self.queues[q];
        if qq.seeky()
            && qq.idle_window
            && (qq.slice_new
                || qq.slice_end.saturating_sub(ctx.now) > ctx.now.saturating_sub(qq.slice_start))
        {
            qq.deep = false;
            qq.idle_window = false;
        }
        self.queues[q].dispatched > 0 && self.should_idle(q).is_some()
    }

    /// `cfq_arm_slice_timer`.
    pub(super) fn arm_slice_timer(&mut self, ctx: &Ctx, q: usize) {
        if self.nonrot_queueing() && self.group_idle == 0 {
            return;
        }
        let reason = match self.should_idle(q) {
            Some(r) => r,
            None if self.group_idle > 0 => IdleReason::GroupIdle,
            None => return,
        };
        let qq = &self.queues[q];
        if qq.dispatched > 0 || !ctx.stream_has_future(qq.stream) {
            return;
        }
        // Not past the slice: a think time longer than what is left is not waited for.
        if qq.ttime.valid() && qq.slice_end.saturating_sub(ctx.now) < qq.ttime.mean {
            return;
        }
        // Group idle only for the group's last queue, and not when processes of its service
        // tree think longer than group_idle.
        let tree_big = self.tree_ttime[self.tree_index(q)].big(self.group_idle);
        if reason == IdleReason::GroupIdle && (self.groups[qq.group].busy > 1 || tree_big) {
            return;
        }
        let sl = if reason == IdleReason::GroupIdle {
            self.group_idle
        } else {
            self.slice_idle
        };
        let stream = qq.stream;
        self.wait_request = true;
        self.idle_reason = reason;
        self.timer = Some(ctx.now + sl);
        self.idle_since = ctx.now;
        let others_pending = self.others_pending(q);
        self.log(Decision::Idle {
            stream,
            reason,
            slice_ns: sl,
            others_pending,
        });
    }

    pub(super) fn update_hw_tag(&mut self, ctx: &Ctx) {
        self.hw_tag_est_depth = self.hw_tag_est_depth.max(ctx.in_driver);
        if self.hw_tag == Some(true) {
            return;
        }
        if self.total_queued as u32 <= HW_QUEUE_MIN && ctx.in_driver <= HW_QUEUE_MIN {
            return;
        }
        self.hw_samples += 1;
        if self.hw_samples < HW_SAMPLES {
            return;
        }
        self.hw_tag = Some(self.hw_tag_est_depth >= HW_QUEUE_MIN);
    }
}
