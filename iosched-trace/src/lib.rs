//! iosched-trace: an eBPF block-layer tracer and analyzer.
//!
//! Layout: `event` (the decoded event model), `record` (our recording format), `btf` (reading
//! the running kernel's types), `probe` (what this kernel offers and the offsets the programs
//! need), `capture` (loading, attaching, draining the ring buffer), `dump` (text/JSON output).

pub mod event;
