//! Missing merges: contiguous bios of one process that went out as separate requests.
//!
//! What-ifs: mq-deadline with merging on (`nomerges=0`). Under `none`, a process asleep
//! for a free tag most of its run had more bios ready than the trace shows: its depth is
//! unknown, and so are the merges an elevator would make; there, mq-deadline with merging
//! at its measured depth and at the most mq-deadline lets exist. Judged: their merge ratio
//! against the recorded one, and their throughput against the replay as recorded.
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::{replay::Replayer, sched::SchedKind, workload::Stream};
use super::{
    Finding,
    parts::{Cause, Fix},
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct MissingMerges;

#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// `contiguous` of `bios` bios continue the previous bio of their process, but the
    /// recorded merge ratio is `merge_ratio`.
    Unmerged {
        contiguous: u64,
        bios: u64,
        merge_ratio: f64,
    },
    /// `contiguous` of `bios` bios continue the previous bio of their process, but under
    /// none they cannot merge: `stream` was held back by the `tags` tags, so its real depth,
    /// and the merges an elevator would make, are not in the trace.
    HeldByTags {
        contiguous: u64,
        bios: u64,
        stream: u32,
        tags: u32,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The model: under mq-deadline with merging on they would merge (bios per request).
    WouldMerge { merge_ratio: f64 },
    /// Measured: at most `max_in_flight` in flight; asleep for a free request before
    /// `slept_for_request` of its `ios` bios, `asleep_pct` of its run.
    HeldBack {
        max_in_flight: u32,
        slept_for_request: u32,
        ios: u32,
        asleep_pct: f64,
    },
    /// The model at the measured depth: under mq-deadline, bios per request and throughput.
    AtMeasuredDepth { merge_ratio: f64, mb_s: f64 },
    /// The model if it keeps `nr_requests` in flight (mq-deadline's nr_requests, twice the
    /// `tags` tags).
    AtNrRequests {
        nr_requests: u32,
        tags: u32,
        merge_ratio: f64,
        mb_s: f64,
    },
}

/// A recorded merge ratio below this leaves merges to find.
const FEW_MERGES: f64 = 1.5;

fn merging() -> WhatIf {
    WhatIf::spec(SchedKind::MqDeadline, &[("nomerges", "0")])
}

fn merging_at(depth: u32) -> WhatIf {
    let depth = depth.to_string();
    WhatIf::spec(
        SchedKind::MqDeadline,
        &[("nomerges", "0"), ("iodepth", depth.as_str())],
    )
}

/// mq-deadline's `nr_requests`: twice the tags, up to 128 (`blk_mq_init_sched`), the most
/// an elevator holds before it too puts the process to sleep.
fn nr_requests(r: &Replayer) -> u32 {
    2 * r.recorded_depth().min(128)
}

/// What the trace shows of the merges, where there are some to find.
struct Contiguous<'a> {
    /// Bios that continue their process's previous bio, and all bios.
    contiguous: u64,
    bios: u64,
    /// The process held back by `none`'s tags (the busiest), if one was: (stream, it).
    held_by_tags: Option<(u32, &'a Stream)>,
}

/// Where this diagnosis applies: contiguous bios, and a recorded merge ratio that leaves
/// merges to find.
fn looked_at<'a>(cx: &Context<'a>) -> Option<Contiguous<'a>> {
    let w = &cx.r.workload;
    let (contiguous, bios) = contiguous_bios(cx.r);
    let few = cx.recorded.merge_ratio < FEW_MERGES;
    if contiguous == 0 || !few {
        return None;
    }
    let held_by_tags = (cx.sched() == SchedKind::None)
        .then(|| {
            w.streams
                .iter()
                .enumerate()
                .filter(|(_, st)| st.tag_bound())
                .max_by_key(|(_, st)| st.ios)
                .map(|(s, st)| (s as u32, st))
        })
        .flatten();
    Some(Contiguous {
        contiguous,
        bios,
        held_by_tags,
    })
}

