//! `iosched-trace replay`: a trace's workload through one or more scheduler models, beside
//! the recording's own numbers ([`crate::views::replay`] or JSON).

use std::{path::Path, process::ExitCode};

use anyhow::Context;
use iosched_core::{analysis, trace_file};
use iosched_model::{
    cpu::ProfileSource,
    device::DeviceModel,
    model_check::{self, ModelCheck},
    replay::{self, Replayer, Summary},
    sched::Settings,
};

use crate::{
    calibrate::{DEFAULT_PROFILE_PATH, read_profile},
    cli::ReplayArgs,
};

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let extra = Settings::parse_pairs(&args.set)?;
    let (r, recorded, _) = replayer_for(
        &args.file,
        args.device.as_deref(),
        args.device_profile.as_deref(),
        args.host_profile.as_deref(),
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
        // The page draws each run over time: binned as the recording is.
        let run = match args.html {
            Some(_) => r.run_binned(&cfg, iosched_core::analysis::bins::DEFAULT_BINS),
            None => r.run(&cfg),
        };
        runs.push(run.with_context(|| format!("replaying under {spec}"))?);
    }
    let check = self_check(&r, &recorded, &specs, &extra, &runs)?;
    if args.json || args.html.is_some() {
        let doc = serde_json::json!({
            "schema": "iosched-trace-replay/1",
            "device": r.workload.device.name,
            "device_model": r.device,
            "fit": r.fit,
            "model_check": check,
            "cpu": r.cpu,
            "workload": r.workload.streams,
            "recorded": recorded,
            "runs": runs,
        });
        if let Some(path) = &args.html {
            let text = crate::views::replay::render_replay(
                &r,
                &recorded,
                &runs,
                check.as_ref(),
                args.decisions,
            );
            let predicted: Vec<crate::views::html::Predicted> = runs
                .iter()
                .filter_map(|run| {
                    Some(crate::views::html::Predicted {
                        label: &run.config.label,
                        report: &run.report,
                        bins: run.bins.as_ref()?,
                    })
                })
                .collect();
            let model = crate::views::html::Model {
                command: "replay",
                json: &doc,
                text: &text,
                evidence: &[],
                predicted: &predicted,
            };
            super::report::write_model_page(path, &args.file, &r.workload.device.name, model)?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut s = serde_json::to_string_pretty(&doc)?;
        s.push('\n');
        super::write_stdout(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    let text =
        crate::views::replay::render_replay(&r, &recorded, &runs, check.as_ref(), args.decisions);
    super::write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The model's check of itself ([`model_check`]): the run of the recorded configuration
/// among `runs` (a spec naming the recorded scheduler with no settings of its own), else one
/// more run. `None` when the trace does not say which scheduler it was recorded under.
fn self_check(
    r: &Replayer,
    recorded: &Summary,
    specs: &[String],
    extra: &Settings,
    runs: &[replay::Run],
) -> anyhow::Result<Option<ModelCheck>> {
    let Some(cfg) = r.recorded_config() else {
        return Ok(None);
    };
    let reused = specs
        .iter()
        .position(|s| s.trim() == cfg.sched.name())
        .filter(|_| extra.0.is_empty())
        .map(|i| &runs[i]);
    let base = match reused {
        Some(run) => run.clone(),
        None => r.run(&cfg).context("replaying as recorded")?,
    };
    Ok(Some(model_check::check(r, recorded, &base)))
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
    host_profile: Option<&Path>,
) -> anyhow::Result<(Replayer, Summary, analysis::Report)> {
    let profile = profile.map(DeviceModel::load).transpose()?;
    // A stream is read three times here: kept in a scratch file for as long as this runs.
    crate::system::let_interrupt_pass_for_stream(file);
    let spooled = trace_file::is_stream(file)
        .then(|| crate::spool::Spooled::copy(file))
        .transpose()?;
    let file = spooled.as_ref().map_or(file, |s| s.path());
    let mut source = trace_file::open(file)?;
    let mut r = Replayer::from_source(source.as_mut(), device, profile)?;
    let recorded_on = source.header().map(|h| h.host.clone());
    choose_host_profile(&mut r, host_profile, recorded_on.as_deref())?;
    r.load_recorded_requests(trace_file::open(file)?.as_mut())?;
    let mut again = trace_file::open(file)?;
    let (recorded, report) = replay::recorded_summary(again.as_mut(), &r.workload)?;
    Ok((r, recorded, report))
}

/// Where the schedulers' costs come from ([`ProfileSource`]): `--host-profile`, else the one
/// in the recording, else this host's default profile when the recording was made on this
/// host, else the documented defaults.
fn choose_host_profile(
    r: &mut Replayer,
    given: Option<&Path>,
    recorded_on: Option<&str>,
) -> anyhow::Result<()> {
    if let Some(path) = given {
        let p = read_profile(path)?;
        r.set_host_profile(p, ProfileSource::Given(path.display().to_string()));
        return Ok(());
    }
    if r.cpu.profile_source == ProfileSource::Recording {
        return Ok(());
    }
    let default = Path::new(DEFAULT_PROFILE_PATH);
    if default.exists() {
        // Another host's costs say nothing of the one the recording was made on.
        if let Ok(p) = read_profile(default)
            && recorded_on.is_some_and(|h| h == p.host)
        {
            r.set_host_profile(p, ProfileSource::HostDefault(DEFAULT_PROFILE_PATH.into()));
        }
    }
    Ok(())
}
