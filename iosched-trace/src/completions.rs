//! The completion cross-check of a recording: the kernel's own per-device counters of completed
//! requests (`/sys/block/<name>/stat`), read when the recording starts and at each checkpoint,
//! against the completion events traced between the same instants.
//!
//! Why: the ring buffer's loss counter sees only events our programs produced and could not
//! store. On 6.18, a loop device backed by a FUSE file completes about one request in 600
//! without the `block_rq_complete` (and `block_io_done`) tracepoint firing: an independent
//! bpftrace on the classic tracepoints misses exactly the same requests, while the device's
//! stat counts them. Such a gap is invisible from inside the trace except as a request that
//! never completes; this check counts it. Where such gaps come from (the kernel does not call
//! the BPF probes of completions run in the softirq of some tasks; docs/REPORT.md, "Where
//! untraced completions come from"), our programs cannot see: they never run for them.
//!
//! Owns: tallying traced completions per snapshot interval against the counters (read by
//! [`crate::system`]).
//! Must not: decide how the result is shown (record, dump and report do).

use std::{collections::VecDeque, io};

use crate::{devices::Disk, system::read_disk_counters};
use iosched_core::{
    event::{Dev, Event, EventKind, Op},
    record::{CompletionCheck, CompletionCounts, DiskCounters},
};

/// The kernel's stat group of an op (block/blk-mq.c `blk_account_io_done` with
/// `op_stat_group`): `None` for ops it does not count there (flushes go through the flush
/// machinery, passthrough commands are not accounted).
fn stat_group(op: Op) -> Option<Group> {
    match op {
        Op::Discard => Some(Group::Discard),
        Op::Flush | Op::DrvIn | Op::DrvOut | Op::Other => None,
        op if op.code() & 1 == 1 => Some(Group::Write),
        _ => Some(Group::Read),
    }
}

#[derive(Clone, Copy)]
enum Group {
    Read,
    Write,
    Discard,
    WriteThroughFlush,
}

fn add(counts: &mut CompletionCounts, group: Group) {
    match group {
        Group::Read => counts.reads += 1,
        Group::Write => counts.writes += 1,
        Group::Discard => counts.discards += 1,
        Group::WriteThroughFlush => counts.writes_through_flush += 1,
    }
}

fn sum(a: CompletionCounts, b: CompletionCounts) -> CompletionCounts {
    CompletionCounts {
        reads: a.reads + b.reads,
        writes: a.writes + b.writes,
        discards: a.discards + b.discards,
        writes_through_flush: a.writes_through_flush + b.writes_through_flush,
    }
}

/// One device's tally.
struct DeviceTally {
    name: String,
    dev: Dev,
    start: DiskCounters,
    /// Traced completions up to the last settled snapshot, and that snapshot.
    settled: Option<(DiskCounters, CompletionCounts)>,
    settled_counts: CompletionCounts,
    /// Snapshots whose events may still be arriving, oldest first, each with the traced
    /// completions between the previous snapshot and itself.
    pending: VecDeque<(DiskCounters, CompletionCounts)>,
    /// Completions after the newest snapshot.
    after: CompletionCounts,
}

/// Tallies the traced completions of each checked device by snapshot interval.
///
/// Events arrive out of time order (CPUs stage them, the ring interleaves CPUs), so each is
/// placed by its timestamp; a snapshot is settled once its events have surely arrived, which
/// the caller knows (it has drained everything produced before a later instant).
pub struct CompletionTally {
    devices: Vec<DeviceTally>,
}

impl CompletionTally {
    /// Starts the check of the request-based `disks` (bio-based ones have no request
    /// completions); devices whose counters cannot be read are left out (the check is a
    /// cross-check, not a requirement).
    pub fn start(disks: &[Disk]) -> CompletionTally {
        Self::start_with(
            disks
                .iter()
                .filter(|d| d.request_based)
                .map(|d| (d.name.as_str(), d.dev)),
            read_disk_counters,
        )
    }

    fn start_with<'a>(
        disks: impl IntoIterator<Item = (&'a str, Dev)>,
        mut read: impl FnMut(&str) -> io::Result<DiskCounters>,
    ) -> CompletionTally {
        let devices = disks
            .into_iter()
            .filter_map(|(name, dev)| {
                let start = read(name).ok()?;
                Some(DeviceTally {
                    name: name.to_string(),
                    dev,
                    start,
                    settled: None,
                    settled_counts: CompletionCounts::default(),
                    pending: VecDeque::new(),
                    after: CompletionCounts::default(),
                })
            })
            .collect();
        CompletionTally { devices }
    }

