//! Writeback throttling: its finding's words.

use iosched_model::explain::wbt;

use super::ms;

pub(super) fn claim(c: &wbt::Claim) -> String {
    let title = format!(
        "writeback throttling (wbt) held {} buffered writes of {} before their requests \
         were allocated: {:.1} ms of waiting, p99 {:.2} ms",
        c.held,
        c.most_waited
            .as_ref()
            .map_or_else(String::new, |(comm, pid)| format!("{comm}({pid})")),
        ms(c.total_ns),
        ms(c.p99_ns)
    );
    match c.pays_less_pct {
        Some(less) => format!(
            "{title}; it pays: without wbt the model predicts {less:.0}% less for them, \
             the writes crowding the device"
        ),
        None => title,
    }
}

pub(super) fn evidence(e: &wbt::Evidence) -> String {
    match e {
        wbt::Evidence::Waits {
            count,
            requests_cap,
            total_ns,
            p99_ns,
            max_ns,
        } => format!(
            "trace: {count} buffered-write bios waited between Q and G (rq_qos_throttle, before \
             their request was allocated) while requests were free (at most {requests_cap} may \
             exist): {:.1} ms in all, p99 {:.2} ms, max {:.2} ms",
            ms(*total_ns),
            ms(*p99_ns),
            ms(*max_ns)
        ),
        wbt::Evidence::Limit {
            limit_seen,
            depth_at_waits,
            woken_when_drained,
            waits,
            tag_bound,
        } => format!(
            "trace: wbt let up to {limit_seen} buffered writes hold requests at once{}; \
             {woken_when_drained} of the {waits} waits ended only when they had all completed{}",
            depth_at_waits.map_or_else(String::new, |d| format!(
                ", its max depth was {d} when they waited (wbt_step)"
            )),
            if *tag_bound > 0 {
                format!(
                    "; {tag_bound} more Q->G waits of buffered writes came with every request \
                     in use (tag waits, not counted)"
                )
            } else {
                String::new()
            }
        ),
        wbt::Evidence::Steps {
            events,
            step,
            background,
            normal,
            max,
            window_us,
        } => format!(
            "trace: {events} wbt_step events: scale step up to {step}, limits down to background \
             {background} / normal {normal} / max {max}, window {window_us} µs"
        ),
        wbt::Evidence::Tunable { device } => format!(
            "tunable: /sys/block/{device}/queue/wbt_lat_usec (wbt's read-latency target: 0 turns \
             wbt off, a larger one throttles less)"
        ),
        wbt::Evidence::Model {
            limit,
            with_mb_s,
            without_mb_s,
        } => format!(
            "model: the replay as recorded plus a wbt limit of {limit} gives the waiting \
             processes {with_mb_s:.3} MB/s; without wbt {without_mb_s:.3} MB/s"
        ),
    }
}
