//! BFQ's unit tests: budget timeouts on jiffies, expirations, idling and injection, soft
//! real-time raising, think time and seekiness, group weights, queue merging and splits,
//! I/O priority weights, the peak rate.

use crate::sched::{Ctx, Decision, ExpireReason, IdleReason, MergeWhy, SchedEnv, Settings};

use super::peak_rate::RateEstimator;
use super::queues::{DEFAULT_WEIGHT, ioprio_weight};
use super::weight_raising::{SOFTRT_COEFF, WR_COEFF, WR_RT_MAX_TIME_NS};
use super::wf2q::DEFAULT_MAX_BUDGET;
use super::*;

fn env() -> SchedEnv {
    SchedEnv {
        rotational: true,
        kernel: 6018,
        peak_sectors_per_sec: 1e6,
        root_cgroups: vec![0],
        stream_ioprio: vec![0, 0],
        max_budget_start: None,
    }
}

fn rq(stream: u32, sector: u64, inserted: u64) -> super::super::Rq {
    super::super::Rq {
        stream,
        cgroup: 0,
        sector,
        sectors: 8,
        op: iosched_core::event::Op::Read,
        sync: true,
        meta: false,
        ioprio: 0,
        inserted,
        state: super::super::RqState::Queued,
        head_io: 0,
        tail_io: 0,
        bios: 1,
    }
}

fn ctx<'a>(now: u64, rqs: &'a [super::super::Rq], remaining: &'a [u32]) -> Ctx<'a> {
    Ctx {
        now,
        rqs,
        in_driver: 0,
        depth: 32,
        rotational: true,
        remaining,
        last_io_at: &[],
    }
}

/// `jiffies + bfq_timeout`: with timeout_sync=124 at HZ=250 (31 jiffies), a queue put
/// in service 3.9 ms into jiffy 0 times out at the tick 124 ms after jiffy 0, i.e.
/// after 120.1 ms, not 124 or 125 ms after it was put in service.
#[test]
fn the_budget_timeout_falls_on_a_jiffy() {
    // low_latency=0: a new queue is not weight-raised (a raised one's timeout is 30x).
    let mut b = Bfq::new(
        &Settings::parse_pairs(&["timeout_sync=124".into(), "low_latency=0".into()]).unwrap(),
        &env(),
    )
    .unwrap();
    let rqs = [rq(0, 0, 3_900_000)];
    let rem = [1u32, 0];
    b.insert(&ctx(3_900_000, &rqs, &rem), 0);
    assert_eq!(b.dispatch(&ctx(3_900_000, &rqs, &rem)), Some(0));
    assert_eq!(b.queues[0].budget_timeout, 124_000_000);
    assert!(!b.budget_timed_out(0, 123_999_999));
    assert!(b.budget_timed_out(0, 124_000_000));
    // The kernel's default without the tunable: HZ / 8 jiffies.
    let d = Bfq::new(&Settings::default(), &env()).unwrap();
    assert_eq!(d.timeout_jiffies * d.jiffy_ns, 124_000_000);
}

