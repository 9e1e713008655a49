//! Running a scenario: one emulated disk for all its runs; per run the scheduler and settings
//! are set, the workload's set-up is done (ext4, cgroup), `iosched-trace record` records the
//! workload alone, and `iosched-trace report --json` reads the recording back.
//!
//! Everything is a guard undone on drop, innermost first, also when a run fails or the caller
//! is interrupted: recorder stopped, cgroup removed, filesystem unmounted, queue settings
//! restored, disk torn down, scratch directory removed. Only processes spawned here are
//! signalled, by pid.

use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use thiserror::Error;

use super::{
    Run, Scenario, Workload,
    bed::{Bed, Device},
    summary::RunSummary,
};
use crate::{
    loop_device::LoopError,
    mounts::{self, is_mount_point},
    recorder::{Recorder, RecorderError},
    rig::RigError,
    tempdir::TempDir,
};

/// How long `iosched-trace record` may take to load and attach its programs.
const RECORDER_READY: Duration = Duration::from_secs(30);

/// The variants that wrap another error write its text in their own and do not also give it
/// as their `source()`: `{:#}` (anyhow's chain, as the xtask commands print errors) wrote a
/// failure once per level otherwise, three times for a run's emulated disk.
#[derive(Debug, Error)]
pub enum ScenarioError {
    #[error("emulated disk: {0}")]
    Rig(RigError),
    #[error("RAM loop device: {0}")]
    Loop(LoopError),
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    #[error("report of {path}: {err}")]
    Report { path: PathBuf, err: String },
    #[error("unknown scenario {0:?} (known: {names})", names = super::NAMES.join(", "))]
    Unknown(String),
    #[error("interrupted")]
    Interrupted,
    #[error("I/O priority {0:?}: expected be/N or rt/N (N 0-7), or idle")]
    Priority(String),
    #[error("run {label}: {inner}")]
    InRun {
        label: String,
        inner: Box<ScenarioError>,
    },
}

impl From<RigError> for ScenarioError {
    fn from(e: RigError) -> Self {
        ScenarioError::Rig(e)
    }
}

impl From<LoopError> for ScenarioError {
    fn from(e: LoopError) -> Self {
        ScenarioError::Loop(e)
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ScenarioError {
    let what = what.into();
    move |err| ScenarioError::Io { what, err }
}

/// The binaries a scenario drives.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `iosched-trace` (record, report).
    pub trace_bin: PathBuf,
    /// `iosched-hdd` (the emulated disk's daemon).
    pub daemon_bin: PathBuf,
}

/// How to run a scenario.
pub struct RunOptions<'a> {
    /// Keep each run's recording and report (`DIR/SCENARIO/LABEL.istrace`,
    /// `LABEL.report.json`, `.txt` and `.html`); otherwise they live in a scratch directory removed at the end.
    pub keep: Option<PathBuf>,
    /// Polled between steps; when it returns true the scenario stops with
    /// [`ScenarioError::Interrupted`] (and everything is torn down).
    pub interrupted: &'a dyn Fn() -> bool,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Record BFQ runs with `--sched-log` (BFQ's own decision log, for the model's
    /// decision-level agreement).
    pub sched_log: bool,
    /// The device the runs run on (default: the emulated rotational disk).
    pub bed: Bed,
}

impl Default for RunOptions<'_> {
    fn default() -> Self {
        Self {
            keep: None,
            interrupted: &|| false,
            verbose: true,
            sched_log: false,
            bed: Bed::Hdd,
        }
    }
}

/// One run's results.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub run: Run,
    /// The recording, when kept.
    pub recording: Option<PathBuf>,
    /// `iosched-trace report --html`'s page of the recording, when kept (beside
    /// `LABEL.report.txt` and `LABEL.report.json`).
    pub html: Option<PathBuf>,
    /// `iosched-trace report --json` of the recording.
    pub report: Value,
    pub summary: RunSummary,
    /// Wall time of the workload alone.
    pub workload_secs: f64,
    /// fio's own JSON report, for fio workloads.
    pub fio: Option<Value>,
}

