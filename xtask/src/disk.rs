//! `cargo xtask disk up|down`: the emulated rotational disk or flash device (`--kind
//! flash`; crate iosched-testbed) for manual experiments. `up` leaves the daemon and the loop device running and writes their state
//! into the disk's own directory; `down` reads it back and tears everything down.
//!
//! One disk at a time: its directory has a fixed name, and `up` refuses while it exists.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use iosched_testbed::{
    args::{DeviceKind, FlashArgs, ModelArgs, parse_disk_size},
    rig::{Hdd, HddConfig, State},
};

use crate::cmd;

/// Where `up` puts the disk (tmpfs, so its backing memory is RAM, never a real disk).
const DIR: &str = "/dev/shm/iosched-testbed-disk";
const STATE_FILE: &str = "state.json";

#[derive(Subcommand)]
pub enum DiskCommand {
    /// Start the emulated disk; prints its loop device (e.g. /dev/loop3) on stdout.
    Up(UpArgs),
    /// Tear down the disk `up` started: detach, unmount, stop the daemon, remove its files.
    Down,
}

#[derive(Args)]
pub struct UpArgs {
    /// Disk size (memory is used only for what gets written).
    #[arg(long, default_value = "2G", value_parser = parse_disk_size)]
    size: u64,
    /// I/O scheduler of the loop device (none, mq-deadline, kyber, bfq).
    #[arg(long)]
    sched: Option<String>,
    /// queue/read_ahead_kb (128 is a SATA disk's default).
    #[arg(long, default_value_t = 128)]
    read_ahead_kb: u32,
    /// The device emulated: a rotational disk (the model flags) or a flash device (the
    /// flash flags).
    #[arg(long, value_enum, default_value_t = DeviceKind::Hdd)]
    kind: DeviceKind,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    flash: FlashArgs,
    /// Reply at once (no modelled delay): measures the daemon and FUSE themselves.
    #[arg(long)]
    no_delay: bool,
    /// The daemon logs every request (in its log file in the disk's directory).
    #[arg(long)]
    verbose: bool,
    /// Use this iosched-hdd binary instead of building the release one.
    #[arg(long, value_name = "PATH")]
    daemon: Option<PathBuf>,
}

pub fn run(command: &DiskCommand) -> anyhow::Result<()> {
    match command {
        DiskCommand::Up(args) => up(args),
        DiskCommand::Down => down(),
    }
}

fn up(args: &UpArgs) -> anyhow::Result<()> {
    cmd::require_root("disk up", "it mounts FUSE and attaches a loop device")?;
    let dir = Path::new(DIR);
    if dir.exists() {
        bail!(
            "an emulated disk is already up ({} exists); run `cargo xtask disk down` first",
            dir.display()
        );
    }
    let daemon_bin = match &args.daemon {
        Some(bin) => {
            anyhow::ensure!(bin.is_file(), "--daemon {}: no such file", bin.display());
            bin.clone()
        }
        None => build_daemon()?,
    };
    let mut config = HddConfig::new(daemon_bin, dir, args.size);
    config.kind = args.kind;
    config.params = args.model.params();
    config.flash = args.flash.params();
    config.no_delay = args.no_delay;
    config.scheduler = args.sched.clone();
    config.read_ahead_kb = args.read_ahead_kb;
    config.verbose = args.verbose;
    let hdd = Hdd::up(&config).context("bringing the emulated disk up")?;
    // Saved while the guard still owns the disk: if this fails, the guard tears down.
    hdd.state()
        .save(&dir.join(STATE_FILE))
        .context("saving the disk's state")?;
    let predictions = match args.kind {
        DeviceKind::Hdd => {
            let model = hdd.model();
            format!(
                "{:.1} MB/s sequential (1 MiB requests), {:.0} random 4 KiB IOPS ({:.2} ms each)",
                model.sequential_bytes_per_sec(1 << 20) / 1e6,
                model.random_iops(4096),
                model.random_access_secs(4096) * 1e3,
            )
        }
        DeviceKind::Flash => {
            use iosched_disk::flash::Op;
            let model = hdd.flash_model();
            let channels = model.params().channels;
            format!(
                "flash, {channels} channels: 4 KiB reads {:.0} IOPS with one in flight, {:.0} \
                 with {channels}; 4 KiB writes {:.0} with {channels}{}",
                model.iops(Op::Read, 4096, 1),
                model.iops(Op::Read, 4096, channels),
                model.iops(Op::Write, 4096, channels),
                if model.params().write_cache {
                    " (write cache on)"
                } else {
                    ""
                },
            )
        }
    };
    eprintln!(
        "disk: {} on {} ({} MiB){}; model: {predictions}; daemon log {}/daemon.log",
        hdd.device().display(),
        hdd.state().disk_file.display(),
        args.size >> 20,
        if args.no_delay { ", NO DELAY" } else { "" },
        dir.display(),
    );
    println!("{}", hdd.device().display());
    hdd.into_state();
    eprintln!("disk: up; `cargo xtask disk down` tears it down");
    Ok(())
}

fn down() -> anyhow::Result<()> {
    cmd::require_root("disk down", "it detaches a loop device and unmounts FUSE")?;
    let path = Path::new(DIR).join(STATE_FILE);
    if !path.exists() {
        if Path::new(DIR).exists() {
            bail!(
                "{DIR} exists without {STATE_FILE}: not a disk `up` finished; inspect and remove \
                 it by hand (`losetup -a`, `mount | grep iosched-hdd`)"
            );
        }
        bail!("no emulated disk is up ({} does not exist)", path.display());
    }
    let state = State::load(&path)?;
    let name = state.loop_name().unwrap_or("no loop device").to_owned();
    state.teardown().context("tearing the emulated disk down")?;
    eprintln!("disk: {name} detached, daemon stopped, {DIR} removed");
    Ok(())
}

/// `cargo build --release -p iosched-testbed --bin iosched-hdd`; returns the binary's path.
pub fn build_daemon() -> anyhow::Result<PathBuf> {
    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        "iosched-testbed",
        "--bin",
        "iosched-hdd",
    ]))?;
    let bin = cmd::target_dir()?.join("release/iosched-hdd");
    anyhow::ensure!(
        bin.is_file(),
        "the build succeeded but {} does not exist",
        bin.display()
    );
    Ok(bin)
}
