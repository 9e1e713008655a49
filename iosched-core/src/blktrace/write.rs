//! Writing blktrace per-CPU files (`DIR/NAME.blktrace.CPU`, protocol version 7, host byte
//! order) from our events, so blkparse, btt and `fio --read_iolog` read our recordings.
//!
//! Each file gets per-CPU sequence numbers from 1, a process note before a task's first event
//! in that file (and again when its name changes), one timestamp note when the wall clock is
//! known, and message notes. Events are released in time order through a bounded window, as
//! the recorder hands them over in ring-buffer arrival order. Events blktrace has no action
//! for are counted, not written.

use std::{
    cmp::Reverse,
    collections::{BTreeMap, BinaryHeap, HashMap},
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use super::{
    format::{ByteOrder, COMM_LEN, Record, VERSION_7, cat, notify},
    map,
};
use crate::{
    event::{Comm, Dev, Event, Note},
    record::{ClockBase, DeviceInfo},
};

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a conversion wrote and left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteSummary {
    pub files: Vec<PathBuf>,
    /// Records written by blkparse action letter (notes as `notes`).
    pub records: BTreeMap<String, u64>,
    /// Events not written, by kind name.
    pub skipped: BTreeMap<String, u64>,
    pub events_written: u64,
}

impl WriteSummary {
    /// The events not written, as `kind count, kind count` (`None` when every event was).
    pub fn skipped_list(&self) -> Option<String> {
        (!self.skipped.is_empty()).then(|| {
            let kinds: Vec<String> = self
                .skipped
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            kinds.join(", ")
        })
    }
}

enum Item {
    Event(Event),
    Note(Note),
}

impl Item {
    fn ts(&self) -> u64 {
        match self {
            Item::Event(e) => e.ts_ns,
            Item::Note(n) => n.ts_ns,
        }
    }
}

struct Held {
    ts: u64,
    arrival: u64,
    item: Item,
}

impl PartialEq for Held {
    fn eq(&self, o: &Self) -> bool {
        (self.ts, self.arrival) == (o.ts, o.arrival)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Held {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.ts, self.arrival).cmp(&(o.ts, o.arrival))
    }
}

struct CpuFile {
    path: PathBuf,
    w: BufWriter<File>,
    sequence: u32,
    /// Comm last announced for each pid in this file.
    comms: HashMap<u32, Comm>,
}

/// Writes blktrace per-CPU files into a directory.
pub struct BlktraceWriter {
    dir: PathBuf,
    names: HashMap<Dev, String>,
    files: BTreeMap<(Dev, u32), CpuFile>,
    held: BinaryHeap<Reverse<Held>>,
    arrivals: u64,
    newest: u64,
    window_ns: u64,
    clock: Option<ClockBase>,
    timestamp_written: bool,
    buf: Vec<u8>,
    bytes: u64,
    summary: WriteSummary,
}

impl BlktraceWriter {
    /// How far out of time order events may arrive (ring-buffer arrival across CPUs).
    pub const WINDOW_NS: u64 = 100_000_000;

    /// Creates `dir` if needed. Files are named after `devices` (`loop0.blktrace.0`), or
    /// `MAJ,MIN` for devices not listed. `clock` gives the timestamp note's wall clock.
    pub fn create(
        dir: &Path,
        devices: &[DeviceInfo],
        clock: Option<ClockBase>,
    ) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|source| WriteError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(BlktraceWriter {
            dir: dir.to_path_buf(),
            names: devices
                .iter()
                .filter(|d| !d.name.is_empty())
                // blktrace's own rule for names with slashes (dm/..., partitions).
                .map(|d| (d.dev, d.name.replace('/', "_")))
                .collect(),
            files: BTreeMap::new(),
            held: BinaryHeap::new(),
            arrivals: 0,
            newest: 0,
            window_ns: Self::WINDOW_NS,
            clock,
            timestamp_written: false,
            buf: Vec::with_capacity(256),
            bytes: 0,
            summary: WriteSummary::default(),
        })
    }

    pub fn push(&mut self, ev: &Event) -> Result<(), WriteError> {
        self.hold(Item::Event(*ev))
    }

    /// A text message (`m N text` in blkparse), e.g. a scheduler's log line.
    pub fn note(&mut self, note: &Note) -> Result<(), WriteError> {
        self.hold(Item::Note(note.clone()))
    }

    fn hold(&mut self, item: Item) -> Result<(), WriteError> {
        let ts = item.ts();
        self.newest = self.newest.max(ts);
        self.held.push(Reverse(Held {
            ts,
            arrival: self.arrivals,
            item,
        }));
        self.arrivals += 1;
        while let Some(Reverse(oldest)) = self.held.peek() {
            if self.newest - oldest.ts <= self.window_ns && self.held.len() <= 1 << 18 {
                break;
            }
            let Some(Reverse(held)) = self.held.pop() else {
                break;
            };
            self.write(held.item)?;
        }
        Ok(())
    }

    /// Flushes every file's buffer, keeping events still held for ordering.
    pub fn flush_files(&mut self) -> Result<(), WriteError> {
        for f in self.files.values_mut() {
            f.w.flush().map_err(|source| WriteError::Io {
                path: f.path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Writes what is held and flushes every file.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        while let Some(Reverse(held)) = self.held.pop() {
            self.write(held.item)?;
        }
        for f in self.files.values_mut() {
            f.w.flush().map_err(|source| WriteError::Io {
                path: f.path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<WriteSummary, WriteError> {
        self.flush()?;
        // blkparse opens NAME.blktrace.0, .1, ... and stops at the first missing file, as
        // blktrace writes one file per CPU even if empty: do the same up to the last CPU.
        let mut last_cpu: BTreeMap<Dev, u32> = BTreeMap::new();
        for &(dev, cpu) in self.files.keys() {
            let last = last_cpu.entry(dev).or_default();
            *last = (*last).max(cpu);
        }
        for (dev, last) in last_cpu {
            for cpu in 0..last {
                self.file(dev, cpu)?;
            }
        }
        for f in self.files.values_mut() {
            f.w.get_ref().sync_all().map_err(|source| WriteError::Io {
                path: f.path.clone(),
                source,
            })?;
        }
        self.summary.files = self.files.values().map(|f| f.path.clone()).collect();
        Ok(self.summary)
    }

    /// Bytes written so far (into the files' buffers).
    pub fn bytes_written(&self) -> u64 {
        self.bytes
    }

    /// Events written so far.
    pub fn events_written(&self) -> u64 {
        self.summary.events_written
    }

    fn write(&mut self, item: Item) -> Result<(), WriteError> {
        match item {
            Item::Event(ev) => {
                let Some(rec) = map::event_record(&ev) else {
                    *self
                        .summary
                        .skipped
                        .entry(ev.kind.name().to_string())
                        .or_default() += 1;
                    return Ok(());
                };
                let letter = ev.kind.action(ev.error == 1);
                self.write_event(&ev, rec)?;
                *self.summary.records.entry(letter.to_string()).or_default() += 1;
                self.summary.events_written += 1;
            }
            Item::Note(n) => {
                let rec = Record {
                    version: VERSION_7,
                    time: n.ts_ns,
                    action: cat::NOTIFY | u64::from(notify::MESSAGE),
                    pid: n.pid,
                    device: n.dev.to_kernel(),
                    cpu: u32::from(n.cpu),
                    // BLK_TN_MAX_MSG: the kernel never writes longer messages.
                    pdu: n.text.as_bytes()[..n.text.len().min(128)].to_vec(),
                    ..Record::default()
                };
                self.write_record(n.dev, u32::from(n.cpu), rec)?;
                *self.summary.records.entry("notes".into()).or_default() += 1;
            }
        }
        Ok(())
    }

    fn write_event(&mut self, ev: &Event, mut rec: Record) -> Result<(), WriteError> {
        let cpu = u32::from(ev.cpu);
        if !self.timestamp_written
            && let Some(clock) = self.clock
        {
            self.timestamp_written = true;
            let wall = clock.to_realtime(ev.ts_ns);
            let mut pdu = Vec::with_capacity(8);
            // Two host-order u32 words: seconds (truncated, as the kernel does) and ns.
            pdu.extend_from_slice(&((wall / 1_000_000_000) as u32).to_ne_bytes());
            pdu.extend_from_slice(&((wall % 1_000_000_000) as u32).to_ne_bytes());
            let note = Record {
                version: VERSION_7,
                time: ev.ts_ns,
                action: cat::NOTIFY | u64::from(notify::TIMESTAMP),
                device: ev.dev.to_kernel(),
                cpu,
                pdu,
                ..Record::default()
            };
            self.write_record(ev.dev, cpu, note)?;
        }
        let file = self.file(ev.dev, cpu)?;
        if file.comms.get(&ev.pid) != Some(&ev.comm) {
            file.comms.insert(ev.pid, ev.comm);
            let mut pdu = ev.comm.0.to_vec();
            pdu.truncate(COMM_LEN);
            let note = Record {
                version: VERSION_7,
                time: ev.ts_ns,
                action: cat::NOTIFY | u64::from(notify::PROCESS),
                pid: ev.pid,
                device: ev.dev.to_kernel(),
                cpu,
                pdu,
                ..Record::default()
            };
            self.write_record(ev.dev, cpu, note)?;
        }
        let file = self.file(ev.dev, cpu)?;
        file.sequence += 1;
        rec.sequence = file.sequence;
        self.write_record(ev.dev, cpu, rec)
    }

    fn write_record(&mut self, dev: Dev, cpu: u32, rec: Record) -> Result<(), WriteError> {
        self.buf.clear();
        rec.encode_v7(ByteOrder::NATIVE, &mut self.buf);
        let buf = std::mem::take(&mut self.buf);
        let file = self.file(dev, cpu)?;
        let result = file.w.write_all(&buf).map_err(|source| WriteError::Io {
            path: file.path.clone(),
            source,
        });
        self.bytes += buf.len() as u64;
        self.buf = buf;
        result
    }

    fn file(&mut self, dev: Dev, cpu: u32) -> Result<&mut CpuFile, WriteError> {
        if !self.files.contains_key(&(dev, cpu)) {
            let name = self
                .names
                .get(&dev)
                .cloned()
                .unwrap_or_else(|| format!("{},{}", dev.major, dev.minor));
            let path = self.dir.join(format!("{name}.blktrace.{cpu}"));
            let f = crate::output_file::create(&path).map_err(|source| WriteError::Io {
                path: path.clone(),
                source,
            })?;
            self.files.insert(
                (dev, cpu),
                CpuFile {
                    path,
                    w: BufWriter::with_capacity(256 << 10, f),
                    sequence: 0,
                    comms: HashMap::new(),
                },
            );
        }
        Ok(self.files.get_mut(&(dev, cpu)).expect("inserted above"))
    }
}
