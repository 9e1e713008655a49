//! What a recording shows of merging: the merges it made, and those an elevator would have
//! made had merging been on.
//!
//! Owns: [`MergeEvidence`]. Must not: decide what a replay merges.

use rustc_hash::FxHashMap;
use serde::Serialize;

use iosched_core::{event::Op, timeline::BioLife};

use super::is_sync;

/// Merges the recording made, and those it could have made but did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MergeEvidence {
    /// Bios merged into a request (M or F).
    pub merged: u64,
    /// Bios queued while a request they continue (same op and sync-ness, ending where the
    /// bio starts) waited inserted and not yet issued: an elevator back-merges such a bio
    /// unless merging is off (`nomerges=2`).
    pub missed: u64,
}

impl MergeEvidence {
    /// Merging was off in the recording: an elevator had many chances and took none.
    /// (Under `none` requests do not wait where bios merge, so only with an elevator.)
    pub fn merging_off(&self, bios: usize) -> bool {
        self.merged == 0 && self.missed >= 20 && self.missed as f64 >= 0.05 * bios as f64
    }
}

/// [`MergeEvidence`] of bios sorted by Q.
pub(super) fn merge_evidence(bios: &[BioLife]) -> MergeEvidence {
    let mut ev = MergeEvidence::default();
    // Requests by end sector: (op, sync, inserted, issued) of the request the latest bio
    // ending there started or joined.
    let mut by_end: FxHashMap<u64, (Op, bool, u64, u64)> = FxHashMap::default();
    for b in bios {
        let Some(q) = b.q else { continue };
        let sync = is_sync(b.op, b.flags);
        if b.m.is_some() {
            ev.merged += 1;
        } else if b.bytes > 0
            && let Some(&(op, s, inserted, issued)) = by_end.get(&b.sector)
            && op == b.op
            && s == sync
            && inserted <= q
            && q < issued
        {
            ev.missed += 1;
        }
        if let (Some(i), Some(d)) = (b.i.or(b.g), b.d)
            && b.bytes > 0
        {
            by_end.insert(b.sector + u64::from(b.bytes >> 9), (b.op, sync, i, d));
        }
    }
    ev
}
