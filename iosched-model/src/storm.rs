//! Preemption storms as the recording shows them: BFQ's queues taking the disk from one
//! another at (almost) every request, each switch a seek, with no raised weight behind it.
//!
//! The mechanism (block/bfq-iosched.c, 6.18): `bfq_bfqq_expire` marks a queue
//! `non_blocking_wait_rq` when it expires empty for any reason but budget timeout or
//! exhaustion (too idle, no more requests, or itself preempted with only its request in
//! flight). When that queue's next request arrives within 3 x slice_idle of its last
//! completion and it has budget left, `bfq_bfqq_update_budg_for_activation` says it wants to
//! preempt ("hole recovery"), and `bfq_bfqq_handle_idle_busy_switch` expires the queue in
//! service (`BFQQE_PREEMPTED`). A queue preempted while its one request is in flight is
//! empty, so it is marked in turn: two sequential readers then preempt each other at every
//! request until a budget runs out. One pause longer than slice_idle (a too-idle expiry) is
//! enough to start it.
//!
//! A replay cannot be relied on to enter the storm (it hangs on the order of two events
//! microseconds apart), so the recording's own account is what names it:
//! - with BFQ's log in the recording (`record --sched-log`), BFQ's expirations say it
//!   ([`from_log`]);
//! - without it, the trace's service order shows its shape ([`inferred`]): slices of one or
//!   two requests alternating between sequential processes, each switch a seek, where BFQ
//!   idles for such processes and serves them in slices of hundreds of requests.
//!
//! Owns: finding a storm in a recording and measuring it. Must not: replay, print.

use rustc_hash::FxHashSet;

use iosched_core::event::Note;

use super::{
    bfqlog::{self, BfqLogged},
    sched::ExpireReason,
    workload::Workload,
};

/// Fewer switches than this in a row are not a storm (a few preemptions happen anyway).
pub const MIN_SWITCHES: u64 = 20;
/// A service slice of at most this many requests is a preempted one: the request the
/// preempting queue came with, and at most one more before its own next arrival.
pub const SHORT_SLICE: u32 = 2;
/// A process at least this share of whose requests continue its previous one is sequential.
const SEQUENTIAL_SHARE: f64 = 0.9;
/// An inferred storm must last this share of the recording (a short stretch of alternation
/// is the scheduler catching up, not a state it stayed in).
const MIN_SPAN_SHARE: f64 = 0.2;
/// The rate outside the storm is measured only over at least this long.
const MIN_OUTSIDE_NS: u64 = 100_000_000;

/// Where the storm was seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// BFQ's own log in the recording.
    Log,
    /// The trace's service order, without BFQ's word.
    Inferred,
}

/// What BFQ's log says of the storm.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    /// Expirations in the whole log, and those `preempted`.
    pub expirations: u64,
    pub preempted: u64,
    /// The longest run of `preempted` expirations in a row.
    pub in_a_row: u64,
    /// The expiration just before that run, (ns, pid, reason, line): what started it.
    pub started_by: Option<(u64, u32, ExpireReason, String)>,
    /// The run's first expiration, (ns, line).
    pub first: (u64, String),
}

/// A pause of one process: its completion and its next request's queueing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    pub stream: u32,
    pub from_ns: u64,
    pub to_ns: u64,
}

impl Pause {
    pub fn ns(&self) -> u64 {
        self.to_ns - self.from_ns
    }
}

/// A storm in a recording (times are the trace's, ns).
#[derive(Clone, Debug, PartialEq)]
pub struct Storm {
    pub source: Source,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The processes (streams) served in it.
    pub streams: Vec<u32>,
    /// Requests (bios) completed in it, and the service slices they came in.
    pub requests: u64,
    pub slices: u64,
    /// Of the switches between its slices, those that moved the head (a seek).
    pub seeks: u64,
    /// The shortest and longest slice before it (at least [`SHORT_SLICE`] + 1 requests).
    pub slices_before: Option<(u32, u32)>,
    /// The longest pause of one of its processes around its start: the think time that
    /// started it when it exceeds slice_idle.
    pub pause: Option<Pause>,
    /// Throughput in it, and outside it (when that is long enough to measure), MB/s.
    pub mb_s_in: f64,
    pub mb_s_outside: Option<f64>,
    pub log: Option<Logged>,
}

