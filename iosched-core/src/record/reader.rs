//! Reading a recording back, one chunk at a time. Damage is survived, never misread: a chunk
//! counts only if its magic, length and checksum agree; anything else is skipped up to the
//! next chunk that does, and reported in [`RecordingReader::warnings`].
//!
//! A recording still being written (`report --follow`) is read through a `Read` that says
//! [`io::ErrorKind::WouldBlock`] where the data ends for now: the reader then stops where it
//! is, a chunk not yet whole left unread, returns that error ([`FormatError::is_waiting`])
//! without ending, and goes on from there when called again. Only the end of the input (a
//! read of 0 bytes) makes what is left a truncation.

use std::{
    collections::BTreeMap,
    fmt,
    fs::File,
    io::{self, BufReader, Read},
    path::Path,
};

use super::{
    CpuSample, Footer, FormatError, Header, ProcessInfo, Stats,
    codec::{
        self, CHUNK_HEADER_LEN, CHUNK_MAGIC, EVENT_RECORD_SIZE, EVENTS_PREFIX_LEN, FILE_HEADER_LEN,
        FILE_MAGIC, FORMAT_MAJOR, MAX_CHUNK_PAYLOAD, chunk_type,
    },
};
use crate::event::Event;

/// Reads a recording: the header at once, then events streamed in arrival order, one chunk in
/// memory at a time. Process entries, statistics and the footer are collected on the way.
pub struct RecordingReader<R: Read> {
    src: Source<R>,
    header: Header,
    version: (u16, u16),
    /// Payload of the current EVENTS chunk and the offset of its next record.
    chunk: Payload,
    chunk_pos: usize,
    /// File offset of `chunk[0]`.
    chunk_offset: u64,
    record_size: usize,
    processes: BTreeMap<u32, ProcessInfo>,
    notes: Vec<crate::event::Note>,
    cpu_samples: Vec<CpuSample>,
    stats: Option<Stats>,
    footer: Option<Footer>,
    warnings: Vec<String>,
    /// Index the next EVENTS chunk should start at, if none went missing.
    next_index: u64,
    events_read: u64,
    events_missing: u64,
    unknown_kinds: BTreeMap<u16, u64>,
    unknown_chunks: u64,
    finished: bool,
    /// See [`mark_still_written`](Self::mark_still_written).
    still_written: bool,
}

/// An event of a mapped recording not decoded yet: its timestamp and its record's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRef {
    pub ts_ns: u64,
    offset: u64,
}

impl super::order::Timed for EventRef {
    #[inline]
    fn ts_ns(&self) -> u64 {
        self.ts_ns
    }
}

impl RecordingReader<BufReader<File>> {
    /// Opens and checks a recording; errors name `path`.
    pub fn open(path: &Path) -> Result<Self, FormatError> {
        let wrap = |e: FormatError| FormatError::File {
            path: path.to_owned(),
            cause: Box::new(e),
        };
        let file = File::open(path).map_err(|e| wrap(e.into()))?;
        // A regular file is mapped rather than read: copying every byte out of the page
        // cache was the largest single cost of `report` on a long trace. Anything that
        // cannot be mapped (a pipe, an empty file, a refusing filesystem) is read.
        let map = Mapping::new(&file);
        let mut src = Source::new(BufReader::new(file));
        src.map = map;
        Self::from_source(src).map_err(wrap)
    }
}

impl<R: Read> RecordingReader<R> {
    /// Reads and checks the file header and the HEADER chunk.
    pub fn new(r: R) -> Result<Self, FormatError> {
        Self::from_source(Source::new(r))
    }

