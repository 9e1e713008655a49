//! Binning of streams whose per-bin content is known by construction, and of synthetic
//! traces against the report's own totals (the [`Aggregator`] of the same pass).

use super::*;
use crate::{
    analysis::{Aggregator, latency::Stage, report},
    driver::{self, Filter},
    event::Op,
    record::DeviceInfo,
    source::MemorySource,
    synth,
    timeline::sim::{DEV, Sim},
};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

fn device() -> DeviceInfo {
    DeviceInfo {
        name: "loop0".into(),
        dev: DEV,
        request_based: true,
        ..Default::default()
    }
}

/// One pass of the report and the bins over `events`.
fn pass(events: Vec<crate::event::Event>, opts: &Options, n: usize) -> (Aggregator, TimeBins) {
    let mut src = MemorySource::new(vec![device()], events);
    let mut sinks = (Aggregator::new(opts.clone()), TimeBins::new(opts, n));
    driver::drive(&mut src, Filter::ALL, &mut sinks).unwrap();
    sinks
}

fn synth_events(events: u64, seed: u64) -> Vec<crate::event::Event> {
    let spec = synth::Spec {
        events,
        seed,
        dev: DEV,
        ..Default::default()
    };
    let mut out = Vec::new();
    synth::generate(&spec, |e| {
        out.push(*e);
        Ok::<(), ()>(())
    })
    .unwrap();
    out
}

fn sum<T: Copy + Into<u64>>(v: &[T]) -> u64 {
    v.iter().map(|x| (*x).into()).sum()
}

#[test]
fn per_bin_totals_add_up_to_the_reports() {
    let opts = Options::default();
    let (agg, bins) = pass(synth_events(200_000, 3), &opts, 512);
    let axis = bins.axis().unwrap();
    // 200k events at ~1.2 µs each: far longer than 512 ns bins, so the axis grew.
    assert!(axis.shift > 10, "{axis:?}");
    assert!(bins.used_bins() > axis.n / 2 && bins.used_bins() <= axis.n);
    assert_eq!(bins.lanes.len(), 8);
    for (pid, lane) in &bins.lanes {
        let p = &agg.processes[pid];
        let requests: u64 = p.completed.iter().map(|c| c.requests).sum();
        assert_eq!(sum(&lane.requests), requests, "pid {pid}");
        assert_eq!(sum(&lane.bytes), p.bytes, "pid {pid}");
        // Time in the scheduler and in the device: the sums of the bios' Q2D and D2C.
        let q2d = p.stages.get(Stage::Q2D).unwrap().sum_ns();
        let d2c = p.stages.get(Stage::D2C).unwrap().sum_ns();
        assert_eq!(u128::from(sum(&lane.sched_ns)), q2d, "pid {pid}");
        assert_eq!(u128::from(sum(&lane.device_ns)), d2c, "pid {pid}");
        assert_eq!(sum(&lane.started), p.bios_queued);
    }
    let d = &agg.devices[&DEV];
    let b = &bins.devices[&DEV];
    let completed: u64 = d.completed.iter().map(|c| c.requests).sum();
    assert_eq!(sum(&b.requests), completed);
    assert_eq!(
        sum(&b.bytes),
        d.completed.iter().map(|c| c.bytes).sum::<u64>()
    );
    assert_eq!(u128::from(sum(&b.pending_area)), d.pending_area);
    assert_eq!(u128::from(sum(&b.driver_area)), d.driver_area);
    assert_eq!(b.max_pending.iter().max().copied(), Some(d.max_pending));
    assert_eq!(b.max_in_driver.iter().max().copied(), Some(d.max_in_driver));
    // Every read and write dispatch is in the sector grid.
    let cells = |g: &[SectorCell]| -> u64 { g.iter().map(|c| u64::from(c.count)).sum::<u64>() };
    assert_eq!(
        cells(&bins.sectors.read) + cells(&bins.sectors.write),
        d.requests_dispatched
    );
    // Too many bios to keep one by one.
    assert!(bins.exact.is_none());
}

#[test]
fn a_one_ns_request_in_a_long_trace_still_marks_its_bin() {
    let mut s = Sim::default();
    // A long trace (10 s: 2048 bins of ~5 ms) with one bio whose whole life is 1 ns.
    s.plain(1, 1, 0, 4096, 0, 0, 0, US);
    s.at(5 * 1000 * MS)
        .q(2, 2, 800, 4096, Op::Read)
        .g(2)
        .i(12, 2, 800, 4096);
    s.wait(0).d(12, &[2], 800, 4096, Op::Read);
    s.wait(1).c(12, 4096, 4096);
    s.at(10 * 1000 * MS).plain(3, 1, 8, 4096, 0, 0, 0, US);
    let (_, bins) = pass(s.events.clone(), &Options::default(), 2048);
    let axis = bins.axis().unwrap();
    assert!(axis.width_ns() > MS, "{axis:?}");
    let lane = &bins.lanes[&2];
    let marked: Vec<usize> = (0..axis.n)
        .filter(|i| lane.started[*i] > 0 || lane.sched_ns[*i] + lane.device_ns[*i] > 0)
        .collect();
    let at = axis.index(1_000_000_000 + 5 * 1000 * MS);
    assert_eq!(marked, vec![at]);
    assert_eq!(lane.started[at], 1);
    assert_eq!(sum(&lane.sched_ns) + sum(&lane.device_ns), 1);
    assert_eq!(sum(&lane.device_ns), 1);
    assert_eq!(sum(&lane.requests), 1);
    // Few bios: kept one by one too.
    let exact = bins.exact.as_ref().unwrap();
    assert_eq!(exact.len(), 3);
    assert!(exact.iter().any(|b| b.pid == 2 && b.c - b.q == 1));
}

