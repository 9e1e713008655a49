//! The `iosched-hdd` server: mounts a FUSE file system whose root is one regular file of a
//! fixed size, kept in anonymous memory, and answers each READ and WRITE only once the
//! device model says the request is done.
//!
//! Two device kinds ([`Timing`]). The rotational disk serves requests one at a time in
//! arrival order, as a disk with one actuator and no command reordering would: it keeps a
//! virtual "busy until" time, a request starts when it arrives or when the previous one
//! finishes, whichever is later, and completes `service` later. The flash device has N
//! channels: a request starts when it arrives or when the channel that frees first does
//! (`iosched_disk::flash`), so up to N are in service at once.
//!
//! One worker thread computes each request's completion time as it arrives (a WRITE's data
//! is copied then) and keeps the replies due in a heap ordered by time. For the rotational
//! disk it sleeps to the reply's time (an absolute deadline) and sends it before looking at
//! the next request; for the flash device it sends each reply at its time and waits for the
//! next request in between. Either way the daemon's own work does not add to the modelled
//! time unless it exceeds it.
//!
//! Mounting over a regular file (rootmode S_IFREG) needs no LOOKUP, no directory code.

use std::{
    ffi::CString,
    fs::{File, OpenOptions},
    io,
    os::{
        fd::{AsRawFd as _, RawFd},
        unix::ffi::OsStrExt as _,
    },
    path::{Path, PathBuf},
    ptr::NonNull,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread,
    time::Duration,
    {cmp::Reverse, collections::BinaryHeap},
};

use thiserror::Error;

use iosched_disk::{
    DiskModel, Head,
    flash::{Channels, FlashModel, Op},
};

use crate::fuse::{self, FileAttr, InitOut, Request, init_flag, opcode, open_flag};

/// Largest READ/WRITE: 256 pages, the kernel's default `fs.fuse.max_pages_limit`. The rig sets
/// the loop device's `max_sectors_kb` to this so that one block request is one FUSE request.
pub const MAX_REQUEST: u32 = 1 << 20;
const PAGE: u32 = 4096;
/// A request buffer must hold the biggest WRITE plus its headers (the kernel fails requests
/// that do not fit).
const BUF_LEN: usize = MAX_REQUEST as usize + 64 * 1024;

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("opening /dev/fuse: {0} (is the fuse module loaded? are we root?)")]
    OpenFuse(io::Error),
    #[error("mount point {0}: must be an existing regular file")]
    MountPoint(PathBuf),
    #[error("mounting FUSE on {path}: {err}")]
    Mount { path: PathBuf, err: io::Error },
    #[error("allocating {size} bytes of backing memory: {err}")]
    Memory { size: u64, err: io::Error },
    #[error("reading /dev/fuse: {0}")]
    Read(io::Error),
    #[error("replying on /dev/fuse: {0}")]
    Reply(io::Error),
    #[error("malformed request from the kernel: {0}")]
    Protocol(#[from] fuse::ProtocolError),
    #[error("the kernel sent {0} before INIT")]
    NotInitialised(u32),
}

/// What the server is told to do.
#[derive(Clone, Debug)]
pub struct Config {
    /// The regular file to mount over; it becomes the emulated disk's file.
    pub mountpoint: PathBuf,
    /// File size, bytes.
    pub size: u64,
    /// `None`: reply at once (the daemon's own throughput, for calibration).
    pub model: Option<Timing>,
    /// Log every READ/WRITE (offset, length, service time) on stderr.
    pub verbose: bool,
    /// Serve at SCHED_FIFO priority (see `set_realtime`).
    pub realtime: bool,
}

/// The device the daemon stands in for.
#[derive(Clone, Debug)]
pub enum Timing {
    /// One actuator, requests in arrival order.
    Hdd(DiskModel),
    /// Parallel channels.
    Flash(FlashModel),
}

/// Counters printed when the server exits.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    /// Sum of modelled service times.
    pub busy: Duration,
}

