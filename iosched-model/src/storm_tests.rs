//! Preemption storms named from the recording itself, on traces whose storm is known by
//! construction: two sequential readers that a scheduler without idling (`none`) serves in
//! turns, one request each, recorded as if under BFQ with slice_idle 8 ms (the storm's
//! shape, without a storm in the BFQ model's replay), with or without BFQ's log.

use crate::{
    explain::{self, Cause, Claim, Evidence, Fix, preemption_storm::Evidence as StormEvidence},
    workload,
};
use iosched_core::{
    event::{Note, Op},
    source::MemorySource,
};

use super::{
    replay::{self, Replayer},
    scenarios::{self, THINK_NS, empty, push, seek_disk, stream},
    sched::{ExpireReason, SchedKind, Settings},
    storm,
    workload::{Trigger, Workload},
};

const BE5: u16 = (2 << 13) | 5;
/// Reader A's requests; reader B's.
const A_IOS: u32 = 3000;
const B_IOS: u32 = 100;
/// A's request before which B starts.
const B_AFTER: u32 = 1500;

/// Reader A (pid 10) reads alone; after its request [`B_AFTER`] completes, reader B (pid 11,
/// far away on the disk) starts, `b_delay` later; A's next request comes `a_pause` after
/// that completion. Both at best-effort 5 (never weight-raised).
fn readers(a_pause: u64, b_delay: u64) -> Workload {
    let mut w = empty(vec![stream(10, "fio", 1), stream(11, "fio", 1)]);
    w.device.rotational = Some(true);
    for s in &mut w.streams {
        s.ioprio = BE5;
    }
    let mut prev = None;
    let mut a_at_b = 0;
    for k in 0..A_IOS {
        let t = match prev {
            None => Trigger::At(0),
            Some(io) => Trigger::AfterCompletion {
                io,
                delay: if k == B_AFTER { a_pause } else { THINK_NS },
            },
        };
        let i = push(&mut w, 0, u64::from(k) * 8, 8, Op::Read, true, t);
        if k + 1 == B_AFTER {
            a_at_b = i;
        }
        prev = Some(i);
    }
    let mut prev: Option<u32> = None;
    for k in 0..B_IOS {
        let t = match prev {
            None => Trigger::AfterCompletion {
                io: a_at_b,
                delay: b_delay,
            },
            Some(io) => Trigger::AfterCompletion {
                io,
                delay: THINK_NS,
            },
        };
        prev = Some(push(
            &mut w,
            1,
            100_000_000 + u64::from(k) * 8,
            8,
            Op::Read,
            true,
            t,
        ));
    }
    w
}

/// BFQ's log made for the extracted workload.
type LogOf = dyn Fn(&Workload) -> Vec<Note>;

/// `w` traced under `none` on a seek disk, recorded as BFQ with slice_idle 8 ms, its
/// processes at best-effort 5 (and BFQ's log `notes(workload)` when given), then explained.
fn recorded_as_bfq_and_explained(
    w: &Workload,
    notes: Option<&LogOf>,
) -> (Replayer, explain::Explanation) {
    let dev = seek_disk(100_000.0, 4_000.0);
    let events = super::scenarios::trace(w, &dev, SchedKind::None, &Settings::default()).unwrap();
    let mut info = w.device.clone();
    info.scheduler = Some("bfq".into());
    info.iosched = [("slice_idle", "8"), ("slice_idle_us", "8000")]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    let mut src = MemorySource::new(vec![info.clone()], events.clone());
    let mut extracted = workload::extract(&mut src, None).unwrap();
    // The simulator's events carry no I/O priority: the recording's is best-effort 5.
    for s in &mut extracted.streams {
        s.ioprio = BE5;
    }
    let mut r = Replayer::new(extracted, None, vec![0, 1]).unwrap();
    if let Some(notes) = notes {
        r.notes = notes(&r.workload);
    }
    let mut src = MemorySource::new(vec![info], events);
    let (recorded, report) = replay::recorded_summary(&mut src, &r.workload).unwrap();
    let e = explain::explain(&r, &recorded, &report).unwrap();
    (r, e)
}

fn storm_finding(e: &explain::Explanation) -> Option<&explain::Finding> {
    e.findings
        .iter()
        .find(|f| f.cause == Cause::PreemptionStorm)
}

/// A storm finding's own evidence.
fn storm_evidence(f: &explain::Finding) -> Vec<&StormEvidence> {
    f.evidence
        .iter()
        .filter_map(|e| match e {
            Evidence::PreemptionStorm(e) => Some(e),
            _ => None,
        })
        .collect()
}