    /// Takes one traced event into account.
    pub fn event(&mut self, ev: &Event) {
        // Final completions only: the completion covers what is left of the request. An
        // empty one (0 bytes) ends a request that went through the flush machinery. (Tested
        // first: this runs for every event, and most are not completions.)
        if ev.kind != EventKind::Complete || ev.aux < u64::from(ev.bytes) {
            return;
        }
        let Some(d) = self.devices.iter_mut().find(|d| d.dev == ev.dev) else {
            return;
        };
        let Some(mut group) = stat_group(ev.op) else {
            return;
        };
        if ev.bytes == 0 {
            match group {
                Group::Write => group = Group::WriteThroughFlush,
                Group::Read | Group::Discard | Group::WriteThroughFlush => return,
            }
        }
        if ev.ts_ns <= d.start.ts_ns {
            return;
        }
        if let Some((_, counts)) = d.pending.iter_mut().find(|(s, _)| ev.ts_ns <= s.ts_ns) {
            add(counts, group);
        } else if d.settled.is_none_or(|(s, _)| ev.ts_ns > s.ts_ns) {
            add(&mut d.after, group);
        }
        // Else: older than a settled snapshot, which is impossible unless the caller settled
        // too early; leaving it out keeps settled checks unchanged.
    }

    /// Reads every device's counters now; completions traced so far belong to the interval
    /// before this snapshot (they happened before it).
    pub fn snapshot(&mut self) {
        self.snapshot_with(read_disk_counters)
    }

    fn snapshot_with(&mut self, mut read: impl FnMut(&str) -> io::Result<DiskCounters>) {
        for d in &mut self.devices {
            if let Ok(now) = read(&d.name) {
                let counts = std::mem::take(&mut d.after);
                d.pending.push_back((now, counts));
            }
        }
    }

    /// Settles the snapshots taken at or before `ts_ns`: every event before that instant has
    /// been passed to [`event`](Self::event).
    pub fn settle(&mut self, ts_ns: u64) {
        for d in &mut self.devices {
            while d.pending.front().is_some_and(|(s, _)| s.ts_ns <= ts_ns) {
                let (snap, counts) = d.pending.pop_front().expect("checked");
                d.settled_counts = sum(d.settled_counts, counts);
                d.settled = Some((snap, d.settled_counts));
            }
        }
    }