/// Runs every run of `scenario` on one fresh device (`options.bed`: the emulated disk by
/// default); tears everything down before returning, also on error.
pub fn run(
    scenario: &Scenario,
    tools: &Tools,
    options: &RunOptions<'_>,
) -> Result<Vec<RunOutcome>, ScenarioError> {
    let needs_daemon = options.bed != Bed::Ram;
    for bin in std::iter::once(&tools.trace_bin).chain(needs_daemon.then_some(&tools.daemon_bin)) {
        if !bin.is_file() {
            return Err(ScenarioError::Io {
                what: format!("{} (build it first)", bin.display()),
                err: io::ErrorKind::NotFound.into(),
            });
        }
    }
    let scratch = TempDir::new(
        Path::new("/dev/shm"),
        &format!("iosched-scenario-{}", scenario.name),
    )
    .map_err(io_err("creating a scratch directory"))?;
    let out_dir = match &options.keep {
        Some(dir) => {
            let dir = dir.join(scenario.name);
            fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
            dir
        }
        None => scratch.path().to_owned(),
    };
    let mut disk = Device::up(
        &options.bed,
        &tools.daemon_bin,
        scratch.path(),
        scenario.disk_size,
    )?;
    if options.verbose {
        eprintln!(
            "scenario {}: {} device {} ({} MiB); {} runs",
            scenario.name,
            options.bed.name(),
            disk.device().display(),
            scenario.disk_size >> 20,
            scenario.runs.len()
        );
    }
    // Attributes some run set, with their values before the first run: a run that does not
    // set one gets it back at that value.
    let mut defaults: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut outcomes = Vec::new();
    for run in &scenario.runs {
        let outcome = run_one(
            run,
            &mut disk,
            &mut defaults,
            tools,
            options,
            scratch.path(),
            &out_dir,
        )
        .map_err(|e| match e {
            ScenarioError::Interrupted => e,
            other => ScenarioError::InRun {
                label: run.label.clone(),
                inner: Box::new(other),
            },
        })?;
        if options.verbose {
            eprintln!("scenario {}: {}", scenario.name, outcome.summary.one_line());
        }
        outcomes.push(outcome);
    }
    disk.down()?;
    Ok(outcomes)
}

