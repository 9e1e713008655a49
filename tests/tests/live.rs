//! `live` on the real kernel: the batch output while `dd` writes, its numbers against
//! `report` on a recording made at the same time, and the interactive screen in tmux (a
//! private server, killed by its socket name). Root only, serially.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use iosched_trace_tests::{
    ScratchLoop, binary, busy_reader, real_kernel_available, record, report_json, scratch_dir,
    tool_available,
};

/// A `dd` writing 512-byte blocks with O_DSYNC to the device until killed (by pid, on drop).
struct Writer(Child);

impl Writer {
    fn start(dev: &std::path::Path) -> Writer {
        let child = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", dev.display()))
            .args([
                "bs=512",
                "count=10000000",
                "oflag=dsync,direct",
                "status=none",
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawning dd");
        Writer(child)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// `live --batch --json` while a recording runs: for the intervals both fully cover, each
/// process's requests and bytes and the device's request counts equal what `report` computes
/// for the same window of the recording. Also `--batch --count 3` (text) ends by itself with
/// three blocks showing dd writing.
#[test]
fn batch_intervals_equal_report_windows_of_a_simultaneous_recording() {
    if !real_kernel_available("batch_intervals_equal_report_windows_of_a_simultaneous_recording") {
        return;
    }
    // Large enough that dd (512-byte dsync writes, ~15 MB/s here) is still writing when both
    // live runs end: a 64 MiB device filled up first on a fast day.
    let disk = ScratchLoop::new("live-batch", 1024, "mq-deadline").unwrap();
    let out = scratch_dir("live-batch-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let writer = Writer::start(disk.dev());
    let live = Command::new(binary())
        .args([
            "live",
            "--batch",
            "--json",
            "--count",
            "4",
            "--interval",
            "0.5",
        ])
        .args(["-d", disk.name()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = live.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The text form, with dd still writing.
    let text = Command::new(binary())
        .args(["live", "--batch", "--count", "3", "--interval", "0.3"])
        .args(["-d", disk.name()])
        .output()
        .unwrap();
    drop(writer);
    recorder.stop().unwrap();
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    let blocks: Vec<&str> = text
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .collect();
    assert_eq!(blocks.len(), 3, "{text}");
    for b in &blocks {
        assert!(b.starts_with(disk.name()), "{b}");
        let dd_row = b
            .lines()
            .find(|l| l.contains(" dd "))
            .unwrap_or_else(|| panic!("{b}"));
        // PID COMM rIOPS rMB/s wIOPS ...: dd writes, so wIOPS > 0.
        let fields: Vec<&str> = dd_row.split_whitespace().collect();
        let wiops: f64 = fields[4].parse().unwrap();
        assert!(wiops > 0.0, "{dd_row}");
    }

    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let whole = report_json(&file, &["-d", disk.name()]).unwrap();
    let first = u(&whole["trace"]["from_ns"]);
    let mut compared = 0;
    // The first interval may start before the recorder's first event; the rest are inside.
    for line in &lines[1..] {
        let (from, to) = (u(&line["from_ns"]), u(&line["to_ns"]));
        assert!(from > first);
        let live = &line["devices"][0]["report"];
        let rep = report_json(
            &file,
            &[
                "-d",
                disk.name(),
                "--from",
                &secs_for(from - first),
                "--to",
                &secs_for(to - first),
            ],
        )
        .unwrap();
        assert_eq!(u(&rep["trace"]["duration_ns"]), to - from);
        let counts = |r: &Value| -> Vec<(u64, u64, u64)> {
            let mut v: Vec<_> = r["processes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| u(&p["requests"]) + u(&p["bytes"]) > 0)
                .map(|p| (u(&p["pid"]), u(&p["requests"]), u(&p["bytes"])))
                .collect();
            v.sort_unstable();
            v
        };
        // `live` and `record` are two captures: each program stamps its own copy of an
        // event, and the two stamps of one event differ by ~0.2 µs typically, up to ~80 µs
        // (measured: 30000 events matched across two simultaneous recordings). An event that
        // close to a window's edge can fall on either side in the two, so a count may differ
        // by one per edge. Everything else is exact.
        const SLACK: u64 = 2;
        let (l, r) = (counts(live), counts(&rep));
        assert_eq!(
            l.iter().map(|c| c.0).collect::<Vec<_>>(),
            r.iter().map(|c| c.0).collect::<Vec<_>>(),
            "window {from}..{to}: the same processes"
        );
        for (a, b) in l.iter().zip(&r) {
            assert!(
                a.1.abs_diff(b.1) <= SLACK && a.2.abs_diff(b.2) <= SLACK * 4096,
                "window {from}..{to}: live {a:?} report {b:?}"
            );
        }
        let dd = counts(live)
            .into_iter()
            .find(|(pid, _, _)| *pid == writer_pid(&lines))
            .expect("dd did I/O in the interval");
        assert!(dd.1 > 10, "{dd:?}");
        for key in ["bios_queued", "requests_dispatched"] {
            let (a, b) = (u(&live["devices"][0][key]), u(&rep["devices"][0][key]));
            assert!(a.abs_diff(b) <= SLACK, "{key}: live {a} report {b}");
        }
        let (a, b) = (
            u(&live["devices"][0]["write"]["requests"]),
            u(&rep["devices"][0]["write"]["requests"]),
        );
        assert!(
            a.abs_diff(b) <= SLACK,
            "write requests: live {a} report {b}"
        );
        compared += 1;
    }
    assert_eq!(compared, 3);
}

/// Seconds as text that `report` turns back into exactly `ns` (it computes
/// `(secs * 1e9) as u64`): the windows must align to the nanosecond.
fn secs_for(ns: u64) -> String {
    let mut s = ns as f64 / 1e9;
    while ((s * 1e9) as u64) < ns {
        s = f64::from_bits(s.to_bits() + 1);
    }
    while ((s * 1e9) as u64) > ns {
        s = f64::from_bits(s.to_bits() - 1);
    }
    assert_eq!((s * 1e9) as u64, ns);
    // Display prints the shortest text that parses back to the same f64.
    s.to_string()
}

/// The pid of the process named dd in the intervals.
fn writer_pid(lines: &[Value]) -> u64 {
    lines
        .iter()
        .flat_map(|l| l["devices"][0]["report"]["processes"].as_array().unwrap())
        .find(|p| p["comm"] == "dd")
        .map(|p| u(&p["pid"]))
        .expect("a dd row")
}

/// A private tmux server, killed (only it) on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "live"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// The screen in a real terminal: a `dd` row with a non-zero write rate appears; `q` quits,
/// the program exits 0, and the terminal is back to normal (alternate screen left, the
/// shell's own output visible again).
#[test]
fn tui_in_tmux_shows_dd_writing_and_q_restores_the_terminal() {
    if !real_kernel_available("tui_in_tmux_shows_dd_writing_and_q_restores_the_terminal") {
        return;
    }
    let disk = ScratchLoop::new("live-tmux", 64, "mq-deadline").unwrap();
    let out = scratch_dir("live-tmux-out").unwrap();
    let status_file = out.path().join("status");
    let tmux = Tmux {
        socket: format!("iosched-live-test-{}", std::process::id()),
    };
    let script = format!(
        "echo BEFORE-LIVE; {} live -d {} --interval 0.5; echo $? > {}; echo AFTER-LIVE; sleep 600",
        binary().display(),
        disk.name(),
        status_file.display()
    );
    let ok = tmux
        .cmd()
        .args([
            "new-session",
            "-d",
            "-s",
            "live",
            "-x",
            "160",
            "-y",
            "48",
            "sh",
            "-c",
        ])
        .arg(&script)
        .status()
        .unwrap();
    assert!(ok.success());
    let writer = Writer::start(disk.dev());
    let deadline = Instant::now() + Duration::from_secs(20);
    let screen = loop {
        let screen = tmux.capture();
        let dd_row = screen.lines().find(|l| l.contains(" dd ")).map(|l| {
            let fields: Vec<&str> = l.trim_start_matches('>').split_whitespace().collect();
            // PID COMM rIOPS rMB/s wIOPS
            fields
                .get(4)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        });
        if dd_row.is_some_and(|w| w > 0.0) {
            break screen;
        }
        assert!(
            Instant::now() < deadline,
            "no dd row with writes on screen:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(screen.contains(disk.name()), "{screen}");
    assert!(screen.contains("mq-deadline"), "{screen}");
    assert!(
        !screen.contains("BEFORE-LIVE"),
        "alternate screen:\n{screen}"
    );
    tmux.cmd()
        .args(["send-keys", "-t", "live", "q"])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !status_file.exists() {
        assert!(Instant::now() < deadline, "live did not exit on q");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(writer);
    std::thread::sleep(Duration::from_millis(300));
    let status = std::fs::read_to_string(&status_file).unwrap();
    assert_eq!(status.trim(), "0");
    let after = tmux.capture();
    // Back on the main screen: what the shell printed before is there again, and after.
    assert!(after.contains("BEFORE-LIVE"), "{after}");
    assert!(after.contains("AFTER-LIVE"), "{after}");
    let tty = tmux
        .cmd()
        .args([
            "display-message",
            "-p",
            "-t",
            "live",
            "#{alternate_on} #{cursor_flag}",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&tty.stdout).trim(),
        "0 1",
        "alternate screen off, cursor visible"
    );
}

/// A `live --batch` started in the background by a script inherits SIGINT ignored; it must
/// still stop on SIGINT (and on SIGTERM), promptly and with exit status 0, having printed
/// whole intervals only.
#[test]
fn batch_stops_on_sigint_even_when_started_with_it_ignored() {
    if !real_kernel_available("batch_stops_on_sigint_even_when_started_with_it_ignored") {
        return;
    }
    let disk = ScratchLoop::new("live-signal", 64, "none").unwrap();
    for signal in ["INT", "TERM"] {
        // `trap '' INT` makes the shell and what it execs ignore SIGINT, as a background
        // job of a non-interactive shell does.
        let mut live = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "trap '' INT; exec {} live --batch --interval 0.2 -d {}",
                binary().display(),
                disk.name()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = live.id().to_string();
        // Its first interval shows it is attached and printing.
        let mut stdout = std::io::BufReader::new(live.stdout.take().unwrap());
        let mut first = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
        assert!(first.starts_with(disk.name()), "{first}");
        let sent = Instant::now();
        assert!(
            Command::new("kill")
                .args([&format!("-{signal}"), &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = loop {
            if let Some(status) = live.try_wait().unwrap() {
                break status;
            }
            if sent.elapsed() > Duration::from_secs(5) {
                let _ = live.kill();
                let _ = live.wait();
                panic!("live --batch still running 5 s after SIG{signal}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "SIG{signal}: {status:?}");
        // What it printed ends with a whole block (a blank line).
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
        let all = first + &rest;
        assert!(all.ends_with("\n\n"), "SIG{signal}: {all:?}");
    }
}

/// `live` started on a device already under load: its programs attach one after another,
/// and the bios queued while the issue program was not yet attached used to stay "waiting"
/// for as long as `live` ran (657 in every interval on a RAM-backed device). fio keeps 32
/// reads in flight under `none`: no interval may show more bios between Q and D.
#[test]
fn batch_on_a_busy_device_shows_no_bios_from_before_its_start() {
    const TEST: &str = "batch_on_a_busy_device_shows_no_bios_from_before_its_start";
    const IODEPTH: u32 = 32;
    if !real_kernel_available(TEST) || !tool_available(TEST, "fio") {
        return;
    }
    let disk = ScratchLoop::new("live-busy", 256, "none").unwrap();
    let fio = busy_reader(disk.dev(), IODEPTH, 20).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let output = Command::new(binary())
        .args([
            "live",
            "--batch",
            "--json",
            "--count",
            "3",
            "--interval",
            "0.5",
        ])
        .args(["-d", disk.name()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    drop(fio);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for line in &lines {
        let device = &line["devices"][0]["report"]["devices"][0];
        let dispatched = u(&device["requests_dispatched"]);
        assert!(dispatched > 1_000, "too little load to test: {line}");
        let waiting = u(&device["queue_depth"]["scheduler_max"]);
        assert!(
            waiting <= u64::from(IODEPTH),
            "{waiting} bios between Q and D at once with {IODEPTH} reads in flight: {}",
            device["queue_depth"]
        );
    }
}
