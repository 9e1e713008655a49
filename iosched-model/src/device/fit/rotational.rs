//! The rotational fit: transfer and overhead from contiguous requests, the latency a queue
//! hides from those dispatched to an idle device against queued ones, and positioning by
//! log2 seek distance from the rest.
//!
//! Owns: [`fit_rotational`] and what it assumes where the trace cannot tell. Must not:
//! choose between rotational and not (that is [`super::fit`]).

use crate::device::{BINS, RotationalModel};
use crate::workload::ServiceSample;

use super::{linear_fit, mean, median, previous_completions, shown_latency};

/// Contiguous requests of each kind (dispatched to an idle device, queued behind another)
/// needed to tell the latency a queue hides from the service itself.
const MIN_PER_KIND: usize = MIN_CONTIGUOUS;

/// A contiguous request: its size, service time, dispatch and the completion before it.
#[derive(Clone, Copy)]
struct Contiguous {
    sectors: f64,
    t: f64,
    d: u64,
    prev_c: u64,
}

/// The latency a queue hides ([`RotationalModel::latency_ns`]): contiguous requests
/// dispatched to an idle device took it on top of what the same size took queued behind
/// another (whose way to the disk overlapped the service before it). Per size, mean against
/// mean (throughput is a sum of service times), weighted by the idle ones. `None` unless
/// both kinds were seen, [`MIN_PER_KIND`] each.
fn hidden_latency(seq: &[Contiguous]) -> Option<f64> {
    // First pass: queued = dispatched before the previous completion. Some of those
    // arrived less than a latency before it and show part of it; the second pass leaves
    // them out.
    let mut latency = 0.0;
    for _ in 0..2 {
        let mut by_size: std::collections::BTreeMap<u64, (Vec<f64>, Vec<f64>)> = Default::default();
        for c in seq {
            let e = by_size.entry(c.sectors as u64).or_default();
            if c.d >= c.prev_c {
                e.0.push(c.t);
            } else if shown_latency(latency, c.d, c.prev_c) == 0.0 {
                e.1.push(c.t);
            }
        }
        let (mut sum, mut weight, mut idle, mut queued) = (0.0, 0.0, 0, 0);
        for (idle_t, queued_t) in by_size.values() {
            idle += idle_t.len();
            queued += queued_t.len();
            if let (Some(i), Some(q)) = (mean(idle_t), mean(queued_t)) {
                sum += (i - q) * idle_t.len() as f64;
                weight += idle_t.len() as f64;
            }
        }
        if idle < MIN_PER_KIND || queued < MIN_PER_KIND || weight == 0.0 {
            return None;
        }
        latency = (sum / weight).max(0.0);
    }
    Some(latency)
}

/// A rotational disk's fixed cost per request (command processing, controller), assumed when
/// the trace has no contiguous request to measure it: then every service time holds it plus
/// a positioning whose own fixed part (the shortest seek and half a turn, milliseconds) is
/// unknown, so no fit can separate them. 100 µs: the test bed's emulated disk
/// (`iosched_disk::DiskParams::default`), and a SATA disk's order of magnitude. A
/// share of the fastest seek (10% was used) is no better founded, and half a turn alone is
/// 4.2 ms at 7200 rpm, so any share that fits one spindle speed misfits another.
pub const ASSUMED_OVERHEAD_NS: f64 = 100_000.0;

/// A rotational device's latency ([`RotationalModel::latency_ns`]), assumed when every request
/// of the trace waited behind another and so hid it. Not 0: every request crosses the host's
/// driver, transport and interrupt path, and 0 made every what-if that serves a process one
/// request at a time its best case (seed 000's low_latency=0 estimates 31-46% high on the test
/// bed). 100 µs: the scale of that path where a loop device's backing file, a VM's virtual
/// disk or a USB bridge sits in it, and what the test bed's emulated disk shows (a single
/// sequential 4 KiB reader: 209 µs p50 D2C against 134 µs of overhead and transfer). A bare
/// SATA port takes less: `explain` gives the estimate as a range whose other end has none.
pub const ASSUMED_LATENCY_NS: f64 = 100_000.0;

