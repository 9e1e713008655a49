//! BFQ's own account of its decisions: the `m N bfq<pid><S|A> <message>` notes it writes
//! through the blktrace message path (`bfq_log_bfqq`), parsed into decisions comparable with
//! the model's.
//!
//! Owns: parsing note text. Must not: read files.

use serde::Serialize;

use super::sched::ExpireReason;

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

/// `bfq1350S` (optionally followed by a cgroup path) -> (pid, sync, rest of the text).
fn queue_prefix(text: &str) -> Option<(u32, bool, &str)> {
    let rest = text.trim_start().strip_prefix("bfq")?;
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
