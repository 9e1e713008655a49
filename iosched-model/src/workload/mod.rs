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
//! Without wakeups, dependencies are inferred from timing only (repeated, within
//! [`DEP_WINDOW_NS`]), which is what a block trace allows. A recording made with
//! `record --wakeups` makes them observed facts: a waiting Q that follows (within the window)
//! its process's wakeup by another process doing I/O on the device depends on that waker's
//! last completion before the wakeup; one without such a wakeup depends on its own.
//!
//! Owns: the workload's types (what a replay is given). Must not: simulate. The parts:
//! `extract.rs` reads a trace and collects one device's lives ([`extract()`]); `triggers.rs`
//! turns completed bios into streams and the trigger of each ([`from_bios`]); `think.rs`
//! says which think time a released Q is replayed with; `merges.rs` what the recording shows
//! of merging.

use serde::Serialize;

use iosched_core::{
    event::{Comm, Op, ReqFlags},
    record::DeviceInfo,
};

mod extract;
mod merges;
mod think;
mod triggers;

pub use extract::{WorkloadError, extract};
pub use merges::MergeEvidence;
pub use think::{
    LONG_SLEEP_NS, THINK_MIN_GAPS, THINK_PERCENTILE, ThinkGap, think_delays, think_floor,
};
pub use triggers::{
    BATCH_NS, DEP_MIN_COUNT, DEP_MIN_SHARE, DEP_WINDOW_NS, PACED_MAX_DRAINS_PER_REFILL, from_bios,
    from_bios_and_wakeups,
};

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
    /// Its Qs that mean is over: those issued with nothing of its own in flight. For a
    /// process with several in flight, only its rare pauses long enough for its I/O to
    /// drain (one on the test bed's BFQ run of seed 002: 3.3 ms in 3 s), not its pace.
    #[serde(default)]
    pub think_samples: u32,
    /// Most bios it had in flight at once.
    pub max_in_flight: u32,
    /// Index of its last bio: after it the process does no more I/O (BFQ does not idle for
    /// a queue whose process is gone).
    pub last_io: u32,
    /// Bios it queued and then slept for a free request (tag): when most did, the process
    /// was held back by the queue, not by its own depth, and `max_in_flight` is only a lower
    /// bound of what it would keep in flight (fio `--iodepth` beyond the device's tags).
    #[serde(default)]
    pub slept_for_request: u32,
    /// Time its bios spent asleep for a request, and the span of its I/O (first Q to last
    /// C), ns.
    #[serde(default)]
    pub slept_ns: u64,
    #[serde(default)]
    pub span_ns: u64,
    /// I/O priority of its first bio (class << 13 | level; 0: none, the kernel's default
    /// best-effort level 4): BFQ's queue weight.
    #[serde(default)]
    pub ioprio: u16,
    /// A time-bounded process (fio `--time_based --runtime`): it issues nothing from this
    /// time on (ns after the workload's start), whatever is left of its bios. Set by
    /// [`super::continuation`] on the streams it continues; `None`: it issues all its bios.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ns: Option<u64>,
}

impl Stream {
    /// Asleep for requests most of the time (a process woken by a batch of completions
    /// submits several bios without sleeping, so its share of bios that slept can be
    /// small): its depth is unknown beyond `max_in_flight`.
    pub fn tag_bound(&self) -> bool {
        self.kind == StreamKind::Windowed && self.asleep_most_of_its_run()
    }

    /// Its bios spent at least half its span asleep for a request.
    fn asleep_most_of_its_run(&self) -> bool {
        2 * self.slept_ns >= self.span_ns && self.span_ns > 0
    }

