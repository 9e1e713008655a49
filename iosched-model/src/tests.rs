//! Scenarios with analytic answers, and extraction from synthetic traces.

use crate::{
    explain::{
        self, Cause, Claim, Evidence, Fix, RangeBasis, Verdict, bfq_idling, cfq_idling,
        preemption_storm, weight_raising,
    },
    workload,
};
use iosched_core::{
    event::{Event, Op},
    source::MemorySource,
};

use super::{
    device::DeviceModel,
    replay::{Config, Replayer},
    scenarios::{
        THINK_NS as THINK, dsync_journal as dsync_cycle, empty as empty_workload, flat_disk, push,
        push_sequential_readers, seek_disk, stream,
    },
    sched::{SchedKind, Settings},
    workload::{Trigger, Workload},
};

fn replayer(w: Workload, dev: DeviceModel) -> Replayer {
    Replayer::new(w, Some(dev), vec![0, 1]).unwrap()
}

fn run(r: &Replayer, spec: &str) -> super::replay::Run {
    r.run(&Config::parse(spec, &Settings::default()).unwrap())
        .unwrap()
}

const SVC: f64 = 400_000.0;

#[test]
fn dsync_cycle_under_pre_5_3_bfq_costs_slice_idle_per_write() {
    let n = 200;
    let r = replayer(dsync_cycle(n), flat_disk(SVC, 100_000.0));
    let dl = run(&r, "mq-deadline");
    let per_op_dl = dl.summary.duration_s / f64::from(n);
    // Two services and two think times per write.
    let expect_dl = (2.0 * SVC + 2.0 * THINK as f64) / 1e9;
    assert!(
        (per_op_dl - expect_dl).abs() / expect_dl < 0.02,
        "mq-deadline {per_op_dl} vs {expect_dl}"
    );
    let bfq = run(&r, "bfq:kernel=5.2,low_latency=0");
    let per_op = bfq.summary.duration_s / f64::from(n);
    // The idle timer runs from dd's completion: slice_idle replaces jbd2's think time.
    let expect = (8e6 + 2.0 * SVC + THINK as f64) / 1e9;
    assert!(
        (per_op - expect).abs() / expect < 0.02,
        "bfq 5.2: {per_op} s per write, expected {expect}; {:?}",
        bfq.decision_counts
    );
    // After the first slice the queues are no longer I/O-bound (5.2's rule): every later
    // idle is for the cgroups.
    let cg = bfq
        .decision_counts
        .idles
        .get("cgroups_pending")
        .copied()
        .unwrap_or(0);
    assert!(cg >= u64::from(n) - 2, "{:?}", bfq.decision_counts);
    assert!(
        bfq.decision_counts
            .expirations
            .get("too_idle")
            .copied()
            .unwrap_or(0)
            >= u64::from(n) - 1
    );
    // The report sees the same waste as the decisions: the device idle with jbd2 waiting.
    let waste = bfq.summary.idle_with_pending_ms;
    assert!(
        waste > 0.9 * f64::from(n - 1) * 8.0,
        "idle with pending {waste} ms"
    );
    // About 1/10 of mq-deadline's throughput on this disk.
    let ratio = dl.summary.mb_per_s / bfq.summary.mb_per_s;
    assert!((9.0..12.0).contains(&ratio), "ratio {ratio}");
}

#[test]
fn dsync_cycle_under_current_bfq_loses_nothing() {
    let n = 200;
    let r = replayer(dsync_cycle(n), flat_disk(SVC, 100_000.0));
    let dl = run(&r, "mq-deadline");
    // Pre-5.3 BFQ pays an idle slice (8 ms) per write, 1.6 s in all (above). Here at most two
    // slices in all: 5.3's rules may still idle a slice or two, where its I/O-bound flag keeps
    // it from injecting jbd2's commit (an empty dd preempted while it needed idling stays in
    // service, `__bfq_bfqq_expire`, so the commit waits for the idle timer); 6.18 none.
    for spec in [
        "bfq:kernel=6.18",
        "bfq:kernel=5.3,low_latency=0",
        "bfq:kernel=5.2,slice_idle=0",
    ] {
        let bfq = run(&r, spec);
        let extra = bfq.summary.duration_s - dl.summary.duration_s;
        assert!(
            extra < 2.0 * 8e-3 + 1e-3,
            "{spec}: {extra} s over mq-deadline in {n} writes; {:?}",
            bfq.decision_counts
        );
    }
}

#[test]
fn a_single_sequential_reader_loses_nothing_to_idling() {
    let mut w = empty_workload(vec![stream(300, "reader", 1)]);
    let mut prev = None;
    for k in 0..500u64 {
        let t = prev.map_or(Trigger::At(0), |p| Trigger::AfterCompletion {
            io: p,
            delay: 50_000,
        });
        prev = Some(push(&mut w, 0, 1_000_000 + k * 128, 128, Op::Read, true, t));
    }
    let r = replayer(w, flat_disk(8e6, 300_000.0));
    let dl = run(&r, "mq-deadline");
    let bfq = run(&r, "bfq");
    let expect = 8e6 + 499.0 * (300_000.0 + 50_000.0);
    assert!((dl.summary.duration_s * 1e9 - expect).abs() / expect < 0.01);
    let ratio = bfq.summary.duration_s / dl.summary.duration_s;
    assert!((0.999..1.001).contains(&ratio), "{ratio}");
    // It idled (only busy queue), and every idle ended with its own request but the
    // last: after its last read the process is still there (the trace shows no exit), and
    // BFQ waits one idle slice for it: 20 ms, the least for a weight-raised queue (it
    // started interactive), `bfq_arm_slice_timer`.
    let c = &bfq.decision_counts;
    assert_eq!(c.raises, 1, "{c:?}");
    assert_eq!(
        c.idle_ms_by_outcome.get("timer_expired"),
        Some(&20.0),
        "{c:?}"
    );
    assert_eq!(c.expirations.get("too_idle"), Some(&1), "{c:?}");
}

/// A reader the recorded scheduler starved: its recorded reads went on to the end of the
/// recording (its last one completed 10 s in), and the replay serves them all in a fraction
/// of that. Out of reads long before the instant it stopped in the recording, the process
/// that would have gone on reading is not modelled: BFQ is not made to wait for it.
#[test]
fn bfq_does_not_idle_for_a_reader_the_replay_ran_out_of_early() {
    let mut w = empty_workload(vec![stream(300, "reader", 1)]);
    let mut prev = None;
    for k in 0..100u64 {
        let t = prev.map_or(Trigger::At(0), |p| Trigger::AfterCompletion {
            io: p,
            delay: 50_000,
        });
        let i = push(&mut w, 0, 1_000_000 + k * 128, 128, Op::Read, true, t);
        // Recorded 100 ms apart.
        w.ios[i as usize].rec_q = k * 100_000_000;
        w.ios[i as usize].rec_c = k * 100_000_000 + 1_000_000;
        prev = Some(i);
    }
    w.end_ns = 99 * 100_000_000 + 1_000_000;
    let r = replayer(w, flat_disk(8e6, 300_000.0));
    let bfq = run(&r, "bfq:continue=0");
    assert!(bfq.summary.duration_s < 1.0, "{}", bfq.summary.duration_s);
    let c = &bfq.decision_counts;
    assert_eq!(c.expirations.get("too_idle"), None, "{c:?}");
    assert!(!c.idle_ms_by_outcome.contains_key("timer_expired"), "{c:?}");
}

