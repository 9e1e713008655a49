//! `cargo xtask validate [NAME...]`: the scheduler model against the test bed. Each seed
//! scenario is run with a `none` run added to every workload (and default bfq and
//! mq-deadline runs where it has none; `iosched_testbed::scenario::validate`), then:
//! - cross-prediction: the `none` recording replayed under every other run's scheduler and
//!   tunables, beside that run's recording (throughput, mean Q2C, idling waste);
//! - self-consistency: every recording replayed under the configuration it was recorded
//!   with (target: throughput within 10%, mean Q2C within 15%);
//! - decision agreement: every BFQ recording (recorded with `--sched-log`, BFQ's own log),
//!   the model's switches and expiry reasons against BFQ's for the same trace (the
//!   self-consistency replay's `decision_check`; target: 90% at the same point with the
//!   same reason);
//! - explain: every recording's findings, and each what-if that another run of the scenario
//!   recorded for real, its estimated effect beside the measured one (target: within 25%).
//!
//! A `none` recording of several interleaved processes has every request seeking, so its
//! device fit cannot see the disk's sequential cost, which a scheduler that serves one
//! process at a time (BFQ) lives on. When the scenario also has a one-process `none`
//! recording, the cross-predictions of its other workloads run on a device whose
//! sequential costs come from that one and whose positioning comes from the workload's
//! own (`validate::sequential_and_seeking`; `--own-fit`: each workload's own fit only).
//!
//! `--from DIR` validates recordings kept earlier (`DIR/NAME/LABEL.istrace`, as
//! `scenario --keep` or `validate --keep` leave them) without running anything, and needs
//! no root; runs missing there are skipped.
//!
//! The schedulers' CPU cost: validate first calibrates this host (`iosched-trace calibrate`,
//! kept as `DIR/host-profile.json` with `--keep`, and read from there with `--from`), and
//! every replay and explain uses that profile; `--no-calibrate` leaves them to the
//! recordings' own profile or the documented defaults.
//!
//! `--device hdd|flash|ram|all` chooses the device kinds (default: the emulated hard disk,
//! its seed scenarios, recordings in `DIR/NAME/`). `flash` is the emulated flash device,
//! `ram` a loop device on a file in /dev/shm; both run the fast-device scenarios
//! (`scenario::FAST_NAMES`) and keep their recordings in `DIR/flash/NAME/`,
//! `DIR/ram/NAME/`. Each kind ends with a summary table (scenario, run, number, recorded,
//! predicted, error, within target), also written to `DIR/validate-KIND.json` with `--keep`.
//! `--replay-arg=ARG` (repeatable) hands ARG to every `iosched-trace replay`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use iosched_testbed::{
    loop_device::kernel_has_scheduler,
    scenario::{
        self, Bed, RunOptions, Tools, priority,
        validate::{self, Replayed},
        whatif,
    },
    tempdir::TempDir,
};

use crate::{BinArgs, cmd, disk, scratch};

#[derive(Args)]
pub struct ValidateArgs {
    /// Scenarios to validate (default: all of the device kind's: the seed scenarios on the
    /// hard disk, the fast-device ones on flash and RAM).
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(
        scenario::NAMES.into_iter().chain(scenario::FAST_NAMES)))]
    names: Vec<String>,
    /// The device kinds to validate on.
    #[arg(long, value_enum, default_value_t = DeviceArg::Hdd)]
    device: DeviceArg,
    /// An argument for every `iosched-trace replay` (repeatable), e.g.
    /// `--replay-arg=--host-profile=FILE`.
    #[arg(long = "replay-arg", value_name = "ARG", allow_hyphen_values = true)]
    replay_args: Vec<String>,
    /// Keep the recordings in DIR/NAME/ (LABEL.istrace, LABEL.report.json, .txt, .html).
    #[arg(long, value_name = "DIR", conflicts_with = "from")]
    keep: Option<PathBuf>,
    /// Use recordings kept earlier in DIR/NAME/LABEL.istrace instead of running.
    #[arg(long, value_name = "DIR")]
    from: Option<PathBuf>,
    /// Cross-predict every workload on its own `none` recording's device fit, also where
    /// a one-process recording of the scenario measured the sequential costs.
    #[arg(long)]
    own_fit: bool,
    /// Replay with the scheduler costs the recordings carry or the documented defaults,
    /// instead of calibrating this host first (`iosched-trace calibrate`, about 12 s).
    #[arg(long)]
    no_calibrate: bool,
    #[command(flatten)]
    bin: BinArgs,
}

/// `--device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DeviceArg {
    /// The emulated rotational disk (seed scenarios).
    Hdd,
    /// The emulated flash device, default parameters (fast-device scenarios).
    Flash,
    /// A RAM-backed loop device (fast-device scenarios).
    Ram,
    /// hdd, flash and ram, one after the other.
    All,
}

impl DeviceArg {
    fn beds(self) -> Vec<Bed> {
        let flash = || Bed::Flash(Default::default());
        match self {
            DeviceArg::Hdd => vec![Bed::Hdd],
            DeviceArg::Flash => vec![flash()],
            DeviceArg::Ram => vec![Bed::Ram],
            DeviceArg::All => vec![Bed::Hdd, flash(), Bed::Ram],
        }
    }
}

