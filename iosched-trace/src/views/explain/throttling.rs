//! What wbt's and Kyber's findings share: its words.

use iosched_model::{explain::throttling, throttle::Sufferer};

use super::{ms, s};

pub(super) fn evidence(e: &throttling::Evidence) -> String {
    match e {
        throttling::Evidence::When(iv) => format!("trace: when: {}", intervals_text(iv)),
        throttling::Evidence::WhoWaited(who) => {
            format!("trace: who waited: {}", sufferers_text(who))
        }
        throttling::Evidence::Others {
            predicted_mb_s,
            measured_mb_s,
            change_pct,
            p99_without_ms,
            p99_with_ms,
        } => format!(
            "model: the other processes get {predicted_mb_s:.3} MB/s instead of \
             {measured_mb_s:.3} ({change_pct:+.0}%), their worst p99 Q2C \
             {p99_without_ms:.1} ms instead of {p99_with_ms:.1}"
        ),
    }
}

/// `0.12-0.50 s, 1.20-1.31 s, ... (N in all)`.
pub(super) fn intervals_text(iv: &[(u64, u64)]) -> String {
    let mut parts: Vec<String> = iv
        .iter()
        .take(5)
        .map(|(a, b)| format!("{:.3}-{:.3} s", s(*a), s(*b)))
        .collect();
    if iv.len() > 5 {
        parts.push(format!("... ({} periods in all)", iv.len()));
    }
    parts.join(", ")
}

pub(super) fn sufferers_text(who: &[Sufferer]) -> String {
    let mut parts: Vec<String> = who
        .iter()
        .take(4)
        .map(|p| {
            format!(
                "{}({}) {} x, {:.1} ms",
                p.comm,
                p.pid,
                p.count,
                ms(p.total_ns)
            )
        })
        .collect();
    if who.len() > 4 {
        parts.push(format!("{} more", who.len() - 4));
    }
    parts.join("; ")
}
