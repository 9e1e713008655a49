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

/// Fits a model to the trace's requests (in issue order). `rotational`: the device's sysfs
/// flag, which the trace's behaviour overrides where it is clear ([`seek_behaviour`]): a loop
/// device says rotational=1 whatever backs it, and a RAM disk must not be fitted as a
/// spinning one. `None` and no clear behaviour: rotational when long seeks cost over a
/// millisecond in the rotational fit.
pub fn fit(
    samples: &[ServiceSample],
    rotational: Option<bool>,
) -> Result<(DeviceModel, FitQuality), DeviceError> {
    if samples.is_empty() {
        return Err(DeviceError::NoSamples);
    }
    let mut notes = Vec::new();
    let service = fifo_service(samples);
    let behaviour = seek_behaviour(samples, &service);
    let flag = |r: Option<bool>| match r {
        Some(true) => "sysfs says rotational=1",
        Some(false) => "sysfs says rotational=0",
        None => "no sysfs flag",
    };
    let (decided, basis) = match (behaviour.verdict(), rotational) {
        (Some(b), r) => (
            Some(b),
            format!("by behaviour: {} ({})", behaviour.text(), flag(r)),
        ),
        (None, Some(r)) => (
            Some(r),
            format!(
                "by the sysfs flag (behaviour unclear: {})",
                behaviour.text()
            ),
        ),
        (None, None) => (
            None,
            format!(
                "by the fitted seek costs (behaviour unclear: {})",
                behaviour.text()
            ),
        ),
    };
    let (rot, latency_unseen) = if decided == Some(false) {
        // Not needed, and its notes (an assumed transfer rate) would not be true of this fit.
        (None, false)
    } else {
        let (rot, unseen) = rotational::fit_rotational(samples, &service, &mut notes);
        (Some(rot), unseen)
    };
    let rotational = decided.unwrap_or_else(|| {
        let far: Vec<f64> = rot.as_ref().expect("fitted when undecided").positioning_ns[20..]
            .iter()
            .flatten()
            .copied()
            .collect();
        !far.is_empty() && far.iter().sum::<f64>() / far.len() as f64 > 1e6
    });
    let model = match (rotational, rot) {
        (true, Some(rot)) => DeviceModel::Rotational(rot),
        _ => DeviceModel::Flash(flash::fit_flash(samples, &mut notes)),
    };
    let mut quality = quality(&model, samples, &service, notes);
    quality.latency_unseen = rotational && latency_unseen;
    quality.rotational_basis = basis;
    Ok((model, quality))
}

/// What seeks cost on this device against contiguous requests: their service times in issue
/// order ([`fifo_service`]), medians.
#[derive(Clone, Copy, Debug, Default)]
struct SeekBehaviour {
    /// Requests starting 8 MiB or more from where the previous one ended.
    far: usize,
    far_median_ns: f64,
    /// Requests starting where the previous one ended, or within 64 KiB.
    near: usize,
    near_median_ns: f64,
}

/// Seeks this far (sectors) are long ones: 8 MiB.
const FAR_SECTORS: u64 = 1 << 14;
/// And this near, none: 64 KiB.
const NEAR_SECTORS: u64 = 1 << 7;
/// Long seeks needed before the behaviour decides.
const MIN_FAR: usize = 50;

impl SeekBehaviour {
    /// Rotational if long seeks take over 1.5 ms, or 1 ms more than near requests; not if
    /// they take under 0.3 ms and no more than near ones plus 0.2 ms; else unclear.
    fn verdict(&self) -> Option<bool> {
        if self.far < MIN_FAR {
            return None;
        }
        let extra = (self.near >= MIN_FAR).then_some(self.far_median_ns - self.near_median_ns);
        if self.far_median_ns > 1.5e6 || extra.is_some_and(|e| e > 1e6) {
            Some(true)
        } else if self.far_median_ns < 0.3e6 && extra.is_none_or(|e| e < 0.2e6) {
            Some(false)
        } else {
            None
        }
    }

    fn text(&self) -> String {
        if self.far < MIN_FAR {
            return format!(
                "{} request(s) 8 MiB or more from the previous one",
                self.far
            );
        }
        let near = if self.near >= MIN_FAR {
            format!(
                ", near or contiguous ones {:.2} ms",
                self.near_median_ns / 1e6
            )
        } else {
            String::new()
        };
        format!(
            "requests 8 MiB or more from the previous one took {:.2} ms (median of {}){near}",
            self.far_median_ns / 1e6,
            self.far
        )
    }
}

fn seek_behaviour(samples: &[ServiceSample], service: &[Option<u64>]) -> SeekBehaviour {
    let mut far = Vec::new();
    let mut near = Vec::new();
    let mut head: Option<u64> = None;
    for (s, svc) in samples.iter().zip(service) {
        if let (Some(h), Some(t)) = (head, svc)
            && s.sectors > 0
        {
            let dist = s.sector.abs_diff(h);
            if dist >= FAR_SECTORS {
                far.push(*t as f64);
            } else if dist <= NEAR_SECTORS {
                near.push(*t as f64);
            }
        }
        if s.sectors > 0 {
            head = Some(s.sector + u64::from(s.sectors));
        }
    }
    SeekBehaviour {
        far: far.len(),
        far_median_ns: median(&mut far).unwrap_or(0.0),
        near: near.len(),
        near_median_ns: median(&mut near).unwrap_or(0.0),
    }
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
                    model.service_ns_of(h, s.sector, s.sectors, s.write) as f64
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
        rotational_basis: String::new(),
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
