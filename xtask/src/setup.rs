//! `cargo xtask setup`: makes this machine able to build, test and demo iosched-trace.
//!
//! Idempotent and fast when everything is present: each step checks first and acts only when
//! something is missing, then prints one line `setup: <thing> ok|installed|mounted|...`.
//! The facts behind each step (versions, the bpf-linker recipe) are in
//! /work/shared/TOOLCHAIN.md.

use std::{
    env, fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};
use iosched_testbed::mounts::{self, Mount};

use crate::cmd;

/// The nightly toolchain that builds the eBPF crate (aya-build runs `rustup run nightly`).
const NIGHTLY: &str = "nightly";

/// The bpf-linker release verified with nightly's LLVM 22 (see TOOLCHAIN.md).
const BPF_LINKER_VERSION: &str = "0.13.0";
/// The LLVM major version bpf-linker is built against; must match nightly's libLLVM.
const LLVM_MAJOR: &str = "22";

/// Debian packages we want, each with the commands (or, starting with `/`, the paths) that
/// prove it is installed.
const PACKAGES: &[(&str, &[&str])] = &[
    ("fio", &["fio"]),
    ("blktrace", &["blkparse", "btt"]),
    ("bpftool", &["bpftool"]),
    ("tmux", &["tmux"]),
    // The browser test of `report --html` (tests/tests/html.rs) runs it headless.
    ("chromium", &["chromium"]),
    // Text in its screenshots (a recommendation of chromium's, which --no-install-recommends
    // leaves out).
    (
        "fonts-liberation",
        &["/usr/share/fonts/truetype/liberation"],
    ),
    // `cargo xtask kernels` (the kernel matrix): qemu boots Debian's kernels under TCG;
    // busybox is the guest's shell and tools; depmod (kmod) orders the kernels' modules; xz
    // unpacks 6.12's .ko.xz; mkfs.ext4 makes the guest's /dev/shm on a ramdisk; `apt-get
    // download` and `dpkg -x` (always there on Debian) fetch and unpack the kernels.
    ("qemu-system-x86", &["qemu-system-x86_64"]),
    ("busybox-static", &["/bin/busybox"]),
    ("kmod", &["depmod"]),
    ("xz-utils", &["xz"]),
    ("e2fsprogs", &["mkfs.ext4"]),
    // `promtool check metrics` reads the exporter's classic exposition
    // (iosched-trace/tests/exposition.rs). Debian ships it only with the server; installing
    // enables the server's unit, which starts only where systemd runs.
    ("prometheus", &["promtool"]),
];

/// Whether `what` (a command, or a path when it starts with `/`) is there.
fn present(what: &str) -> bool {
    if what.starts_with('/') {
        std::path::Path::new(what).exists()
    } else {
        cmd::find_program(what).is_some()
    }
}

/// Pseudo file systems the tracer and the tests need: (type, mount point).
const MOUNTS: &[(&str, &str)] = &[
    ("tracefs", "/sys/kernel/tracing"),
    ("debugfs", "/sys/kernel/debug"),
];

pub fn run() -> anyhow::Result<()> {
    rust_src().context("setup: rust-src for the nightly toolchain")?;
    bpf_linker().context("setup: bpf-linker")?;
    musl_target().context("setup: the musl target (cargo xtask dist)")?;
    packages().context("setup: Debian packages")?;
    python_packages().context("setup: Python packages")?;
    for &(fstype, target) in MOUNTS {
        mount(fstype, target).with_context(|| format!("setup: mounting {fstype} at {target}"))?;
    }
    Ok(())
}

fn rust_src() -> anyhow::Result<()> {
    let installed = cmd::output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        NIGHTLY,
        "--installed",
    ]))
    .context("is the nightly toolchain installed? (`rustup toolchain list`)")?;
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        println!("setup: rust-src ok");
        return Ok(());
    }
    cmd::run(Command::new("rustup").args([
        "component",
        "add",
        "rust-src",
        "--toolchain",
        NIGHTLY,
    ]))?;
    println!("setup: rust-src installed");
    Ok(())
}

/// The target of `cargo xtask dist`'s static binary.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

fn musl_target() -> anyhow::Result<()> {
    let installed = cmd::output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if installed.lines().any(|l| l.trim() == MUSL_TARGET) {
        println!("setup: {MUSL_TARGET} ok");
        return Ok(());
    }
    cmd::run(Command::new("rustup").args(["target", "add", MUSL_TARGET]))?;
    println!("setup: {MUSL_TARGET} installed");
    Ok(())
}

fn bpf_linker_works() -> bool {
    // bpf-linker links against nightly's libLLVM, which only `rustup run nightly` puts on the
    // library path; a nightly update breaks it, and this check then fails too.
    cmd::succeeds(Command::new("rustup").args(["run", NIGHTLY, "bpf-linker", "--version"]))
}

