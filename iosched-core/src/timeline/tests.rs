//! Synthetic streams whose lives are known by construction.

use super::{sim::Sim, *};

#[derive(Default)]
struct Collect {
    bios: Vec<BioLife>,
    lost: Vec<BioLife>,
    rqs: Vec<RequestLife>,
    states: Vec<(u64, u32, u32)>,
}

impl LifeSink for Collect {
    fn bio_done(&mut self, bio: &BioLife) {
        self.bios.push(*bio);
    }
    fn bio_lost(&mut self, bio: &BioLife) {
        self.lost.push(*bio);
    }
    fn request_done(&mut self, rq: &RequestLife) {
        self.rqs.push(rq.clone());
    }
    fn device_state(&mut self, _dev: Dev, ts: u64, state: &DeviceState) {
        self.states
            .push((ts - 1_000_000_000, state.in_driver, state.pending));
    }
}

fn run(sim: &Sim) -> (Collect, Anomalies) {
    let mut tl = Timeline::new([]);
    let mut c = Collect::default();
    for ev in &sim.events {
        tl.push(ev, &mut c);
    }
    let a = tl.finish().clone();
    (c, a)
}

const T0: u64 = 1_000_000_000;

#[test]
fn plain_request_has_every_stage() {
    let mut s = Sim::default();
    s.plain(1, 42, 100, 4096, 10, 20, 30, 400);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 1);
    let b = c.bios[0];
    assert_eq!(b.submitter.unwrap().pid, 42);
    assert_eq!(b.q, Some(T0));
    assert_eq!(b.g, Some(T0 + 10));
    assert_eq!(b.i, Some(T0 + 30));
    assert_eq!(b.d, Some(T0 + 60));
    assert_eq!(b.c, T0 + 460);
    assert_eq!(c.rqs.len(), 1);
    assert_eq!(c.rqs[0].submitter.unwrap().pid, 42);
    assert_eq!(c.rqs[0].bios, 1);
    assert_eq!(c.rqs[0].q, Some(T0));
    // pending from Q to D, then one in the driver until C.
    assert_eq!(c.states.first(), Some(&(0, 0, 1)));
    assert!(c.states.contains(&(60, 1, 0)));
    assert_eq!(c.states.last(), Some(&(460, 0, 0)));
}

#[test]
fn back_and_front_merged_bios_complete_with_their_request() {
    let mut s = Sim::default();
    s.q(1, 10, 8, 4096, Op::Write)
        .wait(5)
        .g(1)
        .wait(5)
        .i(100, 1, 8, 4096)
        .wait(10)
        .q(2, 11, 16, 4096, Op::Write)
        .wait(3)
        .back_merge(2)
        .wait(10)
        .q(3, 12, 0, 4096, Op::Write)
        .wait(3)
        .front_merge(3)
        .wait(50)
        // After the front merge the chain starts with bio 3.
        .d(100, &[3, 1, 2], 0, 12288, Op::Write)
        .wait(1000)
        .c(100, 12288, 12288);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 3);
    let by_id = |sector: u64| c.bios.iter().find(|b| b.sector == sector).unwrap();
    let (b1, b2, b3) = (by_id(8), by_id(16), by_id(0));
    assert_eq!(b2.m, Some((T0 + 23, MergeKind::Back)));
    assert_eq!(b3.m, Some((T0 + 36, MergeKind::Front)));
    assert_eq!(b1.g, Some(T0 + 5));
    assert!(b2.g.is_none() && b3.g.is_none());
    for b in [b1, b2, b3] {
        assert_eq!(b.d, Some(T0 + 86));
        assert_eq!(b.c, T0 + 1086);
    }
    assert_eq!(b2.submitter.unwrap().pid, 11);
    assert_eq!(c.rqs[0].bios, 3);
    // The request belongs to the submitter of its first bio at issue, but its life starts
    // at the earliest Q among its bios (bio 1's, not the front-merged head's).
    assert_eq!(c.rqs[0].submitter.unwrap().pid, 12);
    assert_eq!(c.rqs[0].q, Some(T0));
    // All three waited; none is left pending.
    assert_eq!(c.states.iter().map(|s| s.2).max(), Some(3));
    assert_eq!(c.states.last().unwrap().2, 0);
}

