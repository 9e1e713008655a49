//! Synthetic request and bio identities for blktrace events, which carry none: events are
//! paired by (device, sector, size) in time order, as btt does. A Q gets a new bio id; G takes
//! the queued bio at its sector and starts a request; M/F attach the queued bio to the
//! request they extend (by its end or start sector); M of a whole request that matches a
//! pending request is a request merge; I/D/C/R find the request by its start sector. At D,
//! every bio after the first is linked to the request by a `BioInRq` event, as our own
//! recorder does, so analyses that follow `rq`/`bio` work unchanged.
//!
//! Ambiguity: two requests covering the same start sector at once are told apart by size and
//! then by age (oldest first). Memory is bounded by the I/O in flight, and capped.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::event::{Dev, Event, EventKind, Op, ReqFlags};

/// Requests or bios kept at most; beyond, the oldest are forgotten (a trace missing its
/// completions would otherwise grow without bound).
const MAX_TRACKED: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Allocated (G) or requeued: may still merge, not yet with the scheduler.
    Allocated,
    /// Inserted (I): in the scheduler, may still merge.
    Inserted,
    /// Issued (D): no more merges; waits for C.
    Issued,
}

#[derive(Debug)]
struct Request {
    dev: Dev,
    sector: u64,
    bytes: u32,
    /// Events of one request share its op: a flush issued for a preflush bio is another
    /// request than the bio's own.
    op: Op,
    state: State,
    /// (bio id, bytes), in chain order.
    bios: VecDeque<(u64, u32)>,
}

impl Request {
    fn end(&self) -> u64 {
        self.sector + u64::from(self.bytes >> 9)
    }

    fn first_bio(&self) -> u64 {
        self.bios.front().map_or(0, |&(id, _)| id)
    }
}

/// Counts of events that found no partner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairingStats {
    /// C or R with no matching request (the trace started after it, or lost events).
    pub requests_unmatched: u64,
    /// M or F that matched no request.
    pub merges_unmatched: u64,
    /// Requests or bios forgotten because too many were in flight.
    pub forgotten: u64,
}

#[derive(Default)]
pub struct Pairer {
    next_id: u64,
    /// Queued bios not yet in a request, by (device, start sector): (id, bytes).
    bios: HashMap<(Dev, u64), VecDeque<(u64, u32)>>,
    bio_order: VecDeque<(Dev, u64, u64)>,
    requests: BTreeMap<u64, Request>,
    by_start: HashMap<(Dev, u64), Vec<u64>>,
    /// Requests that may still grow at their end (not issued), by end sector.
    by_end: HashMap<(Dev, u64), Vec<u64>>,
    pub stats: PairingStats,
}

fn remove_id(map: &mut HashMap<(Dev, u64), Vec<u64>>, key: (Dev, u64), id: u64) {
    if let Some(ids) = map.get_mut(&key) {
        ids.retain(|&i| i != id);
        if ids.is_empty() {
            map.remove(&key);
        }
    }
}

