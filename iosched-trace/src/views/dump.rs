//! `dump`: blkparse-style text, or JSON lines, of every event of any trace we read.
//!
//! Owns the rendering only: events come from a [`TraceSource`] (a recording of ours, or
//! blktrace files), in time order. Text lines follow blkparse's default format
//! (`process_default` in blkparse_fmt.c) wherever blktrace has the action, so scripts written
//! for blkparse keep working; our additions come after blkparse's columns. Lost events and
//! reader warnings are always shown, never hidden.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    io::{self, Write},
};

use serde::Serialize;

use iosched_core::{
    event::{Dev, Event, EventKind, Note, Op},
    record::{Header, kind_counts},
    source::{InputError, TraceFormat, TraceMeta, TraceSource},
};

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
    /// Completed requests the kernel counted that have no completion event, summed over
    /// devices; `None` if the trace holds no check.
    pub untraced_completions: Option<u64>,
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
        summary.untraced_completions = stats.untraced_completions();
        summary.warnings.extend(
            stats
                .completions
                .iter()
                .filter_map(|c| c.describe_untraced()),
        );
    }
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

/// A message note as blkparse prints it (`m N text`, sequence 0).
fn note_line(s: &mut String, note: &Note, rel_ns: u64) {
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "{:3},{:<3} {:2} {:>8} {:5}.{:09} {:5} {:>2} {:>3} {}",
        note.dev.major,
        note.dev.minor,
        note.cpu,
        0,
        rel_ns / 1_000_000_000,
        rel_ns % 1_000_000_000,
        note.pid,
        "m",
        "N",
        note.text
    );
}

/// The prologue of a trace without our header (blktrace files).
fn foreign_prologue(s: &mut String, meta: &TraceMeta, first: Option<&Event>) {
    use std::fmt::Write as _;
    s.clear();
    let format = match meta.format {
        TraceFormat::Recording => "recording",
        TraceFormat::Blktrace => "blktrace trace",
    };
    let _ = writeln!(s, "# {format} {}", meta.path.display());
    for d in &meta.devices {
        let _ = writeln!(s, "# device {} {}", d.name, d.dev);
    }
    for note in &meta.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    match first {
        Some(ev) => {
            let _ = writeln!(s, "# time 0 = first event, trace time {}", secs(ev.ts_ns));
        }
        None => s.push_str("# no events\n"),
    }
}

/// Bytes blkparse counts for `ev`: a completion covers the bytes completed (`aux`), which
/// for a partial completion are fewer than the request's.
fn traced_bytes(ev: &Event) -> u32 {
    match ev.kind {
        EventKind::Complete if ev.aux != 0 => u32::try_from(ev.aux).unwrap_or(ev.bytes),
        _ => ev.bytes,
    }
}

fn rwbs(ev: &Event) -> String {
    Event {
        bytes: traced_bytes(ev),
        ..*ev
    }
    .rwbs()
}

const KYBER_DOMAINS: [&str; 4] = ["read", "write", "discard", "other"];

fn kyber_domain(index: u64) -> Cow<'static, str> {
    match usize::try_from(index)
        .ok()
        .and_then(|i| KYBER_DOMAINS.get(i))
    {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(index.to_string()),
    }
}

