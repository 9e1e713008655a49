//! Writing a recording: events and process entries are buffered and written as checksummed
//! chunks, so whatever reaches the disk before a kill -9 or a full disk reads back.

use std::io::Write;

use super::{
    Footer, FormatError, Header, ProcessInfo, Stats,
    codec::{self, EVENT_RECORD_SIZE, EVENTS_PREFIX_LEN, MAX_CHUNK_PAYLOAD, chunk_type},
    kind_counts,
};
use crate::event::{Event, EventKind};

/// Events per EVENTS chunk by default: about 64 KiB of records.
pub const DEFAULT_CHUNK_EVENTS: usize =
    ((64 << 10) - codec::CHUNK_HEADER_LEN - EVENTS_PREFIX_LEN) / EVENT_RECORD_SIZE as usize;
/// Chunk header and EVENTS prefix, in front of an EVENTS chunk's records.
const EVENTS_HEAD: usize = codec::CHUNK_HEADER_LEN + EVENTS_PREFIX_LEN;
/// Bytes of a full EVENTS chunk at the default size.
pub const DEFAULT_CHUNK_BYTES: usize =
    EVENTS_HEAD + DEFAULT_CHUNK_EVENTS * EVENT_RECORD_SIZE as usize;
/// Process entries per PROCESSES chunk (keeps chunks small however many tasks appear at once).
const CHUNK_PROCESSES: usize = 512;

/// Writes a recording to `W` (usually a `BufWriter<File>`).
///
/// Nothing is lost silently: if writing a chunk fails, the chunk is dropped, the error
/// returned and its events counted in [`events_dropped`](Self::events_dropped); later chunks
/// keep their event indices, so readers see and report the gap.
pub struct RecordingWriter<W: Write> {
    w: W,
    chunk_events: usize,
    /// The pending EVENTS chunk: [`EVENTS_HEAD`] bytes kept for its chunk header and events
    /// prefix, then the encoded records. Built in place, a chunk is handed to `W` in one
    /// write: a chunk is larger than the recorder's `BufWriter`, which then passes it
    /// straight to the file rather than copying it (about a tenth of the recorder's time
    /// went to that copy).
    pending: Vec<u8>,
    pending_count: usize,
    pending_kinds: [u64; EventKind::ALL.len()],
    pending_processes: Vec<ProcessInfo>,
    /// Index of the next event pushed (= events pushed so far).
    next_index: u64,
    written_kinds: [u64; EventKind::ALL.len()],
    events_written: u64,
    events_dropped: u64,
    bytes_written: u64,
}

impl<W: Write> RecordingWriter<W> {
    /// Writes the file header and the HEADER chunk. `format_version` and `event_record_size`
    /// of `header` are set to what this writer writes.
    pub fn new(w: W, header: &Header) -> Result<Self, FormatError> {
        let mut this = RecordingWriter {
            w,
            chunk_events: DEFAULT_CHUNK_EVENTS,
            pending: vec![0; EVENTS_HEAD],
            pending_count: 0,
            pending_kinds: [0; EventKind::ALL.len()],
            pending_processes: Vec::new(),
            next_index: 0,
            written_kinds: [0; EventKind::ALL.len()],
            events_written: 0,
            events_dropped: 0,
            bytes_written: 0,
        };
        let mut header = header.clone();
        header.format_version = format!("{}.{}", codec::FORMAT_MAJOR, codec::FORMAT_MINOR);
        header.event_record_size = EVENT_RECORD_SIZE;
        let json = to_json("the header", &header)?;
        this.w.write_all(&codec::file_header())?;
        this.bytes_written += codec::FILE_HEADER_LEN as u64;
        this.write_chunk(chunk_type::HEADER, &[&json])?;
        Ok(this)
    }

    /// Events per EVENTS chunk (at least 1). Smaller chunks lose less on a crash and cost a
    /// 32-byte overhead each.
    pub fn with_chunk_events(mut self, n: usize) -> Self {
        let max = (MAX_CHUNK_PAYLOAD as usize - EVENTS_PREFIX_LEN) / EVENT_RECORD_SIZE as usize;
        self.chunk_events = n.clamp(1, max);
        self
    }

