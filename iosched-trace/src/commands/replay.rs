//! `iosched-trace replay`: a trace's workload through one or more scheduler models, beside
//! the recording's own numbers ([`crate::views::replay`] or JSON).

use std::{path::Path, process::ExitCode};

use anyhow::Context;
use iosched_core::{analysis, trace_file};
use iosched_model::{
    device::DeviceModel,
    replay::{self, Replayer, Summary},
    sched::Settings,
};

use crate::cli::ReplayArgs;

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let extra = Settings::parse_pairs(&args.set)?;
    let (r, recorded, _) = replayer_for(
        &args.file,
        args.device.as_deref(),
        args.device_profile.as_deref(),
    )?;
    let specs: Vec<String> = if !args.compare.is_empty() {
        args.compare.clone()
    } else if let Some(s) = &args.sched {
        vec![s.clone()]
    } else {
        vec![
            r.recorded_scheduler
                .clone()
                .context("the trace does not say which scheduler was recorded; give --sched")?,
        ]
    };
    let mut runs = Vec::new();
    for spec in &specs {
        let cfg = replay::Config::parse(spec, &extra)?;
        runs.push(
            r.run(&cfg)
                .with_context(|| format!("replaying under {spec}"))?,
        );
    }
    let text = if args.json {
        let doc = serde_json::json!({
            "schema": "iosched-trace-replay/1",
            "device": r.workload.device.name,
            "device_model": r.device,
            "fit": r.fit,
            "workload": r.workload.streams,
            "recorded": recorded,
            "runs": runs,
        });
        let mut s = serde_json::to_string_pretty(&doc)?;
        s.push('\n');
        s
    } else {
        crate::views::replay::render_replay(&r, &recorded, &runs, args.decisions)
    };
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The workload of one device of a trace, ready to replay, and the recording's own numbers
/// (`replay` and `explain`).
///
/// The trace is read three times, opened anew each time: a trace source reads forward only
/// (`TraceSource` has no rewind), and each pass needs what the one before found. The first
/// extracts the workload, and with it which device (`device` may be unset for a trace of
/// one) and its span; the second reads that device's requests through the scheduler, for
/// the decision check against BFQ's log (`load_recorded_requests`; it reads nothing when
/// the trace has no scheduler messages); the third analyses the recording over the
/// workload's span, known only once the first pass has ended.
pub(super) fn replayer_for(
    file: &Path,
    device: Option<&str>,
    profile: Option<&Path>,
) -> anyhow::Result<(Replayer, Summary, analysis::Report)> {
    let profile = profile.map(DeviceModel::load).transpose()?;
    let mut source = trace_file::open(file)?;
    let mut r = Replayer::from_source(source.as_mut(), device, profile)?;
    r.load_recorded_requests(trace_file::open(file)?.as_mut())?;
    let mut again = trace_file::open(file)?;
    let (recorded, report) = replay::recorded_summary(again.as_mut(), &r.workload)?;
    Ok((r, recorded, report))
}
