//! mq-deadline (block/mq-deadline.c): per priority level (5.14+: real-time, best-effort,
//! idle; before, one level) and per direction a sector-sorted tree and a FIFO with
//! deadlines; batches of up to `fifo_batch` requests in ascending sector order; expiry
//! checked only at batch boundaries; reads preferred unless writes were starved
//! `writes_starved` times. A level is served only while no higher one has a request queued
//! or in flight, except that a best-effort or idle request waiting over `prio_aging_expire`
//! goes first. It never idles.

use std::collections::{BTreeSet, VecDeque};

use super::{Ctx, RqId, RqState, SchedEnv, Scheduler, SettingError, Settings};

const READ: usize = 0;
const WRITE: usize = 1;

/// `enum dd_prio`.
const RT: usize = 0;
const BE: usize = 1;
const IDLE: usize = 2;
/// A request not queued here (never inserted, or dispatched).
const NOT_HERE: u64 = u64::MAX;
/// The level of a request this scheduler never took in (a flush's data sent at the head).
const NO_LEVEL: u8 = u8::MAX;

/// One priority level's queues and count (`struct dd_per_prio`).
#[derive(Default)]
struct Level {
    sorted: [BTreeSet<(u64, RqId)>; 2],
    /// (deadline, request); entries of requests already dispatched are skipped lazily.
    fifo: [VecDeque<(u64, RqId)>; 2],
    queued: [u32; 2],
    latest_pos: [u64; 2],
    /// `dd_queued`: inserted less completed, so requests queued or still in flight.
    inserted_not_completed: u32,
}

pub struct Deadline {
    read_expire: u64,
    write_expire: u64,
    writes_starved: u32,
    front_merges: bool,
    fifo_batch: u32,
    /// 5.14+: three levels; before, every request in the best-effort one.
    per_prio: bool,
    prio_aging_expire: u64,
    levels: [Level; 3],
    /// Each stream's level (from its I/O priority class).
    stream_level: Vec<u8>,
    /// Position of each queued request in its level's `sorted` (its sector when inserted
    /// or moved), [`NOT_HERE`] otherwise.
    pos: Vec<u64>,
    /// The level each request was inserted at, [`NO_LEVEL`] for one never inserted.
    rq_level: Vec<u8>,
    last_dir: usize,
    batching: u32,
    starved: u32,
}

pub const KEYS: &[&str] = &[
    "read_expire",
    "write_expire",
    "writes_starved",
    "front_merges",
    "fifo_batch",
    "async_depth",
    "prio_aging_expire",
    "kernel",
];

/// `ioprio_class_to_prio`: none (a process that set no priority) is best-effort.
fn level_of(ioprio: u16) -> u8 {
    match ioprio >> 13 {
        1 => RT as u8,
        3 => IDLE as u8,
        _ => BE as u8,
    }
}

impl Deadline {
    pub fn new(s: &Settings, env: &SchedEnv) -> Result<Deadline, SettingError> {
        s.check("mq-deadline", KEYS)?;
        let per_prio = s.kernel_or("kernel", env.kernel)? >= 5014;
        Ok(Deadline {
            read_expire: s.u64_or("read_expire", 500)? * 1_000_000,
            write_expire: s.u64_or("write_expire", 5000)? * 1_000_000,
            writes_starved: s.u64_or("writes_starved", 2)? as u32,
            front_merges: s.bool_or("front_merges", true)?,
            fifo_batch: (s.u64_or("fifo_batch", 16)? as u32).max(1),
            per_prio,
            prio_aging_expire: s.u64_or("prio_aging_expire", 10_000)? * 1_000_000,
            levels: Default::default(),
            stream_level: env
                .stream_ioprio
                .iter()
                .map(|p| if per_prio { level_of(*p) } else { BE as u8 })
                .collect(),
            pos: Vec::new(),
            rq_level: Vec::new(),
            last_dir: READ,
            batching: 0,
            starved: 0,
        })
    }

    fn dir(ctx: &Ctx, rq: RqId) -> usize {
        usize::from(ctx.rqs[rq as usize].is_write())
    }

    fn level(&self, ctx: &Ctx, rq: RqId) -> usize {
        let stream = ctx.rqs[rq as usize].stream as usize;
        usize::from(self.stream_level.get(stream).copied().unwrap_or(BE as u8))
    }

    fn fifo_head(&mut self, ctx: &Ctx, lv: usize, dir: usize) -> Option<(u64, RqId)> {
        while let Some(&(dl, rq)) = self.levels[lv].fifo[dir].front() {
            if ctx.rqs[rq as usize].state == RqState::Queued && self.is_here(rq) {
                return Some((dl, rq));
            }
            self.levels[lv].fifo[dir].pop_front();
        }
        None
    }

    /// `pos` and `rq_level` grown to hold `rq` (the two always have the same length).
    fn make_room(&mut self, rq: RqId) {
        if self.pos.len() <= rq as usize {
            self.pos.resize(rq as usize + 1, NOT_HERE);
            self.rq_level.resize(rq as usize + 1, NO_LEVEL);
        }
    }

    fn is_here(&self, rq: RqId) -> bool {
        self.pos.get(rq as usize).is_some_and(|p| *p != NOT_HERE)
    }

