//! Where `live` spends its CPU per event, measured offline on a recording (issue 5: the
//! collector's per-event path is what stands between `live` and its overhead target).
//!
//!     cargo run --release -p iosched-trace --example live_path -- TRACE [ROUNDS]
//!
//! The recording's request-lifecycle events (those `live` attaches to: no plugs, no G) are
//! loaded once, then each round times, in ns per event:
//! - `timeline`: the lifecycle state machine alone (a sink that takes nothing);
//! - `report`: timeline + the report's `Aggregator` (what `report` does per event);
//! - `live`: the live view's `IntervalBuilder` (the report's code per 1 s interval, plus the
//!   view's histograms and recent-request strips);
//! - `reorder`: the collector's arrival-to-time-order merge.
//!
//! `report` is the baseline the others are read against: `live - report` is what the view adds.

use std::{path::Path, time::Instant};

use anyhow::Context;
use iosched_core::{
    analysis::Aggregator,
    driver::{Driver, Filter},
    event::{Event, EventKind},
    timeline::{LifeSink, Timeline},
    trace_file,
};
use iosched_trace::live::interval::{IntervalBuilder, Reorder};

/// A sink that keeps nothing: the timeline's own cost.
struct Discard;
impl LifeSink for Discard {}

fn per_event(events: &[Event], f: impl FnOnce(&[Event])) -> f64 {
    let t = Instant::now();
    f(events);
    t.elapsed().as_nanos() as f64 / events.len() as f64
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: live_path TRACE [ROUNDS]")?;
    let rounds: usize = match args.next() {
        Some(r) => r.parse().context("ROUNDS must be a number")?,
        None => 3,
    };
    let mut source = trace_file::open(Path::new(&path))?;
    let devices = source.meta().devices.clone();
    let mut events = Vec::new();
    while let Some(ev) = source.next_event() {
        let ev = ev?;
        if matches!(
            ev.kind,
            EventKind::Queue
                | EventKind::BackMerge
                | EventKind::FrontMerge
                | EventKind::RqMerge
                | EventKind::Insert
                | EventKind::Issue
                | EventKind::Complete
                | EventKind::Requeue
                | EventKind::BioComplete
        ) {
            events.push(ev);
        }
    }
    anyhow::ensure!(!events.is_empty(), "{path} has no request-lifecycle events");
    let start = events[0].ts_ns;
    println!(
        "{} lifecycle events; ns per event: timeline / report / live / reorder",
        events.len()
    );
    for round in 1..=rounds {
        let timeline = per_event(&events, |evs| {
            let mut t = Timeline::new(Vec::new());
            evs.iter().for_each(|ev| t.push(ev, &mut Discard));
        });
        let report = per_event(&events, |evs| {
            let mut pass = Driver::new(&[], Filter::ALL);
            let mut agg = Aggregator::new(Default::default());
            evs.iter().for_each(|ev| pass.push(ev, &mut agg));
            pass.finish(&mut agg);
        });
        let live = per_event(&events, |evs| {
            let mut b = IntervalBuilder::new(devices.clone(), start, 1_000_000_000);
            let mut done = Vec::new();
            evs.iter().for_each(|ev| b.push(ev, &mut done));
        });
        let reorder = per_event(&events, |evs| {
            let mut r = Reorder::default();
            for (n, ev) in evs.iter().enumerate() {
                r.push(*ev);
                // As the collector: released in steps, 50 ms behind the newest event.
                if n % 4096 == 4095 {
                    r.release(ev.ts_ns.saturating_sub(50_000_000), |_| {});
                }
            }
            r.release(u64::MAX, |_| {});
        });
        println!("round {round}: {timeline:.1} / {report:.1} / {live:.1} / {reorder:.1}");
    }
    Ok(())
}