/// Target of a cross-prediction error, %.
const CROSS_TARGET: f64 = 25.0;
const SELF_THR_TARGET: f64 = 10.0;
const SELF_Q2C_TARGET: f64 = 15.0;

pub fn run(args: &ValidateArgs) -> anyhow::Result<()> {
    let trace_bin = args.bin.resolve()?;
    let work = tempdir()?;
    let base_dir = match (&args.from, &args.keep) {
        (Some(from), _) => from.clone(),
        (None, Some(keep)) => keep.clone(),
        (None, None) => work.path().to_owned(),
    };
    if args.from.is_none() {
        cmd::require_root(
            "validate",
            "it mounts FUSE, attaches a loop device and loads eBPF programs (or give --from DIR)",
        )?;
        scratch::catch_interrupts()?;
    }
    let daemon_bin = if args.from.is_none() {
        Some(disk::build_daemon()?)
    } else {
        None
    };
    // The schedulers' CPU cost on this host, as `replay` and `explain` are told to use it:
    // without it they fall back to BFQ's documentation's figures, which on a fast device
    // under-charge mq-deadline and kyber several times over (a RAM device's cross-predictions
    // then ran 25-36% high).
    let host_profile = host_profile(args, &trace_bin, work.path())?;
    let mut replay_args = args.replay_args.clone();
    if let Some(p) = &host_profile {
        replay_args.push(format!("--host-profile={}", p.display()));
    }
    // `explain` takes the profile too (ours, or one given as `--replay-arg=--host-profile=`),
    // but not the other replay arguments.
    let explain_args: Vec<String> = replay_args
        .iter()
        .filter(|a| a.starts_with("--host-profile"))
        .cloned()
        .collect();
    let beds = args.device.beds();
    let several = beds.len() > 1;
    let mut failed = Vec::new();
    for bed in &beds {
        let names: Vec<&str> = if !args.names.is_empty() {
            args.names.iter().map(String::as_str).collect()
        } else if *bed == Bed::Hdd {
            scenario::NAMES.to_vec()
        } else {
            scenario::FAST_NAMES.to_vec()
        };
        // The hard disk's recordings where they always were; the others' beside them.
        let dir = match bed {
            Bed::Hdd => base_dir.clone(),
            other => base_dir.join(other.name()),
        };
        if several {
            println!(
                "
==================== device: {} ====================",
                bed.name()
            );
        }
        let ctx = Ctx {
            args,
            replay_args: &replay_args,
            explain_args: &explain_args,
            trace_bin: &trace_bin,
            daemon_bin: daemon_bin.as_deref(),
            work: work.path(),
        };
        let started = std::time::Instant::now();
        match validate_bed(&ctx, bed, &names, &dir) {
            Ok(()) => eprintln!(
                "validate: device {} done in {:.0} s",
                bed.name(),
                started.elapsed().as_secs_f64()
            ),
            Err(e) if several && !scratch::interrupted() => {
                eprintln!("validate: device {} failed: {e:#}", bed.name());
                failed.push(bed.name());
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(keep) = &args.keep {
        eprintln!("validate: recordings kept in {}", keep.display());
    }
    anyhow::ensure!(
        failed.is_empty(),
        "validation failed on {}",
        failed.join(", ")
    );
    Ok(())
}

/// The host profile the replays use: a fresh calibration of this host when validate runs the
/// scenarios itself (root), kept beside the recordings with `--keep`; with `--from DIR`, the
/// one kept in DIR, if any (else the recordings' own, or the defaults). `--no-calibrate` or a
/// `--replay-arg=--host-profile=...` overrides both.
fn host_profile(
    args: &ValidateArgs,
    trace_bin: &Path,
    work: &Path,
) -> anyhow::Result<Option<PathBuf>> {
    const NAME: &str = "host-profile.json";
    let given = args
        .replay_args
        .iter()
        .any(|a| a.starts_with("--host-profile"));
    if args.no_calibrate || given {
        return Ok(None);
    }
    if let Some(from) = &args.from {
        let kept = from.join(NAME);
        return Ok(kept.is_file().then_some(kept));
    }
    let dir = args.keep.as_deref().unwrap_or(work);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(NAME);
    eprintln!("validate: calibrating this host's scheduler costs (iosched-trace calibrate)");
    let status = std::process::Command::new(trace_bin)
        .arg("calibrate")
        .arg("-o")
        .arg(&path)
        .status()
        .with_context(|| format!("running {} calibrate", trace_bin.display()))?;
    anyhow::ensure!(
        status.success(),
        "iosched-trace calibrate failed ({status}); --no-calibrate replays with the \
         recordings' scheduler costs or the documented defaults"
    );
    Ok(Some(path))
}

/// What every device kind's validation shares.
struct Ctx<'a> {
    args: &'a ValidateArgs,
    /// `--replay-arg`s, and the host profile's.
    replay_args: &'a [String],
    /// The host profile's argument for `explain`, if any (calibrated or given).
    explain_args: &'a [String],
    trace_bin: &'a Path,
    /// `None` with `--from` (nothing runs).
    daemon_bin: Option<&'a Path>,
    /// Scratch space (device profiles).
    work: &'a Path,
}

/// Runs (unless `--from`) and validates `names` on `bed`, recordings in `dir/NAME/`, and
/// prints the tables.
fn validate_bed(ctx: &Ctx<'_>, bed: &Bed, names: &[&str], dir: &Path) -> anyhow::Result<()> {
    let (args, trace_bin, work) = (ctx.args, ctx.trace_bin, ctx.work);
    let extra = ctx.replay_args;
    let dir = dir.to_owned();
    let mut cross_rows = Vec::new();
    let mut self_rows = Vec::new();
    let mut explain_rows = Vec::new();
    let mut device_notes = Vec::new();
    let mut priority_notes = Vec::new();
    for &name in names {
        let base = scenario::by_name(name).context("unknown scenario")?;
        let (mut planned, mut groups) = validate::plan(&base);
        if let Some(daemon_bin) = ctx.daemon_bin {
            // A kernel built without a scheduler (bfq on this project's current machines)
            // cannot run its runs: they are named and left out, and the rest is validated.
            let absent = planned.keep_runnable(kernel_has_scheduler);
            if !absent.is_empty() {
                eprintln!(
                    "validate: {name}: not run, this kernel lacks their scheduler: {}",
                    absent.join(", ")
                );
                for g in &mut groups {
                    g.others.retain(|o| !absent.contains(o));
                }
            }
            scratch::check_interrupted()?;
            scenario::run(
                &planned,
                &Tools {
                    trace_bin: trace_bin.to_owned(),
                    daemon_bin: daemon_bin.to_owned(),
                },
                &RunOptions {
                    keep: Some(dir.clone()),
                    interrupted: &scratch::interrupted,
                    verbose: true,
                    // BFQ's own log in every BFQ recording: the decision-agreement table. Not on
                    // the fast devices: the ftrace blk tracer at tens of thousands of
                    // requests a second would be the workload's bottleneck.
                    sched_log: *bed == Bed::Hdd,
                    bed: bed.clone(),
                },
            )
            .with_context(|| format!("scenario {name}"))?;
        }
        let file = |label: &str| dir.join(name).join(format!("{label}.istrace"));
        // Each workload's fitted device, and the one-process recording's, if any.
        let mut fits = Vec::new();
        for g in &groups {
            let f = file(&g.none);
            if f.is_file() && !args.own_fit {
                fits.push((
                    g.none.clone(),
                    validate::fitted_device(trace_bin, &f, extra)?,
                ));
            }
        }
        let sequential = fits.iter().find(|(_, (_, streams))| *streams == 1).cloned();
        for run in &planned.runs {
            let f = file(&run.label);
            if !f.is_file() {
                eprintln!("validate: {} missing, skipped", f.display());
                continue;
            }
            let spec = validate::replay_spec(run);
            let r = validate::replay_on(trace_bin, &f, &spec, None, extra)?;
            if let Some(line) = priority::mismatch(run, &r.processes) {
                priority_notes.push(format!("{name:<21} {:<20} {line}", run.label));
            }
            self_rows.push(Row {
                scenario: name,
                group: String::new(),
                label: run.label.clone(),
                spec,
                r,
                reverse: None,
            });
        }
        for g in &groups {
            let f = file(&g.none);
            if !f.is_file() {
                continue;
            }
            for other in &g.others {
                let Some(real) = self_rows
                    .iter()
                    .find(|row| row.scenario == name && row.label == *other)
                else {
                    continue;
                };
                let run = planned
                    .runs
                    .iter()
                    .find(|r| r.label == *other)
                    .expect("planned");
                let spec = validate::replay_spec(run);
                let profile = match (&sequential, fits.iter().find(|(l, _)| *l == g.none)) {
                    (Some((seq_label, (seq, _))), Some((_, (own, streams)))) if *streams > 1 => {
                        validate::sequential_and_seeking(seq, own).map(|m| (seq_label, m))
                    }
                    _ => None,
                };
                let profile_file = match profile {
                    Some((seq_label, m)) => {
                        let p = work.join(format!("{name}-{}.device.json", g.none));
                        std::fs::write(&p, serde_json::to_vec_pretty(&m)?)
                            .with_context(|| format!("writing {}", p.display()))?;
                        let note = format!(
                            "{name} {}: device = sequential costs of {seq_label}, positioning \
                             of {}",
                            g.name, g.none
                        );
                        if !device_notes.contains(&note) {
                            device_notes.push(note);
                        }
                        Some(p)
                    }
                    None => None,
                };
                let mut r =
                    validate::replay_on(trace_bin, &f, &spec, profile_file.as_deref(), extra)?;
                // The reality is the other run's recording.
                r.recorded = real.r.recorded.clone();
                let reverse = if cross_within(&r) {
                    None
                } else {
                    let none_row = self_rows
                        .iter()
                        .find(|row| row.scenario == name && row.label == g.none)
                        .expect("the none recording was replayed above");
                    let back =
                        validate::replay_on(trace_bin, &file(other), &none_row.spec, None, extra)?;
                    Some(Reverse {
                        none_label: g.none.clone(),
                        predicted: back.predicted,
                        real: none_row.r.recorded.clone(),
                    })
                };
                cross_rows.push(Row {
                    scenario: name,
                    group: g.name.clone(),
                    label: other.clone(),
                    spec,
                    r,
                    reverse,
                });
            }
        }
        for run in &planned.runs {
            let f = file(&run.label);
            if !f.is_file() {
                continue;
            }
            let recorded = |label: &str| {
                self_rows
                    .iter()
                    .find(|row| row.scenario == name && row.label == label)
                    .map(|row| &row.r.recorded)
            };
            let recorded_mb_s = |label: &str| recorded(label).map(|n| n.mb_per_s);
            let worst_p99 = |label: &str| {
                recorded(label)
                    .map(|n| n.worst_p99_q2c_ms)
                    .filter(|ms| *ms > 0.0)
            };
            let explained = whatif::explain(trace_bin, &f, ctx.explain_args)?;
            let mut checks = Vec::new();
            for e in explained
                .findings
                .iter()
                .flat_map(|f| f.estimate.iter().chain(&f.alternatives))
            {
                for real in whatif::realising_runs(&planned.runs, run, &e.what_if) {
                    let (Some(est), Some(fixed), Some(base)) = (
                        e.factor(),
                        recorded_mb_s(&real.label),
                        recorded_mb_s(&run.label),
                    ) else {
                        continue;
                    };
                    checks.push(WhatIfCheck {
                        what_if: e.what_if.clone(),
                        real: real.label.clone(),
                        estimated: est,
                        range_end: e.factor_range_end(),
                        measured: fixed / base,
                    });
                }
            }
            // Latency what-ifs (slices too long): the worst process's p99 Q2C under the fix
            // over as recorded, against the real run's worst over the recording's.
            for e in explained
                .findings
                .iter()
                .filter_map(|f| f.latency_estimate.as_ref())
            {
                for real in whatif::realising_runs(&planned.runs, run, &e.what_if) {
                    let (Some(est), Some(fixed), Some(base)) =
                        (e.factor(), worst_p99(&real.label), worst_p99(&run.label))
                    else {
                        continue;
                    };
                    checks.push(WhatIfCheck {
                        what_if: format!("{} (p99 Q2C)", e.what_if),
                        real: real.label.clone(),
                        estimated: est,
                        range_end: None,
                        measured: fixed / base,
                    });
                }
            }
            explain_rows.push(ExplainRow {
                scenario: name,
                label: run.label.clone(),
                causes: explained.findings.iter().map(|f| f.cause.clone()).collect(),
                verdict: explained.verdict,
                checks,
            });
        }
    }
    print_priorities(&priority_notes, self_rows.len());
    print_cross(&cross_rows);
    for note in &device_notes {
        println!("  {note}");
    }
    print_self(&self_rows);
    print!("{}", validate::agreement_table(&agreement_rows(&self_rows)));
    print_explain(&explain_rows);
    let summary = summary_rows(bed.name(), &self_rows, &cross_rows);
    print_summary(bed.name(), &summary);
    if let Some(keep) = &args.keep {
        let path = keep.join(format!("validate-{}.json", bed.name()));
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&summary.iter().map(SummaryRow::json).collect::<Vec<_>>())?,
        )
        .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("validate: {} summary in {}", bed.name(), path.display());
    }
    Ok(())
}

