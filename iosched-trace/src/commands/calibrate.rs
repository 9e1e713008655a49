//! `iosched-trace calibrate`: measures each scheduler's per-request cost on a scratch loop
//! device ([`crate::calibrate`]), writes the host profile, prints [`crate::views::calibrate`]'s
//! table (or the profile as JSON).

use std::process::ExitCode;

use iosched_core::record::{ClockBase, Header};

use crate::{
    calibrate::{self, Durations},
    cli::CalibrateArgs,
};

pub fn run(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    let cal = calibrate::calibrate(Durations::default())?;
    let this = Header::for_this_host(Vec::new(), Vec::new());
    let when = iosched_core::units::utc(ClockBase::now().realtime_ns).iso8601();
    let profile = calibrate::profile(&cal, &this.host, &this.kernel_release, &when)?;
    calibrate::write_profile(&args.output, &profile)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&profile)?;
        s.push('\n');
        s
    } else {
        crate::views::calibrate::render(&cal, &profile, &args.output)
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
