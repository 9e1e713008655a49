//! A queue becoming busy (bfq-iosched.c `bfq_bfqq_handle_idle_busy_switch`): the budget it
//! starts with (`bfq_bfqq_update_budg_for_activation`: the rest of the old one for a queue
//! back in time), weight raising on arrival (`bfq_update_bfqq_wr_on_rq_arrival`), its
//! B-WF2Q+ timestamps (bfq-wf2q.c `__bfq_activate_entity`), and whether it preempts the
//! queue in service (hole recovery, `bfq_bfqq_higher_class_or_weight`, plugging no longer
//! worth it). How long raising lasts is `weight_raising`'s; the expiration, `expiry`'s.

use crate::sched::{Ctx, Decision, ExpireReason};

use super::groups::GROUP_WEIGHT;
use super::queues::DEFAULT_WEIGHT;
use super::weight_raising::{SOFTRT_COEFF, WR_COEFF, WR_MIN_IDLE_NS, WR_RT_MAX_TIME_NS};
use super::{Bfq, Queue};

impl Bfq {
    /// `bfq_bfqq_higher_class_or_weight` (5.3+): `q`'s weight above `other`'s, compared
    /// between the entities that meet in one scheduler: the queues themselves when in the
    /// same group, else each one's group (a queue of the root group stands for itself).
    /// A group's weight is not in the recording: cgroup v2's default, 100, stands for it.
    pub(super) fn higher_weight(&self, q: usize, other: usize) -> bool {
        let (a, b) = (&self.queues[q], &self.queues[other]);
        let same_group = (a.root_group && b.root_group) || (!self.cgroups || a.cgroup == b.cgroup);
        let level_weight = |x: &Queue| {
            if same_group || x.root_group {
                x.weight()
            } else {
                GROUP_WEIGHT
            }
        };
        level_weight(a) > level_weight(b)
    }