/// One event as blkparse's `process_default` prints it, plus our columns at the end.
///
/// Deviations from blkparse, where our data is richer: the completion status is the signed
/// errno (blkparse prints it as an unsigned 16-bit number), and the split sector is printed
/// in full (blkparse truncates it to 32 bits).
fn text_line(s: &mut String, ev: &Event, seq: u32, rel_ns: u64) {
    use EventKind::*;
    use std::fmt::Write as _;
    let action = ev.kind.action(ev.error == 1);
    let _ = write!(
        s,
        "{:3},{:<3} {:2} {:8} {:5}.{:09} {:5} {:>2} {:>3} ",
        ev.dev.major,
        ev.dev.minor,
        ev.cpu,
        seq,
        rel_ns / 1_000_000_000,
        rel_ns % 1_000_000_000,
        ev.pid,
        action,
        rwbs(ev)
    );
    let comm = ev.comm.as_str();
    let sector = ev.sector;
    let sectors = traced_bytes(ev) >> 9;
    // Passthrough requests (SG_IO and friends): blkparse's PC formats.
    let pc = matches!(ev.op, Op::DrvIn | Op::DrvOut);
    let _ = match ev.kind {
        Queue | Insert | Issue | IoStart | Bounce if pc => write!(s, "{} [{comm}]", ev.bytes),
        Queue | Insert | Issue | IoStart | GetRq | BackMerge | FrontMerge | RqMerge | IoDone
        | SleepRq | Bounce => {
            if sectors != 0 {
                write!(s, "{sector} + {sectors} [{comm}]")
            } else {
                write!(s, "[{comm}]")
            }
        }
        Complete | Requeue | BioComplete if pc => write!(s, "[{}]", ev.error),
        Complete | Requeue | BioComplete => {
            if sectors != 0 {
                write!(s, "{sector} + {sectors} [{}]", ev.error)
            } else {
                write!(s, "{sector} [{}]", ev.error)
            }
        }
        Plug => write!(s, "[{comm}]"),
        Unplug => write!(s, "[{comm}] {}", ev.aux),
        Split => write!(s, "{sector} / {} [{comm}]", ev.aux),
        Remap => {
            let from = Dev::from_kernel(ev.error as u32);
            write!(
                s,
                "{sector} + {sectors} <- ({},{}) {}",
                from.major, from.minor, ev.aux
            )
        }
        BioInRq => write!(s, "{sector} + {sectors} [{comm}] #{}", ev.aux),
        KyberThrottled => write!(s, "[{comm}] domain={}", kyber_domain(ev.aux)),
        KyberAdjust => write!(
            s,
            "[{comm}] domain={} depth={}",
            kyber_domain(ev.aux & 0xffff_ffff),
            ev.aux >> 32
        ),
        // As the kernel's own `wbt_step` and `wbt_timer` lines print them.
        WbtStep => {
            let (background, normal, max) = ev.wbt_limits().unwrap_or_default();
            write!(
                s,
                "[{comm}] step={} window={}us background={background} normal={normal} max={max}",
                ev.aux as u32 as i32,
                ev.sector / 1000,
            )
        }
        WbtTimer => write!(
            s,
            "[{comm}] status={} inflight={} step={}",
            ev.error,
            ev.aux & 0xffff_ffff,
            (ev.aux >> 32) as u32 as i32
        ),
        Wakeup => write!(
            s,
            "[{comm}] wakee={} tgid={}",
            ev.aux as u32,
            (ev.aux >> 32) as u32
        ),
    };
    if ev.rq != 0 {
        let _ = write!(s, " rq={:#x}", ev.rq);
    }
    if ev.bio != 0 {
        let _ = write!(s, " bio={:#x}", ev.bio);
    }
    s.push('\n');
}

fn text_prologue(s: &mut String, h: &Header, first_ts: Option<u64>) {
    use std::fmt::Write as _;
    s.clear();
    let _ = writeln!(
        s,
        "# iosched-trace recording, format {}, written by iosched-trace {}",
        h.format_version, h.tool_version
    );
    let _ = write!(s, "# host {}, kernel {}", h.host, h.kernel_release);
    if let Some(boot) = &h.boot_id {
        let _ = write!(s, ", boot {boot}");
    }
    s.push('\n');
    let _ = writeln!(
        s,
        "# started {} (monotonic {})",
        wall_clock(h.clock.realtime_ns),
        secs(h.clock.monotonic_ns)
    );
    if !h.command_line.is_empty() {
        let _ = writeln!(s, "# command: {}", h.command_line.join(" "));
    }
    for d in &h.devices {
        let _ = write!(
            s,
            "# device {} {} scheduler {}",
            d.name,
            d.dev,
            d.scheduler.as_deref().unwrap_or("?")
        );
        if !d.request_based {
            s.push_str(", bio-based (no request events)");
        }
        match d.rotational {
            Some(true) => s.push_str(", rotational"),
            Some(false) => s.push_str(", non-rotational"),
            None => {}
        }
        if let Some(lbs) = d.logical_block_size {
            let _ = write!(s, ", {lbs}-byte blocks");
        }
        if let Some(n) = d.nr_requests {
            let _ = write!(s, ", nr_requests {n}");
        }
        if let Some(n) = d.nomerges {
            let _ = write!(s, ", nomerges {n}");
        }
        if let Some(n) = d.max_sectors_kb {
            let _ = write!(s, ", max_sectors_kb {n}");
        }
        if let Some(model) = &d.model {
            let _ = write!(s, ", model {model:?}");
        }
        s.push('\n');
        if !d.iosched.is_empty() {
            let values: Vec<String> = d.iosched.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "#   iosched: {}", values.join(" "));
        }
    }
    for note in &h.notes {
        let _ = writeln!(s, "# note: {note}");
    }
    match first_ts {
        Some(ts) => {
            let _ = writeln!(
                s,
                "# time 0 = first event, monotonic {} = {}",
                secs(ts),
                wall_clock(h.clock.to_realtime(ts))
            );
        }
        None => s.push_str("# no events\n"),
    }
}

