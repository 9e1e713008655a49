//! The embedded scheduler model: replay a recorded workload under other schedulers and
//! tunables, and explain why the recorded scheduler was slow.
//!
//! - [`workload`]: per-process request streams and their triggers (closed/open loop,
//!   dependencies between processes), extracted from a trace.
//! - [`continuation`]: time-bounded processes (fio `--runtime`) continued to their end.
//! - [`device`]: the device's service time, fitted from the trace's D2C or given.
//! - [`sched`]: scheduler models (none, mq-deadline, bfq, kyber, legacy cfq), pure and
//!   deterministic,
//!   logging their decisions.
//! - [`sim`]: the discrete-event simulator; it writes our own events, so a replay is
//!   analysed by [`iosched_core::analysis`], the same code as a recording. `agenda`: its pending
//!   events in time order.
//! - [`replay`]: configurations, runs, and their comparison with the recording.
//! - [`storm`]: preemption storms as the recording shows them (BFQ's log, or the trace).
//! - [`throttle`]: wbt and Kyber throttling as the trace shows it (waits, who, when).
//! - [`explain`]: ranked findings with evidence and a model-estimated effect.
//! - [`scenarios`]: hand-built workloads (seed 001's dependency cycle, a mixed load).
//! - [`bfqlog`]: BFQ's own decision log (blktrace `m` notes) parsed into decisions.
//! - [`bfqcheck`]: the trace-driven decision check: the BFQ model fed the recording's own
//!   requests and BFQ's decisions, its decisions compared with BFQ's log.
//!
//! Owns: modelling. Must not: read the kernel, print.

mod agenda;
pub mod bfqcheck;
pub mod bfqlog;
pub mod continuation;
pub mod cpu;
pub mod device;
pub mod explain;
pub mod model_check;
pub mod replay;
pub mod scenarios;
pub mod sched;
pub mod sim;
pub mod storm;
pub mod throttle;
pub mod workload;

#[cfg(test)]
mod cpu_tests;
#[cfg(test)]
mod deadline_prio_tests;
#[cfg(test)]
mod lost_completion_tests;
#[cfg(test)]
mod merging_tests;
#[cfg(test)]
mod storm_tests;
#[cfg(test)]
mod tag_depth_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod throttle_tests;
