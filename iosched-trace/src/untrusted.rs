//! Every reader of bytes someone else made, one function each, as the commands use them:
//! recordings of ours and blktrace files (as `dump`, `report` and `replay` read them), device
//! and host profiles (`--device-profile`, `--host-profile`), and the text of BFQ's decision
//! log (`--sched-log`). The fuzz targets (fuzz/) and the corpus replay
//! (tests/fuzz_corpus.rs) call these, so what is fuzzed is what ships. Each returns nothing:
//! a refused input is an error the reader returns, and the only failure is a panic, a hang
//! or memory without bound.
//!
//! Owns: the entry points. Must not: decide anything a command does not.

use std::{
    io::{self, Cursor},
    path::Path,
};

use iosched_core::{
    analysis::{self, Options},
    blktrace::BlktraceSource,
    record::{HostProfile, RecordingReader},
    source::{RecordingSource, TraceSource},
};
use iosched_model::{bfqlog, device::DeviceModel, replay::Replayer};

use crate::{schedlog, views::dump};

/// A recording of ours: dumped, reported and replayed (workload extraction and device fit),
/// as it is and with its chunks' CRCs made right, so that damage inside a chunk reaches the
/// decoders behind the CRC check instead of stopping at it.
pub fn recording(data: &[u8]) {
    read_recording(data);
    let fixed = with_chunk_crcs_fixed(data);
    if fixed != data {
        read_recording(&fixed);
    }
}

/// `data` with the CRC of every whole chunk (a chunk magic, a declared length that fits)
/// recomputed over its type, length and payload; anything else left as it is.
fn with_chunk_crcs_fixed(data: &[u8]) -> Vec<u8> {
    use iosched_core::record::{CHUNK_HEADER_LEN, CHUNK_MAGIC, FILE_HEADER_LEN, chunk_crc};
    let mut out = data.to_vec();
    let mut at = FILE_HEADER_LEN;
    while at + CHUNK_HEADER_LEN <= out.len() && out[at..at + 4] == CHUNK_MAGIC {
        let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().unwrap());
        let (typ, len) = (word(at + 4), word(at + 8) as usize);
        let payload = at + CHUNK_HEADER_LEN;
        let Some(end) = payload.checked_add(len).filter(|&e| e <= out.len()) else {
            break;
        };
        let crc = chunk_crc(typ, &[&out[payload..end]]);
        out[at + 12..at + 16].copy_from_slice(&crc.to_le_bytes());
        at = end;
    }
    out
}

fn read_recording(data: &[u8]) {
    let open = || -> Option<RecordingSource<Cursor<Vec<u8>>>> {
        let reader = RecordingReader::new(Cursor::new(data.to_vec())).ok()?;
        Some(RecordingSource::new(Path::new("fuzz.istrace"), reader))
    };
    let Some(mut source) = open() else {
        return;
    };
    let _ = dump::write_text(&mut io::sink(), &mut source);
    if let Some(mut source) = open() {
        let _ = analysis::analyze(&mut source, &Options::default());
    }
    if let Some(mut source) = open() {
        let _ = Replayer::from_source(&mut source, None, None);
    }
}

/// blktrace data (version 7 or 8, either byte order): the first byte splits the rest into
/// two per-CPU files of one device, so the merge of streams is exercised too.
pub fn blktrace(data: &[u8]) {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = if rest.is_empty() {
        0
    } else {
        split as usize * rest.len() / 255
    };
    let (a, b) = rest.split_at(at.min(rest.len()));
    let open = || {
        let streams: Vec<(String, Box<dyn io::Read>)> = vec![
            ("fuzz.blktrace.0".into(), Box::new(Cursor::new(a.to_vec()))),
            ("fuzz.blktrace.1".into(), Box::new(Cursor::new(b.to_vec()))),
        ];
        BlktraceSource::from_streams(Path::new("fuzz"), streams).ok()
    };
    if let Some(mut source) = open() {
        let _ = dump::write_text(&mut io::sink(), &mut source as &mut dyn TraceSource);
    }
    if let Some(mut source) = open() {
        let _ = analysis::analyze(&mut source, &Options::default());
    }
}

/// A device profile (`--device-profile`): read, checked, and a few service times asked of
/// the model it gives.
pub fn device_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(model) = DeviceModel::from_profile_text(text) {
        for (head, sector, sectors) in [(0, 8, 8), (0, 1 << 20, 256), (u64::MAX >> 10, 0, 1)] {
            let _ = model.service_ns(head, sector, sectors);
            let _ = model.service_ns_of(head, sector, sectors, true);
        }
    }
}

/// A host profile (`--host-profile`, or the one `record` copies into a header).
pub fn host_profile(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = HostProfile::from_text(text);
    }
}

/// Lines of the ftrace `blk` tracer's text as `--sched-log` reads them, and the BFQ
/// decisions parsed out of each message.
pub fn sched_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Some(note) = schedlog::parse_line(line) {
            let _ = bfqlog::parse(&note.text);
        }
    }
}

/// One reader's entry point.
pub type EntryPoint = fn(&[u8]);

/// The entry points by the name of their fuzz target and corpus directory.
pub const TARGETS: &[(&str, EntryPoint)] = &[
    ("recording", recording),
    ("blktrace", blktrace),
    ("device_profile", device_profile),
    ("host_profile", host_profile),
    ("sched_log", sched_log),
];
