//! The live view's state and its one way of changing: key -> [`Action`] -> [`App::update`];
//! finished intervals arrive through [`App::on_snapshot`]. Everything the screen and the batch
//! output show is derived here ([`App::rows`], [`App::history`]), so it is tested without a
//! terminal.
//!
//! Owns: selection, sorting, filtering, the history of intervals. Must not: do I/O, render.

use std::{collections::VecDeque, time::Duration};

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use rustc_hash::FxHashMap;

use iosched_core::{analysis::report::ProcessReport, event::Dev};

use super::interval::{DeviceSnapshot, LatencyHist, RecentIo, Snapshot};

/// What a key asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    Up,
    Down,
    CycleSort,
    ToggleCgroups,
    NextDevice,
    TogglePause,
    ToggleHelp,
    StartFilter,
    FilterChar(char),
    FilterBackspace,
    FilterDone,
    FilterCancel,
}

/// The key bindings; `editing` is true while the `/` filter prompt is open.
pub fn action_for(key: KeyEvent, editing: bool) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
        return Some(Action::Quit);
    }
    if editing {
        return match key.code {
            KeyCode::Enter => Some(Action::FilterDone),
            KeyCode::Esc => Some(Action::FilterCancel),
            KeyCode::Backspace => Some(Action::FilterBackspace),
            KeyCode::Char(c) => Some(Action::FilterChar(c)),
            _ => None,
        };
    }
    Some(match key.code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::Char('s') => Action::CycleSort,
        KeyCode::Char('c') => Action::ToggleCgroups,
        KeyCode::Char('d') => Action::NextDevice,
        KeyCode::Char('p') => Action::TogglePause,
        KeyCode::Char('?') => Action::ToggleHelp,
        KeyCode::Char('/') => Action::StartFilter,
        _ => return None,
    })
}

/// What the table is sorted by (largest first, except the identity columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Throughput,
    ReadIops,
    ReadMbs,
    WriteIops,
    WriteMbs,
    Q2dP50,
    Q2dP99,
    D2cP50,
    D2cP99,
    Merges,
    Sequential,
    Think,
    WasteCaused,
    WasteSuffered,
    Id,
    Comm,
}

impl SortKey {
    pub const ALL: [SortKey; 16] = [
        SortKey::Throughput,
        SortKey::ReadIops,
        SortKey::ReadMbs,
        SortKey::WriteIops,
        SortKey::WriteMbs,
        SortKey::Q2dP50,
        SortKey::Q2dP99,
        SortKey::D2cP50,
        SortKey::D2cP99,
        SortKey::Merges,
        SortKey::Sequential,
        SortKey::Think,
        SortKey::WasteCaused,
        SortKey::WasteSuffered,
        SortKey::Id,
        SortKey::Comm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Throughput => "total MB/s",
            SortKey::ReadIops => "read IOPS",
            SortKey::ReadMbs => "read MB/s",
            SortKey::WriteIops => "write IOPS",
            SortKey::WriteMbs => "write MB/s",
            SortKey::Q2dP50 => "Q2D p50",
            SortKey::Q2dP99 => "Q2D p99",
            SortKey::D2cP50 => "D2C p50",
            SortKey::D2cP99 => "D2C p99",
            SortKey::Merges => "merges/rq",
            SortKey::Sequential => "seq %",
            SortKey::Think => "think",
            SortKey::WasteCaused => "waste caused",
            SortKey::WasteSuffered => "waste suffered",
            SortKey::Id => "pid/cgroup",
            SortKey::Comm => "comm",
        }
    }

    fn next(self) -> SortKey {
        let i = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(i + 1) % SortKey::ALL.len()]
    }
}

