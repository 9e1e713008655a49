//! Builders shared by the record and dump tests.

use std::collections::BTreeMap;

use super::{ClockBase, DeviceInfo, Footer, Header, ProcessInfo, RecordingWriter, Stats};
use crate::event::{Comm, Dev, Event, EventKind, Op, ReqFlags};

/// A plain event at `ts_ns` carrying `tag` in `aux`.
pub fn event_at(ts_ns: u64, tag: u64) -> Event {
    Event {
        ts_ns,
        kind: EventKind::Queue,
        cpu: 0,
        pid: 100,
        tgid: 100,
        comm: Comm::new("dd"),
        cgroup_id: 0,
        dev: Dev { major: 8, minor: 0 },
        sector: 0,
        bytes: 4096,
        op: Op::Write,
        flags: ReqFlags(0),
        ioprio: 0,
        rq: 0,
        bio: 0,
        error: 0,
        aux: tag,
    }
}

/// `n` events exercising every field with distinct values.
pub fn sample_events(n: usize) -> Vec<Event> {
    let ops = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::DrvIn,
        Op::Other,
    ];
    let comms = ["dd", "kworker/u8:3", "fio", "", "a-very-long-name-cut"];
    (0..n)
        .map(|i| {
            let i64_ = i as u64;
            Event {
                ts_ns: 1_000_000_000 + i64_ * 1_003 + (i64_ % 3) * 7,
                kind: EventKind::ALL[i % EventKind::ALL.len()],
                cpu: (i % 4) as u16,
                pid: 1000 + (i % 7) as u32,
                tgid: 1000 + (i % 5) as u32,
                comm: Comm::new(comms[i % comms.len()]),
                cgroup_id: 0x1234_5678 + i64_,
                dev: Dev {
                    major: 8 + (i % 2) as u32,
                    minor: (i % 3) as u32 * 16,
                },
                sector: 2048 + i64_ * 8,
                bytes: ((i % 9) as u32) * 512,
                op: ops[i % ops.len()],
                flags: ReqFlags((i as u32).wrapping_mul(0x9e37) & 0x1f_ffff),
                ioprio: (i % 8) as u16,
                rq: 0xffff_8880_0000_0000 + i64_ * 0x100,
                bio: 0xffff_8881_0000_0000 + i64_ * 0x40,
                error: -((i % 4) as i32),
                aux: i64_ * 3,
            }
        })
        .collect()
}

pub fn sample_header() -> Header {
    let mut iosched = BTreeMap::new();
    iosched.insert("slice_idle".to_string(), "8".to_string());
    iosched.insert("low_latency".to_string(), "1".to_string());
    let mut h = Header::for_this_host(
        vec![
            DeviceInfo {
                name: "sda".into(),
                dev: Dev { major: 8, minor: 0 },
                model: Some("QEMU HARDDISK".into()),
                rotational: Some(true),
                logical_block_size: Some(512),
                nr_requests: Some(64),
                // Absent, as in recordings before format 1.3 (golden outputs stay).
                nomerges: None,
                max_sectors_kb: None,
                scheduler: Some("bfq".into()),
                iosched,
                request_based: true,
            },
            DeviceInfo {
                name: "zram0".into(),
                dev: Dev {
                    major: 252,
                    minor: 0,
                },
                scheduler: Some("none".into()),
                ..Default::default()
            },
        ],
        vec![
            "iosched-trace".into(),
            "record".into(),
            "-d".into(),
            "sda".into(),
        ],
    );
    // Fixed values so golden output does not depend on the machine.
    h.host = "testhost".into();
    h.kernel_release = "6.18.0-test".into();
    h.boot_id = Some("00000000-1111-2222-3333-444444444444".into());
    h.tool_version = "0.1.0".into();
    h.clock = ClockBase {
        monotonic_ns: 1_000_000_000,
        realtime_ns: 1_764_504_000_000_000_000,
    };
    h
}