#[test]
fn settings_are_checked() {
    let r = replayer(dsync_cycle(3), flat_disk(SVC, 100_000.0));
    let err = |spec: &str| {
        r.run(&Config::parse(spec, &Settings::default()).unwrap())
            .err()
            .unwrap()
            .to_string()
    };
    assert!(err("bfq:slice_idel=0").contains("no tunable \"slice_idel\""));
    assert!(err("bfq:slice_idle=x").contains("slice_idle=x"));
    assert!(err("bfq:kernel=new").contains("kernel version"));
    assert!(err("mq-deadline:slice_idle=0").contains("mq-deadline has no tunable"));
    assert!(Config::parse("cfqq", &Settings::default()).is_err());
}

/// The whole path on a trace: events of the seed-001 cycle as BFQ 5.2 would have produced
/// them -> workload extraction (dependencies found from timing) -> device fit -> replay as
/// recorded reproduces the recording -> explain names the cause.
#[test]
fn explain_finds_idling_on_a_dependency_in_a_recorded_cycle() {
    let n = 300;
    let dev = flat_disk(SVC, 100_000.0);
    let w = dsync_cycle(n);
    let mut settings = Settings::default();
    settings.0.insert("kernel".into(), "5.2".into());
    settings.0.insert("low_latency".into(), "0".into());
    let events = super::scenarios::trace(&w, &dev, SchedKind::Bfq, &settings).unwrap();
    let mut info = w.device.clone();
    info.iosched.insert("low_latency".into(), "0".into());
    let mut src = MemorySource::new(vec![info.clone()], events.clone());
    let mut extracted = workload::extract(&mut src, None).unwrap();
    extracted.kernel_release = Some("5.2.0".into());
    assert_eq!(extracted.ios.len(), 2 * n as usize);
    let names: Vec<String> = (0..2).map(|s| extracted.stream_name(s)).collect();
    let dd = names.iter().position(|s| s.starts_with("dd")).unwrap();
    let jbd2 = 1 - dd;
    assert_eq!(
        extracted.streams[dd].depends_on.first().map(|d| d.0),
        Some(jbd2 as u32)
    );
    assert_eq!(
        extracted.streams[jbd2].depends_on.first().map(|d| d.0),
        Some(dd as u32)
    );
    let r = Replayer::new(extracted, None, vec![0, 1]).unwrap();
    let fit = r.fit.as_ref().unwrap();
    assert!(fit.total_error_pct.abs() < 2.0, "{fit:?}");
    let mut src = MemorySource::new(vec![info], events);
    let (recorded, report) = super::replay::recorded_summary(&mut src, &r.workload).unwrap();
    let as_recorded = r.run(&r.recorded_config().unwrap()).unwrap();
    let err = (as_recorded.summary.mb_per_s - recorded.mb_per_s).abs() / recorded.mb_per_s;
    assert!(
        err < 0.02,
        "self-consistency {err}: {:?} vs {:?}",
        as_recorded.summary.mb_per_s,
        recorded.mb_per_s
    );
    let e = explain::explain(&r, &recorded, &report).unwrap();
    let first = &e.findings[0];
    assert_eq!(first.cause, Cause::IdlingOnDependency, "{e:#?}");
    assert!(
        matches!(
            first.claim,
            Claim::BfqIdling(bfq_idling::Claim::OnDependency { stream }) if stream as usize == dd
        ),
        "{:?}",
        first.claim
    );
    let est = first.estimate.as_ref().unwrap();
    // The fix gives mq-deadline's speed: ~10x.
    assert!(est.change_pct > 800.0, "{est:?}");
}

/// The same cycle recorded under current BFQ: nothing to explain.
#[test]
fn explain_says_plainly_when_nothing_is_wrong() {
    let n = 200;
    let dev = flat_disk(SVC, 100_000.0);
    let (_, e) = traced_and_explained(&dsync_cycle(n), &dev, SchedKind::Bfq, &[]);
    assert!(!matches!(e.verdict, Verdict::Findings(_)), "{e:#?}");
}

/// `w` traced under `sched` with `tunables` on `dev`, extracted back from the trace (whose
/// device says that scheduler and tunables), and explained: the replayer (its device fitted
/// from the trace) and `explain`'s answer.
fn traced_and_explained(
    w: &Workload,
    dev: &DeviceModel,
    sched: SchedKind,
    tunables: &[(&str, &str)],
) -> (Replayer, explain::Explanation) {
    traced_and_explained_as(w, dev, sched, tunables, |_| {})
}

/// [`traced_and_explained`], with what the recording says about the processes or the kernel
/// changed by `recorded_as` (the trace itself is generated from `w` unchanged).
fn traced_and_explained_as(
    w: &Workload,
    dev: &DeviceModel,
    sched: SchedKind,
    tunables: &[(&str, &str)],
    recorded_as: impl FnOnce(&mut Workload),
) -> (Replayer, explain::Explanation) {
    let mut settings = Settings::default();
    for (k, v) in tunables {
        settings.0.insert((*k).into(), (*v).into());
    }
    let events = super::scenarios::trace(w, dev, sched, &settings).unwrap();
    let mut info = w.device.clone();
    info.scheduler = Some(sched.name().into());
    info.iosched = tunables
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    let mut src = MemorySource::new(vec![info.clone()], events.clone());
    let mut extracted = workload::extract(&mut src, None).unwrap();
    recorded_as(&mut extracted);
    let r = Replayer::new(extracted, None, vec![0, 1]).unwrap();
    let mut src = MemorySource::new(vec![info], events);
    let (recorded, report) = super::replay::recorded_summary(&mut src, &r.workload).unwrap();
    let e = explain::explain(&r, &recorded, &report).unwrap();
    (r, e)
}

/// A recording's timer notes outside its I/O (wbt's, 200 ms before the first request; one
/// 300 ms after the last completion) do not stretch the span its own numbers are taken over:
/// the replay is measured from the first request to the last completion, and so is the
/// recording, or a perfect model would miss its throughput by the notes' distance.
#[test]
fn the_recordings_numbers_span_its_io_not_its_notes() {
    let (info, events, noted) = super::scenarios::reads_between_notes();
    let summary = |events: Vec<Event>| {
        let mut src = MemorySource::new(vec![info.clone()], events.clone());
        let r =
            Replayer::new(workload::extract(&mut src, None).unwrap(), None, vec![0, 1]).unwrap();
        let mut src = MemorySource::new(vec![info.clone()], events);
        super::replay::recorded_summary(&mut src, &r.workload)
            .unwrap()
            .0
    };
    let (plain, with_notes) = (summary(events.clone()), summary(noted));
    assert_eq!(plain.requests, 500);
    assert_eq!(with_notes.requests, 500);
    assert_eq!(with_notes.duration_s, plain.duration_s);
    assert_eq!(with_notes.mb_per_s, plain.mb_per_s);
}