/// One line of the table: a process, or a cgroup (its processes summed).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// pid, or cgroup id.
    pub key: u64,
    /// pid, or cgroup path (id where unknown).
    pub id: String,
    pub comm: String,
    pub read_iops: f64,
    pub read_mbs: f64,
    pub write_iops: f64,
    pub write_mbs: f64,
    pub q2d_p50: Option<u64>,
    pub q2d_p99: Option<u64>,
    pub d2c_p50: Option<u64>,
    pub d2c_p99: Option<u64>,
    /// Bios merged into another's request, per request completed.
    pub merges_per_rq: Option<f64>,
    pub seq_pct: Option<f64>,
    pub think_p50: Option<u64>,
    pub waste_caused_ns: u64,
    pub waste_suffered_ns: u64,
    /// The processes behind the row (one for a process row).
    pub pids: Vec<u32>,
}

impl Row {
    fn sort_value(&self, key: SortKey) -> f64 {
        let ns = |v: Option<u64>| v.map_or(-1.0, |v| v as f64);
        match key {
            SortKey::Throughput => self.read_mbs + self.write_mbs,
            SortKey::ReadIops => self.read_iops,
            SortKey::ReadMbs => self.read_mbs,
            SortKey::WriteIops => self.write_iops,
            SortKey::WriteMbs => self.write_mbs,
            SortKey::Q2dP50 => ns(self.q2d_p50),
            SortKey::Q2dP99 => ns(self.q2d_p99),
            SortKey::D2cP50 => ns(self.d2c_p50),
            SortKey::D2cP99 => ns(self.d2c_p99),
            SortKey::Merges => self.merges_per_rq.unwrap_or(-1.0),
            SortKey::Sequential => self.seq_pct.unwrap_or(-1.0),
            SortKey::Think => ns(self.think_p50),
            SortKey::WasteCaused => self.waste_caused_ns as f64,
            SortKey::WasteSuffered => self.waste_suffered_ns as f64,
            SortKey::Id | SortKey::Comm => 0.0,
        }
    }
}

fn process_row(p: &ProcessReport) -> Row {
    let lat = |stage: &str, p99: bool| {
        p.latency
            .get(stage)
            .filter(|l| l.count > 0)
            .map(|l| if p99 { l.p99_ns } else { l.p50_ns })
    };
    Row {
        key: u64::from(p.pid),
        id: p.pid.to_string(),
        comm: p.comm.clone(),
        read_iops: p.read.iops,
        read_mbs: p.read.mb_per_s,
        write_iops: p.write.iops,
        write_mbs: p.write.mb_per_s,
        q2d_p50: lat("q2d", false),
        q2d_p99: lat("q2d", true),
        d2c_p50: lat("d2c", false),
        d2c_p99: lat("d2c", true),
        merges_per_rq: (p.requests > 0)
            .then(|| p.bios_queued.saturating_sub(p.requests) as f64 / p.requests as f64),
        seq_pct: (p.requests > 0).then_some(p.sequential_pct),
        think_p50: (p.think_time.count > 0).then_some(p.think_time.p50_ns),
        waste_caused_ns: p.idle_waste_caused_ns,
        waste_suffered_ns: p.idle_waste_suffered_ns,
        pids: vec![p.pid],
    }
}

/// A cgroup's row: counts and rates are sums over its processes (exact: each bio and request
/// has one submitter); latencies are the cgroup's own distributions from the report.
fn cgroup_rows(d: &DeviceSnapshot) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for c in &d.report.cgroups {
        let lat = |stage: &str, p99: bool| {
            c.latency
                .get(stage)
                .filter(|l| l.count > 0)
                .map(|l| if p99 { l.p99_ns } else { l.p50_ns })
        };
        let members: Vec<&ProcessReport> = d
            .report
            .processes
            .iter()
            .filter(|p| p.cgroup_id == c.cgroup_id)
            .collect();
        let mut comms: Vec<String> = members.iter().map(|p| p.comm.clone()).collect();
        comms.sort();
        comms.dedup();
        let sum = |f: fn(&ProcessReport) -> f64| members.iter().map(|p| f(p)).sum::<f64>();
        rows.push(Row {
            key: c.cgroup_id,
            id: c.cgroup.clone(),
            comm: comms.join(","),
            read_iops: sum(|p| p.read.iops),
            read_mbs: sum(|p| p.read.mb_per_s),
            write_iops: sum(|p| p.write.iops),
            write_mbs: sum(|p| p.write.mb_per_s),
            q2d_p50: lat("q2d", false),
            q2d_p99: lat("q2d", true),
            d2c_p50: lat("d2c", false),
            d2c_p99: lat("d2c", true),
            merges_per_rq: (c.requests > 0)
                .then(|| c.bios_queued.saturating_sub(c.requests) as f64 / c.requests as f64),
            seq_pct: None,
            think_p50: None,
            waste_caused_ns: members.iter().map(|p| p.idle_waste_caused_ns).sum(),
            waste_suffered_ns: members.iter().map(|p| p.idle_waste_suffered_ns).sum(),
            pids: members.iter().map(|p| p.pid).collect(),
        });
    }
    rows
}