fn run_one(
    run: &Run,
    disk: &mut Device,
    defaults: &mut BTreeMap<&'static str, String>,
    tools: &Tools,
    options: &RunOptions<'_>,
    scratch: &Path,
    out_dir: &Path,
) -> Result<RunOutcome, ScenarioError> {
    let check = || {
        if (options.interrupted)() {
            Err(ScenarioError::Interrupted)
        } else {
            Ok(())
        }
    };
    check()?;
    if options.verbose {
        eprintln!(
            "scenario run {}: {} {:?}: {}",
            run.label, run.scheduler, run.settings, run.workload
        );
    }
    // The scheduler first: its own attributes (iosched/*) exist only once it is active.
    disk.set_queue("scheduler", run.scheduler)?;
    for (attr, default) in defaults.iter() {
        if !run.settings.iter().any(|(a, _)| a == attr) && !attr.starts_with("iosched/") {
            disk.set_queue(attr, default)?;
        }
    }
    for (attr, value) in &run.settings {
        if !defaults.contains_key(attr) {
            let path = disk.queue_path(attr);
            let old =
                fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))?;
            defaults.insert(attr, old.trim().to_owned());
        }
        disk.set_queue(attr, value)?;
    }

    let ioprio = ioprio_value(run.ioprio)
        .ok_or_else(|| ScenarioError::Priority(run.ioprio.unwrap_or_default().to_owned()))?;
    let recording = out_dir.join(format!("{}.istrace", run.label));
    let _ = fs::remove_file(&recording);
    let record_options: &[&str] = if options.sched_log && run.scheduler == "bfq" {
        &["--sched-log"]
    } else {
        &[]
    };
    let (workload_secs, fio) = match &run.workload {
        Workload::Fio(args) => {
            let fio_out = scratch.join(format!("{}.fio.json", run.label));
            // The file name first, in fio's global section: every job of a workload of
            // several (`--name=a ... --name=b ...`) reads the device.
            let mut cmd = Command::new("fio");
            cmd.arg(format!("--filename={}", disk.device().display()))
                .args(args)
                .arg("--output-format=json")
                .arg(format!("--output={}", fio_out.display()));
            let mut recorder =
                start_recorder(&tools.trace_bin, disk.name(), &recording, record_options)?;
            let secs = timed(&mut cmd, ioprio)?;
            recorder.stop()?;
            let text = fs::read_to_string(&fio_out)
                .map_err(io_err(format!("reading {}", fio_out.display())))?;
            // fio may print notes before its JSON document.
            let json = text
                .find('{')
                .and_then(|start| serde_json::from_str(&text[start..]).ok());
            (secs, json)
        }
        Workload::DdRead { bs, count } => {
            // This device's page cache only (BLKFLSBUF); nothing else on the machine.
            output(
                Command::new("blockdev")
                    .arg("--flushbufs")
                    .arg(disk.device()),
            )?;
            let mut cmd = Command::new("dd");
            cmd.arg(format!("if={}", disk.device().display())).args([
                "of=/dev/null",
                &format!("bs={bs}"),
                &format!("count={count}"),
                "status=none",
            ]);
            let mut recorder =
                start_recorder(&tools.trace_bin, disk.name(), &recording, record_options)?;
            let secs = timed(&mut cmd, ioprio)?;
            recorder.stop()?;
            (secs, None)
        }
        Workload::DsyncJournal { count } => {
            let fs = Ext4::make_and_mount(disk.device(), &scratch.join("mnt"))?;
            let cgroup = BlkioCgroup::create(&format!("iosched-scenario-{}", std::process::id()))?;
            let target = fs.mountpoint().join("test.img");
            // dd joins the cgroup itself, before exec: all its I/O is charged there.
            let script = format!(
                "echo $$ > '{}' && exec dd if=/dev/zero of='{}' bs=512 count={count} \
                 oflag=dsync status=none",
                cgroup.procs_file().display(),
                target.display()
            );
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &script]);
            let mut recorder =
                start_recorder(&tools.trace_bin, disk.name(), &recording, record_options)?;
            let secs = timed(&mut cmd, ioprio)?;
            recorder.stop()?;
            drop(cgroup);
            fs.unmount()?;
            (secs, None)
        }
    };
    check()?;

    let report_text = output(
        Command::new(&tools.trace_bin)
            .arg("report")
            .arg("--json")
            .arg(&recording),
    )?;
    let report: Value = serde_json::from_str(&report_text).map_err(|e| ScenarioError::Report {
        path: recording.clone(),
        err: e.to_string(),
    })?;
    let kept = options.keep.is_some();
    let mut html = None;
    if kept {
        let path = out_dir.join(format!("{}.report.json", run.label));
        fs::write(&path, &report_text).map_err(io_err(format!("writing {}", path.display())))?;
        // The text report and the HTML page beside it, for a person to read.
        let text = output(Command::new(&tools.trace_bin).arg("report").arg(&recording))?;
        let path = out_dir.join(format!("{}.report.txt", run.label));
        fs::write(&path, &text).map_err(io_err(format!("writing {}", path.display())))?;
        let path = out_dir.join(format!("{}.report.html", run.label));
        output(
            Command::new(&tools.trace_bin)
                .arg("report")
                .arg(&recording)
                .arg("--html")
                .arg(&path),
        )?;
        html = Some(path);
    }
    let summary =
        RunSummary::from_report(run, &report, workload_secs, fio.as_ref()).map_err(|err| {
            ScenarioError::Report {
                path: recording.clone(),
                err,
            }
        })?;
    Ok(RunOutcome {
        run: run.clone(),
        recording: kept.then_some(recording),
        html,
        report,
        summary,
        workload_secs,
        fio,
    })
}

fn shown(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

fn check_status(cmd: &Command, status: ExitStatus, stderr: &[u8]) -> Result<(), ScenarioError> {
    if status.success() {
        return Ok(());
    }
    Err(ScenarioError::Command {
        command: shown(cmd),
        status: status.to_string(),
        stderr: String::from_utf8_lossy(stderr).trim().to_owned(),
    })
}

/// Runs `cmd` to completion; its stdout.
fn output(cmd: &mut Command) -> Result<String, ScenarioError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("starting {}", shown(cmd))))?;
    check_status(cmd, out.status, &out.stderr)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the workload `cmd` to completion; its wall time in seconds.
fn timed(cmd: &mut Command, ioprio: libc::c_long) -> Result<f64, ScenarioError> {
    at_priority(cmd, ioprio);
    let start = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(io_err(format!("starting {}", shown(cmd))))?;
    let secs = start.elapsed().as_secs_f64();
    check_status(cmd, out.status, &out.stderr)?;
    Ok(secs)
}

