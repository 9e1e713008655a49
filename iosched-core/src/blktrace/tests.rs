//! Byte-level fixtures built by hand from the format spec (docs/BLKTRACE.md, the kernel's
//! blktrace_api.h), damaged input, and the round trip recording -> blktrace -> events.

use std::{
    collections::{HashMap, VecDeque},
    io::Read,
    path::{Path, PathBuf},
};

use proptest::prelude::*;

use super::{BlktraceSource, BlktraceWriter, map::blktrace_view};
use crate::{
    event::{Comm, Dev, Event, EventKind, Note, Op, ReqFlags},
    record::{ClockBase, DeviceInfo, test_support::event_at},
    source::{Identity, TraceFormat, TraceSource},
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Order {
    Le,
    Be,
}

/// One field, in the file's byte order.
fn put(out: &mut Vec<u8>, order: Order, v: u64, size: usize) {
    let bytes = v.to_be_bytes();
    let field = &bytes[8 - size..];
    match order {
        Order::Be => out.extend_from_slice(field),
        Order::Le => out.extend(field.iter().rev()),
    }
}

/// A record as the spec's table lays it out. Version 7: magic, sequence, time, sector, bytes,
/// action(32), pid, device, cpu, error, pdu_len. Version 8: pid before a 64-bit action, then
/// device, cpu, error, pdu_len and 12 bytes of padding.
struct Raw {
    seq: u32,
    time: u64,
    sector: u64,
    bytes: u32,
    action: u64,
    pid: u32,
    dev: u32,
    cpu: u32,
    error: u16,
    pdu: Vec<u8>,
}

const LOOP0: u32 = 7 << 20;

fn raw(seq: u32, time: u64, action: u64, sector: u64, sectors: u32, pid: u32) -> Raw {
    Raw {
        seq,
        time,
        sector,
        bytes: sectors * 512,
        action,
        pid,
        dev: LOOP0,
        cpu: 0,
        error: 0,
        pdu: Vec::new(),
    }
}

impl Raw {
    fn pdu(mut self, pdu: &[u8]) -> Self {
        self.pdu = pdu.to_vec();
        self
    }

    fn bytes(&self, order: Order, version: u8) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, order, 0x6561_7400 | u64::from(version), 4);
        put(&mut out, order, u64::from(self.seq), 4);
        put(&mut out, order, self.time, 8);
        put(&mut out, order, self.sector, 8);
        put(&mut out, order, u64::from(self.bytes), 4);
        if version == 7 {
            put(&mut out, order, self.action, 4);
            put(&mut out, order, u64::from(self.pid), 4);
        } else {
            put(&mut out, order, u64::from(self.pid), 4);
            put(&mut out, order, self.action, 8);
        }
        put(&mut out, order, u64::from(self.dev), 4);
        put(&mut out, order, u64::from(self.cpu), 4);
        put(&mut out, order, u64::from(self.error), 2);
        put(&mut out, order, self.pdu.len() as u64, 2);
        if version == 8 {
            out.extend_from_slice(&[0; 12]);
        }
        out.extend_from_slice(&self.pdu);
        out
    }
}

// Full action values, as the kernel's BLK_TA_* / BLK_TN_* constants.
const QUEUE: u64 = 0x0010_0000;
const READ: u64 = 1 << 16;
const WRITE: u64 = 1 << 17;
const SYNC: u64 = 1 << 19;
const FS: u64 = 1 << 24;
const NOTIFY: u64 = 1 << 26;

