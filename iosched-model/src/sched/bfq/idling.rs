//! Whether to idle for the queue in service, and for how long (bfq-iosched.c
//! `bfq_better_to_idle`, `idling_boosts_thr_without_issues`,
//! `idling_needed_for_service_guarantees`, `bfq_asymmetric_scenario`, `bfq_bfqq_must_idle`,
//! `bfq_arm_slice_timer`), the facts that decision reads (short think time, the IO_bound
//! flag and `bfq_update_io_intensity`, the device's queueing, `bfq_update_hw_tag`), and
//! what is served meanwhile: waker detection (`bfq_check_waker`) and injection (the
//! waker's, the woken queue's, `bfq_choose_bfqq_for_injection`).

use crate::sched::{Ctx, Decision, IdleOutcome, IdleReason, InjectWhy};

use super::{Bfq, Queue};

pub(super) const MIN_TT_NS: u64 = 2_000_000;

const WR_MIN_SLICE_NS: u64 = 20_000_000;

impl Bfq {
    pub(super) fn hw_tag(&self) -> bool {
        // Unknown counts as queueing (the kernel's -1 is truthy).
        self.hw_tag.unwrap_or(true)
    }

    pub(super) fn short_ttime(&self, q: usize) -> bool {
        let q = &self.queues[q];
        let thr = if self.kernel >= 5012 {
            self.slice_idle / 2
        } else {
            self.slice_idle
        };
        !(q.ttime_samples > 80 && q.ttime_mean > thr)
    }

    fn io_bound(&self, q: usize) -> bool {
        let q = &self.queues[q];
        if self.kernel < 5012 {
            // Set after 120 requests arriving within 3 x slice_idle of a completion, cleared
            // by a too-idle expiration with little service.
            return q.io_bound_flag;
        }
        // 5.12+: the flag its last request left (`bfq_update_io_intensity`).
        q.io_bound_now
    }

    /// `num_groups_with_pending_reqs > thr`: groups with a queue busy or with requests in
    /// flight. Before 6.1 only non-root groups count, over 0; since 6.1 ("do not idle if
    /// only one group is activated", which also counts the root group:
    /// `bfq_add_bfqq_in_groups_with_pending_reqs` counts each queue's own group, root
    /// included), over 1. Runs on every completion, so it stops at the second group found.
    pub(super) fn groups_with_pending_exceed(&self) -> bool {
        let root_counted = self.kernel >= 6001;
        let active = |q: &Queue| {
            (root_counted || !q.root_group) && (q.busy || q.queued() > 0 || q.dispatched > 0)
        };
        // All root-group queues are in one group, whatever cgroup id their process had.
        let group = |q: &Queue| if q.root_group { None } else { Some(q.cgroup) };
        let mut first: Option<Option<u64>> = None;
        for q in self.queues.iter().filter(|q| active(q)) {
            match first {
                None if !root_counted => return true,
                None => first = Some(group(q)),
                Some(g) if g != group(q) => return true,
                Some(_) => {}
            }
        }
        false
    }

    pub(super) fn idling_boosts_thr(&self, q: usize) -> bool {
        let qq = &self.queues[q];
        let rot_without_queueing = self.rotational && !self.hw_tag();
        let seq_io_bound = !qq.seeky() && self.io_bound(q) && self.short_ttime(q);
        let boosts = rot_without_queueing || ((self.rotational || !self.hw_tag()) && seq_io_bound);
        boosts && self.wr_busy == 0
    }

    pub(super) fn asymmetric(&self, q: usize) -> Option<IdleReason> {
        let my = self.queues[q].weight();
        // The weights tree holds queues busy or with requests in flight; 6.x does not idle
        // for the queue of the smallest weight there (`bfq_asymmetric_scenario`:
        // `smallest_weight`): idling for it protects no one.
        // One pass over the queues: one lighter than `q`, one of another weight.
        let (mut lighter, mut other) = (false, false);
        for o in &self.queues {
            if (o.busy || o.dispatched > 0) && o.wr_coeff == 1 {
                let w = o.weight();
                lighter |= w < my - f64::EPSILON;
                other |= (w - my).abs() > f64::EPSILON;
            }
        }
        let smallest = self.kernel >= 5012 && !lighter;
        let varied = !smallest && other && self.queues[q].wr_coeff == 1;
        if varied {
            return Some(IdleReason::AsymmetricWeights);
        }
        self.groups_with_pending_exceed()
            .then_some(IdleReason::CgroupsPending)
    }

