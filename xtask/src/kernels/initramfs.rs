//! The guest's root file system: an uncompressed newc cpio (the format the kernel unpacks
//! into its initramfs, `Documentation/driver-api/early-userspace/buffer-format.rst`), written
//! here (a header of 13 hex fields per entry, 4-byte padding: smaller than a dependency),
//! holding busybox, the host's executables with the libraries `ldd` lists (and the dynamic
//! loader), the kernel's modules (decompressed: busybox's insmod reads plain .ko) and /init.
//!
//! Owns: what goes in and the cpio format. Must not: decide what runs (that is `plan`).

use std::{
    collections::BTreeMap,
    fs,
    io::{BufWriter, Write},
    path::{Component, Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

use crate::cmd;

/// Debian's busybox-static.
pub const BUSYBOX: &str = "/bin/busybox";

enum Entry {
    Dir,
    /// Contents from this host file.
    File {
        source: PathBuf,
        mode: u32,
    },
    Data {
        data: Vec<u8>,
        mode: u32,
    },
    Symlink(String),
    CharDev {
        major: u32,
        minor: u32,
    },
}

/// A file tree to be written as a cpio, by absolute guest path.
pub struct Root {
    entries: BTreeMap<PathBuf, Entry>,
}

/// A kernel module to load, found through modules.dep.
#[derive(Debug, PartialEq, Eq)]
pub struct Module {
    /// As insmod and modules.dep name it: the file name without `.ko[.xz]`, e.g. `kyber-iosched`.
    pub name: String,
    pub path: PathBuf,
}

impl Root {
    pub fn new() -> Self {
        let mut root = Root {
            entries: BTreeMap::new(),
        };
        for dir in [
            "/bin", "/sbin", "/dev", "/proc", "/sys", "/tmp", "/root", "/lib", "/lib64",
        ] {
            root.dir(Path::new(dir));
        }
        // The kernel opens /dev/console for init's stdio before init can mount devtmpfs.
        root.entries.insert(
            PathBuf::from("/dev/console"),
            Entry::CharDev { major: 5, minor: 1 },
        );
        root
    }

    /// `path` and its parents as directories.
    fn dir(&mut self, path: &Path) {
        let mut p = PathBuf::from("/");
        for c in path.components() {
            if let Component::Normal(c) = c {
                p.push(c);
                self.entries.entry(p.clone()).or_insert(Entry::Dir);
            }
        }
    }

    fn insert(&mut self, path: &Path, entry: Entry) {
        if let Some(parent) = path.parent() {
            self.dir(parent);
        }
        self.entries.insert(path.to_path_buf(), entry);
    }

    /// busybox as /bin/busybox, with a link per applet.
    pub fn busybox(&mut self, applets: &[&str]) -> anyhow::Result<()> {
        self.insert(
            Path::new(BUSYBOX),
            Entry::File {
                source: PathBuf::from(BUSYBOX),
                mode: 0o755,
            },
        );
        for applet in applets {
            self.insert(
                &Path::new("/bin").join(applet),
                Entry::Symlink("busybox".into()),
            );
        }
        Ok(())
    }

    /// A host executable at `guest`, with the shared libraries it loads at their paths;
    /// returns how many it loads (none for a static binary: nothing is added for it).
    pub fn executable(&mut self, host: &Path, guest: &Path) -> anyhow::Result<usize> {
        self.insert(
            guest,
            Entry::File {
                source: host.to_path_buf(),
                mode: 0o755,
            },
        );
        let libs = shared_libraries(host)?;
        for lib in &libs {
            if !self.entries.contains_key(lib) {
                let source = fs::canonicalize(lib).with_context(|| {
                    format!(
                        "resolving {} (a library of {})",
                        lib.display(),
                        host.display()
                    )
                })?;
                self.insert(
                    lib,
                    Entry::File {
                        source,
                        mode: 0o755,
                    },
                );
            }
        }
        Ok(libs.len())
    }

    /// A module under /modules, decompressed if it is a .ko.xz; returns its guest path.
    pub fn module(&mut self, module: &Module) -> anyhow::Result<PathBuf> {
        let guest = Path::new("/modules").join(format!("{}.ko", module.name));
        let entry = if module.path.extension().is_some_and(|e| e == "xz") {
            let data = cmd_bytes(Command::new("xz").args(["-dc"]).arg(&module.path))?;
            Entry::Data { data, mode: 0o644 }
        } else {
            Entry::File {
                source: module.path.clone(),
                mode: 0o644,
            }
        };
        self.insert(&guest, entry);
        Ok(guest)
    }

    /// A host file at `guest`, not executable.
    pub fn file(&mut self, host: &Path, guest: &Path) {
        self.insert(
            guest,
            Entry::File {
                source: host.to_path_buf(),
                mode: 0o644,
            },
        );
    }

    /// A shell script at `guest`.
    pub fn script(&mut self, guest: &Path, text: &str) -> anyhow::Result<()> {
        self.insert(
            guest,
            Entry::Data {
                data: text.as_bytes().to_vec(),
                mode: 0o755,
            },
        );
        Ok(())
    }

    /// Writes the cpio; returns its size in bytes.
    pub fn write(&self, path: &Path) -> anyhow::Result<u64> {
        let file =
            fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut out = Cpio::new(BufWriter::new(file));
        // BTreeMap order: every directory before what it holds.
        for (path, entry) in &self.entries {
            let name = path.strip_prefix("/").unwrap_or(path).to_string_lossy();
            match entry {
                Entry::Dir => out.entry(&name, 0o040_755, &[], (0, 0))?,
                Entry::File { source, mode } => {
                    let data = fs::read(source)
                        .with_context(|| format!("reading {}", source.display()))?;
                    out.entry(&name, 0o100_000 | mode, &data, (0, 0))?;
                }
                Entry::Data { data, mode } => out.entry(&name, 0o100_000 | mode, data, (0, 0))?,
                Entry::Symlink(target) => {
                    out.entry(&name, 0o120_777, target.as_bytes(), (0, 0))?;
                }
                Entry::CharDev { major, minor } => {
                    out.entry(&name, 0o020_600, &[], (*major, *minor))?;
                }
            }
        }
        let written = out.finish()?;
        Ok(written)
    }
}

/// The newc ("070701") writer.
struct Cpio<W: Write> {
    out: W,
    written: u64,
    ino: u32,
}

impl<W: Write> Cpio<W> {
    fn new(out: W) -> Self {
        Cpio {
            out,
            written: 0,
            ino: 1,
        }
    }

    fn pad(&mut self) -> std::io::Result<()> {
        let pad = (4 - (self.written % 4) as usize) % 4;
        self.out.write_all(&[0; 3][..pad])?;
        self.written += pad as u64;
        Ok(())
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        data: &[u8],
        rdev: (u32, u32),
    ) -> std::io::Result<()> {
        let name_len = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & 0o170_000 == 0o040_000 { 2 } else { 1 },
            0, // mtime
            data.len(),
            0, // dev major
            0, // dev minor
            rdev.0,
            rdev.1,
            name_len,
            0, // check (newc has none)
        );
        self.ino += 1;
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.written += (header.len() + name_len) as u64;
        self.pad()?;
        self.out.write_all(data)?;
        self.written += data.len() as u64;
        self.pad()
    }

    fn finish(mut self) -> std::io::Result<u64> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, &[], (0, 0))?;
        self.out.flush()?;
        Ok(self.written)
    }
}

