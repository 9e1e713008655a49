//! The service time of a flash device: pure arithmetic, no clock, no I/O.
//!
//! The device has `channels` independent channels (dies, planes, queues: whatever lets it
//! work on several requests at once). A request takes the channel that frees first and costs
//!
//! ```text
//! service = latency(op) + len / rate(op)          (read and write each have their own)
//! start   = max(arrival, the earliest free channel's free time)
//! done    = start + service
//! ```
//!
//! Position plays no part: there is no seek, no sequential bonus. With a volatile write
//! cache a write is acknowledged `write_ack_us` after it arrives while its programming still
//! occupies a channel (from `start` to `done`, as without the cache), and a flush completes
//! once every write accepted before it is done. The cache holds `write_cache_kb` of writes
//! not yet done: a write that does not fit is acknowledged once enough earlier ones are
//! done (never later than its own `done`). Without the cache a write is acknowledged when it
//! is done and a flush is free.

use std::{cmp::Reverse, collections::BinaryHeap};

use serde::{Deserialize, Serialize};

use crate::ModelError;

/// Every knob of the flash model. Units are in the names; MB is 10^6 bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlashParams {
    /// Requests served at once.
    pub channels: u32,
    /// Fixed cost of a read (command, flash array read), µs.
    pub read_latency_us: f64,
    /// Fixed cost of a write (command, page program), µs.
    pub write_latency_us: f64,
    /// Transfer rate of one channel for reads, MB/s.
    pub read_mb_s: f64,
    /// Transfer rate of one channel for writes, MB/s.
    pub write_mb_s: f64,
    /// A volatile write cache: writes are acknowledged after `write_ack_us`, flushes wait
    /// for the writes before them.
    pub write_cache: bool,
    /// With `write_cache`: how long a write takes to be acknowledged, µs.
    pub write_ack_us: f64,
    /// With `write_cache`: its size, KiB (writes accepted and not yet done).
    pub write_cache_kb: u64,
}

impl Default for FlashParams {
    /// A slow SSD the emulation can honour on a small host (docs/TESTBED.md: the host's own
    /// round trip is ~0.1 ms and its CPUs serve ~40k requests/s in all): 8 channels, 500 µs
    /// reads, 1000 µs writes, 100/50 MB/s per channel (14.8k random 4 KiB reads/s at most);
    /// no write cache.
    fn default() -> Self {
        Self {
            channels: 8,
            read_latency_us: 500.0,
            write_latency_us: 1000.0,
            read_mb_s: 100.0,
            write_mb_s: 50.0,
            write_cache: false,
            write_ack_us: 50.0,
            write_cache_kb: 4096,
        }
    }
}

impl FlashParams {
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.channels == 0 {
            return Err(ModelError::NotPositive {
                name: "channels",
                value: 0.0,
            });
        }
        for (name, value) in [
            ("read_mb_s", self.read_mb_s),
            ("write_mb_s", self.write_mb_s),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ModelError::NotPositive { name, value });
            }
        }
        for (name, value) in [
            ("read_latency_us", self.read_latency_us),
            ("write_latency_us", self.write_latency_us),
            ("write_ack_us", self.write_ack_us),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ModelError::Negative { name, value });
            }
        }
        Ok(())
    }
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
}

/// When the channels free up, and when the last cached write is done: the device's state.
#[derive(Clone, Debug)]
pub struct Channels {
    /// Per channel, when (ns, any clock) it is free again.
    free_at_ns: Vec<u64>,
    /// When every write accepted so far is done.
    writes_done_ns: u64,
    /// The write cache's contents: (done, bytes) of writes not yet done, earliest first.
    cached: BinaryHeap<Reverse<(u64, u64)>>,
    cached_bytes: u64,
}

/// One request's fate, ns on the caller's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// When its channel starts on it.
    pub start_ns: u64,
    /// When the device is done with it.
    pub done_ns: u64,
    /// When it is acknowledged: `done_ns`, or earlier for a cached write.
    pub ack_ns: u64,
}

/// The flash model, valid parameters only.
#[derive(Clone, Debug)]
pub struct FlashModel {
    params: FlashParams,
}

impl FlashModel {
    pub fn new(params: FlashParams) -> Result<Self, ModelError> {
        params.validate()?;
        Ok(Self { params })
    }

    pub fn params(&self) -> &FlashParams {
        &self.params
    }

    /// An idle device.
    pub fn channels(&self) -> Channels {
        Channels {
            free_at_ns: vec![0; self.params.channels as usize],
            writes_done_ns: 0,
            cached: BinaryHeap::new(),
            cached_bytes: 0,
        }
    }