/// One service slice as the trace shows it: consecutive completions of one process.
#[derive(Clone, Copy, Debug)]
struct Slice {
    stream: u32,
    /// Indices into `w.ios` of its first and last bio (completion order).
    first: usize,
    last: usize,
    bios: u32,
    /// Its first bio does not continue the previous slice's last one.
    seek_before: bool,
}

/// Completed bios in completion order, grouped into slices.
fn slices(w: &Workload) -> Vec<Slice> {
    let mut order: Vec<usize> = (0..w.ios.len()).filter(|&i| w.ios[i].rec_c > 0).collect();
    order.sort_by_key(|&i| (w.ios[i].rec_c, w.ios[i].rec_q));
    let mut out: Vec<Slice> = Vec::new();
    let mut prev_end: Option<u64> = None;
    for i in order {
        let io = &w.ios[i];
        match out.last_mut() {
            Some(s) if s.stream == io.stream => {
                s.last = i;
                s.bios += 1;
            }
            _ => out.push(Slice {
                stream: io.stream,
                first: i,
                last: i,
                bios: 1,
                seek_before: prev_end.is_some_and(|e| e != io.sector),
            }),
        }
        prev_end = Some(io.sector + u64::from(io.sectors));
    }
    out
}

/// Streams at least [`SEQUENTIAL_SHARE`] of whose bios continue their previous one.
fn sequential_streams(w: &Workload) -> Vec<bool> {
    let mut last_end = vec![None::<u64>; w.streams.len()];
    let mut cont = vec![(0u64, 0u64); w.streams.len()];
    for io in &w.ios {
        let s = io.stream as usize;
        if let Some(e) = last_end[s] {
            cont[s].1 += 1;
            if e == io.sector {
                cont[s].0 += 1;
            }
        }
        last_end[s] = Some(io.sector + u64::from(io.sectors));
    }
    cont.iter()
        .map(|&(c, n)| n >= 10 && c as f64 >= SEQUENTIAL_SHARE * n as f64)
        .collect()
}

