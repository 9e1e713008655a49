//! What a trace looks like in Perfetto: a [`TraceSink`] over the timeline's pass that draws
//! each result as it comes.
//!
//! - A process track per submitter (task pid, named by its comm), with lanes under it
//!   ([`Lanes`]): each request a slice from its Q (the earliest of its bios') to its C,
//!   holding "in scheduler" (I to first D) and "in device" (first D to C). Under it too, an
//!   "events" track: its bios' merges and its requests' requeues, and wakeups with flow arrows from the
//!   waker's track to the wakee's (`record --wakeups`).
//! - A track per device: counters of bios waiting to be issued and requests in the driver
//!   (the timeline's [`DeviceState`]) and of throughput (completed bytes per 10 ms); the
//!   idling-waste intervals ([`IdleTracker`], as `report` counts them) and the service
//!   slices ([`SliceTracker`], as `report` counts them, by process); request merges and
//!   requeues of requests whose submitter is unknown; requests of unknown submitter.
//!
//! A process filter keeps other processes' tracks out; the device tracks stay whole, as in
//! `report`. Memory: the tracks, the lanes' ends, and the requests in flight.
//!
//! Owns: what is drawn where. Must not: encode bytes ([`super::packets`]), compute its own
//! idling or slices.

use std::io::{self, Write};

use rustc_hash::FxHashMap;

use iosched_core::{
    analysis::{
        DEFAULT_MIN_IDLE_NS, Window,
        idling::{IdleInterval, IdleSink, IdleTracker},
        slices::{SliceSink, SliceTracker},
    },
    devmap::DevMap,
    driver::TraceSink,
    event::{Comm, Dev, Event, EventKind, Op},
    timeline::{Anomalies, BioLife, DeviceState, LifeSink, MergeKind, RequestLife, Submitter},
};

use super::{
    lanes::Lanes,
    packets::{Arg, Label, Name, TraceWriter, TrackKind, Value},
};

/// Throughput is completed bytes per bin of this length.
pub const THROUGHPUT_BIN_NS: u64 = 10_000_000;

/// Which submitters get tracks (empty lists: all).
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
}

impl Selection {
    fn is_all(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty()
    }

    fn keeps(&self, pid: u32, tgid: u32, comm: &Comm) -> bool {
        (self.pids.is_empty() || self.pids.contains(&pid) || self.pids.contains(&tgid))
            && (self.comms.is_empty() || self.comms.iter().any(|c| *c == comm.as_str()))
    }
}

/// What was drawn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drawn {
    /// Events the filter kept.
    pub events: u64,
    /// Request slices by submitter pid (0: unknown submitter).
    pub requests_by_pid: FxHashMap<u32, u64>,
    pub idle_intervals: u64,
    pub service_slices: u64,
    pub instants: u64,
    pub wakeups: u64,
    /// The most lanes any process needed.
    pub max_lanes: usize,
}

impl Drawn {
    pub fn requests(&self) -> u64 {
        self.requests_by_pid.values().sum()
    }
}

struct ProcessTracks {
    track: u64,
    lanes: Lanes,
    lane_tracks: Vec<u64>,
    events: Option<u64>,
}

struct DeviceTracks {
    track: u64,
    waiting: u64,
    in_driver: u64,
    throughput: u64,
    idle_track: u64,
    slices_track: u64,
    events: Option<u64>,
    unknown: Option<ProcessTracks>,
    last_waiting: Option<u32>,
    last_in_driver: Option<u32>,
    /// The throughput bin being filled: its index and bytes.
    bin: Option<(u64, u64)>,
    was_idle_pending: bool,
    idle: IdleTracker,
    slices: SliceTracker,
}

/// The sink. Write errors stop the drawing; [`Exporter::finish`] returns the first.
pub struct Exporter<W: Write> {
    w: TraceWriter<W>,
    error: Option<io::Error>,
    select: Selection,
    dev_names: FxHashMap<Dev, String>,
    devices: DevMap<DeviceTracks>,
    processes: FxHashMap<u32, ProcessTracks>,
    /// Every submitter's name, selected or not (service slices are named by it).
    comms: FxHashMap<u32, Comm>,
    /// Issued requests not completed: their submitter, for requeues.
    open: FxHashMap<(Dev, u64), Submitter>,
    next_flow: u64,
    last_ts: u64,
    drawn: Drawn,
}

