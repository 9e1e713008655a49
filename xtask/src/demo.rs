//! `cargo xtask demo`: records a known workload on a scratch loop device and shows the result.

use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::bail;
use clap::Args;

use crate::{
    BinArgs, cmd,
    scratch::{self, LoopDevice, Recorder, TempDir},
    trace_stats,
};

const IMAGE_SIZE: u64 = 64 << 20;
const SCHEDULER: &str = "mq-deadline";
/// Requests per dd pass (4 KiB each, direct I/O, so one request per block).
const BLOCKS: u32 = 2000;
const DUMP_LINES: usize = 25;
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args)]
pub struct DemoArgs {
    #[command(flatten)]
    bin: BinArgs,
}

pub fn run(args: &DemoArgs) -> anyhow::Result<()> {
    cmd::require_root("demo", "it attaches a loop device and loads eBPF programs")?;
    scratch::catch_interrupts()?;
    let bin = args.bin.resolve()?;
    scratch::check_interrupted()?;

    // Guards, dropped in reverse: recorder, loop device, directory.
    let dir = TempDir::new(&std::env::temp_dir(), "iosched-trace-demo")?;
    let image = dir.path().join("disk.img");
    scratch::create_file(&image, IMAGE_SIZE, false)?;
    let mut loopdev = LoopDevice::attach(&image)?;
    loopdev.set_scheduler(SCHEDULER)?;
    let dev = loopdev.dev().to_owned();

    let trace = dir.path().join("demo.istrace");
    let mut recorder = Recorder::start(&bin, &loopdev, &trace)?;
    recorder.wait_ready(READY_TIMEOUT)?;

    let count = format!("count={BLOCKS}");
    scratch::run_step(
        Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", dev.display()))
            .args(["bs=4k", &count, "oflag=direct"]),
    )?;
    scratch::run_step(
        Command::new("dd")
            .arg(format!("if={}", dev.display()))
            .args(["of=/dev/null", "bs=4k", &count, "iflag=direct"]),
    )?;

    let status = recorder.stop()?;
    if !status.success() {
        bail!("the recorder exited with {status} after SIGINT; see its output above");
    }
    scratch::check_interrupted()?;

    show_dump(&bin, &trace)?;
    scratch::check_interrupted()?;
    let stats = trace_stats::from_dump(&bin, &trace, true)?;
    println!("{}", summary_line(&stats));
    println!("{}", expectation_line(&stats, loopdev.name()));
    Ok(())
}

/// `iosched-trace dump FILE`, first lines only.
fn show_dump(bin: &Path, trace: &Path) -> anyhow::Result<()> {
    let mut command = Command::new(bin);
    command.arg("dump").arg(trace).stdin(Stdio::null());
    let shown = cmd::display(&command);
    eprintln!("+ {shown} | head -n {DUMP_LINES}");
    // Read it all (a few tens of thousands of lines) rather than closing the pipe early, so
    // that dump does not die of SIGPIPE and its exit status means something.
    let text = cmd::output(&mut command)?;
    for line in text.lines().take(DUMP_LINES) {
        println!("{line}");
    }
    let total = text.lines().count();
    if total > DUMP_LINES {
        println!("... ({} more lines)", total - DUMP_LINES);
    }
    Ok(())
}

fn summary_line(stats: &trace_stats::TraceStats) -> String {
    let mut line = format!("demo: {} events", stats.events);
    if !stats.kinds.is_empty() {
        let kinds: Vec<String> = stats
            .kinds
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = write!(line, " ({})", kinds.join(", "));
    }
    match stats.lost {
        Some(lost) => {
            let _ = write!(line, ", lost {lost}");
        }
        None => line.push_str(", lost unknown (no `lost` in the dump summary)"),
    }
    line
}

/// Compares the issue/complete counts with the workload: each 4 KiB direct dd block is one
/// request, so 2 x BLOCKS of each (plus any I/O others did on the device meanwhile).
fn expectation_line(stats: &trace_stats::TraceStats, dev: &str) -> String {
    let expected = u64::from(2 * BLOCKS);
    let count = |kind: &str| {
        stats
            .kinds
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(kind))
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    let (issued, completed) = (count("issue"), count("complete"));
    let verdict = if issued >= expected && completed >= expected {
        "as expected"
    } else {
        "FEWER than expected"
    };
    format!(
        "demo: the workload was {BLOCKS} 4 KiB direct writes then {BLOCKS} direct reads on {dev} \
         ({SCHEDULER}): {expected} requests; recorded {issued} issue and {completed} complete \
         events: {verdict}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_lists_kinds_and_lost() {
        let stats = trace_stats::TraceStats {
            events: 3,
            kinds: [("Complete".to_owned(), 1), ("Issue".to_owned(), 2)].into(),
            lost: Some(0),
        };
        assert_eq!(
            summary_line(&stats),
            "demo: 3 events (Complete 1, Issue 2), lost 0"
        );
    }
}
