//! A Perfetto trace written as a stream of TracePackets: track descriptors, then track
//! events (slices, instants, counters, flows) on those tracks.
//!
//! A trace file is a `Trace` message, `repeated TracePacket packet = 1`
//! (protos/perfetto/trace/trace.proto), so appending one length-delimited field 1 per packet
//! is a valid trace at every packet boundary: nothing is held back, memory is one packet.
//!
//! Every packet is on one sequence ([`SEQUENCE_ID`]). The first packet clears the sequence's
//! incremental state and carries the interned names ([`Name`], [`Arg`]); track events are
//! flagged as needing that state, which is what the trace processor checks before it
//! resolves an interned name.
//!
//! Timestamps are the recording's own: CLOCK_MONOTONIC ns (the kernel's
//! `bpf_ktime_get_ns`), or a blktrace file's. They are left on the packet's default clock,
//! which the trace processor takes as the trace's own clock: no clock snapshot is needed
//! and nothing else in the file is on another clock, so times show as recorded.
//!
//! The trace processor sorts all events of a file by timestamp, ties kept in file order
//! (src/trace_processor/sorter/trace_sorter.h: (ts, allocation order)), and holds them until
//! the end of the file when it has no flush markers, as here. So events may be written out of
//! time order (a request's slice is written when it completes), but events of one track with
//! equal timestamps must be written in the order they nest.
//!
//! Field numbers are from Perfetto's public schema, cited per message below (paths under
//! protos/perfetto/trace/ of github.com/google/perfetto); checked against the descriptors the
//! PyPI `perfetto` package ships (tests/perfetto/decode.py decodes what we write with them).
//!
//! Owns: which Perfetto fields a packet holds. Must not: know what a request is.

use std::io::{self, Write};

use super::wire::{Message, put_varint};

/// trace.proto: `message Trace { repeated TracePacket packet = 1; }`.
const TRACE_PACKET: u32 = 1;

/// trace_packet.proto, message TracePacket.
mod packet {
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACK_EVENT: u32 = 11;
    pub const INTERNED_DATA: u32 = 12;
    pub const SEQUENCE_FLAGS: u32 = 13;
    pub const TRACK_DESCRIPTOR: u32 = 60;
    pub const FIRST_PACKET_ON_SEQUENCE: u32 = 87;
    /// enum SequenceFlags.
    pub const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
    pub const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
}

/// interned_data/interned_data.proto, message InternedData; its EventName
/// (track_event/track_event.proto) and DebugAnnotationName
/// (track_event/debug_annotation.proto) both are `iid = 1, name = 2`.
mod interned {
    pub const EVENT_NAMES: u32 = 2;
    pub const DEBUG_ANNOTATION_NAMES: u32 = 3;
    pub const IID: u32 = 1;
    pub const NAME: u32 = 2;
}

/// track_event/track_descriptor.proto, message TrackDescriptor.
mod track {
    pub const UUID: u32 = 1;
    pub const NAME: u32 = 2;
    pub const PROCESS: u32 = 3;
    pub const PARENT_UUID: u32 = 5;
    pub const COUNTER: u32 = 8;
    pub const CHILD_ORDERING: u32 = 11;
    pub const SIBLING_ORDER_RANK: u32 = 12;
    /// enum ChildTracksOrdering: children in the order of their `sibling_order_rank`.
    pub const EXPLICIT: u64 = 3;
    /// track_event/process_descriptor.proto, message ProcessDescriptor.
    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_NAME: u32 = 6;
    /// track_event/counter_descriptor.proto, message CounterDescriptor.
    pub const COUNTER_UNIT: u32 = 3;
    pub const COUNTER_UNIT_NAME: u32 = 6;
    /// enum CounterDescriptor.Unit.
    pub const UNIT_COUNT: u64 = 2;
}

/// track_event/track_event.proto, message TrackEvent.
mod event {
    pub const DEBUG_ANNOTATIONS: u32 = 4;
    pub const TYPE: u32 = 9;
    pub const NAME_IID: u32 = 10;
    pub const TRACK_UUID: u32 = 11;
    pub const NAME: u32 = 23;
    pub const COUNTER_VALUE: u32 = 30;
    pub const DOUBLE_COUNTER_VALUE: u32 = 44;
    /// `repeated fixed64`.
    pub const FLOW_IDS: u32 = 47;
    pub const TERMINATING_FLOW_IDS: u32 = 48;
    /// enum TrackEvent.Type.
    pub const SLICE_BEGIN: u64 = 1;
    pub const SLICE_END: u64 = 2;
    pub const INSTANT: u64 = 3;
    pub const COUNTER: u64 = 4;
    /// track_event/debug_annotation.proto, message DebugAnnotation.
    pub const ARG_NAME_IID: u32 = 1;
    pub const ARG_UINT: u32 = 3;
    pub const ARG_INT: u32 = 4;
    pub const ARG_STRING: u32 = 6;
}

