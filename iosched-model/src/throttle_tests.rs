//! Throttling found in synthetic traces whose answer is known by construction: the
//! simulator's own wbt gate and Kyber's token pools decide who waits, the analysis reads it
//! back from the events alone.

use crate::{
    explain::{self, Cause, Claim, Evidence, Verdict, kyber, throttling, wbt},
    workload,
};
use iosched_core::{
    event::{Event, EventKind, Op},
    source::MemorySource,
};

use super::{
    device::{DeviceModel, FlashModel},
    replay::{self, Replayer},
    scenarios::{device, empty, flat_disk, push, stream},
    sched::{self, Decision, SchedEnv, SchedKind, Settings},
    sim::{self, SimConfig},
    throttle::SLEPT_NS,
    workload::{StreamKind, Trigger, Workload},
};

/// A flash device serving 8 requests at once, 1 ms each whatever their size.
fn flash() -> DeviceModel {
    DeviceModel::Flash(FlashModel {
        latency_ns: 1e6,
        ns_per_sector: 0.0,
        parallelism: 8,
        write_latency_ns: None,
        write_ns_per_sector: None,
    })
}

/// A writeback flood (`writes` buffered writes, 1 µs apart, none contiguous) and a
/// sequential reader of `reads` reads.
fn flood(sched: &str, writes: u32, reads: u64) -> Workload {
    let mut w = empty(vec![
        stream(300, "reader", 1),
        stream(400, "kworker/u8:1", 1),
    ]);
    w.device = device("loop0", sched, false);
    let mut prev = None;
    for k in 0..reads {
        let t = prev.map_or(Trigger::At(0), |io| Trigger::AfterCompletion {
            io,
            delay: 20_000,
        });
        prev = Some(push(&mut w, 0, k * 8, 8, Op::Read, true, t));
    }
    w.streams[1].kind = StreamKind::OpenLoop;
    for k in 0..writes {
        push(
            &mut w,
            1,
            10_000_000 + u64::from(k) * 1000,
            8,
            Op::Write,
            false,
            Trigger::At(u64::from(k) * 1000),
        );
    }
    w
}

fn env(w: &Workload, dev: &DeviceModel) -> SchedEnv {
    SchedEnv {
        rotational: dev.rotational(),
        kernel: replay::kernel_of(w),
        peak_sectors_per_sec: dev.peak_sectors_per_sec(),
        root_cgroups: vec![0, 1],
        stream_ioprio: w.streams.iter().map(|s| s.ioprio).collect(),
        max_budget_start: None,
    }
}

fn simulate(
    w: &Workload,
    dev: &DeviceModel,
    kind: SchedKind,
    settings: &Settings,
    cfg: SimConfig,
) -> sim::SimResult {
    let s = sched::build(kind, settings, &env(w, dev)).unwrap();
    sim::run(w, dev, s, cfg)
}

/// Extracts a recording of `events` on `info`, and explains it with `dev` as the device.
fn explain_recording(
    info: &iosched_core::record::DeviceInfo,
    events: Vec<Event>,
    dev: DeviceModel,
) -> (Workload, explain::Explanation) {
    let mut src = MemorySource::new(vec![info.clone()], events.clone());
    let extracted = workload::extract(&mut src, None).unwrap();
    let r = Replayer::new(extracted.clone(), Some(dev), vec![0, 1]).unwrap();
    let mut src = MemorySource::new(vec![info.clone()], events);
    let (recorded, report) = replay::recorded_summary(&mut src, &r.workload).unwrap();
    let e = explain::explain(&r, &recorded, &report).unwrap();
    (extracted, e)
}

