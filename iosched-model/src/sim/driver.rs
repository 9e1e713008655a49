//! The driver's side: running the queue (dispatching while the driver has tags, arming the
//! scheduler's timer and the rerun), a request's issue to the device model and its service
//! time, and its completion: the bios it ends, what they release, the sleepers it wakes.

use iosched_core::event::EventKind;

use crate::sched::{RqId, RqState};
use crate::workload::Trigger;

use super::index::bio_of;
use super::{BIO_ID, Ev, RERUN_NS, RQ_ID, Sim, parts};

impl<'a> Sim<'a> {
    pub(super) fn run_queue(&mut self) {
        let mut dispatched = false;
        while self.in_driver < self.cfg.depth {
            let r = match self.bypass.pop_front() {
                Some(r) => r,
                None => {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    match self.sched.dispatch(&ctx) {
                        Some(r) => r,
                        None => break,
                    }
                }
            };
            dispatched = true;
            self.issue(r);
        }
        let want = self.sched.next_timer();
        if want != self.timer_at {
            self.timer_at = want;
            if let Some(t) = want {
                self.push(t.max(self.now), Ev::Timer);
            }
        }
        // Work pending, nothing dispatchable, nothing in flight or armed to wake us.
        if !dispatched
            && self.in_driver == 0
            && self.timer_at.is_none()
            && self.sched.has_work()
            && self.rerun_at.is_none()
        {
            let t = self.now + RERUN_NS;
            self.rerun_at = Some(t);
            self.push(t, Ev::Timer);
        }
    }

    fn issue(&mut self, r: RqId) {
        let rq = &mut self.rqs[r as usize];
        rq.state = RqState::Dispatched;
        let (sector, end, sectors, op, head) = (rq.sector, rq.end(), rq.sectors, rq.op, rq.head_io);
        if !self.bypassed[r as usize] {
            self.by_end.remove(&end);
            self.by_start.remove(&sector);
        }
        self.in_driver += 1;
        if self.at_head[r as usize] {
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.dispatched_at_head(&ctx, r);
        }
        // The server free first takes it; a rotational device serves in issue order.
        let (k, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, f)| *f)
            .expect("at least one server");
        // A queued request's way to the disk overlaps the service before it; an idle disk
        // waits for it.
        let start = free.max(self.now + self.dev.latency_ns());
        let svc = if sectors == 0 {
            0
        } else {
            let t = self
                .dev
                .service_ns_of(self.head, sector, sectors, op.is_write());
            self.head = end;
            t
        };
        self.free_at[k] = start + svc;
        self.push(start + svc, Ev::Complete(r));
        if self.cfg.emit {
            let io = self.w.ios[head as usize];
            self.emit(EventKind::Issue, |ev| {
                ev.rq = RQ_ID + u64::from(r);
                ev.bio = BIO_ID + u64::from(head);
                ev.sector = sector;
                ev.bytes = sectors << 9;
                ev.op = op;
                ev.flags = io.flags;
            });
            let mut pos = 1u64;
            let mut b = self.next_in_rq[head as usize];
            while b != u32::MAX {
                self.emit(EventKind::BioInRq, |ev| {
                    ev.rq = RQ_ID + u64::from(r);
                    ev.bio = BIO_ID + u64::from(b);
                    ev.aux = pos;
                });
                pos += 1;
                b = self.next_in_rq[b as usize];
            }
        }
    }

    pub(super) fn complete(&mut self, r: RqId) {
        self.in_driver -= 1;
        self.live_requests -= 1;
        if let Some(tag) = self.first_tags.iter_mut().find(|t| **t == Some(r)) {
            *tag = None;
        }
        if self.rq_tracked[r as usize] {
            self.tracked_live -= 1;
        }
        let rq = &mut self.rqs[r as usize];
        rq.state = RqState::Done;
        let (sectors, op, head) = (rq.sectors, rq.op, rq.head_io);
        self.emit(EventKind::Complete, |ev| {
            ev.rq = RQ_ID + u64::from(r);
            ev.bytes = sectors << 9;
            ev.aux = u64::from(sectors) << 9;
            ev.op = op;
        });
        let mut b = head;
        let mut released = Vec::new();
        while b != u32::MAX {
            if let Some(c) = self.completion.get_mut(b as usize) {
                *c = self.now;
            }
            let s = self.w.ios[b as usize].stream as usize;
            self.in_flight[s] -= 1;
            if self.exits_promptly(s) {
                self.ended(s);
            }
            if let Some(j) = self.held[s].pop_front() {
                released.push(j);
            }
            let mut next = self.after_c[b as usize];
            while let Some(entry) = next {
                let j = bio_of(entry);
                next = self.sibling[j as usize];
                if let Trigger::AfterCompletion { delay, .. } = self.w.ios[j as usize].trigger {
                    let sj = self.w.ios[j as usize].stream as usize;
                    if self.exits_promptly(sj) && self.ended_at(sj, self.now + delay) {
                        continue;
                    }
                    self.push(self.now + delay, Ev::Arrive(j));
                }
            }
            b = self.next_in_rq[b as usize];
        }
        if !self.bypassed[r as usize] || self.at_head[r as usize] {
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.completed(&ctx, r);
        }
        self.unblock();
        self.unblock_wbt();
        for j in released {
            self.admit_held(j);
        }
    }
}