/// 6.x `bfq_select_queue`: a timed-out queue that is empty and worth idling for is not
/// expired at a dispatch opportunity (the idle timer or its next request will, as a
/// budget timeout); and nothing expires right after a dispatch.
#[test]
fn a_timed_out_queue_worth_idling_for_expires_as_a_budget_timeout_on_arrival() {
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &env()).unwrap();
    let rqs = [rq(0, 0, 0), rq(0, 8, 130_000_000)];
    let rem = [1u32, 0];
    b.insert(&ctx(0, &rqs, &rem), 0);
    assert_eq!(b.dispatch(&ctx(0, &rqs, &rem)), Some(0));
    // Completed after the timeout: empty, sequential, one busy queue: it idles.
    b.completed(&ctx(126_000_000, &rqs, &rem), 0);
    assert!(b.wait_request, "{:?}", b.decisions);
    assert_eq!(b.in_service, Some(0));
    assert_eq!(b.dispatch(&ctx(127_000_000, &rqs, &rem)), None);
    assert_eq!(b.in_service, Some(0));
    // Its next request arrives: expired for its budget timeout, not served on.
    let rem = [0u32, 0];
    b.insert(&ctx(130_000_000, &rqs, &rem), 1);
    let reasons: Vec<ExpireReason> = b
        .take_decisions()
        .into_iter()
        .filter_map(|d| match d.d {
            Decision::Expire { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(reasons, [ExpireReason::BudgetTimeout]);
}

/// `bfq_check_fifo`: a queue put in service after its oldest request waited longer than
/// fifo_expire_sync (125 ms) serves that one first, not the first in sector order, and
/// what select_queue checked the budget against is what it dispatches.
#[test]
fn an_expired_fifo_head_is_served_first() {
    // The older request is far out; the younger one is where the queue's last request
    // ended.
    let rqs = [rq(0, 1 << 20, 0), rq(0, 0, 0)];
    let rem = [2u32, 0];
    let first_at = |now: u64| {
        let mut b = Bfq::new(&Settings::default(), &env()).unwrap();
        b.insert(&ctx(0, &rqs, &rem), 0);
        b.insert(&ctx(0, &rqs, &rem), 1);
        b.queues[0].last_pos = 0;
        let first = b.dispatch(&ctx(now, &rqs, &rem));
        (first, b.dispatch(&ctx(now, &rqs, &rem)))
    };
    // Before the expiry: sector order from the last position.
    assert_eq!(first_at(100_000_000), (Some(1), Some(0)));
    // After it: the FIFO's head, then (checked once per service period) sector order.
    assert_eq!(first_at(200_000_000), (Some(0), Some(1)));
}

/// `bfq_asymmetric_scenario`: no idling for the queue of the smallest weight.
#[test]
fn no_asymmetric_idling_for_the_lightest_queue() {
    let mut e = env();
    e.stream_ioprio = vec![(2 << 13) | 6, (2 << 13) | 3];
    let mut b = Bfq::new(&Settings::default(), &e).unwrap();
    let rqs = [rq(0, 0, 0), rq(1, 1 << 20, 0)];
    let rem = [1u32, 1];
    b.insert(&ctx(0, &rqs, &rem), 0);
    b.insert(&ctx(0, &rqs, &rem), 1);
    assert_eq!(b.asymmetric(0), None, "weight 20 is the smallest");
    assert_eq!(b.asymmetric(1), Some(IdleReason::AsymmetricWeights));
}

/// Soft real-time raising (`bfq_bfqq_handle_idle_busy_switch`,
/// `bfq_bfqq_softrt_next_start`, `bfq_set_budget_timeout`). A reader is
/// interactive-raised at its first request (a new queue counts as idle for long), then
/// expires too idle (8 ms slice_idle, 20 ms for a raised queue) at 20.5 ms with nothing
/// in flight: it may be deemed soft real-time from 20.5 + 8 + 4 jiffies (16 ms) =
/// 44.5 ms on (its 8 sectors at 7000 sectors/s bound it to 1.1 ms only). Its next
/// request at 100 ms is not "idle for long" (the overloaded `budget_timeout` holds
/// 20.5 ms: 2 s have not passed): it switches to soft real-time raising (x3000 for
/// 300 ms), whose budget timeout is 1 x timeout_sync, not 30 x. Arriving at 40 ms
/// instead, before the bound, it stays interactive.
#[test]
fn a_queue_back_after_an_isochronous_pause_is_soft_real_time() {
    let run = |back: u64| {
        let mut b = Bfq::new(&Settings::default(), &env()).unwrap();
        let rqs = [rq(0, 0, 0), rq(0, 8, back)];
        let rem = [1u32, 0];
        b.insert(&ctx(0, &rqs, &rem), 0);
        assert_eq!(b.dispatch(&ctx(0, &rqs, &rem)), Some(0));
        assert_eq!(b.queues[0].wr_coeff, WR_COEFF);
        b.completed(&ctx(500_000, &rqs, &rem), 0);
        assert!(b.wait_request);
        assert_eq!(b.next_timer(), Some(20_500_000));
        b.timer(&ctx(20_500_000, &rqs, &rem));
        assert_eq!(
            expirations(&mut b),
            [(0, ExpireReason::TooIdle)],
            "too idle at the timer"
        );
        let rem = [0u32, 0];
        b.insert(&ctx(back, &rqs, &rem), 1);
        assert_eq!(b.dispatch(&ctx(back, &rqs, &rem)), Some(1));
        let q = &b.queues[0];
        (
            q.wr_coeff,
            q.wr_dur,
            q.budget_timeout - (back - back % b.jiffy_ns),
        )
    };
    let timeout = 124_000_000;
    assert_eq!(run(100_000_000), (SOFTRT_COEFF, WR_RT_MAX_TIME_NS, timeout));
    let (coeff, _, slot) = run(40_000_000);
    assert_eq!((coeff, slot), (WR_COEFF, 30 * timeout));
}

/// `__bfq_bfqq_expire` (5.3+): dd, in a cgroup of its own with a write in flight and
/// nothing queued, is preempted by jbd2's newly raised queue in the root group (its
/// weight, 1200, above dd's group's 100). Two groups have pending I/O, so dd still needs
/// idling for its guarantees: it stays busy (requeued). Had dd no more I/O to come
/// (its process gone), it would leave the busy set.
#[test]
fn an_empty_queue_preempted_while_it_needs_idling_stays_busy() {
    let run = |dd_future: u32| {
        let mut b = Bfq::new(&Settings::default(), &env()).unwrap();
        let mut rqs = [rq(0, 0, 0), rq(1, 1 << 20, 100_000)];
        rqs[0].cgroup = 500;
        let rem = [dd_future + 1, 1];
        b.insert(&ctx(0, &rqs, &rem), 0);
        assert_eq!(b.dispatch(&ctx(0, &rqs, &rem)), Some(0));
        let rem = [dd_future, 0];
        b.insert(&ctx(100_000, &rqs, &rem), 1);
        let expired = expirations(&mut b);
        assert_eq!(expired, [(0, ExpireReason::Preempted)]);
        b.queues[0].busy
    };
    assert!(run(1), "requeued");
    assert!(!run(0), "gone: not requeued");
}

/// A reader that sends its next 4 KiB read 100 µs after each completion: its think
/// time is short, yet since 6.9 the first sample of a new queue counts 2 x slice_idle
/// (16 ms), so the mean, valid from the third sample on, is 4.7 ms > slice_idle / 2
/// there, and 3.3 ms at the fourth. BFQ's log of seed 004's 32 random readers says
/// the same of every queue: `short_ttime` 1, 1, 0, then 1 at its expirations. Before
/// 6.9 the first sample is the few µs since the queue was created.
#[test]
fn a_new_queue_has_a_long_think_time_at_its_third_request_since_6_9() {
    let run = |kernel: u32| {
        let mut e = env();
        e.kernel = kernel;
        let mut b = Bfq::new(&Settings::default(), &e).unwrap();
        let t = |k: u64| k * 600_000;
        let rqs: Vec<_> = (0..5).map(|k| rq(0, k * 8, t(k))).collect();
        let mut short = Vec::new();
        for k in 0..5u64 {
            let rem = [4 - k as u32, 0];
            b.insert(&ctx(t(k), &rqs, &rem), k as u32);
            short.push(b.short_ttime(0));
            assert_eq!(b.dispatch(&ctx(t(k), &rqs, &rem)), Some(k as u32));
            b.completed(&ctx(t(k) + 500_000, &rqs, &rem), k as u32);
            // Expired, as BFQ did with other queues waiting (its samples are taken
            // only when the queue is not busy).
            b.force_expire(
                &ctx(t(k) + 500_000, &rqs, &rem),
                ExpireReason::NoMoreRequests,
            );
        }
        short
    };
    assert_eq!(run(6018), [true, true, false, true, true]);
    assert_eq!(run(6008), [true; 5]);
}

/// `bfq_init_bfqq`: "first request is almost certainly seeky", so a queue's seek
/// history starts with one seeky request, and its first request (no position before
/// it) adds a sequential one. A random reader's queue is seeky (more than 19 seeky
/// requests in the last 32) at its 20th request, not its 21st.
#[test]
fn a_random_reader_is_seeky_at_its_twentieth_request() {
    let mut b = Bfq::new(&Settings::default(), &env()).unwrap();
    let t = |k: u64| k * 1_000_000;
    let rqs: Vec<_> = (0..21)
        .map(|k| rq(0, (k % 2) << 30 | k << 12, t(k)))
        .collect();
    let mut seeky = Vec::new();
    for k in 0..21u64 {
        let rem = [20 - k as u32, 0];
        b.insert(&ctx(t(k), &rqs, &rem), k as u32);
        seeky.push(b.queues[0].seeky());
        assert_eq!(b.dispatch(&ctx(t(k), &rqs, &rem)), Some(k as u32));
        b.completed(&ctx(t(k) + 500_000, &rqs, &rem), k as u32);
    }
    let first_seeky = seeky.iter().position(|s| *s).map(|i| i + 1);
    assert_eq!(first_seeky, Some(20), "{seeky:?}");
}

fn expirations(b: &mut Bfq) -> Vec<(u32, ExpireReason)> {
    b.take_decisions()
        .into_iter()
        .filter_map(|d| match d.d {
            Decision::Expire { stream, reason, .. } => Some((stream, reason)),
            _ => None,
        })
        .collect()
}

/// `bfq_remove_request`: a queue served by injection while another is in service,
/// and left empty, leaves the busy set with its budget and service reset. So it no
/// longer counts among the busy queues, and its next request finds no budget to
/// recover: it does not preempt the queue in service (dd and jbd2 in seed 001, where
/// jbd2's commits are injected into dd's idle slots).
#[test]
fn an_injected_queue_left_empty_leaves_the_busy_set() {
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &env()).unwrap();
    let rqs = [
        rq(0, 0, 0),
        rq(1, 1 << 20, 2_000_000),
        rq(1, 1 << 21, 4_000_000),
    ];
    let rem = [1u32, 1];
    b.insert(&ctx(0, &rqs, &rem), 0);
    assert_eq!(b.dispatch(&ctx(0, &rqs, &rem)), Some(0));
    b.completed(&ctx(1_000_000, &rqs, &rem), 0);
    assert!(b.wait_request, "the only busy queue idles");
    b.insert(&ctx(2_000_000, &rqs, &rem), 1);
    let (a, w) = (b.queue_of[0] as usize, b.queue_of[1] as usize);
    assert_eq!(b.busy, 2);
    // The newcomer is the idling queue's waker: its request is injected.
    b.queues[a].waker = Some(w);
    assert_eq!(b.dispatch(&ctx(2_000_000, &rqs, &rem)), Some(1));
    assert_eq!(b.in_service, Some(a));
    assert!(!b.queues[w].busy);
    assert_eq!((b.busy, b.queues[w].budget, b.queues[w].service), (1, 0, 0));
    b.take_decisions();
    // Its next request: nothing to recover, same weight, idling still worth it.
    b.completed(&ctx(3_000_000, &rqs, &rem), 1);
    b.insert(&ctx(4_000_000, &rqs, &rem), 2);
    assert_eq!(expirations(&mut b), []);
    assert_eq!(b.in_service, Some(a));
}

/// A queue in a child cgroup (seed 001's dd in its blkio group) against queues of the
/// root group: `bfq_bfqq_higher_class_or_weight` compares the entities that meet in
/// the root's scheduler, the group (weight 100) and the root queue; since 6.1 the
/// root group counts among the groups with pending requests, and idling is needed
/// only with more than one.
#[test]
fn weights_compare_and_groups_count_across_the_hierarchy() {
    let mut e = env();
    e.stream_ioprio = vec![0, (2 << 13) | 3];
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &e).unwrap();
    let mut child = rq(0, 0, 0);
    child.cgroup = 5;
    let rqs = [child, rq(1, 1 << 20, 0)];
    let rem = [1u32, 1];
    b.insert(&ctx(0, &rqs, &rem), 0);
    let (c, r) = (0, 1);
    // The child group alone: one group (6.1+), so no idling for cgroups; before 6.1
    // any non-root group with pending requests was enough.
    assert!(!b.groups_with_pending_exceed());
    b.kernel = 5010;
    assert!(b.groups_with_pending_exceed());
    b.kernel = 6018;
    b.insert(&ctx(0, &rqs, &rem), 1);
    assert!(b.groups_with_pending_exceed(), "root and child: two groups");
    // Weight 50 (level 3) outweighs the child's queue (40), not its group (100).
    assert!(!b.higher_weight(r, c));
    assert!(b.higher_weight(c, r), "group 100 against 50");
    b.queues[r].wr_coeff = WR_COEFF;
    assert!(
        b.higher_weight(r, c),
        "raised: 1500 against the group's 100"
    );
    // In one group, the queues themselves.
    b.queues[r].wr_coeff = 1;
    b.queues[c].cgroup = 0;
    b.queues[c].root_group = true;
    assert!(b.higher_weight(r, c));
}