    /// Most bios it keeps in flight in a replay whose queue lets `requests` requests exist
    /// (`nr_requests`; under `none`, the driver tags), unless the configuration sets
    /// `iodepth`.
    ///
    /// A process held back by the queue ([`Stream::tag_bound`]) had more bios ready than
    /// the recorded queue let through, and the trace cannot say how many: only that it kept
    /// every request busy and one more bio asleep for the next. It is replayed as deep as
    /// the queue it is given: one bio per request (`requests`; under `none` the recorded
    /// maximum, the tags and the one asleep, stays), the least depth with which it would
    /// still fill that queue where nothing merges. Replaying it at its recorded maximum (the
    /// lower bound) instead predicts that under an elevator nothing merges, whatever its
    /// depth: with `D` driver tags and `D + 1` bios, one bio at a time waits in the
    /// scheduler, so seed 002 recorded under `none` (fio iodepth 256, 128 tags) came out at
    /// 1.0 bios per request where mq-deadline and BFQ merge 2 (`blk_mq_submit_bio` ->
    /// `blk_mq_sched_bio_merge`: a bio merges only into a request still in the scheduler,
    /// and requests wait there in numbers only while the driver's tags are all busy).
    /// A process within its depth keeps what it was seen with.
    pub fn replay_window(&self, requests: u32) -> u32 {
        if self.tag_bound() && requests != u32::MAX {
            self.max_in_flight.max(requests)
        } else {
            self.max_in_flight
        }
    }
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
    /// What the trace shows of merging (recordings before format 1.3 do not carry the
    /// queue's `nomerges`).
    pub merges: MergeEvidence,
    /// What the trace shows of wbt and Kyber throttling.
    pub throttle: super::throttle::Throttling,
    /// The machine's CPU use over the workload's span (format 1.5's CPU samples; `None`
    /// in older recordings and other formats).
    pub cpu: Option<iosched_core::record::CpuUse>,
    /// The host's scheduler costs the recorder copied into the header (`calibrate`).
    pub host_profile: Option<iosched_core::record::HostProfile>,
}

/// A recorded scheduler wakeup ([`EventKind::Wakeup`](iosched_core::event::EventKind::Wakeup)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wakeup {
    pub ts: u64,
    pub waker_pid: u32,
    pub wakee_pid: u32,
}

/// `op_is_sync()`.
pub fn is_sync(op: Op, flags: ReqFlags) -> bool {
    op == Op::Read || flags.0 & (ReqFlags::SYNC | ReqFlags::FUA | ReqFlags::PREFLUSH) != 0
}

impl Workload {
    /// The same workload with every interval of its own `f` times as long: trigger delays
    /// (think times, a bio's follow-on after its predecessor's Q), open-loop arrival times
    /// and mean think times. What a machine whose CPUs are the bottleneck does to a workload
    /// that needs more of them ([`crate::cpu`]). Time bounds of time-bounded processes (fio
    /// `--runtime`) stay: they are wall-clock.
    pub fn stretched(&self, f: f64) -> Workload {
        let scale = |ns: u64| (ns as f64 * f).round() as u64;
        let mut w = self.clone();
        for io in &mut w.ios {
            io.trigger = match io.trigger {
                Trigger::At(t) => Trigger::At(scale(t)),
                Trigger::AfterQueue { io, delay } => Trigger::AfterQueue {
                    io,
                    delay: scale(delay),
                },
                Trigger::AfterCompletion { io, delay } => Trigger::AfterCompletion {
                    io,
                    delay: scale(delay),
                },
            };
        }
        for s in &mut w.streams {
            s.think_mean_ns *= f;
        }
        w
    }

    /// Kyber's scheduling domains the workload uses (reads, writes, other).
    pub fn kyber_domains(&self) -> u32 {
        let mut seen = [false; 3];
        for io in &self.ios {
            let d = match io.op {
                Op::Read => 0,
                Op::Write => 1,
                _ => 2,
            };
            seen[d] = true;
        }
        seen.iter().filter(|s| **s).count() as u32
    }

    /// Stream display name, as `comm(pid)`.
    pub fn stream_name(&self, s: u32) -> String {
        let st = &self.streams[s as usize];
        format!("{}({})", st.comm, st.pid)
    }
}