/// Contiguous requests needed to fit transfer and overhead from them.
const MIN_CONTIGUOUS: usize = 16;

/// Seeks of one distance bin needed for the bin to count.
const MIN_PER_BIN: usize = 3;

/// Seeks a bin needs before its median stands against its neighbours' (see
/// [`capped_by_farther`]).
const SURE_PER_BIN: usize = 10;

/// Each thin bin's positioning (fewer than [`SURE_PER_BIN`] seeks), capped at that of any
/// farther bin with more samples: an arm takes no longer to travel less far, so a thin
/// nearer bin costing more is its few odd requests (three seeks of 64-128 MiB, two of them
/// about 17 ms, against 300 farther ones at 7.9 ms: that bin's median made every shorter
/// seek of the replay cost twice a longer one). A well-sampled bin stays as measured
/// whatever its neighbours: what a request costs need not follow its distance alone (in a
/// dsync-journal recording, 599 requests 2^20 to 2^21 sectors from the previous one cost
/// nothing beyond their overhead, against 597 at 2^19 to 2^20 that took 8.4 ms each).
fn capped_by_farther(medians: &[Option<f64>], counts: &[usize]) -> Vec<Option<f64>> {
    medians
        .iter()
        .enumerate()
        .map(|(b, v)| {
            let v = (*v)?;
            if counts[b] >= SURE_PER_BIN {
                return Some(v);
            }
            let cap = (b + 1..medians.len())
                .filter(|&f| counts[f] > counts[b])
                .filter_map(|f| medians[f])
                .fold(v, f64::min);
            Some(cap)
        })
        .collect()
}

/// Samples of one size needed for that size to count in [`size_fit`].
const MIN_PER_SIZE: usize = 3;

/// Service time against size, `(overhead, per sector)`, robust to a few odd requests: the
/// line through each size's median (sizes seen at least [`MIN_PER_SIZE`] times, weighted by
/// count). `None` with fewer than two such sizes: one 16-sector request among 300 of 8
/// sectors, slow because the device served another's request first, says nothing of the
/// transfer rate (fitted by least squares it made a 1 MB/s disk).
fn size_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let mut by_size: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for (s, t) in points {
        by_size.entry(*s as u64).or_default().push(*t);
    }
    let mut weighted: Vec<(f64, f64)> = Vec::new();
    for (size, mut times) in by_size {
        if times.len() < MIN_PER_SIZE {
            continue;
        }
        let m = median(&mut times)?;
        // Weight by count, capped so that one dominant size does not hide the rest.
        let w = times.len().min(64);
        weighted.extend(std::iter::repeat_n((size as f64, m), w));
    }
    linear_fit(&weighted)
}