/// A lone sequential reader under BFQ: BFQ idles after each of its requests for the next one,
/// and every 50th request the reader pauses longer than slice_idle, so the timer fires with
/// nothing to do. That costs nothing, since no other process waits. Not a finding.
#[test]
fn idling_on_a_lone_reader_is_not_a_finding() {
    let dev = flat_disk(SVC, 100_000.0);
    let mut w = empty_workload(vec![stream(10, "fio", 1)]);
    w.device.rotational = Some(true);
    let mut prev = None;
    // ~20 s: longer than weight raising lasts, after which BFQ idles for throughput.
    for k in 0..10_000u64 {
        let delay = if k % 50 == 49 { 20_000_000 } else { 200_000 };
        let t = prev.map_or(Trigger::At(0), |io| Trigger::AfterCompletion { io, delay });
        prev = Some(push(&mut w, 0, k * 256, 256, Op::Read, true, t));
    }
    let (r, e) = traced_and_explained(&w, &dev, SchedKind::Bfq, &[]);
    // The premise: the model does idle on it, for a real share of the run.
    let base = r.run(&r.recorded_config().unwrap()).unwrap();
    let (n, idle_ns, _) = super::replay::idle_episodes(&base.decisions, 0);
    assert!(n >= 100, "idled {n} times");
    assert!(
        idle_ns as f64 >= 0.05 * base.summary.duration_s * 1e9,
        "{idle_ns} ns"
    );
    assert!(
        e.findings
            .iter()
            .all(|f| !f.cause.key().starts_with("idling")),
        "{e:#?}"
    );
    assert!(!matches!(e.verdict, Verdict::Findings(_)), "{e:#?}");
}

/// Seed 000 (bfq-mq vs cfq, 2017): N sequential readers started together on a device with
/// internal parallelism. With the 4.12 rules every new queue is weight-raised and BFQ idles on
/// it, serving one reader at a time; from 8 readers on they form a large burst, are not
/// raised, and run in parallel again. low_latency=0 removes the loss at any N.
#[test]
fn fresh_sequential_readers_lose_to_weight_raising_below_a_large_burst() {
    let dev = DeviceModel::Flash(super::device::FlashModel {
        latency_ns: 200_000.0,
        ns_per_sector: 0.0,
        parallelism: 4,
        write_latency_ns: None,
        write_ns_per_sector: None,
    });
    let readers = |n: u32| {
        let mut w = empty_workload((0..n).map(|p| stream(10 + p, "fio", 1)).collect());
        w.device.rotational = Some(false);
        push_sequential_readers(&mut w, 300, 8, 100_000_000, THINK);
        Replayer::new(w, Some(dev.clone()), vec![0, 1]).unwrap()
    };
    let mb = |r: &Replayer, spec: &str| run(r, spec).summary.mb_per_s;
    let four = readers(4);
    let raised = mb(&four, "bfq:kernel=4.12");
    let plain = mb(&four, "bfq:kernel=4.12,low_latency=0");
    eprintln!(
        "4 readers, 4.12 rules: low_latency=1 {raised:.1} MB/s, low_latency=0 {plain:.1} MB/s"
    );
    assert!(plain > 2.0 * raised, "4 readers: {plain} vs {raised} MB/s");
    let eight = readers(8);
    let raised = mb(&eight, "bfq:kernel=4.12");
    let plain = mb(&eight, "bfq:kernel=4.12,low_latency=0");
    eprintln!(
        "8 readers, 4.12 rules: low_latency=1 {raised:.1} MB/s, low_latency=0 {plain:.1} MB/s"
    );
    assert!(
        (raised / plain - 1.0).abs() < 0.1,
        "8 readers: {plain} vs {raised} MB/s"
    );
}

/// CFQ, one sequential reader with no think time: its next request comes as the last one
/// completes, so every idle ends at once and slices expiring cost nothing.
#[test]
fn cfq_single_sequential_reader_loses_nothing_to_idling() {
    let mut w = empty_workload(vec![stream(300, "reader", 1)]);
    let mut prev = None;
    for k in 0..500u64 {
        let t = prev.map_or(Trigger::At(0), |p| Trigger::AfterCompletion {
            io: p,
            delay: 0,
        });
        prev = Some(push(&mut w, 0, 1_000_000 + k * 128, 128, Op::Read, true, t));
    }
    let r = replayer(w, flat_disk(8e6, 300_000.0));
    let none = run(&r, "none");
    let cfq = run(&r, "cfq");
    let ratio = cfq.summary.mb_per_s / none.summary.mb_per_s;
    eprintln!(
        "cfq {:.2} MB/s, none {:.2} MB/s; {:?}",
        cfq.summary.mb_per_s, none.summary.mb_per_s, cfq.decision_counts
    );
    assert!((0.98..1.02).contains(&ratio), "cfq/none {ratio}");
    assert!(
        !cfq.decision_counts
            .idle_ms_by_outcome
            .contains_key("timer_expired"),
        "{:?}",
        cfq.decision_counts
    );
}

/// CFQ on seed 001's dependency cycle (dd's write, then jbd2's commit, each released by the
/// other's completion), both in the root cgroup (no group scheduling). CFQ idles on the queue that just
/// completed (idle window, or the last queue on its tree); the other process's request is
/// far away and of the same class, so it does not preempt and waits for the idle timer:
/// each I/O costs SVC + slice_idle instead of SVC + THINK (the think time hides inside the
/// idle), 2 x (SVC + slice_idle) = 16.8 ms per write pair against mq-deadline's
/// 2 x (SVC + THINK) = 0.84 ms.
///
/// Not quite every idle times out: each queue's think time (its own completion to its next
/// request) is then slice_idle + SVC + THINK > slice_idle, so the decaying mean climbs past
/// slice_idle and the idle window closes; when both queues have lost it at once, both are
/// sync-noidle and the arrival preempts (a free pass, costing THINK), which pulls the means
/// back under slice_idle. So the time is exactly 2n x (SVC + THINK) plus
/// (slice_idle - THINK) for each idle that timed out, a few % under the bound above.
///
/// With slice_idle=0 the emptied queue is expired (group_idle is skipped with the other
/// queue busy, or the arrival preempts the group idle), so it runs like mq-deadline.
#[test]
fn cfq_dependency_cycle_pays_slice_idle_per_io() {
    let n = 200;
    let mut w = dsync_cycle(n);
    w.streams[0].cgroup_id = 1;
    let r = replayer(w, flat_disk(SVC, 100_000.0));
    let dl = run(&r, "mq-deadline");
    let cfq = run(&r, "cfq");
    let per_pair = cfq.summary.duration_s / f64::from(n);
    let expect = 2.0 * (SVC + 8e6) / 1e9;
    eprintln!(
        "cfq: {:.3} ms per pair (expected {:.3}); mq-deadline {:.3} ms; {:?}",
        per_pair * 1e3,
        expect * 1e3,
        dl.summary.duration_s / f64::from(n) * 1e3,
        cfq.decision_counts
    );
    assert!(
        (per_pair - expect).abs() / expect < 0.10,
        "cfq {per_pair} s per pair, expected {expect}; {:?}",
        cfq.decision_counts
    );
    let too_idle = cfq
        .decision_counts
        .expirations
        .get("too_idle")
        .copied()
        .unwrap_or(0);
    assert!(too_idle > u64::from(n), "{:?}", cfq.decision_counts);
    // The measured time against the decision log: the waste is the timed-out idles.
    let accounted =
        (2.0 * f64::from(n) * (SVC + THINK as f64) + too_idle as f64 * (8e6 - THINK as f64)) / 1e9;
    assert!(
        (cfq.summary.duration_s - accounted).abs() / accounted < 0.01,
        "{} s vs {accounted} s from {too_idle} timed-out idles",
        cfq.summary.duration_s
    );
    let off = run(&r, "cfq:slice_idle=0");
    let ratio = off.summary.duration_s / dl.summary.duration_s;
    eprintln!("cfq slice_idle=0: {ratio:.4} x mq-deadline's time");
    assert!(
        (ratio - 1.0).abs() < 0.05,
        "slice_idle=0: {ratio}; {:?}",
        off.decision_counts
    );
}

