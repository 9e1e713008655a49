//! A seek-bound workload: its note's words.

use iosched_model::explain::seek_bound;

pub(super) fn claim(c: &seek_bound::Claim) -> String {
    let seek_bound::Claim { positioning_pct } = c;
    format!(
        "the disk spends {positioning_pct:.0}% of its busy time positioning (seeks and \
         rotation)"
    )
}

pub(super) fn evidence(e: &seek_bound::Evidence) -> String {
    let seek_bound::Evidence::FittedOn { requests } = e;
    format!("device model: {requests} requests, fitted from the trace's service times")
}
