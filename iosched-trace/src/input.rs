//! Any trace we can analyze, behind one interface: our own recordings, and (by the blktrace
//! reader) blktrace's per-CPU files. Analyses (`report`, `live`, `explain`) read a
//! [`TraceSource`] and never care which format it came from, except where the format limits
//! what can be known ([`Identity`]).
//!
//! Owns: opening a path, telling formats apart, time-ordering events. Must not: analyze.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{BufReader, Read},
    path::{Path, PathBuf},
};

use crate::{
    blktrace::{BlktraceSource, format},
    event::{Event, Note},
    record::{
        ChunkOrdered, DeviceInfo, Footer, FormatError, Header, ProcessInfo, RecordingReader, Stats,
        TimeOrdered,
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
    /// Events the recorder lost (ring buffer full), if the trace says.
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
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Recording(#[from] FormatError),
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

/// Opens a trace of any format we read: a recording of ours, or blktrace files (one file, a
/// directory of them, or the `DEV` prefix of `DEV.blktrace.N`), told apart by their magic.
pub fn open(path: &Path) -> Result<Box<dyn TraceSource>, InputError> {
    if sniff(path)? == TraceFormat::Blktrace {
        return Ok(Box::new(BlktraceSource::open(path)?));
    }
    let reader = RecordingReader::open(path)?;
    Ok(Box::new(RecordingSource::new(path, reader)))
}

/// Which format `path` holds. Anything that is not a file (a directory, a `DEV` prefix) can
/// only be blktrace; a file is blktrace if it starts with its magic (either byte order).
pub fn sniff(path: &Path) -> Result<TraceFormat, InputError> {
    if path.is_dir() {
        return Ok(TraceFormat::Blktrace);
    }
    if !path.exists() {
        // A `DEV` prefix of blktrace files; otherwise let the recording reader say what is
        // missing.
        return Ok(if crate::blktrace::read::trace_files(path).is_ok() {
            TraceFormat::Blktrace
        } else {
            TraceFormat::Recording
        });
    }
    let mut magic = [0u8; 4];
    let mut f = File::open(path).map_err(|e| InputError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let n = f.read(&mut magic).map_err(|e| InputError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(if n == 4 && format::sniff(magic).is_some() {
        TraceFormat::Blktrace
    } else {
        TraceFormat::Recording
    })
}

/// A recording of ours, events put in time order by [`ChunkOrdered`] (what [`TimeOrdered`]
/// does, a chunk at a time).
pub struct RecordingSource<R: Read = BufReader<File>> {
    meta: TraceMeta,
    reader: RecordingReader<R>,
    ordered: ChunkOrdered,
    /// Decoded events of the last chunk read, in arrival order (reused).
    arrived: Vec<Event>,
    /// A read error, held back until the events read before it are taken.
    error: Option<FormatError>,
    notes: Vec<Note>,
}

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
        RecordingSource {
            meta,
            reader,
            ordered: ChunkOrdered::with_window(window_ns, max_held),
            arrived: Vec::new(),
            error: None,
            notes: Vec::new(),
        }
    }

    fn reader(&self) -> &RecordingReader<R> {
        &self.reader
    }

    /// Reads chunks until some events are released or the input ends. A read error ends
    /// the input (everything held is released) and is kept for the caller.
    fn fill(&mut self) {
        while self.ordered.ready() == 0 && !self.ordered.is_done() {
            match self.reader.next_events(&mut self.arrived) {
                Some(Ok(_)) => self.ordered.push_chunk(&mut self.arrived),
                Some(Err(e)) => {
                    self.error = Some(e);
                    self.ordered.finish();
                }
                None => self.ordered.finish(),
            }
        }
    }
}

impl<R: Read> TraceSource for RecordingSource<R> {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        self.fill();
        match self.ordered.pop() {
            Some(ev) => Some(Ok(ev)),
            None => self.error.take().map(|e| Err(InputError::Recording(e))),
        }
    }

    fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<(), InputError> {
        let start = out.len();
        while out.len() - start < max {
            self.fill();
            if self.ordered.ready() == 0 {
                break;
            }
            self.ordered.take(out, max - (out.len() - start));
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
        if self.reader().footer().is_none() {
            w.push("recording was not closed cleanly (no footer): the end may be missing".into());
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
}

/// Events already in memory (tests, synthetic traces, the live view's batches).
pub struct MemorySource {
    meta: TraceMeta,
    events: std::vec::IntoIter<Event>,
    processes: BTreeMap<u32, ProcessInfo>,
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
        }
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
}
