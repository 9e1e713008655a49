//! The scheduler's own cost: its finding's words.

use iosched_model::explain::sched_cost::{Bound, Claim, Evidence};

pub(super) fn claim(c: &Claim) -> String {
    let cap = match (c.bound, c.cpu_cap_iops, c.lock_cap_iops) {
        (Bound::Cpu, Some(cap), _) => {
            format!("the machine's CPUs were saturated, which capped the device at {cap:.0} IOPS")
        }
        (Bound::Lock, _, Some(cap)) => {
            format!("its lock, taken by every request of the device, caps it at {cap:.0} IOPS")
        }
        (Bound::Share, _, _) => format!(
            "it took {:.0}% of the machine's CPU time at the recorded rate",
            c.cpu_share.unwrap_or(0.0) * 100.0
        ),
        _ => "it caps the device".to_string(),
    };
    format!(
        "{}'s own CPU cost {}: {:.1} µs per request here over none's, and {cap}",
        c.sched.name(),
        if c.bound == Bound::Share {
            "is a large part of each request's"
        } else {
            "is the bottleneck"
        },
        c.cost_ns / 1e3
    )
}

pub(super) fn evidence(e: &Evidence) -> String {
    match e {
        Evidence::CpuBusy {
            cpus,
            busy_share,
            recorder_share,
            busy_ns_per_request,
        } => format!(
            "CPU: {cpus} CPUs {:.0}% busy during the recording (the recorder {:.1}% of them), \
             {:.1} µs of CPU per request in all",
            busy_share * 100.0,
            recorder_share * 100.0,
            busy_ns_per_request / 1e3
        ),
        Evidence::DeviceUnderused {
            driver_mean,
            parallelism,
            scheduler_mean,
        } => format!(
            "the device had {driver_mean:.1} requests in the driver on average, below the \
             {parallelism} it serves at once, while {scheduler_mean:.1} bios waited in the \
             scheduler"
        ),
        Evidence::Costs { source } => format!("scheduler costs: {source}"),
    }
}
