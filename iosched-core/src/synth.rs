//! Synthetic traces of any length for benchmarks: several processes (sequential and random,
//! readers and writers) keeping a queue of requests in flight on one device, with merges and
//! plugs, every event in time order. Deterministic for a given seed; each life is complete
//! (Q -> G -> I -> D -> C, merged bios Q -> M, linked at D), so a report of it has no
//! anomalies and its counts are known: `ios` requests, `bios` bios. For fleet tests, a
//! spec can also lengthen each request's time in the device and hold the device idle now
//! and then while requests wait (idling waste of known length).

use std::collections::VecDeque;

use crate::event::{Comm, Dev, Event, EventKind, Op, ReqFlags};

#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Stop once at least this many events were produced (whole I/Os only).
    pub events: u64,
    pub processes: u32,
    /// Requests in flight on the device.
    pub depth: usize,
    pub seed: u64,
    pub dev: Dev,
    /// Added to each request's time in the device (D to C), ns.
    pub service_ns: u64,
    /// Every this many issues (0: never), the device stays idle `idle_ns` before the issue,
    /// with the queue full: one idle-with-pending interval each.
    pub idle_every: u64,
    pub idle_ns: u64,
    /// Every request carries one bio (no merges): its Q2C is its bio's, as btt counts it.
    pub single_bio: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            events: 1_000_000,
            processes: 8,
            depth: 32,
            seed: 1,
            dev: Dev { major: 7, minor: 0 },
            service_ns: 0,
            idle_every: 0,
            idle_ns: 0,
            single_bio: false,
        }
    }
}

/// What was generated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub events: u64,
    pub requests: u64,
    pub bios: u64,
}

struct InFlight {
    rq: u64,
    bios: [u64; 2],
    nbios: usize,
    sector: u64,
    bytes: u32,
    op: Op,
}

