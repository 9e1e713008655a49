//! The fit of a device model to a trace's requests: service times in issue order, then
//! either a rotational model ([`rotational`]: transfer, overhead, the latency a queue hides,
//! positioning by seek distance) or a non-rotational one ([`flash`]: latency, transfer,
//! parallelism), and how well it explains what the trace shows.
//!
//! Owns: the fit and its quality. Must not: serve requests (the model's own arithmetic).

use crate::workload::ServiceSample;

use super::{DeviceError, DeviceModel, FitQuality};

mod flash;
mod rotational;

pub use rotational::{ASSUMED_LATENCY_NS, ASSUMED_OVERHEAD_NS};

/// Fits a model to the trace's requests (in issue order). `rotational`: from the device's
/// sysfs; `None` lets the fit decide (long seeks cost over a millisecond: rotational).
pub fn fit(
    samples: &[ServiceSample],
    rotational: Option<bool>,
) -> Result<(DeviceModel, FitQuality), DeviceError> {
    if samples.is_empty() {
        return Err(DeviceError::NoSamples);
    }
    let mut notes = Vec::new();
    let service = fifo_service(samples);
    let (rot, latency_unseen) = rotational::fit_rotational(samples, &service, &mut notes);
    let rotational = rotational.unwrap_or_else(|| {
        let far: Vec<f64> = rot.positioning_ns[20..].iter().flatten().copied().collect();
        !far.is_empty() && far.iter().sum::<f64>() / far.len() as f64 > 1e6
    });
    let model = if rotational {
        DeviceModel::Rotational(rot)
    } else {
        DeviceModel::Flash(flash::fit_flash(samples, &mut notes))
    };
    let mut quality = quality(&model, samples, &service, notes);
    quality.latency_unseen = rotational && latency_unseen;
    Ok((model, quality))
}

/// Service time of each sample on a device that serves in issue order: from the later of
/// its issue and the previous completion, to its completion. `None` where completions came
/// out of issue order (the device reordered: not a FIFO server).
fn fifo_service(samples: &[ServiceSample]) -> Vec<Option<u64>> {
    samples
        .iter()
        .zip(previous_completions(samples))
        .map(|(s, prev_c)| {
            let start = s.d.max(prev_c);
            (s.c >= prev_c && s.c >= start).then(|| s.c - start)
        })
        .collect()
}

/// The latest completion, in issue order, before each sample: a sample dispatched after it
/// found the device idle.
fn previous_completions(samples: &[ServiceSample]) -> Vec<u64> {
    let mut prev_c = 0u64;
    samples
        .iter()
        .map(|s| {
            let before = prev_c;
            prev_c = prev_c.max(s.c);
            before
        })
        .collect()
}

/// The part of a `latency` that a request dispatched at `d`, behind a completion at
/// `prev_c`, shows in its service time (`C - max(D, prev_c)`): all of it when the device
/// was idle, none when the request waited longer than the latency, the rest in between.
fn shown_latency(latency: f64, d: u64, prev_c: u64) -> f64 {
    let (d, prev_c) = (d as f64, prev_c as f64);
    (d + latency).max(prev_c) - d.max(prev_c)
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Least squares y = a + b x; `None` when x does not vary.
fn linear_fit(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx <= f64::EPSILON * n {
        return None;
    }
    let b = sxy / sxx;
    Some((my - b * mx, b))
}

fn quality(
    model: &DeviceModel,
    samples: &[ServiceSample],
    service: &[Option<u64>],
    notes: Vec<String>,
) -> FitQuality {
    let mut head = None;
    let mut pairs: Vec<(f64, f64)> = Vec::new();
    let latency = model.latency_ns() as f64;
    let prev = previous_completions(samples);
    for ((s, svc), prev_c) in samples.iter().zip(service).zip(prev) {
        let observed = match model {
            DeviceModel::Flash(_) => Some((s.c - s.d) as f64),
            _ => svc.map(|v| v as f64),
        };
        if let (Some(h), Some(obs)) = (head, observed) {
            let pred = match model {
                DeviceModel::Flash(f) => {
                    model.service_ns(h, s.sector, s.sectors) as f64
                        * (f64::from(s.depth_at_d) / f64::from(f.parallelism)).max(1.0)
                }
                _ => {
                    model.service_ns(h, s.sector, s.sectors) as f64
                        + shown_latency(latency, s.d, prev_c)
                }
            };
            pairs.push((pred, obs));
        }
        if s.sectors > 0 {
            head = Some(s.sector + u64::from(s.sectors));
        }
    }
    let n = pairs.len() as f64;
    if pairs.is_empty() {
        return FitQuality {
            notes,
            ..Default::default()
        };
    }
    let mean_obs = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let ss_tot: f64 = pairs.iter().map(|p| (p.1 - mean_obs).powi(2)).sum();
    let ss_res: f64 = pairs.iter().map(|p| (p.1 - p.0).powi(2)).sum();
    let abs: f64 = pairs.iter().map(|p| (p.1 - p.0).abs()).sum::<f64>() / n;
    let sum_pred: f64 = pairs.iter().map(|p| p.0).sum();
    let sum_obs: f64 = pairs.iter().map(|p| p.1).sum();
    FitQuality {
        samples: pairs.len() as u64,
        r2: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        },
        mean_abs_error_pct: if mean_obs > 0.0 {
            100.0 * abs / mean_obs
        } else {
            0.0
        },
        total_error_pct: if sum_obs > 0.0 {
            100.0 * (sum_pred - sum_obs) / sum_obs
        } else {
            0.0
        },
        notes,
        latency_unseen: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_count_as_served_back_to_back() {
        // Three requests issued at once to a FIFO device, 1 ms each.
        let s = |d, c| ServiceSample {
            d,
            c,
            sector: 0,
            sectors: 8,
            write: false,
            depth_at_d: 1,
        };
        let svc = fifo_service(&[s(0, 1_000_000), s(0, 2_000_000), s(0, 3_000_000)]);
        assert_eq!(svc, vec![Some(1_000_000); 3]);
    }
}
