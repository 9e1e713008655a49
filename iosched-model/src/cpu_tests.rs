//! The CPU charge end to end: a CPU-bound synthetic workload replayed under schedulers of
//! known per-request cost loses what the arithmetic says ([`crate::cpu`]).

use iosched_core::record::{CpuUse, HostProfile, SchedCost};

use crate::{
    cpu::{Bound, CpuModel, ProfileSource},
    device::{DeviceModel, FlashModel},
    replay::{Config, Replayer},
    scenarios::{device, empty, push_sequential_readers, stream},
    sched::Settings,
};

/// Four closed-loop readers on a 4-channel flash device, recorded under `none`.
fn replayer() -> Replayer {
    let mut w = empty((0..4).map(|p| stream(10 + p, "fio", 1)).collect());
    w.device = device("ram0", "none", false);
    push_sequential_readers(&mut w, 2000, 8, 1 << 30, 10_000);
    let dev = DeviceModel::Flash(FlashModel {
        latency_ns: 30_000.0,
        ns_per_sector: 0.0,
        parallelism: 4,
        write_latency_ns: None,
        write_ns_per_sector: None,
    });
    Replayer::new(w, Some(dev), vec![0, 1]).unwrap()
}

fn profile(deadline_ns: f64, bfq_ns: f64) -> HostProfile {
    let cost = |ns: f64| SchedCost {
        cpu_ns_per_request: ns,
        serial_ns_per_request: 0.0,
        ..Default::default()
    };
    HostProfile {
        profile_version: 1,
        source: "test".into(),
        online_cpus: 2,
        schedulers: [
            ("none".to_string(), cost(0.0)),
            ("mq-deadline".to_string(), cost(deadline_ns)),
            ("bfq".to_string(), cost(bfq_ns)),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

/// The synthetic recording's CPU context: its 8000 requests at the model's own rate under
/// `none` on 2 CPUs, `busy` of them busy; and the CPU time per request that makes.
fn recorded_cpu(r: &Replayer, busy: f64) -> (CpuUse, u64, f64) {
    let (recorded_iops, _) = iops(r, "none");
    let requests = 8000u64;
    let span_ns = (requests as f64 / recorded_iops * 1e9) as u64;
    let use_ = CpuUse::with_busy_share(span_ns, 2, busy);
    let w = use_.busy_ns as f64 / requests as f64;
    (use_, requests, w)
}

fn iops(r: &Replayer, spec: &str) -> (f64, crate::cpu::CpuCharge) {
    let run = r
        .run(&Config::parse(spec, &Settings::default()).unwrap())
        .unwrap();
    (run.summary.iops, run.cpu.unwrap())
}

#[test]
fn a_cpu_bound_recording_loses_exactly_what_each_schedulers_cost_takes() {
    let mut r = replayer();
    // The recording: what the model does as recorded, on a machine whose 2 CPUs were all
    // busy: w = 2 CPUs x span / requests.
    let (recorded_iops, _) = iops(&r, "none");
    let (use_, requests, w) = recorded_cpu(&r, 1.0);
    // mq-deadline adds a quarter of w, bfq as much as w.
    r.cpu = CpuModel::new(
        profile(w / 4.0, w),
        ProfileSource::Given("test".into()),
        Some(use_),
        requests,
        Some("none"),
    );
    let (none, c) = iops(&r, "none");
    assert_eq!(c.bound, Bound::Neither, "{c:?}");
    assert!(
        (none - recorded_iops).abs() / recorded_iops < 0.01,
        "{none} vs {recorded_iops}"
    );
    for (spec, added, expected_ratio) in [("mq-deadline", w / 4.0, 0.8), ("bfq", w, 0.5)] {
        let (got, c) = iops(&r, spec);
        let arithmetic = 2e9 / (w + added);
        assert_eq!(c.bound, Bound::Cpu, "{spec}: {c:?}");
        assert!(
            (got - arithmetic).abs() / arithmetic < 0.02,
            "{spec}: {got:.0} IOPS, the arithmetic gives {arithmetic:.0}"
        );
        assert!(
            (got / none - expected_ratio).abs() < 0.02,
            "{spec}: {got} / {none}"
        );
    }
}

#[test]
fn a_quarter_busy_machine_loses_a_quarter_of_what_a_saturated_one_would() {
    let mut r = replayer();
    // A quarter busy: bfq's cost of w doubles the CPUs' quarter of each request's cycle.
    let (use_, requests, w) = recorded_cpu(&r, 0.25);
    r.cpu = CpuModel::new(
        profile(0.0, w),
        ProfileSource::Given("test".into()),
        Some(use_),
        requests,
        Some("none"),
    );
    let (bfq, c) = iops(&r, "bfq");
    assert_eq!(c.bound, Bound::CpuShare, "{c:?}");
    let (uncharged, _) = {
        let mut plain = replayer();
        plain.cpu = CpuModel::new(profile(0.0, 0.0), ProfileSource::Defaults, None, 0, None);
        iops(&plain, "bfq")
    };
    assert!(
        (bfq * 1.25 - uncharged).abs() / uncharged < 0.02,
        "{bfq} vs {uncharged} / 1.25"
    );
}

/// The explanation of the replayer's workload recorded under bfq, the machine `busy` (share
/// of its 2 CPUs) over the recording's span, with the host profile `profile` makes of each
/// request's busy CPU time (ns) and the recorded rate (requests/s).
fn explain_bfq_recording(
    busy: f64,
    profile: impl FnOnce(f64, f64) -> HostProfile,
) -> crate::explain::Explanation {
    use iosched_core::source::MemorySource;

    use crate::{explain, scenarios::trace, sched::SchedKind, workload};
    let base = replayer();
    let mut info = base.workload.device.clone();
    info.scheduler = Some("bfq".into());
    let events = trace(
        &base.workload,
        &base.device,
        SchedKind::Bfq,
        &Settings::default(),
    )
    .unwrap();
    let mut src = MemorySource::new(vec![info.clone()], events.clone());
    let mut w = workload::extract(&mut src, None).unwrap();
    let requests = w.service.len() as u64;
    let span_ns = w.end_ns - w.start_ns;
    let cpu = CpuUse::with_busy_share(span_ns, 2, busy);
    w.host_profile = Some(profile(
        cpu.busy_ns as f64 / requests as f64,
        requests as f64 * 1e9 / span_ns as f64,
    ));
    w.cpu = Some(cpu);
    let r = Replayer::new(w, Some(base.device.clone()), vec![0, 1]).unwrap();
    assert_eq!(r.cpu.profile_source, ProfileSource::Recording);
    let mut src = MemorySource::new(vec![info], events);
    let (recorded, report) = crate::replay::recorded_summary(&mut src, &r.workload).unwrap();
    explain::explain(&r, &recorded, &report).unwrap()
}

/// `explain`'s scheduler-cost claim, which must be there.
fn sched_cost_claim(
    e: &crate::explain::Explanation,
) -> (&crate::explain::Finding, &crate::explain::sched_cost::Claim) {
    use crate::explain::{Cause, Claim};
    let f = e
        .findings
        .iter()
        .find(|f| f.cause == Cause::SchedulerCost)
        .unwrap_or_else(|| panic!("{:#?}", e.findings));
    let Claim::SchedCost(c) = &f.claim else {
        panic!("{:?}", f.claim)
    };
    (f, c)
}

#[test]
fn explain_names_a_cpu_bound_schedulers_own_cost_and_what_none_would_do() {
    use crate::explain::{self, Verdict};
    // Every CPU busy; bfq's cost half of each request's CPU time.
    let e = explain_bfq_recording(1.0, |w, _| profile(w / 4.0, w / 2.0));
    assert!(e.model_check.reproduces(), "{:?}", e.model_check);
    let (f, c) = sched_cost_claim(&e);
    assert_eq!(c.bound, explain::sched_cost::Bound::Cpu);
    // Under none each request costs half as much CPU: twice the rate, the arithmetic's.
    let est = f.estimate.as_ref().unwrap();
    assert!((est.change_pct - 100.0).abs() < 5.0, "{est:?}");
    // mq-deadline (a quarter) as the alternative: 2 / 1.5 - 1 = +33%.
    assert!(
        f.alternatives
            .iter()
            .any(|a| (a.change_pct - 100.0 / 3.0).abs() < 5.0),
        "{:?}",
        f.alternatives
    );
    assert!(matches!(e.verdict, Verdict::Findings(_)), "{:?}", e.verdict);
}

#[test]
fn explain_calls_a_recording_lock_bound_only_on_a_hold_it_does_not_contradict() {
    use crate::explain::sched_cost::Bound as Found;
    // Half the machine busy, bfq's CPU time half of each request's (a cost worth naming
    // either way), and bfq's lock held long enough to allow `cap` times the recorded rate.
    let with_lock = |cap: f64| {
        explain_bfq_recording(0.5, move |w, rate| {
            let mut p = profile(w / 4.0, w / 2.0);
            p.schedulers.get_mut("bfq").unwrap().serial_ns_per_request = 1e9 / (rate * cap);
            p
        })
    };
    // A hold that allows a little more than the recording did: the lock is what bound it.
    let near = with_lock(1.1);
    let (_, c) = sched_cost_claim(&near);
    assert_eq!(c.bound, Found::Lock, "{c:?}");
    assert!(c.lock_cap_iops.is_some(), "{c:?}");
    // A hold that would cap it at half of what it reached: the recording contradicts the
    // calibration, so no lock-bound claim and no lock cap are made of it (the replay clamps
    // the hold the same way; the cost is still named, from the CPU share).
    let contradicted = with_lock(0.5);
    let (_, c) = sched_cost_claim(&contradicted);
    assert_eq!(c.bound, Found::Share, "{c:?}");
    assert_eq!(c.lock_cap_iops, None, "{c:?}");
    assert!(
        contradicted.model_check.reproduces(),
        "{:?}",
        contradicted.model_check
    );
}

#[test]
fn explain_names_a_schedulers_cost_below_a_fifth_of_the_machine_when_none_gains_from_it() {
    use crate::explain::{self, Verdict};
    // 60% busy, bfq's cost a quarter of each request's CPU time: 15% of the machine's CPU
    // time, under the 20% that names a cost by its share alone. Under none each request's
    // cycle loses 0.6 x 1/4 of its length: 1 / 0.85 = +17.6%, more than explain's 10%.
    let e = explain_bfq_recording(0.6, |w, _| profile(w / 8.0, w / 4.0));
    assert!(e.model_check.reproduces(), "{:?}", e.model_check);
    let (f, c) = sched_cost_claim(&e);
    assert_eq!(c.bound, explain::sched_cost::Bound::Share, "{c:?}");
    let share = c.cpu_share.unwrap();
    assert!((share - 0.15).abs() < 0.01, "{share}");
    let est = f.estimate.as_ref().unwrap();
    assert!((est.change_pct - 17.6).abs() < 3.0, "{est:?}");
    assert!(matches!(e.verdict, Verdict::Findings(_)), "{:?}", e.verdict);
}

#[test]
fn explain_names_no_cost_too_small_to_gain_from() {
    use crate::explain::{Cause, Verdict};
    // 60% busy, bfq's cost 5% of each request's CPU time: none gains 1 / 0.97 = +3%.
    let e = explain_bfq_recording(0.6, |w, _| profile(w / 40.0, w / 20.0));
    assert!(
        e.findings.iter().all(|f| f.cause != Cause::SchedulerCost),
        "{:#?}",
        e.findings
    );
    assert!(
        !matches!(e.verdict, Verdict::Unnamed { .. }),
        "{:?}",
        e.verdict
    );
}