impl Pairer {
    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Gives `ev` its identities; links for bios merged into an issued request are appended
    /// to `extra` (to follow `ev`).
    pub fn pair(&mut self, ev: &mut Event, extra: &mut VecDeque<Event>) {
        use EventKind::*;
        let key = (ev.dev, ev.sector);
        match ev.kind {
            Queue => {
                let id = self.new_id();
                self.push_bio(key, id, ev.bytes);
                ev.bio = id;
            }
            Split => ev.bio = self.split(ev),
            Bounce | Remap | SleepRq => {
                ev.bio = self.peek_bio(key).unwrap_or(0);
            }
            GetRq => {
                let bio = self
                    .take_bio(key, ev.bytes)
                    .unwrap_or_else(|| self.new_id());
                let rq = self.new_id();
                self.add_request(
                    rq,
                    Request {
                        dev: ev.dev,
                        sector: ev.sector,
                        bytes: ev.bytes,
                        op: ev.op,
                        state: State::Allocated,
                        bios: VecDeque::from([(bio, ev.bytes)]),
                    },
                );
                ev.rq = rq;
                ev.bio = bio;
            }
            BackMerge | RqMerge => self.back_merge(ev),
            FrontMerge => {
                let bio = self.take_bio(key, ev.bytes);
                let start = ev.sector + u64::from(ev.bytes >> 9);
                match self.find(
                    ev.dev,
                    start,
                    None,
                    ev.op,
                    &[State::Allocated, State::Inserted],
                ) {
                    Some(rq) => {
                        let bio = bio.unwrap_or_else(|| self.new_id());
                        self.reindex(rq, |r| {
                            r.sector = ev.sector;
                            r.bytes += ev.bytes;
                            r.bios.push_front((bio, ev.bytes));
                        });
                        ev.bio = bio;
                    }
                    None => {
                        self.stats.merges_unmatched += 1;
                        ev.bio = bio.unwrap_or(0);
                    }
                }
            }
            Insert => {
                // Requests the block layer makes itself (flushes) have no G: not an error.
                let rq = self.find_or_new(ev, &[State::Allocated, State::Inserted], false);
                if let Some(r) = self.requests.get_mut(&rq) {
                    r.state = State::Inserted;
                }
                self.label(ev, rq);
            }
            Issue => {
                let rq = self.find_or_new(ev, &[State::Allocated, State::Inserted], false);
                self.reindex(rq, |r| r.state = State::Issued);
                self.label(ev, rq);
                if let Some(r) = self.requests.get(&rq) {
                    for (pos, &(bio, _)) in r.bios.iter().enumerate().skip(1) {
                        extra.push_back(Event {
                            kind: BioInRq,
                            sector: 0,
                            bytes: 0,
                            op: Op::Read,
                            flags: ReqFlags(0),
                            rq,
                            bio,
                            error: 0,
                            aux: pos as u64,
                            ..*ev
                        });
                    }
                }
            }
            Requeue => {
                let rq = self.find_or_new(ev, &[State::Issued], true);
                if let Some(r) = self.requests.get_mut(&rq) {
                    r.state = State::Allocated;
                }
                self.label(ev, rq);
            }
            // A request may also complete unissued (a preflush-only write, done by its flush).
            Complete => match self
                .find(ev.dev, ev.sector, Some(ev.bytes), ev.op, &[State::Issued])
                .or_else(|| {
                    self.find(
                        ev.dev,
                        ev.sector,
                        Some(ev.bytes),
                        ev.op,
                        &[State::Allocated, State::Inserted],
                    )
                }) {
                Some(rq) => {
                    self.label(ev, rq);
                    let done = self.requests.get(&rq).is_none_or(|r| ev.bytes >= r.bytes);
                    if done {
                        self.remove_request(rq);
                    } else {
                        // A partial completion: the rest of the request goes on from here, and
                        // the bios it covered are done.
                        self.reindex(rq, |r| {
                            r.sector += u64::from(ev.bytes >> 9);
                            r.bytes -= ev.bytes;
                            let mut done = ev.bytes;
                            while let Some(&(_, n)) = r.bios.front()
                                && n <= done
                                && r.bios.len() > 1
                            {
                                done -= n;
                                r.bios.pop_front();
                            }
                        });
                    }
                }
                None => match self.take_bio(key, ev.bytes) {
                    // A bio completing on its own: a bio-based device.
                    Some(bio) => {
                        ev.kind = BioComplete;
                        ev.bio = bio;
                        ev.aux = 0;
                    }
                    None => self.stats.requests_unmatched += 1,
                },
            },
            Plug | Unplug | BioComplete | IoStart | IoDone | BioInRq | KyberThrottled
            | KyberAdjust | WbtStep | WbtTimer | Wakeup => {}
        }
    }

