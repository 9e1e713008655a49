//! Workloads built by hand, for tests, demos and the replay benchmark: the seed-001
//! dependency cycle (dd's O_DSYNC write, jbd2's commit), and a mixed load of many processes.
//!
//! Owns: synthetic workloads and their traces. Must not: read files.

use iosched_core::{
    event::{Comm, Dev, Event, EventKind, Note, Op, ReqFlags},
    record::DeviceInfo,
};

use super::{
    device::{DeviceModel, RotationalModel},
    sched::{self, SchedEnv, SchedKind, SettingError, Settings},
    sim::{self, SimConfig},
    workload::{Io, Stream, StreamKind, Trigger, Workload},
};

/// Think time between a completion and the I/O it releases.
pub const THINK_NS: u64 = 20_000;

/// The 4 KiB of a [`windowed_writer`]'s bios.
pub const WRITE_SECTORS: u32 = 8;
/// fio's reaping and resubmission after a completion: short beside a service.
pub const REAP_NS: u64 = 5_000;

/// `bios` sequential [`WRITE_SECTORS`] sync writes from `first_sector` on, by one process
/// (pid 900, fio with libaio: every bio its own submission, no plug batch) that keeps
/// `window` in flight: the first `window` back to back, each later one [`REAP_NS`] after
/// the completion that freed its slot. Recorded under `scheduler` on a rotational loop0.
pub fn windowed_writer(bios: u32, window: u32, first_sector: u64, scheduler: &str) -> Workload {
    let mut st = stream(900, "fio", 1);
    st.kind = StreamKind::Windowed;
    st.max_in_flight = window;
    let mut w = empty(vec![st]);
    w.device = device("loop0", scheduler, true);
    for k in 0..bios {
        let trigger = window_trigger(k, window);
        let i = push(
            &mut w,
            0,
            first_sector + u64::from(k * WRITE_SECTORS),
            WRITE_SECTORS,
            Op::Write,
            true,
            trigger,
        );
        w.ios[i as usize].plug_end = true;
    }
    w
}

/// What releases bio `k` of a process that keeps `window` in flight (fio's libaio at that
/// iodepth): the first `window` one after another, then each at the completion of the one
/// `window` before it, after the reap delay.
pub fn window_trigger(k: u32, window: u32) -> Trigger {
    match k {
        0 => Trigger::At(0),
        k if k < window => Trigger::AfterQueue {
            io: k - 1,
            delay: 1_000,
        },
        k => Trigger::AfterCompletion {
            io: k - window,
            delay: REAP_NS,
        },
    }
}

/// Bios in flight on average, by Little's law (bios per second x mean Q2C), for a run of
/// bios of `sectors` each.
pub fn mean_in_flight(run: &super::replay::Run, sectors: u32) -> f64 {
    run.summary.mb_per_s * 1e6 / f64::from(sectors << 9) * run.summary.q2c_mean_ms / 1e3
}

/// A disk with a 5 ms seek for any non-contiguous request, and `overhead_ns` plus
/// `ns_per_sector` of transfer for every request.
pub fn seek_disk(overhead_ns: f64, ns_per_sector: f64) -> DeviceModel {
    DeviceModel::Rotational(RotationalModel {
        overhead_ns,
        ns_per_sector,
        positioning_ns: vec![Some(5_000_000.0); 48],
        latency_ns: 0.0,
    })
}

/// A disk where every non-contiguous request costs `svc_ns` and a contiguous one
/// `overhead_ns` (no transfer time): analytic answers are exact on it.
pub fn flat_disk(svc_ns: f64, overhead_ns: f64) -> DeviceModel {
    DeviceModel::Rotational(RotationalModel {
        overhead_ns,
        ns_per_sector: 0.0,
        positioning_ns: vec![Some(svc_ns - overhead_ns); 48],
        latency_ns: 0.0,
    })
}

