//! The trace-driven decision check: BFQ's model driven by the recording itself, not by its
//! own replay, and its decisions compared with BFQ's own log (`record --sched-log`).
//!
//! A closed-loop replay drifts from the recording's timing after its first decisions, so
//! every later decision of the model is taken on a history the kernel never saw. Here the
//! model sees the recorded history: each request enters it when the recording inserted it
//! (I), leaves it when the recording dispatched it (D), and completes when it did (C); its
//! own idle timer fires when it set it. At every one of these points the model decides as
//! BFQ would (preemption on an arrival, idling or expiring on a completion, budget exhausted
//! or timed out at a dispatch opportunity, too idle on its timer); those are its
//! predictions. Then its state is set to what BFQ did: an expiration BFQ logged that the
//! model had not made is applied with BFQ's reason, and the queue BFQ put in service is put
//! in service (after noting which queue the model would have chosen). So each decision is
//! taken from the state BFQ had, and one wrong decision does not shift all later ones.
//!
//! BFQ's decisions take effect at its next dispatch (an expiration is followed by a new
//! queue in service and its first dispatch), so the model's state is set to them just
//! before the next recorded dispatch: a decision the model makes in between (its idle timer
//! a little later than BFQ's) is at the same point, since nothing was dispatched between.
//! A completion that comes after BFQ put a queue in service and before anything was
//! dispatched (BFQ's dispatch opportunity found that queue empty, waiting for its request
//! in flight) finds BFQ's queue in service: BFQ's decisions are taken before it.
//!
//! Owns: the recorded request lives a check needs, the driving loop. Must not: print.

use serde::Serialize;

use iosched_core::{
    driver::{self, Filter, TraceSink},
    event::{Dev, Event, EventKind, Note, Op, ReqFlags},
    source::{InputError, TraceSource},
    timeline::{DeviceState, LifeSink, RequestLife, Submitter},
};

use super::{
    bfqlog::{self, BfqLogged, Dispatches, LogComparison},
    sched::{Ctx, Decided, Decision, ExpireReason, Rq, RqState, Scheduler, bfq::Bfq},
    workload::{Workload, is_sync},
};

/// A request as the recording shows it, for the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedRq {
    pub pid: u32,
    pub cgroup: u64,
    pub ioprio: u16,
    pub sector: u64,
    pub sectors: u32,
    pub op: Op,
    pub sync: bool,
    /// Inserted into the scheduler (I).
    pub inserted: u64,
    /// Issued to the driver (first D), if it was.
    pub dispatched: Option<u64>,
    /// Completed (C), if it was.
    pub completed: Option<u64>,
    /// Its data went through the flush machinery: its bio carried REQ_PREFLUSH on a device
    /// with a write cache (`blk_insert_flush`: a flush first, then the data), so it reached
    /// the scheduler at the head of its dispatch list, not through its queues.
    pub flush_data: bool,
}

#[derive(Default)]
struct Lives {
    done: Vec<RecordedRq>,
    /// When each request (by kernel address) was last inserted.
    inserted: rustc_hash::FxHashMap<u64, u64>,
    /// Requests issued and not yet done: a request whose completion the trace lost ends
    /// no life (the timeline replaces it when its address comes back), yet BFQ served it.
    issued: rustc_hash::FxHashMap<u64, RecordedRq>,
    /// Bios (by address) queued with REQ_PREFLUSH and data.
    preflush_bios: rustc_hash::FxHashSet<u64>,
    /// The trace issued a flush: the device has a write cache. Without one, REQ_PREFLUSH
    /// is dropped (`blk_flush_policy`) and such data goes through the scheduler's queues.
    flushes_issued: bool,
}

impl Lives {
    fn finish(mut self) -> Vec<RecordedRq> {
        self.done.extend(self.issued.into_values());
        if !self.flushes_issued {
            for r in &mut self.done {
                r.flush_data = false;
            }
        }
        self.done
    }
}

/// Nothing to take before the timeline. The device's wakeups reach it and
/// [`LifeSink::event`], which both pass them by.
impl TraceSink for Lives {}