pub fn process(pid: u32, comm: &str) -> ProcessInfo {
    ProcessInfo {
        pid,
        tgid: pid - pid % 2,
        comm: Comm::new(comm),
        cgroup_id: u64::from(pid) << 8,
        cgroup_path: (!pid.is_multiple_of(3)).then(|| format!("/system.slice/unit{pid}.service")),
    }
}

pub fn sample_stats(sent: u64) -> Stats {
    Stats {
        lost_per_cpu: vec![0, 3, 0, 1],
        read_errors: 2,
        sent,
        kernel_skipped: Some(5),
        completions: vec![super::CompletionCheck {
            device: "sda".into(),
            dev: Dev { major: 8, minor: 0 },
            start: super::DiskCounters {
                ts_ns: 1_000,
                reads: 10,
                writes: 20,
                discards: 0,
                in_flight: 1,
            },
            end: super::DiskCounters {
                ts_ns: 9_000,
                reads: 15,
                writes: 20,
                discards: 0,
                in_flight: 0,
            },
            traced: super::CompletionCounts {
                reads: 4,
                writes: 0,
                discards: 0,
                writes_through_flush: 0,
            },
        }],
        plug_counts: vec![super::DevicePlugCounts {
            dev: Dev { major: 8, minor: 0 },
            plugs: 7,
            unplugs_explicit: 5,
            unplugs_timer: 2,
            unplugged_requests: 11,
        }],
        plugs_uncounted: 1,
        device_changes: vec![super::DeviceChange {
            ts_ns: 5_250_000_000,
            device: "sda".into(),
            dev: Dev { major: 8, minor: 0 },
            what: super::DeviceChangeKind::Scheduler {
                from: "bfq".into(),
                to: "mq-deadline".into(),
            },
        }],
    }
}

/// A small recording with several chunks of each kind, and where its writer stood after
/// each step: `(bytes written, events written)`.
pub struct Built {
    pub bytes: Vec<u8>,
    pub events: Vec<Event>,
    pub processes: Vec<ProcessInfo>,
    pub footer: Footer,
    pub checkpoints: Vec<(u64, u64)>,
}

pub fn build_recording(n_events: usize, chunk_events: usize) -> Built {
    let events = sample_events(n_events);
    let processes: Vec<ProcessInfo> = vec![
        process(1000, "dd"),
        process(1001, "fio"),
        process(1002, "kworker/0:1"),
    ];
    let mut w = RecordingWriter::new(Vec::new(), &sample_header())
        .unwrap()
        .with_chunk_events(chunk_events);
    let mut checkpoints = vec![(w.bytes_written(), w.events_written())];
    let mut mark = |w: &RecordingWriter<Vec<u8>>| {
        checkpoints.push((w.bytes_written(), w.events_written()));
    };
    w.add_process(&processes[0]).unwrap();
    for (i, ev) in events.iter().enumerate() {
        w.push(ev).unwrap();
        mark(&w);
        if i == n_events / 2 {
            w.add_process(&processes[1]).unwrap();
            w.write_stats(&sample_stats(i as u64)).unwrap();
            mark(&w);
        }
        if i == n_events * 3 / 4 {
            w.add_process(&processes[2]).unwrap();
            w.flush().unwrap();
            mark(&w);
        }
    }
    w.flush().unwrap();
    mark(&w);
    let footer = w.footer(sample_stats(n_events as u64), 5_000_000, "signal");
    let bytes = w.finish(&footer).unwrap();
    checkpoints.push((bytes.len() as u64, n_events as u64));
    Built {
        bytes,
        events,
        processes,
        footer,
        checkpoints,
    }
}

/// Chunk boundaries of a valid recording, walked independently of the reader:
/// `(start, end, type)`.
pub fn chunks_of(bytes: &[u8]) -> Vec<(usize, usize, u32)> {
    let mut at = super::FILE_HEADER_LEN;
    let mut out = Vec::new();
    while at < bytes.len() {
        let typ = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let end = at + super::CHUNK_HEADER_LEN + len;
        out.push((at, end, typ));
        at = end;
    }
    assert_eq!(at, bytes.len());
    out
}
