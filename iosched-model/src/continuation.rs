//! Time-bounded processes, continued: a process that issued a regular pattern until a
//! deadline (fio `--time_based --runtime`) did as much I/O as its scheduler let it do in that
//! time. Replaying only its recorded bios under a scheduler that serves it faster ends early
//! (and predicts the recorded bytes over a shorter time); under a slower one it runs long.
//! Such a process is replayed as the job it was: its pattern (sequential, or random over the
//! span it covered, at its size, think time and depth) goes on after its recorded bios, and
//! it stops at its deadline, so throughput compares over the same wall time.
//!
//! The recording does not say how a job was bounded. A count- or size-bounded job ends when
//! its data is done, at no particular time; a time-bounded one ends at a whole number of
//! seconds after it started (fio's `--runtime` is given in seconds), every process of the job
//! at once. So `continue=auto` (the default) continues only when every regular process that
//! ran to the end of the recording stopped issuing within one or two of its own I/O periods
//! before, or while its last bio was in flight at, the same whole number of seconds after
//! its first I/O; `continue=1` continues the
//! regular processes to the recorded duration whatever the evidence; `continue=0` never.
//! A process of a continued job with too few bios for a pattern of its own (one the
//! scheduler starved) goes on with its job when its bios follow the job's pattern.
//!
//! Owns: detecting time-bounded regular streams, generating their continuation. Must not:
//! simulate (the simulator stops each continued process at its [`Stream::until_ns`]).
//!
//! [`Stream::until_ns`]: super::workload::Stream::until_ns

use serde::Serialize;

use iosched_core::event::Op;

use super::{
    device::DeviceModel,
    sched::{SettingError, Settings},
    workload::{Io, StreamKind, Trigger, Workload},
};

/// The setting that chooses the [`Mode`] (one of the simulator's keys, `sched::SIM_KEYS`).
pub const KEY: &str = super::sched::CONTINUE_KEY;

/// A process needs this many bios for its pattern to say anything.
pub const MIN_IOS: usize = 8;
/// Share of a regular process's bios of its most common size, and of its bios that continue
/// the previous one (sequential) or do not (random).
pub const REGULAR_SHARE: f64 = 0.9;
/// Slack around a job's deadline: fio starts its clock a little before its first I/O.
pub const DEADLINE_SLACK_NS: u64 = 10_000_000;
/// Processes whose last bio was queued, or came back, in the last tenth of the workload ran
/// to its end (one still waiting for its I/O at the end was still running).
pub const RAN_TO_END_SHARE: f64 = 0.9;
/// Most bios a continuation adds over all processes (a bound on memory; a run that needs more
/// is cut there, and says so).
pub const MAX_ADDED: u64 = 4_000_000;
/// Seed of the random offsets (runs are deterministic).
pub const SEED: u64 = 0x1057_c4ed;

/// `continue=auto|1|0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Where the recording shows a time-bounded job.
    Auto,
    /// Every regular process, to the recorded duration.
    On,
    Off,
}

impl Mode {
    pub fn of(settings: &Settings) -> Result<Mode, SettingError> {
        match settings.0.get(KEY).map(String::as_str) {
            None | Some("auto") => Ok(Mode::Auto),
            Some(_) if settings.bool_or(KEY, false)? => Ok(Mode::On),
            Some(_) => Ok(Mode::Off),
        }
    }
}

/// Where a continued process's next bios go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Pattern {
    /// Each bio where the previous one ended.
    Sequential,
    /// Uniformly over `[lo, hi)`, aligned to the size from `lo` (fio `randread`).
    Random { lo: u64, hi: u64 },
}

/// One process continued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Continued {
    pub stream: u32,
    pub pattern: Pattern,
    pub sectors: u32,
    /// Each continued bio follows its predecessor's completion (one in flight) by this much
    /// (its think time), or, for a process with several in flight, its predecessor's
    /// submission by this much (its window, replayed by the simulator, holds it back).
    pub delay_ns: u64,
    pub windowed: bool,
    /// Its bios were submitted each in its own plug (fio's libaio).
    pub plug_end: bool,
    /// Its first I/O and its end, ns after the workload's start.
    pub first_q_ns: u64,
    pub until_ns: u64,
}

/// What a replay continues, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    pub mode: Mode,
    /// How long each continued process runs (from its first I/O), ns.
    pub runtime_ns: u64,
    /// The runtime is a whole number of seconds every process that ran to the end agrees
    /// with (a time-bounded job); false: the recorded duration, as asked (`continue=1`).
    pub time_bounded: bool,
    pub streams: Vec<Continued>,
}

/// A process's pattern, when it has a regular one.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Regular {
    pattern: Pattern,
    op: Op,
    sync: bool,
    sectors: u32,
    delay_ns: u64,
    windowed: bool,
    plug_end: bool,
    first_q: u64,
    last_q: u64,
    /// The last completion of its bios: a closed-loop job that ran out of time while its
    /// last bio was in flight stopped when that bio came back.
    last_c: u64,
    /// Median gap between its Qs.
    period: u64,
}