impl<W: Write> Exporter<W> {
    /// `dev_names`: each device's name, for its track (others are named by major:minor).
    pub fn new(w: TraceWriter<W>, select: Selection, dev_names: FxHashMap<Dev, String>) -> Self {
        Exporter {
            w,
            error: None,
            select,
            dev_names,
            devices: DevMap::default(),
            processes: FxHashMap::default(),
            comms: FxHashMap::default(),
            open: FxHashMap::default(),
            next_flow: 1,
            last_ts: 0,
            drawn: Drawn::default(),
        }
    }

    /// The output and what was drawn, or the first write error.
    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.w.bytes_written()
    }

    pub fn finish(self) -> io::Result<(W, Drawn, u64, u64)> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let (bytes, packets) = (self.w.bytes_written(), self.w.packets());
        let out = self.w.finish()?;
        Ok((out, self.drawn, bytes, packets))
    }

    fn keep(&mut self, r: io::Result<()>) {
        if let Err(e) = r
            && self.error.is_none()
        {
            self.error = Some(e);
        }
    }

    fn device(&mut self, dev: Dev) -> io::Result<&mut DeviceTracks> {
        if self.devices.get(&dev).is_none() {
            let name = self
                .dev_names
                .get(&dev)
                .map_or_else(|| dev.to_string(), |n| format!("{n} ({dev})"));
            let w = &mut self.w;
            let track = w.track(
                TrackKind::Named {
                    parent: None,
                    name: &name,
                },
                None,
            )?;
            let counter = |w: &mut TraceWriter<W>, name: &str, unit, rank| {
                w.track(
                    TrackKind::Counter {
                        parent: Some(track),
                        name,
                        unit,
                    },
                    Some(rank),
                )
            };
            let waiting = counter(w, "bios waiting to be issued", None, 0)?;
            let in_driver = counter(w, "requests in driver", None, 1)?;
            let throughput = counter(w, "throughput", Some("MB/s"), 2)?;
            let named = |w: &mut TraceWriter<W>, name: &str, rank| {
                w.track(
                    TrackKind::Named {
                        parent: Some(track),
                        name,
                    },
                    Some(rank),
                )
            };
            let idle_track = named(w, "idling waste (idle with I/O pending)", 3)?;
            let slices_track = named(w, "service slices", 4)?;
            self.devices.insert(
                dev,
                DeviceTracks {
                    track,
                    waiting,
                    in_driver,
                    throughput,
                    idle_track,
                    slices_track,
                    events: None,
                    unknown: None,
                    last_waiting: None,
                    last_in_driver: None,
                    bin: None,
                    was_idle_pending: false,
                    idle: IdleTracker::default(),
                    slices: SliceTracker::default(),
                },
            );
        }
        Ok(self.devices.get_mut(&dev).expect("inserted above"))
    }

    fn process(&mut self, pid: u32, comm: Option<&Comm>) -> io::Result<&mut ProcessTracks> {
        if !self.processes.contains_key(&pid) {
            let name = comm
                .or_else(|| self.comms.get(&pid))
                .map_or_else(|| format!("pid {pid}"), |c| c.as_str().into_owned());
            let track = self
                .w
                .track(TrackKind::Process { pid, name: &name }, None)?;
            self.processes.insert(
                pid,
                ProcessTracks {
                    track,
                    lanes: Lanes::default(),
                    lane_tracks: Vec::new(),
                    events: None,
                },
            );
        }
        Ok(self.processes.get_mut(&pid).expect("inserted above"))
    }

    /// The events track of a process (created on first use).
    fn process_events(&mut self, pid: u32, comm: Option<&Comm>) -> io::Result<u64> {
        let p = self.process(pid, comm)?;
        if let Some(t) = p.events {
            return Ok(t);
        }
        let parent = p.track;
        let t = self.w.track(
            TrackKind::Named {
                parent: Some(parent),
                name: "merges, requeues, wakeups",
            },
            Some(0),
        )?;
        self.processes.get_mut(&pid).expect("created above").events = Some(t);
        Ok(t)
    }

    fn device_events(&mut self, dev: Dev) -> io::Result<u64> {
        let d = self.device(dev)?;
        if let Some(t) = d.events {
            return Ok(t);
        }
        let parent = d.track;
        let t = self.w.track(
            TrackKind::Named {
                parent: Some(parent),
                name: "request merges, requeues (submitter unknown)",
            },
            Some(5),
        )?;
        self.devices.get_mut(&dev).expect("created above").events = Some(t);
        Ok(t)
    }

    fn draw_request(&mut self, rq: &RequestLife) -> io::Result<()> {
        let start = rq.q.or(rq.i).or(rq.first_d).unwrap_or(rq.c).min(rq.c);
        let pid = rq.submitter.map_or(0, |s| s.pid);
        match rq.submitter {
            Some(s) if self.select.keeps(s.pid, s.tgid, &s.comm) => {
                self.process(s.pid, Some(&s.comm))?;
            }
            None if self.select.is_all() => {
                self.device(rq.dev)?;
            }
            _ => return Ok(()),
        }
        let Exporter {
            w,
            processes,
            devices,
            drawn,
            dev_names,
            ..
        } = self;
        let p = match rq.submitter {
            Some(s) => processes.get_mut(&s.pid).expect("created above"),
            None => {
                let d = devices.get_mut(&rq.dev).expect("created above");
                let parent = d.track;
                d.unknown.get_or_insert_with(|| ProcessTracks {
                    track: parent,
                    lanes: Lanes::default(),
                    lane_tracks: Vec::new(),
                    events: None,
                })
            }
        };
        let (lanes, parent, lane_tracks) = (&mut p.lanes, p.track, &mut p.lane_tracks);
        let lane = lanes.assign(start, rq.c);
        let lanes_now = lanes.count();
        if lane == lane_tracks.len() {
            let name = match rq.submitter {
                Some(_) => format!("requests, lane {lane}"),
                None => format!("requests of unknown submitter, lane {lane}"),
            };
            // After the device's own tracks, in lane order.
            let rank = 10 + lane as i64;
            let t = w.track(
                TrackKind::Named {
                    parent: Some(parent),
                    name: &name,
                },
                Some(rank),
            )?;
            lane_tracks.push(t);
        }
        let track = lane_tracks[lane];
        drawn.max_lanes = drawn.max_lanes.max(lanes_now);
        *drawn.requests_by_pid.entry(pid).or_insert(0) += 1;

        let dev_text = dev_names
            .get(&rq.dev)
            .cloned()
            .unwrap_or_else(|| rq.dev.to_string());
        let mut args = vec![
            (Arg::Device, Value::Str(&dev_text)),
            (Arg::Sector, Value::Uint(rq.sector)),
            (Arg::Bytes, Value::Uint(u64::from(rq.bytes))),
            (Arg::Bios, Value::Uint(u64::from(rq.bios))),
        ];
        if rq.requeues > 0 {
            args.push((Arg::Requeues, Value::Uint(u64::from(rq.requeues))));
        }
        if rq.error != 0 {
            args.push((Arg::Error, Value::Int(i64::from(rq.error))));
        }
        if rq.q.is_none() {
            args.push((Arg::QueuedBeforeTrace, Value::Uint(1)));
        }
        w.begin(start, track, Label::Known(op_name(rq.op)), &args)?;
        if let (Some(i), Some(d)) = (rq.i, rq.first_d)
            && start <= i
            && i <= d
        {
            w.begin(i, track, Label::Known(Name::InScheduler), &[])?;
            w.end(d, track)?;
        }
        if let Some(d) = rq.first_d
            && start <= d
        {
            w.begin(d, track, Label::Known(Name::InDevice), &[])?;
            w.end(rq.c, track)?;
        }
        w.end(rq.c, track)
    }

    /// Completed bytes into the device's throughput bins; a finished bin is drawn (and a
    /// zero after it if the device then had none for a bin or more).
    fn throughput(&mut self, dev: Dev, ts: u64, bytes: u64) -> io::Result<()> {
        self.device(dev)?;
        let d = self.devices.get_mut(&dev).expect("created above");
        let idx = ts / THROUGHPUT_BIN_NS;
        let track = d.throughput;
        match d.bin {
            Some((cur, ref mut b)) if cur == idx => {
                *b += bytes;
                Ok(())
            }
            prev => {
                d.bin = Some((idx, bytes));
                match prev {
                    Some((cur, b)) => Self::draw_bin(&mut self.w, track, cur, b, cur + 1 < idx),
                    None => Ok(()),
                }
            }
        }
    }

    fn draw_bin(
        w: &mut TraceWriter<W>,
        track: u64,
        idx: u64,
        bytes: u64,
        then_zero: bool,
    ) -> io::Result<()> {
        let mb_per_s = bytes as f64 / 1e6 / (THROUGHPUT_BIN_NS as f64 / 1e9);
        w.counter_f64(idx * THROUGHPUT_BIN_NS, track, mb_per_s)?;
        if then_zero {
            w.counter_f64((idx + 1) * THROUGHPUT_BIN_NS, track, 0.0)?;
        }
        Ok(())
    }

    fn on_event(&mut self, ev: &Event) -> io::Result<()> {
        match ev.kind {
            EventKind::RqMerge => {
                let t = self.device_events(ev.dev)?;
                self.instant(ev, t, Name::RequestMerge)
            }
            EventKind::Requeue => {
                let t = match self.open.get(&(ev.dev, ev.rq)).copied() {
                    Some(s) if self.select.keeps(s.pid, s.tgid, &s.comm) => {
                        self.process_events(s.pid, Some(&s.comm))?
                    }
                    Some(_) => return Ok(()),
                    None => self.device_events(ev.dev)?,
                };
                self.instant(ev, t, Name::Requeue)
            }
            EventKind::Wakeup => self.wakeup(ev),
            _ => Ok(()),
        }
    }

    fn instant(&mut self, ev: &Event, track: u64, name: Name) -> io::Result<()> {
        self.instant_at(ev.ts_ns, track, name, ev.sector, ev.bytes)
    }

    fn instant_at(
        &mut self,
        ts: u64,
        track: u64,
        name: Name,
        sector: u64,
        bytes: u32,
    ) -> io::Result<()> {
        self.drawn.instants += 1;
        self.w.instant(
            ts,
            track,
            Label::Known(name),
            &[
                (Arg::Sector, Value::Uint(sector)),
                (Arg::Bytes, Value::Uint(u64::from(bytes))),
            ],
            &[],
            &[],
        )
    }

    /// A bio merged into a request: an instant at its merge on its submitter's events track
    /// (drawn when the bio completes, when the timeline hands over its life: the merge
    /// event itself may fire in another task).
    fn on_bio_done(&mut self, bio: &BioLife) -> io::Result<()> {
        let (Some((ts, kind)), Some(s)) = (bio.m, bio.submitter) else {
            return Ok(());
        };
        if !self.select.keeps(s.pid, s.tgid, &s.comm) {
            return Ok(());
        }
        let name = match kind {
            MergeKind::Back => Name::BackMerge,
            MergeKind::Front => Name::FrontMerge,
        };
        let t = self.process_events(s.pid, Some(&s.comm))?;
        self.instant_at(ts, t, name, bio.sector, bio.bytes)
    }

    /// An arrow from the waker's events track to the wakee's, at the wakeup.
    fn wakeup(&mut self, ev: &Event) -> io::Result<()> {
        let Some((wakee, wakee_tgid)) = ev.wakee() else {
            return Ok(());
        };
        let wakee_comm = self.comms.get(&wakee).copied().unwrap_or_default();
        if !self.select.keeps(ev.pid, ev.tgid, &ev.comm)
            && !self.select.keeps(wakee, wakee_tgid, &wakee_comm)
        {
            return Ok(());
        }
        let flow = self.next_flow;
        self.next_flow += 1;
        self.drawn.wakeups += 1;
        let from = self.process_events(ev.pid, Some(&ev.comm))?;
        let to = self.process_events(wakee, None)?;
        self.w.instant(
            ev.ts_ns,
            from,
            Label::Known(Name::Wakes),
            &[(Arg::Wakee, Value::Uint(u64::from(wakee)))],
            &[flow],
            &[],
        )?;
        self.w.instant(
            ev.ts_ns,
            to,
            Label::Known(Name::WokenBy),
            &[(Arg::Waker, Value::Uint(u64::from(ev.pid)))],
            &[],
            &[flow],
        )
    }

    fn on_issued(&mut self, ev: &Event, submitter: Option<&Submitter>) -> io::Result<()> {
        let owner = submitter.map_or(0, |s| s.pid);
        match submitter {
            Some(s) if ev.rq != 0 => {
                self.open.insert((ev.dev, ev.rq), *s);
            }
            _ => {
                self.open.remove(&(ev.dev, ev.rq));
            }
        }
        self.device(ev.dev)?;
        let Exporter {
            w,
            devices,
            comms,
            error,
            drawn,
            ..
        } = self;
        let d = devices.get_mut(&ev.dev).expect("created above");
        let mut draw = SliceDraw {
            w,
            track: d.slices_track,
            comms,
            error,
            drawn,
        };
        d.slices.issued(
            u64::from(owner),
            ev.ts_ns,
            ev.sector,
            u64::from(ev.sectors()),
            &mut draw,
        );
        Ok(())
    }

    fn on_done(&mut self, rq: &RequestLife) -> io::Result<()> {
        self.open.remove(&(rq.dev, rq.rq));
        let owner = rq.submitter.map_or(0, |s| s.pid);
        let d = self.device(rq.dev)?;
        d.idle.completed(owner);
        d.slices.completed(u64::from(owner), rq.c);
        self.throughput(rq.dev, rq.c, u64::from(rq.bytes))?;
        self.draw_request(rq)
    }

    fn on_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) -> io::Result<()> {
        self.device(dev)?;
        let Exporter {
            w,
            devices,
            error,
            drawn,
            ..
        } = self;
        let d = devices.get_mut(&dev).expect("created above");
        if d.last_waiting != Some(state.pending) {
            d.last_waiting = Some(state.pending);
            w.counter(ts, d.waiting, i64::from(state.pending))?;
        }
        if d.last_in_driver != Some(state.in_driver) {
            d.last_in_driver = Some(state.in_driver);
            w.counter(ts, d.in_driver, i64::from(state.in_driver))?;
        }
        let was = d.was_idle_pending;
        d.was_idle_pending = state.idle_with_pending();
        let mut draw = IdleDraw {
            w,
            track: d.idle_track,
            error,
            drawn,
        };
        d.idle.update(dev, ts, was, state, &Window::ALL, &mut draw);
        Ok(())
    }

    fn on_end(&mut self) -> io::Result<()> {
        let end = self.last_ts;
        let Exporter {
            w,
            devices,
            comms,
            error,
            drawn,
            ..
        } = self;
        for (dev, d) in devices.iter_mut() {
            let mut draw = IdleDraw {
                w,
                track: d.idle_track,
                error,
                drawn,
            };
            d.idle.close(*dev, end, &Window::ALL, &mut draw);
            let mut draw = SliceDraw {
                w,
                track: d.slices_track,
                comms,
                error,
                drawn,
            };
            d.slices.finish(&mut draw);
            if let Some((idx, bytes)) = d.bin.take() {
                Self::draw_bin(w, d.throughput, idx, bytes, true)?;
            }
        }
        Ok(())
    }
}

