//! Reading a recording while its recorder still writes it (`report --follow`, `dump
//! --follow`), as `tail -f` reads a log: [`FollowInput`] reads the file and, where its data
//! ends for now, says `WouldBlock` instead of ending. The recording reader then stops before
//! the chunk not yet whole and goes on from there when called again, and a
//! [`RecordingSource`] over it releases events exactly as it would from the finished file
//! (its reordering window moves only with the events read). The input ends only when told
//! to ([`Follow::end`]): once the footer has been read, or when the follower is stopped.
//!
//! Memory stays what reading a stream takes: one chunk and one read of the file, the
//! reordering window, and whatever the consumer keeps (the report: requests in flight).
//!
//! Owns: a growing file as an input, opening it once its header is whole. Must not: sleep,
//! decide when to stop, print (the command's loop does).

use std::{
    fs::File,
    io::{self, Read},
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use crate::{
    blktrace::format,
    record::{FormatError, RecordingReader},
    source::{InputError, RecordingSource},
};

/// A recording file being written, as an input that pauses (`WouldBlock`) at the end of
/// its data until [`Follow::end`] is called.
pub struct FollowInput {
    shared: Arc<Shared>,
}

struct Shared {
    file: File,
    /// Bytes read from the file so far.
    read: AtomicU64,
    /// Where the input ends: `u64::MAX` until [`Follow::end`].
    limit: AtomicU64,
}

impl Read for FollowInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let s = &*self.shared;
        let pos = s.read.load(Ordering::Relaxed);
        let limit = s.limit.load(Ordering::Relaxed);
        let room = usize::try_from(limit.saturating_sub(pos)).unwrap_or(usize::MAX);
        let want = buf.len().min(room);
        if want == 0 {
            return Ok(0);
        }
        let n = (&s.file).read(&mut buf[..want])?;
        if n > 0 {
            s.read.fetch_add(n as u64, Ordering::Relaxed);
            return Ok(n);
        }
        // The end of what the file holds now.
        let len = s.file.metadata()?.len();
        if len < pos {
            return Err(io::Error::other(format!(
                "the file shrank to {len} bytes after {pos} had been read: another recording \
                 was started over it"
            )));
        }
        if limit != u64::MAX {
            // Ended at a length the file no longer reaches: nothing more will come.
            return Ok(0);
        }
        Err(io::ErrorKind::WouldBlock.into())
    }
}

/// The handle on a followed file: how much of it was read, whether it still grows, and
/// [`end`](Self::end).
#[derive(Clone)]
pub struct Follow {
    shared: Arc<Shared>,
    path: PathBuf,
    /// (device, inode) of the file opened.
    id: (u64, u64),
}

impl Follow {
    /// Ends the input at what the file holds now: the reader reads up to there, then finds
    /// the end (a chunk cut there is left out with a warning). After the footer, that is
    /// the whole recording.
    pub fn end(&self) {
        let len = self.file_len().unwrap_or(0);
        let read = self.shared.read.load(Ordering::Relaxed);
        self.shared.limit.store(len.max(read), Ordering::Relaxed);
    }

    /// Whether [`end`](Self::end) was called.
    pub fn is_ended(&self) -> bool {
        self.shared.limit.load(Ordering::Relaxed) != u64::MAX
    }

    /// Bytes read from the file so far.
    pub fn bytes_read(&self) -> u64 {
        self.shared.read.load(Ordering::Relaxed)
    }

    /// The file's length now.
    pub fn file_len(&self) -> io::Result<u64> {
        Ok(self.shared.file.metadata()?.len())
    }

    /// The path followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path no longer names the file being read (removed, or replaced by another): a
    /// recorder writing to the path now writes elsewhere.
    pub fn replaced(&self) -> bool {
        std::fs::metadata(&self.path).map_or(true, |m| (m.dev(), m.ino()) != self.id)
    }
}

/// A recording followed: its source (time-ordered events, pausing where the data ends for
/// now) and the handle on its file.
pub type Followed = (RecordingSource<FollowInput>, Follow);

/// Opens `path` to follow it: `Ok(None)` while there is no recording to read yet (no such
/// file, or its header not yet whole); an error for what can never become one (not a
/// regular file, blktrace data, not a recording, a damaged header).
pub fn open(path: &Path) -> Result<Option<Followed>, InputError> {
    let unreadable = |reason: String| InputError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    let file = match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e.to_string())),
        Ok(file) => file,
    };
    let meta = file.metadata().map_err(|e| unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unreadable(
            "not a regular file: only a recording being written to a file can be followed".into(),
        ));
    }
    let mut magic = [0u8; 4];
    if (&file).read_exact(&mut magic).is_ok() && format::sniff(magic).is_some() {
        return Err(unreadable(
            "blktrace data cannot be followed: only recordings of `iosched-trace record` can"
                .into(),
        ));
    }
    let id = (meta.dev(), meta.ino());
    let file = File::open(path).map_err(|e| unreadable(e.to_string()))?;
    let shared = Arc::new(Shared {
        file,
        read: AtomicU64::new(0),
        limit: AtomicU64::new(u64::MAX),
    });
    let wrap = |e: FormatError| {
        InputError::Recording(FormatError::File {
            path: path.to_path_buf(),
            cause: Box::new(e),
        })
    };
    match RecordingReader::new(FollowInput {
        shared: shared.clone(),
    }) {
        Ok(reader) => {
            let follow = Follow {
                shared,
                path: path.to_path_buf(),
                id,
            };
            Ok(Some((RecordingSource::new(path, reader), follow)))
        }
        Err(e) if e.is_waiting() => {
            // Not all of the header yet. What is there already may say it never will be a
            // recording: read it as it stands.
            let now = File::open(path).map_err(|e| unreadable(e.to_string()))?;
            match RecordingReader::new(now) {
                Ok(_) | Err(FormatError::Empty | FormatError::TruncatedHeader { .. }) => Ok(None),
                Err(e) => Err(wrap(e)),
            }
        }
        Err(e) => Err(wrap(e)),
    }
}

#[cfg(test)]
mod tests;