    pub(super) fn guarantees(&self, q: usize, in_driver: u32) -> Option<IdleReason> {
        let qq = &self.queues[q];
        if qq.wr_coeff > 1 && (self.wr_busy < self.busy || in_driver >= qq.dispatched + 4) {
            return Some(IdleReason::WeightRaised);
        }
        if self.kernel < 5012 && qq.wr_coeff > 1 && !qq.in_large_burst && self.kernel < 5002 {
            // 4.12-5.1: any raised queue is asymmetric.
            return Some(IdleReason::WeightRaised);
        }
        if let Some(r) = self.asymmetric(q) {
            return Some(r);
        }
        (self.kernel >= 5012 && self.busy == 1).then_some(IdleReason::OnlyBusyQueue)
    }

    /// `bfq_better_to_idle`, with the clause that held.
    ///
    /// The kernel stops idling for a queue whose process is gone (`bfqq_process_refs` is 0
    /// once `bfq_exit_icq` ran), not for one that merely issues nothing more: a process
    /// outlives its last I/O (a fio job tears down for tens of ms: in a BFQ log of eight
    /// `--time_based` readers each last queue expired `too_idle` a full slice_idle after
    /// its last completion, and `exit_bfqq` came 28 ms after it). The trace shows no
    /// exits, so a process is taken to be there for as long as its queue could idle, unless
    /// the replay ran out of its I/O before its recorded end ([`Ctx::stream_gone`]).
    pub(super) fn better_to_idle(&self, ctx: &Ctx, q: usize) -> Option<IdleReason> {
        let qq = &self.queues[q];
        if qq.sync && qq.members.iter().all(|m| ctx.stream_gone(*m)) {
            return None;
        }
        if self.strict {
            return Some(IdleReason::Strict);
        }
        if self.slice_idle == 0 || !qq.sync {
            return None;
        }
        if self.idling_boosts_thr(q) {
            return Some(IdleReason::BoostsThroughput);
        }
        self.guarantees(q, ctx.in_driver)
    }

    /// `bfq_update_io_intensity`, at each sync request's arrival (before it is queued):
    /// I/O-bound unless the queue was empty with nothing in flight for over a fifth of
    /// the window (at most ~200 ms); a queue's first request leaves the flag set.
    ///
    /// One deviation: the kernel also counts the think time of a queue still busy (in
    /// service, plugged for its next request) as idle; here it is not. With the kernel's
    /// rule a reader whose think time is a fifth of its service time flips on the 80%
    /// threshold with the fitted device's speed: replaying multi-reader's `none-2j` under
    /// BFQ then starts a preemption ping-pong at the second reader's arrival and predicts
    /// 0.6 MB/s instead of the 16 MB/s BFQ got (validate's cross-prediction).
    pub(super) fn update_io_intensity(&mut self, q: usize, now: u64) {
        let qq = &mut self.queues[q];
        if !qq.sync {
            return;
        }
        let tot_io_time = now.saturating_sub(qq.io_start_time);
        if qq.queued() == 0 && qq.dispatched == 0 && !qq.busy {
            qq.tot_idle_time += now.saturating_sub(qq.last_end_request);
        }
        if qq.just_created {
            return;
        }
        qq.io_bound_now = qq.tot_idle_time * 5 <= tot_io_time;
        if tot_io_time > 200_000_000 {
            qq.io_start_time = now - tot_io_time / 2;
            qq.tot_idle_time /= 2;
        }
    }

