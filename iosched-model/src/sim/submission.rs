//! A released bio's way to its Q (blk-mq's `submit_bio` as a process sees it): in its
//! thread's program order, once its process has room in its window, and not at all past the
//! end of a time-bounded process; then merged, given a request or put to sleep for one
//! (`allocation`), and what its submission releases next.

use std::cmp::Reverse;

use iosched_core::event::{EventKind, Op};

use crate::workload::Trigger;

use super::index::bio_of;
use super::{Ev, PLUG_MAX, PLUG_NS, Sim};

impl<'a> Sim<'a> {
    /// A time-bounded process past its end: it submits nothing more. Its bios still to
    /// come are dropped, and the scheduler sees it has no future (BFQ does not idle for it).
    pub(super) fn ended(&mut self, s: usize) -> bool {
        self.ended_at(s, self.now)
    }

    /// [`Self::ended`] for a process whose next bio would come at `t`: fio checks its clock
    /// before each I/O, so a process that would submit past its end is done already.
    pub(super) fn ended_at(&mut self, s: usize, t: u64) -> bool {
        if self.w.streams[s].until_ns.is_none_or(|end| t < end) {
            return false;
        }
        self.remaining[s] = 0;
        self.held[s].clear();
        true
    }

    /// A process that exits as soon as its I/O is done ([`exits_promptly`]). When its job
    /// ends (at a completion, before the scheduler hears of it) it has no future, and BFQ
    /// does not idle for it; other processes keep theirs until the bio past their end
    /// would arrive, and linger after it.
    ///
    /// [`exits_promptly`]: super::index::exits_promptly
    pub(super) fn exits_promptly(&self, s: usize) -> bool {
        self.exits_promptly[s]
    }

    /// Bio `i` is released: it is submitted in its thread's program order.
    pub(super) fn arrive(&mut self, i: u32) {
        let s = self.w.ios[i as usize].stream as usize;
        if self.ended(s) {
            return;
        }
        if i != self.expected[s] {
            self.early[s].push(Reverse(i));
            return;
        }
        let mut next = i;
        loop {
            self.expected[s] = self.next_of[next as usize];
            self.admit(next);
            match self.early[s].peek() {
                Some(Reverse(j)) if *j == self.expected[s] => {
                    next = *j;
                    self.early[s].pop();
                }
                _ => break,
            }
        }
    }

    /// Bio `i` is queued (Q) now, for the result and wbt's waits (kept only for them).
    pub(super) fn stamp_queued(&mut self, i: u32) {
        if let Some(q) = self.queued.get_mut(i as usize) {
            *q = self.now;
        }
    }

    /// Bio `i`'s turn has come: it is queued once its process has room in its window.
    fn admit(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        if self.in_flight[s] >= self.window[s] || !self.held[s].is_empty() {
            self.held[s].push_back(i);
            // Its process waits for a completion: asleep, its plug is flushed (schedule()),
            // or the requests it holds would never go out.
            self.flush_plug(s);
            return;
        }
        self.in_flight[s] += 1;
        self.queue_bio(i);
    }

    /// Bio `i` is queued (Q): merged, or given a request, or asleep waiting for one.
    fn queue_bio(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        self.remaining[s] = self.remaining[s].saturating_sub(1);
        if self.blocked_of[s] > 0 {
            // Its process sleeps (in wbt or in request allocation): this bio is not
            // submitted yet.
            if self.in_wbt[s] > 0 {
                self.wbt_block(i, false);
            } else {
                self.block(i, false, None);
            }
            return;
        }
        self.stamp_queued(i);
        self.emit_bio(EventKind::Queue, i);
        let data = io.sectors > 0 && !matches!(io.op, Op::Flush);
        if !data || !self.try_merge(i) {
            if self.wbt_holds(i) {
                self.flush_plug(s);
                self.wbt_block(i, true);
                return;
            }
            if let Some(depth) = self.refused_depth(i) {
                self.flush_plug(s);
                self.block(i, true, Some(depth));
                return;
            }
            let rq = self.new_rq(i);
            self.plugs[s].push(rq);
        }
        let batch_continues = self.submitted(i);
        if !batch_continues || io.plug_end || self.plugs[s].len() >= PLUG_MAX {
            self.flush_plug(s);
            // The process flushes its plug itself (`blk_finish_plug`, not from schedule()),
            // which runs the hardware queue there and then: its requests go to the driver
            // while it has room, before the process submits anything else. Left for the
            // event's end, they waited in the scheduler, where a bio the same event
            // released next (one freed out of program order, admitted right after this one)
            // merged into them: a 128 KiB reader on a parallel device replayed as 256 KiB
            // requests, -30%.
            self.run_queue();
        }
    }

    /// A bio held by its window, now with room.
    pub(super) fn admit_held(&mut self, i: u32) {
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        if self.ended(s) {
            return;
        }
        if self.in_flight[s] >= self.window[s] {
            self.held[s].push_front(i);
            self.flush_plug(s);
            return;
        }
        self.in_flight[s] += 1;
        self.queue_bio(i);
    }

    /// Bio `i`'s submission returned (merged, or its request allocated): releases what its
    /// process issues next; true when that follows at once (the plug batch goes on).
    pub(super) fn submitted(&mut self, i: u32) -> bool {
        let mut batch_continues = false;
        let mut next = self.after_q[i as usize];
        while let Some(entry) = next {
            let j = bio_of(entry);
            next = self.sibling[j as usize];
            if let Trigger::AfterQueue { delay, .. } = self.w.ios[j as usize].trigger {
                batch_continues |= delay <= PLUG_NS;
                self.push(self.now + delay, Ev::Arrive(j));
            }
        }
        batch_continues
    }
}