/// The one sequence every packet is on (any non-zero id; a file written by one writer).
pub const SEQUENCE_ID: u64 = 1;

/// Event names that recur on every request or interval: interned once in the first packet
/// (iid = position + 1), referred to by number after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Name {
    Read,
    Write,
    Flush,
    Discard,
    OtherOp,
    InScheduler,
    InDevice,
    BackMerge,
    FrontMerge,
    RequestMerge,
    Requeue,
    IdleWithPending,
    Wakes,
    WokenBy,
}

impl Name {
    pub const ALL: [Name; 14] = [
        Name::Read,
        Name::Write,
        Name::Flush,
        Name::Discard,
        Name::OtherOp,
        Name::InScheduler,
        Name::InDevice,
        Name::BackMerge,
        Name::FrontMerge,
        Name::RequestMerge,
        Name::Requeue,
        Name::IdleWithPending,
        Name::Wakes,
        Name::WokenBy,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Name::Read => "read",
            Name::Write => "write",
            Name::Flush => "flush",
            Name::Discard => "discard",
            Name::OtherOp => "other",
            Name::InScheduler => "in scheduler",
            Name::InDevice => "in device",
            Name::BackMerge => "back merge",
            Name::FrontMerge => "front merge",
            Name::RequestMerge => "request merge",
            Name::Requeue => "requeue",
            Name::IdleWithPending => "idle with I/O pending",
            Name::Wakes => "wakes",
            Name::WokenBy => "woken by",
        }
    }

    fn iid(self) -> u64 {
        self as u64 + 1
    }
}

/// Debug annotation (argument) names, interned like [`Name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    Device,
    Sector,
    Bytes,
    Requeues,
    Error,
    Bios,
    Requests,
    Pid,
    AfterPid,
    Waiting,
    Waker,
    Wakee,
    QueuedBeforeTrace,
}

impl Arg {
    pub const ALL: [Arg; 13] = [
        Arg::Device,
        Arg::Sector,
        Arg::Bytes,
        Arg::Requeues,
        Arg::Error,
        Arg::Bios,
        Arg::Requests,
        Arg::Pid,
        Arg::AfterPid,
        Arg::Waiting,
        Arg::Waker,
        Arg::Wakee,
        Arg::QueuedBeforeTrace,
    ];

    pub fn text(self) -> &'static str {
        match self {
            Arg::Device => "device",
            Arg::Sector => "sector",
            Arg::Bytes => "bytes",
            Arg::Requeues => "requeues",
            Arg::Error => "error",
            Arg::Bios => "bios",
            Arg::Requests => "requests",
            Arg::Pid => "pid",
            Arg::AfterPid => "after_pid",
            Arg::Waiting => "waiting_pids",
            Arg::Waker => "waker",
            Arg::Wakee => "wakee",
            Arg::QueuedBeforeTrace => "queued_before_trace",
        }
    }

    fn iid(self) -> u64 {
        self as u64 + 1
    }
}

/// An argument's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Uint(u64),
    Int(i64),
    Str(&'a str),
}

/// An event's name: interned, or its own text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label<'a> {
    Known(Name),
    Text(&'a str),
}

