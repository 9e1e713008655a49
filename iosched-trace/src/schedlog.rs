//! `record --sched-log`: the I/O scheduler's own messages (BFQ's `bfq_log_bfqq` lines such
//! as `bfq1350S expire (0, slow 0, num_disp 0, short_ttime 1)`), captured through the
//! kernel's ftrace `blk` tracer. That tracer shares blktrace's kernel code but writes text to
//! tracefs, and it works under lockdown, where blktrace's relay files and fentry on BFQ's
//! functions are refused.
//!
//! Setup, in order: trace clock `mono` (our events' clock), a larger per-CPU buffer, per
//! device `trace/enable` = 1 and `trace/act_mask` = `notify` (messages only: every other
//! blk tracer line would overrun the buffer at load), tracer `blk`, tracing on. A thread
//! reads `trace_pipe` while recording. Every setting is restored (in reverse order) when the
//! log is stopped or dropped, so also after an error or Ctrl-C unwinds the recorder.
//!
//! Owns: tracefs settings and the text of the messages. Must not: interpret them (that is
//! `model::bfqlog`).

use std::{
    fs,
    io::{ErrorKind, Read},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use iosched_core::event::{Dev, Note};

#[derive(Debug, thiserror::Error)]
pub enum SchedLogError {
    #[error(
        "tracefs is not mounted (no {0}/trace): mount it with `mount -t tracefs tracefs /sys/kernel/tracing`"
    )]
    NoTracefs(String),
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
    #[error(
        "{0}: the blk tracer is not available in this kernel (CONFIG_BLK_DEV_IO_TRACE); record without --sched-log"
    )]
    NoBlkTracer(String),
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> SchedLogError {
    SchedLogError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// A running capture; restores every setting it changed when stopped or dropped.
pub struct SchedLog {
    /// (file, value to write back), in the order they were changed.
    saved: Vec<(PathBuf, String)>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Vec<String>>>,
    devices: Vec<Dev>,
}

/// The value to write back to a tracefs file that showed `text`: a `[selected]` choice
/// picked out of a list; for `buffer_size_kb` before tracing was first used since boot,
/// `7 (expanded: 1408)`, the size the buffer takes at first use (1408): the kernel refuses the
/// text itself, and the minimal boot-time buffer cannot be asked for again (any write expands
/// it), so the size tracing would have had is the nearest state there is.
pub fn current_value(text: &str) -> String {
    let t = text.trim();
    if let Some((_, rest)) = t.split_once("(expanded: ")
        && let Some(size) = rest.strip_suffix(')')
    {
        return size.trim().to_string();
    }
    match (t.find('['), t.find(']')) {
        (Some(a), Some(b)) if a < b => t[a + 1..b].to_string(),
        _ => t.to_string(),
    }
}

impl SchedLog {
    /// Starts the capture on `disks` (names under `sys_block`, e.g. `loop0`).
    pub fn start(disks: &[(String, Dev)]) -> Result<SchedLog, SchedLogError> {
        let root = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.join("trace").exists())
            .ok_or_else(|| SchedLogError::NoTracefs("/sys/kernel/tracing".into()))?;
        Self::start_at(&root, Path::new("/sys/block"), disks)
    }

    /// [`start`](Self::start) with explicit roots (tests use a directory of plain files).
    pub fn start_at(
        tracefs: &Path,
        sys_block: &Path,
        disks: &[(String, Dev)],
    ) -> Result<SchedLog, SchedLogError> {
        if !tracefs.join("trace").exists() {
            return Err(SchedLogError::NoTracefs(tracefs.display().to_string()));
        }
        let tracers = fs::read_to_string(tracefs.join("available_tracers")).unwrap_or_default();
        if !tracers.split_whitespace().any(|t| t == "blk") {
            return Err(SchedLogError::NoBlkTracer(tracefs.display().to_string()));
        }
        let mut log = SchedLog {
            saved: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            reader: None,
            devices: disks.iter().map(|d| d.1).collect(),
        };
        // On any error the guard restores what was changed so far.
        log.set(&tracefs.join("tracing_on"), "0")?;
        log.set(&tracefs.join("trace_clock"), "mono")?;
        log.set(&tracefs.join("buffer_size_kb"), "16384")?;
        for (name, _) in disks {
            let dir = sys_block.join(name).join("trace");
            log.set(&dir.join("enable"), "1")?;
            log.set(&dir.join("act_mask"), "notify")?;
        }
        log.set(&tracefs.join("current_tracer"), "blk")?;
        // Whatever the buffer held before is not ours.
        fs::write(tracefs.join("trace"), "").map_err(|e| io_err(&tracefs.join("trace"), e))?;
        log.set(&tracefs.join("tracing_on"), "1")?;
        let pipe = tracefs.join("trace_pipe");
        let stop = log.stop.clone();
        log.reader = Some(std::thread::spawn(move || read_pipe(&pipe, &stop)));
        Ok(log)
    }

    fn set(&mut self, path: &Path, value: &str) -> Result<(), SchedLogError> {
        let old = fs::read_to_string(path).map_err(|e| io_err(path, e))?;
        fs::write(path, value).map_err(|e| io_err(path, e))?;
        self.saved.push((path.to_path_buf(), current_value(&old)));
        Ok(())
    }

    /// Stops, restores every setting, and returns the messages of the traced devices.
    pub fn stop(mut self) -> (Vec<Note>, Vec<String>) {
        let lines = self.finish();
        let mut notes = Vec::new();
        let mut other = 0usize;
        for line in &lines {
            match parse_line(line) {
                Some(n) if self.devices.contains(&n.dev) => notes.push(n),
                _ => other += 1,
            }
        }
        let mut warnings = Vec::new();
        if other > 0 {
            warnings.push(format!(
                "{other} lines of the blk tracer were not messages of the traced devices"
            ));
        }
        let errors = self.restore();
        warnings.extend(errors);
        (notes, warnings)
    }

    fn finish(&mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.reader
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }

    /// Writes every saved value back, newest first; returns what could not be restored.
    fn restore(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        while let Some((path, value)) = self.saved.pop() {
            if let Err(e) = fs::write(&path, &value) {
                errors.push(format!(
                    "could not restore {} to {value:?}: {e}",
                    path.display()
                ));
            }
        }
        errors
    }
}

