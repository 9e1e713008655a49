//! What the simulator looks up by bio and by stream, built from one pass over the workload
//! before the run: the bios each Q and each completion releases, each process's program
//! order and open-loop bios, and when each process is taken to be gone ([`last_io_at`],
//! [`exits_promptly`]).

use std::num::NonZeroU32;

use iosched_core::event::{Op, ReqFlags};

use crate::workload::{Io, Trigger, Workload};

/// What the simulator looks up by bio and by stream, from one pass over the workload's
/// bios (a bio is ~70 bytes, a table of millions of them is read from memory each pass:
/// building each table in its own pass was a twentieth of a replay).
pub(super) struct BioIndex {
    /// Dependents by trigger, as lists in workload order: of bio `i`, the first bio its Q
    /// releases and the first its completion releases, and of each such bio the next one
    /// released by the same event. Entries are indices plus one: a table
    /// of `None` is zeroed memory, whose pages a workload without such triggers never
    /// touches.
    pub(super) after_q: Vec<Option<NonZeroU32>>,
    pub(super) after_c: Vec<Option<NonZeroU32>>,
    pub(super) sibling: Vec<Option<NonZeroU32>>,
    /// Open-loop bios by their time.
    pub(super) open: Vec<(u64, u32)>,
    /// Per bio its stream's next one, and per stream its first (`u32::MAX`: none).
    pub(super) next_of: Vec<u32>,
    pub(super) first_of: Vec<u32>,
    /// Per stream, [`exits_promptly`] and its last recorded completion.
    pub(super) prompt: Vec<bool>,
    pub(super) last_c: Vec<u64>,
}

/// Bio `j` as a list entry.
fn entry(j: usize) -> Option<NonZeroU32> {
    NonZeroU32::new(u32::try_from(j + 1).expect("bio indices are u32"))
}

/// The bio of a list entry.
pub(super) fn bio_of(entry: NonZeroU32) -> u32 {
    entry.get() - 1
}

impl BioIndex {
    pub(super) fn new(w: &Workload) -> BioIndex {
        let n = w.ios.len();
        let streams = w.streams.len();
        let mut after_q = vec![None; n];
        let mut after_c = vec![None; n];
        let mut sibling = vec![None; n];
        let mut open = Vec::new();
        let mut next_of = vec![u32::MAX; n];
        let mut first_of = vec![u32::MAX; streams];
        let mut prompt = vec![true; streams];
        let mut last_c = vec![0u64; streams];
        // Back to front: each bio goes to the head of its lists, which end in workload order.
        for (j, io) in w.ios.iter().enumerate().rev() {
            let first = match io.trigger {
                Trigger::At(t) => {
                    open.push((t, j as u32));
                    None
                }
                Trigger::AfterQueue { io, .. } => Some(&mut after_q[io as usize]),
                Trigger::AfterCompletion { io, .. } => Some(&mut after_c[io as usize]),
            };
            if let Some(first) = first {
                sibling[j] = std::mem::replace(first, entry(j));
            }
            let s = io.stream as usize;
            next_of[j] = std::mem::replace(&mut first_of[s], j as u32);
            prompt[s] &= waits_in_submit(io);
            last_c[s] = last_c[s].max(io.rec_c);
        }
        BioIndex {
            after_q,
            after_c,
            sibling,
            open,
            next_of,
            first_of,
            prompt,
            last_c,
        }
    }
}

/// When each stream's last recorded I/O completed, ns after `origin` ([`Ctx::last_io_at`]);
/// `u64::MAX` for a stream whose I/O ended before the last tenth of the workload
/// ([`crate::continuation::RAN_TO_END_SHARE`]). A process seen to linger after its last I/O
/// (BFQ's idle timer running out for it) is one whose job ended with the recording (fio's
/// `--runtime`); of one that stopped midway the trace says nothing of the kind: it is
/// taken as gone once its I/O is done, as before. (Completions, not Qs: a reader served in
/// BFQ's slices issues its last read at the end of its last slice, and waits for its turn.)
///
/// Also `u64::MAX` for a process that waited for each of its reads inside the call that
/// submitted it ([`waits_in_submit`]): nothing of its I/O is left to tear down, so it
/// exits as soon as its last read is back. The lingering above is an asynchronous
/// submitter's: in BFQ's logs of the test bed, eight fio libaio readers (`R` bios) each
/// exited (`exit_bfqq`) 28-34 ms after their last completion, past BFQ's 8 ms idle, while
/// of 32 fio psync readers (`RS`) 21 of the 27 exits logged came within 1.5 ms of their last
/// completion, the rest within 9 ms, and BFQ's idle timer never ran out for any of them.
///
/// [`Ctx::last_io_at`]: crate::sched::Ctx::last_io_at
pub(crate) fn last_io_at(w: &Workload, origin: u64) -> Vec<u64> {
    let mut last_c = vec![0u64; w.streams.len()];
    for io in &w.ios {
        let t = &mut last_c[io.stream as usize];
        *t = (*t).max(io.rec_c);
    }
    last_io_at_given(w, origin, &last_c, &exits_promptly(w))
}

/// [`last_io_at`] from each stream's last recorded completion and [`exits_promptly`]'s
/// answer (the simulator gathers both in its one pass over the bios, [`BioIndex`]).
pub(super) fn last_io_at_given(
    w: &Workload,
    origin: u64,
    last_c: &[u64],
    exits_promptly: &[bool],
) -> Vec<u64> {
    let span = w.end_ns.saturating_sub(w.start_ns) as f64;
    last_c
        .iter()
        .zip(exits_promptly)
        .map(|(&t, &prompt)| {
            let from_start = t.saturating_sub(w.start_ns) as f64;
            if prompt || from_start < crate::continuation::RAN_TO_END_SHARE * span {
                u64::MAX
            } else {
                t.saturating_sub(origin)
            }
        })
        .collect()
}

/// Whether each stream's process exits as soon as its last I/O is back: every bio of it is
/// a read it waited for inside the call that submitted it ([`waits_in_submit`]).
pub(crate) fn exits_promptly(w: &Workload) -> Vec<bool> {
    let mut prompt = vec![true; w.streams.len()];
    for io in &w.ios {
        prompt[io.stream as usize] &= waits_in_submit(io);
    }
    prompt
}

/// A read with REQ_SYNC: the kernel's `submit_bio_wait()` sets it on the bio it then sleeps
/// on (block/bio.c), and a synchronous direct read of a block device (`pread`, fio's psync:
/// `__blkdev_direct_IO_simple` in block/fops.c) goes through it; an asynchronous one
/// (libaio, io_uring: `__blkdev_direct_IO_async`) and page-cache reads do not set it.
fn waits_in_submit(io: &Io) -> bool {
    io.op == Op::Read && io.flags.has(ReqFlags::SYNC)
}
