//! `dump`: blkparse-style text, or JSON lines, of every event of any trace we read.
//!
//! Owns the rendering only: events come from a [`TraceSource`] (a recording of ours, or
//! blktrace files), in time order. Text lines follow blkparse's default format
//! (`process_default` in blkparse_fmt.c) wherever blktrace has the action, so scripts written
//! for blkparse keep working; our additions come after blkparse's columns. Lost events and
//! reader warnings are always shown, never hidden.
//!
//! This module holds the public entry points, what a dump returns ([`DumpSummary`]), and the
//! driver that reads the trace and interleaves events with notes; the lines themselves are
//! laid out by its parts:
//! - [`prologue`]: the `#` lines describing the trace (our header, or a blktrace trace's
//!   metadata).
//! - [`text_line`]: one blkparse-style line per event or note.
//! - [`json`]: the JSON-lines form of all of them.
//! - [`summary`]: the `#` lines at the end (counts, lost events, completion checks,
//!   warnings).

mod json;
mod prologue;
mod summary;
mod text_line;

use std::{
    collections::{BTreeMap, HashMap},
    io::{self, Write},
};

use serde::Serialize;

use iosched_core::{
    event::{Dev, EventKind, Note},
    record::kind_counts,
    source::{InputError, TraceSource},
};

use json::{JsonEvent, JsonMeta, JsonNote, Tagged, json_line};
use prologue::{foreign_prologue, text_prologue};
use summary::text_summary;
use text_line::{note_line, text_line};

/// How to dump.
#[derive(Clone, Debug)]
pub struct DumpOptions {
    /// Print reader warnings to stderr as well (they are always in the summary).
    pub warnings_to_stderr: bool,
}

impl Default for DumpOptions {
    fn default() -> Self {
        DumpOptions {
            warnings_to_stderr: true,
        }
    }
}