/// Two sequential readers (closed loop, no think time) far apart on a disk. With idling,
/// CFQ serves each for a whole slice (slice_sync, 100 ms: two busy queues need 200 ms,
/// under target_latency, so low_latency does not scale it) before switching: about
/// duration / slice_sync switches. Without idling, the emptied queue expires at every
/// completion and the readers alternate request by request.
#[test]
fn cfq_two_sequential_readers_alternate_whole_slices() {
    let per = 2000u64;
    let mut w = empty_workload(vec![stream(10, "r1", 1), stream(11, "r2", 1)]);
    push_sequential_readers(&mut w, per, 64, 100_000_000, 0);
    let r = replayer(w, flat_disk(8e6, 200_000.0));
    let idling = run(&r, "cfq");
    let slices = idling.summary.duration_s / 0.1;
    let switches = idling.decision_counts.in_service as f64;
    eprintln!(
        "slice_idle=8: {:.3} s, {switches} switches ({slices:.1} slices of 100 ms); {:?}",
        idling.summary.duration_s, idling.decision_counts
    );
    assert!(
        (switches - slices).abs() <= 0.2 * slices + 2.0,
        "{switches} switches vs {slices} slices"
    );
    let off = run(&r, "cfq:slice_idle=0");
    let off_switches = off.decision_counts.in_service as f64;
    eprintln!(
        "slice_idle=0: {:.3} s, {off_switches} switches",
        off.summary.duration_s
    );
    assert!(off_switches > (2 * per) as f64 * 0.9, "{off_switches}");
    // Whole slices keep the head on one reader: far fewer seeks, so faster.
    assert!(off.summary.duration_s > 5.0 * idling.summary.duration_s);
}

#[test]
fn cfq_settings_are_checked() {
    let r = replayer(dsync_cycle(3), flat_disk(SVC, 100_000.0));
    let err = |spec: &str| {
        r.run(&Config::parse(spec, &Settings::default()).unwrap())
            .err()
            .unwrap()
            .to_string()
    };
    let e = err("cfq:slice_idel=0");
    assert!(e.contains("cfq has no tunable \"slice_idel\""), "{e}");
    assert!(e.contains("target_latency_us"), "{e}");
    assert!(err("cfq:quantum=many").contains("quantum=many"));
    // Every 4.19 sysfs attribute is accepted.
    for k in super::sched::cfq::KEYS {
        let spec = format!("cfq:{k}=1");
        assert!(
            r.run(&Config::parse(&spec, &Settings::default()).unwrap())
                .is_ok(),
            "{spec}"
        );
    }
}

/// low_latency (`cfq_scaled_cfqq_slice`): with N busy sync queues a slice is
/// slice_sync x target_latency / (N x slice_sync), floored at 2 x slice_idle: 10 readers get
/// 300/10 = 30 ms slices, 20 readers the 16 ms floor; without low_latency 100 ms.
#[test]
fn cfq_low_latency_scales_slices_to_the_target_latency() {
    let readers = |n: u32| {
        let mut w = empty_workload((0..n).map(|p| stream(10 + p, "fio", 1)).collect());
        push_sequential_readers(&mut w, 400, 64, 100_000_000, 0);
        replayer(w, flat_disk(8e6, 200_000.0))
    };
    // The slices set once every reader has been served (the average has caught up).
    let slices_ms = |r: &Replayer, spec: &str, n: usize| -> Vec<f64> {
        run(r, spec)
            .decisions
            .iter()
            .filter_map(|d| match d.d {
                super::sched::Decision::Slice { slice_ns, .. } => Some(slice_ns as f64 / 1e6),
                _ => None,
            })
            .skip(n)
            .take(n)
            .collect()
    };
    for (n, want) in [(10, 30.0), (20, 16.0)] {
        let r = readers(n as u32);
        let got = slices_ms(&r, "cfq", n);
        eprintln!("{n} readers: slices {got:?} ms");
        assert_eq!(got.len(), n);
        assert!(got.iter().all(|s| (s - want).abs() < 0.01), "{got:?}");
        let plain = slices_ms(&r, "cfq:low_latency=0", n);
        assert!(plain.iter().all(|s| (s - 100.0).abs() < 0.01), "{plain:?}");
    }
}

/// The seed-001 cycle recorded under CFQ: explain names CFQ's idling on the dependency
/// first, and turning idling off gives mq-deadline's speed (~18x here: 16.8 ms per write pair
/// against 0.84 ms, less the free passes).
#[test]
fn explain_finds_cfq_idling_on_a_dependency() {
    let n = 200;
    let dev = flat_disk(SVC, 100_000.0);
    let (_, e) = traced_and_explained(&dsync_cycle(n), &dev, SchedKind::Cfq, &[]);
    let first = &e.findings[0];
    assert_eq!(first.cause, Cause::IdlingOnDependency, "{e:#?}");
    assert!(
        matches!(
            first.claim,
            Claim::CfqIdling(cfq_idling::Claim::Idles { .. })
        ),
        "{:?}",
        first.claim
    );
    let est = first.estimate.as_ref().unwrap();
    assert!(est.change_pct > 1000.0, "{est:?}");
}

/// 6.x does not raise a queue whose weight the user set (an I/O priority other than the
/// default; `nice 10` gives best effort level 6, weight 20); 5.11 still raised it.
#[test]
fn bfq_raises_only_default_weights_after_5_12() {
    let readers = |ioprio: u16| {
        let mut w = empty_workload((0..2).map(|p| stream(10 + p, "fio", 1)).collect());
        for s in &mut w.streams {
            s.ioprio = ioprio;
        }
        push_sequential_readers(&mut w, 50, 8, 1_000_000, THINK);
        replayer(w, flat_disk(SVC, 100_000.0))
    };
    let raises = |r: &Replayer, spec: &str| run(r, spec).decision_counts.raises;
    let default = readers(0);
    assert_eq!(raises(&default, "bfq"), 2);
    let niced = readers((2 << 13) | 6);
    assert_eq!(raises(&niced, "bfq"), 0);
    assert_eq!(raises(&niced, "bfq:kernel=5.11"), 2);
    assert_eq!(raises(&niced, "bfq:low_latency=0"), 0);
}

