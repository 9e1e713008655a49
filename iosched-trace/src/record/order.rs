//! Arrival order -> time order with bounded memory. Events from different CPUs reach the ring
//! buffer slightly out of time order; holding each event until the stream has moved a window
//! past it puts them back in order.

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, VecDeque},
};

use crate::event::Event;

/// Re-sorts a nearly time-ordered stream of events by `ts_ns`.
///
/// An event is released once an event more than `window_ns` newer has been seen, or when more
/// than `max_held` events are held, or at the end of the input. Equal timestamps keep arrival
/// order. An event arriving later than the window allows is still released (as soon as
/// possible) and counted in [`late`](Self::late).
pub struct TimeOrdered<I: Iterator<Item = Event>> {
    inner: I,
    /// Events that arrived in order (the common case): a FIFO, O(1) per event.
    run: VecDeque<Held>,
    /// Events that arrived before something newer than them: a heap, usually tiny.
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
            run: VecDeque::new(),
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

    /// The oldest held event's (timestamp, arrival), and whether it is in the heap.
    fn oldest(&self) -> Option<((u64, u64), bool)> {
        let run = self.run.front().map(|h| (h.ts_ns, h.arrival));
        let heap = self.held.peek().map(|Reverse(h)| (h.ts_ns, h.arrival));
        match (run, heap) {
            (Some(r), Some(h)) => Some(if h < r { (h, true) } else { (r, false) }),
            (Some(r), None) => Some((r, false)),
            (None, Some(h)) => Some((h, true)),
            (None, None) => None,
        }
    }

    fn held_len(&self) -> usize {
        self.run.len() + self.held.len()
    }

    fn release(&mut self, from_heap: bool) -> Option<Event> {
        let held = if from_heap {
            self.held.pop()?.0
        } else {
            self.run.pop_front()?
        };
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
            // Fast path (no stragglers held): the oldest is the run's front.
            if self.held.is_empty() {
                match self.run.front() {
                    Some(front)
                        if self.done
                            || self.run.len() > self.max_held
                            || self.newest_ns - front.ts_ns > self.window_ns =>
                    {
                        return self.release(false);
                    }
                    None if self.done => return None,
                    _ => {}
                }
            } else if let Some(((oldest_ns, _), from_heap)) = self.oldest()
                && (self.done
                    || self.held_len() > self.max_held
                    || self.newest_ns - oldest_ns > self.window_ns)
            {
                return self.release(from_heap);
            }
            if self.done {
                return None;
            }
            match self.inner.next() {
                Some(ev) => {
                    self.newest_ns = self.newest_ns.max(ev.ts_ns);
                    let held = Held {
                        ts_ns: ev.ts_ns,
                        arrival: self.arrivals,
                        ev,
                    };
                    self.arrivals += 1;
                    if self.run.back().is_none_or(|b| b.ts_ns <= held.ts_ns) {
                        self.run.push_back(held);
                    } else {
                        self.held.push(Reverse(held));
                    }
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

    proptest::proptest! {
        /// With room for everything, the output is the input stably sorted by time, whatever
        /// mix of in-order runs and stragglers it has.
        #[test]
        fn unbounded_window_is_a_stable_sort(ts in proptest::collection::vec(0u64..50, 0..300)) {
            let input: Vec<(u64, u64)> = ts.iter().enumerate().map(|(i, t)| (*t, i as u64)).collect();
            let mut expected = input.clone();
            expected.sort_by_key(|(t, _)| *t);
            let (out, late) = run(&input, u64::MAX, usize::MAX);
            proptest::prop_assert_eq!(out, expected);
            proptest::prop_assert_eq!(late, 0);
        }

        /// Any window: every event comes out once, and `late` counts exactly the events
        /// released after a newer one.
        #[test]
        fn bounded_window_loses_nothing(ts in proptest::collection::vec(0u64..1000, 0..300), window in 0u64..200, max in 1usize..50) {
            let input: Vec<(u64, u64)> = ts.iter().enumerate().map(|(i, t)| (*t, i as u64)).collect();
            let (out, late) = run(&input, window, max);
            let mut tags: Vec<u64> = out.iter().map(|(_, tag)| *tag).collect();
            tags.sort_unstable();
            proptest::prop_assert_eq!(tags, (0..input.len() as u64).collect::<Vec<_>>());
            let mut newest = 0;
            let mut backwards = 0;
            for (t, _) in &out {
                if *t < newest { backwards += 1; } else { newest = *t; }
            }
            proptest::prop_assert_eq!(late, backwards);
        }
    }

    #[test]
    fn empty_input() {
        assert_eq!(run(&[], 10, 10).0, []);
    }
}
