//! The non-rotational fit: each request's D2C against its size and the requests in the driver
//! when it was issued, reads and writes apart. A device of `K` parallel servers serves a
//! request of `x` sectors in `latency + x * transfer` when at most `K` are in flight, and
//! `max(1, n / K)` times that at `n` in flight (it waits for a free server): for each `K` the
//! two costs are a least-squares fit (no intercept, regressors `m = max(1, n / K)` and `x m`),
//! and the `K` that explains the D2Cs best wins.
//!
//! Nothing is assumed that the trace contradicts: sizes that do not vary leave the transfer
//! rate unknowable, and it is then folded into the latency (said in a note), never set to a
//! disk's 120 MB/s.
//!
//! Owns: [`fit_flash`]. Must not: model positioning.

use crate::device::FlashModel;
use crate::workload::ServiceSample;

/// Fewer samples of an operation than this and it takes the other's costs.
const MIN_SAMPLES: usize = 20;

/// Parallelisms tried (and the deepest depth the trace had).
const PARALLELISMS: &[u32] = &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256];

/// One operation's fitted costs and the squared error they leave.
#[derive(Clone, Copy, Debug)]
struct OpFit {
    latency_ns: f64,
    ns_per_sector: f64,
    sse: f64,
}

/// Least squares `y = a m + b x m` (both >= 0) over `(sectors, depth, d2c)` at parallelism
/// `k`; `None` without points.
fn fit_op(points: &[(f64, f64, f64)], k: f64) -> Option<OpFit> {
    if points.is_empty() {
        return None;
    }
    let (mut uu, mut uv, mut vv, mut uy, mut vy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, n, y) in points {
        let m = (n / k).max(1.0);
        let (u, v) = (m, x * m);
        uu += u * u;
        uv += u * v;
        vv += v * v;
        uy += u * y;
        vy += v * y;
    }
    let sse = |a: f64, b: f64| -> f64 {
        points
            .iter()
            .map(|&(x, n, y)| {
                let m = (n / k).max(1.0);
                (y - a * m - b * x * m).powi(2)
            })
            .sum()
    };
    let det = uu * vv - uv * uv;
    let mut best: Option<OpFit> = None;
    let mut consider = |a: f64, b: f64| {
        if a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0 {
            let e = sse(a, b);
            if best.is_none_or(|f| e < f.sse) {
                best = Some(OpFit {
                    latency_ns: a,
                    ns_per_sector: b,
                    sse: e,
                });
            }
        }
    };
    // Relative to the terms' size: sizes that do not vary make the system singular.
    if det > 1e-9 * uu * vv {
        consider((uy * vv - vy * uv) / det, (vy * uu - uy * uv) / det);
    }
    // On the boundary: all latency, or all transfer.
    consider(uy / uu, 0.0);
    if vv > 0.0 {
        consider(0.0, vy / vv);
    }
    best
}

fn sizes_vary(points: &[(f64, f64, f64)]) -> bool {
    let min = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let max = points.iter().map(|p| p.0).fold(0.0, f64::max);
    max > min * 1.5
}

