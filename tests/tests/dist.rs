//! What `cargo xtask dist` makes, as a user gets it: the static binary, with nothing else
//! copied, records, dumps and reports a scratch loop device with exact counts; the Debian
//! package installs with `dpkg --root` into an empty root, its man pages open with `man -l`,
//! its bash completion loads and completes. The artifacts' paths come from
//! `IOSCHED_TRACE_STATIC_BIN` and `IOSCHED_TRACE_DEB` (`cargo xtask test` runs `dist` and
//! sets them); without them these tests skip, or fail where real-kernel tests must run
//! (`IOSCHED_TRACE_REQUIRE_ROOT_TESTS`, as in CI). Run as root, serially.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use iosched_trace_tests::{
    REQUIRE_ENV, Recorder, ScratchLoop, dd, real_kernel_available, run, scratch_dir,
};
use serde_json::Value;

/// The artifact named by `var`, or `None` (skip) when it is not set and tests may skip.
fn artifact(var: &str, test: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) => {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{test}: {var}={} does not exist: run `cargo xtask dist`",
                path.display()
            );
            Some(path)
        }
        None if std::env::var_os(REQUIRE_ENV).is_some() => {
            panic!(
                "{test}: {var} is not set, and {REQUIRE_ENV} says this test must run (`cargo xtask test` runs `cargo xtask dist` and sets it)"
            )
        }
        None => {
            eprintln!("SKIPPED {test}: {var} not set (`cargo xtask dist`, then set it)");
            None
        }
    }
}

#[test]
fn static_binary_has_no_dynamic_dependency_and_records_dumps_reports() {
    const TEST: &str = "static_binary_has_no_dynamic_dependency_and_records_dumps_reports";
    if !real_kernel_available(TEST) {
        return;
    }
    let Some(bin) = artifact("IOSCHED_TRACE_STATIC_BIN", TEST) else {
        return;
    };
    let file_says = run(Command::new("file").arg("-b").arg(&bin)).unwrap();
    assert!(
        file_says.contains("statically linked") || file_says.contains("static-pie linked"),
        "{file_says}"
    );
    let readelf = run(Command::new("readelf").args(["-d", "-l", "-W"]).arg(&bin)).unwrap();
    assert!(!readelf.contains("(NEEDED)"), "{readelf}");
    assert!(!readelf.contains("program interpreter"), "{readelf}");
    let version = run(Command::new(&bin).arg("--version")).unwrap();
    assert!(
        version.starts_with(&format!("iosched-trace {} (", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );

    // Copied alone into a directory of its own: nothing beside it to load.
    let dir = scratch_dir("dist-static").unwrap();
    let alone = dir.path().join("iosched-trace");
    fs::copy(&bin, &alone).unwrap();
    const N: u64 = 48;
    let disk = ScratchLoop::new("dist-static", 64, "mq-deadline").unwrap();
    let file = dir.path().join("rec.istrace");
    let mut recorder = Recorder::spawn(
        Recorder::command(&alone, &[disk.name()], &file, ["--no-plugs"]),
        None,
    )
    .unwrap();
    recorder
        .wait_ready(std::time::Duration::from_secs(30), &|| false)
        .unwrap();
    let pid = dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        &format!("count={N}"),
        "seek=10",
        "oflag=direct",
    ])
    .unwrap();
    recorder.stop().unwrap();

    let dump = run(Command::new(&alone).arg("dump").arg("--json").arg(&file)).unwrap();
    let lines: Vec<Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |action: &str| {
        lines
            .iter()
            .filter(|l| {
                l["action"] == action && l["rwbs"].as_str().is_some_and(|r| r.contains('W'))
            })
            .count() as u64
    };
    assert_eq!((of("Q"), of("D"), of("C")), (N, N, N), "dump: {dump}");
    let queued_by_dd = lines
        .iter()
        .filter(|l| l["action"] == "Q" && l["pid"] == pid)
        .count() as u64;
    assert_eq!(queued_by_dd, N);

    let report = run(Command::new(&alone).arg("report").arg("--json").arg(&file)).unwrap();
    let report: Value = serde_json::from_str(&report).unwrap();
    let dd_row = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("dd ({pid}) not in {}", report["processes"]));
    assert_eq!(dd_row["requests"], N);
    assert_eq!(dd_row["bytes"], N * 4096);
    assert_eq!(dd_row["write"]["requests"], N);
}

/// The exporter's systemd unit: listed by `dpkg-deb -c`, installed as the repository has it
/// (its binary the package's), and accepted by `systemd-analyze verify` without a warning
/// (pointed at the installed binary, since the root is not `/`).
fn exporter_unit_is_packaged(deb: &Path, root: &Path, scratch: &Path) {
    const UNIT: &str = "usr/lib/systemd/system/iosched-trace-exporter.service";
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(deb)).unwrap();
    assert!(
        listing
            .lines()
            .any(|l| l.ends_with(&format!("./{UNIT}")) && l.starts_with("-rw-r--r--")),
        "{listing}"
    );
    let installed = fs::read_to_string(root.join(UNIT)).unwrap();
    let repo =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/iosched-trace-exporter.service");
    assert_eq!(installed, fs::read_to_string(repo).unwrap());
    assert!(installed.contains("\nExecStart=/usr/bin/iosched-trace exporter\n"));
    let bin = root.join("usr/bin/iosched-trace");
    let help = run(Command::new(&bin).args(["exporter", "--help"])).unwrap();
    assert!(help.contains("--web.listen-address"), "{help}");
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
    {
        let unit = scratch.join("iosched-trace-exporter.service");
        let text = installed.replace(
            "ExecStart=/usr/bin/iosched-trace",
            &format!("ExecStart={}", bin.display()),
        );
        fs::write(&unit, text).unwrap();
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success() && said.trim().is_empty(), "{said}");
    } else {
        eprintln!("NOTE: systemd-analyze not installed: the exporter's unit is not verified");
    }
}

