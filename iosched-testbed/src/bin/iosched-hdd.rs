//! `iosched-hdd`: serve one file with the timing of a rotational disk (see the library's
//! `daemon` module). Runs in the foreground until the file is unmounted or it gets SIGTERM.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::Parser;
use iosched_disk::DiskModel;
use iosched_testbed::{
    args::{ModelArgs, parse_disk_size},
    daemon::{self, Config},
};

#[derive(Parser)]
#[command(
    name = "iosched-hdd",
    about = "A FUSE file with the timing of a rotational disk"
)]
struct Cli {
    /// An existing regular file to mount over; it becomes the disk file.
    #[arg(long, value_name = "FILE")]
    mount: PathBuf,
    /// Size of the disk file (e.g. 2G).
    #[arg(long, value_parser = parse_disk_size)]
    size: u64,
    #[command(flatten)]
    model: ModelArgs,
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
    let model = if cli.no_delay {
        None
    } else {
        Some(DiskModel::new(cli.model.params(), cli.size).context("bad disk parameters")?)
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
