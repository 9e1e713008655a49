//! `--follow` (`report`, `dump`): a recording read while `iosched-trace record -o FILE`
//! still writes it, as `tail -f` reads a log. [`Follower`] is a [`TraceSource`] over
//! `iosched_core::follow`'s pausing input: where the data ends for now it sleeps and reads
//! again, so that `report`'s analysis and `dump` read it as they read any trace, and only
//! see its end when there is one:
//!
//! - the recorder closed the file: its footer was read (the report is then that of the
//!   finished file, event for event);
//! - SIGINT or SIGTERM: following stops at what the file holds then (a chunk still being
//!   written is left out), and the warnings say the recording was not closed yet;
//! - a recorder killed (`kill -9`, a crash) leaves no footer: when the file has not grown
//!   for [`STALL_NOTE`] a note says so, and Ctrl-C ends it.
//!
//! A [`Watch`] sees the events as they are read, ahead of the reordering window that holds
//! the last ones back until newer ones come (`report --follow`'s interval lines).
//!
//! Owns: waiting, the signals, what to say about a file that stops growing. Must not:
//! decode (core's reader does), render.

use std::{
    collections::BTreeMap,
    path::Path,
    thread,
    time::{Duration, Instant},
};

use anyhow::bail;
use iosched_core::{
    event::{Event, Note},
    follow::{Follow, FollowInput},
    record::{CpuSample, Footer, Header, ProcessInfo, Stats},
    source::{InputError, RecordingSource, TraceMeta, TraceSource},
    trace_file,
};

use crate::live::stop;

/// How long to sleep where the data ends before looking again: the recorder writes about
/// once a second.
pub const POLL: Duration = Duration::from_millis(100);
/// How long to wait for FILE to appear and hold a whole header (the recorder loads and
/// attaches its programs before it creates the file).
pub const APPEAR_WAIT: Duration = Duration::from_secs(30);
/// A file without a footer that has not grown for this long: its recorder writes at least
/// once a second, so it has probably stopped without closing it.
pub const STALL_NOTE: Duration = Duration::from_secs(5);

/// What sees the events of a followed recording as they are read.
pub trait Watch {
    /// Events just read, in file (arrival) order, possibly none (the data paused): called
    /// after every read, with the source as it stands (its statistics, its CPU samples).
    fn read(&mut self, arrived: &[Event], source: &dyn TraceSource);
    /// The recording ended (footer, or following stopped): everything has been read.
    fn end(&mut self, source: &dyn TraceSource);
}

/// A recording followed as it grows. Created by [`open`].
pub struct Follower {
    source: RecordingSource<FollowInput>,
    follow: Follow,
    /// The command, for its notes on stderr (`report --follow: ...`).
    command: &'static str,
    watch: Option<Box<dyn Watch>>,
    arrived: Vec<Event>,
    last_len: u64,
    last_growth: Instant,
    stall_noted: bool,
    /// Following was stopped by a signal; the file had then not grown for this long, if
    /// that was long enough to be noted.
    stopped: Option<Option<Duration>>,
    ended: bool,
    /// See [`Follower::release_by_writer_clock`].
    by_writer_clock: bool,
    /// See [`Follower::on_wait`].
    on_wait: Option<Box<dyn FnMut()>>,
}

/// Opens `path` to follow it, waiting up to [`APPEAR_WAIT`] for a recording to appear there
/// (a recorder just started creates it once its programs are attached). From here on
/// SIGINT and SIGTERM stop following rather than end the process.
pub fn open(
    path: &Path,
    command: &'static str,
    watch: Option<Box<dyn Watch>>,
) -> anyhow::Result<Follower> {
    if trace_file::is_stream(path) {
        bail!(
            "--follow reads a file a recorder is writing; {} is a stream, which {command} \
             reads as it arrives anyway: leave out --follow",
            path.display()
        );
    }
    stop::install_once().map_err(|e| anyhow::anyhow!("installing signal handlers: {e}"))?;
    let started = Instant::now();
    let mut said = false;
    let (source, follow) = loop {
        if let Some(opened) = iosched_core::follow::open(path)? {
            break opened;
        }
        if stop::requested() {
            bail!(
                "interrupted while waiting for a recording in {}",
                path.display()
            );
        }
        if started.elapsed() >= APPEAR_WAIT {
            bail!(
                "{}: no recording appeared there within {} s (is `iosched-trace record -o {}` \
                 running?)",
                path.display(),
                APPEAR_WAIT.as_secs(),
                path.display()
            );
        }
        if !said {
            eprintln!(
                "{command} --follow: waiting for a recording in {} (up to {} s)",
                path.display(),
                APPEAR_WAIT.as_secs()
            );
            said = true;
        }
        thread::sleep(POLL);
    };
    eprintln!(
        "{command} --follow: reading {} as it is written, until its recorder closes it; \
         Ctrl-C stops there",
        path.display()
    );
    let mut source = source;
    if watch.is_some() {
        source.keep_arrivals();
    }
    Ok(Follower {
        last_len: follow.file_len().unwrap_or(0),
        source,
        follow,
        command,
        watch,
        arrived: Vec::new(),
        last_growth: Instant::now(),
        stall_noted: false,
        stopped: None,
        ended: false,
        by_writer_clock: false,
        on_wait: None,
    })
}

