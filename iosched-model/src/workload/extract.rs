//! The pass over a trace: collects, per device, the completed bios, the service samples of
//! its requests, the wakeups, unplugs and throttling events, then builds the workload of
//! the one device asked for.
//!
//! Owns: reading the trace and choosing the device. Must not: infer triggers (that is
//! [`super::triggers`]).

use rustc_hash::FxHashMap;

use iosched_core::{
    driver::{self, Filter, TraceSink},
    event::{Dev, Event, EventKind},
    record::DeviceInfo,
    source::{InputError, TraceSource},
    timeline::{BioLife, DeviceState, LifeSink, RequestLife, Submitter},
};

use super::{Io, ServiceSample, Wakeup, Workload, triggers::from_bios_and_wakeups};

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
    /// Bios whose completion the trace lost (see [`settle_lost`]).
    lost: Vec<BioLife>,
    /// Unplug times by pid.
    unplugs: FxHashMap<u32, Vec<u64>>,
    service: Vec<ServiceSample>,
    open_d: FxHashMap<u64, usize>,
    max_in_driver: u32,
    wakeups: Vec<Wakeup>,
    /// kyber and wbt events.
    throttle_events: Vec<Event>,
}

impl LifeSink for Collect {
    /// Wakeups, unplugs and throttling events have no part in a life: the timeline passes
    /// them by.
    fn event(&mut self, ev: &Event) {
        if let Some((wakee_pid, _)) = ev.wakee() {
            self.wakeups.push(Wakeup {
                ts: ev.ts_ns,
                waker_pid: ev.pid,
                wakee_pid,
            });
            return;
        }
        match ev.kind {
            EventKind::Unplug => self.unplugs.entry(ev.pid).or_default().push(ev.ts_ns),
            EventKind::KyberThrottled
            | EventKind::KyberAdjust
            | EventKind::WbtStep
            | EventKind::WbtTimer => self.throttle_events.push(*ev),
            _ => {}
        }
    }
    fn issued(&mut self, ev: &Event, _s: Option<&Submitter>, state: &DeviceState) {
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
    fn bio_lost(&mut self, bio: &BioLife) {
        if bio.q.is_some() && bio.submitter.is_some() {
            self.lost.push(*bio);
        }
    }
    fn request_done(&mut self, rq: &RequestLife) {
        if let Some(i) = self.open_d.remove(&rq.rq) {
            self.service[i].c = rq.c;
        }
    }
}

/// Each device's [`Collect`]: what the timeline makes of an event goes to the event's
/// device's, even a life of another device it ends (a bio whose id the event reuses).
#[derive(Default)]
struct PerDevice {
    collects: FxHashMap<Dev, Collect>,
    /// The device of the event being processed.
    current: Dev,
}

impl PerDevice {
    fn current(&mut self) -> &mut Collect {
        self.collects
            .get_mut(&self.current)
            .expect("made when its event was seen")
    }
}

impl TraceSink for PerDevice {
    fn see(&mut self, ev: &Event) {
        self.current = ev.dev;
        self.collects.entry(ev.dev).or_default();
    }
}

impl LifeSink for PerDevice {
    fn event(&mut self, ev: &Event) {
        self.current().event(ev);
    }
    fn issued(&mut self, ev: &Event, s: Option<&Submitter>, state: &DeviceState) {
        self.current().issued(ev, s, state);
    }
    fn bio_done(&mut self, bio: &BioLife) {
        self.current().bio_done(bio);
    }
    fn bio_lost(&mut self, bio: &BioLife) {
        self.current().bio_lost(bio);
    }
    fn request_done(&mut self, rq: &RequestLife) {
        self.current().request_done(rq);
    }
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
            iosched_core::analysis::report::resolve_devices(&meta.devices, &[d.to_string()])
                .map_err(|_| WorkloadError::NoSuchDevice(d.to_string()))?
                .and_then(|v| v.first().copied())
                .ok_or_else(|| WorkloadError::NoSuchDevice(d.to_string()))?,
        ),
        None => None,
    };
    let mut per_dev = PerDevice::default();
    driver::drive(
        source,
        Filter::ALL.devices(wanted.map(|w| vec![w])),
        &mut per_dev,
    )?;
    let mut per_dev = per_dev.collects;
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
    let mut collect = per_dev.remove(&dev).unwrap_or_default();
    settle_lost(&mut collect.bios, std::mem::take(&mut collect.lost));
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
    let start = collect.bios.iter().filter_map(|b| b.q).min().unwrap_or(0);
    let kyber = crate::throttle::kyber_waits(&collect.bios, &collect.throttle_events, start);
    let wbt_steps = crate::throttle::wbt_steps(&collect.throttle_events, start);
    // The order `from_bios_and_wakeups` gives its ios (a stable sort: it keeps this one).
    collect.bios.sort_by_key(|b| (b.q.unwrap_or(0), b.c));
    let left_plug: Vec<Option<u64>> = collect.bios.iter().map(|b| b.i.or(b.d)).collect();
    let mut w = from_bios_and_wakeups(info, collect.bios, &collect.wakeups);
    w.throttle.kyber = kyber;
    w.throttle.wbt.max_depth_at_waits = crate::throttle::max_depth_at(
        &wbt_steps,
        w.ios
            .iter()
            .zip(&w.throttle.wbt.waited)
            .filter(|(_, waited)| **waited)
            .map(|(io, _)| io.rec_q.saturating_sub(start)),
    );
    w.throttle.wbt_steps = wbt_steps;
    if collect.unplugs.is_empty() {
        infer_plug_ends(&mut w, &left_plug);
    } else {
        mark_plug_ends(&mut w, &collect.unplugs);
    }
    w.service = service;
    w.max_in_driver = collect.max_in_driver;
    w.kernel_release = meta.kernel_release.clone();
    w.cpu = iosched_core::record::CpuUse::between(source.cpu_samples(), w.start_ns, w.end_ns);
    w.host_profile = source.header().and_then(|h| h.host_profile.clone());
    Ok(w)
}