#[test]
fn split_child_inherits_its_parents_queue_time_and_submitter() {
    let mut s = Sim::default();
    // A 1 MiB bio cut into 512 KiB + 512 KiB.
    s.q(1, 7, 0, 1 << 20, Op::Read)
        .wait(10)
        .split(2, 7, 0, 512 << 10, 1024)
        .wait(10)
        .g(2)
        .d(200, &[2], 0, 512 << 10, Op::Read)
        .wait(5)
        .g(1)
        .d(201, &[1], 1024, 512 << 10, Op::Read)
        .wait(100)
        .c(200, 512 << 10, 512 << 10)
        .wait(100)
        .c(201, 512 << 10, 512 << 10);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 2);
    let child = c.bios.iter().find(|b| b.split).unwrap();
    let parent = c.bios.iter().find(|b| !b.split).unwrap();
    assert_eq!(child.q, Some(T0));
    assert_eq!(child.submitter.unwrap().pid, 7);
    assert_eq!(child.bytes, 512 << 10);
    assert_eq!(parent.sector, 1024);
    assert_eq!(parent.bytes, 512 << 10);
    assert_eq!(parent.c, T0 + 225);
}

#[test]
fn requeued_request_is_issued_again_and_measured_from_its_last_issue() {
    let mut s = Sim::default();
    s.q(1, 5, 0, 4096, Op::Read)
        .g(1)
        .i(300, 1, 0, 4096)
        .wait(10)
        .d(300, &[1], 0, 4096, Op::Read)
        .wait(20)
        .requeue(300)
        .wait(1000)
        .i(300, 1, 0, 4096)
        .d(300, &[1], 0, 4096, Op::Read)
        .wait(50)
        .c(300, 4096, 4096);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.rqs[0].requeues, 1);
    assert_eq!(c.rqs[0].first_d, Some(T0 + 10));
    assert_eq!(c.rqs[0].d, Some(T0 + 1030));
    assert_eq!(c.bios[0].d, Some(T0 + 1030));
    // Between the requeue and the new issue the bio waits again and the driver is empty.
    assert!(c.states.contains(&(30, 0, 1)));
}

#[test]
fn partial_completions_finish_bios_in_chain_order() {
    let mut s = Sim::default();
    s.q(1, 5, 0, 4096, Op::Read)
        .g(1)
        .q(2, 5, 8, 4096, Op::Read)
        .back_merge(2)
        .q(3, 5, 16, 4096, Op::Read)
        .back_merge(3)
        .d(400, &[1, 2, 3], 0, 12288, Op::Read)
        .wait(100)
        // 6 KiB: bio 1 done, bio 2 half done.
        .c(400, 12288, 6144)
        .wait(100)
        .c(400, 6144, 6144);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 3);
    assert_eq!(c.bios[0].sector, 0);
    assert_eq!(c.bios[0].c, T0 + 100);
    assert!(c.bios[1..].iter().all(|b| b.c == T0 + 200));
    assert_eq!(c.rqs.len(), 1);
    assert_eq!(c.rqs[0].c, T0 + 200);
    // Still in the driver between the two completions.
    assert!(!c.states.iter().any(|s| s.0 == 100 && s.1 == 0));
    assert_eq!(c.states.last(), Some(&(200, 0, 0)));
}