    /// Service time of one request on its channel, ns.
    pub fn service_ns(&self, op: Op, len: u64) -> u64 {
        let (latency_us, mb_s) = match op {
            Op::Read => (self.params.read_latency_us, self.params.read_mb_s),
            Op::Write => (self.params.write_latency_us, self.params.write_mb_s),
        };
        (latency_us * 1e3 + len as f64 / mb_s * 1e3).round() as u64
    }

    /// Puts a request arriving at `arrival_ns` on the channel that frees first.
    pub fn submit(&self, ch: &mut Channels, arrival_ns: u64, op: Op, len: u64) -> Completion {
        let (i, free) = ch
            .free_at_ns
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, t)| t)
            .expect("at least one channel");
        let start_ns = arrival_ns.max(free);
        let done_ns = start_ns + self.service_ns(op, len);
        ch.free_at_ns[i] = done_ns;
        let ack_ns = if op == Op::Write {
            ch.writes_done_ns = ch.writes_done_ns.max(done_ns);
            if self.params.write_cache {
                let room = self.cache_room(ch, arrival_ns, len);
                ch.cached.push(Reverse((done_ns, len)));
                ch.cached_bytes += len;
                // Never later than done: a write that finishes early is acknowledged then.
                done_ns.min(room.max(arrival_ns + (self.params.write_ack_us * 1e3).round() as u64))
            } else {
                done_ns
            }
        } else {
            done_ns
        };
        Completion {
            start_ns,
            done_ns,
            ack_ns,
        }
    }

    /// When the cache has room for `len` more bytes, at `arrival_ns` or later: the writes
    /// done by then leave it, then the earliest others until the new one fits (a write
    /// larger than the cache waits for it to empty).
    fn cache_room(&self, ch: &mut Channels, arrival_ns: u64, len: u64) -> u64 {
        let cap = self.params.write_cache_kb * 1024;
        let mut at = arrival_ns;
        while let Some(&Reverse((done, bytes))) = ch.cached.peek() {
            if done > at && ch.cached_bytes + len <= cap {
                break;
            }
            at = at.max(done);
            ch.cached.pop();
            ch.cached_bytes -= bytes;
        }
        at
    }

    /// When a flush arriving at `arrival_ns` completes: at once without a write cache, else
    /// once the writes accepted before it are done.
    pub fn flush(&self, ch: &Channels, arrival_ns: u64) -> u64 {
        if self.params.write_cache {
            arrival_ns.max(ch.writes_done_ns)
        } else {
            arrival_ns
        }
    }

    /// Predicted requests/s of `in_flight` requests of `len` bytes kept outstanding (a
    /// closed loop: each resubmitted at once), all of one kind.
    pub fn iops(&self, op: Op, len: u64, in_flight: u32) -> f64 {
        f64::from(in_flight.min(self.params.channels)) * 1e9 / self.service_ns(op, len) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(params: FlashParams) -> FlashModel {
        FlashModel::new(params).unwrap()
    }

    /// Round numbers: 100 µs reads + 10 ns/byte (100 MB/s), 300 µs writes + 20 ns/byte.
    fn simple(channels: u32, write_cache: bool) -> FlashModel {
        model(FlashParams {
            channels,
            read_latency_us: 100.0,
            write_latency_us: 300.0,
            read_mb_s: 100.0,
            write_mb_s: 50.0,
            write_cache,
            write_ack_us: 20.0,
            write_cache_kb: 1024,
        })
    }

    #[test]
    fn service_is_latency_plus_transfer_and_reads_and_writes_differ() {
        let m = simple(1, false);
        assert_eq!(m.service_ns(Op::Read, 0), 100_000);
        assert_eq!(m.service_ns(Op::Read, 4096), 100_000 + 40_960);
        assert_eq!(m.service_ns(Op::Write, 4096), 300_000 + 81_920);
    }

    #[test]
    fn up_to_channels_requests_are_served_at_once_and_the_next_waits_for_the_first_free() {
        let m = simple(4, false);
        let mut ch = m.channels();
        let s = m.service_ns(Op::Read, 0);
        // Four at t=0 all finish after one service time.
        for _ in 0..4 {
            let c = m.submit(&mut ch, 0, Op::Read, 0);
            assert_eq!((c.start_ns, c.done_ns, c.ack_ns), (0, s, s));
        }
        // The fifth starts when a channel frees.
        let c = m.submit(&mut ch, 10, Op::Read, 0);
        assert_eq!((c.start_ns, c.done_ns), (s, 2 * s));
        // One arriving after everything is free starts at its arrival.
        let c = m.submit(&mut ch, 5 * s, Op::Read, 0);
        assert_eq!(c.start_ns, 5 * s);
    }

    #[test]
    fn the_earliest_free_channel_is_taken() {
        let m = simple(2, false);
        let mut ch = m.channels();
        let long = m.submit(&mut ch, 0, Op::Write, 0); // 300 µs
        let short = m.submit(&mut ch, 0, Op::Read, 0); // 100 µs
        assert_eq!((long.done_ns, short.done_ns), (300_000, 100_000));
        // The third goes on the read's channel, free at 100 µs.
        let third = m.submit(&mut ch, 0, Op::Read, 0);
        assert_eq!((third.start_ns, third.done_ns), (100_000, 200_000));
    }

    #[test]
    fn one_channel_is_a_fifo() {
        let m = simple(1, false);
        let mut ch = m.channels();
        let done: Vec<u64> = (0..5)
            .map(|_| m.submit(&mut ch, 0, Op::Read, 0).done_ns)
            .collect();
        assert_eq!(done, [100_000, 200_000, 300_000, 400_000, 500_000]);
    }

    #[test]
    fn a_write_cache_acknowledges_early_and_flush_waits_for_the_writes() {
        let m = simple(1, true);
        let mut ch = m.channels();
        let w1 = m.submit(&mut ch, 0, Op::Write, 0);
        let w2 = m.submit(&mut ch, 0, Op::Write, 0);
        assert_eq!((w1.ack_ns, w1.done_ns), (20_000, 300_000));
        assert_eq!((w2.ack_ns, w2.done_ns), (20_000, 600_000));
        // The programming still holds the channel: a read waits behind both.
        let r = m.submit(&mut ch, 30_000, Op::Read, 0);
        assert_eq!(r.start_ns, 600_000);
        assert_eq!(m.flush(&ch, 40_000), 600_000);
        assert_eq!(m.flush(&ch, 900_000), 900_000);
        // Without the cache: acknowledged when done, flushes free.
        let m = simple(1, false);
        let mut ch = m.channels();
        let w = m.submit(&mut ch, 0, Op::Write, 0);
        assert_eq!(w.ack_ns, w.done_ns);
        assert_eq!(m.flush(&ch, 1), 1);
    }

    #[test]
    fn a_full_write_cache_acknowledges_when_earlier_writes_are_done() {
        // 1 MiB of cache, 256 KiB writes, one channel: 300 µs + 256Ki·20 ns = 5542.88 µs each.
        let m = simple(1, true);
        let mut ch = m.channels();
        let len = 256 << 10;
        let s = m.service_ns(Op::Write, len);
        let acks: Vec<u64> = (0..6)
            .map(|_| m.submit(&mut ch, 0, Op::Write, len).ack_ns)
            .collect();
        // Four fit at once; the fifth waits for the first to be done, the sixth for the
        // second.
        assert_eq!(acks, [20_000, 20_000, 20_000, 20_000, s, 2 * s]);
        // Later, after everything is done, the cache is empty again.
        let late = m.submit(&mut ch, 100 * s, Op::Write, len);
        assert_eq!(late.ack_ns, 100 * s + 20_000);
        // A write larger than the whole cache waits for it to empty, and no longer than
        // its own completion.
        let mut ch = m.channels();
        m.submit(&mut ch, 0, Op::Write, len);
        let huge = m.submit(&mut ch, 0, Op::Write, 2 << 20);
        assert_eq!(huge.ack_ns, s);
    }

    #[test]
    fn predicted_iops_scale_with_channels_up_to_their_number() {
        let m = simple(8, false);
        let one = m.iops(Op::Read, 0, 1);
        assert!((one - 10_000.0).abs() < 1e-6);
        assert!((m.iops(Op::Read, 0, 8) - 8.0 * one).abs() < 1e-6);
        assert!((m.iops(Op::Read, 0, 32) - 8.0 * one).abs() < 1e-6);
    }

    #[test]
    fn rejects_bad_parameters() {
        let d = FlashParams::default;
        assert!(FlashModel::new(d()).is_ok());
        assert!(FlashModel::new(FlashParams { channels: 0, ..d() }).is_err());
        assert!(
            FlashModel::new(FlashParams {
                read_mb_s: 0.0,
                ..d()
            })
            .is_err()
        );
        assert!(
            FlashModel::new(FlashParams {
                write_latency_us: -1.0,
                ..d()
            })
            .is_err()
        );
    }
}
