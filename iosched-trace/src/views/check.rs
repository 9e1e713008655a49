//! `check`'s text: one line per fact about the host, a key then what it means for tracing,
//! and the verdict last.
//!
//! Owns: the words. Must not: read the host (`host`) or decide the verdict
//! (`HostFacts::problems`, the trial load).

use std::fmt::Write as _;

use iosched_core::units::{BytesStyle, human_bytes};

use crate::host::{HostFacts, Load, Presence};

fn line(out: &mut String, key: &str, text: impl std::fmt::Display) {
    let _ = writeln!(out, "{key:<12} {text}");
}

pub fn render(facts: &HostFacts, load: &Load, problems: &[String]) -> String {
    let mut out = String::new();
    line(
        &mut out,
        "kernel",
        facts.kernel_release.as_deref().unwrap_or("unknown"),
    );
    let btf = &facts.btf;
    let vmlinux = match (btf.vmlinux_bytes, &btf.error) {
        (None, _) => "vmlinux no (CONFIG_DEBUG_INFO_BTF is off: cannot trace)".to_string(),
        (Some(_), Some(e)) => format!("vmlinux unreadable: {e}"),
        (Some(n), None) => format!(
            "vmlinux yes ({})",
            human_bytes(n as f64, BytesStyle::UpToGib)
        ),
    };
    let modules = if btf.modules.is_empty() {
        "no loaded module has BTF".to_string()
    } else {
        format!("modules with BTF: {}", btf.modules.join(" "))
    };
    line(&mut out, "btf", format!("{vmlinux}; {modules}"));
    line(
        &mut out,
        "lockdown",
        match &facts.lockdown.mode {
            Some(mode) if facts.lockdown.forbids_tracing() => {
                format!("{mode}: BPF may not read kernel memory, cannot trace")
            }
            Some(mode) => format!("{mode} ({})", facts.lockdown.source),
            None => format!("unknown: {}", facts.lockdown.source),
        },
    );
    let caps = &facts.capabilities;
    let who = if caps.uid == 0 {
        "root".to_string()
    } else {
        format!("uid {}", caps.uid)
    };
    line(
        &mut out,
        "privileges",
        if caps.missing.is_empty() {
            format!("{who}, with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN")
        } else {
            format!(
                "{who}, missing {}: cannot load programs",
                caps.missing.join(", ")
            )
        },
    );
    line(
        &mut out,
        "programs",
        if facts.programs_embedded {
            format!(
                "embedded ({} of eBPF)",
                human_bytes(facts.programs_bytes as f64, BytesStyle::UpToGib)
            )
        } else {
            "none in this binary (built with AYA_BUILD_SKIP)".to_string()
        },
    );
    for t in &facts.tracepoints {
        let role = match (t.required, t.when) {
            (true, "always") => "required".to_string(),
            // block_plug: needed only where plugs are events (--plug-events).
            (true, when) => format!("required with {when}"),
            (false, "always") => "optional".to_string(),
            (false, when) => format!("optional, with {when}"),
        };
        line(
            &mut out,
            "tracepoint",
            match &t.missing {
                None => format!("{} yes ({role})", t.name),
                Some(why) => format!("{} no: {why} ({role})", t.name),
            },
        );
    }
    let blk = &facts.blk_tracer;
    line(
        &mut out,
        "blk tracer",
        match (&blk.tracefs, blk.available) {
            (None, _) => "unknown: tracefs is not mounted".to_string(),
            (Some(at), _) if !blk.readable => {
                format!("unknown: {} is root's to read", at.display())
            }
            (Some(_), false) => "no (CONFIG_BLK_DEV_IO_TRACE is off): no BFQ log".to_string(),
            (Some(at), true) => format!(
                "yes, in {} (current tracer {}): BFQ's log can be read",
                at.display(),
                blk.current.as_deref().unwrap_or("unknown")
            ),
        },
    );
    line(
        &mut out,
        "sched-log",
        format!(
            "{}: {}",
            if facts.sched_log.works { "yes" } else { "no" },
            facts.sched_log.note
        ),
    );
    for s in &facts.schedulers {
        let presence = match s.presence {
            Presence::BuiltIn => "built in",
            Presence::Registered => "built in (registered; no module list to tell)",
            Presence::ModuleLoaded => "module, loaded",
            Presence::ModuleNotLoaded => "module, not loaded",
            Presence::Absent => "not in this kernel",
        };
        let hint = if s.presence == Presence::ModuleNotLoaded {
            format!(" (modprobe {})", s.module)
        } else {
            String::new()
        };
        line(
            &mut out,
            "scheduler",
            format!("{}: {presence}{hint}", s.name),
        );
    }
    if facts.devices.is_empty() {
        line(&mut out, "device", "none found in /sys/block");
    }
    for d in &facts.devices {
        line(
            &mut out,
            "device",
            if d.request_based {
                format!(
                    "{} ({}): request-based, scheduler {}",
                    d.name,
                    d.dev,
                    d.scheduler.as_deref().unwrap_or("unknown")
                )
            } else {
                format!(
                    "{} ({}): bio-based, no request events (only Q and bio completions)",
                    d.name, d.dev
                )
            },
        );
    }
    line(
        &mut out,
        "load",
        match (&load.error, load.tried) {
            (_, false) => "not tried".to_string(),
            (Some(e), true) => format!("failed: {e}"),
            (None, true) => {
                let mut s = format!(
                    "{} programs loaded and attached, then detached",
                    load.attached.len()
                );
                for (name, why) in &load.skipped {
                    let _ = write!(s, "; {name} not attached: {why}");
                }
                s
            }
        },
    );
    line(
        &mut out,
        "verdict",
        if problems.is_empty() {
            "recording will work".to_string()
        } else {
            format!("recording will NOT work: {}", problems.join("; "))
        },
    );
    out
}
