//! `live --batch`: one plain-text block (like `top -b`, `iostat`) or one JSON line per
//! interval, on stdout, no terminal needed. The text is the screen's table; the JSON is the
//! interval's [`Snapshot`] (each device's `report` has `report --json`'s schema), with
//! absolute trace times, so an interval can be compared with `report --from --to`.

use std::{io::Write, sync::mpsc::RecvTimeoutError, time::Duration};

use super::{
    app::App,
    interval::Snapshot,
    ui::{columns_for, tunables},
};

/// The longest a signal waits to be noticed between intervals.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// Width of the text table: every column.
const TEXT_WIDTH: u16 = 200;

/// The text block of the app's latest interval, every device.
pub fn text(app: &mut App) -> String {
    let mut out = String::new();
    let Some(snap) = app.latest.as_ref() else {
        return out;
    };
    let (from, to) = (snap.from_ns, snap.to_ns);
    let (lost, lost_total) = (snap.lost, snap.lost_total);
    let untraced = match snap.untraced_total {
        0 => String::new(),
        n => format!(" untraced completions {n}"),
    };
    let at = to.saturating_sub(app.started_ns.unwrap_or(from)) as f64 / 1e9;
    let devices = app.devices.len();
    let keep = app.device;
    for i in 0..devices {
        app.device = i;
        let Some(d) = app.current() else {
            continue;
        };
        out.push_str(&format!(
            "{} {} {} t+{at:.1}s [{:.3}..{:.3}] lost {lost} ({lost_total} total){untraced}\n",
            d.info.name,
            d.info.scheduler.as_deref().unwrap_or("?"),
            tunables(&d.info),
            from as f64 / 1e9,
            to as f64 / 1e9,
        ));
        match d.report.devices.first() {
            Some(r) => out.push_str(&format!(
                "  read {:.0} IOPS {:.2} MB/s  write {:.0} IOPS {:.2} MB/s  sched {} drv {} (mean {:.2}/{:.2})  util {:.1}%  idle-wait {:.1}%\n",
                r.read.iops,
                r.read.mb_per_s,
                r.write.iops,
                r.write.mb_per_s,
                d.pending_now,
                d.in_driver_now,
                r.queue_depth.scheduler_mean,
                r.queue_depth.driver_mean,
                r.util_pct,
                r.idle_with_pending_pct
            )),
            None => out.push_str("  no I/O\n"),
        }
        let cols = columns_for(TEXT_WIDTH);
        let line = |cells: Vec<String>| {
            let mut l = String::from(" ");
            for (c, v) in cols.iter().zip(cells) {
                let w = usize::from(c.width);
                let v: String = v.chars().take(w).collect();
                if c.title == "COMM" {
                    l.push_str(&format!(" {v:<w$}"));
                } else {
                    l.push_str(&format!(" {v:>w$}"));
                }
            }
            l.push('\n');
            l
        };
        let rows = app.rows();
        if !rows.is_empty() {
            out.push_str(&line(cols.iter().map(|c| c.title.to_string()).collect()));
            for r in &rows {
                out.push_str(&line(cols.iter().map(|c| (c.value)(r)).collect()));
            }
        }
    }
    app.device = keep;
    out.push('\n');
    out
}

/// One JSON line for an interval.
pub fn json_line(snapshot: &Snapshot) -> serde_json::Result<String> {
    let mut s = serde_json::to_string(snapshot)?;
    s.push('\n');
    Ok(s)
}

/// Prints intervals until `count` have been printed (or forever); stops on a closed pipe.
pub fn run(
    collector: &super::collector::Collector,
    app: &mut App,
    json: bool,
    count: Option<u64>,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut printed = 0u64;
    while count.is_none_or(|c| printed < c) {
        let msg = match collector.rx.recv_timeout(SIGNAL_POLL) {
            Ok(msg) => msg,
            Err(RecvTimeoutError::Timeout) if super::stop::requested() => return Ok(()),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => anyhow::bail!("the collector stopped"),
        };
        let snapshot = match msg {
            super::collector::Message::Snapshot(s) => *s,
            super::collector::Message::Failed(e) => anyhow::bail!("capture failed: {e}"),
        };
        let text = if json {
            json_line(&snapshot)?
        } else {
            app.on_snapshot(snapshot);
            text(app)
        };
        let mut out = stdout.lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            other => other?,
        }
        printed += 1;
    }
    Ok(())
}
