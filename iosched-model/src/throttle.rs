//! Throttling the trace shows, measured (not modelled): who waited, how long, when.
//!
//! - Writeback throttling (block/blk-wbt.c) runs in `rq_qos_throttle()`, which
//!   `blk_mq_submit_bio()` calls after the bio's Q and merge attempt and before its request
//!   is allocated: a throttled bio waits between Q and G. Only "tracked" bios wait
//!   (`wbt_should_throttle`): writes that are not O_DIRECT (`REQ_SYNC|REQ_IDLE` both set),
//!   and discards. It has no per-bio tracepoint (`wbt_step`/`wbt_timer` only report its
//!   scaling), so a wait is read from the bio's own Q->G.
//!   Request allocation also sleeps there when every request (scheduler tag, or driver tag
//!   under `none`) is in use: such a Q->G is the tags' doing, not wbt's, and is counted
//!   apart ([`WbtWaits::tag_bound`]).
//! - Kyber (block/kyber-iosched.c) holds a request in its domain's list when the domain's
//!   tokens run out (`kyber_get_domain_token`, which fires `kyber_throttled` when the
//!   hardware queue starts waiting): the request waits between I and D. A domain is
//!   throttled from that event until its next dispatch; the share of each request's I->D
//!   inside such a period is the throttle's.
//!
//! Owns: these measurements. Must not: model, print.

use rustc_hash::FxHashMap;
use serde::Serialize;

use iosched_core::{
    event::{Event, EventKind, Op, ReqFlags},
    timeline::BioLife,
};

/// A bio whose request came this long after its Q slept for it (allocation itself takes a
/// few µs): a wait in `rq_qos_wait` or for a tag.
pub const SLEPT_NS: u64 = 20_000;

/// Waits this close together are told as one period.
pub const JOIN_NS: u64 = 10_000_000;

/// Kyber's domains (`kyber_domain_names`) and initial depths (`kyber_depth`).
pub const KYBER_DOMAINS: [&str; 4] = ["read", "write", "discard", "other"];
pub const KYBER_DEPTH: [u32; 4] = [256, 128, 64, 16];

/// Waits of one kind: how many, how long, whose, when.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Waits {
    /// Bios (wbt) or requests (kyber) that waited.
    pub count: u64,
    pub total_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// The submitters that waited, most waited first.
    pub processes: Vec<Sufferer>,
    /// When someone waited, ns after the first Q of the trace (waits less than
    /// [`JOIN_NS`] apart joined).
    pub intervals: Vec<(u64, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sufferer {
    pub pid: u32,
    pub comm: String,
    pub count: u64,
    pub total_ns: u64,
}

/// The Q->G waits of buffered writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WbtWaits {
    pub waits: Waits,
    /// Tracked writes whose Q->G came while every request was in use: tag waits.
    pub tag_bound: u64,
    /// Requests that may exist at once (`nr_requests`, or the most the trace had).
    pub requests_cap: u32,
    /// Most tracked writes holding requests at once when one got its request without
    /// waiting (itself included): the most the throttle let through, as the trace shows it.
    pub limit_seen: u32,
    /// Waits that ended only once the tracked writes had drained (none other holding a
    /// request when the woken one got its own). wbt wakes its sleepers only when the count of
    /// tracked writes drops to 0 on a device with a volatile write cache, unless a task
    /// was recently dirty-throttled (`wbt_rqw_done`); below the limit elsewhere.
    pub woken_when_drained: u64,
    /// wbt's max depth when they waited (the middle one of those in force at their Qs),
    /// from the trace's `wbt_step` events; `None` without them.
    pub max_depth_at_waits: Option<u32>,
    /// The bios that waited for wbt, by index in the order given.
    #[serde(skip)]
    pub waited: Vec<bool>,
}

/// One `wbt_step` event: wbt changed its scale step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WbtStep {
    /// ns after the first Q of the trace.
    pub t_ns: u64,
    pub step: i32,
    pub window_us: u64,
    pub background: u32,
    pub normal: u32,
    pub max: u32,
}

/// One Kyber domain's throttling.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KyberDomain {
    pub name: &'static str,
    /// `kyber_throttled` events for it.
    pub throttled_events: u64,
    pub waits: Waits,
    /// Depths `kyber_adjust` set, lowest and highest; `None` without such events.
    pub depth_range: Option<(u32, u32)>,
    /// The depth in force at most of its `kyber_throttled` events.
    pub depth_at_throttle: Option<u32>,
}

