//! A device's figures split where its scheduler was switched while recording (the
//! recorder's device watch notes each switch in the statistics, `trace.device_changes`): the
//! report of each span between switches, so that before and after are never averaged into
//! one number. A switch drains the queue (the kernel freezes it first), so no request
//! straddles one.
//!
//! Owns: the spans and the per-span analysis. Must not: open files (the caller hands a way
//! to read the trace again).

use super::{Options, Report, analyze_between, report::SchedulerSpan};
use crate::{
    record::DeviceChangeKind,
    source::{InputError, TraceSource},
};

/// `(device, scheduler, from, to)` of every span of the devices whose scheduler was switched,
/// from the report's device changes and each device's scheduler at the start.
pub fn spans(report: &Report) -> Vec<(String, String, u64, Option<u64>)> {
    let mut out = Vec::new();
    for d in &report.devices {
        let switches: Vec<(u64, &str, &str)> = report
            .trace
            .device_changes
            .iter()
            .filter(|c| c.device == d.name)
            .filter_map(|c| match &c.what {
                DeviceChangeKind::Scheduler { from, to } => {
                    Some((c.ts_ns, from.as_str(), to.as_str()))
                }
                _ => None,
            })
            .collect();
        let Some(first) = switches.first() else {
            continue;
        };
        let mut from = 0;
        let mut scheduler = first.1.to_string();
        for (ts, _, to) in &switches {
            out.push((d.name.clone(), scheduler, from, Some(*ts)));
            from = *ts;
            scheduler = to.to_string();
        }
        out.push((d.name.clone(), scheduler, from, None));
    }
    out
}

/// Analyzes each span of [`spans`] on a fresh read of the trace (`reopen`), the device alone;
/// fills `report.by_scheduler`. Nothing to do (and no read) without a switch.
pub fn split(
    report: &mut Report,
    opts: &Options,
    reopen: &mut dyn FnMut() -> Result<Box<dyn TraceSource>, InputError>,
) -> Result<(), InputError> {
    for (device, scheduler, from_ns, to_ns) in spans(report) {
        let mut source = reopen()?;
        let mut span_opts = opts.clone();
        span_opts.devices = vec![device.clone()];
        let mut r = analyze_between(
            source.as_mut(),
            &span_opts,
            from_ns,
            to_ns.unwrap_or(u64::MAX),
        )?;
        let Some(dev) = r.devices.pop() else {
            continue;
        };
        report.by_scheduler.push(SchedulerSpan {
            device,
            scheduler,
            from_ns: from_ns.max(report.trace.from_ns),
            to_ns,
            report: dev,
        });
    }
    Ok(())
}
