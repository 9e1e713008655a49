//! A bio's request (blk-mq's `blk_mq_get_request`, `blk_mq_get_tag`, and wbt's
//! `rq_qos_throttle` before it): the requests that may exist at once, the depth the
//! scheduler gives a bio's kind ([`Scheduler::request_limit`], BFQ's cut to the first tags,
//! [`Scheduler::depth_one_tags`]), sleeping in FIFO order when none is free, and waking as
//! requests complete.
//!
//! [`Scheduler::request_limit`]: crate::sched::Scheduler::request_limit
//! [`Scheduler::depth_one_tags`]: crate::sched::Scheduler::depth_one_tags

use std::cmp::Reverse;

use iosched_core::event::{EventKind, Op, ReqFlags};

use crate::sched::{Rq, RqId, RqState};

use super::Sim;

/// The tag depth a bio's request allocation was given (`blk_mq_alloc_data.shallow_depth`),
/// fixed at its first attempt: a bio asleep for a tag retries with the depth it went to
/// sleep with (`blk_mq_get_tag` loops without calling `limit_depth` again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TagDepth {
    /// As many requests as the scheduler lets its kind have ([`Scheduler::request_limit`]).
    ///
    /// [`Scheduler::request_limit`]: crate::sched::Scheduler::request_limit
    Limit,
    /// Cut to 1 ([`Scheduler::depth_one_tags`]): only the first tag of the first `n` words.
    ///
    /// [`Scheduler::depth_one_tags`]: crate::sched::Scheduler::depth_one_tags
    FirstTags(u32),
}

/// A bio asleep in request allocation.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asleep {
    bio: u32,
    /// Queued (Q) already: the one that went to sleep was; those its process has yet to
    /// submit after it are queued when it wakes.
    queued: bool,
    /// The depth of its first attempt, once it made one.
    depth: Option<TagDepth>,
    /// Its place in the order bios went to sleep, across processes.
    seq: u64,
}

impl<'a> Sim<'a> {
    pub(super) fn block(&mut self, i: u32, queued: bool, depth: Option<TagDepth>) {
        let s = self.w.ios[i as usize].stream as usize;
        self.blocked_of[s] += 1;
        if self.blocked[s].is_empty() {
            self.sleepers.push(s);
        }
        self.blocked[s].push_back(Asleep {
            bio: i,
            queued,
            depth,
            seq: self.blocked_seq,
        });
        self.blocked_seq += 1;
        self.asleep += 1;
    }

    /// Wakes sleeping bios while requests are free: each tries a merge first (a woken
    /// process submits its next bios normally), else takes a request. A bio cut to the
    /// first tags ([`TagDepth::FirstTags`]) waits for its own: the bios behind it of other
    /// processes still try, those of its process stay asleep with it.
    ///
    /// The processes' first sleeping bios are tried in the order they went to sleep (a
    /// heap of one entry per process: a pass costs the number of processes asleep, not of
    /// bios). Arrivals are events, so no bio goes to sleep during a pass.
    pub(super) fn unblock(&mut self) {
        if self.asleep == 0 {
            return;
        }
        let mut next = std::mem::take(&mut self.wake_order);
        next.clear();
        next.extend(
            self.sleepers
                .iter()
                .map(|&s| Reverse((self.blocked[s][0].seq, s))),
        );
        while let Some(Reverse((_, s))) = next.pop() {
            let Asleep {
                bio: i,
                queued,
                depth,
                ..
            } = self.blocked[s][0];
            let io = self.w.ios[i as usize];
            if !queued {
                // Its process, awake, submits it now.
                self.stamp_queued(i);
                self.emit_bio(EventKind::Queue, i);
                self.blocked[s][0].queued = true;
            }
            let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
            let merged = data && self.try_merge(i);
            if !merged {
                let refused = match depth {
                    Some(d) => self.no_request_for(i, d).then_some(d),
                    None => self.refused_depth(i),
                };
                if let Some(depth) = refused {
                    self.blocked[s][0].depth = Some(depth);
                    if matches!(depth, TagDepth::FirstTags(_)) {
                        // Its process stays asleep with it; the others still try.
                        continue;
                    }
                    break;
                }
                let rq = self.new_rq(i);
                self.plugs[s].push(rq);
                self.flush_plug(s);
                // The woken process inserts its request and runs the queue
                // (`blk_mq_submit_bio`; under `none` it issues directly) before it submits
                // its next bio: that bio finds the request in the driver, not waiting where
                // it could merge into it, when the driver has room.
                self.run_queue();
            }
            self.blocked[s].pop_front();
            self.asleep -= 1;
            self.blocked_of[s] -= 1;
            match self.blocked[s].front() {
                Some(a) => next.push(Reverse((a.seq, s))),
                None => {
                    let at = self.sleepers.iter().position(|&o| o == s);
                    self.sleepers
                        .swap_remove(at.expect("a stream with sleepers is listed"));
                }
            }
            self.submitted(i);
        }
        self.wake_order = next;
    }

    /// wbt would put bio `i` to sleep before its request is allocated.
    pub(super) fn wbt_holds(&self, i: u32) -> bool {
        let io = &self.w.ios[i as usize];
        self.cfg.wbt_limit.is_some_and(|l| {
            crate::throttle::wbt_tracked(io.op, io.flags) && self.tracked_live >= l.max(1)
        })
    }

