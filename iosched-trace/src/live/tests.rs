//! The live view on synthetic streams: intervals equal the report's windows, the table's
//! update logic (sorting, filtering, selection, cgroups, rates), and rendering snapshots.

use std::time::Duration;

use ratatui::{Terminal, backend::TestBackend};

use super::{
    app::{Action, App, SortKey},
    interval::{IntervalBuilder, LatencyHist, RecentIo, Reorder, Snapshot},
    ui,
};
use iosched_core::{
    analysis::{self, Options},
    event::{Event, Op},
    record::DeviceInfo,
    source::MemorySource,
    synth,
    timeline::sim::{DEV, Sim},
};

const MS: u64 = 1_000_000;

fn device() -> DeviceInfo {
    let mut iosched = std::collections::BTreeMap::new();
    iosched.insert("read_expire".to_string(), "500".to_string());
    iosched.insert("write_expire".to_string(), "5000".to_string());
    iosched.insert("fifo_batch".to_string(), "16".to_string());
    DeviceInfo {
        name: "synth0".into(),
        dev: DEV,
        scheduler: Some("mq-deadline".into()),
        iosched,
        request_based: true,
        ..Default::default()
    }
}

fn synth_events(n: u64) -> Vec<Event> {
    let spec = synth::Spec {
        events: n,
        processes: 6,
        depth: 8,
        dev: DEV,
        ..Default::default()
    };
    let mut events = Vec::new();
    synth::generate(&spec, |e| {
        events.push(*e);
        Ok::<(), ()>(())
    })
    .unwrap();
    events
}

/// Every interval of `events` (the last, partial one closed at its end too).
fn intervals(events: &[Event], start: u64, interval_ns: u64) -> Vec<Snapshot> {
    let mut b = IntervalBuilder::new(vec![device()], start, interval_ns);
    let mut out = Vec::new();
    for ev in events {
        b.push(ev, &mut out);
    }
    let end = events.last().unwrap().ts_ns;
    b.advance_to(end, &mut out);
    out
}

fn report_window(events: &[Event], from: u64, to: u64) -> analysis::Report {
    let first = events[0].ts_ns;
    let opts = Options {
        from_ns: Some(from - first),
        to_ns: Some(to - first),
        top_intervals: 5,
        ..Default::default()
    };
    let mut src = MemorySource::new(vec![device()], events.to_vec());
    analysis::analyze(&mut src, &opts).unwrap()
}

/// The property the issue asks for: an interval's numbers are the report's for that window.
/// The windows start mid-stream, with requests in flight and bios waiting.
#[test]
fn each_interval_equals_the_report_of_its_window() {
    let events = synth_events(30_000);
    let start = events[0].ts_ns;
    let snaps = intervals(&events, start, 3 * MS);
    assert!(snaps.len() >= 5, "{} intervals", snaps.len());
    // The first interval starts with the trace, so it is compared too.
    for s in &snaps {
        let live = &s.devices[0].report;
        let rep = report_window(&events, s.from_ns, s.to_ns);
        assert_eq!(live.trace.from_ns, rep.trace.from_ns);
        assert_eq!(live.trace.duration_ns, rep.trace.duration_ns);
        let (l, r) = (&live.devices[0], &rep.devices[0]);
        assert_eq!(l.bios_queued, r.bios_queued);
        assert_eq!(l.requests_dispatched, r.requests_dispatched);
        assert_eq!(l.read.requests, r.read.requests);
        assert_eq!(l.write.bytes, r.write.bytes);
        assert_eq!(l.util_pct, r.util_pct);
        assert_eq!(l.queue_depth.scheduler_mean, r.queue_depth.scheduler_mean);
        assert_eq!(l.queue_depth.driver_mean, r.queue_depth.driver_mean);
        assert_eq!(l.idle_with_pending_ns, r.idle_with_pending_ns);
        assert_eq!(l.latency["d2c"], r.latency["d2c"]);
        assert_eq!(l.latency["q2d"], r.latency["q2d"]);
        let active = |rep: &analysis::Report| -> Vec<(u32, u64, u64, u64)> {
            let mut v: Vec<_> = rep
                .processes
                .iter()
                .filter(|p| p.requests + p.bytes + p.bios_queued > 0)
                .map(|p| (p.pid, p.requests, p.bytes, p.bios_queued))
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(active(live), active(&rep));
        assert!(!active(live).is_empty());
        for p in &live.processes {
            if let Some(q) = rep.processes.iter().find(|q| q.pid == p.pid) {
                assert_eq!(p.latency.get("q2d"), q.latency.get("q2d"), "pid {}", p.pid);
                assert_eq!(p.write.iops, q.write.iops);
            }
        }
    }
}

#[test]
fn intervals_tile_time_and_rates_use_the_interval_length() {
    // 10 writes of 4 KiB by pid 7 in the first 100 ms interval, none in the second.
    let mut s = Sim::default();
    for n in 0..10u64 {
        s.at(n * 5 * MS + MS)
            .q(100 + n, 7, n * 8, 4096, Op::Write)
            .g(100 + n)
            .i(200 + n, 100 + n, n * 8, 4096)
            .wait(1000)
            .d(200 + n, &[100 + n], n * 8, 4096, Op::Write)
            .wait(1000)
            .c(200 + n, 4096, 4096);
    }
    let start = 1_000_000_000;
    let snaps = intervals(&s.events, start, 100 * MS);
    assert_eq!(snaps.len(), 0, "the stream ends inside the first interval");
    let mut b = IntervalBuilder::new(vec![device()], start, 100 * MS);
    let mut out = Vec::new();
    for ev in &s.events {
        b.push(ev, &mut out);
    }
    b.advance_to(start + 200 * MS, &mut out);
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].from_ns, out[0].to_ns), (start, start + 100 * MS));
    assert_eq!(out[1].from_ns, out[0].to_ns);
    let p = &out[0].devices[0].report.processes[0];
    assert_eq!((p.pid, p.requests, p.bytes), (7, 10, 40960));
    // 10 requests in 0.1 s.
    assert!((p.write.iops - 100.0).abs() < 1e-9);
    assert!(out[1].devices[0].report.processes.is_empty());
    assert_eq!(out[0].devices[0].recent[&7].len(), 10);
    let h = &out[0].devices[0].hist[&7];
    // D2C of 1 µs each: bucket 0 (< 2 µs).
    assert_eq!(h.d2c[0], 10);
}

