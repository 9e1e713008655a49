//! Drawing the [`App`]: a pure function of its state onto a ratatui frame (no I/O, no clock),
//! so any size renders in tests against `TestBackend`.
//!
//! Layout, top to bottom: device header (2 lines), process table, charts (throughput, queue
//! depth, the selected row's latency histogram), the selected row's recent requests on a time
//! axis, the key line. Columns of lesser priority are left out on narrow terminals.

use iosched_core::units::short_ns;
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row as TableRow, Sparkline, Table},
};

use super::{
    app::{App, Row, SortKey},
    interval::{HIST_BUCKETS, RecentIo},
};

fn opt_ns(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), short_ns)
}

/// A table column: title, width, the sort key it shows, how to print a row's value.
pub(super) struct Column {
    pub title: &'static str,
    pub width: u16,
    pub key: SortKey,
    /// Lower is kept first when the terminal is narrow.
    pub priority: u8,
    pub value: fn(&Row) -> String,
}

const COLUMNS: &[Column] = &[
    Column {
        title: "PID",
        width: 7,
        key: SortKey::Id,
        priority: 0,
        value: |r| r.id.clone(),
    },
    Column {
        title: "COMM",
        width: 15,
        key: SortKey::Comm,
        priority: 0,
        value: |r| r.comm.clone(),
    },
    Column {
        title: "rIOPS",
        width: 6,
        key: SortKey::ReadIops,
        priority: 1,
        value: |r| format!("{:.0}", r.read_iops),
    },
    Column {
        title: "rMB/s",
        width: 6,
        key: SortKey::ReadMbs,
        priority: 1,
        value: |r| format!("{:.2}", r.read_mbs),
    },
    Column {
        title: "wIOPS",
        width: 6,
        key: SortKey::WriteIops,
        priority: 1,
        value: |r| format!("{:.0}", r.write_iops),
    },
    Column {
        title: "wMB/s",
        width: 6,
        key: SortKey::WriteMbs,
        priority: 1,
        value: |r| format!("{:.2}", r.write_mbs),
    },
    Column {
        title: "Q2D50",
        width: 6,
        key: SortKey::Q2dP50,
        priority: 2,
        value: |r| opt_ns(r.q2d_p50),
    },
    Column {
        title: "Q2D99",
        width: 6,
        key: SortKey::Q2dP99,
        priority: 2,
        value: |r| opt_ns(r.q2d_p99),
    },
    Column {
        title: "D2C50",
        width: 6,
        key: SortKey::D2cP50,
        priority: 2,
        value: |r| opt_ns(r.d2c_p50),
    },
    Column {
        title: "D2C99",
        width: 6,
        key: SortKey::D2cP99,
        priority: 2,
        value: |r| opt_ns(r.d2c_p99),
    },
    Column {
        title: "MRG",
        width: 4,
        key: SortKey::Merges,
        priority: 4,
        value: |r| r.merges_per_rq.map_or("-".into(), |m| format!("{m:.1}")),
    },
    Column {
        title: "SEQ%",
        width: 4,
        key: SortKey::Sequential,
        priority: 4,
        value: |r| r.seq_pct.map_or("-".into(), |s| format!("{s:.0}")),
    },
    Column {
        title: "THINK",
        width: 6,
        key: SortKey::Think,
        priority: 3,
        value: |r| opt_ns(r.think_p50),
    },
    Column {
        title: "WASTE+",
        width: 6,
        key: SortKey::WasteCaused,
        priority: 3,
        value: |r| short_ns(r.waste_caused_ns),
    },
    Column {
        title: "WASTE-",
        width: 6,
        key: SortKey::WasteSuffered,
        priority: 3,
        value: |r| short_ns(r.waste_suffered_ns),
    },
];