fn op_name(op: Op) -> Name {
    match op {
        Op::Read => Name::Read,
        Op::Write | Op::WriteZeroes | Op::ZoneAppend => Name::Write,
        Op::Flush => Name::Flush,
        Op::Discard | Op::SecureErase => Name::Discard,
        _ => Name::OtherOp,
    }
}

/// Draws the idle intervals the device's [`IdleTracker`] closes (those `report` counts as
/// waste: at least [`DEFAULT_MIN_IDLE_NS`]).
struct IdleDraw<'a, W: Write> {
    w: &'a mut TraceWriter<W>,
    track: u64,
    error: &'a mut Option<io::Error>,
    drawn: &'a mut Drawn,
}

impl<W: Write> IdleSink for IdleDraw<'_, W> {
    fn min_interval_ns(&self) -> u64 {
        DEFAULT_MIN_IDLE_NS
    }

    fn interval(&mut self, iv: IdleInterval) {
        let waiting: Vec<String> = iv.waiting_pids.iter().map(u32::to_string).collect();
        let waiting = waiting.join(",");
        let r = self
            .w
            .begin(
                iv.start_ns,
                self.track,
                Label::Known(Name::IdleWithPending),
                &[
                    (Arg::AfterPid, Value::Uint(u64::from(iv.after_pid))),
                    (Arg::Waiting, Value::Str(&waiting)),
                ],
            )
            .and_then(|()| self.w.end(iv.start_ns + iv.duration_ns, self.track));
        self.drawn.idle_intervals += 1;
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
    }
}