#[test]
fn reorder_releases_in_time_order_up_to_the_watermark() {
    let mut events = synth_events(2_000);
    // Swap neighbours, as two CPUs would.
    for i in (0..events.len() - 1).step_by(7) {
        events.swap(i, i + 1);
    }
    let mut r = Reorder::default();
    let mut out: Vec<u64> = Vec::new();
    let mid = events[events.len() / 2].ts_ns;
    for ev in &events {
        r.push(*ev);
    }
    r.release(mid, |e| out.push(e.ts_ns));
    assert!(out.iter().all(|t| *t < mid));
    let held = r.len();
    r.release(u64::MAX, |e| out.push(e.ts_ns));
    assert!(r.is_empty());
    assert_eq!(out.len(), events.len());
    assert!(held > 0);
    assert!(out.windows(2).all(|w| w[0] <= w[1]));
}

proptest::proptest! {
    /// Per-CPU batches interleaved in arrival order, with some events out of order within
    /// their CPU (sent directly while its batch was busy), partly released at watermarks:
    /// the output is the stable sort of the arrivals by time, i.e. (time, arrival) order.
    #[test]
    fn reorder_merges_per_cpu_batches_into_time_then_arrival_order(
        seed in proptest::prelude::any::<u64>(),
        cpus in 1u16..5,
        batch in 1usize..50,
        stragglers in 0u32..20,
    ) {
        let mut x = seed | 1;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let base = synth_events(600);
        // Assign each event a CPU; timestamps coarsened so that ties happen.
        let mut per_cpu: Vec<Vec<Event>> = vec![Vec::new(); usize::from(cpus)];
        for ev in &base {
            let mut ev = *ev;
            ev.cpu = (rnd() % u64::from(cpus)) as u16;
            ev.ts_ns /= 1000;
            per_cpu[usize::from(ev.cpu)].push(ev);
        }
        // Arrival order: round robin over CPUs, a batch at a time; a straggler swaps with
        // its predecessor on its CPU.
        let mut arrivals = Vec::new();
        let mut next = vec![0usize; usize::from(cpus)];
        while next.iter().zip(&per_cpu).any(|(n, v)| *n < v.len()) {
            for (cpu, evs) in per_cpu.iter().enumerate() {
                let from = next[cpu];
                let to = (from + batch).min(evs.len());
                let mut chunk = evs[from..to].to_vec();
                if chunk.len() > 1 && (rnd() % 100) < u64::from(stragglers) {
                    let i = (rnd() as usize) % (chunk.len() - 1);
                    chunk.swap(i, i + 1);
                }
                arrivals.extend(chunk);
                next[cpu] = to;
            }
        }
        let mut expected = arrivals.clone();
        expected.sort_by_key(|e| e.ts_ns); // stable: ties keep arrival order
        let mut r = Reorder::default();
        let mut out = Vec::new();
        let step = arrivals.len() / 3 + 1;
        for (i, part) in arrivals.chunks(step).enumerate() {
            for ev in part {
                r.push(*ev);
            }
            // A watermark safely behind what has arrived: the oldest time still to come.
            let later = arrivals[((i + 1) * step).min(arrivals.len())..]
                .iter()
                .map(|e| e.ts_ns)
                .min()
                .unwrap_or(u64::MAX);
            r.release(later, |e| out.push(*e));
        }
        r.release(u64::MAX, |e| out.push(*e));
        proptest::prop_assert!(r.is_empty());
        proptest::prop_assert_eq!(out, expected);
    }
}

