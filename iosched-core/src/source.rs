//! Any trace we can analyze, behind one interface: our own recordings ([`RecordingSource`]),
//! blktrace's per-CPU files (`blktrace::BlktraceSource`), events in memory
//! ([`MemorySource`]). Analyses (`report`, `live`, `explain`) read a [`TraceSource`] and never
//! care which format it came from, except where the format limits what can be known
//! ([`Identity`]). Opening a path of either format is `trace_file`'s, above both readers.
//!
//! Owns: the source interface, time-ordering a recording's events. Must not: analyze, know
//! blktrace.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufReader, Read},
    path::{Path, PathBuf},
};

use crate::{
    event::{Event, Note},
    record::{
        ChunkOrdered, CpuSample, DeviceInfo, EventRef, Footer, FormatError, Header, ProcessInfo,
        RecordingReader, Stats, TimeOrdered,
    },
};

/// Which file format a trace came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// `iosched-trace record`'s own format (docs/FORMAT.md).
    Recording,
    /// blktrace's binary per-CPU files.
    Blktrace,
}

/// How events name the request they are about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Kernel `struct request *` / `struct bio *`: exact.
    Exact,
    /// The format has no identity; the reader paired events by (device, sector, size) as btt
    /// does and gave each pairing a synthetic id. Ambiguous when two requests cover the same
    /// sectors at once.
    PairedBySector,
}

/// What is known about a trace before reading its events.
#[derive(Clone, Debug)]
pub struct TraceMeta {
    pub path: PathBuf,
    pub format: TraceFormat,
    pub identity: Identity,
    /// Devices as the trace describes them (a blktrace trace only knows major:minor).
    pub devices: Vec<DeviceInfo>,
    pub kernel_release: Option<String>,
    /// Free-form remarks (recorder notes, conversion losses).
    pub notes: Vec<String>,
}

