//! `report --html` in a real browser (Debian's `chromium`, headless): the page of a trace
//! with three processes and three known idling intervals loads without an error, draws
//! every plot, has one timeline lane per process and marks each idling interval with the
//! process idled for and those that waited; screenshots at two window sizes are kept in
//! target/test-artifacts/. Needs no root; in CI (`CI` set) a missing chromium fails.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use iosched_core::{
    event::Op,
    record::{DeviceInfo, Header, RecordingWriter, Stats},
    timeline::sim::{DEV, idling_rounds},
};
use iosched_trace_tests::{binary, run, scratch_dir};

/// Three rounds of: p1 reads for 1 ms, then the device sits idle 5 ms while p2's and p3's
/// reads wait (as an idling scheduler would hold them), then serves them.
fn write_idling_recording(path: &Path) {
    let events = idling_rounds(3, Op::Write);
    let device = DeviceInfo {
        name: "loop0".into(),
        dev: DEV,
        scheduler: Some("bfq".into()),
        rotational: Some(true),
        request_based: true,
        ..Default::default()
    };
    let header = Header::for_this_host(vec![device], vec!["html-test".into()]);
    let file = std::fs::File::create(path).unwrap();
    let mut w = RecordingWriter::new(std::io::BufWriter::new(file), &header).unwrap();
    for ev in &events {
        w.push(ev).unwrap();
    }
    let footer = w.footer(
        Stats {
            sent: events.len() as u64,
            ..Default::default()
        },
        0,
        "test",
    );
    w.finish(&footer).unwrap();
}

/// `chromium` on PATH; `None` (a skip) outside CI, a failure in CI.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            panic!("chromium is missing (`cargo xtask setup` installs Debian's chromium package)");
        }
        eprintln!("SKIPPED html browser test: no chromium (`cargo xtask setup` installs it)");
    }
    found
}

fn headless(chromium: &Path, size: &str, profile: &Path) -> Command {
    let mut c = Command::new(chromium);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--allow-file-access-from-files",
        &format!("--window-size={size}"),
        &format!("--user-data-dir={}", profile.display()),
    ]);
    c
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let start = tag.find(&key)? + key.len();
    Some(&tag[start..start + tag[start..].find('"')?])
}

