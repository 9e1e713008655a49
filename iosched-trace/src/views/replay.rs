//! Text view of `replay` (its `--json` is the serialized data itself), and the lines of it
//! `explain`'s view shares ([`super::explain`]).
//!
//! Owns: layout. Must not: compute numbers (they come from `model::replay`).

use std::fmt::Write;

use iosched_model::{
    device::{DeviceModel, FitQuality},
    model_check::ModelCheck,
    replay::{ContinuedNote, Replayer, Run, Summary},
    sched::Decided,
    workload::StreamKind,
};

pub(crate) fn device_line(r: &Replayer) -> String {
    let kind = match &r.device {
        DeviceModel::Rotational(_) => "rotational, fitted".to_string(),
        DeviceModel::Disk { .. } => "rotational, from the profile".to_string(),
        DeviceModel::Flash(f) if r.fit.is_some() => {
            let mut s = format!(
                "non-rotational, fitted: parallelism {}, reads {}",
                f.parallelism,
                flash_costs(f.latency_ns, f.ns_per_sector)
            );
            if let (Some(l), Some(p)) = (f.write_latency_ns, f.write_ns_per_sector) {
                let _ = write!(s, ", writes {}", flash_costs(l, p));
            }
            s
        }
        DeviceModel::Flash(_) => "non-rotational, from the profile".to_string(),
    };
    let basis = r
        .fit
        .as_ref()
        .filter(|q| !q.rotational_basis.is_empty())
        .map(|q| format!(" ({})", q.rotational_basis))
        .unwrap_or_default();
    format!("{kind}{basis}{}", fit_text(r.fit.as_ref()))
}

/// A flash operation's costs: `80 µs + 1000 MB/s`, or the latency alone where the transfer
/// was folded into it.
fn flash_costs(latency_ns: f64, ns_per_sector: f64) -> String {
    if ns_per_sector > 0.0 {
        format!(
            "{:.1} µs + {:.0} MB/s",
            latency_ns / 1e3,
            512.0 / ns_per_sector * 1e3
        )
    } else {
        format!("{:.1} µs each", latency_ns / 1e3)
    }
}

fn fit_text(fit: Option<&FitQuality>) -> String {
    match fit {
        None => String::new(),
        Some(q) => {
            let mut s = format!(
                "; fit on {} requests: R² {:.2}, mean |error| {:.1}%, total busy time {:+.1}%",
                q.samples, q.r2, q.mean_abs_error_pct, q.total_error_pct
            );
            for n in &q.notes {
                let _ = write!(s, "; {n}");
            }
            s
        }
    }
}

/// The workload as the model replays it.
pub fn workload_lines(r: &Replayer) -> Vec<String> {
    let w = &r.workload;
    w.streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = match s.kind {
                StreamKind::ClosedLoop => "closed loop",
                StreamKind::Windowed => "several in flight",
                StreamKind::OpenLoop => "open loop",
            };
            // A process with several in flight has a think time only where its I/O drained
            // (a pause), which is no pace of its own: say how often.
            let think = match (s.kind, s.think_samples) {
                (StreamKind::Windowed, 0) => String::new(),
                (StreamKind::Windowed, n) => format!(
                    ", think {:.2} ms after the {n} time(s) it had nothing in flight",
                    s.think_mean_ns / 1e6
                ),
                _ => format!(", think {:.2} ms", s.think_mean_ns / 1e6),
            };
            let mut line = format!(
                "  {}: {} I/Os, {kind}, up to {} in flight{think}",
                w.stream_name(i as u32),
                s.ios,
                s.max_in_flight,
            );
            if s.tag_bound() {
                let _ = write!(
                    line,
                    " (slept for a free request before {} of them: held back by the queue, \
                     its own depth is larger; replayed with as many in flight as the \
                     configuration has requests, nr_requests; --set iodepth=N replays it at N)",
                    s.slept_for_request
                );
            }
            for (d, n) in &s.depends_on {
                let _ = write!(line, "; waits for {} ({n} times)", w.stream_name(*d));
            }
            line
        })
        .collect()
}

