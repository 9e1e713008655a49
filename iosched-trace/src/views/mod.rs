//! The views: what the commands print. Each one lays out data computed elsewhere (a trace
//! source's events, `iosched_core::analysis`'s report, `iosched_model`'s replays and
//! explanations) and computes nothing of its own beyond formatting.
//!
//! - [`calibrate`]: `calibrate`'s table.
//! - [`check`]: `check`'s lines, one per fact about the host.
//! - [`dump`]: `dump`, every event of a trace as blkparse-style text or JSON lines.
//! - [`report`]: `report`'s text, the report laid out in sections and columns.
//! - [`replay`]: `replay`'s text.
//! - [`html`]: `report --html`'s self-contained page (our own script and styles inlined).
//! - [`explain`]: `explain`'s text and JSON document, one module per cause, the words for
//!   the model's structured findings.
//! - [`perfetto`]: `convert --to perfetto`'s protobuf stream for the Perfetto UI.
//! - [`parquet`]: `convert --to parquet`'s tables for SQL over many hosts (docs/FLEET.md).
//! - [`metrics`]: the exporter's metric families and their OpenMetrics and Prometheus text
//!   expositions (docs/EXPORTER.md).
//!
//! `--json` output is the data serialized, by the commands themselves, except `dump --json`,
//! whose lines are [`dump`]'s, and `explain --json`, which [`explain`] builds from the words. The live view's screen is `live::ui`'s.
//!
//! Owns: layout. Must not: compute numbers, run models, or write to stdout (a command
//! writes what a view returns; [`dump`] writes to the writer it is given, and its reader
//! warnings to stderr unless told not to).

pub mod calibrate;
pub mod check;
pub mod dump;
pub mod explain;
pub mod html;
pub mod metrics;
pub mod model_check;
pub mod parquet;
pub mod perfetto;
pub mod replay;
pub mod report;
