//! One pass over a trace: the events a [`Filter`] keeps, each shown to a [`TraceSink`] and
//! then pushed through the [`Timeline`], whose results go to the same sink. `report`'s
//! analysis, the model's workload extraction and BFQ's recorded requests read a whole
//! [`TraceSource`] with [`drive`]; the live view, whose events come one at a time, pushes
//! them into a [`Driver`] itself. A pair of sinks is a sink, so one pass can feed several
//! consumers, each hearing exactly what it would have heard alone.
//!
//! What the filter drops never reaches the timeline: a request on a device left out, or
//! before the span kept, does not exist for the pass. A window whose numbers are wanted
//! but whose requests started before it (`report --from`), or a process filter that must
//! leave device totals whole, is the sink's business (`analysis::Aggregator`), not the
//! filter's.
//!
//! Owns: reading a source in batches, which events pass, the order in which a sink hears of
//! an event and of its consequences. Must not: aggregate, keep events.

use crate::{
    event::{Dev, Event},
    record::DeviceInfo,
    source::{InputError, TraceSource},
    timeline::{Anomalies, BioLife, DeviceState, LifeSink, RequestLife, Submitter, Timeline},
};

/// A consumer of a pass: the timeline's results ([`LifeSink`]), plus every kept event before
/// the timeline takes it and the end of the trace. Every method has an empty default.
#[allow(unused_variables)]
pub trait TraceSink: LifeSink {
    /// An event the filter kept, before the timeline processes it (its consequences and
    /// [`LifeSink::event`] follow).
    fn see(&mut self, ev: &Event) {}
    /// The trace ended; `anomalies` is what the timeline could not place in a life.
    fn end(&mut self, anomalies: &Anomalies) {}
}

/// Which events a pass keeps: those of some devices, within a time span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// `None`: every device.
    devices: Option<Vec<Dev>>,
    /// Absolute trace ns, both ends included.
    from_ns: u64,
    to_ns: u64,
}

impl Default for Filter {
    fn default() -> Self {
        Filter::ALL
    }
}

impl Filter {
    /// Every event.
    pub const ALL: Filter = Filter {
        devices: None,
        from_ns: 0,
        to_ns: u64::MAX,
    };

    /// Only the events of `devices` (`None`: of every device).
    pub fn devices(self, devices: Option<Vec<Dev>>) -> Filter {
        Filter { devices, ..self }
    }

    /// Only the events of `dev`.
    pub fn device(self, dev: Dev) -> Filter {
        self.devices(Some(vec![dev]))
    }

    /// Only the events from `from_ns` to `to_ns`, both included (the events' own clock).
    pub fn between(self, from_ns: u64, to_ns: u64) -> Filter {
        Filter {
            from_ns,
            to_ns,
            ..self
        }
    }

    #[inline]
    pub fn keeps(&self, ev: &Event) -> bool {
        ev.ts_ns >= self.from_ns
            && ev.ts_ns <= self.to_ns
            && self.devices.as_ref().is_none_or(|d| d.contains(&ev.dev))
    }
}

/// The timeline and the filter of a pass, for events pushed one at a time.
pub struct Driver {
    timeline: Timeline,
    filter: Filter,
}

impl Driver {
    /// A pass over a trace of `devices` (those not request-based complete bios directly).
    pub fn new(devices: &[DeviceInfo], filter: Filter) -> Driver {
        let bio_based = devices.iter().filter(|d| !d.request_based).map(|d| d.dev);
        Driver {
            timeline: Timeline::new(bio_based),
            filter,
        }
    }

    /// The timeline as the events pushed so far left it.
    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    /// One event, in time order: if the filter keeps it, `sink` sees it, then hears of its
    /// consequences from the timeline.
    #[inline]
    pub fn push(&mut self, ev: &Event, sink: &mut impl TraceSink) {
        if !self.filter.keeps(ev) {
            return;
        }
        sink.see(ev);
        self.timeline.push(ev, sink);
    }

    /// The trace ended: the timeline counts what is still open, and `sink` is told.
    pub fn finish(&mut self, sink: &mut impl TraceSink) -> Anomalies {
        let anomalies = self.timeline.finish().clone();
        sink.end(&anomalies);
        anomalies
    }
}

/// Events read from the source at a time.
const BATCH: usize = 4096;

/// Reads all of `source` through a [`Driver`] into `sink`, and ends it. On a read error
/// the pass stops there (the sink is not ended).
pub fn drive(
    source: &mut dyn TraceSource,
    filter: Filter,
    sink: &mut impl TraceSink,
) -> Result<Anomalies, InputError> {
    let mut driver = Driver::new(&source.meta().devices, filter);
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        source.next_batch(&mut batch, BATCH)?;
        if batch.is_empty() {
            break;
        }
        for ev in &batch {
            driver.push(ev, sink);
        }
    }
    Ok(driver.finish(sink))
}

impl<S: LifeSink + ?Sized> LifeSink for &mut S {
    #[inline]
    fn event(&mut self, ev: &Event) {
        (**self).event(ev);
    }
    #[inline]
    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        (**self).queued(ev, state);
    }
    #[inline]
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {
        (**self).issued(ev, submitter, state);
    }
    #[inline]
    fn bio_done(&mut self, bio: &BioLife) {
        (**self).bio_done(bio);
    }
    #[inline]
    fn bio_lost(&mut self, bio: &BioLife) {
        (**self).bio_lost(bio);
    }
    #[inline]
    fn request_done(&mut self, rq: &RequestLife) {
        (**self).request_done(rq);
    }
    #[inline]
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        (**self).device_state(dev, ts, state);
    }
}

impl<S: TraceSink + ?Sized> TraceSink for &mut S {
    #[inline]
    fn see(&mut self, ev: &Event) {
        (**self).see(ev);
    }
    #[inline]
    fn end(&mut self, anomalies: &Anomalies) {
        (**self).end(anomalies);
    }
}

/// Both sinks hear everything, the first one first.
impl<A: LifeSink, B: LifeSink> LifeSink for (A, B) {
    #[inline]
    fn event(&mut self, ev: &Event) {
        self.0.event(ev);
        self.1.event(ev);
    }
    #[inline]
    fn queued(&mut self, ev: &Event, state: &DeviceState) {
        self.0.queued(ev, state);
        self.1.queued(ev, state);
    }
    #[inline]
    fn issued(&mut self, ev: &Event, submitter: Option<&Submitter>, state: &DeviceState) {
        self.0.issued(ev, submitter, state);
        self.1.issued(ev, submitter, state);
    }
    #[inline]
    fn bio_done(&mut self, bio: &BioLife) {
        self.0.bio_done(bio);
        self.1.bio_done(bio);
    }
    #[inline]
    fn bio_lost(&mut self, bio: &BioLife) {
        self.0.bio_lost(bio);
        self.1.bio_lost(bio);
    }
    #[inline]
    fn request_done(&mut self, rq: &RequestLife) {
        self.0.request_done(rq);
        self.1.request_done(rq);
    }
    #[inline]
    fn device_state(&mut self, dev: Dev, ts: u64, state: &DeviceState) {
        self.0.device_state(dev, ts, state);
        self.1.device_state(dev, ts, state);
    }
}

impl<A: TraceSink, B: TraceSink> TraceSink for (A, B) {
    #[inline]
    fn see(&mut self, ev: &Event) {
        self.0.see(ev);
        self.1.see(ev);
    }
    #[inline]
    fn end(&mut self, anomalies: &Anomalies) {
        self.0.end(anomalies);
        self.1.end(anomalies);
    }
}

#[cfg(test)]
mod tests;