#[test]
fn the_html_report_draws_in_a_real_browser() {
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = scratch_dir("html").unwrap();
    let trace = dir.path().join("idling.istrace");
    write_idling_recording(&trace);
    let page = dir.path().join("idling.html");
    run(Command::new(binary())
        .arg("report")
        .arg(&trace)
        .arg("--html")
        .arg(&page))
    .unwrap();
    let url = format!("file://{}", page.display());
    let artifacts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let profile = dir.path().join("chromium-profile");

    // The page as the browser left it after running its script, and what it logged.
    let out = headless(&chromium, "1400,2000", &profile)
        .args(["--enable-logging=stderr", "--v=0", "--dump-dom", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    for line in log.lines().filter(|l| l.contains("CONSOLE")) {
        assert!(
            !line.contains("Uncaught") && !line.contains("rror"),
            "console: {line}"
        );
    }
    let body = &dom[dom.find("<body").expect("no body")..];
    let body = &body[..body.find('>').unwrap()];
    assert_eq!(
        attr(body, "data-ready"),
        Some("1"),
        "script did not finish: {body}"
    );
    assert_eq!(attr(body, "data-errors"), Some("0"), "{body}");
    // 3 time plots, 2 sector plots, 3 stages x (histogram + percentiles).
    assert_eq!(attr(body, "data-plots"), Some("11"), "{body}");
    // One lane per process of the trace, drawn as SVG groups.
    assert_eq!(attr(body, "data-lanes"), Some("3"));
    // The drawn timeline (not the page's script, whose text names the same tags).
    let svg = &dom[dom.find("<svg").expect("no svg drawn")..];
    let svg = &svg[..svg.find("</svg>").unwrap()];
    let lanes: Vec<&str> = svg
        .match_indices("<g class=\"lane\"")
        .map(|(i, _)| attr(&svg[i..i + 40], "data-pid").unwrap())
        .collect();
    assert_eq!(lanes, vec!["1", "2", "3"]);
    // The three idling intervals, each for p1 with p2 and p3 waiting.
    assert_eq!(attr(body, "data-idle-intervals"), Some("3"));
    let idle: Vec<(&str, &str)> = svg
        .match_indices("<rect ")
        .map(|(i, _)| &svg[i..i + svg[i..].find('>').unwrap()])
        .filter(|tag| attr(tag, "class") == Some("idle"))
        .map(|tag| {
            (
                attr(tag, "data-after").unwrap(),
                attr(tag, "data-waiting").unwrap(),
            )
        })
        .collect();
    assert_eq!(idle, vec![("1", "2,3"); 3]);
    assert!(
        svg.contains("idled for p1 (1); waiting: p2 (2), p3 (3)"),
        "no idle tooltip"
    );

    // explain --html: the same page with the findings above, as many as `explain --json` has.
    let explain_page = dir.path().join("explain.html");
    run(Command::new(binary())
        .arg("explain")
        .arg(&trace)
        .arg("--html")
        .arg(&explain_page))
    .unwrap();
    let json: serde_json::Value = serde_json::from_str(
        &run(Command::new(binary())
            .arg("explain")
            .arg(&trace)
            .arg("--json"))
        .unwrap(),
    )
    .unwrap();
    let findings = json["findings"].as_array().unwrap().len();
    let out = headless(&chromium, "1400,2000", &profile)
        .args(["--dump-dom", &format!("file://{}", explain_page.display())])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let body = &dom[dom.find("<body").expect("no body")..];
    let body = &body[..body.find('>').unwrap()];
    assert_eq!(attr(body, "data-ready"), Some("1"), "{body}");
    assert_eq!(attr(body, "data-errors"), Some("0"), "{body}");
    assert_eq!(
        attr(body, "data-findings"),
        Some(findings.to_string().as_str())
    );
    assert_eq!(attr(body, "data-lanes"), Some("3"));

    // explain --html on the modelled dsync/jbd2 collapse under BFQ before 5.3: the first
    // finding cites the device idling after dd's completions, and the page marks each such
    // interval of the recording (as many as report --json lists with dd as the one idled for).
    let dsync = dir.path().join("dsync.istrace");
    run(Command::new(binary())
        .args([
            "synth",
            "--scenario",
            "dsync-journal",
            "--sched",
            "bfq:kernel=5.2",
        ])
        .args(["--ios", "60", "-o"])
        .arg(&dsync))
    .unwrap();
    let report: serde_json::Value = serde_json::from_str(
        &run(Command::new(binary())
            .arg("report")
            .arg(&dsync)
            .args(["--json", "--top", "100000"]))
        .unwrap(),
    )
    .unwrap();
    let after_dd = report["idling"]["top_intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|iv| iv["after_comm"] == "dd")
        .count();
    assert!(after_dd >= 50, "{after_dd} idle intervals after dd");
    let dsync_page = dir.path().join("dsync.html");
    run(Command::new(binary())
        .arg("explain")
        .arg(&dsync)
        .arg("--html")
        .arg(&dsync_page))
    .unwrap();
    let out = headless(&chromium, "1400,2000", &profile)
        .args(["--dump-dom", &format!("file://{}", dsync_page.display())])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let body = &dom[dom.find("<body").expect("no body")..];
    let body = &body[..body.find('>').unwrap()];
    assert_eq!(attr(body, "data-errors"), Some("0"), "{body}");
    assert_eq!(
        attr(body, "data-evidence-marks"),
        Some(after_dd.to_string().as_str()),
        "{body}"
    );
    assert!(
        dom.contains("data-finding=\"1\""),
        "no evidence row for finding 1"
    );

    // replay --html: the recorded run beside two predicted ones.
    let replay_page = dir.path().join("replay.html");
    run(Command::new(binary())
        .arg("replay")
        .arg(&trace)
        .args(["--compare", "none,bfq", "--html"])
        .arg(&replay_page))
    .unwrap();
    let out = headless(&chromium, "1400,2000", &profile)
        .args(["--dump-dom", &format!("file://{}", replay_page.display())])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let body = &dom[dom.find("<body").expect("no body")..];
    let body = &body[..body.find('>').unwrap()];
    assert_eq!(attr(body, "data-ready"), Some("1"), "{body}");
    assert_eq!(attr(body, "data-errors"), Some("0"), "{body}");
    assert_eq!(attr(body, "data-runs"), Some("2"), "{body}");
    // The report's 11 plots and the replay's bars.
    assert_eq!(attr(body, "data-plots"), Some("12"), "{body}");
    // A timeline for the recording and each prediction, each with its 3 processes.
    assert_eq!(attr(body, "data-predicted-lanes"), Some("9"), "{body}");
    assert_eq!(dom.matches("class=\"timeline predicted\"").count(), 3);

    // Screenshots at two window sizes, kept for a person to look at.
    for (size, name) in [
        ("1400,2000", "html-report-wide.png"),
        ("800,1600", "html-report-narrow.png"),
    ] {
        let shot = artifacts.join(name);
        let _ = std::fs::remove_file(&shot);
        let out = headless(&chromium, size, &profile)
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let len = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
        assert!(len > 10_000, "{name}: {len} bytes");
        eprintln!("screenshot: {}", shot.display());
    }
}
