//! `cargo xtask fuzz [--seconds N] [TARGET...]`: each fuzz target of fuzz/ (cargo-fuzz,
//! libFuzzer, nightly) run for N seconds from the committed seeds, with what it found.
//!
//! New inputs go to a scratch corpus under target/fuzz-corpus/TARGET (read first, so runs
//! build on each other), never into fuzz/corpus: the committed seeds stay small real files.
//! A crash is left by libFuzzer in fuzz/artifacts/TARGET/; once fixed, copy it to
//! fuzz/regressions/TARGET/, whose files the stable test iosched-trace/tests/fuzz_corpus.rs
//! replays. Owns: driving cargo-fuzz. Must not: change the committed corpus.

use std::{fs, process::Command};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::cmd;

/// The targets in fuzz/fuzz_targets (the same names as `iosched_trace::untrusted::TARGETS`).
const TARGETS: &[&str] = &[
    "recording",
    "blktrace",
    "device_profile",
    "host_profile",
    "sched_log",
];

/// cargo-fuzz release that builds with the toolchains of TOOLCHAIN.md.
const CARGO_FUZZ_VERSION: &str = "0.13.2";

#[derive(Args)]
pub struct FuzzArgs {
    /// Seconds per target.
    #[arg(long, default_value_t = 60)]
    seconds: u32,
    /// Targets to run (all without).
    targets: Vec<String>,
}

pub fn run(args: &FuzzArgs) -> anyhow::Result<()> {
    let targets: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in &args.targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("no fuzz target {t} (there are: {})", TARGETS.join(", "));
            }
        }
        args.targets.iter().map(String::as_str).collect()
    };
    if !cmd::succeeds(Command::new("cargo").args(["fuzz", "--version"])) {
        cmd::run(Command::new("cargo").args([
            "install",
            "--locked",
            "cargo-fuzz",
            "--version",
            CARGO_FUZZ_VERSION,
        ]))?;
    }
    let root = cmd::workspace_root();
    let fuzz = root.join("fuzz");
    let mut failed = Vec::new();
    for target in targets {
        let scratch = cmd::target_dir()?.join("fuzz-corpus").join(target);
        fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let mut c = Command::new("cargo");
        c.current_dir(&fuzz)
            // The fuzz build must not build the eBPF object (build.rs writes a stub).
            .env("AYA_BUILD_SKIP", "1")
            .args(["+nightly", "fuzz", "run", "-O", target])
            .arg(&scratch)
            .arg(fuzz.join("corpus").join(target))
            .args([
                "--",
                &format!("-max_total_time={}", args.seconds),
                "-rss_limit_mb=2048",
                "-timeout=10",
                "-print_final_stats=1",
            ]);
        println!("+ {}", cmd::display(&c));
        let out = c.output().context("running cargo fuzz")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stat = |key: &str| {
            stderr
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().strip_prefix(':'))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| "?".into())
        };
        let corpus = fs::read_dir(&scratch).map(|d| d.count()).unwrap_or(0);
        println!(
            "fuzz {target}: {} executions in {} s, {} new inputs kept, peak {} MB: {}",
            stat("stat::number_of_executed_units"),
            args.seconds,
            corpus,
            stat("stat::peak_rss_mb"),
            if out.status.success() {
                "no crash"
            } else {
                "FAILED"
            }
        );
        if !out.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(40).collect();
            for l in tail.iter().rev() {
                println!("  {l}");
            }
            failed.push(target);
        }
    }
    if !failed.is_empty() {
        bail!(
            "fuzz: {} failed (inputs in fuzz/artifacts/)",
            failed.join(", ")
        );
    }
    Ok(())
}
