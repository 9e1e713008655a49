//! `cargo xtask scenario NAME`: one seed scenario (crate iosched-testbed, module `scenario`)
//! on a fresh emulated disk, every run recorded and reported by `iosched-trace`, then one
//! comparison table. Everything is torn down at the end, also after an error or Ctrl-C.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use iosched_testbed::{
    loop_device::kernel_has_scheduler,
    scenario::{self, RunOptions, RunSummary, Tools},
};

use crate::{BinArgs, cmd, disk, scratch};

#[derive(Args)]
pub struct ScenarioArgs {
    /// Which scenario.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(scenario::NAMES))]
    name: String,
    /// Keep each run's recording and report in DIR/NAME/ (LABEL.istrace, LABEL.report.json, .txt, .html).
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Print the runs' summaries as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Record the BFQ runs with `--sched-log` (BFQ's own decision log in the recording).
    #[arg(long)]
    sched_log: bool,
    /// Only these runs (their labels, e.g. `bfq-ll1-2j,none-2j`).
    #[arg(long, value_name = "LABEL,...", value_delimiter = ',')]
    runs: Vec<String>,
    #[command(flatten)]
    bin: BinArgs,
}

pub fn run(args: &ScenarioArgs) -> anyhow::Result<()> {
    cmd::require_root(
        "scenario",
        "it mounts FUSE, attaches a loop device and loads eBPF programs",
    )?;
    scratch::catch_interrupts()?;
    let mut scenario = scenario::by_name(&args.name).context("unknown scenario")?;
    if !args.runs.is_empty() {
        let known: Vec<&str> = scenario.runs.iter().map(|r| r.label.as_str()).collect();
        if let Some(unknown) = args.runs.iter().find(|l| !known.contains(&l.as_str())) {
            anyhow::bail!(
                "scenario {} has no run {unknown:?} (its runs: {})",
                scenario.name,
                known.join(", ")
            );
        }
        scenario.runs.retain(|r| args.runs.contains(&r.label));
    }
    let absent = scenario.keep_runnable(kernel_has_scheduler);
    if !absent.is_empty() {
        eprintln!(
            "scenario {}: not run, this kernel lacks their scheduler: {}",
            scenario.name,
            absent.join(", ")
        );
        anyhow::ensure!(
            !scenario.runs.is_empty(),
            "no run of {} can run on this kernel",
            scenario.name
        );
    }
    let tools = Tools {
        trace_bin: args.bin.resolve()?,
        daemon_bin: disk::build_daemon()?,
    };
    scratch::check_interrupted()?;
    let outcomes = scenario::run(
        &scenario,
        &tools,
        &RunOptions {
            keep: args.keep.clone(),
            interrupted: &scratch::interrupted,
            verbose: true,
            sched_log: args.sched_log,
            bed: Default::default(),
        },
    )
    .with_context(|| format!("scenario {}", scenario.name))?;
    let summaries: Vec<RunSummary> = outcomes.iter().map(|o| o.summary.clone()).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summaries)?);
    } else {
        println!(
            "\nscenario {} (seed {}): {}\n",
            scenario.name, scenario.seed, scenario.about
        );
        print!("{}", scenario::table(&summaries));
    }
    if let Some(dir) = &args.keep {
        eprintln!(
            "scenario: recordings and reports kept in {}",
            dir.join(scenario.name).display()
        );
    }
    Ok(())
}
