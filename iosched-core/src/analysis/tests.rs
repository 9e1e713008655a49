//! Reports of synthetic streams whose numbers are known by construction.

use super::*;
use crate::{
    event::Op,
    record::DeviceInfo,
    source::MemorySource,
    timeline::sim::{DEV, Sim},
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn report(sim: &Sim, opts: Options) -> Report {
    let dev = DeviceInfo {
        name: "loop0".into(),
        dev: DEV,
        scheduler: Some("bfq".into()),
        request_based: true,
        ..Default::default()
    };
    let mut src = MemorySource::new(vec![dev], sim.events.clone());
    analyze(&mut src, &opts).unwrap()
}

fn opts() -> Options {
    Options {
        top_intervals: 10,
        ..Default::default()
    }
}

#[test]
fn idling_gap_is_measured_and_attributed() {
    let mut s = Sim::default();
    // p1 reads and completes at 100 µs; the device then sits idle; p2's read arrives at
    // 200 µs and is held (as an idling scheduler would) until 8.2 ms.
    s.q(1, 1, 0, 4096, Op::Read)
        .g(1)
        .i(11, 1, 0, 4096)
        .d(11, &[1], 0, 4096, Op::Read)
        .at(100 * US)
        .c(11, 4096, 4096)
        .at(200 * US)
        .q(2, 2, 1 << 20, 4096, Op::Read)
        .g(2)
        .i(12, 2, 1 << 20, 4096)
        .at(8200 * US)
        .d(12, &[2], 1 << 20, 4096, Op::Read)
        .at(8300 * US)
        .c(12, 4096, 4096);
    let r = report(&s, opts());
    let d = &r.devices[0];
    assert_eq!(r.trace.duration_ns, 8300 * US);
    assert_eq!(d.idle_with_pending_ns, 8 * MS);
    assert_eq!(d.idle_with_pending_intervals, 1);
    assert_eq!(d.idle_empty_ns, 100 * US);
    assert!((d.util_pct - 100.0 * 200.0 / 8300.0).abs() < 1e-9);
    assert_eq!(r.idling.top_intervals.len(), 1);
    let iv = &r.idling.top_intervals[0];
    assert_eq!(iv.after_pid, 1);
    assert_eq!(iv.waiting, vec!["p2 (2)".to_string()]);
    assert_eq!(iv.start_ns - r.trace.from_ns, 200 * US);
    assert_eq!(r.idling.pairs.len(), 1);
    assert_eq!(
        (r.idling.pairs[0].after_pid, r.idling.pairs[0].waiting_pid),
        (1, 2)
    );
    let p = |pid| r.processes.iter().find(|p| p.pid == pid).unwrap();
    assert_eq!(p(1).idle_waste_caused_ns, 8 * MS);
    assert_eq!(p(2).idle_waste_suffered_ns, 8 * MS);
    assert_eq!(p(2).idle_waste_caused_ns, 0);
    // The held request's Q2D is the whole wait.
    assert_eq!(p(2).latency["q2d"].max_ns, 8 * MS);
}

#[test]
fn short_transit_gaps_are_not_waste() {
    let mut s = Sim::default();
    for n in 0..10u64 {
        s.plain(n + 1, 1, n * 8, 4096, 2 * US, 2 * US, 2 * US, 30 * US);
        s.wait(20 * US);
    }
    let r = report(&s, opts());
    let d = &r.devices[0];
    assert_eq!(d.idle_with_pending_ns, 0);
    assert_eq!(d.idle_short_gaps, 10);
    assert_eq!(d.idle_short_gaps_ns, 10 * 6 * US);
    // Counted with a threshold of 0, the same gaps are waste.
    let r0 = report(
        &s,
        Options {
            min_idle_ns: Some(0),
            ..opts()
        },
    );
    assert_eq!(r0.devices[0].idle_with_pending_ns, 10 * 6 * US);
}

#[test]
fn btt_stage_means_and_merge_ratio() {
    let mut s = Sim::default();
    // 4 plain reads with known stages, then 3 bios merged into one write request.
    for n in 0..4u64 {
        s.plain(
            n + 1,
            1,
            n * 1000,
            4096,
            US,
            2 * US,
            (n + 1) * 10 * US,
            100 * US,
        );
    }
    s.q(50, 2, 1 << 20, 4096, Op::Write)
        .g(50)
        .i(60, 50, 1 << 20, 4096)
        .wait(5 * US)
        .q(51, 2, (1 << 20) + 8, 4096, Op::Write)
        .back_merge(51)
        .wait(5 * US)
        .q(52, 2, (1 << 20) + 16, 4096, Op::Write)
        .back_merge(52)
        .wait(10 * US)
        .d(60, &[50, 51, 52], 1 << 20, 12288, Op::Write)
        .wait(200 * US)
        .c(60, 12288, 12288);
    let r = report(&s, opts());
    let d = &r.devices[0];
    assert_eq!(d.bios_queued, 7);
    assert_eq!(d.requests_dispatched, 5);
    assert!((d.merge_ratio - 7.0 / 5.0).abs() < 1e-12);
    assert_eq!(d.merges.back, 2);
    assert_eq!(d.read.requests, 4);
    assert_eq!(d.write.requests, 1);
    assert_eq!(d.write.bytes, 12288);
    let reads = &d.latency_by_direction["read"];
    assert_eq!(reads["i2d"].mean_ns, 25.0 * US as f64);
    assert_eq!(reads["d2c"].mean_ns, 100.0 * US as f64);
    assert_eq!(reads["q2c"].mean_ns, (3.0 + 25.0 + 100.0) * US as f64);
    let writes = &d.latency_by_direction["write"];
    // btt: I2D for the bio that started the request, M2D for the merged ones; D2C and Q2C
    // for each bio.
    assert_eq!(writes["i2d"].count, 1);
    assert_eq!(writes["m2d"].count, 2);
    assert_eq!(writes["m2d"].mean_ns, (15.0 + 10.0) / 2.0 * US as f64);
    assert_eq!(writes["q2m"].count, 2);
    assert_eq!(writes["d2c"].count, 3);
    assert_eq!(
        writes["q2c"].mean_ns,
        (220.0 + 215.0 + 210.0) / 3.0 * US as f64
    );
    // Per process: p2 queued 3 bios, 1 request, 12 KiB.
    let p2 = r.processes.iter().find(|p| p.pid == 2).unwrap();
    assert_eq!((p2.bios_queued, p2.requests, p2.bytes), (3, 1, 12288));
    assert_eq!(p2.cgroup_id, 20);
    assert_eq!(r.cgroups.len(), 2);
}

#[test]
fn think_time_and_sequentiality_of_a_closed_loop_reader() {
    let mut s = Sim::default();
    // 5 sequential reads, each queued 50 µs after the previous completed.
    for n in 0..5u64 {
        s.plain(n + 1, 3, n * 8, 4096, US, US, US, 100 * US);
        s.wait(50 * US);
    }
    let r = report(&s, opts());
    let p = &r.processes[0];
    assert_eq!(p.think_time.count, 4);
    assert_eq!(p.think_time.mean_ns, 50.0 * US as f64);
    assert_eq!(p.sequential_pct, 100.0 * 4.0 / 5.0);
    let sl = p.slices.as_ref().unwrap();
    assert_eq!(sl.slices, 1);
    assert_eq!(sl.length_requests.max_ns, 5);
}

#[test]
fn alternating_readers_show_in_slices() {
    let mut s = Sim::default();
    for n in 0..10u64 {
        s.plain(2 * n + 1, 1, n * 8, 4096, US, US, US, 100 * US);
        s.plain(2 * n + 2, 2, (1 << 30) + n * 8, 4096, US, US, US, 100 * US);
    }
    let r = report(&s, opts());
    for p in &r.processes {
        let sl = p.slices.as_ref().unwrap();
        assert_eq!(sl.slices, 10, "{}", p.pid);
        assert_eq!(sl.length_requests.max_ns, 1);
    }
    let p2 = r.processes.iter().find(|p| p.pid == 2).unwrap();
    assert!(p2.slices.as_ref().unwrap().switch_seek_sectors.mean_ns > 1e9);
    assert_eq!(r.devices[0].seeks_d2d.seeks, 19);
}

#[test]
fn filters_and_windows() {
    let mut s = Sim::default();
    for n in 0..10u64 {
        s.at(n * MS);
        s.plain(
            n + 1,
            if n % 2 == 0 { 1 } else { 2 },
            n * 8,
            4096,
            US,
            US,
            US,
            100 * US,
        );
    }
    let only_p2 = report(
        &s,
        Options {
            pids: vec![2],
            ..opts()
        },
    );
    assert_eq!(only_p2.processes.len(), 1);
    assert_eq!(only_p2.processes[0].requests, 5);
    // Device totals stay whole.
    assert_eq!(only_p2.devices[0].requests_dispatched, 10);
    assert!(only_p2.trace.filters[0].contains("pids"));

    // [2 ms, 5 ms): the I/Os starting at 2, 3 and 4 ms.
    let win = report(
        &s,
        Options {
            from_ns: Some(2 * MS),
            to_ns: Some(5 * MS),
            ..opts()
        },
    );
    assert_eq!(win.trace.duration_ns, 3 * MS);
    assert_eq!(win.devices[0].bios_queued, 3);
    assert_eq!(win.devices[0].read.requests, 3);
    // Busy (D to C) 100 µs of each ms.
    assert!((win.devices[0].util_pct - 10.0).abs() < 1e-9);
}

#[test]
fn json_has_the_documented_fields() {
    let mut s = Sim::default();
    s.plain(1, 1, 0, 4096, US, US, US, 100 * US);
    let r = report(&s, opts());
    let v = serde_json::to_value(&r).unwrap();
    let d = &v["devices"][0];
    for key in [
        "name",
        "scheduler",
        "bios_queued",
        "requests_dispatched",
        "merge_ratio",
        "idle_with_pending_ns",
        "idle_empty_ns",
        "util_pct",
    ] {
        assert!(!d[key].is_null(), "device.{key}");
    }
    let p = &v["processes"][0];
    for key in ["pid", "tgid", "comm", "cgroup", "requests", "bytes"] {
        assert!(!p[key].is_null(), "process.{key}");
    }
    for stage in ["q2c", "d2c", "q2d"] {
        for key in ["count", "mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"] {
            assert!(!p["latency"][stage][key].is_null(), "latency.{stage}.{key}");
        }
    }
    assert_eq!(v["schema"], report::SCHEMA);
}

/// The CPU context comes from the source's samples around the window; a source without
/// samples (or header) has none.
#[test]
fn cpu_context_is_the_use_between_the_samples_around_the_window() {
    use crate::record::CpuSample;
    let mut s = Sim::default();
    s.plain(1, 1, 0, 4096, US, US, US, 100 * US);
    let dev = DeviceInfo {
        name: "loop0".into(),
        dev: DEV,
        request_based: true,
        ..Default::default()
    };
    let end = s.events.iter().map(|e| e.ts_ns).max().unwrap() + MS;
    let sample = |ts: u64, busy: u64, idle: u64, rec: u64| CpuSample {
        ts_ns: ts,
        busy_ns: busy,
        idle_ns: idle,
        recorder_ns: rec,
        online_cpus: 4,
    };
    let samples = vec![sample(0, 0, 0, 0), sample(end, 3 * MS, MS, MS / 2)];
    let mut src = MemorySource::new(vec![dev.clone()], s.events.clone()).with_cpu_samples(samples);
    let r = analyze(&mut src, &opts()).unwrap();
    let cpu = r.trace.cpu.expect("a CPU context");
    assert_eq!((cpu.online_cpus, cpu.span_ns), (Some(4), end));
    assert_eq!(cpu.busy_share, Some(0.75));
    assert_eq!(cpu.recorder_share, Some(0.125));
    assert_eq!(cpu.host_profile, None);
    let mut plain = MemorySource::new(vec![dev], s.events.clone());
    assert!(analyze(&mut plain, &opts()).unwrap().trace.cpu.is_none());
}

/// A recording whose plugs were counted in the kernel, cut where a killed recorder leaves
/// it: the report takes the last counts it finds and says how far they go, never passing a
/// checkpoint's counts (or none) off as the device's whole count.
#[test]
fn plug_counts_of_a_recording_cut_short_say_how_far_they_go() {
    use crate::record::{
        DevicePlugCounts, RecordingReader, RecordingWriter, Stats, test_support::sample_header,
    };
    use crate::source::RecordingSource;

    let mut header = sample_header();
    header.mark_plugs_counted();
    let dev = header.devices[0].dev;
    let counts = |plugs: u64| Stats {
        plug_counts: vec![DevicePlugCounts {
            dev,
            plugs,
            unplugs_explicit: plugs,
            unplugs_timer: 0,
            unplugged_requests: plugs,
        }],
        ..Default::default()
    };
    let mut sim = Sim::default();
    sim.on(dev)
        .plain(1, 100, 0, 4096, 1_000, 1_000, 1_000, 50_000)
        .wait(1_000_000)
        .plain(2, 100, 8, 4096, 1_000, 1_000, 1_000, 50_000);
    let (first, second) = sim.events.split_at(5);

    let mut w = RecordingWriter::new(Vec::new(), &header).unwrap();
    first.iter().for_each(|ev| w.push(ev).unwrap());
    w.flush().unwrap();
    let no_counts_yet = w.bytes_written() as usize;
    w.write_stats(&counts(3)).unwrap();
    second.iter().for_each(|ev| w.push(ev).unwrap());
    w.flush().unwrap();
    let no_footer = w.bytes_written() as usize;
    let footer = w.footer(counts(7), 5_000_000, "signal");
    let bytes = w.finish(&footer).unwrap();

    let report_of = |len: usize| {
        let reader = RecordingReader::new(&bytes[..len]).unwrap();
        let mut source = RecordingSource::new(std::path::Path::new("cut.istrace"), reader);
        analyze(&mut source, &Options::default()).unwrap()
    };
    let plug_warnings = |r: &Report| {
        r.trace
            .warnings
            .iter()
            .filter(|w| w.starts_with("plug figures"))
            .cloned()
            .collect::<Vec<_>>()
    };

    let whole = report_of(bytes.len());
    assert_eq!(whole.trace.plugs_from, "kernel counters");
    assert_eq!(whole.devices[0].plugs.plugs, 7);
    assert_eq!(plug_warnings(&whole), Vec::<String>::new());

    // Killed after a checkpoint: its counts, said to stop there.
    let killed = report_of(no_footer);
    assert_eq!(killed.trace.plugs_from, report::PLUGS_LAST_CHECKPOINT);
    assert_eq!(killed.devices[0].plugs.plugs, 3);
    assert_eq!(killed.devices[0].plugs.unplugs_explicit, 3);
    assert_eq!(plug_warnings(&killed).len(), 1);
    assert!(plug_warnings(&killed)[0].contains("last checkpoint"));
    let said = |r: &Report, what: &str| r.trace.warnings.iter().any(|w| w.contains(what));
    assert!(said(
        &killed,
        "loss and plug counts are those of the last statistics snapshot"
    ));

    // Killed before its first checkpoint: no counts at all, and the report says so.
    let early = report_of(no_counts_yet);
    assert_eq!(early.trace.plugs_from, report::PLUGS_UNKNOWN);
    assert_eq!(early.devices[0].plugs.plugs, 0);
    assert_eq!(plug_warnings(&early).len(), 1);
    assert!(plug_warnings(&early)[0].contains("unknown"));
    assert!(said(&early, "lost events and plug counts are unknown"));
}
