//! Queue merging (bfq-iosched.c): processes whose I/O interleaves share one queue, so
//! that BFQ serves their union in sector order instead of idling for each in turn.
//! - Stable merge (5.13+, `bfq_do_or_sched_stable_merge`): a sync queue created within
//!   the burst interval of the last one created in its group, with the same I/O priority,
//!   is merged with it: at once on a non-rotational device with queueing, else at the
//!   first request >= 600 ms after its creation, and then only if idling would not boost
//!   its throughput (`bfq_setup_stable_merge`); a scheduled merge is tried once.
//! - Early queue merge (EQM, `bfq_setup_cooperator`), not on non-rotational devices with
//!   queueing: a request within `BFQQ_CLOSE_THR` of the in-service queue's last position,
//!   or of another queue's next request, merges its queue into that one if neither is
//!   seeky nor too late for merging (served for over 100 ms since it became busy).
//! - A shared queue found seeky at an expiration is split at each of its processes' next
//!   request (`bfq_get_bfqq_handle_split`), except for stably merged processes.
//! - What a process's queue had (raising, think time, the IO_bound flag) is saved when it
//!   is merged and given back when it is split (`bfq_bfqq_save_state`,
//!   `bfq_bfqq_resume_state`).

use crate::sched::{Ctx, Decision, MergeWhy};

use super::Bfq;
use super::weight_raising::{BURST_INTERVAL_NS, WR_COEFF};

/// `BFQQ_CLOSE_THR`: a request this close (sectors) to a queue's position is close, for
/// early queue merging.
const CLOSE_THR: u64 = 8 * 1024;

/// `bfq_merge_time_limit` (HZ / 10 jiffies): a queue served for longer since it became
/// busy is too late for merging.
const MERGE_TIME_LIMIT_MS: u64 = 100;

/// `bfq_activation_stable_merging`: the last queue created stands for a stable merge for
/// this long (ms); `bfq_late_stable_merging`: a delayed stable merge is made no sooner
/// after the queue's creation (or split).
const STABLE_MERGE_ACTIVATION_MS: u64 = 600;

const LATE_STABLE_MERGE_MS: u64 = 600;

/// What `bfq_bfqq_save_state` keeps of a process's queue when it is merged, restored
/// when the process gets a queue of its own again (`bfq_bfqq_resume_state`).
#[derive(Clone, Copy, Debug)]
pub(super) struct SavedState {
    wr_coeff: u32,
    wr_start: u64,
    wr_dur: u64,
    wr_service: u64,
    ttime_samples: u64,
    ttime_total: u64,
    ttime_mean: u64,
    io_bound_flag: bool,
    io_bound_now: bool,
    in_large_burst: bool,
}

impl Bfq {
    fn jiffies(&self, t: u64) -> u64 {
        t / self.jiffy_ns
    }

    /// `msecs_to_jiffies`: rounds up.
    fn ms_to_jiffies(&self, ms: u64) -> u64 {
        (ms * 1_000_000).div_ceil(self.jiffy_ns)
    }

    /// `bfqd->nonrot_with_queueing` (an unknown `hw_tag` counts as queueing, as BFQ
    /// starts with it set from the device's rotational flag alone).
    fn nonrot_with_queueing(&self) -> bool {
        !self.rotational && self.hw_tag()
    }

    pub(super) fn stably_merged(&self, stream: u32) -> bool {
        self.stably_merged
            .get(stream as usize)
            .copied()
            .unwrap_or(false)
    }

    fn per_stream<T: Clone>(v: &mut Vec<T>, stream: u32, fill: T) -> &mut T {
        let i = stream as usize;
        if v.len() <= i {
            v.resize(i + 1, fill);
        }
        &mut v[i]
    }

    /// `bfq_too_late_for_merging`.
    fn too_late_for_merging(&self, q: usize, now: u64) -> bool {
        let qq = &self.queues[q];
        qq.service_from_backlogged > 0
            && self.jiffies(now)
                > self.jiffies(qq.first_io_time) + self.ms_to_jiffies(MERGE_TIME_LIMIT_MS)
    }

    /// `bfq_may_be_close_cooperator`.
    fn may_be_close_cooperator(&self, q: usize, other: usize, now: u64) -> bool {
        let (a, b) = (&self.queues[q], &self.queues[other]);
        const IDLE_CLASS: u16 = 3;
        !self.too_late_for_merging(other, now)
            && a.ioprio.0 != IDLE_CLASS
            && a.ioprio.0 == b.ioprio.0
            && !a.seeky()
            && !b.seeky()
            && a.sync
            && b.sync
    }

