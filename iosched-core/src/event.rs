//! The decoded event model every other module works with: what one block-layer event says,
//! with kernel-independent encodings (our own op codes and flag bits, major:minor devices).
//! The kernel's raw record ([`iosched_trace_common::RawEvent`]) is turned into this by the
//! collector; recordings and blktrace files are read into it. No I/O here.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What happened. Codes equal `iosched_trace_common::kind` and are stored as such in files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u16)]
pub enum EventKind {
    Queue = 1,
    GetRq = 2,
    BackMerge = 3,
    FrontMerge = 4,
    RqMerge = 5,
    Insert = 6,
    Issue = 7,
    Complete = 8,
    Requeue = 9,
    Plug = 10,
    Unplug = 11,
    Split = 12,
    BioComplete = 13,
    IoStart = 14,
    IoDone = 15,
    BioInRq = 16,
    KyberThrottled = 17,
    KyberAdjust = 18,
    WbtStep = 19,
    WbtTimer = 20,
    /// blktrace's A. `dev`/`sector` are the target; `aux` = original sector, `error` = the
    /// original device as a kernel `dev_t` ([`Dev::from_kernel`]).
    Remap = 21,
    /// blktrace's S (waited for a free request).
    SleepRq = 22,
    /// blktrace's B (bio bounced).
    Bounce = 23,
    /// The task of the event (pid/tgid/comm) woke a task that had queued I/O on a traced
    /// device (`record --wakeups`). `aux` = wakee pid | wakee tgid << 32 (see
    /// [`Event::wakee`]); `dev` = the device the wakee last queued a bio on.
    Wakeup = 24,
}

impl EventKind {
    pub const ALL: [EventKind; 24] = [
        Self::Queue,
        Self::GetRq,
        Self::BackMerge,
        Self::FrontMerge,
        Self::RqMerge,
        Self::Insert,
        Self::Issue,
        Self::Complete,
        Self::Requeue,
        Self::Plug,
        Self::Unplug,
        Self::Split,
        Self::BioComplete,
        Self::IoStart,
        Self::IoDone,
        Self::BioInRq,
        Self::KyberThrottled,
        Self::KyberAdjust,
        Self::WbtStep,
        Self::WbtTimer,
        Self::Remap,
        Self::SleepRq,
        Self::Bounce,
        Self::Wakeup,
    ];

    pub fn from_code(code: u16) -> Option<Self> {
        Self::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    pub fn code(self) -> u16 {
        self as u16
    }

    /// blkparse's action letters where blktrace has one; ours otherwise (lower case, so they
    /// cannot be mistaken for blktrace's).
    pub fn action(self, unplug_explicit: bool) -> &'static str {
        match self {
            Self::Queue => "Q",
            Self::GetRq => "G",
            Self::BackMerge | Self::RqMerge => "M",
            Self::FrontMerge => "F",
            Self::Insert => "I",
            Self::Issue => "D",
            Self::Complete | Self::BioComplete => "C",
            Self::Requeue => "R",
            Self::Plug => "P",
            Self::Unplug if unplug_explicit => "U",
            Self::Unplug => "UT",
            Self::Split => "X",
            Self::IoStart => "s",
            Self::IoDone => "d",
            Self::BioInRq => "b",
            Self::KyberThrottled => "kt",
            Self::KyberAdjust => "ka",
            Self::WbtStep => "ws",
            Self::WbtTimer => "wt",
            Self::Remap => "A",
            Self::SleepRq => "S",
            Self::Bounce => "B",
            Self::Wakeup => "wk",
        }
    }

    /// Snake-case name, for JSON and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::GetRq => "getrq",
            Self::BackMerge => "backmerge",
            Self::FrontMerge => "frontmerge",
            Self::RqMerge => "rq_merge",
            Self::Insert => "insert",
            Self::Issue => "issue",
            Self::Complete => "complete",
            Self::Requeue => "requeue",
            Self::Plug => "plug",
            Self::Unplug => "unplug",
            Self::Split => "split",
            Self::BioComplete => "bio_complete",
            Self::IoStart => "io_start",
            Self::IoDone => "io_done",
            Self::BioInRq => "bio_in_rq",
            Self::KyberThrottled => "kyber_throttled",
            Self::KyberAdjust => "kyber_adjust",
            Self::WbtStep => "wbt_step",
            Self::WbtTimer => "wbt_timer",
            Self::Remap => "remap",
            Self::SleepRq => "sleeprq",
            Self::Bounce => "bounce",
            Self::Wakeup => "wakeup",
        }
    }
}