#[test]
fn latency_buckets_are_log2_microseconds() {
    assert_eq!(LatencyHist::bucket(0), 0);
    assert_eq!(LatencyHist::bucket(1_999), 0);
    assert_eq!(LatencyHist::bucket(2_000), 1);
    assert_eq!(LatencyHist::bucket(1_000_000), 9);
    assert_eq!(
        LatencyHist::bucket(u64::MAX),
        super::interval::HIST_BUCKETS - 1
    );
}

fn app_with(snaps: Vec<Snapshot>) -> App {
    let mut app = App::new(vec![(DEV, "synth0".into())], Duration::from_millis(3), 30);
    for s in snaps {
        app.on_snapshot(s);
    }
    app
}

fn synth_app() -> App {
    let events = synth_events(30_000);
    app_with(intervals(&events, events[0].ts_ns, 3 * MS))
}

#[test]
fn rows_sort_by_each_key_and_keep_the_selection() {
    let mut app = synth_app();
    let rows = app.rows();
    assert_eq!(rows.len(), 6);
    let tp = |r: &super::app::Row| r.read_mbs + r.write_mbs;
    assert!(rows.windows(2).all(|w| tp(&w[0]) >= tp(&w[1])));
    // The selection is kept from the first interval on: go to the top first.
    for _ in 0..10 {
        app.update(Action::Up);
    }
    assert_eq!(app.selected, Some(rows[0].key));
    app.update(Action::Down);
    app.update(Action::Down);
    let chosen = app.selected.unwrap();
    assert_eq!(chosen, rows[2].key);
    // Cycle through every key: the selected process stays selected.
    for _ in 0..SortKey::ALL.len() {
        app.update(Action::CycleSort);
        let rows = app.rows();
        assert_eq!(app.selected, Some(chosen));
        match app.sort {
            SortKey::Id => assert!(rows.windows(2).all(|w| w[0].key < w[1].key)),
            SortKey::WriteIops => {
                assert!(rows.windows(2).all(|w| w[0].write_iops >= w[1].write_iops))
            }
            SortKey::D2cP99 => assert!(rows.windows(2).all(|w| w[0].d2c_p99 >= w[1].d2c_p99)),
            _ => {}
        }
    }
    assert_eq!(app.sort, SortKey::Throughput);
    // Selection stops at the ends.
    for _ in 0..20 {
        app.update(Action::Up);
    }
    assert_eq!(app.selected, Some(app.rows()[0].key));
}

#[test]
fn rates_are_the_reports() {
    let app = synth_app();
    let snap = app.latest.as_ref().unwrap();
    let dur = (snap.to_ns - snap.from_ns) as f64 / 1e9;
    for row in app.rows() {
        let p = snap.devices[0]
            .report
            .processes
            .iter()
            .find(|p| u64::from(p.pid) == row.key)
            .unwrap();
        assert_eq!(row.read_iops, p.read.requests as f64 / dur);
        assert_eq!(row.write_mbs, p.write.bytes as f64 / dur / 1e6);
    }
}

#[test]
fn filter_by_comm_and_cancel() {
    let mut app = synth_app();
    app.update(Action::StartFilter);
    assert!(app.editing_filter);
    for c in "synth3".chars() {
        app.update(Action::FilterChar(c));
    }
    app.update(Action::FilterDone);
    let rows = app.rows();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].comm, "synth3");
    assert_eq!(app.selected, Some(rows[0].key));
    app.update(Action::FilterBackspace);
    assert_eq!(app.rows().len(), 6, "'synth' matches all");
    app.update(Action::StartFilter);
    app.update(Action::FilterChar('x'));
    assert!(app.rows().is_empty());
    app.update(Action::FilterCancel);
    assert_eq!(app.rows().len(), 6);
    assert!(app.filter.is_empty());
}

#[test]
fn cgroup_rows_sum_their_processes() {
    let mut app = synth_app();
    let procs = app.rows();
    app.update(Action::ToggleCgroups);
    let groups = app.rows();
    // synth puts pid p in cgroup 100 + p % 3.
    assert_eq!(groups.len(), 3);
    for g in &groups {
        let members: Vec<_> = procs
            .iter()
            .filter(|p| g.pids.contains(&(p.key as u32)))
            .collect();
        assert_eq!(members.len(), 2);
        let sum: f64 = members.iter().map(|p| p.write_iops + p.read_iops).sum();
        assert!((g.write_iops + g.read_iops - sum).abs() < 1e-6);
    }
    app.update(Action::ToggleCgroups);
    assert_eq!(app.rows().len(), 6);
}

