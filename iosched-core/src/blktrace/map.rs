//! Our events <-> blktrace records: which action and category bits an event becomes, what a
//! record says as an event, and ([`blktrace_view`]) exactly what of an event survives the
//! trip, which is the list of losses docs/BLKTRACE.md gives.
//!
//! Owns: the field mapping. Must not: do I/O or assign request identities (`pairing`).

use super::format::{Record, VERSION_7, act, action_category, cat};
use crate::event::{Comm, Dev, Event, EventKind, Op, ReqFlags};

/// The blktrace action an event kind becomes, `None` for kinds blktrace has no action for.
pub fn kind_action(ev: &Event) -> Option<u16> {
    use EventKind::*;
    Some(match ev.kind {
        Queue => act::QUEUE,
        BackMerge | RqMerge => act::BACKMERGE,
        FrontMerge => act::FRONTMERGE,
        GetRq => act::GETRQ,
        SleepRq => act::SLEEPRQ,
        Requeue => act::REQUEUE,
        Issue => act::ISSUE,
        Complete | BioComplete => act::COMPLETE,
        Plug => act::PLUG,
        Unplug if ev.error == 1 => act::UNPLUG_IO,
        Unplug => act::UNPLUG_TIMER,
        Insert => act::INSERT,
        Split => act::SPLIT,
        Bounce => act::BOUNCE,
        Remap => act::REMAP,
        IoStart | IoDone | BioInRq | KyberThrottled | KyberAdjust | WbtStep | WbtTimer | Wakeup => {
            return None;
        }
    })
}

/// Events about a request (the kernel's `blk_add_trace_rq`): these carry FS or PC.
fn is_request_event(kind: EventKind) -> bool {
    use EventKind::*;
    matches!(kind, RqMerge | Insert | Issue | Complete | Requeue)
}

fn is_passthrough(op: Op) -> bool {
    matches!(op, Op::DrvIn | Op::DrvOut)
}

/// The category bits the kernel's `__blk_add_trace` derives from an op and its flags.
fn categories(ev: &Event) -> u64 {
    let mut bits = if ev.op.is_write() {
        cat::WRITE
    } else {
        cat::READ
    };
    let f = ev.flags;
    if f.has(ReqFlags::SYNC) {
        bits |= cat::SYNC;
    }
    if f.has(ReqFlags::RAHEAD) {
        bits |= cat::AHEAD;
    }
    if f.has(ReqFlags::META) {
        bits |= cat::META;
    }
    if f.has(ReqFlags::PREFLUSH) || ev.op == Op::Flush {
        bits |= cat::FLUSH;
    }
    if f.has(ReqFlags::FUA) {
        bits |= cat::FUA;
    }
    if matches!(ev.op, Op::Discard | Op::SecureErase) {
        bits |= cat::DISCARD;
    }
    if is_request_event(ev.kind) {
        bits |= if is_passthrough(ev.op) {
            cat::PC
        } else {
            cat::FS
        };
    }
    bits
}

/// The op and flags category bits stand for (inverse of [`categories`] where it can be).
fn op_and_flags(rec: &Record) -> (Op, ReqFlags) {
    let op = if rec.has(cat::PC) {
        if rec.has(cat::WRITE) {
            Op::DrvOut
        } else {
            Op::DrvIn
        }
    } else if rec.has(cat::DISCARD) {
        Op::Discard
    } else if rec.has(cat::WRITE) {
        Op::Write
    } else if rec.has(cat::FLUSH) {
        Op::Flush
    } else {
        Op::Read
    };
    let mut flags = 0;
    for (category, flag) in [
        (cat::SYNC, ReqFlags::SYNC),
        (cat::AHEAD, ReqFlags::RAHEAD),
        (cat::META, ReqFlags::META),
        (cat::FUA, ReqFlags::FUA),
    ] {
        if rec.has(category) {
            flags |= flag;
        }
    }
    if rec.has(cat::FLUSH) && op != Op::Flush {
        flags |= ReqFlags::PREFLUSH;
    }
    (op, ReqFlags(flags))
}

/// Bytes a record carries: a completion covers the bytes completed.
fn record_bytes(ev: &Event) -> u32 {
    match ev.kind {
        EventKind::Complete if ev.aux != 0 => u32::try_from(ev.aux).unwrap_or(ev.bytes),
        _ => ev.bytes,
    }
}

