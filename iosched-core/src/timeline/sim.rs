//! A tiny event-stream builder for tests: write a block layer's story step by step, with a
//! clock you move by hand, and get the events the kernel would have emitted.

use crate::event::{Comm, Dev, Event, EventKind, Op, ReqFlags};

pub const DEV: Dev = Dev { major: 7, minor: 0 };

pub struct Sim {
    pub t: u64,
    pub dev: Dev,
    pub events: Vec<Event>,
}

/// An event of `kind` at `t` on `dev`, fired in a kworker (pid 999, cgroup 1); the steps
/// fill in what their event is about.
fn kworker_event(kind: EventKind, t: u64, dev: Dev) -> Event {
    Event {
        ts_ns: t,
        kind,
        pid: 999,
        tgid: 999,
        comm: Comm::new("kworker"),
        cgroup_id: 1,
        dev,
        ..Event::blank()
    }
}

impl Default for Sim {
    fn default() -> Self {
        Sim {
            t: 1_000_000_000,
            dev: DEV,
            events: Vec::new(),
        }
    }
}

impl Sim {
    pub fn at(&mut self, t_rel_ns: u64) -> &mut Self {
        self.t = 1_000_000_000 + t_rel_ns;
        self
    }

    pub fn wait(&mut self, ns: u64) -> &mut Self {
        self.t += ns;
        self
    }

    pub fn on(&mut self, dev: Dev) -> &mut Self {
        self.dev = dev;
        self
    }

    fn push(&mut self, ev: Event) -> &mut Self {
        self.events.push(ev);
        self
    }

    /// Q: `pid` (comm `p<pid>`, cgroup `pid * 10`) queues `bio`.
    pub fn q(&mut self, bio: u64, pid: u32, sector: u64, bytes: u32, op: Op) -> &mut Self {
        let mut ev = kworker_event(EventKind::Queue, self.t, self.dev);
        ev.pid = pid;
        ev.tgid = pid;
        ev.comm = Comm::new(&format!("p{pid}"));
        ev.cgroup_id = u64::from(pid) * 10;
        ev.bio = bio;
        ev.sector = sector;
        ev.bytes = bytes;
        ev.op = op;
        if op == Op::Write {
            ev.flags = ReqFlags(ReqFlags::SYNC);
        }
        self.push(ev)
    }

    fn bio_ev(&mut self, kind: EventKind, bio: u64, sector: u64, bytes: u32) -> &mut Self {
        let mut ev = kworker_event(kind, self.t, self.dev);
        ev.bio = bio;
        ev.sector = sector;
        ev.bytes = bytes;
        self.push(ev)
    }

    pub fn g(&mut self, bio: u64) -> &mut Self {
        self.bio_ev(EventKind::GetRq, bio, 0, 0)
    }

    pub fn back_merge(&mut self, bio: u64) -> &mut Self {
        self.bio_ev(EventKind::BackMerge, bio, 0, 0)
    }

    pub fn front_merge(&mut self, bio: u64) -> &mut Self {
        self.bio_ev(EventKind::FrontMerge, bio, 0, 0)
    }

    /// X by `pid`: `child` is cut from the front of the bio `pid` queued last; the rest now
    /// starts at `new_sector`.
    pub fn split(
        &mut self,
        child: u64,
        pid: u32,
        sector: u64,
        bytes: u32,
        new_sector: u64,
    ) -> &mut Self {
        let mut ev = kworker_event(EventKind::Split, self.t, self.dev);
        ev.pid = pid;
        ev.bio = child;
        ev.sector = sector;
        ev.bytes = bytes;
        ev.aux = new_sector;
        self.push(ev)
    }

    fn rq_ev(&mut self, kind: EventKind, rq: u64, head: u64, sector: u64, bytes: u32) -> Event {
        let mut ev = kworker_event(kind, self.t, self.dev);
        ev.rq = rq;
        ev.bio = head;
        ev.sector = sector;
        ev.bytes = bytes;
        ev
    }

    pub fn i(&mut self, rq: u64, head: u64, sector: u64, bytes: u32) -> &mut Self {
        let ev = self.rq_ev(EventKind::Insert, rq, head, sector, bytes);
        self.push(ev)
    }