/// The subcommands `--help` lists (but `help`): one man page each, beside the top one.
fn subcommands(bin: &Path) -> BTreeSet<String> {
    let help = run(Command::new(bin).arg("--help")).unwrap();
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn deb_installs_in_an_empty_root_with_man_pages_and_completions() {
    const TEST: &str = "deb_installs_in_an_empty_root_with_man_pages_and_completions";
    if !real_kernel_available(TEST) {
        return;
    }
    let Some(deb) = artifact("IOSCHED_TRACE_DEB", TEST) else {
        return;
    };
    let dir = scratch_dir("dist-deb").unwrap();
    let root = dir.path().join("root");
    // The least dpkg wants of a root it installs into: its database, empty.
    for d in ["var/lib/dpkg/updates", "var/lib/dpkg/info", "var/log"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    fs::write(root.join("var/lib/dpkg/available"), "").unwrap();
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", dir.path().join("dpkg.log").display()))
        .args(["--force-script-chrootless", "-i"])
        .arg(&deb))
    .unwrap();
    let status = run(Command::new("dpkg-query")
        .arg(format!("--root={}", root.display()))
        .args(["-W", "-f=${Status} ${Version}", "iosched-trace"]))
    .unwrap();
    assert_eq!(
        status,
        format!("install ok installed {}", env!("CARGO_PKG_VERSION"))
    );

    let bin = root.join("usr/bin/iosched-trace");
    let version = run(Command::new(&bin).arg("--version")).unwrap();
    assert!(version.starts_with("iosched-trace "), "{version}");

    // A man page per subcommand, each opening with its NAME.
    let man1 = root.join("usr/share/man/man1");
    let pages: BTreeSet<String> = fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut want: BTreeSet<String> = subcommands(&bin)
        .iter()
        .map(|c| format!("iosched-trace-{c}.1.gz"))
        .collect();
    want.insert("iosched-trace.1.gz".to_string());
    assert!(want.len() >= 10, "{want:?}");
    assert_eq!(pages, want);
    for page in &pages {
        let text = run(Command::new("man")
            .args(["-P", "cat", "-l"])
            .arg(man1.join(page))
            .env("MANWIDTH", "100"))
        .unwrap();
        let name = page.trim_end_matches(".1.gz");
        assert!(
            text.contains("NAME") && text.contains(name),
            "{page}: {text}"
        );
    }
    let record_page = run(Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(man1.join("iosched-trace-record.1.gz")))
    .unwrap();
    assert!(record_page.contains("--sched-log"), "{record_page}");

    // bash: the completion loads and completes a subcommand and an option.
    let bash = root.join("usr/share/bash-completion/completions/iosched-trace");
    let loaded = run(Command::new("bash").arg("-c").arg(format!(
        "source {}; complete -p iosched-trace",
        bash.display()
    )))
    .unwrap();
    assert!(loaded.contains("iosched-trace"), "{loaded}");
    let complete = |words: &str| {
        run(Command::new("bash").arg("-c").arg(format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); \
             COMP_LINE=\"{words}\"; COMP_POINT=${{#COMP_LINE}}; \
             f=$(complete -p iosched-trace | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p'); \
             $f iosched-trace \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            bash.display()
        )))
        .unwrap()
    };
    let subs = complete("iosched-trace rec");
    assert_eq!(subs.trim(), "record", "{subs}");
    let opts = complete("iosched-trace record --sched");
    assert_eq!(opts.trim(), "--sched-log", "{opts}");
    // The hidden commands (benchmarks' helpers) and flags are not offered.
    let hidden = ["synth", "model-bench", "--discard-events"];
    let all = complete("iosched-trace ''");
    assert!(all.lines().any(|w| w == "report"), "{all}");
    assert!(
        !hidden.iter().any(|h| all.lines().any(|w| w == *h)),
        "{all}"
    );
    let record = complete("iosched-trace record --");
    assert!(!record.lines().any(|w| w == "--discard-events"), "{record}");
    for (path, shell) in [
        ("usr/share/zsh/vendor-completions/_iosched-trace", "zsh"),
        (
            "usr/share/fish/vendor_completions.d/iosched-trace.fish",
            "fish",
        ),
    ] {
        let text = fs::read_to_string(root.join(path)).unwrap();
        assert!(
            text.contains("iosched-trace") && text.contains("record"),
            "{path}"
        );
        for h in hidden {
            assert!(!text.contains(h), "{path} offers the hidden {h}");
        }
        // Syntax-checked where the shell is installed.
        if Command::new(shell).arg("--version").output().is_ok() {
            run(Command::new(shell).arg("-n").arg(root.join(path))).unwrap();
        }
    }
    exporter_unit_is_packaged(&deb, &root, dir.path());
    for doc in [
        "README.md",
        "copyright",
        "docs/FORMAT.md",
        "docs/EXPORTER.md",
        "grafana/iosched-trace.json",
    ] {
        assert!(
            root.join("usr/share/doc/iosched-trace").join(doc).is_file(),
            "{doc}"
        );
    }
    // The package removes cleanly, leaving its files nowhere.
    run(Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", dir.path().join("dpkg.log").display()))
        .args(["--force-script-chrootless", "-r", "iosched-trace"]))
    .unwrap();
    assert!(!bin.exists());
}
