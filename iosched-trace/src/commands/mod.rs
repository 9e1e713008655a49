//! One module per subcommand: each takes its validated-or-raw arguments from [`crate::cli`],
//! does the work through the library, writes its output, and returns the exit code.
//! `main.rs` parses and dispatches, and turns an error into its one line on stderr.
//!
//! Owns: what each command does, in order (check, open, compute, render, write). Must not:
//! hold argument syntax (`cli`), rendering (`views`), or what the kernel side or the models
//! compute: a command calls them.
//!
//! - [`check`]: can this host trace, and what will it get.
//! - [`record`], [`live`]: the kernel side (need root); [`calibrate`]: the host's scheduler
//!   costs (root); [`exporter`]: the metrics daemon (root).
//! - [`dump`], [`report`], [`convert`]: a trace read back.
//! - [`replay`], [`explain`]: a trace's workload through the scheduler models.
//! - [`synth`], [`model_bench`]: development only, hidden from `--help` (xtask's benchmarks
//!   call them).

pub mod calibrate;
pub mod check;
pub mod convert;
pub mod dump;
pub mod explain;
pub mod exporter;
pub mod live;
pub mod model_bench;
pub mod record;
pub mod replay;
pub mod report;
pub mod synth;

use std::io::{self, Write};

/// Writes a rendered view to stdout in one go.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