/// Seed 001 as it was: dd in a blkio cgroup of its own, jbd2 in the root one, CFQ with
/// slice_idle=0 (so only group_idle idles). dd's emptied queue is the last of its group, so
/// CFQ group-idles on it, but jbd2's request comes from the root group, an ancestor, and
/// preempts at once (cost: THINK). jbd2's emptied queue is the last of the root group, and
/// dd's request, from a child group, may not preempt it (`cfqg_is_descendant`): it waits for
/// the group idle timer, which replaces jbd2's think time. A write pair that pays costs
/// group_idle + 2 x SVC + THINK = 8.82 ms, against mq-deadline's 2 x (SVC + THINK) = 0.84 ms.
///
/// Not every pair pays: the root group's think time (its completion to its next request) is
/// then group_idle + SVC + 2 x THINK > group_idle, so its decaying mean climbs past group_idle
/// and `check_group_idle` lets jbd2's queue expire with its request in flight; that pair is
/// free and pulls the mean back under (about one free pair in eight). So the time is exactly
/// 2n x (SVC + THINK) plus (group_idle - THINK) for each idle that timed out.
///
/// With group_idle=0 too, nothing idles: exactly the time of the same cycle in one cgroup
/// with slice_idle=0.
#[test]
fn cfq_group_idle_on_the_dependency_cycle_with_dd_in_its_own_cgroup() {
    let n = 200;
    let r = replayer(dsync_cycle(n), flat_disk(SVC, 100_000.0));
    let dl = run(&r, "mq-deadline");
    let cfq = run(&r, "cfq:slice_idle=0");
    let per_pair = cfq.summary.duration_s / f64::from(n);
    let bound = (8e6 + 2.0 * SVC + THINK as f64) / 1e9;
    let c = &cfq.decision_counts;
    eprintln!(
        "cfq slice_idle=0, dd in its own cgroup: {:.3} ms per pair (every pair paying: {:.3}); \
         mq-deadline {:.3} ms; {c:?}",
        per_pair * 1e3,
        bound * 1e3,
        dl.summary.duration_s / f64::from(n) * 1e3,
    );
    // Every idle is a group idle; those the timer ended were all on jbd2 (root group),
    // those on dd were all preempted by jbd2.
    assert_eq!(
        c.idles.keys().collect::<Vec<_>>(),
        vec![&"group_idle"],
        "{c:?}"
    );
    let timed_out = super::replay::expirations(&cfq.decisions, 1)
        .get(&super::sched::ExpireReason::TooIdle)
        .copied()
        .unwrap_or(0);
    let too_idle = c.expirations.get("too_idle").copied().unwrap_or(0);
    assert_eq!(timed_out, too_idle, "{c:?}");
    assert!(
        !super::replay::expirations(&cfq.decisions, 0)
            .contains_key(&super::sched::ExpireReason::TooIdle)
    );
    assert!(too_idle >= u64::from(n) * 8 / 10, "{c:?}");
    let accounted =
        (2.0 * f64::from(n) * (SVC + THINK as f64) + too_idle as f64 * (8e6 - THINK as f64)) / 1e9;
    assert!(
        (cfq.summary.duration_s - accounted).abs() / accounted < 0.01,
        "{} s vs {accounted} s from {too_idle} timed-out group idles",
        cfq.summary.duration_s
    );
    assert!(
        per_pair <= bound * 1.001 && per_pair > 0.8 * bound,
        "{per_pair} vs {bound}"
    );
    // About 1/10 of mq-deadline's throughput.
    let ratio = dl.summary.mb_per_s / cfq.summary.mb_per_s;
    assert!((7.0..11.0).contains(&ratio), "ratio {ratio}");
    // group_idle=0: the same as one cgroup with slice_idle=0, and as mq-deadline.
    let off = run(&r, "cfq:slice_idle=0,group_idle=0");
    let mut w = dsync_cycle(n);
    w.streams[0].cgroup_id = 1;
    let one_group = run(&replayer(w, flat_disk(SVC, 100_000.0)), "cfq:slice_idle=0");
    eprintln!(
        "group_idle=0: {:.6} s; one cgroup, slice_idle=0: {:.6} s; mq-deadline {:.6} s",
        off.summary.duration_s, one_group.summary.duration_s, dl.summary.duration_s
    );
    assert!(off.decision_counts.idles.is_empty());
    assert!((off.summary.duration_s - one_group.summary.duration_s).abs() < 1e-9);
    assert!((off.summary.duration_s / dl.summary.duration_s - 1.0).abs() < 0.05);
}

/// Two sequential readers (closed loop, no think time, far apart) in two cgroups. CFQ serves
/// the group with the least vdisktime, charging each expiring slice (100 ms: one busy queue
/// per group) divided by the group's share of the weights: equal weights alternate slices,
/// 1000:500 gives the heavier group two slices for each of the other's. Measured by the
/// sectors each served while both were backlogged (the first half of the run: at 2:1 the
/// faster one finishes at 3/4 of it).
#[test]
fn cfq_groups_share_the_disk_by_weight() {
    let readers = |cgroups: [u64; 2]| {
        let per = 12_000u64;
        let mut w = empty_workload(vec![
            stream(10, "r1", cgroups[0]),
            stream(11, "r2", cgroups[1]),
        ]);
        push_sequential_readers(&mut w, per, 64, 100_000_000, 0);
        replayer(w, flat_disk(8e6, 200_000.0))
    };
    // Sectors served by each reader in the first half of the run, and the groups' charges.
    let shares = |r: &Replayer, spec: &str| -> (f64, f64) {
        let x = run(r, spec);
        let half = (x.summary.duration_s * 0.5 * 1e9) as u64;
        let (mut served, mut charged) = ([0f64; 2], [0f64; 2]);
        for d in x.decisions.iter().filter(|d| d.t < half) {
            match d.d {
                super::sched::Decision::Expire {
                    stream, served: s, ..
                } => {
                    served[stream as usize] += f64::from(s);
                }
                super::sched::Decision::GroupServed { stream, charge, .. } => {
                    charged[stream as usize] += charge as f64;
                }
                _ => {}
            }
        }
        eprintln!(
            "{spec}: {:.3} s; first half: sectors {served:?} ({:.3}), charged ms {:?}; {:?}",
            x.summary.duration_s,
            served[0] / served[1],
            charged.map(|c| c / 1e6),
            x.decision_counts
        );
        (served[0] / served[1], charged[0] / charged[1])
    };
    let two = readers([100, 200]);
    let (equal, _) = shares(&two, "cfq");
    assert!((equal - 1.0).abs() < 0.05, "equal weights: {equal}");
    let (heavy, charged) = shares(&two, "cfq:weight.100=1000");
    assert!((heavy - 2.0).abs() < 0.2, "1000:500: {heavy}");
    // Both groups are charged the same time per slice: the weights make the difference.
    assert!(
        (charged - heavy).abs() < 0.2,
        "charged {charged} vs served {heavy}"
    );
    // The root group's weight is 1000 (twice the default) against a child's 500.
    let root_child = readers([1, 200]);
    let (root, _) = shares(&root_child, "cfq");
    assert!((root - 2.0).abs() < 0.2, "root vs child: {root}");
    // Bad weights are refused with the key named.
    for bad in [
        "cfq:weight.100=5",
        "cfq:weight.x=500",
        "cfq:weight.100=heavy",
    ] {
        let e = two
            .run(&Config::parse(bad, &Settings::default()).unwrap())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("weight."), "{bad}: {e}");
    }
}