fn bpf_linker() -> anyhow::Result<()> {
    if bpf_linker_works() {
        println!("setup: bpf-linker ok");
        return Ok(());
    }
    // Recipe from TOOLCHAIN.md: the default build wants a system libLLVM 23 we do not have;
    // build against the libLLVM that ships with nightly instead. bpf-linker records an rpath to
    // $PREFIX/lib, so PREFIX must be a stable directory, not a temporary one.
    let home = env::var_os("HOME").context("HOME is not set")?;
    let prefix = Path::new(&home).join(".cache/iosched-trace/llvm");
    let lib_dir = prefix.join("lib");
    fs::create_dir_all(&lib_dir).with_context(|| format!("creating {}", lib_dir.display()))?;

    let libllvm = nightly_libllvm()?;
    let link = lib_dir.join("libLLVM.so");
    // `ln -sf`: replace a link left behind by an earlier nightly.
    match fs::remove_file(&link) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing old {}", link.display())),
    }
    symlink(&libllvm, &link)
        .with_context(|| format!("linking {} -> {}", link.display(), libllvm.display()))?;

    eprintln!(
        "setup: building bpf-linker {BPF_LINKER_VERSION} against {} (about a minute)",
        libllvm.display()
    );
    cmd::run(
        Command::new("cargo")
            .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
            // A broken bpf-linker (e.g. after a nightly update) is still "installed" as far as
            // cargo knows; without --force, cargo would keep it and succeed.
            .arg("--force")
            .args(["--no-default-features", "--features"])
            .arg(format!("llvm-{LLVM_MAJOR}"))
            .env("LLVM_PREFIX", &prefix)
            // Not the workspace: its .cargo/config.toml must not leak into this build.
            .current_dir(&prefix),
    )?;
    if !bpf_linker_works() {
        bail!(
            "bpf-linker was installed but `rustup run {NIGHTLY} bpf-linker --version` still fails"
        );
    }
    println!("setup: bpf-linker installed");
    Ok(())
}

