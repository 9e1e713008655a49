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

/// What [`ChunkOrdered`] can order: events, or small references to events (a timestamp and
/// where to find the event), which keep the held window small.
pub trait Timed: Copy {
    fn ts_ns(&self) -> u64;
}

impl Timed for Event {
    #[inline]
    fn ts_ns(&self) -> u64 {
        self.ts_ns
    }
}

/// [`TimeOrdered`]'s reordering for input that comes a chunk at a time (a recording's EVENTS
/// chunks): the same output, event for event, and the same [`late`](Self::late) count, at a
/// fraction of the cost per event.
///
/// Why it is cheaper: a chunk is a few hundred events from one drain of the recorder, and
/// nearly always (1) every event in it is within the window of the newest event before it, and
/// (2) the held events plus the chunk fit within `max_held`. Then no event can be released
/// while the chunk arrives one event at a time, except ones older than all of the chunk, so
/// [`TimeOrdered`] would output exactly the stable sort by time of held events and chunk: the
/// chunk is sorted on its own (usually already sorted) and merged with the few held events
/// newer than its oldest, and whatever the window has passed is released in one sweep. A
/// chunk that breaks (1) or (2) is taken one event at a time, as [`TimeOrdered`] does.
///
/// Released events stay at the front of the held queue until taken, so each event is moved
/// twice: into the queue and out of it.
pub struct ChunkOrdered<T: Timed = Event> {
    /// Sorted by (timestamp, arrival); the first `ready` are released and wait to be taken.
    held: VecDeque<T>,
    ready: usize,
    window_ns: u64,
    max_held: usize,
    newest_ns: u64,
    last_out_ns: Option<u64>,
    late: u64,
    done: bool,
    /// Held events displaced by a merge (reused between chunks).
    merge_tail: Vec<T>,
}

impl<T: Timed> ChunkOrdered<T> {
    /// Parameters as for [`TimeOrdered::with_window`].
    pub fn with_window(window_ns: u64, max_held: usize) -> Self {
        ChunkOrdered {
            held: VecDeque::new(),
            ready: 0,
            window_ns,
            max_held: max_held.max(1),
            newest_ns: 0,
            last_out_ns: None,
            late: 0,
            done: false,
            merge_tail: Vec::new(),
        }
    }

    /// Events released after a newer one (they arrived too late for the window).
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Released events waiting to be taken.
    pub fn ready(&self) -> usize {
        self.ready
    }

    /// The input has ended (no chunk follows): everything held is released.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Takes in the next events in arrival order, leaving `chunk` empty.
    pub fn push_chunk(&mut self, chunk: &mut Vec<T>) {
        debug_assert!(!self.done, "push_chunk after finish");
        if chunk.is_empty() {
            return;
        }
        let mut newest = self.newest_ns;
        let mut in_window = true;
        let mut sorted = true;
        let mut prev = 0;
        for ev in chunk.iter() {
            in_window &= newest.saturating_sub(ev.ts_ns()) <= self.window_ns;
            sorted &= ev.ts_ns() >= prev;
            prev = ev.ts_ns();
            newest = newest.max(ev.ts_ns());
        }
        let unreleased = self.held.len() - self.ready;
        if !in_window || unreleased + chunk.len() > self.max_held {
            for ev in chunk.drain(..) {
                self.push_one(ev);
            }
            return;
        }
        if !sorted {
            // Stable: equal timestamps keep arrival order.
            chunk.sort_by_key(|ev| ev.ts_ns());
        }
        self.newest_ns = newest;
        self.merge(chunk);
        self.release_sorted();
    }

    /// The input has ended: everything held is released.
    pub fn finish(&mut self) {
        self.done = true;
        while self.ready < self.held.len() {
            self.release_front();
        }
    }

    /// Nothing older than `watermark_ns` can still come (the writer's clock says so): the
    /// held events older than it are released, as if an event a window past it had been
    /// seen. An event older than it that comes after all is released late.
    pub fn release_before(&mut self, watermark_ns: u64) {
        debug_assert!(!self.done, "release_before after finish");
        self.newest_ns = self
            .newest_ns
            .max(watermark_ns.saturating_add(self.window_ns));
        self.release();
    }

