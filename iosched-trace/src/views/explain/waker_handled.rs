//! A waker BFQ handles: its finding's words.

use iosched_model::{explain::waker_handled, workload::Workload};

pub(super) fn claim(w: &Workload, c: &waker_handled::Claim) -> String {
    let name = |s: &u32| w.stream_name(*s);
    let waker_handled::Claim { stream, waker } = c;
    let waker = name(waker);
    format!(
        "{}'s next I/O waits for {waker}'s, and BFQ knows it: it detected {waker} as the \
         waker of {}'s queue and injects its I/O instead of idling (since 5.3): nothing \
         is lost",
        name(stream),
        w.streams[*stream as usize].comm
    )
}

pub(super) fn evidence(w: &Workload, e: &waker_handled::Evidence) -> String {
    let waker_handled::Evidence::OldRulesOwnGroup {
        stream,
        predicted_mb_s,
        measured_mb_s,
        change_pct,
    } = e;
    let comm = &w.streams[*stream as usize].comm;
    format!(
        "model: with pre-5.3 rules (no waker injection) and {comm} in a cgroup of its \
         own (a v1 blkio group of its own), {comm} would get {predicted_mb_s:.3} MB/s instead of \
         {measured_mb_s:.3} ({change_pct:+.0}%)"
    )
}