pub(super) fn fit_rotational(
    samples: &[ServiceSample],
    service: &[Option<u64>],
    notes: &mut Vec<String>,
) -> (RotationalModel, bool) {
    let mut head: Option<u64> = None;
    let mut contiguous: Vec<Contiguous> = Vec::new();
    let mut seeks: Vec<(u64, f64, f64)> = Vec::new();
    let prev = previous_completions(samples);
    // Seeks' dispatch and previous completion, to take the latency out of them below.
    let mut seek_at: Vec<(u64, u64)> = Vec::new();
    let mut idle_dispatches = 0usize;
    for ((s, svc), prev_c) in samples.iter().zip(service).zip(&prev) {
        if let Some(svc) = svc {
            idle_dispatches += usize::from(s.d >= *prev_c);
            match head {
                Some(h) if h == s.sector => contiguous.push(Contiguous {
                    sectors: f64::from(s.sectors),
                    t: *svc as f64,
                    d: s.d,
                    prev_c: *prev_c,
                }),
                Some(h) => {
                    seeks.push((s.sector.abs_diff(h), f64::from(s.sectors), *svc as f64));
                    seek_at.push((s.d, *prev_c));
                }
                None => {}
            }
        }
        if s.sectors > 0 {
            head = Some(s.sector + u64::from(s.sectors));
        }
    }
    // The service time proper: each request's time less the part of the latency it shows.
    let latency_ns = hidden_latency(&contiguous);
    let latency_unseen = latency_ns.is_none() && idle_dispatches * 10 < samples.len();
    match latency_ns {
        Some(l) => notes.push(format!(
            "latency a queue hides: {:.0} µs per request (contiguous requests dispatched to an \
             idle device against queued ones)",
            l / 1e3
        )),
        // Nearly every request waited behind another: whatever each spends on its way to
        // the disk and back overlapped the service before it, and is unseen.
        None if latency_unseen => notes.push(format!(
            "{} of {} requests waited in the device's queue, which hides the time each spends \
             on its way to the disk and back (the host's path, a loop device's backing): that \
             latency is unseen here and {:.2} ms assumed, which a process that issues one \
             request at a time (under a scheduler that serves it alone) pays on every \
             request; give --device-profile with latency_ns",
            samples.len() - idle_dispatches,
            samples.len(),
            ASSUMED_LATENCY_NS / 1e6
        )),
        None => {}
    }
    let latency = match latency_ns {
        Some(l) => l,
        None if latency_unseen => ASSUMED_LATENCY_NS,
        None => 0.0,
    };
    let mut seq: Vec<(f64, f64)> = contiguous
        .iter()
        .map(|c| (c.sectors, c.t - shown_latency(latency, c.d, c.prev_c)))
        .collect();
    for ((_, _, t), (d, prev_c)) in seeks.iter_mut().zip(&seek_at) {
        *t -= shown_latency(latency, *d, *prev_c);
    }
    // Transfer and overhead from contiguous requests; default to a 120 MB/s disk when
    // their sizes do not vary (the slope is then unknowable).
    let default_ns_per_sector = 512.0 / 120e6 * 1e9;
    let seek_points: Vec<(f64, f64)> = seeks.iter().map(|(_, s, t)| (*s, *t)).collect();
    // A handful of contiguous requests (a second reader starting while the first streamed)
    // says nothing reliable: they may have waited behind another's seek.
    let seq_fit = if seq.len() >= MIN_CONTIGUOUS {
        size_fit(&seq)
    } else {
        None
    };
    if !seq.is_empty() && seq.len() < MIN_CONTIGUOUS {
        seq.clear();
    }
    let (overhead_ns, ns_per_sector) = match seq_fit {
        // The overhead as the mean of what the transfer leaves (see below).
        Some((a, b)) if b > 0.0 && a >= 0.0 => {
            let over = mean(&seq.iter().map(|(s, t)| t - s * b).collect::<Vec<_>>());
            (over.unwrap_or(a).max(0.0), b)
        }
        _ => {
            // The slope from the seeks themselves (size against time over all distances),
            // else a 120 MB/s disk's.
            // A slope the contiguous requests contradict (their transfer alone would take
            // longer than they did: the seeks' sizes went with their distances) is none.
            let seq_mean = mean(&seq.iter().map(|(_, t)| *t).collect::<Vec<_>>());
            let seq_size = mean(&seq.iter().map(|(s, _)| *s).collect::<Vec<_>>());
            let slope = linear_fit(&seek_points)
                .map(|(_, b)| b)
                .filter(|b| *b >= 0.0)
                .filter(|b| match (seq_mean, seq_size) {
                    (Some(t), Some(s)) => b * s <= t,
                    _ => true,
                });
            let per = slope.unwrap_or_else(|| {
                notes.push(format!(
                    "transfer rate assumed ({:.0} MB/s): request sizes do not vary enough to \
                     fit it",
                    512.0 / default_ns_per_sector * 1e3
                ));
                default_ns_per_sector
            });
            let over: Vec<f64> = seq.iter().map(|(s, t)| t - s * per).collect();
            // The overhead cannot exceed what the quickest seeks took. Not the quickest one,
            // though: a request served from the disk's cache, or one that the device
            // completed out of order (its derived service time is then short), would set
            // the overhead to nothing, and every replayed contiguous request would cost only
            // its transfer. The 5th percentile of the seeks.
            let mut quick: Vec<f64> = seeks.iter().map(|(_, s, t)| t - s * per).collect();
            quick.sort_by(f64::total_cmp);
            let fastest_seek = quick.get(quick.len() / 20).copied();
            // The mean, not the median: throughput is a sum of service times, and a
            // streaming reader's few slow requests (a track switch, the emulated disk's
            // hiccups) are part of it.
            let over = mean(&over)
                .unwrap_or_else(|| {
                    let assumed =
                        fastest_seek.map_or(ASSUMED_OVERHEAD_NS, |f| ASSUMED_OVERHEAD_NS.min(f));
                    notes.push(format!(
                        "no contiguous request: the per-request overhead cannot be told apart \
                         from positioning (every request here seeks), so a disk's command \
                         overhead is assumed ({:.2} ms); the host's own latency per request \
                         (e.g. a loop device and its backing) is not in it; give \
                         --device-profile with a measured one",
                        assumed / 1e6
                    ));
                    assumed
                })
                .max(0.0);
            (over, per)
        }
    };
    let mut bins: Vec<Vec<f64>> = vec![Vec::new(); BINS];
    for (dist, sectors, t) in &seeks {
        let bin = ((63 - dist.max(&1).leading_zeros()) as usize).min(BINS - 1);
        bins[bin].push((t - overhead_ns - sectors * ns_per_sector).max(0.0));
    }
    // A bin of one or two samples is left to its neighbours: its median is then one of them,
    // and the odd request (served after another the device took first) sets what every
    // replayed seek of that distance costs.
    let medians: Vec<Option<f64>> = bins
        .iter_mut()
        .map(|b| {
            if b.len() < MIN_PER_BIN {
                None
            } else {
                median(b)
            }
        })
        .collect();
    let counts: Vec<usize> = bins.iter().map(Vec::len).collect();
    let positioning_ns = capped_by_farther(&medians, &counts);
    if seeks.is_empty() {
        notes.push("no non-contiguous request: seek costs assumed (8 ms)".into());
    }
    (
        RotationalModel {
            overhead_ns,
            ns_per_sector,
            positioning_ns,
            latency_ns: latency,
        },
        latency_unseen,
    )
}

