//! A kernel of the matrix on disk: its Debian package downloaded (`apt-get download`, which
//! installs nothing), unpacked (`dpkg -x`) and its modules indexed (`depmod`: the package
//! ships no modules.dep), once, in `~/.cache/iosched-trace/kernels/<package>_<version>/`, so
//! that CI does not fetch 30 MB per kernel on every run.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use super::Kernel;
use crate::cmd;

/// The files of an unpacked kernel the matrix uses.
pub struct Fetched {
    pub vmlinuz: PathBuf,
    pub config: PathBuf,
    /// `lib/modules/<release>`, with a modules.dep.
    pub modules: PathBuf,
}

/// Written last: a directory without it is an interrupted fetch, redone from scratch.
const COMPLETE: &str = ".complete";

pub fn cache_dir() -> anyhow::Result<PathBuf> {
    let home = env::var_os("HOME").context("HOME is not set")?;
    Ok(Path::new(&home).join(".cache/iosched-trace/kernels"))
}

pub fn fetch(kernel: &Kernel, cache: &Path) -> anyhow::Result<Fetched> {
    let dir = cache.join(format!("{}_{}", kernel.package, kernel.version));
    let root = dir.join("root");
    let fetched = Fetched {
        vmlinuz: root.join(format!("boot/vmlinuz-{}", kernel.release)),
        config: root.join(format!("boot/config-{}", kernel.release)),
        modules: root.join(format!("lib/modules/{}", kernel.release)),
    };
    if dir.join(COMPLETE).exists() {
        println!("kernels: {}: cached in {}", kernel.name, dir.display());
        return Ok(fetched);
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let download = dir.join("download");
    fs::create_dir_all(&download).with_context(|| format!("creating {}", download.display()))?;
    let spec = format!("{}={}", kernel.package, kernel.version);
    let get = || {
        let mut c = Command::new("apt-get");
        c.args(["download", &spec]).current_dir(&download);
        c
    };
    if cmd::run(&mut get()).is_err() {
        // A fresh machine (or an old package list) does not know the version yet.
        cmd::run(
            Command::new("apt-get")
                .arg("update")
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        cmd::run(&mut get()).with_context(|| {
            format!(
                "{spec} does not download (superseded on the mirror?): pin another version in \
                 xtask/src/kernels/mod.rs"
            )
        })?;
    }
    let deb = fs::read_dir(&download)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", download.display()))?;
    cmd::run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
    for file in [&fetched.vmlinuz, &fetched.config] {
        if !file.is_file() {
            bail!("{} has no {}", deb.display(), file.display());
        }
    }
    cmd::run(
        Command::new(cmd::find_program("depmod").context("depmod not found (kmod)")?)
            .arg("-b")
            .arg(&root)
            .arg(kernel.release),
    )?;
    fs::remove_dir_all(&download).ok();
    fs::write(dir.join(COMPLETE), format!("{spec}\n"))?;
    Ok(fetched)
}