/// The pattern of stream `s` from its bios (indices into `w.ios`, in order), or why it has
/// none.
fn regular(w: &Workload, s: u32, ios: &[u32]) -> Result<Regular, &'static str> {
    let st = &w.streams[s as usize];
    if ios.len() < MIN_IOS {
        return Err("too few I/Os");
    }
    if !st.depends_on.is_empty() {
        return Err("waits for another process");
    }
    let windowed = match st.kind {
        StreamKind::ClosedLoop => false,
        StreamKind::Windowed => true,
        StreamKind::OpenLoop => return Err("open loop"),
    };
    let io = |i: &u32| &w.ios[*i as usize];
    let first = io(&ios[0]);
    if ios
        .iter()
        .any(|i| io(i).op != first.op || io(i).sync != first.sync)
    {
        return Err("mixed operations");
    }
    let n = ios.len() as f64;
    let mut sizes: Vec<u32> = ios.iter().map(|i| io(i).sectors).collect();
    sizes.sort_unstable();
    let (sectors, most) = mode_of(&sizes);
    if sectors == 0 || (most as f64) < REGULAR_SHARE * n {
        return Err("no steady size");
    }
    let contiguous = ios
        .windows(2)
        .filter(|p| io(&p[1]).sector == io(&p[0]).sector + u64::from(io(&p[0]).sectors))
        .count() as f64;
    let pairs = n - 1.0;
    let pattern = if contiguous >= REGULAR_SHARE * pairs {
        Pattern::Sequential
    } else if contiguous <= (1.0 - REGULAR_SHARE) * pairs {
        let lo = ios.iter().map(|i| io(i).sector).min().unwrap_or(0);
        let hi = ios
            .iter()
            .map(|i| io(i).sector + u64::from(io(i).sectors))
            .max()
            .unwrap_or(lo);
        Pattern::Random { lo, hi }
    } else {
        return Err("neither sequential nor random");
    };
    Ok(timed(w, ios, pattern, sectors, windowed, 0))
}

/// A process's [`Regular`] from its bios `ios` (at least two) and its pattern: its think
/// time (the median of its own delays, else `default_delay`), plugging and times.
fn timed(
    w: &Workload,
    ios: &[u32],
    pattern: Pattern,
    sectors: u32,
    windowed: bool,
    default_delay: u64,
) -> Regular {
    let io = |i: &u32| &w.ios[*i as usize];
    let first = io(&ios[0]);
    let delays = ios
        .iter()
        .filter_map(|i| match io(i).trigger {
            Trigger::AfterCompletion { delay, .. } => Some(delay),
            Trigger::AfterQueue { delay, .. } if windowed => Some(delay),
            _ => None,
        })
        .collect();
    let gaps = ios
        .windows(2)
        .map(|p| io(&p[1]).rec_q.saturating_sub(io(&p[0]).rec_q))
        .collect();
    let plug_ends = ios.iter().filter(|i| io(i).plug_end).count();
    Regular {
        pattern,
        op: first.op,
        sync: first.sync,
        sectors,
        delay_ns: median(delays).unwrap_or(default_delay),
        windowed,
        plug_end: 2 * plug_ends >= ios.len(),
        first_q: first.rec_q.saturating_sub(w.start_ns),
        last_q: io(ios.last().expect("not empty"))
            .rec_q
            .saturating_sub(w.start_ns),
        last_c: ios
            .iter()
            .map(|i| io(i).rec_c)
            .max()
            .unwrap_or(0)
            .saturating_sub(w.start_ns),
        period: median(gaps).unwrap_or(0),
    }
}

/// The median (the upper one of an even count), `None` of nothing.
fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    v.get(v.len() / 2).copied()
}

/// The most common value of a sorted slice, and how often it occurs.
fn mode_of(sorted: &[u32]) -> (u32, usize) {
    let mut best = (0, 0);
    let mut k = 0;
    while k < sorted.len() {
        let run = sorted[k..].iter().take_while(|v| **v == sorted[k]).count();
        if run > best.1 {
            best = (sorted[k], run);
        }
        k += run;
    }
    best
}

/// A whole number of seconds every `(first_q, last_q, last_c, period)` agrees with as its
/// job's runtime: not before its last Q (minus slack), and not after the later of two of its
/// periods past its last Q and its last completion (plus slack).
///
/// fio checks its clock when an I/O comes back, so a job's deadline falls between its last
/// Q and that I/O's completion. Under a scheduler that serves its processes unevenly (BFQ's
/// slices: eight sequential readers, 32 random ones) a process that waited for a slice
/// issued its last bio long before the deadline, many of its median periods: its last Q
/// alone says little, its last completion bounds the deadline.
fn whole_seconds(ran: &[Regular]) -> Option<u64> {
    const S: u64 = 1_000_000_000;
    let lo = ran.iter().map(Regular::earliest_runtime).max()?;
    let hi = ran.iter().map(Regular::latest_runtime).min()?;
    let secs = lo.div_ceil(S).max(1);
    (secs * S <= hi).then_some(secs * S)
}

