//! `report --follow`'s interval lines: the events of a followed recording, as they are read,
//! cut into intervals of trace time by the live view's [`IntervalBuilder`] (each interval's
//! numbers are what `report --from --to` computes for it), a line per device printed as
//! each interval closes.
//!
//! The events come in file order. They are put back in time order with the live view's
//! [`Reorder`], released up to a watermark: 100 ms before the newest event read (the
//! reordering window of every reader of recordings), or, when no events come, half a second
//! before the recorder's last CPU sample (written every 100 ms on the trace clock: by then
//! the recorder has drained everything older), so that an idle device still gets its
//! `no I/O` lines. An event older than the watermark when it arrives is counted late for
//! its interval; the final report, which reads the recording as a whole, is not affected.

use std::io::Write;

use iosched_core::{
    analysis::report::resolve_devices,
    event::{Dev, Event},
    record::{DeviceInfo, TimeOrdered},
    source::{TraceSource, WRITER_SETTLED_NS},
};

use crate::{
    follow::Watch,
    live::interval::{IntervalBuilder, Reorder, Snapshot},
    views,
};

/// Events older than this before the newest read are released.
const WINDOW_NS: u64 = TimeOrdered::<std::iter::Empty<Event>>::DEFAULT_WINDOW_NS;

/// The interval lines' state.
pub struct Intervals {
    /// `-d` as given; resolved against the recording's devices at the first read.
    device_args: Vec<String>,
    /// `None` until the first read; then `Some(None)` for every device.
    wanted: Option<Option<Vec<Dev>>>,
    /// The recording's devices `wanted` keeps (set at the first read).
    devices: Vec<DeviceInfo>,
    interval_ns: u64,
    reorder: Reorder,
    builder: Option<IntervalBuilder>,
    newest_ns: u64,
    /// Where the lines go: stdout, or stderr where stdout holds the JSON report.
    out: Box<dyn Write>,
}

impl Intervals {
    /// Lines for the devices `-d` named (all if none), each `interval` of trace time, to
    /// `out` (each line flushed as it is written).
    pub fn new(
        device_args: Vec<String>,
        interval: std::time::Duration,
        out: Box<dyn Write>,
    ) -> Self {
        Intervals {
            device_args,
            wanted: None,
            devices: Vec::new(),
            interval_ns: (interval.as_nanos() as u64).max(1),
            reorder: Reorder::default(),
            builder: None,
            newest_ns: 0,
            out,
        }
    }

    /// Pushes the held events older than `watermark` through the intervals; with
    /// `close_to_watermark`, also closes the intervals that end before it (nothing older can
    /// come), else only those the events moved past.
    fn release(&mut self, watermark: u64, close_to_watermark: bool, source: &dyn TraceSource) {
        let devices = &self.devices;
        let interval_ns = self.interval_ns;
        let lost = source.lost().unwrap_or(0);
        let mut snaps = Vec::new();
        let builder = &mut self.builder;
        self.reorder.release(watermark, |ev| {
            let b = builder.get_or_insert_with(|| {
                IntervalBuilder::new(devices.clone(), ev.ts_ns, interval_ns)
            });
            b.set_lost(lost);
            b.push(ev, &mut snaps);
        });
        if let Some(b) = builder {
            b.set_lost(lost);
            if close_to_watermark {
                b.advance_to(watermark, &mut snaps);
            }
        }
        self.print(&snaps);
    }

    fn print(&mut self, snaps: &[Snapshot]) {
        let Some(start) = self.builder.as_ref().map(|b| b.start_ns()) else {
            return;
        };
        let mut text = String::new();
        for snap in snaps {
            let devices: Vec<_> = snap
                .devices
                .iter()
                .filter_map(|d| d.report.devices.first())
                .collect();
            text.push_str(&views::report::interval_lines(
                snap.from_ns.saturating_sub(start) as f64 / 1e9,
                snap.to_ns.saturating_sub(start) as f64 / 1e9,
                decimals(self.interval_ns),
                &devices,
                snap.lost_total,
            ));
        }
        if text.is_empty() {
            return;
        }
        // A closed pipe or a full disk: the lines are a courtesy, the report still comes
        // (and says why it cannot be written, if it cannot).
        let _ = self
            .out
            .write_all(text.as_bytes())
            .and_then(|()| self.out.flush());
    }
}

/// Decimals that write every multiple of `interval_ns`, in seconds, exactly (at least one,
/// at most three: `0.0-1.0 s`, `0.25-0.50 s`).
fn decimals(interval_ns: u64) -> usize {
    (1..3)
        .find(|&d| interval_ns.is_multiple_of(10u64.pow(9 - d as u32)))
        .unwrap_or(3)
}