pub fn stream(pid: u32, comm: &str, cgroup: u64) -> Stream {
    Stream {
        pid,
        tgid: pid,
        comm: Comm::new(comm),
        cgroup_id: cgroup,
        ios: 0,
        kind: StreamKind::ClosedLoop,
        depends_on: Vec::new(),
        think_mean_ns: 0.0,
        think_samples: 0,
        max_in_flight: 1,
        last_io: 0,
        slept_for_request: 0,
        slept_ns: 0,
        span_ns: 0,
        ioprio: 0,
        until_ns: None,
    }
}

/// A scheduler message (BFQ's log line `text`) on [`device`]'s loop0, as `record
/// --sched-log` keeps it.
pub fn sched_note(ts_ns: u64, text: impl Into<String>) -> Note {
    Note {
        ts_ns,
        dev: Dev { major: 7, minor: 0 },
        cpu: 0,
        pid: 0,
        text: text.into(),
    }
}

pub fn device(name: &str, scheduler: &str, rotational: bool) -> DeviceInfo {
    DeviceInfo {
        name: name.into(),
        dev: Dev { major: 7, minor: 0 },
        rotational: Some(rotational),
        scheduler: Some(scheduler.into()),
        request_based: true,
        ..Default::default()
    }
}

pub fn empty(streams: Vec<Stream>) -> Workload {
    Workload {
        device: device("hdd0", "bfq", true),
        kernel_release: Some("6.18.0".into()),
        start_ns: 0,
        end_ns: 0,
        streams,
        ios: Vec::new(),
        service: Vec::new(),
        max_in_driver: 1,
        merges: Default::default(),
        throttle: Default::default(),
        cpu: None,
        host_profile: None,
    }
}

/// Appends a bio to `w`; returns its index.
/// Closed-loop sequential readers, one per stream of `w`: stream `p` reads `ios` requests of
/// `sectors` sectors back to back from sector `p * spacing`, each `think` ns after its
/// previous one completed; the streams start 1 µs apart.
pub fn push_sequential_readers(w: &mut Workload, ios: u64, sectors: u32, spacing: u64, think: u64) {
    for p in 0..w.streams.len() as u32 {
        let mut prev = None;
        for k in 0..ios {
            let t = prev.map_or(Trigger::At(u64::from(p) * 1000), |io| {
                Trigger::AfterCompletion { io, delay: think }
            });
            let sector = u64::from(p) * spacing + k * u64::from(sectors);
            prev = Some(push(w, p, sector, sectors, Op::Read, true, t));
        }
    }
}

pub fn push(
    w: &mut Workload,
    stream: u32,
    sector: u64,
    sectors: u32,
    op: Op,
    sync: bool,
    trigger: Trigger,
) -> u32 {
    let id = w.ios.len() as u32;
    let s = &mut w.streams[stream as usize];
    s.ios += 1;
    s.last_io = id;
    let flags = if op == Op::Write && sync {
        ReqFlags::SYNC
    } else {
        0
    };
    w.ios.push(Io {
        plug_end: false,
        stream,
        sector,
        sectors,
        op,
        flags: ReqFlags(flags),
        sync,
        trigger,
        rec_q: 0,
        rec_submitted: 0,
        rec_c: 0,
    });
    id
}

/// Seed 001: dd writes one sector with O_DSYNC, jbd2 commits (8 sectors, FUA), dd writes the
/// next; each waits for the other's completion. dd in a non-root cgroup (500), jbd2 in the
/// root one (1).
pub fn dsync_journal(n: u32) -> Workload {
    let mut w = empty(vec![stream(100, "dd", 500), stream(200, "jbd2/sda1-8", 1)]);
    let mut prev_jbd2 = None;
    for k in 0..n {
        let t = match prev_jbd2 {
            None => Trigger::At(0),
            Some(j) => Trigger::AfterCompletion {
                io: j,
                delay: THINK_NS,
            },
        };
        let dd = push(&mut w, 0, 1_000_000 + u64::from(k), 1, Op::Write, true, t);
        let j = push(
            &mut w,
            1,
            5_000_000 + 8 * u64::from(k),
            8,
            Op::Write,
            true,
            Trigger::AfterCompletion {
                io: dd,
                delay: THINK_NS,
            },
        );
        prev_jbd2 = Some(j);
    }
    w.streams[0].depends_on = vec![(1, n.saturating_sub(1))];
    w.streams[1].depends_on = vec![(0, n)];
    w
}

