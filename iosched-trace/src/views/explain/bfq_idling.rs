//! BFQ's idling on a process: its findings' words.

use iosched_model::{explain::bfq_idling, workload::Workload};

use super::{ms, reasons_text};

pub(super) fn claim(w: &Workload, c: &bfq_idling::Claim) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match c {
        bfq_idling::Claim::SavesThroughput { stream, less_pct } => format!(
            "BFQ idles on {} and that keeps the disk streaming: without idling \
             (slice_idle=0) the model predicts {less_pct:.0}% less",
            name(stream)
        ),
        bfq_idling::Claim::OnDependency { stream } => format!(
            "BFQ idles on {} waiting for its next request, but that request depends on \
             another process's I/O, which the idling holds back",
            name(stream)
        ),
        bfq_idling::Claim::CostsThroughput { stream } => format!(
            "BFQ idles on {} for throughput, but other processes wait meanwhile",
            name(stream)
        ),
        bfq_idling::Claim::ForGuarantees { stream } => {
            format!("BFQ idles on {} to guarantee its share", name(stream))
        }
    }
}

pub(super) fn evidence(w: &Workload, e: &bfq_idling::Evidence) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match e {
        bfq_idling::Evidence::Idled {
            stream,
            times,
            idle_ns,
            timer_waste_ns,
            reasons,
        } => format!(
            "model: BFQ idled {times} times on {} ({:.1} ms in all, {:.1} ms until the idle \
             timer fired with nothing to do); idling because: {}",
            name(stream),
            ms(*idle_ns),
            ms(*timer_waste_ns),
            reasons_text(reasons)
        ),
        bfq_idling::Evidence::DependsOn {
            stream,
            on,
            ios,
            within_us,
        } => format!(
            "trace: {ios} of {}'s I/Os were issued right after a completion of {} (within \
             {within_us} µs): its next I/O depends on that process",
            name(stream),
            name(on)
        ),
        bfq_idling::Evidence::DeviceIdleAfter { stream, idle_ns } => format!(
            "trace: the device sat idle with I/O pending for {:.1} ms after {}'s \
             completions",
            ms(*idle_ns),
            name(stream)
        ),
        bfq_idling::Evidence::WakerInjected { stream } => format!(
            "model: BFQ detected {}'s waker and injected its I/O while idling",
            name(stream)
        ),
    }
}