    /// Where the queue's next request starts (`next_rq`, its position in the group's
    /// `rq_pos_tree`), if it holds one.
    fn next_pos(&self, q: usize) -> Option<u64> {
        let qq = &self.queues[q];
        qq.sorted
            .range((qq.last_pos, 0)..)
            .next()
            .or_else(|| qq.sorted.iter().next())
            .map(|(pos, _)| *pos)
    }

    /// `bfq_find_close_cooperator`: the queue of `q`'s group whose next request starts at
    /// `sector`, else the closest within `BFQQ_CLOSE_THR` (queues too late for merging
    /// are not in the position tree).
    fn find_close_cooperator(&self, q: usize, sector: u64, now: u64) -> Option<usize> {
        // No other queue holds a request: the position tree has nothing but `q`.
        if self.total_queued == self.queues[q].queued() {
            return None;
        }
        let group = self.group_key(q);
        (0..self.queues.len())
            .filter(|&c| c != q && self.queues[c].queued() > 0 && self.queues[c].sync)
            .filter(|&c| self.group_key(c) == group && !self.too_late_for_merging(c, now))
            .filter_map(|c| Some((self.next_pos(c)?.abs_diff(sector), c)))
            .filter(|(d, _)| *d <= CLOSE_THR)
            .min()
            .map(|(_, c)| c)
    }

    /// The end of a merge chain (`new_bfqq->new_bfqq...`).
    pub(super) fn merge_chain_end(&self, mut q: usize) -> usize {
        while let Some((n, _)) = self.queues[q].merged_into {
            q = n;
        }
        q
    }

    /// `bfq_setup_merge`: schedules `q` to be merged into `new` (the end of its chain),
    /// unless that would make a cycle, either has no process left, or they are in
    /// different groups.
    fn setup_merge(&mut self, q: usize, new: usize, why: MergeWhy) -> Option<usize> {
        if self.queues[new].members.is_empty() {
            return None;
        }
        let mut new = new;
        while let Some((n, _)) = self.queues[new].merged_into {
            if n == q {
                return None;
            }
            new = n;
        }
        if new == q
            || self.queues[q].members.is_empty()
            || self.queues[new].members.is_empty()
            || self.group_key(q) != self.group_key(new)
        {
            return None;
        }
        self.queues[q].merged_into = Some((new, why));
        Some(new)
    }

    /// `bfq_do_or_sched_stable_merge`, for the sync queue `q` just created for `stream`.
    /// Returns the queue the stream's I/O goes to.
    pub(super) fn do_or_sched_stable_merge(&mut self, ctx: &Ctx, q: usize, stream: u32) -> usize {
        if self.kernel < 5013 {
            return q;
        }
        let group = self.group_key(q);
        let now_j = self.jiffies(ctx.now);
        let last = self.last_created.get(&group).copied().filter(|&l| {
            self.jiffies(self.queues[l].created) + self.ms_to_jiffies(STABLE_MERGE_ACTIVATION_MS)
                >= now_j
                && self.queues[l].ioprio == self.queues[q].ioprio
        });
        let Some(last) = last else {
            self.last_created.insert(group, q);
            return q;
        };
        let burst_j = self.ms_to_jiffies(BURST_INTERVAL_NS / 1_000_000);
        if self.jiffies(self.queues[last].created) + burst_j < now_j {
            return q;
        }
        if self.nonrot_with_queueing() {
            // `bfq_do_early_stable_merge`.
            let Some(into) = self.setup_merge(q, last, MergeWhy::StableEarly) else {
                return q;
            };
            self.mark_stably_merged(stream, into);
            return self.merge_queues(ctx, q, into, stream, MergeWhy::StableEarly);
        }
        *Self::per_stream(&mut self.stable_target, stream, None) = Some(last);
        *Self::per_stream(&mut self.stable_scheduled, stream, false) = true;
        q
    }

    /// `stably_merged` for the stream and for the process owning `into`, if it has only one.
    pub(super) fn mark_stably_merged(&mut self, stream: u32, into: usize) {
        *Self::per_stream(&mut self.stably_merged, stream, false) = true;
        if let [owner] = self.queues[into].members[..] {
            *Self::per_stream(&mut self.stably_merged, owner, false) = true;
        }
    }

