//! Counting what a recording holds, from `iosched-trace dump --json FILE`: a `{"header": ...}`
//! line, one JSON object per event, and a final `{"summary": ...}` line that carries the loss
//! counters.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::cmd;

#[derive(Debug, Default, PartialEq)]
pub struct TraceStats {
    /// Event lines (every line that is a JSON object other than the header and the summary).
    pub events: u64,
    /// Events per `kind` (or `action`) field; only filled when asked for.
    pub kinds: BTreeMap<String, u64>,
    /// Total of the summary's `lost` field(s); `None` when there is no summary or no `lost`.
    pub lost: Option<u64>,
    /// Our recordings' summary: completions the kernel counted and no event traced
    /// (`untraced_completions`), and program runs the kernel skipped (`kernel_skipped`,
    /// recursion misses; part of `lost`). `None` where the summary has no such field.
    pub untraced_completions: Option<u64>,
    pub kernel_skipped: Option<u64>,
}

/// Runs `bin dump --json file` and counts its output. `kinds` parses every event line (slow
/// for millions of events); otherwise event lines are only counted.
pub fn from_dump(bin: &Path, file: &Path, kinds: bool) -> anyhow::Result<TraceStats> {
    let mut command = Command::new(bin);
    command
        .arg("dump")
        .arg("--json")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let shown = cmd::display(&command);
    let mut child = command
        .spawn()
        .with_context(|| format!("could not start `{shown}`"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let stats = read(BufReader::with_capacity(1 << 20, stdout), kinds);
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    stats.with_context(|| format!("reading the output of `{shown}`"))
}

pub fn read(mut input: impl BufRead, kinds: bool) -> anyhow::Result<TraceStats> {
    let mut stats = TraceStats::default();
    let mut line = Vec::new();
    let mut lineno = 0u64;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        lineno += 1;
        let text = line.trim_ascii();
        if !text.starts_with(b"{") {
            continue;
        }
        if starts_with_key(text, "header") {
            continue;
        }
        if starts_with_key(text, "summary") {
            let summary: Value = serde_json::from_slice(text)
                .with_context(|| format!("line {lineno}: summary is not valid JSON"))?;
            stats.lost = find_lost(&summary["summary"]);
            stats.untraced_completions = summary["summary"]["untraced_completions"].as_u64();
            stats.kernel_skipped = summary["summary"]["kernel_skipped"].as_u64();
            continue;
        }
        stats.events += 1;
        if kinds {
            let event: Value = serde_json::from_slice(text)
                .with_context(|| format!("line {lineno}: not valid JSON"))?;
            let kind = ["kind", "action"]
                .iter()
                .find_map(|k| event.get(k))
                .map_or_else(
                    || "?".to_owned(),
                    |v| v.as_str().map_or(v.to_string(), str::to_owned),
                );
            *stats.kinds.entry(kind).or_default() += 1;
        }
    }
    Ok(stats)
}

/// Whether the JSON object on `line` starts with `"key":` (whitespace allowed).
fn starts_with_key(line: &[u8], key: &str) -> bool {
    let Some(rest) = line[1..].trim_ascii_start().strip_prefix(b"\"") else {
        return false;
    };
    rest.strip_prefix(key.as_bytes())
        .and_then(|r| r.strip_prefix(b"\""))
        .is_some_and(|r| r.trim_ascii_start().starts_with(b":"))
}

/// The first `lost` field found (breadth-first) in the summary: a number, or the sum of the
/// numbers inside it (per-CPU or per-reason counters).
fn find_lost(summary: &Value) -> Option<u64> {
    let mut queue = std::collections::VecDeque::from([summary]);
    while let Some(v) = queue.pop_front() {
        match v {
            Value::Object(map) => {
                if let Some(lost) = map.get("lost")
                    && !lost.is_null()
                {
                    return Some(sum_numbers(lost));
                }
                queue.extend(map.values());
            }
            Value::Array(items) => queue.extend(items),
            _ => {}
        }
    }
    None
}

fn sum_numbers(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap_or(0),
        Value::Object(map) => map.values().map(sum_numbers).sum(),
        Value::Array(items) => items.iter().map(sum_numbers).sum(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(text: &str, kinds: bool) -> TraceStats {
        read(text.as_bytes(), kinds).unwrap()
    }

    #[test]
    fn counts_events_and_kinds_and_reads_lost() {
        let text = r#"{"header":{"version":1}}
{"ts_ns":1,"kind":"Issue"}
{"ts_ns":2,"kind":"Complete"}
{"ts_ns":3,"kind":"Issue"}
{"summary":{"events":3,"lost":7,"lost_per_cpu":[3,4],"kernel_skipped":2,"untraced_completions":5}}
"#;
        let s = stats(text, true);
        assert_eq!(s.events, 3);
        assert_eq!(s.lost, Some(7));
        assert_eq!(
            (s.kernel_skipped, s.untraced_completions),
            (Some(2), Some(5))
        );
        assert_eq!(
            s.kinds,
            BTreeMap::from([("Complete".to_owned(), 1), ("Issue".to_owned(), 2)])
        );
        assert!(stats(text, false).kinds.is_empty());
    }

    #[test]
    fn lost_anywhere_and_summed() {
        for (summary, lost) in [
            (r#"{"summary":{"lost":0}}"#, Some(0)),
            (
                r#"{"summary":{"capture":{"ring":{"lost":[1,2,3]}}}}"#,
                Some(6),
            ),
            (
                r#"{"summary":{"lost":{"ring_full":4,"read_error":1}}}"#,
                Some(5),
            ),
            (r#"{ "summary" : {"events":1}}"#, None),
            (r#"{"summary":{"lost":null,"x":{"lost":2}}}"#, Some(2)),
        ] {
            assert_eq!(stats(summary, false).lost, lost, "{summary}");
        }
        assert_eq!(stats(r#"{"kind":"Queue"}"#, false).lost, None);
        let blktrace = stats(r#"{"summary":{"lost":0}}"#, false);
        assert_eq!(
            (blktrace.kernel_skipped, blktrace.untraced_completions),
            (None, None)
        );
        assert_eq!(stats(r#"{"summary_x":{"lost":1}}"#, false).events, 1);
    }

    #[test]
    fn ignores_non_json_lines_and_rejects_broken_summary() {
        let s = stats("header\n\n{\"kind\":\"Queue\"}\n", true);
        assert_eq!(s.events, 1);
        assert!(read(&b"{\"summary\": {\n"[..], false).is_err());
        assert!(read(&b"{\"kind\": \n"[..], true).is_err());
    }
}
