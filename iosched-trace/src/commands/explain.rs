//! `iosched-trace explain`: why the recorded scheduler was slow here, as ranked findings
//! ([`iosched_model::explain`]) in text or JSON, or with the device's report as an HTML
//! page ([`crate::views::html`]).

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
    if let Some(path) = &args.html {
        let json = serde_json::to_value(crate::views::explain::explain_json(&r, &e))?;
        let text = crate::views::explain::render_explain(&r, &e);
        // The report of the device explained, from a second pass over the trace.
        let mut source = iosched_core::trace_file::open(&args.file)?;
        let opts = iosched_core::analysis::Options {
            devices: vec![e.device.clone()],
            top_intervals: 10,
            ..Default::default()
        };
        let explain = crate::views::html::Explain {
            json: &json,
            text: &text,
        };
        let (_, page) = super::report::html_page_with(source.as_mut(), &opts, Some(explain))?;
        super::report::write_page(path, &page)?;
        return Ok(ExitCode::SUCCESS);
    }
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
