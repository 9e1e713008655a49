//! Time slices (cfq-iosched.c `cfq_prio_slice`, `cfq_scaled_cfqq_slice`, `cfq_slice_used`,
//! `cfq_cfqq_slice_usage`) and a slice's end (`cfq_slice_expired`): what is left of it
//! kept for the queue's next place, its group charged, the queue back on the tree or off.

use crate::sched::{Decision, ExpireReason, IdleOutcome};

use super::groups::SERVICE_SHIFT;
use super::{CLASS_RT, Cfq, JIFFY_NS};

/// `CFQ_SLICE_SCALE`.
const SLICE_SCALE: u64 = 5;

impl Cfq {
    /// `cfq_cfqq_slice_usage`: the time `q` used of its slice.
    pub(super) fn slice_usage(&self, q: usize) -> u64 {
        let (qq, now) = (&self.queues[q], self.now);
        if qq.slice_new || qq.slice_start == now {
            // Expired before its first completion: charge the time since it was chosen.
            now.saturating_sub(qq.dispatch_start).max(JIFFY_NS)
        } else {
            now.saturating_sub(qq.slice_start).min(qq.allocated_slice)
        }
    }

    /// `cfq_prio_slice`.
    pub(super) fn prio_slice(&self, sync: bool, prio: u64) -> u64 {
        let base = self.slice[usize::from(sync)];
        let step = base / SLICE_SCALE;
        (base + step * 4).saturating_sub(step * prio)
    }

    /// `cfq_scaled_cfqq_slice`: with low_latency, shrink slices so that all busy queues of
    /// the class are served within target_latency.
    pub(super) fn scaled_slice(&mut self, q: usize) -> u64 {
        let (sync, prio, class) = (
            self.queues[q].sync,
            self.queues[q].prio,
            self.queues[q].class,
        );
        let mut slice = self.prio_slice(sync, prio);
        if !self.low_latency {
            return slice;
        }
        let rt = usize::from(class == CLASS_RT);
        let g = self.queues[q].group;
        let busy = u64::from(self.groups[g].busy_by_rt[rt]);
        // `cfq_group_get_avg_queues`: follows increases fast, decreases slowly.
        let gg = &mut self.groups[g];
        let avg = gg.busy_avg[rt];
        let (lo, hi) = (avg.min(busy), avg.max(busy));
        gg.busy_avg[rt] = (3 * hi + lo + 2) / 4;
        let iq = gg.busy_avg[rt];
        let sync_slice = self.slice[1];
        let expect_latency = sync_slice * iq;
        // `cfq_group_slice`: the group's share of target_latency.
        let group_slice = (self.target_latency * gg.vfraction.max(1)) >> SERVICE_SHIFT;
        if expect_latency > group_slice {
            let low_slice = slice.min(2 * self.slice_idle * slice / sync_slice);
            slice = (slice * group_slice / expect_latency).max(low_slice);
        }
        slice
    }

    pub(super) fn slice_used(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        !qq.slice_new && now >= qq.slice_end
    }

    /// `cfq_slice_expired`; `timed_out` keeps the slice's remainder (or overrun) for the
    /// queue's next position.
    pub(super) fn expire(&mut self, q: usize, reason: ExpireReason, timed_out: bool) {
        let outcome = match reason {
            ExpireReason::TooIdle => IdleOutcome::TimerExpired,
            ExpireReason::Preempted => IdleOutcome::Preempted,
            _ => IdleOutcome::Arrived,
        };
        self.end_idle(outcome);
        let now = self.now;
        let qq = &mut self.queues[q];
        qq.wait_busy = false;
        if timed_out && !qq.slice_new {
            qq.slice_resid = qq.slice_end as i64 - now as i64;
        }
        let (stream, sync, served) = (qq.stream, qq.sync, qq.slice_sectors);
        self.group_served(q);
        let qq = &self.queues[q];
        if qq.sorted.is_empty() {
            self.del_rr(q);
        } else {
            self.add_rr(q, now, false);
        }
        self.active = None;
        self.log(Decision::Expire {
            stream,
            sync,
            reason,
            served,
            shared: false,
        });
    }
}
