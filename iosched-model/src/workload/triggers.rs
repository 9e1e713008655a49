//! From one device's completed bios to streams and triggers: which process issued each bio,
//! how (closed loop, windowed, open loop), and what released it (a time, an earlier Q, a
//! completion: its own, or another process's it depends on, inferred from timing or read
//! from recorded wakeups).
//!
//! Owns: the inference. Must not: read a trace (that is `extract.rs`).

use rustc_hash::FxHashMap;

use iosched_core::{record::DeviceInfo, timeline::BioLife};

use super::{
    Io, Stream, StreamKind, Trigger, Wakeup, Workload, is_sync,
    merges::merge_evidence,
    think::{ThinkGap, think_delays},
};

/// A waiting process's Q this soon after another process's completion may have been woken by
/// it (a wake-up and a syscall take tens to hundreds of µs; 2 ms leaves room for a busy CPU).
pub const DEP_WINDOW_NS: u64 = 2_000_000;
/// Bios of one process queued this close together belong to one submission (a plug batch).
pub const BATCH_NS: u64 = 200_000;
/// A process depends on another when at least this share of its waiting Qs follow that
/// process's completions (and at least [`DEP_MIN_COUNT`] of them do).
pub const DEP_MIN_SHARE: f64 = 0.5;
pub const DEP_MIN_COUNT: u32 = 3;
/// A process that ran its window dry more than this many times for each time it refilled
/// it as completions came waits for its batches; fewer, and it paces itself. fio at
/// iodepth 8 on a RAM-backed device ran dry 0.9 times per refill; a process that queues a
/// batch and waits for all of it never refills.
pub const PACED_MAX_DRAINS_PER_REFILL: u32 = 4;

/// Builds the streams and triggers from completed bios of one device, with dependencies
/// inferred from timing.
pub fn from_bios(device: DeviceInfo, bios: Vec<BioLife>) -> Workload {
    from_bios_and_wakeups(device, bios, &[])
}

