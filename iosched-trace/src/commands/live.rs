//! `iosched-trace live`: checks, then the live view ([`crate::live`]).

use std::process::ExitCode;

use crate::{cli::LiveArgs, devices::Sysfs, preflight};

pub fn run(args: LiveArgs) -> anyhow::Result<ExitCode> {
    let config = args.validate(&Sysfs::default())?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    crate::live::run(config)?;
    Ok(ExitCode::SUCCESS)
}