    /// Moves up to `max` released events to `out`, oldest first.
    pub fn take(&mut self, out: &mut Vec<T>, max: usize) {
        let n = max.min(self.ready);
        let (a, b) = self.held.as_slices();
        let from_a = n.min(a.len());
        out.extend_from_slice(&a[..from_a]);
        out.extend_from_slice(&b[..n - from_a]);
        // Plain data: dropping the drained front only moves the queue's head.
        self.held.drain(..n);
        self.ready -= n;
    }

    /// The oldest released event, if any.
    pub fn pop(&mut self) -> Option<T> {
        if self.ready == 0 {
            return None;
        }
        self.ready -= 1;
        self.held.pop_front()
    }

    /// Merges a sorted `chunk` of events that all arrived after the held ones into the
    /// unreleased part of the queue.
    fn merge(&mut self, chunk: &mut Vec<T>) {
        let split = self.insertion_point(chunk[0].ts_ns());
        if split == self.held.len() {
            // Copied as slices (events are plain data), not pushed one by one.
            self.held.extend(chunk.iter());
            chunk.clear();
            return;
        }
        let mut tail = std::mem::take(&mut self.merge_tail);
        tail.extend(self.held.drain(split..));
        let mut a = tail.drain(..).peekable();
        let mut b = chunk.drain(..).peekable();
        loop {
            let from_tail = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.ts_ns() <= y.ts_ns(),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let ev = if from_tail { a.next() } else { b.next() };
            self.held.extend(ev);
        }
        drop((a, b));
        self.merge_tail = tail;
    }

    /// One event, exactly as [`TimeOrdered`] takes it: inserted in time order, then released
    /// what the window or the count bound releases.
    fn push_one(&mut self, ev: T) {
        // What the events before it release has been released already.
        self.newest_ns = self.newest_ns.max(ev.ts_ns());
        let at = self.insertion_point(ev.ts_ns());
        self.held.insert(at, ev);
        self.release();
    }