#[test]
fn missing_predecessors_are_counted_not_guessed() {
    let mut s = Sim::default();
    // Completion of a request issued before the trace.
    s.c(500, 4096, 4096)
        // A request whose bio was queued before the trace: D and C seen.
        .d(501, &[9], 0, 4096, Op::Read)
        .wait(10)
        .c(501, 4096, 4096)
        // A bio queued at the end, never completed.
        .q(10, 1, 0, 4096, Op::Read);
    let (c, a) = run(&s);
    assert_eq!(a.completions_of_unknown_requests, 1);
    assert_eq!(a.bios_without_queue, 1);
    assert_eq!(a.bios_in_flight_at_end, 1);
    assert_eq!(c.bios.len(), 1);
    assert_eq!(c.bios[0].q, None);
    assert!(c.bios[0].submitter.is_none());
    assert_eq!(c.bios[0].d, Some(T0));
    // The bio without Q gives D2C but no Q2C.
    let stages: Vec<_> = crate::analysis::latency::Stage::samples_of(&c.bios[0]).collect();
    assert_eq!(stages, vec![(crate::analysis::latency::Stage::D2C, 10)]);
}

#[test]
fn direct_issue_without_insert_under_none() {
    let mut s = Sim::default();
    s.q(1, 3, 0, 4096, Op::Write)
        .wait(2)
        .g(1)
        .wait(3)
        .d(600, &[1], 0, 4096, Op::Write)
        .wait(30)
        .c(600, 4096, 4096);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    let b = c.bios[0];
    assert_eq!(b.i, None);
    let stages: Vec<_> = crate::analysis::latency::Stage::samples_of(&b)
        .map(|(s, _)| s.name())
        .collect();
    assert_eq!(stages, vec!["q2g", "d2c", "q2c", "q2d"]);
}

#[test]
fn interleaved_devices_keep_separate_states() {
    let other = Dev {
        major: 8,
        minor: 16,
    };
    let mut s = Sim::default();
    s.q(1, 1, 0, 4096, Op::Read)
        .g(1)
        .d(700, &[1], 0, 4096, Op::Read)
        .on(other)
        .q(2, 2, 0, 4096, Op::Read)
        .g(2)
        .d(701, &[2], 0, 4096, Op::Read)
        .wait(10)
        .c(701, 4096, 4096)
        .on(sim::DEV)
        .wait(10)
        .c(700, 4096, 4096);
    let mut tl = Timeline::new([]);
    let mut c = Collect::default();
    let mut in_driver_other = Vec::new();
    for ev in &s.events {
        tl.push(ev, &mut c);
        in_driver_other.push(tl.devices.get(&other).map_or(0, |d| d.in_driver));
    }
    assert_eq!(tl.finish(), &Anomalies::default());
    assert_eq!(c.bios.len(), 2);
    assert_eq!(c.bios[0].dev, other);
    assert_eq!(c.bios[1].dev, sim::DEV);
    assert_eq!(*in_driver_other.iter().max().unwrap(), 1);
    assert_eq!(tl.devices[&sim::DEV].in_driver, 0);
}

#[test]
fn request_merge_moves_bios_to_the_survivor() {
    let mut s = Sim::default();
    s.q(1, 1, 0, 4096, Op::Write)
        .g(1)
        .i(800, 1, 0, 4096)
        .q(2, 1, 8, 4096, Op::Write)
        .g(2)
        .i(801, 2, 8, 4096)
        .wait(10)
        .rq_merge(801)
        .wait(10)
        .d(800, &[1, 2], 0, 8192, Op::Write)
        .wait(10)
        .c(800, 8192, 8192);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.rqs.len(), 1);
    assert_eq!(c.bios.len(), 2);
    assert!(c.bios.iter().all(|b| b.d == Some(T0 + 20)));
}

#[test]
fn reused_request_pointer_after_lost_completion_starts_a_new_life() {
    let mut s = Sim::default();
    s.q(1, 1, 0, 4096, Op::Read)
        .d(900, &[1], 0, 4096, Op::Read)
        // Its C is lost; the pointer comes back for another request.
        .wait(100)
        .q(2, 1, 8, 4096, Op::Read)
        .d(900, &[2], 8, 4096, Op::Read)
        .wait(10)
        .c(900, 4096, 4096);
    let (c, a) = run(&s);
    assert_eq!(a.reused_before_completion, 1);
    assert_eq!(c.rqs.len(), 1);
    assert_eq!(c.rqs[0].sector, 8);
    // Bio 1 never completed: it is left in flight, not given bio 2's completion.
    assert_eq!(c.bios.len(), 1);
    assert_eq!(c.bios[0].sector, 8);
    assert_eq!(a.bios_in_flight_at_end, 1);
    // The lost life no longer counts in the driver.
    assert_eq!(c.states.last().unwrap().1, 0);
}