/// One device over one interval, for the charts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    pub to_ns: u64,
    pub read_mbs: f64,
    pub write_mbs: f64,
    pub iops: f64,
    pub scheduler_mean: f64,
    pub driver_mean: f64,
}

pub struct App {
    pub interval: Duration,
    /// Intervals kept for the charts.
    pub history_len: usize,
    /// Devices in the order `d` cycles through.
    pub devices: Vec<(Dev, String)>,
    pub device: usize,
    history: FxHashMap<Dev, VecDeque<Point>>,
    pub latest: Option<Snapshot>,
    /// Trace time of the first interval's start (for relative times).
    pub started_ns: Option<u64>,
    pub sort: SortKey,
    pub by_cgroup: bool,
    pub paused: bool,
    /// Intervals that arrived while paused (not shown).
    pub missed: u64,
    pub help: bool,
    pub filter: String,
    pub editing_filter: bool,
    /// The selected row's key (kept across updates and re-sorting).
    pub selected: Option<u64>,
    pub quit: bool,
    /// Set when the collector failed.
    pub error: Option<String>,
}

impl App {
    pub fn new(devices: Vec<(Dev, String)>, interval: Duration, history_len: usize) -> App {
        App {
            interval,
            history_len: history_len.max(2),
            devices,
            device: 0,
            history: FxHashMap::default(),
            latest: None,
            started_ns: None,
            sort: SortKey::Throughput,
            by_cgroup: false,
            paused: false,
            missed: 0,
            help: false,
            filter: String::new(),
            editing_filter: false,
            selected: None,
            quit: false,
            error: None,
        }
    }

    pub fn on_snapshot(&mut self, s: Snapshot) {
        if self.paused {
            self.missed += 1;
            return;
        }
        self.started_ns.get_or_insert(s.from_ns);
        for d in &s.devices {
            if !self.devices.iter().any(|(dev, _)| *dev == d.info.dev) {
                self.devices.push((d.info.dev, d.info.name.clone()));
            }
            let point = match d.report.devices.first() {
                Some(r) => Point {
                    to_ns: s.to_ns,
                    read_mbs: r.read.mb_per_s,
                    write_mbs: r.write.mb_per_s,
                    iops: r.read.iops + r.write.iops + r.other.iops,
                    scheduler_mean: r.queue_depth.scheduler_mean,
                    driver_mean: r.queue_depth.driver_mean,
                },
                // Nothing happened on it: an idle interval.
                None => Point {
                    to_ns: s.to_ns,
                    ..Default::default()
                },
            };
            let h = self.history.entry(d.info.dev).or_default();
            h.push_back(point);
            while h.len() > self.history_len {
                h.pop_front();
            }
        }
        self.latest = Some(s);
        self.fix_selection();
    }

