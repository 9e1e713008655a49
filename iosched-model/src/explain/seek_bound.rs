//! Seek-bound: positioning's share of the device's time, by the device model. A note on the
//! workload, not a fault.
//!
//! What-ifs: none (the device model itself says it).
//!
//! Owns: this cause's what-ifs and their judgement. Must not: replay (the runner does), or word
//! the finding (the view does).

use super::super::replay::Replayer;
use super::{
    Finding,
    parts::Cause,
    runner::{Context, Diagnosis, Runs, WhatIf},
};

pub(super) struct SeekBound;

/// The disk spends `positioning_pct` of its busy time positioning (seeks and rotation).
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    pub positioning_pct: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Evidence {
    /// The device model: fitted from the trace's service times of this many requests.
    FittedOn { requests: usize },
}

impl Diagnosis for SeekBound {
    fn what_ifs(&self, _: &Context) -> Vec<WhatIf> {
        Vec::new()
    }

    fn judge(&self, cx: &Context, _: &Runs, _: &[Finding]) -> Vec<Finding> {
        match positioning_share(cx.r) {
            Some(share) if share > 0.5 => vec![Finding::new(
                Cause::SeekBound,
                Claim {
                    positioning_pct: share * 100.0,
                },
                vec![
                    Evidence::FittedOn {
                        requests: cx.r.workload.service.len(),
                    }
                    .into(),
                ],
                None,
            )],
            _ => Vec::new(),
        }
    }
}

/// Share of the device's modelled service time spent positioning (rotational only).
fn positioning_share(r: &Replayer) -> Option<f64> {
    if !r.device.rotational() {
        return None;
    }
    let mut head = None;
    let (mut pos, mut total) = (0.0, 0.0);
    for s in &r.workload.service {
        if let Some(h) = head {
            let t = r.device.service_ns(h, s.sector, s.sectors) as f64;
            let stream = r.device.service_ns(s.sector, s.sector, s.sectors) as f64;
            pos += t - stream;
            total += t;
        }
        head = Some(s.sector + u64::from(s.sectors));
    }
    (total > 0.0).then(|| pos / total)
}