/// `ioprio_set(2)`'s value of a run's I/O priority (`be/5`, `rt/0`, `idle`, as the model's
/// `ioprio=` switch spells it); `None`: class none, level 0 (the priority follows nice).
pub(crate) fn ioprio_value(spec: Option<&str>) -> Option<libc::c_long> {
    let Some(spec) = spec else {
        return Some(0);
    };
    let level = |n: &str| {
        n.parse::<libc::c_long>()
            .ok()
            .filter(|n| (0..8).contains(n))
    };
    match spec.split_once('/') {
        Some(("rt", n)) => Some((1 << 13) | level(n)?),
        Some(("be", n)) => Some((2 << 13) | level(n)?),
        None if spec == "idle" => Some(3 << 13),
        _ => None,
    }
}

/// The workload runs at nice 0 and the run's I/O priority (`ioprio`, [`ioprio_value`]),
/// whatever the caller's. BFQ weighs each queue by its process's I/O priority, which a
/// process that set none takes from its nice value, and since 5.12 it weight-raises only
/// queues of the default weight (best-effort 4). A test bed started under `nice -n 10`
/// recorded every workload at best-effort 6: there BFQ with low_latency=1 served two
/// sequential readers at 17 MB/s, where at the default priority they preempt each other
/// down to 0.6 MB/s.
fn at_priority(cmd: &mut Command, ioprio: libc::c_long) {
    use std::os::unix::process::CommandExt as _;
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    // SAFETY: between fork and exec the closure makes two system calls (setpriority(2),
    // ioprio_set(2)), which are async-signal-safe, and allocates nothing unless one fails.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, ioprio) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `iosched-trace record -d DEVICE -o OUTPUT OPTIONS`, once it is ready. The recorder is
/// stopped (SIGINT, and a recording that is not whole fails the run) or killed on drop.
fn start_recorder(
    bin: &Path,
    device: &str,
    output: &Path,
    options: &[&str],
) -> Result<Recorder, ScenarioError> {
    let mut recorder = Recorder::spawn(Recorder::command(bin, &[device], output, options), None)?;
    recorder.wait_ready(RECORDER_READY, &|| false)?;
    Ok(recorder)
}

/// ext4 made on the emulated disk and mounted on a directory of ours; unmounted on drop.
struct Ext4 {
    mountpoint: PathBuf,
    mounted: bool,
}

impl Ext4 {
    fn make_and_mount(device: &Path, mountpoint: &Path) -> Result<Self, ScenarioError> {
        // Inode tables and journal initialised now, not by ext4lazyinit in the background
        // while we record; no discard (the emulated disk does not implement it).
        output(
            Command::new("mkfs.ext4")
                .args([
                    "-q",
                    "-F",
                    "-E",
                    "lazy_itable_init=0,lazy_journal_init=0,nodiscard",
                ])
                .arg(device),
        )?;
        fs::create_dir_all(mountpoint)
            .map_err(io_err(format!("creating {}", mountpoint.display())))?;
        // No block-bitmap prefetch (5.9+ does it at mount, from ext4lazyinit): a recording
        // started under mq-deadline once held three of its reads, queued from its first
        // instant and never dispatched while dd's writes ran (the device idle 149 ms at the
        // start with them pending), I/O that is not the scenario's. Kernels without the
        // option mount as before.
        let prefetchless = Command::new("mount")
            .args(["-o", "no_prefetch_block_bitmaps"])
            .arg(device)
            .arg(mountpoint)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !prefetchless {
            output(Command::new("mount").arg(device).arg(mountpoint))?;
        }
        let fs = Self {
            mountpoint: mountpoint.to_owned(),
            mounted: true,
        };
        // The mount's own writes (superblock, journal replay check) before recording starts.
        output(Command::new("sync").arg("-f").arg(mountpoint))?;
        Ok(fs)
    }

    fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    fn unmount(mut self) -> Result<(), ScenarioError> {
        self.mounted = false;
        output(Command::new("umount").arg(&self.mountpoint)).map(drop)
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        if self.mounted && is_mount_point(&self.mountpoint) {
            let ok = Command::new("umount")
                .arg(&self.mountpoint)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                // Lazy: the disk's teardown must not be blocked by a busy mount.
                let _ = Command::new("umount")
                    .arg("-l")
                    .arg(&self.mountpoint)
                    .status();
            }
        }
    }
}