    fn back_merge(&mut self, ev: &mut Event) {
        let key = (ev.dev, ev.sector);
        let mergeable = [State::Allocated, State::Inserted];
        // A bio merge always follows the bio's Q; a request merge names a whole pending
        // request, which an earlier request (ending where it starts) has absorbed.
        let queued = self.take_bio(key, ev.bytes);
        let target = self.find_by_end(ev.dev, ev.sector, ev.op);
        if queued.is_none()
            && let Some(next) = self.find(ev.dev, ev.sector, Some(ev.bytes), ev.op, &mergeable)
            && let Some(into) = target.filter(|&t| t != next)
        {
            let gone = self
                .remove_request(next)
                .map(|r| r.bios)
                .unwrap_or_default();
            ev.kind = EventKind::RqMerge;
            ev.rq = next;
            ev.bio = gone.front().map_or(0, |&(id, _)| id);
            self.reindex(into, |r| {
                r.bytes += ev.bytes;
                r.bios.extend(gone);
            });
            return;
        }
        ev.kind = EventKind::BackMerge;
        match target {
            Some(into) => {
                let bio = queued.unwrap_or_else(|| self.new_id());
                self.reindex(into, |r| {
                    r.bytes += ev.bytes;
                    r.bios.push_back((bio, ev.bytes));
                });
                ev.bio = bio;
            }
            None => {
                self.stats.merges_unmatched += 1;
                ev.bio = queued.unwrap_or(0);
            }
        }
    }

    fn label(&self, ev: &mut Event, rq: u64) {
        ev.rq = rq;
        ev.bio = self.requests.get(&rq).map_or(0, Request::first_bio);
    }

    fn push_bio(&mut self, key: (Dev, u64), id: u64, bytes: u32) {
        self.bios.entry(key).or_default().push_back((id, bytes));
        self.bio_order.push_back((key.0, key.1, id));
        while self.bio_order.len() > MAX_TRACKED {
            let Some((dev, sector, old)) = self.bio_order.pop_front() else {
                break;
            };
            if let Some(q) = self.bios.get_mut(&(dev, sector)) {
                let before = q.len();
                q.retain(|&(i, _)| i != old);
                if q.len() < before {
                    self.stats.forgotten += 1;
                }
                if q.is_empty() {
                    self.bios.remove(&(dev, sector));
                }
            }
        }
    }

    /// X: the kernel cut the front `ev.bytes` off the bio queued at `ev.sector` into a new
    /// bio (the piece, which this event names), and the rest of the parent goes on at the
    /// sector in `ev.aux`. The piece is queued at the parent's start, the parent moves to
    /// `aux`, so that the G (or M/F) of each finds its own bio, as the timeline's split
    /// (a child that keeps its parent's Q) expects.
    fn split(&mut self, ev: &Event) -> u64 {
        let key = (ev.dev, ev.sector);
        let Some((parent, bytes)) = self.bios.get_mut(&key).and_then(VecDeque::pop_back) else {
            return 0;
        };
        if self.bios.get(&key).is_some_and(VecDeque::is_empty) {
            self.bios.remove(&key);
        }
        let piece = self.new_id();
        self.push_bio(key, piece, ev.bytes);
        let rest = bytes.saturating_sub(ev.bytes);
        if ev.aux > ev.sector && rest > 0 {
            self.push_bio((ev.dev, ev.aux), parent, rest);
        }
        piece
    }

    fn peek_bio(&self, key: (Dev, u64)) -> Option<u64> {
        self.bios.get(&key)?.back().map(|&(id, _)| id)
    }

    /// The queued bio at `key`: the oldest of that size, else the oldest.
    fn take_bio(&mut self, key: (Dev, u64), bytes: u32) -> Option<u64> {
        let q = self.bios.get_mut(&key)?;
        let at = q.iter().position(|&(_, b)| b == bytes).unwrap_or(0);
        let (id, _) = q.remove(at)?;
        if q.is_empty() {
            self.bios.remove(&key);
        }
        Some(id)
    }

