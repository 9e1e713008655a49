//! iosched-trace: an eBPF block-layer tracer and analyzer.
//!
//! - [`event`]: the decoded event model every other part works with.
//! - [`btf`], [`probe`]: reading the running kernel's types; offsets and argument layouts the
//!   programs need; decoding request flags.
//! - [`preflight`], [`devices`]: can we trace here, and which disks.
//! - [`capture`]: loading and attaching the eBPF programs, draining their ring buffer.
//! - [`record`]: our recording format; [`recorder`]: the `record` command's loop;
//!   [`schedlog`]: the scheduler's own messages through the ftrace blk tracer.
//! - [`input`]: any trace we read (recordings, blktrace files) as one time-ordered source.
//! - [`timeline`]: each request's and bio's life, rebuilt from the events.
//! - [`analysis`]: per device/process/cgroup numbers from the timeline (`report`).
//! - [`model`]: scheduler models, replay under other schedulers, `explain`.
//! - [`blktrace`]: blktrace's binary format, read as a trace source and written from ours.
//! - [`dump`]: blkparse-style text and JSON lines.
//! - [`live`]: the live view (`live`): per-interval numbers on a terminal or as text.
//! - [`cli`]: command-line syntax and validation.

pub mod analysis;
pub mod blktrace;
pub mod btf;
pub mod capture;
pub mod cli;
pub mod completions;
pub mod devices;
pub mod devmap;
pub mod dump;
pub mod event;
pub mod input;
pub mod live;
pub mod model;
pub mod preflight;
pub mod probe;
pub mod record;
pub mod recorder;
pub mod replay_view;
pub mod report;
pub mod schedlog;
pub mod synth;
pub mod timeline;