    /// `bfq_setup_cooperator` for a request of `stream` at `sector` bound for `q`, and the
    /// merge it sets up (`bfq_merge_bfqqs`, done at once: the request's process still
    /// points to `q`). Returns the queue the request goes to.
    pub(super) fn setup_cooperator(
        &mut self,
        ctx: &Ctx,
        q: usize,
        stream: u32,
        sector: u64,
    ) -> usize {
        if !self.queues[q].sync {
            return q;
        }
        // A merge already set up (by another process of this queue): follow it.
        if let Some((_, why)) = self.queues[q].merged_into {
            let into = self.merge_chain_end(q);
            return self.merge_queues(ctx, q, into, stream, why);
        }
        let now = ctx.now;
        let now_j = self.jiffies(now);
        let late_j = self.ms_to_jiffies(LATE_STABLE_MERGE_MS);
        let target = self.stable_target.get(stream as usize).copied().flatten();
        if !self.nonrot_with_queueing()
            && let Some(target) = target
            && !self.queues[q].just_created
            && self.queues[q]
                .split_time
                .is_none_or(|t| now_j > self.jiffies(t) + late_j)
            && now_j > self.jiffies(self.queues[q].created) + late_j
        {
            // `bfq_setup_stable_merge`: tried once, whatever comes of it.
            self.stable_target[stream as usize] = None;
            if self.idling_boosts_thr(q) {
                return q;
            }
            let Some(into) = self.setup_merge(q, target, MergeWhy::StableDelayed) else {
                return q;
            };
            self.mark_stably_merged(stream, into);
            return self.merge_queues(ctx, q, into, stream, MergeWhy::StableDelayed);
        }
        if self.nonrot_with_queueing() || self.too_late_for_merging(q, now) || self.busy == 1 {
            return q;
        }
        if let Some(i) = self.in_service
            && i != q
            && sector.abs_diff(self.in_serv_last_pos) <= CLOSE_THR
            && self.group_key(i) == self.group_key(q)
            && self.may_be_close_cooperator(q, i, now)
            && let Some(into) = self.setup_merge(q, i, MergeWhy::Close)
        {
            return self.merge_queues(ctx, q, into, stream, MergeWhy::Close);
        }
        if let Some(c) = self.find_close_cooperator(q, sector, now)
            && self.may_be_close_cooperator(q, c, now)
            && let Some(into) = self.setup_merge(q, c, MergeWhy::Close)
        {
            return self.merge_queues(ctx, q, into, stream, MergeWhy::Close);
        }
        q
    }

    /// `bfq_bfqq_save_state` of `q` for its only process.
    fn save_state(&mut self, q: usize, now: u64) {
        let [owner] = self.queues[q].members[..] else {
            return;
        };
        let wr_dur = self.wr_duration();
        let qq = &self.queues[q];
        // Merged right after its creation: the raising it would have had.
        let (wr_coeff, wr_start, wr_dur, wr_service) =
            if qq.just_created && !qq.in_large_burst && self.low_latency {
                (WR_COEFF, now, wr_dur, 0)
            } else {
                (qq.wr_coeff, qq.wr_start, qq.wr_dur, qq.wr_service)
            };
        let saved = SavedState {
            wr_coeff,
            wr_start,
            wr_dur,
            wr_service,
            ttime_samples: qq.ttime_samples,
            ttime_total: qq.ttime_total,
            ttime_mean: qq.ttime_mean,
            io_bound_flag: qq.io_bound_flag,
            io_bound_now: qq.io_bound_now,
            in_large_burst: qq.in_large_burst,
        };
        *Self::per_stream(&mut self.saved, owner, None) = Some(saved);
    }

