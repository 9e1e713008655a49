//! The workload as the model must replay it, rebuilt from a recorded trace: every bio with the
//! thing that released it.
//!
//! A recorded time cannot be replayed as such under another scheduler: a process that waits
//! for its previous I/O would issue its next one earlier or later. So each bio keeps a
//! [`Trigger`] instead of a time:
//! - `At`: open loop, at its recorded offset from the trace's start (asynchronous writeback,
//!   a stream's first I/O);
//! - `AfterQueue`: issued `delay` after an earlier bio of the same process was queued (one
//!   submission batch, or a process with several I/Os in flight);
//! - `AfterCompletion`: closed loop, `delay` (think time) after a bio completed. That bio is
//!   usually the process's own previous one, but can be another process's: a process whose
//!   waiting Qs follow another's completions again and again depends on it (dd's `O_DSYNC`
//!   write waits for jbd2's journal commit; jbd2's commit follows dd's data write).
//!
//! Dependencies are inferred from timing only (repeated, within [`DEP_WINDOW_NS`]), which is
//! what a block trace allows; a `sched_wakeup` capture would make them observed facts.
//!
//! Owns: extraction. Must not: simulate.

use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::{
    event::{Comm, Dev, Op, ReqFlags},
    input::{InputError, TraceSource},
    record::DeviceInfo,
    timeline::{BioLife, DeviceState, LifeSink, RequestLife, Submitter, Timeline},
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

/// What releases a bio in a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Trigger {
    /// Open loop: ns after the workload's start.
    At(u64),
    /// `delay` ns after bio `io` was queued.
    AfterQueue { io: u32, delay: u64 },
    /// `delay` ns after bio `io` completed.
    AfterCompletion { io: u32, delay: u64 },
}

/// One bio to replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Io {
    pub stream: u32,
    pub sector: u64,
    pub sectors: u32,
    #[serde(skip)]
    pub op: Op,
    #[serde(skip)]
    pub flags: ReqFlags,
    /// `op_is_sync()`: reads, and writes with SYNC/FUA/PREFLUSH.
    pub sync: bool,
    pub trigger: Trigger,
    /// Its process unplugged after queueing it and before its next bio (the recording's
    /// `U` events): the plug batch ends here whatever the timing. fio's libaio submits
    /// each bio in its own plug, so back-to-back bios do not plug-merge.
    pub plug_end: bool,
    /// Recorded Q and C, absolute trace ns.
    pub rec_q: u64,
    /// When its submission returned: its request allocated (G) or its merge (M); later
    /// than Q when the process slept for a free request.
    #[serde(skip)]
    pub rec_submitted: u64,
    pub rec_c: u64,
}

/// How a process issued its I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// Waits for a completion before each I/O (one in flight).
    ClosedLoop,
    /// Several in flight, next issued on completions.
    Windowed,
    /// Issued at its own pace (asynchronous writeback).
    OpenLoop,
}

/// One process's I/O stream.
#[derive(Clone, Debug, Serialize)]
pub struct Stream {
    pub pid: u32,
    pub tgid: u32,
    #[serde(serialize_with = "comm_str")]
    pub comm: Comm,
    pub cgroup_id: u64,
    pub ios: u32,
    pub kind: StreamKind,
    /// Streams whose completions released this one's I/O, with how many times.
    pub depends_on: Vec<(u32, u32)>,
    /// Mean think time of its closed-loop I/O (own or other's completion -> next Q), ns.
    pub think_mean_ns: f64,
    /// Most bios it had in flight at once.
    pub max_in_flight: u32,
    /// Index of its last bio: after it the process does no more I/O (BFQ does not idle for
    /// a queue whose process is gone).
    pub last_io: u32,
}

fn comm_str<S: serde::Serializer>(c: &Comm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&c.as_str())
}

/// A request as the device saw it, for fitting the device model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceSample {
    pub d: u64,
    pub c: u64,
    pub sector: u64,
    pub sectors: u32,
    pub write: bool,
    /// Requests in the driver when it was issued (itself included).
    pub depth_at_d: u32,
}

/// Everything the model takes from a trace.
#[derive(Clone, Debug)]
pub struct Workload {
    pub device: DeviceInfo,
    pub kernel_release: Option<String>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub streams: Vec<Stream>,
    /// In recorded Q order.
    pub ios: Vec<Io>,
    /// Issued requests in D order.
    pub service: Vec<ServiceSample>,
    pub max_in_driver: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(
        "the trace has no complete I/O on {0} (no bio with both its Q and its C): nothing to replay"
    )]
    Empty(String),
    #[error(
        "the trace has I/O on several devices ({0}); choose one with --device (name or major:minor)"
    )]
    SeveralDevices(String),
    #[error("no device {0} in the trace")]
    NoSuchDevice(String),
}

#[derive(Default)]
struct Collect {
    bios: Vec<BioLife>,
    /// Unplug times by pid.
    unplugs: FxHashMap<u32, Vec<u64>>,
    service: Vec<ServiceSample>,
    open_d: FxHashMap<u64, usize>,
    max_in_driver: u32,
}