/// The record an event becomes (sequence 0: the writer numbers records per CPU), or `None`
/// if blktrace has no action for its kind.
pub fn event_record(ev: &Event) -> Option<Record> {
    let action = kind_action(ev)?;
    let mut rec = Record {
        version: VERSION_7,
        sequence: 0,
        time: ev.ts_ns,
        sector: ev.sector,
        bytes: record_bytes(ev),
        action: u64::from(action) | action_category(action) | categories(ev),
        pid: ev.pid,
        device: ev.dev.to_kernel(),
        cpu: u32::from(ev.cpu),
        error: 0,
        pdu: Vec::new(),
    };
    match ev.kind {
        EventKind::Complete | EventKind::BioComplete | EventKind::Requeue => {
            // The kernel stores the (negative) errno into a u16.
            rec.error = ev.error as u16;
        }
        EventKind::Unplug | EventKind::Split => rec.pdu = ev.aux.to_be_bytes().to_vec(),
        EventKind::Remap => {
            rec.pdu.extend_from_slice(&(ev.error as u32).to_be_bytes());
            rec.pdu.extend_from_slice(&rec.device.to_be_bytes());
            rec.pdu.extend_from_slice(&ev.aux.to_be_bytes());
        }
        _ => {}
    }
    Some(rec)
}

/// What a record says as an event: no identities (`pairing` adds them), no comm (the reader
/// adds it from process notes). `None` for notify records and actions we do not model
/// (abort, driver data).
pub fn record_event(rec: &Record) -> Option<Event> {
    if rec.is_notify() {
        return None;
    }
    let (op, flags) = op_and_flags(rec);
    let (cgroup_id, _) = rec.cgroup();
    let mut ev = Event {
        ts_ns: rec.time,
        kind: EventKind::Queue,
        cpu: u16::try_from(rec.cpu).unwrap_or(u16::MAX),
        pid: rec.pid,
        // blktrace has no thread-group id: the pid is the best guess (right for
        // single-threaded tasks).
        tgid: rec.pid,
        comm: Comm::default(),
        cgroup_id: cgroup_id.unwrap_or(0),
        dev: Dev::from_kernel(rec.device),
        sector: rec.sector,
        bytes: rec.bytes,
        op,
        flags,
        ioprio: 0,
        rq: 0,
        bio: 0,
        error: 0,
        aux: 0,
    };
    ev.kind = match rec.act() {
        act::QUEUE => EventKind::Queue,
        act::BACKMERGE => EventKind::BackMerge,
        act::FRONTMERGE => EventKind::FrontMerge,
        act::GETRQ => EventKind::GetRq,
        act::SLEEPRQ => EventKind::SleepRq,
        act::REQUEUE => {
            ev.error = i32::from(rec.error as i16);
            EventKind::Requeue
        }
        act::ISSUE => EventKind::Issue,
        act::COMPLETE => {
            ev.error = i32::from(rec.error as i16);
            ev.aux = u64::from(rec.bytes);
            EventKind::Complete
        }
        act::PLUG => EventKind::Plug,
        act::UNPLUG_IO | act::UNPLUG_TIMER => {
            ev.error = i32::from(rec.act() == act::UNPLUG_IO);
            ev.aux = rec.pdu_be64().unwrap_or(0);
            EventKind::Unplug
        }
        act::INSERT => EventKind::Insert,
        act::SPLIT => {
            ev.aux = rec.pdu_be64().unwrap_or(0);
            EventKind::Split
        }
        act::BOUNCE => EventKind::Bounce,
        act::REMAP => {
            if let Some((from, to, sector_from)) = rec.remap() {
                // blkparse shows a remap on the device it went to.
                ev.dev = Dev::from_kernel(to);
                ev.error = from as i32;
                ev.aux = sector_from;
            }
            EventKind::Remap
        }
        _ => return None,
    };
    Some(ev)
}

/// blkparse's name of a record's action, for counts of what was skipped.
pub fn action_name(rec: &Record) -> &'static str {
    if rec.is_notify() {
        return match rec.act() {
            0 => "process note",
            1 => "timestamp note",
            2 => "message note",
            _ => "unknown note",
        };
    }
    match rec.act() {
        act::QUEUE => "Q",
        act::BACKMERGE => "M",
        act::FRONTMERGE => "F",
        act::GETRQ => "G",
        act::SLEEPRQ => "S",
        act::REQUEUE => "R",
        act::ISSUE => "D",
        act::COMPLETE => "C",
        act::PLUG => "P",
        act::UNPLUG_IO => "U",
        act::UNPLUG_TIMER => "UT",
        act::INSERT => "I",
        act::SPLIT => "X",
        act::BOUNCE => "B",
        act::REMAP => "A",
        act::ABORT => "abort",
        act::DRV_DATA => "driver data",
        _ => "unknown action",
    }
}