/// The trace-driven check hands the model BFQ's own max budget once BFQ logs it;
/// the model's estimator no longer moves it.
#[test]
fn a_logged_max_budget_is_the_one_used() {
    let mut e = env();
    e.max_budget_start = Some(3000);
    let mut b = Bfq::new(&Settings::default(), &e).unwrap();
    assert_eq!(b.bfq_max_budget(), 3000);
    b.force_max_budget(5829);
    assert_eq!(b.bfq_max_budget(), 5829);
    // A closing rate window at a very different rate changes nothing.
    let mut t = 0;
    for k in 0..40_000u64 {
        b.rate.dispatched(t, k * 8, 8, 1, t.saturating_sub(10_000));
        t += 50_000;
    }
    assert_eq!(b.bfq_max_budget(), 5829);
    // Fresh: the kernel's default max budget until BFQ has measured.
    let b = Bfq::new(&Settings::default(), &env()).unwrap();
    assert_eq!(b.rate.max_budget, DEFAULT_MAX_BUDGET);
}

/// Two readers, each with one request at a time (iodepth 1): each issues its next
/// request (`sector_of(stream, k)`) 50 µs after the previous one completes; the device
/// takes 1 ms per request, one at a time. Returns the dispatches (stream, sector) and
/// the decisions, from `t0` on.
fn two_readers(
    b: &mut Bfq,
    per_stream: u64,
    t0: u64,
    sector_of: impl Fn(u32, u64) -> u64,
) -> (Vec<(u32, u64)>, Vec<Decision>) {
    let mut rqs = Vec::new();
    let mut served = Vec::new();
    let mut decisions = Vec::new();
    let rem = [1u32, 1];
    let mut next_k = [0u64; 2];
    // (time, stream) of the next arrivals.
    let mut arrivals: Vec<(u64, u32)> = vec![(t0, 0), (t0, 1)];
    let mut t = t0;
    loop {
        arrivals.sort();
        while let Some(&(ta, s)) = arrivals.first()
            && ta <= t
        {
            arrivals.remove(0);
            rqs.push(rq(s, sector_of(s, next_k[s as usize]), ta));
            next_k[s as usize] += 1;
            b.insert(&ctx(t, &rqs, &rem), rqs.len() as u32 - 1);
        }
        if let Some(r) = b.dispatch(&ctx(t, &rqs, &rem)) {
            let (s, sector) = (rqs[r as usize].stream, rqs[r as usize].sector);
            served.push((s, sector));
            t += 1_000_000;
            b.completed(&ctx(t, &rqs, &rem), r);
            if next_k[s as usize] < per_stream {
                arrivals.push((t + 50_000, s));
            }
        } else {
            let next = arrivals.iter().map(|a| a.0).min();
            match (b.next_timer(), next) {
                (Some(tt), Some(ta)) if tt < ta => {
                    t = tt;
                    b.timer(&ctx(t, &rqs, &rem));
                }
                (Some(tt), None) => {
                    t = tt;
                    b.timer(&ctx(t, &rqs, &rem));
                }
                (_, Some(ta)) => t = t.max(ta),
                (None, None) => break,
            }
        }
        decisions.extend(b.take_decisions().into_iter().map(|d| d.d));
    }
    (served, decisions)
}

