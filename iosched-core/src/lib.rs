//! iosched-core: what iosched-trace knows about block I/O once it has been captured. No
//! kernel access, no async runtime: everything here runs on any machine, on any trace.
//!
//! The data path, bottom up:
//! - [`event`]: the decoded event model every other part works with.
//! - [`record`]: our recording format (header, chunks, stats, footer), written and read.
//! - [`blktrace`]: blktrace's binary format, read as a trace source and written from ours.
//! - [`source`]: any trace we read as one time-ordered [`source::TraceSource`]
//!   ([`trace_file`] opens a path of either format; [`follow`] reads a recording still being
//!   written).
//! - [`timeline`]: each request's and bio's life, rebuilt from the events.
//! - [`driver`]: one pass of a source's events, filtered, through the timeline into the
//!   consumers' sinks.
//! - [`analysis`]: per device/process/cgroup numbers from the timeline (`report`'s data).
//! - [`devmap`]: small per-device maps the hot loops use.
//! - [`synth`]: synthetic recordings of known shape (benchmarks, tests).
//! - [`output_file`]: how every output file is created (private, never through a symlink).
//! - [`units`]: nanoseconds and bytes printed for people, sizes parsed from flags.

pub mod analysis;
pub mod blktrace;
pub mod devmap;
pub mod driver;
pub mod event;
pub mod follow;
pub mod output_file;
pub mod record;
pub mod source;
pub mod synth;
pub mod timeline;
pub mod trace_file;
pub mod units;
