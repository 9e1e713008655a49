//! Reading blktrace traces as a [`TraceSource`]: per-CPU files (`DEV.blktrace.N`, found from
//! one file, a directory or the `DEV` prefix) merged by time with one record held per file,
//! or one merged stream (`blkparse -d`). Notes become processes (comm), the trace's wall
//! clock, and [`Note`]s (scheduler messages such as BFQ's); events get synthetic identities
//! from [`Pairer`].
//!
//! Damage never panics: a bad first record refuses the file with an error; later damage
//! (truncation, garbage) ends that file's stream with a warning naming the byte offset.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap, VecDeque},
    fs::File,
    io::{BufReader, Read},
    path::{Path, PathBuf},
};

use super::{
    format::{ByteOrder, COMM_LEN, Record, RecordError, RecordReader, notify},
    map,
    pairing::Pairer,
};
use crate::{
    event::{Comm, Dev, Event, EventKind, Note},
    record::{DeviceInfo, ProcessInfo},
    source::{Identity, InputError, TraceFormat, TraceMeta, TraceSource},
};

/// One input stream: a per-CPU file or a merged dump.
struct Stream {
    name: String,
    reader: RecordReader<Box<dyn Read>>,
    head: Option<Record>,
    /// Records taken from this stream (tie-breaker of the merge).
    taken: u64,
    /// Last time seen, to notice a stream that is not in time order.
    last_time: u64,
}

/// blktrace input, events in time order.
pub struct BlktraceSource {
    meta: TraceMeta,
    streams: Vec<Stream>,
    /// (time, stream, records taken) of each stream's head record.
    heap: BinaryHeap<Reverse<(u64, usize, u64)>>,
    pairer: Pairer,
    ready: VecDeque<Event>,
    /// Comm by (stream, pid) as that stream's notes said, and by pid from any stream.
    comms: HashMap<(usize, u32), Comm>,
    comm_any: HashMap<u32, Comm>,
    processes: BTreeMap<u32, ProcessInfo>,
    notes: Vec<Note>,
    warnings: Vec<String>,
    skipped: BTreeMap<&'static str, u64>,
    out_of_order: u64,
    /// R records read: where btt's G2I and I2D differ from ours (docs/BLKTRACE.md).
    requeues: u64,
    /// (trace time, wall-clock ns since the epoch) of the timestamp note.
    wall_clock: Option<(u64, u64)>,
}

/// The per-CPU files `path` names: itself if a file, every `*.blktrace.N` in a directory, or
/// `PATH.blktrace.N` for a prefix. Sorted by device name, then CPU.
pub fn trace_files(path: &Path) -> Result<Vec<PathBuf>, InputError> {
    let unreadable = |reason: String| InputError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let (dir, prefix) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| unreadable("no such file or directory".into()))?;
        (dir, Some(prefix))
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| unreadable(e.to_string()))?;
    let mut files: Vec<(String, u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (dev, cpu) = name.rsplit_once(".blktrace.")?;
            let cpu: u32 = cpu.parse().ok()?;
            if prefix.as_deref().is_some_and(|p| p != dev) {
                return None;
            }
            Some((dev.to_string(), cpu, e.path()))
        })
        .collect();
    if files.is_empty() {
        return Err(unreadable(match prefix {
            Some(p) => format!(
                "no such file, and no blktrace files {p}.blktrace.N in {}",
                dir.display()
            ),
            None => "directory holds no blktrace files (NAME.blktrace.N)".into(),
        }));
    }
    files.sort();
    Ok(files.into_iter().map(|(_, _, p)| p).collect())
}

/// The device name part of `NAME.blktrace.N`, if the file is named so.
fn device_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    name.rsplit_once(".blktrace.")
        .map(|(dev, _)| dev.to_string())
}

impl BlktraceSource {
    /// Opens the trace at `path` (see [`trace_files`]).
    pub fn open(path: &Path) -> Result<Self, InputError> {
        let mut streams: Vec<(String, Box<dyn Read>)> = Vec::new();
        for file in trace_files(path)? {
            let f = File::open(&file).map_err(|e| InputError::Unreadable {
                path: file.clone(),
                reason: e.to_string(),
            })?;
            streams.push((
                file.display().to_string(),
                Box::new(BufReader::with_capacity(256 << 10, f)),
            ));
        }
        Self::from_streams(path, streams)
    }

