//! The capture side of `live`: a thread with its own runtime that loads the programs, drains
//! the ring buffer, puts events in time order, feeds the [`IntervalBuilder`] and sends each
//! finished interval over a bounded channel. The view never touches the capture.
//!
//! Owns: the capture `Session`, the interval clock. Must not: render or print
//! (stderr belongs to the terminal while the view runs).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, SyncSender, TrySendError},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::Context;

use crate::{
    capture::{
        CaptureOptions, ProgramSet,
        session::{Kernel, Session, describe_devices},
    },
    devices::Disk,
};
use iosched_core::record::{ClockBase, DeviceInfo};

use super::interval::{IntervalBuilder, Reorder, Snapshot};

/// How long to wait for a wake-up before draining anyway.
const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// Events are held this long (trace time) before release: longer than any event can take to
/// reach us, short enough for the view to follow within an interval. The eBPF side stages up
/// to 42 events per CPU; a batch is sent when full, by the next event once 10 ms old, or by
/// the collector's flush of batches that waited 20 ms, checked every 20 ms: up to ~40 ms on a
/// quiet CPU, plus a drain period. 20 ms here dropped an event now and then.
const REORDER_DELAY_NS: u64 = 100_000_000;
/// Finished intervals waiting for the view; more means the view is stuck, and the oldest
/// news is the least useful.
const CHANNEL_DEPTH: usize = 8;

#[derive(Clone, Debug)]
pub struct CollectorConfig {
    pub disks: Vec<Disk>,
    pub interval: Duration,
    pub ring_size: u32,
    pub wakeup_bytes: u64,
    pub verbose: bool,
    /// Drop every drained event instead of building intervals from it (benchmark only).
    pub discard_events: bool,
}

/// What the collector sends.
#[derive(Debug)]
pub enum Message {
    Snapshot(Box<Snapshot>),
    /// The capture failed; the collector has stopped.
    Failed(String),
}

/// A running collector. Dropping it stops the capture (programs detached) and joins.
pub struct Collector {
    pub rx: Receiver<Message>,
    /// Device descriptions read at start (scheduler and tunables).
    pub devices: Vec<DeviceInfo>,
    /// Optional programs left out, with why.
    pub skipped: Vec<(&'static str, String)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    /// Loads and attaches the programs; returns once they are attached, or with the error
    /// (so it can be printed before the terminal changes mode).
    pub fn start(config: CollectorConfig) -> anyhow::Result<Collector> {
        let devices = describe_devices(&config.disks)?;
        // As `record` reads it. A memlock limit not raised goes unsaid here, even with -v:
        // it matters only before 5.11, where loading then fails with its own error.
        let kernel = Kernel::prepare()?;
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let (tx, rx) = mpsc::sync_channel(CHANNEL_DEPTH);
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread_devices = devices.clone();
        let thread = std::thread::Builder::new()
            .name("live-collector".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("starting the async runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(collect(
                    config,
                    kernel,
                    thread_devices,
                    ready_tx,
                    tx,
                    thread_stop,
                ));
            })
            .context("starting the collector thread")?;
        let skipped = match ready_rx.recv() {
            Ok(Ok(skipped)) => skipped,
            Ok(Err(e)) => {
                let _ = thread.join();
                anyhow::bail!(e);
            }
            Err(_) => {
                let _ = thread.join();
                anyhow::bail!("the collector thread ended before attaching its programs");
            }
        };
        Ok(Collector {
            rx,
            devices,
            skipped,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

type Ready = Result<Vec<(&'static str, String)>, String>;

async fn collect(
    config: CollectorConfig,
    kernel: Kernel,
    devices: Vec<DeviceInfo>,
    ready: SyncSender<Ready>,
    tx: SyncSender<Message>,
    stop: Arc<AtomicBool>,
) {
    let options = CaptureOptions {
        disks: config.disks.clone(),
        ring_size: config.ring_size,
        wakeup_bytes: config.wakeup_bytes,
        extra_events: false,
        wakeups: false,
        verbose: config.verbose,
        programs: ProgramSet::Lifecycle,
        plug_events: false,
    };
    let mut session = match Session::start(&options, &kernel) {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let start = ClockBase::now().monotonic_ns;
    let mut builder = IntervalBuilder::new(devices, start, config.interval.as_nanos() as u64);
    let _ = ready.send(Ok(session.skipped().to_vec()));
    let discard = config.discard_events;
    if let Err(e) = run(&mut session, &mut builder, &tx, &stop, discard).await {
        let _ = tx.send(Message::Failed(e.to_string()));
    }
}

async fn run(
    session: &mut Session,
    builder: &mut IntervalBuilder,
    tx: &SyncSender<Message>,
    stop: &AtomicBool,
    discard: bool,
) -> anyhow::Result<()> {
    let mut batch = Vec::with_capacity(1 << 14);
    let mut reorder = Reorder::default();
    let mut done = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        session.next_batch(&mut batch, DRAIN_EVERY).await?;
        if discard {
            // Counted by the completion check already (the session saw each one).
            batch.clear();
        } else {
            for ev in batch.drain(..) {
                reorder.push(ev);
            }
        }
        let watermark = ClockBase::now()
            .monotonic_ns
            .saturating_sub(REORDER_DELAY_NS);
        if watermark >= builder.window().to {
            // Snapshots older than the reorder delay have all their events by now.
            let stats = session.checkpoint(watermark)?;
            builder.set_lost(stats.lost());
            builder.set_untraced(iosched_core::record::untraced_total(&stats.completions));
        }
        reorder.release(watermark, |ev| builder.push(ev, &mut done));
        builder.advance_to(watermark, &mut done);
        for snapshot in done.drain(..) {
            match tx.try_send(Message::Snapshot(Box::new(snapshot))) {
                Ok(()) | Err(TrySendError::Full(_)) => {}
                // The view is gone.
                Err(TrySendError::Disconnected(_)) => return Ok(()),
            }
        }
    }
    Ok(())
}
