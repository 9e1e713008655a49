//! `iosched-trace dump`: every event of a trace, through [`crate::views::dump`], to stdout.
//! With `--follow`, of a recording still being written ([`crate::follow`]), the lines out
//! as soon as the recording pauses.

use std::{
    cell::RefCell,
    io::{self, BufWriter, Write},
    process::ExitCode,
    rc::Rc,
};

use iosched_core::{source::TraceSource, trace_file};

use crate::{cli::DumpArgs, views::dump};

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    if args.follow {
        // Buffered while events come in bulk, flushed whenever the recording pauses: each
        // line is out as soon as nothing more is there to read.
        let out = Shared(Rc::new(RefCell::new(BufWriter::new(io::stdout()))));
        let flush = out.clone();
        let mut source = crate::follow::open(&args.file, "dump", None)?
            // An idle device's last events are shown without waiting for newer ones.
            .release_by_writer_clock()
            .on_wait(move || {
                // A failure shows at the next write, which the dump reports.
                let _ = flush.0.borrow_mut().flush();
            });
        return write(&mut out.clone(), &mut source, args.json);
    }
    crate::system::let_interrupt_pass_for_stream(&args.file);
    let mut source = trace_file::open(&args.file)?;
    write(
        &mut BufWriter::new(io::stdout().lock()),
        source.as_mut(),
        args.json,
    )
}

/// One buffered stdout, written by the dump and flushed by the follower.
#[derive(Clone)]
struct Shared(Rc<RefCell<BufWriter<io::Stdout>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.borrow_mut().write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

fn write(
    out: &mut impl Write,
    source: &mut dyn TraceSource,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let result = if json {
        dump::write_json(out, source)
    } else {
        dump::write_text(out, source)
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