    fn from_source(mut src: Source<R>) -> Result<Self, FormatError> {
        src.fill_to(FILE_HEADER_LEN)?;
        let head = src.bytes();
        if head.is_empty() {
            return Err(FormatError::Empty);
        }
        let magic_len = head.len().min(FILE_MAGIC.len());
        if head[..magic_len] != FILE_MAGIC[..magic_len] {
            src.fill_to(64)?;
            let head = src.bytes();
            return Err(FormatError::NotARecording {
                looks_like: codec::sniff(&head[..head.len().min(64)]),
            });
        }
        if head.len() < FILE_HEADER_LEN {
            return Err(FormatError::TruncatedHeader {
                len: head.len() as u64,
            });
        }
        let major = codec::u16_at(head, 8);
        let minor = codec::u16_at(head, 10);
        if major != FORMAT_MAJOR {
            return Err(FormatError::UnsupportedVersion { major, minor });
        }
        src.consume(FILE_HEADER_LEN);
        let header = read_header_chunk(&mut src)?;
        Ok(RecordingReader {
            src,
            header,
            version: (major, minor),
            chunk: Payload::default(),
            chunk_pos: 0,
            chunk_offset: 0,
            record_size: EVENT_RECORD_SIZE as usize,
            processes: BTreeMap::new(),
            notes: Vec::new(),
            cpu_samples: Vec::new(),
            stats: None,
            footer: None,
            warnings: Vec::new(),
            next_index: 0,
            events_read: 0,
            events_missing: 0,
            unknown_kinds: BTreeMap::new(),
            unknown_chunks: 0,
            finished: false,
            still_written: false,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// (major, minor) format version of the file.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// The next event in arrival order; `None` at the end. Damage is not an error (it becomes
    /// a warning); `Some(Err)` is an I/O error, after which the reader ends, unless it is
    /// [`FormatError::is_waiting`] (the input has nothing more yet: call again later).
    pub fn next_event(&mut self) -> Option<Result<Event, FormatError>> {
        loop {
            let chunk = self.chunk.bytes(self.src.map.as_ref());
            while self.chunk_pos + self.record_size <= chunk.len() {
                let rec = &chunk[self.chunk_pos..self.chunk_pos + self.record_size];
                self.chunk_pos += self.record_size;
                match codec::decode_event(rec) {
                    Ok(ev) => {
                        self.events_read += 1;
                        return Some(Ok(ev));
                    }
                    Err(code) => *self.unknown_kinds.entry(code).or_default() += 1,
                }
            }
            match self.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Moves to the next EVENTS chunk: `Ok(false)` at the end of the stream (then the reader
    /// is finished), `Err` for a read error (which also ends it), except that an input with
    /// nothing more yet (`WouldBlock`) only pauses it. Shared by the per-event, per-chunk and
    /// per-reference paths.
    fn advance(&mut self) -> Result<bool, FormatError> {
        if self.finished {
            return Ok(false);
        }
        match self.read_chunk() {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.finish();
                Ok(false)
            }
            // Nothing consumed of the chunk not yet whole: called again, it is read again.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(e.into()),
            Err(e) => {
                self.finished = true;
                self.chunk = Payload::default();
                Err(e.into())
            }
        }
    }

    /// Appends the events of the next EVENTS chunk (or what is left of the current one) to
    /// `out`, in arrival order, and returns how many: the fast path for whole-trace readers,
    /// one call per chunk instead of one per event. Same stream, counts and warnings as
    /// [`next_event`](Self::next_event); `None` at the end, `Some(Err)` as there.
    pub fn next_events(&mut self, out: &mut Vec<Event>) -> Option<Result<usize, FormatError>> {
        loop {
            let n = self.decode_rest(out);
            if n > 0 {
                return Some(Ok(n));
            }
            match self.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// Whether the file is mapped (then [`next_event_refs`](Self::next_event_refs) works).
    pub fn is_mapped(&self) -> bool {
        self.src.map.is_some()
    }

    /// As [`next_events`](Self::next_events), but gives each event's timestamp and place in
    /// the file instead of the event (mapped files only; [`event_at`](Self::event_at) decodes
    /// it). Reordering then holds 16 bytes per event instead of a whole event.
    pub fn next_event_refs(
        &mut self,
        out: &mut Vec<EventRef>,
    ) -> Option<Result<usize, FormatError>> {
        debug_assert!(self.is_mapped());
        loop {
            let n = self.scan_rest(out);
            if n > 0 {
                return Some(Ok(n));
            }
            match self.advance() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The event `at` names; `None` if the file no longer holds it (it was overwritten in
    /// place while being read).
    pub fn event_at(&self, at: EventRef) -> Option<Event> {
        let map = self.src.map.as_ref()?;
        let rec = map.bytes().get(at.offset as usize..)?;
        if rec.len() < EVENT_RECORD_SIZE as usize {
            return None;
        }
        codec::decode_event(rec).ok()
    }

    /// Hints that the event `at` will be decoded soon. Decoding reads the file a whole
    /// reordering window after the chunk was checked, so its records have left the cache,
    /// and the hardware's prefetcher stops at every page.
    #[inline]
    pub fn prefetch(&self, at: EventRef) {
        #[cfg(target_arch = "x86_64")]
        if let Some(map) = &self.src.map {
            let start = (at.offset as usize).min(map.len);
            let end = (start + EVENT_RECORD_SIZE as usize - 1).min(map.len.saturating_sub(1));
            let base = map.ptr.cast::<i8>();
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch is only a hint: it never faults nor changes memory, and both
            // addresses are inside the mapping anyway.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(base.add(start));
                _mm_prefetch::<_MM_HINT_T0>(base.add(end));
            }
        }
    }

    /// [`decode_rest`](Self::decode_rest) as references.
    fn scan_rest(&mut self, out: &mut Vec<EventRef>) -> usize {
        let size = self.record_size;
        let chunk = self.chunk.bytes(self.src.map.as_ref());
        let records = chunk.get(self.chunk_pos..).unwrap_or_default();
        let whole = records.len() / size * size;
        out.reserve(whole / size);
        let before = out.len();
        let mut offset = self.chunk_offset + self.chunk_pos as u64;
        for rec in records[..whole].chunks_exact(size) {
            let code = codec::u16_at(rec, 76);
            if crate::event::EventKind::from_code(code).is_some() {
                out.push(EventRef {
                    ts_ns: codec::u64_at(rec, 0),
                    offset,
                });
            } else {
                *self.unknown_kinds.entry(code).or_default() += 1;
            }
            offset += size as u64;
        }
        self.chunk_pos += whole;
        let n = out.len() - before;
        self.events_read += n as u64;
        n
    }

    /// Decodes the rest of the current chunk into `out`; how many events it gave.
    fn decode_rest(&mut self, out: &mut Vec<Event>) -> usize {
        let size = self.record_size;
        let chunk = self.chunk.bytes(self.src.map.as_ref());
        let records = chunk.get(self.chunk_pos..).unwrap_or_default();
        let whole = records.len() / size * size;
        out.reserve(whole / size);
        let before = out.len();
        for rec in records[..whole].chunks_exact(size) {
            match codec::decode_event(rec) {
                Ok(ev) => out.push(ev),
                Err(code) => *self.unknown_kinds.entry(code).or_default() += 1,
            }
        }
        self.chunk_pos += whole;
        let n = out.len() - before;
        self.events_read += n as u64;
        n
    }

    /// Process entries seen so far (all of them once [`next_event`](Self::next_event) returned
    /// `None`); a later entry for the same pid replaces an earlier one.
    pub fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        &self.processes
    }

    /// Scheduler messages read so far (NOTES chunks), in the order written.
    pub fn notes(&self) -> &[crate::event::Note] {
        &self.notes
    }

    /// The machine's CPU samples read so far (CPU chunks, format 1.5), in file order (which
    /// is time order: the recorder writes them as it takes them).
    pub fn cpu_samples(&self) -> &[CpuSample] {
        &self.cpu_samples
    }

    /// The footer's statistics if there is a footer, else the last STATS snapshot seen.
    pub fn stats(&self) -> Option<&Stats> {
        self.footer
            .as_ref()
            .map(|f| &f.stats)
            .or(self.stats.as_ref())
    }

    pub fn footer(&self) -> Option<&Footer> {
        self.footer.as_ref()
    }

    /// Damage found so far: skipped chunks, truncation, missing events, missing footer.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Events decoded so far.
    pub fn events_read(&self) -> u64 {
        self.events_read
    }

    /// Events known to be missing: gaps in the event indices of EVENTS chunks, and after the
    /// end, the footer's total minus what could be read.
    pub fn events_missing(&self) -> u64 {
        self.events_missing
    }

    /// Bytes consumed from the input so far.
    pub fn offset(&self) -> u64 {
        self.src.offset
    }

    /// Reading is being stopped while the recording is still being written, or while its
    /// writer may have died without closing it (`report --follow` interrupted): the warnings
    /// at the end say that a missing footer and a cut last chunk are what such a stop leaves,
    /// instead of guessing at a crash. Call it before the input ends.
    pub fn mark_still_written(&mut self) {
        self.still_written = true;
    }

    /// Whether [`mark_still_written`](Self::mark_still_written) was called.
    pub fn still_written(&self) -> bool {
        self.still_written
    }

    /// Reads the next chunk and takes it in. `Ok(false)` at the end of the input.
    fn read_chunk(&mut self) -> io::Result<bool> {
        let next = self.src.next_chunk()?;
        if let Some(mut skipped) = next.skipped {
            skipped.still_written = self.still_written;
            self.warnings.push(skipped.to_string());
        }
        let Some(chunk) = next.chunk else {
            return Ok(false);
        };
        match chunk.typ {
            chunk_type::EVENTS => self.take_events(chunk),
            chunk_type::PROCESSES => {
                match serde_json::from_slice::<Vec<ProcessInfo>>(
                    chunk.payload.bytes(self.src.map.as_ref()),
                ) {
                    Ok(list) => {
                        for p in list {
                            self.processes.insert(p.pid, p);
                        }
                    }
                    Err(e) => self.warnings.push(format!(
                        "process chunk at offset {} is not readable ({e}): skipped",
                        chunk.offset
                    )),
                }
            }
            chunk_type::NOTES => {
                match serde_json::from_slice::<Vec<crate::event::Note>>(
                    chunk.payload.bytes(self.src.map.as_ref()),
                ) {
                    Ok(list) => self.notes.extend(list),
                    Err(e) => self.warnings.push(format!(
                        "notes chunk at offset {} is not readable ({e}): skipped",
                        chunk.offset
                    )),
                }
            }
            chunk_type::CPU => {
                match serde_json::from_slice::<CpuSample>(
                    chunk.payload.bytes(self.src.map.as_ref()),
                ) {
                    Ok(sample) => self.cpu_samples.push(sample),
                    Err(e) => self.warnings.push(format!(
                        "CPU chunk at offset {} is not readable ({e}): skipped",
                        chunk.offset
                    )),
                }
            }
            chunk_type::STATS => {
                match serde_json::from_slice::<Stats>(chunk.payload.bytes(self.src.map.as_ref())) {
                    Ok(stats) => self.stats = Some(stats),
                    Err(e) => self.warnings.push(format!(
                        "statistics chunk at offset {} is not readable ({e}): skipped",
                        chunk.offset
                    )),
                }
            }
            chunk_type::FOOTER => {
                match serde_json::from_slice::<Footer>(chunk.payload.bytes(self.src.map.as_ref())) {
                    Ok(footer) => self.footer = Some(footer),
                    Err(e) => self.warnings.push(format!(
                        "footer at offset {} is not readable ({e}): skipped",
                        chunk.offset
                    )),
                }
            }
            chunk_type::HEADER => self.warnings.push(format!(
                "second header chunk at offset {} ignored",
                chunk.offset
            )),
            // Newer minor versions may add chunk types; skipping them is the rule.
            _ => self.unknown_chunks += 1,
        }
        Ok(true)
    }

    fn take_events(&mut self, chunk: Chunk) {
        let p = chunk.payload.bytes(self.src.map.as_ref());
        let consistent = p.len() >= EVENTS_PREFIX_LEN && {
            let count = u64::from(codec::u32_at(p, 8));
            let size = u64::from(codec::u32_at(p, 12));
            size >= u64::from(EVENT_RECORD_SIZE)
                && (p.len() - EVENTS_PREFIX_LEN) as u64 == count * size
        };
        if !consistent {
            // The checksum held, so a writer wrote this: a bug or an incompatible writer.
            self.warnings.push(format!(
                "events chunk at offset {} has an inconsistent layout: skipped",
                chunk.offset
            ));
            return;
        }
        let first = codec::u64_at(p, 0);
        let count = u64::from(codec::u32_at(p, 8));
        self.record_size = codec::u32_at(p, 12) as usize;
        if first > self.next_index {
            let missing = first - self.next_index;
            self.events_missing += missing;
            self.warnings.push(format!(
                "{missing} events (#{}..#{}) missing before offset {}: their chunk was damaged \
                 or never written",
                self.next_index,
                first - 1,
                chunk.offset
            ));
        }
        self.next_index = first + count;
        self.chunk = chunk.payload;
        self.chunk_pos = EVENTS_PREFIX_LEN;
        self.chunk_offset = chunk.offset + CHUNK_HEADER_LEN as u64;
    }

    fn finish(&mut self) {
        self.finished = true;
        let decoded = self.events_read + self.unknown_kinds.values().sum::<u64>();
        match &self.footer {
            None => {
                // Plug counts, where the kernel counted them, come with the loss counts.
                let counts = match (self.stats.is_some(), self.header.plugs_counted()) {
                    (true, false) => "loss counts are those of the last statistics snapshot",
                    (true, true) => {
                        "loss and plug counts are those of the last statistics snapshot"
                    }
                    (false, false) => {
                        "there is no statistics snapshot either, so lost events are unknown"
                    }
                    (false, true) => {
                        "there is no statistics snapshot either, so lost events and plug \
                         counts are unknown"
                    }
                };
                self.warnings.push(if self.still_written {
                    format!(
                        "recording not closed yet: reading stopped before its footer was \
                         written (the recorder was still writing it, or had died without \
                         closing it); {counts}"
                    )
                } else {
                    format!(
                        "recording was not closed cleanly: no footer (the recorder was killed \
                         or crashed, or the disk filled up); {counts}"
                    )
                });
            }
            Some(footer) if footer.events_total != decoded => {
                if footer.events_total > self.next_index {
                    self.events_missing += footer.events_total - self.next_index;
                }
                self.warnings.push(format!(
                    "the footer counts {} events but {decoded} could be read",
                    footer.events_total
                ));
            }
            Some(_) => {}
        }
        if !self.unknown_kinds.is_empty() {
            let n: u64 = self.unknown_kinds.values().sum();
            let codes: Vec<String> = self.unknown_kinds.keys().map(u16::to_string).collect();
            self.warnings.push(format!(
                "{n} events of kinds this build does not know (codes {}) skipped: use a newer \
                 iosched-trace",
                codes.join(", ")
            ));
        }
        if self.unknown_chunks > 0 {
            self.warnings.push(format!(
                "{} chunks of types this build does not know skipped",
                self.unknown_chunks
            ));
        }
    }
}

impl<R: Read> Iterator for RecordingReader<R> {
    type Item = Result<Event, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event()
    }
}

/// Reads the HEADER chunk strictly: without it nothing else can be interpreted.
fn read_header_chunk<R: Read>(src: &mut Source<R>) -> Result<Header, FormatError> {
    let corrupt = |reason: String| FormatError::CorruptHeader { reason };
    if !src.fill_to(CHUNK_HEADER_LEN)? {
        return Err(FormatError::TruncatedHeader {
            len: src.offset + src.avail() as u64,
        });
    }
    let h = codec::parse_chunk_header(src.bytes()[..CHUNK_HEADER_LEN].try_into().expect("16"));
    if !h.magic_ok {
        return Err(corrupt(format!("no chunk starts at offset {}", src.offset)));
    }
    if h.typ != chunk_type::HEADER {
        return Err(corrupt(format!(
            "the first chunk has type {}, not the header's type {}",
            h.typ,
            chunk_type::HEADER
        )));
    }
    if h.len > MAX_CHUNK_PAYLOAD {
        return Err(corrupt(format!("impossible header length {}", h.len)));
    }
    let len = h.len as usize;
    if !src.fill_to(CHUNK_HEADER_LEN + len)? {
        // A cut file, unless what follows holds chunks: then the length field is damaged.
        let rest = &src.bytes()[CHUNK_HEADER_LEN..];
        if rest.windows(CHUNK_MAGIC.len()).any(|w| w == CHUNK_MAGIC) {
            return Err(corrupt(format!(
                "header length {} runs past the end of the file",
                h.len
            )));
        }
        return Err(FormatError::TruncatedHeader {
            len: src.offset + src.avail() as u64,
        });
    }
    let payload = &src.bytes()[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len];
    if codec::chunk_crc(h.typ, &[payload]) != h.crc {
        return Err(corrupt("checksum mismatch".to_string()));
    }
    let header = serde_json::from_slice(payload)
        .map_err(|e| corrupt(format!("the header is not valid JSON ({e})")))?;
    src.consume(CHUNK_HEADER_LEN + len);
    Ok(header)
}

/// A chunk whose magic, length and checksum agree.
struct Chunk {
    typ: u32,
    /// File offset of its chunk header.
    offset: u64,
    payload: Payload,
}

/// A chunk's payload: copied out of the read buffer, or where it is in a mapped file (no
/// copy: the mapping stays).
#[derive(Clone, Debug)]
enum Payload {
    Owned(Vec<u8>),
    Mapped { start: usize, len: usize },
}

impl Default for Payload {
    fn default() -> Self {
        Payload::Owned(Vec::new())
    }
}

impl Payload {
    fn bytes<'a>(&'a self, map: Option<&'a Mapping>) -> &'a [u8] {
        match (self, map) {
            (Payload::Owned(v), _) => v,
            (Payload::Mapped { start, len }, Some(map)) => &map.bytes()[*start..][..*len],
            (Payload::Mapped { .. }, None) => unreachable!("mapped payloads come from a mapping"),
        }
    }
}

/// Why bytes were skipped.
#[derive(Clone, Copy, Debug)]
enum Problem {
    BadMagic,
    BadLength(u32),
    PastEnd(u32),
    Checksum,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadMagic => f.write_str("no chunk starts there"),
            Self::BadLength(len) => write!(f, "impossible chunk length {len}"),
            Self::PastEnd(len) => write!(f, "chunk length {len} runs past the end of the file"),
            Self::Checksum => f.write_str("checksum mismatch"),
        }
    }
}

/// A run of bytes that held no valid chunk.
struct Skipped {
    start: u64,
    len: u64,
    /// What was wrong at `start`; `None` if fewer bytes than a chunk header were left.
    problem: Option<Problem>,
    /// A valid chunk follows (else the run reaches the end of the file).
    resynced: bool,
    /// The input ended because reading was stopped while it was still being written
    /// ([`RecordingReader::mark_still_written`]): a cut chunk at the end is one in flight.
    still_written: bool,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, len) = (self.start, self.len);
        if self.resynced {
            let problem = self.problem.unwrap_or(Problem::BadMagic);
            return write!(
                f,
                "corrupt chunk at offset {start} ({problem}): skipped {len} bytes up to the next \
                 valid chunk at offset {}",
                start + len
            );
        }
        if self.still_written && matches!(self.problem, None | Some(Problem::PastEnd(_))) {
            return write!(
                f,
                "{len} bytes after the last complete chunk (offset {start}) left out: a chunk \
                 still being written when reading stopped"
            );
        }
        write!(
            f,
            "truncated: {len} bytes after the last complete chunk (offset {start})"
        )?;
        match self.problem {
            None | Some(Problem::PastEnd(_)) => {
                f.write_str(": the recording was cut short (killed, crashed or disk full)")
            }
            Some(problem) => write!(f, ": they hold no valid chunk ({problem})"),
        }
    }
}

struct Next {
    skipped: Option<Skipped>,
    chunk: Option<Chunk>,
}

const READ_SIZE: usize = 64 << 10;

/// A read buffer over `R` that knows file offsets, holding at most one chunk plus one read;
/// or, for a mapped file, the mapping (then `R` is not used).
struct Source<R> {
    r: R,
    map: Option<Mapping>,
    buf: Vec<u8>,
    pos: usize,
    /// File offset of `buf[pos]`.
    offset: u64,
    eof: bool,
    /// Where a run of bytes holding no valid chunk started, and what was wrong there, while
    /// [`next_chunk`](Self::next_chunk) skips it (kept across a pause of the input).
    bad: Option<(u64, Problem)>,
}

impl<R: Read> Source<R> {
    fn new(r: R) -> Self {
        Source {
            r,
            map: None,
            buf: Vec::new(),
            pos: 0,
            offset: 0,
            eof: false,
            bad: None,
        }
    }

    fn avail(&self) -> usize {
        self.bytes().len()
    }

    fn bytes(&self) -> &[u8] {
        match &self.map {
            Some(map) => &map.bytes()[self.pos..],
            None => &self.buf[self.pos..],
        }
    }

    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.avail());
        self.pos += n;
        self.offset += n as u64;
        if let Some(map) = &mut self.map {
            // Events of the last stretch may still be waiting in the reordering window as
            // references into the mapping: keep it mapped. (Dropped pages would read back
            // from the file anyway; keeping them only saves page faults.)
            map.done_before(self.pos.saturating_sub(KEEP_MAPPED));
        }
    }

    /// Makes at least `n` bytes available; `false` if the input ends first (then all the
    /// rest is available).
    fn fill_to(&mut self, n: usize) -> io::Result<bool> {
        if self.avail() >= n {
            return Ok(true);
        }
        if self.map.is_some() {
            return Ok(false);
        }
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        while self.buf.len() < n {
            let want = (n - self.buf.len()).max(READ_SIZE);
            // `take(..).read_to_end` fills spare capacity without zeroing it first, retries
            // on EINTR, and returns less than asked only at the end of the input. An input
            // with nothing more for now (a file being written, read by `--follow`) says
            // WouldBlock: what came before it is kept in `buf`, and is enough if it reaches
            // `n`.
            let got = match (&mut self.r).take(want as u64).read_to_end(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.buf.len() >= n => {
                    return Ok(true);
                }
                Err(e) => return Err(e),
            };
            if got < want {
                self.eof = true;
                return Ok(self.buf.len() >= n);
            }
        }
        Ok(true)
    }

    /// The next valid chunk, and the bytes skipped to reach it (or to reach the end). A
    /// WouldBlock from the input leaves everything as it was (a skip under way included, in
    /// `bad`), for the next call to go on.
    fn next_chunk(&mut self) -> io::Result<Next> {
        loop {
            let bad = self.bad;
            if !self.fill_to(CHUNK_HEADER_LEN)? {
                let rest = self.avail();
                let skipped = (rest > 0 || bad.is_some()).then(|| {
                    let start = bad.map_or(self.offset, |b| b.0);
                    Skipped {
                        start,
                        len: self.offset + rest as u64 - start,
                        problem: bad.map(|b| b.1),
                        resynced: false,
                        still_written: false,
                    }
                });
                self.consume(rest);
                self.bad = None;
                return Ok(Next {
                    skipped,
                    chunk: None,
                });
            }
            let h = codec::parse_chunk_header(
                self.bytes()[..CHUNK_HEADER_LEN]
                    .try_into()
                    .expect("16 bytes"),
            );
            let len = h.len as usize;
            let problem = if !h.magic_ok {
                Some(Problem::BadMagic)
            } else if h.len > MAX_CHUNK_PAYLOAD {
                Some(Problem::BadLength(h.len))
            } else if !self.fill_to(CHUNK_HEADER_LEN + len)? {
                Some(Problem::PastEnd(h.len))
            } else if codec::chunk_crc(h.typ, &[&self.bytes()[CHUNK_HEADER_LEN..][..len]]) != h.crc
            {
                Some(Problem::Checksum)
            } else {
                None
            };
            let Some(problem) = problem else {
                let offset = self.offset;
                let payload = match &self.map {
                    Some(_) => Payload::Mapped {
                        start: self.pos + CHUNK_HEADER_LEN,
                        len,
                    },
                    None => Payload::Owned(self.bytes()[CHUNK_HEADER_LEN..][..len].to_vec()),
                };
                self.consume(CHUNK_HEADER_LEN + len);
                let skipped = bad.map(|(start, problem)| Skipped {
                    start,
                    len: offset - start,
                    problem: Some(problem),
                    resynced: true,
                    still_written: false,
                });
                self.bad = None;
                return Ok(Next {
                    skipped,
                    chunk: Some(Chunk {
                        typ: h.typ,
                        offset,
                        payload,
                    }),
                });
            };
            self.bad.get_or_insert((self.offset, problem));
            self.skip_to_magic()?;
        }
    }

    /// Moves past the current byte to the next occurrence of the chunk magic, or to the last
    /// few bytes of the input.
    fn skip_to_magic(&mut self) -> io::Result<()> {
        self.consume(1);
        loop {
            let bytes = self.bytes();
            if let Some(at) = bytes
                .windows(CHUNK_MAGIC.len())
                .position(|w| w == CHUNK_MAGIC)
            {
                self.consume(at);
                return Ok(());
            }
            // Keep a possible partial magic at the end.
            let keep = bytes.len().min(CHUNK_MAGIC.len() - 1);
            self.consume(bytes.len() - keep);
            if !self.fill_to(keep + 1)? {
                return Ok(());
            }
        }
    }
}

/// A whole regular file mapped read-only. Pages already read are dropped from the mapping as
/// the reader moves on, so memory stays bounded however long the file (mapped file pages
/// count in a process's resident set).
///
/// The file must not shrink while mapped (reading a page past its new end would fault):
/// recordings are only ever appended to. What is appended after the mapping is made is not
/// seen, as if the file had been read at that moment.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
    /// Bytes before this offset have been dropped from the mapping.
    dropped: usize,
}

