//! Developer workflows for iosched-trace: `cargo xtask setup|build|test|dist|layout|demo|bench|disk|kernels|fuzz|scenario|validate`.
//!
//! Nothing here is needed to read or use the product code; it only drives tools (rustup,
//! cargo, apt-get, losetup, fio, the built `iosched-trace` binary) in the right order and
//! cleans up after itself.

mod bench;
mod bench_analyze;
mod bench_html;
mod bench_replay;
mod cmd;
mod demo;
mod disk;
mod dist;
mod fuzz;
mod kernels;
mod layout;
mod scenario;
mod scratch;
mod setup;
mod test;
mod trace_stats;
mod validate;

use std::{path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer workflows for iosched-trace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check the toolchain, tools and mounts; install or mount only what is missing.
    Setup,
    /// Setup, then build the release binary target/release/iosched-trace.
    Build,
    /// Setup, then fmt, layout, clippy, unit tests and (as root, or when CI is set) the
    /// real-kernel tests and the kernel matrix in qemu.
    Test,
    /// Setup, then target/dist/: a static (musl) release binary, man pages, shell completions
    /// and a Debian package of them; prints their paths.
    Dist,
    /// The layout rules: no import cycle among a crate's modules, crates depending only on
    /// lower layers (exits non-zero, naming each cycle or dependency, when one is broken).
    Layout,
    /// bfq vs mq-deadline on the emulated disk (32 random readers), both runs recorded and
    /// reported side by side (root).
    Demo(demo::DemoArgs),
    /// Benchmarks (root).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The emulated rotational disk (root): `up` prints its loop device, `down` removes it.
    #[command(subcommand)]
    Disk(disk::DiskCommand),
    /// The kernel matrix: boot Debian's 6.1 and 6.12 kernels in qemu and run the
    /// kernel-dependent real-kernel tests inside each (docs/KERNELS.md; root).
    Kernels(kernels::KernelsArgs),
    /// Run the fuzz targets of fuzz/ (cargo-fuzz, nightly) from the committed seeds.
    Fuzz(fuzz::FuzzArgs),
    /// Run a seed scenario on the emulated disk, record and report every run, compare (root).
    Scenario(scenario::ScenarioArgs),
    /// The scheduler model against the test bed: every scenario recorded under `none`,
    /// replayed under the other schedulers and compared with their real runs; every
    /// recording replayed under its own configuration (root, or --from DIR).
    Validate(validate::ValidateArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// fio IOPS on a loop device without and with `iosched-trace record` running.
    ///
    /// Exits non-zero when the target (recording/baseline IOPS >= 0.80, no lost events) is
    /// missed.
    Capture(bench::CaptureArgs),
    /// `iosched-trace report` on a synthetic 50M-event trace: events/s and peak RSS.
    ///
    /// Exits non-zero when the target (>= 10M events/s on one core, RSS < 200 MiB) is missed.
    Analyze(bench_analyze::AnalyzeArgs),
    /// fio IOPS on a loop device without and with `iosched-trace live --batch` watching it
    /// (the live view's collector and per-interval numbers; text printed each second).
    ///
    /// Exits non-zero when the target (live/baseline IOPS >= 0.85) is missed.
    Live(bench::LiveArgs),
    /// The exporter's cost under the capture benchmark's load, scraped every second (root).
    Exporter(bench::exporter::ExporterArgs),
    /// Replay speed of the scheduler models (requests/s); exits non-zero below 2M/s.
    Replay(bench_replay::ReplayArgs),
    /// `report --html` against `report --json` on a synthetic 50M-event trace: time and peak
    /// RSS ratios, the page's size.
    ///
    /// Exits non-zero when the CPU or RSS ratio is above 2 or the page is 5 MB or more.
    Html(bench_html::HtmlArgs),
}

/// How demo and bench get the `iosched-trace` binary.
#[derive(Args, Clone, Debug)]
pub struct BinArgs {
    /// Use this iosched-trace binary instead of running setup and building the release one.
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
}

impl BinArgs {
    /// The binary to run: the given one, or a fresh release build.
    pub fn resolve(&self) -> anyhow::Result<PathBuf> {
        match &self.bin {
            Some(bin) => {
                anyhow::ensure!(bin.is_file(), "--bin {}: no such file", bin.display());
                Ok(bin.clone())
            }
            None => build(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Setup => setup::run().map(|()| ExitCode::SUCCESS),
        Command::Build => build().map(|_| ExitCode::SUCCESS),
        Command::Test => test::run().map(|()| ExitCode::SUCCESS),
        Command::Dist => dist::run().map(|_| ExitCode::SUCCESS),
        Command::Layout => layout::run().map(|()| ExitCode::SUCCESS),
        Command::Demo(args) => demo::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Bench(BenchCommand::Capture(args)) => bench::capture(&args),
        Command::Bench(BenchCommand::Analyze(args)) => bench_analyze::analyze(&args),
        Command::Bench(BenchCommand::Live(args)) => bench::live(&args),
        Command::Bench(BenchCommand::Exporter(args)) => bench::exporter::exporter(&args),
        Command::Bench(BenchCommand::Replay(args)) => bench_replay::replay(&args),
        Command::Bench(BenchCommand::Html(args)) => bench_html::html(&args),
        Command::Disk(command) => disk::run(&command).map(|()| ExitCode::SUCCESS),
        Command::Kernels(args) => kernels::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Fuzz(args) => fuzz::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Scenario(args) => scenario::run(&args).map(|()| ExitCode::SUCCESS),
        Command::Validate(args) => validate::run(&args).map(|()| ExitCode::SUCCESS),
    }
}

/// Setup, then `cargo build --release -p iosched-trace`; returns the binary's path.
fn build() -> anyhow::Result<PathBuf> {
    setup::run()?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "iosched-trace"]))?;
    let bin = cmd::target_dir()?.join("release/iosched-trace");
    anyhow::ensure!(
        bin.is_file(),
        "the build succeeded but {} does not exist",
        bin.display()
    );
    Ok(bin)
}
