//! Kyber's throttling: its finding's words.

use iosched_model::explain::kyber;

use super::{
    ms,
    throttling::{intervals_text, sufferers_text},
};

pub(super) fn claim(c: &kyber::Claim) -> String {
    let title = format!(
        "Kyber throttled the {} domain{}: {} requests waited for a token, {:.1} ms in \
         all",
        c.domains.join(" and "),
        if c.domains.len() > 1 { "s" } else { "" },
        c.requests,
        ms(c.total_ns)
    );
    match c.pays_less_pct {
        Some(less) => format!(
            "{title}; it pays: at its initial depths the model predicts {less:.0}% less \
             for them"
        ),
        None => title,
    }
}

pub(super) fn evidence(e: &kyber::Evidence) -> String {
    match e {
        kyber::Evidence::Waits {
            domain,
            events,
            count,
            total_ns,
            p99_ns,
            max_ns,
        } => format!(
            "trace: {events} kyber_throttled events for the {domain} domain; {count} of its \
             requests waited between I and D while its tokens were out: {:.1} ms in all, p99 \
             {:.2} ms, max {:.2} ms",
            ms(*total_ns),
            ms(*p99_ns),
            ms(*max_ns)
        ),
        kyber::Evidence::Depth {
            domain,
            range,
            at_throttles,
            when,
            who,
        } => format!(
            "trace: {domain} depth {}; when: {}; who waited: {}",
            match (range, at_throttles) {
                (Some((lo, hi)), Some(at)) =>
                    format!("set by kyber_adjust between {lo} and {hi}, {at} at most throttles"),
                (_, Some(at)) => format!("{at} at the throttles (no kyber_adjust seen)"),
                _ => "unknown".to_string(),
            },
            intervals_text(when),
            sufferers_text(who)
        ),
        kyber::Evidence::Tunable {
            device,
            read_lat_nsec,
            write_lat_nsec,
        } => format!(
            "tunable: /sys/block/{device}/queue/iosched/read_lat_nsec ({}) and write_lat_nsec \
             ({}): Kyber shrinks a domain's depth when latencies exceed them; larger targets \
             throttle less",
            read_lat_nsec.as_deref().unwrap_or("?"),
            write_lat_nsec.as_deref().unwrap_or("?")
        ),
        kyber::Evidence::Model {
            with_mb_s,
            without_mb_s,
        } => format!(
            "model: Kyber held at those depths gives the waiting processes {with_mb_s:.3} MB/s; \
             at its initial depths {without_mb_s:.3} MB/s"
        ),
    }
}