impl LifeSink for Lives {
    fn event(&mut self, ev: &Event) {
        match ev.kind {
            EventKind::Insert if ev.rq != 0 => {
                self.inserted.insert(ev.rq, ev.ts_ns);
            }
            EventKind::Queue if ev.bio != 0 => {
                // Bio addresses are reused: each Q says what this one is.
                if ev.bytes > 0 && ev.flags.has(ReqFlags::PREFLUSH) {
                    self.preflush_bios.insert(ev.bio);
                } else {
                    self.preflush_bios.remove(&ev.bio);
                }
            }
            EventKind::Issue if ev.op == Op::Flush => self.flushes_issued = true,
            _ => {}
        }
    }

    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, _: &DeviceState) {
        let (Some(&i), Some(s)) = (self.inserted.get(&ev.rq), submitter) else {
            return;
        };
        if ev.bytes == 0 || ev.op == Op::Flush {
            return;
        }
        // A stale entry under this address lost its completion: it stays, under the
        // time it was issued.
        let rq = RecordedRq {
            pid: s.pid,
            cgroup: s.cgroup_id,
            ioprio: s.ioprio,
            sector: ev.sector,
            sectors: ev.bytes >> 9,
            op: ev.op,
            sync: is_sync(ev.op, ev.flags),
            inserted: i,
            dispatched: Some(ev.ts_ns),
            completed: None,
            flush_data: self.preflush_bios.contains(&ev.bio),
        };
        match self.issued.entry(ev.rq) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                // Issued again after a requeue: the same life; else a new one.
                if o.get().inserted != i {
                    let stale = std::mem::replace(o.get_mut(), rq);
                    self.done.push(stale);
                }
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(rq);
            }
        }
    }

    fn request_done(&mut self, rq: &RequestLife) {
        let flush_data = self.issued.remove(&rq.rq).is_some_and(|r| r.flush_data);
        // Requests that never went through the scheduler (flushes, bypass) have no I.
        let (Some(i), Some(s)) = (rq.i, rq.submitter.as_ref()) else {
            return;
        };
        if rq.bytes == 0 || rq.op == Op::Flush {
            return;
        }
        self.done.push(RecordedRq {
            pid: s.pid,
            cgroup: s.cgroup_id,
            ioprio: s.ioprio,
            sector: rq.sector,
            sectors: rq.bytes >> 9,
            op: rq.op,
            sync: is_sync(rq.op, rq.flags),
            inserted: i,
            dispatched: rq.first_d,
            completed: (rq.c > 0).then_some(rq.c),
            flush_data,
        });
    }
}

/// The requests of `dev` that went through the scheduler, in insertion order.
pub fn recorded_requests(
    source: &mut dyn TraceSource,
    dev: Dev,
) -> Result<Vec<RecordedRq>, InputError> {
    let mut lives = Lives::default();
    driver::drive(source, Filter::ALL.device(dev), &mut lives)?;
    let mut out = lives.finish();
    out.sort_by_key(|r| r.inserted);
    Ok(out)
}

/// The model's decisions taken from BFQ's recorded state, against BFQ's log.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DecisionCheck {
    /// The model's own expirations against the log's, each placed by the process expired
    /// and its last dispatched request (the same metric as the closed-loop comparison; here
    /// both are placed on the recorded dispatches).
    pub expirations: LogComparison,
    /// BFQ's switches at which the model said which queue it would serve next, and how
    /// many times it named BFQ's.
    pub next_queue_checked: u64,
    pub next_queue_matched: u64,
    pub next_queue_agreement_pct: f64,
    /// Expirations BFQ made that the model had not (applied with BFQ's reason).
    pub forced_expirations: u64,
    /// Queues BFQ put in service that the model did not have in service.
    pub forced_switches: u64,
    /// Requests driven through the model.
    pub requests: u64,
    /// Queue merges: processes BFQ merged into another's queue, those the model merged,
    /// and those in both. A merge BFQ made and the model did not is imposed at the
    /// request it came with.
    pub merged_logged: u64,
    pub merged_predicted: u64,
    pub merged_matched: u64,
}

/// How far from the request that caused it BFQ's merge note may be (the note is written
/// inside the insertion the request's `I` event opens).
const MERGE_NOTE_SLACK_NS: u64 = 2_000_000;