/// An event as it reads back from blktrace files, identities left aside (they become
/// synthetic ids; `pairing` keeps which events share one). `None` if the event is not
/// written at all. This is the definition of the conversion's losses:
/// - tgid becomes the pid; cgroup id, ioprio are lost;
/// - the op keeps only its direction and discard/flush/passthrough class (write zeroes and
///   zone ops read back as writes, secure erase as discard); of the flags only SYNC, META,
///   FUA, RAHEAD and PREFLUSH (on data ops) survive;
/// - `error` survives only where blktrace has it (C, R, U vs UT, A's source device);
/// - a completion's size is the bytes completed (`aux`);
/// - `aux` survives only where blktrace has a payload (U/UT depth, X, A) or the size (C).
pub fn blktrace_view(ev: &Event) -> Option<Event> {
    let rec = event_record(ev)?;
    let (op, flags) = op_and_flags(&rec);
    let mut out = Event {
        tgid: ev.pid,
        cgroup_id: 0,
        ioprio: 0,
        rq: 0,
        bio: 0,
        op,
        flags,
        error: 0,
        aux: 0,
        ..*ev
    };
    match ev.kind {
        EventKind::Complete => {
            out.bytes = record_bytes(ev);
            out.aux = u64::from(out.bytes);
            out.error = i32::from(ev.error as i16);
        }
        EventKind::BioComplete | EventKind::Requeue => out.error = i32::from(ev.error as i16),
        EventKind::Unplug => {
            out.error = i32::from(ev.error == 1);
            out.aux = ev.aux;
        }
        EventKind::Split => out.aux = ev.aux,
        EventKind::Remap => {
            out.error = ev.error;
            out.aux = ev.aux;
        }
        _ => {}
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_support::event_at;

    #[test]
    fn categories_follow_the_kernel() {
        let mut ev = Event {
            kind: EventKind::Issue,
            flags: ReqFlags(ReqFlags::SYNC | ReqFlags::FUA | ReqFlags::PREFLUSH),
            ..event_at(0, 0)
        };
        let rec = event_record(&ev).unwrap();
        assert_eq!(
            rec.action,
            0x0040_0007 | cat::WRITE | cat::SYNC | cat::FUA | cat::FLUSH | cat::FS
        );
        // A flush request: READ and FLUSH, as op_is_write(REQ_OP_FLUSH) is false.
        ev.op = Op::Flush;
        ev.flags = ReqFlags(ReqFlags::PREFLUSH);
        let rec = event_record(&ev).unwrap();
        assert_eq!(rec.action, 0x0040_0007 | cat::READ | cat::FLUSH | cat::FS);
        assert_eq!(op_and_flags(&rec), (Op::Flush, ReqFlags(0)));
        // Bio events carry no FS bit (blk_add_trace_bio).
        ev.kind = EventKind::Queue;
        ev.op = Op::Discard;
        ev.flags = ReqFlags(0);
        let rec = event_record(&ev).unwrap();
        assert_eq!(rec.action, 0x0010_0001 | cat::WRITE | cat::DISCARD);
        assert_eq!(op_and_flags(&rec).0, Op::Discard);
        ev.kind = EventKind::Complete;
        ev.op = Op::DrvIn;
        assert_eq!(op_and_flags(&event_record(&ev).unwrap()).0, Op::DrvIn);
        ev.kind = EventKind::KyberAdjust;
        assert!(event_record(&ev).is_none());
    }

    #[test]
    fn payloads_are_big_endian() {
        let ev = Event {
            kind: EventKind::Unplug,
            aux: 3,
            error: 1,
            ..event_at(0, 0)
        };
        let rec = event_record(&ev).unwrap();
        assert_eq!(rec.act(), act::UNPLUG_IO);
        assert_eq!(rec.pdu, [0, 0, 0, 0, 0, 0, 0, 3]);
        let back = record_event(&rec).unwrap();
        assert_eq!((back.kind, back.aux, back.error), (EventKind::Unplug, 3, 1));
        let ev = Event {
            kind: EventKind::Remap,
            error: (253 << 20) | 1,
            aux: 5000,
            sector: 100_000,
            ..event_at(0, 0)
        };
        let rec = event_record(&ev).unwrap();
        assert_eq!(
            rec.remap(),
            Some(((253 << 20) | 1, (8 << 20), 5000)),
            "{:?}",
            rec.pdu
        );
        // The comm comes from process notes, not from the record.
        let view = blktrace_view(&ev).map(|e| Event {
            comm: Comm::default(),
            ..e
        });
        assert_eq!(record_event(&rec), view);
    }
}