fn row(out: &mut String, label: &str, values: &[String]) {
    let _ = write!(out, "{label:<28}");
    for v in values {
        let _ = write!(out, " {v:>16}");
    }
    out.push('\n');
}

/// `replay`'s text: the recording, then each run.
pub fn render_replay(
    r: &Replayer,
    recorded: &Summary,
    runs: &[Run],
    check: Option<&ModelCheck>,
    decisions: usize,
) -> String {
    let mut out = String::new();
    if let Some(c) = check {
        let _ = writeln!(out, "{}", super::model_check::check_line(c));
    }
    let w = &r.workload;
    let _ = writeln!(
        out,
        "device {} ({}), recorded under {}, kernel {}.{}",
        w.device.name,
        device_line(r),
        r.recorded_scheduler
            .as_deref()
            .unwrap_or("an unknown scheduler"),
        r.env.kernel / 1000,
        r.env.kernel % 1000
    );
    let _ = writeln!(out, "{}", super::model_check::cpu_line(&r.cpu));
    let _ = writeln!(out, "workload: {} processes", w.streams.len());
    for l in workload_lines(r) {
        let _ = writeln!(out, "{l}");
    }
    out.push('\n');
    let mut cols = vec!["recorded".to_string()];
    cols.extend(runs.iter().map(|r| shorten(&r.config.label)));
    row(&mut out, "", &cols);
    let all: Vec<&Summary> = std::iter::once(recorded)
        .chain(runs.iter().map(|r| &r.summary))
        .collect();
    let line = |out: &mut String, label: &str, f: &dyn Fn(&Summary) -> String| {
        let v: Vec<String> = all.iter().map(|s| f(s)).collect();
        row(out, label, &v);
    };
    line(&mut out, "duration s", &|s| format!("{:.3}", s.duration_s));
    line(&mut out, "throughput MB/s", &|s| {
        format!("{:.3}", s.mb_per_s)
    });
    line(&mut out, "IOPS", &|s| format!("{:.1}", s.iops));
    line(&mut out, "requests", &|s| s.requests.to_string());
    line(&mut out, "merge ratio (bios/req)", &|s| {
        format!("{:.2}", s.merge_ratio)
    });
    line(&mut out, "Q2C mean ms", &|s| {
        format!("{:.3}", s.q2c_mean_ms)
    });
    line(&mut out, "D2C mean ms", &|s| {
        format!("{:.3}", s.d2c_mean_ms)
    });
    line(&mut out, "seek between dispatches MiB", &|s| {
        format!("{:.1}", s.d2d_seek_mean_sectors / 2048.0)
    });
    line(&mut out, "idle with I/O pending ms", &|s| {
        format!("{:.1}", s.idle_with_pending_ms)
    });
    line(&mut out, "utilization %", &|s| format!("{:.1}", s.util_pct));
    for p in &recorded.processes {
        let pid = p.pid;
        line(&mut out, &format!("{} MB/s", p.name), &|s| {
            s.process(pid)
                .map_or("-".into(), |p| format!("{:.3}", p.mb_per_s))
        });
        line(&mut out, &format!("{} Q2C ms", p.name), &|s| {
            s.process(pid)
                .map_or("-".into(), |p| format!("{:.2}", p.q2c_mean_ms))
        });
    }
    let charged: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            super::model_check::charge_line(&shorten(&run.config.label), run.cpu.as_ref()?)
        })
        .collect();
    if !charged.is_empty() {
        out.push('\n');
        for l in charged {
            let _ = writeln!(out, "{l}");
        }
    }
    let continued: Vec<String> = runs
        .iter()
        .filter_map(|run| Some((shorten(&run.config.label), run.continued.as_ref()?)))
        .map(|(label, c)| continued_text(&label, c))
        .collect();
    if !continued.is_empty() {
        out.push('\n');
        for l in continued {
            let _ = writeln!(out, "{l}");
        }
    }
    for run in runs {
        let c = &run.decision_counts;
        if c.in_service == 0 && c.throttled == 0 {
            continue;
        }
        let _ = writeln!(out, "\nmodel decisions under {}:", run.config.label);
        if c.in_service > 0 {
            let _ = writeln!(out, "  queue switches: {}", c.in_service);
            let _ = writeln!(out, "  expirations: {}", kv(&c.expirations));
            let _ = writeln!(out, "  idling began: {}", kv(&c.idles));
            let ms: Vec<String> = c
                .idle_ms_by_outcome
                .iter()
                .map(|(k, v)| format!("{k} {v:.1} ms"))
                .collect();
            let _ = writeln!(
                out,
                "  idle time by outcome: {}; with other queues waiting: {:.1} ms",
                if ms.is_empty() {
                    "none".into()
                } else {
                    ms.join(", ")
                },
                c.idle_ms_with_others_pending
            );
            let _ = writeln!(
                out,
                "  injections: {}, wakers detected: {}, weight raisings: {}, queue merges: {}",
                c.injections, c.wakers, c.raises, c.merges
            );
        }
        if let Some(l) = &run.log_comparison {
            let _ = writeln!(
                out,
                "  against BFQ's own log ({} messages in the trace): queue switches {} (log) vs \
                 {} (model); expirations log {} / model {}; {:.0}% of the log's expirations \
                 matched in order with the same process and reason",
                r.notes.len(),
                l.log_switches,
                l.model_switches,
                kv(&l.log_expirations),
                kv(&l.model_expirations),
                l.expirations_matched_pct
            );
            let _ = writeln!(
                out,
                "  closed-loop agreement (the model's own replay): {:.0}% of expirations at the \
                 same point with the same reason ({:.0}% at the same point)",
                l.agreement_pct, l.points_agreement_pct
            );
            if let Some(c) = &run.decision_check {
                let e = &c.expirations;
                let _ = writeln!(
                    out,
                    "  trace-driven agreement (the model fed the recorded requests and BFQ's \
                     state): {:.0}% of expirations at the same point with the same reason \
                     ({:.0}% at the same point; log {} / model {}); next queue as BFQ's in \
                     {:.0}% of {} switches; BFQ's state imposed {} times (expirations) and {} \
                     (switches)",
                    e.agreement_pct,
                    e.points_agreement_pct,
                    kv(&e.log_expirations),
                    kv(&e.model_expirations),
                    c.next_queue_agreement_pct,
                    c.next_queue_checked,
                    c.forced_expirations,
                    c.forced_switches
                );
            }
            if l.log_has_shared_queues {
                let _ = writeln!(
                    out,
                    "  BFQ merged queues of different processes (bfqSHARED, a queue its log \
                     names no process for): matched with the model's merged queue, when it has \
                     one"
                );
            }
        }
        if c.throttled > 0 {
            let _ = writeln!(out, "  throttled (domain out of tokens): {}", c.throttled);
        }
        if decisions > 0 {
            let _ = writeln!(out, "  first {decisions} decisions:");
            for d in run.decisions.iter().take(decisions) {
                let _ = writeln!(out, "    {}", decision_text(r, d));
            }
        }
    }
    out
}

