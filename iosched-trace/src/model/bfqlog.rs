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
        return BfqLogged::Other {
            pid: None,
            text: text.to_string(),
        };
    };
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

/// How many of the log's expirations the model matched, in order, with the same queue and
/// reason (a longest common subsequence), over the log's count.
pub fn expiry_agreement(model: &[(u32, ExpireReason)], log: &[(u32, ExpireReason)]) -> f64 {
    if log.is_empty() {
        return if model.is_empty() { 1.0 } else { 0.0 };
    }
    // O(n·m) memory is too much for long traces: the two-row form.
    let mut prev = vec![0u32; model.len() + 1];
    let mut cur = vec![0u32; model.len() + 1];
    for l in log {
        for (j, m) in model.iter().enumerate() {
            cur[j + 1] = if l == m {
                prev[j] + 1
            } else {
                cur[j].max(prev[j + 1])
            };
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    f64::from(prev[model.len()]) / log.len() as f64
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
        assert_eq!(expiry_agreement(&[], &log), 0.0);
    }
}

/// BFQ's log against the model's decisions for the same trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LogComparison {
    pub log_switches: u64,
    pub model_switches: u64,
    pub log_expirations: std::collections::BTreeMap<&'static str, u64>,
    pub model_expirations: std::collections::BTreeMap<&'static str, u64>,
    /// Log expirations matched in order by the model with the same process and reason, %.
    pub expirations_matched_pct: f64,
    /// BFQ merged queues of different processes (the model does not merge queues).
    pub log_has_shared_queues: bool,
}

/// Compares `notes`' BFQ decisions with the model's; `pid_of` maps a model stream to a pid.
pub fn compare(
    notes: &[crate::event::Note],
    decisions: &[super::sched::Decided],
    pid_of: impl Fn(u32) -> u32,
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
                log_exp.push((pid, reason));
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
                model_exp.push((pid, *reason));
            }
            _ => {}
        }
    }
    c.expirations_matched_pct = 100.0 * expiry_agreement(&model_exp, &log_exp);
    c
}