/// Many processes: closed-loop sequential and random readers, and an open-loop writer, for
/// speed measurements. About `requests` bios in all.
pub fn mixed(requests: u32, processes: u32) -> Workload {
    let procs = processes.max(2);
    let mut streams: Vec<Stream> = (0..procs)
        .map(|p| stream(1000 + p, &format!("p{p}"), 100 + u64::from(p % 3)))
        .collect();
    streams[0].kind = StreamKind::OpenLoop;
    let mut w = empty(streams);
    let per = requests / procs;
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    // Stream 0: asynchronous writeback every 2 ms, 32 bios per batch.
    for k in 0..per {
        let t = u64::from(k / 32) * 2_000_000 + u64::from(k % 32) * 1_000;
        push(
            &mut w,
            0,
            40_000_000 + u64::from(k) * 8,
            8,
            Op::Write,
            false,
            Trigger::At(t),
        );
    }
    for p in 1..procs {
        let base = u64::from(p) * 10_000_000;
        let mut prev: Option<u32> = None;
        for k in 0..per {
            let sector = if p % 2 == 0 {
                base + u64::from(k) * 8
            } else {
                (next() % (1 << 30)) & !7
            };
            let t = prev.map_or(Trigger::At(u64::from(p) * 1000), |io| {
                Trigger::AfterCompletion {
                    io,
                    delay: THINK_NS,
                }
            });
            prev = Some(push(&mut w, p, sector, 8, Op::Read, true, t));
        }
    }
    // The replay releases bios by trigger; the order of `ios` need only put triggers first.
    w
}

/// A trace of `w` as if recorded under `sched` (settings) on `dev`: the simulator's events.
pub fn trace(
    w: &Workload,
    dev: &DeviceModel,
    kind: SchedKind,
    settings: &Settings,
) -> Result<Vec<Event>, SettingError> {
    trace_with(w, dev, kind, settings, SimConfig::default())
}

/// [`trace`] with the queue's own configuration (depth, nomerges...).
pub fn trace_with(
    w: &Workload,
    dev: &DeviceModel,
    kind: SchedKind,
    settings: &Settings,
    cfg: SimConfig,
) -> Result<Vec<Event>, SettingError> {
    let env = SchedEnv {
        rotational: dev.rotational(),
        kernel: super::replay::kernel_of(w),
        peak_sectors_per_sec: dev.peak_sectors_per_sec(),
        root_cgroups: vec![0, 1],
        stream_ioprio: w.streams.iter().map(|s| s.ioprio).collect(),
        max_budget_start: None,
    };
    let s = sched::build(kind, settings, &env)?;
    Ok(sim::run(w, dev, s, cfg).events)
}

/// 500 closed-loop reads on `none`, as traced, and the same with a wbt timer note 200 ms
/// before the first event and another 300 ms after the last (a recording's notes outside
/// its I/O): the device, the plain events, the noted ones. Reads of 400 µs on a flat disk.
pub fn reads_between_notes() -> (DeviceInfo, Vec<Event>, Vec<Event>) {
    let dev = flat_disk(400_000.0, 100_000.0);
    let mut w = empty(vec![stream(10, "fio", 1)]);
    w.device.rotational = Some(true);
    let mut prev = None;
    for k in 0..500u64 {
        let t = prev.map_or(Trigger::At(0), |io| Trigger::AfterCompletion {
            io,
            delay: THINK_NS,
        });
        prev = Some(push(&mut w, 0, k * 8, 8, Op::Read, true, t));
    }
    let events = trace(&w, &dev, SchedKind::None, &Settings::default()).unwrap();
    let note = |ts: u64| Event {
        ts_ns: ts,
        kind: EventKind::WbtTimer,
        rq: 0,
        bio: 0,
        ..events[0]
    };
    let (first, last) = (events[0].ts_ns, events[events.len() - 1].ts_ns);
    let mut noted = vec![note(first - 200_000_000)];
    noted.extend(events.iter().copied());
    noted.push(note(last + 300_000_000));
    (w.device.clone(), events, noted)
}
