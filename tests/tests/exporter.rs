//! The exporter on the real kernel: scraped by a real Prometheus server after a known fio
//! workload (the request count is fio's own, the quantiles agree with `report` on a recording
//! of the same run), a loop device that appears and goes away while it runs, and SIGTERM
//! detaching every program.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use iosched_trace_common::exporter::BOUNDS_NS;
use iosched_trace_tests::{
    ScratchLoop, binary, fio, real_kernel_available, record, report_json, run, scratch_dir,
};

/// A free TCP port on loopback (bound and released: the child binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `GET path` on 127.0.0.1:`port`, with `accept`; the status line and the body.
fn http_get(port: u16, path: &str, accept: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    // Our server and Prometheus's API answer with a length or close; a chunked body (not
    // expected) would show as a parse failure of the test, not a pass.
    Ok((status, body.to_string()))
}

/// A child process (the exporter, Prometheus) stopped by pid on drop: SIGTERM, then SIGKILL
/// after 5 s.
struct Daemon {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    what: &'static str,
}

impl Daemon {
    /// Starts `cmd` with stderr read line by line; waits for a line containing `ready`.
    fn start(what: &'static str, mut cmd: Command, ready: &str) -> Daemon {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
        let stderr = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let d = Daemon {
            child: Some(child),
            lines,
            what,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut said = Vec::new();
        while Instant::now() < deadline {
            match d.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let done = line.contains(ready);
                    said.push(line);
                    if done {
                        return d;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("{what} did not say {ready:?}: {}", said.join("\n"));
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGTERM, and its exit status (waits up to 10 s, then kills).
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{} did not stop on SIGTERM within 10 s", self.what);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What it has said on stderr since it was ready.
    fn said(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn exporter(port: u16, extra: &[&str]) -> Daemon {
    let mut cmd = Command::new(binary());
    cmd.arg("exporter")
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(extra);
    Daemon::start("exporter", cmd, "listening on")
}

/// The classic text exposition's samples: `name{labels} value` lines.
fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels contain every one of `labels`.
fn sample_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    samples(text)
        .iter()
        .filter(|(s, _)| s.split('{').next() == Some(name) && labels.iter().all(|l| s.contains(l)))
        .map(|(_, v)| v)
        .sum()
}

/// `scrape(port)`'s classic text.
fn scrape(port: u16) -> String {
    let (status, body) = http_get(port, "/metrics", "text/plain").expect("scrape");
    assert!(status.contains("200"), "scrape: {status}\n{body}");
    body
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One PromQL instant query's scalar result (the first series' value), if any.
fn promql(port: u16, query: &str) -> Option<f64> {
    let path = format!("/api/v1/query?query={}", percent_encode(query));
    let (_, body) = http_get(port, &path, "application/json").ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// The bucket of `ns` (an index into the bounds; the overflow is `BOUNDS_NS.len()`).
fn bucket_of(ns: f64) -> usize {
    BOUNDS_NS
        .iter()
        .position(|b| ns <= *b as f64)
        .unwrap_or(BOUNDS_NS.len())
}

/// 4096 random 4 KiB direct reads under mq-deadline, recorded and exported at once, the
/// exporter scraped by Prometheus: `iosched_requests_total` is fio's own count, Q->C's count
/// is the report's, and the PromQL p50 and p99 of Q->C are within a bucket of the report's.
#[test]
fn prometheus_scrapes_what_fio_did_and_the_quantiles_agree_with_report() {
    if !real_kernel_available("prometheus_scrapes_what_fio_did_and_the_quantiles_agree_with_report")
    {
        return;
    }
    let disk = ScratchLoop::new("exp-prom", 64, "mq-deadline").unwrap();
    let dir = scratch_dir("exp-prom-out").unwrap();
    let port = free_port();
    let _exporter = exporter(port, &["-d", disk.name()]);
    let file = dir.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let job = fio(
        dir.path(),
        &[
            "--name=reads",
            &format!("--filename={}", disk.dev().display()),
            "--rw=randread",
            "--bs=4k",
            "--size=16m",
            "--direct=1",
            "--ioengine=psync",
        ],
    )
    .unwrap();
    recorder.stop().unwrap();
    let fio_reads = job["jobs"][0]["read"]["total_ios"].as_u64().unwrap();
    assert_eq!(fio_reads, 4096);

    // The exposition first, read directly: exact counts.
    let text = scrape(port);
    let device = format!("device=\"{}\"", disk.name());
    let reads = sample_sum(
        &text,
        "iosched_requests_total",
        &[&device, "operation=\"read\""],
    );
    // A completion can fire where the kernel runs no BPF program (docs/REPORT.md, the
    // completions that never reach the program: 1 of these 4096 in one CI run, for the
    // exporter and not the recorder beside it). So: every count equals the completions the
    // exporter's programs saw, exactly, and with the completions the kernel counted and the
    // programs did not (from /sys/block/DEV/stat) they are fio's, exactly.
    let seen = sample_sum(&text, "iosched_events_total", &["event=\"complete\""]);
    assert_eq!(
        reads, seen,
        "requests_total against the completions seen\n{text}"
    );
    assert!(
        text.contains(&format!("iosched_untraced_completions_total{{{device}}}")),
        "no untraced completions series for the device\n{text}"
    );
    let untraced = sample_sum(&text, "iosched_untraced_completions_total", &[&device]);
    assert_eq!(
        reads + untraced,
        fio_reads as f64,
        "requests_total {reads} and untraced completions {untraced} against fio's \
         {fio_reads}\n{text}"
    );
    // They come in bursts when a host task's softirq runs completions (docs/REPORT.md); a
    // bound only against a capture that misses completions wholesale (as in fleet.rs).
    assert!(untraced <= fio_reads as f64 / 20.0, "{untraced} untraced");
    let bytes = sample_sum(
        &text,
        "iosched_request_bytes_total",
        &[&device, "operation=\"read\""],
    );
    assert_eq!(bytes, reads * 4096.0);
    let q2c_count = sample_sum(
        &text,
        "iosched_request_latency_seconds_count",
        &[&device, "operation=\"read\""],
    );
    assert_eq!(q2c_count, reads, "Q->C count against requests_total");
    let report = report_json(&file, &[]).unwrap();
    let q2c = &report["devices"][0]["latency_by_direction"]["read"]["q2c"];
    // The recorder's misses are counted against the kernel's own completion counters: with
    // them, its count is fio's exactly.
    let untraced = report["trace"]["untraced_completions"]
        .as_f64()
        .unwrap_or(0.0);
    assert_eq!(
        q2c["count"].as_f64().unwrap() + untraced,
        fio_reads as f64,
        "report's Q->C count and untraced completions against fio"
    );
    let q2c_sum = sample_sum(
        &text,
        "iosched_request_latency_seconds_sum",
        &[&device, "operation=\"read\""],
    );
    let mean_ns = q2c_sum / q2c_count * 1e9;
    let report_mean = q2c["mean_ns"].as_f64().unwrap();
    assert!(
        (mean_ns - report_mean).abs() < 0.1 * report_mean + 2_000.0,
        "mean Q->C {mean_ns:.0} ns against report's {report_mean:.0} ns"
    );

    // Prometheus itself, scraping every second.
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let config = prom_dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: iosched\n    \
             static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"));
    let _prometheus = Daemon::start("prometheus", cmd, "Server is ready to receive web requests");
    let count_query = format!(
        "sum(iosched_requests_total{{device=\"{}\",operation=\"read\"}})",
        disk.name()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = None;
    while Instant::now() < deadline {
        seen = promql(prom_port, &count_query);
        if seen.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(seen, Some(reads), "PromQL {count_query}");
    for (q, key) in [(0.5, "p50_ns"), (0.99, "p99_ns")] {
        let query = format!(
            "histogram_quantile({q}, sum by (le) (iosched_request_latency_seconds_bucket{{device=\"{}\",operation=\"read\"}}))",
            disk.name()
        );
        let prom_ns = promql(prom_port, &query).expect("a quantile") * 1e9;
        let report_ns = q2c[key].as_f64().unwrap();
        // histogram_quantile interpolates inside the bucket holding the quantile; the report's
        // exact value is in that bucket, or (at a boundary, where the two programs' clocks
        // read tens of ns apart) the next one.
        let (b_prom, b_report) = (bucket_of(prom_ns), bucket_of(report_ns));
        assert!(
            b_prom.abs_diff(b_report) <= 1,
            "Q->C {key}: PromQL {prom_ns:.0} ns (bucket {b_prom}), report {report_ns:.0} ns (bucket {b_report})"
        );
    }
}

/// Tracing every device: a loop device attached after the start gets series for its I/O, a
/// scheduler switched under it shows in its info with the counts still exact, SIGHUP reloads,
/// and once the device is detached its series go away while the exporter keeps serving.
#[test]
fn a_device_that_comes_and_goes_gets_series_and_loses_them() {
    if !real_kernel_available("a_device_that_comes_and_goes_gets_series_and_loses_them") {
        return;
    }
    let port = free_port();
    let mut daemon = exporter(port, &[]);
    let disk = ScratchLoop::new("exp-hotplug", 32, "none").unwrap();
    let name = disk.name().to_string();
    // The watcher looks once a second.
    std::thread::sleep(Duration::from_millis(2500));
    iosched_trace_tests::dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        "count=300",
        "oflag=direct",
    ])
    .unwrap();
    let device = format!("device=\"{name}\"");
    let text = scrape(port);
    assert_eq!(
        sample_sum(
            &text,
            "iosched_requests_total",
            &[&device, "operation=\"write\""]
        ),
        300.0,
        "{text}"
    );
    assert!(text.contains(&format!("iosched_device_info{{{device}")));
    // Its completion baseline was taken when it appeared: nothing the kernel counted since
    // is missing (dd's writes, and whatever udev read on attach once traced).
    assert!(
        text.contains(&format!("iosched_untraced_completions_total{{{device}}} 0")),
        "no untraced completions series at 0 for the new device\n{text}"
    );

    // A scheduler switched under it: the info follows, the counts go on exactly, nothing is
    // left in the scheduler or the driver.
    disk.set_queue("scheduler", "mq-deadline").unwrap();
    iosched_trace_tests::dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        "count=100",
        "seek=1000",
        "oflag=direct",
    ])
    .unwrap();
    let text = scrape(port);
    assert!(
        text.contains(&format!("iosched_device_info{{{device},dev="))
            && text
                .lines()
                .any(|l| l.starts_with(&format!("iosched_device_info{{{device}"))
                    && l.contains("scheduler=\"mq-deadline\"")),
        "the info does not show mq-deadline:\n{text}"
    );
    assert_eq!(
        sample_sum(
            &text,
            "iosched_requests_total",
            &[&device, "operation=\"write\""]
        ),
        400.0
    );
    for gauge in ["iosched_scheduler_depth", "iosched_driver_depth"] {
        assert_eq!(sample_sum(&text, gauge, &[&device]), 0.0, "{gauge}");
    }

    // SIGHUP: reloaded, still serving.
    // SAFETY: our own child's pid.
    unsafe { libc::kill(daemon.pid(), libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        daemon.said().iter().any(|l| l.contains("reloaded")),
        "no reload line after SIGHUP"
    );
    assert!(scrape(port).contains(&device));
    drop(disk);
    std::thread::sleep(Duration::from_millis(2500));
    let text = scrape(port);
    assert!(
        !text.contains(&device),
        "series of the detached {name} remain:\n{}",
        text.lines()
            .filter(|l| l.contains(&device))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let status = daemon.terminate();
    assert!(
        status.success(),
        "exporter exited {status}: {:?}",
        daemon.said()
    );
}

/// The ids of the BPF programs process `pid` holds descriptors of (`prog_id:` in their
/// fdinfo).
fn program_ids_held_by(pid: i32) -> Vec<u64> {
    let mut ids = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        if let Ok(info) = std::fs::read_to_string(fd.path())
            && let Some(id) = info
                .lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        {
            ids.push(id);
        }
    }
    ids
}

/// Every loaded program as bpftool lists it: (id, name).
fn loaded_programs() -> Vec<(u64, String)> {
    let out = run(Command::new("bpftool").args(["prog", "show", "--json"])).unwrap();
    let progs: serde_json::Value = serde_json::from_str(&out).unwrap();
    progs
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().unwrap_or(0),
                p["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// While it runs, bpftool shows the exporter's eight programs; after SIGTERM it exits 0 and
/// none of them is loaded.
#[test]
fn sigterm_detaches_every_program() {
    if !real_kernel_available("sigterm_detaches_every_program") {
        return;
    }
    let disk = ScratchLoop::new("exp-term", 16, "none").unwrap();
    let port = free_port();
    let mut daemon = exporter(port, &["-d", disk.name()]);
    // Its programs by the ids behind its own descriptors (other exporters may run on the
    // machine, and bpftool may not name the pids holding a program).
    let ids = program_ids_held_by(daemon.pid());
    let ours: Vec<(u64, String)> = loaded_programs()
        .into_iter()
        .filter(|(id, _)| ids.contains(id))
        .collect();
    let exp = ours.iter().filter(|(_, n)| n.starts_with("exp_")).count();
    assert_eq!(exp, 8, "exporter programs held by it: {ours:?}");
    let status = daemon.terminate();
    assert!(status.success(), "exit {status}");
    // Program ids are not reused soon: none of those ids may still be loaded. The kernel
    // frees a program whose last reference went in deferred work (after an RCU grace
    // period), so bpftool may list it for a moment after the exit.
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left: Vec<(u64, String)> = loaded_programs()
            .into_iter()
            .filter(|(id, _)| ids.contains(id))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(left.is_empty(), "still loaded after SIGTERM: {left:?}");
}

/// A fio job in the background, stopped (SIGINT, by its pid) when dropped.
struct BackgroundFio(Option<Child>);

/// The background job's reads in flight at most (fio's `--iodepth`).
const BACKGROUND_IODEPTH: u32 = 16;

impl BackgroundFio {
    fn start(dev: &std::path::Path, seconds: u32) -> BackgroundFio {
        let child = Command::new("fio")
            .args([
                "--name=busy",
                "--rw=randread",
                "--bs=4k",
                "--ioengine=libaio",
                "--direct=1",
                "--time_based",
                "--output=/dev/null",
            ])
            .arg(format!("--iodepth={BACKGROUND_IODEPTH}"))
            .arg(format!("--runtime={seconds}"))
            .arg(format!("--filename={}", dev.display()))
            .stdin(Stdio::null())
            .spawn()
            .expect("starting fio");
        BackgroundFio(Some(child))
    }

    /// Stops the job and waits for it: every request it issued has completed after this.
    fn stop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SAFETY: our own child's pid, not yet reaped.
            // (fio exits 128 when interrupted, its jobs' I/O reaped first.)
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            child.wait().expect("waiting for fio");
        }
    }
}

impl Drop for BackgroundFio {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads the kernel completed on `disk` so far.
fn reads_completed(disk: &ScratchLoop) -> f64 {
    iosched_trace::system::read_disk_counters(disk.name())
        .unwrap()
        .reads as f64
}

/// A daemon started on a busy host: the device's requests were already coming when the
/// programs were attached, before userspace had put the device in their filter. Each CPU
/// cached "not traced" for the device's queue then, and kept it for as long as the requests
/// kept coming (until the filter's generation), so the exporter counted about 1 request in
/// 200 and showed the rest as untracked and untraced.
#[test]
fn an_exporter_started_under_load_counts_every_request_after_it_is_ready() {
    if !real_kernel_available(
        "an_exporter_started_under_load_counts_every_request_after_it_is_ready",
    ) {
        return;
    }
    let disk = ScratchLoop::new("exp-busy", 64, "none").unwrap();
    let mut load = BackgroundFio::start(disk.dev(), 60);
    std::thread::sleep(Duration::from_millis(1500));
    let before = reads_completed(&disk);
    assert!(before > 1000.0, "fio made only {before} reads in 1.5 s");
    let port = free_port();
    let mut daemon = exporter(port, &["-d", disk.name()]);
    let ready = reads_completed(&disk);
    std::thread::sleep(Duration::from_secs(3));
    load.stop();
    let end = reads_completed(&disk);
    let text = scrape(port);
    let device = format!("device=\"{}\"", disk.name());
    let requests = sample_sum(
        &text,
        "iosched_requests_total",
        &[&device, "operation=\"read\""],
    );
    let untracked = sample_sum(
        &text,
        "iosched_lost_events_total",
        &["reason=\"untracked_request\""],
    );
    let untraced = sample_sum(&text, "iosched_untraced_completions_total", &[&device]);
    let after_ready = end - ready;
    // Untracked: the requests already in flight when the programs came (fio keeps
    // `BACKGROUND_IODEPTH`).
    assert!(untracked <= 64.0, "{untracked} untracked requests\n{text}");
    // Untraced: completions where the kernel ran no program, a few in a million here.
    assert!(
        untraced <= after_ready / 100.0,
        "{untraced} untraced of {after_ready} completions\n{text}"
    );
    // Every read completed after the daemon was ready is counted (or is one of the above),
    // and none it could not have seen. The untraced count is a lower bound: it takes off
    // the requests in flight when the device was first traced (at most fio's iodepth), so up
    // to that many of the kernel's untraced completions (1-8 in 100,000 here, REPORT.md) can
    // hide behind it: CI once counted 591,823 (+16 untracked, +0 untraced) of 591,841.
    assert!(
        requests + untracked + untraced + f64::from(BACKGROUND_IODEPTH) >= after_ready,
        "counted {requests} (+{untracked} untracked, +{untraced} untraced) of the {after_ready} \
         reads completed after the exporter was ready\n{text}"
    );
    assert!(
        requests <= end - before,
        "counted {requests}, more than the {} reads since before it started",
        end - before
    );
    let status = daemon.terminate();
    assert!(status.success(), "exit {status}");
}