impl Regular {
    /// The shortest runtime its job can have had: it issued its last bio before its deadline.
    fn earliest_runtime(&self) -> u64 {
        (self.last_q - self.first_q).saturating_sub(DEADLINE_SLACK_NS)
    }

    /// The longest: it would have issued again within two periods, or it stopped when its
    /// last bio came back ([`whole_seconds`]).
    fn latest_runtime(&self) -> u64 {
        let by_period = self.last_q - self.first_q + 2 * self.period;
        let by_completion = self.last_c.saturating_sub(self.first_q);
        by_period.max(by_completion) + DEADLINE_SLACK_NS
    }

    /// It ran to the end of a workload whose last bio was queued at `end` (its own last bio
    /// queued, or back, in the workload's last tenth).
    fn ran_to(&self, end: u64) -> bool {
        self.last_q.max(self.last_c) as f64 >= RAN_TO_END_SHARE * end as f64
    }
}

/// The pattern of stream `s`, too thin for [`regular`] (fewer than [`MIN_IOS`] bios), taken
/// from its job: the regular processes of its name, operation and size. Under BFQ, 32
/// sequential readers of one fio job were served so unevenly that the last few did 4 to 7
/// bios in 4 s where the first did 35; left out, the replay served each its few bios early
/// and ran the rest of the time with five readers fewer. `None` unless its job agrees on one
/// pattern and the thin stream's own bios follow it (every pair contiguous for sequential
/// readers, none for random ones). A random one spans the job's median span, around its own
/// bios; its think time is its own, else the job's.
///
/// A single bio follows any pattern and shows no loop (closed or windowed: its job's). On
/// a fresh test-bed set five of the 32 readers did one bio each, queued at the start and
/// back after the deadline: BFQ never served them before the others stopped. [`plan`] takes
/// one only when it was in flight until its job's end (its latest runtime is then its bio's
/// completion).
fn sibling(w: &Workload, s: u32, ios: &[u32], job: &[(u32, Regular)]) -> Option<Regular> {
    let st = &w.streams[s as usize];
    if ios.is_empty() || !st.depends_on.is_empty() {
        return None;
    }
    let own_loop = match (ios.len(), st.kind) {
        (1, _) => None,
        (_, StreamKind::ClosedLoop) => Some(false),
        (_, StreamKind::Windowed) => Some(true),
        (_, StreamKind::OpenLoop) => return None,
    };
    let io = |i: &u32| &w.ios[*i as usize];
    let first = io(&ios[0]);
    let kin: Vec<&Regular> = job
        .iter()
        .filter(|(k, r)| {
            w.streams[*k as usize].comm == st.comm
                && r.op == first.op
                && r.sync == first.sync
                && r.sectors == first.sectors
                && own_loop.is_none_or(|windowed| r.windowed == windowed)
        })
        .map(|(_, r)| r)
        .collect();
    let windowed = kin.first()?.windowed;
    if kin.iter().any(|r| r.windowed != windowed) {
        return None;
    }
    let sequential = kin.iter().all(|r| r.pattern == Pattern::Sequential);
    let random = kin
        .iter()
        .all(|r| matches!(r.pattern, Pattern::Random { .. }));
    if !(sequential || random) {
        return None;
    }
    if ios
        .iter()
        .any(|i| io(i).op != first.op || io(i).sync != first.sync || io(i).sectors != first.sectors)
    {
        return None;
    }
    let contiguous = |p: &[u32]| io(&p[1]).sector == io(&p[0]).sector + u64::from(first.sectors);
    let pattern = if sequential {
        if !ios.windows(2).all(contiguous) {
            return None;
        }
        Pattern::Sequential
    } else {
        if ios.windows(2).any(contiguous) {
            return None;
        }
        let span = median(
            kin.iter()
                .filter_map(|r| match r.pattern {
                    Pattern::Random { lo, hi } => Some(hi - lo),
                    Pattern::Sequential => None,
                })
                .collect(),
        )?;
        let own_lo = ios.iter().map(|i| io(i).sector).min()?;
        let own_hi = ios.iter().map(|i| io(i).sector).max()? + u64::from(first.sectors);
        // Centred on its own bios (as far as the start of the device allows), starting a
        // whole number of bios below the lowest of them, never narrower than they are.
        let step = u64::from(first.sectors);
        let mid = own_lo / 2 + own_hi / 2;
        let centred_lo = mid.saturating_sub(span / 2).min(own_lo);
        let lo = own_lo - (own_lo - centred_lo) / step * step;
        Pattern::Random {
            lo,
            hi: (lo + span).max(own_hi),
        }
    };
    let job_delay = median(kin.iter().map(|r| r.delay_ns).collect()).unwrap_or(0);
    Some(timed(w, ios, pattern, first.sectors, windowed, job_delay))
}