/// A small trace with every action and note kind: (records, expected (kind, sector, action
/// letter)).
fn every_action(order: Order) -> Vec<Raw> {
    let ws = WRITE | SYNC;
    let be64 = |v: u64| v.to_be_bytes().to_vec();
    let word = |v: u32| match order {
        Order::Le => v.to_le_bytes(),
        Order::Be => v.to_be_bytes(),
    };
    let mut ts_pdu = word(1_764_504_000).to_vec();
    ts_pdu.extend_from_slice(&word(250));
    let mut remap = (253u32 << 20 | 1).to_be_bytes().to_vec();
    remap.extend_from_slice(&LOOP0.to_be_bytes());
    remap.extend_from_slice(&5000u64.to_be_bytes());
    let mut c_err = raw(12, 1_251_400, 0x0080_0008 | ws | FS, 2040, 24, 0);
    c_err.error = (-5i16) as u16;
    vec![
        raw(0, 1_000_000, NOTIFY, 0, 0, 4242).pdu(b"dd\0\0\0\0\0\0\0\0\0\0\0\0\0\0"),
        raw(0, 1_000_000, NOTIFY | 1, 0, 0, 0).pdu(&ts_pdu),
        raw(1, 1_000_000, QUEUE | 1 | ws, 2048, 8, 4242),
        raw(2, 1_000_500, QUEUE | 4 | ws, 2048, 8, 4242),
        raw(3, 1_000_700, QUEUE | 9, 0, 0, 4242),
        raw(4, 1_000_800, QUEUE | 12 | ws | FS, 2048, 8, 4242),
        raw(5, 1_001_100, QUEUE | 1 | ws, 2056, 8, 4242),
        raw(6, 1_001_200, QUEUE | 2 | ws, 2056, 8, 4242),
        raw(7, 1_001_250, QUEUE | 1 | ws, 2040, 8, 4242),
        raw(8, 1_001_260, QUEUE | 3 | ws, 2040, 8, 4242),
        raw(9, 1_001_300, QUEUE | 10, 0, 0, 4242).pdu(&be64(1)),
        raw(10, 1_001_400, 0x0040_0007 | ws | FS, 2040, 24, 4242),
        raw(11, 1_001_500, 0x0020_0006 | ws | FS, 2040, 24, 0),
        raw(12, 1_001_600, 0x0040_0007 | ws | FS, 2040, 24, 0),
        c_err,
        raw(13, 1_252_400, QUEUE | 1 | READ, 100_000, 256, 4242),
        raw(14, 1_252_500, 13 | READ, 100_000, 0, 4242).pdu(&be64(100_128)),
        raw(15, 1_252_600, QUEUE | 15 | READ, 100_000, 128, 4242).pdu(&remap),
        raw(16, 1_252_650, QUEUE | 5 | READ, 100_000, 128, 4242),
        raw(17, 1_252_660, 14 | READ, 100_000, 128, 4242),
        raw(18, 1_252_700, QUEUE | 11, 0, 0, 4242).pdu(&be64(4)),
        raw(19, 1_252_800, QUEUE | 16 | READ, 100_000, 128, 4242),
        raw(20, 1_252_900, (1 << 30) | 17, 0, 0, 0).pdu(b"drv"),
        raw(0, 1_253_000, NOTIFY | 2, 0, 0, 1234).pdu(b"bfq1234S expire (0, slow 0)"),
    ]
}

fn stream(name: &str, bytes: Vec<u8>) -> (String, Box<dyn Read>) {
    (name.to_string(), Box::new(std::io::Cursor::new(bytes)))
}

fn read_all(source: &mut dyn TraceSource) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(ev) = source.next_event() {
        out.push(ev.expect("no read error"));
    }
    out
}

fn open_bytes(streams: Vec<(&str, Vec<u8>)>) -> Result<BlktraceSource, crate::source::InputError> {
    BlktraceSource::from_streams(
        Path::new("fixture"),
        streams.into_iter().map(|(n, b)| stream(n, b)).collect(),
    )
}

fn encode(records: &[Raw], order: Order, version: u8) -> Vec<u8> {
    records
        .iter()
        .flat_map(|r| r.bytes(order, version))
        .collect()
}