/// Everything the trace shows of throttling on one device.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Throttling {
    pub wbt: WbtWaits,
    pub wbt_steps: Vec<WbtStep>,
    /// Domains with `kyber_throttled` events.
    pub kyber: Vec<KyberDomain>,
}

/// `wbt_should_throttle()`.
pub fn wbt_tracked(op: Op, flags: ReqFlags) -> bool {
    match op {
        Op::Write => !(flags.has(ReqFlags::SYNC) && flags.has(ReqFlags::IDLE)),
        Op::Discard => true,
        _ => false,
    }
}

/// A step function of "how many at once", with range maxima.
struct Level {
    times: Vec<u64>,
    /// Value from `times[k]` on.
    values: Vec<u32>,
    /// Sparse table of maxima over `values`.
    table: Vec<Vec<u32>>,
}

impl Level {
    /// From (start, end) intervals: +1 at start, -1 at end (ends first at equal times).
    fn of(intervals: impl Iterator<Item = (u64, u64)>) -> Level {
        let mut marks: Vec<(u64, i8)> = Vec::new();
        for (s, e) in intervals {
            marks.push((s, 1));
            marks.push((e.max(s), -1));
        }
        marks.sort_unstable();
        let (mut times, mut values) = (Vec::with_capacity(marks.len()), Vec::new());
        let mut level = 0i64;
        for (t, d) in marks {
            level += i64::from(d);
            let v = level.max(0) as u32;
            if times.last() == Some(&t) {
                *values.last_mut().expect("paired") = v;
            } else {
                times.push(t);
                values.push(v);
            }
        }
        let mut table = vec![values.clone()];
        let mut w = 1;
        while 2 * w <= values.len() {
            let prev = table.last().expect("non-empty");
            let next: Vec<u32> = (0..=values.len() - 2 * w)
                .map(|k| prev[k].max(prev[k + w]))
                .collect();
            table.push(next);
            w *= 2;
        }
        Level {
            times,
            values,
            table,
        }
    }

    /// The value at `t`.
    fn at(&self, t: u64) -> u32 {
        match self.times.partition_point(|x| *x <= t) {
            0 => 0,
            k => self.values[k - 1],
        }
    }

    /// The highest value over [from, to).
    fn max_over(&self, from: u64, to: u64) -> u32 {
        let first = self.at(from);
        let (a, b) = (
            self.times.partition_point(|x| *x <= from),
            self.times.partition_point(|x| *x < to),
        );
        if a >= b {
            return first;
        }
        let k = usize::BITS - 1 - (b - a).leading_zeros();
        let w = 1usize << k;
        first.max(self.table[k as usize][a].max(self.table[k as usize][b - w]))
    }
}

/// Accumulates waits into [`Waits`].
#[derive(Default)]
struct Tally {
    durations: Vec<u64>,
    spans: Vec<(u64, u64)>,
    by_pid: FxHashMap<u32, Sufferer>,
}

impl Tally {
    fn add(&mut self, b: &BioLife, from: u64, to: u64) {
        self.durations.push(to - from);
        self.spans.push((from, to));
        if let Some(s) = b.submitter {
            let e = self.by_pid.entry(s.pid).or_insert_with(|| Sufferer {
                pid: s.pid,
                comm: s.comm.as_str().to_string(),
                ..Default::default()
            });
            e.count += 1;
            e.total_ns += to - from;
        }
    }

    fn finish(mut self, start_ns: u64) -> Waits {
        self.durations.sort_unstable();
        let n = self.durations.len();
        let p99 = if n == 0 {
            0
        } else {
            self.durations[((n * 99).div_ceil(100)).clamp(1, n) - 1]
        };
        self.spans.sort_unstable();
        let mut intervals: Vec<(u64, u64)> = Vec::new();
        for (s, e) in self.spans {
            let (s, e) = (s.saturating_sub(start_ns), e.saturating_sub(start_ns));
            match intervals.last_mut() {
                Some(last) if s <= last.1 + JOIN_NS => last.1 = last.1.max(e),
                _ => intervals.push((s, e)),
            }
        }
        let mut processes: Vec<Sufferer> = self.by_pid.into_values().collect();
        processes.sort_by_key(|p| (std::cmp::Reverse(p.total_ns), p.pid));
        Waits {
            count: n as u64,
            total_ns: self.durations.iter().sum(),
            p99_ns: p99,
            max_ns: self.durations.last().copied().unwrap_or(0),
            processes,
            intervals,
        }
    }
}

