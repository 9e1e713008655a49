//! Arrival order -> time order with bounded memory. Events from different CPUs reach the ring
//! buffer slightly out of time order; holding each event until the stream has moved a window
//! past it puts them back in order.

use std::{cmp::Reverse, collections::BinaryHeap};

use crate::event::Event;

/// Re-sorts a nearly time-ordered stream of events by `ts_ns`.
///
/// An event is released once an event more than `window_ns` newer has been seen, or when more
/// than `max_held` events are held, or at the end of the input. Equal timestamps keep arrival
/// order. An event arriving later than the window allows is still released (as soon as
/// possible) and counted in [`late`](Self::late).
pub struct TimeOrdered<I: Iterator<Item = Event>> {
    inner: I,
    held: BinaryHeap<Reverse<Held>>,
    window_ns: u64,
    max_held: usize,
    arrivals: u64,
    newest_ns: u64,
    last_out_ns: Option<u64>,
    late: u64,
    done: bool,
}

/// Ordered by (timestamp, arrival number): a stable sort key.
struct Held {
    ts_ns: u64,
    arrival: u64,
    ev: Event,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.ts_ns, self.arrival) == (other.ts_ns, other.arrival)
    }
}

impl Eq for Held {}

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.ts_ns, self.arrival).cmp(&(other.ts_ns, other.arrival))
    }
}

impl<I: Iterator<Item = Event>> TimeOrdered<I> {
    /// 100 ms of trace time.
    pub const DEFAULT_WINDOW_NS: u64 = 100_000_000;
    /// About 30 MiB of held events.
    pub const DEFAULT_MAX_HELD: usize = 1 << 18;

    pub fn new(inner: I) -> Self {
        Self::with_window(inner, Self::DEFAULT_WINDOW_NS, Self::DEFAULT_MAX_HELD)
    }

    pub fn with_window(inner: I, window_ns: u64, max_held: usize) -> Self {
        TimeOrdered {
            inner,
            held: BinaryHeap::new(),
            window_ns,
            max_held: max_held.max(1),
            arrivals: 0,
            newest_ns: 0,
            last_out_ns: None,
            late: 0,
            done: false,
        }
    }

    /// Events released after a newer one (they arrived too late for the window).
    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn into_inner(self) -> I {
        self.inner
    }

    pub fn inner(&self) -> &I {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut I {
        &mut self.inner
    }

    fn release(&mut self) -> Option<Event> {
        let Reverse(held) = self.held.pop()?;
        match self.last_out_ns {
            Some(last) if held.ts_ns < last => self.late += 1,
            _ => self.last_out_ns = Some(held.ts_ns),
        }
        Some(held.ev)
    }
}

impl<I: Iterator<Item = Event>> Iterator for TimeOrdered<I> {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(Reverse(oldest)) = self.held.peek()
                && (self.done
                    || self.held.len() > self.max_held
                    || self.newest_ns - oldest.ts_ns > self.window_ns)
            {
                return self.release();
            }
            if self.done {
                return None;
            }
            match self.inner.next() {
                Some(ev) => {
                    self.newest_ns = self.newest_ns.max(ev.ts_ns);
                    self.held.push(Reverse(Held {
                        ts_ns: ev.ts_ns,
                        arrival: self.arrivals,
                        ev,
                    }));
                    self.arrivals += 1;
                }
                None => self.done = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_support::event_at;

    fn run(input: &[(u64, u64)], window: u64, max_held: usize) -> (Vec<(u64, u64)>, u64) {
        // (ts, tag) pairs; the tag travels in `aux`.
        let events: Vec<Event> = input.iter().map(|&(ts, tag)| event_at(ts, tag)).collect();
        let mut sorted = TimeOrdered::with_window(events.into_iter(), window, max_held);
        let out = sorted.by_ref().map(|e| (e.ts_ns, e.aux)).collect();
        (out, sorted.late())
    }

    #[test]
    fn reorders_within_the_window_and_keeps_ties_stable() {
        let input = [
            (10, 0),
            (30, 1),
            (20, 2),
            (20, 3),
            (5, 4),
            (30, 5),
            (40, 6),
            (35, 7),
        ];
        let (out, late) = run(&input, 100, 1000);
        assert_eq!(
            out,
            [
                (5, 4),
                (10, 0),
                (20, 2),
                (20, 3),
                (30, 1),
                (30, 5),
                (35, 7),
                (40, 6)
            ]
        );
        assert_eq!(late, 0);
    }

    #[test]
    fn releases_events_once_the_window_has_passed() {
        // With a window of 10, event 100 is released when 111 arrives, before 105 shows up
        // late (it is then released as soon as possible and counted).
        let input = [(100, 0), (111, 1), (105, 2), (200, 3)];
        let (out, late) = run(&input, 10, 1000);
        assert_eq!(out, [(100, 0), (105, 2), (111, 1), (200, 3)]);
        assert_eq!(late, 0);
        let input = [(100, 0), (111, 1), (130, 2), (105, 3)];
        let (out, late) = run(&input, 10, 1000);
        assert_eq!(out, [(100, 0), (111, 1), (105, 3), (130, 2)]);
        assert_eq!(late, 1);
    }

    #[test]
    fn holds_at_most_max_held() {
        // All equal timestamps: only the count bound releases them, in arrival order.
        let input: Vec<(u64, u64)> = (0..50).map(|i| (7, i)).collect();
        let (out, _) = run(&input, u64::MAX, 3);
        assert_eq!(out, input);
        let input = [(30, 0), (20, 1), (10, 2)];
        let (out, late) = run(&input, u64::MAX, 1);
        assert_eq!(out, [(20, 1), (10, 2), (30, 0)]);
        assert_eq!(late, 1);
    }

    #[test]
    fn empty_input() {
        assert_eq!(run(&[], 10, 10).0, []);
    }
}
