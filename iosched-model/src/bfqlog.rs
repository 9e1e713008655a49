//! BFQ's own account of its decisions: the `m N bfq<pid><S|A> <message>` notes it writes
//! through the blktrace message path (`bfq_log_bfqq`), parsed into decisions comparable with
//! the model's.
//!
//! Owns: parsing note text. Must not: read files.

use serde::Serialize;

use super::sched::ExpireReason;

/// The pid BFQ's log gives a queue shared by several processes (after queue merging).
pub const SHARED: u32 = 0;

/// One parsed BFQ note.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum BfqLogged {
    InService {
        pid: u32,
        sync: bool,
    },
    Expire {
        pid: u32,
        sync: bool,
        reason: ExpireReason,
    },
    Idle {
        pid: u32,
        sync: bool,
    },
    Raise {
        pid: u32,
        sync: bool,
    },
    Inject {
        pid: u32,
        sync: bool,
    },
    /// The peak-rate estimator set `bfqd->bfq_max_budget` ("new max_budget = N").
    MaxBudget {
        sectors: u32,
    },
    /// `bfq_merge_bfqqs`: process `pid`'s sync I/O goes to the queue of `into` from now
    /// on ([`SHARED`] when that queue was already shared: BFQ prints its pid, -1, as an
    /// unsigned long).
    Merge {
        pid: u32,
        into: u32,
    },
    /// `bfq_split_bfqq` ("splitting queue"), logged under the shared queue's name.
    Split {
        pid: u32,
    },
    /// `bfq_exit_bfqq` ("exit_bfqq"): the process let go of its queue (it exited, or
    /// closed its I/O context).
    Exit {
        pid: u32,
    },
    Other {
        pid: Option<u32>,
        text: String,
    },
}

/// `enum bfqq_expiration` in kernel order.
fn reason_of(code: u32) -> Option<ExpireReason> {
    Some(match code {
        0 => ExpireReason::TooIdle,
        1 => ExpireReason::BudgetTimeout,
        2 => ExpireReason::BudgetExhausted,
        3 => ExpireReason::NoMoreRequests,
        4 => ExpireReason::Preempted,
        _ => return None,
    })
}