    /// `bfq_merge_bfqqs`: `stream`'s I/O goes to `into` from now on.
    pub(super) fn merge_queues(
        &mut self,
        ctx: &Ctx,
        from: usize,
        into: usize,
        stream: u32,
        why: MergeWhy,
    ) -> usize {
        self.save_state(from, ctx.now);
        self.save_state(into, ctx.now);
        let (fq, iq) = (
            self.queues[from].io_bound_flag,
            self.queues[from].io_bound_now,
        );
        self.queues[into].io_bound_flag |= fq;
        self.queues[into].io_bound_now |= iq;
        self.queues[from].io_bound_flag = false;
        self.queues[from].io_bound_now = false;
        // The cooperators of `from`'s processes let its waker inject for them too.
        if let Some(w) = self.queues[from].waker
            && self.queues[into].waker.is_none()
            && w != into
        {
            self.queues[into].waker = Some(w);
        }
        // Weight raising goes with the process.
        let (fq, iq) = (&self.queues[from], &self.queues[into]);
        if iq.wr_coeff == 1 && fq.wr_coeff > 1 {
            let (coeff, start, dur) = (fq.wr_coeff, fq.wr_start, fq.wr_dur);
            self.set_wr_coeff(into, coeff);
            let iq = &mut self.queues[into];
            (iq.wr_start, iq.wr_dur) = (start, dur);
        }
        if self.queues[from].wr_coeff > 1 {
            self.set_wr_coeff(from, 1);
        }
        self.set_queue_by_key((u64::from(stream), true), into);
        self.queues[from].members.retain(|m| *m != stream);
        let iq = &mut self.queues[into];
        if !iq.members.contains(&stream) {
            iq.members.push(stream);
        }
        iq.shared = true;
        let named = iq.stream;
        // Under imposed merges this one is BFQ's, not the model's.
        if !self.merges_imposed {
            self.log(Decision::Merge {
                stream,
                into: named,
                why,
            });
        }
        // `bfq_reassign_last_bfqq`.
        for last in self.last_created.values_mut() {
            if *last == from {
                *last = into;
            }
        }
        // `bfq_release_process_ref`: a queue no process sends to leaves the busy set
        // once empty (unless in service: it expires there).
        let fq = &self.queues[from];
        if fq.members.is_empty() && fq.busy && fq.queued() == 0 && self.in_service != Some(from) {
            self.leave_busy_charged(from);
        }
        into
    }

    /// `bfq_split_bfqq` (from `bfq_get_bfqq_handle_split`): `stream` leaves the shared
    /// queue `q`; the last of its processes keeps it. Returns the stream's queue.
    pub(super) fn split(
        &mut self,
        ctx: &Ctx,
        q: usize,
        stream: u32,
        cgroup: u64,
        sector: u64,
    ) -> usize {
        let from = self.queues[q].stream;
        self.log(Decision::Split { stream, from });
        if self.queues[q].members.len() <= 1 && self.queues[q].merged_into.is_none() {
            let qq = &mut self.queues[q];
            qq.stream = stream;
            qq.shared = false;
            qq.split_coop = false;
            self.resume_state(q, stream, ctx.now);
            return q;
        }
        let in_large_burst = self.queues[q].in_large_burst;
        if in_large_burst
            && let Some(s) = self.saved.get_mut(stream as usize).and_then(Option::as_mut)
        {
            s.in_large_burst = true;
        }
        self.queues[q].members.retain(|m| *m != stream);
        let waker = self.queues[q].waker;
        let id = self.new_queue(ctx, stream, true, cgroup, sector);
        self.set_queue_by_key((u64::from(stream), true), id);
        let qq = &mut self.queues[id];
        qq.split_time = Some(ctx.now);
        qq.in_large_burst = self
            .saved
            .get(stream as usize)
            .copied()
            .flatten()
            .is_some_and(|s| s.in_large_burst);
        qq.waker = waker;
        self.resume_state(id, stream, ctx.now);
        id
    }

    /// `bfq_bfqq_resume_state`: the state saved at the merge, raising ended if it has run
    /// out meanwhile.
    fn resume_state(&mut self, q: usize, stream: u32, now: u64) {
        let Some(s) = self.saved.get(stream as usize).copied().flatten() else {
            return;
        };
        let qq = &mut self.queues[q];
        // The saved think time comes back whole, its last completion included.
        qq.first_ttime_sample_wraps = false;
        qq.ttime_samples = s.ttime_samples;
        qq.ttime_total = s.ttime_total;
        qq.ttime_mean = s.ttime_mean;
        qq.io_bound_flag = s.io_bound_flag;
        qq.io_bound_now = s.io_bound_now;
        (qq.wr_start, qq.wr_dur, qq.wr_service) = (s.wr_start, s.wr_dur, s.wr_service);
        let expired = qq.in_large_burst || now > s.wr_start + s.wr_dur;
        let coeff = if s.wr_coeff > 1 && expired {
            1
        } else {
            s.wr_coeff
        };
        self.set_wr_coeff(q, coeff);
    }
}
