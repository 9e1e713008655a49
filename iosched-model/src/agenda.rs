//! The simulator's pending events: handed out earliest first, and in push order at equal
//! times, whatever part of the agenda holds them.
//!
//! One binary heap of every pending event was an eighth of a BFQ replay: BFQ arms its idle
//! timer (slice_idle ahead) at nearly every completion and disarms it at the next arrival,
//! and each disarmed timer stays pending until its time passes (the simulator skips it
//! then), so the heap held a hundred stale timers for every ten live events. Events whose
//! times come in the order they are pushed need no heap: a timer armed a fixed delay ahead
//! of a clock that never goes back, the completions of one server. They go to *lanes*,
//! queues kept sorted by (time, push order) that take an in-order push at their back and
//! give their earliest at the front; the rest go to a small heap. The earliest event is
//! the earliest of the heap's top and the lanes' fronts.
//!
//! A lane is only a hint of order: a push out of order is inserted where it belongs (a
//! search from the back), so what the agenda hands out never depends on the lanes chosen.
//!
//! Owns: event order. Must not: know what the events mean.

use std::{collections::BinaryHeap, collections::VecDeque};

/// An event due at `t`, the `seq`th pushed (`seq` is unique, so the event itself never
/// decides the order).
#[derive(Clone, Copy, Debug)]
struct Due<E> {
    t: u64,
    seq: u64,
    ev: E,
}

impl<E> Due<E> {
    /// `(t, seq)` as one number: one wide comparison instead of two.
    fn key(&self) -> u128 {
        (u128::from(self.t) << 64) | u128::from(self.seq)
    }
}

impl<E> PartialEq for Due<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<E> Eq for Due<E> {}

impl<E> Ord for Due<E> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Reversed: `BinaryHeap` is a max-heap.
        other.key().cmp(&self.key())
    }
}

impl<E> PartialOrd for Due<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Where the earliest pending event is.
#[derive(Clone, Copy)]
enum Source {
    Heap,
    Lane(usize),
}

pub(crate) struct Agenda<E> {
    seq: u64,
    heap: BinaryHeap<Due<E>>,
    lanes: Vec<VecDeque<Due<E>>>,
    len: usize,
}

impl<E: Copy> Agenda<E> {
    pub(crate) fn new() -> Self {
        Agenda {
            seq: 0,
            heap: BinaryHeap::with_capacity(64),
            lanes: Vec::new(),
            len: 0,
        }
    }

    /// `ev` is due at `t`; `lane`: the lane (numbered from 0; made when first named) whose
    /// earlier pushes it most likely comes after in time, or `None` for the heap.
    pub(crate) fn push(&mut self, t: u64, ev: E, lane: Option<usize>) {
        self.seq += 1;
        self.len += 1;
        let due = Due {
            t,
            seq: self.seq,
            ev,
        };
        match lane {
            None => self.heap.push(due),
            Some(l) => {
                if self.lanes.len() <= l {
                    self.lanes
                        .resize_with(l + 1, || VecDeque::with_capacity(64));
                }
                let lane = &mut self.lanes[l];
                // `seq` grows, so only the time can put a push before the back.
                if lane.back().is_none_or(|b| b.t <= t) {
                    lane.push_back(due);
                } else {
                    let at = lane.partition_point(|d| d.key() < due.key());
                    lane.insert(at, due);
                }
            }
        }
    }

    fn earliest(&self) -> Option<(u128, Source)> {
        let mut best = self.heap.peek().map(|d| (d.key(), Source::Heap));
        for (l, lane) in self.lanes.iter().enumerate() {
            if let Some(d) = lane.front()
                && best.is_none_or(|(k, _)| d.key() < k)
            {
                best = Some((d.key(), Source::Lane(l)));
            }
        }
        best
    }

    /// The earliest pending event and when it is due, if it is due before `bound` (when
    /// something kept elsewhere is due; at equal times that comes first).
    pub(crate) fn pop_before(&mut self, bound: Option<u64>) -> Option<(u64, E)> {
        let (key, source) = self.earliest()?;
        if bound.is_some_and(|b| b <= (key >> 64) as u64) {
            return None;
        }
        let due = match source {
            Source::Heap => self.heap.pop(),
            Source::Lane(l) => self.lanes[l].pop_front(),
        }?;
        self.len -= 1;
        Some((due.t, due.ev))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order every event is handed out in, given pushes `(t, lane)` interleaved with
    /// pops (`None`).
    fn order(ops: &[Option<(u64, Option<usize>)>]) -> Vec<(u64, usize)> {
        let mut a = Agenda::new();
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Some((t, lane)) => a.push(*t, i, *lane),
                None => out.extend(a.pop_before(None)),
            }
        }
        while let Some(e) = a.pop_before(None) {
            out.push(e);
        }
        assert!(a.is_empty());
        out
    }

    /// The oracle: every event sorted by (time, push order), popped where asked.
    fn sorted(ops: &[Option<(u64, Option<usize>)>]) -> Vec<(u64, usize)> {
        let mut pending: Vec<(u64, usize)> = Vec::new();
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Some((t, _)) => pending.push((*t, i)),
                None => {
                    if let Some(m) = pending.iter().copied().min() {
                        pending.retain(|p| *p != m);
                        out.push(m);
                    }
                }
            }
        }
        pending.sort();
        out.extend(pending);
        out
    }

    #[test]
    fn events_come_out_by_time_then_push_order_whatever_their_lane() {
        let ops = [
            Some((50, Some(0))),
            Some((10, None)),
            Some((50, None)),
            Some((30, Some(0))), // out of order in its lane
            Some((50, Some(1))),
            None,
            Some((20, Some(1))), // out of order in its lane
            Some((50, Some(2))),
            Some((40, Some(2))),
            None,
            None,
            Some((30, None)),
            Some((30, Some(0))),
        ];
        let got = order(&ops);
        assert_eq!(got, sorted(&ops));
        // Equal times: push order, across the heap and the lanes.
        let fifties: Vec<usize> = got.iter().filter(|e| e.0 == 50).map(|e| e.1).collect();
        assert_eq!(fifties, vec![0, 2, 4, 7]);
    }

    #[test]
    fn an_event_due_with_the_bound_waits() {
        let mut a = Agenda::new();
        a.push(20, 'a', Some(0));
        a.push(10, 'b', None);
        assert_eq!(
            a.pop_before(Some(10)),
            None,
            "the bound comes first at equal times"
        );
        assert_eq!(a.pop_before(Some(11)), Some((10, 'b')));
        assert_eq!(a.pop_before(Some(15)), None);
        assert_eq!(a.pop_before(None), Some((20, 'a')));
        assert!(a.is_empty());
        assert_eq!(a.pop_before(None), None);
    }

    #[test]
    fn random_pushes_and_pops_match_a_sort() {
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..50 {
            let ops: Vec<_> = (0..300)
                .map(|_| {
                    let r = next();
                    (r % 4 != 0).then(|| {
                        let lane = match (r >> 8) % 4 {
                            3 => None,
                            l => Some(l as usize),
                        };
                        ((r >> 16) % 40, lane)
                    })
                })
                .collect();
            assert_eq!(order(&ops), sorted(&ops));
        }
    }
}
