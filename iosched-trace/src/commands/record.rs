//! `iosched-trace record`: checks, then [`crate::recorder`] until a signal or the duration,
//! then one summary line on stderr.

use std::process::ExitCode;

use anyhow::Context;
use iosched_core::units::{BytesStyle, human_bytes};
use iosched_trace_common::PROG_COMPLETE;

use crate::{
    capture::ProgramCost,
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
    for line in describe_program_costs(&summary.program_costs, summary.events) {
        eprintln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The programs' own kernel time, a line for all of them and one per program that ran
/// (costliest first); nothing when the kernel did not count it (`kernel.bpf_stats_enabled`
/// 0, the default). Per completed request (the runs of `block_rq_complete`, one per
/// request) and per recorded event: figures that do not move with the rest of the
/// machine's load, as the traced workload's throughput does.
fn describe_program_costs(costs: &[ProgramCost], events: u64) -> Vec<String> {
    let mut ran: Vec<&ProgramCost> = costs.iter().filter(|c| c.runs > 0).collect();
    if ran.is_empty() {
        return Vec::new();
    }
    ran.sort_by_key(|c| std::cmp::Reverse(c.run_ns));
    let total_ns: u64 = ran.iter().map(|c| c.run_ns).sum();
    let mut per = Vec::new();
    if let Some(c) = ran.iter().find(|c| c.name == PROG_COMPLETE) {
        per.push(format!(
            "{:.0} ns per completed request",
            total_ns as f64 / c.runs as f64
        ));
    }
    if events > 0 {
        per.push(format!(
            "{:.0} ns per recorded event",
            total_ns as f64 / events as f64
        ));
    }
    let mut lines = vec![format!(
        "programs' kernel time (kernel.bpf_stats_enabled=1): {:.3} s in all{}",
        total_ns as f64 / 1e9,
        per.iter().map(|p| format!(", {p}")).collect::<String>()
    )];
    lines.extend(ran.iter().map(|c| {
        format!(
            "  {:<22} {:>6.0} ns a run, {} runs",
            c.name,
            c.run_ns as f64 / c.runs as f64,
            c.runs
        )
    }));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(name: &'static str, runs: u64, run_ns: u64) -> ProgramCost {
        ProgramCost { name, runs, run_ns }
    }

    #[test]
    fn program_costs_are_said_only_when_the_kernel_counted_them() {
        let off = [cost(PROG_COMPLETE, 0, 0), cost("block_bio_queue", 0, 0)];
        assert!(describe_program_costs(&off, 1000).is_empty());
        let on = [
            cost("block_bio_queue", 1000, 300_000),
            cost("block_plug", 0, 0),
            cost(PROG_COMPLETE, 1000, 200_000),
        ];
        let lines = describe_program_costs(&on, 2500);
        // 500 µs over 1000 requests and 2500 events; the program that never ran is left out.
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].contains("500 ns per completed request"),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].contains("200 ns per recorded event"),
            "{}",
            lines[0]
        );
        assert!(lines[1].contains("block_bio_queue") && lines[1].contains("300 ns a run"));
        assert!(lines[2].contains(PROG_COMPLETE) && lines[2].contains("200 ns a run"));
    }

    #[test]
    fn without_completions_there_is_no_per_request_figure() {
        let lines = describe_program_costs(&[cost("block_bio_queue", 10, 1000)], 10);
        assert!(!lines[0].contains("per completed request"), "{}", lines[0]);
        assert!(
            lines[0].contains("100 ns per recorded event"),
            "{}",
            lines[0]
        );
    }
}
