//! `cargo xtask test`: setup, then every check the project has (fmt, layout, clippy, unit
//! tests, real-kernel tests, the kernel matrix in qemu), each timed.
//!
//! A failing step does not stop the later ones (one CI run shows every problem); the command
//! fails at the end if any step failed. The real-kernel tests (package iosched-trace-tests)
//! run as root or when `CI` is set; then `IOSCHED_TRACE_REQUIRE_ROOT_TESTS=1` makes a test that
//! cannot load BPF fail instead of skipping.

use std::{
    env,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{cmd, setup};

const REQUIRE_ROOT_TESTS: &str = "IOSCHED_TRACE_REQUIRE_ROOT_TESTS";

pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    setup::run()?;
    println!("test: setup done in {}", secs(started.elapsed()));

    let root = cmd::is_root();
    let ci = env::var_os("CI").is_some_and(|v| !v.is_empty());
    let real_kernel = root || ci;
    let target = cmd::target_dir()?;
    let skip_log = target.join("real-kernel-skips.txt");

    // Linting needs no eBPF object: AYA_BUILD_SKIP=1 makes build.rs write a stub instead of
    // building the eBPF crate a second time, for the dev profile (~40 s on a cold cache).
    // Every userspace crate: the workspace but the eBPF crate, which is linted on its own.
    let mut clippy = cargo(&[
        "clippy",
        "--workspace",
        "--exclude",
        "iosched-trace-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    clippy.env("AYA_BUILD_SKIP", "1");
    // This binary again, as a command like the other steps: `cargo xtask layout`.
    let mut layout = Command::new(env::current_exe().context("finding the xtask binary")?);
    layout.arg("layout");
    let mut steps: Vec<(&str, Command)> = vec![
        ("fmt", cargo(&["fmt", "--all", "--", "--check"])),
        ("layout", layout),
        ("clippy (userspace)", clippy),
        (
            // On its own and with these flags: with the workspace, the eBPF crate's panic
            // handler clashes with std's (duplicate `panic_impl`; see TOOLCHAIN.md).
            "clippy (eBPF)",
            cargo(&[
                "+nightly",
                "clippy",
                "-p",
                "iosched-trace-ebpf",
                "--",
                "-D",
                "warnings",
                "-C",
                "panic=abort",
                "-Zpanic_abort_tests",
            ]),
        ),
        (
            // --release: the real-kernel tests need a release build anyway, and build.rs
            // compiles the eBPF object once per profile, so one profile builds everything once.
            // Measured cold (2 cores): clippy + release unit tests + release real-kernel test
            // build 130 s; with debug unit tests 227 s. The real-kernel package is excluded
            // here: it runs below, serially.
            "unit tests",
            cargo(&[
                "test",
                "--release",
                "--workspace",
                "--exclude",
                "iosched-trace-ebpf",
                "--exclude",
                "iosched-trace-tests",
            ]),
        ),
    ];
    if real_kernel {
        // The real-kernel tests run the `iosched-trace` binary, which `cargo test -p
        // iosched-trace-tests` does not build (it only links the library).
        steps.push((
            "build recorder",
            cargo(&[
                "build",
                "--release",
                "-p",
                "iosched-trace",
                "--bin",
                "iosched-trace",
            ]),
        ));
        // ... nor the emulated devices' daemon, which tests/tests/hdd.rs and flash.rs run.
        steps.push((
            "build iosched-hdd",
            cargo(&[
                "build",
                "--release",
                "-p",
                "iosched-testbed",
                "--bin",
                "iosched-hdd",
            ]),
        ));
        // The static binary and the package, for tests/tests/dist.rs (which, under CI, fail
        // without them): this binary again, `cargo xtask dist`.
        let mut dist = Command::new(env::current_exe().context("finding the xtask binary")?);
        dist.arg("dist");
        steps.push(("dist", dist));
        // --no-fail-fast: one failing test file must not hide whether the others pass.
        let mut c = cargo(&[
            "test",
            "--release",
            "--no-fail-fast",
            "-p",
            "iosched-trace-tests",
            "--",
            "--test-threads=1",
        ]);
        c.env(REQUIRE_ROOT_TESTS, "1");
        // Where cargo put them: `CARGO_TARGET_DIR` (or a config's build.target-dir) moves the
        // target directory out of the workspace.
        c.env("IOSCHED_TRACE_BIN", target.join("release/iosched-trace"));
        c.env("IOSCHED_HDD_BIN", target.join("release/iosched-hdd"));
        // Tests of a feature this kernel was built without (a scheduler: no bfq here) say
        // so in this file, printed at the end: never a silent pass.
        let _ = std::fs::remove_file(&skip_log);
        c.env("IOSCHED_TRACE_SKIP_LOG", &skip_log);
        let artifacts = crate::dist::artifacts(&target);
        c.env(crate::dist::STATIC_BIN_ENV, &artifacts.static_bin);
        c.env(crate::dist::DEB_ENV, &artifacts.deb);
        steps.push(("real-kernel tests", c));
        // The same kernel-dependent tests inside Debian's 6.1 and 6.12 (docs/KERNELS.md),
        // with dist's static binary as the recorder: what a production host gets, alone (no
        // library copied for it). Measured ~80-130 s per kernel under TCG, the kernels
        // cached after the first run.
        let mut kernels = Command::new(env::current_exe().context("finding the xtask binary")?);
        kernels
            .arg("kernels")
            .arg("--bin")
            .arg(&artifacts.static_bin);
        steps.push(("kernel matrix (qemu)", kernels));
    }

    let mut failed = Vec::new();
    for (name, mut command) in steps {
        println!("test: {name} ...");
        let t = Instant::now();
        let result = cmd::run(&mut command);
        let took = secs(t.elapsed());
        match result {
            Ok(()) => println!("test: {name} ok in {took}"),
            Err(e) => {
                println!("test: {name} FAILED in {took}: {e:#}");
                failed.push(name);
            }
        }
    }

    println!("test: total {}", secs(started.elapsed()));
    if real_kernel {
        let skipped = std::fs::read_to_string(&skip_log).unwrap_or_default();
        let skipped: Vec<&str> = skipped.lines().filter(|l| !l.is_empty()).collect();
        if skipped.is_empty() {
            println!("test: no real-kernel test skipped for want of a kernel feature");
        } else {
            println!(
                "test: {} real-kernel test(s) could not run on this kernel (it lacks what they \
                 test; the kernel matrix runs the scheduler tests in its guests):",
                skipped.len()
            );
            for line in skipped {
                println!("test:   {line}");
            }
        }
    }
    if !real_kernel {
        println!();
        println!(
            "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
        );
        println!("!!! real-kernel tests SKIPPED: not root. Only unit tests, fmt and clippy ran.");
        println!("!!! Run `cargo xtask test` as root to run them (or set CI=1 to make them fail).");
        println!(
            "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
        );
    }
    if !failed.is_empty() {
        bail!("{} step(s) failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}

fn cargo(args: &[&str]) -> Command {
    let mut c = cmd::cargo();
    c.args(args);
    c
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