/// `bfq1350S` (optionally followed by a cgroup path) -> (pid, sync, rest of the text). A
/// queue shared by merged processes (`bfqSHARED-S`) has pid [`SHARED`].
fn queue_prefix(text: &str) -> Option<(u32, bool, &str)> {
    let rest = text.trim_start().strip_prefix("bfq")?;
    if let Some(shared) = rest.strip_prefix("SHARED-") {
        let sync = match shared.as_bytes().first() {
            Some(b'S') => true,
            Some(b'A') => false,
            _ => return None,
        };
        return Some((SHARED, sync, shared[1..].trim_start()));
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let pid: u32 = rest[..digits].parse().ok()?;
    let sync = match rest.as_bytes().get(digits) {
        Some(b'S') => true,
        Some(b'A') => false,
        _ => return None,
    };
    let mut tail = rest[digits + 1..].trim_start();
    // 6.x with cgroups prints the group path after the queue name.
    if tail.starts_with('/') {
        tail = tail.split_once(' ').map_or("", |(_, t)| t).trim_start();
    }
    Some((pid, sync, tail))
}

/// Parses one note's text (without the `m N` prefix blkparse adds).
pub fn parse(text: &str) -> BfqLogged {
    let Some((pid, sync, msg)) = queue_prefix(text) else {
        if let Some(sectors) = text
            .trim_start()
            .strip_prefix("bfq new max_budget = ")
            .and_then(|n| n.trim().parse().ok())
        {
            return BfqLogged::MaxBudget { sectors };
        }
        return BfqLogged::Other {
            pid: None,
            text: text.to_string(),
        };
    };
    if let Some(into) = msg.strip_prefix("merging with queue ") {
        // -1 printed as `%lu`, or as `%d`.
        let into = match into.trim().parse::<i64>() {
            Ok(p) if p > 0 && p <= i64::from(u32::MAX) => p as u32,
            _ => SHARED,
        };
        return BfqLogged::Merge { pid, into };
    }
    if msg.starts_with("splitting queue") {
        return BfqLogged::Split { pid };
    }
    if msg.starts_with("exit_bfqq") {
        return BfqLogged::Exit { pid };
    }
    if msg.starts_with("set_in_service_queue") {
        return BfqLogged::InService { pid, sync };
    }
    if let Some(args) = msg.strip_prefix("expire (") {
        let code = args
            .split([',', ')'])
            .next()
            .and_then(|c| c.trim().parse::<u32>().ok())
            .and_then(reason_of);
        if let Some(reason) = code {
            return BfqLogged::Expire { pid, sync, reason };
        }
    }
    if msg.contains("arm idle") || msg.starts_with("arm_slice_timer") {
        return BfqLogged::Idle { pid, sync };
    }
    if msg.contains("raising") && !msg.contains("end") {
        return BfqLogged::Raise { pid, sync };
    }
    if msg.contains("inject") {
        return BfqLogged::Inject { pid, sync };
    }
    BfqLogged::Other {
        pid: Some(pid),
        text: msg.to_string(),
    }
}

/// BFQ's `bfq_max_budget` when the log begins, once BFQ has assigned enough budgets to
/// trust its peak-rate estimate; `None` while it still uses the default (16384 sectors, for
/// its first 194 budgets in the kernel's decaying count, about 11 switches).
///
/// The first expiration's `recalc_budg: ... min budg M` says it: `bfq_min_budget` is
/// `bfq_max_budget / 32`, and both are the defaults until `budgets_assigned` reaches 194
/// (it never decreases, so a default there was a default at the start: the first
/// expiration follows the first budget). A fresh queue's first budget (`bfq_init_bfqq`:
/// 2/3 of `bfq_max_budget`) gives the value without the division's rounding, unless the
/// queue was weight-raised (its budget is then 2 x min budget, which says nothing more).
pub fn max_budget_at_start(notes: &[iosched_core::event::Note]) -> Option<u32> {
    let mut allocated = Vec::new();
    let mut first_budget: Option<u32> = None;
    for n in notes {
        let Some((pid, _, msg)) = queue_prefix(&n.text) else {
            continue;
        };
        if msg.starts_with("allocated") {
            allocated.push(pid);
        } else if let Some(b) = msg.strip_prefix("set_in_service_queue, cur-budget = ") {
            // Only a fresh queue's first budget says it; another's says its own history.
            if first_budget.is_none() && allocated.contains(&pid) {
                first_budget = b.trim().parse::<u32>().ok().map(|b| b * 3 / 2);
            }
            allocated.retain(|p| *p != pid);
        } else if let Some((_, min)) = msg
            .strip_prefix("recalc_budg: last max_budg ")
            .and_then(|r| r.split_once(", min budg "))
        {
            let max = min.trim().parse::<u32>().ok()? * 32;
            if max == DEFAULT_MAX_BUDGET {
                return None;
            }
            // Within the rounding of `/ 32` (and of 2/3), the fresh queue's figure.
            return Some(match first_budget {
                Some(b) if b.abs_diff(max) < 64 => b,
                _ => max,
            });
        }
    }
    // No expiration logged: only a fresh queue's budget, if any.
    first_budget.filter(|b| b.abs_diff(DEFAULT_MAX_BUDGET) > 2)
}

/// `bfq_default_max_budget`.
const DEFAULT_MAX_BUDGET: u32 = 16 * 1024;

/// How many of the log's expirations the model matched, in order, with the same key (a
/// longest common subsequence), over the log's count.
pub fn expiry_agreement<K: PartialEq>(model: &[K], log: &[K]) -> f64 {
    if log.is_empty() {
        return if model.is_empty() { 1.0 } else { 0.0 };
    }
    f64::from(common_in_order(model, log)) / log.len() as f64
}

/// The length of the longest common subsequence of `model` and `log`.
fn common_in_order<K: PartialEq>(model: &[K], log: &[K]) -> u32 {
    common_in_order_by(model, log, |m, l| m == l)
}

/// [`common_in_order`] with a match predicate.
fn common_in_order_by<M, L>(model: &[M], log: &[L], same: impl Fn(&M, &L) -> bool) -> u32 {
    // O(n·m) memory is too much for long traces: the two-row form.
    let mut prev = vec![0u32; model.len() + 1];
    let mut cur = vec![0u32; model.len() + 1];
    for l in log {
        for (j, m) in model.iter().enumerate() {
            cur[j + 1] = if same(m, l) {
                prev[j] + 1
            } else {
                cur[j].max(prev[j + 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[model.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_lines() {
        assert_eq!(
            parse("bfq1350S expire (0, slow 0, num_disp 0, short_ttime 1)"),
            BfqLogged::Expire {
                pid: 1350,
                sync: true,
                reason: ExpireReason::TooIdle
            }
        );
        assert_eq!(
            parse("bfq77A /user.slice expire (3, slow 0, num_disp 2, short_ttime 0)"),
            BfqLogged::Expire {
                pid: 77,
                sync: false,
                reason: ExpireReason::NoMoreRequests
            }
        );
        assert_eq!(
            parse("bfq new max_budget = 3078"),
            BfqLogged::MaxBudget { sectors: 3078 }
        );
        assert_eq!(
            parse("bfq12S set_in_service_queue, cur-budget = 10922"),
            BfqLogged::InService {
                pid: 12,
                sync: true
            }
        );
        assert_eq!(
            parse("bfqSHARED-S expire (2, slow 0, num_disp 0, short_ttime 1)"),
            BfqLogged::Expire {
                pid: SHARED,
                sync: true,
                reason: ExpireReason::BudgetExhausted
            }
        );
        assert_eq!(
            parse("bfq30259S merging with queue 30258"),
            BfqLogged::Merge {
                pid: 30259,
                into: 30258
            }
        );
        assert_eq!(
            parse("bfq30328S merging with queue 18446744073709551615"),
            BfqLogged::Merge {
                pid: 30328,
                into: SHARED
            }
        );
        assert_eq!(
            parse("bfqSHARED-S splitting queue"),
            BfqLogged::Split { pid: SHARED }
        );
        assert_eq!(
            parse("bfq22458S exit_bfqq: 0000000012757e9e, 2"),
            BfqLogged::Exit { pid: 22458 }
        );
        assert!(matches!(
            parse("bfq12S wr_busy 1 boosted 0 IO-bound 1"),
            BfqLogged::Other { pid: Some(12), .. }
        ));
        // Garbage and truncated lines are kept as text, never a panic.
        for bad in [
            "",
            "bfq",
            "bfqS",
            "bfq12",
            "bfq12X x",
            "expire (9",
            "bfq1S expire (9,",
        ] {
            assert!(matches!(parse(bad), BfqLogged::Other { .. }), "{bad}");
        }
    }

    #[test]
    fn agreement_counts_matches_in_order() {
        use ExpireReason::*;
        let log = [
            (1, TooIdle),
            (2, NoMoreRequests),
            (1, TooIdle),
            (2, Preempted),
        ];
        assert_eq!(expiry_agreement(&log, &log), 1.0);
        let model = [
            (1, TooIdle),
            (2, NoMoreRequests),
            (1, BudgetTimeout),
            (2, Preempted),
        ];
        assert_eq!(expiry_agreement(&model, &log), 0.75);
        assert_eq!(expiry_agreement::<(u32, ExpireReason)>(&[], &log), 0.0);
    }
}

/// Where a queue was expired: its process, how many of its requests it had dispatched by
/// then (the index of the last one, in the process's own order), and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpiryPoint {
    pub pid: u32,
    pub served: Option<u32>,
    pub reason: ExpireReason,
    /// Requests of the process dispatched since its previous expiration (its slot).
    pub slot: u32,
}

impl ExpiryPoint {
    /// Within 5% of the slot (at least one request): a time-based expiration (timeout,
    /// idling) lands a few requests apart when the model's timing differs by a percent.
    fn near(&self, log: &ExpiryPoint) -> bool {
        let tol = (log.slot / 20).max(1);
        self.pid == log.pid
            && match (self.served, log.served) {
                (Some(a), Some(b)) => a.abs_diff(b) <= tol,
                (a, b) => a == b,
            }
    }
}

/// A dispatch: (ns, pid, index of the request in its process's order).
pub type DispatchPoint = (u64, u32, u64);

/// Dispatches in time order.
pub type Dispatches = [DispatchPoint];

/// BFQ's log against the model's decisions for the same trace.
///
/// The model replays the workload with its own timing, so its expirations cannot be
/// aligned with the log's by time, and aligning them by order alone rewards a model that
/// expires queues at every turn (each log entry finds a partner somewhere). Here an
/// expiration is placed by the *point* it happened: the expired process and the last
/// request that process had dispatched (both runs serve the same requests: the
/// recording's), within 5% of the slot's requests. Two expirations agree when they are at
/// the same point for the same reason; the sequences are matched in order (longest common subsequence), and the
/// agreement is over the larger of the two counts, so missing and extra switches both
/// count against it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LogComparison {
    pub log_switches: u64,
    pub model_switches: u64,
    pub log_expirations: std::collections::BTreeMap<&'static str, u64>,
    pub model_expirations: std::collections::BTreeMap<&'static str, u64>,
    /// Expirations at the same point with the same reason, in order.
    pub matched: u64,
    /// Expirations at the same point whatever the reason.
    pub matched_points: u64,
    /// `matched` over the larger of the two expiration counts, %: the agreement.
    pub agreement_pct: f64,
    /// `matched` over the log's expirations, %: the share of BFQ's switches the model made.
    pub expirations_matched_pct: f64,
    /// `matched_points` over the larger count, %: switches at the right point, any reason.
    pub points_agreement_pct: f64,
    /// BFQ merged queues of different processes (its log names them `SHARED`; so does
    /// the comparison for the model's merged queues).
    pub log_has_shared_queues: bool,
}

/// The point of each expiration in `expiries` ((ns, pid, reason), in time order): the
/// last dispatch of that pid at or before it. A queue shared by merged processes
/// ([`SHARED`]) serves several processes' requests: its point is the count of all
/// dispatches so far (both runs dispatch the same requests).
fn placed(expiries: &[(u64, u32, ExpireReason)], dispatches: &Dispatches) -> Vec<ExpiryPoint> {
    let mut last: rustc_hash::FxHashMap<u32, u64> = rustc_hash::FxHashMap::default();
    let mut count: rustc_hash::FxHashMap<u32, u32> = rustc_hash::FxHashMap::default();
    let mut at_expiry: rustc_hash::FxHashMap<u32, u32> = rustc_hash::FxHashMap::default();
    let mut total = 0u32;
    let mut next = 0;
    expiries
        .iter()
        .map(|&(t, pid, reason)| {
            while next < dispatches.len() && dispatches[next].0 <= t {
                let (_, p, index) = dispatches[next];
                last.insert(p, index);
                *count.entry(p).or_insert(0) += 1;
                total += 1;
                next += 1;
            }
            let (n, served) = if pid == SHARED {
                (total, total.checked_sub(1))
            } else {
                let n = count.get(&pid).copied().unwrap_or(0);
                (n, last.get(&pid).map(|i| *i as u32))
            };
            let slot = n - at_expiry.insert(pid, n).unwrap_or(0);
            ExpiryPoint {
                pid,
                served,
                reason,
                slot,
            }
        })
        .collect()
}

/// Compares `notes`' BFQ decisions with the model's. `pid_of` maps a model stream to a
/// pid; `recorded` are the trace's dispatches (on the notes' clock), `modelled` the
/// model's (on its decisions' clock).
pub fn compare(
    notes: &[iosched_core::event::Note],
    decisions: &[super::sched::Decided],
    pid_of: impl Fn(u32) -> u32,
    recorded: &Dispatches,
    modelled: &Dispatches,
) -> LogComparison {
    use super::sched::Decision;
    let mut c = LogComparison::default();
    let mut log_exp = Vec::new();
    for n in notes {
        match parse(&n.text) {
            BfqLogged::InService { pid, .. } => {
                c.log_switches += 1;
                c.log_has_shared_queues |= pid == SHARED;
            }
            BfqLogged::Expire { pid, reason, .. } => {
                *c.log_expirations.entry(reason.name()).or_insert(0) += 1;
                c.log_has_shared_queues |= pid == SHARED;
                log_exp.push((n.ts_ns, pid, reason));
            }
            _ => {}
        }
    }
    let mut model_exp = Vec::new();
    for d in decisions {
        match &d.d {
            Decision::InService { .. } => c.model_switches += 1,
            Decision::Expire {
                stream,
                reason,
                shared,
                ..
            } => {
                *c.model_expirations.entry(reason.name()).or_insert(0) += 1;
                let pid = if *shared { SHARED } else { pid_of(*stream) };
                model_exp.push((d.t, pid, *reason));
            }
            _ => {}
        }
    }
    // The notes are not always in time order (per-CPU buffers).
    log_exp.sort_by_key(|e| e.0);
    let log_points = placed(&log_exp, recorded);
    let model_points = placed(&model_exp, modelled);
    c.matched = u64::from(common_in_order_by(&model_points, &log_points, |m, l| {
        m.near(l) && m.reason == l.reason
    }));
    c.matched_points = u64::from(common_in_order_by(&model_points, &log_points, |m, l| {
        m.near(l)
    }));
    let pct = |n: u64, d: usize| {
        if d == 0 {
            100.0
        } else {
            100.0 * n as f64 / d as f64
        }
    };
    let larger = log_points.len().max(model_points.len());
    c.agreement_pct = pct(c.matched, larger);
    c.expirations_matched_pct = pct(c.matched, log_points.len());
    c.points_agreement_pct = pct(c.matched_points, larger);
    c
}

#[cfg(test)]
mod point_tests {
    use super::*;

    use crate::sched::{Decided, Decision};

    use crate::scenarios::sched_note as note;

    fn expire(t: u64, stream: u32, reason: ExpireReason) -> Decided {
        Decided {
            t,
            d: Decision::Expire {
                stream,
                sync: true,
                reason,
                served: 0,
                shared: false,
            },
        }
    }

    /// Process 7 dispatches a request every µs (index k at k µs): the log expires it after
    /// request 99 and 199 (slots of 100 requests).
    #[test]
    fn expirations_agree_at_the_same_request_within_five_percent_of_the_slot() {
        let dispatches: Vec<DispatchPoint> = (0..300u64).map(|k| (k * 1000, 7, k)).collect();
        let notes = [
            note(
                99_500,
                "bfq7S expire (2, slow 0, num_disp 0, short_ttime 1)",
            ),
            note(
                199_500,
                "bfq7S expire (1, slow 0, num_disp 0, short_ttime 1)",
            ),
        ];
        let pid = |_| 7;
        use ExpireReason::*;
        // The model expires 3 requests later each time (within 5 of 100): both agree.
        let model = [
            expire(102_500, 0, BudgetExhausted),
            expire(202_500, 0, BudgetTimeout),
        ];
        let c = compare(&notes, &model, pid, &dispatches, &dispatches);
        assert_eq!((c.matched, c.agreement_pct), (2, 100.0));
        // 10 requests later: the same reasons, not the same points.
        let late = [
            expire(109_500, 0, BudgetExhausted),
            expire(209_500, 0, BudgetTimeout),
        ];
        let c = compare(&notes, &late, pid, &dispatches, &dispatches);
        assert_eq!((c.matched, c.matched_points), (0, 0));
        // At the points, one reason wrong, plus extra switches: they count against it.
        let noisy = [
            expire(50_500, 0, Preempted),
            expire(99_500, 0, BudgetExhausted),
            expire(150_500, 0, Preempted),
            expire(199_500, 0, NoMoreRequests),
        ];
        let c = compare(&notes, &noisy, pid, &dispatches, &dispatches);
        assert_eq!((c.matched, c.matched_points), (1, 2));
        assert_eq!(c.agreement_pct, 25.0);
        assert_eq!(c.expirations_matched_pct, 50.0);
    }

    /// Two processes (7 and 8) alternate dispatches, one every µs; their queues are merged
    /// and BFQ expires the shared queue after the 100th and 200th dispatch of either. A
    /// shared queue's expiration is placed by all dispatches so far: the model's agrees
    /// within 5% of the slot, and not 10 dispatches later.
    #[test]
    fn shared_queue_expirations_are_placed_by_all_dispatches() {
        let dispatches: Vec<DispatchPoint> = (0..300u64)
            .map(|k| (k * 1000, 7 + (k % 2) as u32, k / 2))
            .collect();
        let notes = [
            note(
                99_500,
                "bfqSHARED-S expire (2, slow 0, num_disp 0, short_ttime 1)",
            ),
            note(
                199_500,
                "bfqSHARED-S expire (2, slow 0, num_disp 0, short_ttime 1)",
            ),
        ];
        let shared = |t: u64| Decided {
            t,
            d: Decision::Expire {
                stream: 0,
                sync: true,
                reason: ExpireReason::BudgetExhausted,
                served: 0,
                shared: true,
            },
        };
        let pid = |s| 7 + s;
        let c = compare(
            &notes,
            &[shared(102_500), shared(202_500)],
            pid,
            &dispatches,
            &dispatches,
        );
        assert!(c.log_has_shared_queues);
        assert_eq!((c.matched, c.agreement_pct), (2, 100.0));
        let c = compare(
            &notes,
            &[shared(110_500), shared(210_500)],
            pid,
            &dispatches,
            &dispatches,
        );
        assert_eq!(c.matched_points, 0);
        // The same expirations of a process's own queue are not the shared queue's.
        let own = [expire(99_500, 0, ExpireReason::BudgetExhausted)];
        let c = compare(&notes, &own, pid, &dispatches, &dispatches);
        assert_eq!(c.matched_points, 0);
    }

    #[test]
    fn the_first_budget_of_a_fresh_queue_gives_the_max_budget() {
        let notes = [
            note(1, "bfq5S allocated"),
            note(2, "bfq5S set_in_service_queue, cur-budget = 1990"),
        ];
        assert_eq!(max_budget_at_start(&notes), Some(2985));
        // A queue that existed before the log says only its own history.
        assert_eq!(max_budget_at_start(&notes[1..]), None);
        // The default's 2/3 (10922): BFQ has not measured yet.
        let fresh = [
            note(1, "bfq5S allocated"),
            note(2, "bfq5S set_in_service_queue, cur-budget = 10922"),
        ];
        assert_eq!(max_budget_at_start(&fresh), None);
    }

    /// The first expiration's `min budg` is `bfq_max_budget / 32`: 512 is the default
    /// (BFQ has not measured yet), whatever a raised queue's first budget (2 x 512) says.
    #[test]
    fn the_first_min_budget_says_whether_bfq_has_measured() {
        let raised = [
            note(1, "bfq5S allocated"),
            note(2, "bfq5S set_in_service_queue, cur-budget = 1024"),
            note(3, "bfq5S expire (0, slow 0, num_disp 0, short_ttime 1)"),
            note(4, "bfq5S recalc_budg: last budg 1024, budg left 1000"),
            note(5, "bfq5S recalc_budg: last max_budg 1024, min budg 512"),
        ];
        assert_eq!(max_budget_at_start(&raised), None);
        let measured = [
            note(1, "bfq5S set_in_service_queue, cur-budget = 700"),
            note(2, "bfq5S recalc_budg: last max_budg 700, min budg 93"),
        ];
        assert_eq!(max_budget_at_start(&measured), Some(93 * 32));
        // With a fresh queue's budget that agrees, its finer figure.
        let both = [
            note(1, "bfq6S allocated"),
            note(2, "bfq6S set_in_service_queue, cur-budget = 1990"),
            note(3, "bfq6S recalc_budg: last max_budg 1990, min budg 93"),
        ];
        assert_eq!(max_budget_at_start(&both), Some(2985));
    }
}