    /// Where an event at `ts` arriving now goes: after every unreleased event not newer than
    /// it (arrival breaks ties), and never before a released one.
    fn insertion_point(&self, ts: u64) -> usize {
        // Usually the end: the stream is nearly in order.
        if self.held.back().is_none_or(|b| b.ts_ns() <= ts) {
            return self.held.len();
        }
        let (mut lo, mut hi) = (self.ready, self.held.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.held[mid].ts_ns() <= ts {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Releases held events as long as the window or the count bound says so.
    fn release(&mut self) {
        while let Some(front) = self.held.get(self.ready)
            && (self.newest_ns - front.ts_ns() > self.window_ns
                || self.held.len() - self.ready > self.max_held)
        {
            self.release_front();
        }
    }

    /// [`release`](Self::release) when the unreleased events are within `max_held`: one
    /// binary search for the window's edge instead of a test per event. None of them is late
    /// if the first is not, since they are in time order.
    fn release_sorted(&mut self) {
        let Some(edge) = self.newest_ns.checked_sub(self.window_ns) else {
            return;
        };
        // Released: newest - ts > window, i.e. ts < edge.
        let (mut lo, mut hi) = (self.ready, self.held.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.held[mid].ts_ns() < edge {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == self.ready {
            return;
        }
        let first = self.held[self.ready].ts_ns();
        if self.last_out_ns.is_some_and(|last| first < last) {
            self.release();
            return;
        }
        self.last_out_ns = Some(self.held[lo - 1].ts_ns());
        self.ready = lo;
    }

    fn release_front(&mut self) {
        let ts = self.held[self.ready].ts_ns();
        match self.last_out_ns {
            Some(last) if ts < last => self.late += 1,
            _ => self.last_out_ns = Some(ts),
        }
        self.ready += 1;
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

    /// `input` through [`ChunkOrdered`] in chunks of the given sizes (cycled), taken in
    /// batches of `take` events.
    fn run_chunked(
        input: &[(u64, u64)],
        chunks: &[usize],
        take: usize,
        window: u64,
        max_held: usize,
    ) -> (Vec<(u64, u64)>, u64) {
        let mut o = ChunkOrdered::with_window(window, max_held);
        let mut out = Vec::new();
        let mut events = input.iter().map(|&(ts, tag)| event_at(ts, tag));
        let mut chunk = Vec::new();
        for size in chunks.iter().cycle() {
            chunk.extend(events.by_ref().take(*size));
            if chunk.is_empty() {
                break;
            }
            o.push_chunk(&mut chunk);
            assert!(chunk.is_empty());
            while o.ready() > 0 {
                o.take(&mut out, take);
            }
        }
        o.finish();
        while let Some(ev) = o.pop() {
            out.push(ev);
        }
        (out.iter().map(|e| (e.ts_ns, e.aux)).collect(), o.late())
    }

    #[test]
    fn chunked_merges_stragglers_across_chunk_boundaries() {
        // The second chunk starts before the first one ends (another CPU's drain).
        let input = [
            (10, 0),
            (20, 1),
            (30, 2),
            (15, 3),
            (20, 4),
            (25, 5),
            (40, 6),
        ];
        let (out, late) = run_chunked(&input, &[3, 4], 1000, 100, 1000);
        assert_eq!(
            out,
            [
                (10, 0),
                (15, 3),
                (20, 1),
                (20, 4),
                (25, 5),
                (30, 2),
                (40, 6)
            ]
        );
        assert_eq!(late, 0);
    }

    proptest::proptest! {
        /// Chunked and one-at-a-time reordering give the same events in the same order and
        /// the same late count, whatever the window, bound, chunking and disorder: the
        /// chunked fast path must never change a result, only its cost.
        #[test]
        fn chunked_equals_one_at_a_time(
            steps in proptest::collection::vec((0u64..60, proptest::bool::weighted(0.2)), 0..400),
            back in 0u64..300,
            window in 0u64..120,
            max in 1usize..80,
            chunks in proptest::collection::vec(1usize..40, 1..5),
            take in 1usize..50,
        ) {
            // Mostly rising timestamps with occasional stragglers up to `back` behind.
            let mut t = 1000u64;
            let input: Vec<(u64, u64)> = steps
                .iter()
                .enumerate()
                .map(|(i, (step, straggle))| {
                    t += step;
                    let ts = if *straggle { t.saturating_sub(back) } else { t };
                    (ts, i as u64)
                })
                .collect();
            let expected = run(&input, window, max);
            proptest::prop_assert_eq!(run_chunked(&input, &chunks, take, window, max), expected.clone());
            // Also with the bounds that keep the fast path on.
            let expected = run(&input, 400, 10_000);
            proptest::prop_assert_eq!(run_chunked(&input, &chunks, take, 400, 10_000), expected);
        }

        /// Within the window the chunked output is the input stably sorted by time.
        #[test]
        fn chunked_is_a_stable_sort_within_the_window(
            ts in proptest::collection::vec(0u64..50, 0..300),
            chunks in proptest::collection::vec(1usize..64, 1..4),
        ) {
            let input: Vec<(u64, u64)> = ts.iter().enumerate().map(|(i, t)| (*t, i as u64)).collect();
            let mut expected = input.clone();
            expected.sort_by_key(|(t, _)| *t);
            let (out, late) = run_chunked(&input, &chunks, 7, 50, usize::MAX);
            proptest::prop_assert_eq!(out, expected);
            proptest::prop_assert_eq!(late, 0);
        }
    }

    #[test]
    fn empty_input() {
        assert_eq!(run(&[], 10, 10).0, []);
    }

    /// The writer's clock releases what the window holds back; an event older than that
    /// coming afterwards is released late, as one older than the window is.
    #[test]
    fn a_watermark_releases_the_held_events_older_than_it() {
        let mut o = ChunkOrdered::with_window(100, 1000);
        let mut chunk: Vec<Event> = [50, 10, 30, 60].iter().map(|&t| event_at(t, t)).collect();
        o.push_chunk(&mut chunk);
        assert_eq!(o.ready(), 0, "all within the window of the newest");
        o.release_before(40);
        let mut out = Vec::new();
        o.take(&mut out, 10);
        assert_eq!(out.iter().map(|e| e.ts_ns).collect::<Vec<_>>(), [10, 30]);
        assert_eq!(o.late(), 0);
        let mut chunk = vec![event_at(20, 0), event_at(70, 0)];
        o.push_chunk(&mut chunk);
        o.finish();
        out.clear();
        o.take(&mut out, 10);
        assert_eq!(
            out.iter().map(|e| e.ts_ns).collect::<Vec<_>>(),
            [20, 50, 60, 70]
        );
        assert_eq!(o.late(), 1);
    }
}