/// One line of a device kind's summary table (and of its JSON).
struct SummaryRow {
    device: String,
    scenario: String,
    /// `self` (the recording replayed under its own configuration) or `cross` (the `none`
    /// recording replayed under this run's).
    check: &'static str,
    /// The run whose recording is the reality, and its configuration.
    run: String,
    spec: String,
    /// `MB/s` or `Q2C mean ms`.
    number: &'static str,
    recorded: f64,
    predicted: f64,
    error_pct: f64,
    target_pct: f64,
    within: bool,
}

impl SummaryRow {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "device": self.device, "scenario": self.scenario, "check": self.check,
            "run": self.run, "spec": self.spec, "number": self.number,
            "recorded": self.recorded, "predicted": self.predicted,
            "error_pct": self.error_pct, "target_pct": self.target_pct, "within": self.within,
        })
    }
}

fn summary_rows(device: &str, self_rows: &[Row<'_>], cross_rows: &[Row<'_>]) -> Vec<SummaryRow> {
    let mut out = Vec::new();
    let mut push = |row: &Row<'_>, check, number, real: f64, pred: f64, target: f64| {
        let error_pct = validate::rel_err_pct(pred, real);
        out.push(SummaryRow {
            device: device.to_owned(),
            scenario: row.scenario.to_owned(),
            check,
            run: row.label.clone(),
            spec: row.spec.clone(),
            number,
            recorded: real,
            predicted: pred,
            error_pct,
            target_pct: target,
            within: error_pct.abs() <= target,
        });
    };
    for row in self_rows {
        let (real, pred) = (&row.r.recorded, &row.r.predicted);
        push(
            row,
            "self",
            "MB/s",
            real.mb_per_s,
            pred.mb_per_s,
            SELF_THR_TARGET,
        );
        push(
            row,
            "self",
            "Q2C mean ms",
            real.q2c_mean_ms,
            pred.q2c_mean_ms,
            SELF_Q2C_TARGET,
        );
    }
    for row in cross_rows {
        let (real, pred) = (&row.r.recorded, &row.r.predicted);
        push(
            row,
            "cross",
            "MB/s",
            real.mb_per_s,
            pred.mb_per_s,
            CROSS_TARGET,
        );
    }
    out
}

