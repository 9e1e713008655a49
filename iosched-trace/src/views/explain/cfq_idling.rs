//! CFQ's idling on a dependency: its findings' words.

use iosched_model::{explain::cfq_idling, workload::Workload};

use super::{ms, reasons_text};

pub(super) fn claim(w: &Workload, c: &cfq_idling::Claim) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match c {
        cfq_idling::Claim::GroupIdles {
            stream,
            other_cgroup,
        } => format!(
            "CFQ group-idles on {} (group_idle: the last busy queue of its cgroup) waiting \
             for its next request, but that request depends on another process's I/O{}, \
             which the idling holds back",
            name(stream),
            if *other_cgroup {
                " in another cgroup"
            } else {
                ""
            }
        ),
        cfq_idling::Claim::Idles { stream } => format!(
            "CFQ idles on {} waiting for its next request, but that request depends on \
             another process's I/O, which the idling holds back",
            name(stream)
        ),
    }
}

pub(super) fn evidence(w: &Workload, e: &cfq_idling::Evidence) -> String {
    let name = |s: &u32| w.stream_name(*s);
    match e {
        cfq_idling::Evidence::Idled {
            stream,
            times,
            idle_ns,
            too_idle,
            reasons,
        } => format!(
            "model: CFQ idled {times} times on {} ({:.1} ms in all; {too_idle} slices ended \
             by the idle timer); idling because: {}",
            name(stream),
            ms(*idle_ns),
            reasons_text(reasons)
        ),
        cfq_idling::Evidence::Cgroups {
            stream,
            cgroup,
            root,
            partner,
            partner_cgroup,
            partner_root,
            blocked,
        } => {
            let root_text = |root: bool| if root { " (root)" } else { "" };
            format!(
                "trace: {} is in cgroup {cgroup}{}, {} in cgroup {partner_cgroup}{}: {}",
                name(stream),
                root_text(*root),
                name(partner),
                root_text(*partner_root),
                if *blocked {
                    format!(
                        "CFQ does not let {}'s request preempt a group idle of another \
                         cgroup, so it waits for the idle timer",
                        name(partner)
                    )
                } else {
                    "a request of the root group preempts the idle of a child group".to_string()
                }
            )
        }
        cfq_idling::Evidence::WithoutGroupIdle {
            predicted_mb_s,
            measured_mb_s,
            change_pct,
        } => format!(
            "model: with group_idle=0 {predicted_mb_s:.3} MB/s instead of {measured_mb_s:.3} \
             ({change_pct:+.0}%)"
        ),
    }
}
