//! One text line per event or note, in blkparse's columns (`process_default` in
//! blkparse_fmt.c) with our additions after them, and the RWBS field blkparse derives.
//!
//! Owns the per-line layout. Must not write anything but the line it is given to fill.

use std::borrow::Cow;

use iosched_core::event::{Dev, Event, EventKind, Note, Op};

/// A message note as blkparse prints it (`m N text`, sequence 0).
pub(super) fn note_line(s: &mut String, note: &Note, rel_ns: u64) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "{:3},{:<3} {:2} {:>8} {:5}.{:09} {:5} {:>2} {:>3} {}",
        note.dev.major,
        note.dev.minor,
        note.cpu,
        0,
        rel_ns / 1_000_000_000,
        rel_ns % 1_000_000_000,
        note.pid,
        "m",
        "N",
        note.text
    );
}

/// Bytes blkparse counts for `ev`: a completion covers the bytes completed (`aux`), which
/// for a partial completion are fewer than the request's.
pub(super) fn traced_bytes(ev: &Event) -> u32 {
    match ev.kind {
        EventKind::Complete if ev.aux != 0 => u32::try_from(ev.aux).unwrap_or(ev.bytes),
        _ => ev.bytes,
    }
}

pub(super) fn rwbs(ev: &Event) -> String {
    Event {
        bytes: traced_bytes(ev),
        ..*ev
    }
    .rwbs()
}

const KYBER_DOMAINS: [&str; 4] = ["read", "write", "discard", "other"];

pub(super) fn kyber_domain(index: u64) -> Cow<'static, str> {
    match usize::try_from(index)
        .ok()
        .and_then(|i| KYBER_DOMAINS.get(i))
    {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(index.to_string()),
    }
}

/// One event as blkparse's `process_default` prints it, plus our columns at the end.
///
/// Deviations from blkparse, where our data is richer: the completion status is the signed
/// errno (blkparse prints it as an unsigned 16-bit number), and the split sector is printed
/// in full (blkparse truncates it to 32 bits).
pub(super) fn text_line(s: &mut String, ev: &Event, seq: u32, rel_ns: u64) {
    use EventKind::*;
    use std::fmt::Write as _;
    let action = ev.kind.action(ev.error == 1);
    let _ = write!(
        s,
        "{:3},{:<3} {:2} {:8} {:5}.{:09} {:5} {:>2} {:>3} ",
        ev.dev.major,
        ev.dev.minor,
        ev.cpu,
        seq,
        rel_ns / 1_000_000_000,
        rel_ns % 1_000_000_000,
        ev.pid,
        action,
        rwbs(ev)
    );
    let comm = ev.comm.as_str();
    let sector = ev.sector;
    let sectors = traced_bytes(ev) >> 9;
    // Passthrough requests (SG_IO and friends): blkparse's PC formats.
    let pc = matches!(ev.op, Op::DrvIn | Op::DrvOut);
    let _ = match ev.kind {
        Queue | Insert | Issue | IoStart | Bounce if pc => write!(s, "{} [{comm}]", ev.bytes),
        Queue | Insert | Issue | IoStart | GetRq | BackMerge | FrontMerge | RqMerge | IoDone
        | SleepRq | Bounce => {
            if sectors != 0 {
                write!(s, "{sector} + {sectors} [{comm}]")
            } else {
                write!(s, "[{comm}]")
            }
        }
        Complete | Requeue | BioComplete if pc => write!(s, "[{}]", ev.error),
        Complete | Requeue | BioComplete => {
            if sectors != 0 {
                write!(s, "{sector} + {sectors} [{}]", ev.error)
            } else {
                write!(s, "{sector} [{}]", ev.error)
            }
        }
        Plug => write!(s, "[{comm}]"),
        Unplug => write!(s, "[{comm}] {}", ev.aux),
        Split => write!(s, "{sector} / {} [{comm}]", ev.aux),
        Remap => {
            let from = Dev::from_kernel(ev.error as u32);
            write!(
                s,
                "{sector} + {sectors} <- ({},{}) {}",
                from.major, from.minor, ev.aux
            )
        }
        BioInRq => write!(s, "{sector} + {sectors} [{comm}] #{}", ev.aux),
        KyberThrottled => write!(s, "[{comm}] domain={}", kyber_domain(ev.aux)),
        KyberAdjust => write!(
            s,
            "[{comm}] domain={} depth={}",
            kyber_domain(ev.aux & 0xffff_ffff),
            ev.aux >> 32
        ),
        // As the kernel's own `wbt_step` and `wbt_timer` lines print them.
        WbtStep => {
            let (background, normal, max) = ev.wbt_limits().unwrap_or_default();
            write!(
                s,
                "[{comm}] step={} window={}us background={background} normal={normal} max={max}",
                ev.aux as u32 as i32,
                ev.sector / 1000,
            )
        }
        WbtTimer => write!(
            s,
            "[{comm}] status={} inflight={} step={}",
            ev.error,
            ev.aux & 0xffff_ffff,
            (ev.aux >> 32) as u32 as i32
        ),
        Wakeup => write!(
            s,
            "[{comm}] wakee={} tgid={}",
            ev.aux as u32,
            (ev.aux >> 32) as u32
        ),
    };
    if ev.rq != 0 {
        let _ = write!(s, " rq={:#x}", ev.rq);
    }
    if ev.bio != 0 {
        let _ = write!(s, " bio={:#x}", ev.bio);
    }
    s.push('\n');
}