impl Watch for Intervals {
    fn read(&mut self, arrived: &[Event], source: &dyn TraceSource) {
        if self.wanted.is_none() {
            // An unknown name fails the report itself, before anything is read.
            let wanted = resolve_devices(&source.meta().devices, &self.device_args).unwrap_or(None);
            self.devices = source
                .meta()
                .devices
                .iter()
                .filter(|d| wanted.as_ref().is_none_or(|w| w.contains(&d.dev)))
                .cloned()
                .collect();
            self.wanted = Some(wanted);
        }
        let wanted = self.wanted.as_ref().expect("set above");
        for ev in arrived {
            if wanted.as_ref().is_none_or(|w| w.contains(&ev.dev)) {
                self.newest_ns = self.newest_ns.max(ev.ts_ns);
                self.reorder.push(*ev);
            }
        }
        let by_events = self.newest_ns.saturating_sub(WINDOW_NS);
        let by_clock = source
            .cpu_samples()
            .last()
            .map_or(0, |s| s.ts_ns.saturating_sub(WRITER_SETTLED_NS));
        self.release(by_events.max(by_clock), true, source);
    }

    fn end(&mut self, source: &dyn TraceSource) {
        // Every event is in: release them all. The last interval, cut short by the end of
        // the recording, is left to the full report that follows.
        self.release(u64::MAX, false, source);
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, fs, io, rc::Rc, thread, time::Duration};

    use iosched_core::{
        analysis::{self, Options},
        record::{DeviceInfo, Header, RecordingWriter, test_support::sample_stats},
        timeline::sim::{DEV, Sim},
        trace_file,
    };

    use super::*;

    /// Lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Rc<RefCell<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    const MS: u64 = 1_000_000;

    /// Reads of 1 ms each, 50 ms apart: 5 in the first second, none in the second, 8 in the
    /// third, one at 3.5 s; written as a recording of small chunks.
    fn recording() -> Vec<u8> {
        let mut s = Sim::default();
        let mut id = 1;
        for (second, n) in [(0u64, 5u64), (2, 8), (3, 0)] {
            for i in 0..n {
                s.at(second * 1000 * MS + i * 50 * MS).plain(
                    id,
                    10,
                    id * 8,
                    4096,
                    10_000,
                    10_000,
                    10_000,
                    MS,
                );
                id += 10;
            }
        }
        s.at(3500 * MS)
            .plain(id, 10, id * 8, 4096, 10_000, 10_000, 10_000, MS);
        let header = Header::for_this_host(
            vec![DeviceInfo {
                name: "loop0".into(),
                dev: DEV,
                request_based: true,
                ..Default::default()
            }],
            vec!["test".into()],
        );
        let mut w = RecordingWriter::new(Vec::new(), &header)
            .unwrap()
            .with_chunk_events(7);
        for ev in &s.events {
            w.push(ev).unwrap();
        }
        w.write_stats(&sample_stats(s.events.len() as u64)).unwrap();
        let footer = w.footer(sample_stats(s.events.len() as u64), 0, "test");
        w.finish(&footer).unwrap()
    }

    /// A recording written in pieces while it is followed: a line per interval that closed,
    /// with its requests, and a final report that is `report`'s of the finished file; the
    /// follower ends by itself after the footer.
    #[test]
    fn interval_times_are_written_exactly() {
        assert_eq!(decimals(1_000_000_000), 1);
        assert_eq!(decimals(100_000_000), 1);
        assert_eq!(decimals(250_000_000), 2);
        assert_eq!(decimals(10_000_000), 2);
        assert_eq!(decimals(1_000_000), 3);
        assert_eq!(decimals(1_234_567), 3);
    }

    #[test]
    fn a_followed_recording_gives_interval_lines_and_the_files_report() {
        let dir =
            std::env::temp_dir().join(format!("iosched-report-follow-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rec.istrace");
        let bytes = recording();
        let writer = {
            let path = path.clone();
            let bytes = bytes.clone();
            thread::spawn(move || {
                use std::io::Write as _;
                // Created a moment after the follower starts waiting for it.
                thread::sleep(Duration::from_millis(150));
                let mut f = fs::File::create(&path).unwrap();
                for piece in bytes.chunks(333) {
                    f.write_all(piece).unwrap();
                    thread::sleep(Duration::from_millis(5));
                }
            })
        };
        let lines = Lines::default();
        let watch = Intervals::new(Vec::new(), Duration::from_secs(1), Box::new(lines.clone()));
        let mut follower = crate::follow::open(&path, "report", Some(Box::new(watch))).unwrap();
        let opts = Options::default();
        let followed = analysis::analyze(&mut follower, &opts).unwrap();
        writer.join().unwrap();
        assert!(follower.footer().is_some());
        assert!(!follower.was_stopped());
        let whole = analysis::analyze(trace_file::open(&path).unwrap().as_mut(), &opts).unwrap();
        assert_eq!(
            serde_json::to_value(&followed).unwrap(),
            serde_json::to_value(&whole).unwrap()
        );
        assert_eq!(whole.devices[0].read.requests, 14);

        let text = String::from_utf8(lines.0.borrow().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].trim_start().starts_with("0.0-1.0 s  loop0"),
            "{text}"
        );
        assert!(lines[0].contains(" 5 requests "), "{text}");
        assert!(lines[0].contains("D2C p50"), "{text}");
        assert!(
            lines[1]
                .trim_start()
                .starts_with("1.0-2.0 s  no I/O  lost "),
            "{text}"
        );
        assert!(lines[2].contains(" 8 requests "), "{text}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