    /// A request starting at `sector` in one of `states`: of size `bytes` if any, oldest first.
    fn find(
        &self,
        dev: Dev,
        sector: u64,
        bytes: Option<u32>,
        op: Op,
        states: &[State],
    ) -> Option<u64> {
        let ids = self.by_start.get(&(dev, sector))?;
        let candidates = || {
            ids.iter().copied().filter(|id| {
                self.requests
                    .get(id)
                    .is_some_and(|r| r.op == op && states.contains(&r.state))
            })
        };
        bytes
            .and_then(|b| candidates().find(|id| self.requests[id].bytes == b))
            .or_else(|| candidates().next())
    }

    /// A request that may still grow, ending at `sector` (the newest: a merge extends the
    /// request just built).
    fn find_by_end(&self, dev: Dev, sector: u64, op: Op) -> Option<u64> {
        self.by_end
            .get(&(dev, sector))?
            .iter()
            .rev()
            .copied()
            .find(|id| self.requests.get(id).is_some_and(|r| r.op == op))
    }

    fn find_or_new(&mut self, ev: &Event, states: &[State], expected: bool) -> u64 {
        if let Some(rq) = self.find(ev.dev, ev.sector, Some(ev.bytes), ev.op, states) {
            return rq;
        }
        if expected {
            self.stats.requests_unmatched += 1;
        }
        let rq = self.new_id();
        self.add_request(
            rq,
            Request {
                dev: ev.dev,
                sector: ev.sector,
                bytes: ev.bytes,
                op: ev.op,
                state: State::Allocated,
                bios: VecDeque::new(),
            },
        );
        rq
    }

    fn add_request(&mut self, id: u64, r: Request) {
        self.index(id, &r);
        self.requests.insert(id, r);
        while self.requests.len() > MAX_TRACKED {
            let Some(&oldest) = self.requests.keys().next() else {
                break;
            };
            self.remove_request(oldest);
            self.stats.forgotten += 1;
        }
    }

    fn index(&mut self, id: u64, r: &Request) {
        self.by_start.entry((r.dev, r.sector)).or_default().push(id);
        if r.state != State::Issued {
            self.by_end.entry((r.dev, r.end())).or_default().push(id);
        }
    }

    fn unindex(&mut self, id: u64, r: &Request) {
        remove_id(&mut self.by_start, (r.dev, r.sector), id);
        remove_id(&mut self.by_end, (r.dev, r.end()), id);
    }

    fn remove_request(&mut self, id: u64) -> Option<Request> {
        let r = self.requests.remove(&id)?;
        self.unindex(id, &r);
        Some(r)
    }

