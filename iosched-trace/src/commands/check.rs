//! `iosched-trace check`: the host's facts ([`crate::host`]), then, unless they already rule
//! recording out, a trial load of every program ([`crate::capture::trial`]) as `record`
//! would load them; the lines of [`crate::views::check`] (or one JSON document). Exit 0 when
//! recording will work, 1 with the reasons when not.

use std::process::ExitCode;

use anyhow::Context;

use crate::{
    capture::{self, session::Kernel},
    cli::CheckArgs,
    host::{Host, HostFacts, Load},
};

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let facts = Host::default().facts();
    let mut problems = facts.problems();
    let load = if problems.is_empty() && !args.no_load {
        trial_load()?
    } else {
        Load::default()
    };
    if let Some(e) = &load.error {
        problems.push(format!("the kernel refused the programs: {e}"));
    }
    let text = if args.json {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            ok: bool,
            problems: &'a [String],
            #[serde(flatten)]
            facts: &'a HostFacts,
            load: &'a Load,
        }
        let mut s = serde_json::to_string_pretty(&Doc {
            ok: problems.is_empty(),
            problems: &problems,
            facts: &facts,
            load: &load,
        })?;
        s.push('\n');
        s
    } else {
        crate::views::check::render(&facts, &load, &problems)
    };
    super::write_stdout(&text)?;
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        if !args.json {
            eprintln!(
                "iosched-trace: recording will not work here: {}",
                problems.join("; ")
            );
        }
        ExitCode::FAILURE
    })
}

fn trial_load() -> anyhow::Result<Load> {
    let mut load = Load {
        tried: true,
        attached: Vec::new(),
        skipped: Vec::new(),
        error: None,
    };
    let kernel = match Kernel::prepare() {
        Ok(k) => k,
        Err(e) => {
            load.error = Some(format!("{e:#}"));
            return Ok(load);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match runtime.block_on(async { capture::trial(&kernel.layout, &kernel.btf) }) {
        Ok(t) => {
            load.attached = t.attached;
            load.skipped = t.skipped;
        }
        Err(e) => load.error = Some(e.to_string()),
    }
    Ok(load)
}
