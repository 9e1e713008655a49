//! Weight raising that costs throughput: its finding's words.

use std::fmt::Write;

use iosched_model::explain::weight_raising;

pub(super) fn claim(c: &weight_raising::Claim) -> String {
    let weight_raising::Claim { change_pct, range } = c;
    match range {
        Some((lo, hi)) => format!(
            "BFQ's low-latency heuristics cost this workload its throughput: with \
             low_latency=0 the model predicts {lo:.0}% to {hi:.0}% more (the less, the more \
             time each request spends on its way to the disk: the recording hid it)"
        ),
        None => format!(
            "BFQ's low-latency heuristics cost this workload its throughput: with \
             low_latency=0 the model predicts {change_pct:.0}% more"
        ),
    }
}

pub(super) fn evidence(e: &weight_raising::Evidence) -> String {
    match e {
        weight_raising::Evidence::Raised { raises, preempted } => {
            let mut line = format!("model: as recorded, BFQ raised {raises} queue weight(s)");
            if let Some((preempted, all)) = preempted {
                let _ = write!(
                    line,
                    "; {preempted} of its {all} service slots ended by preemption (a queue with \
                     raised weight that becomes busy takes the disk from the one in service: a \
                     switch, and on a disk a seek)"
                );
            }
            line
        }
        weight_raising::Evidence::WithoutRaising {
            mb_s,
            base_mb_s,
            preemptions,
            merge_ratio,
        } => {
            let mut line =
                format!("model: with low_latency=0, {mb_s:.3} MB/s instead of {base_mb_s:.3}");
            if let Some(n) = preemptions {
                let _ = write!(line, ", {n} preemptions");
            }
            if let Some((m_off, m)) = merge_ratio {
                let _ = write!(
                    line,
                    ", {m_off:.2} bios per request instead of {m:.2} (while a raised queue is \
                     busy, BFQ lets async I/O and sync writes use fewer requests, \
                     `bfq_limit_depth`: fewer wait long enough to merge)"
                );
            }
            line
        }
        weight_raising::Evidence::LowerPriority {
            raised,
            pids,
            predicted_mb_s,
            change_pct,
        } => {
            let shown: Vec<String> = pids.iter().take(4).map(u32::to_string).collect();
            let more = if pids.len() > 4 { " ..." } else { "" };
            format!(
                "model: the {raised} raised process(es) at I/O priority best-effort 5 instead of \
                 the default (`ionice -c2 -n5 -p {}{more}`), low_latency left on for the rest: \
                 {predicted_mb_s:.3} MB/s ({change_pct:+.0}%); since 5.12 BFQ raises no queue \
                 whose weight the user set",
                shown.join(" ")
            )
        }
    }
}
