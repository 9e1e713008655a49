//! Which queue a request goes to, and a new queue's state (bfq-iosched.c: `bfq_init_rq`,
//! `bfq_get_bfqq_handle_split`, `bfq_get_queue`, `bfq_init_bfqq`; the weight and class of
//! an I/O priority, `bfq_set_next_ioprio_data`, `bfq_ioprio_to_weight`): one sync queue per
//! process, one async queue per cgroup, and the tables that find them. Merging a new queue
//! and splitting a shared one are `queue_merging`'s; this file only calls them.

use std::collections::{BTreeSet, VecDeque};

use crate::sched::{Ctx, RqId};

use super::groups::{GroupLoad, ROOT_GROUP};
use super::{Bfq, NO_QUEUE, Queue};

/// Best-effort level 4 (nice 0): `(IOPRIO_NR_LEVELS - 4) * BFQ_WEIGHT_CONVERSION_COEFF`.
pub(super) const DEFAULT_WEIGHT: f64 = 40.0;

impl Bfq {
    /// The queue `rq` goes to (`bfq_init_rq`): its process's sync queue, split first if
    /// it turned seeky while shared, or a new one (with a stable merge tried or
    /// scheduled); its cgroup's async queue.
    pub(super) fn queue_for(&mut self, ctx: &Ctx, rq: RqId) -> usize {
        let r = &ctx.rqs[rq as usize];
        let (stream, sync, cgroup, sector) = (r.stream, r.sync, r.cgroup, r.sector);
        // Sync: one queue per process; async: one per cgroup.
        let key = if sync {
            (u64::from(stream), true)
        } else {
            (cgroup, false)
        };
        if let Some(q) = self.queue_by_key(key) {
            // `bfq_get_bfqq_handle_split`: "if the queue was seeky for too long, break it
            // apart", unless this process's queue was stably merged.
            if sync
                && self.queues[q].shared
                && self.queues[q].split_coop
                && !self.stably_merged(stream)
            {
                return self.split(ctx, q, stream, cgroup, sector);
            }
            return q;
        }
        let id = self.new_queue(ctx, stream, sync, cgroup, sector);
        self.set_queue_by_key(key, id);
        if !sync {
            return id;
        }
        let q = self.do_or_sched_stable_merge(ctx, id, stream);
        if q == id {
            self.handle_burst(id, ctx.now);
        }
        q
    }

    /// `bfq_init_bfqq`.
    pub(super) fn new_queue(
        &mut self,
        ctx: &Ctx,
        stream: u32,
        sync: bool,
        cgroup: u64,
        sector: u64,
    ) -> usize {
        let id = self.queues.len();
        let max = self.bfq_max_budget();
        let ioprio = self
            .stream_ioprio
            .get(stream as usize)
            .copied()
            .unwrap_or(0);
        let root_group = self.is_root(cgroup);
        let group = if root_group {
            ROOT_GROUP
        } else {
            let next = self.groups.len();
            let g = *self.group_index.entry(cgroup).or_insert(next);
            if g == next {
                self.groups.push(GroupLoad::default());
            }
            g
        };
        self.queues.push(Queue {
            stream,
            orig_weight: ioprio_weight(ioprio),
            sync,
            cgroup,
            root_group,
            group,
            sorted: BTreeSet::new(),
            fifo: VecDeque::new(),
            dispatched: 0,
            busy: false,
            start: 0.0,
            finish: 0.0,
            budget: max * 2 / 3,
            max_budget: max * 2 / 3,
            service: 0,
            budget_timeout: 0,
            fifo_checked: false,
            last_pos: sector,
            // "first request is almost certainly seeky" (`bfq_init_bfqq`): the history
            // starts with one seeky request, so a queue is seeky one request sooner.
            seek_hist: 1,
            seeky: Queue::seeky_history(1),
            ttime_samples: 0,
            ttime_total: 0,
            ttime_mean: 0,
            last_end_request: ctx.now,
            first_ttime_sample_wraps: self.kernel >= 6009,
            io_start_time: ctx.now,
            tot_idle_time: 0,
            io_bound_now: true,
            wr_coeff: 1,
            wr_start: 0,
            wr_dur: 0,
            wr_start_at_switch_to_srt: None,
            // `bfq_init_bfqq`: "the value for which bfqq will not be deemed as soft rt".
            soft_rt_next_start: u64::MAX,
            last_idle_bklogged: ctx.now,
            service_from_backlogged: 0,
            softrt_update: false,
            wr_service: 0,
            waker: None,
            waker_cand: None,
            waker_hits: 0,
            waker_first: 0,
            in_large_burst: false,
            io_bound_flag: true,
            requests_within_timer: 0,
            shared: false,
            members: vec![stream],
            ioprio: ioprio_class_level(ioprio),
            created: ctx.now,
            just_created: true,
            first_io_time: 0,
            merged_into: None,
            split_coop: false,
            split_time: None,
            non_blocking_wait_rq: false,
        });
        id
    }

    /// Trace-driven check ([`crate::bfqcheck`]): the queue of `stream`'s sync or
    /// async I/O, if it exists.
    pub(crate) fn queue_of_stream(&self, stream: u32, sync: bool, cgroup: u64) -> Option<usize> {
        let key = if sync {
            (u64::from(stream), true)
        } else {
            (cgroup, false)
        };
        self.queue_by_key(key)
    }

    /// The queue of `(stream, true)` (sync) or `(cgroup, false)` (async).
    pub(super) fn queue_by_key(&self, key: (u64, bool)) -> Option<usize> {
        match key {
            (stream, true) => self.sync_queue.get(stream as usize).copied().flatten(),
            _ => self.by_key.get(&key).copied(),
        }
    }

    pub(super) fn set_queue_by_key(&mut self, key: (u64, bool), q: usize) {
        match key {
            (stream, true) => {
                let stream = stream as usize;
                if self.sync_queue.len() <= stream {
                    self.sync_queue.resize(stream + 1, None);
                }
                self.sync_queue[stream] = Some(q);
            }
            _ => {
                self.by_key.insert(key, q);
            }
        }
    }

    /// The queue a request was given, if any.
    pub(super) fn queue_of_rq(&self, rq: RqId) -> Option<usize> {
        self.queue_of
            .get(rq as usize)
            .filter(|q| **q != NO_QUEUE)
            .map(|q| *q as usize)
    }
}

/// The (class, level) BFQ gives a process's I/O priority: none is best effort at the
/// level of nice 0, 4 (`bfq_set_next_ioprio_data`).
fn ioprio_class_level(ioprio: u16) -> (u16, u16) {
    match (ioprio >> 13, ioprio & 0x1fff) {
        (0, _) => (2, 4),
        (3, _) => (3, 7),
        (class, level) => (class, level.min(7)),
    }
}

/// A queue's weight from its I/O priority (`bfq_ioprio_to_weight`): `(8 - level) x 10`;
/// no priority (0) is the kernel's default, best effort level 4. The class (RT before BE
/// before IDLE) is not modelled: only its level's weight.
pub(super) fn ioprio_weight(ioprio: u16) -> f64 {
    let (class, level) = (ioprio >> 13, ioprio & 0x1fff);
    if class == 0 || level >= 8 {
        return DEFAULT_WEIGHT;
    }
    f64::from((8 - level) * 10)
}
