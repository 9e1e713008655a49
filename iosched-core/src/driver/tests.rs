//! The driver's answers known by construction: what a filter keeps, what order a sink hears
//! things in, and that sinks fed together hear what each hears alone.

use super::*;
use crate::{
    event::{EventKind, Op},
    source::MemorySource,
    timeline::sim::{DEV, Sim},
};

const OTHER: Dev = Dev { major: 8, minor: 0 };
const US: u64 = 1_000;

/// Everything a sink is told, in order.
#[derive(Clone, Debug, PartialEq)]
enum Heard {
    See(u64, Dev, EventKind),
    Event(u64, EventKind),
    Queued(u64, u32),
    Issued(u64, Option<u32>, u32),
    BioDone(BioLife),
    BioLost(BioLife),
    RequestDone(RequestLife),
    State(Dev, u64, u32, u32),
    End(Anomalies),
}

#[derive(Default)]
struct Log(Vec<Heard>);

impl TraceSink for Log {
    fn see(&mut self, ev: &Event) {
        self.0.push(Heard::See(ev.ts_ns, ev.dev, ev.kind));
    }
    fn end(&mut self, anomalies: &Anomalies) {
        self.0.push(Heard::End(anomalies.clone()));
    }
}

impl LifeSink for Log {
    fn event(&mut self, ev: &Event) {
        self.0.push(Heard::Event(ev.ts_ns, ev.kind));
    }
    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        self.0.push(Heard::Queued(ev.ts_ns, state.pending));
    }
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {
        self.0.push(Heard::Issued(
            ev.ts_ns,
            submitter.map(|s| s.pid),
            state.in_driver,
        ));
    }
    fn bio_done(&mut self, bio: &BioLife) {
        self.0.push(Heard::BioDone(*bio));
    }
    fn bio_lost(&mut self, bio: &BioLife) {
        self.0.push(Heard::BioLost(*bio));
    }
    fn request_done(&mut self, rq: &RequestLife) {
        self.0.push(Heard::RequestDone(rq.clone()));
    }
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        self.0
            .push(Heard::State(dev, ts, state.in_driver, state.pending));
    }
}

/// Reads on two devices, overlapping in time, one left in flight at the end, a bio id
/// reused before its completion was seen, and a plug/unplug the timeline passes by.
fn story() -> Vec<Event> {
    let mut s = Sim::default();
    for n in 0..20u64 {
        s.on(if n % 3 == 0 { OTHER } else { DEV })
            .at(n * 100 * US)
            .plain(
                n + 1,
                1 + (n % 2) as u32,
                n * 8,
                4096,
                5 * US,
                5 * US,
                20 * US,
                150 * US,
            );
    }
    s.on(DEV).at(3_000 * US).q(900, 7, 0, 4096, Op::Read);
    s.at(3_010 * US).q(900, 7, 8, 4096, Op::Read);
    s.on(OTHER).at(3_020 * US).q(901, 8, 0, 4096, Op::Write);
    let mut events = s.events;
    let mut unplug = events[0];
    unplug.kind = EventKind::Unplug;
    unplug.ts_ns += 1;
    events.push(unplug);
    events.sort_by_key(|e| e.ts_ns);
    events
}

fn source(events: Vec<Event>) -> MemorySource {
    MemorySource::new(Vec::new(), events)
}

fn heard(events: Vec<Event>, filter: Filter) -> Vec<Heard> {
    let mut log = Log::default();
    drive(&mut source(events), filter, &mut log).unwrap();
    log.0
}

fn seen(log: &[Heard]) -> Vec<(u64, Dev)> {
    log.iter()
        .filter_map(|h| match h {
            Heard::See(ts, dev, _) => Some((*ts, *dev)),
            _ => None,
        })
        .collect()
}

#[test]
fn two_sinks_in_one_pass_hear_what_each_hears_alone() {
    for filter in [Filter::ALL, Filter::ALL.device(DEV)] {
        let alone = heard(story(), filter.clone());
        let mut pair = (Log::default(), Log::default());
        drive(&mut source(story()), filter, &mut pair).unwrap();
        assert_eq!(pair.0.0, alone);
        assert_eq!(pair.1.0, alone);
        // Borrowed sinks are sinks too.
        let (mut a, mut b) = (Log::default(), Log::default());
        drive(&mut source(story()), Filter::ALL, &mut (&mut a, &mut b)).unwrap();
        assert_eq!(a.0, b.0);
    }
}

#[test]
fn a_report_fed_beside_another_sink_is_the_report_alone() {
    use crate::analysis::{self, Aggregator, Options};
    let opts = Options {
        top_intervals: 3,
        ..Default::default()
    };
    let alone = analysis::analyze(&mut source(story()), &opts).unwrap();
    assert_eq!((alone.devices.len(), alone.processes.len()), (2, 4));
    let mut pair = (Aggregator::new(opts.clone()), Log::default());
    let mut src = source(story());
    let anomalies = drive(&mut src, Filter::ALL, &mut pair).unwrap();
    let together = analysis::report::build(&pair.0, &anomalies, &src);
    let json = |r: &analysis::Report| serde_json::to_string(r).unwrap();
    assert_eq!(json(&together), json(&alone));
    assert_eq!(pair.1.0, heard(story(), Filter::ALL));
}