/// The columns that fit in `width`, in table order.
pub(super) fn columns_for(width: u16) -> Vec<&'static Column> {
    let mut chosen: Vec<bool> = vec![false; COLUMNS.len()];
    let mut used = 0u16;
    for priority in 0..=4 {
        for (i, c) in COLUMNS.iter().enumerate() {
            if c.priority == priority && used + c.width < width {
                chosen[i] = true;
                used += c.width + 1;
            }
        }
    }
    COLUMNS
        .iter()
        .zip(chosen)
        .filter(|(_, keep)| *keep)
        .map(|(c, _)| c)
        .collect()
}

pub fn render(app: &App, frame: &mut Frame) {
    let area = frame.area();
    let [header, table, charts, strip, keys] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(if area.height >= 40 { 9 } else { 5 }),
        Constraint::Length(3),
        Constraint::Length(1),
    ])
    .areas(area);
    render_header(app, frame, header);
    render_table(app, frame, table);
    render_charts(app, frame, charts);
    render_strip(app, frame, strip);
    render_keys(app, frame, keys);
    if app.help {
        render_help(frame, area);
    }
}

pub(super) fn tunables(info: &iosched_core::record::DeviceInfo) -> String {
    let wanted: &[&str] = match info.scheduler.as_deref() {
        Some("bfq") => &["slice_idle", "low_latency"],
        Some("mq-deadline") => &["read_expire", "write_expire", "fifo_batch"],
        Some("kyber") => &["read_lat_nsec", "write_lat_nsec"],
        _ => &[],
    };
    wanted
        .iter()
        .filter_map(|k| info.iosched.get(*k).map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn render_header(app: &App, frame: &mut Frame, area: Rect) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut first = vec![Span::styled("iosched-trace live ", bold)];
    let Some(d) = app.current() else {
        let name = app.devices.get(app.device).map_or("-", |(_, n)| n.as_str());
        first.push(Span::raw(format!(
            "{name}: waiting for the first {:.1} s interval...",
            app.interval.as_secs_f64()
        )));
        frame.render_widget(Paragraph::new(vec![Line::from(first)]), area);
        return;
    };
    let snap = app.latest.as_ref().expect("current() found one");
    let at = snap
        .to_ns
        .saturating_sub(app.started_ns.unwrap_or(snap.from_ns)) as f64
        / 1e9;
    first.push(Span::styled(d.info.name.clone(), bold));
    if app.devices.len() > 1 {
        first.push(Span::raw(format!(
            " [{}/{}]",
            app.device + 1,
            app.devices.len()
        )));
    }
    first.push(Span::raw(format!(
        " {}{} | lost {} ({} total){} | t+{at:.0}s | {}",
        d.info.scheduler.as_deref().unwrap_or("?"),
        if app.paused { " | PAUSED" } else { "" },
        snap.lost,
        snap.lost_total,
        match snap.untraced_total {
            0 => String::new(),
            n => format!(" | untraced {n}"),
        },
        tunables(&d.info),
    )));
    let second = match d.report.devices.first() {
        Some(r) => format!(
            "R {:.0} IOPS {:.2} MB/s  W {:.0} IOPS {:.2} MB/s  sched {} drv {} (mean {:.1}/{:.1})  util {:.0}%  idle-wait {:.1}%",
            r.read.iops,
            r.read.mb_per_s,
            r.write.iops,
            r.write.mb_per_s,
            d.pending_now,
            d.in_driver_now,
            r.queue_depth.scheduler_mean,
            r.queue_depth.driver_mean,
            r.util_pct,
            r.idle_with_pending_pct,
        ),
        None => format!(
            "no I/O this interval  sched {} drv {}",
            d.pending_now, d.in_driver_now
        ),
    };
    frame.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}

fn render_table(app: &App, frame: &mut Frame, area: Rect) {
    let rows = app.rows();
    // The marker column takes 2.
    let cols = columns_for(area.width.saturating_sub(2));
    let title = format!(
        " {} by {}{}{} ",
        if app.by_cgroup {
            "cgroups"
        } else {
            "processes"
        },
        app.sort.name(),
        if app.filter.is_empty() && !app.editing_filter {
            String::new()
        } else {
            format!(", comm ~ '{}'", app.filter)
        },
        if app.editing_filter { "_" } else { "" },
    );
    let header = TableRow::new(std::iter::once(Cell::from(" ")).chain(cols.iter().map(|c| {
        let style = if c.key == app.sort {
            Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        };
        let title = if c.key == SortKey::Id && app.by_cgroup {
            "CGROUP"
        } else {
            c.title
        };
        Cell::from(title).style(style)
    })));
    // Border (2) and header (1) take 3 lines.
    let visible = area.height.saturating_sub(3) as usize;
    let selected = app.selected_index(&rows);
    let offset = selected.map_or(0, |s| (s + 1).saturating_sub(visible));
    let body = rows
        .iter()
        .enumerate()
        .skip(offset)
        .take(visible)
        .map(|(i, r)| {
            // A marker as well as the style: it survives a plain-text capture of the screen.
            let marker = if Some(i) == selected { ">" } else { " " };
            let row = TableRow::new(
                std::iter::once(Cell::from(marker))
                    .chain(cols.iter().map(|c| Cell::from((c.value)(r)))),
            );
            if Some(i) == selected {
                row.style(Style::default().add_modifier(Modifier::REVERSED))
            } else {
                row
            }
        });
    let widths: Vec<Constraint> = std::iter::once(Constraint::Length(1))
        .chain(cols.iter().map(|c| Constraint::Length(c.width)))
        .collect();
    let table = Table::new(body, widths)
        .header(header)
        .block(Block::default().borders(Borders::TOP).title(title));
    frame.render_widget(table, area);
}

fn render_charts(app: &App, frame: &mut Frame, area: Rect) {
    let [throughput, depth, hist] = Layout::horizontal([
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
        Constraint::Ratio(1, 3),
    ])
    .areas(area);
    let history = app.history();
    let tail = |w: u16| history.len().saturating_sub(w.saturating_sub(0) as usize);
    // Sparklines are integers: MB/s and depth in hundredths.
    let mbs: Vec<u64> = history[tail(throughput.width)..]
        .iter()
        .map(|p| ((p.read_mbs + p.write_mbs) * 100.0) as u64)
        .collect();
    let peak = history
        .iter()
        .map(|p| p.read_mbs + p.write_mbs)
        .fold(0.0, f64::max);
    frame.render_widget(
        Sparkline::default()
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(format!(" MB/s (peak {peak:.2}) ")),
            )
            .data(&mbs)
            .style(Style::default().fg(Color::Green)),
        throughput,
    );
    let [sched, drv] =
        Layout::vertical([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(depth);
    let sched_data: Vec<u64> = history[tail(depth.width)..]
        .iter()
        .map(|p| (p.scheduler_mean * 100.0) as u64)
        .collect();
    let drv_data: Vec<u64> = history[tail(depth.width)..]
        .iter()
        .map(|p| (p.driver_mean * 100.0) as u64)
        .collect();
    let last = history.last().copied().unwrap_or_default();
    frame.render_widget(
        Sparkline::default()
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(format!(" depth sched {:.1} ", last.scheduler_mean)),
            )
            .data(&sched_data)
            .style(Style::default().fg(Color::Yellow)),
        sched,
    );
    frame.render_widget(
        Sparkline::default()
            .block(
                Block::default()
                    .borders(Borders::TOP)
                    .title(format!(" driver {:.1} ", last.driver_mean)),
            )
            .data(&drv_data)
            .style(Style::default().fg(Color::Cyan)),
        drv,
    );
    render_hist(app, frame, hist);
}

fn render_hist(app: &App, frame: &mut Frame, area: Rect) {
    let block = Block::default()
        .borders(Borders::TOP)
        .title(" latency 1us..32ms+ (log2) ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(h) = app.selected_hist() else {
        frame.render_widget(Paragraph::new("no row selected"), inner);
        return;
    };
    let [q2d, d2c] =
        Layout::vertical([Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(inner);
    for (label, data, rect, color) in [
        ("Q2D", &h.q2d, q2d, Color::Yellow),
        ("D2C", &h.d2c, d2c, Color::Cyan),
    ] {
        let [name, bars] =
            Layout::horizontal([Constraint::Length(4), Constraint::Min(1)]).areas(rect);
        frame.render_widget(Paragraph::new(label), name);
        let width = (bars.width as usize).min(HIST_BUCKETS);
        frame.render_widget(
            Sparkline::default()
                .data(&data[..width])
                .style(Style::default().fg(color)),
            bars,
        );
    }
}

/// One character per time slice of the interval: `#` a request of the row in the device,
/// `-` one waiting (queued, in the scheduler), blank nothing.
pub fn strip_line(recent: &[RecentIo], from: u64, to: u64, width: usize) -> String {
    if width == 0 || to <= from {
        return String::new();
    }
    let span = to - from;
    let cell =
        |t: u64| ((t.clamp(from, to) - from) as u128 * width as u128 / span as u128) as usize;
    let mut state = vec![0u8; width];
    for r in recent {
        let d = r.d.unwrap_or(r.c);
        let q = r.q.unwrap_or(d);
        if r.c < from || q >= to {
            continue;
        }
        for s in state
            .iter_mut()
            .take(cell(d).min(width - 1) + 1)
            .skip(cell(q))
        {
            *s = (*s).max(1);
        }
        for s in state
            .iter_mut()
            .take(cell(r.c).min(width - 1) + 1)
            .skip(cell(d))
        {
            *s = 2;
        }
    }
    state
        .iter()
        .map(|s| match s {
            2 => '#',
            1 => '-',
            _ => ' ',
        })
        .collect()
}

fn render_strip(app: &App, frame: &mut Frame, area: Rect) {
    let recent = app.selected_recent();
    let label = app
        .rows()
        .get(app.selected_index(&app.rows()).unwrap_or(usize::MAX))
        .map_or_else(String::new, |r| format!("{} {}", r.id, r.comm));
    let block = Block::default().borders(Borders::TOP).title(format!(
        " last {} I/Os of {label}: - waiting  # in device ",
        recent.len()
    ));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(snap) = app.latest.as_ref() else {
        return;
    };
    let line = strip_line(&recent, snap.from_ns, snap.to_ns, inner.width as usize);
    frame.render_widget(Paragraph::new(line), inner);
}

fn render_keys(app: &App, frame: &mut Frame, area: Rect) {
    let text = if let Some(e) = &app.error {
        format!("capture stopped: {e} (q quits)")
    } else if app.editing_filter {
        format!("filter comm: {}_  (Enter keep, Esc clear)", app.filter)
    } else {
        "q quit  jk/arrows select  s sort  c cgroups  d device  p pause  / filter  ? help"
            .to_string()
    };
    frame.render_widget(
        Paragraph::new(text).style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
    );
}

const HELP: &[&str] = &[
    "q, Esc     quit",
    "Up/k Down/j select a row (drives the panes below)",
    "s          cycle the sort column",
    "c          processes <-> cgroups",
    "d          next device",
    "p          pause / resume",
    "/          filter by comm (Enter keeps, Esc clears)",
    "?          this help",
    "",
    "Q2D: queued -> issued to the driver (plug + scheduler)",
    "D2C: issued -> completed (the device)",
    "WASTE+/-: idle-with-pending time caused / suffered",
    "MRG: bios merged per request; THINK: p50 think time",
];

fn render_help(frame: &mut Frame, area: Rect) {
    let w = 60.min(area.width);
    let h = (HELP.len() as u16 + 2).min(area.height);
    let rect = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(HELP.iter().map(|l| Line::from(*l)).collect::<Vec<_>>())
            .block(Block::default().borders(Borders::ALL).title(" help ")),
        rect,
    );
}