/// One run's continuation, in a line: what, for how long, on what evidence.
pub(crate) fn continued_text(label: &str, c: &ContinuedNote) -> String {
    let p = &c.plan;
    let n = p.streams.len();
    let secs = p.runtime_ns as f64 / 1e9;
    let why = if p.time_bounded {
        format!(
            "each of them issued until {secs:.1} s after its first I/O: a time-bounded job \
             (fio --runtime)"
        )
    } else {
        "as asked (continue=1), to the recorded duration".to_string()
    };
    format!(
        "{label}: continued {n} stream{} for the recorded {secs:.1} s (+{} I/Os{}; {why}; \
         --set continue=0 replays only the recorded I/O)",
        if n == 1 { "" } else { "s" },
        c.added_ios,
        if c.cut {
            ", cut at the model's bound: a lower bound"
        } else {
            ""
        }
    )
}

fn shorten(label: &str) -> String {
    if label.len() <= 16 {
        label.to_string()
    } else {
        format!("{}…", &label[..15])
    }
}

fn kv(m: &std::collections::BTreeMap<&'static str, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One decision as a line, queues named after their process.
pub fn decision_text(r: &Replayer, d: &Decided) -> String {
    use iosched_model::sched::Decision::*;
    let n = |s: u32| r.workload.stream_name(s);
    let what = match &d.d {
        InService {
            stream,
            sync,
            budget,
        } => format!(
            "serve {}{}{}",
            n(*stream),
            if *sync { "" } else { " async" },
            // CFQ gives time slices, not budgets (see its slice decision).
            if *budget > 0 {
                format!(" (budget {budget} sectors)")
            } else {
                String::new()
            }
        ),
        Expire {
            stream,
            reason,
            served,
            ..
        } => format!(
            "expire {} ({}, served {served} sectors)",
            n(*stream),
            reason.name()
        ),
        Idle {
            stream,
            reason,
            slice_ns,
            others_pending,
        } => format!(
            "idle on {} for up to {:.1} ms ({}){}",
            n(*stream),
            *slice_ns as f64 / 1e6,
            reason.name(),
            if *others_pending {
                ", others waiting"
            } else {
                ""
            }
        ),
        IdleEnd {
            stream,
            outcome,
            waited_ns,
            ..
        } => format!(
            "idle on {} ended after {:.2} ms: {outcome:?}",
            n(*stream),
            *waited_ns as f64 / 1e6
        ),
        Inject { into, from, why } => {
            format!(
                "inject {}'s I/O while idling on {} ({why:?})",
                n(*from),
                n(*into)
            )
        }
        Waker { stream, waker } => format!("{} is woken by {}", n(*stream), n(*waker)),
        Raise {
            stream,
            coeff,
            duration_ns,
        } => format!(
            "raise {} x{coeff} for {:.1} s",
            n(*stream),
            *duration_ns as f64 / 1e9
        ),
        Throttled { domain } => format!("{domain} domain out of tokens"),
        Merge { stream, into, why } => {
            format!("merge {}'s queue into {}'s ({why:?})", n(*stream), n(*into))
        }
        Split { stream, from } => format!("split {} from {}'s shared queue", n(*stream), n(*from)),
        Slice {
            stream,
            sync,
            slice_ns,
        } => format!(
            "slice of {}{}: {:.1} ms",
            n(*stream),
            if *sync { "" } else { " async" },
            *slice_ns as f64 / 1e6
        ),
        GroupServed {
            stream,
            cgroup,
            weight,
            share_pct,
            charge,
            iops,
            ..
        } => format!(
            "charge {} (weight {weight}, {share_pct}% share) {} for {}",
            if *cgroup == 0 {
                "the root group".to_string()
            } else {
                format!("cgroup {cgroup}")
            },
            if *iops {
                format!("{charge} requests")
            } else {
                format!("{:.2} ms", *charge as f64 / 1e6)
            },
            n(*stream)
        ),
        WaitBusy {
            stream,
            cgroup,
            extend_ns,
        } => format!(
            "keep {} for its next request {:.1} ms more, the last busy queue of {} (wait_busy)",
            n(*stream),
            *extend_ns as f64 / 1e6,
            if *cgroup == 0 {
                "the root group".to_string()
            } else {
                format!("cgroup {cgroup}")
            }
        ),
    };
    format!("{:>12.6} s  {what}", d.t as f64 / 1e9)
}
