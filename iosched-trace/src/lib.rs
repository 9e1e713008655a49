//! iosched-trace: the kernel side's userspace (BTF, programs, capture, the recorder and the
//! live collector) and the views and commands. What a trace means is `iosched-core`'s;
//! what other schedulers would have done with it is `iosched-model`'s.
//!
//! - [`btf`], [`probe`]: reading the running kernel's types; offsets and argument layouts the
//!   programs need; decoding request flags.
//! - [`preflight`], [`devices`]: can we trace here, and which disks.
//! - [`capture`]: loading and attaching the eBPF programs, draining their ring buffer.
//! - [`recorder`]: the `record` command's loop; [`completions`]: the disks' own completion
//!   counters, the check on what the programs missed; [`schedlog`]: the scheduler's own
//!   messages through the ftrace blk tracer.
//! - [`live`]: the live view (`live`): per-interval numbers on a terminal or as text.
//! - [`dump`], [`report`], [`replay_view`], [`explain_view`]: the text and JSON views.
//! - [`cli`]: command-line syntax and validation.

pub mod btf;
pub mod capture;
pub mod cli;
pub mod completions;
pub mod devices;
pub mod dump;
pub mod explain_view;
pub mod live;
pub mod preflight;
pub mod probe;
pub mod recorder;
pub mod replay_view;
pub mod report;
pub mod schedlog;