/// A block device number, split as userspace sees it.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Dev {
    pub major: u32,
    pub minor: u32,
}

impl Dev {
    /// The kernel's internal `dev_t` (`MINORBITS` = 20), as tracepoints and blktrace carry it.
    pub fn from_kernel(dev: u32) -> Self {
        Self {
            major: dev >> 20,
            minor: dev & 0xf_ffff,
        }
    }

    pub fn to_kernel(self) -> u32 {
        (self.major << 20) | (self.minor & 0xf_ffff)
    }
}

impl fmt::Display for Dev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Request operation, our stable codes. The kernel's `REQ_OP_*` values moved (the zone ops
/// were renumbered in 6.x), so the collector maps them by name from BTF; the codes here are
/// ours and never change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Op {
    #[default]
    Read = 0,
    Write = 1,
    Flush = 2,
    Discard = 3,
    SecureErase = 5,
    WriteZeroes = 9,
    ZoneOpen = 10,
    ZoneClose = 11,
    ZoneFinish = 12,
    ZoneAppend = 13,
    ZoneReset = 15,
    ZoneResetAll = 17,
    DrvIn = 34,
    DrvOut = 35,
    /// An op this build does not know.
    Other = 255,
}

impl Op {
    pub fn from_code(code: u8) -> Self {
        match code {
            0 => Self::Read,
            1 => Self::Write,
            2 => Self::Flush,
            3 => Self::Discard,
            5 => Self::SecureErase,
            9 => Self::WriteZeroes,
            10 => Self::ZoneOpen,
            11 => Self::ZoneClose,
            12 => Self::ZoneFinish,
            13 => Self::ZoneAppend,
            15 => Self::ZoneReset,
            17 => Self::ZoneResetAll,
            34 => Self::DrvIn,
            35 => Self::DrvOut,
            _ => Self::Other,
        }
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kernel's `op_is_write()` (data or state towards the device), by op rather than by
    /// code parity, since our codes are not the kernel's.
    pub fn is_write(self) -> bool {
        !matches!(self, Self::Read | Self::Flush | Self::DrvIn | Self::Other)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Discard => "discard",
            Self::SecureErase => "secure_erase",
            Self::WriteZeroes => "write_zeroes",
            Self::ZoneOpen => "zone_open",
            Self::ZoneClose => "zone_close",
            Self::ZoneFinish => "zone_finish",
            Self::ZoneAppend => "zone_append",
            Self::ZoneReset => "zone_reset",
            Self::ZoneResetAll => "zone_reset_all",
            Self::DrvIn => "drv_in",
            Self::DrvOut => "drv_out",
            Self::Other => "other",
        }
    }
}

/// Request flags, our stable bits (the kernel's `__REQ_*` bit numbers move between versions;
/// the collector maps them by name from BTF).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReqFlags(pub u32);

impl ReqFlags {
    pub const SYNC: u32 = 1 << 0;
    pub const META: u32 = 1 << 1;
    pub const PRIO: u32 = 1 << 2;
    pub const NOMERGE: u32 = 1 << 3;
    pub const IDLE: u32 = 1 << 4;
    pub const FUA: u32 = 1 << 5;
    pub const PREFLUSH: u32 = 1 << 6;
    pub const RAHEAD: u32 = 1 << 7;
    pub const BACKGROUND: u32 = 1 << 8;
    pub const NOWAIT: u32 = 1 << 9;
    pub const FAILFAST_DEV: u32 = 1 << 10;
    pub const FAILFAST_TRANSPORT: u32 = 1 << 11;
    pub const FAILFAST_DRIVER: u32 = 1 << 12;
    pub const INTEGRITY: u32 = 1 << 13;
    pub const POLLED: u32 = 1 << 14;
    pub const SWAP: u32 = 1 << 15;
    pub const DRV: u32 = 1 << 16;
    pub const NOUNMAP: u32 = 1 << 17;
    pub const ALLOC_CACHE: u32 = 1 << 18;
    pub const FS_PRIVATE: u32 = 1 << 19;
    pub const ATOMIC: u32 = 1 << 20;