/// The longest the worker waits for a request before looking at the termination flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_terminate(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    TERMINATE.store(true, Ordering::SeqCst);
}

/// SIGTERM/SIGINT set a flag; without SA_RESTART the blocking read returns EINTR and the loop
/// sees it.
fn catch_terminate() -> io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `action` is zeroed then its handler and empty mask are set before use; the
        // handler only does an atomic store.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_terminate as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The file's bytes: anonymous, lazily allocated memory (untouched pages read as zeros and
/// cost nothing), unmapped on drop.
struct Backing {
    ptr: NonNull<u8>,
    len: usize,
}

impl Backing {
    fn new(size: u64) -> Result<Self, DaemonError> {
        let err = |err| DaemonError::Memory { size, err };
        let len = usize::try_from(size).map_err(|_| err(io::ErrorKind::InvalidInput.into()))?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(err(io::Error::last_os_error()));
        }
        Ok(Self {
            ptr: NonNull::new(ptr.cast()).expect("mmap succeeded"),
            len,
        })
    }

    fn slice(&self, offset: u64, len: usize) -> &[u8] {
        let start = offset as usize;
        assert!(start <= self.len && len <= self.len - start);
        // SAFETY: in bounds (checked above) of a live mapping we own; no &mut aliases it
        // while this shared borrow of self lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), len) }
    }

    fn slice_mut(&mut self, offset: u64, len: usize) -> &mut [u8] {
        let start = offset as usize;
        assert!(start <= self.len && len <= self.len - start);
        // SAFETY: in bounds of a live mapping we own, borrowed mutably through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), len) }
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in `new`, not used after this.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// CLOCK_MONOTONIC, nanoseconds.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps until CLOCK_MONOTONIC reaches `deadline_ns` (an absolute deadline, so time spent
/// before the call is not slept again).
fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // EINTR (a signal) returns early; loop until the deadline has passed.
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

/// SCHED_FIFO for this thread and the reader thread it will start: the daemon stands in
/// for hardware, so its replies must not wait behind the workload it serves on a busy
/// machine. It sleeps between requests and blocks when there are none, so it cannot hog a
/// CPU (and the kernel's RT throttling bounds it anyway).
fn set_realtime() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: `param` is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mount(fuse_fd: RawFd, mountpoint: &Path) -> Result<(), DaemonError> {
    let err = |err| DaemonError::Mount {
        path: mountpoint.to_owned(),
        err,
    };
    let target = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| err(io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: geteuid/getegid have no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let options = CString::new(format!(
        "fd={fuse_fd},rootmode={:o},user_id={uid},group_id={gid},allow_other,max_read={MAX_REQUEST}",
        libc::S_IFREG | 0o644
    ))
    .expect("no NUL in options");
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::mount(
            c"iosched-hdd".as_ptr(),
            target.as_ptr(),
            c"fuse.iosched-hdd".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(err(io::Error::last_os_error()));
    }
    Ok(())
}

/// Mounts, serves until unmounted or signalled, and returns what was served.
pub fn run(config: &Config) -> Result<Stats, DaemonError> {
    if !config.mountpoint.metadata().is_ok_and(|m| m.is_file()) {
        return Err(DaemonError::MountPoint(config.mountpoint.clone()));
    }
    let backing = Backing::new(config.size)?;
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(DaemonError::OpenFuse)?;
    catch_terminate().map_err(DaemonError::Read)?;
    // Sleeps end within a microsecond of their deadline instead of the default 50 µs slack.
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1u64) };
    if !config.realtime {
        // Replies then compete with the workload for CPUs, as a disk's interrupt handler
        // does not; but the woken task need not wait for a real-time thread to leave its
        // CPU (measured: +0.5 ms per I/O between completion and the task running, under
        // load on 2 CPUs). Tests comparing with a workload's own latency choose this.
    } else if let Err(err) = set_realtime() {
        eprintln!(
            "iosched-hdd: warning: no real-time priority ({err}); timing will suffer under load"
        );
    }
    mount(dev.as_raw_fd(), &config.mountpoint)?;
    let mut server = Server {
        dev,
        backing,
        config,
        head: Head::default(),
        busy_until_ns: 0,
        channels: match &config.model {
            Some(Timing::Flash(m)) => Some(m.channels()),
            _ => None,
        },
        due: BinaryHeap::new(),
        next_seq: 0,
        initialised: false,
        stats: Stats::default(),
        copy_cost: CopyCost::default(),
    };
    let result = server.serve();
    if TERMINATE.load(Ordering::SeqCst) {
        // Best effort: fails (EBUSY) while a loop device still holds the file; whoever
        // attached it unmounts after detaching.
        let target = CString::new(config.mountpoint.as_os_str().as_bytes()).ok();
        if let Some(target) = target {
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::umount2(target.as_ptr(), 0) };
        }
    }
    result.map(|()| server.stats)
}

