//! BFQ slices too long for the processes: its finding's words.

use iosched_model::explain::slices_too_long;

pub(super) fn claim(c: &slices_too_long::Claim) -> String {
    let slices_too_long::Claim {
        busy,
        process,
        p99_q2c_ms,
    } = c;
    format!(
        "{busy} processes share the disk in BFQ slices: {process} waits up to \
         {p99_q2c_ms:.0} ms (p99 Q2C) for its turn"
    )
}

pub(super) fn evidence(e: &slices_too_long::Evidence) -> String {
    let slices_too_long::Evidence::UnderMqDeadline { p99_q2c_ms } = e;
    format!("model: under mq-deadline its p99 Q2C would be {p99_q2c_ms:.0} ms")
}
