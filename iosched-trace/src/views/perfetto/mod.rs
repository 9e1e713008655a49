//! `convert --to perfetto`: a trace as Perfetto's native protobuf (TracePacket / TrackEvent,
//! written as a stream), which the Perfetto UI opens.
//!
//! - [`wire`]: protobuf encoding (varints, length-delimited fields).
//! - [`packets`]: Perfetto's packets and their field numbers, the writer of the stream.
//! - [`lanes`]: which track of its process a request goes on.
//! - [`export`]: the timeline's results drawn as tracks, slices, counters and flows.
//!
//! Owns: the Perfetto rendering of a trace. Must not: print.

pub mod export;
pub mod lanes;
pub mod packets;
pub mod wire;

use std::io::Write;

use iosched_core::{
    analysis::report::resolve_devices,
    driver::{Driver, Filter},
    source::{InputError, TraceSource},
    timeline::Anomalies,
};

use export::Exporter;
pub use export::{Drawn, Selection};
use packets::TraceWriter;

/// What to draw.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Start and end of the span drawn, ns after the trace's first event (events outside
    /// do not exist for the pass: a request begun before it is drawn from its first event
    /// inside, one not complete by its end is not drawn).
    pub from_ns: Option<u64>,
    pub until_ns: Option<u64>,
    /// Only these devices (names or major:minor); empty: all.
    pub devices: Vec<String>,
    /// Only these submitters' process tracks (device tracks stay whole).
    pub select: Selection,
    /// Output size past which the caller is warned ([`SizeWarning`]).
    pub warn_bytes: u64,
}

impl Options {
    fn filtered(&self) -> bool {
        self.from_ns.is_some()
            || self.until_ns.is_some()
            || !self.devices.is_empty()
            || !self.select.pids.is_empty()
            || !self.select.comms.is_empty()
    }
}

/// The output is, or will be, larger than [`Options::warn_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeWarning {
    /// At the rate so far, the whole trace (whose event count its footer gives) will come
    /// to about this many bytes. Said once, early.
    Predicted(u64),
    /// The output has reached this many bytes. Said once.
    Reached(u64),
}

/// Events read before the output's size is extrapolated: enough for the rate to settle.
const PREDICT_AFTER_EVENTS: u64 = 200_000;

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub drawn: Drawn,
    pub bytes: u64,
    pub packets: u64,
    pub anomalies: Anomalies,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("writing the Perfetto trace: {0}")]
    Write(#[from] std::io::Error),
}

/// Reads all of `source` and writes it to `out` as a Perfetto trace; `warn` hears, at most
/// once each, that the output will be or has become larger than `opts.warn_bytes` (checked
/// after each batch of events read).
pub fn export<W: Write>(
    source: &mut dyn TraceSource,
    opts: &Options,
    out: W,
    warn: &mut dyn FnMut(SizeWarning),
) -> Result<(W, Summary), ExportError> {
    let devices = source.meta().devices.clone();
    let wanted = resolve_devices(&devices, &opts.devices)?;
    let dev_names = devices.iter().map(|d| (d.dev, d.name.clone())).collect();
    let writer = TraceWriter::new(out)?;
    // Extrapolated only for a whole trace: a filter's share of the events is unknown.
    let total_events = source
        .footer()
        .map(|f| f.events_total)
        .filter(|_| !opts.filtered());
    let (mut predicted, mut reached) = (false, false);
    let mut read = 0u64;
    let mut sink = Exporter::new(writer, opts.select.clone(), dev_names);

    // The span is relative to the first event: read it before the filter is made.
    let mut batch = Vec::with_capacity(4096);
    source.next_batch(&mut batch, 4096)?;
    let base = batch.first().map_or(0, |e| e.ts_ns);
    let from = opts.from_ns.map_or(0, |f| base.saturating_add(f));
    let until = opts.until_ns.map_or(u64::MAX, |u| base.saturating_add(u));
    let mut driver = Driver::new(&devices, Filter::ALL.devices(wanted).between(from, until));
    while !batch.is_empty() {
        for ev in &batch {
            driver.push(ev, &mut sink);
        }
        read += batch.len() as u64;
        let bytes = sink.bytes_written();
        if !reached && bytes >= opts.warn_bytes {
            reached = true;
            predicted = true;
            warn(SizeWarning::Reached(bytes));
        }
        if !predicted
            && read >= PREDICT_AFTER_EVENTS
            && let Some(total) = total_events
        {
            predicted = true;
            let estimate = (bytes as f64 * total as f64 / read as f64) as u64;
            if estimate > opts.warn_bytes {
                warn(SizeWarning::Predicted(estimate));
            }
        }
        batch.clear();
        source.next_batch(&mut batch, 4096)?;
    }
    let anomalies = driver.finish(&mut sink);
    let (out, drawn, bytes, packets) = sink.finish()?;
    Ok((
        out,
        Summary {
            drawn,
            bytes,
            packets,
            anomalies,
        },
    ))
}

#[cfg(test)]
mod tests;