/// Bio indices of each stream, in order.
fn by_stream(w: &Workload) -> Vec<Vec<u32>> {
    let mut v: Vec<Vec<u32>> = vec![Vec::new(); w.streams.len()];
    for (i, io) in w.ios.iter().enumerate() {
        v[io.stream as usize].push(i as u32);
    }
    v
}

/// What to continue under `mode`; `None` when nothing is.
pub fn plan(w: &Workload, mode: Mode) -> Option<Plan> {
    if mode == Mode::Off {
        return None;
    }
    let lists = by_stream(w);
    let regulars: Vec<(u32, Regular)> = lists
        .iter()
        .enumerate()
        .filter_map(|(s, ios)| Some((s as u32, regular(w, s as u32, ios).ok()?)))
        .collect();
    let last_q = w
        .ios
        .iter()
        .map(|io| io.rec_q.saturating_sub(w.start_ns))
        .max()?;
    let ran_to_end: Vec<(u32, Regular)> = regulars
        .iter()
        .copied()
        .filter(|(_, r)| r.ran_to(last_q))
        .collect();
    let runtime = {
        let rs: Vec<Regular> = ran_to_end.iter().map(|(_, r)| *r).collect();
        whole_seconds(&rs)
    };
    let (mut chosen, runtime_ns, time_bounded) = match (mode, runtime) {
        (Mode::Auto, Some(t)) => (ran_to_end, t, true),
        (Mode::On, Some(t)) => (regulars, t, true),
        (Mode::On, None) => (regulars, last_q, false),
        _ => return None,
    };
    // The thin processes of a continued job: those that ran to its end, and, when it was
    // time-bounded, within the same deadline.
    let siblings: Vec<(u32, Regular)> = lists
        .iter()
        .enumerate()
        .filter(|(_, ios)| ios.len() < MIN_IOS)
        .filter_map(|(s, ios)| Some((s as u32, sibling(w, s as u32, ios, &chosen)?)))
        .filter(|(_, r)| {
            r.ran_to(last_q)
                && (!time_bounded
                    || (r.earliest_runtime()..=r.latest_runtime()).contains(&runtime_ns))
        })
        .collect();
    chosen.extend(siblings);
    chosen.sort_unstable_by_key(|(s, _)| *s);
    if chosen.is_empty() {
        return None;
    }
    Some(Plan {
        mode,
        runtime_ns,
        time_bounded,
        streams: chosen
            .into_iter()
            .map(|(stream, r)| Continued {
                stream,
                pattern: r.pattern,
                sectors: r.sectors,
                delay_ns: r.delay_ns,
                windowed: r.windowed,
                plug_end: r.plug_end,
                first_q_ns: r.first_q,
                until_ns: if time_bounded {
                    r.first_q + runtime_ns
                } else {
                    runtime_ns
                },
            })
            .collect(),
    })
}

/// How many bios each continued process could add at most before its end if it had the
/// device to itself (sequential service, its own think time; its window in parallel on a
/// device with several servers), its share when the processes split the device; at least
/// 16.
pub fn first_guess(w: &Workload, plan: &Plan, dev: &DeviceModel) -> Vec<u64> {
    let n = plan.streams.len().max(1) as u64;
    plan.streams
        .iter()
        .map(|c| {
            let st = &w.streams[c.stream as usize];
            let last_q = w.ios[st.last_io as usize].rec_q.saturating_sub(w.start_ns);
            let left = c.until_ns.saturating_sub(last_q.min(c.until_ns));
            let svc = dev.service_ns(0, 0, c.sectors).max(1_000);
            let per = if c.windowed {
                svc / dev.servers() as u64
            } else {
                svc + c.delay_ns
            }
            .max(1_000);
            (left / per / n * 2).max(16)
        })
        .collect()
}