struct Server<'a> {
    dev: File,
    backing: Backing,
    config: &'a Config,
    head: Head,
    busy_until_ns: u64,
    /// The flash device's channels.
    channels: Option<Channels>,
    /// Replies waiting for their time: (when to send, arrival order, the reply).
    due: BinaryHeap<Reverse<(u64, u64, Due)>>,
    next_seq: u64,
    initialised: bool,
    stats: Stats,
    copy_cost: CopyCost,
}

/// How long replying to a READ takes per byte (the kernel copies our memory into the
/// reader's buffer inside the reply's writev): a running average over large replies.
#[derive(Default)]
struct CopyCost {
    ns_per_byte: f64,
}

impl CopyCost {
    /// Below this size the copy is a few µs and the measurement is mostly system-call noise.
    const MIN_BYTES: u64 = 64 * 1024;

    fn estimate_ns(&self, len: u64) -> u64 {
        (self.ns_per_byte * len as f64) as u64
    }

    fn observe(&mut self, len: u64, took_ns: u64) {
        if len >= Self::MIN_BYTES {
            let sample = took_ns as f64 / len as f64;
            self.ns_per_byte = if self.ns_per_byte == 0.0 {
                sample
            } else {
                // A reply preempted by the rest of the machine is not the copy's cost: cap
                // each sample so that outliers cannot drag the estimate up.
                0.9 * self.ns_per_byte + 0.1 * sample.min(1.5 * self.ns_per_byte)
            };
        }
    }
}

/// A reply the worker sends later, at its modelled completion time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// READ: the data at `offset`, `len` bytes.
    Read { unique: u64, offset: u64, len: u64 },
    /// Anything else: a body built already (WRITE's count, FSYNC's nothing).
    Data { unique: u64, body: Vec<u8> },
}

/// What a handler decided to send back.
enum Reply<'b> {
    /// Nothing (FORGET, INTERRUPT).
    None,
    Error(i32),
    Data(Vec<u8>),
    /// A slice of the backing memory (READ), sent without copying it first.
    Backing(&'b [u8]),
}