impl Diagnosis for MissingMerges {
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf> {
        match looked_at(cx).map(|c| c.held_by_tags) {
            None => Vec::new(),
            Some(Some((_, st))) => {
                vec![merging_at(st.max_in_flight), merging_at(nr_requests(cx.r))]
            }
            Some(None) => vec![merging()],
        }
    }

    fn judge(&self, cx: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
        let Some(c) = looked_at(cx) else {
            return Vec::new();
        };
        if let Some((s, st)) = c.held_by_tags {
            return merges_if_deeper(cx, runs, s, st, &c).into_iter().collect();
        }
        let recorded_ratio = cx.recorded.merge_ratio;
        let alt = merging();
        let merged = runs.get(&alt).summary.merge_ratio;
        if merged < 1.1 * recorded_ratio.max(1.0) {
            return Vec::new();
        }
        let claim = Claim::Unmerged {
            contiguous: c.contiguous,
            bios: c.bios,
            merge_ratio: recorded_ratio,
        };
        let evidence = vec![
            Evidence::WouldMerge {
                merge_ratio: merged,
            }
            .into(),
        ];
        let est = cx.estimate(runs, &alt, &[]);
        vec![Finding::new(
            Cause::MissingMerges,
            claim,
            evidence,
            Some(est),
        )]
    }
}

/// The finding for a process held back by `none`'s tags: its measured depth is a lower
/// bound, so the trace cannot say how many of its bios would wait in an elevator and merge.
/// What it can say: what merging gives at that measured depth, and what it gives if the
/// process keeps as many in flight as mq-deadline lets exist ([`nr_requests`]). The
/// estimate is conditional on that depth, and says so.
fn merges_if_deeper(
    cx: &Context,
    runs: &Runs,
    s: u32,
    st: &Stream,
    c: &Contiguous,
) -> Option<Finding> {
    let tags = cx.r.recorded_depth();
    let nr_requests = nr_requests(cx.r);
    let measured = runs.get(&merging_at(st.max_in_flight));
    // What a replay does by default ([`super::super::workload::Stream::replay_window`]),
    // made explicit so that the finding says which depth it assumed.
    let deeper_what_if = merging_at(nr_requests);
    let deeper = runs.get(&deeper_what_if);
    if deeper.summary.merge_ratio < 1.1 * cx.recorded.merge_ratio.max(1.0) {
        return None;
    }
    let mut e = cx.estimate(runs, &deeper_what_if, &[]);
    e.what_if = Fix::MqDeadlineAtDepth {
        stream: s,
        depth: nr_requests,
    };
    let asleep_pct = 100.0 * st.slept_ns as f64 / st.span_ns.max(1) as f64;
    let claim = Claim::HeldByTags {
        contiguous: c.contiguous,
        bios: c.bios,
        stream: s,
        tags,
    };
    let evidence = vec![
        Evidence::HeldBack {
            max_in_flight: st.max_in_flight,
            slept_for_request: st.slept_for_request,
            ios: st.ios,
            asleep_pct,
        }
        .into(),
        Evidence::AtMeasuredDepth {
            merge_ratio: measured.summary.merge_ratio,
            mb_s: measured.summary.mb_per_s,
        }
        .into(),
        Evidence::AtNrRequests {
            nr_requests,
            tags,
            merge_ratio: deeper.summary.merge_ratio,
            mb_s: deeper.summary.mb_per_s,
        }
        .into(),
    ];
    Some(Finding::new(Cause::MissingMerges, claim, evidence, Some(e)))
}

/// (bios contiguous with their process's previous bio, all bios).
fn contiguous_bios(r: &Replayer) -> (u64, u64) {
    let w = &r.workload;
    let mut last_end = vec![u64::MAX; w.streams.len()];
    let mut n = 0;
    for io in &w.ios {
        if last_end[io.stream as usize] == io.sector && io.sectors > 0 {
            n += 1;
        }
        last_end[io.stream as usize] = io.sector + u64::from(io.sectors);
    }
    (n, w.ios.len() as u64)
}
