//! The non-rotational fit: latency and transfer from requests served alone, parallelism
//! from how completion times grow with the driver's depth.
//!
//! Owns: [`fit_flash`]. Must not: model positioning.

use crate::device::FlashModel;
use crate::workload::ServiceSample;

use super::{linear_fit, median};

pub(super) fn fit_flash(samples: &[ServiceSample], notes: &mut Vec<String>) -> FlashModel {
    let alone: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.depth_at_d <= 1)
        .map(|s| (f64::from(s.sectors), (s.c - s.d) as f64))
        .collect();
    let all: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (f64::from(s.sectors), (s.c - s.d) as f64))
        .collect();
    let base = if alone.is_empty() { &all } else { &alone };
    let (latency_ns, ns_per_sector) = match linear_fit(base) {
        Some((a, b)) if a >= 0.0 && b >= 0.0 => (a, b),
        _ => {
            let mut t: Vec<f64> = base.iter().map(|p| p.1).collect();
            notes.push("flash: sizes do not vary, bandwidth folded into latency".into());
            (median(&mut t).unwrap_or(100_000.0), 0.0)
        }
    };
    // Parallelism: the K for which D2C ~ service x max(1, depth / K) fits best.
    let mut best = (1u32, f64::MAX);
    for k in [1u32, 2, 4, 8, 16, 32, 64, 128] {
        let err: f64 = samples
            .iter()
            .map(|s| {
                let svc = latency_ns + f64::from(s.sectors) * ns_per_sector;
                let pred = svc * (f64::from(s.depth_at_d) / f64::from(k)).max(1.0);
                (pred - (s.c - s.d) as f64).abs()
            })
            .sum();
        if err < best.1 {
            best = (k, err);
        }
    }
    FlashModel {
        latency_ns,
        ns_per_sector,
        parallelism: best.0,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fit;
    use super::*;
    use crate::device::DeviceModel;

    #[test]
    fn flash_fit_finds_parallelism() {
        let mut samples = Vec::new();
        for depth in 1..=32u32 {
            for i in 0..20u64 {
                let svc = 50_000.0 * (f64::from(depth) / 8.0).max(1.0);
                let d = u64::from(depth) * 10_000_000 + i * 100_000;
                samples.push(ServiceSample {
                    d,
                    c: d + svc as u64,
                    sector: i * 1000,
                    sectors: 8,
                    write: false,
                    depth_at_d: depth,
                });
            }
        }
        let (model, _) = fit(&samples, Some(false)).unwrap();
        let DeviceModel::Flash(f) = model else {
            panic!()
        };
        assert_eq!(f.parallelism, 8);
    }
}
