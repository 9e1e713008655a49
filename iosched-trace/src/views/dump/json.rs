//! The JSON-lines form: a `{"header": ...}` (or `{"trace": ...}`) line, one object per event
//! or `{"note": ...}`, and a `{"summary": ...}` line, one JSON value a line.
//!
//! Owns the JSON field names and their encoding (names for codes, hex strings for
//! identities). Must not decide what is dumped or in what order: the driver in the parent
//! module does.

use std::borrow::Cow;

use serde::Serialize;

use iosched_core::{
    event::Event,
    record::Header,
    source::{TraceFormat, TraceMeta},
};

use super::{DumpSummary, text_line::rwbs};

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Tagged<'a> {
    Header { header: &'a Header },
    Trace { trace: JsonMeta<'a> },
    Note { note: JsonNote<'a> },
    Summary { summary: &'a DumpSummary },
}

pub(super) fn json_line<T: Serialize>(s: &mut String, v: &T) {
    s.clear();
    // Serializing plain data into a String cannot fail.
    s.push_str(&serde_json::to_string(v).expect("plain data serializes"));
    s.push('\n');
}

/// What is known of a trace without our header.
#[derive(Serialize)]
pub(super) struct JsonMeta<'a> {
    format: &'static str,
    path: Cow<'a, str>,
    paired_by_sector: bool,
    devices: &'a [iosched_core::record::DeviceInfo],
    notes: &'a [String],
}

impl<'a> JsonMeta<'a> {
    pub(super) fn new(meta: &'a TraceMeta) -> Self {
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
pub(super) struct JsonNote<'a> {
    pub(super) ts_ns: u64,
    pub(super) t_ns: u64,
    pub(super) dev: String,
    pub(super) cpu: u16,
    pub(super) pid: u32,
    pub(super) text: &'a str,
}

/// One event in JSON: names instead of codes, identities as hex strings (null if none).
#[derive(Serialize)]
pub(super) struct JsonEvent<'a> {
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
    pub(super) fn new(ev: &'a Event, seq: u32, rel_ns: u64) -> Self {
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