fn print_summary(device: &str, rows: &[SummaryRow]) {
    println!(
        "\nsummary, device {device}: self = each recording replayed under its own scheduler \
         (targets: MB/s {SELF_THR_TARGET}%, mean Q2C {SELF_Q2C_TARGET}%); cross = the `none` \
         recording replayed under the run's scheduler, vs that run's recording (MB/s \
         {CROSS_TARGET}%)\n"
    );
    println!(
        "{:<21} {:<6} {:<46} {:<12} {:>10} {:>10} {:>8} {:>7}",
        "scenario",
        "check",
        "run (configuration)",
        "number",
        "recorded",
        "predicted",
        "err",
        "within"
    );
    for r in rows {
        println!(
            "{:<21} {:<6} {:<46} {:<12} {:>10.2} {:>10.2} {:>+7.1}% {:>7}",
            r.scenario,
            r.check,
            format!("{} ({})", r.run, r.spec),
            r.number,
            r.recorded,
            r.predicted,
            r.error_pct,
            if r.within { "yes" } else { "no" },
        );
    }
    let within = rows.iter().filter(|r| r.within).count();
    println!(
        "
{device}: {within} of {} within target",
        rows.len()
    );
}

struct Row<'a> {
    scenario: &'a str,
    group: String,
    label: String,
    spec: String,
    r: Replayed,
    /// A cross-prediction beyond its target, checked the other way round.
    reverse: Option<Reverse>,
}