/// Q->G of each bio in a trace, by the bio's id, read straight from the events.
fn q_to_g(events: &[Event]) -> Vec<u64> {
    let mut q = std::collections::HashMap::new();
    let mut out = Vec::new();
    for ev in events {
        match ev.kind {
            EventKind::Queue => {
                q.insert(ev.bio, ev.ts_ns);
            }
            EventKind::GetRq => {
                if let Some(tq) = q.get(&ev.bio) {
                    out.push(ev.ts_ns - tq);
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn wbt_waits_are_counted_as_the_gate_made_them() {
    let w = flood("mq-deadline", 200, 40);
    let dev = flash();
    let cfg = SimConfig {
        wbt_limit: Some(2),
        ..SimConfig::default()
    };
    let run = simulate(&w, &dev, SchedKind::MqDeadline, &Settings::default(), cfg);
    // By construction: the bios the gate held longer than a request allocation takes.
    let held: Vec<u64> = run
        .wbt_waits
        .iter()
        .copied()
        .filter(|t| *t > SLEPT_NS)
        .collect();
    assert!(held.len() > 50, "{} waits", held.len());
    // Every held bio waits for a completion of the 1 ms device.
    assert!(held.iter().all(|t| *t <= 1_000_000));
    // mq-deadline's requests: twice the 32 driver tags.
    let mut info = w.device.clone();
    info.nr_requests = Some(64);
    let (extracted, e) = explain_recording(&info, run.events.clone(), dev);
    let wbt = &extracted.throttle.wbt;
    assert_eq!(wbt.waits.count, held.len() as u64);
    assert_eq!(wbt.waits.total_ns, held.iter().sum::<u64>());
    assert_eq!(wbt.waits.max_ns, *held.iter().max().unwrap());
    assert_eq!(wbt.tag_bound, 0);
    assert_eq!(wbt.limit_seen, 2);
    // Only the writer waited; the reader's reads are not tracked.
    assert_eq!(wbt.waits.processes.len(), 1);
    assert_eq!(wbt.waits.processes[0].pid, 400);
    assert_eq!(wbt.waits.processes[0].count, held.len() as u64);
    // The trace's own Q->G agrees: every long one is the gate's.
    let long = q_to_g(&run.events)
        .into_iter()
        .filter(|t| *t > SLEPT_NS)
        .count();
    assert_eq!(long, held.len());

    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::WbtThrottling)
        .unwrap_or_else(|| panic!("{e:#?}"));
    assert!(
        matches!(
            &f.claim,
            Claim::Wbt(wbt::Claim {
                held: n,
                most_waited: Some((comm, 400)),
                ..
            }) if *n == held.len() as u64 && comm == "kworker/u8:1"
        ),
        "{:?}",
        f.claim
    );
    // The tunable: wbt_lat_usec.
    assert!(
        f.evidence
            .iter()
            .any(|e| matches!(e, Evidence::Wbt(wbt::Evidence::Tunable { .. }))),
        "{:?}",
        f.evidence
    );
    // Two in flight instead of eight: without wbt the writer is done in a quarter of the
    // time, and the run lasts as long as the reader, which the flood now slows (reads
    // behind up to 64 writes instead of 2): the waiting writer gains 40-150%.
    let est = f.estimate.as_ref().unwrap();
    assert!(
        (40.0..150.0).contains(&est.change_pct),
        "{est:?} {:#?}",
        e.findings
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| matches!(e, Evidence::Throttling(throttling::Evidence::Others { .. }))),
        "{:?}",
        f.evidence
    );
    assert_eq!(e.throttling.wbt.waits.count, held.len() as u64);
    // As `explain --json` carries it.
    let json = serde_json::to_value(&e.throttling).unwrap();
    assert_eq!(json["wbt"]["waits"]["count"], serde_json::json!(held.len()));
}

/// On a device with a volatile write cache wbt wakes its sleepers only when every tracked
/// write has completed: the trace shows waits ending at an empty count, and the replay
/// follows that rule.
#[test]
fn wbt_waits_that_end_at_drain_are_replayed_with_the_drain_rule() {
    let w = flood("mq-deadline", 200, 40);
    let dev = flash();
    let cfg = SimConfig {
        wbt_limit: Some(4),
        wbt_drain: true,
        ..SimConfig::default()
    };
    let run = simulate(&w, &dev, SchedKind::MqDeadline, &Settings::default(), cfg);
    let held = run.wbt_waits.iter().filter(|t| **t > SLEPT_NS).count() as u64;
    assert!(held > 20, "{held}");
    let mut info = w.device.clone();
    info.nr_requests = Some(64);
    let (extracted, e) = explain_recording(&info, run.events, dev);
    let wbt = &extracted.throttle.wbt;
    assert_eq!(wbt.waits.count, held);
    // Every sleeper is woken by the completion that empties the count.
    assert_eq!(wbt.woken_when_drained, held, "{wbt:?}");
    assert_eq!(wbt.limit_seen, 4);
    // Four writes at a time leave the reader room: without wbt the flood slows the reader,
    // and the run, more than the writer gains. The throttle pays, and explain says so.
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::WbtThrottlingPays)
        .unwrap_or_else(|| panic!("{e:#?}"));
    assert!(
        matches!(
            f.claim,
            Claim::Wbt(wbt::Claim {
                pays_less_pct: Some(_),
                ..
            })
        ),
        "{:?}",
        f.claim
    );
    assert!(
        !matches!(e.verdict, Verdict::Findings(_)),
        "{:?}",
        e.verdict
    );
}

#[test]
fn a_trace_without_throttling_has_no_throttle_finding() {
    let w = flood("mq-deadline", 200, 40);
    let dev = flash();
    let run = simulate(
        &w,
        &dev,
        SchedKind::MqDeadline,
        &Settings::default(),
        SimConfig::default(),
    );
    assert!(run.wbt_waits.is_empty());
    let (extracted, e) = explain_recording(&w.device, run.events, dev);
    assert_eq!(extracted.throttle.wbt.waits.count, 0);
    assert!(extracted.throttle.kyber.is_empty());
    assert!(
        !e.findings
            .iter()
            .any(|f| f.cause.key().ends_with("_throttling")),
        "{e:#?}"
    );
}

#[test]
fn tag_bound_waits_are_not_called_wbt() {
    // Four requests may exist and nothing else holds writes back: the writer sleeps for
    // tags between Q and G.
    let w = flood("none", 200, 40);
    let dev = flat_disk(1e6, 1e6);
    let cfg = SimConfig {
        depth: 4,
        max_requests: 4,
        ..SimConfig::default()
    };
    let run = simulate(&w, &dev, SchedKind::None, &Settings::default(), cfg);
    let long = q_to_g(&run.events)
        .into_iter()
        .filter(|t| *t > SLEPT_NS)
        .count() as u64;
    assert!(long > 50, "{long}");
    for nr_requests in [Some(4), None] {
        let mut info = w.device.clone();
        info.nr_requests = nr_requests;
        let (extracted, e) = explain_recording(&info, run.events.clone(), dev.clone());
        let wbt = &extracted.throttle.wbt;
        assert_eq!(wbt.waits.count, 0, "{nr_requests:?}: {wbt:?}");
        assert_eq!(wbt.requests_cap, 4);
        // The writer's long Q->Gs are all tag waits (the reader's are not tracked writes).
        let writer_long = run
            .events
            .iter()
            .filter(|ev| ev.kind == EventKind::Queue && ev.pid == 400)
            .count();
        assert!(wbt.tag_bound > 0 && wbt.tag_bound as usize <= writer_long);
        assert!(!e.findings.iter().any(|f| f.cause == Cause::WbtThrottling));
    }
}

#[test]
fn kyber_waits_are_the_token_shortage() {
    // Ten reads queued at once, none contiguous; Kyber's read domain at depth 2 on a device
    // serving 8 at once: pairs go out every 1 ms, and reads 3..10 wait 1, 1, 2, 2, 3, 3, 4,
    // 4 ms for a token: 20 ms in all.
    let mut w = empty(vec![stream(300, "fio", 1)]);
    w.device = device("loop0", "kyber", false);
    w.streams[0].kind = StreamKind::OpenLoop;
    for k in 0..10u64 {
        push(&mut w, 0, k * 100_000, 8, Op::Read, true, Trigger::At(0));
    }
    let dev = flash();
    let mut settings = Settings::default();
    settings.0.insert("read_depth".into(), "2".into());
    let run = simulate(&w, &dev, SchedKind::Kyber, &settings, SimConfig::default());
    // The kernel's events: kyber_adjust set the depth before the run, kyber_throttled fires
    // when the hardware queue starts waiting for a token (the model's Throttled decisions).
    let template = run.events[0];
    let mut events = vec![Event {
        ts_ns: sim::T0 - 1,
        kind: EventKind::KyberAdjust,
        aux: 2 << 32,
        ..template
    }];
    for d in &run.decisions {
        if let Decision::Throttled { domain } = d.d {
            assert_eq!(domain, "read");
            events.push(Event {
                ts_ns: sim::T0 + d.t,
                kind: EventKind::KyberThrottled,
                aux: 0,
                ..template
            });
        }
    }
    assert!(events.len() > 2);
    events.extend(run.events.iter().copied());
    events.sort_by_key(|e| e.ts_ns);
    let (extracted, e) = explain_recording(&w.device, events, dev);
    let k = &extracted.throttle.kyber;
    assert_eq!(k.len(), 1, "{k:?}");
    assert_eq!(k[0].name, "read");
    assert_eq!(k[0].waits.count, 8);
    assert_eq!(k[0].waits.total_ns, 20_000_000);
    assert_eq!(k[0].waits.max_ns, 4_000_000);
    assert_eq!(k[0].depth_at_throttle, Some(2));
    assert_eq!(k[0].depth_range, Some((2, 2)));
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::KyberThrottling)
        .unwrap_or_else(|| panic!("{e:#?}"));
    assert!(
        matches!(f.claim, Claim::Kyber(kyber::Claim { requests: 8, .. })),
        "{:?}",
        f.claim
    );
    // The tunables: read_lat_nsec and write_lat_nsec.
    assert!(
        f.evidence
            .iter()
            .any(|e| matches!(e, Evidence::Kyber(kyber::Evidence::Tunable { .. }))),
        "{:?}",
        f.evidence
    );
    // At depth 2 the ten reads take 5 ms, at the initial 256 about 2 ms.
    let est = f.estimate.as_ref().unwrap();
    assert!(est.change_pct > 100.0, "{est:?}");
}

#[test]
fn wbt_depth_at_the_waits_is_the_step_in_force() {
    use super::throttle::{WbtStep, max_depth_at};
    let step = |t_ns, max| WbtStep {
        t_ns,
        step: 0,
        window_us: 100_000,
        background: 1,
        normal: 1,
        max,
    };
    let steps = [step(0, 8), step(100, 2), step(300, 16)];
    // Waits at 50 (depth 8), 150 and 160 (2), 400 (16): the middle one of 2, 2, 8, 16.
    assert_eq!(
        max_depth_at(&steps, [150, 50, 400, 160].into_iter()),
        Some(8)
    );
    assert_eq!(max_depth_at(&steps, [150, 160, 50].into_iter()), Some(2));
    assert_eq!(max_depth_at(&[], [10].into_iter()), None);
    // Before the first step the depth is not in the trace.
    assert_eq!(max_depth_at(&[step(500, 4)], [10].into_iter()), None);
}