/// Bios that own a request (got a G, merged into none) and when that request existed.
fn owners(bios: &[BioLife]) -> impl Iterator<Item = (&BioLife, u64)> + Clone {
    bios.iter()
        .filter(|b| b.m.is_none())
        .filter_map(|b| b.g.map(|g| (b, g)))
}

/// The Q->G waits of `bios` (one device's), with `nr_requests` the requests that may exist
/// at once (`None`: the most the trace had at once, which under a tight throttle is the
/// throttle's doing: then waits are called tag waits, and wbt is not blamed). A wait is a Q->G of more than
/// [`SLEPT_NS`] during which a request completed (a sleeper in `rq_qos_wait` or in tag
/// allocation is woken by a completion; a Q->G stretched by preemption need not span one).
pub fn wbt_waits(bios: &[BioLife], nr_requests: Option<u32>, start_ns: u64) -> WbtWaits {
    let live = Level::of(owners(bios).map(|(b, g)| (g, b.c)));
    let tracked = Level::of(
        owners(bios)
            .filter(|(b, _)| wbt_tracked(b.op, b.flags))
            .map(|(b, g)| (g, b.c)),
    );
    let cap = nr_requests
        .filter(|n| *n > 0)
        .unwrap_or_else(|| live.values.iter().copied().max().unwrap_or(0));
    let mut completions: Vec<u64> = owners(bios).map(|(b, _)| b.c).collect();
    completions.sort_unstable();
    let mut tracked_ends: Vec<u64> = owners(bios)
        .filter(|(b, _)| wbt_tracked(b.op, b.flags))
        .map(|(b, _)| b.c)
        .collect();
    tracked_ends.sort_unstable();
    let mut tally = Tally::default();
    let (mut tag_bound, mut limit, mut drained) = (0, 0, 0);
    let mut waited = vec![false; bios.len()];
    for (k, b) in bios.iter().enumerate() {
        let (Some(q), Some(g), None) = (b.q, b.g, b.m) else {
            continue;
        };
        if !wbt_tracked(b.op, b.flags) {
            continue;
        }
        if g <= q + SLEPT_NS {
            limit = limit.max(tracked.at(g));
            continue;
        }
        let woken =
            completions.partition_point(|c| *c <= q) < completions.partition_point(|c| *c <= g);
        if !woken {
            continue;
        }
        if live.max_over(q, g) >= cap {
            tag_bound += 1;
            continue;
        }
        waited[k] = true;
        // Tracked writes still holding requests when it got its own: those from before
        // its G, less those that completed at that very time (woken by them).
        let ends_at_g =
            tracked_ends.partition_point(|c| *c <= g) - tracked_ends.partition_point(|c| *c < g);
        let held = tracked.at(g.saturating_sub(1)) as usize;
        drained += u64::from(held <= ends_at_g);
        tally.add(b, q, g);
    }
    WbtWaits {
        waits: tally.finish(start_ns),
        tag_bound,
        requests_cap: cap,
        limit_seen: limit,
        woken_when_drained: drained,
        max_depth_at_waits: None,
        waited,
    }
}

/// The domain index of a kyber event's `aux`: the index (as `iosched_trace_common`
/// documents it), or, in recordings whose eBPF side kept the domain's name bytes, the name.
fn kyber_domain(aux: u64) -> usize {
    match aux as u8 {
        b'R' => 0,
        b'W' => 1,
        b'D' => 2,
        b'O' => 3,
        _ => ((aux & 0xffff_ffff) as usize).min(3),
    }
}

fn kyber_depth(ev: &Event) -> u32 {
    if (ev.aux as u8).is_ascii_uppercase() {
        ev.bytes
    } else {
        (ev.aux >> 32) as u32
    }
}

/// `kyber_sched_domain()`.
pub fn kyber_domain_of(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
        Op::Discard => 2,
        _ => 3,
    }
}