    /// Reads already opened streams, named for messages (`NAME.blktrace.N` names give the
    /// device names).
    pub fn from_streams(
        path: &Path,
        inputs: Vec<(String, Box<dyn Read>)>,
    ) -> Result<Self, InputError> {
        let mut streams = Vec::new();
        let mut heap = BinaryHeap::new();
        let mut devices: Vec<DeviceInfo> = Vec::new();
        let mut any = false;
        for (name, r) in inputs {
            let mut reader = RecordReader::new(r);
            let head = reader.next_record().map_err(|e| InputError::Unreadable {
                path: PathBuf::from(&name),
                reason: format!("not a readable blktrace file: {e}"),
            })?;
            if let Some(rec) = &head {
                any = true;
                heap.push(Reverse((rec.time, streams.len(), 0)));
                let dev = Dev::from_kernel(rec.device);
                if !devices.iter().any(|d| d.dev == dev) {
                    devices.push(DeviceInfo {
                        name: device_name(Path::new(&name)).unwrap_or_else(|| dev.to_string()),
                        dev,
                        request_based: true,
                        ..DeviceInfo::default()
                    });
                }
            }
            streams.push(Stream {
                name,
                reader,
                head,
                taken: 0,
                last_time: 0,
            });
        }
        let mut warnings = Vec::new();
        if !any {
            warnings.push("the blktrace files hold no records".to_string());
        }
        Ok(BlktraceSource {
            meta: TraceMeta {
                path: path.to_path_buf(),
                format: TraceFormat::Blktrace,
                identity: Identity::PairedBySector,
                devices,
                kernel_release: None,
                notes: vec![
                    "blktrace input: requests were paired by (device, sector, size) as btt does"
                        .into(),
                ],
            },
            streams,
            heap,
            pairer: Pairer::default(),
            ready: VecDeque::new(),
            comms: HashMap::new(),
            comm_any: HashMap::new(),
            processes: BTreeMap::new(),
            notes: Vec::new(),
            warnings,
            skipped: BTreeMap::new(),
            out_of_order: 0,
            requeues: 0,
            wall_clock: None,
        })
    }

    /// (trace time, wall-clock ns since the epoch) from the trace's timestamp note.
    pub fn wall_clock(&self) -> Option<(u64, u64)> {
        self.wall_clock
    }