/// The seed-001 cycle recorded under CFQ with slice_idle=0, dd in a cgroup of its own and
/// jbd2 in the root one: explain names CFQ's group idling on jbd2, the dependency, and that
/// dd's request may not preempt it from another cgroup.
#[test]
fn explain_finds_cfq_group_idling_on_a_dependency() {
    let n = 200;
    let dev = flat_disk(SVC, 100_000.0);
    let (r, e) = traced_and_explained(
        &dsync_cycle(n),
        &dev,
        SchedKind::Cfq,
        &[("slice_idle", "0")],
    );
    let first = &e.findings[0];
    eprintln!("{first:#?}");
    assert_eq!(first.cause, Cause::IdlingOnDependency, "{e:#?}");
    assert!(
        matches!(
            first.claim,
            Claim::CfqIdling(cfq_idling::Claim::GroupIdles {
                stream,
                other_cgroup: true,
            }) if r.workload.stream_name(stream).starts_with("jbd2")
        ),
        "{:?}",
        first.claim
    );
    // dd's request may not preempt jbd2's group idle.
    assert!(
        first.evidence.iter().any(|e| matches!(
            e,
            Evidence::CfqIdling(cfq_idling::Evidence::Cgroups {
                partner,
                blocked: true,
                ..
            }) if r.workload.stream_name(*partner) == "dd(100)"
        )),
        "{:?}",
        first.evidence
    );
    let est = first.estimate.as_ref().unwrap();
    assert!(est.change_pct > 500.0, "{est:?}");
}

/// jbd2's commits written with REQ_PREFLUSH on a device with a write cache (the recording
/// issued a flush: a request without data) go to the head of BFQ's dispatch list, outside
/// its queues (6.5+): BFQ never puts jbd2's queue in service nor injects from it, yet
/// sees its completions. Without the flush in the recording (no write cache: the flag is
/// dropped) the same commits go through jbd2's queue.
#[test]
fn preflush_data_bypasses_bfqs_queues_on_a_device_with_a_write_cache() {
    use super::sched::Decision;
    use iosched_core::event::ReqFlags;
    let n = 50;
    let serves_jbd2 = |write_cache: bool| {
        let mut w = dsync_cycle(n);
        for io in w.ios.iter_mut().filter(|io| io.stream == 1) {
            io.flags = ReqFlags(io.flags.0 | ReqFlags::PREFLUSH);
        }
        if write_cache {
            w.service.push(workload::ServiceSample {
                d: 0,
                c: 100_000,
                sector: 0,
                sectors: 0,
                write: true,
                depth_at_d: 1,
            });
        }
        let bfq = run(&replayer(w, flat_disk(SVC, 100_000.0)), "bfq:kernel=6.18");
        bfq.decisions
            .iter()
            .filter(|d| match d.d {
                Decision::InService { stream, .. } => stream == 1,
                Decision::Inject { from, .. } => from == 1,
                _ => false,
            })
            .count()
    };
    assert_eq!(serves_jbd2(true), 0);
    assert!(serves_jbd2(false) >= n as usize - 1);
}

/// Many closed-loop random readers under BFQ on a disk with one service time: BFQ serves
/// them in budgets and slices, so a reader waits for others' whole slices; mq-deadline
/// serves the readers' one request each in turn (a sector sweep over the N pending), so a
/// request waits about N service times. explain names the slices, and its latency what-if
/// says so for the worst reader as recorded.
#[test]
fn explain_finds_slices_too_long_for_many_random_readers() {
    const N: u32 = 16;
    const PER: u64 = 60;
    let svc = 8e6;
    let dev = flat_disk(svc, 100_000.0);
    let mut w = empty_workload((0..N).map(|i| stream(100 + i, "fio", 1)).collect());
    w.device.rotational = Some(true);
    let mut x: u64 = 12345;
    for s in 0..N {
        let mut prev = None;
        for _ in 0..PER {
            // A fixed LCG: scattered 4 KiB reads over 1 GiB.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let sector = (x >> 33) % (2 << 20) / 8 * 8;
            let t = prev.map_or(Trigger::At(0), |io| Trigger::AfterCompletion {
                io,
                delay: 20_000,
            });
            prev = Some(push(&mut w, s, sector, 8, Op::Read, true, t));
        }
    }
    let (_, e) = traced_and_explained(&w, &dev, SchedKind::Bfq, &[]);
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::SlicesTooLong)
        .unwrap_or_else(|| panic!("{:#?}", e.findings));
    let l = f.latency_estimate.as_ref().unwrap();
    assert_eq!(l.what_if, "mq-deadline");
    let n_svc_ms = f64::from(N) * svc / 1e6;
    assert!(
        (0.9 * n_svc_ms..1.5 * n_svc_ms).contains(&l.predicted_worst_p99_q2c_ms),
        "{l:?}"
    );
    assert!(l.predicted_p99_q2c_ms <= l.predicted_worst_p99_q2c_ms);
    assert!(
        l.measured_p99_q2c_ms > 2.0 * l.predicted_worst_p99_q2c_ms,
        "{l:?}"
    );
}

/// A disk whose requests spend `latency` on their way to it and back: a reader that waits
/// for each request pays it every time, readers queued behind each other do not (the
/// interleaved `none` recordings of multi-reader show only the latter, the BFQ what-if lives
/// on the former).
#[test]
fn a_queue_hides_the_latency_that_a_lone_reader_pays() {
    const LATENCY: f64 = 80_000.0;
    const OVERHEAD: f64 = 100_000.0;
    let disk = DeviceModel::Rotational(super::device::RotationalModel {
        overhead_ns: OVERHEAD,
        ns_per_sector: 0.0,
        positioning_ns: vec![Some(SVC - OVERHEAD); 48],
        latency_ns: LATENCY,
    });
    let per_request_ns = |readers: u32| {
        let mut w = empty_workload((0..readers).map(|p| stream(10 + p, "fio", 1)).collect());
        push_sequential_readers(&mut w, 200, 8, 100_000_000, THINK);
        let r = replayer(w, disk.clone());
        let s = run(&r, "none").summary;
        s.duration_s * 1e9 / f64::from(200 * readers)
    };
    // Alone: latency, overhead and think time in turn.
    let one = per_request_ns(1);
    let expect = LATENCY + OVERHEAD + THINK as f64;
    assert!((one - expect).abs() / expect < 0.01, "{one} vs {expect}");
    // Four interleaved: every request seeks, and the next one is already waiting.
    let four = per_request_ns(4);
    assert!((four - SVC).abs() / SVC < 0.01, "{four} vs {SVC}");
}