#[test]
fn a_bio_spanning_bins_is_split_exactly_between_them() {
    // 1 µs bins (a trace of under 2048 µs): a bio queued at 0.5 µs, issued at 2.25 µs,
    // completed at 4 µs.
    let mut s = Sim::default();
    s.at(0).plain(9, 7, 0, 512, 0, 0, 0, 0); // sets the window's start at 0
    s.at(500)
        .q(1, 1, 100, 4096, Op::Read)
        .g(1)
        .i(11, 1, 100, 4096);
    s.at(2250).d(11, &[1], 100, 4096, Op::Read);
    s.at(4000).c(11, 4096, 4096);
    s.at(1500 * US).plain(20, 7, 0, 512, 0, 0, 0, 0);
    let (_, bins) = pass(s.events.clone(), &Options::default(), 2048);
    let axis = bins.axis().unwrap();
    assert_eq!(axis.width_ns(), 1024);
    let lane = &bins.lanes[&1];
    // Bins of 1024 ns: [0,1024) [1024,2048) [2048,3072) [3072,4096).
    assert_eq!(&lane.sched_ns[..4], &[524, 1024, 202, 0]);
    assert_eq!(&lane.device_ns[..4], &[0, 0, 822, 928]);
    assert_eq!(&lane.started[..5], &[1, 0, 0, 0, 0]);
    assert_eq!(lane.requests[3], 1);
    assert_eq!(lane.bytes[3], 4096);
}

#[test]
fn idling_and_slices_are_binned_where_they_happened() {
    // As analysis::tests' idling case: p1 completes at 100 µs, p2's read waits from 200 µs
    // to 8.2 ms with the device idle.
    let mut s = Sim::default();
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
    let opts = Options::default();
    let (agg, bins) = pass(s.events.clone(), &opts, 2048);
    let axis = bins.axis().unwrap();
    let b = &bins.devices[&DEV];
    assert_eq!(sum(&b.idle_ns), 8 * MS);
    assert_eq!(sum(&b.idle_ns), agg.devices[&DEV].idle.idle_with_pending_ns);
    let first = axis.index(axis.start_ns + 200 * US);
    let last = axis.index(axis.start_ns + 8200 * US - 1);
    for (i, ns) in b.idle_ns.iter().enumerate() {
        assert_eq!(*ns > 0, (first..=last).contains(&i), "bin {i}");
    }
    // Slices: p1's from its dispatch (0) to p2's (8.2 ms); p2's last one ends at its own
    // dispatch (no time).
    assert_eq!(sum(&b.slices[&1]), 8200 * US);
    assert_eq!(b.slices.get(&2).map_or(0, |v| sum(v)), 0);
    // Sector grid: p2's read in a higher row than p1's, each its own majority.
    let cells = bins.sectors.cells(false);
    let rows: Vec<(u64, u64)> = cells.chunks(4).map(|c| (c[1], c[3])).collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().any(|r| r.1 == 1) && rows.iter().any(|r| r.1 == 2));
    let row_of = |pid| rows.iter().find(|r| r.1 == pid).unwrap().0;
    assert!(row_of(2) > row_of(1));
}

#[test]
fn a_window_bins_only_what_lies_inside_it() {
    let events = synth_events(50_000, 5);
    let opts = Options {
        from_ns: Some(10 * MS),
        to_ns: Some(30 * MS),
        ..Default::default()
    };
    let (agg, bins) = pass(events, &opts, 1024);
    let w = agg.effective_window();
    assert_eq!(bins.window(), w);
    let d = &agg.devices[&DEV];
    let b = &bins.devices[&DEV];
    assert_eq!(u128::from(sum(&b.pending_area)), d.pending_area);
    assert_eq!(u128::from(sum(&b.driver_area)), d.driver_area);
    assert_eq!(
        sum(&b.requests),
        d.completed.iter().map(|c| c.requests).sum::<u64>()
    );
    let report = report::build(
        &agg,
        &Default::default(),
        &MemorySource::new(vec![device()], Vec::new()),
    );
    let total: u64 = report.processes.iter().map(|p| p.requests).sum();
    assert_eq!(sum(&b.requests), total);
}

#[test]
fn halving_keeps_totals_and_majorities() {
    let mut v = vec![1u64, 2, 3, 4, 5, 6, 7, 8];
    merge_pairs(&mut v, add);
    assert_eq!(v, vec![3, 7, 11, 15, 0, 0, 0, 0]);
    let mut a = SectorCell::default();
    for pid in [5, 5, 5, 6] {
        a.add(pid);
    }
    let mut b = SectorCell::default();
    for pid in [6, 6, 5] {
        b.add(pid);
    }
    let c = SectorCell::combine(a, b);
    assert_eq!((c.count, c.pid), (7, 5));
    let c = SectorCell::combine(SectorCell::default(), b);
    assert_eq!((c.count, c.pid), (3, 6));
}
