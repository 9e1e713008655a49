//! Real kernel: `iosched-trace check` on this host, each of its lines against what the host
//! says by other means (uname, sysfs, tracefs's event directories) and against what `record`
//! then does: the optional tracepoints `check` says are missing are exactly those `record -v`
//! notes as not attached, and it attaches as many programs as `check` found usable among
//! those it wants (the trial load attaches every usable one). Run as
//! root, serially (`cargo xtask test`).

use std::{
    collections::BTreeSet,
    fs,
    path::Path,
    process::{Command, Stdio},
};

use iosched_core::record::RecordingReader;
use iosched_trace_tests::{
    ScratchLoop, binary, dd, first_scheduler, real_kernel_available, record, run, scratch_dir,
};
use serde_json::Value;

fn check_json() -> Value {
    let out = Command::new(binary())
        .args(["check", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(out.status.success(), "check failed: {doc:#}");
    doc
}

/// The tracefs event directory of a tracepoint (its system is the part before the first
/// `_`, but for the block layer's).
fn tracefs_event_dir(name: &str) -> std::path::PathBuf {
    let system = match name.split('_').next().unwrap() {
        "block" => "block",
        "kyber" => "kyber",
        "wbt" => "wbt",
        "sched" => "sched",
        "task" => "task",
        other => panic!("unknown tracepoint system {other}"),
    };
    Path::new("/sys/kernel/tracing/events")
        .join(system)
        .join(name)
}

#[test]
fn check_says_what_this_host_is_and_record_agrees() {
    if !real_kernel_available("check_says_what_this_host_is_and_record_agrees") {
        return;
    }
    // bfq where the kernel has it (a module to load, on Debian's), else mq-deadline.
    let sched = first_scheduler(&["bfq", "mq-deadline"]);
    let disk = ScratchLoop::new("check", 64, sched).unwrap();
    let doc = check_json();
    assert_eq!(doc["ok"], true, "{doc:#}");
    assert_eq!(doc["problems"], serde_json::json!([]));

    // Kernel, BTF, privileges: as uname and sysfs say.
    let uname = run(Command::new("uname").arg("-r")).unwrap();
    assert_eq!(doc["kernel_release"], uname.trim());
    let vmlinux = fs::metadata("/sys/kernel/btf/vmlinux").unwrap();
    assert_eq!(doc["btf"]["vmlinux"], true);
    assert_eq!(doc["btf"]["vmlinux_bytes"], vmlinux.len());
    let mut modules: Vec<String> = fs::read_dir("/sys/kernel/btf")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "vmlinux")
        .collect();
    modules.sort();
    assert_eq!(doc["btf"]["modules"], serde_json::json!(modules));
    assert_eq!(doc["capabilities"]["uid"], 0);
    assert_eq!(doc["capabilities"]["missing"], serde_json::json!([]));
    match fs::read_to_string("/sys/kernel/security/lockdown") {
        Ok(text) => assert!(
            text.contains(&format!("[{}]", doc["lockdown"]["mode"].as_str().unwrap())),
            "{text} against {}",
            doc["lockdown"]
        ),
        // No lockdown file: either securityfs is not mounted (the kernel matrix's guests do
        // not mount it) or the kernel has no lockdown LSM; check must say which.
        Err(_) => {
            assert_eq!(doc["lockdown"]["mode"], Value::Null);
            let mounted = fs::read_to_string("/proc/self/mounts")
                .unwrap()
                .lines()
                .any(|l| l.split_whitespace().nth(2) == Some("securityfs"));
            let source = doc["lockdown"]["source"].as_str().unwrap();
            assert_eq!(
                source.starts_with("securityfs is not mounted"),
                !mounted,
                "{source}"
            );
        }
    }

    // Each tracepoint check calls present is one tracefs has, and the other way round.
    let tracepoints = doc["tracepoints"].as_array().unwrap();
    assert!(tracepoints.len() >= 19, "{tracepoints:?}");
    let mut missing = BTreeSet::new();
    let mut usable = BTreeSet::new();
    for t in tracepoints {
        let name = t["name"].as_str().unwrap();
        let present = t["missing"].is_null();
        if name != "sched_waking" {
            assert_eq!(
                tracefs_event_dir(name).is_dir(),
                present,
                "{name}: check says {t}"
            );
        }
        if present {
            usable.insert(name.to_string());
        } else {
            assert_eq!(
                t["required"], false,
                "a required tracepoint is missing: {t}"
            );
            missing.insert(name.to_string());
        }
    }
    // The trial load attached every usable one and skipped every missing one.
    let load = &doc["load"];
    assert_eq!(load["tried"], true);
    let attached: BTreeSet<String> = load["attached"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    assert_eq!(attached, usable);
    let skipped: BTreeSet<String> = load["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(skipped, missing);

    // The scratch disk: request-based, on its scheduler; the schedulers check calls registered are
    // those its queue offers.
    let device = doc["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == disk.name())
        .unwrap_or_else(|| panic!("{} not in {}", disk.name(), doc["devices"]));
    assert_eq!(device["request_based"], true);
    assert_eq!(device["scheduler"], sched);
    let (major, minor) = disk.dev_numbers().unwrap();
    assert_eq!(device["dev"], format!("{major}:{minor}"));
    let offered = fs::read_to_string(disk.queue_path("scheduler")).unwrap();
    let offered: BTreeSet<&str> = offered
        .split_whitespace()
        .map(|w| w.trim_matches(['[', ']']))
        .filter(|w| *w != "none")
        .collect();
    let registered: BTreeSet<&str> = doc["schedulers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["registered"] == true)
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(registered, offered);
    // How each scheduler is present, against /proc/modules and the kernel's module lists
    // (on the host all three are built in; in Debian's 6.1 guest mq-deadline is built in,
    // bfq a loaded module and kyber a module not loaded yet).
    let release = uname.trim();
    let modules_file = |name: &str| {
        fs::read_to_string(format!("/lib/modules/{release}/{name}")).unwrap_or_default()
    };
    let (builtin, dep) = (modules_file("modules.builtin"), modules_file("modules.dep"));
    let loaded = fs::read_to_string("/proc/modules").ok();
    let mut not_loaded = Vec::new();
    for s in doc["schedulers"].as_array().unwrap() {
        let (name, module) = (s["name"].as_str().unwrap(), s["module"].as_str().unwrap());
        let file = format!("kernel/block/{}.ko", module.replace('_', "-"));
        let listed = |text: &str| text.lines().any(|l| l.starts_with(&file));
        let is_loaded = loaded
            .as_deref()
            .map(|t| t.lines().any(|l| l.split(' ').next() == Some(module)));
        let expected = if listed(&builtin) || (is_loaded.is_none() && s["registered"] == true) {
            "built-in"
        } else if is_loaded == Some(true) {
            "module-loaded"
        } else if listed(&dep) {
            "module-not-loaded"
        } else if s["registered"] == true {
            "registered"
        } else {
            "absent"
        };
        assert_eq!(s["presence"], expected, "{s} ({file})");
        if expected == "module-not-loaded" {
            not_loaded.push((name, module));
        }
    }

    // A bio-based disk (zram here) is one sysfs gives no `mq` directory.
    for d in doc["devices"].as_array().unwrap() {
        let mq = Path::new("/sys/block")
            .join(d["name"].as_str().unwrap())
            .join("mq");
        assert_eq!(d["request_based"], mq.is_dir(), "{d}");
    }

    // record -v with every optional program asked for: the programs it leaves out are the
    // ones check found missing, but for those this recording does not want: bio completions
    // (a request-based disk) and block_plug (plugs counted, not sent as events).
    let unwanted: BTreeSet<String> = tracepoints
        .iter()
        .filter(|t| {
            matches!(
                t["when"].as_str(),
                Some("bio-based device" | "--plug-events")
            )
        })
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        unwanted.contains("block_plug") && unwanted.contains("block_bio_complete"),
        "{unwanted:?}"
    );
    let out = scratch_dir("check-rec").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(
        &[disk.name()],
        &file,
        &["-v", "--extra-events", "--wakeups"],
    )
    .unwrap();
    dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        "count=16",
        "oflag=direct",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let said = recorder.said();
    let not_attached: std::collections::BTreeMap<String, String> = said
        .iter()
        .filter_map(|l| l.strip_prefix("note: optional program "))
        .filter_map(|l| l.split_once(" not attached: "))
        .map(|(name, why)| (name.to_string(), why.to_string()))
        .collect();
    let expected_missing: BTreeSet<String> = missing.difference(&unwanted).cloned().collect();
    assert_eq!(
        not_attached.keys().cloned().collect::<BTreeSet<_>>(),
        expected_missing,
        "record said: {said:#?}"
    );
    // ... for the reason check gave, word for word.
    for t in tracepoints.iter().filter(|t| !t["missing"].is_null()) {
        let name = t["name"].as_str().unwrap();
        if let Some(why) = not_attached.get(name) {
            assert_eq!(t["missing"], why.as_str(), "{name}");
        }
    }
    // A scheduler module not loaded yet: its tracepoints are the ones check and record both
    // say are missing because of it, naming the module.
    for (name, module) in &not_loaded {
        let theirs: Vec<&Value> = tracepoints
            .iter()
            .filter(|t| t["name"].as_str().unwrap().starts_with(&format!("{name}_")))
            .collect();
        if theirs.is_empty() {
            continue;
        }
        let message = format!("{name} is a module in this kernel ({module}) and not loaded yet");
        for t in theirs {
            let tp = t["name"].as_str().unwrap();
            assert!(
                t["missing"].as_str().is_some_and(|m| m.contains(&message)),
                "check on {tp}: {t}"
            );
            assert!(
                not_attached.get(tp).is_some_and(|m| m.contains(&message)),
                "record -v on {tp}: {said:#?}"
            );
        }
    }
    let ready = said
        .iter()
        .find_map(|l| l.strip_prefix("recording: ready ("))
        .unwrap_or_else(|| panic!("no ready line in {said:#?}"));
    let count: usize = ready.split_whitespace().next().unwrap().parse().unwrap();
    let wanted_usable = usable.difference(&unwanted).count();
    assert_eq!(count, wanted_usable, "{ready}");

    // sched-log: where check says it works, record --sched-log on the bfq disk gets BFQ's
    // messages (a kernel without bfq has no scheduler that logs: its test is in model.rs).
    if doc["sched_log"]["works"] == true && sched == "bfq" {
        let file = out.path().join("log.istrace");
        let mut recorder = record(&[disk.name()], &file, &["--sched-log"]).unwrap();
        dd(&[
            "if=/dev/zero",
            &format!("of={}", disk.dev().display()),
            "bs=4096",
            "count=64",
            "oflag=direct",
        ])
        .unwrap();
        recorder.stop().unwrap();
        let mut reader = RecordingReader::open(&file).unwrap();
        while let Some(ev) = reader.next_event() {
            ev.unwrap();
        }
        assert!(
            !reader.notes().is_empty(),
            "check said --sched-log works, but no BFQ message was recorded"
        );
    }
}

/// The text: one line per fact, each a key and its words, the verdict last; exit 0.
#[test]
fn check_text_is_one_line_per_fact() {
    if !real_kernel_available("check_text_is_one_line_per_fact") {
        return;
    }
    let doc = check_json();
    let text = run(Command::new(binary()).arg("check")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let count = |key: &str| {
        lines
            .iter()
            .filter(|l| l.split("  ").next() == Some(key))
            .count()
    };
    assert_eq!(count("kernel"), 1, "{text}");
    assert_eq!(
        count("tracepoint"),
        doc["tracepoints"].as_array().unwrap().len()
    );
    assert_eq!(count("device"), doc["devices"].as_array().unwrap().len());
    assert_eq!(count("scheduler"), 3);
    assert_eq!(lines.last(), Some(&"verdict      recording will work"));
    // Fixed facts in words: the kernel line is uname's.
    let uname = run(Command::new("uname").arg("-r")).unwrap();
    assert_eq!(lines[0], format!("kernel       {}", uname.trim()));
}