/// Puts back the bios whose completion the trace lost (an event from interrupt context
/// that never reached the probe) for processes that keep one bio in flight, completed at
/// the latest instant the trace allows: the process's next Q (or the reuse of the bio's
/// id, if earlier). Dropped, such a bio would vanish from the replay, and its process's
/// next Q would seem to follow the completion before it after the whole gap: a think time
/// the process never had. In the recordings these gaps are 1-9 ms (0.2 ms after a seen
/// completion), long enough for BFQ's idle timer (8 ms) to expire in the replay where, in
/// the one case seen, BFQ kept serving the queue and nothing else was dispatched
/// meanwhile: the request was still in flight. A process with several in flight has no
/// such bound (its next Q does not wait for this completion): its lost bios stay out, as
/// before. Their service samples stay out of the device fit (no C, no D2C).
fn settle_lost(bios: &mut Vec<BioLife>, lost: Vec<BioLife>) {
    if lost.is_empty() {
        return;
    }
    // Per process: its Qs in time order, and whether its seen lives ever overlapped.
    let mut lives: FxHashMap<u32, Vec<(u64, u64)>> = FxHashMap::default();
    for b in bios.iter() {
        if let (Some(s), Some(q)) = (b.submitter, b.q) {
            lives.entry(s.pid).or_default().push((q, b.c));
        }
    }
    for b in &lost {
        if let (Some(s), Some(q)) = (b.submitter, b.q) {
            lives.entry(s.pid).or_default().push((q, u64::MAX));
        }
    }
    let mut one_at_a_time: FxHashMap<u32, bool> = FxHashMap::default();
    for (pid, l) in lives.iter_mut() {
        l.sort_unstable();
        let single = l.windows(2).all(|w| w[0].1 == u64::MAX || w[0].1 <= w[1].0);
        one_at_a_time.insert(*pid, single);
    }
    for mut b in lost {
        let (Some(s), Some(q)) = (b.submitter, b.q) else {
            continue;
        };
        if !one_at_a_time[&s.pid] {
            continue;
        }
        let l = &lives[&s.pid];
        let next_q = l.get(l.partition_point(|(t, _)| *t <= q)).map(|(t, _)| *t);
        b.c = next_q
            .map_or(b.c, |n| n.min(b.c))
            .max(b.d.unwrap_or(q))
            .max(q);
        bios.push(b);
    }
}

/// Sets [`Io::plug_end`] from the recorded unplugs of each process: its plug batch ended if
/// the process unplugged after queueing it and before its next bio.
fn mark_plug_ends(w: &mut Workload, unplugs: &FxHashMap<u32, Vec<u64>>) {
    let pids: Vec<u32> = w.streams.iter().map(|s| s.pid).collect();
    each_next_bio(w, |io, _, until| {
        let Some(ts) = unplugs.get(&pids[io.stream as usize]) else {
            return false;
        };
        let k = ts.partition_point(|t| *t < io.rec_q);
        ts.get(k).is_some_and(|t| *t <= until)
    });
}

/// Sets [`Io::plug_end`] where the recording has no unplug events (plugs counted in the
/// kernel, the default of `record`; `record --no-plugs`; a blktrace file without P/U): a
/// bio's batch ended if its request left the plug (inserted into the scheduler, or issued
/// directly) before its process queued its next bio. A bio whose request was still plugged
/// when the next one came shares that one's batch. `left_plug[i]`: the I (else D) of
/// `w.ios[i]`'s request.
fn infer_plug_ends(w: &mut Workload, left_plug: &[Option<u64>]) {
    // Strictly before: a plug flushed by the next bio's own arrival (its batch's end)
    // releases this one's request after that Q, or at its instant in the simulator's trace.
    each_next_bio(w, |_, i, until| left_plug[i].is_some_and(|t| t < until));
}

/// Sets each bio's `plug_end` to `ended(bio, index, until)`, `until` being its process's next
/// Q (`u64::MAX` for its last bio).
fn each_next_bio(w: &mut Workload, mut ended: impl FnMut(&Io, usize, u64) -> bool) {
    let mut last: Vec<Option<usize>> = vec![None; w.streams.len()];
    for i in 0..w.ios.len() {
        let s = w.ios[i].stream as usize;
        if let Some(prev) = last[s] {
            let until = w.ios[i].rec_q;
            w.ios[prev].plug_end = ended(&w.ios[prev], prev, until);
        }
        last[s] = Some(i);
    }
    for prev in last.into_iter().flatten() {
        w.ios[prev].plug_end = ended(&w.ios[prev], prev, u64::MAX);
    }
}

fn name_of(devices: &[DeviceInfo], dev: Dev) -> String {
    devices
        .iter()
        .find(|d| d.dev == dev)
        .map_or_else(|| dev.to_string(), |d| d.name.clone())
}