#[test]
fn a_span_keeps_exactly_the_events_inside_it_ends_included() {
    let events = story();
    let (from, to) = (events[10].ts_ns, events[40].ts_ns);
    let inside: Vec<(u64, Dev)> = events
        .iter()
        .filter(|e| (from..=to).contains(&e.ts_ns))
        .map(|e| (e.ts_ns, e.dev))
        .collect();
    assert!(inside.len() > 30 && inside.len() < events.len());
    let log = heard(events, Filter::ALL.between(from, to));
    assert_eq!(seen(&log), inside);
    // Nothing outside reaches the timeline either: no life ends outside the span.
    assert!(log.iter().all(|h| match h {
        Heard::BioDone(b) => (from..=to).contains(&b.c),
        Heard::RequestDone(r) => (from..=to).contains(&r.c),
        _ => true,
    }));
}

#[test]
fn a_device_filter_keeps_only_its_events_and_their_lives_are_as_if_alone() {
    let events = story();
    let on_dev: Vec<Event> = events.iter().filter(|e| e.dev == DEV).copied().collect();
    let log = heard(events, Filter::ALL.device(DEV));
    assert!(seen(&log).iter().all(|(_, d)| *d == DEV));
    assert_eq!(seen(&log).len(), on_dev.len());
    // The other device's events might as well not be in the trace.
    assert_eq!(log, heard(on_dev, Filter::ALL));
    let none = heard(story(), Filter::ALL.devices(Some(Vec::new())));
    assert_eq!(none, vec![Heard::End(Anomalies::default())]);
}

#[test]
fn a_sink_sees_an_event_before_its_consequences_and_hears_it_after() {
    let log = heard(story(), Filter::ALL);
    let mut open: Option<u64> = None;
    for h in &log {
        match h {
            Heard::See(ts, ..) => {
                assert_eq!(open, None, "seen before the last event was done");
                open = Some(*ts);
            }
            Heard::Event(ts, _) => {
                assert_eq!(open, Some(*ts), "heard without being seen");
                open = None;
            }
            Heard::End(_) => assert_eq!(open, None),
            _ => assert!(open.is_some(), "a consequence outside its event: {h:?}"),
        }
    }
    // The unplug is seen and heard, with nothing between.
    let i = log
        .iter()
        .position(|h| matches!(h, Heard::See(_, _, EventKind::Unplug)))
        .unwrap();
    assert!(matches!(log[i + 1], Heard::Event(_, EventKind::Unplug)));
}

#[test]
fn the_end_is_told_the_timeline_s_anomalies_once() {
    let mut log = Log::default();
    let anomalies = drive(&mut source(story()), Filter::ALL, &mut log).unwrap();
    // Bio 900's first life ended unseen when its id came back; 900 and 901 are still
    // queued at the end.
    assert_eq!(anomalies.reused_before_completion, 1);
    assert_eq!(anomalies.bios_in_flight_at_end, 2);
    assert_eq!(log.0.last(), Some(&Heard::End(anomalies)));
    assert_eq!(
        log.0.iter().filter(|h| matches!(h, Heard::End(_))).count(),
        1
    );
    assert_eq!(
        log.0
            .iter()
            .filter(|h| matches!(h, Heard::BioLost(_)))
            .count(),
        1
    );
}

#[test]
fn every_event_of_a_trace_longer_than_a_batch_is_seen_once_in_order() {
    let mut s = Sim::default();
    for n in 0..(BATCH as u64) {
        s.at(n * 10 * US)
            .plain(n + 1, 1, n * 8, 4096, US, US, US, US);
    }
    let events = s.events;
    assert!(events.len() > 2 * BATCH);
    let log = heard(events.clone(), Filter::ALL);
    let all: Vec<(u64, Dev)> = events.iter().map(|e| (e.ts_ns, e.dev)).collect();
    assert_eq!(seen(&log), all);
    let done = log
        .iter()
        .filter(|h| matches!(h, Heard::RequestDone(_)))
        .count();
    assert_eq!(done, BATCH);
}

/// A source whose read fails after its first events.
struct Failing(MemorySource, usize);

impl TraceSource for Failing {
    fn meta(&self) -> &crate::source::TraceMeta {
        self.0.meta()
    }
    fn next_event(&mut self) -> Option<Result<Event, InputError>> {
        if self.1 == 0 {
            return Some(Err(InputError::Unreadable {
                path: "(test)".into(),
                reason: "broken".into(),
            }));
        }
        self.1 -= 1;
        self.0.next_event()
    }
    fn processes(&self) -> &std::collections::BTreeMap<u32, crate::record::ProcessInfo> {
        self.0.processes()
    }
    fn notes(&self) -> &[crate::event::Note] {
        self.0.notes()
    }
    fn lost(&self) -> Option<u64> {
        None
    }
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
}

#[test]
fn a_read_error_stops_the_pass_without_an_end() {
    let mut log = Log::default();
    let mut src = Failing(source(story()), 10);
    assert!(drive(&mut src, Filter::ALL, &mut log).is_err());
    assert!(!log.0.iter().any(|h| matches!(h, Heard::End(_))));
}