#[test]
fn pause_freezes_and_devices_cycle() {
    let events = synth_events(30_000);
    let mut snaps = intervals(&events, events[0].ts_ns, 3 * MS);
    let last = snaps.pop().unwrap();
    let mut app = app_with(snaps);
    let shown = app.latest.as_ref().unwrap().to_ns;
    app.update(Action::TogglePause);
    app.on_snapshot(last.clone());
    assert_eq!(app.latest.as_ref().unwrap().to_ns, shown);
    assert_eq!(app.missed, 1);
    app.update(Action::TogglePause);
    app.on_snapshot(last);
    assert_ne!(app.latest.as_ref().unwrap().to_ns, shown);
    // One device: `d` stays on it; history holds every interval (under its cap).
    app.update(Action::NextDevice);
    assert_eq!(app.device, 0);
    assert!(app.history().len() >= 5);
    app.update(Action::Quit);
    assert!(app.quit);
}

#[test]
fn keys_map_to_actions() {
    use super::app::action_for;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let k = |c: KeyCode| KeyEvent::new(c, KeyModifiers::NONE);
    assert_eq!(action_for(k(KeyCode::Char('q')), false), Some(Action::Quit));
    assert_eq!(action_for(k(KeyCode::Esc), false), Some(Action::Quit));
    assert_eq!(action_for(k(KeyCode::Char('j')), false), Some(Action::Down));
    assert_eq!(action_for(k(KeyCode::Up), false), Some(Action::Up));
    // While typing a filter, letters are text and Esc cancels.
    assert_eq!(
        action_for(k(KeyCode::Char('q')), true),
        Some(Action::FilterChar('q'))
    );
    assert_eq!(
        action_for(k(KeyCode::Esc), true),
        Some(Action::FilterCancel)
    );
    assert_eq!(
        action_for(
            KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL),
            true
        ),
        Some(Action::Quit)
    );
    assert_eq!(action_for(k(KeyCode::Char('z')), false), None);
}

#[test]
fn strip_marks_waiting_and_device_time() {
    let io = |q, d, c| RecentIo {
        q: Some(q),
        d: Some(d),
        c,
        write: true,
    };
    // 0..100 in 10 cells: waits 10..30, in device 30..50; another in device 80..90.
    let line = ui::strip_line(&[io(10, 30, 50), io(80, 80, 90)], 0, 100, 10);
    assert_eq!(line, " --###  ##");
    assert_eq!(ui::strip_line(&[], 0, 100, 5), "     ");
    // I/Os outside the interval leave no mark.
    assert_eq!(ui::strip_line(&[io(200, 210, 220)], 0, 100, 4), "    ");
}

fn render(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| ui::render(app, f)).unwrap();
    t
}

#[test]
fn renders_at_80x24() {
    let app = synth_app();
    insta::assert_snapshot!(render(&app, 80, 24).backend());
}

#[test]
fn renders_at_160x48_with_cgroups_and_help() {
    let mut app = synth_app();
    app.update(Action::Down);
    insta::assert_snapshot!("160x48", render(&app, 160, 48).backend());
    app.update(Action::ToggleCgroups);
    app.update(Action::ToggleHelp);
    insta::assert_snapshot!("160x48_cgroups_help", render(&app, 160, 48).backend());
}

#[test]
fn renders_before_the_first_interval() {
    let app = App::new(vec![(DEV, "loop7".into())], Duration::from_secs(1), 60);
    let t = render(&app, 80, 24);
    let text = format!("{}", t.backend());
    assert!(text.contains("loop7: waiting for the first 1.0 s interval"));
}

#[test]
fn batch_text_has_a_row_per_process_and_json_keeps_absolute_times() {
    let mut app = synth_app();
    let text = super::batch::text(&mut app);
    assert!(text.starts_with("synth0 mq-deadline read_expire=500 write_expire=5000 fifo_batch=16"));
    // Completions the kernel counted without an event show only when there are some.
    assert!(!text.contains("untraced"), "{text}");
    app.latest.as_mut().unwrap().untraced_total = 3;
    let with = super::batch::text(&mut app);
    assert!(
        with.lines()
            .next()
            .unwrap()
            .ends_with("untraced completions 3"),
        "{with}"
    );
    for p in 0..6 {
        assert!(text.contains(&format!("synth{p}")), "{text}");
    }
    let snap = app.latest.clone().unwrap();
    let line = super::batch::json_line(&snap).unwrap();
    assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["from_ns"], snap.from_ns);
    assert_eq!(v["to_ns"], snap.to_ns);
    assert_eq!(
        v["devices"][0]["report"]["schema"],
        iosched_core::analysis::report::SCHEMA
    );
}
