//! Real kernel: `report --follow FILE` on a recording `record -o FILE` is still writing. It
//! prints interval lines while the recorder runs, ends by itself once the recorder (stopped
//! with SIGINT, as Ctrl-C would) has closed the file, and its final report is the one
//! `report FILE` gives afterwards, request for request; stopped by Ctrl-C itself, it reports
//! what it read and says the recording was not closed. `dump --follow` prints the events as
//! they come. Counts are exact: dd's own I/O. Root only, serially (`cargo xtask test`).

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use iosched_trace_tests::{
    ScratchLoop, binary, dd, real_kernel_available, record, report_json, run, scratch_dir,
};
use serde_json::Value;

/// Direct 4 KiB writes, then reads, dd makes.
const WRITES: u32 = 2000;
const READS: u32 = 3000;
/// How long the follower may take to see an interval, and to end after the recorder did.
const PATIENCE: Duration = Duration::from_secs(30);

/// `iosched-trace COMMAND --follow FILE` (`report --follow --json`, `dump --follow`): its
/// stderr lines (the interval lines, with `--json`) and its stdout lines as they come, and
/// its stdout whole at its end. Killed on drop if still running.
struct Follower {
    child: Child,
    lines: mpsc::Receiver<String>,
    out_lines: mpsc::Receiver<String>,
    stdout: Option<thread::JoinHandle<String>>,
    said: Vec<String>,
}

impl Follower {
    fn start(file: &std::path::Path) -> Follower {
        Self::start_with(&["report", "--follow", "--json"], file)
    }

    fn start_with(args: &[&str], file: &std::path::Path) -> Follower {
        let mut child = Command::new(binary())
            .args(args)
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn report --follow");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("  [follow] {line}");
                let _ = tx.send(line);
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, out_lines) = mpsc::channel();
        let stdout = Some(thread::spawn(move || {
            let mut s = String::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                s.push_str(&line);
                s.push('\n');
            }
            s
        }));
        Follower {
            child,
            lines,
            out_lines,
            stdout,
            said: Vec::new(),
        }
    }

    /// Waits until `n` stdout lines `pred` accepts have come; panics after [`PATIENCE`].
    fn wait_for_out_lines(&mut self, n: usize, pred: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = 0;
        while seen < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.out_lines.recv_timeout(left) {
                Ok(line) => seen += usize::from(pred(&line)),
                Err(_) => panic!("{seen} of {n} lines within {PATIENCE:?}"),
            }
        }
    }

    /// Waits for a stderr line `pred` accepts; panics after [`PATIENCE`].
    fn wait_for_line(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.said.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("no {what} within {PATIENCE:?}; said: {:#?}", self.said),
            }
        }
    }

    /// Sends it `signal` (our own child, by pid, not yet reaped).
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is our running child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    /// Waits for it to exit on its own (at most [`PATIENCE`]); whether it succeeded, and its
    /// stdout.
    fn wait(mut self) -> (bool, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "report --follow did not end within {PATIENCE:?} of the recorder's end"
            );
            thread::sleep(Duration::from_millis(50));
        };
        let out = self.stdout.take().unwrap().join().unwrap();
        (status.success(), out)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        // Our own child, by its handle; a no-op once it has been reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn writes(disk: &ScratchLoop, count: u32) {
    dd(&[
        &format!("of={}", disk.dev().display()),
        "if=/dev/zero",
        "bs=4096",
        &format!("count={count}"),
        "oflag=direct",
    ])
    .unwrap();
}

/// An interval line of `disk` with I/O.
fn io_line(disk: &ScratchLoop) -> impl Fn(&str) -> bool {
    let device = format!("  {} ", disk.name());
    move |l: &str| l.contains(&device) && l.contains(" requests ")
}

fn requests(report: &Value, dir: &str) -> u64 {
    report["devices"][0][dir]["requests"].as_u64().unwrap()
}

