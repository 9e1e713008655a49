//! blktrace interoperability: its binary format ([`format`]), our events <-> its records
//! ([`map`]), reading its per-CPU files and merged dumps as a [`crate::source::TraceSource`]
//! ([`read`], identities by [`pairing`]), and writing our events as its files ([`write`],
//! [`export`]). Spec and the list of conversion losses: docs/BLKTRACE.md.

pub mod format;
pub mod map;
pub mod pairing;
pub mod read;
pub mod write;

use std::path::Path;

pub use read::BlktraceSource;
pub use write::{BlktraceWriter, WriteError, WriteSummary};

use crate::source::{InputError, TraceSource};

/// What blktrace files cannot hold, for the converter's output and the docs.
pub const LOSSES: &[&str] = &[
    "request and bio identities: kernel pointers become synthetic ids, found again by pairing \
     (device, sector, size) as btt does",
    "tgid (read back as the pid), cgroup ids and paths, I/O priority",
    "op detail: write zeroes and zone ops read back as writes, secure erase as discard; flags \
     other than SYNC, META, FUA, RAHEAD, PREFLUSH",
    "events blktrace has no action for: io_start/io_done, bio_in_rq links (rebuilt from \
     merges when read back), kyber and wbt events, scheduler wakeups (`--wakeups`)",
    "recording metadata: host, kernel, device settings and scheduler tunables, loss counters",
];

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Read(#[from] InputError),
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Writes every event and note of `source` as blktrace files into `dir`.
pub fn export(source: &mut dyn TraceSource, dir: &Path) -> Result<WriteSummary, ExportError> {
    let clock = source.header().map(|h| h.clock);
    let mut writer = BlktraceWriter::create(dir, &source.meta().devices, clock)?;
    let mut notes_written = 0;
    while let Some(ev) = source.next_event() {
        let ev = ev?;
        let notes = source.notes();
        for note in &notes[notes_written..] {
            writer.note(note)?;
        }
        notes_written = notes.len();
        writer.push(&ev)?;
    }
    for note in &source.notes()[notes_written..] {
        writer.note(note)?;
    }
    Ok(writer.finish()?)
}

#[cfg(test)]
mod tests;