/// A missed cross-prediction (the `none` recording replayed under run X's configuration,
/// against X's recording) checked the other way round: X's own recording replayed under the
/// `none` run's configuration, against the `none` recording. When both miss on throughput,
/// in opposite directions, the model finds the two configurations alike on either run's workload: the
/// two runs differ in themselves (on the test bed's FIFO disk, the order its processes
/// settled into at the start), which no scheduler model can predict from the other run.
struct Reverse {
    none_label: String,
    /// X's recording under `none`'s configuration, and the `none` recording's numbers.
    predicted: validate::Numbers,
    real: validate::Numbers,
}

/// The recordings whose workload ran at another I/O priority than their run set
/// ([`priority::mismatch`]): their rows below compare other workloads than the runs name.
fn print_priorities(notes: &[String], recordings: usize) {
    if notes.is_empty() {
        println!(
            "\npriorities: the workload of each of the {recordings} recordings ran at the I/O \
             priority its run set"
        );
        return;
    }
    println!(
        "\npriorities: {} of {recordings} recordings ran their workload at another I/O priority \
         than their run set (a test bed started under nice?); BFQ weighs and raises queues by \
         it, so their rows below are not the runs they name !",
        notes.len()
    );
    for note in notes {
        println!("  {note}");
    }
}

fn mark(err: f64, target: f64) -> &'static str {
    if err.abs() <= target { "" } else { " !" }
}

