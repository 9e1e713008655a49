//! Opening a trace file of any format we read, told apart by its first bytes: a recording of
//! ours, or blktrace files (one file, a directory of them, or the `DEV` prefix of
//! `DEV.blktrace.N`). Sits above both readers so that neither knows the other.
//!
//! Owns: telling formats apart, opening a path. Must not: analyze.

use std::{fs::File, io::Read, path::Path};

use crate::{
    blktrace::{BlktraceSource, format},
    record::RecordingReader,
    source::{InputError, RecordingSource, TraceFormat, TraceSource},
};

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