    /// Empty -> busy (`bfq_bfqq_handle_idle_busy_switch`).
    pub(super) fn activate(&mut self, ctx: &Ctx, q: usize, first_sectors: u32) {
        let now = ctx.now;
        let wr_dur = self.wr_duration();
        let min_budget = self.min_budget();
        let qq = &mut self.queues[q];
        let idle_for_long = qq.dispatched == 0
            && (qq.budget_timeout == 0 || now > qq.budget_timeout + WR_MIN_IDLE_NS);
        let arrived_in_time = now.saturating_sub(qq.last_end_request) <= 3 * self.slice_idle;
        // `bfq_bfqq_update_budg_for_activation`: a queue that expired only because it was
        // momentarily empty and whose request came back in time goes on with the budget it
        // had left (and may preempt to recover its hole); any other starts a fresh budget.
        let left = qq.budget.saturating_sub(qq.service);
        let wants_to_preempt = qq.non_blocking_wait_rq && arrived_in_time && left > 0;
        qq.non_blocking_wait_rq = false;
        qq.service = 0;
        qq.just_created = false;
        // A shared queue is raised only for stably merged processes (5.14+), and a queue
        // just split keeps the raising state it got back for 2 s
        // (`bfq_bfqq_handle_idle_busy_switch`).
        let owned = !qq.shared
            || qq.members.iter().any(|m| {
                self.stably_merged
                    .get(*m as usize)
                    .copied()
                    .unwrap_or(false)
            });
        let split_settled = qq.split_time.is_none_or(|t| now > t + WR_MIN_IDLE_NS);
        let mut raised = None;
        // 5.12+: a weight the user set (an I/O priority other than the default) is never
        // raised ("do not raise non-default weights").
        let default_weight =
            self.kernel < 5012 || (qq.orig_weight - DEFAULT_WEIGHT).abs() < f64::EPSILON;
        let in_burst = qq.in_large_burst;
        // `BFQQE_TOTALLY_SEEKY` (5.2+): all of the last 32 requests seeky.
        let totally_seeky = self.kernel >= 5002 && qq.seek_hist == u32::MAX;
        let soft_rt = !totally_seeky
            && !in_burst
            && now > qq.soft_rt_next_start
            && qq.dispatched == 0
            && default_weight
            && owned;
        // `idle_for_long` in the kernel also requires a non-merged (or stably merged) queue
        // and a split at least `bfq_wr_min_idle_time` ago.
        let interactive = !in_burst && idle_for_long && default_weight && owned && split_settled;
        let old_wr_coeff = qq.wr_coeff;
        qq.budget = if wants_to_preempt {
            left.min(qq.max_budget)
        } else {
            qq.max_budget.max(first_sectors)
        };
        // `bfq_update_bfqq_wr_on_rq_arrival`.
        if self.low_latency {
            if old_wr_coeff == 1 && qq.sync && (interactive || soft_rt) {
                if interactive {
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_dur = wr_dur;
                    qq.wr_service = 0;
                } else {
                    qq.wr_start_at_switch_to_srt = None;
                    qq.wr_coeff = SOFTRT_COEFF;
                    qq.wr_dur = WR_RT_MAX_TIME_NS;
                }
                qq.budget = qq.budget.min(2 * min_budget).max(first_sectors);
                raised = Some((qq.stream, qq.wr_coeff, qq.wr_dur));
            } else if old_wr_coeff > 1 {
                if interactive {
                    qq.wr_coeff = WR_COEFF;
                    qq.wr_dur = wr_dur;
                } else if in_burst {
                    qq.wr_coeff = 1;
                } else if soft_rt {
                    // Still or again soft real-time: the soft real-time period restarts
                    // (from an interactive one, which it may go back to).
                    if qq.wr_dur != WR_RT_MAX_TIME_NS {
                        qq.wr_start_at_switch_to_srt = Some(qq.wr_start);
                        qq.wr_dur = WR_RT_MAX_TIME_NS;
                        qq.wr_coeff = SOFTRT_COEFF;
                    }
                    qq.wr_start = now;
                }
            }
            // `bfq_add_request`: a raising period starts (or an interactive one restarts).
            if old_wr_coeff == 1 || qq.wr_coeff == 1 || interactive {
                qq.wr_start = now;
            }
        }
        qq.last_idle_bklogged = now;
        qq.service_from_backlogged = 0;
        qq.softrt_update = false;
        qq.busy = true;
        // B-WF2Q+ activation: S = max(V, F_old) (back-shifted when it only paused).
        let weight = qq.weight();
        // Back-shifted (`__bfq_activate_entity`): from its old finish time, even when the
        // system's virtual time has passed it.
        qq.start = if wants_to_preempt {
            qq.finish
        } else {
            qq.finish.max(self.vtime)
        };
        qq.finish = qq.start + f64::from(qq.budget) / weight;
        let raised_now = qq.wr_coeff > 1;
        self.busy += 1;
        self.busy_weight += weight;
        self.group_busy(q, weight, true);
        if raised_now {
            self.wr_busy += 1;
        }
        if let Some((stream, coeff, duration_ns)) = raised {
            self.log(Decision::Raise {
                stream,
                coeff,
                duration_ns,
            });
        }
        // Preemption of the in-service queue.
        if let Some(i) = self.in_service
            && i != q
        {
            let higher = self.kernel >= 5003 && self.higher_weight(q, i);
            let plug_worthless = self.kernel >= 5012 && self.better_to_idle(ctx, i).is_none();
            // Hole recovery: before 5.3 only by a queue raised more than the in-service one.
            let (wq, wi) = (self.queues[q].wr_coeff, self.queues[i].wr_coeff);
            let hole = wants_to_preempt
                && if self.kernel >= 5003 {
                    wq >= wi
                } else {
                    wq > wi
                };
            if hole || higher || plug_worthless {
                self.expire(ctx, i, ExpireReason::Preempted);
            }
        }
    }
}
