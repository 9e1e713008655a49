//! Kyber (block/kyber-iosched.c, 4.18+): requests in FIFO order per domain (read, write,
//! discard, other); each domain has a token pool bounding its requests in the driver;
//! domains are served round robin in batches (16, 8, 1, 1).
//!
//! Not modelled yet: the depth adaptation from latency percentiles (the pools stay at their
//! initial depths, or at depths given as `read_depth`, `write_depth`, ...: those a trace's
//! `kyber_adjust` events show Kyber had reached), so the model shows Kyber's ordering and its
//! caps, not how its throttling evolves under a latency target.

use std::collections::VecDeque;

use iosched_core::event::Op;

use super::{Ctx, Decided, Decision, RqId, Scheduler, SettingError, Settings};

const DOMAINS: usize = 4;
const NAMES: [&str; DOMAINS] = ["read", "write", "discard", "other"];
const DEPTH: [u32; DOMAINS] = [256, 128, 64, 16];
const BATCH: [u32; DOMAINS] = [16, 8, 1, 1];

/// The latency targets (the kernel's tunables), and the domains' depths (model-only: the
/// depths Kyber's adaptation had reached, as a trace's `kyber_adjust` events show them;
/// default the initial `kyber_depth`).
pub const KEYS: &[&str] = &[
    "read_lat_nsec",
    "write_lat_nsec",
    "read_depth",
    "write_depth",
    "discard_depth",
    "other_depth",
];

pub struct Kyber {
    fifo: [VecDeque<RqId>; DOMAINS],
    in_driver: [u32; DOMAINS],
    depth: [u32; DOMAINS],
    cur: usize,
    batch: u32,
    domain_of: Vec<u8>,
    decisions: Vec<Decided>,
    throttled: [bool; DOMAINS],
}

impl Kyber {
    pub fn new(s: &Settings) -> Result<Kyber, SettingError> {
        s.check("kyber", KEYS)?;
        // Accepted for compatibility with the recorded tunables; see the module doc.
        s.u64_or("read_lat_nsec", 2_000_000)?;
        s.u64_or("write_lat_nsec", 10_000_000)?;
        let mut depth = DEPTH;
        for (d, name) in NAMES.iter().enumerate() {
            depth[d] = s
                .u64_or(&format!("{name}_depth"), u64::from(DEPTH[d]))?
                .clamp(1, u64::from(DEPTH[d])) as u32;
        }
        Ok(Kyber {
            fifo: Default::default(),
            in_driver: [0; DOMAINS],
            depth,
            cur: 0,
            batch: 0,
            domain_of: Vec::new(),
            decisions: Vec::new(),
            throttled: [false; DOMAINS],
        })
    }

    fn domain(op: Op) -> usize {
        match op {
            Op::Read => 0,
            Op::Write | Op::WriteZeroes | Op::ZoneAppend => 1,
            Op::Discard | Op::SecureErase => 2,
            _ => 3,
        }
    }
}

impl Scheduler for Kyber {
    fn name(&self) -> &'static str {
        "kyber"
    }

    fn allow_merge(&self, _ctx: &Ctx, rq: RqId, _stream: u32, _sync: bool) -> bool {
        // Merges only within the last 8 of the (per-CPU) domain list.
        let d = self
            .domain_of
            .get(rq as usize)
            .map_or(0, |d| usize::from(*d));
        self.fifo[d].iter().rev().take(8).any(|r| *r == rq)
    }

    fn insert(&mut self, ctx: &Ctx, rq: RqId) {
        let d = Self::domain(ctx.rqs[rq as usize].op);
        if self.domain_of.len() <= rq as usize {
            self.domain_of.resize(rq as usize + 1, 0);
        }
        self.domain_of[rq as usize] = d as u8;
        self.fifo[d].push_back(rq);
    }

    fn dispatch(&mut self, ctx: &Ctx) -> Option<RqId> {
        for step in 0..=DOMAINS {
            let d = (self.cur + step) % DOMAINS;
            if step > 0 {
                self.batch = 0;
            }
            if self.fifo[d].is_empty() || (step == 0 && self.batch >= BATCH[d]) {
                continue;
            }
            if self.in_driver[d] >= self.depth[d] {
                if !self.throttled[d] {
                    self.throttled[d] = true;
                    self.decisions.push(Decided {
                        t: ctx.now,
                        d: Decision::Throttled { domain: NAMES[d] },
                    });
                }
                continue;
            }
            self.throttled[d] = false;
            self.cur = d;
            self.batch += 1;
            self.in_driver[d] += 1;
            return self.fifo[d].pop_front();
        }
        None
    }

    fn completed(&mut self, _ctx: &Ctx, rq: RqId) {
        if let Some(d) = self.domain_of.get(rq as usize) {
            let d = usize::from(*d);
            self.in_driver[d] = self.in_driver[d].saturating_sub(1);
        }
    }

    fn has_work(&self) -> bool {
        self.fifo.iter().any(|f| !f.is_empty())
    }

    fn take_decisions(&mut self) -> Vec<Decided> {
        std::mem::take(&mut self.decisions)
    }
}
