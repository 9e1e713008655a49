//! iosched-trace: the kernel side's userspace (BTF, programs, capture, the recorder and the
//! live collector) and the views and commands. What a trace means is `iosched-core`'s;
//! what other schedulers would have done with it is `iosched-model`'s.
//!
//! The data path, kernel to screen:
//!
//! ```text
//! iosched-trace-ebpf      the programs on the block tracepoints (probe's offsets)
//!   -> iosched-trace-common   the wire types both sides share (RawEvent, batches, stats)
//!   -> capture                ring buffer drained and decoded into core's Events
//!        (capture::session: the setup record and live share, the completion check)
//!   -> recorder               record: events into a recording (or blktrace files)
//!   -> iosched-core source    a recording or blktrace files read back, in time order
//!   -> iosched-core timeline  events into request lives
//!   -> iosched-core analysis  lives into the report's numbers
//!      / iosched-model        the workload replayed through scheduler models, explained
//!   -> views                  text (and dump's JSON lines); live::ui for the live screen
//! ```
//!
//! `live` takes a shortcut: capture -> timeline -> analysis per interval, in memory, with
//! no recording between ([`live::interval`]).
//!
//! Modules, lower to higher (a module uses only those above it, and `cli` and `commands`
//! use all of them):
//!
//! - [`system`]: the host's own facts (mounts, cgroups, capabilities, disk counters).
//! - [`btf`], [`probe`]: reading the running kernel's types; offsets and argument layouts the
//!   programs need; decoding request flags.
//! - [`preflight`], [`devices`]: can we trace here, and which disks; [`device_watch`]: what
//!   happens to them while recording (scheduler switched, removed, detached).
//! - [`completions`]: the disks' own completion counters against the traced completions,
//!   the check on what the programs missed.
//! - [`host`]: what `check` reports about the host (BTF, lockdown, capabilities, tracepoints
//!   as `record` decides on them, schedulers, disks) and the verdict over it.
//! - [`capture`]: loading and attaching the eBPF programs, draining their ring buffer;
//!   [`capture::session`], what `record` and `live` both run.
//! - [`schedlog`]: the scheduler's own messages through the ftrace blk tracer.
//! - [`untrusted`]: every reader of others' bytes as one entry point each (fuzzing).
//! - [`recorder`]: the `record` command's loop.
//! - [`calibrate`]: the host's per-request scheduler costs, measured on a scratch loop
//!   device; where the host profile lives.
//! - [`exporter`]: the always-on daemon: in-kernel aggregates served as Prometheus metrics.
//! - [`live`]: the live view (`live`): per-interval numbers on a terminal or as text.
//! - [`follow`]: `--follow`, a recording read while its recorder still writes it (waiting,
//!   signals, a file that stops growing).
//! - [`views`]: the text and JSON views (dump, report, replay and explain).
//! - [`cli`]: command-line syntax and validation; [`commands`]: one module per subcommand.

pub mod btf;
pub mod calibrate;
pub mod capture;
pub mod cli;
pub mod commands;
pub mod completions;
pub mod device_watch;
pub mod devices;
pub mod exporter;
pub mod follow;
pub mod host;
pub mod live;
pub mod preflight;
pub mod probe;
pub mod recorder;
pub mod schedlog;
pub mod spool;
pub mod system;
pub mod untrusted;
pub mod views;
