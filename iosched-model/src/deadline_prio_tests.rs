//! mq-deadline's priority levels (5.14+), with answers known by construction: a best-effort
//! process reads 40 times, four at a time, behind a device two requests deep, and an
//! idle-class process queues 10 reads among them (each a little past one of the first ten).
//! A device two deep leaves a best-effort request in flight while none is queued, which is
//! where "queued or in flight" and "queued" part. One level (before 5.14) serves the idle
//! reads in the same ascending sweep as the others; three levels hold them until the last
//! best-effort read has completed, or, with `prio_aging_expire` shorter than the run, until
//! they have waited that long (the best-effort reads, each issued at a completion, are never
//! as old).

use iosched_core::event::{Event, EventKind, Op};

use super::{
    scenarios::{empty, flat_disk, push, stream, trace_with},
    sched::{SchedKind, Settings},
    sim::SimConfig,
    workload::{StreamKind, Trigger, Workload},
};

const BE_PID: u32 = 10;
const IDLE_PID: u32 = 20;
/// Each read's service on the flat disk.
const SVC_NS: f64 = 1_000_000.0;
const BE_READS: u64 = 40;
/// Best-effort reads kept in flight: each later one follows a completion, so the
/// best-effort level always holds fresh requests.
const BE_WINDOW: u64 = 4;
/// Where the reads are: best-effort ones every 32 sectors from here, idle ones 12 past (not
/// contiguous: a bio that merged into another's request would take that request's level).
const BASE: u64 = 1_000_000;

fn workload(kernel: &str) -> Workload {
    let mut be = stream(BE_PID, "fio", 1);
    be.kind = StreamKind::Windowed;
    be.max_in_flight = BE_WINDOW as u32;
    let mut idle = stream(IDLE_PID, "updatedb", 1);
    idle.kind = StreamKind::Windowed;
    idle.max_in_flight = 10;
    idle.ioprio = 3 << 13;
    let mut w = empty(vec![be, idle]);
    w.kernel_release = Some(kernel.into());
    for k in 0..BE_READS {
        let t = if k < BE_WINDOW {
            Trigger::At(k * 1_000)
        } else {
            Trigger::AfterCompletion {
                io: (k - BE_WINDOW) as u32,
                delay: 5_000,
            }
        };
        push(&mut w, 0, BASE + 32 * k, 8, Op::Read, true, t);
    }
    for k in 0..10u64 {
        let t = Trigger::At(50_000 + k * 1_000);
        push(&mut w, 1, BASE + 32 * k + 12, 8, Op::Read, true, t);
    }
    w
}

/// Dispatch or completion times of `pid`'s requests (told apart by sector, the request's
/// at its dispatch: the simulator's request events carry no process, as the kernel's need
/// not).
fn times(events: &[Event], pid: u32, kind: EventKind) -> Vec<u64> {
    let idle_read = |sector: u64| sector.wrapping_sub(BASE) % 32 == 12;
    let t0 = events.iter().map(|e| e.ts_ns).min().unwrap_or(0);
    let sector_of: std::collections::HashMap<u64, u64> = events
        .iter()
        .filter(|e| e.kind == EventKind::Issue)
        .map(|e| (e.rq, e.sector))
        .collect();
    let mut t: Vec<u64> = events
        .iter()
        .filter(|e| e.kind == kind)
        .filter(|e| {
            sector_of
                .get(&e.rq)
                .is_some_and(|s| idle_read(*s) == (pid == IDLE_PID))
        })
        .map(|e| e.ts_ns - t0)
        .collect();
    t.sort_unstable();
    t
}

fn run(kernel: &str, pairs: &[(&str, &str)]) -> Vec<Event> {
    let mut s = Settings::default();
    for (k, v) in pairs {
        s.0.insert((*k).into(), (*v).into());
    }
    let cfg = SimConfig {
        depth: 2,
        ..SimConfig::default()
    };
    trace_with(
        &workload(kernel),
        &flat_disk(SVC_NS, 100_000.0),
        SchedKind::MqDeadline,
        &s,
        cfg,
    )
    .unwrap()
}

#[test]
fn idle_class_reads_wait_for_every_best_effort_one_since_5_14() {
    let events = run("6.18.0", &[]);
    let be_done = times(&events, BE_PID, EventKind::Complete);
    let idle_d = times(&events, IDLE_PID, EventKind::Issue);
    assert_eq!((be_done.len(), idle_d.len()), (40, 10));
    let last_be = *be_done.last().unwrap();
    assert!(
        idle_d[0] >= last_be,
        "first idle dispatch {} before the last best-effort completion {last_be}",
        idle_d[0]
    );
}

#[test]
fn one_level_before_5_14_serves_idle_reads_in_the_sweep() {
    let events = run("5.10.0", &[]);
    let be_done = times(&events, BE_PID, EventKind::Complete);
    let idle_d = times(&events, IDLE_PID, EventKind::Issue);
    assert_eq!((be_done.len(), idle_d.len()), (40, 10));
    // Each lies a little past a best-effort read of the first ten: the ascending sweep
    // takes them with those, the first at once.
    let last_be = *be_done.last().unwrap();
    let before = idle_d.iter().filter(|t| **t < last_be).count();
    assert!(
        (idle_d[0] as f64) < 3.0 * SVC_NS && before >= 9,
        "idle dispatches {idle_d:?}, last best-effort completion {last_be}"
    );
}

#[test]
fn aged_idle_reads_go_first_after_prio_aging_expire() {
    // 10 ms of aging in a run of 40 ms of best-effort reads.
    let events = run("6.18.0", &[("prio_aging_expire", "10")]);
    let be_done = times(&events, BE_PID, EventKind::Complete);
    let idle_d = times(&events, IDLE_PID, EventKind::Issue);
    let last_be = *be_done.last().unwrap();
    let first = idle_d[0] as f64;
    // Inserted at 50 µs: aged at 10.05 ms, dispatched at the next completion.
    assert!(
        (10.0e6..10.0e6 + 2.0 * SVC_NS).contains(&first),
        "first idle dispatch at {first}"
    );
    assert!(idle_d[9] < last_be, "{idle_d:?} vs {last_be}");
}