pub(super) fn fit_flash(samples: &[ServiceSample], notes: &mut Vec<String>) -> FlashModel {
    let points = |write: bool| -> Vec<(f64, f64, f64)> {
        samples
            .iter()
            .filter(|s| s.sectors > 0 && s.write == write && s.c >= s.d)
            .map(|s| {
                (
                    f64::from(s.sectors),
                    f64::from(s.depth_at_d.max(1)),
                    (s.c - s.d) as f64,
                )
            })
            .collect()
    };
    let (reads, writes) = (points(false), points(true));
    let max_depth = samples
        .iter()
        .map(|s| s.depth_at_d)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut ks: Vec<u32> = PARALLELISMS
        .iter()
        .copied()
        .filter(|k| *k < max_depth)
        .collect();
    ks.push(max_depth);
    // Reads and writes fitted apart where each has enough samples; the one that has too few
    // takes the other's costs (and all of them together when neither has).
    let read_own = reads.len() >= MIN_SAMPLES || writes.len() < MIN_SAMPLES;
    let write_own = writes.len() >= MIN_SAMPLES;
    let all: Vec<(f64, f64, f64)> = reads.iter().chain(&writes).copied().collect();
    let mut best: Option<(u32, OpFit, Option<OpFit>)> = None;
    for &k in &ks {
        let kf = f64::from(k);
        let read_fit = if write_own && !read_own {
            fit_op(&writes, kf)
        } else if read_own && !write_own {
            fit_op(&all, kf)
        } else {
            fit_op(&reads, kf)
        };
        let Some(read_fit) = read_fit else { continue };
        let write_fit = if write_own && read_own {
            fit_op(&writes, kf)
        } else {
            None
        };
        let sse = read_fit.sse + write_fit.map_or(0.0, |w| w.sse);
        if best
            .as_ref()
            .is_none_or(|(_, r, w)| sse < r.sse + w.map_or(0.0, |w| w.sse))
        {
            best = Some((k, read_fit, write_fit));
        }
    }
    let Some((parallelism, read, write)) = best else {
        notes.push("flash: no request with data to fit on; 100 µs per request assumed".into());
        return FlashModel {
            latency_ns: 100_000.0,
            ns_per_sector: 0.0,
            parallelism: 1,
            write_latency_ns: None,
            write_ns_per_sector: None,
        };
    };
    let vary = sizes_vary(if read_own { &all } else { &writes });
    if !vary {
        notes.push(
            "flash: one request size, so its transfer time cannot be told from the latency and \
             is folded into it"
                .into(),
        );
    }
    if parallelism == max_depth {
        notes.push(format!(
            "flash: parallelism at least {parallelism} (the trace never had more requests in \
             the driver, and they did not queue)"
        ));
    }
    if !write_own && !writes.is_empty() {
        notes.push(format!(
            "flash: {} writes, too few to fit apart: they cost as reads",
            writes.len()
        ));
    }
    FlashModel {
        latency_ns: read.latency_ns,
        ns_per_sector: read.ns_per_sector,
        parallelism,
        write_latency_ns: write.map(|w| w.latency_ns),
        write_ns_per_sector: write.map(|w| w.ns_per_sector),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fit;
    use super::*;
    use crate::device::DeviceModel;

    /// Requests at every depth from 1 to 32 on a device of known parallelism, latency and
    /// rate, reads and writes with their own, of sizes 4..64 KiB: the D2C each would see.
    fn trace(k: u32, read: (f64, f64), write: (f64, f64)) -> Vec<ServiceSample> {
        let mut samples = Vec::new();
        for depth in 1..=32u32 {
            for i in 0..40u64 {
                let write_op = i % 3 == 0;
                let sectors = 8 << (i % 5);
                let (lat, per) = if write_op { write } else { read };
                let svc =
                    (lat + f64::from(sectors) * per) * (f64::from(depth) / f64::from(k)).max(1.0);
                let d = u64::from(depth) * 100_000_000 + i * 1_000_000;
                samples.push(ServiceSample {
                    d,
                    c: d + svc as u64,
                    sector: i * 100_000,
                    sectors,
                    write: write_op,
                    depth_at_d: depth,
                });
            }
        }
        samples
    }

    #[test]
    fn the_fit_recovers_parallelism_latency_and_rate_of_reads_and_writes() {
        // 8 channels; reads 80 µs + 0.5 µs/sector (1 GB/s), writes 20 µs + 2 µs/sector.
        let samples = trace(8, (80_000.0, 500.0), (20_000.0, 2_000.0));
        let (model, q) = fit(&samples, Some(false)).unwrap();
        let DeviceModel::Flash(f) = model else {
            panic!("{model:?}")
        };
        assert_eq!(f.parallelism, 8);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.01 + 2.0;
        assert!(close(f.latency_ns, 80_000.0), "{f:?}");
        assert!(close(f.ns_per_sector, 500.0), "{f:?}");
        assert!(close(f.write_latency_ns.unwrap(), 20_000.0), "{f:?}");
        assert!(close(f.write_ns_per_sector.unwrap(), 2_000.0), "{f:?}");
        assert!(q.r2 > 0.999, "{q:?}");
        assert!(q.total_error_pct.abs() < 0.5, "{q:?}");
    }

    #[test]
    fn one_request_size_folds_the_rate_into_the_latency_and_says_so() {
        let samples: Vec<ServiceSample> = trace(4, (50_000.0, 0.0), (50_000.0, 0.0))
            .into_iter()
            .map(|s| ServiceSample { sectors: 8, ..s })
            .collect();
        let (model, q) = fit(&samples, Some(false)).unwrap();
        let DeviceModel::Flash(f) = model else {
            panic!()
        };
        assert_eq!(f.parallelism, 4);
        assert!((f.latency_ns - 50_000.0).abs() < 100.0, "{f:?}");
        assert_eq!(f.ns_per_sector, 0.0);
        assert!(
            q.notes.iter().any(|n| n.contains("one request size")),
            "{q:?}"
        );
        assert!(!q.notes.iter().any(|n| n.contains("120 MB/s")), "{q:?}");
    }

    #[test]
    fn a_device_that_never_queued_is_at_least_as_parallel_as_the_trace_was_deep() {
        let samples: Vec<ServiceSample> = trace(64, (30_000.0, 100.0), (30_000.0, 100.0))
            .into_iter()
            .filter(|s| s.depth_at_d <= 16)
            .collect();
        let (model, q) = fit(&samples, Some(false)).unwrap();
        let DeviceModel::Flash(f) = model else {
            panic!()
        };
        assert_eq!(f.parallelism, 16);
        assert!(q.notes.iter().any(|n| n.contains("at least 16")), "{q:?}");
    }
}