#[test]
fn report_follow_reports_the_growing_recording_as_report_does_the_finished_file() {
    if !real_kernel_available(
        "report_follow_reports_the_growing_recording_as_report_does_the_finished_file",
    ) {
        return;
    }
    let disk = ScratchLoop::new("follow", 64, "mq-deadline").unwrap();
    let dir = scratch_dir("follow-out").unwrap();
    let file = dir.path().join("growing.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let mut follower = Follower::start(&file);
    writes(&disk, WRITES);
    // An interval line with the device's writes, while the recorder still runs.
    let line = follower.wait_for_line("interval line with I/O", io_line(&disk));
    assert!(line.contains("IOPS") && line.contains("Q2C p50"), "{line}");
    assert!(recorder.running());
    dd(&[
        &format!("if={}", disk.dev().display()),
        "of=/dev/null",
        "bs=4096",
        &format!("count={READS}"),
        "iflag=direct",
    ])
    .unwrap();
    // Past the recorder's drain of what the kernel staged (tens of ms).
    thread::sleep(Duration::from_millis(500));
    recorder.stop().unwrap();
    let (ok, out) = follower.wait();
    assert!(ok, "report --follow failed");
    let followed: Value = serde_json::from_str(&out).expect("report --follow --json's JSON");
    let after = report_json(&file, &[]).unwrap();
    // Request for request, latency for latency: the same report.
    assert_eq!(
        (requests(&followed, "write"), requests(&followed, "read")),
        (requests(&after, "write"), requests(&after, "read"))
    );
    assert_eq!(followed, after);
    // And dd's own counts, with the completions the kernel counted but no program saw
    // (docs/REPORT.md: a few per 100,000, in bursts) and no event lost.
    let untraced = after["trace"]["untraced_completions"].as_u64().unwrap();
    assert_eq!(
        requests(&after, "write") + requests(&after, "read") + untraced,
        u64::from(WRITES + READS)
    );
    assert_eq!(after["trace"]["lost_events"].as_u64(), Some(0));
    let warnings = after["trace"]["warnings"].to_string();
    assert!(!warnings.contains("not closed"), "{warnings}");
}

/// Ctrl-C to `report --follow` while the recorder goes on: it reports what the file held then
/// (every write, since an interval line had shown them all) and says the recording was not
/// closed; the recorder is not disturbed.
#[test]
fn report_follow_stopped_by_ctrl_c_reports_what_it_read() {
    if !real_kernel_available("report_follow_stopped_by_ctrl_c_reports_what_it_read") {
        return;
    }
    let disk = ScratchLoop::new("follow-int", 64, "mq-deadline").unwrap();
    let dir = scratch_dir("follow-int-out").unwrap();
    let file = dir.path().join("growing.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let mut follower = Follower::start(&file);
    writes(&disk, WRITES);
    // Interval lines until they have shown every write (in one interval, or more on a slow
    // machine).
    let mut shown = 0;
    while shown < u64::from(WRITES) {
        let line = follower.wait_for_line("interval lines with every write", io_line(&disk));
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "requests").unwrap();
        shown += words[at - 1].parse::<u64>().unwrap();
    }
    assert_eq!(shown, u64::from(WRITES));
    follower.signal(libc::SIGINT);
    let (ok, out) = follower.wait();
    assert!(ok, "report --follow failed on SIGINT");
    assert!(recorder.running());
    let report: Value = serde_json::from_str(&out).expect("report --follow --json's JSON");
    assert_eq!(requests(&report, "write"), u64::from(WRITES));
    let warnings = report["trace"]["warnings"].to_string();
    assert!(warnings.contains("recording not closed yet"), "{warnings}");
    assert!(!warnings.contains("not closed cleanly"), "{warnings}");
    recorder.stop().unwrap();
}

/// `dump --follow`: a burst of I/O is printed while the recorder runs (the devices idle after
/// it, so its last events come by the recorder's clock, not by newer ones), and once the
/// recorder has closed the file the output is `dump FILE`'s.
#[test]
fn dump_follow_prints_a_burst_while_recording_and_ends_as_dump_does() {
    if !real_kernel_available("dump_follow_prints_a_burst_while_recording_and_ends_as_dump_does") {
        return;
    }
    let disk = ScratchLoop::new("follow-dump", 64, "mq-deadline").unwrap();
    let dir = scratch_dir("follow-dump-out").unwrap();
    let file = dir.path().join("growing.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let mut follower = Follower::start_with(&["dump", "--follow"], &file);
    let burst = 200;
    writes(&disk, burst);
    // blkparse's columns: the action is the sixth.
    follower.wait_for_out_lines(burst as usize, |l| l.split_whitespace().nth(5) == Some("C"));
    assert!(recorder.running());
    recorder.stop().unwrap();
    let (ok, out) = follower.wait();
    assert!(ok, "dump --follow failed");
    let after = run(Command::new(binary()).arg("dump").arg(&file)).unwrap();
    assert_eq!(out, after);
}
