//! `iosched-hdd`: serve one file with the timing of a rotational disk or of a flash device
//! (`--kind flash`; see the library's `daemon` module). Runs in the foreground until the file is unmounted or it gets SIGTERM.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::Parser;
use iosched_disk::{DiskModel, FlashModel};
use iosched_testbed::{
    args::{DeviceKind, FlashArgs, ModelArgs, parse_disk_size},
    daemon::{self, Config, Timing},
};

#[derive(Parser)]
#[command(
    name = "iosched-hdd",
    about = "A FUSE file with the timing of a rotational disk or a flash device"
)]
struct Cli {
    /// An existing regular file to mount over; it becomes the disk file.
    #[arg(long, value_name = "FILE")]
    mount: PathBuf,
    /// Size of the disk file (e.g. 2G).
    #[arg(long, value_parser = parse_disk_size)]
    size: u64,
    /// The device emulated: its parameters are the rotational flags or the flash ones.
    #[arg(long, value_enum, default_value_t = DeviceKind::Hdd)]
    kind: DeviceKind,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    flash: FlashArgs,
    /// Answer every request at once: measures the daemon itself.
    #[arg(long)]
    no_delay: bool,
    /// Log every read and write with its service time on stderr.
    #[arg(long)]
    verbose: bool,
    /// Do not ask for real-time (SCHED_FIFO) priority.
    #[arg(long)]
    no_realtime: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("iosched-hdd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let model = match (cli.no_delay, cli.kind) {
        (true, _) => None,
        (false, DeviceKind::Hdd) => Some(Timing::Hdd(
            DiskModel::new(cli.model.params(), cli.size).context("bad disk parameters")?,
        )),
        (false, DeviceKind::Flash) => Some(Timing::Flash(
            FlashModel::new(cli.flash.params()).context("bad flash parameters")?,
        )),
    };
    let config = Config {
        mountpoint: cli.mount,
        size: cli.size,
        model,
        verbose: cli.verbose,
        realtime: !cli.no_realtime,
    };
    let stats = daemon::run(&config)?;
    eprintln!(
        "iosched-hdd: done: {} reads ({} MiB), {} writes ({} MiB), {} flushes, modelled busy {:.3} s",
        stats.reads,
        stats.read_bytes >> 20,
        stats.writes,
        stats.write_bytes >> 20,
        stats.flushes,
        stats.busy.as_secs_f64()
    );
    Ok(())
}