    fn next_from(&self, lv: usize, dir: usize, from: u64) -> Option<RqId> {
        self.levels[lv].sorted[dir]
            .range((from, 0)..)
            .next()
            .map(|(_, r)| *r)
    }

    fn take(&mut self, ctx: &Ctx, lv: usize, dir: usize, rq: RqId) -> RqId {
        let p = self.pos[rq as usize];
        let level = &mut self.levels[lv];
        level.sorted[dir].remove(&(p, rq));
        level.queued[dir] -= 1;
        level.latest_pos[dir] = ctx.rqs[rq as usize].sector;
        self.pos[rq as usize] = NOT_HERE;
        self.batching += 1;
        rq
    }

    /// `__dd_dispatch_request` for one level: only a request inserted at or before
    /// `latest_start` is taken (the aging pass passes `now - prio_aging_expire`).
    fn dispatch_level(&mut self, ctx: &Ctx, lv: usize, latest_start: u64) -> Option<RqId> {
        let started_after = |rq: RqId| ctx.rqs[rq as usize].inserted > latest_start;
        // Continue the batch in the current direction.
        let dir = self.last_dir;
        if self.batching < self.fifo_batch
            && let Some(rq) = self.next_from(lv, dir, self.levels[lv].latest_pos[dir])
        {
            if started_after(rq) {
                return None;
            }
            return Some(self.take(ctx, lv, dir, rq));
        }
        let reads = self.levels[lv].queued[READ] > 0;
        let writes = self.levels[lv].queued[WRITE] > 0;
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
        let next = self.next_from(lv, dir, self.levels[lv].latest_pos[dir]);
        let head = self.fifo_head(ctx, lv, dir);
        let rq = match (head, next) {
            (Some((dl, h)), _) if ctx.now >= dl => h,
            (Some((_, h)), None) => h,
            (_, Some(n)) => n,
            (None, None) => return None,
        };
        // The kernel starts the new batch before it checks the request's age.
        self.last_dir = dir;
        self.batching = 0;
        if started_after(rq) {
            return None;
        }
        Some(self.take(ctx, lv, dir, rq))
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
        let lv = self.level(ctx, rq);
        let sorted = &mut self.levels[lv].sorted[dir];
        if sorted.remove(&(old_sector, rq)) {
            let s = ctx.rqs[rq as usize].sector;
            sorted.insert((s, rq));
            self.pos[rq as usize] = s;
        }
    }

    fn insert(&mut self, ctx: &Ctx, rq: RqId) {
        let r = &ctx.rqs[rq as usize];
        let dir = usize::from(r.is_write());
        let lv = self.level(ctx, rq);
        self.make_room(rq);
        self.pos[rq as usize] = r.sector;
        self.rq_level[rq as usize] = lv as u8;
        let expire = if dir == READ {
            self.read_expire
        } else {
            self.write_expire
        };
        let level = &mut self.levels[lv];
        level.sorted[dir].insert((r.sector, rq));
        level.fifo[dir].push_back((ctx.now + expire, rq));
        level.queued[dir] += 1;
        level.inserted_not_completed += 1;
    }

    /// A flush's data sent ahead of everything (the simulator dispatches it): mq-deadline
    /// takes it into its level's dispatch list, so it counts there until it completes.
    fn insert_at_head(&mut self, ctx: &Ctx, rq: RqId) {
        let lv = self.level(ctx, rq);
        self.make_room(rq);
        self.rq_level[rq as usize] = lv as u8;
        self.levels[lv].inserted_not_completed += 1;
    }

    /// `dd_dispatch_request`.
    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId> {
        // One level (or only best-effort I/O about, as nearly always): no other to yield to
        // or to age against.
        let others =
            self.levels[RT].inserted_not_completed + self.levels[IDLE].inserted_not_completed;
        if !self.per_prio || others == 0 {
            return self.dispatch_level(ctx, BE, u64::MAX);
        }
        // `dd_dispatch_prio_aged_requests`: with two levels or more holding requests, a
        // best-effort or idle one inserted over `prio_aging_expire` ago goes first.
        let holding = self
            .levels
            .iter()
            .filter(|l| l.inserted_not_completed > 0)
            .count();
        if holding >= 2
            && let Some(latest_start) = ctx.now.checked_sub(self.prio_aging_expire)
        {
            for lv in [BE, IDLE] {
                if let Some(rq) = self.dispatch_level(ctx, lv, latest_start) {
                    return Some(rq);
                }
            }
        }
        // Then by priority: a level is not served while a higher one has requests queued
        // or in flight.
        for lv in [RT, BE, IDLE] {
            if let Some(rq) = self.dispatch_level(ctx, lv, ctx.now) {
                return Some(rq);
            }
            if self.levels[lv].inserted_not_completed > 0 {
                return None;
            }
        }
        None
    }

    /// `dd_finish_request`: a request it took in counts as completed at its level.
    fn completed(&mut self, _ctx: &Ctx, rq: RqId) {
        if let Some(lv) = self.rq_level.get(rq as usize).copied()
            && lv != NO_LEVEL
        {
            self.levels[usize::from(lv)].inserted_not_completed -= 1;
            self.rq_level[rq as usize] = NO_LEVEL;
        }
    }

    fn has_work(&self) -> bool {
        self.levels
            .iter()
            .any(|l| l.queued[READ] + l.queued[WRITE] > 0)
    }
}