/// What a track is.
#[derive(Clone, Copy, Debug)]
pub enum TrackKind<'a> {
    /// A process's own track (its pid and name).
    Process { pid: u32, name: &'a str },
    /// A named track, top-level or a child of `parent`.
    Named { parent: Option<u64>, name: &'a str },
    /// A counter track under `parent`.
    Counter {
        parent: Option<u64>,
        name: &'a str,
        /// `None`: a count.
        unit: Option<&'a str>,
    },
}

/// The stream of packets, written to `out` as they come.
pub struct TraceWriter<W: Write> {
    out: W,
    packet: Message,
    written: u64,
    packets: u64,
    next_uuid: u64,
}

impl<W: Write> TraceWriter<W> {
    /// A trace whose first packet (incremental state cleared, interned names) is written at
    /// once.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w = TraceWriter {
            out,
            packet: Message::new(),
            written: 0,
            packets: 0,
            next_uuid: 1,
        };
        w.packet.clear();
        w.packet
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, SEQUENCE_ID)
            .bool(packet::FIRST_PACKET_ON_SEQUENCE, true)
            .uint(
                packet::SEQUENCE_FLAGS,
                packet::SEQ_INCREMENTAL_STATE_CLEARED,
            )
            .nested(packet::INTERNED_DATA, |d| {
                for n in Name::ALL {
                    d.nested(interned::EVENT_NAMES, |e| {
                        e.uint(interned::IID, n.iid())
                            .string(interned::NAME, n.text());
                    });
                }
                for a in Arg::ALL {
                    d.nested(interned::DEBUG_ANNOTATION_NAMES, |e| {
                        e.uint(interned::IID, a.iid())
                            .string(interned::NAME, a.text());
                    });
                }
            });
        w.flush_packet()?;
        Ok(w)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Describes a new track; returns its uuid (1, 2, 3... in order: deterministic output).
    pub fn track(&mut self, kind: TrackKind<'_>, rank: Option<i64>) -> io::Result<u64> {
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        self.packet.clear();
        self.packet
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, SEQUENCE_ID)
            .nested(packet::TRACK_DESCRIPTOR, |t| {
                t.uint(track::UUID, uuid);
                match kind {
                    TrackKind::Process { pid, name } => {
                        t.nested(track::PROCESS, |p| {
                            p.int(track::PROCESS_PID, i64::from(pid))
                                .string(track::PROCESS_NAME, name);
                        });
                    }
                    TrackKind::Named { parent, name } => {
                        if let Some(p) = parent {
                            t.uint(track::PARENT_UUID, p);
                        }
                        t.string(track::NAME, name);
                    }
                    TrackKind::Counter { parent, name, unit } => {
                        if let Some(p) = parent {
                            t.uint(track::PARENT_UUID, p);
                        }
                        t.string(track::NAME, name).nested(track::COUNTER, |c| {
                            match unit {
                                Some(u) => c.string(track::COUNTER_UNIT_NAME, u),
                                None => c.uint(track::COUNTER_UNIT, track::UNIT_COUNT),
                            };
                        });
                    }
                }
                // Children (lanes, a device's tracks) in the order we number them.
                t.uint(track::CHILD_ORDERING, track::EXPLICIT);
                if let Some(r) = rank {
                    t.int(track::SIBLING_ORDER_RANK, r);
                }
            });
        self.flush_packet()?;
        Ok(uuid)
    }

    pub fn begin(
        &mut self,
        ts: u64,
        track: u64,
        name: Label<'_>,
        args: &[(Arg, Value<'_>)],
    ) -> io::Result<()> {
        self.event(ts, track, event::SLICE_BEGIN, Some(name), args, &[], &[])
    }

    pub fn end(&mut self, ts: u64, track: u64) -> io::Result<()> {
        self.event(ts, track, event::SLICE_END, None, &[], &[], &[])
    }

    /// A zero-length event; `flows_out` start flow arrows at it, `flows_in` end there.
    pub fn instant(
        &mut self,
        ts: u64,
        track: u64,
        name: Label<'_>,
        args: &[(Arg, Value<'_>)],
        flows_out: &[u64],
        flows_in: &[u64],
    ) -> io::Result<()> {
        self.event(
            ts,
            track,
            event::INSTANT,
            Some(name),
            args,
            flows_out,
            flows_in,
        )
    }

    pub fn counter(&mut self, ts: u64, track: u64, value: i64) -> io::Result<()> {
        self.counter_packet(ts, track, |e| {
            e.int(event::COUNTER_VALUE, value);
        })
    }

    pub fn counter_f64(&mut self, ts: u64, track: u64, value: f64) -> io::Result<()> {
        self.counter_packet(ts, track, |e| {
            e.double(event::DOUBLE_COUNTER_VALUE, value);
        })
    }

    fn counter_packet(
        &mut self,
        ts: u64,
        track: u64,
        value: impl FnOnce(&mut Message),
    ) -> io::Result<()> {
        self.packet.clear();
        self.event_header(ts);
        self.packet.nested(packet::TRACK_EVENT, |e| {
            e.uint(event::TYPE, event::COUNTER)
                .uint(event::TRACK_UUID, track);
            value(e);
        });
        self.flush_packet()
    }

    fn event_header(&mut self, ts: u64) {
        self.packet
            .uint(packet::TIMESTAMP, ts)
            .uint(packet::TRUSTED_PACKET_SEQUENCE_ID, SEQUENCE_ID)
            .uint(packet::SEQUENCE_FLAGS, packet::SEQ_NEEDS_INCREMENTAL_STATE);
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        ts: u64,
        track: u64,
        kind: u64,
        name: Option<Label<'_>>,
        args: &[(Arg, Value<'_>)],
        flows_out: &[u64],
        flows_in: &[u64],
    ) -> io::Result<()> {
        self.packet.clear();
        self.event_header(ts);
        self.packet.nested(packet::TRACK_EVENT, |e| {
            e.uint(event::TYPE, kind).uint(event::TRACK_UUID, track);
            match name {
                Some(Label::Known(n)) => {
                    e.uint(event::NAME_IID, n.iid());
                }
                Some(Label::Text(t)) => {
                    e.string(event::NAME, t);
                }
                None => {}
            }
            for (arg, value) in args {
                e.nested(event::DEBUG_ANNOTATIONS, |a| {
                    a.uint(event::ARG_NAME_IID, arg.iid());
                    match value {
                        Value::Uint(v) => a.uint(event::ARG_UINT, *v),
                        Value::Int(v) => a.int(event::ARG_INT, *v),
                        Value::Str(s) => a.string(event::ARG_STRING, s),
                    };
                });
            }
            for f in flows_out {
                e.fixed64(event::FLOW_IDS, *f);
            }
            for f in flows_in {
                e.fixed64(event::TERMINATING_FLOW_IDS, *f);
            }
        });
        self.flush_packet()
    }

    /// Writes the packet as field 1 of the Trace message.
    fn flush_packet(&mut self) -> io::Result<()> {
        let mut key = Vec::with_capacity(12);
        put_varint(&mut key, u64::from(TRACE_PACKET) << 3 | 2);
        put_varint(&mut key, self.packet.len() as u64);
        self.out.write_all(&key)?;
        self.out.write_all(self.packet.bytes())?;
        self.written += (key.len() + self.packet.len()) as u64;
        self.packets += 1;
        Ok(())
    }

    /// Flushes and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> TraceWriter<Vec<u8>> {
        TraceWriter::new(Vec::new()).unwrap()
    }

    #[test]
    fn a_slice_begin_packet_decoded_by_hand() {
        let mut w = writer();
        let first = w.bytes_written() as usize;
        w.begin(
            300,
            2,
            Label::Known(Name::Write),
            &[(Arg::Sector, Value::Uint(8))],
        )
        .unwrap();
        let out = w.finish().unwrap();
        let p = &out[first..];
        #[rustfmt::skip]
        let want = [
            0x0a, 21,             // Trace.packet (1, LEN), 21 bytes
            0x40, 0xac, 0x02,     // timestamp (8) = 300
            0x50, 0x01,           // trusted_packet_sequence_id (10) = 1
            0x68, 0x02,           // sequence_flags (13) = SEQ_NEEDS_INCREMENTAL_STATE
            0x5a, 12,             // track_event (11, LEN), 12 bytes
            0x48, 0x01,           //   type (9) = TYPE_SLICE_BEGIN
            0x58, 0x02,           //   track_uuid (11) = 2
            0x50, 0x02,           //   name_iid (10) = 2 ("write")
            0x22, 0x04,           //   debug_annotations (4, LEN), 4 bytes
            0x08, 0x02,           //     name_iid (1) = 2 ("sector")
            0x18, 0x08,           //     uint_value (3) = 8
        ];
        assert_eq!(p, want);
    }

    #[test]
    fn the_first_packet_clears_state_and_interns_every_name() {
        let w = writer();
        let out = w.finish().unwrap();
        // Trace.packet, its length, then the sequence id, first_packet_on_sequence (87:
        // b8 05) and sequence_flags = SEQ_INCREMENTAL_STATE_CLEARED.
        assert_eq!(out[0], 0x0a);
        let body_at = if out[1] & 0x80 != 0 { 3 } else { 2 };
        assert_eq!(
            &out[body_at..body_at + 7],
            [0x50, 0x01, 0xb8, 0x05, 0x01, 0x68, 0x01]
        );
        let text = String::from_utf8_lossy(&out);
        for n in Name::ALL {
            assert!(text.contains(n.text()), "{n:?}");
        }
        for a in Arg::ALL {
            assert!(text.contains(a.text()), "{a:?}");
        }
        // Name::ALL is in declaration order (the iid is the position + 1).
        for (i, n) in Name::ALL.iter().enumerate() {
            assert_eq!(n.iid(), i as u64 + 1);
        }
        for (i, a) in Arg::ALL.iter().enumerate() {
            assert_eq!(a.iid(), i as u64 + 1);
        }
    }
}