fn text_summary(s: &mut String, sum: &DumpSummary, format: TraceFormat) {
    use std::fmt::Write as _;
    let span = match (sum.first_ts_ns, sum.last_ts_ns) {
        (Some(a), Some(b)) => format!(" over {} s", secs(b - a)),
        _ => String::new(),
    };
    let _ = writeln!(s, "# summary: {} events{span}", sum.events);
    for kind in EventKind::ALL {
        if let Some(n) = sum.events_per_kind.get(kind.name()) {
            let _ = writeln!(s, "#   {:<16} {n:>10}", kind.name());
        }
    }
    match sum.lost {
        Some(lost) => {
            let _ = write!(s, "# lost events: {lost}");
            let per_cpu: Vec<String> = sum
                .lost_per_cpu
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(cpu, n)| format!("cpu{cpu} {n}"))
                .collect();
            let skipped = sum.kernel_skipped.unwrap_or(0);
            let mut parts = Vec::new();
            if lost > skipped {
                parts.push(if per_cpu.is_empty() {
                    format!("{} with the ring buffer full", lost - skipped)
                } else {
                    format!(
                        "{} with the ring buffer full: {}",
                        lost - skipped,
                        per_cpu.join(", ")
                    )
                });
            }
            if skipped > 0 {
                parts.push(format!(
                    "{skipped} the kernel did not run our programs for (already running on that \
                     CPU)"
                ));
            }
            if !parts.is_empty() {
                let _ = write!(s, " ({}): the trace is incomplete", parts.join("; "));
            }
            s.push('\n');
        }
        None if format == TraceFormat::Blktrace => {
            s.push_str("# lost events: unknown (blktrace files do not record drops)\n")
        }
        None => s.push_str("# lost events: unknown (the recording holds no statistics)\n"),
    }
    if let Some(errors) = sum.read_errors {
        let _ = writeln!(s, "# kernel read errors: {errors}");
    }
    for c in &sum.completion_checks {
        let (k, t) = (c.kernel(), c.traced);
        let _ = writeln!(
            s,
            "# {}: completed requests by the kernel's count {} (r {} w {} d {}), traced {}{}",
            c.device,
            k.total(),
            k.reads,
            k.writes,
            k.discards,
            t.total(),
            match (c.counters_disabled(), c.untraced()) {
                (true, _) => ": the device's I/O statistics are off, no check".to_string(),
                (false, 0) => String::new(),
                (false, n) => format!(": {n} without a completion event"),
            } + &if c.writes_compared() {
                String::new()
            } else {
                format!(
                    " (writes not compared: {} ended through the flush machinery)",
                    c.traced.writes_through_flush
                )
            }
        );
    }
    if sum.events_missing > 0 {
        let _ = writeln!(
            s,
            "# events missing from the file: {} (damaged or unwritten chunks)",
            sum.events_missing
        );
    }
    if sum.notes > 0 {
        let _ = writeln!(s, "# notes: {}", sum.notes);
    }
    match &sum.ended_by {
        Some(by) => {
            let _ = writeln!(s, "# recording closed cleanly (ended by {by})");
        }
        None if format == TraceFormat::Recording => {
            s.push_str("# recording was not closed cleanly\n")
        }
        None => {}
    }
    for w in &sum.warnings {
        let _ = writeln!(s, "# warning: {w}");
    }
}