    /// Changes a request's extent or state, keeping the indexes right.
    fn reindex(&mut self, id: u64, change: impl FnOnce(&mut Request)) {
        let Some(mut r) = self.requests.remove(&id) else {
            return;
        };
        self.unindex(id, &r);
        change(&mut r);
        self.index(id, &r);
        self.requests.insert(id, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_support::event_at;

    fn ev(kind: EventKind, sector: u64, sectors: u32) -> Event {
        Event {
            kind,
            sector,
            bytes: sectors << 9,
            ..event_at(0, 0)
        }
    }

    fn run(events: &[Event]) -> (Vec<Event>, PairingStats) {
        let mut p = Pairer::default();
        let mut out = Vec::new();
        let mut extra = VecDeque::new();
        for e in events {
            let mut e = *e;
            p.pair(&mut e, &mut extra);
            out.push(e);
            out.extend(extra.drain(..));
        }
        (out, p.stats)
    }

    #[test]
    fn plugged_back_merge_then_issue_and_complete() {
        use EventKind::*;
        let (out, stats) = run(&[
            ev(Queue, 2048, 8),
            ev(GetRq, 2048, 8),
            ev(Queue, 2056, 8),
            ev(BackMerge, 2056, 8),
            ev(Queue, 2040, 8),
            ev(FrontMerge, 2040, 8),
            ev(Insert, 2040, 24),
            ev(Issue, 2040, 24),
            ev(Complete, 2040, 24),
        ]);
        assert_eq!(stats, PairingStats::default());
        let (q1, g, q2, m, q3, f, i, d) = (
            out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7],
        );
        assert_eq!(g.bio, q1.bio);
        assert_eq!(m.bio, q2.bio);
        assert_eq!(m.rq, 0, "bio merges carry no request, as our recorder's");
        assert_eq!(f.bio, q3.bio);
        assert_eq!((i.rq, d.rq), (g.rq, g.rq));
        assert_eq!(d.bio, q3.bio, "the front-merged bio leads the chain");
        let links: Vec<(EventKind, u64, u64, u64)> = out[8..10]
            .iter()
            .map(|e| (e.kind, e.rq, e.bio, e.aux))
            .collect();
        assert_eq!(
            links,
            [(BioInRq, g.rq, q1.bio, 1), (BioInRq, g.rq, q2.bio, 2)]
        );
        assert_eq!((out[10].kind, out[10].rq), (Complete, g.rq));
    }

    #[test]
    fn request_merge_and_requeue_and_partial_completion() {
        use EventKind::*;
        let (out, stats) = run(&[
            ev(Queue, 0, 8),
            ev(GetRq, 0, 8),
            ev(Insert, 0, 8),
            ev(Queue, 8, 8),
            ev(GetRq, 8, 8),
            ev(Insert, 8, 8),
            // The scheduler merges request 2 into request 1.
            ev(BackMerge, 8, 8),
            ev(Issue, 0, 16),
            ev(Requeue, 0, 16),
            ev(Issue, 0, 16),
            ev(Complete, 0, 8),
            ev(Complete, 8, 8),
        ]);
        assert_eq!(stats, PairingStats::default());
        let rq1 = out[1].rq;
        assert_eq!(
            (out[6].kind, out[6].rq, out[6].bio),
            (RqMerge, out[4].rq, out[3].bio)
        );
        assert!(
            out[7..]
                .iter()
                .filter(|e| e.kind != BioInRq)
                .all(|e| e.rq == rq1)
        );
        assert_eq!(out[8].bio, out[3].bio);
    }

    #[test]
    fn split_piece_and_rest_each_find_their_own_request() {
        use EventKind::*;
        // As a 4.x kernel traced a 1792-sector readahead cut at a 1712-sector limit:
        // Q S+1792, X S / S+1712 (the record's size is the piece's), G of each part.
        let split = Event {
            aux: 1712,
            ..ev(Split, 0, 1712)
        };
        let (out, stats) = run(&[
            ev(Queue, 0, 1792),
            split,
            ev(GetRq, 0, 1712),
            ev(GetRq, 1712, 80),
            ev(Issue, 0, 1712),
            ev(Issue, 1712, 80),
            ev(Complete, 0, 1712),
            ev(Complete, 1712, 80),
        ]);
        assert_eq!(stats, PairingStats::default());
        let (q, x, g_piece, g_rest) = (out[0], out[1], out[2], out[3]);
        assert_ne!(x.bio, 0);
        assert_ne!(x.bio, q.bio, "the piece is a new bio");
        assert_eq!(g_piece.bio, x.bio);
        assert_eq!(
            g_rest.bio, q.bio,
            "the rest is the parent, moved to the new sector"
        );
        assert_ne!(g_piece.rq, g_rest.rq);
        assert_eq!((out[6].rq, out[7].rq), (g_piece.rq, g_rest.rq));
    }

    #[test]
    fn unmatched_events_are_counted_and_bio_completions_recognised() {
        use EventKind::*;
        let (out, stats) = run(&[
            ev(Issue, 100, 8),
            ev(Complete, 100, 8),
            ev(Complete, 500, 8),
            ev(Queue, 900, 8),
            ev(Complete, 900, 8),
            ev(BackMerge, 300, 8),
        ]);
        assert_eq!(stats.requests_unmatched, 1);
        assert_eq!(stats.merges_unmatched, 1);
        assert_eq!(out[1].rq, out[0].rq);
        assert_eq!((out[4].kind, out[4].bio), (BioComplete, out[3].bio));
    }
}