/// [`from_bios`], with the recorded wakeups of the device's processes: when there are any,
/// they, not timing, say which process released a waiting Q.
pub fn from_bios_and_wakeups(
    device: DeviceInfo,
    mut bios: Vec<BioLife>,
    wakeups: &[Wakeup],
) -> Workload {
    bios.sort_by_key(|b| (b.q.unwrap_or(0), b.c));
    let merges = merge_evidence(&bios);
    let start_ns = bios.first().and_then(|b| b.q).unwrap_or(0);
    let wbt = crate::throttle::wbt_waits(&bios, device.nr_requests, start_ns);
    let end_ns = bios.iter().map(|b| b.c).max().unwrap_or(start_ns);

    // Streams by pid, in order of first appearance.
    let mut stream_of: FxHashMap<u32, u32> = FxHashMap::default();
    let mut streams: Vec<Stream> = Vec::new();
    let mut ios: Vec<Io> = Vec::with_capacity(bios.len());
    for b in &bios {
        let s = b.submitter.expect("filtered on collection");
        let id = *stream_of.entry(s.pid).or_insert_with(|| {
            streams.push(Stream {
                pid: s.pid,
                tgid: s.tgid,
                comm: s.comm,
                cgroup_id: s.cgroup_id,
                ios: 0,
                kind: StreamKind::OpenLoop,
                depends_on: Vec::new(),
                think_mean_ns: 0.0,
                think_samples: 0,
                max_in_flight: 0,
                last_io: 0,
                slept_for_request: 0,
                slept_ns: 0,
                span_ns: 0,
                ioprio: s.ioprio,
                until_ns: None,
            });
            (streams.len() - 1) as u32
        });
        streams[id as usize].ios += 1;
        streams[id as usize].last_io = ios.len() as u32;
        if let Some((q, g)) = b.q.zip(b.g)
            && g > q + crate::throttle::SLEPT_NS
        {
            streams[id as usize].slept_for_request += 1;
            streams[id as usize].slept_ns += g - q;
        }
        ios.push(Io {
            stream: id,
            sector: b.sector,
            sectors: b.bytes >> 9,
            op: b.op,
            flags: b.flags,
            sync: is_sync(b.op, b.flags),
            trigger: Trigger::At(0),
            plug_end: false,
            rec_q: b.q.unwrap_or(0),
            rec_submitted: b
                .q
                .unwrap_or(0)
                .max(b.g.unwrap_or(0))
                .max(b.m.map_or(0, |(t, _)| t)),
            rec_c: b.c,
        });
    }

    let mut wbt_held = vec![false; streams.len()];
    for (io, waited) in ios.iter().zip(&wbt.waited) {
        wbt_held[io.stream as usize] |= *waited;
    }
    let mut first_q: Vec<Option<u64>> = vec![None; streams.len()];
    for io in &ios {
        let st = &mut streams[io.stream as usize];
        let from = *first_q[io.stream as usize].get_or_insert(io.rec_q);
        st.span_ns = st.span_ns.max(io.rec_c.saturating_sub(from));
    }
    // Processes the queue held back (asleep for requests most of their run): the most they
    // had in flight was the queue's limit, not theirs, so a full window is no sign that
    // they waited for a completion, and a pause between two of their submissions is their
    // own (fio preempted on a busy CPU), not a wait for the completion that happened to
    // precede it: with a completion every few hundred µs one always does. Tied to it, a
    // replay that lets them keep more in flight (an elevator's requests) would drain their
    // queue at every such pause, down to the bios queued since that completion.
    let held_by_queue: Vec<bool> = streams.iter().map(Stream::asleep_most_of_its_run).collect();

    // Sweep Qs, Cs and wakeups in time order (completions, then wakeups, then Qs at equal
    // times). Only wakeups between two of the device's processes tell anything here.
    const C: u8 = 0;
    const W: u8 = 1;
    let observed = !wakeups.is_empty();
    let mut marks: Vec<(u64, u8, u32)> = Vec::with_capacity(ios.len() * 2 + wakeups.len());
    for (i, io) in ios.iter().enumerate() {
        marks.push((io.rec_q, 2, i as u32));
        marks.push((io.rec_c, C, i as u32));
    }
    for (i, wk) in wakeups.iter().enumerate() {
        if wk.waker_pid != wk.wakee_pid
            && stream_of.contains_key(&wk.waker_pid)
            && stream_of.contains_key(&wk.wakee_pid)
        {
            marks.push((wk.ts, W, i as u32));
        }
    }
    marks.sort_unstable();
    let n = streams.len();
    // Each process's window: the most bios it had in flight at once. A process at its window
    // (fio with `iodepth` reached) issues its next bio when one completes, not when it likes.
    let mut window = vec![0u32; n];
    let mut in_flight = vec![0u32; n];
    // Per process, its Qs that came after one of its completions (since its previous Q):
    // with bios still in flight (`refills`), or with none left (`drains`).
    let mut refills = vec![0u32; n];
    let mut drains = vec![0u32; n];
    let mut since_q_completed = vec![false; n];
    for &(_, kind, i) in &marks {
        if kind == W {
            continue;
        }
        let s = ios[i as usize].stream as usize;
        if kind == C {
            in_flight[s] = in_flight[s].saturating_sub(1);
            since_q_completed[s] = true;
        } else {
            if std::mem::take(&mut since_q_completed[s]) {
                if in_flight[s] == 0 {
                    drains[s] += 1;
                } else {
                    refills[s] += 1;
                }
            }
            in_flight[s] += 1;
            window[s] = window[s].max(in_flight[s]);
        }
    }
    in_flight.fill(0);
    // Processes that keep several bios in flight and submit at their own pace: they refill
    // their window as completions come, and run it dry only now and then, when their I/O
    // came back faster than they submitted (fio with `iodepth` on a RAM-backed device, its
    // jobs and the loop worker sharing the CPUs). Such a process's Q after it ran dry waited
    // for nothing: it is paced by its previous Q, as its Qs with bios in flight are. Tied to
    // the completion that emptied the window, a replay gives that completion the mean
    // latency, where in the recording it was one of the fast ones (that is why the window
    // ran dry): on the RAM device every such restart came ~10 µs late, 14% of fio's
    // throughput. A process that runs its window dry every time (a batch, then a wait for
    // all of it: no refills) still waits for its last completion.
    let paced: Vec<bool> = (0..n)
        .map(|s| {
            window[s] > 1
                && !held_by_queue[s]
                && u64::from(refills[s]) * u64::from(PACED_MAX_DRAINS_PER_REFILL)
                    >= u64::from(drains[s])
        })
        .collect();
    // Per process: its window was full when its last submission returned.
    let mut full = vec![false; n];
    let mut last_own_c: Vec<Option<(u64, u32)>> = vec![None; n];
    // Each process's last submission: when it returned (the next bio of a process that
    // slept in request allocation follows its wake-up, not its Q), and the bio.
    let mut last_q: Vec<Option<(u64, u32)>> = vec![None; n];
    let mut last_c: Option<(u64, u32)> = None;
    /// A completion that released a waiting Q: its time, its bio, its stream.
    type Release = (u64, u32, u32);
    // Each process's last wakeup by another one of the device's processes: its time, and the
    // waker's completion just before it (a wakeup that follows none of the waker's I/O does
    // not make the wakee depend on that I/O).
    let mut woken: Vec<Option<(u64, Option<Release>)>> = vec![None; n];
    // Waiting Qs: the io, its process's last completion, and another process's completion
    // just before it (with that process's stream).
    struct Waiting {
        io: u32,
        q: u64,
        /// When the process's previous submission returned: it slept from then on.
        asleep_from: Option<u64>,
        own: Option<(u64, u32)>,
        other: Option<Release>,
    }
    let mut waiting: Vec<Vec<Waiting>> = (0..n).map(|_| Vec::new()).collect();
    let mut windowed = vec![false; n];
    for (t, kind, i) in marks {
        if kind == W {
            let wk = wakeups[i as usize];
            let waker = stream_of[&wk.waker_pid];
            let wakee = stream_of[&wk.wakee_pid] as usize;
            let waker_c = last_own_c[waker as usize]
                .filter(|(tc, _)| t - tc <= DEP_WINDOW_NS)
                .map(|(tc, c)| (tc, c, waker));
            woken[wakee] = Some((t, waker_c));
            continue;
        }
        let io = ios[i as usize];
        let s = io.stream as usize;
        if kind == C {
            in_flight[s] = in_flight[s].saturating_sub(1);
            last_own_c[s] = Some((t, i));
            last_c = Some((t, i));
            continue;
        }
        // The process had its window full after its last submission, and one of its bios
        // completed since: this Q waited for that completion (a slot), whatever the gap to
        // its previous Q. Read as "after the previous Q", a replay on a faster path would
        // still issue at the recorded (device-bound) pace, and bios would never pile up
        // where they merge.
        // A process whose last bio slept for a request was held back by the queue, not by
        // its window: it goes on as soon as its submission returns.
        let slot_freed_by = last_own_c[s].filter(|(tc, _)| {
            full[s]
                && !held_by_queue[s]
                && t - tc <= DEP_WINDOW_NS
                && last_q[s].is_none_or(|(tq, q)| {
                    *tc > tq
                        && ios[q as usize].rec_submitted
                            <= ios[q as usize].rec_q + crate::throttle::SLEPT_NS
                })
        });
        let trigger = if !io.sync {
            match last_q[s] {
                // A writer wbt held back: it goes on when its submission returns, not at
                // its recorded (throttled) pace, so a replay without the throttle lets it
                // run ahead.
                Some((tq, q)) if wbt_held[s] && t.saturating_sub(tq) <= BATCH_NS => {
                    Trigger::AfterQueue {
                        io: q,
                        delay: t.saturating_sub(tq),
                    }
                }
                _ => Trigger::At(t - start_ns),
            }
        } else if let Some((tc, c)) = slot_freed_by.filter(|_| in_flight[s] > 0) {
            windowed[s] = true;
            Trigger::AfterCompletion {
                io: c,
                delay: t - tc,
            }
        } else if in_flight[s] > 0 {
            windowed[s] = true;
            match (last_q[s], last_own_c[s]) {
                (Some((tq, q)), _) if t.saturating_sub(tq) <= BATCH_NS => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (_, Some((tc, c))) if t - tc <= DEP_WINDOW_NS && !held_by_queue[s] => {
                    Trigger::AfterCompletion {
                        io: c,
                        delay: t - tc,
                    }
                }
                (Some((tq, q)), _) => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (None, _) => Trigger::At(t - start_ns),
            }
        } else if let Some((tq, q)) =
            last_q[s].filter(|(tq, _)| paced[s] && t.saturating_sub(*tq) <= BATCH_NS)
        {
            windowed[s] = true;
            Trigger::AfterQueue {
                io: q,
                delay: t.saturating_sub(tq),
            }
        } else {
            let other = if observed {
                // The waker's completion, if the process was woken by another one just
                // before this Q (each wakeup releases one Q).
                match woken[s].take() {
                    Some((tw, waker_c)) if t - tw <= DEP_WINDOW_NS => waker_c,
                    _ => None,
                }
            } else {
                // The other's I/O must have started while this process waited (queued
                // after the process's own last completion): a process that waits for
                // another's I/O (dd's O_DSYNC write for jbd2's commit) waits through all of
                // it. Without this, two independent processes on a fast device, whose
                // completions interleave every few µs, "depend" on each other: the last
                // completion before a Q is the other's about half the time by chance.
                last_c
                    .filter(|(tc, c)| {
                        let other = &ios[*c as usize];
                        other.stream != io.stream
                            && t - tc <= DEP_WINDOW_NS
                            && last_own_c[s].is_none_or(|(own, _)| own <= other.rec_q)
                    })
                    .map(|(tc, c)| (tc, c, ios[c as usize].stream))
            };
            waiting[s].push(Waiting {
                io: i,
                q: t,
                asleep_from: last_q[s].map(|(tq, _)| tq),
                own: last_own_c[s],
                other,
            });
            // Resolved below, once the dependencies are known.
            Trigger::At(t - start_ns)
        };
        ios[i as usize].trigger = trigger;
        in_flight[s] += 1;
        streams[s].max_in_flight = streams[s].max_in_flight.max(in_flight[s]);
        full[s] = window[s] > 1 && in_flight[s] >= window[s];
        last_q[s] = Some((io.rec_submitted.clamp(t, t.max(io.rec_c)), i));
    }

    // Dependencies: a stream whose completions released most of this stream's waiting Qs.
    for (s, waits) in waiting.iter().enumerate() {
        let mut counts: FxHashMap<u32, u32> = FxHashMap::default();
        for w in waits {
            if let Some((_, _, ws)) = w.other {
                *counts.entry(ws).or_insert(0) += 1;
            }
        }
        // Observed wakeups need no threshold: each one is a fact.
        let mut deps: Vec<(u32, u32)> = counts
            .into_iter()
            .filter(|(_, k)| {
                observed
                    || (*k >= DEP_MIN_COUNT && f64::from(*k) >= DEP_MIN_SHARE * waits.len() as f64)
            })
            .collect();
        deps.sort_by_key(|(w, k)| (std::cmp::Reverse(*k), *w));
        // Each released Q: its io, the completion that released it, how long the process
        // slept before that completion, and the gap.
        let mut released: Vec<(u32, u32, ThinkGap)> = Vec::new();
        for w in waits {
            let chosen = match w.other {
                Some((tc, c, ws)) if deps.iter().any(|(d, _)| *d == ws) => Some((tc, c)),
                _ => w.own,
            };
            if let Some((tc, c)) = chosen {
                released.push((
                    w.io,
                    c,
                    ThinkGap {
                        slept_ns: w.asleep_from.map_or(0, |from| tc.saturating_sub(from)),
                        gap_ns: w.q - tc,
                    },
                ));
            }
        }
        let gaps: Vec<ThinkGap> = released.iter().map(|r| r.2).collect();
        let delays = think_delays(&gaps);
        let think_n = released.len() as u32;
        for ((io, c, _), delay) in released.into_iter().zip(&delays) {
            ios[io as usize].trigger = Trigger::AfterCompletion {
                io: c,
                delay: *delay,
            };
        }
        let st = &mut streams[s];
        st.depends_on = deps;
        st.think_samples = think_n;
        st.think_mean_ns = if think_n == 0 {
            0.0
        } else {
            delays.iter().sum::<u64>() as f64 / f64::from(think_n)
        };
        st.kind = if windowed[s] && st.max_in_flight > 1 {
            StreamKind::Windowed
        } else if think_n > 0 {
            StreamKind::ClosedLoop
        } else {
            StreamKind::OpenLoop
        };
    }
    Workload {
        device,
        kernel_release: None,
        start_ns,
        end_ns,
        streams,
        ios,
        service: Vec::new(),
        max_in_driver: 0,
        merges,
        throttle: crate::throttle::Throttling {
            wbt,
            ..Default::default()
        },
        cpu: None,
        host_profile: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iosched_core::event::{Comm, Dev, Op, ReqFlags};
    use iosched_core::timeline::Submitter;

    const DD: u32 = 100;
    const JBD2: u32 = 200;
    const NOISE: u32 = 300;

    fn bio(pid: u32, comm: &str, sector: u64, q: u64, c: u64) -> BioLife {
        BioLife {
            dev: Dev { major: 7, minor: 0 },
            submitter: Some(Submitter {
                pid,
                tgid: pid,
                comm: Comm::new(comm),
                cgroup_id: 0,
                ioprio: 0,
            }),
            op: Op::Write,
            flags: ReqFlags(ReqFlags::SYNC),
            sector,
            bytes: 4096,
            q: Some(q),
            g: Some(q),
            m: None,
            i: Some(q),
            d: Some(q),
            c,
            split: false,
            error: 0,
        }
    }

    /// Cycles of 1 ms: dd writes, wakes jbd2, jbd2 commits and wakes dd, which writes again
    /// 690 µs later. A third process's sync write completes between jbd2's completion and
    /// dd's next Q, every time: by timing alone, dd seems to wait for it.
    fn cycles(n: u64) -> (Vec<BioLife>, Vec<Wakeup>) {
        let mut bios = Vec::new();
        let mut wakeups = Vec::new();
        for k in 0..n {
            let t = k * 1_000_000;
            bios.push(bio(DD, "dd", 1000 + k * 8, t, t + 100_000));
            bios.push(bio(
                JBD2,
                "jbd2/loop0-8",
                5000 + k * 8,
                t + 120_000,
                t + 300_000,
            ));
            bios.push(bio(NOISE, "noise", 9000 + k * 8, t + 200_000, t + 320_000));
            wakeups.push(Wakeup {
                ts: t + 110_000,
                waker_pid: DD,
                wakee_pid: JBD2,
            });
            wakeups.push(Wakeup {
                ts: t + 310_000,
                waker_pid: JBD2,
                wakee_pid: DD,
            });
        }
        (bios, wakeups)
    }

    fn stream_of(w: &Workload, pid: u32) -> u32 {
        w.streams.iter().position(|s| s.pid == pid).unwrap() as u32
    }

    #[test]
    fn wakeups_replace_timing_when_recorded() {
        let n = 20;
        let (bios, wakeups) = cycles(n);
        let device = DeviceInfo::default();

        // Timing alone: the completion just before each of dd's Qs is the noise's.
        let timed = from_bios(device.clone(), bios.clone());
        let (dd, jbd2, noise) = (
            stream_of(&timed, DD),
            stream_of(&timed, JBD2),
            stream_of(&timed, NOISE),
        );
        assert_eq!(
            timed.streams[dd as usize].depends_on,
            [(noise, n as u32 - 1)]
        );

        // Observed: jbd2 woke dd, 10 µs after its commit write completed.
        let seen = from_bios_and_wakeups(device, bios, &wakeups);
        assert_eq!(stream_of(&seen, DD), dd);
        assert_eq!(seen.streams[dd as usize].depends_on, [(jbd2, n as u32 - 1)]);
        assert_eq!(seen.streams[jbd2 as usize].depends_on, [(dd, n as u32)]);
        // The noise was woken by nobody we saw: its Qs follow its own completions.
        assert!(seen.streams[noise as usize].depends_on.is_empty());
        let dd_ios: Vec<&Io> = seen.ios.iter().filter(|io| io.stream == dd).collect();
        for (k, io) in dd_ios.iter().enumerate().skip(1) {
            let Trigger::AfterCompletion { io: by, delay } = io.trigger else {
                panic!("dd's write {k}: {:?}", io.trigger);
            };
            assert_eq!(seen.ios[by as usize].stream, jbd2, "dd's write {k}");
            assert_eq!(seen.ios[by as usize].rec_c + delay, io.rec_q);
            assert_eq!(delay, 700_000);
        }
        assert_eq!(seen.streams[dd as usize].kind, StreamKind::ClosedLoop);
    }

    /// A wakeup that follows none of its waker's I/O (within the window) does not make the
    /// wakee depend on that I/O: the wakee's Qs follow its own completions.
    #[test]
    fn a_wakeup_long_after_the_wakers_io_is_no_dependency() {
        let n = 10;
        let period = 10_000_000;
        let mut bios = Vec::new();
        let mut wakeups = Vec::new();
        for k in 0..n {
            let t = k * period;
            bios.push(bio(DD, "dd", 1000 + k * 8, t, t + 100_000));
            bios.push(bio(
                JBD2,
                "jbd2/loop0-8",
                5000 + k * 8,
                t + 120_000,
                t + 300_000,
            ));
            // 9.6 ms after jbd2's completion, 100 µs before dd's next write.
            wakeups.push(Wakeup {
                ts: t + period - 100_000,
                waker_pid: JBD2,
                wakee_pid: DD,
            });
        }
        let w = from_bios_and_wakeups(DeviceInfo::default(), bios, &wakeups);
        let dd = stream_of(&w, DD);
        assert!(
            w.streams[dd as usize].depends_on.is_empty(),
            "{:?}",
            w.streams[dd as usize]
        );
        for io in w.ios.iter().filter(|io| io.stream == dd).skip(1) {
            let Trigger::AfterCompletion { io: by, .. } = io.trigger else {
                panic!("{:?}", io.trigger);
            };
            assert_eq!(w.ios[by as usize].stream, dd);
        }
    }

    /// Two interleaved closed-loop readers, each waiting 13 ms for its own I/O (the device
    /// serves the other's meanwhile), then thinking 10 µs plus a wake-up: extraction replays
    /// each with its think time, not with the mean gap.
    #[test]
    fn interleaved_readers_are_replayed_with_their_think_time() {
        const THINK: u64 = 10_000;
        let mut bios = Vec::new();
        for (r, pid) in [(0u64, 1u32), (1, 2)] {
            let mut q = r * 6_500_000;
            for k in 0..100u64 {
                let c = q + 13_000_000;
                bios.push(bio(pid, "fio", r * 204_800 + k * 8, q, c));
                let wake = if k % 10 == 3 { 0 } else { 40_000 + k * 700 };
                q = c + THINK + wake;
            }
        }
        let w = from_bios(DeviceInfo::default(), bios);
        for s in 0..2 {
            let st = &w.streams[s];
            assert_eq!(st.kind, StreamKind::ClosedLoop, "{st:?}");
            assert!(st.depends_on.is_empty(), "{st:?}");
            assert_eq!(st.think_mean_ns, THINK as f64, "{st:?}");
            assert_eq!(st.think_samples, 99, "{st:?}");
        }
        let released = w
            .ios
            .iter()
            .filter(|io| matches!(io.trigger, Trigger::AfterCompletion { delay: THINK, .. }))
            .count();
        assert_eq!(released, 2 * 99);
    }

    /// Two independent synchronous readers on a fast device: each reads (40 µs), thinks
    /// 10 µs and reads again, the second 5 µs after the first, so that its completion always
    /// falls between the first's own completion and its next Q. By timing alone the first
    /// seems to wait for the second; but the second's I/O was already in flight when the
    /// first's own completed, so it cannot be what the first waited for: no dependency, and
    /// each is replayed after its own completions.
    #[test]
    fn readers_whose_completions_interleave_do_not_depend_on_each_other() {
        const SERVICE: u64 = 40_000;
        const THINK: u64 = 10_000;
        let mut bios = Vec::new();
        for (offset, pid) in [(0u64, 1u32), (5_000, 2)] {
            let mut q = offset;
            for k in 0..200u64 {
                bios.push(bio(
                    pid,
                    "fio",
                    u64::from(pid) * 1_000_000 + k * 8,
                    q,
                    q + SERVICE,
                ));
                q += SERVICE + THINK;
            }
        }
        let w = from_bios(DeviceInfo::default(), bios);
        for s in &w.streams {
            assert!(s.depends_on.is_empty(), "{s:?}");
        }
        let own = w
            .ios
            .iter()
            .filter(|io| match io.trigger {
                Trigger::AfterCompletion { io: c, delay } => {
                    w.ios[c as usize].stream == io.stream && delay == THINK
                }
                _ => false,
            })
            .count();
        assert_eq!(own, 2 * 199);
    }

    /// fio on a fast device, at its own pace: a read every 10 µs, each taking 25 µs (one,
    /// early, 80 µs: its window is 4, and it usually has 3 in flight), so it refills its
    /// window as completions come; every 20th read it is preempted for 60 µs, and its
    /// window runs dry meanwhile. The read after such a pause waited for no completion: it
    /// follows its previous Q by the recorded 60 µs, as its other reads follow theirs.
    #[test]
    fn a_windowed_process_that_ran_dry_at_its_own_pace_is_paced_by_its_previous_q() {
        const PAUSE: u64 = 60_000;
        let mut bios = Vec::new();
        let mut q = 0;
        for k in 0..400u64 {
            if k > 0 {
                q += if k % 20 == 0 { PAUSE } else { 10_000 };
            }
            let latency = if k == 1 { 80_000 } else { 25_000 };
            bios.push(bio(1, "fio", k * 8, q, q + latency));
        }
        let w = from_bios(DeviceInfo::default(), bios);
        let st = &w.streams[0];
        assert_eq!(st.kind, StreamKind::Windowed, "{st:?}");
        assert_eq!(st.max_in_flight, 4, "{st:?}");
        // From the 11th on: the long read's time with a full window is over.
        for (k, io) in w.ios.iter().enumerate().skip(10) {
            let gap = if k % 20 == 0 { PAUSE } else { 10_000 };
            assert_eq!(
                io.trigger,
                Trigger::AfterQueue {
                    io: k as u32 - 1,
                    delay: gap
                },
                "read {k}"
            );
        }
    }

    /// A process that queues a batch of 4 and waits for all of it, then thinks 5 µs: its
    /// window runs dry before every batch and never refills between. The batch's first Q
    /// still waits for the last completion of the batch before.
    #[test]
    fn a_process_that_waits_for_its_whole_batch_waits_for_its_last_completion() {
        const THINK: u64 = 5_000;
        let mut bios = Vec::new();
        let mut start = 0;
        for b in 0..100u64 {
            for j in 0..4u64 {
                let q = start + j * 2_000;
                bios.push(bio(1, "app", (b * 4 + j) * 8, q, q + 40_000));
            }
            start += 6_000 + 40_000 + THINK;
        }
        let w = from_bios(DeviceInfo::default(), bios);
        for (k, io) in w.ios.iter().enumerate().skip(4).step_by(4) {
            assert_eq!(
                io.trigger,
                Trigger::AfterCompletion {
                    io: k as u32 - 1,
                    delay: THINK
                },
                "batch {}",
                k / 4
            );
        }
    }
}
