//! Missing merges: their findings' words.

use iosched_model::{explain::missing_merges, workload::Workload};

pub(super) fn claim(w: &Workload, c: &missing_merges::Claim) -> String {
    match c {
        missing_merges::Claim::Unmerged {
            contiguous,
            bios,
            merge_ratio,
        } => format!(
            "{contiguous} of {bios} bios continue the previous bio of their process, but the \
             recorded merge ratio is {merge_ratio:.2}"
        ),
        missing_merges::Claim::HeldByTags {
            contiguous,
            bios,
            stream,
            tags,
        } => format!(
            "{contiguous} of {bios} bios continue the previous bio of their process, but \
             under none they cannot merge: {} was held back by the {tags} tags, so its real \
             depth, and the merges an elevator would make, are not in the trace",
            w.streams[*stream as usize].comm
        ),
    }
}

pub(super) fn evidence(e: &missing_merges::Evidence) -> String {
    match e {
        missing_merges::Evidence::WouldMerge { merge_ratio } => format!(
            "model: under mq-deadline with merging on (nomerges=0) they would merge \
             ({merge_ratio:.2} bios per request)"
        ),
        missing_merges::Evidence::HeldBack {
            max_in_flight,
            slept_for_request,
            ios,
            asleep_pct,
        } => format!(
            "measured: at most {max_in_flight} in flight; asleep for a free request before \
             {slept_for_request} of its {ios} bios, {asleep_pct:.0}% of its run"
        ),
        missing_merges::Evidence::AtMeasuredDepth { merge_ratio, mb_s } => format!(
            "model at that depth: under mq-deadline {merge_ratio:.2} bios per request, \
             {mb_s:.2} MB/s"
        ),
        missing_merges::Evidence::AtNrRequests {
            nr_requests,
            tags,
            merge_ratio,
            mb_s,
        } => format!(
            "model if it keeps {nr_requests} in flight (mq-deadline's nr_requests, twice \
             the {tags} tags; --set iodepth=N for another depth): {merge_ratio:.2} bios per \
             request, {mb_s:.2} MB/s"
        ),
    }
}