/// A small deterministic generator (splitmix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `w` with `counts[k]` bios added after the last one of each continued process
/// `plan.streams[k]`, and each continued process bounded by its end. Also returns the index
/// of each continued process's last bio (recorded or added): a run that queued it had the
/// process run out of bios before its end.
pub fn extend(w: &Workload, plan: &Plan, counts: &[u64]) -> (Workload, Vec<u32>) {
    let mut out = w.clone();
    let added: u64 = counts.iter().sum();
    out.ios.reserve(added as usize);
    let mut lasts = Vec::with_capacity(plan.streams.len());
    for (c, &count) in plan.streams.iter().zip(counts) {
        let s = c.stream as usize;
        let mut prev = out.streams[s].last_io;
        let template = w.ios[prev as usize];
        let mut next = template.sector + u64::from(template.sectors);
        let mut rng = SplitMix(SEED ^ (u64::from(out.streams[s].pid) << 32) ^ u64::from(c.stream));
        for _ in 0..count {
            let sector = match c.pattern {
                Pattern::Sequential => {
                    let at = next;
                    next += u64::from(c.sectors);
                    at
                }
                Pattern::Random { lo, hi } => {
                    let blocks = (hi.saturating_sub(lo) / u64::from(c.sectors)).max(1);
                    lo + rng.next() % blocks * u64::from(c.sectors)
                }
            };
            let trigger = if c.windowed {
                Trigger::AfterQueue {
                    io: prev,
                    delay: c.delay_ns,
                }
            } else {
                Trigger::AfterCompletion {
                    io: prev,
                    delay: c.delay_ns,
                }
            };
            prev = out.ios.len() as u32;
            out.ios.push(Io {
                sector,
                sectors: c.sectors,
                trigger,
                plug_end: c.plug_end,
                rec_q: 0,
                rec_submitted: 0,
                rec_c: 0,
                ..template
            });
        }
        let st = &mut out.streams[s];
        st.ios += count as u32;
        st.last_io = prev;
        st.until_ns = Some(c.until_ns);
        lasts.push(prev);
    }
    (out, lasts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        replay::{Config, Replayer, Run},
        scenarios::{THINK_NS, empty, flat_disk, push, stream},
        sched::{Decision, ExpireReason},
        sim::bio_index,
    };
    use iosched_core::event::{EventKind, Op, ReqFlags};

    /// Seek-bound: every non-contiguous request costs 10 ms, a contiguous one 0.1 ms.
    const SEEK_NS: u64 = 10_000_000;
    const CONTIG_NS: u64 = 100_000;
    const RUNTIME_NS: u64 = 3_000_000_000;
    /// Reader B's region.
    const B_START: u64 = 10_000_000;

    /// Two sequential 4 KiB readers (one in flight each) as recorded under `none` on the
    /// seek-bound disk: they alternate, so every request seeks (10 ms) and each reader does
    /// one per 20 ms; `per_reader` each, so a time-bounded run of 3 s has 150.
    fn two_readers_under_none(per_reader: u32) -> Workload {
        two_readers([per_reader, per_reader])
    }

    /// [`two_readers_under_none`] with `counts[r]` bios for reader `r`.
    fn two_readers(counts: [u32; 2]) -> Workload {
        let mut w = empty(vec![stream(100, "fio", 0), stream(101, "fio", 0)]);
        w.device.scheduler = Some("none".into());
        let mut prev = [None, None];
        for j in 0..counts[0].max(counts[1]) {
            for (r, base) in [(0usize, 0u64), (1, B_START)] {
                if j >= counts[r] {
                    continue;
                }
                let q = u64::from(j) * 2 * SEEK_NS + r as u64 * 10_000;
                let trigger = match prev[r] {
                    None => Trigger::At(q),
                    Some(p) => Trigger::AfterCompletion {
                        io: p,
                        delay: THINK_NS,
                    },
                };
                let id = push(
                    &mut w,
                    r as u32,
                    base + u64::from(j) * 8,
                    8,
                    Op::Read,
                    true,
                    trigger,
                );
                let io = &mut w.ios[id as usize];
                io.rec_q = q;
                io.rec_submitted = q;
                io.rec_c = q + SEEK_NS * (r as u64 + 1);
                io.plug_end = true;
                prev[r] = Some(id);
            }
        }
        w.end_ns = w.ios.iter().map(|io| io.rec_c).max().unwrap();
        w
    }

    fn run(w: &Workload, spec: &str) -> Run {
        let r = Replayer::new(
            w.clone(),
            Some(flat_disk(SEEK_NS as f64, CONTIG_NS as f64)),
            vec![0, 1],
        )
        .unwrap();
        r.run(&Config::parse(spec, &Settings::default()).unwrap())
            .unwrap()
    }

    #[test]
    fn a_time_bounded_job_is_detected_and_a_count_bounded_one_is_not() {
        let timed = plan(&two_readers_under_none(150), Mode::Auto).expect("time-bounded");
        assert!(timed.time_bounded);
        assert_eq!(timed.runtime_ns, RUNTIME_NS);
        assert_eq!(timed.streams.len(), 2);
        for c in &timed.streams {
            assert_eq!(c.pattern, Pattern::Sequential);
            assert_eq!(c.sectors, 8);
            assert_eq!(c.delay_ns, THINK_NS);
            assert!(!c.windowed);
            assert_eq!(c.until_ns, c.first_q_ns + RUNTIME_NS);
        }
        // 60 each: the last Qs at 1.18 s, no whole second within two periods after them.
        let counted = two_readers_under_none(60);
        assert_eq!(plan(&counted, Mode::Auto), None);
        assert_eq!(plan(&two_readers_under_none(150), Mode::Off), None);
        // Asked for: continued to the recorded duration, not a whole second.
        let asked = plan(&counted, Mode::On).expect("asked");
        assert!(!asked.time_bounded);
        assert_eq!(asked.runtime_ns, 59 * 2 * SEEK_NS + 10_000);
    }

    /// A time-bounded job under a scheduler that served its readers unevenly at the end
    /// (BFQ's slices): reader B queued its last bio at 2.38 s, 31 of its periods before the
    /// 3 s deadline, and it came back only after it, at 3.005 s, when reader A's slice
    /// ended. fio stops a job on the completion after its deadline, so B ran to the end
    /// too: both readers are continued, to the same whole second.
    #[test]
    fn a_reader_held_back_at_the_deadline_still_ran_to_it() {
        let mut w = two_readers([150, 120]);
        let last_b = w.streams[1].last_io as usize;
        assert!(w.ios[last_b].rec_q < 2_400_000_000);
        w.ios[last_b].rec_c = RUNTIME_NS + 5_000_000;
        w.end_ns = w.ios[last_b].rec_c;
        let p = plan(&w, Mode::Auto).expect("time-bounded");
        assert!(p.time_bounded);
        assert_eq!(p.runtime_ns, RUNTIME_NS);
        assert_eq!(
            p.streams.iter().map(|c| c.stream).collect::<Vec<_>>(),
            [0, 1]
        );
        // The same reader whose last bio came back long before any whole second (a
        // count-bounded job that simply ended early) is not taken to have run to the end.
        let mut early = two_readers([150, 120]);
        let last_b = early.streams[1].last_io as usize;
        early.ios[last_b].rec_c = early.ios[last_b].rec_q + 2 * SEEK_NS;
        let p = plan(&early, Mode::Auto).expect("reader A alone is time-bounded");
        assert_eq!(p.streams.iter().map(|c| c.stream).collect::<Vec<_>>(), [0]);
    }

    /// Reader C's region.
    const C_START: u64 = 20_000_000;

    /// [`two_readers_under_none`] (150 bios each) and a third process `comm` that an uneven
    /// scheduler starved (BFQ's slices: 32 readers of one job did 4 to 35 bios each): `bios`
    /// reads spread over the run, each `step` sectors after the previous one (8: sequential),
    /// its last one back 5 ms after the 3 s deadline.
    fn with_a_starved_reader(bios: u32, comm: &str, step: u64) -> Workload {
        let mut w = two_readers_under_none(150);
        w.streams.push(stream(102, comm, 0));
        let gap = (RUNTIME_NS - 100_000_000) / u64::from(bios);
        let mut prev = None;
        for j in 0..u64::from(bios) {
            let q = 20_000 + j * gap;
            let trigger = prev.map_or(Trigger::At(q), |io| Trigger::AfterCompletion {
                io,
                delay: THINK_NS,
            });
            let id = push(&mut w, 2, C_START + j * step, 8, Op::Read, true, trigger);
            let io = &mut w.ios[id as usize];
            io.rec_q = q;
            io.rec_submitted = q;
            io.rec_c = if j + 1 == u64::from(bios) {
                RUNTIME_NS + 5_000_000
            } else {
                q + gap - THINK_NS
            };
            io.plug_end = true;
            prev = Some(id);
        }
        w.end_ns = RUNTIME_NS + 5_000_000;
        w
    }

    fn continued_streams(w: &Workload) -> Vec<u32> {
        plan(w, Mode::Auto)
            .expect("time-bounded")
            .streams
            .iter()
            .map(|c| c.stream)
            .collect()
    }

    /// A process of the job with too few bios for a pattern of its own is continued with
    /// its job when its few bios follow the job's pattern and it ran to the job's end; not
    /// when it is another program, strays from the pattern, or stopped long before the
    /// deadline.
    #[test]
    fn a_starved_reader_of_a_time_bounded_job_is_continued_with_it() {
        let p = plan(&with_a_starved_reader(4, "fio", 8), Mode::Auto).expect("time-bounded");
        assert_eq!(p.runtime_ns, RUNTIME_NS);
        let c = p
            .streams
            .iter()
            .find(|c| c.stream == 2)
            .expect("C continued");
        assert_eq!(c.pattern, Pattern::Sequential);
        assert_eq!((c.sectors, c.delay_ns, c.windowed), (8, THINK_NS, false));
        assert_eq!(c.until_ns, 20_000 + RUNTIME_NS);
        assert_eq!(
            continued_streams(&with_a_starved_reader(2, "fio", 8)),
            [0, 1, 2]
        );
        // One bio, in flight from the start to past the deadline: the job's pattern and loop.
        let mut one = with_a_starved_reader(1, "fio", 8);
        one.streams[2].kind = StreamKind::OpenLoop;
        let p = plan(&one, Mode::Auto).expect("time-bounded");
        let c = p
            .streams
            .iter()
            .find(|c| c.stream == 2)
            .expect("C continued");
        assert_eq!(
            (c.pattern, c.delay_ns, c.windowed),
            (Pattern::Sequential, THINK_NS, false)
        );

        assert_eq!(
            continued_streams(&with_a_starved_reader(4, "dd", 8)),
            [0, 1]
        );
        assert_eq!(
            continued_streams(&with_a_starved_reader(4, "fio", 64)),
            [0, 1]
        );
        for bios in [1, 4] {
            let mut early = with_a_starved_reader(bios, "fio", 8);
            let last = early.streams[2].last_io as usize;
            early.ios[last].rec_c = early.ios[last].rec_q + SEEK_NS;
            assert_eq!(continued_streams(&early), [0, 1], "{bios} bios");
        }
    }

    /// A random reader too thin for a pattern spans its job's (median) span, placed around
    /// its own bios and aligned with them, so its continued bios seek as far as its
    /// siblings' do.
    #[test]
    fn a_starved_random_reader_spans_its_jobs_span() {
        let mut w = with_a_starved_reader(3, "fio", 8);
        // A and B: random over 1000 blocks each; C: three bios over 500 blocks of its own.
        for io in w.ios.iter_mut() {
            let (base, k) = match io.stream {
                0 => (0, io.sector / 8),
                1 => (B_START, (io.sector - B_START) / 8),
                _ => (C_START, (io.sector - C_START) / 8),
            };
            let block = if io.stream == 2 {
                [250, 10, 510][k as usize]
            } else {
                k * 7919 % 1000
            };
            io.sector = base + block * 8;
        }
        let p = plan(&w, Mode::Auto).expect("time-bounded");
        let span = |s: u32| match p.streams.iter().find(|c| c.stream == s).unwrap().pattern {
            Pattern::Random { lo, hi } => (lo, hi),
            Pattern::Sequential => panic!("stream {s} taken as sequential"),
        };
        let (a_lo, a_hi) = span(0);
        let (b_lo, b_hi) = span(1);
        assert_eq!(a_hi - a_lo, b_hi - b_lo);
        let (lo, hi) = span(2);
        assert_eq!(hi - lo, a_hi - a_lo);
        assert!(
            lo <= C_START + 10 * 8 && hi >= C_START + 511 * 8,
            "{lo}..{hi}"
        );
        assert_eq!((C_START + 10 * 8 - lo) % 8, 0);
    }

    /// Replayed, the starved reader is served as its siblings are (`none` takes turns): it
    /// goes on reading to the job's deadline, a third of the requests, instead of ending
    /// after its four recorded bios and leaving the other two the device.
    #[test]
    fn a_starved_reader_reads_to_its_jobs_end_in_the_replay() {
        let r = run(&with_a_starved_reader(4, "fio", 8), "none");
        let c = r.summary.process(102).expect("reader C");
        let requests = r.summary.requests;
        let share = c.bytes as f64 / (requests * 4096) as f64;
        assert!(
            (0.3..0.37).contains(&share),
            "C's share {share} of {requests}"
        );
        assert!((r.summary.duration_s - 3.0).abs() < 0.03);
    }

    /// Under `none` the readers go on seeking against each other: 10 ms per request, so 300
    /// in 3 s, as recorded. Under an idling scheduler (BFQ, low_latency=0) each reader is
    /// served alone for a slice, contiguously (0.1 ms + think per request): the time-bounded
    /// job does tens of times more in the same 3 s, which replaying only the recorded 300
    /// requests cannot show (they would just end early).
    #[test]
    fn an_idling_scheduler_lets_time_bounded_sequential_readers_do_more() {
        let w = two_readers_under_none(150);
        let none = run(&w, "none");
        let c = none.continued.as_ref().expect("continued");
        assert_eq!(c.plan.streams.len(), 2);
        assert!(!c.cut);
        // 3 s of 10 ms requests, give or take the one each reader has in flight at its end.
        let n = none.summary.requests;
        assert!((298..=302).contains(&n), "none: {n} requests");
        assert!((none.summary.duration_s - 3.0).abs() < 0.03);

        let bfq = run(&w, "bfq:low_latency=0");
        let n_bfq = bfq.summary.requests;
        // Never faster than one reader alone on contiguous requests.
        let bound = RUNTIME_NS / (CONTIG_NS + THINK_NS);
        assert!(n_bfq <= bound, "bfq {n_bfq} > {bound}");
        assert!(n_bfq >= 20 * n, "bfq {n_bfq} vs none {n}");
        assert!((bfq.summary.duration_s - 3.0).abs() < 0.03);
        // Equal weights: each reader about half.
        for p in &bfq.summary.processes {
            let share = p.bytes as f64 / (n_bfq * 4096) as f64;
            assert!((0.4..0.6).contains(&share), "{}: {share}", p.name);
        }
        // Every request is one bio (4 KiB reads are not merged here): recorded + added.
        let added: u64 = bfq.continued.as_ref().unwrap().added_ios;
        assert_eq!(added + 300, n_bfq);

        // Without continuation: exactly the recorded requests, over a shorter time.
        let bare = run(&w, "bfq:low_latency=0,continue=0");
        assert!(bare.continued.is_none());
        assert_eq!(bare.summary.requests, 300);
        assert!(bare.summary.duration_s < 0.5, "{}", bare.summary.duration_s);
    }

    /// At a time-bounded job's end BFQ idles for a process only while it is still there. A
    /// reader that waited for each read inside the call that submitted it (REQ_SYNC reads:
    /// fio's psync) exits as soon as its last read is back, so BFQ does not idle for it; an
    /// asynchronous one (libaio: reads without REQ_SYNC) tears its context down first, and
    /// BFQ's idle timer runs out for its queue (`too_idle`). BFQ's logs of the test bed
    /// show both.
    #[test]
    fn bfq_idles_at_the_end_only_for_a_reader_that_lingers() {
        let too_idle_at_end = |flags: u32| {
            let mut w = two_readers_under_none(150);
            for io in &mut w.ios {
                io.flags = ReqFlags(flags);
            }
            let r = run(&w, "bfq:low_latency=0");
            assert!(r.continued.is_some());
            r.decisions
                .iter()
                .filter(|d| {
                    matches!(
                        d.d,
                        Decision::Expire {
                            reason: ExpireReason::TooIdle,
                            ..
                        }
                    )
                })
                .map(|d| d.t)
                .collect::<Vec<u64>>()
        };
        // Asynchronous: each reader's queue idles out once, after its end.
        let lingering = too_idle_at_end(0);
        assert_eq!(lingering.len(), 2, "{lingering:?}");
        assert!(lingering.iter().all(|t| *t >= RUNTIME_NS), "{lingering:?}");
        // Synchronous: never.
        assert_eq!(too_idle_at_end(ReqFlags::SYNC), Vec::<u64>::new());
    }

    /// The continued bios of a sequential reader are contiguous with its recorded ones; a
    /// random reader's are aligned draws from its recorded span, the same every time.
    #[test]
    fn continued_bios_follow_the_pattern_deterministically() {
        let w = two_readers_under_none(150);
        let p = plan(&w, Mode::Auto).unwrap();
        let (ext, lasts) = extend(&w, &p, &[100, 100]);
        assert_eq!(ext.ios.len(), w.ios.len() + 200);
        for (k, base) in [(0u32, 0u64), (1, B_START)] {
            let secs: Vec<u64> = ext
                .ios
                .iter()
                .filter(|io| io.stream == k)
                .map(|io| io.sector)
                .collect();
            assert_eq!(secs.len(), 250);
            for (j, s) in secs.iter().enumerate() {
                assert_eq!(*s, base + 8 * j as u64);
            }
            assert_eq!(
                ext.streams[k as usize].until_ns,
                Some(p.streams[k as usize].until_ns)
            );
            assert_eq!(lasts[k as usize], ext.streams[k as usize].last_io);
        }

        let mut random = w.clone();
        let mut x = 7u64;
        for io in random.ios.iter_mut().filter(|io| io.stream == 1) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            io.sector = B_START + (x >> 40) % 1000 * 8;
        }
        let p = plan(&random, Mode::Auto).unwrap();
        let Pattern::Random { lo, hi } = p.streams[1].pattern else {
            panic!("{:?}", p.streams[1]);
        };
        let (a, _) = extend(&random, &p, &[0, 500]);
        let (b, _) = extend(&random, &p, &[0, 500]);
        let added: Vec<u64> = a.ios[w.ios.len()..].iter().map(|io| io.sector).collect();
        let again: Vec<u64> = b.ios[w.ios.len()..].iter().map(|io| io.sector).collect();
        assert_eq!(added, again);
        assert!(
            added
                .iter()
                .all(|s| (lo..hi).contains(s) && (s - lo) % 8 == 0)
        );
        // Spread over the span, not stuck in a corner.
        let distinct: std::collections::BTreeSet<_> = added.iter().collect();
        assert!(distinct.len() > 200, "{}", distinct.len());
    }

    /// The replay's issued requests of each continued reader are contiguous (checked on the
    /// events the simulator wrote), and none comes after the reader's end.
    #[test]
    fn a_continued_reader_stops_at_its_end() {
        let w = two_readers_under_none(150);
        let r = Replayer::new(
            w.clone(),
            Some(flat_disk(SEEK_NS as f64, CONTIG_NS as f64)),
            vec![0, 1],
        )
        .unwrap();
        let p = plan(&w, Mode::Auto).unwrap();
        let (ext, _) = extend(&w, &p, &[40_000, 40_000]);
        let sched = crate::sched::build(
            crate::sched::SchedKind::Bfq,
            &Settings::parse_pairs(&["low_latency=0".into()]).unwrap(),
            &r.env,
        )
        .unwrap();
        let result = crate::sim::run(&ext, &r.device, sched, Default::default());
        let mut next = [0u64, B_START];
        for ev in result.events.iter().filter(|e| e.kind == EventKind::Queue) {
            let i = bio_index(ev.bio).unwrap() as usize;
            let s = ext.ios[i].stream as usize;
            assert_eq!(ev.sector, next[s]);
            next[s] += 8;
            let t = ev.ts_ns - result.start_ns;
            assert!(t < ext.streams[s].until_ns.unwrap(), "Q at {t}");
        }
        // Far fewer than generated were queued: the end stopped them.
        assert!(next[0] / 8 < 40_000 && (next[1] - B_START) / 8 < 40_000);
    }
}