/// `s.nnnnnnnnn`.
fn secs(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// `YYYY-MM-DD HH:MM:SS.nnnnnnnnn UTC` (proleptic Gregorian; days-to-civil after Howard
/// Hinnant's algorithm).
fn wall_clock(ns: u64) -> String {
    let secs_total = ns / 1_000_000_000;
    let days = (secs_total / 86_400) as i64;
    let rem = secs_total % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:09} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ns % 1_000_000_000
    )
}

#[derive(Serialize)]
#[serde(untagged)]
enum Tagged<'a> {
    Header { header: &'a Header },
    Trace { trace: JsonMeta<'a> },
    Note { note: JsonNote<'a> },
    Summary { summary: &'a DumpSummary },
}

fn json_line<T: Serialize>(s: &mut String, v: &T) {
    s.clear();
    // Serializing plain data into a String cannot fail.
    s.push_str(&serde_json::to_string(v).expect("plain data serializes"));
    s.push('\n');
}

/// What is known of a trace without our header.
#[derive(Serialize)]
struct JsonMeta<'a> {
    format: &'static str,
    path: Cow<'a, str>,
    paired_by_sector: bool,
    devices: &'a [iosched_core::record::DeviceInfo],
    notes: &'a [String],
}

impl<'a> JsonMeta<'a> {
    fn new(meta: &'a TraceMeta) -> Self {
        JsonMeta {
            format: match meta.format {
                TraceFormat::Recording => "recording",
                TraceFormat::Blktrace => "blktrace",
            },
            path: meta.path.to_string_lossy(),
            paired_by_sector: meta.identity == iosched_core::source::Identity::PairedBySector,
            devices: &meta.devices,
            notes: &meta.notes,
        }
    }
}

#[derive(Serialize)]
struct JsonNote<'a> {
    ts_ns: u64,
    t_ns: u64,
    dev: String,
    cpu: u16,
    pid: u32,
    text: &'a str,
}

/// One event in JSON: names instead of codes, identities as hex strings (null if none).
#[derive(Serialize)]
struct JsonEvent<'a> {
    kind: &'static str,
    action: &'static str,
    ts_ns: u64,
    t_ns: u64,
    dev: String,
    cpu: u16,
    seq: u32,
    pid: u32,
    tgid: u32,
    comm: Cow<'a, str>,
    cgroup_id: u64,
    op: &'static str,
    rwbs: String,
    flags: u32,
    sector: u64,
    bytes: u32,
    ioprio: u16,
    rq: Option<String>,
    bio: Option<String>,
    error: i32,
    aux: u64,
    /// Wakeups only: the task woken (`aux` decoded).
    #[serde(skip_serializing_if = "Option::is_none")]
    wakee_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wakee_tgid: Option<u32>,
}