/// A child cgroup of the blkio hierarchy (cgroup v1; this is where BFQ's groups come from on
/// a hybrid host), or of the unified hierarchy where there is no v1 blkio; removed on drop
/// (its only member, dd, has exited by then).
struct BlkioCgroup(PathBuf);

impl BlkioCgroup {
    fn create(name: &str) -> Result<Self, ScenarioError> {
        let root = blkio_root().ok_or_else(|| ScenarioError::Io {
            what: "no blkio (cgroup v1) nor cgroup2 hierarchy mounted".into(),
            err: io::ErrorKind::NotFound.into(),
        })?;
        let path = root.join(name);
        fs::create_dir(&path).map_err(io_err(format!("creating cgroup {}", path.display())))?;
        Ok(Self(path))
    }

    fn procs_file(&self) -> PathBuf {
        self.0.join("cgroup.procs")
    }
}

impl Drop for BlkioCgroup {
    fn drop(&mut self) {
        // rmdir (not remove_dir_all): a cgroup directory is removed as a whole, and only
        // when empty.
        for _ in 0..50 {
            if fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "iosched-testbed: WARNING: could not remove cgroup {}",
            self.0.display()
        );
    }
}

/// The mount point of the v1 blkio hierarchy, else of cgroup2.
fn blkio_root() -> Option<PathBuf> {
    let mounts = mounts::mounts().ok()?;
    let v1 = mounts
        .iter()
        .find(|m| m.fs_type == "cgroup" && m.super_options.split(',').any(|o| o == "blkio"));
    v1.or_else(|| mounts.iter().find(|m| m.fs_type == "cgroup2"))
        .map(|m| PathBuf::from(&m.mount_point))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt as _;

    use super::*;

    #[test]
    fn a_runs_failure_is_written_once_in_its_chain() {
        let err = ScenarioError::InRun {
            label: "bfq".into(),
            inner: Box::new(ScenarioError::Loop(LoopError::NotALoop("x".into()))),
        };
        let line = format!(
            "{:#}",
            anyhow::Error::new(err).context("scenario fast-randread")
        );
        assert_eq!(
            line,
            "scenario fast-randread: run bfq: RAM loop device: losetup printed \"x\", not a \
             /dev/loopN path"
        );
    }

    /// A workload started from a process at another I/O priority (and, as root, another
    /// nice value) runs at the default ones, or at its run's.
    #[test]
    fn workloads_run_at_the_default_priority() {
        let root = unsafe { libc::geteuid() } == 0;
        let mut cmd = Command::new("sh");
        cmd.args(["-c", r#"ionice -p $$; cut -d" " -f19 /proc/$$/stat"#]);
        // SAFETY: async-signal-safe system calls only, as in `at_default_priority`.
        unsafe {
            cmd.pre_exec(move || {
                // Best-effort 7, and nice 10 where we may lower it back.
                let be7 = (2 << 13) | 7;
                if libc::syscall(libc::SYS_ioprio_set, 1, 0, be7) != 0
                    || (root && libc::setpriority(libc::PRIO_PROCESS, 0, 10) != 0)
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut be5 = Command::new("sh");
        be5.args(["-c", "ionice -p $$"]);
        at_priority(&mut cmd, ioprio_value(None).unwrap());
        at_priority(&mut be5, ioprio_value(Some("be/5")).unwrap());
        let out = cmd.output().expect("sh runs");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("none: prio 0"), "{text}");
        assert_eq!(lines.next(), Some("0"), "{text}");
        let out = be5.output().expect("sh runs");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "best-effort: prio 5\n"
        );
    }

    #[test]
    fn run_priorities_are_spelt_as_the_models_switch() {
        assert_eq!(ioprio_value(Some("rt/0")), Some(1 << 13));
        assert_eq!(ioprio_value(Some("idle")), Some(3 << 13));
        for bad in ["be/8", "be", "none", "be/x"] {
            assert_eq!(ioprio_value(Some(bad)), None, "{bad}");
        }
        // Every scenario's runs have a priority the runner can set.
        for name in crate::scenario::NAMES {
            let s = crate::scenario::by_name(name).unwrap();
            for run in &s.runs {
                assert!(ioprio_value(run.ioprio).is_some(), "{name} {}", run.label);
            }
        }
    }
}
