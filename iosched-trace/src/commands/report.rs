//! `iosched-trace report`: where the time went ([`iosched_core::analysis`]), as
//! [`crate::views::report`]'s text or JSON.

use std::process::ExitCode;

use iosched_core::{analysis, trace_file};

use crate::cli::ReportArgs;

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options()?;
    crate::system::let_interrupt_pass_for_stream(&args.file);
    let mut source = trace_file::open(&args.file)?;
    let mut opts = opts;
    // Cgroup filters by path: find the ids in the trace's process table.
    let by_path: Vec<u64> = source
        .processes()
        .values()
        .filter(|p| {
            p.cgroup_path
                .as_deref()
                .is_some_and(|path| opts.cgroups.iter().any(|c| path.contains(c.as_str())))
        })
        .map(|p| p.cgroup_id)
        .collect();
    opts.cgroups.extend(by_path.iter().map(|i| i.to_string()));
    let report = analysis::analyze(source.as_mut(), &opts)?;
    for w in &report.trace.warnings {
        eprintln!("warning: {w}");
    }
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        s
    } else {
        crate::views::report::render(&report)
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}