fn merge_decisions(d: &[Decision]) -> Vec<&Decision> {
    d.iter()
        .filter(|d| matches!(d, Decision::Merge { .. } | Decision::Split { .. }))
        .collect()
}

/// Two processes reading interleaved 4 KiB blocks of one range (strided, as fio
/// numjobs=2 on one file): a request close to the other queue's next one (within
/// `BFQQ_CLOSE_THR`) merges their queues (EQM). From then on one shared queue serves
/// both in sector order: one sequential stream, no switch between the processes.
#[test]
fn interleaved_readers_share_one_queue_served_in_sector_order() {
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &env()).unwrap();
    let (served, d) = two_readers(&mut b, 40, 0, |s, k| (2 * k + u64::from(s)) * 8);
    let m = merge_decisions(&d);
    assert!(
        matches!(
            m[..],
            [Decision::Merge {
                why: MergeWhy::Close,
                ..
            }]
        ),
        "{m:?}"
    );
    let (a, c) = (b.queue_of_stream(0, true, 0), b.queue_of_stream(1, true, 0));
    assert_eq!(a, c, "one queue for both");
    assert!(b.queues[a.unwrap()].shared);
    // After the merge, only the queue left behind expires (and the shared one once
    // both readers stop, too idle); the shared queue serves the blocks in order,
    // alternating processes, without an expiration.
    let merged_at = d
        .iter()
        .position(|d| matches!(d, Decision::Merge { .. }))
        .unwrap();
    let expirations: Vec<(bool, ExpireReason)> = d[merged_at..]
        .iter()
        .filter_map(|d| match d {
            Decision::Expire { shared, reason, .. } => Some((*shared, *reason)),
            _ => None,
        })
        .collect();
    assert_eq!(
        expirations,
        [
            (false, ExpireReason::Preempted),
            (true, ExpireReason::TooIdle)
        ],
        "{d:?}"
    );
    let tail: Vec<u64> = served[served.len() - 60..].iter().map(|x| x.1).collect();
    assert!(tail.windows(2).all(|w| w[1] == w[0] + 8), "{served:?}");
}