    /// Kernel flag names (`__REQ_<NAME>` without the prefix) and our bit for each.
    pub const BY_KERNEL_NAME: [(&'static str, u32); 21] = [
        ("SYNC", Self::SYNC),
        ("META", Self::META),
        ("PRIO", Self::PRIO),
        ("NOMERGE", Self::NOMERGE),
        ("IDLE", Self::IDLE),
        ("FUA", Self::FUA),
        ("PREFLUSH", Self::PREFLUSH),
        ("RAHEAD", Self::RAHEAD),
        ("BACKGROUND", Self::BACKGROUND),
        ("NOWAIT", Self::NOWAIT),
        ("FAILFAST_DEV", Self::FAILFAST_DEV),
        ("FAILFAST_TRANSPORT", Self::FAILFAST_TRANSPORT),
        ("FAILFAST_DRIVER", Self::FAILFAST_DRIVER),
        ("INTEGRITY", Self::INTEGRITY),
        ("POLLED", Self::POLLED),
        ("SWAP", Self::SWAP),
        ("DRV", Self::DRV),
        ("NOUNMAP", Self::NOUNMAP),
        ("ALLOC_CACHE", Self::ALLOC_CACHE),
        ("FS_PRIVATE", Self::FS_PRIVATE),
        ("ATOMIC", Self::ATOMIC),
    ];

    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

/// A task name as the kernel keeps it: up to 16 bytes, NUL padded.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Comm(pub [u8; 16]);

impl Comm {
    pub fn new(name: &str) -> Self {
        let mut bytes = [0u8; 16];
        let n = name.len().min(15);
        bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        Self(bytes)
    }

    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end])
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_str())
    }
}

/// One block-layer event.
///
/// `pid`/`tgid`/`comm`/`cgroup_id` are those of the task running when the event fired (for D
/// and C often a kworker or an interrupt); the submitter of a request is found through its
/// identity (`rq`, `bio`) back to its Q event, which the timeline does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    pub kind: EventKind,
    pub cpu: u16,
    pub pid: u32,
    pub tgid: u32,
    pub comm: Comm,
    pub cgroup_id: u64,
    pub dev: Dev,
    /// 512-byte sectors.
    pub sector: u64,
    pub bytes: u32,
    pub op: Op,
    pub flags: ReqFlags,
    pub ioprio: u16,
    /// Request identity (kernel `struct request *`), 0 if the event concerns a bio only.
    pub rq: u64,
    /// Bio identity (kernel `struct bio *`), 0 if none.
    pub bio: u64,
    /// Completion status as an errno (0 = success), or kind-specific (1 = explicit unplug).
    pub error: i32,
    /// Kind-specific value: bytes completed (C), depth (U), new sector (X), chain position
    /// (bio_in_rq), wakee pid | wakee tgid << 32 (wakeup).
    pub aux: u64,
}

impl Event {
    /// A Queue of nothing: a read of 0 bytes at sector 0 on device 0:0 by pid 0, every id,
    /// flag and value zero. The start of events built field by field (simulators, synthetic
    /// traces), which set what they mean and keep the rest.
    pub const fn blank() -> Self {
        Self {
            ts_ns: 0,
            kind: EventKind::Queue,
            cpu: 0,
            pid: 0,
            tgid: 0,
            comm: Comm([0; 16]),
            cgroup_id: 0,
            dev: Dev { major: 0, minor: 0 },
            sector: 0,
            bytes: 0,
            op: Op::Read,
            flags: ReqFlags(0),
            ioprio: 0,
            rq: 0,
            bio: 0,
            error: 0,
            aux: 0,
        }
    }

    pub fn sectors(&self) -> u32 {
        self.bytes >> 9
    }

    /// The (pid, tgid) a [`EventKind::Wakeup`] woke; `None` for other kinds.
    pub fn wakee(&self) -> Option<(u32, u32)> {
        (self.kind == EventKind::Wakeup).then_some((self.aux as u32, (self.aux >> 32) as u32))
    }