#[test]
fn every_action_in_both_byte_orders_and_both_versions() {
    let mut reference: Option<Vec<Event>> = None;
    for order in [Order::Le, Order::Be] {
        for version in [7, 8] {
            let bytes = encode(&every_action(order), order, version);
            let mut src = open_bytes(vec![("loop0.blktrace.0", bytes)]).unwrap();
            assert_eq!(src.meta().format, TraceFormat::Blktrace);
            assert_eq!(src.meta().identity, Identity::PairedBySector);
            assert_eq!(src.meta().devices[0].name, "loop0");
            assert_eq!(src.meta().devices[0].dev, Dev { major: 7, minor: 0 });
            let events = read_all(&mut src);
            let letters: Vec<&str> = events.iter().map(|e| e.kind.action(e.error == 1)).collect();
            assert_eq!(
                letters,
                [
                    "Q", "G", "P", "I", "Q", "M", "Q", "F", "U", "D", "b", "b", "R", "D", "b", "b",
                    "C", "Q", "X", "A", "S", "B", "UT"
                ],
                "{order:?} v{version}"
            );
            // Fields.
            let q = events[0];
            assert_eq!(
                (q.sector, q.bytes, q.pid, q.ts_ns),
                (2048, 4096, 4242, 1_000_000)
            );
            assert_eq!((q.op, q.flags), (Op::Write, ReqFlags(ReqFlags::SYNC)));
            assert_eq!(q.comm, Comm::new("dd"));
            assert_eq!(events[8].aux, 1, "U depth");
            let c = events[16];
            assert_eq!((c.error, c.aux, c.bytes), (-5, 12288, 12288));
            assert_eq!(events[18].aux, 100_128, "X new sector");
            let a = events[19];
            assert_eq!(
                (a.aux, Dev::from_kernel(a.error as u32)),
                (
                    5000,
                    Dev {
                        major: 253,
                        minor: 1
                    }
                )
            );
            assert_eq!(events[22].aux, 4, "UT depth");
            assert_eq!(events[22].error, 0);
            // Pairing: G, I, D, R, D, C of the one request; the merged bios linked at D.
            let g = events[1];
            for i in [3, 9, 12, 13, 16] {
                assert_eq!(events[i].rq, g.rq, "event {i}");
            }
            assert_eq!(g.bio, q.bio);
            assert_eq!(events[9].bio, events[6].bio, "the front-merged bio leads");
            assert_eq!(
                (
                    events[10].bio,
                    events[10].aux,
                    events[11].bio,
                    events[11].aux
                ),
                (q.bio, 1, events[4].bio, 2)
            );
            // Notes.
            assert_eq!(src.notes().len(), 1);
            assert_eq!(src.notes()[0].text, "bfq1234S expire (0, slow 0)");
            assert_eq!(src.notes()[0].pid, 1234);
            assert_eq!(
                src.wall_clock(),
                Some((1_000_000, 1_764_504_000_000_000_250))
            );
            assert_eq!(src.processes()[&4242].comm, Comm::new("dd"));
            assert_eq!(src.skipped().get("driver data"), Some(&1));
            assert!(
                src.warnings().iter().any(|w| w.contains("driver data 1")),
                "{:?}",
                src.warnings()
            );
            match &reference {
                None => reference = Some(events),
                Some(r) => assert_eq!(&events, r, "{order:?} v{version}"),
            }
        }
    }
}

#[test]
fn a_truncated_last_record_keeps_the_complete_ones() {
    let bytes = encode(&every_action(Order::Le), Order::Le, 7);
    let full = read_all(&mut open_bytes(vec![("x", bytes.clone())]).unwrap()).len();
    // Cut inside the last event record (UT): it and everything after it are gone.
    let cut = encode(&every_action(Order::Le)[..20], Order::Le, 7).len() + 10;
    let mut src = open_bytes(vec![("x", bytes[..cut].to_vec())]).unwrap();
    let events = read_all(&mut src);
    assert_eq!(events.len(), full - 1);
    let warnings = src.warnings();
    assert!(
        warnings.iter().any(|w| w.contains("truncated")),
        "{warnings:?}"
    );
    assert!(src.notes().is_empty());
}

#[test]
fn garbage_after_a_valid_prefix_is_skipped_with_a_warning() {
    let records = every_action(Order::Be);
    let mut bytes = encode(&records[..5], Order::Be, 7);
    let at = bytes.len();
    bytes.extend_from_slice(b"this is not a blktrace record at all, sorry");
    bytes.extend(encode(&records[5..], Order::Be, 7));
    let mut src = open_bytes(vec![("x", bytes)]).unwrap();
    let events = read_all(&mut src);
    assert_eq!(events.len(), 3, "Q G P before the garbage");
    let warnings = src.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("no blktrace magic at byte {at}"))),
        "{warnings:?}"
    );
}