/// The libraries `ldd` lists for `exe`, the dynamic loader included; none for a static one.
fn shared_libraries(exe: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .with_context(|| format!("running ldd {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A static binary (dist's musl one): glibc's ldd says "not a dynamic executable" (exit 1)
    // for a static executable and "statically linked" (exit 0) for a static PIE. Nothing to
    // add either way.
    if is_static(&text) || is_static(&stderr) {
        return Ok(Vec::new());
    }
    if !out.status.success() {
        bail!(
            "ldd {} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_ldd(&text).with_context(|| format!("ldd {}", exe.display()))
}

fn is_static(ldd_output: &str) -> bool {
    ldd_output
        .lines()
        .map(str::trim)
        .any(|l| l == "not a dynamic executable" || l == "statically linked")
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and `/lib64/ld-linux-x86-64.so.2
/// (0x...)` give their paths; the vDSO has none; `not found` is an error.
fn parse_ldd(text: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.contains("not found") {
            bail!("a library is missing: {line}");
        }
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(path) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The files of `names` and of what they depend on, dependencies first, from `modules_dir`'s
/// modules.dep (`kernel/block/bfq.ko: dep1.ko dep2.ko`: modprobe loads the last dependency
/// first). A name modules.dep does not list is built in (or absent) and skipped.
pub fn modules_in_order(modules_dir: &Path, names: &[&str]) -> anyhow::Result<Vec<Module>> {
    let dep_file = modules_dir.join("modules.dep");
    let dep = fs::read_to_string(&dep_file)
        .with_context(|| format!("reading {} (depmod not run?)", dep_file.display()))?;
    Ok(order_modules(&dep, names)
        .into_iter()
        .map(|(name, rel)| Module {
            name,
            path: modules_dir.join(rel),
        })
        .collect())
}

fn module_name(file: &str) -> &str {
    let base = file.rsplit('/').next().unwrap_or(file);
    base.split(".ko").next().unwrap_or(base)
}

/// (module name, path relative to the modules directory) in load order.
fn order_modules(dep: &str, names: &[&str]) -> Vec<(String, String)> {
    let table: BTreeMap<&str, (&str, Vec<&str>)> = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(file, deps)| (module_name(file), (file, deps.split_whitespace().collect())))
        .collect();
    let mut order: Vec<(String, String)> = Vec::new();
    let push = |file: &str, order: &mut Vec<(String, String)>| {
        let name = module_name(file).to_string();
        if !order.iter().any(|(n, _)| *n == name) {
            order.push((name, file.to_string()));
        }
    };
    for name in names {
        let key = name.replace('_', "-");
        let Some((file, deps)) = table.get(name).or_else(|| table.get(key.as_str())) else {
            continue;
        };
        for d in deps.iter().rev() {
            push(d, &mut order);
        }
        push(file, &mut order);
    }
    order
}

/// stdout of `cmd` as bytes; fails unless it exits 0.
fn cmd_bytes(cmd: &mut Command) -> anyhow::Result<Vec<u8>> {
    let shown = cmd::display(cmd);
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_lines_give_library_paths() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibsmartcols.so.1 => /lib/x86_64-linux-gnu/libsmartcols.so.1 (0x00007f9c)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f9c)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libsmartcols.so.1"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
        assert!(is_static("\tstatically linked\n"));
        assert!(is_static("\tnot a dynamic executable\n"));
        assert!(!is_static(text));
    }

    #[test]
    fn modules_load_after_their_dependencies_once() {
        let dep = "kernel/block/bfq.ko.xz:\n\
                   kernel/drivers/block/loop.ko.xz:\n\
                   kernel/a/x.ko: kernel/a/y.ko kernel/a/z.ko\n\
                   kernel/a/y.ko: kernel/a/z.ko\n\
                   kernel/a/z.ko:\n\
                   kernel/block/kyber-iosched.ko.xz:\n";
        let order = order_modules(dep, &["loop", "x", "y", "kyber_iosched", "mq-deadline"]);
        let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
        // mq-deadline is not listed: built in.
        assert_eq!(names, ["loop", "z", "y", "x", "kyber-iosched"]);
        assert_eq!(order[0].1, "kernel/drivers/block/loop.ko.xz");
    }

    #[test]
    fn cpio_entries_are_newc_and_aligned() {
        let mut buf = Vec::new();
        let mut cpio = Cpio::new(&mut buf);
        cpio.entry("init", 0o100_755, b"#!/bin/sh\n", (0, 0))
            .unwrap();
        cpio.entry("dev/console", 0o020_600, &[], (5, 1)).unwrap();
        let total = cpio.finish().unwrap();
        assert_eq!(total as usize, buf.len());
        assert_eq!(buf.len() % 4, 0);
        let text = String::from_utf8_lossy(&buf);
        // First header: ino 1, mode 100755, size 10, name size 5 ("init" + NUL).
        assert!(text.starts_with("07070100000001000081ed"), "{text}");
        assert_eq!(&text[54..62], "0000000a");
        assert_eq!(&text[94..102], "00000005");
        assert_eq!(&text[110..114], "init");
        // The header (110) + name (5) is padded to 116, then the data.
        assert_eq!(&buf[116..126], b"#!/bin/sh\n");
        // The device node carries its rdev.
        let dev = text.find("dev/console").unwrap() - 110;
        assert_eq!(&text[dev + 78..dev + 86], "00000005");
        assert_eq!(&text[dev + 86..dev + 94], "00000001");
        assert!(text.contains("TRAILER!!!"));
    }
}