/// Two sequential readers 512 MiB apart, created together: never close, and the
/// stable merge scheduled at their creation is refused >= 600 ms later because
/// idling boosts a sequential reader's throughput (low_latency=0: nothing raised).
#[test]
fn readers_far_apart_are_never_merged() {
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &env()).unwrap();
    let (_, d) = two_readers(&mut b, 500, 0, |s, k| u64::from(s) * (1 << 20) + k * 8);
    assert!(
        b.now > 700_000_000,
        "past the delayed stable merge: {}",
        b.now
    );
    assert_eq!(merge_decisions(&d), Vec::<&Decision>::new());
    assert_ne!(b.queue_of_stream(0, true, 0), b.queue_of_stream(1, true, 0));
    // The stable merge was scheduled, and tried (once).
    assert_eq!(b.stable_target.get(1).copied().flatten(), None);
    assert!(b.stable_scheduled.get(1).copied().unwrap_or(false));
}

/// A queue merged for being close that then turns seeky (both processes jump around)
/// is marked at an expiration and split at the next request of each process
/// (`bfq_get_bfqq_handle_split`): each gets a queue of its own again.
#[test]
fn a_merged_queue_gone_seeky_is_split() {
    let settings = Settings::parse_pairs(&["low_latency=0".into()]).unwrap();
    let mut b = Bfq::new(&settings, &env()).unwrap();
    // Interleaved for 10 blocks each, then random blocks far apart.
    let sector = |s: u32, k: u64| {
        if k < 10 {
            (2 * k + u64::from(s)) * 8
        } else {
            ((k * 7919 + u64::from(s) * 104_729) % 997) << 16
        }
    };
    let (_, d) = two_readers(&mut b, 80, 0, sector);
    let m = merge_decisions(&d);
    assert!(matches!(m.first(), Some(Decision::Merge { .. })), "{m:?}");
    assert!(
        m.iter().any(|d| matches!(d, Decision::Split { .. })),
        "{m:?}"
    );
    assert_ne!(b.queue_of_stream(0, true, 0), b.queue_of_stream(1, true, 0));
}