impl<'a> JsonEvent<'a> {
    fn new(ev: &'a Event, seq: u32, rel_ns: u64) -> Self {
        let hex = |v: u64| (v != 0).then(|| format!("{v:#x}"));
        JsonEvent {
            kind: ev.kind.name(),
            action: ev.kind.action(ev.error == 1),
            ts_ns: ev.ts_ns,
            t_ns: rel_ns,
            dev: ev.dev.to_string(),
            cpu: ev.cpu,
            seq,
            pid: ev.pid,
            tgid: ev.tgid,
            comm: ev.comm.as_str(),
            cgroup_id: ev.cgroup_id,
            op: ev.op.name(),
            rwbs: rwbs(ev),
            flags: ev.flags.0,
            sector: ev.sector,
            bytes: ev.bytes,
            ioprio: ev.ioprio,
            rq: hex(ev.rq),
            bio: hex(ev.bio),
            error: ev.error,
            aux: ev.aux,
            wakee_pid: ev.wakee().map(|(pid, _)| pid),
            wakee_tgid: ev.wakee().map(|(_, tgid)| tgid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use iosched_core::{
        event::{Comm, ReqFlags},
        record::{
            RecordingReader, RecordingWriter,
            test_support::{event_at, process, sample_header, sample_stats},
        },
        source::RecordingSource,
    };

    const T0: u64 = 5_000_000_000;

    fn ev(ts: u64, kind: EventKind, cpu: u16, pid: u32, comm: &str) -> Event {
        Event {
            kind,
            cpu,
            pid,
            tgid: pid,
            comm: Comm::new(comm),
            bytes: 0,
            op: Op::Read,
            aux: 0,
            ..event_at(T0 + ts, 0)
        }
    }

    fn io(mut e: Event, sector: u64, sectors: u32, op: Op, flags: u32) -> Event {
        e.sector = sector;
        e.bytes = sectors << 9;
        e.op = op;
        e.flags = ReqFlags(flags);
        e
    }

    /// The synthetic trace of docs' blkparse sample (tools-and-blktrace-format.md §5.6) up to
    /// its first remap, then our own kinds and identities. Slightly out of arrival order.
    fn sample() -> Vec<Event> {
        use EventKind::*;
        let ws = ReqFlags::SYNC;
        let w = Op::Write;
        let r = Op::Read;
        let (rq, bio) = (0xffff_8881_0000_1000u64, 0xffff_8882_0000_2000u64);
        let with_id = |mut e: Event, rq_: u64, bio_: u64| {
            e.rq = rq_;
            e.bio = bio_;
            e
        };
        let mut unplug = ev(1300, Unplug, 0, 4242, "dd");
        unplug.error = 1;
        unplug.aux = 1;
        let mut complete = io(ev(251_400, Complete, 0, 0, "swapper/0"), 2048, 16, w, ws);
        complete.aux = 8192;
        let mut split = io(ev(252_500, Split, 0, 4242, "dd"), 100_000, 256, r, 0);
        split.aux = 100_128;
        let mut timer_unplug = ev(260_000, Unplug, 1, 4242, "dd");
        timer_unplug.aux = 4;
        let mut in_rq = with_id(
            io(ev(252_750, BioInRq, 1, 4242, "dd"), 100_000, 128, r, 0),
            rq,
            bio,
        );
        in_rq.aux = 0;
        let mut failed = with_id(
            io(ev(353_000, Complete, 1, 0, "swapper/1"), 100_000, 128, r, 0),
            rq,
            0,
        );
        failed.error = -5;
        failed.aux = 65536;
        let mut flush_done = io(ev(420_000, Complete, 2, 0, ""), 0, 0, Op::Flush, 0);
        flush_done.aux = 0;
        let mut kt = ev(400_000, KyberThrottled, 2, 0, "kworker/2:1");
        kt.aux = 1;
        let mut ka = ev(400_100, KyberAdjust, 2, 0, "kworker/2:1");
        ka.aux = 64 << 32; // domain 0 (read), depth 64
        let mut ws_ = ev(400_200, WbtStep, 2, 0, "kworker/2:1");
        ws_.aux = u64::from(-1i32 as u32) | (31 << 32);
        ws_.sector = 100_000_000;
        let mut wt = ev(400_300, WbtTimer, 2, 0, "kworker/2:1");
        wt.aux = (2 << 32) | 3;
        wt.error = 4;
        vec![
            io(ev(0, Queue, 0, 4242, "dd"), 2048, 8, w, ws),
            io(ev(500, GetRq, 0, 4242, "dd"), 2048, 8, w, ws),
            ev(700, Plug, 0, 4242, "dd"),
            io(ev(1100, Queue, 0, 4242, "dd"), 2056, 8, w, ws), // arrives before I
            io(ev(800, Insert, 0, 4242, "dd"), 2048, 8, w, ws),
            io(ev(1200, BackMerge, 0, 4242, "dd"), 2056, 8, w, ws),
            unplug,
            io(ev(1400, Issue, 0, 4242, "dd"), 2048, 16, w, ws),
            complete,
            io(ev(252_400, Queue, 0, 4242, "dd"), 100_000, 256, r, 0),
            split,
            with_id(
                io(ev(252_700, GetRq, 0, 4242, "dd"), 100_000, 128, r, 0),
                rq,
                bio,
            ),
            in_rq,
            with_id(
                io(ev(252_900, Issue, 1, 4242, "dd"), 100_000, 128, r, 0),
                rq,
                0,
            ),
            with_id(
                io(ev(252_950, IoStart, 1, 4242, "dd"), 100_000, 128, r, 0),
                rq,
                0,
            ),
            timer_unplug,
            with_id(
                io(ev(302_900, Requeue, 1, 0, "swapper/1"), 100_000, 128, r, 0),
                rq,
                0,
            ),
            failed,
            with_id(
                io(ev(353_100, IoDone, 1, 0, "swapper/1"), 100_000, 128, r, 0),
                rq,
                0,
            ),
            io(
                ev(410_000, Issue, 2, 77, "kworker/2:1"),
                0,
                0,
                Op::Flush,
                ReqFlags::PREFLUSH,
            ),
            flush_done,
            io(ev(430_000, Issue, 3, 900, "sg_io"), 0, 1, Op::DrvIn, 0),
            kt,
            ka,
            ws_,
            wt,
        ]
    }

    fn recording(events: &[Event], footer: bool) -> Vec<u8> {
        let mut w = RecordingWriter::new(Vec::new(), &sample_header())
            .unwrap()
            .with_chunk_events(5);
        w.add_process(&process(4242, "dd")).unwrap();
        for e in events {
            w.push(e).unwrap();
        }
        if footer {
            let f = w.footer(sample_stats(events.len() as u64), 1_000_000, "signal");
            w.finish(&f).unwrap()
        } else {
            w.write_stats(&sample_stats(3)).unwrap();
            w.flush().unwrap();
            w.get_ref().clone()
        }
    }

    fn quiet() -> DumpOptions {
        DumpOptions {
            warnings_to_stderr: false,
        }
    }

    fn source(bytes: &[u8]) -> RecordingSource<&[u8]> {
        RecordingSource::new(Path::new("test"), RecordingReader::new(bytes).unwrap())
    }

    fn text(bytes: &[u8]) -> (String, DumpSummary) {
        let mut out = Vec::new();
        let summary = write_text_with(&mut out, &mut source(bytes), &quiet()).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    /// Verbatim from blkparse 1.2.0 on the same synthetic trace (lines 1-11).
    const BLKPARSE: &str = r#"
  8,0    0        1     0.000000000  4242  Q  WS 2048 + 8 [dd]
  8,0    0        2     0.000000500  4242  G  WS 2048 + 8 [dd]
  8,0    0        3     0.000000700  4242  P   N [dd]
  8,0    0        4     0.000000800  4242  I  WS 2048 + 8 [dd]
  8,0    0        5     0.000001100  4242  Q  WS 2056 + 8 [dd]
  8,0    0        6     0.000001200  4242  M  WS 2056 + 8 [dd]
  8,0    0        7     0.000001300  4242  U   N [dd] 1
  8,0    0        8     0.000001400  4242  D  WS 2048 + 16 [dd]
  8,0    0        9     0.000251400     0  C  WS 2048 + 16 [0]
  8,0    0       10     0.000252400  4242  Q   R 100000 + 256 [dd]
  8,0    0       11     0.000252500  4242  X   R 100000 / 100128 [dd]
"#;

    const PROLOGUE: &str = r#"
# iosched-trace recording, format 1.4, written by iosched-trace 0.1.0
# host testhost, kernel 6.18.0-test, boot 00000000-1111-2222-3333-444444444444
# started 2025-11-30 12:00:00.000000000 UTC (monotonic 1.000000000)
# command: iosched-trace record -d sda
# device sda 8:0 scheduler bfq, rotational, 512-byte blocks, nr_requests 64, model "QEMU HARDDISK"
#   iosched: low_latency=1 slice_idle=8
# device zram0 252:0 scheduler none, bio-based (no request events)
# time 0 = first event, monotonic 5.000000000 = 2025-11-30 12:00:04.000000000 UTC
"#;

    const OURS: &str = r#"
  8,0    0       12     0.000252700  4242  G   R 100000 + 128 [dd] rq=0xffff888100001000 bio=0xffff888200002000
  8,0    1        1     0.000252750  4242  b   R 100000 + 128 [dd] #0 rq=0xffff888100001000 bio=0xffff888200002000
  8,0    1        2     0.000252900  4242  D   R 100000 + 128 [dd] rq=0xffff888100001000
  8,0    1        3     0.000252950  4242  s   R 100000 + 128 [dd] rq=0xffff888100001000
  8,0    1        4     0.000260000  4242 UT   N [dd] 4
  8,0    1        5     0.000302900     0  R   R 100000 + 128 [0] rq=0xffff888100001000
  8,0    1        6     0.000353000     0  C   R 100000 + 128 [-5] rq=0xffff888100001000
  8,0    1        7     0.000353100     0  d   R 100000 + 128 [swapper/1] rq=0xffff888100001000
  8,0    2        1     0.000400000     0 kt   N [kworker/2:1] domain=write
  8,0    2        2     0.000400100     0 ka   N [kworker/2:1] domain=read depth=64
  8,0    2        3     0.000400200     0 ws   N [kworker/2:1] step=-1 window=100000us background=8 normal=16 max=31
  8,0    2        4     0.000400300     0 wt   N [kworker/2:1] status=4 inflight=3 step=2
  8,0    2        5     0.000410000    77  D  FN [kworker/2:1]
  8,0    2        6     0.000420000     0  C  FN 0 [0]
  8,0    3        1     0.000430000   900  D   R 512 [sg_io]
"#;

    const SUMMARY: &str = r#"
# summary: 26 events over 0.000430000 s
#   queue                     3
#   getrq                     2
#   backmerge                 1
#   insert                    1
#   issue                     4
#   complete                  3
#   requeue                   1
#   plug                      1
#   unplug                    2
#   split                     1
#   io_start                  1
#   io_done                   1
#   bio_in_rq                 1
#   kyber_throttled           1
#   kyber_adjust              1
#   wbt_step                  1
#   wbt_timer                 1
# lost events: 9 (4 with the ring buffer full: cpu1 3, cpu3 1; 5 the kernel did not run our programs for (already running on that CPU)): the trace is incomplete
# kernel read errors: 2
# sda: completed requests by the kernel's count 5 (r 5 w 0 d 0), traced 4: 1 without a completion event
# recording closed cleanly (ended by signal)
# warning: sda: 1 completed request counted by the kernel has no completion event (kernel: 5 reads, 0 writes, 0 discards; traced: 4, 0, 0, and up to 1 more may hide behind requests in flight at the counter reads); no block_rq_complete event for it reached the recorder (which lost none it was given)
"#;

    #[test]
    fn text_matches_blkparse_and_golden_lines() {
        let (out, summary) = text(&recording(&sample(), true));
        let expected: String = [PROLOGUE, BLKPARSE, OURS, SUMMARY]
            .iter()
            .map(|s| &s[1..])
            .collect();
        assert_eq!(out, expected);
        assert_eq!(summary.events, 26);
        assert_eq!(summary.lost, Some(9));
        assert!(summary.closed_cleanly);
        // The only warning: the sample's completion check (5 counted, 4 traced).
        assert_eq!(summary.untraced_completions, Some(1));
        assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
        assert_eq!(summary.out_of_order, 0);
    }

    #[test]
    fn unclean_recordings_say_so() {
        let bytes = recording(&sample(), false);
        // Cut inside the last chunk too.
        let (out, summary) = text(&bytes[..bytes.len() - 3]);
        assert!(!summary.closed_cleanly);
        assert!(
            out.contains("# recording was not closed cleanly\n"),
            "{out}"
        );
        assert!(out.contains("# warning: truncated: "), "{out}");
        assert!(
            out.contains("# warning: recording was not closed cleanly: no footer"),
            "{out}"
        );
        // The STATS chunk was cut off: loss is unknown, and said so.
        assert_eq!(summary.lost, None);
        assert!(out.contains("# lost events: unknown"), "{out}");
        // Every event chunk was complete.
        assert_eq!(summary.events, 26);

        let (out, summary) = text(&bytes);
        assert_eq!(summary.lost, Some(9));
        assert!(
            out.contains("# lost events: 9 (4 with the ring buffer full: cpu1 3, cpu3 1; 5 "),
            "{out}"
        );
    }

    #[test]
    fn json_lines() {
        let bytes = recording(&sample(), true);
        let mut out = Vec::new();
        let summary = write_json_with(&mut out, &mut source(&bytes), &quiet()).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1 + 26 + 1);
        assert_eq!(lines[0]["header"]["host"], "testhost");
        assert_eq!(lines[0]["header"]["devices"][0]["scheduler"], "bfq");
        let g = &lines[12];
        assert_eq!(g["kind"], "getrq");
        assert_eq!(g["action"], "G");
        assert_eq!(g["dev"], "8:0");
        assert_eq!(g["rwbs"], "R");
        assert_eq!(g["comm"], "dd");
        assert_eq!(g["rq"], "0xffff888100001000");
        assert_eq!(g["bio"], "0xffff888200002000");
        assert_eq!(g["ts_ns"], T0 + 252_700);
        assert_eq!(g["t_ns"], 252_700);
        assert_eq!(g["seq"], 12);
        assert_eq!(lines[1]["rq"], serde_json::Value::Null);
        assert_eq!(lines[7]["action"], "U");
        let last = &lines[27]["summary"];
        assert_eq!(last["events"], 26);
        assert_eq!(last["lost"], 9);
        assert_eq!(last["lost_per_cpu"], serde_json::json!([0, 3, 0, 1]));
        assert_eq!(last["kernel_skipped"], 5);
        assert_eq!(last["events_per_kind"]["issue"], 4);
        assert_eq!(summary.events, 26);
    }

    #[test]
    fn wakeups_name_their_wakee_in_text_and_json() {
        let q = io(
            ev(0, EventKind::Queue, 0, 4242, "dd"),
            2048,
            8,
            Op::Write,
            0,
        );
        let mut wk = ev(900, EventKind::Wakeup, 1, 310, "jbd2/loop0-8");
        wk.aux = 4242 | (4240u64 << 32);
        let bytes = recording(&[q, wk], true);
        let (out, summary) = text(&bytes);
        assert!(
            out.contains(
                "  8,0    1        1     0.000000900   310 wk   N [jbd2/loop0-8] wakee=4242 tgid=4240\n"
            ),
            "{out}"
        );
        assert_eq!(summary.events_per_kind["wakeup"], 1);

        let mut json = Vec::new();
        write_json_with(&mut json, &mut source(&bytes), &quiet()).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(json)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let wk = &lines[2];
        assert_eq!(wk["kind"], "wakeup");
        assert_eq!(wk["action"], "wk");
        assert_eq!(wk["pid"], 310);
        assert_eq!(wk["wakee_pid"], 4242);
        assert_eq!(wk["wakee_tgid"], 4240);
        // Other kinds carry no wakee.
        assert!(lines[1].get("wakee_pid").is_none(), "{}", lines[1]);
    }

    #[test]
    fn empty_recording() {
        let (out, summary) = text(&recording(&[], true));
        assert!(out.contains("# no events\n"));
        assert!(out.contains("# summary: 0 events\n"));
        assert_eq!(summary.events, 0);
    }

    #[test]
    fn output_errors_are_reported_as_such() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let bytes = recording(&sample(), true);
        let err = write_text_with(&mut Full, &mut source(&bytes), &quiet()).unwrap_err();
        assert!(err.is_broken_pipe(), "{err}");
    }

    #[test]
    fn wall_clock_dates() {
        assert_eq!(wall_clock(0), "1970-01-01 00:00:00.000000000 UTC");
        assert_eq!(
            wall_clock(951_782_400_000_000_001),
            "2000-02-29 00:00:00.000000001 UTC"
        );
        assert_eq!(
            wall_clock(1_764_504_000_000_000_000),
            "2025-11-30 12:00:00.000000000 UTC"
        );
    }
}
