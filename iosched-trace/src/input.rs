//! Any trace we can analyze, behind one interface: our own recordings, and (by the blktrace
//! reader) blktrace's per-CPU files. Analyses (`report`, `live`, `explain`) read a
//! [`TraceSource`] and never care which format it came from, except where the format limits
//! what can be known ([`Identity`]).
//!
//! Owns: opening a path, telling formats apart, time-ordering events. Must not: analyze.

use std::{
    collections::BTreeMap,
    fs::File,
    io::BufReader,
    path::{Path, PathBuf},
};

use crate::{
    event::{Event, Note},
    record::{DeviceInfo, FormatError, ProcessInfo, RecordingReader, TimeOrdered},
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
    /// Processes known so far (complete once the events are exhausted).
    fn processes(&self) -> &BTreeMap<u32, ProcessInfo>;
    /// Text notes read so far (scheduler messages), in time order.
    fn notes(&self) -> &[Note];
    /// Events the recorder lost (ring buffer full), if the trace says.
    fn lost(&self) -> Option<u64>;
    /// Problems met while reading that did not stop it (skipped chunks, late events...).
    fn warnings(&self) -> Vec<String>;
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Recording(#[from] FormatError),
    #[error("{path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
}

/// Opens a trace of any format we read.
pub fn open(path: &Path) -> Result<Box<dyn TraceSource>, InputError> {
    let reader = RecordingReader::open(path)?;
    Ok(Box::new(RecordingSource::new(path, reader)))
}

/// A recording of ours, events put in time order by [`TimeOrdered`].
pub struct RecordingSource {
    meta: TraceMeta,
    ordered: TimeOrdered<ReaderEvents>,
    notes: Vec<Note>,
}

/// The reader as a plain event iterator; a read error ends it and is kept for the caller.
struct ReaderEvents {
    reader: RecordingReader<BufReader<File>>,
    error: Option<FormatError>,
}

impl Iterator for ReaderEvents {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        match self.reader.next_event()? {
            Ok(ev) => Some(ev),
            Err(e) => {
                self.error = Some(e);
                None
            }
        }
    }
}

impl RecordingSource {
    pub fn new(path: &Path, reader: RecordingReader<BufReader<File>>) -> Self {
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
            ordered: TimeOrdered::new(ReaderEvents {
                reader,
                error: None,
            }),
            notes: Vec::new(),
        }
    }

    fn reader(&self) -> &RecordingReader<BufReader<File>> {
        &self.ordered_inner().reader
    }

    fn ordered_inner(&self) -> &ReaderEvents {
        self.ordered.inner()
    }
}

impl TraceSource for RecordingSource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        match self.ordered.next() {
            Some(ev) => Some(Ok(ev)),
            None => self
                .ordered
                .inner_mut()
                .error
                .take()
                .map(|e| Err(InputError::Recording(e))),
        }
    }

    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        self.reader().processes()
    }

    fn notes(&self) -> &[Note] {
        &self.notes
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