impl LifeSink for Collect {
    fn issued(&mut self, ev: &crate::event::Event, _s: Option<&Submitter>, state: &DeviceState) {
        self.max_in_driver = self.max_in_driver.max(state.in_driver);
        self.open_d.insert(ev.rq, self.service.len());
        self.service.push(ServiceSample {
            d: ev.ts_ns,
            c: 0,
            sector: ev.sector,
            sectors: ev.sectors(),
            write: ev.op.is_write(),
            depth_at_d: state.in_driver,
        });
    }
    fn bio_done(&mut self, bio: &BioLife) {
        if bio.q.is_some() && bio.submitter.is_some() {
            self.bios.push(*bio);
        }
    }
    fn request_done(&mut self, rq: &RequestLife) {
        if let Some(i) = self.open_d.remove(&rq.rq) {
            self.service[i].c = rq.c;
        }
    }
}

/// `op_is_sync()`.
pub fn is_sync(op: Op, flags: ReqFlags) -> bool {
    op == Op::Read || flags.0 & (ReqFlags::SYNC | ReqFlags::FUA | ReqFlags::PREFLUSH) != 0
}

/// Reads a trace and extracts the workload of one device (`device`: name or major:minor;
/// `None`: the only device with I/O).
pub fn extract(
    source: &mut dyn TraceSource,
    device: Option<&str>,
) -> Result<Workload, WorkloadError> {
    let meta = source.meta().clone();
    let wanted = match device {
        Some(d) => Some(
            crate::analysis::model::resolve_devices(&meta.devices, &[d.to_string()])
                .map_err(|_| WorkloadError::NoSuchDevice(d.to_string()))?
                .and_then(|v| v.first().copied())
                .ok_or_else(|| WorkloadError::NoSuchDevice(d.to_string()))?,
        ),
        None => None,
    };
    let mut timeline = Timeline::new(
        meta.devices
            .iter()
            .filter(|d| !d.request_based)
            .map(|d| d.dev),
    );
    let mut per_dev: FxHashMap<Dev, Collect> = FxHashMap::default();
    while let Some(ev) = source.next_event() {
        let ev = ev?;
        if wanted.is_some_and(|w| w != ev.dev) {
            continue;
        }
        let sink = per_dev.entry(ev.dev).or_default();
        if ev.kind == crate::event::EventKind::Unplug {
            sink.unplugs.entry(ev.pid).or_default().push(ev.ts_ns);
        }
        timeline.push(&ev, sink);
    }
    timeline.finish();
    let dev = match wanted {
        Some(d) => d,
        None => {
            let mut with_io: Vec<Dev> = per_dev
                .iter()
                .filter(|(_, c)| !c.bios.is_empty())
                .map(|(d, _)| *d)
                .collect();
            with_io.sort();
            match with_io.len() {
                0 => return Err(WorkloadError::Empty(meta.path.display().to_string())),
                1 => with_io[0],
                _ => {
                    let names: Vec<String> =
                        with_io.iter().map(|d| name_of(&meta.devices, *d)).collect();
                    return Err(WorkloadError::SeveralDevices(names.join(", ")));
                }
            }
        }
    };
    let collect = per_dev.remove(&dev).unwrap_or_default();
    let info = meta
        .devices
        .iter()
        .find(|d| d.dev == dev)
        .cloned()
        .unwrap_or_else(|| DeviceInfo {
            name: name_of(&meta.devices, dev),
            dev,
            request_based: true,
            ..Default::default()
        });
    if collect.bios.is_empty() {
        return Err(WorkloadError::Empty(info.name.clone()));
    }
    let mut service: Vec<ServiceSample> =
        collect.service.into_iter().filter(|s| s.c >= s.d).collect();
    service.sort_by_key(|s| s.d);
    let mut w = from_bios(info, collect.bios);
    mark_plug_ends(&mut w, &collect.unplugs);
    w.service = service;
    w.max_in_driver = collect.max_in_driver;
    w.kernel_release = meta.kernel_release.clone();
    Ok(w)
}

/// Sets [`Io::plug_end`] from the recorded unplugs of each process.
fn mark_plug_ends(w: &mut Workload, unplugs: &FxHashMap<u32, Vec<u64>>) {
    let mut last: Vec<Option<usize>> = vec![None; w.streams.len()];
    let mark = |ios: &mut [Io], prev: usize, until: u64| {
        let pid_unplugs = unplugs.get(&w.streams[ios[prev].stream as usize].pid);
        if let Some(ts) = pid_unplugs {
            let from = ios[prev].rec_q;
            let k = ts.partition_point(|t| *t < from);
            ios[prev].plug_end = ts.get(k).is_some_and(|t| *t <= until);
        }
    };
    for i in 0..w.ios.len() {
        let s = w.ios[i].stream as usize;
        if let Some(prev) = last[s] {
            let q = w.ios[i].rec_q;
            mark(&mut w.ios, prev, q);
        }
        last[s] = Some(i);
    }
    for prev in last.into_iter().flatten() {
        mark(&mut w.ios, prev, u64::MAX);
    }
}