    /// D, then the bio_in_rq links for the rest of the chain.
    pub fn d(&mut self, rq: u64, chain: &[u64], sector: u64, bytes: u32, op: Op) -> &mut Self {
        let mut ev = self.rq_ev(
            EventKind::Issue,
            rq,
            chain.first().copied().unwrap_or(0),
            sector,
            bytes,
        );
        ev.op = op;
        self.push(ev);
        for (pos, bio) in chain.iter().enumerate().skip(1) {
            let mut link = kworker_event(EventKind::BioInRq, self.t, self.dev);
            link.rq = rq;
            link.bio = *bio;
            link.aux = pos as u64;
            self.push(link);
        }
        self
    }

    /// C: `remaining` bytes were left before it, `done` completed now.
    pub fn c(&mut self, rq: u64, remaining: u32, done: u32) -> &mut Self {
        let mut ev = self.rq_ev(EventKind::Complete, rq, 0, 0, remaining);
        ev.aux = u64::from(done);
        self.push(ev)
    }

    pub fn requeue(&mut self, rq: u64) -> &mut Self {
        let ev = self.rq_ev(EventKind::Requeue, rq, 0, 0, 0);
        self.push(ev)
    }

    pub fn rq_merge(&mut self, rq: u64) -> &mut Self {
        let ev = self.rq_ev(EventKind::RqMerge, rq, 0, 0, 0);
        self.push(ev)
    }

    pub fn bio_complete(&mut self, bio: u64) -> &mut Self {
        self.bio_ev(EventKind::BioComplete, bio, 0, 0)
    }

    /// A whole plain read: Q, G, I, D, C with the given stage durations.
    #[allow(clippy::too_many_arguments)]
    pub fn plain(
        &mut self,
        id: u64,
        pid: u32,
        sector: u64,
        bytes: u32,
        q2g: u64,
        g2i: u64,
        i2d: u64,
        d2c: u64,
    ) -> &mut Self {
        self.q(id, pid, sector, bytes, Op::Read)
            .wait(q2g)
            .g(id)
            .wait(g2i)
            .i(id + 1_000_000, id, sector, bytes)
            .wait(i2d)
            .d(id + 1_000_000, &[id], sector, bytes, Op::Read)
            .wait(d2c)
            .c(id + 1_000_000, bytes, bytes)
    }
}

/// A trace with known idling, `rounds` rounds of 20 ms: process 1 reads (1 ms), then the
/// device sits idle 5 ms while process 2's read and process 3's I/O (`third`) wait, as an
/// idling scheduler would hold them, then serves them (each round: one idle interval of
/// 5 ms, idled for process 1, processes 2 and 3 waiting).
pub fn idling_rounds(rounds: u64, third: Op) -> Vec<Event> {
    const MS: u64 = 1_000_000;
    let mut s = Sim::default();
    for round in 0..rounds {
        let t = round * 20 * MS;
        let id = round * 100;
        s.at(t)
            .q(id + 1, 1, round * 8, 4096, Op::Read)
            .g(id + 1)
            .i(id + 11, id + 1, round * 8, 4096)
            .d(id + 11, &[id + 1], round * 8, 4096, Op::Read)
            .at(t + MS)
            .c(id + 11, 4096, 4096)
            .at(t + 2 * MS)
            .q(id + 2, 2, 1 << 20, 4096, Op::Read)
            .g(id + 2)
            .i(id + 12, id + 2, 1 << 20, 4096)
            .q(id + 3, 3, 1 << 22, 4096, third)
            .g(id + 3)
            .i(id + 13, id + 3, 1 << 22, 4096)
            .at(t + 7 * MS)
            .d(id + 12, &[id + 2], 1 << 20, 4096, Op::Read)
            .at(t + 8 * MS)
            .c(id + 12, 4096, 4096)
            .d(id + 13, &[id + 3], 1 << 22, 4096, third)
            .at(t + 9 * MS)
            .c(id + 13, 4096, 4096);
    }
    s.events
}