    /// Records read but not turned into events, by action (abort, driver data, unknown).
    pub fn skipped(&self) -> &BTreeMap<&'static str, u64> {
        &self.skipped
    }

    /// The next record in time order, and its stream.
    fn next_record(&mut self) -> Option<(Record, usize)> {
        let Reverse((_, idx, _)) = self.heap.pop()?;
        let stream = &mut self.streams[idx];
        let rec = stream.head.take()?;
        stream.taken += 1;
        if !rec.is_notify() {
            stream.last_time = stream.last_time.max(rec.time);
        }
        match stream.reader.next_record() {
            Ok(Some(next)) => {
                // Notes are left out: `blkparse -d` rebases event times but not theirs.
                if !next.is_notify() && next.time < stream.last_time {
                    self.out_of_order += 1;
                }
                self.heap.push(Reverse((next.time, idx, stream.taken)));
                stream.head = Some(next);
            }
            Ok(None) => {}
            Err(e) => self
                .warnings
                .push(describe(&stream.name, &e, stream.reader.offset())),
        }
        Some((rec, idx))
    }

    fn handle(&mut self, rec: Record, idx: usize) {
        if rec.is_notify() {
            self.handle_note(&rec, idx);
            return;
        }
        let Some(mut ev) = map::record_event(&rec) else {
            *self.skipped.entry(map::action_name(&rec)).or_default() += 1;
            return;
        };
        if let Some(comm) = self
            .comms
            .get(&(idx, ev.pid))
            .or_else(|| self.comm_any.get(&ev.pid))
        {
            ev.comm = *comm;
        }
        if ev.kind == EventKind::Requeue {
            self.requeues += 1;
        }
        let mut extra = VecDeque::new();
        self.pairer.pair(&mut ev, &mut extra);
        self.ready.push_back(ev);
        self.ready.extend(extra);
    }

    fn handle_note(&mut self, rec: &Record, idx: usize) {
        let (_, pdu) = rec.cgroup();
        match rec.act() {
            notify::PROCESS => {
                let mut comm = Comm::default();
                let n = pdu.len().min(COMM_LEN);
                comm.0[..n].copy_from_slice(&pdu[..n]);
                comm.0[COMM_LEN - 1] = 0;
                self.comms.insert((idx, rec.pid), comm);
                self.comm_any.insert(rec.pid, comm);
                self.processes.entry(rec.pid).or_insert(ProcessInfo {
                    pid: rec.pid,
                    tgid: rec.pid,
                    comm,
                    cgroup_id: 0,
                    cgroup_path: None,
                });
            }
            notify::TIMESTAMP if pdu.len() >= 8 => {
                let order = self.streams[idx]
                    .reader
                    .order()
                    .unwrap_or(ByteOrder::NATIVE);
                let word = |b: &[u8]| {
                    let a = [b[0], b[1], b[2], b[3]];
                    u64::from(match order {
                        ByteOrder::Little => u32::from_le_bytes(a),
                        ByteOrder::Big => u32::from_be_bytes(a),
                    })
                };
                let wall = word(&pdu[0..]) * 1_000_000_000 + word(&pdu[4..]);
                self.wall_clock.get_or_insert((rec.time, wall));
            }
            notify::MESSAGE => {
                let end = pdu.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                let text = String::from_utf8_lossy(&pdu[..end])
                    .trim_end_matches('\n')
                    .to_string();
                self.notes.push(Note {
                    ts_ns: rec.time,
                    dev: Dev::from_kernel(rec.device),
                    cpu: u16::try_from(rec.cpu).unwrap_or(u16::MAX),
                    pid: rec.pid,
                    text,
                });
            }
            _ => *self.skipped.entry(map::action_name(rec)).or_default() += 1,
        }
    }
}

fn describe(stream: &str, e: &RecordError, offset: u64) -> String {
    match e {
        RecordError::Truncated { .. } => format!("{stream}: {e}; read up to byte {offset}"),
        _ => format!("{stream}: {e}; the rest of the file was skipped"),
    }
}

impl TraceSource for BlktraceSource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                return Some(Ok(ev));
            }
            let (rec, idx) = self.next_record()?;
            self.handle(rec, idx);
        }
    }

    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        &self.processes
    }

    fn notes(&self) -> &[Note] {
        &self.notes
    }

    fn lost(&self) -> Option<u64> {
        // blktrace keeps its drop count in debugfs, not in the files.
        None
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.warnings.clone();
        if self.out_of_order > 0 {
            w.push(format!(
                "{} records were out of time order within their file",
                self.out_of_order
            ));
        }
        if self.requeues > 0 {
            w.push(format!(
                "{} requeues (R): btt counts G2I and I2D once per insert, so each requeue \
                 gives it one more sample of each (the insert before the requeue to the issue \
                 undone) than this report, which counts them once per bio, from the last \
                 insert to the last issue; Q2C and D2C (from the last issue) are the same",
                self.requeues
            ));
        }
        let s = &self.pairer.stats;
        if s.requests_unmatched > 0 {
            w.push(format!(
                "{} completions or requeues matched no earlier event of their request (the \
                 trace starts after it, or events are missing); they got new request ids",
                s.requests_unmatched
            ));
        }
        if s.merges_unmatched > 0 {
            w.push(format!(
                "{} merges (M/F) matched no pending request",
                s.merges_unmatched
            ));
        }
        if s.forgotten > 0 {
            w.push(format!(
                "{} requests or bios were never completed and were forgotten to bound memory",
                s.forgotten
            ));
        }
        if !self.skipped.is_empty() {
            let list: Vec<String> = self
                .skipped
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            w.push(format!(
                "records not turned into events: {}",
                list.join(", ")
            ));
        }
        w
    }
}
