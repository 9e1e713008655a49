//! `iosched-trace explain`: why the recorded scheduler was slow here, as ranked findings
//! ([`iosched_model::explain`]) in text or JSON.

use std::process::ExitCode;

use crate::cli::ExplainArgs;

pub fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let (r, recorded, report) = super::replay::replayer_for(
        &args.file,
        args.device.as_deref(),
        args.device_profile.as_deref(),
        args.host_profile.as_deref(),
    )?;
    let e = iosched_model::explain::explain(&r, &recorded, &report)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&crate::views::explain::explain_json(&r, &e))?;
        s.push('\n');
        s
    } else {
        crate::views::explain::render_explain(&r, &e)
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