impl Server<'_> {
    /// The worker: handles requests in arrival order until unmounted, DESTROY or a signal.
    /// A reader thread takes requests off `/dev/fuse` as soon as the kernel queues them and
    /// stamps their arrival, so that a request queued while the worker sleeps or copies
    /// starts its service exactly when the previous one ends.
    fn serve(&mut self) -> Result<(), DaemonError> {
        let dev = self.dev.try_clone().map_err(DaemonError::Read)?;
        let (tx, rx) = mpsc::channel();
        thread::Builder::new()
            .name("fuse-reader".into())
            .spawn(move || read_requests(&dev, &tx))
            .map_err(DaemonError::Read)?;
        loop {
            if TERMINATE.load(Ordering::SeqCst) {
                return Ok(());
            }
            self.send_due()?;
            // Wait for the next request until the next reply is due.
            let wait = match self.due.peek() {
                Some(Reverse((at, _, _))) => {
                    Duration::from_nanos(at.saturating_sub(now_ns())).min(IDLE_POLL)
                }
                None => IDLE_POLL,
            };
            let incoming = match rx.recv_timeout(wait) {
                Ok(incoming) => incoming,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            };
            let (bytes, arrival_ns) = match incoming {
                Incoming::Request { bytes, arrival_ns } => (bytes, arrival_ns),
                Incoming::Unmounted => return Ok(()),
                Incoming::Failed(err) => return Err(DaemonError::Read(err)),
            };
            let req = Request::parse(&bytes)?;
            if req.header.opcode == opcode::DESTROY {
                while !self.due.is_empty() {
                    self.send_due()?;
                }
                self.reply(req.header.unique, Reply::Data(Vec::new()))?;
                return Ok(());
            }
            self.handle(&req, arrival_ns)?;
            if !self.parallel() {
                // One request at a time: its reply goes out before the next is looked at,
                // slept to with an absolute deadline, as the rotational disk always did.
                // (With replies sent from the heap between requests, validate's
                // single-reader-idle had 2 of 4 self-consistency rows beyond 10% in each of
                // two sets, the old daemon 0 of 4 in one, this path 1 of 4: not conclusive,
                // so the rotational disk keeps the path it was validated on.)
                while let Some(Reverse((at, _, _))) = self.due.peek() {
                    sleep_until(*at);
                    self.send_due()?;
                }
            }
        }
    }

    /// Several requests in service at once (the flash device): replies are sent from the
    /// heap between requests. Otherwise each is sent before the next request is handled.
    fn parallel(&self) -> bool {
        matches!(self.config.model, Some(Timing::Flash(_)))
    }

    /// Sends every reply whose time has come. A READ is sent early by what the kernel's
    /// copy of its data (inside our writev) has been taking, so that it lands on time.
    fn send_due(&mut self) -> Result<(), DaemonError> {
        while let Some(Reverse((at, _, _))) = self.due.peek() {
            if *at > now_ns() {
                return Ok(());
            }
            let Some(Reverse((_, _, due))) = self.due.pop() else {
                unreachable!("peeked")
            };
            match due {
                Due::Read {
                    unique,
                    offset,
                    len,
                } => {
                    let size = self.config.size;
                    let data = self.backing.slice(offset.min(size), len as usize);
                    let started = now_ns();
                    let result = reply_on(&self.dev, unique, Reply::Backing(data));
                    let took = now_ns() - started;
                    self.copy_cost.observe(len, took);
                    if self.config.verbose {
                        eprintln!("  reply {} us", took / 1000);
                    }
                    result?;
                }
                Due::Data { unique, body } => self.reply(unique, Reply::Data(body))?,
            }
        }
        Ok(())
    }

    /// Queues a reply for `at` (CLOCK_MONOTONIC ns).
    fn reply_at(&mut self, at: u64, due: Due) {
        self.next_seq += 1;
        self.due.push(Reverse((at, self.next_seq, due)));
    }

    fn attr(&self) -> FileAttr {
        // SAFETY: geteuid/getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        FileAttr {
            size: self.config.size,
            mode: libc::S_IFREG | 0o644,
            uid,
            gid,
        }
    }

    fn handle(&mut self, req: &Request<'_>, arrival_ns: u64) -> Result<(), DaemonError> {
        let h = req.header;
        if !self.initialised && h.opcode != opcode::INIT {
            return Err(DaemonError::NotInitialised(h.opcode));
        }
        let size = self.config.size;
        match h.opcode {
            opcode::INIT => {
                let init = req.init()?;
                let wanted = init_flag::ASYNC_READ
                    | init_flag::BIG_WRITES
                    | init_flag::ASYNC_DIO
                    | init_flag::MAX_PAGES;
                let out = fuse::init_out(&InitOut {
                    minor: init.minor.min(fuse::MAX_MINOR),
                    // The file is opened with direct I/O; readahead would only read what
                    // nobody asked for.
                    max_readahead: 0,
                    flags: init.flags & wanted,
                    // Background (async) requests the kernel keeps in flight to us: more than
                    // the loop device's queue depth, so that FUSE adds no queue of its own.
                    max_background: 256,
                    congestion_threshold: 192,
                    max_write: MAX_REQUEST,
                    max_pages: (MAX_REQUEST / PAGE) as u16,
                });
                self.initialised = true;
                self.reply(h.unique, Reply::Data(out))
            }
            opcode::GETATTR => {
                let out = fuse::attr_out(&self.attr());
                self.reply(h.unique, Reply::Data(out))
            }
            opcode::SETATTR => {
                let (valid, new_size) = req.setattr()?;
                if valid & fuse::FATTR_SIZE != 0 && new_size != size {
                    // The disk has a fixed size.
                    return self.reply(h.unique, Reply::Error(libc::EPERM));
                }
                let out = fuse::attr_out(&self.attr());
                self.reply(h.unique, Reply::Data(out))
            }
            opcode::OPEN => {
                let flags =
                    open_flag::DIRECT_IO | open_flag::NOFLUSH | open_flag::PARALLEL_DIRECT_WRITES;
                self.reply(h.unique, Reply::Data(fuse::open_out(0, flags)))
            }
            opcode::READ => {
                let (offset, len) = req.read()?;
                let len = u64::from(len).min(size.saturating_sub(offset));
                let deadline = self.start_io(arrival_ns, offset, len, Op::Read);
                self.stats.reads += 1;
                self.stats.read_bytes += len;
                // The kernel copies the data while we write the reply: start that early by
                // what such a copy has been taking, so the reply lands at the deadline.
                let at = deadline.saturating_sub(self.copy_cost.estimate_ns(len));
                self.reply_at(
                    at,
                    Due::Read {
                        unique: h.unique,
                        offset,
                        len,
                    },
                );
                Ok(())
            }
            opcode::WRITE => {
                let (offset, data) = req.write()?;
                let len = data.len() as u64;
                if offset.checked_add(len).is_none_or(|end| end > size) {
                    return self.reply(h.unique, Reply::Error(libc::ENOSPC));
                }
                let deadline = self.start_io(arrival_ns, offset, len, Op::Write);
                self.backing
                    .slice_mut(offset, data.len())
                    .copy_from_slice(data);
                self.stats.writes += 1;
                self.stats.write_bytes += len;
                let body = fuse::write_out(data.len() as u32);
                self.reply_at(
                    deadline,
                    Due::Data {
                        unique: h.unique,
                        body,
                    },
                );
                Ok(())
            }
            opcode::FSYNC => {
                // The rotational disk has no write cache: every write was on the platter
                // when we replied to it. The flash device's cache, if it has one, must be
                // drained first.
                self.stats.flushes += 1;
                let at = match (&self.config.model, &self.channels) {
                    (Some(Timing::Flash(m)), Some(ch)) => m.flush(ch, arrival_ns),
                    _ => arrival_ns,
                };
                self.reply_at(
                    at,
                    Due::Data {
                        unique: h.unique,
                        body: Vec::new(),
                    },
                );
                Ok(())
            }
            // FLUSH is close(2)'s, not the device's.
            opcode::FLUSH => self.reply(h.unique, Reply::Data(Vec::new())),
            opcode::RELEASE | opcode::ACCESS => self.reply(h.unique, Reply::Data(Vec::new())),
            opcode::STATFS => self.reply(h.unique, Reply::Data(fuse::statfs_out(size))),
            // The original request is answered when its time comes; FORGETs take no reply.
            opcode::FORGET | opcode::BATCH_FORGET | opcode::INTERRUPT => {
                self.reply(h.unique, Reply::None)
            }
            // The root is a file: there is nothing to look up.
            opcode::LOOKUP => self.reply(h.unique, Reply::Error(libc::ENOENT)),
            _ => self.reply(h.unique, Reply::Error(libc::ENOSYS)),
        }
    }

    /// Puts one READ/WRITE on the emulated device; returns when (CLOCK_MONOTONIC ns) it is
    /// acknowledged.
    fn start_io(&mut self, arrival: u64, offset: u64, len: u64, op: Op) -> u64 {
        let (start, done, ack) = match &self.config.model {
            None => return arrival,
            Some(Timing::Hdd(model)) => {
                let service = model.serve(&mut self.head, offset, len);
                let start = arrival.max(self.busy_until_ns);
                self.busy_until_ns = start + service.as_nanos() as u64;
                (start, self.busy_until_ns, self.busy_until_ns)
            }
            Some(Timing::Flash(model)) => {
                let ch = self.channels.as_mut().expect("flash has channels");
                let c = model.submit(ch, arrival, op, len);
                (c.start_ns, c.done_ns, c.ack_ns)
            }
        };
        self.stats.busy += Duration::from_nanos(done - start);
        if self.config.verbose {
            let op = if op == Op::Read { 'R' } else { 'W' };
            eprintln!(
                "{:.6} {op} {offset} +{len} service {} us, queued {} us, ack after {} us",
                arrival as f64 / 1e9,
                (done - start) / 1000,
                (start - arrival) / 1000,
                (ack - arrival) / 1000
            );
        }
        ack
    }

    fn reply(&self, unique: u64, reply: Reply<'_>) -> Result<(), DaemonError> {
        reply_on(&self.dev, unique, reply)
    }
}