    /// Buffers `ev`; writes an EVENTS chunk (after any pending process entries) when the
    /// buffer is full.
    pub fn push(&mut self, ev: &Event) -> Result<(), FormatError> {
        codec::encode_event(ev, &mut self.pending);
        self.pending_count += 1;
        self.pending_kinds[usize::from(ev.kind.code() - 1)] += 1;
        self.next_index += 1;
        if self.pending_count >= self.chunk_events {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Buffers a process-table entry; it is written with the next chunk flush.
    pub fn add_process(&mut self, p: &ProcessInfo) -> Result<(), FormatError> {
        self.pending_processes.push(p.clone());
        Ok(())
    }

    /// Writes pending data, then the notes (scheduler messages) as one NOTES chunk, or
    /// several if they are many.
    pub fn write_notes(&mut self, notes: &[crate::event::Note]) -> Result<(), FormatError> {
        self.write_pending()?;
        for group in notes.chunks(4096) {
            let json = to_json("notes", group)?;
            self.write_chunk(chunk_type::NOTES, &[&json])?;
        }
        Ok(())
    }

    /// Writes pending data, then a CPU chunk holding `sample` (format 1.5: readers collect
    /// them all, in file order).
    pub fn write_cpu(&mut self, sample: &super::CpuSample) -> Result<(), FormatError> {
        self.write_pending()?;
        let json = to_json("a CPU sample", sample)?;
        self.write_chunk(chunk_type::CPU, &[&json])
    }

    /// Writes pending data, then a STATS chunk (readers keep the last one).
    pub fn write_stats(&mut self, s: &Stats) -> Result<(), FormatError> {
        self.write_pending()?;
        let json = to_json("statistics", s)?;
        self.write_chunk(chunk_type::STATS, &[&json])
    }

    /// Writes pending process entries and events as chunks and flushes `W`. Call it about
    /// once a second: a kill -9 then loses at most what was pushed since.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.write_pending()?;
        self.w.flush()?;
        Ok(())
    }

    /// Bytes handed to `W` so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Events pushed so far (written, pending or dropped).
    pub fn events_pushed(&self) -> u64 {
        self.next_index
    }

    /// Events in chunks written successfully.
    pub fn events_written(&self) -> u64 {
        self.events_written
    }

    /// Events whose chunk could not be written.
    pub fn events_dropped(&self) -> u64 {
        self.events_dropped
    }

    /// A footer with this writer's event counts (after the pending events are written, which
    /// [`finish`](Self::finish) does).
    pub fn footer(&self, stats: Stats, duration_ns: u64, ended_by: &str) -> Footer {
        let mut kinds = self.written_kinds;
        for (k, p) in kinds.iter_mut().zip(self.pending_kinds) {
            *k += p;
        }
        Footer {
            events_per_kind: kind_counts(&kinds),
            events_total: self.next_index,
            stats,
            duration_ns,
            ended_by: ended_by.to_string(),
        }
    }

    pub fn get_ref(&self) -> &W {
        &self.w
    }

    /// Writes pending data and the FOOTER chunk, flushes and returns `W`.
    pub fn finish(mut self, footer: &Footer) -> Result<W, FormatError> {
        self.write_pending()?;
        let json = to_json("the footer", footer)?;
        self.write_chunk(chunk_type::FOOTER, &[&json])?;
        self.w.flush()?;
        Ok(self.w)
    }

    fn write_pending(&mut self) -> Result<(), FormatError> {
        let processes = std::mem::take(&mut self.pending_processes);
        for group in processes.chunks(CHUNK_PROCESSES) {
            let json = to_json("process entries", group)?;
            self.write_chunk(chunk_type::PROCESSES, &[&json])?;
        }
        if self.pending_count == 0 {
            return Ok(());
        }
        let count = self.pending_count;
        let first = self.next_index - count as u64;
        let kinds = std::mem::replace(&mut self.pending_kinds, [0; EventKind::ALL.len()]);
        let mut chunk = std::mem::take(&mut self.pending);
        self.pending_count = 0;
        let prefix = codec::events_prefix(first, count as u32);
        let header = codec::chunk_header(chunk_type::EVENTS, &[&prefix, &chunk[EVENTS_HEAD..]]);
        chunk[..codec::CHUNK_HEADER_LEN].copy_from_slice(&header);
        chunk[codec::CHUNK_HEADER_LEN..EVENTS_HEAD].copy_from_slice(&prefix);
        let result = self.w.write_all(&chunk).map_err(FormatError::from);
        if result.is_ok() {
            self.bytes_written += chunk.len() as u64;
        }
        match result {
            Ok(()) => {
                self.events_written += count as u64;
                for (k, n) in self.written_kinds.iter_mut().zip(kinds) {
                    *k += n;
                }
            }
            Err(_) => self.events_dropped += count as u64,
        }
        // Reuse the allocation for the next chunk.
        self.pending = chunk;
        self.pending.truncate(EVENTS_HEAD);
        result
    }

    fn write_chunk(&mut self, typ: u32, parts: &[&[u8]]) -> Result<(), FormatError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > MAX_CHUNK_PAYLOAD as usize {
            return Err(FormatError::Encode {
                what: "a chunk",
                reason: format!(
                    "{len} bytes is more than the {MAX_CHUNK_PAYLOAD}-byte chunk limit"
                ),
            });
        }
        self.w.write_all(&codec::chunk_header(typ, parts))?;
        for part in parts {
            self.w.write_all(part)?;
        }
        self.bytes_written += (codec::CHUNK_HEADER_LEN + len) as u64;
        Ok(())
    }
}

fn to_json<T: serde::Serialize + ?Sized>(
    what: &'static str,
    v: &T,
) -> Result<Vec<u8>, FormatError> {
    serde_json::to_vec(v).map_err(|e| FormatError::Encode {
        what,
        reason: e.to_string(),
    })
}