impl Drop for SchedLog {
    fn drop(&mut self) {
        self.finish();
        for e in self.restore() {
            eprintln!("warning: {e}");
        }
    }
}

/// Reads `trace_pipe` (non-blocking, polled) until `stop`, then drains it.
fn read_pipe(path: &Path, stop: &AtomicBool) -> Vec<String> {
    let mut lines = Vec::new();
    let Ok(mut f) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    else {
        return lines;
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut partial = String::new();
    let mut stopping = false;
    loop {
        match f.read(&mut buf) {
            Ok(0) if stopping => break,
            Ok(0) => std::thread::sleep(Duration::from_millis(50)),
            Ok(n) => {
                partial.push_str(&String::from_utf8_lossy(&buf[..n]));
                while let Some(i) = partial.find('\n') {
                    lines.push(partial[..i].to_string());
                    partial.drain(..=i);
                }
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && stopping => break,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => break,
        }
        if stop.load(Ordering::Relaxed) {
            // One more pass to drain what is left.
            stopping = true;
        }
    }
    if !partial.trim().is_empty() {
        lines.push(partial);
    }
    lines
}

/// One blk tracer message line:
/// `  dd-1350  [001] ..... 1234.567890:   7,0    m   N bfq1350S expire (0, ...)`.
pub fn parse_line(line: &str) -> Option<Note> {
    let (head, rest) = line.split_once("]")?;
    let (task, cpu) = head.rsplit_once('[')?;
    let cpu: u16 = cpu.trim().parse().ok()?;
    let pid: u32 = task.trim().rsplit_once('-')?.1.parse().ok()?;
    // Flags (optional), then `secs.frac:`.
    let colon = rest.find(": ")?;
    let ts_text = rest[..colon].split_whitespace().last()?;
    let (secs, frac) = ts_text.split_once('.')?;
    let secs: u64 = secs.parse().ok()?;
    let frac_ns: u64 = format!("{frac:0<9}").get(..9)?.parse().ok()?;
    let body = rest[colon + 2..].trim_start();
    let mut parts = body.splitn(2, char::is_whitespace);
    let dev = parts.next()?;
    let (maj, min) = dev.split_once(',')?;
    let dev = Dev {
        major: maj.trim().parse().ok()?,
        minor: min.trim().parse().ok()?,
    };
    // 6.x prints the cgroup (`1,0`) between the device and the action.
    let mut rest = parts.next()?.trim_start();
    for _ in 0..2 {
        if rest.starts_with("m ") {
            break;
        }
        rest = rest.split_once(char::is_whitespace)?.1.trim_start();
    }
    let after_m = rest.strip_prefix("m ")?.trim_start();
    let text = after_m.strip_prefix('N')?.trim();
    Some(Note {
        ts_ns: secs * 1_000_000_000 + frac_ns,
        dev,
        cpu,
        pid,
        text: text.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_text_gives_the_value_to_write_back() {
        for (text, value) in [
            // buffer_size_kb before tracing was first used (Debian's 6.1), and after.
            ("7 (expanded: 1408)\n", "1408"),
            ("1408\n", "1408"),
            ("16384", "16384"),
            // A choice list (trace_clock, current_tracer's neighbours).
            (
                "[local] global counter uptime perf mono mono_raw boot\n",
                "local",
            ),
            ("local global [mono] boot\n", "mono"),
            ("nop\n", "nop"),
            // Damaged: kept as is (the write back then fails and says so).
            ("7 (expanded: 1408", "7 (expanded: 1408"),
        ] {
            assert_eq!(current_value(text), value, "{text:?}");
        }
    }

    #[test]
    fn parses_message_lines_and_refuses_others() {
        let n = parse_line(
            "              dd-1350    [001] ..... 12345.678901:   7,0    m   N bfq1350S expire (0, slow 0, num_disp 0, short_ttime 1)",
        )
        .unwrap();
        assert_eq!(n.pid, 1350);
        assert_eq!(n.cpu, 1);
        assert_eq!(n.dev, Dev { major: 7, minor: 0 });
        assert_eq!(n.ts_ns, 12_345_678_901_000);
        assert_eq!(
            n.text,
            "bfq1350S expire (0, slow 0, num_disp 0, short_ttime 1)"
        );
        let with_cgroup = parse_line(
            "           <...>-2381    [000] d..1.  5360.247419:   7,2   1,0  m   N bfq2381S add_request 1",
        )
        .unwrap();
        assert_eq!(with_cgroup.text, "bfq2381S add_request 1");
        assert_eq!(with_cgroup.pid, 2381);
        let with_dash =
            parse_line(" kworker/u4:2-ev-88 [000] d..1. 1.5: 8,16 m N bfq88A /user.slice raising")
                .unwrap();
        assert_eq!((with_dash.pid, with_dash.ts_ns), (88, 1_500_000_000));
        for bad in [
            "",
            "# tracer: blk",
            "   dd-1 [000] ..... 1.000001:   7,0    D   W 8 + 8 [dd]",
            "   dd-1 [000] ..... 1.000001:   7,0",
            "   dd-x [000] ..... 1.0: 7,0 m N x",
        ] {
            assert!(parse_line(bad).is_none(), "{bad}");
        }
    }

    /// On a directory of plain files standing for tracefs and /sys/block: everything set is
    /// restored, on stop and on drop.
    #[test]
    fn restores_every_setting() {
        let dir = std::env::temp_dir().join(format!("iosched-schedlog-{}", std::process::id()));
        let tr = dir.join("tracing");
        let blk = dir.join("block/loop9/trace");
        fs::create_dir_all(&tr).unwrap();
        fs::create_dir_all(&blk).unwrap();
        let files = [
            (tr.join("trace"), ""),
            (tr.join("available_tracers"), "blk function nop"),
            (tr.join("tracing_on"), "1"),
            (tr.join("trace_clock"), "[local] global counter mono"),
            (tr.join("buffer_size_kb"), "1408"),
            (tr.join("current_tracer"), "nop"),
            (
                tr.join("trace_pipe"),
                "  dd-5 [000] ..... 2.000000001: 7,9 m N bfq5S set_in_service_queue, cur-budget = 10\n",
            ),
            (blk.join("enable"), "0"),
            (blk.join("act_mask"), "read,write"),
        ];
        for (p, v) in &files {
            fs::write(p, v).unwrap();
        }
        let disks = [("loop9".to_string(), Dev { major: 7, minor: 9 })];
        let log = SchedLog::start_at(&tr, &dir.join("block"), &disks).unwrap();
        assert_eq!(
            fs::read_to_string(tr.join("current_tracer")).unwrap(),
            "blk"
        );
        assert_eq!(fs::read_to_string(blk.join("act_mask")).unwrap(), "notify");
        let (notes, _) = log.stop();
        let expect = |p: &Path, v: &str| assert_eq!(fs::read_to_string(p).unwrap(), v, "{p:?}");
        expect(&tr.join("trace_clock"), "local");
        expect(&tr.join("current_tracer"), "nop");
        expect(&tr.join("tracing_on"), "1");
        expect(&tr.join("buffer_size_kb"), "1408");
        expect(&blk.join("enable"), "0");
        expect(&blk.join("act_mask"), "read,write");
        // The fake trace_pipe was emptied by the `trace` reset only in a real tracefs; here
        // it still holds our line.
        assert_eq!(notes.len(), 1);
        assert_eq!(notes[0].text, "bfq5S set_in_service_queue, cur-budget = 10");
        // Dropped without stop: restored too.
        let log = SchedLog::start_at(&tr, &dir.join("block"), &disks).unwrap();
        drop(log);
        expect(&tr.join("current_tracer"), "nop");
        expect(&blk.join("enable"), "0");
        // A missing device file: an error naming it, and what was set before is restored.
        let bad = [("nosuch".to_string(), Dev { major: 7, minor: 1 })];
        let e = SchedLog::start_at(&tr, &dir.join("block"), &bad)
            .err()
            .unwrap();
        assert!(e.to_string().contains("nosuch"), "{e}");
        expect(&tr.join("trace_clock"), "local");
        // Before tracing was first used since boot, buffer_size_kb shows the boot-time size
        // and the size of first use; the latter is written back (the kernel takes no other).
        fs::write(tr.join("buffer_size_kb"), "7 (expanded: 1408)").unwrap();
        let log = SchedLog::start_at(&tr, &dir.join("block"), &disks).unwrap();
        expect(&tr.join("buffer_size_kb"), "16384");
        drop(log);
        expect(&tr.join("buffer_size_kb"), "1408");
        fs::remove_dir_all(&dir).unwrap();
    }
}
