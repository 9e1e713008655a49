//! `iosched-trace record`: checks, then [`crate::recorder`] until a signal or the duration,
//! then one summary line on stderr.

use std::process::ExitCode;

use anyhow::Context;
use iosched_core::units::{BytesStyle, human_bytes};

use crate::{
    cli::{OutputFormat, RecordArgs},
    devices::Sysfs,
    preflight,
    recorder::{self, PlugTracing, RecordConfig},
};

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        !(args.output.as_os_str() == "-" && matches!(args.format, OutputFormat::Blktrace)),
        "-o - writes a recording of ours; blktrace output is a directory of per-CPU files"
    );
    let valid = args.validate(&Sysfs::default())?;
    let host_profile = crate::calibrate::profile_for_record(args.host_profile.as_deref())?;
    preflight::check_privileges()?;
    preflight::check_btf()?;
    let config = RecordConfig {
        disks: valid.disks,
        output: args.output.clone(),
        format: args.format.into(),
        duration: valid.duration,
        ring_size: valid.ring_size,
        wakeup_bytes: valid.wakeup,
        extra_events: args.extra_events,
        plugs: if args.no_plugs {
            PlugTracing::Off
        } else if args.plug_events || args.format == OutputFormat::Blktrace {
            PlugTracing::Events
        } else {
            PlugTracing::Counted
        },
        wakeups: args.wakeups,
        verbose: args.verbose,
        progress: true,
        command_line: std::env::args().collect(),
        sched_log: args.sched_log,
        discard_events: args.discard_events,
        host_profile,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let summary = runtime.block_on(recorder::record(config))?;
    let stats = &summary.stats;
    let mut why = Vec::new();
    if stats.ring_lost() > 0 {
        why.push(format!(
            "{} with the ring buffer full: try a larger --ring-size",
            stats.ring_lost()
        ));
    }
    match stats.kernel_skipped {
        Some(0) => {}
        Some(n) => why.push(format!(
            "{n} the kernel did not run our programs for, as they were already running on that \
             CPU (an interrupt's event inside another)"
        )),
        None => why.push(
            "events the kernel skipped for a program already running are not counted by this \
             kernel"
                .to_string(),
        ),
    }
    eprintln!(
        "recorded {} events ({}) in {:.1}s to {} [{}]; lost {} events{}",
        summary.events,
        human_bytes(summary.bytes as f64, BytesStyle::UpToTib),
        summary.duration.as_secs_f64(),
        args.output.display(),
        summary.ended_by,
        stats.lost(),
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join("; "))
        }
    );
    Ok(ExitCode::SUCCESS)
}