/// What the reader thread hands the worker.
enum Incoming {
    Request { bytes: Vec<u8>, arrival_ns: u64 },
    Unmounted,
    Failed(io::Error),
}

/// Reads requests off `/dev/fuse` until the file system goes away; each request is copied
/// out at its size (a READ is 80 bytes, only a WRITE carries data).
fn read_requests(dev: &File, tx: &mpsc::Sender<Incoming>) {
    let mut buf = vec![0u8; BUF_LEN];
    loop {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::read(dev.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        let incoming = if n < 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                // A signal, or a request interrupted before we read it.
                Some(libc::EINTR | libc::ENOENT | libc::EAGAIN) => continue,
                // Unmounted (or the connection aborted): done.
                Some(libc::ENODEV) => Incoming::Unmounted,
                _ => Incoming::Failed(err),
            }
        } else {
            Incoming::Request {
                arrival_ns: now_ns(),
                bytes: buf[..n as usize].to_vec(),
            }
        };
        let last = !matches!(incoming, Incoming::Request { .. });
        if tx.send(incoming).is_err() || last {
            return;
        }
    }
}

/// Writes one reply: header and body in a single writev, as the kernel requires.
fn reply_on(dev: &File, unique: u64, reply: Reply<'_>) -> Result<(), DaemonError> {
    let (error, body): (i32, &[u8]) = match &reply {
        Reply::None => return Ok(()),
        Reply::Error(errno) => (-errno, &[]),
        Reply::Data(data) => (0, data),
        Reply::Backing(data) => (0, data),
    };
    let header = fuse::out_header(unique, error, body.len());
    let iov = [
        libc::iovec {
            iov_base: header.as_ptr() as *mut libc::c_void,
            iov_len: header.len(),
        },
        libc::iovec {
            iov_base: body.as_ptr() as *mut libc::c_void,
            iov_len: body.len(),
        },
    ];
    // SAFETY: both iovecs point to live buffers of the given lengths; the kernel only reads.
    let n = unsafe { libc::writev(dev.as_raw_fd(), iov.as_ptr(), 2) };
    if n < 0 {
        let err = io::Error::last_os_error();
        // ENOENT: the request was interrupted and aborted meanwhile; nobody waits for it.
        if err.raw_os_error() != Some(libc::ENOENT) {
            return Err(DaemonError::Reply(err));
        }
    }
    Ok(())
}
