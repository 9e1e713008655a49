//! `iosched-trace exporter`: checks, then the kernel collector under the daemon
//! ([`crate::exporter`]) until SIGTERM or SIGINT.

use std::process::ExitCode;

use crate::{
    cli::ExporterArgs,
    exporter::{daemon, kernel::KernelCollector},
    preflight,
};

pub fn run(args: ExporterArgs) -> anyhow::Result<ExitCode> {
    let config = args.validate()?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    let collector = KernelCollector::start(&config)?;
    daemon::run(&config, Box::new(collector))?;
    Ok(ExitCode::SUCCESS)
}