/// Eight interleaved sequential readers recorded under `none` on a disk with a latency on
/// each request's way to it and back: every request queues, so the recording hides the
/// latency, and BFQ, which serves each reader alone, would pay it on every request. The fit
/// assumes [`super::device::ASSUMED_LATENCY_NS`]; the disk here has 60% of it, so the
/// assumption is wrong by construction. explain must give the estimate as a range whose other
/// end has no latency, and the truth (the same workload under BFQ on the true disk) must lie
/// in it, nearer the assumed end than the latency-free one, which overestimates.
#[test]
fn explain_gives_a_range_when_the_recording_hid_the_latency() {
    let latency = 0.6 * super::device::ASSUMED_LATENCY_NS;
    let disk = DeviceModel::Rotational(super::device::RotationalModel {
        overhead_ns: 100_000.0,
        ns_per_sector: 4_000.0,
        positioning_ns: vec![Some(7_000_000.0); 48],
        latency_ns: latency,
    });
    let mut w = empty_workload((0..8).map(|p| stream(10 + p, "fio", 1)).collect());
    w.device.scheduler = Some("none".into());
    push_sequential_readers(&mut w, 300, 8, 100_000_000, THINK);
    let truth = {
        let r = replayer(w.clone(), disk.clone());
        run(&r, "bfq").summary.mb_per_s / run(&r, "none").summary.mb_per_s
    };
    let (r, e) = traced_and_explained(&w, &disk, SchedKind::None, &[]);
    assert!(r.fit.as_ref().unwrap().latency_unseen, "{:?}", r.fit);
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::OtherScheduler)
        .unwrap_or_else(|| panic!("no other_scheduler: {e:#?}"));
    let est = f.estimate.as_ref().unwrap();
    let point = est.predicted_mb_s / est.measured_mb_s;
    let other = est.range_end.as_ref().expect("a range");
    assert_eq!(other.basis, RangeBasis::NoUnseenLatency, "{other:?}");
    let other = other.predicted_mb_s / est.measured_mb_s;
    eprintln!("truth x{truth:.3}, point x{point:.3}, latency-free end x{other:.3}");
    assert!(
        (other.min(point) * 0.97..=other.max(point) * 1.03).contains(&truth),
        "truth x{truth:.3}, range x{point:.3}..x{other:.3}"
    );
    assert!(
        (point - truth).abs() < (other - truth).abs(),
        "point x{point:.3}, latency-free x{other:.3}, truth x{truth:.3}"
    );
    assert!(other / truth > 1.02, "x{other:.3} vs x{truth:.3}");
}

/// Seed 000 on a disk: two sequential readers start together under BFQ (6.18 rules). Both
/// queues are new and weight-raised, and each takes the disk from the other whenever its
/// next request arrives (the arrival preempts the queue in service), so the disk seeks
/// between the readers at every request; with low_latency=0 BFQ idles for the reader in
/// service and streams. explain must name weight raising with that what-if; recorded with
/// low_latency=0 already, it must not.
#[test]
fn explain_finds_weight_raising_costing_two_fresh_sequential_readers() {
    let dev = seek_disk(100_000.0, 4_000.0);
    let readers = || {
        let mut w = empty_workload(vec![stream(10, "fio", 1), stream(11, "fio", 1)]);
        w.device.rotational = Some(true);
        push_sequential_readers(&mut w, 400, 8, 100_000_000, THINK);
        w
    };
    let (_, e) = traced_and_explained(&readers(), &dev, SchedKind::Bfq, &[]);
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::WeightRaisingCostsThroughput)
        .unwrap_or_else(|| panic!("{:#?}", e.findings));
    let est = f.estimate.as_ref().unwrap();
    assert_eq!(est.what_if, Fix::Config("bfq:low_latency=0".into()));
    // A seek (5 ms) per 4 KiB against streaming (0.13 ms per 4 KiB): many times faster.
    assert!(est.change_pct > 500.0, "{est:?}");
    assert!(
        matches!(
            f.evidence[0],
            Evidence::WeightRaising(weight_raising::Evidence::Raised {
                preempted: Some(_),
                ..
            })
        ),
        "{:?}",
        f.evidence
    );
    let (_, e) = traced_and_explained(&readers(), &dev, SchedKind::Bfq, &[("low_latency", "0")]);
    assert!(
        e.findings
            .iter()
            .all(|f| f.cause != Cause::WeightRaisingCostsThroughput),
        "{:#?}",
        e.findings
    );
}

/// Since 5.12 BFQ raises only queues of the default weight. For two fresh sequential readers
/// at the default I/O priority, `explain` offers the per-process alternative to
/// low_latency=0, a lower priority for the raised readers alone, and the model gives it the
/// same gain (no raising, no preemption). Readers recorded at best-effort 5 are not raised at
/// all; before 5.12, when BFQ raised whatever the weight, the alternative is not offered.
#[test]
fn explain_offers_a_lower_priority_for_the_raised_readers() {
    let dev = seek_disk(100_000.0, 4_000.0);
    let readers = || {
        let mut w = empty_workload(vec![stream(10, "fio", 1), stream(11, "fio", 1)]);
        w.device.rotational = Some(true);
        push_sequential_readers(&mut w, 400, 8, 100_000_000, THINK);
        w
    };
    let finding = |e: &explain::Explanation| {
        e.findings
            .iter()
            .find(|f| f.cause == Cause::WeightRaisingCostsThroughput)
            .cloned()
    };
    let (_, e) = traced_and_explained(&readers(), &dev, SchedKind::Bfq, &[]);
    let f = finding(&e).unwrap_or_else(|| panic!("{:#?}", e.findings));
    let lower_priority = |e: &Evidence| match e {
        Evidence::WeightRaising(l @ weight_raising::Evidence::LowerPriority { .. }) => {
            Some(l.clone())
        }
        _ => None,
    };
    // Both readers, pids 10 and 11, at best-effort 5 (`ionice -c2 -n5 -p 10 11`).
    let line = f
        .evidence
        .iter()
        .find_map(lower_priority)
        .unwrap_or_else(|| panic!("{:?}", f.evidence));
    let weight_raising::Evidence::LowerPriority {
        raised: 2,
        pids,
        change_pct: gain,
        ..
    } = &line
    else {
        panic!("{line:?}")
    };
    assert_eq!(pids, &[10, 11]);
    // The gain: as large as low_latency=0's (both stream each reader in turn).
    let (gain, off) = (*gain, f.estimate.as_ref().unwrap().change_pct);
    assert!(
        gain > 500.0 && (gain - off).abs() < 0.1 * off,
        "{line:?} vs {off}"
    );
    // Both readers were raised, and they are the whole workload: a what-if a run of the
    // workload under `ionice -c2 -n5` realises.
    let [alt] = &f.alternatives[..] else {
        panic!("{:?}", f.alternatives)
    };
    assert_eq!(alt.what_if, Fix::Config("bfq:ioprio=be/5".into()));
    assert!((alt.change_pct - gain).abs() < 1.0, "{alt:?} vs {line:?}");

    let be5 = |w: &mut Workload| {
        for s in &mut w.streams {
            s.ioprio = (2 << 13) | 5;
        }
    };
    let (r, e) = traced_and_explained_as(&readers(), &dev, SchedKind::Bfq, &[], be5);
    assert_eq!(r.env.stream_ioprio, vec![(2 << 13) | 5; 2]);
    assert!(finding(&e).is_none(), "{:#?}", e.findings);

    let (r, e) = traced_and_explained_as(&readers(), &dev, SchedKind::Bfq, &[], |w| {
        w.kernel_release = Some("5.11.0".into())
    });
    assert_eq!(r.env.kernel, 5011);
    let f = finding(&e).unwrap_or_else(|| panic!("{:#?}", e.findings));
    assert!(
        f.evidence.iter().all(|l| lower_priority(l).is_none()) && f.alternatives.is_empty(),
        "{:?}",
        f.evidence
    );
}