/// Evidence from BFQ's log.
fn from_the_log(e: &StormEvidence) -> bool {
    matches!(
        e,
        StormEvidence::LogPreemptions { .. }
            | StormEvidence::LogStartedBy { .. }
            | StormEvidence::LogBeganWithIt { .. }
    )
}

/// Evidence inferred from the trace.
fn inferred(e: &StormEvidence) -> bool {
    matches!(
        e,
        StormEvidence::Inferred { .. }
            | StormEvidence::Pause { inferred: true, .. }
            | StormEvidence::NoLongPause { inferred: true, .. }
    )
}

/// BFQ's log for the trace's turns: the first reader's queue expired `first` when the other
/// one arrived, then at every switch of the trace's completion order the queue served last
/// expired `each` (reason codes of `enum bfqq_expiration`).
fn log_of_turns(w: &Workload, first: u32, each: u32) -> Vec<Note> {
    let mut order: Vec<usize> = (0..w.ios.len()).collect();
    order.sort_by_key(|&i| w.ios[i].rec_c);
    let pid = |s: u32| w.streams[s as usize].pid;
    let note = |ts_ns: u64, s: u32, reason: u32| {
        scenarios::sched_note(
            ts_ns,
            format!(
                "bfq{}S expire ({reason}, slow 0, num_disp 1, short_ttime 1)",
                pid(s)
            ),
        )
    };
    let mut notes = Vec::new();
    let mut last: Option<usize> = None;
    for i in order {
        let io = &w.ios[i];
        if let Some(p) = last
            && w.ios[p].stream != io.stream
        {
            let reason = if notes.is_empty() { first } else { each };
            // The switch happened when the new slice's request arrived.
            notes.push(note(io.rec_q.max(w.ios[p].rec_q), w.ios[p].stream, reason));
        }
        last = Some(i);
    }
    notes
}

/// The storm's shape in the trace, no BFQ log, and a replay that stays out of it (B arrives
/// while A streams: BFQ makes it wait for A's budget, no queue expired waiting): `explain`
/// names it from the trace, says it is inferred, that no pause started it, and estimates
/// the workload out of it by the replay's own throughput, with the recording's rate outside
/// the storm as the range's other end.
#[test]
fn a_storm_the_replay_stays_out_of_is_inferred_from_the_trace() {
    let (_, e) = recorded_as_bfq_and_explained(&readers(THINK_NS, 0), None);
    // The premise: the model's replay streams (no storm), the recording does not.
    assert!(
        e.model_check.replayed.mb_per_s > 2.0 * e.model_check.recorded.mb_per_s,
        "{:?}",
        e.model_check
    );
    let f = storm_finding(&e).unwrap_or_else(|| panic!("{:#?}", e.findings));
    let evidence = storm_evidence(f);
    // Its B requests and the A requests between them, each a slice of its own.
    assert!(
        matches!(
            f.evidence[0],
            Evidence::PreemptionStorm(StormEvidence::Inferred { requests, .. })
                if requests == u64::from(2 * B_IOS - 1)
        ),
        "{:?}",
        f.evidence
    );
    assert!(
        evidence
            .iter()
            .any(|e| matches!(e, StormEvidence::NoLongPause { .. })),
        "{:?}",
        f.evidence
    );
    assert!(evidence.iter().all(|e| !from_the_log(e)));
    let est = f.estimate.as_ref().unwrap();
    assert_eq!(est.what_if, Fix::OutOfTheStorm);
    assert!(
        (est.predicted_mb_s - e.model_check.replayed.mb_per_s).abs() < 1e-9,
        "{est:?}"
    );
    // Outside the storm A streams alone: far faster than in it, and than the whole run.
    let other = est.range_end.as_ref().unwrap();
    assert!(
        other.predicted_mb_s > 2.0 * e.model_check.recorded.mb_per_s,
        "{other:?}"
    );
}