/// A small fast PRNG (xorshift64*): benchmarks need speed and reproducibility, not quality.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Generates events in time order, handing each to `sink`; stops early if `sink` fails.
pub fn generate<E>(
    spec: &Spec,
    mut sink: impl FnMut(&Event) -> Result<(), E>,
) -> Result<Totals, E> {
    let mut rng = Rng(spec.seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut t: u64 = 1_000_000_000;
    let mut totals = Totals::default();
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(spec.depth + 1);
    let mut next_id: u64 = 0x1000;
    let mut next_sector = vec![0u64; spec.processes as usize];
    let procs = spec.processes.max(1);
    let comms: Vec<Comm> = (0..procs)
        .map(|p| Comm::new(&format!("synth{p}")))
        .collect();
    let mut ev = Event {
        dev: spec.dev,
        ..Event::blank()
    };
    let mut emitted = 0u64;
    let mut emit = |ev: &mut Event, kind: EventKind, t: &mut u64, rng: &mut Rng| {
        *t += 200 + (rng.next() % 2_000);
        ev.ts_ns = *t;
        ev.kind = kind;
        ev.cpu = (rng.next() & 1) as u16;
        emitted += 1;
        sink(ev).map(|()| emitted)
    };
    let mut events = 0;
    let mut issues = 0u64;
    while events < spec.events {
        // Queue one request's bios.
        let p = (rng.next() % u64::from(procs)) as usize;
        let pid = 1000 + p as u32;
        let write = p % 2 == 1;
        let sequential = p % 4 < 2;
        let nbios = if !spec.single_bio && sequential && rng.next().is_multiple_of(4) {
            2
        } else {
            1
        };
        let bio_bytes: u32 = 4096;
        let sector = if sequential {
            next_sector[p]
        } else {
            (rng.next() % (1 << 28)) & !7
        };
        next_sector[p] = sector + u64::from(nbios as u32 * bio_bytes / 512);
        let op = if write { Op::Write } else { Op::Read };
        let rq = next_id;
        let bios = [next_id + 1, next_id + 2];
        next_id += 3;
        ev.pid = pid;
        ev.tgid = pid;
        ev.comm = comms[p];
        ev.cgroup_id = 100 + u64::from(pid % 3);
        ev.op = op;
        ev.flags = ReqFlags(if write { ReqFlags::SYNC } else { 0 });
        ev.rq = 0;
        ev.aux = 0;
        ev.error = 0;
        for (n, bio) in bios.iter().take(nbios).enumerate() {
            ev.bio = *bio;
            ev.sector = sector + (n as u64) * 8;
            ev.bytes = bio_bytes;
            events = emit(&mut ev, EventKind::Queue, &mut t, &mut rng)?;
            totals.bios += 1;
            if n == 0 {
                emit(&mut ev, EventKind::GetRq, &mut t, &mut rng)?;
                ev.rq = rq;
                ev.sector = sector;
                emit(&mut ev, EventKind::Insert, &mut t, &mut rng)?;
                ev.rq = 0;
            } else {
                emit(&mut ev, EventKind::BackMerge, &mut t, &mut rng)?;
            }
        }
        let bytes = bio_bytes * nbios as u32;
        in_flight.push_back(InFlight {
            rq,
            bios,
            nbios,
            sector,
            bytes,
            op,
        });
        // Keep `depth` in flight: issue and complete the oldest (kworker context).
        while in_flight.len() > spec.depth {
            let r = in_flight.pop_front().expect("longer than depth");
            ev.pid = 0;
            ev.tgid = 0;
            ev.comm = Comm::default();
            ev.cgroup_id = 0;
            ev.rq = r.rq;
            ev.bio = r.bios[0];
            ev.sector = r.sector;
            ev.bytes = r.bytes;
            ev.op = r.op;
            if rng.next().is_multiple_of(8) {
                ev.aux = 0;
                emit(&mut ev, EventKind::Plug, &mut t, &mut rng)?;
                ev.aux = 1;
                ev.error = 1;
                emit(&mut ev, EventKind::Unplug, &mut t, &mut rng)?;
                ev.error = 0;
            }
            ev.aux = 0;
            issues += 1;
            if spec.idle_every > 0 && issues.is_multiple_of(spec.idle_every) {
                t += spec.idle_ns;
            }
            emit(&mut ev, EventKind::Issue, &mut t, &mut rng)?;
            if r.nbios > 1 {
                ev.bio = r.bios[1];
                ev.aux = 1;
                emit(&mut ev, EventKind::BioInRq, &mut t, &mut rng)?;
                ev.bio = r.bios[0];
            }
            ev.aux = u64::from(r.bytes);
            t += spec.service_ns;
            events = emit(&mut ev, EventKind::Complete, &mut t, &mut rng)?;
            ev.aux = 0;
            totals.requests += 1;
        }
    }
    // Drain: complete what is still in flight.
    while let Some(r) = in_flight.pop_front() {
        ev.pid = 0;
        ev.rq = r.rq;
        ev.bio = r.bios[0];
        ev.sector = r.sector;
        ev.bytes = r.bytes;
        ev.op = r.op;
        ev.aux = 0;
        emit(&mut ev, EventKind::Issue, &mut t, &mut rng)?;
        if r.nbios > 1 {
            ev.bio = r.bios[1];
            ev.aux = 1;
            emit(&mut ev, EventKind::BioInRq, &mut t, &mut rng)?;
            ev.bio = r.bios[0];
        }
        ev.aux = u64::from(r.bytes);
        t += spec.service_ns;
        events = emit(&mut ev, EventKind::Complete, &mut t, &mut rng)?;
        totals.requests += 1;
    }
    totals.events = events;
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis, record::DeviceInfo, source::MemorySource};

    #[test]
    fn synthetic_trace_reports_its_own_counts_without_anomalies() {
        let spec = Spec {
            events: 20_000,
            ..Default::default()
        };
        let mut events = Vec::new();
        let totals = generate(&spec, |e| {
            events.push(*e);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(totals.events, events.len() as u64);
        assert!(events.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        let dev = DeviceInfo {
            name: "synth0".into(),
            dev: spec.dev,
            request_based: true,
            ..Default::default()
        };
        let mut src = MemorySource::new(vec![dev], events);
        let r = analysis::analyze(&mut src, &analysis::Options::default()).unwrap();
        assert_eq!(r.trace.anomalies, Default::default());
        let d = &r.devices[0];
        assert_eq!(d.bios_queued, totals.bios);
        assert_eq!(d.requests_dispatched, totals.requests);
        assert_eq!(d.read.requests + d.write.requests, totals.requests);
        assert_eq!(d.queue_depth.driver_max, 1);
        assert!(d.queue_depth.scheduler_max as usize >= spec.depth);
        let bios: u64 = r.processes.iter().map(|p| p.bios_queued).sum();
        assert_eq!(bios, totals.bios);
        assert_eq!(r.processes.len(), spec.processes as usize);
    }
}