/// The trace's account of the storm between `start_ns` and `end_ns` (pause, throughput,
/// slices).
fn measured(w: &Workload, source: Source, start_ns: u64, end_ns: u64, slice_idle_ns: u64) -> Storm {
    let all = slices(w);
    let inside: Vec<&Slice> = all
        .iter()
        .filter(|s| {
            let c = w.ios[s.last].rec_c;
            c > start_ns && c <= end_ns
        })
        .collect();
    let mut streams: Vec<u32> = inside.iter().map(|s| s.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    let before: Vec<u32> = all
        .iter()
        .filter(|s| w.ios[s.last].rec_c <= start_ns && s.bios > SHORT_SLICE)
        .map(|s| s.bios)
        .collect();
    let slices_before = before
        .iter()
        .min()
        .copied()
        .zip(before.iter().max().copied());
    // The pause that started it: the longest think time of its processes that overlaps its
    // start, or ends in the 3 x slice_idle before it (within which BFQ lets a queue that
    // expired waiting take the disk back).
    let until = inside
        .get(1)
        .map_or(start_ns, |s| w.ios[s.last].rec_c.max(start_ns));
    let from = start_ns.saturating_sub(3 * slice_idle_ns);
    let mut last_c: Vec<Option<u64>> = vec![None; w.streams.len()];
    let mut pause: Option<Pause> = None;
    for io in &w.ios {
        let s = io.stream as usize;
        if let Some(c) = last_c[s]
            && io.rec_q > c
            && io.rec_q >= from
            && c <= until
            && streams.contains(&io.stream)
        {
            let p = Pause {
                stream: io.stream,
                from_ns: c,
                to_ns: io.rec_q,
            };
            if pause.is_none_or(|q| p.ns() > q.ns()) {
                pause = Some(p);
            }
        }
        if io.rec_c > 0 {
            last_c[s] = Some(last_c[s].map_or(io.rec_c, |l| l.max(io.rec_c)));
        }
    }
    let bytes = |lo: u64, hi: u64| -> u64 {
        w.ios
            .iter()
            .filter(|io| io.rec_c > lo && io.rec_c <= hi)
            .map(|io| u64::from(io.sectors) << 9)
            .sum()
    };
    let rate = |b: u64, ns: u64| b as f64 / ns.max(1) as f64 * 1e3;
    let span = w.end_ns.saturating_sub(w.start_ns);
    let storm_ns = end_ns.saturating_sub(start_ns);
    let outside_ns = span.saturating_sub(storm_ns);
    let in_bytes = bytes(start_ns, end_ns);
    let all_bytes = bytes(0, u64::MAX);
    let seeks = inside.iter().skip(1).filter(|s| s.seek_before).count() as u64;
    Storm {
        source,
        start_ns,
        end_ns,
        streams,
        requests: inside.iter().map(|s| u64::from(s.bios)).sum(),
        slices: inside.len() as u64,
        seeks,
        slices_before,
        pause,
        mb_s_in: rate(in_bytes, storm_ns),
        mb_s_outside: (outside_ns >= MIN_OUTSIDE_NS && 10 * outside_ns >= span)
            .then(|| rate(all_bytes - in_bytes, outside_ns)),
        log: None,
    }
}

/// The storm the recording shows, if any: from BFQ's log when the recording has one (its
/// word stands, storm or not), else inferred from the trace.
pub fn find(w: &Workload, notes: &[Note], slice_idle_ns: u64) -> Option<Storm> {
    match from_log(w, notes, slice_idle_ns) {
        Some(found) => found,
        None => inferred(w, slice_idle_ns),
    }
}

/// From BFQ's log: `None` when the log has no expiration (no log, or not BFQ's); else
/// whether it shows a storm. A storm: at least [`MIN_SWITCHES`] `preempted` expirations in
/// a row, among at least two queues, half of all the log's expirations or more, and no
/// raised weight on its queues (those preempt by raising: `weight_raising_costs`).
pub fn from_log(w: &Workload, notes: &[Note], slice_idle_ns: u64) -> Option<Option<Storm>> {
    let mut exps: Vec<(u64, u32, ExpireReason, &str)> = Vec::new();
    let mut raised: FxHashSet<u32> = FxHashSet::default();
    for n in notes {
        match bfqlog::parse(&n.text) {
            BfqLogged::Expire { pid, reason, .. } => {
                exps.push((n.ts_ns, pid, reason, n.text.as_str()))
            }
            BfqLogged::Raise { pid, .. } => {
                raised.insert(pid);
            }
            _ => {}
        }
    }
    if exps.is_empty() {
        return None;
    }
    // The notes come from per-CPU buffers, not always in time order.
    exps.sort_by_key(|e| e.0);
    let preempted = exps
        .iter()
        .filter(|e| e.2 == ExpireReason::Preempted)
        .count() as u64;
    // The longest run of preemptions in a row: [i, j).
    let (mut best, mut k) = ((0usize, 0usize), 0usize);
    while k < exps.len() {
        if exps[k].2 != ExpireReason::Preempted {
            k += 1;
            continue;
        }
        let i = k;
        while k < exps.len() && exps[k].2 == ExpireReason::Preempted {
            k += 1;
        }
        if k - i > best.1 - best.0 {
            best = (i, k);
        }
    }
    let (i, j) = best;
    let run = &exps[i..j];
    let queues: FxHashSet<u32> = run.iter().map(|e| e.1).collect();
    let in_a_row = run.len() as u64;
    if in_a_row < MIN_SWITCHES
        || 2 * preempted < exps.len() as u64
        || queues.len() < 2
        || queues.iter().any(|p| raised.contains(p))
    {
        return Some(None);
    }
    let started_by = i
        .checked_sub(1)
        .map(|p| (exps[p].0, exps[p].1, exps[p].2, exps[p].3.trim().to_owned()));
    let start_ns = started_by.as_ref().map_or(run[0].0, |s| s.0);
    let end_ns = run[run.len() - 1].0;
    let mut storm = measured(w, Source::Log, start_ns, end_ns, slice_idle_ns);
    // BFQ names the queue that expired waiting: its process's pause is the one that
    // started it, whatever another process did meanwhile.
    if let Some((t, pid, ExpireReason::TooIdle | ExpireReason::NoMoreRequests, _)) = &started_by
        && let Some(s) = w.streams.iter().position(|st| st.pid == *pid)
    {
        storm.pause = pause_across(w, s as u32, *t).or(storm.pause);
    }
    storm.log = Some(Logged {
        expirations: exps.len() as u64,
        preempted,
        in_a_row,
        started_by,
        first: (run[0].0, run[0].3.trim().to_owned()),
    });
    Some(Some(storm))
}

/// Stream `s`'s pause across `t`: its last completion at or before `t` and its next queued
/// bio after it.
fn pause_across(w: &Workload, s: u32, t: u64) -> Option<Pause> {
    let mine = || w.ios.iter().filter(move |io| io.stream == s);
    let from_ns = mine()
        .map(|io| io.rec_c)
        .filter(|&c| c > 0 && c <= t)
        .max()?;
    let to_ns = mine().map(|io| io.rec_q).filter(|&q| q > t).min()?;
    Some(Pause {
        stream: s,
        from_ns,
        to_ns,
    })
}

/// From the trace alone: the longest stretch of at least [`MIN_SWITCHES`] slices of at most
/// [`SHORT_SLICE`] requests each, alternating between sequential processes that depend on
/// no other's I/O, each switch a seek, lasting at least a fifth of the recording.
pub fn inferred(w: &Workload, slice_idle_ns: u64) -> Option<Storm> {
    let seq = sequential_streams(w);
    let eligible = |s: u32| {
        let st = &w.streams[s as usize];
        seq[s as usize]
            && st.depends_on.is_empty()
            && !w
                .streams
                .iter()
                .any(|o| o.depends_on.iter().any(|(d, _)| *d == s))
    };
    let all = slices(w);
    let mut best = (0usize, 0usize);
    let mut k = 0;
    while k < all.len() {
        let ok = |m: usize, first: bool| {
            let s = &all[m];
            s.bios <= SHORT_SLICE && eligible(s.stream) && (first || s.seek_before)
        };
        if !ok(k, true) {
            k += 1;
            continue;
        }
        let i = k;
        k += 1;
        while k < all.len() && ok(k, false) {
            k += 1;
        }
        if k - i > best.1 - best.0 {
            best = (i, k);
        }
    }
    let (i, j) = best;
    if ((j - i) as u64) < MIN_SWITCHES {
        return None;
    }
    // It begins where the slice before it ended (its first request may have waited long).
    let start_ns = match i.checked_sub(1) {
        Some(p) => w.ios[all[p].last].rec_c,
        None => w.ios[all[i].first].rec_q,
    };
    let end_ns = w.ios[all[j - 1].last].rec_c;
    let span = w.end_ns.saturating_sub(w.start_ns).max(1);
    if (end_ns.saturating_sub(start_ns) as f64) < MIN_SPAN_SHARE * span as f64 {
        return None;
    }
    let storm = measured(w, Source::Inferred, start_ns, end_ns, slice_idle_ns);
    (storm.streams.len() >= 2).then_some(storm)
}
