//! Opening a trace file of any format we read, told apart by its first bytes: a recording of
//! ours, or blktrace files (one file, a directory of them, or the `DEV` prefix of
//! `DEV.blktrace.N`). Sits above both readers so that neither knows the other.
//!
//! A stream (`-` for standard input, or a FIFO) is read once, forward, as it arrives: a
//! recording of ours only (blktrace's are per-CPU files).
//!
//! Owns: telling formats apart, opening a path or a stream. Must not: analyze.

use std::{
    fs::File,
    io::{BufRead, BufReader, Read},
    os::unix::fs::FileTypeExt,
    path::Path,
};

use crate::{
    blktrace::{BlktraceSource, format},
    record::RecordingReader,
    source::{InputError, RecordingSource, TraceFormat, TraceSource},
};

/// Opens a trace of any format we read: a recording of ours, or blktrace files (one file, a
/// directory of them, or the `DEV` prefix of `DEV.blktrace.N`), told apart by their magic.
pub fn open(path: &Path) -> Result<Box<dyn TraceSource>, InputError> {
    if is_stream(path) {
        return open_stream(path);
    }
    if sniff(path)? == TraceFormat::Blktrace {
        return Ok(Box::new(BlktraceSource::open(path)?));
    }
    let reader = RecordingReader::open(path)?;
    Ok(Box::new(RecordingSource::new(path, reader)))
}

/// Whether `path` is read as a stream: `-` (standard input) or a FIFO. A stream can be read
/// only once, and only forward.
pub fn is_stream(path: &Path) -> bool {
    path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// Read buffer of a stream: a recording's chunks are up to a few MiB.
const STREAM_BUFFER: usize = 1 << 20;

/// A recording of ours read from a stream ([`is_stream`]) as it arrives.
fn open_stream(path: &Path) -> Result<Box<dyn TraceSource>, InputError> {
    let unreadable = |e: std::io::Error| InputError::Unreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let input: Box<dyn Read + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(File::open(path).map_err(unreadable)?)
    };
    let mut input = BufReader::with_capacity(STREAM_BUFFER, input);
    // Peeked, not consumed: the recording reader reads the header itself.
    let head = input.fill_buf().map_err(unreadable)?;
    if head.len() >= 4 && format::sniff([head[0], head[1], head[2], head[3]]).is_some() {
        return Err(InputError::Unreadable {
            path: path.to_path_buf(),
            reason: "blktrace data cannot be read from a stream (its traces are per-CPU files): \
                     give the files or their directory"
                .into(),
        });
    }
    let reader = RecordingReader::new(input).map_err(|e| {
        InputError::Recording(crate::record::FormatError::File {
            path: path.to_path_buf(),
            cause: Box::new(e),
        })
    })?;
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
