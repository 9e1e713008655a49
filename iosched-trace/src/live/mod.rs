//! `iosched-trace live`: the screen to watch while something is slow. Who does I/O on a
//! device, how long it waits in the scheduler (Q2D) versus the device (D2C), and whether the
//! device sits idle while I/O waits, refreshed every interval.
//!
//! Shape: collector thread (capture -> time order -> timeline -> per-interval aggregators)
//! -> bounded channel -> [`app::App`] (key -> action -> update) -> [`ui::render`]. The
//! numbers are the report's own (`analysis`), computed per interval window.
//!
//! - [`interval`]: events to per-interval snapshots (pure; tested on synthetic streams).
//! - [`collector`]: the capture thread.
//! - [`app`]: state, actions, the table's rows.
//! - [`ui`]: rendering (pure).
//! - [`batch`]: `--batch` text and JSON lines.
//! - `tui`: the terminal loop.
//! - [`stop`]: SIGINT and SIGTERM as a request to stop (also `--follow`'s).

pub mod app;
pub mod batch;
pub mod collector;
pub mod interval;
pub mod stop;
mod tui;
pub mod ui;

use std::time::Duration;

use crate::devices::Disk;

/// `live`, validated.
#[derive(Clone, Debug)]
pub struct LiveConfig {
    pub disks: Vec<Disk>,
    pub interval: Duration,
    pub batch: bool,
    pub json: bool,
    pub count: Option<u64>,
    /// Seconds of history in the charts.
    pub history: Duration,
    pub ring_size: u32,
    pub wakeup_bytes: u64,
    pub verbose: bool,
    /// Drop every drained event (`--discard-events`, benchmark only).
    pub discard_events: bool,
}

/// Runs the view (or the batch output) until `q`, the count, or the end of the capture.
/// Every error that can happen before the first interval (privileges, BTF, loading) is
/// returned before the terminal changes mode.
pub fn run(config: LiveConfig) -> anyhow::Result<()> {
    if !config.batch && !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        anyhow::bail!("live needs a terminal on stdout; use --batch for plain text");
    }
    // Before anything is attached: a signal from here on ends the view cleanly.
    stop::install().map_err(|e| anyhow::anyhow!("installing signal handlers: {e}"))?;
    let collector = collector::Collector::start(collector::CollectorConfig {
        disks: config.disks.clone(),
        interval: config.interval,
        ring_size: config.ring_size,
        wakeup_bytes: config.wakeup_bytes,
        verbose: config.verbose,
        discard_events: config.discard_events,
    })?;
    if config.verbose {
        for (program, why) in &collector.skipped {
            eprintln!("note: optional program {program} not attached: {why}");
        }
    }
    let history = (config.history.as_secs_f64() / config.interval.as_secs_f64()).ceil() as usize;
    let mut app = app::App::new(
        collector
            .devices
            .iter()
            .map(|d| (d.dev, d.name.clone()))
            .collect(),
        config.interval,
        history,
    );
    if config.batch {
        batch::run(&collector, &mut app, config.json, config.count)
    } else {
        tui::run(&collector, &mut app)
    }
}

#[cfg(test)]
mod tests;
