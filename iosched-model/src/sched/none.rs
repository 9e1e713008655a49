//! `none`: requests go to the driver in the order they were inserted (the blk-mq software
//! queue). A bio can merge into a waiting request only among the last 8 of that queue
//! (`blk_bio_list_merge`), and requests wait there only while the device is full.

use std::collections::VecDeque;

use super::{Ctx, RqId, Scheduler};

/// `blk_bio_list_merge` looks at this many requests from the tail.
const MERGE_WINDOW: usize = 8;

#[derive(Default)]
pub struct NoneSched {
    fifo: VecDeque<RqId>,
}

impl Scheduler for NoneSched {
    fn name(&self) -> &'static str {
        "none"
    }

    fn allow_merge(&self, _ctx: &Ctx, rq: RqId, _stream: u32, _sync: bool) -> bool {
        self.fifo.iter().rev().take(MERGE_WINDOW).any(|r| *r == rq)
    }

    fn insert(&mut self, _ctx: &Ctx, rq: RqId) {
        self.fifo.push_back(rq);
    }

    fn dispatch(&mut self, _ctx: &Ctx) -> Option<RqId> {
        self.fifo.pop_front()
    }

    fn completed(&mut self, _ctx: &Ctx, _rq: RqId) {}

    fn has_work(&self) -> bool {
        !self.fifo.is_empty()
    }
}