/// On a non-rotational device with queueing, queues created within the burst
/// interval are merged at once (early stable merge) and, stably merged, never split
/// however seeky their I/O.
#[test]
fn stably_merged_queues_are_never_split() {
    let mut e = env();
    e.rotational = false;
    let mut b = Bfq::new(&Settings::default(), &e).unwrap();
    let (_, d) = two_readers(&mut b, 80, 0, |s, k| {
        ((k * 7919 + u64::from(s) * 104_729) % 997) << 16
    });
    let m = merge_decisions(&d);
    assert!(
        matches!(
            m[..],
            [Decision::Merge {
                why: MergeWhy::StableEarly,
                ..
            }]
        ),
        "{m:?}"
    );
    assert_eq!(b.queue_of_stream(0, true, 0), b.queue_of_stream(1, true, 0));
}

#[test]
fn weights_follow_the_io_priority_level() {
    assert_eq!(ioprio_weight(0), DEFAULT_WEIGHT);
    assert_eq!(ioprio_weight((2 << 13) | 4), 40.0);
    assert_eq!(ioprio_weight((2 << 13) | 6), 20.0);
    assert_eq!(ioprio_weight((2 << 13) | 3), 50.0);
    assert_eq!(ioprio_weight(1 << 13), 80.0);
}