/// A decision from BFQ's log waiting for the dispatch it leads to.
#[derive(Clone, Copy, Debug)]
enum Pending {
    Expire {
        pid: u32,
        sync: bool,
        reason: ExpireReason,
    },
    Switch {
        pid: u32,
        sync: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    // At one instant: completions first, then arrivals, BFQ's notes, and the dispatch
    // they lead to.
    Complete(u32),
    Insert(u32),
    Note(u32),
    Dispatch(u32),
}

fn step_order(s: &Step) -> u8 {
    match s {
        Step::Complete(_) => 0,
        Step::Insert(_) => 1,
        Step::Note(_) => 2,
        Step::Dispatch(_) => 3,
    }
}

/// When each process of `w` is taken to be gone, as [`Ctx::last_io_at`] says it
/// (`crate::sched::Ctx`): the replay's rule ([`super::sim::last_io_at`]) for a
/// process BFQ's log saw exit (`exit_bfqq`); never, for one it did not.
///
/// The replay takes a process whose I/O stopped before the last tenth of the recording as
/// gone once its I/O is done: a closed-loop replay runs out of a starved process's I/O
/// early, and must not idle for a process it cannot continue. Here the history is the
/// recording's own, and BFQ's log says whether the process let go of its queue: one that
/// did not was still there when the log ended (seed 001's recording: `find` read twice
/// mid-run and BFQ, having no exit for it, idled its 20 ms for the raised queue and expired
/// it too idle; taken as gone, the model expired it at once, an exit that never came).
fn lingering(w: &Workload, parsed: &[BfqLogged]) -> Vec<u64> {
    let exited: rustc_hash::FxHashSet<u32> = parsed
        .iter()
        .filter_map(|p| match *p {
            BfqLogged::Exit { pid } => Some(pid),
            _ => None,
        })
        .collect();
    let mut last_io_at = super::sim::last_io_at(w, 0);
    for (t, stream) in last_io_at.iter_mut().zip(&w.streams) {
        if !exited.contains(&stream.pid) {
            // `Ctx::stream_gone` holds only before this instant: never.
            *t = 0;
        }
    }
    last_io_at
}

/// Drives `bfq` with `requests` (of `w`'s processes) and BFQ's `notes`, and compares the
/// model's decisions with the notes. `dispatches` are the recording's dispatches placed
/// by process and request index ([`bfqlog::compare`]).
pub fn check(
    mut bfq: Bfq,
    w: &Workload,
    requests: &[RecordedRq],
    notes: &[Note],
    dispatches: &Dispatches,
    rotational: bool,
    depth: u32,
) -> DecisionCheck {
    let stream_of: rustc_hash::FxHashMap<u32, u32> = w
        .streams
        .iter()
        .enumerate()
        .map(|(i, s)| (s.pid, i as u32))
        .collect();
    let pid_of = |s: u32| w.streams.get(s as usize).map_or(u32::MAX, |st| st.pid);
    // The model's request table: recorded requests of known processes.
    let mut rqs: Vec<Rq> = Vec::new();
    let mut times: Vec<(u64, Step)> = Vec::new();
    let mut remaining = vec![0u32; w.streams.len()];
    let parsed: Vec<BfqLogged> = notes.iter().map(|n| bfqlog::parse(&n.text)).collect();
    // Recorded times: the check's clock is the recording's.
    let last_io_at = lingering(w, &parsed);
    // Requests the flush machinery hands to the head of BFQ's dispatch list.
    let mut at_head: Vec<bool> = Vec::new();
    for r in requests {
        let Some(&stream) = stream_of.get(&r.pid) else {
            continue;
        };
        let id = rqs.len() as u32;
        rqs.push(Rq {
            stream,
            cgroup: r.cgroup,
            sector: r.sector,
            sectors: r.sectors.max(1),
            op: r.op,
            sync: r.sync,
            meta: false,
            ioprio: r.ioprio,
            inserted: r.inserted,
            state: RqState::Plugged,
            head_io: 0,
            tail_io: 0,
            bios: 1,
        });
        remaining[stream as usize] += 1;
        at_head.push(r.flush_data);
        times.push((r.inserted, Step::Insert(id)));
        if let Some(d) = r.dispatched {
            times.push((d.max(r.inserted), Step::Dispatch(id)));
            if let Some(c) = r.completed {
                times.push((c.max(d), Step::Complete(id)));
            }
        }
    }
    // BFQ's merges by process, in time order: imposed on the model at the process's
    // request they came with.
    let mut log_merges: rustc_hash::FxHashMap<u32, std::collections::VecDeque<(u64, u32)>> =
        rustc_hash::FxHashMap::default();
    let mut by_time: Vec<(u64, u32, u32)> = notes
        .iter()
        .zip(&parsed)
        .filter_map(|(n, p)| match *p {
            BfqLogged::Merge { pid, into } => Some((n.ts_ns, pid, into)),
            _ => None,
        })
        .collect();
    by_time.sort_by_key(|m| m.0);
    for (t, pid, into) in by_time {
        log_merges.entry(pid).or_default().push_back((t, into));
    }
    let logged_merged: std::collections::BTreeSet<u32> = log_merges.keys().copied().collect();
    for (k, n) in notes.iter().enumerate() {
        if matches!(
            parsed[k],
            BfqLogged::Expire { .. } | BfqLogged::InService { .. } | BfqLogged::MaxBudget { .. }
        ) {
            times.push((n.ts_ns, Step::Note(k as u32)));
        }
    }
    times.sort_by_key(|(t, s)| (*t, step_order(s), *s));

    let mut out = DecisionCheck {
        requests: rqs.len() as u64,
        ..Default::default()
    };
    let mut kept: Vec<Decided> = Vec::new();
    let mut in_driver = 0u32;
    // BFQ's notes since the last dispatch, and the queue it has in service (by pid).
    let mut pending: std::collections::VecDeque<Pending> = std::collections::VecDeque::new();
    let mut log_in_service: Option<(u32, bool)> = None;
    // The queue of a logged pid: its stream's sync queue, or the async queue of a request
    // of that process; for `SHARED`, the model's shared queue.
    let queue_of_pid = |bfq: &Bfq, pid: u32, sync: bool, rqs: &[Rq]| -> Option<usize> {
        if pid == bfqlog::SHARED && sync {
            return bfq.shared_queue();
        }
        let s = *stream_of.get(&pid)?;
        let cgroup = rqs.iter().find(|r| r.stream == s).map_or(0, |r| r.cgroup);
        bfq.queue_of_stream(s, sync, cgroup)
    };
    // A queue whose process has no more I/O leaves service when the process exits
    // (`bfq_exit_bfqq`: `__bfq_bfqq_expire`, which BFQ does not log): the model's
    // expiration of such a queue for having no requests is not compared.
    // The pid BFQ's log gives a model queue.
    let log_pid = |bfq: &Bfq, q: usize| {
        if bfq.queue_is_shared(q) {
            bfqlog::SHARED
        } else {
            pid_of(bfq.stream_of_queue(q))
        }
    };
    let exit = |kept: &mut Vec<Decided>, natural: Vec<Decided>, remaining: &[u32]| {
        kept.extend(natural.into_iter().filter(|d| {
            !matches!(d.d, Decision::Expire {
                    stream,
                    reason: ExpireReason::NoMoreRequests,
                    ..
                } if remaining.get(stream as usize) == Some(&0))
        }));
    };
    // The model's view of the replayed state at `t` (the loop's own variables).
    macro_rules! ctx_now {
        ($t:expr) => {
            Ctx {
                now: $t,
                rqs: &rqs,
                in_driver,
                depth,
                rotational,
                remaining: &remaining,
                last_io_at: &last_io_at,
            }
        };
    }
    for &(t, step) in &times {
        // The model's idle timer, when due first.
        if let Some(tt) = bfq.next_timer()
            && tt <= t
        {
            let ctx = ctx_now!(tt);
            bfq.timer(&ctx);
            exit(&mut kept, bfq.take_decisions(), &remaining);
        }
        // A dispatch opportunity: the model decides as BFQ would, then takes BFQ's
        // decisions since the last one. At a recorded dispatch from BFQ's queues; and
        // before a completion when BFQ switched queues since the last dispatch (at an
        // opportunity that dispatched nothing: the queue it put in service is the one the
        // completion finds in service).
        let opportunity = match step {
            Step::Dispatch(id) => !at_head[id as usize],
            Step::Complete(_) => pending.iter().any(|p| matches!(p, Pending::Switch { .. })),
            _ => false,
        };
        if opportunity {
            let ctx = ctx_now!(t);
            // The model's own decision at this dispatch opportunity.
            bfq.decide_dispatch(&ctx);
            // Taken before the dispatch at this instant: placed before it (BFQ logs them
            // before dispatching, so the log's are).
            let mut natural = bfq.take_decisions();
            for d in &mut natural {
                d.t = d.t.saturating_sub(1);
            }
            // The queue the model put in service, if it did: the one still in service.
            let model_pick = natural
                .iter()
                .any(|d| matches!(d.d, Decision::InService { .. }))
                .then(|| bfq.in_service_queue())
                .flatten();
            exit(&mut kept, natural, &remaining);
            // BFQ's decisions since the last dispatch, up to the switch to the dispatched
            // request's queue: BFQ may serve several queues in one dispatch round (each
            // put in service, served one request and expired), and the notes of the later
            // ones can come before this request's dispatch event. Before a completion, all
            // of them.
            let own = match step {
                Step::Dispatch(id) => bfq.queue_of_request(id),
                _ => None,
            };
            let upto = pending
                .iter()
                .position(|p| match *p {
                    Pending::Switch { pid, sync } => {
                        own.is_some() && queue_of_pid(&bfq, pid, sync, &rqs) == own
                    }
                    Pending::Expire { .. } => false,
                })
                .map_or(pending.len(), |j| j + 1);
            let mut pending_switch = None;
            for p in pending.drain(..upto) {
                match p {
                    // Where the model did not make it (a queue the model expired and put
                    // back in service at this dispatch opportunity is where BFQ's is).
                    Pending::Expire { pid, sync, reason } => {
                        if log_in_service == Some((pid, sync)) {
                            log_in_service = None;
                        }
                        let in_service = bfq.in_service_queue();
                        if model_pick.is_none()
                            && in_service.is_some_and(|q| log_pid(&bfq, q) == pid)
                        {
                            bfq.force_expire(&ctx, reason);
                            bfq.take_decisions();
                            out.forced_expirations += 1;
                        }
                    }
                    Pending::Switch { pid, sync } => {
                        pending_switch = Some(pid);
                        log_in_service = Some((pid, sync));
                    }
                }
            }
            if let Some(pid) = pending_switch {
                let choice = model_pick
                    .or_else(|| bfq.in_service_queue())
                    .or_else(|| bfq.next_choice(&ctx));
                out.next_queue_checked += 1;
                if choice.is_some_and(|q| log_pid(&bfq, q) == pid) {
                    out.next_queue_matched += 1;
                }
            }
            if let Some((pid, sync)) = log_in_service
                && let Some(q) = queue_of_pid(&bfq, pid, sync, &rqs)
                && bfq.in_service_queue() != Some(q)
            {
                bfq.force_in_service(&ctx, q);
                bfq.take_decisions();
                out.forced_switches += 1;
            }
        }
        match step {
            Step::Insert(id) => {
                rqs[id as usize].state = RqState::Queued;
                let stream = rqs[id as usize].stream;
                remaining[stream as usize] -= 1;
                let ctx = ctx_now!(t);
                if at_head[id as usize] {
                    bfq.insert_at_head(&ctx, id);
                } else {
                    bfq.insert(&ctx, id);
                }
                exit(&mut kept, bfq.take_decisions(), &remaining);
                // A merge BFQ made at this request and the model did not: imposed (the
                // request itself stays where the model put it).
                if let Some(pending) = log_merges.get_mut(&pid_of(stream))
                    && let Some(&(tn, into)) = pending.front()
                    && tn <= t + MERGE_NOTE_SLACK_NS
                {
                    pending.pop_front();
                    if let Some(q) = queue_of_pid(&bfq, into, true, &rqs) {
                        bfq.force_merge(&ctx, stream, q);
                    }
                }
            }
            Step::Complete(id) => {
                rqs[id as usize].state = RqState::Done;
                in_driver = in_driver.saturating_sub(1);
                let ctx = ctx_now!(t);
                bfq.completed(&ctx, id);
                exit(&mut kept, bfq.take_decisions(), &remaining);
            }
            Step::Note(k) => match parsed[k as usize] {
                BfqLogged::Expire { pid, sync, reason } => {
                    pending.push_back(Pending::Expire { pid, sync, reason });
                }
                BfqLogged::InService { pid, sync } => {
                    pending.push_back(Pending::Switch { pid, sync });
                }
                // The device's measured rate is BFQ's state, not a decision: taken as is.
                BfqLogged::MaxBudget { sectors } => bfq.force_max_budget(sectors),
                _ => {}
            },
            Step::Dispatch(id) if at_head[id as usize] => {
                // Served from the dispatch list before BFQ selects a queue
                // (`__bfq_dispatch_request`): no decision here, and BFQ's notes wait for
                // the next dispatch from its queues.
                let ctx = ctx_now!(t);
                bfq.dispatched_at_head(&ctx, id);
                rqs[id as usize].state = RqState::Dispatched;
                in_driver += 1;
            }
            Step::Dispatch(id) => {
                let ctx = ctx_now!(t);
                bfq.force_dispatch(&ctx, id);
                exit(&mut kept, bfq.take_decisions(), &remaining);
                rqs[id as usize].state = RqState::Dispatched;
                in_driver += 1;
            }
        }
    }
    let predicted: std::collections::BTreeSet<u32> = kept
        .iter()
        .filter_map(|d| match d.d {
            Decision::Merge { stream, .. } => Some(pid_of(stream)),
            _ => None,
        })
        .collect();
    out.merged_logged = logged_merged.len() as u64;
    out.merged_predicted = predicted.len() as u64;
    out.merged_matched = predicted.intersection(&logged_merged).count() as u64;
    out.expirations = bfqlog::compare(notes, &kept, pid_of, dispatches, dispatches);
    out.next_queue_agreement_pct = if out.next_queue_checked == 0 {
        100.0
    } else {
        100.0 * out.next_queue_matched as f64 / out.next_queue_checked as f64
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::{SchedEnv, Settings};
    use iosched_core::record::DeviceInfo;

    use crate::scenarios::sched_note as note;

    fn workload(pid: u32) -> Workload {
        Workload {
            device: DeviceInfo::default(),
            kernel_release: Some("6.18.0".into()),
            start_ns: 0,
            end_ns: 0,
            streams: vec![crate::scenarios::stream(pid, "", 1)],
            ios: vec![],
            service: vec![],
            max_in_driver: 1,
            merges: Default::default(),
            throttle: Default::default(),
            cpu: None,
            host_profile: None,
        }
    }

    fn bfq(pairs: &[&str]) -> Bfq {
        bfq_with(pairs, vec![0])
    }

    /// `pid`'s `k`-th 8-sector sync request, inserted at `t`, dispatched 10 µs and
    /// completed 500 µs later, in cgroup 1 at the default priority.
    fn sync_rq(pid: u32, op: Op, k: u64, t: u64) -> RecordedRq {
        RecordedRq {
            pid,
            cgroup: 1,
            ioprio: 0,
            sector: k * 8,
            sectors: 8,
            op,
            sync: true,
            inserted: t,
            dispatched: Some(t + 10_000),
            completed: Some(t + 500_000),
            flush_data: false,
        }
    }

    fn bfq_with(pairs: &[&str], stream_ioprio: Vec<u16>) -> Bfq {
        let env = SchedEnv {
            rotational: true,
            kernel: 6018,
            peak_sectors_per_sec: 1e6,
            root_cgroups: vec![0, 1],
            stream_ioprio,
            max_budget_start: None,
        };
        let pairs: Vec<String> = pairs.iter().map(|p| p.to_string()).collect();
        Bfq::new(&Settings::parse_pairs(&pairs).unwrap(), &env).unwrap()
    }

    /// One reader, one 4 KiB read at a time (I at k ms, D 10 µs later, C 500 µs later),
    /// slice_idle=0: BFQ can only expire its queue for having no more requests at each
    /// completion, and put it back in service at the next arrival. A log saying so agrees
    /// 100%; the same log with another reason agrees at every point and on no reason.
    #[test]
    fn a_log_that_says_what_bfq_must_do_agrees_fully() {
        let pid = 7;
        let w = workload(pid);
        let mut requests = Vec::new();
        let mut notes = Vec::new();
        let mut wrong = Vec::new();
        let mut dispatches = Vec::new();
        for k in 0..40u64 {
            let t = 1_000_000 + k * 1_000_000;
            requests.push(sync_rq(pid, Op::Read, k, t));
            dispatches.push((t + 10_000, pid, k));
            notes.push(note(
                t + 5_000,
                "bfq7S set_in_service_queue, cur-budget = 100",
            ));
            wrong.push(notes.last().unwrap().clone());
            notes.push(note(
                t + 501_000,
                "bfq7S expire (3, slow 0, num_disp 0, short_ttime 1)",
            ));
            wrong.push(note(
                t + 501_000,
                "bfq7S expire (0, slow 0, num_disp 0, short_ttime 1)",
            ));
        }
        // The process goes on (a request the trace ends on): its last expiration is not
        // an exit.
        requests.push(RecordedRq {
            dispatched: None,
            completed: None,
            inserted: 45_000_000,
            sector: 1 << 20,
            ..requests[0]
        });
        let c = check(
            bfq(&["slice_idle=0"]),
            &w,
            &requests,
            &notes,
            &dispatches,
            true,
            32,
        );
        assert_eq!(c.requests, 41);
        assert_eq!(c.expirations.matched, 40);
        assert_eq!(c.expirations.agreement_pct, 100.0);
        assert_eq!((c.next_queue_checked, c.next_queue_matched), (40, 40));
        assert_eq!(c.forced_expirations, 0);
        let c = check(
            bfq(&["slice_idle=0"]),
            &w,
            &requests,
            &wrong,
            &dispatches,
            true,
            32,
        );
        assert_eq!(
            (c.expirations.matched, c.expirations.matched_points),
            (0, 40)
        );
        // With idling on (8 ms > the 0.5 ms think time), the model idles instead: the
        // next request arrives in time, so it never expires the queue, and every one of
        // the log's expirations is one BFQ made and the model did not (imposed at the next
        // dispatch: the trace has none after the 40th).
        let c = check(bfq(&[]), &w, &requests, &notes, &dispatches, true, 32);
        assert_eq!(c.expirations.matched, 0);
        assert_eq!(c.forced_expirations, 39);
    }

    /// dd (pid 7, default weight 40) writes one request at a time and BFQ idles for it;
    /// between two of them, jbd2 (pid 8, best effort level 3: weight 50) writes a commit
    /// block with REQ_PREFLUSH, which the flush machinery puts at the head of BFQ's
    /// dispatch list. BFQ's queues never see it: it cannot preempt dd (a queue of higher
    /// weight becoming busy would, `bfq_bfqq_higher_class_or_weight`), so the log has dd
    /// in service throughout. The same requests taken as queued ones make the model
    /// preempt dd at each commit.
    #[test]
    fn flush_data_reaches_the_dispatch_list_not_the_queues() {
        let (dd, jbd2) = (7, 8);
        let mut w = workload(dd);
        w.streams.push(crate::scenarios::stream(jbd2, "", 1));
        let mut requests = Vec::new();
        let mut dispatches = Vec::new();
        for k in 0..20u64 {
            let t = 1_000_000 + k * 2_000_000;
            let base = sync_rq(dd, Op::Write, k, t);
            requests.push(base);
            dispatches.push((t + 10_000, dd, 2 * k));
            requests.push(RecordedRq {
                pid: jbd2,
                ioprio: (2 << 13) | 3,
                sector: (1 << 20) + k * 8,
                inserted: t + 600_000,
                dispatched: Some(t + 610_000),
                completed: Some(t + 800_000),
                flush_data: true,
                ..base
            });
            dispatches.push((t + 610_000, jbd2, k));
        }
        // dd goes on after the trace, within the idling after its last completion.
        requests.push(RecordedRq {
            dispatched: None,
            completed: None,
            inserted: 41_000_000,
            ..requests[0]
        });
        let notes = [note(
            990_000,
            "bfq7S set_in_service_queue, cur-budget = 100",
        )];
        let ioprio = vec![0, (2 << 13) | 3];
        let at_head = check(
            bfq_with(&["low_latency=0"], ioprio.clone()),
            &w,
            &requests,
            &notes,
            &dispatches,
            true,
            32,
        );
        // dd's first switch in, as the log's, and nothing else.
        assert_eq!(at_head.expirations.model_switches, 1);
        assert!(at_head.expirations.model_expirations.is_empty());
        assert_eq!(at_head.expirations.agreement_pct, 100.0);
        assert_eq!(at_head.forced_switches, 0);
        let mut queued = requests.clone();
        for r in &mut queued {
            r.flush_data = false;
        }
        let c = check(
            bfq_with(&["low_latency=0"], ioprio),
            &w,
            &queued,
            &notes,
            &dispatches,
            true,
            32,
        );
        assert_eq!(
            c.expirations.model_expirations.get("preempted"),
            Some(&20),
            "{c:?}"
        );
        assert_eq!(c.expirations.agreement_pct, 0.0);
    }

    /// dd (pid 7, in a cgroup of its own) has a write in flight when jbd2 (pid 8, root
    /// group, a new queue raised x30) arrives and preempts it; dd, empty but needing idling
    /// (two groups with pending I/O), is requeued and BFQ puts it back in service at once,
    /// dispatching nothing. dd's write completes in service: BFQ idles for dd and injects
    /// jbd2's write. Taking BFQ's switch only at that next dispatch, the model would meet
    /// the completion with no queue in service, then put dd in service empty and expire it
    /// for having no requests, an expiration BFQ never made.
    #[test]
    fn a_switch_that_dispatched_nothing_is_in_place_for_the_next_completion() {
        let (dd, jbd2) = (7, 8);
        let mut w = workload(dd);
        w.streams.push(crate::scenarios::stream(jbd2, "", 1));
        let ms = 1_000_000u64;
        let write = |pid, cgroup, sector, inserted, dispatched, completed| RecordedRq {
            pid,
            cgroup,
            ioprio: 0,
            sector,
            sectors: 8,
            op: Op::Write,
            sync: true,
            inserted,
            dispatched,
            completed,
            flush_data: false,
        };
        let requests = [
            write(dd, 500, 0, ms, Some(ms + 10_000), Some(ms + 500_000)),
            write(
                jbd2,
                1,
                1 << 20,
                ms + 100_000,
                Some(ms + 600_000),
                Some(2 * ms),
            ),
            write(
                dd,
                500,
                8,
                2 * ms + 100_000,
                Some(2 * ms + 110_000),
                Some(2 * ms + 600_000),
            ),
            write(dd, 500, 16, 3 * ms, None, None),
        ];
        let dispatches = [
            (ms + 10_000, dd, 0),
            (ms + 600_000, jbd2, 0),
            (2 * ms + 110_000, dd, 1),
        ];
        let notes = [
            note(990_000, "bfq7S set_in_service_queue, cur-budget = 1024"),
            note(
                ms + 100_000,
                "bfq7S expire (4, slow 0, num_disp 1, short_ttime 1)",
            ),
            note(
                ms + 100_001,
                "bfq7S set_in_service_queue, cur-budget = 1024",
            ),
        ];
        let c = check(
            bfq_with(&[], vec![0, 0]),
            &w,
            &requests,
            &notes,
            &dispatches,
            true,
            32,
        );
        assert_eq!(
            c.expirations.model_expirations.get("preempted"),
            Some(&1),
            "{c:?}"
        );
        assert_eq!(c.expirations.model_expirations.len(), 1, "{c:?}");
        assert_eq!(c.expirations.agreement_pct, 100.0);
        assert_eq!((c.next_queue_checked, c.next_queue_matched), (2, 2));
    }

    /// A reader (pid 7) reads ten blocks one at a time and stops at 10.5 ms, long before
    /// the recording's end (another process reads at 100 ms): BFQ's log has no exit for it,
    /// so it was still there, and BFQ idled for it (the only busy queue) until its idle
    /// timer ran out, 8 ms later: too idle. The model must idle as well, not take the
    /// process as gone. With an `exit_bfqq` for it at 11 ms instead, BFQ let go of the
    /// queue without logging an expiration, and the model takes the process as gone.
    #[test]
    fn a_process_the_log_never_saw_exit_is_idled_for_after_its_last_io() {
        let (reader, later) = (7, 8);
        let mut w = workload(reader);
        w.streams.push(crate::scenarios::stream(later, "", 1));
        // Its I/O ends before the last tenth of the recording.
        w.end_ns = 200_000_000;
        let ms = 1_000_000u64;
        let mut requests = Vec::new();
        let mut dispatches = Vec::new();
        for k in 0..10u64 {
            let t = ms + k * ms;
            requests.push(sync_rq(reader, Op::Read, k, t));
            dispatches.push((t + 10_000, reader, k));
        }
        let last_c = requests.last().unwrap().completed.unwrap();
        let late = RecordedRq {
            pid: later,
            sector: 1 << 20,
            ..sync_rq(later, Op::Read, 0, 100 * ms)
        };
        requests.push(late);
        dispatches.push((100 * ms + 10_000, later, 0));
        let notes = [
            note(990_000, "bfq7S set_in_service_queue, cur-budget = 100"),
            note(
                last_c + 8 * ms,
                "bfq7S expire (0, slow 0, num_disp 0, short_ttime 1)",
            ),
            note(
                100 * ms + 5_000,
                "bfq8S set_in_service_queue, cur-budget = 100",
            ),
        ];
        let c = check(
            bfq(&["low_latency=0"]),
            &w,
            &requests,
            &notes,
            &dispatches,
            true,
            32,
        );
        assert_eq!(
            c.expirations.model_expirations.get("too_idle"),
            Some(&1),
            "{c:?}"
        );
        assert_eq!(
            (c.expirations.matched, c.expirations.agreement_pct),
            (1, 100.0)
        );
        let exited = [
            notes[0].clone(),
            note(last_c + ms, "bfq7S exit_bfqq: 0000000012757e9e, 2"),
            notes[2].clone(),
        ];
        let c = check(
            bfq(&["low_latency=0"]),
            &w,
            &requests,
            &exited,
            &dispatches,
            true,
            32,
        );
        assert!(c.expirations.model_expirations.is_empty(), "{c:?}");
        assert_eq!(c.expirations.agreement_pct, 100.0);
    }

    /// A reader's budget (2/3 of max_budget=64: 42 sectors) runs out at its sixth 8-sector
    /// request: BFQ expires the queue at that dispatch opportunity, before dispatching, so
    /// the expiration follows its fifth request. The model decides there too, at the same
    /// instant as the dispatch: it is placed before it, not after (here the sixth
    /// dispatch's index jumps, as when repeated sectors map a dispatch to another request).
    #[test]
    fn an_expiration_at_a_dispatch_is_placed_before_it() {
        let pid = 7;
        let w = workload(pid);
        let mut requests = Vec::new();
        let mut dispatches = Vec::new();
        for k in 0..6u64 {
            let t = 1_000_000 + k * 1_000_000;
            requests.push(sync_rq(pid, Op::Read, k, t));
            dispatches.push((t + 10_000, pid, if k < 5 { k } else { 10 }));
        }
        requests.push(RecordedRq {
            dispatched: None,
            completed: None,
            inserted: 6_600_000,
            sector: 48,
            ..requests[0]
        });
        let d6 = 6_010_000;
        let notes = [
            note(990_000, "bfq7S set_in_service_queue, cur-budget = 42"),
            note(
                d6 - 5_000,
                "bfq7S expire (2, slow 0, num_disp 0, short_ttime 1)",
            ),
            note(d6 - 4_000, "bfq7S set_in_service_queue, cur-budget = 64"),
        ];
        let c = check(
            bfq(&["max_budget=64", "low_latency=0"]),
            &w,
            &requests,
            &notes,
            &dispatches,
            true,
            32,
        );
        assert_eq!(
            c.expirations.model_expirations.get("budget_exhausted"),
            Some(&1),
            "{c:?}"
        );
        assert_eq!(c.expirations.matched, 1, "{c:?}");
        assert_eq!(c.expirations.agreement_pct, 100.0);
    }
}