    /// The checks as of the last settled snapshot of each device.
    pub fn checks(&self) -> Vec<CompletionCheck> {
        self.devices
            .iter()
            .filter_map(|d| {
                let (end, traced) = d.settled?;
                Some(CompletionCheck {
                    device: d.name.clone(),
                    dev: d.dev,
                    start: d.start,
                    end,
                    traced,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: Dev = Dev { major: 7, minor: 0 };

    /// The exporter's programs classify completions for the same check (`completed_group`,
    /// run in the kernel): the two must agree on every operation code and on empty ones.
    #[test]
    fn the_exporter_groups_completions_as_the_recording_does() {
        use iosched_trace_common::exporter::{
            COMPLETED_DISCARD, COMPLETED_READ, COMPLETED_WRITE, COMPLETED_WRITE_THROUGH_FLUSH,
            completed_group,
        };
        for code in 0..=255u8 {
            for bytes in [0u32, 4096] {
                let ours = stat_group(Op::from_code(code)).and_then(|g| match (g, bytes) {
                    (Group::Write, 0) => Some(COMPLETED_WRITE_THROUGH_FLUSH),
                    (_, 0) => None,
                    (Group::Read, _) => Some(COMPLETED_READ),
                    (Group::Write, _) => Some(COMPLETED_WRITE),
                    (Group::Discard, _) => Some(COMPLETED_DISCARD),
                    (Group::WriteThroughFlush, _) => unreachable!("not a stat group"),
                });
                assert_eq!(
                    completed_group(u32::from(code), bytes),
                    ours,
                    "op {code}, {bytes} bytes"
                );
            }
        }
    }

    fn counters(ts_ns: u64, reads: u64, writes: u64) -> DiskCounters {
        DiskCounters {
            ts_ns,
            reads,
            writes,
            discards: 0,
            in_flight: 0,
        }
    }

    fn ev(kind: EventKind, ts_ns: u64, rq: u64, op: Op, bytes: u32, done: u64) -> Event {
        Event {
            ts_ns,
            kind,
            cpu: 0,
            pid: 1,
            tgid: 1,
            comm: Default::default(),
            cgroup_id: 0,
            dev: DEV,
            sector: 0,
            bytes,
            op,
            flags: Default::default(),
            ioprio: 0,
            rq,
            bio: 0,
            error: 0,
            aux: done,
        }
    }

    fn complete(ts_ns: u64, rq: u64, op: Op) -> Event {
        ev(EventKind::Complete, ts_ns, rq, op, 4096, 4096)
    }

    /// A tally whose counter reads return the given snapshots in turn.
    fn tally(
        snaps: &[DiskCounters],
    ) -> (
        CompletionTally,
        impl FnMut(&str) -> io::Result<DiskCounters> + use<>,
    ) {
        let t = CompletionTally::start_with([("loop0", DEV)], |_| Ok(snaps[0]));
        let rest = snaps[1..].to_vec();
        let mut rest = rest.into_iter();
        (t, move |_: &str| Ok(rest.next().unwrap()))
    }

    #[test]
    fn parses_the_stat_line_with_and_without_discard_fields() {
        let new = "  256 0 2048 1400 7 1 64 3 2 1500 1403 4 0 32 1 0 0";
        let c = DiskCounters::parse_stat(new, 5).unwrap();
        assert_eq!((c.reads, c.writes, c.discards, c.in_flight), (256, 7, 4, 2));
        let old = "256 0 2048 1400 7 1 64 3 0 1500 1403";
        assert_eq!(DiskCounters::parse_stat(old, 5).unwrap().discards, 0);
        assert!(DiskCounters::parse_stat("256 0 x", 5).is_none());
        assert!(DiskCounters::parse_stat("1 2 3", 5).is_none());
    }

    #[test]
    fn a_completion_the_kernel_counted_and_nobody_traced_is_untraced() {
        let (mut t, mut read) = tally(&[counters(100, 1000, 50), counters(900, 1003, 51)]);
        t.event(&complete(200, 1, Op::Read));
        t.event(&complete(300, 2, Op::Read));
        t.event(&complete(400, 3, Op::Write));
        t.snapshot_with(&mut read);
        t.settle(900);
        let c = &t.checks()[0];
        assert_eq!(c.kernel().reads, 3);
        assert_eq!(c.traced.reads, 2);
        assert_eq!(c.untraced(), 1);
        assert!(
            c.describe_untraced()
                .unwrap()
                .contains("1 completed request")
        );
    }

    #[test]
    fn events_are_placed_by_timestamp_not_by_arrival() {
        // Two snapshots; a completion from before the first arrives after it was taken.
        let (mut t, mut read) = tally(&[
            counters(100, 0, 0),
            counters(500, 2, 0),
            counters(900, 3, 0),
        ]);
        t.event(&complete(200, 1, Op::Read));
        t.snapshot_with(&mut read);
        t.event(&complete(450, 2, Op::Read)); // late arrival, before the snapshot at 500
        t.event(&complete(600, 3, Op::Read));
        t.snapshot_with(&mut read);
        t.settle(500);
        assert_eq!(t.checks()[0].end.ts_ns, 500);
        assert_eq!(t.checks()[0].untraced(), 0);
        assert_eq!(t.checks()[0].traced.reads, 2);
        t.settle(900);
        assert_eq!(t.checks()[0].traced.reads, 3);
        assert_eq!(t.checks()[0].untraced(), 0);
    }

    #[test]
    fn before_the_start_partial_and_flush_completions_do_not_count() {
        let (mut t, mut read) = tally(&[counters(100, 0, 0), counters(900, 1, 0)]);
        t.event(&complete(50, 1, Op::Read)); // before the first counter read
        t.event(&ev(EventKind::Complete, 200, 2, Op::Read, 8192, 4096)); // partial
        t.event(&ev(EventKind::Complete, 300, 2, Op::Read, 4096, 4096)); // its end
        t.event(&complete(400, 3, Op::Flush));
        t.snapshot_with(&mut read);
        t.settle(u64::MAX);
        let c = &t.checks()[0];
        assert_eq!(c.traced.total(), 1);
        assert_eq!(c.traced.reads, 1);
        assert_eq!(c.untraced(), 0);
    }

    #[test]
    fn writes_through_the_flush_machinery_are_not_compared_but_reads_still_are() {
        let (mut t, mut read) = tally(&[counters(100, 0, 0), counters(900, 2, 3)]);
        t.event(&complete(200, 7, Op::Write)); // data of a preflush write
        t.event(&ev(EventKind::Complete, 250, 7, Op::Write, 0, 0)); // its end
        t.event(&ev(EventKind::Complete, 260, 8, Op::Write, 0, 0)); // an fsync's flush
        t.event(&complete(300, 9, Op::Read));
        t.snapshot_with(&mut read);
        t.settle(u64::MAX);
        let c = &t.checks()[0];
        assert_eq!((c.traced.writes, c.traced.writes_through_flush), (1, 2));
        assert!(!c.writes_compared());
        // 3 writes counted, 1 traced with data: not a finding. 2 reads counted, 1 traced: is.
        assert_eq!(c.untraced(), 1);
        assert!(
            c.describe_untraced()
                .unwrap()
                .contains("writes not compared")
        );
    }

    #[test]
    fn plain_writes_are_compared() {
        let (mut t, mut read) = tally(&[counters(100, 0, 0), counters(900, 0, 3)]);
        t.event(&complete(200, 7, Op::Write));
        t.event(&complete(300, 8, Op::WriteZeroes));
        t.snapshot_with(&mut read);
        t.settle(u64::MAX);
        let c = &t.checks()[0];
        assert!(c.writes_compared());
        assert_eq!(c.untraced(), 1);
    }

    #[test]
    fn unsettled_snapshots_are_not_reported_and_disabled_counters_say_nothing() {
        let (mut t, mut read) = tally(&[counters(100, 0, 0), counters(900, 0, 0)]);
        t.event(&complete(200, 1, Op::Read));
        t.snapshot_with(&mut read);
        assert!(t.checks().is_empty());
        t.settle(899);
        assert!(t.checks().is_empty());
        t.settle(900);
        let c = &t.checks()[0];
        assert!(c.counters_disabled());
        assert_eq!(c.describe_untraced(), None);
    }
}