    pub fn update(&mut self, action: Action) {
        match action {
            Action::Quit => self.quit = true,
            Action::Up => self.move_selection(-1),
            Action::Down => self.move_selection(1),
            Action::CycleSort => {
                self.sort = self.sort.next();
                self.fix_selection();
            }
            Action::ToggleCgroups => {
                self.by_cgroup = !self.by_cgroup;
                self.selected = None;
                self.fix_selection();
            }
            Action::NextDevice => {
                if !self.devices.is_empty() {
                    self.device = (self.device + 1) % self.devices.len();
                }
                self.selected = None;
                self.fix_selection();
            }
            Action::TogglePause => self.paused = !self.paused,
            Action::ToggleHelp => self.help = !self.help,
            Action::StartFilter => self.editing_filter = true,
            Action::FilterChar(c) => {
                self.filter.push(c);
                self.fix_selection();
            }
            Action::FilterBackspace => {
                self.filter.pop();
                self.fix_selection();
            }
            Action::FilterDone => self.editing_filter = false,
            Action::FilterCancel => {
                self.editing_filter = false;
                self.filter.clear();
                self.fix_selection();
            }
        }
    }

    pub fn current_dev(&self) -> Option<Dev> {
        self.devices.get(self.device).map(|(d, _)| *d)
    }

    /// The latest interval of the current device.
    pub fn current(&self) -> Option<&DeviceSnapshot> {
        let dev = self.current_dev()?;
        self.latest
            .as_ref()?
            .devices
            .iter()
            .find(|d| d.info.dev == dev)
    }

    /// The current device's history, oldest first.
    pub fn history(&self) -> Vec<Point> {
        self.current_dev()
            .and_then(|d| self.history.get(&d))
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The table: the current device's processes (or cgroups), filtered by comm and sorted.
    pub fn rows(&self) -> Vec<Row> {
        let Some(d) = self.current() else {
            return Vec::new();
        };
        let mut rows: Vec<Row> = if self.by_cgroup {
            cgroup_rows(d)
        } else {
            d.report.processes.iter().map(process_row).collect()
        };
        if !self.filter.is_empty() {
            rows.retain(|r| r.comm.contains(self.filter.as_str()));
        }
        let key = self.sort;
        rows.sort_by(|a, b| {
            let primary = match key {
                SortKey::Id => a.key.cmp(&b.key),
                SortKey::Comm => a.comm.cmp(&b.comm),
                _ => b.sort_value(key).total_cmp(&a.sort_value(key)),
            };
            primary.then(a.key.cmp(&b.key))
        });
        rows
    }

    pub fn selected_index(&self, rows: &[Row]) -> Option<usize> {
        let key = self.selected?;
        rows.iter().position(|r| r.key == key)
    }

    /// The selected row's latency histogram (summed over its processes).
    pub fn selected_hist(&self) -> Option<LatencyHist> {
        let rows = self.rows();
        let row = &rows[self.selected_index(&rows)?];
        let d = self.current()?;
        let mut h = LatencyHist::default();
        for pid in &row.pids {
            if let Some(p) = d.hist.get(pid) {
                h.add(p);
            }
        }
        Some(h)
    }

    /// The selected row's recent I/Os, by completion time.
    pub fn selected_recent(&self) -> Vec<RecentIo> {
        let rows = self.rows();
        let (Some(i), Some(d)) = (self.selected_index(&rows), self.current()) else {
            return Vec::new();
        };
        let mut v: Vec<RecentIo> = rows[i]
            .pids
            .iter()
            .filter_map(|p| d.recent.get(p))
            .flat_map(|r| r.iter().copied())
            .collect();
        v.sort_by_key(|r| r.c);
        v
    }

    fn fix_selection(&mut self) {
        let rows = self.rows();
        if self.selected_index(&rows).is_none() {
            self.selected = rows.first().map(|r| r.key);
        }
    }

    fn move_selection(&mut self, by: isize) {
        let rows = self.rows();
        if rows.is_empty() {
            self.selected = None;
            return;
        }
        let i = self.selected_index(&rows).unwrap_or(0) as isize;
        let j = (i + by).clamp(0, rows.len() as isize - 1) as usize;
        self.selected = Some(rows[j].key);
    }
}