/// A trace being read, events in time order.
pub trait TraceSource {
    fn meta(&self) -> &TraceMeta;
    /// The next event in time order; `None` at the end. After an error, the source ends.
    fn next_event(&mut self) -> Option<Result<Event, InputError>>;
    /// Appends up to `max` next events to `out` (fewer only at the end); the fast path for
    /// whole-trace analyses, which would otherwise pay a dynamic call per event.
    fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<(), InputError> {
        for _ in 0..max {
            match self.next_event() {
                Some(ev) => out.push(ev?),
                None => break,
            }
        }
        Ok(())
    }
    /// Processes known so far (complete once the events are exhausted).
    fn processes(&self) -> &BTreeMap<u32, ProcessInfo>;
    /// Text notes read so far (scheduler messages), in time order.
    fn notes(&self) -> &[Note];
    /// Events the recorder lost (ring buffer full, or skipped by the kernel), if the trace says.
    fn lost(&self) -> Option<u64>;
    /// Problems met while reading that did not stop it (skipped chunks, late events...).
    fn warnings(&self) -> Vec<String>;
    /// The recording's header, for formats that have one.
    fn header(&self) -> Option<&Header> {
        None
    }
    /// The recorder's loss and error counters, for formats that keep them.
    fn stats(&self) -> Option<&Stats> {
        None
    }
    /// The recording's footer, if it was closed cleanly (formats that have one).
    fn footer(&self) -> Option<&Footer> {
        None
    }
    /// Events known to be missing from the file itself (damaged chunks).
    fn events_missing(&self) -> u64 {
        0
    }
    /// The machine's CPU samples read so far (format 1.5's CPU chunks), in time order; empty
    /// for formats and recordings without them.
    fn cpu_samples(&self) -> &[crate::record::CpuSample] {
        &[]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Recording(#[from] FormatError),
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

impl InputError {
    /// Not an error: a recording still being written has nothing more yet
    /// ([`FormatError::is_waiting`]); reading again later goes on.
    pub fn is_waiting(&self) -> bool {
        matches!(self, InputError::Recording(e) if e.is_waiting())
    }
}

/// How long after an event the recorder has surely stored it: its checkpoints take the
/// kernel's counters as settled half a second back (CPUs hand their staged events over
/// within tens of milliseconds). Its CPU samples, on the trace clock every 100 ms, thus say
/// that no event older than this before them is still to come
/// ([`RecordingSource::release_by_writer_clock`]).
pub const WRITER_SETTLED_NS: u64 = 500_000_000;

/// A recording of ours, events put in time order by [`ChunkOrdered`] (what [`TimeOrdered`]
/// does, a chunk at a time).
///
/// Over an input that pauses (a recording still being written, read through
/// [`crate::follow::FollowInput`]), a read that finds no event released and nothing more to
/// read yet returns the error [`InputError::is_waiting`] recognizes, and the source goes on
/// where it was when called again: events are released as they would be from the whole
/// file, since the reordering window only moves with the events read.
pub struct RecordingSource<R: Read = BufReader<File>> {
    meta: TraceMeta,
    reader: RecordingReader<R>,
    ordered: Ordered,
    /// A read error, held back until the events read before it are taken.
    error: Option<FormatError>,
    /// The last fill stopped because the input has nothing more yet.
    waiting: bool,
    /// A copy of every event read, in arrival order, until taken
    /// ([`keep_arrivals`](Self::keep_arrivals)).
    arrivals: Option<Vec<Event>>,
    /// Events that were in the file when scanned but not when decoded (see
    /// [`RecordingReader::event_at`]).
    vanished: u64,
    notes: Vec<Note>,
}

/// The reordering window's contents: whole events, or for a mapped file (the usual case)
/// references to them, decoded as they leave. A window holds 100 ms of events (tens of
/// megabytes of decoded events at a high rate): cycling them through the cache cost more
/// than anything else `report` did, and references are an eighth of the size.
enum Ordered {
    Events {
        ordered: ChunkOrdered<Event>,
        /// The last chunk read, in arrival order (reused).
        arrived: Vec<Event>,
    },
    Refs {
        ordered: ChunkOrdered<EventRef>,
        arrived: Vec<EventRef>,
        /// Released references being decoded (reused).
        out: Vec<EventRef>,
    },
}

impl Ordered {
    fn ready(&self) -> usize {
        match self {
            Ordered::Events { ordered, .. } => ordered.ready(),
            Ordered::Refs { ordered, .. } => ordered.ready(),
        }
    }

    fn is_done(&self) -> bool {
        match self {
            Ordered::Events { ordered, .. } => ordered.is_done(),
            Ordered::Refs { ordered, .. } => ordered.is_done(),
        }
    }

    fn finish(&mut self) {
        match self {
            Ordered::Events { ordered, .. } => ordered.finish(),
            Ordered::Refs { ordered, .. } => ordered.finish(),
        }
    }

    fn late(&self) -> u64 {
        match self {
            Ordered::Events { ordered, .. } => ordered.late(),
            Ordered::Refs { ordered, .. } => ordered.late(),
        }
    }

    fn release_before(&mut self, watermark_ns: u64) {
        match self {
            Ordered::Events { ordered, .. } => ordered.release_before(watermark_ns),
            Ordered::Refs { ordered, .. } => ordered.release_before(watermark_ns),
        }
    }
}

/// How many events ahead of decoding their records are prefetched: far enough to hide a
/// memory access, near enough to stay in the cache.
const PREFETCH_AHEAD: usize = 16;

impl<R: Read> RecordingSource<R> {
    pub fn new(path: &Path, reader: RecordingReader<R>) -> Self {
        Self::with_window(
            path,
            reader,
            TimeOrdered::<std::iter::Empty<Event>>::DEFAULT_WINDOW_NS,
            TimeOrdered::<std::iter::Empty<Event>>::DEFAULT_MAX_HELD,
        )
    }

    /// With the reordering window of [`TimeOrdered::with_window`].
    pub fn with_window(
        path: &Path,
        reader: RecordingReader<R>,
        window_ns: u64,
        max_held: usize,
    ) -> Self {
        let h = reader.header();
        let meta = TraceMeta {
            path: path.to_path_buf(),
            format: TraceFormat::Recording,
            identity: Identity::Exact,
            devices: h.devices.clone(),
            kernel_release: Some(h.kernel_release.clone()).filter(|k| !k.is_empty()),
            notes: h.notes.clone(),
        };
        let ordered = if reader.is_mapped() {
            Ordered::Refs {
                ordered: ChunkOrdered::with_window(window_ns, max_held),
                arrived: Vec::new(),
                out: Vec::new(),
            }
        } else {
            Ordered::Events {
                ordered: ChunkOrdered::with_window(window_ns, max_held),
                arrived: Vec::new(),
            }
        };
        RecordingSource {
            meta,
            reader,
            ordered,
            error: None,
            waiting: false,
            arrivals: None,
            vanished: 0,
            notes: Vec::new(),
        }
    }

    fn reader(&self) -> &RecordingReader<R> {
        &self.reader
    }

    /// From now on, keeps a copy of each event read, in arrival order (before reordering),
    /// for [`take_arrivals`](Self::take_arrivals): what `report --follow`'s interval lines
    /// are made of, ahead of the reordering window that holds the last events back until
    /// newer ones come. Take them after each read: they are kept until taken.
    pub fn keep_arrivals(&mut self) {
        self.arrivals.get_or_insert_with(Vec::new);
    }

    /// Moves the events read since the last call to `out`, in arrival order (nothing unless
    /// [`keep_arrivals`](Self::keep_arrivals) was called).
    pub fn take_arrivals(&mut self, out: &mut Vec<Event>) {
        if let Some(arrivals) = &mut self.arrivals {
            out.append(arrivals);
        }
    }

    /// For a recording still being written, where no event comes for a while (idle
    /// devices): releases the events held for reordering that are older than
    /// [`WRITER_SETTLED_NS`] before the recorder's last CPU sample (its clock, every
    /// 100 ms), rather than waiting for a newer event. The recorder has stored every event
    /// that old by then; one that comes later anyway is released late, out of time order
    /// (and counted in the warnings), so a reader that must give exactly what the finished
    /// file gives does not call this.
    pub fn release_by_writer_clock(&mut self) {
        if self.ordered.is_done() {
            return;
        }
        if let Some(sample) = self.reader.cpu_samples().last() {
            let watermark = sample.ts_ns.saturating_sub(WRITER_SETTLED_NS);
            self.ordered.release_before(watermark);
        }
    }

    /// Events released in time order and not taken yet.
    pub fn ready(&self) -> usize {
        self.ordered.ready()
    }

    /// See [`RecordingReader::mark_still_written`].
    pub fn mark_still_written(&mut self) {
        self.reader.mark_still_written();
    }

    /// Reads chunks until some events are released, the input ends, or it has nothing more
    /// yet ([`InputError::is_waiting`]: then `waiting` is set). A read error ends the input
    /// (everything held is released) and is kept for the caller.
    fn fill(&mut self) {
        self.waiting = false;
        while self.ordered.ready() == 0 && !self.ordered.is_done() {
            let read = match &mut self.ordered {
                Ordered::Events { ordered, arrived } => {
                    let read = self.reader.next_events(arrived);
                    if let Some(Ok(_)) = read {
                        if let Some(copy) = &mut self.arrivals {
                            copy.extend_from_slice(arrived);
                        }
                        ordered.push_chunk(arrived);
                    }
                    read
                }
                Ordered::Refs {
                    ordered, arrived, ..
                } => {
                    let read = self.reader.next_event_refs(arrived);
                    if let Some(Ok(_)) = read {
                        if let Some(copy) = &mut self.arrivals {
                            copy.extend(arrived.iter().filter_map(|r| self.reader.event_at(*r)));
                        }
                        ordered.push_chunk(arrived);
                    }
                    read
                }
            };
            match read {
                Some(Ok(_)) => {}
                Some(Err(e)) if e.is_waiting() => {
                    self.waiting = true;
                    return;
                }
                Some(Err(e)) => {
                    self.error = Some(e);
                    self.ordered.finish();
                }
                None => self.ordered.finish(),
            }
        }
    }

    /// Moves up to `max` released events to `out`.
    fn take(&mut self, out: &mut Vec<Event>, max: usize) {
        match &mut self.ordered {
            Ordered::Events { ordered, .. } => ordered.take(out, max),
            Ordered::Refs {
                ordered, out: refs, ..
            } => {
                refs.clear();
                ordered.take(refs, max);
                out.reserve(refs.len());
                for (i, r) in refs.iter().enumerate() {
                    if let Some(ahead) = refs.get(i + PREFETCH_AHEAD) {
                        self.reader.prefetch(*ahead);
                    }
                    match self.reader.event_at(*r) {
                        Some(ev) => out.push(ev),
                        None => self.vanished += 1,
                    }
                }
            }
        }
    }
}

impl<R: Read> TraceSource for RecordingSource<R> {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        let mut one = Vec::with_capacity(1);
        loop {
            self.fill();
            if self.ordered.ready() == 0 {
                if self.waiting {
                    return Some(Err(FormatError::waiting().into()));
                }
                return self.error.take().map(|e| Err(InputError::Recording(e)));
            }
            self.take(&mut one, 1);
            if let Some(ev) = one.pop() {
                return Some(Ok(ev));
            }
        }
    }

    fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<(), InputError> {
        let start = out.len();
        while out.len() - start < max {
            self.fill();
            if self.ordered.ready() == 0 {
                break;
            }
            self.take(out, max - (out.len() - start));
        }
        if self.waiting && out.len() == start {
            return Err(FormatError::waiting().into());
        }
        match self.error.take() {
            Some(e) if out.len() == start => Err(InputError::Recording(e)),
            // Events read before the error go first; the error comes with the next batch.
            Some(e) => {
                self.error = Some(e);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        self.reader().processes()
    }

    fn notes(&self) -> &[Note] {
        if self.notes.is_empty() {
            self.reader().notes()
        } else {
            &self.notes
        }
    }

    fn lost(&self) -> Option<u64> {
        self.reader().stats().map(|s| s.lost())
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.reader().warnings().to_vec();
        // A reader marked still written says itself why there is no footer.
        if self.reader().footer().is_none() && !self.reader.still_written() {
            w.push("recording was not closed cleanly (no footer): the end may be missing".into());
        }
        if self.vanished > 0 {
            w.push(format!(
                "{} events changed in the file while it was read (it was overwritten): skipped",
                self.vanished
            ));
        }
        if self.ordered.late() > 0 {
            w.push(format!(
                "{} events arrived later than the reordering window and were taken out of time \
                 order",
                self.ordered.late()
            ));
        }
        w
    }

    fn header(&self) -> Option<&Header> {
        Some(self.reader().header())
    }

    fn stats(&self) -> Option<&Stats> {
        self.reader().stats()
    }

    fn footer(&self) -> Option<&Footer> {
        self.reader().footer()
    }

    fn events_missing(&self) -> u64 {
        self.reader().events_missing()
    }

    fn cpu_samples(&self) -> &[CpuSample] {
        self.reader().cpu_samples()
    }
}

/// Events already in memory (tests, synthetic traces, the live view's batches).
pub struct MemorySource {
    meta: TraceMeta,
    events: std::vec::IntoIter<Event>,
    processes: BTreeMap<u32, ProcessInfo>,
    cpu_samples: Vec<CpuSample>,
}

impl MemorySource {
    /// `events` must be in time order.
    pub fn new(devices: Vec<DeviceInfo>, events: Vec<Event>) -> MemorySource {
        MemorySource {
            meta: TraceMeta {
                path: PathBuf::from("(memory)"),
                format: TraceFormat::Recording,
                identity: Identity::Exact,
                devices,
                kernel_release: None,
                notes: Vec::new(),
            },
            events: events.into_iter(),
            processes: BTreeMap::new(),
            cpu_samples: Vec::new(),
        }
    }

    /// With the machine's CPU samples (in time order), as a 1.5 recording's CPU chunks give
    /// them.
    pub fn with_cpu_samples(mut self, samples: Vec<CpuSample>) -> MemorySource {
        self.cpu_samples = samples;
        self
    }
}

impl TraceSource for MemorySource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        self.events.next().map(Ok)
    }

    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        &self.processes
    }

    fn notes(&self) -> &[Note] {
        &[]
    }

    fn lost(&self) -> Option<u64> {
        Some(0)
    }

    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    fn cpu_samples(&self) -> &[CpuSample] {
        &self.cpu_samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        RecordingWriter,
        test_support::{event_at, sample_header, sample_stats},
    };

    /// A recording of events arriving out of order across chunk boundaries (as per-CPU
    /// drains do), with one event later than the window; and its events in arrival order.
    fn disordered_recording() -> (Vec<u8>, Vec<Event>) {
        let mut events = Vec::new();
        for i in 0..3000u64 {
            // Two "CPUs" whose drains interleave 40 events at a time, 3 ms apart.
            let cpu = (i / 40) % 2;
            let ts = 10_000_000 + i * 100_000 - cpu * 3_000_000;
            events.push(event_at(ts, i));
        }
        events[2500].ts_ns = 1_000; // far behind the window: late
        let mut w = RecordingWriter::new(Vec::new(), &sample_header())
            .unwrap()
            .with_chunk_events(37);
        for ev in &events {
            w.push(ev).unwrap();
        }
        let footer = w.footer(sample_stats(events.len() as u64), 0, "test");
        (w.finish(&footer).unwrap(), events)
    }

    fn drain(source: &mut dyn TraceSource, batch: usize) -> Vec<Event> {
        let mut out = Vec::new();
        if batch == 0 {
            while let Some(ev) = source.next_event() {
                out.push(ev.unwrap());
            }
            return out;
        }
        loop {
            let before = out.len();
            source.next_batch(&mut out, batch).unwrap();
            if out.len() == before {
                return out;
            }
        }
    }

    /// A mapped file (references in the window) and the same bytes read through `Read`
    /// (events in the window) give what the one-event-at-a-time reordering gives, with the
    /// same warnings; intact and with a damaged chunk.
    #[test]
    fn mapped_and_read_recordings_give_the_time_ordered_stream() {
        let (bytes, arrival) = disordered_recording();
        let mut damaged = bytes.clone();
        let middle = damaged.len() / 2;
        damaged[middle] ^= 0x40;
        let dir = std::env::temp_dir().join(format!("iosched-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in [("intact", &bytes), ("damaged", &damaged)] {
            let path = dir.join(format!("{name}.istrace"));
            std::fs::write(&path, bytes).unwrap();
            // The oracle: the reader's own arrival stream through TimeOrdered.
            let mut reader = RecordingReader::new(&bytes[..]).unwrap();
            let arrived: Vec<Event> = reader.by_ref().map(|e| e.unwrap()).collect();
            if name == "intact" {
                assert_eq!(arrived, arrival);
            }
            let mut oracle = TimeOrdered::new(arrived.into_iter());
            let expected: Vec<Event> = oracle.by_ref().collect();
            assert_eq!(oracle.late(), 1, "{name}");
            for batch in [0, 1, 100, 4096] {
                let mut mapped = crate::trace_file::open(&path).unwrap();
                let mut read =
                    RecordingSource::new(&path, RecordingReader::new(&bytes[..]).unwrap());
                assert_eq!(
                    drain(mapped.as_mut(), batch),
                    expected,
                    "{name} mapped {batch}"
                );
                assert_eq!(drain(&mut read, batch), expected, "{name} read {batch}");
                assert_eq!(mapped.warnings(), read.warnings(), "{name}");
                assert!(
                    mapped
                        .warnings()
                        .iter()
                        .any(|w| w.contains("1 events arrived later"))
                );
                assert_eq!(mapped.events_missing(), read.events_missing());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