/// Kyber's throttling of `bios` (one device's) from its `kyber_throttled`/`kyber_adjust`
/// `events` (time-ordered): per throttled domain, the requests that waited inside a
/// throttled period.
pub fn kyber_waits(bios: &[BioLife], events: &[Event], start_ns: u64) -> Vec<KyberDomain> {
    let mut throttled: [Vec<u64>; 4] = Default::default();
    let mut adjusts: [Vec<(u64, u32)>; 4] = Default::default();
    for ev in events {
        match ev.kind {
            EventKind::KyberThrottled => throttled[kyber_domain(ev.aux)].push(ev.ts_ns),
            EventKind::KyberAdjust => {
                adjusts[kyber_domain(ev.aux)].push((ev.ts_ns, kyber_depth(ev)))
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for d in 0..4 {
        if throttled[d].is_empty() {
            continue;
        }
        throttled[d].sort_unstable();
        adjusts[d].sort_unstable();
        // The domain's requests (I, D), by D.
        let mut rqs: Vec<(&BioLife, u64, u64)> = owners(bios)
            .filter(|(b, _)| kyber_domain_of(b.op) == d)
            .filter_map(|(b, g)| b.d.map(|dd| (b, b.i.unwrap_or(g), dd)))
            .collect();
        rqs.sort_by_key(|r| r.2);
        let dispatches: Vec<u64> = rqs.iter().map(|r| r.2).collect();
        // Throttled periods: from each event to the domain's next dispatch (the event
        // follows the dispatch that took the last token, so a dispatch at its very time
        // is not the one that ends it).
        let mut periods: Vec<(u64, u64)> = Vec::new();
        for &t in &throttled[d] {
            let k = dispatches.partition_point(|x| *x <= t);
            let Some(&end) = dispatches.get(k) else {
                continue;
            };
            match periods.last_mut() {
                Some(last) if t <= last.1 => last.1 = last.1.max(end),
                _ => periods.push((t, end)),
            }
        }
        let mut tally = Tally::default();
        for &(b, i, dd) in &rqs {
            let k = periods.partition_point(|p| p.1 <= i);
            let mut waited = 0;
            let mut from = None;
            for p in &periods[k..] {
                if p.0 >= dd {
                    break;
                }
                let (s, e) = (p.0.max(i), p.1.min(dd));
                if e > s {
                    waited += e - s;
                    from.get_or_insert(s);
                }
            }
            if let Some(s) = from {
                tally.add(b, s, s + waited);
            }
        }
        let depth_at = |t: u64| {
            let k = adjusts[d].partition_point(|a| a.0 <= t);
            if k == 0 {
                KYBER_DEPTH[d]
            } else {
                adjusts[d][k - 1].1
            }
        };
        let mut at_throttle: FxHashMap<u32, u32> = FxHashMap::default();
        for &t in &throttled[d] {
            *at_throttle.entry(depth_at(t)).or_insert(0) += 1;
        }
        let depth_at_throttle = at_throttle
            .into_iter()
            .max_by_key(|(depth, n)| (*n, std::cmp::Reverse(*depth)))
            .map(|(depth, _)| depth);
        let depths = adjusts[d].iter().map(|a| a.1);
        out.push(KyberDomain {
            name: KYBER_DOMAINS[d],
            throttled_events: throttled[d].len() as u64,
            waits: tally.finish(start_ns),
            depth_range: depths.clone().min().zip(depths.max()),
            depth_at_throttle,
        });
    }
    out
}

/// The max depth `steps` (time-ordered) had in force at each wait's Q, middle value; waits
/// before the first step are left out (the depth they saw is not in the trace).
pub fn max_depth_at(steps: &[WbtStep], wait_q_ns: impl Iterator<Item = u64>) -> Option<u32> {
    let mut at: Vec<u32> = wait_q_ns
        .filter_map(|t| {
            let k = steps.partition_point(|s| s.t_ns <= t);
            (k > 0).then(|| steps[k - 1].max)
        })
        .collect();
    at.sort_unstable();
    at.get(at.len() / 2).copied()
}

/// `wbt_step` events (as `iosched_trace_common::kind::WBT_STEP` lays them out).
pub fn wbt_steps(events: &[Event], start_ns: u64) -> Vec<WbtStep> {
    events
        .iter()
        .filter(|e| e.kind == EventKind::WbtStep)
        .map(|e| {
            let (background, normal, max) = e.wbt_limits().unwrap_or_default();
            WbtStep {
                t_ns: e.ts_ns.saturating_sub(start_ns),
                step: e.aux as u32 as i32,
                window_us: e.sector / 1000,
                background,
                normal,
                max,
            }
        })
        .collect()
}
