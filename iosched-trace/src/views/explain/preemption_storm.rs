//! A preemption storm: its finding's words.

use iosched_model::{explain::preemption_storm, workload::Workload};

use super::{ms, s};

pub(super) fn claim(c: &preemption_storm::Claim) -> String {
    let from = s(c.from_ns);
    let kind = match &c.seen {
        preemption_storm::Seen::Inferred => format!(
            "the trace shows BFQ's queues taking the disk from each other at almost every \
             request from {from:.3} s (inferred without BFQ's log: a preemption storm)"
        ),
        preemption_storm::Seen::Log { after } => format!(
            "BFQ's log shows its queues preempting each other at almost every request from \
             {from:.3} s{}, without raised weights (a preemption storm)",
            after.map_or_else(String::new, |(pid, reason)| format!(
                ", after queue {pid} expired {}",
                reason.name()
            ))
        ),
    };
    match &c.out {
        Some(out) => {
            let range = match out {
                preemption_storm::OutOfIt::Range {
                    lo,
                    hi,
                    lo_pct,
                    hi_pct,
                } => format!("{lo:.1} to {hi:.1} MB/s ({lo_pct:+.0}% to {hi_pct:+.0}%)"),
                preemption_storm::OutOfIt::Rate { mb_s, change_pct } => {
                    format!("{mb_s:.1} MB/s ({change_pct:+.0}%)")
                }
            };
            format!(
                "{kind}: out of it this workload runs at {range} instead of {:.1} MB/s",
                c.measured_mb_s
            )
        }
        None => format!("{kind}; the model enters it too, even with a longer slice_idle"),
    }
}

pub(super) fn evidence(w: &Workload, e: &preemption_storm::Evidence) -> String {
    use preemption_storm::Evidence as E;
    let name = |s: &u32| w.stream_name(*s);
    let label = |inferred: bool| {
        if inferred {
            "trace (inferred)"
        } else {
            "trace"
        }
    };
    match e {
        E::LogPreemptions {
            preempted,
            expirations,
            in_a_row,
        } => format!(
            "BFQ's log: {preempted} of its {expirations} expirations were `preempted` (reason \
             4), {in_a_row} of them in a row, and none of their queues had a raised weight"
        ),
        E::LogStartedBy {
            at_ns,
            pid,
            reason,
            line,
            first_after_ns,
            first_line,
        } => format!(
            "BFQ's log: the run began at {:.3} s, when queue {pid} expired {}: `{line}`; the \
             first preemption came {:.2} ms later: `{first_line}`",
            s(*at_ns),
            reason.name(),
            ms(*first_after_ns)
        ),
        E::LogBeganWithIt { at_ns, line } => format!(
            "BFQ's log: the run began with the log's first expiration, at {:.3} s: `{line}`",
            s(*at_ns)
        ),
        E::Inferred {
            from_ns,
            to_ns,
            requests,
            streams,
            slices,
            short_slice,
            seeks,
            switches,
            slice_idle_ms,
            slices_before,
        } => {
            let before = slices_before.map_or_else(String::new, |(lo, hi)| {
                format!(" (before it, this recording's slices had {lo} to {hi} requests)")
            });
            format!(
                "trace (inferred: the recording has no BFQ log; `record --sched-log` keeps it): \
                 from {:.3} s to {:.3} s, {requests} requests of {} came in {slices} service \
                 slices of at most {short_slice} requests, alternating between sequential \
                 processes, {seeks} of the {switches} switches a seek. BFQ idles (slice_idle \
                 {slice_idle_ms} ms) for a sequential process and serves it in slices of \
                 hundreds of requests{before}: slices this short say its queues took the disk \
                 from each other",
                s(*from_ns),
                s(*to_ns),
                streams.iter().map(name).collect::<Vec<_>>().join(", ")
            )
        }
        E::Pause {
            inferred,
            stream,
            pause_ns,
            from_ns,
            to_ns,
            slice_idle_ms,
        } => format!(
            "{}: {} paused {:.2} ms ({:.3} s to {:.3} s, its completion to its next request), \
             longer than slice_idle ({slice_idle_ms} ms): BFQ expired its queue waiting, and its \
             next request, within 3 x slice_idle, took the disk back",
            label(*inferred),
            name(stream),
            ms(*pause_ns),
            s(*from_ns),
            s(*to_ns)
        ),
        E::NoLongPause {
            inferred,
            stream,
            pause_ns,
            at_ns,
            slice_idle_ms,
        } => format!(
            "{}: no process paused longer than slice_idle ({slice_idle_ms} ms) around its start \
             (the longest: {} {:.2} ms, at {:.3} s): what started it is not in the trace",
            label(*inferred),
            name(stream),
            ms(*pause_ns),
            s(*at_ns)
        ),
        E::KernelRule { window_ms } => format!(
            "kernel: a queue expired empty (too idle, or preempted with its one request in \
             flight) is marked non_blocking_wait_rq, and its next request, arriving within 3 x \
             slice_idle ({window_ms} ms) of its last completion with budget left, expires the \
             queue in service (bfq_bfqq_update_budg_for_activation, \
             bfq_bfqq_handle_idle_busy_switch): a switch, and on a disk a seek, per request \
             until a budget runs out"
        ),
        E::Rates {
            in_it_mb_s,
            outside_mb_s,
        } => format!(
            "trace: {in_it_mb_s:.3} MB/s during it{}",
            outside_mb_s.map_or_else(String::new, |m| format!(", {m:.3} MB/s outside it"))
        ),
        E::ModelAsRecorded {
            enters: true,
            preempted,
            slots,
            mb_s,
        } => format!(
            "model: its replay as recorded enters it too ({preempted} of {slots} service slots \
             ended by preemption): {mb_s:.3} MB/s"
        ),
        E::ModelAsRecorded {
            enters: false,
            preempted,
            slots,
            mb_s,
        } => format!(
            "model: its replay as recorded stays out of it ({preempted} of {slots} service slots \
             ended by preemption): {mb_s:.3} MB/s, the workload without the storm"
        ),
        E::ModelLongerIdle {
            what_if,
            pause_fits,
            preemptions,
            mb_s,
        } => format!(
            "model: with {what_if}{}, {preemptions} preemptions and {mb_s:.3} MB/s",
            if *pause_fits {
                " (the pause fits in the idling)"
            } else {
                ""
            }
        ),
    }
}
