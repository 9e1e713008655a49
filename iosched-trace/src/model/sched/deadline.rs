//! mq-deadline (block/mq-deadline.c, one priority level): per direction a sector-sorted tree
//! and a FIFO with deadlines; batches of up to `fifo_batch` requests in ascending sector
//! order; expiry checked only at batch boundaries; reads preferred unless writes were
//! starved `writes_starved` times. It never idles.

use std::collections::{BTreeSet, VecDeque};

use super::{Ctx, RqId, RqState, Scheduler, SettingError, Settings};

const READ: usize = 0;
const WRITE: usize = 1;

pub struct Deadline {
    read_expire: u64,
    write_expire: u64,
    writes_starved: u32,
    front_merges: bool,
    fifo_batch: u32,
    sorted: [BTreeSet<(u64, RqId)>; 2],
    /// (deadline, request); entries of requests already dispatched are skipped lazily.
    fifo: [VecDeque<(u64, RqId)>; 2],
    /// Position of each queued request in `sorted` (its sector when inserted or moved).
    pos: Vec<u64>,
    queued: [u32; 2],
    last_dir: usize,
    batching: u32,
    starved: u32,
    latest_pos: [u64; 2],
}

pub const KEYS: &[&str] = &[
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "fifo_batch",
    "async_depth",
    "prio_aging_expire",
];

impl Deadline {
    pub fn new(s: &Settings) -> Result<Deadline, SettingError> {
        s.check("mq-deadline", KEYS)?;
        Ok(Deadline {
            read_expire: s.u64_or("read_expire", 500)? * 1_000_000,
            write_expire: s.u64_or("write_expire", 5000)? * 1_000_000,
            writes_starved: s.u64_or("writes_starved", 2)? as u32,
            front_merges: s.bool_or("front_merges", true)?,
            fifo_batch: (s.u64_or("fifo_batch", 16)? as u32).max(1),
            sorted: Default::default(),
            fifo: Default::default(),
            pos: Vec::new(),
            queued: [0; 2],
            last_dir: READ,
            batching: 0,
            starved: 0,
            latest_pos: [0; 2],
        })
    }

    fn dir(ctx: &Ctx, rq: RqId) -> usize {
        usize::from(ctx.rqs[rq as usize].is_write())
    }

    fn fifo_head(&mut self, ctx: &Ctx, dir: usize) -> Option<(u64, RqId)> {
        while let Some(&(dl, rq)) = self.fifo[dir].front() {
            if ctx.rqs[rq as usize].state == RqState::Queued && self.is_here(rq) {
                return Some((dl, rq));
            }
            self.fifo[dir].pop_front();
        }
        None
    }

    fn is_here(&self, rq: RqId) -> bool {
        self.pos.get(rq as usize).is_some_and(|p| *p != u64::MAX)
    }

    fn next_from(&self, dir: usize, from: u64) -> Option<RqId> {
        self.sorted[dir].range((from, 0)..).next().map(|(_, r)| *r)
    }

    fn take(&mut self, dir: usize, rq: RqId) -> RqId {
        let p = self.pos[rq as usize];
        self.sorted[dir].remove(&(p, rq));
        self.pos[rq as usize] = u64::MAX;
        self.queued[dir] -= 1;
        rq
    }
}

impl Scheduler for Deadline {
    fn name(&self) -> &'static str {
        "mq-deadline"
    }

    fn front_merges(&self) -> bool {
        self.front_merges
    }

    fn repositioned(&mut self, ctx: &Ctx, rq: RqId, old_sector: u64) {
        let dir = Self::dir(ctx, rq);
        if self.sorted[dir].remove(&(old_sector, rq)) {
            let s = ctx.rqs[rq as usize].sector;
            self.sorted[dir].insert((s, rq));
            self.pos[rq as usize] = s;
        }
    }

    fn insert(&mut self, ctx: &Ctx, rq: RqId) {
        let r = &ctx.rqs[rq as usize];
        let dir = usize::from(r.is_write());
        if self.pos.len() <= rq as usize {
            self.pos.resize(rq as usize + 1, u64::MAX);
        }
        self.pos[rq as usize] = r.sector;
        self.sorted[dir].insert((r.sector, rq));
        let expire = if dir == READ {
            self.read_expire
        } else {
            self.write_expire
        };
        self.fifo[dir].push_back((ctx.now + expire, rq));
        self.queued[dir] += 1;
    }

    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId> {
        // Continue the batch in the current direction.
        let dir = self.last_dir;
        if self.batching < self.fifo_batch
            && let Some(rq) = self.next_from(dir, self.latest_pos[dir])
        {
            self.batching += 1;
            self.latest_pos[dir] = ctx.rqs[rq as usize].sector;
            return Some(self.take(dir, rq));
        }
        let reads = self.queued[READ] > 0;
        let writes = self.queued[WRITE] > 0;
        let dir = if reads {
            if writes && self.starved >= self.writes_starved {
                self.starved = 0;
                WRITE
            } else {
                if writes {
                    self.starved += 1;
                }
                READ
            }
        } else if writes {
            self.starved = 0;
            WRITE
        } else {
            return None;
        };
        let next = self.next_from(dir, self.latest_pos[dir]);
        let head = self.fifo_head(ctx, dir);
        let rq = match (head, next) {
            (Some((dl, h)), _) if ctx.now >= dl => h,
            (Some((_, h)), None) => h,
            (_, Some(n)) => n,
            (None, None) => return None,
        };
        self.last_dir = dir;
        self.batching = 1;
        self.latest_pos[dir] = ctx.rqs[rq as usize].sector;
        Some(self.take(dir, rq))
    }

    fn completed(&mut self, _ctx: &Ctx, _rq: RqId) {}

    fn has_work(&self) -> bool {
        self.queued[READ] + self.queued[WRITE] > 0
    }
}
