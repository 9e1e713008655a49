//! The `iosched-trace` command. Everything lives in the library (each subcommand in
//! `commands`); this parses, dispatches and turns errors into one line on stderr and a
//! non-zero exit.

use std::{io, process::ExitCode};

use clap::Parser;
use iosched_trace::{
    cli::{Cli, Command},
    commands,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // A closed pipe (`dump | head`) is not an error worth a message.
            if err
                .downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("iosched-trace: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Check(args) => commands::check::run(args),
        Command::Record(args) => commands::record::run(args),
        Command::Dump(args) => commands::dump::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Synth(args) => commands::synth::run(args),
        Command::Convert(args) => commands::convert::run(args),
        Command::Live(args) => commands::live::run(args),
        Command::Replay(args) => commands::replay::run(args),
        Command::Explain(args) => commands::explain::run(args),
        Command::Calibrate(args) => commands::calibrate::run(args),
        Command::Exporter(args) => commands::exporter::run(args),
        Command::ModelBench(args) => commands::model_bench::run(args),
    }
}