impl Follower {
    /// Where no event comes for a while, releases the last ones read by the recorder's
    /// clock ([`RecordingSource::release_by_writer_clock`]) instead of holding them for
    /// reordering until newer ones come: `dump --follow` shows a burst of I/O within a
    /// second or so even when the devices then go idle. An event stored unusually late is
    /// then out of time order (a warning counts it), where `dump FILE` might place it; the
    /// report does not do this, as it must be the finished file's.
    pub fn release_by_writer_clock(mut self) -> Self {
        self.by_writer_clock = true;
        self
    }

    /// Calls `f` each time the data pauses, before sleeping: `dump --follow` flushes its
    /// output there, so that it can buffer it while events come in bulk.
    pub fn on_wait(mut self, f: impl FnMut() + 'static) -> Self {
        self.on_wait = Some(Box::new(f));
        self
    }

    /// Whether following was stopped by a signal before the recorder closed the file.
    pub fn was_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// Hands what was read to the watch.
    fn feed_watch(&mut self) {
        if let Some(watch) = &mut self.watch {
            self.arrived.clear();
            self.source.take_arrivals(&mut self.arrived);
            watch.read(&self.arrived, &self.source);
        }
    }

    /// Nothing more to read for now: end the input if the recording is over or a signal
    /// came, else note a file that stopped growing, and sleep.
    fn wait(&mut self) {
        if self.source.footer().is_some() {
            // The recorder closed the file: the footer is its last chunk.
            self.follow.end();
            return;
        }
        if stop::requested() {
            self.stop();
            return;
        }
        if self.by_writer_clock {
            self.source.release_by_writer_clock();
            if self.source.ready() > 0 {
                return;
            }
        }
        if let Some(f) = &mut self.on_wait {
            f();
        }
        let len = self.follow.file_len().unwrap_or(self.last_len);
        if len != self.last_len {
            self.last_len = len;
            self.last_growth = Instant::now();
            self.stall_noted = false;
        } else if !self.stall_noted && self.last_growth.elapsed() >= STALL_NOTE {
            let path = self.follow.path().display();
            let why = if self.follow.replaced() {
                format!(
                    "{path} now names another file, or none: the recording followed is no longer written to"
                )
            } else {
                format!(
                    "{path} has not grown for {} s and has no footer: its recorder has \
                     probably stopped without closing it (killed?)",
                    STALL_NOTE.as_secs()
                )
            };
            eprintln!(
                "{} --follow: {why}; Ctrl-C ends here, with what was read",
                self.command
            );
            self.stall_noted = true;
        }
        thread::sleep(POLL);
    }

    /// A signal: read what the file holds now, and no further.
    fn stop(&mut self) {
        if self.source.footer().is_some() {
            // Closed already: the rest is the end of the recording.
            self.follow.end();
            return;
        }
        let stalled = self.stall_noted.then(|| self.last_growth.elapsed());
        self.stopped = Some(stalled);
        self.source.mark_still_written();
        self.follow.end();
    }

    fn end_watch(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(watch) = &mut self.watch {
            watch.end(&self.source);
        }
    }
}

impl TraceSource for Follower {
    fn meta(&self) -> &TraceMeta {
        self.source.meta()
    }

    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        let mut one = Vec::with_capacity(1);
        match self.next_batch(&mut one, 1) {
            Ok(()) => one.pop().map(Ok),
            Err(e) => Some(Err(e)),
        }
    }

    fn next_batch(&mut self, out: &mut Vec<Event>, max: usize) -> Result<(), InputError> {
        loop {
            let before = out.len();
            let result = self.source.next_batch(out, max);
            self.feed_watch();
            match result {
                Err(e) if e.is_waiting() => self.wait(),
                Ok(()) if out.len() == before => {
                    self.end_watch();
                    return Ok(());
                }
                Ok(()) => {
                    // A recorder writing faster than this reads never lets it wait: look
                    // for a signal here too.
                    if self.stopped.is_none() && !self.follow.is_ended() && stop::requested() {
                        self.stop();
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn processes(&self) -> &BTreeMap<u32, ProcessInfo> {
        self.source.processes()
    }

    fn notes(&self) -> &[Note] {
        self.source.notes()
    }

    fn lost(&self) -> Option<u64> {
        self.source.lost()
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = self.source.warnings();
        if let Some(Some(stalled)) = self.stopped {
            w.push(format!(
                "{} had not grown for {:.0} s when following stopped: its recorder had \
                 probably stopped without closing it (killed?)",
                self.follow.path().display(),
                stalled.as_secs_f64()
            ));
        }
        w
    }

    fn header(&self) -> Option<&Header> {
        self.source.header()
    }

    fn stats(&self) -> Option<&Stats> {
        self.source.stats()
    }

    fn footer(&self) -> Option<&Footer> {
        self.source.footer()
    }

    fn events_missing(&self) -> u64 {
        self.source.events_missing()
    }

    fn cpu_samples(&self) -> &[CpuSample] {
        self.source.cpu_samples()
    }
}