    /// A [`EventKind::WbtStep`]'s (background, normal, max) limits: the event carries the
    /// max depth, the others follow from it as the kernel's `calc_wb_limits()` computes
    /// them. `None` for other kinds.
    pub fn wbt_limits(&self) -> Option<(u32, u32, u32)> {
        if self.kind != EventKind::WbtStep {
            return None;
        }
        let max = (self.aux >> 32) as u32;
        Some(if max <= 2 {
            (max.min(1), max, max)
        } else {
            (max.div_ceil(4), max.div_ceil(2), max)
        })
    }

    /// blkparse's RWBS string (`fill_rwbs` in blkparse_fmt.c).
    pub fn rwbs(&self) -> String {
        let mut s = String::with_capacity(6);
        if self.flags.has(ReqFlags::PREFLUSH) || self.op == Op::Flush {
            s.push('F');
        }
        if matches!(self.op, Op::Discard | Op::SecureErase) {
            s.push('D');
        } else if self.op.is_write() {
            s.push('W');
        } else if self.bytes != 0 {
            s.push('R');
        } else {
            s.push('N');
        }
        if self.flags.has(ReqFlags::FUA) {
            s.push('F');
        }
        if self.flags.has(ReqFlags::RAHEAD) {
            s.push('A');
        }
        if self.flags.has(ReqFlags::SYNC) {
            s.push('S');
        }
        if self.flags.has(ReqFlags::META) {
            s.push('M');
        }
        s
    }
}

/// A text message written into the trace stream beside the events: blktrace's `m N ...`
/// notes, which is how BFQ (and other schedulers) log their decisions (`bfq1350S expire ...`).
/// Kept apart from [`Event`] because it carries text of any length.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// CLOCK_MONOTONIC nanoseconds (or the trace's own clock for imported traces).
    pub ts_ns: u64,
    pub dev: Dev,
    pub cpu: u16,
    pub pid: u32,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_codes_round_trip_and_match_the_kernel_side() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(EventKind::from_code(0), None);
        assert_eq!(EventKind::from_code(iosched_trace_common::kind::MAX), None);
        assert_eq!(
            EventKind::Queue.code(),
            iosched_trace_common::kind::BIO_QUEUE
        );
        assert_eq!(
            EventKind::WbtTimer.code(),
            iosched_trace_common::kind::WBT_TIMER
        );
        assert_eq!(
            EventKind::BioInRq.code(),
            iosched_trace_common::kind::BIO_IN_RQ
        );
        assert_eq!(EventKind::Wakeup.code(), iosched_trace_common::kind::WAKEUP);
        assert_eq!(
            EventKind::ALL.len(),
            usize::from(iosched_trace_common::kind::MAX) - 1
        );
    }

    #[test]
    fn dev_t_split_matches_minorbits_20() {
        let dev = Dev::from_kernel((7 << 20) | 3);
        assert_eq!(dev, Dev { major: 7, minor: 3 });
        assert_eq!(dev.to_kernel(), (7 << 20) | 3);
    }

    #[test]
    fn rwbs_follows_blkparse() {
        let mut ev = Event {
            ts_ns: 0,
            kind: EventKind::Queue,
            cpu: 0,
            pid: 1,
            tgid: 1,
            comm: Comm::new("dd"),
            cgroup_id: 0,
            dev: Dev::default(),
            sector: 0,
            bytes: 4096,
            op: Op::Write,
            flags: ReqFlags(ReqFlags::SYNC),
            ioprio: 0,
            rq: 0,
            bio: 0,
            error: 0,
            aux: 0,
        };
        assert_eq!(ev.rwbs(), "WS");
        ev.flags = ReqFlags(ReqFlags::PREFLUSH | ReqFlags::FUA | ReqFlags::SYNC);
        assert_eq!(ev.rwbs(), "FWFS");
        ev.op = Op::Read;
        ev.flags = ReqFlags(ReqFlags::RAHEAD | ReqFlags::META);
        assert_eq!(ev.rwbs(), "RAM");
        ev.op = Op::Flush;
        ev.bytes = 0;
        ev.flags = ReqFlags(0);
        assert_eq!(ev.rwbs(), "FN");
        ev.op = Op::Discard;
        assert_eq!(ev.rwbs(), "D");
        ev.op = Op::WriteZeroes;
        assert_eq!(ev.rwbs(), "W");
    }
}
