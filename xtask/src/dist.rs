//! `cargo xtask dist`: what a production host gets, under `target/dist/`:
//!
//! - `iosched-trace`: the release binary for x86_64-unknown-linux-musl, statically linked
//!   (the eBPF object is embedded in it), stripped, checked to have no interpreter and no
//!   needed library (`readelf`), its size printed;
//! - `man/`, `completions/`: the man pages (one per subcommand) and bash/zsh/fish
//!   completions, generated from the clap definitions (iosched-trace's `gen_docs` example);
//! - `iosched-trace_VERSION_amd64.deb`: all of it as a Debian package, built here with
//!   `dpkg-deb` (binary in /usr/bin, man pages, completions where bash-completion, zsh and
//!   fish look, the exporter's systemd unit (packaging/, not enabled by installing), the docs
//!   and the Grafana dashboard in /usr/share/doc/iosched-trace).
//!
//! The tests of tests/tests/dist.rs take the binary and the package from the environment
//! ([`STATIC_BIN_ENV`], [`DEB_ENV`]); `cargo xtask test` runs this first and sets them.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};

use crate::{cmd, setup};

pub const STATIC_BIN_ENV: &str = "IOSCHED_TRACE_STATIC_BIN";
pub const DEB_ENV: &str = "IOSCHED_TRACE_DEB";
/// The exporter's unit in the package (tests/tests/dist.rs looks for it there).
pub const UNIT_PATH: &str = "usr/lib/systemd/system/iosched-trace-exporter.service";

/// What `dist` made.
pub struct Artifacts {
    pub static_bin: PathBuf,
    pub deb: PathBuf,
}

/// The artifacts' paths under a target directory (whether or not they exist yet).
pub fn artifacts(target: &Path) -> Artifacts {
    let dist = target.join("dist");
    Artifacts {
        static_bin: dist.join("iosched-trace"),
        deb: dist.join(format!("iosched-trace_{}_amd64.deb", version())),
    }
}

/// The workspace's version, as the package carries it.
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

pub fn run() -> anyhow::Result<Artifacts> {
    setup::run()?;
    let target = cmd::target_dir()?;
    let dist = target.join("dist");
    // Nothing stale survives a failed run for the tests to pick up.
    if dist.exists() {
        fs::remove_dir_all(&dist).with_context(|| format!("removing {}", dist.display()))?;
    }
    fs::create_dir_all(&dist)?;
    let out = artifacts(&target);

    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        "iosched-trace",
        "--bin",
        "iosched-trace",
        "--target",
        setup::MUSL_TARGET,
    ]))?;
    let built = target
        .join(setup::MUSL_TARGET)
        .join("release/iosched-trace");
    fs::copy(&built, &out.static_bin).with_context(|| {
        format!(
            "copying {} to {}",
            built.display(),
            out.static_bin.display()
        )
    })?;
    // Symbols only: the embedded eBPF object is data, its BTF untouched.
    cmd::run(Command::new("strip").arg(&out.static_bin))?;
    check_static(&out.static_bin)?;
    let size = fs::metadata(&out.static_bin)?.len();
    let version = cmd::output(Command::new(&out.static_bin).arg("--version"))?;
    println!(
        "dist: static binary {} ({:.1} MiB, {})",
        out.static_bin.display(),
        size as f64 / (1 << 20) as f64,
        version.trim()
    );

    cmd::run(
        cmd::cargo()
            .args([
                "run",
                "--release",
                "-p",
                "iosched-trace",
                "--example",
                "gen_docs",
                "--",
            ])
            .arg(&dist),
    )?;
    deb(&dist, &out)?;
    println!("dist: package {}", out.deb.display());
    println!(
        "dist: hand the static binary over with --bin {}",
        out.static_bin.display()
    );
    Ok(out)
}

/// Fails unless `bin` is a static executable: `file` says so, and `readelf` finds no
/// program interpreter and no needed library.
fn check_static(bin: &Path) -> anyhow::Result<()> {
    let file = cmd::output(Command::new("file").arg("-b").arg(bin))?;
    ensure!(
        file.contains("statically linked") || file.contains("static-pie linked"),
        "{} is not statically linked: {}",
        bin.display(),
        file.trim()
    );
    let readelf = cmd::output(Command::new("readelf").args(["-d", "-l", "-W"]).arg(bin))?;
    if let Some(bad) = dynamic_dependencies(&readelf) {
        bail!("{} has a dynamic dependency: {bad}", bin.display());
    }
    println!("dist: {}: {}", bin.display(), file.trim());
    Ok(())
}

/// The first line of `readelf -d -l` output that makes a binary depend on something at run
/// time: a program interpreter or a needed shared library.
fn dynamic_dependencies(readelf: &str) -> Option<&str> {
    readelf.lines().map(str::trim).find(|l| {
        l.starts_with("INTERP") || l.contains("(NEEDED)") || l.contains("program interpreter")
    })
}

