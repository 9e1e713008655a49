//! Booting a kernel and initramfs in qemu and reading its serial console.
//!
//! TCG, one thread: `/dev/kvm` on our machines is paravirtual (kvm-pvm) and qemu fails on it
//! (an emulation failure on `lock cmpxchg16b`, then a hang at boot), and multi-threaded TCG
//! hung the guest in 2 of 3 runs while BPF programs were attached with I/O running (a soft
//! lockup at a tracepoint's patched site). See /work/shared/TOOLCHAIN.md.
//!
//! Owns: the qemu command line, the timeout (qemu is killed by its pid) and the console
//! text. Must not: interpret the console (that is `plan`).

use std::{
    fs,
    io::{Read as _, Seek as _, SeekFrom},
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::cmd;

pub struct Boot {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Where the console is written as it comes.
    pub serial: PathBuf,
    pub timeout: Duration,
    /// Virtual CPUs (`-smp`).
    pub cpus: u32,
    /// Console lines holding this are echoed as they arrive (progress in CI's log).
    pub marker: &'static str,
}

pub struct Outcome {
    pub serial: String,
    pub elapsed: Duration,
    pub timed_out: bool,
}

/// The guest's memory: the unpacked initramfs (~200 MiB), the 512 MiB ramdisk behind
/// /dev/shm, and the tests' page cache.
const MEMORY_MIB: u32 = 2048;

pub fn command(boot: &Boot) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    c.args(["-accel", "tcg,thread=single", "-cpu", "max"])
        .args(["-smp", &boot.cpus.to_string()])
        .args(["-m", &MEMORY_MIB.to_string()])
        .args(["-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(&boot.kernel)
        .arg("-initrd")
        .arg(&boot.initrd)
        // panic=-1 with -no-reboot: a guest panic ends qemu at once instead of waiting for
        // the timeout.
        .args(["-append", "console=ttyS0 panic=-1 loglevel=4"]);
    c
}

/// Boots and waits for qemu to exit (the guest powers off) or the timeout.
pub fn boot(boot: &Boot) -> anyhow::Result<Outcome> {
    let log = fs::File::create(&boot.serial)
        .with_context(|| format!("creating {}", boot.serial.display()))?;
    let mut c = command(boot);
    eprintln!("+ {}", cmd::display(&c));
    let started = Instant::now();
    let mut child = c
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let mut reader = fs::File::open(&boot.serial)?;
    let mut seen = 0u64;
    let mut partial = String::new();
    let mut echo = |reader: &mut fs::File, seen: &mut u64| -> anyhow::Result<()> {
        reader.seek(SeekFrom::Start(*seen))?;
        let mut new = Vec::new();
        reader.read_to_end(&mut new)?;
        *seen += new.len() as u64;
        partial.push_str(&String::from_utf8_lossy(&new));
        while let Some(end) = partial.find('\n') {
            let line: String = partial.drain(..=end).collect();
            if line.contains(boot.marker) {
                println!("  guest: {}", line.trim_end());
            }
        }
        Ok(())
    };
    let timed_out = loop {
        echo(&mut reader, &mut seen)?;
        if child.try_wait()?.is_some() {
            break false;
        }
        if started.elapsed() > boot.timeout {
            // Child::kill: SIGKILL to this qemu's pid, nothing else.
            child.kill().context("killing qemu")?;
            child.wait()?;
            break true;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    echo(&mut reader, &mut seen)?;
    let elapsed = started.elapsed();
    let serial = String::from_utf8_lossy(&fs::read(&boot.serial)?).into_owned();
    Ok(Outcome {
        serial,
        elapsed,
        timed_out,
    })
}