/// Two sequential readers at a non-default priority (never raised): BFQ streams each in
/// turn, until one pauses once for longer than slice_idle. Its queue expires too idle and,
/// its next request coming in time with budget left, takes the disk back from the other;
/// from then on each preempts the other at every request. `explain` names the storm, where
/// it began, and slice_idle doubled as the what-if (the pause fits in it: no storm). The same
/// readers without the pause stream to the end: no such finding.
#[test]
fn explain_finds_a_preemption_storm_started_by_one_long_pause() {
    let dev = seek_disk(100_000.0, 4_000.0);
    let be5 = (2 << 13) | 5;
    let readers = |pause_ns: Option<u64>| {
        let mut w = empty_workload(vec![stream(10, "fio", 1), stream(11, "fio", 1)]);
        w.device.rotational = Some(true);
        for s in &mut w.streams {
            s.ioprio = be5;
        }
        push_sequential_readers(&mut w, 600, 8, 100_000_000, THINK);
        if let Some(pause) = pause_ns {
            // The first reader's 200th request comes `pause` after its 199th completes.
            let io = w
                .ios
                .iter()
                .enumerate()
                .filter(|(_, io)| io.stream == 0)
                .nth(199);
            let (i, _) = io.unwrap();
            if let Trigger::AfterCompletion { delay, .. } = &mut w.ios[i].trigger {
                *delay = pause;
            }
        }
        w
    };
    let at_be5 = |w: &mut Workload| {
        for s in &mut w.streams {
            s.ioprio = be5;
        }
    };
    let (r, e) =
        traced_and_explained_as(&readers(Some(9_000_000)), &dev, SchedKind::Bfq, &[], at_be5);
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::PreemptionStorm)
        .unwrap_or_else(|| panic!("{:#?}", e.findings));
    let est = f.estimate.as_ref().unwrap();
    assert_eq!(est.what_if, Fix::Config("bfq:slice_idle=16".into()));
    // A seek per 4 KiB against streaming: several times faster.
    assert!(est.change_pct > 300.0, "{est:?}");
    // Named from the trace (no BFQ log here), with the pause that started it: fio(10)'s
    // 9.00 ms.
    assert!(
        f.evidence.iter().any(|e| matches!(
            e,
            Evidence::PreemptionStorm(preemption_storm::Evidence::Pause {
                inferred: true,
                stream,
                pause_ns,
                ..
            }) if r.workload.stream_name(*stream) == "fio(10)"
                && (8_995_000..9_005_000).contains(pause_ns)
        )),
        "{:?}",
        f.evidence
    );
    let (_, e) = traced_and_explained_as(&readers(None), &dev, SchedKind::Bfq, &[], at_be5);
    assert!(
        e.findings.iter().all(|f| f.cause != Cause::PreemptionStorm),
        "{:#?}",
        e.findings
    );
}

/// `ioprio=` spells an I/O priority as ionice does; anything else is refused by name.
#[test]
fn the_ioprio_switch_reads_ionice_classes() {
    let s = |v: &str| {
        let mut st = Settings::default();
        st.0.insert("ioprio".into(), v.into());
        st.ioprio("ioprio")
    };
    assert_eq!(s("be/5").unwrap(), Some((2 << 13) | 5));
    assert_eq!(s("rt/0").unwrap(), Some(1 << 13));
    assert_eq!(s("idle").unwrap(), Some(3 << 13));
    assert_eq!(s("none").unwrap(), Some(0));
    for bad in ["be/8", "be", "best-effort/5", "be/-1", ""] {
        let e = s(bad).unwrap_err().to_string();
        assert!(e.contains("ioprio") && e.contains("be/N"), "{bad}: {e}");
    }
    assert_eq!(Settings::default().ioprio("ioprio").unwrap(), None);
}

/// A binned run is the same run (its report unchanged), and its bins hold what its report
/// counts: the predicted timeline of `replay --html` shows the predicted run itself.
#[test]
fn a_binned_run_is_the_run_with_its_numbers_over_time() {
    let n = 100;
    let r = replayer(dsync_cycle(n), flat_disk(SVC, 100_000.0));
    let cfg = Config::parse("bfq:kernel=5.2", &Settings::default()).unwrap();
    let plain = r.run(&cfg).unwrap();
    let binned = r.run_binned(&cfg, 512).unwrap();
    assert!(plain.bins.is_none());
    assert_eq!(
        serde_json::to_value(&plain.report).unwrap(),
        serde_json::to_value(&binned.report).unwrap()
    );
    let bins = binned.bins.as_ref().unwrap();
    let requests: u64 = bins
        .devices
        .values()
        .flat_map(|d| d.requests.iter().map(|x| u64::from(*x)))
        .sum();
    assert_eq!(requests, binned.summary.requests);
    // Both processes' lanes, and the device idled (BFQ before 5.3 on a dependency).
    assert_eq!(bins.lanes.len(), 2);
    let idle: u64 = bins.devices.values().flat_map(|d| d.idle_ns.iter()).sum();
    assert_eq!(idle, binned.report.devices[0].idle_with_pending_ns);
    assert!(idle > 0);
}

/// BFQ decides by the queue's rotational flag, not by how the device serves: a loop device
/// whose flag says rotational=1 over a fast backing file (the loop default, where the kernel
/// does not take it from the backing file's device) gets BFQ's idling for each sequential
/// reader as a disk would. The same two readers on the same fast device (8 channels,
/// 100 µs a request) replayed with the recorded flag: with rotational=1 BFQ idles for each
/// reader in turn while the other waits and the device has room (measured 45.9 ms idle,
/// 25.1 MB/s); with rotational=0 it idles less (two readers at one request each show it no
/// queueing, so it still idles for sequential ones: 16.7 ms) and the readers go at twice the
/// rate (54.7 MB/s). Before the flag was used, both replays were the second.
#[test]
fn bfq_idles_by_the_recorded_rotational_flag_not_the_fitted_device() {
    let flash = DeviceModel::Flash(crate::device::FlashModel {
        latency_ns: 100_000.0,
        ns_per_sector: 0.0,
        parallelism: 8,
        write_latency_ns: None,
        write_ns_per_sector: None,
    });
    let idle_ms = |flag: bool| {
        let mut w = empty_workload(vec![stream(300, "a", 1), stream(301, "b", 1)]);
        w.device = crate::scenarios::device("loop0", "none", flag);
        push_sequential_readers(&mut w, 300, 8, 1 << 30, 50_000);
        w.max_in_driver = 2;
        let r = replayer(w, flash.clone());
        let bfq = run(&r, "bfq:low_latency=0");
        let idled: f64 = bfq.decision_counts.idle_ms_by_outcome.values().sum();
        (idled, bfq.summary.mb_per_s)
    };
    let (rot_idle, rot_mb) = idle_ms(true);
    let (nonrot_idle, nonrot_mb) = idle_ms(false);
    assert!(
        rot_idle > 2.0 * nonrot_idle,
        "BFQ idled {rot_idle} ms with rotational=1, {nonrot_idle} ms with 0"
    );
    assert!(
        rot_mb < 0.6 * nonrot_mb,
        "{rot_mb} against {nonrot_mb} MB/s"
    );
}