/// Stages the package tree and builds it with `dpkg-deb`.
fn deb(dist: &Path, out: &Artifacts) -> anyhow::Result<()> {
    let stage = dist.join(format!("iosched-trace_{}_amd64", version()));
    let root = cmd::workspace_root();
    let put = |from: &Path, to: &str, mode: u32| -> anyhow::Result<()> {
        let dest = stage.join(to);
        fs::create_dir_all(dest.parent().expect("a path under the stage"))?;
        fs::copy(from, &dest)
            .with_context(|| format!("copying {} to {}", from.display(), dest.display()))?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    put(&out.static_bin, "usr/bin/iosched-trace", 0o755)?;
    let mut pages: Vec<PathBuf> = fs::read_dir(dist.join("man"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    pages.sort();
    ensure!(!pages.is_empty(), "gen_docs wrote no man pages");
    for page in &pages {
        let name = page.file_name().expect("a file").to_string_lossy();
        put(page, &format!("usr/share/man/man1/{name}"), 0o644)?;
        // Debian policy: man pages compressed, reproducibly (-n: no name or time stamp).
        cmd::run(
            Command::new("gzip")
                .args(["-9", "-n", "-f"])
                .arg(stage.join(format!("usr/share/man/man1/{name}"))),
        )?;
    }
    let completions = dist.join("completions");
    put(
        &completions.join("iosched-trace.bash"),
        "usr/share/bash-completion/completions/iosched-trace",
        0o644,
    )?;
    put(
        &completions.join("_iosched-trace"),
        "usr/share/zsh/vendor-completions/_iosched-trace",
        0o644,
    )?;
    put(
        &completions.join("iosched-trace.fish"),
        "usr/share/fish/vendor_completions.d/iosched-trace.fish",
        0o644,
    )?;
    let doc = "usr/share/doc/iosched-trace";
    put(&root.join("README.md"), &format!("{doc}/README.md"), 0o644)?;
    put(
        &root.join("CHANGELOG.md"),
        &format!("{doc}/CHANGELOG.md"),
        0o644,
    )?;
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for d in &docs {
        let name = d.file_name().expect("a file").to_string_lossy();
        put(d, &format!("{doc}/docs/{name}"), 0o644)?;
    }
    put(
        &root.join("docs/grafana/iosched-trace.json"),
        &format!("{doc}/grafana/iosched-trace.json"),
        0o644,
    )?;
    fs::write(stage.join(doc).join("copyright"), COPYRIGHT)?;
    // Where systemd looks for packaged units both with and without a merged /usr.
    put(
        &root.join("packaging/iosched-trace-exporter.service"),
        UNIT_PATH,
        0o644,
    )?;

    let installed_kib = du_kib(&stage)?;
    let control = control(version(), installed_kib);
    fs::create_dir_all(stage.join("DEBIAN"))?;
    fs::write(stage.join("DEBIAN/control"), control)?;
    // Directories 0755 whatever the umask (dpkg-deb refuses a DEBIAN dir it finds odd).
    set_dir_modes(&stage)?;
    cmd::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&out.deb),
    )?;
    Ok(())
}

fn control(version: &str, installed_kib: u64) -> String {
    format!(
        "Package: iosched-trace\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: iosched-trace developers <iosched-trace@localhost>\n\
         Installed-Size: {installed_kib}\n\
         Section: admin\n\
         Priority: optional\n\
         Description: eBPF block-layer tracer: who waited, where, and what the I/O scheduler did\n \
         iosched-trace records the block layer's events with eBPF (every bio and request,\n \
         with the process that submitted it) and says where the time went: which process\n \
         waited, in the I/O scheduler or in the device, and what the scheduler was doing.\n \
         It replays a recorded workload under other schedulers and explains what the\n \
         recorded one cost. One static binary; needs root and a kernel with BTF.\n"
    )
}

const COPYRIGHT: &str = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
Upstream-Name: iosched-trace\n\
\n\
Files: *\n\
Copyright: the iosched-trace developers\n\
License: MIT or Apache-2.0\n \
The binary is also made of the Rust crates it depends on (from crates.io), each under\n \
its own license (MIT, Apache-2.0 or compatible), and of the Rust standard library and\n \
musl libc (MIT). On Debian systems the Apache License 2.0 is in\n \
/usr/share/common-licenses/Apache-2.0.\n";

/// The tree's size in KiB, as `Installed-Size` wants it.
fn du_kib(dir: &Path) -> anyhow::Result<u64> {
    let out = cmd::output(Command::new("du").args(["-sk"]).arg(dir))?;
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("du -sk printed {out:?}"))
}

fn set_dir_modes(dir: &Path) -> anyhow::Result<()> {
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            set_dir_modes(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_dependencies_are_found_in_readelf_output() {
        let dynamic = "Program Headers:\n  Type Offset\n  PHDR 0x000040\n  INTERP 0x000318 0x0000000000000318\n      [Requesting program interpreter: /lib64/ld-linux-x86-64.so.2]\n\nDynamic section at offset 0x2dc8 contains 27 entries:\n 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]\n";
        assert!(dynamic_dependencies(dynamic).unwrap().starts_with("INTERP"));
        let needed_only =
            " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]\n";
        assert!(dynamic_dependencies(needed_only).is_some());
        // A static-pie: a dynamic section for its own relocations, nothing needed.
        let static_pie = "Program Headers:\n  LOAD 0x000000\n  DYNAMIC 0x3a0e0\n  GNU_RELRO 0x39000\n\nDynamic section at offset 0x3a0e0 contains 17 entries:\n 0x000000000000001e (FLAGS)              BIND_NOW\n 0x0000000000000007 (RELA)               0x1c8\n";
        assert_eq!(dynamic_dependencies(static_pie), None);
    }

    #[test]
    fn control_file_is_well_formed() {
        let c = control("0.1.0", 12345);
        assert!(
            c.starts_with("Package: iosched-trace\nVersion: 0.1.0\n"),
            "{c}"
        );
        assert!(c.contains("Installed-Size: 12345\n"));
        // Every continuation line of the description starts with one space; the file ends
        // with a newline.
        let desc: Vec<&str> = c
            .lines()
            .skip_while(|l| !l.starts_with("Description:"))
            .skip(1)
            .collect();
        assert!(
            desc.len() >= 4
                && desc
                    .iter()
                    .all(|l| l.starts_with(' ') && !l.starts_with("  ")),
            "{desc:?}"
        );
        assert!(c.ends_with('\n'));
    }
}