/// One device's kernel plug counters, with its name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DevicePlugs {
    pub device: String,
    #[serde(flatten)]
    pub counts: iosched_core::record::DevicePlugCounts,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a dump saw; printed at its end and returned.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DumpSummary {
    pub events: u64,
    pub events_per_kind: BTreeMap<String, u64>,
    /// Text notes (blktrace messages such as BFQ's log).
    pub notes: u64,
    pub first_ts_ns: Option<u64>,
    pub last_ts_ns: Option<u64>,
    /// Events lost (ring buffer full, or skipped by the kernel); `None` if the trace holds no
    /// statistics.
    pub lost: Option<u64>,
    /// Of them, those the ring buffer had no room for, per CPU.
    pub lost_per_cpu: Vec<u64>,
    /// Of them, those the kernel did not run our programs for (`record::Stats::kernel_skipped`).
    pub kernel_skipped: Option<u64>,
    pub read_errors: Option<u64>,
    /// Per device: completions the kernel counted against those traced (recordings made by
    /// 1.2 and later; see `record::CompletionCheck`).
    pub completion_checks: Vec<iosched_core::record::CompletionCheck>,
    /// Per device, its plugs as the kernel counted them (recordings whose plugs were counted
    /// rather than recorded as events: format 1.6 `record`'s default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plug_counts: Vec<DevicePlugs>,
    /// What happened to the traced devices while recording (format 1.6).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_changes: Vec<iosched_core::record::DeviceChange>,
    /// Plugs the kernel could not count (its device table full).
    #[serde(skip_serializing_if = "is_zero")]
    pub plugs_uncounted: u64,
    /// Completed requests the kernel counted that have no completion event, summed over
    /// devices; `None` if the trace holds no check.
    pub untraced_completions: Option<u64>,
    /// CPU samples in the recording (format 1.5's CPU chunks), and the CPU use from the
    /// first to the last (`None` with fewer than two).
    pub cpu_samples: u64,
    pub cpu_use: Option<iosched_core::record::CpuUse>,
    /// Events missing from the file itself (damaged or unwritten chunks).
    pub events_missing: u64,
    /// Events printed out of time order (they arrived later than the reordering window).
    pub out_of_order: u64,
    /// The recording has its footer.
    pub closed_cleanly: bool,
    pub ended_by: Option<String>,
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot write the dump: {0}")]
    Output(#[source] io::Error),
    #[error(transparent)]
    Read(#[from] InputError),
}

impl DumpError {
    /// The reader of the output went away (`dump | head`): usually not worth a message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DumpError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// blkparse-style text: `#` comment lines describing the trace, one line per event (and per
/// note) in time order, `#` summary lines.
pub fn write_text(
    out: &mut impl Write,
    source: &mut dyn TraceSource,
) -> Result<DumpSummary, DumpError> {
    write_text_with(out, source, &DumpOptions::default())
}

/// JSON lines: `{"header": ...}`, one object per event (notes as `{"note": ...}`) in time
/// order, `{"summary": ...}`.
pub fn write_json(
    out: &mut impl Write,
    source: &mut dyn TraceSource,
) -> Result<DumpSummary, DumpError> {
    write_json_with(out, source, &DumpOptions::default())
}

pub fn write_text_with(
    out: &mut impl Write,
    source: &mut dyn TraceSource,
    opts: &DumpOptions,
) -> Result<DumpSummary, DumpError> {
    dump(out, source, opts, Style::Text)
}

pub fn write_json_with(
    out: &mut impl Write,
    source: &mut dyn TraceSource,
    opts: &DumpOptions,
) -> Result<DumpSummary, DumpError> {
    dump(out, source, opts, Style::Json)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Text,
    Json,
}

fn dump<W: Write>(
    out: &mut W,
    source: &mut dyn TraceSource,
    opts: &DumpOptions,
    style: Style,
) -> Result<DumpSummary, DumpError> {
    let mut read_error = None;
    let mut counts = [0u64; EventKind::ALL.len()];
    let mut seqs: HashMap<(Dev, u16), u32> = HashMap::new();
    let mut summary = DumpSummary::default();
    let mut line = String::new();
    let mut next_event = |source: &mut dyn TraceSource| match source.next_event()? {
        Ok(ev) => Some(ev),
        Err(e) => {
            read_error = Some(e);
            None
        }
    };
    let mut next = next_event(source);
    let base = next.map_or(0, |ev| ev.ts_ns);
    match (style, source.header()) {
        (Style::Text, Some(header)) => {
            text_prologue(&mut line, header, next.as_ref().map(|e| e.ts_ns))
        }
        (Style::Text, None) => foreign_prologue(&mut line, source.meta(), next.as_ref()),
        (Style::Json, Some(header)) => json_line(&mut line, &Tagged::Header { header }),
        (Style::Json, None) => json_line(
            &mut line,
            &Tagged::Trace {
                trace: JsonMeta::new(source.meta()),
            },
        ),
    }
    out.write_all(line.as_bytes()).map_err(DumpError::Output)?;
    let mut notes_done = 0;
    let mut last_ts = 0;
    while let Some(ev) = next {
        notes_done = write_notes(
            out,
            &mut line,
            source.notes(),
            notes_done,
            Some(ev.ts_ns),
            base,
            style,
        )?;
        let seq = seqs.entry((ev.dev, ev.cpu)).or_insert(0);
        *seq += 1;
        counts[usize::from(ev.kind.code() - 1)] += 1;
        summary.events += 1;
        summary.first_ts_ns.get_or_insert(ev.ts_ns);
        if ev.ts_ns < last_ts {
            summary.out_of_order += 1;
        }
        last_ts = last_ts.max(ev.ts_ns);
        summary.last_ts_ns = Some(last_ts);
        let rel = ev.ts_ns.saturating_sub(base);
        line.clear();
        match style {
            Style::Text => text_line(&mut line, &ev, *seq, rel),
            Style::Json => json_line(&mut line, &JsonEvent::new(&ev, *seq, rel)),
        }
        out.write_all(line.as_bytes()).map_err(DumpError::Output)?;
        next = next_event(source);
    }
    notes_done = write_notes(
        out,
        &mut line,
        source.notes(),
        notes_done,
        None,
        base,
        style,
    )?;
    summary.notes = notes_done as u64;
    summary.events_per_kind = kind_counts(&counts);
    if let Some(stats) = source.stats() {
        summary.lost = Some(stats.lost());
        summary.lost_per_cpu = stats.lost_per_cpu.clone();
        summary.kernel_skipped = stats.kernel_skipped;
        summary.read_errors = Some(stats.read_errors);
        summary.completion_checks = stats.completions.clone();
        summary.plug_counts = stats
            .plug_counts
            .iter()
            .map(|c| DevicePlugs {
                device: source
                    .meta()
                    .devices
                    .iter()
                    .find(|d| d.dev == c.dev)
                    .map_or_else(|| c.dev.to_string(), |d| d.name.clone()),
                counts: *c,
            })
            .collect();
        summary.plugs_uncounted = stats.plugs_uncounted;
        summary.device_changes = stats.device_changes.clone();
        summary.untraced_completions = stats.untraced_completions();
        summary.warnings.extend(
            stats
                .completions
                .iter()
                .filter_map(|c| c.describe_untraced()),
        );
    }
    let samples = source.cpu_samples();
    summary.cpu_samples = samples.len() as u64;
    summary.cpu_use = iosched_core::record::CpuUse::between(samples, 0, u64::MAX);
    summary.events_missing = source.events_missing();
    summary.closed_cleanly = source.footer().is_some();
    summary.ended_by = source.footer().map(|f| f.ended_by.clone());
    // The reader's warnings first, then the checks' (added with the statistics above).
    let checks = std::mem::replace(&mut summary.warnings, source.warnings());
    summary.warnings.extend(checks);
    if let Some(e) = &read_error {
        summary.warnings.push(format!("reading stopped early: {e}"));
    }
    line.clear();
    match style {
        Style::Text => text_summary(&mut line, &summary, source.meta().format),
        Style::Json => json_line(&mut line, &Tagged::Summary { summary: &summary }),
    }
    out.write_all(line.as_bytes()).map_err(DumpError::Output)?;
    out.flush().map_err(DumpError::Output)?;
    if opts.warnings_to_stderr {
        for w in &summary.warnings {
            eprintln!("warning: {w}");
        }
    }
    match read_error {
        Some(e) => Err(e.into()),
        None => Ok(summary),
    }
}

/// Writes `notes[from..]` up to time `until` (all if `None`); returns the index reached.
fn write_notes<W: Write>(
    out: &mut W,
    line: &mut String,
    notes: &[Note],
    from: usize,
    until: Option<u64>,
    base: u64,
    style: Style,
) -> Result<usize, DumpError> {
    let mut i = from;
    while let Some(note) = notes.get(i) {
        if until.is_some_and(|t| note.ts_ns > t) {
            break;
        }
        let rel = note.ts_ns.saturating_sub(base);
        line.clear();
        match style {
            Style::Text => note_line(line, note, rel),
            Style::Json => json_line(
                line,
                &Tagged::Note {
                    note: JsonNote {
                        ts_ns: note.ts_ns,
                        t_ns: rel,
                        dev: note.dev.to_string(),
                        cpu: note.cpu,
                        pid: note.pid,
                        text: &note.text,
                    },
                },
            ),
        }
        out.write_all(line.as_bytes()).map_err(DumpError::Output)?;
        i += 1;
    }
    Ok(i)
}

/// `s.nnnnnnnnn`; the prologue's and the summary's times.
fn secs(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

#[cfg(test)]
mod tests;