fn name_of(devices: &[DeviceInfo], dev: Dev) -> String {
    devices
        .iter()
        .find(|d| d.dev == dev)
        .map_or_else(|| dev.to_string(), |d| d.name.clone())
}

/// Builds the streams and triggers from completed bios of one device.
pub fn from_bios(device: DeviceInfo, mut bios: Vec<BioLife>) -> Workload {
    bios.sort_by_key(|b| (b.q.unwrap_or(0), b.c));
    let start_ns = bios.first().and_then(|b| b.q).unwrap_or(0);
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
                max_in_flight: 0,
                last_io: 0,
            });
            (streams.len() - 1) as u32
        });
        streams[id as usize].ios += 1;
        streams[id as usize].last_io = ios.len() as u32;
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

    // Sweep Qs and Cs in time order (completions first at equal times).
    let mut marks: Vec<(u64, u8, u32)> = Vec::with_capacity(ios.len() * 2);
    for (i, io) in ios.iter().enumerate() {
        marks.push((io.rec_q, 1, i as u32));
        marks.push((io.rec_c, 0, i as u32));
    }
    marks.sort_unstable();
    let n = streams.len();
    let mut in_flight = vec![0u32; n];
    let mut last_own_c: Vec<Option<(u64, u32)>> = vec![None; n];
    // Each process's last submission: when it returned (the next bio of a process that
    // slept in request allocation follows its wake-up, not its Q), and the bio.
    let mut last_q: Vec<Option<(u64, u32)>> = vec![None; n];
    let mut last_c: Option<(u64, u32)> = None;
    // Waiting Qs: the io, its process's last completion, and another process's completion
    // just before it (with that process's stream).
    struct Waiting {
        io: u32,
        q: u64,
        own: Option<(u64, u32)>,
        other: Option<(u64, u32, u32)>,
    }
    let mut waiting: Vec<Vec<Waiting>> = (0..n).map(|_| Vec::new()).collect();
    let mut windowed = vec![false; n];
    for (t, kind, i) in marks {
        let io = ios[i as usize];
        let s = io.stream as usize;
        if kind == 0 {
            in_flight[s] = in_flight[s].saturating_sub(1);
            last_own_c[s] = Some((t, i));
            last_c = Some((t, i));
            continue;
        }
        let trigger = if !io.sync {
            Trigger::At(t - start_ns)
        } else if in_flight[s] > 0 {
            windowed[s] = true;
            match (last_q[s], last_own_c[s]) {
                (Some((tq, q)), _) if t.saturating_sub(tq) <= BATCH_NS => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (_, Some((tc, c))) if t - tc <= DEP_WINDOW_NS => Trigger::AfterCompletion {
                    io: c,
                    delay: t - tc,
                },
                (Some((tq, q)), _) => Trigger::AfterQueue {
                    io: q,
                    delay: t.saturating_sub(tq),
                },
                (None, _) => Trigger::At(t - start_ns),
            }
        } else {
            let other = last_c
                .filter(|(tc, c)| {
                    ios[*c as usize].stream != io.stream
                        && t - tc <= DEP_WINDOW_NS
                        && last_own_c[s].is_none_or(|(own, _)| own <= *tc)
                })
                .map(|(tc, c)| (tc, c, ios[c as usize].stream));
            waiting[s].push(Waiting {
                io: i,
                q: t,
                own: last_own_c[s],
                other,
            });
            // Resolved below, once the dependencies are known.
            Trigger::At(t - start_ns)
        };
        ios[i as usize].trigger = trigger;
        in_flight[s] += 1;
        streams[s].max_in_flight = streams[s].max_in_flight.max(in_flight[s]);
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
        let mut deps: Vec<(u32, u32)> = counts
            .into_iter()
            .filter(|(_, k)| {
                *k >= DEP_MIN_COUNT && f64::from(*k) >= DEP_MIN_SHARE * waits.len() as f64
            })
            .collect();
        deps.sort_by_key(|(w, k)| (std::cmp::Reverse(*k), *w));
        let mut think_sum = 0.0;
        let mut think_n = 0u32;
        for w in waits {
            let chosen = match w.other {
                Some((tc, c, ws)) if deps.iter().any(|(d, _)| *d == ws) => Some((tc, c)),
                _ => w.own,
            };
            if let Some((tc, c)) = chosen {
                ios[w.io as usize].trigger = Trigger::AfterCompletion {
                    io: c,
                    delay: w.q - tc,
                };
                think_sum += (w.q - tc) as f64;
                think_n += 1;
            }
        }
        let st = &mut streams[s];
        st.depends_on = deps;
        st.think_mean_ns = if think_n == 0 {
            0.0
        } else {
            think_sum / f64::from(think_n)
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
    }
}

impl Workload {
    /// Stream display name, as `comm(pid)`.
    pub fn stream_name(&self, s: u32) -> String {
        let st = &self.streams[s as usize];
        format!("{}({})", st.comm, st.pid)
    }
}