/// Draws the service slices the device's [`SliceTracker`] closes, named by their owner.
struct SliceDraw<'a, W: Write> {
    w: &'a mut TraceWriter<W>,
    track: u64,
    comms: &'a FxHashMap<u32, Comm>,
    error: &'a mut Option<io::Error>,
    drawn: &'a mut Drawn,
}

impl<W: Write> SliceSink for SliceDraw<'_, W> {
    fn slice(&mut self, owner: u64, start_ns: u64, end_ns: u64, requests: u64) {
        let pid = owner as u32;
        let name = match (pid, self.comms.get(&pid)) {
            (0, _) => "unknown submitter".to_string(),
            (_, Some(c)) => format!("{} {pid}", c.as_str()),
            (_, None) => format!("pid {pid}"),
        };
        let r = self
            .w
            .begin(
                start_ns,
                self.track,
                Label::Text(&name),
                &[
                    (Arg::Pid, Value::Uint(owner)),
                    (Arg::Requests, Value::Uint(requests)),
                ],
            )
            .and_then(|()| self.w.end(end_ns, self.track));
        self.drawn.service_slices += 1;
        if let Err(e) = r {
            self.error.get_or_insert(e);
        }
    }
}

impl<W: Write> TraceSink for Exporter<W> {
    fn see(&mut self, ev: &Event) {
        self.drawn.events += 1;
        self.last_ts = self.last_ts.max(ev.ts_ns);
    }

    fn end(&mut self, _anomalies: &Anomalies) {
        if self.error.is_none() {
            let r = self.on_end();
            self.keep(r);
        }
    }
}

impl<W: Write> LifeSink for Exporter<W> {
    fn event(&mut self, ev: &Event) {
        if self.error.is_none() {
            let r = self.on_event(ev);
            self.keep(r);
        }
    }

    fn bio_done(&mut self, bio: &BioLife) {
        if self.error.is_none() {
            let r = self.on_bio_done(bio);
            self.keep(r);
        }
    }

    fn queued(&mut self, ev: &Event, _state: &DeviceState) {
        self.comms.insert(ev.pid, ev.comm);
    }

    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, _state: &DeviceState) {
        if self.error.is_none() {
            let r = self.on_issued(ev, submitter);
            self.keep(r);
        }
    }

    fn request_done(&mut self, rq: &RequestLife) {
        if self.error.is_none() {
            let r = self.on_done(rq);
            self.keep(r);
        }
    }

    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        if self.error.is_none() {
            let r = self.on_state(dev, ts, state);
            self.keep(r);
        }
    }
}