/// Consumed bytes are dropped from the mapping this many at a time.
const DROP_STEP: usize = 16 << 20;
/// Consumed bytes kept mapped: more than a full reordering window of records
/// (`TimeOrdered::DEFAULT_MAX_HELD` records of 104 bytes is 27 MiB).
const KEEP_MAPPED: usize = 48 << 20;

impl Mapping {
    fn new(file: &File) -> Option<Mapping> {
        use std::os::fd::AsRawFd;
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        if !meta.is_file() || len == 0 {
            return None;
        }
        // SAFETY: a fresh read-only private mapping of a file we hold open; the kernel picks
        // the address. The pointer is only read through `bytes`, within `len`.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // Read ahead aggressively: the file is read once, front to back. Advice only.
        // SAFETY: the range is the mapping just made.
        unsafe { libc::madvise(ptr, len, libc::MADV_SEQUENTIAL) };
        Some(Mapping {
            ptr,
            len,
            dropped: 0,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is mapped readable for the life of `self`; pages dropped by
        // `done_before` read back from the file when touched again.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }

    /// The reader has moved past `offset`: drop the whole pages before it (in steps).
    fn done_before(&mut self, offset: usize) {
        if offset < self.dropped + DROP_STEP {
            return;
        }
        let end = offset & !(DROP_STEP - 1);
        // SAFETY: a page-aligned range inside the mapping; MADV_DONTNEED on a private
        // read-only file mapping only unmaps pages (they come back from the file if read).
        unsafe {
            libc::madvise(
                self.ptr.cast::<u8>().add(self.dropped).cast(),
                end - self.dropped,
                libc::MADV_DONTNEED,
            )
        };
        self.dropped = end;
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `new` mapped, once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

// SAFETY: the mapping is read-only and owned; nothing about it is tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads.
unsafe impl Sync for Mapping {}