#[test]
fn the_peak_rate_becomes_the_rate_a_sequential_stream_gets() {
    let env = SchedEnv {
        rotational: true,
        kernel: 6018,
        peak_sectors_per_sec: 1e6,
        root_cgroups: vec![],
        stream_ioprio: vec![],
        max_budget_start: None,
    };
    let timeout = 125_000_000;
    let mut r = RateEstimator::new(&env, timeout);
    // Fresh: 2/3 of the rotational reference rate.
    assert!((r.peak - 14_000.0 / 65536.0 * 1e6 * 2.0 / 3.0).abs() < 1.0);
    // 8 sectors every 250 µs, contiguous, one in flight: 32000 sectors/s. A window's
    // first sample is not counted sequential, so each 1 s window halves the distance
    // (divisor 10 - 9 x 3999/4000 = 2 in integers): 20 windows close it.
    let mut t = 0;
    for k in 0..80_000u64 {
        r.dispatched(t, k * 8, 8, 1, t.saturating_sub(10_000));
        t += 250_000;
    }
    assert!((r.peak / 32_000.0 - 1.0).abs() < 0.01, "{}", r.peak);
    assert_eq!(r.max_budget, (r.peak * 0.125) as u32);
    // A budget from the log says the rate the instance had already measured.
    let env = SchedEnv {
        max_budget_start: Some(3000),
        ..env
    };
    let r = RateEstimator::new(&env, timeout);
    assert_eq!(r.max_budget, 3000);
}
