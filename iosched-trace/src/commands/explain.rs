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
        let evidence = crate::views::explain::evidence_times(&r.workload, &e);
        let model = crate::views::html::Model {
            command: "explain",
            json: &json,
            text: &text,
            evidence: &evidence,
            predicted: &[],
        };
        super::report::write_model_page(path, &args.file, &e.device, model)?;
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
