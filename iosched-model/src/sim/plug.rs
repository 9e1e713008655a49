//! The plug and merging (blk-mq's `blk_attempt_plug_merge`, `blk_mq_sched_bio_merge`,
//! `blk_mq_flush_plug_list`): a bio merged into a request of its process's plug or, through
//! the scheduler, into one it holds; the plug's requests inserted into the scheduler, or past
//! it (flushes, and the data of a preflush write at the head of its dispatch list).

use iosched_core::event::{EventKind, Op};

use crate::sched::{Rq, RqId, RqState};

use super::{BIO_ID, RQ_ID, Sim, parts};

impl<'a> Sim<'a> {
    fn mergeable(&self, rq: &Rq, i: u32) -> bool {
        let io = &self.w.ios[i as usize];
        rq.op == io.op && rq.sync == io.sync && rq.sectors + io.sectors <= self.cfg.max_sectors
    }

    /// Plug merge (the stream's plug, back or front), then the scheduler's bio merge.
    pub(super) fn try_merge(&mut self, i: u32) -> bool {
        if self.cfg.nomerges >= 2 {
            return false;
        }
        let io = self.w.ios[i as usize];
        let s = io.stream as usize;
        let end = io.sector + u64::from(io.sectors);
        let plug_hit = self.plugs[s].iter().rev().find_map(|&r| {
            let rq = &self.rqs[r as usize];
            if !self.mergeable(rq, i) {
                None
            } else if rq.end() == io.sector {
                Some((r, true))
            } else if rq.sector == end {
                Some((r, false))
            } else {
                None
            }
        });
        if let Some((r, back)) = plug_hit {
            self.do_merge(r, i, back);
            return true;
        }
        if self.cfg.nomerges >= 1 {
            return false;
        }
        let parts = parts!(self);
        let ctx = parts.ctx(&self.rqs);
        let candidate = self
            .by_end
            .get(&io.sector)
            .map(|r| (*r, true))
            .filter(|(r, _)| {
                self.mergeable(&self.rqs[*r as usize], i)
                    && self.sched.allow_merge(&ctx, *r, io.stream, io.sync)
            })
            .or_else(|| {
                if !self.sched.front_merges() {
                    return None;
                }
                self.by_start
                    .get(&end)
                    .map(|r| (*r, false))
                    .filter(|(r, _)| {
                        self.mergeable(&self.rqs[*r as usize], i)
                            && self.sched.allow_merge(&ctx, *r, io.stream, io.sync)
                    })
            });
        match candidate {
            Some((r, back)) => {
                let old_sector = self.rqs[r as usize].sector;
                let old_end = self.rqs[r as usize].end();
                self.by_end.remove(&old_end);
                self.by_start.remove(&old_sector);
                self.do_merge(r, i, back);
                let rq = &self.rqs[r as usize];
                self.by_end.insert(rq.end(), r);
                self.by_start.insert(rq.sector, r);
                if !back {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    self.sched.repositioned(&ctx, r, old_sector);
                }
                true
            }
            None => false,
        }
    }

    fn do_merge(&mut self, r: RqId, i: u32, back: bool) {
        let io = self.w.ios[i as usize];
        let rq = &mut self.rqs[r as usize];
        rq.sectors += io.sectors;
        rq.bios += 1;
        if back {
            self.next_in_rq[rq.tail_io as usize] = i;
            rq.tail_io = i;
        } else {
            self.next_in_rq[i as usize] = rq.head_io;
            rq.head_io = i;
            rq.sector = io.sector;
        }
        self.emit_bio(
            if back {
                EventKind::BackMerge
            } else {
                EventKind::FrontMerge
            },
            i,
        );
    }

    pub(super) fn flush_plug(&mut self, s: usize) {
        let mut plug = std::mem::take(&mut self.plugs[s]);
        for &r in &plug {
            let rq = &mut self.rqs[r as usize];
            rq.state = RqState::Queued;
            rq.inserted = self.now;
            let (sector, end, head, sectors) = (rq.sector, rq.end(), rq.head_io, rq.sectors);
            let bioless = sectors == 0 || rq.op == Op::Flush;
            self.emit(EventKind::Insert, |ev| {
                ev.rq = RQ_ID + u64::from(r);
                ev.bio = BIO_ID + u64::from(head);
                ev.sector = sector;
                ev.bytes = sectors << 9;
            });
            if bioless || self.at_head[r as usize] {
                // Flushes go through the flush machinery, ahead of the scheduler, and so
                // does the data of a preflush write (after its flush, not modelled).
                self.bypassed[r as usize] = true;
                self.bypass.push_back(r);
                if !bioless {
                    let parts = parts!(self);
                    let ctx = parts.ctx(&self.rqs);
                    self.sched.insert_at_head(&ctx, r);
                }
                continue;
            }
            self.by_end.insert(end, r);
            self.by_start.insert(sector, r);
            let parts = parts!(self);
            let ctx = parts.ctx(&self.rqs);
            self.sched.insert(&ctx, r);
        }
        // The plug goes back with its capacity: taking a fresh one made every request's
        // first push an allocation.
        if self.plugs[s].is_empty() {
            plug.clear();
            self.plugs[s] = plug;
        }
    }
}