#[test]
fn wrong_magic_and_unknown_versions_are_refused() {
    let err = open_bytes(vec![("x", b"\x89IOSCHD\n\x01\x00\x00\x00".to_vec())])
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("no blktrace magic at byte 0"),
        "{err}"
    );
    let bytes = encode(&every_action(Order::Le)[..1], Order::Le, 7);
    let mut v9 = bytes.clone();
    v9[0] = 0x09;
    let err = open_bytes(vec![("x", v9)]).err().unwrap();
    assert!(err.to_string().contains("version 0x09"), "{err}");
    // A record that switches byte order mid-stream is corrupt.
    let mut mixed = bytes;
    mixed.extend(encode(&every_action(Order::Be)[2..3], Order::Be, 7));
    let mut src = open_bytes(vec![("x", mixed)]).unwrap();
    assert!(read_all(&mut src).is_empty());
    assert!(src.warnings().iter().any(|w| w.contains("byte order")));
}

#[test]
fn per_cpu_streams_merge_by_time() {
    let mut cpu0 = Vec::new();
    let mut cpu1 = Vec::new();
    for i in 0..50u64 {
        let mut r = raw(i as u32 + 1, 1000 + i * 10, QUEUE | 1 | READ, i * 8, 8, 1);
        if i % 3 == 0 {
            r.cpu = 1;
            r.time += 5;
            cpu1.extend(r.bytes(Order::Le, 7));
        } else {
            cpu0.extend(r.bytes(Order::Le, 7));
        }
    }
    let mut src = open_bytes(vec![
        ("d.blktrace.0", cpu0),
        ("d.blktrace.1", cpu1),
        ("d.blktrace.2", Vec::new()),
    ])
    .unwrap();
    let events = read_all(&mut src);
    assert_eq!(events.len(), 50);
    assert!(events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    assert!(src.warnings().is_empty(), "{:?}", src.warnings());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random bytes, or a valid trace cut anywhere and with bytes flipped: an error at open
    /// or events and warnings, never a panic.
    #[test]
    fn damaged_input_never_panics(
        noise in proptest::collection::vec(any::<u8>(), 0..400),
        cut in 0usize..2000,
        flips in proptest::collection::vec((0usize..2000, any::<u8>()), 0..6),
        big in any::<bool>(),
        v8 in any::<bool>(),
    ) {
        let order = if big { Order::Be } else { Order::Le };
        let mut bytes = encode(&every_action(order), order, if v8 { 8 } else { 7 });
        bytes.truncate(cut.min(bytes.len()));
        for (at, v) in flips {
            if let Some(b) = bytes.get_mut(at) {
                *b ^= v;
            }
        }
        for input in [bytes, noise] {
            if let Ok(mut src) = open_bytes(vec![("x", input.clone()), ("y", input)]) {
                while let Some(ev) = src.next_event() {
                    prop_assert!(ev.is_ok());
                }
                let _ = src.warnings();
            }
        }
    }
}

/// A scratch directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "iosched-trace-blktrace-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What our recorder would have written for a small workload on sda (8:0): two plugged
/// writes merged into one request, a front merge, a request merge in the scheduler, a
/// requeue, a failed read with a split, a flush, and events blktrace has no action for.
fn recorded() -> Vec<Event> {
    use EventKind::*;
    let dev = Dev { major: 8, minor: 0 };
    let base = |ts: u64, kind: EventKind, cpu: u16, pid: u32, comm: &str| Event {
        ts_ns: 10_000_000_000 + ts,
        kind,
        cpu,
        pid,
        tgid: pid + 1,
        comm: Comm::new(comm),
        cgroup_id: 77,
        dev,
        bytes: 0,
        op: Op::Read,
        ioprio: 4,
        aux: 0,
        ..event_at(0, 0)
    };
    let io = |e: Event, sector: u64, sectors: u32, op: Op, flags: u32, rq: u64, bio: u64| Event {
        sector,
        bytes: sectors << 9,
        op,
        flags: ReqFlags(flags),
        rq,
        bio,
        ..e
    };
    let link = |e: Event, pos: u64| Event { aux: pos, ..e };
    let (r1, r2, r3, r4) = (0xffff_0001u64, 0xffff_0002, 0xffff_0003, 0xffff_0004);
    let (b1, b2, b3, b4, b5, b6) = (0xb001u64, 0xb002, 0xb003, 0xb004, 0xb005, 0xb006);
    // The piece a split cuts off the front of b4, as the kernel traces it: a new bio of the
    // piece's size (b4 goes on at the split's new sector).
    let b7 = 0xb007u64;
    let s = ReqFlags::SYNC | ReqFlags::NOMERGE | ReqFlags::IDLE;
    let w = Op::Write;
    let mut unplug = base(1300, Unplug, 0, 4242, "dd");
    unplug.error = 1;
    unplug.aux = 1;
    let mut c1 = io(
        base(200_000, Complete, 1, 0, "swapper/1"),
        2040,
        24,
        w,
        s,
        r1,
        b3,
    );
    c1.aux = 24 << 9;
    let mut split = io(
        base(300_100, Split, 0, 4242, "dd"),
        100_000,
        128,
        Op::Read,
        0,
        0,
        b7,
    );
    split.aux = 100_128;
    let mut failed = io(
        base(400_000, Complete, 0, 0, "swapper/0"),
        100_000,
        128,
        Op::Read,
        0,
        r2,
        b7,
    );
    failed.error = -5;
    failed.aux = 128 << 9;
    let mut partial = io(
        base(500_000, Complete, 1, 0, "swapper/1"),
        4096,
        16,
        w,
        0,
        r3,
        b5,
    );
    partial.aux = 8 << 9;
    let mut rest = io(
        base(500_100, Complete, 1, 0, "swapper/1"),
        4104,
        8,
        w,
        0,
        r3,
        b6,
    );
    rest.aux = 8 << 9;
    let mut flush_done = io(
        base(600_100, Complete, 0, 0, "swapper/0"),
        0,
        0,
        Op::Flush,
        0,
        r4,
        0,
    );
    flush_done.aux = 0;
    let mut timer_unplug = base(300_500, Unplug, 1, 4242, "dd");
    timer_unplug.aux = 3;
    let mut kyber = base(300_600, KyberThrottled, 1, 0, "kworker/1:1");
    kyber.aux = 1;
    vec![
        io(base(0, Queue, 0, 4242, "dd"), 2048, 8, w, s, 0, b1),
        io(base(500, GetRq, 0, 4242, "dd"), 2048, 8, w, s, 0, b1),
        base(700, Plug, 0, 4242, "dd"),
        io(base(1100, Queue, 0, 4242, "dd"), 2056, 8, w, s, 0, b2),
        io(base(1200, BackMerge, 0, 4242, "dd"), 2056, 8, w, s, 0, b2),
        io(base(1210, Queue, 0, 4242, "dd"), 2040, 8, w, s, 0, b3),
        io(base(1220, FrontMerge, 0, 4242, "dd"), 2040, 8, w, s, 0, b3),
        unplug,
        io(base(1350, Insert, 0, 4242, "dd"), 2040, 24, w, s, r1, b3),
        io(base(1400, Issue, 0, 4242, "dd"), 2040, 24, w, s, r1, b3),
        link(
            io(
                base(1401, BioInRq, 0, 4242, "dd"),
                0,
                0,
                Op::Read,
                0,
                r1,
                b1,
            ),
            1,
        ),
        link(
            io(
                base(1402, BioInRq, 0, 4242, "dd"),
                0,
                0,
                Op::Read,
                0,
                r1,
                b2,
            ),
            2,
        ),
        io(base(1500, IoStart, 0, 4242, "dd"), 2040, 24, w, s, r1, b3),
        io(
            base(100_000, Requeue, 1, 0, "kworker/1:0"),
            2040,
            24,
            w,
            s,
            r1,
            b3,
        ),
        io(
            base(150_000, Issue, 1, 0, "kworker/1:0"),
            2040,
            24,
            w,
            s,
            r1,
            b3,
        ),
        link(
            io(
                base(150_001, BioInRq, 1, 0, "kworker/1:0"),
                0,
                0,
                Op::Read,
                0,
                r1,
                b1,
            ),
            1,
        ),
        link(
            io(
                base(150_002, BioInRq, 1, 0, "kworker/1:0"),
                0,
                0,
                Op::Read,
                0,
                r1,
                b2,
            ),
            2,
        ),
        c1,
        io(
            base(300_000, Queue, 0, 4242, "dd"),
            100_000,
            256,
            Op::Read,
            ReqFlags::RAHEAD,
            0,
            b4,
        ),
        split,
        io(
            base(300_200, GetRq, 0, 4242, "dd"),
            100_000,
            128,
            Op::Read,
            ReqFlags::RAHEAD,
            0,
            b7,
        ),
        io(
            base(300_300, Insert, 0, 4242, "dd"),
            100_000,
            128,
            Op::Read,
            ReqFlags::RAHEAD,
            r2,
            b7,
        ),
        timer_unplug,
        kyber,
        io(
            base(300_700, Issue, 1, 4242, "dd"),
            100_000,
            128,
            Op::Read,
            ReqFlags::RAHEAD,
            r2,
            b7,
        ),
        failed,
        // Two requests merged in the scheduler: r5 (4104 + 8) into r3 (4096 + 8).
        io(base(450_000, Queue, 1, 99, "fio"), 4096, 8, w, 0, 0, b5),
        io(base(450_100, GetRq, 1, 99, "fio"), 4096, 8, w, 0, 0, b5),
        io(base(450_200, Insert, 1, 99, "fio"), 4096, 8, w, 0, r3, b5),
        io(base(450_300, Queue, 1, 99, "fio"), 4104, 8, w, 0, 0, b6),
        io(base(450_400, GetRq, 1, 99, "fio"), 4104, 8, w, 0, 0, b6),
        io(
            base(450_500, Insert, 1, 99, "fio"),
            4104,
            8,
            w,
            0,
            0xffff_0005,
            b6,
        ),
        io(
            base(450_600, RqMerge, 1, 99, "fio"),
            4104,
            8,
            w,
            0,
            0xffff_0005,
            b6,
        ),
        io(base(450_700, Issue, 1, 99, "fio"), 4096, 16, w, 0, r3, b5),
        link(
            io(
                base(450_701, BioInRq, 1, 99, "fio"),
                0,
                0,
                Op::Read,
                0,
                r3,
                b6,
            ),
            1,
        ),
        partial,
        rest,
        io(
            base(600_000, Issue, 0, 77, "kworker/0:1H"),
            0,
            0,
            Op::Flush,
            ReqFlags::PREFLUSH,
            r4,
            0,
        ),
        flush_done,
    ]
}

/// Our events -> blktrace files -> events: equal to what blktrace can hold
/// ([`blktrace_view`]), with identities renamed consistently, the notes kept, and the
/// merged-bio links rebuilt.
#[test]
fn round_trip_through_blktrace_files() {
    let original = recorded();
    let dir = TempDir::new("roundtrip");
    let devices = [DeviceInfo {
        name: "sda".into(),
        dev: Dev { major: 8, minor: 0 },
        ..DeviceInfo::default()
    }];
    let clock = ClockBase {
        monotonic_ns: 10_000_000_000,
        realtime_ns: 1_764_504_000_000_000_000,
    };
    let mut w = BlktraceWriter::create(&dir.0, &devices, Some(clock)).unwrap();
    // Arrival order is not time order across CPUs: the writer sorts within its window.
    let mut arrival = original.clone();
    arrival.swap(12, 13);
    for ev in &arrival {
        w.push(ev).unwrap();
    }
    let note = Note {
        ts_ns: 10_000_300_050,
        dev: Dev { major: 8, minor: 0 },
        cpu: 1,
        pid: 0,
        text: "bfq4242S expire (0, slow 0, num_disp 0, short_ttime 1)".into(),
    };
    w.note(&note).unwrap();
    let summary = w.finish().unwrap();
    let mut names: Vec<String> = summary
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["sda.blktrace.0", "sda.blktrace.1"]);
    // Events on CPU 2 only still give blkparse the files of CPUs 0 and 1 it looks for.
    let only2 = TempDir::new("cpu2");
    let mut w2 = BlktraceWriter::create(&only2.0, &devices, None).unwrap();
    w2.push(&Event {
        cpu: 2,
        ..original[0]
    })
    .unwrap();
    assert_eq!(w2.finish().unwrap().files.len(), 3);
    assert_eq!(summary.skipped.get("bio_in_rq"), Some(&5));
    assert_eq!(summary.skipped.get("io_start"), Some(&1));
    assert_eq!(summary.skipped.get("kyber_throttled"), Some(&1));

    // By prefix, by directory and by one file (which then holds one CPU only).
    let mut src = BlktraceSource::open(&dir.0.join("sda")).unwrap();
    let back = read_all(&mut src);
    // The one requeue of the recording is named, for where btt counts otherwise; no other.
    let warnings = src.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("1 requeues (R)"), "{warnings:?}");
    assert_eq!(src.notes(), [note]);
    assert_eq!(
        src.wall_clock(),
        Some((10_000_000_000, 1_764_504_000_000_000_000))
    );
    let by_dir = read_all(&mut BlktraceSource::open(&dir.0).unwrap());
    assert_eq!(by_dir, back);
    let cpu1 = read_all(&mut BlktraceSource::open(&dir.0.join("sda.blktrace.1")).unwrap());
    assert!(!cpu1.is_empty() && cpu1.iter().all(|e| e.cpu == 1));

    let expected: Vec<Event> = original
        .iter()
        .filter(|e| e.kind != EventKind::BioInRq)
        .filter_map(blktrace_view)
        .collect();
    let got: Vec<Event> = back
        .iter()
        .filter(|e| e.kind != EventKind::BioInRq)
        .copied()
        .collect();
    assert_eq!(got.len(), expected.len());
    let mut rq_map: HashMap<u64, u64> = HashMap::new();
    let mut bio_map: HashMap<u64, u64> = HashMap::new();
    let same = |map: &mut HashMap<u64, u64>, ours: u64, theirs: u64, what: &str, i: usize| {
        if ours == 0 {
            return;
        }
        let mapped = *map.entry(ours).or_insert(theirs);
        assert_eq!(
            mapped, theirs,
            "event {i}: {what} {ours:#x} renamed inconsistently"
        );
    };
    for (i, ((g, e), o)) in got
        .iter()
        .zip(&expected)
        .zip(
            original
                .iter()
                .filter(|e| e.kind != EventKind::BioInRq && blktrace_view(e).is_some()),
        )
        .enumerate()
    {
        assert_eq!(
            Event {
                rq: 0,
                bio: 0,
                ..*g
            },
            *e,
            "event {i}"
        );
        same(&mut rq_map, o.rq, g.rq, "rq", i);
        same(&mut bio_map, o.bio, g.bio, "bio", i);
    }
    // Distinct ids stay distinct.
    let distinct =
        |m: &HashMap<u64, u64>| m.values().collect::<std::collections::HashSet<_>>().len();
    assert_eq!(distinct(&rq_map), rq_map.len());
    assert_eq!(distinct(&bio_map), bio_map.len());
    // The merged-bio links come back (with the issue's time), for both issues of r1 and r3.
    let links = |events: &[Event], rq_of: &dyn Fn(u64) -> u64, bio_of: &dyn Fn(u64) -> u64| {
        let mut v: VecDeque<(u64, u64, u64)> = events
            .iter()
            .filter(|e| e.kind == EventKind::BioInRq)
            .map(|e| (rq_of(e.rq), bio_of(e.bio), e.aux))
            .collect();
        v.make_contiguous().sort_unstable();
        v
    };
    assert_eq!(
        links(&back, &|r| r, &|b| b),
        links(&original, &|r| rq_map[&r], &|b| bio_map[&b])
    );
}

/// blktrace has no action for a scheduler wakeup: the writer leaves them out and counts them
/// by name (which `convert` prints), and writes the block events around them.
#[test]
fn wakeups_are_skipped_and_counted() {
    let original = recorded();
    let dir = TempDir::new("wakeups");
    let devices = [DeviceInfo {
        name: "sda".into(),
        dev: Dev { major: 8, minor: 0 },
        ..DeviceInfo::default()
    }];
    let mut w = BlktraceWriter::create(&dir.0, &devices, None).unwrap();
    let mut wakeup = original[0];
    wakeup.kind = EventKind::Wakeup;
    wakeup.aux = 4242 | (4242 << 32);
    w.push(&original[0]).unwrap();
    w.push(&wakeup).unwrap();
    w.push(&wakeup).unwrap();
    let summary = w.finish().unwrap();
    assert_eq!(summary.skipped.get("wakeup"), Some(&2));
    assert_eq!(summary.events_written, 1);
    assert_eq!(blktrace_view(&wakeup), None);
}