    pub(super) fn wbt_block(&mut self, i: u32, queued: bool) {
        let s = self.w.ios[i as usize].stream as usize;
        self.blocked_of[s] += 1;
        self.in_wbt[s] += 1;
        self.wbt_asleep.push_back((i, queued));
    }

    /// Wakes bios asleep in wbt while the limit lets them through (and requests are free):
    /// as [`Sim::unblock`].
    pub(super) fn unblock_wbt(&mut self) {
        if self.cfg.wbt_drain && self.tracked_live > 0 {
            return;
        }
        while let Some(&(i, queued)) = self.wbt_asleep.front() {
            let io = self.w.ios[i as usize];
            let s = io.stream as usize;
            if !queued {
                self.stamp_queued(i);
                self.emit_bio(EventKind::Queue, i);
                if let Some(front) = self.wbt_asleep.front_mut() {
                    front.1 = true;
                }
            }
            let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
            let merged = data && self.try_merge(i);
            if !merged {
                // wbt and BFQ's depth cut never meet (BFQ turns wbt off): a bio asleep
                // in wbt takes the depth of its attempt when wbt lets it through.
                if self.wbt_holds(i) || self.no_request_for(i, self.tag_depth(i)) {
                    break;
                }
                self.wbt_waits.push(self.now - self.queued[i as usize]);
                let rq = self.new_rq(i);
                self.plugs[s].push(rq);
                self.flush_plug(s);
                self.run_queue();
            }
            self.wbt_asleep.pop_front();
            self.in_wbt[s] -= 1;
            self.blocked_of[s] -= 1;
            self.submitted(i);
        }
    }

    /// The depth bio `i`'s first attempt at a request gets when the attempt fails (it
    /// sleeps with that depth), `None` when it gets one. Whatever the depth, a request is
    /// found while the limit has room and the first tag is free (an allocation takes a
    /// free first tag before any other): only otherwise is the scheduler asked
    /// ([`Scheduler::depth_one_tags`], a walk over its queues for BFQ).
    ///
    /// [`Scheduler::depth_one_tags`]: crate::sched::Scheduler::depth_one_tags
    pub(super) fn refused_depth(&self, i: u32) -> Option<TagDepth> {
        let first_free = self.first_tags.first().is_some_and(Option::is_none);
        let over_limit = self.no_request_for(i, TagDepth::Limit);
        if first_free && !over_limit {
            return None;
        }
        match self.tag_depth(i) {
            // Asked already (the scheduler's answer does not change in between).
            TagDepth::Limit => over_limit.then_some(TagDepth::Limit),
            depth => self.no_request_for(i, depth).then_some(depth),
        }
    }

    /// The depth bio `i`'s request allocation gets now.
    fn tag_depth(&self, i: u32) -> TagDepth {
        if self.first_tags.is_empty() {
            return TagDepth::Limit;
        }
        let io = &self.w.ios[i as usize];
        let cgroup = self.w.streams[io.stream as usize].cgroup_id;
        match self
            .sched
            .depth_one_tags(self.cfg.max_requests, io.stream, cgroup, io.op, io.sync)
        {
            Some(n) => TagDepth::FirstTags(n.clamp(1, self.first_tags.len() as u32)),
            None => TagDepth::Limit,
        }
    }

    /// Bio `i` finds no request it may take at `depth`: all the queue's are allocated, or as
    /// many as the scheduler lets a bio of its kind find allocated
    /// ([`Scheduler::request_limit`]), or, cut to depth 1, the first tags it may take are
    /// all held.
    ///
    /// [`Scheduler::request_limit`]: crate::sched::Scheduler::request_limit
    fn no_request_for(&self, i: u32, depth: TagDepth) -> bool {
        if self.live_requests >= self.cfg.max_requests {
            return true;
        }
        match depth {
            TagDepth::Limit => {
                let io = &self.w.ios[i as usize];
                let limit = self
                    .sched
                    .request_limit(self.cfg.max_requests, io.op, io.sync)
                    .min(self.cfg.max_requests);
                self.live_requests >= limit
            }
            TagDepth::FirstTags(n) => self.first_tags[..n as usize].iter().all(Option::is_some),
        }
    }

    pub(super) fn new_rq(&mut self, i: u32) -> RqId {
        let io = self.w.ios[i as usize];
        let tracked = crate::throttle::wbt_tracked(io.op, io.flags);
        self.tracked_live += u32::from(tracked);
        self.rq_tracked.push(tracked);
        let st = &self.w.streams[io.stream as usize];
        let id = self.rqs.len() as RqId;
        self.live_requests += 1;
        if let Some(free) = self.first_tags.iter_mut().find(|t| t.is_none()) {
            *free = Some(id);
        }
        self.rqs.push(Rq {
            stream: io.stream,
            cgroup: st.cgroup_id,
            sector: io.sector,
            sectors: io.sectors,
            op: io.op,
            sync: io.sync,
            meta: io.flags.has(ReqFlags::META),
            ioprio: 0,
            inserted: self.now,
            state: RqState::Plugged,
            head_io: i,
            tail_io: i,
            bios: 1,
        });
        self.bypassed.push(false);
        self.at_head.push(
            self.write_cache
                && io.sectors > 0
                && io.op == Op::Write
                && io.flags.has(ReqFlags::PREFLUSH),
        );
        self.emit_bio(EventKind::GetRq, i);
        id
    }
}