#[test]
fn a_reused_bio_id_hands_the_old_life_over_as_lost_with_the_reuse_as_its_bound() {
    let mut s = Sim::default();
    s.q(7, 100, 0, 4096, Op::Read)
        .d(900, &[7], 0, 4096, Op::Read)
        // Its C is lost; fio's next read reuses the bio.
        .wait(9_000)
        .q(7, 100, 8, 4096, Op::Read)
        .d(901, &[7], 8, 4096, Op::Read)
        .wait(10)
        .c(901, 4096, 4096);
    let (c, a) = run(&s);
    assert_eq!(a.reused_before_completion, 1);
    assert_eq!(c.lost.len(), 1);
    let lost = c.lost[0];
    assert_eq!(lost.sector, 0);
    assert_eq!(lost.q, Some(T0));
    assert!(lost.d.is_some());
    // Not a completion time: the instant by which it had completed.
    assert_eq!(lost.c, c.bios[0].q.unwrap());
    assert_eq!(c.bios.len(), 1);
    assert_eq!(c.bios[0].sector, 8);
}

#[test]
fn bio_based_device_goes_from_queue_to_completion() {
    let mut s = Sim::default();
    s.q(1, 4, 0, 4096, Op::Write).wait(700).bio_complete(1);
    let mut tl = Timeline::new([sim::DEV]);
    let mut c = Collect::default();
    for ev in &s.events {
        tl.push(ev, &mut c);
    }
    assert_eq!(c.bios.len(), 1);
    assert_eq!(c.bios[0].c - c.bios[0].q.unwrap(), 700);
    // Nothing pends on a device without a queue.
    assert!(c.states.iter().all(|s| s.2 == 0));
}

#[test]
fn empty_flush_completed_by_the_flush_machinery_without_issue() {
    // fsync's empty PREFLUSH bio: Q, G, I of its request; the kernel issues a separate
    // bio-less flush request, then ends the original request without ever issuing it.
    let mut s = Sim::default();
    s.q(1, 8, 0, 0, Op::Write)
        .g(1)
        .i(1000, 1, 0, 0)
        .wait(5)
        .d(2000, &[], 0, 0, Op::Flush)
        .wait(100)
        .c(2000, 0, 0)
        .wait(3)
        .c(1000, 0, 0);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 1, "the flush bio completes with its request");
    assert_eq!(c.bios[0].c, T0 + 108);
    assert_eq!(c.rqs.len(), 2);
    // Nothing is left waiting or in the driver.
    assert_eq!(c.states.last(), Some(&(108, 0, 0)));
}

#[test]
fn empty_flush_ended_without_insert_or_issue() {
    // What 6.18 does for fsync's empty PREFLUSH bio on a loop device: Q, G; a bio-less flush
    // request D/C; then C of the bio's own request, never inserted or issued.
    let mut s = Sim::default();
    s.q(1, 8, 0, 0, Op::Write)
        .g(1)
        .wait(5)
        .d(2000, &[], 0, 0, Op::Flush)
        .wait(100)
        .c(2000, 0, 0);
    s.wait(2);
    let mut ev = s.events.last().copied().unwrap();
    ev.ts_ns = s.t;
    ev.rq = 1000;
    ev.bio = 1;
    s.events.push(ev);
    let (c, a) = run(&s);
    assert_eq!(a, Anomalies::default());
    assert_eq!(c.bios.len(), 1);
    assert_eq!(c.bios[0].c, T0 + 107);
    assert_eq!(c.bios[0].d, None);
    assert_eq!(c.rqs.len(), 2);
    assert_eq!(c.states.last(), Some(&(107, 0, 0)));
}