#[cfg(test)]
mod tests {
    use super::super::fit;
    use super::*;
    use crate::device::DeviceModel;

    /// Requests served back to back by a known disk: the fit must give its numbers back.
    #[test]
    fn rotational_fit_recovers_a_known_disk() {
        let truth = |dist: u64| 1_000_000.0 + 200.0 * (dist as f64).sqrt();
        let (over, per) = (100_000.0, 4_000.0);
        let mut samples = Vec::new();
        let mut t = 0u64;
        let mut head = 0u64;
        let mut rng = 12345u64;
        for i in 0..4000u64 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let sectors = 8 * (1 + (rng >> 60) as u32);
            let sector = if i % 3 == 0 {
                head
            } else {
                (rng >> 20) % (1 << 30)
            };
            let pos = if sector == head {
                0.0
            } else {
                truth(sector.abs_diff(head))
            };
            let svc = (over + pos + f64::from(sectors) * per) as u64;
            samples.push(ServiceSample {
                d: t,
                c: t + svc,
                sector,
                sectors,
                write: false,
                depth_at_d: 1,
            });
            t += svc + 50_000;
            head = sector + u64::from(sectors);
        }
        let (model, q) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = &model else {
            panic!("rotational expected")
        };
        assert!((m.overhead_ns - over).abs() < 1_000.0, "{}", m.overhead_ns);
        assert!((m.ns_per_sector - per).abs() < 10.0, "{}", m.ns_per_sector);
        // Within a bin the true curve varies by sqrt(2): the table's error stays below that.
        assert!(q.mean_abs_error_pct < 10.0, "{q:?}");
        assert!(q.total_error_pct.abs() < 5.0, "{q:?}");
        assert!(q.r2 > 0.9, "{q:?}");
    }

    /// Seed 001's journal on a disk with 200 µs per contiguous 4 KiB request and 8 ms seeks:
    /// the contiguous requests are nearly all one size, one odd 16-sector one took 8 ms (the
    /// device served another's request first), and the bigger requests are the far ones.
    /// Neither may set the transfer rate: the fit must keep the contiguous requests' time.
    #[test]
    fn one_size_of_contiguous_requests_gives_no_transfer_rate() {
        let mut samples = Vec::new();
        let mut t = 0u64;
        let mut push = |sector: u64, sectors: u32, svc: u64| {
            samples.push(ServiceSample {
                d: t,
                c: t + svc,
                sector,
                sectors,
                write: true,
                depth_at_d: 1,
            });
            t += svc + 10_000;
        };
        let mut journal = 1 << 20;
        for k in 0..300u64 {
            // dd's write far away (8 sectors), then the journal's (16 sectors, farther).
            push(266_240 + k * 8, 8, 8_000_000);
            push(journal, 16, 8_700_000);
            journal += 16;
            // The commit block, contiguous.
            let svc = if k == 7 { 8_700_000 } else { 200_000 };
            push(journal, if k == 7 { 16 } else { 8 }, svc);
            journal += if k == 7 { 16 } else { 8 };
        }
        let (model, q) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = &model else {
            panic!("rotational expected")
        };
        assert!(m.ns_per_sector * 8.0 <= 200_000.0, "{m:?}");
        assert!(q.total_error_pct.abs() < 5.0, "{q:?}");
        // The mean keeps the odd one's time: (299 x 200 µs + 8.7 ms) / 300.
        let contiguous = model.service_ns(1000, 1000, 8) as f64;
        assert!((contiguous - 228_000.0).abs() < 10_000.0, "{contiguous}");
    }

    /// The trace of `readers` sequential 4 KiB readers, 100 MB apart, interleaved one request
    /// each in turn on a FIFO device (each request queued behind the previous one, as under
    /// `none`), served by the test bed's disk model with `params`.
    fn interleaved_readers(params: iosched_disk::DiskParams, readers: u64) -> Vec<ServiceSample> {
        let disk = iosched_disk::DiskModel::new(params, 1 << 30).unwrap();
        // Parked far from every reader: the first request seeks too.
        let mut head = iosched_disk::Head { pos: 900 << 20 };
        let mut samples = Vec::new();
        let mut c = 0u64;
        for k in 0..200u64 {
            for r in 0..readers {
                let sector = r * 204_800 + k * 8;
                let svc = disk.serve(&mut head, sector << 9, 4096).as_nanos() as u64;
                samples.push(ServiceSample {
                    d: c.saturating_sub(1_000),
                    c: c + svc,
                    sector,
                    sectors: 8,
                    write: false,
                    depth_at_d: 2,
                });
                c += svc;
            }
        }
        samples
    }

    /// Interleaved readers never read contiguously: every service time is overhead plus
    /// positioning plus transfer, and only their sum shows. Two disks whose overheads differ
    /// by 200 µs and whose half turns differ by as much give the same trace, so no fit can
    /// know the sequential cost: the fit keeps every observed service time, assumes
    /// [`ASSUMED_OVERHEAD_NS`] and says so.
    #[test]
    fn interleaved_readers_fit_their_seeks_and_assume_the_sequential_cost() {
        use iosched_disk::DiskParams;
        let a = DiskParams::default();
        let half_turn_s = 30.0 / a.rpm;
        let b = DiskParams {
            overhead_us: a.overhead_us + 200.0,
            rpm: 30.0 / (half_turn_s - 200e-6),
            ..a.clone()
        };
        for readers in [2, 4, 8] {
            let (ta, tb) = (
                interleaved_readers(a.clone(), readers),
                interleaved_readers(b.clone(), readers),
            );
            let same = ta
                .iter()
                .zip(&tb)
                .all(|(x, y)| (x.c - x.d).abs_diff(y.c - y.d) <= 2);
            assert!(same, "the two disks must give the same trace");
            let (model, q) = fit(&ta, Some(true)).unwrap();
            let DeviceModel::Rotational(m) = &model else {
                panic!("rotational expected")
            };
            assert_eq!(m.overhead_ns, ASSUMED_OVERHEAD_NS, "{readers} readers");
            assert!(
                q.notes.iter().any(|n| n.contains("no contiguous request")),
                "{q:?}"
            );
            // What the trace did show, the model gives back.
            assert!(q.total_error_pct.abs() < 1.0, "{readers} readers: {q:?}");
            assert!(q.mean_abs_error_pct < 2.0, "{readers} readers: {q:?}");
            // Disk a's sequential cost, as the assumption is the test bed's own overhead.
            let seq = model.service_ns(8, 8, 8) as f64;
            let truth = 100_000.0 + 4096.0 / 120e6 * 1e9;
            assert!((seq - truth).abs() < 1_000.0, "{seq}");
        }
    }

    /// The same interleaved readers, with 2% of their requests served at once (from the disk's
    /// cache, or completed out of order): the assumed overhead must not fall to the quickest
    /// one's nothing (a replay would then stream contiguous requests at the transfer rate).
    #[test]
    fn a_few_instant_seeks_do_not_erase_the_assumed_overhead() {
        let mut samples = interleaved_readers(iosched_disk::DiskParams::default(), 4);
        // Rebuild the completion times with every 50th service time at 20 µs.
        let mut c = 0u64;
        for (k, s) in samples.iter_mut().enumerate() {
            let svc = if k % 50 == 25 {
                20_000
            } else {
                s.c - s.d - 1_000
            };
            s.d = c.saturating_sub(1_000);
            s.c = c + svc;
            c += svc;
        }
        let (model, q) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = &model else {
            panic!("rotational expected")
        };
        assert_eq!(m.overhead_ns, ASSUMED_OVERHEAD_NS, "{q:?}");
    }

    /// A disk with 100 µs of overhead, 34 µs per 4 KiB and 80 µs of latency on the way to it
    /// and back, which a queued request overlaps with the one before it: bursts of eight
    /// contiguous requests issued at once (queued), then eight issued one at a time after
    /// each completion (each finds the disk idle), with a seek between runs. The fit must
    /// give the three back: a model without the latency, fitted on the mean, makes the
    /// lone requests too cheap and the queued ones too dear.
    #[test]
    fn the_latency_a_queue_hides_is_fitted_from_idle_and_queued_requests() {
        const LATENCY: u64 = 80_000;
        let (over, per) = (100_000.0, 512.0 / 120e6 * 1e9);
        let occupancy = |seek: bool| (over + 8.0 * per + if seek { 6e6 } else { 0.0 }) as u64;
        let mut samples = Vec::new();
        let (mut now, mut prev_c, mut sector) = (0u64, 0u64, 0u64);
        let mut serve = |d: u64, sector: u64, seek: bool, samples: &mut Vec<ServiceSample>| {
            let c = (d + LATENCY).max(prev_c) + occupancy(seek);
            prev_c = c;
            samples.push(ServiceSample {
                d,
                c,
                sector,
                sectors: 8,
                write: false,
                depth_at_d: 1,
            });
            c
        };
        for run in 0..60u64 {
            sector += 1 << 20;
            let mut last = now;
            for k in 0..8u64 {
                if run % 2 == 0 {
                    // All eight dispatched at once.
                    last = serve(now + k, sector, k == 0, &mut samples);
                } else {
                    last = serve(now, sector, k == 0, &mut samples);
                    now = last + 20_000;
                }
                sector += 8;
            }
            now = last + 20_000;
        }
        let (model, q) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = &model else {
            panic!("rotational expected")
        };
        assert!((m.latency_ns - LATENCY as f64).abs() < 1_000.0, "{m:?}");
        assert!((m.overhead_ns - over).abs() < 1_000.0, "{m:?}");
        let contiguous = model.service_ns(8, 8, 8) as f64;
        assert!(
            (contiguous - (over + 8.0 * per)).abs() < 1_000.0,
            "{contiguous}"
        );
        assert!(q.total_error_pct.abs() < 1.0, "{q:?}");
        assert!(q.mean_abs_error_pct < 1.0, "{q:?}");
        assert!(
            q.notes.iter().any(|n| n.contains("latency a queue hides")),
            "{q:?}"
        );
    }

    /// Interleaved readers: every request but the first waits in the queue, so the latency
    /// is unseen: the fit says so, and assumes a host path's (not none).
    #[test]
    fn a_trace_where_every_request_queued_says_its_latency_is_unseen() {
        let samples = interleaved_readers(iosched_disk::DiskParams::default(), 4);
        let (model, q) = fit(&samples, Some(true)).unwrap();
        assert_eq!(model.latency_ns(), ASSUMED_LATENCY_NS as u64);
        assert!(q.latency_unseen);
        assert!(
            q.notes.iter().any(|n| n.contains("latency is unseen")),
            "{q:?}"
        );
    }

    /// Appends a 4 KiB read at `sector` served in `svc` ns, dispatched to an idle device
    /// 10 µs after the previous one completed.
    fn push_read(samples: &mut Vec<ServiceSample>, sector: u64, svc: u64) {
        let t = samples.last().map_or(0, |p| p.c + 10_000);
        samples.push(ServiceSample {
            d: t,
            c: t + svc,
            sector,
            sectors: 8,
            write: false,
            depth_at_d: 1,
        });
    }

    /// A distance bin with two seeks, both slow (each waited behind a request the device
    /// took first), does not set that distance's cost: the bins around it do.
    #[test]
    fn a_bin_of_two_odd_seeks_is_left_to_its_neighbours() {
        let mut samples = Vec::new();
        let mut push = |sector: u64, svc: u64| push_read(&mut samples, sector, svc);
        // Contiguous runs (for the overhead), then seeks of 2^17 and 2^19 sectors, 6 and
        // 8 ms, and two of 2^18 that took 14 ms.
        let mut pos = 0u64;
        for k in 0..60u64 {
            push(pos, 200_000);
            pos += 8;
            let (jump, svc) = match k % 3 {
                0 => (1 << 17, 6_000_000),
                _ => (1 << 19, 8_000_000),
            };
            pos += jump;
            push(pos, svc);
            pos += 8;
        }
        for _ in 0..2 {
            pos += 1 << 18;
            push(pos, 14_000_000);
            pos += 8;
        }
        let (model, _) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = &model else {
            panic!("rotational expected")
        };
        assert_eq!(m.positioning_ns[18], None, "{m:?}");
        let mid = model.service_ns(0, 1 << 18, 8) as f64;
        assert!((6_000_000.0..8_000_000.0).contains(&mid), "{mid}");
    }

    /// Seeks alternating with contiguous reads: `near` seeks of 2^17 sectors taking the
    /// given times, and 60 of 2^19 taking 8 ms.
    fn near_and_far_seeks(near: &[u64]) -> RotationalModel {
        let mut samples = Vec::new();
        let mut push = |sector: u64, svc: u64| push_read(&mut samples, sector, svc);
        let mut pos = 0u64;
        let far = std::iter::repeat_n((1u64 << 19, 8_000_000u64), 60);
        for (jump, svc) in far.chain(near.iter().map(|svc| (1u64 << 17, *svc))) {
            push(pos, 200_000);
            pos += 8 + jump;
            push(pos, svc);
            pos += 8;
        }
        let (model, _) = fit(&samples, Some(true)).unwrap();
        let DeviceModel::Rotational(m) = model else {
            panic!("rotational expected")
        };
        m
    }

    /// Three seeks of 64-128 MiB, two of them slow, do not make
    /// that distance cost twice a farther one seen 60 times; 30 such seeks, all slow, do.
    #[test]
    fn a_thin_near_bin_costs_no_more_than_a_better_sampled_farther_one() {
        let far = near_and_far_seeks(&[]).positioning_ns[19].expect("60 seeks fit their bin");
        let thin = near_and_far_seeks(&[6_000_000, 17_000_000, 17_500_000]);
        let near = thin.positioning_ns[17].expect("three seeks fit their bin");
        assert!(near <= far, "near {near} far {far}");
        assert!(
            near > 0.5 * far,
            "the cap is the farther bin's, not nothing: {near}"
        );
        let sure = near_and_far_seeks(&[9_000_000; 30]);
        let near = sure.positioning_ns[17].unwrap();
        assert!(
            near > far + 500_000.0,
            "a well-sampled bin stays as measured: {near} {far}"
        );
    }
}
