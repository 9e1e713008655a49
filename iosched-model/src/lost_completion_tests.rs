//! A completion the trace lost, with answers known by construction.
//!
//! Two sequential readers (fio `--iodepth=1`, libaio: each reuses its one bio) on a disk
//! with a 5 ms seek. Reader A's 101st read completes, but its C never reaches the
//! recording (as happens here to events from interrupt context), and A's next Q comes
//! 9 ms after that read's D. The recording under BFQ showed that such a gap is not the
//! process thinking: BFQ kept A in service and dispatched nothing else for 9 ms, where its
//! 8 ms idle timer would have expired. Replayed, the lost read must be there and A's next
//! read must follow it at once; read as a 9 ms think time instead, the gap expires A for
//! being too idle and the two readers then preempt each other at every request (each
//! comes back in time with budget left), a seek per 4 KiB for the rest of the run.

use crate::workload;
use iosched_core::{
    event::{EventKind, Op},
    source::MemorySource,
};

use super::{
    device::DeviceModel,
    replay::{Config, Replayer},
    scenarios::{self, empty, push, seek_disk, stream},
    sched::{SchedKind, Settings},
    workload::{Trigger, Workload},
};

const READS: u32 = 600;
/// The read whose completion is lost (A's, in A's first slice).
const LOST: u32 = 100;
const THINK_NS: u64 = 30_000;
const GAP_NS: u64 = 9_000_000;

fn disk() -> DeviceModel {
    seek_disk(100_000.0, 4_000.0)
}

/// A's reads are `0..READS`, B's `READS..2 * READS`; A's read after `LOST` waits `gap`.
fn two_readers(gap: u64) -> Workload {
    let mut w = empty(vec![stream(100, "fio", 1), stream(200, "fio", 1)]);
    for (s, base) in [(0u32, 0u64), (1, 1 << 30)] {
        let mut prev: Option<u32> = None;
        for k in 0..READS {
            let trigger = match prev {
                None => Trigger::At(u64::from(s) * 1_000),
                Some(io) => Trigger::AfterCompletion {
                    io,
                    delay: if s == 0 && k == LOST + 1 {
                        gap
                    } else {
                        THINK_NS
                    },
                },
            };
            let sector = base + u64::from(k) * 8;
            prev = Some(push(&mut w, s, sector, 8, Op::Read, true, trigger));
        }
    }
    w
}

/// The events of `w` under BFQ without low_latency (each reader served back to back in its
/// slices, as in the recording), as recorded with A's one bio reused and the C of A's read
/// `LOST` lost.
fn recorded_with_a_lost_completion(w: &Workload) -> Vec<iosched_core::event::Event> {
    let ll0 = Settings::parse_pairs(&["low_latency=0".to_string()]).unwrap();
    let mut events = scenarios::trace(w, &disk(), SchedKind::Bfq, &ll0).unwrap();
    let lost_sector = w.ios[LOST as usize].sector;
    let lost_rq = events
        .iter()
        .find(|e| e.kind == EventKind::Issue && e.sector == lost_sector)
        .map(|e| e.rq)
        .unwrap();
    let a_bios: std::collections::HashSet<u64> = events
        .iter()
        .filter(|e| e.kind == EventKind::Queue && e.pid == 100)
        .map(|e| e.bio)
        .collect();
    let a_bio = *a_bios.iter().min().unwrap();
    events.retain(|e| !(e.kind == EventKind::Complete && e.rq == lost_rq));
    for e in &mut events {
        if a_bios.contains(&e.bio) {
            e.bio = a_bio;
        }
    }
    // Nothing else in the recording tells that the read completed.
    assert!(
        !events
            .iter()
            .any(|e| e.kind == EventKind::Complete && e.rq == lost_rq)
    );
    events
}

fn extract(events: Vec<iosched_core::event::Event>, w: &Workload) -> Workload {
    let mut src = MemorySource::new(vec![w.device.clone()], events);
    workload::extract(&mut src, None).unwrap()
}

#[test]
fn a_read_whose_completion_was_lost_is_replayed_and_followed_at_once() {
    let w = two_readers(GAP_NS);
    let extracted = extract(recorded_with_a_lost_completion(&w), &w);
    assert_eq!(extracted.ios.len(), 2 * READS as usize);
    let a: Vec<usize> = (0..extracted.ios.len())
        .filter(|i| extracted.streams[extracted.ios[*i].stream as usize].pid == 100)
        .collect();
    assert_eq!(a.len(), READS as usize);
    let lost = a[LOST as usize];
    assert_eq!(extracted.ios[lost].sector, w.ios[LOST as usize].sector);
    // The next read waits for the lost one's completion, placed at the latest instant the
    // trace allows: its own Q.
    match extracted.ios[a[LOST as usize + 1]].trigger {
        Trigger::AfterCompletion { io, delay } => {
            assert_eq!(io as usize, lost);
            assert_eq!(delay, 0);
        }
        t => panic!("{t:?}"),
    }
}

#[test]
fn a_lost_completion_is_not_a_think_time_bfq_expires_a_queue_for() {
    let w = two_readers(GAP_NS);
    let extracted = extract(recorded_with_a_lost_completion(&w), &w);
    let run = |w: Workload| {
        let r = Replayer::new(w, Some(disk()), vec![0, 1]).unwrap();
        r.run(&Config::parse("bfq:low_latency=0,continue=0", &Settings::default()).unwrap())
            .unwrap()
    };
    let lost = run(extracted);
    let counts = &lost.decision_counts.expirations;
    // No preemption, and no idle timer running out but (perhaps) after a reader's last
    // read.
    assert_eq!(counts.get("preempted"), None, "{counts:?}");
    assert!(counts.get("too_idle").is_none_or(|n| *n <= 2), "{counts:?}");
    // The same as readers that never paused: BFQ serves each in long slices.
    let steady = run(extract(
        recorded_with_a_lost_completion(&two_readers(THINK_NS)),
        &two_readers(THINK_NS),
    ));
    let (got, want) = (lost.summary.mb_per_s, steady.summary.mb_per_s);
    assert!((got - want).abs() / want < 0.02, "{got} vs {want} MB/s");
}