/// The libLLVM shared library of the nightly toolchain, e.g.
/// `~/.rustup/toolchains/nightly-x86_64-unknown-linux-gnu/lib/libLLVM.so.22.1-rust-1.97.0-nightly`.
fn nightly_libllvm() -> anyhow::Result<PathBuf> {
    // Ask rustc for its sysroot instead of globbing ~/.rustup/toolchains/nightly-*: this
    // honours RUSTUP_HOME and picks the one toolchain `rustup run nightly` would use.
    let sysroot =
        cmd::output(Command::new("rustup").args(["run", NIGHTLY, "rustc", "--print", "sysroot"]))?;
    let lib = Path::new(sysroot.trim()).join("lib");
    let names: Vec<String> = fs::read_dir(&lib)
        .with_context(|| format!("listing {}", lib.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let name = pick_libllvm(&names).with_context(|| format!("in {}", lib.display()))?;
    Ok(lib.join(name))
}

/// Chooses `libLLVM.so.<LLVM_MAJOR>.*` among a directory's file names.
fn pick_libllvm(names: &[String]) -> anyhow::Result<&str> {
    let mut found: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with("libLLVM.so."))
        .collect();
    found.sort_unstable();
    let Some(&first) = found.first() else {
        bail!("no libLLVM.so.* (is the nightly toolchain complete?)");
    };
    if found.len() > 1 {
        bail!("several libLLVM.so.* ({}); expected one", found.join(", "));
    }
    let version = first.trim_start_matches("libLLVM.so.");
    if version.split(['.', '-']).next() != Some(LLVM_MAJOR) {
        bail!(
            "{first} is not LLVM {LLVM_MAJOR}: bpf-linker is built with feature llvm-{LLVM_MAJOR}; \
             update LLVM_MAJOR/BPF_LINKER_VERSION in xtask/src/setup.rs after checking which \
             bpf-linker release supports this LLVM"
        );
    }
    Ok(first)
}

fn packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(_, cmds)| cmds.iter().any(|c| !present(c)))
        .map(|&(pkg, _)| pkg)
        .collect();
    for &(pkg, _) in PACKAGES.iter().filter(|(p, _)| !missing.contains(p)) {
        println!("setup: {pkg} ok");
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !cmd::is_root() {
        for pkg in &missing {
            println!("setup: {pkg} MISSING (not root, not installing: apt-get install {pkg})");
        }
        return Ok(());
    }
    let apt = |args: &[&str]| {
        let mut c = Command::new("apt-get");
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    cmd::run(&mut apt(&["update"]))?;
    cmd::run(apt(&["install", "-y", "--no-install-recommends"]).args(&missing))?;
    for &(pkg, cmds) in PACKAGES.iter().filter(|(p, _)| missing.contains(p)) {
        if let Some(c) = cmds.iter().find(|c| !present(c)) {
            bail!("installed package {pkg}, but command `{c}` is still not found");
        }
        println!("setup: {pkg} installed");
    }
    Ok(())
}

/// PyPI packages the tests need: (requirement, a Python statement that proves it works).
/// `perfetto` ships Perfetto's trace descriptors, with which tests/perfetto/decode.py reads
/// `convert --to perfetto`'s output independently of our encoder; `duckdb` runs
/// docs/FLEET.md's queries on `convert --to parquet`'s output (tests/tests/fleet.rs);
/// `prometheus-client`'s two text parsers read the exporter's expositions
/// (iosched-trace/tests/exposition.rs). Debian's python3-prometheus-client is older and
/// would go to Debian's python, not necessarily the python3 first on the PATH.
const PYTHON_PACKAGES: &[(&str, &str)] = &[
    (
        "perfetto==0.59.1",
        "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
    ),
    (
        "duckdb==2.0.1",
        "import duckdb; assert duckdb.__version__ == '2.0.1'",
    ),
    (
        "prometheus-client==0.26.0",
        "import importlib.metadata as m, prometheus_client.openmetrics.parser; \
         assert m.version('prometheus-client') == '0.26.0'",
    ),
];

fn python_works(check: &str) -> bool {
    cmd::succeeds(Command::new("python3").args(["-c", check]))
}

fn python_packages() -> anyhow::Result<()> {
    let missing: Vec<(&str, &str)> = PYTHON_PACKAGES
        .iter()
        .copied()
        .filter(|(_, check)| !python_works(check))
        .collect();
    for (pkg, _) in PYTHON_PACKAGES.iter().filter(|p| !missing.contains(p)) {
        println!("setup: python {pkg} ok");
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !cmd::is_root() {
        for (pkg, _) in &missing {
            println!("setup: python {pkg} MISSING (not root, not installing: pip install {pkg})");
        }
        return Ok(());
    }
    if cmd::find_program("python3").is_none()
        || !cmd::succeeds(Command::new("python3").args(["-m", "pip", "--version"]))
    {
        let apt = |args: &[&str]| {
            let mut c = Command::new("apt-get");
            c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        cmd::run(&mut apt(&["update"]))?;
        cmd::run(&mut apt(&[
            "install",
            "-y",
            "--no-install-recommends",
            "python3",
            "python3-pip",
        ]))?;
    }
    let pkgs: Vec<&str> = missing.iter().map(|(p, _)| *p).collect();
    let pip = |extra: &[&str]| {
        let mut c = Command::new("python3");
        c.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
        ])
        .args(extra)
        .args(&pkgs);
        c
    };
    // Debian's own python3 refuses to install outside a virtual environment (PEP 668)
    // unless told to; a pyenv or venv python needs no such flag.
    if cmd::run(&mut pip(&[])).is_err() {
        cmd::run(&mut pip(&["--break-system-packages"]))?;
    }
    for (pkg, check) in &missing {
        if !python_works(check) {
            bail!("installed {pkg}, but `python3 -c '{check}'` still fails");
        }
        println!("setup: python {pkg} installed");
    }
    Ok(())
}

fn mount(fstype: &str, target: &str) -> anyhow::Result<()> {
    let mounts = mounts::mounts().context("reading /proc/self/mountinfo")?;
    if is_mounted(&mounts, fstype, target) {
        println!("setup: {fstype} ok");
        return Ok(());
    }
    if !cmd::is_root() {
        println!("setup: {fstype} NOT MOUNTED at {target} (not root, not mounting)");
        return Ok(());
    }
    cmd::run(Command::new("mount").args(["-t", fstype, fstype, target]))?;
    println!("setup: {fstype} mounted");
    Ok(())
}

/// Whether `fstype` is mounted at `target`.
fn is_mounted(mounts: &[Mount], fstype: &str, target: &str) -> bool {
    mounts
        .iter()
        .any(|m| m.mount_point == target && m.fs_type == fstype)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn picks_the_one_libllvm() {
        let n = names(&[
            "librustc_driver-1.so",
            "libLLVM.so.22.1-rust-1.97.0-nightly",
            "rustlib",
        ]);
        assert_eq!(
            pick_libllvm(&n).unwrap(),
            "libLLVM.so.22.1-rust-1.97.0-nightly"
        );
    }

    #[test]
    fn rejects_missing_ambiguous_or_wrong_llvm() {
        for bad in [
            &["librustc_driver-1.so"][..],
            &[
                "libLLVM.so.22.1-rust-1.97.0-nightly",
                "libLLVM.so.22.1-rust-1.98.0-nightly",
            ],
            &["libLLVM.so.23.1-rust-1.99.0-nightly"],
            &["libLLVM.so.2.1"],
        ] {
            assert!(pick_libllvm(&names(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn finds_mounts_by_type_and_target() {
        let m = &mounts::parse_mountinfo(
            "21 1 0:20 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n\
             31 21 0:12 / /sys/kernel/tracing rw,nosuid shared:12 - tracefs tracefs rw\n",
        );
        assert!(is_mounted(m, "tracefs", "/sys/kernel/tracing"));
        assert!(!is_mounted(m, "debugfs", "/sys/kernel/debug"));
        assert!(!is_mounted(m, "tracefs", "/sys/kernel/debug/tracing"));
    }
}