/// The same turns, started by A pausing 9 ms (longer than slice_idle) with B arriving 1 ms
/// into the pause: the model's BFQ idles on A, expires it too idle, serves B, and A's request
/// takes the disk back: the replay storms too. `explain` says which pause started it, as
/// inferred, and the what-if is slice_idle doubled (the pause fits in it).
#[test]
fn the_pause_that_started_an_inferred_storm_is_named() {
    let (r, e) = recorded_as_bfq_and_explained(&readers(9_000_000, 1_000_000), None);
    let f = storm_finding(&e).unwrap_or_else(|| panic!("{:#?}", e.findings));
    let evidence = storm_evidence(f);
    assert!(
        matches!(
            f.evidence[0],
            Evidence::PreemptionStorm(StormEvidence::Inferred { .. })
        ),
        "{:?}",
        f.evidence
    );
    // The pause, longer than slice_idle: 9.0x ms of fio(10)'s, inferred.
    let pause = evidence
        .iter()
        .find(|e| {
            matches!(
                e,
                StormEvidence::Pause { .. } | StormEvidence::NoLongPause { .. }
            )
        })
        .unwrap_or_else(|| panic!("{:?}", f.evidence));
    assert!(
        matches!(
            pause,
            StormEvidence::Pause { inferred: true, stream, pause_ns, .. }
                if r.workload.stream_name(*stream) == "fio(10)"
                    && (9_000_000..9_100_000).contains(pause_ns)
        ),
        "{pause:?}"
    );
    assert!(
        evidence
            .iter()
            .any(|e| matches!(e, StormEvidence::ModelAsRecorded { enters: true, .. })),
        "{:?}",
        f.evidence
    );
    let est = f.estimate.as_ref().unwrap();
    assert_eq!(est.what_if, Fix::Config("bfq:slice_idle=16".into()));
    assert!(est.change_pct > 100.0, "{est:?}");
    let s = storm::inferred(&r.workload, 8_000_000).unwrap();
    assert_eq!(s.pause.map(|p| p.stream), Some(0));
}

/// With BFQ's log in the recording, its word names the storm: a too-idle expiry of A's
/// queue, then a preemption at every switch. The evidence cites BFQ's lines, not the
/// trace's inference. A log that says the same turns were budget expirations is believed
/// too: no storm, whatever the trace's shape; so is one that shows the queues raised.
#[test]
fn bfqs_log_names_the_storm_when_the_recording_has_it() {
    let w = readers(THINK_NS, 0);
    let log = |w: &Workload| log_of_turns(w, 0, 4);
    let (r, e) = recorded_as_bfq_and_explained(&w, Some(&log));
    let f = storm_finding(&e).unwrap_or_else(|| panic!("{:#?}", e.findings));
    let n = log_of_turns(&r.workload, 0, 4).len() as u64;
    assert!(n >= 2 * u64::from(B_IOS) - 1, "{n}");
    assert_eq!(
        f.evidence[0],
        Evidence::PreemptionStorm(StormEvidence::LogPreemptions {
            preempted: n - 1,
            expirations: n,
            in_a_row: n - 1,
        })
    );
    assert!(
        matches!(
            &f.evidence[1],
            Evidence::PreemptionStorm(StormEvidence::LogStartedBy {
                pid: 10,
                reason: ExpireReason::TooIdle,
                line,
                first_line,
                ..
            }) if line.starts_with("bfq10S expire (0, slow 0")
                && first_line.starts_with("bfq11S expire (4,")
        ),
        "{:?}",
        f.evidence
    );
    assert!(
        matches!(
            &f.claim,
            Claim::PreemptionStorm(explain::preemption_storm::Claim {
                seen: explain::preemption_storm::Seen::Log { .. },
                ..
            })
        ),
        "{:?}",
        f.claim
    );
    assert!(storm_evidence(f).iter().all(|e| !inferred(e)));

    let budget = |w: &Workload| log_of_turns(w, 0, 2);
    let (_, e) = recorded_as_bfq_and_explained(&w, Some(&budget));
    assert!(storm_finding(&e).is_none(), "{:#?}", e.findings);

    let raised = |w: &Workload| {
        let mut notes = log_of_turns(w, 0, 4);
        let mut raise = notes[0].clone();
        raise.text = "bfq11S raising period dur 40/300 msec, old coeff 3000, w 90000(30)".into();
        notes.push(raise);
        notes
    };
    let (_, e) = recorded_as_bfq_and_explained(&w, Some(&raised));
    assert!(storm_finding(&e).is_none(), "{:#?}", e.findings);
}

/// The readers one after the other (B after A's last request): long slices, no storm from
/// either path.
#[test]
fn readers_in_long_slices_are_no_storm() {
    let mut w = readers(THINK_NS, 0);
    let last_a = w
        .ios
        .iter()
        .rposition(|io| io.stream == 0)
        .unwrap_or_default() as u32;
    let first_b = w.ios.iter().position(|io| io.stream == 1).unwrap();
    w.ios[first_b].trigger = Trigger::AfterCompletion {
        io: last_a,
        delay: THINK_NS,
    };
    let (r, e) = recorded_as_bfq_and_explained(&w, None);
    assert!(storm_finding(&e).is_none(), "{:#?}", e.findings);
    assert!(storm::inferred(&r.workload, 8_000_000).is_none());
}
