//! Another scheduler: its finding's words.

use iosched_model::explain::other_scheduler;

pub(super) fn claim(c: &other_scheduler::Claim) -> String {
    let other_scheduler::Claim {
        sched,
        change_pct,
        range,
    } = c;
    match range {
        Some((lo, hi)) => format!(
            "{} would move this workload {lo:.0}% to {hi:.0}% faster (the more, the less \
             time each request spends on its way to the disk: the recording hid it)",
            sched.name()
        ),
        None => format!(
            "{} would move this workload {change_pct:.0}% faster",
            sched.name()
        ),
    }
}

pub(super) fn evidence(e: &other_scheduler::Evidence) -> String {
    let other_scheduler::Evidence::Model {
        sched,
        mb_s,
        base_mb_s,
    } = e;
    format!(
        "model: {mb_s:.2} MB/s under {} vs {base_mb_s:.2} MB/s as recorded",
        sched.name()
    )
}