fn print_cross(rows: &[Row<'_>]) {
    println!(
        "\ncross-prediction: the `none` recording of each workload replayed under the other \
         runs' configurations, vs those runs' recordings (error = predicted/real - 1; idle: \
         % of the run, error in points below 5%; ! = beyond {CROSS_TARGET}%)\n"
    );
    println!(
        "{:<21} {:<8} {:<30} {:>15} {:>8} {:>17} {:>8} {:>13} {:>7}",
        "scenario",
        "workload",
        "predicted run",
        "MB/s real/pred",
        "err",
        "Q2C ms real/pred",
        "err",
        "idle % r/p",
        "err"
    );
    let (mut n, mut within) = (0, 0);
    for row in rows {
        let (real, pred) = (&row.r.recorded, &row.r.predicted);
        let thr = validate::rel_err_pct(pred.mb_per_s, real.mb_per_s);
        let q2c = validate::rel_err_pct(pred.q2c_mean_ms, real.q2c_mean_ms);
        let (idle, unit) = validate::idle_err(pred.idle_pct, real.idle_pct);
        let idle_ok = idle_within(pred, real);
        n += 1;
        if cross_within(&row.r) {
            within += 1;
        }
        println!(
            "{:<21} {:<8} {:<30} {:>7.2}/{:<7.2} {:>+6.0}%{:<2} {:>8.1}/{:<8.1} {:>+6.0}%{:<2} {:>6.1}/{:<6.1} {:>+5.1}{unit}{}",
            row.scenario,
            row.group,
            format!("{} ({})", row.label, row.spec),
            real.mb_per_s,
            pred.mb_per_s,
            thr,
            mark(thr, CROSS_TARGET),
            real.q2c_mean_ms,
            pred.q2c_mean_ms,
            q2c,
            mark(q2c, CROSS_TARGET),
            real.idle_pct,
            pred.idle_pct,
            idle,
            if idle_ok { "" } else { " !" },
        );
    }
    println!("\n{within} of {n} predictions within {CROSS_TARGET}% on all three numbers");
    for row in rows {
        if let Some(back) = &row.reverse {
            println!("  {}", reverse_note(row, back));
        }
    }
}

fn idle_within(pred: &validate::Numbers, real: &validate::Numbers) -> bool {
    let (idle, unit) = validate::idle_err(pred.idle_pct, real.idle_pct);
    if unit == "%" {
        idle.abs() <= CROSS_TARGET
    } else {
        idle.abs() <= 2.0
    }
}

/// A cross-prediction within its target on throughput, mean Q2C and idling.
fn cross_within(r: &Replayed) -> bool {
    let (real, pred) = (&r.recorded, &r.predicted);
    validate::rel_err_pct(pred.mb_per_s, real.mb_per_s).abs() <= CROSS_TARGET
        && validate::rel_err_pct(pred.q2c_mean_ms, real.q2c_mean_ms).abs() <= CROSS_TARGET
        && idle_within(pred, real)
}

/// What the [`Reverse`] check of a missed row found, in a line.
fn reverse_note(row: &Row<'_>, back: &Reverse) -> String {
    let forward = validate::rel_err_pct(row.r.predicted.mb_per_s, row.r.recorded.mb_per_s);
    let reverse = validate::rel_err_pct(back.predicted.mb_per_s, back.real.mb_per_s);
    let mut line = format!(
        "{} {}: the other way round, its own recording replayed as {} predicts {:.2} MB/s \
         where {} measured {:.2} ({reverse:+.0}%)",
        row.scenario,
        row.label,
        back.none_label,
        back.predicted.mb_per_s,
        back.none_label,
        back.real.mb_per_s,
    );
    // Mirror images on throughput: each way beyond what the model allows itself on a run's
    // own workload (the self-consistency target), in opposite directions, one of them a
    // miss. A closed loop's Q2C is its throughput's mirror (Little's law: 32 readers at
    // -24% throughput wait +31%), so a forward miss on Q2C alone counts when its
    // throughput moved that far too; one whose throughput held says nothing of the runs.
    if forward.abs() > SELF_THR_TARGET
        && reverse.abs() > SELF_THR_TARGET
        && forward.abs().max(reverse.abs()) > CROSS_TARGET
        && reverse.signum() != forward.signum()
    {
        line += &format!(
            ": on either run's workload the model finds the two alike; the runs differ in \
             themselves (mean seek between dispatches: {} {:.0} MiB, {} {:.0} MiB)",
            back.none_label, back.real.seek_mib, row.label, row.r.recorded.seek_mib,
        );
    }
    line
}

/// The BFQ recordings among the self-consistency replays (each replayed under its own BFQ
/// configuration, which is where `replay` checks the model's decisions against BFQ's log).
fn agreement_rows(rows: &[Row<'_>]) -> Vec<validate::AgreementRow> {
    rows.iter()
        .filter(|row| row.spec.split(':').next() == Some("bfq"))
        .map(|row| validate::AgreementRow {
            scenario: row.scenario.to_owned(),
            run: format!("{} ({})", row.label, row.spec),
            has_log: row.r.has_bfq_log,
            agreement: row.r.agreement.clone(),
        })
        .collect()
}

fn print_self(rows: &[Row<'_>]) {
    println!(
        "\nself-consistency: each recording replayed under the configuration it was recorded \
         with (targets: throughput {SELF_THR_TARGET}%, mean Q2C {SELF_Q2C_TARGET}%; ! = beyond)\n"
    );
    println!(
        "{:<21} {:<42} {:>17} {:>8} {:>17} {:>8} {:>11}",
        "scenario",
        "run (configuration)",
        "MB/s rec/replay",
        "err",
        "Q2C ms rec/replay",
        "err",
        "merge r/p"
    );
    let (mut n, mut within) = (0, 0);
    for row in rows {
        let (real, pred) = (&row.r.recorded, &row.r.predicted);
        let thr = validate::rel_err_pct(pred.mb_per_s, real.mb_per_s);
        let q2c = validate::rel_err_pct(pred.q2c_mean_ms, real.q2c_mean_ms);
        n += 1;
        if thr.abs() <= SELF_THR_TARGET && q2c.abs() <= SELF_Q2C_TARGET {
            within += 1;
        }
        println!(
            "{:<21} {:<42} {:>8.2}/{:<8.2} {:>+6.1}%{:<2} {:>8.1}/{:<8.1} {:>+6.1}%{:<2} {:>5.2}/{:<5.2}",
            row.scenario,
            format!("{} ({})", row.label, row.spec),
            real.mb_per_s,
            pred.mb_per_s,
            thr,
            mark(thr, SELF_THR_TARGET),
            real.q2c_mean_ms,
            pred.q2c_mean_ms,
            q2c,
            mark(q2c, SELF_Q2C_TARGET),
            real.merge_ratio,
            pred.merge_ratio,
        );
    }
    println!("\n{within} of {n} recordings within both targets");
}

struct ExplainRow<'a> {
    scenario: &'a str,
    label: String,
    causes: Vec<String>,
    verdict: String,
    checks: Vec<WhatIfCheck>,
}

/// A what-if of `explain` that another run recorded: the effects as factors (throughput
/// under the fix over throughput as recorded).
struct WhatIfCheck {
    what_if: String,
    real: String,
    estimated: f64,
    /// The estimate had each request also taken the latency the recording hid: the other
    /// end of its range.
    range_end: Option<f64>,
    measured: f64,
}

fn print_explain(rows: &[ExplainRow<'_>]) {
    println!(
        "\nexplain: each recording's findings in rank order, and each what-if another run \
         recorded for real: estimated vs measured effect (throughput under the fix / as \
         recorded, or for \"(p99 Q2C)\" the worst process's p99 Q2C under the fix / as \
         recorded; error = estimated/measured - 1; ! = beyond {CROSS_TARGET}%)\n"
    );
    println!(
        "{:<21} {:<20} {:<44} {:<26} {:<20} {:>7} {:>7} {:>8}",
        "scenario", "recording", "causes", "what-if", "measured by", "est. x", "meas. x", "err"
    );
    let (mut n, mut within, mut ranged, mut range_within) = (0, 0, 0, 0);
    for row in rows {
        let causes = if row.causes.is_empty() {
            format!("none ({})", row.verdict.split(':').next().unwrap_or(""))
        } else {
            row.causes.join(",")
        };
        if row.checks.is_empty() {
            println!("{:<21} {:<20} {causes}", row.scenario, row.label);
        }
        for c in &row.checks {
            let err = validate::rel_err_pct(c.estimated, c.measured);
            n += 1;
            if err.abs() <= CROSS_TARGET {
                within += 1;
            }
            // A range (the recording hid a latency): the error of its nearest point.
            let range = c.range_end.map(|other| {
                let (lo, hi) = (other.min(c.estimated), other.max(c.estimated));
                let nearest = c.measured.clamp(lo, hi);
                (lo, hi, validate::rel_err_pct(nearest, c.measured))
            });
            let range_text = match range {
                Some((lo, hi, range_err)) => {
                    ranged += 1;
                    if range_err.abs() <= CROSS_TARGET {
                        range_within += 1;
                    }
                    format!(
                        "   range x{lo:.2}..x{hi:.2}: {range_err:>+4.0}%{}",
                        mark(range_err, CROSS_TARGET)
                    )
                }
                None => String::new(),
            };
            println!(
                "{:<21} {:<20} {:<44} {:<26} {:<20} {:>7.2} {:>7.2} {:>+6.0}%{}{range_text}",
                row.scenario,
                row.label,
                causes,
                c.what_if,
                c.real,
                c.estimated,
                c.measured,
                err,
                mark(err, CROSS_TARGET)
            );
        }
    }
    println!("\n{within} of {n} recorded what-ifs estimated within {CROSS_TARGET}%");
    if ranged > 0 {
        println!(
            "{range_within} of the {ranged} given as a range (the recording hid each request's \
             latency) within {CROSS_TARGET}% of it"
        );
    }
}

/// A scratch directory for recordings nobody asked to keep, removed on drop.
fn tempdir() -> anyhow::Result<TempDir> {
    Ok(TempDir::new(&std::env::temp_dir(), "iosched-validate")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(mb_per_s: f64, seek_mib: f64) -> validate::Numbers {
        validate::Numbers {
            mb_per_s,
            q2c_mean_ms: 32.0 / (mb_per_s * 256.0) * 1000.0,
            seek_mib,
            ..Default::default()
        }
    }

    /// A row predicted from the `none` recording (0.48 MB/s) against a kyber run that
    /// measured `kyber_real`; the kyber recording replayed as `none` predicts `back`.
    fn row_and_reverse(kyber_real: f64, back: f64) -> (Row<'static>, Reverse) {
        let r = Replayed {
            recorded: numbers(kyber_real, 61.0),
            predicted: numbers(0.48, 395.0),
            ..Default::default()
        };
        let row = Row {
            scenario: "many-readers-latency",
            group: "rand".into(),
            label: "kyber-rand".into(),
            spec: "kyber".into(),
            r,
            reverse: None,
        };
        let reverse = Reverse {
            none_label: "none-rand".into(),
            predicted: numbers(back, 61.0),
            real: numbers(0.48, 395.0),
        };
        (row, reverse)
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        v: ValidateArgs,
    }

    #[test]
    fn device_kinds_and_replay_arguments_parse() {
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            "validate",
            "--device",
            "all",
            "--replay-arg=--host-profile=/tmp/h.json",
            "--replay-arg",
            "--set=iodepth=4",
            "fast-randread",
        ])
        .unwrap();
        assert_eq!(cli.v.device, DeviceArg::All);
        assert_eq!(
            cli.v.replay_args,
            ["--host-profile=/tmp/h.json", "--set=iodepth=4"]
        );
        assert_eq!(cli.v.names, ["fast-randread"]);
        let names: Vec<&str> = DeviceArg::All.beds().iter().map(Bed::name).collect();
        assert_eq!(names, ["hdd", "flash", "ram"]);
        // Today's behaviour by default: the hard disk only.
        let cli = Cli::try_parse_from(["validate"]).unwrap();
        assert_eq!(cli.v.device.beds(), [Bed::Hdd]);
        assert!(cli.v.replay_args.is_empty());
    }

    #[test]
    fn a_given_or_kept_host_profile_is_used_and_none_is_calibrated_without_a_run() {
        use clap::Parser as _;
        let kept = tempdir().unwrap();
        let bin = Path::new("/nonexistent/iosched-trace");
        let parse = |extra: &[&str]| {
            let mut argv = vec!["validate"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).unwrap().v
        };
        let from = format!("--from={}", kept.path().display());
        // --from without a kept profile: the recordings' own (calibrate is never run: the
        // binary does not exist).
        assert_eq!(
            host_profile(&parse(&[&from]), bin, kept.path()).unwrap(),
            None
        );
        std::fs::write(kept.path().join("host-profile.json"), "{}").unwrap();
        assert_eq!(
            host_profile(&parse(&[&from]), bin, kept.path()).unwrap(),
            Some(kept.path().join("host-profile.json"))
        );
        // Said otherwise: nothing added.
        let given = "--replay-arg=--host-profile=/tmp/h.json";
        assert_eq!(
            host_profile(&parse(&[&from, given]), bin, kept.path()).unwrap(),
            None
        );
        assert_eq!(
            host_profile(&parse(&["--no-calibrate"]), bin, kept.path()).unwrap(),
            None
        );
        // A run: calibrate is needed, and its failure is an error, not a silent default.
        assert!(host_profile(&parse(&[]), bin, kept.path()).is_err());
    }

    #[test]
    fn the_summary_has_two_self_rows_per_recording_and_a_cross_row_per_prediction() {
        let (row, _) = row_and_reverse(0.60, 0.48);
        let rows = summary_rows(
            "flash",
            std::slice::from_ref(&row),
            std::slice::from_ref(&row),
        );
        let what: Vec<(&str, &str, bool)> =
            rows.iter().map(|r| (r.check, r.number, r.within)).collect();
        // Predicted 0.48 MB/s for 0.60: -20%, beyond the 10% of self-consistency, within
        // the 25% of cross-prediction; mean Q2C (32 readers' Little's law) +25%.
        assert_eq!(
            what,
            [
                ("self", "MB/s", false),
                ("self", "Q2C mean ms", false),
                ("cross", "MB/s", true)
            ]
        );
        assert!((rows[0].error_pct + 20.0).abs() < 1e-9);
        let json = rows[2].json();
        assert_eq!(json["device"], "flash");
        assert_eq!(json["check"], "cross");
        assert_eq!(json["within"], true);
    }

    #[test]
    fn a_miss_both_ways_round_is_put_down_to_the_runs_themselves() {
        let (row, back) = row_and_reverse(0.66, 0.66);
        assert!(!cross_within(&row.r));
        let note = reverse_note(&row, &back);
        assert!(
            note.contains("predicts 0.66 MB/s where none-rand measured 0.48 (+38%)"),
            "{note}"
        );
        assert!(note.contains("the runs differ in themselves"), "{note}");
        assert!(
            note.contains("none-rand 395 MiB, kyber-rand 61 MiB"),
            "{note}"
        );
    }

    /// A closed loop's miss on Q2C alone (kyber measured 0.63 MB/s, predicted 0.48: -24%,
    /// within the target, and Q2C +31%) is mirrored by the reverse replay's throughput.
    #[test]
    fn a_q2c_miss_whose_throughput_moved_too_is_put_down_to_the_runs() {
        let (row, back) = row_and_reverse(0.63, 0.64);
        assert!(!cross_within(&row.r));
        let thr = validate::rel_err_pct(row.r.predicted.mb_per_s, row.r.recorded.mb_per_s);
        assert!(thr.abs() < CROSS_TARGET, "{thr}");
        let note = reverse_note(&row, &back);
        assert!(note.contains("(+33%)"), "{note}");
        assert!(note.contains("the runs differ in themselves"), "{note}");
    }

    #[test]
    fn a_miss_the_reverse_replay_does_not_share_stays_the_models() {
        // The kyber recording replayed as none reproduces none's own number: the runs agree
        // on the workload, so the forward miss is the model's.
        let (row, back) = row_and_reverse(0.66, 0.49);
        let note = reverse_note(&row, &back);
        assert!(note.contains("(+2%)"), "{note}");
        assert!(!note.contains("differ in themselves"), "{note}");
        // Missed the other way round, but in the same direction: not a mirror image either.
        let (row, back) = row_and_reverse(0.66, 0.30);
        assert!(!reverse_note(&row, &back).contains("differ in themselves"));
        // The forward miss not on throughput (its Q2C, say): the mirror says nothing of it.
        let (mut row, back) = row_and_reverse(0.50, 0.66);
        row.r.predicted.q2c_mean_ms *= 2.0;
        assert!(!cross_within(&row.r));
        assert!(!reverse_note(&row, &back).contains("differ in themselves"));
        // Within the target: no reverse check at all.
        let (row, _) = row_and_reverse(0.50, 0.50);
        assert!(cross_within(&row.r));
    }
}
