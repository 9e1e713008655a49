//! `iosched-trace dump`: every event of a trace, through [`crate::views::dump`], to stdout.

use std::{
    io::{self, BufWriter, Write},
    process::ExitCode,
};

use iosched_core::trace_file;

use crate::{cli::DumpArgs, views::dump};

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    crate::system::let_interrupt_pass_for_stream(&args.file);
    let mut source = trace_file::open(&args.file)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let result = if args.json {
        dump::write_json(&mut out, source.as_mut())
    } else {
        dump::write_text(&mut out, source.as_mut())
    };
    match result {
        // `dump | head` closes the pipe: not an error worth a message.
        Err(e) if e.is_broken_pipe() => return Ok(ExitCode::SUCCESS),
        other => other?,
    };
    if let Err(e) = out.flush()
        && e.kind() != io::ErrorKind::BrokenPipe
    {
        return Err(e.into());
    }
    Ok(ExitCode::SUCCESS)
}