    pub(super) fn check_waker(&mut self, q: usize, now: u64) {
        if self.kernel < 5003 || !self.queues[q].sync || self.short_ttime(q) {
            return;
        }
        let Some(w) = self.last_completed else {
            return;
        };
        let window = if self.kernel >= 5012 {
            4_000_000
        } else {
            200_000
        };
        if w == q || now - self.last_completion >= window || self.queues[q].waker == Some(w) {
            return;
        }
        let needed = if self.kernel >= 5012 { 3 } else { 2 };
        let qq = &mut self.queues[q];
        let fresh = self.kernel < 5012 || now - qq.waker_first <= 128 * self.slice_idle;
        if qq.waker_cand == Some(w) && fresh {
            qq.waker_hits += 1;
        } else {
            qq.waker_cand = Some(w);
            qq.waker_hits = 1;
            qq.waker_first = now;
        }
        if qq.waker_hits >= needed {
            qq.waker = Some(w);
            let (stream, waker) = (qq.stream, self.queues[w].stream);
            self.log(Decision::Waker { stream, waker });
        }
    }

    pub(super) fn end_idle(&mut self, outcome: IdleOutcome) {
        if !self.wait_request {
            return;
        }
        self.wait_request = false;
        self.timer = None;
        if let Some(q) = self.in_service {
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

    /// Another queue holds requests (`total_queued` counts every queue's).
    fn others_pending(&self, q: usize) -> bool {
        self.total_queued > self.queues[q].queued()
    }

    /// `bfq_bfqq_must_idle`: empty, and idling is worth it.
    pub(super) fn must_idle(&self, ctx: &Ctx, q: usize) -> bool {
        self.queues[q].queued() == 0 && self.better_to_idle(ctx, q).is_some()
    }

    pub(super) fn injection(&mut self, ctx: &Ctx, q: usize) -> Option<(usize, InjectWhy)> {
        if self.kernel < 5003 {
            return None;
        }
        let has_rq = |o: &Queue| o.busy && o.queued() > 0;
        if let Some(w) = self.queues[q].waker
            && has_rq(&self.queues[w])
        {
            return Some((w, InjectWhy::Waker));
        }
        if self.kernel >= 5013
            && let Some((w, _)) = self
                .queues
                .iter()
                .enumerate()
                .find(|(i, o)| *i != q && o.waker == Some(q) && has_rq(o))
        {
            return Some((w, InjectWhy::Woken));
        }
        let qq = &self.queues[q];
        let may = !self.idling_boosts_thr(q)
            && (qq.wr_coeff == 1 || self.wr_busy > 1 || !self.short_ttime(q));
        if may && ctx.in_driver < 1 {
            let found = self.queues.iter().enumerate().find(|(i, o)| {
                *i != q
                    && has_rq(o)
                    && (self.rotational
                        || ctx.in_driver == 0
                        || o.sorted
                            .iter()
                            .next()
                            .is_some_and(|(_, r)| ctx.rqs[*r as usize].sectors < 64))
            });
            if let Some((w, _)) = found {
                return Some((w, InjectWhy::Limit));
            }
        }
        None
    }

    pub(super) fn arm_idle(&mut self, ctx: &Ctx, q: usize, reason: IdleReason) {
        let qq = &self.queues[q];
        let mut sl = self.slice_idle;
        if qq.seeky() && qq.wr_coeff == 1 && self.asymmetric(q).is_none() {
            sl = sl.min(MIN_TT_NS);
        } else if qq.wr_coeff > 1 && self.kernel >= 5002 {
            sl = sl.max(WR_MIN_SLICE_NS);
        }
        let stream = qq.stream;
        self.wait_request = true;
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

    /// hw_tag: 32 samples with enough outstanding work, then "queueing" if > 3 in driver.
    pub(super) fn sample_hw_tag(&mut self, ctx: &Ctx) {
        if self.hw_tag.is_none() && ctx.in_driver as usize + self.total_queued > 3 {
            self.max_in_driver = self.max_in_driver.max(ctx.in_driver);
            self.hw_samples += 1;
            if self.hw_samples >= 32 {
                self.hw_tag = Some(self.max_in_driver > 3);
            }
        }
    }
}
