//! Replays: a configuration (scheduler and tunables) run over a workload on a device model,
//! and what it predicts, measured by the same analysis as the recording
//! ([`iosched_core::analysis`]) so recorded and predicted numbers share one definition.
//!
//! Owns: configurations and their defaults, runs, summaries. Must not: print.

use std::collections::BTreeMap;

use serde::Serialize;

use iosched_core::{
    analysis::{self, Report},
    record::ProcessInfo,
    source::{InputError, MemorySource, TraceSource},
};

use super::{
    bfqlog::DispatchPoint,
    continuation,
    cpu::{CpuCharge, CpuModel, ProfileSource},
    device::{self, DeviceModel, FitQuality},
    sched::{
        self, Decided, Decision, ExpireReason, IdleOutcome, IdleReason, SchedEnv, SchedKind,
        SettingError, Settings,
    },
    sim::{self, SimConfig},
    workload::{self, Workload, WorkloadError},
};

/// One configuration: a scheduler with settings.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub label: String,
    #[serde(serialize_with = "kind_name")]
    pub sched: SchedKind,
    pub settings: Settings,
}

fn kind_name<S: serde::Serializer>(k: &SchedKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name())
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("unknown scheduler {0:?} (known: none, mq-deadline, bfq, kyber, cfq)")]
    UnknownScheduler(String),
    #[error(transparent)]
    Setting(#[from] SettingError),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Device(#[from] device::DeviceError),
    #[error(transparent)]
    Input(#[from] InputError),
}

impl Config {
    /// `bfq`, or `bfq:slice_idle=0,kernel=5.2` (settings after a colon, comma separated).
    pub fn parse(spec: &str, extra: &Settings) -> Result<Config, ReplayError> {
        let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
        let sched = SchedKind::parse(name.trim())
            .ok_or_else(|| ReplayError::UnknownScheduler(name.to_string()))?;
        let mut settings = extra.clone();
        let pairs: Vec<String> = rest
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(str::to_string)
            .collect();
        settings.0.extend(Settings::parse_pairs(&pairs)?.0);
        Ok(Config {
            label: spec.to_string(),
            sched,
            settings,
        })
    }
}

/// A workload ready to replay: its device model and the environment schedulers see.
pub struct Replayer {
    pub workload: Workload,
    pub device: DeviceModel,
    /// `None` when the device model was given.
    pub fit: Option<FitQuality>,
    pub env: SchedEnv,
    pub recorded_scheduler: Option<String>,
    /// The scheduler's own messages in the trace (`record --sched-log`).
    pub notes: Vec<iosched_core::event::Note>,
    /// The recording's requests through the scheduler, for the trace-driven decision check
    /// ([`Replayer::load_recorded_requests`]; empty without BFQ notes).
    pub recorded_requests: Vec<super::bfqcheck::RecordedRq>,
    /// The machine's CPUs and the schedulers' costs on it ([`crate::cpu`]).
    pub cpu: CpuModel,
}

/// What one run predicts.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub config: Config,
    pub summary: Summary,
    #[serde(skip)]
    pub report: Report,
    /// The run's numbers over time ([`Replayer::run_binned`]; `None` from [`Replayer::run`]).
    #[serde(skip)]
    pub bins: Option<analysis::bins::TimeBins>,
    #[serde(skip)]
    pub decisions: Vec<Decided>,
    pub decision_counts: DecisionCounts,
    /// Against BFQ's own log, when the trace has one and this is a BFQ run.
    pub log_comparison: Option<super::bfqlog::LogComparison>,
    /// The model driven by the recording's own requests and BFQ's decisions, against
    /// BFQ's log ([`super::bfqcheck`]): decision-level agreement for the same trace.
    pub decision_check: Option<super::bfqcheck::DecisionCheck>,
    /// Time-bounded processes continued past their recorded bios ([`continuation`]).
    pub continued: Option<ContinuedNote>,
    /// The scheduler's CPU cost charged against the machine's CPUs and its lock
    /// ([`crate::cpu`]); `None` for runs that are not charged (speed measurements).
    pub cpu: Option<CpuCharge>,
}

/// What a run continued ([`continuation`]).
#[derive(Clone, Debug, Serialize)]
pub struct ContinuedNote {
    pub plan: continuation::Plan,
    /// Bios beyond the recorded ones the continued processes submitted before their end.
    pub added_ios: u64,
    /// The continuation reached [`continuation::MAX_ADDED`] bios with a process still
    /// wanting more: its throughput is a lower bound.
    pub cut: bool,
}

/// The numbers a comparison shows, for a run or for the recording.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub duration_s: f64,
    pub mb_per_s: f64,
    pub iops: f64,
    pub requests: u64,
    pub merge_ratio: f64,
    pub q2c_mean_ms: f64,
    pub q2c_p99_ms: f64,
    pub q2c_max_ms: f64,
    pub d2c_mean_ms: f64,
    /// Mean distance from each dispatched request's start to the previous one's end,
    /// sectors: the order the device was given (a FIFO disk's whole cost on seeks).
    pub d2d_seek_mean_sectors: f64,
    pub idle_with_pending_ms: f64,
    pub util_pct: f64,
    pub processes: Vec<ProcessSummary>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessSummary {
    pub name: String,
    pub pid: u32,
    pub bytes: u64,
    pub mb_per_s: f64,
    pub iops: f64,
    pub q2c_mean_ms: f64,
    pub q2c_p99_ms: f64,
}

/// Counts of the model's decisions.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DecisionCounts {
    pub in_service: u64,
    pub expirations: BTreeMap<&'static str, u64>,
    pub idles: BTreeMap<&'static str, u64>,
    /// Idle time by how it ended, ms.
    pub idle_ms_by_outcome: BTreeMap<&'static str, f64>,
    /// Idle time while another queue had requests waiting, ms: the waste.
    pub idle_ms_with_others_pending: f64,
    pub injections: u64,
    pub wakers: u64,
    pub raises: u64,
    pub throttled: u64,
    /// Queues merged (BFQ stable merge and EQM).
    pub merges: u64,
    /// Merged queues split again (BFQ).
    pub splits: u64,
    /// Time slices set (CFQ).
    pub slices: u64,
    /// Group service charges (CFQ with cgroups).
    pub groups_served: u64,
    /// Slices CFQ extended to keep a group backlogged (`wait_busy`).
    pub wait_busy: u64,
}

impl DecisionCounts {
    pub fn of(decisions: &[Decided]) -> DecisionCounts {
        let mut c = DecisionCounts::default();
        for d in decisions {
            match &d.d {
                Decision::InService { .. } => c.in_service += 1,
                Decision::Expire { reason, .. } => {
                    *c.expirations.entry(reason.name()).or_insert(0) += 1
                }
                Decision::Idle { reason, .. } => *c.idles.entry(reason.name()).or_insert(0) += 1,
                Decision::IdleEnd {
                    outcome,
                    waited_ns,
                    others_pending,
                    ..
                } => {
                    let name = match outcome {
                        IdleOutcome::Arrived => "arrived",
                        IdleOutcome::TimerExpired => "timer_expired",
                        IdleOutcome::Preempted => "preempted",
                    };
                    *c.idle_ms_by_outcome.entry(name).or_insert(0.0) += *waited_ns as f64 / 1e6;
                    if *others_pending {
                        c.idle_ms_with_others_pending += *waited_ns as f64 / 1e6;
                    }
                }
                Decision::Inject { .. } => c.injections += 1,
                Decision::Waker { .. } => c.wakers += 1,
                Decision::Raise { .. } => c.raises += 1,
                Decision::Throttled { .. } => c.throttled += 1,
                Decision::Merge { .. } => c.merges += 1,
                Decision::Split { .. } => c.splits += 1,
                Decision::Slice { .. } => c.slices += 1,
                Decision::GroupServed { .. } => c.groups_served += 1,
                Decision::WaitBusy { .. } => c.wait_busy += 1,
            }
        }
        c
    }
}

impl Summary {
    /// From a report: the first device's totals and each process's numbers.
    pub fn of(report: &Report) -> Summary {
        let dur = report.trace.duration_ns;
        let Some(d) = report.devices.first() else {
            return Summary::default();
        };
        let lat = |m: &BTreeMap<&'static str, analysis::latency::LatencySummary>, k: &str| {
            m.get(k).map_or(0.0, |l| l.mean_ns / 1e6)
        };
        Summary {
            duration_s: dur as f64 / 1e9,
            mb_per_s: d.read.mb_per_s + d.write.mb_per_s + d.other.mb_per_s,
            iops: d.read.iops + d.write.iops + d.other.iops,
            requests: d.requests_dispatched,
            merge_ratio: d.merge_ratio,
            q2c_mean_ms: lat(&d.latency, "q2c"),
            q2c_p99_ms: d.latency.get("q2c").map_or(0.0, |l| l.p99_ns as f64 / 1e6),
            q2c_max_ms: d.latency.get("q2c").map_or(0.0, |l| l.max_ns as f64 / 1e6),
            d2c_mean_ms: lat(&d.latency, "d2c"),
            d2d_seek_mean_sectors: d.seeks_d2d.mean_sectors,
            idle_with_pending_ms: d.idle_with_pending_ns as f64 / 1e6,
            util_pct: d.util_pct,
            processes: report
                .processes
                .iter()
                .map(|p| ProcessSummary {
                    name: format!("{}({})", p.comm, p.pid),
                    pid: p.pid,
                    bytes: p.bytes,
                    mb_per_s: p.mb_per_s,
                    iops: p.iops,
                    q2c_mean_ms: lat(&p.latency, "q2c"),
                    q2c_p99_ms: p.latency.get("q2c").map_or(0.0, |l| l.p99_ns as f64 / 1e6),
                })
                .collect(),
        }
    }

    pub fn process(&self, pid: u32) -> Option<&ProcessSummary> {
        self.processes.iter().find(|p| p.pid == pid)
    }
}

/// Cgroups BFQ would see as its root group: those the trace names `/`, and those of kernel
/// threads (jbd2, kworkers, flushers live in the root cgroup).
pub fn root_cgroups(
    w: &Workload,
    processes: &std::collections::BTreeMap<u32, ProcessInfo>,
) -> Vec<u64> {
    let mut roots: Vec<u64> = processes
        .values()
        .filter(|p| p.cgroup_path.as_deref() == Some("/"))
        .map(|p| p.cgroup_id)
        .collect();
    for s in &w.streams {
        let comm = s.comm.as_str();
        if ["jbd2", "kworker", "flush-", "kswapd", "ksoftirq"]
            .iter()
            .any(|k| comm.starts_with(k))
        {
            roots.push(s.cgroup_id);
        }
    }
    roots.push(0);
    roots.push(1);
    roots.sort_unstable();
    roots.dedup();
    roots
}

/// The kernel the trace was recorded on (major*1000+minor); 6.18 if unknown.
pub fn kernel_of(w: &Workload) -> u32 {
    w.kernel_release
        .as_deref()
        .and_then(sched::parse_kernel)
        .unwrap_or(6018)
}

impl Replayer {
    /// Extracts the workload of `device` (or the only one) and fits (or takes) a device
    /// model.
    pub fn from_source(
        source: &mut dyn TraceSource,
        device: Option<&str>,
        profile: Option<DeviceModel>,
    ) -> Result<Replayer, ReplayError> {
        let w = workload::extract(source, device)?;
        let roots = root_cgroups(&w, source.processes());
        let mut r = Self::new(w, profile, roots)?;
        let dev = r.workload.device.dev;
        r.notes = source
            .notes()
            .iter()
            .filter(|n| n.dev == dev)
            .cloned()
            .collect();
        r.env.max_budget_start = super::bfqlog::max_budget_at_start(&r.notes);
        Ok(r)
    }

    pub fn new(
        w: Workload,
        profile: Option<DeviceModel>,
        root_cgroups: Vec<u64>,
    ) -> Result<Replayer, ReplayError> {
        let (device, mut fit) = match profile {
            Some(p) => (p, None),
            None => {
                let (m, q) = device::fit(&w.service, w.device.rotational)?;
                (m, Some(q))
            }
        };
        // The schedulers decide by the queue's flag (BFQ's idling, its seeky test and its
        // queue merging read `blk_queue_nonrot`), not by how the device serves: a loop
        // device may say rotational=1 over a fast file (the loop default, where the kernel
        // does not take the flag from the backing file's device), and BFQ idles on it as on
        // a disk.
        let sched_rotational = w.device.rotational.unwrap_or_else(|| device.rotational());
        if sched_rotational != device.rotational()
            && let Some(q) = fit.as_mut()
        {
            let word = |rotational: bool| {
                if rotational {
                    "rotational"
                } else {
                    "non-rotational"
                }
            };
            q.notes.push(format!(
                "the schedulers take it as {} (its sysfs flag, as the kernel's do: BFQ idles and \
                 judges seeks by it), though it serves as a {} device",
                word(sched_rotational),
                word(device.rotational()),
            ));
        }
        let env = SchedEnv {
            rotational: sched_rotational,
            kernel: kernel_of(&w),
            peak_sectors_per_sec: device.peak_sectors_per_sec(),
            root_cgroups,
            stream_ioprio: w.streams.iter().map(|s| s.ioprio).collect(),
            max_budget_start: None,
        };
        let recorded_scheduler = w.device.scheduler.clone();
        let (profile, source) = match &w.host_profile {
            Some(p) => (p.clone(), ProfileSource::Recording),
            None => (
                iosched_core::record::HostProfile::defaults(),
                ProfileSource::Defaults,
            ),
        };
        let mut cpu = CpuModel::new(
            profile,
            source,
            w.cpu,
            w.service.len() as u64,
            recorded_scheduler.as_deref(),
        );
        cpu.kyber_domains = w.kyber_domains();
        Ok(Replayer {
            workload: w,
            device,
            fit,
            env,
            recorded_scheduler,
            notes: Vec::new(),
            recorded_requests: Vec::new(),
            cpu,
        })
    }

    /// Charges the schedulers' costs from `profile` instead (`--host-profile`, or the
    /// host's default profile).
    pub fn set_host_profile(
        &mut self,
        profile: iosched_core::record::HostProfile,
        source: ProfileSource,
    ) {
        let domains = self.cpu.kyber_domains;
        self.cpu = CpuModel::new(
            profile,
            source,
            self.workload.cpu,
            self.workload.service.len() as u64,
            self.recorded_scheduler.as_deref(),
        );
        self.cpu.kyber_domains = domains;
    }

    /// The same workload on another device model (a what-if on the device itself).
    pub fn on_device(&self, device: DeviceModel) -> Replayer {
        let env = SchedEnv {
            rotational: device.rotational(),
            peak_sectors_per_sec: device.peak_sectors_per_sec(),
            ..self.env.clone()
        };
        Replayer {
            workload: self.workload.clone(),
            device,
            fit: None,
            env,
            recorded_scheduler: self.recorded_scheduler.clone(),
            notes: self.notes.clone(),
            recorded_requests: self.recorded_requests.clone(),
            cpu: self.cpu.clone(),
        }
    }

    /// The same workload with some processes at another I/O priority (a what-if on
    /// `ionice`): BFQ and CFQ weigh queues by it, and BFQ (5.12+) raises only the default.
    pub fn with_ioprio(&self, streams: &[u32], ioprio: u16) -> Replayer {
        let mut workload = self.workload.clone();
        for &s in streams {
            if let Some(st) = workload.streams.get_mut(s as usize) {
                st.ioprio = ioprio;
            }
        }
        let env = SchedEnv {
            stream_ioprio: workload.streams.iter().map(|s| s.ioprio).collect(),
            ..self.env.clone()
        };
        Replayer {
            workload,
            device: self.device.clone(),
            fit: self.fit.clone(),
            env,
            recorded_scheduler: self.recorded_scheduler.clone(),
            notes: self.notes.clone(),
            recorded_requests: self.recorded_requests.clone(),
            cpu: self.cpu.clone(),
        }
    }

    /// The recorded scheduler as a configuration with its recorded tunables (and the
    /// queue's, [`Replayer::effective_settings`]).
    pub fn recorded_config(&self) -> Option<Config> {
        let name = self.recorded_scheduler.as_deref()?;
        let sched = SchedKind::parse(name)?;
        let label = match (self.workload.device.nomerges, self.merging_was_off()) {
            (Some(n @ 1..), _) => format!("{name} (as recorded, nomerges={n})"),
            (None, true) => format!("{name} (as recorded, nomerges=2 by the trace)"),
            _ => format!("{name} (as recorded)"),
        };
        Some(Config {
            label,
            sched,
            settings: Settings::default(),
        })
    }

    /// Merging was off in the recording: its header says so (format 1.3), or, in older
    /// recordings that do not carry the queue's `nomerges`, the trace shows it was 2: an
    /// elevator had many bios continue a request it still held and merged none.
    pub fn merging_was_off(&self) -> bool {
        if let Some(n) = self.workload.device.nomerges {
            return n >= 2;
        }
        let elevator = self
            .recorded_scheduler
            .as_deref()
            .and_then(SchedKind::parse)
            .is_some_and(|k| k != SchedKind::None);
        elevator && self.workload.merges.merging_off(self.workload.ios.len())
    }

    /// Settings for `cfg`: the queue's attributes as recorded (`nomerges`,
    /// `max_sectors_kb`; they stay when the scheduler changes; `nomerges` inferred from the
    /// trace in recordings before format 1.3), the recorded tunables when it is the recorded
    /// scheduler, then the configuration's own.
    fn effective_settings(&self, cfg: &Config) -> Settings {
        let mut s = Settings::default();
        let dev = &self.workload.device;
        match dev.nomerges {
            Some(n) => {
                s.0.insert("nomerges".into(), n.to_string());
            }
            None if self.merging_was_off() => {
                s.0.insert("nomerges".into(), "2".into());
            }
            None => {}
        }
        if let Some(kb) = dev.max_sectors_kb {
            s.0.insert("max_sectors_kb".into(), kb.to_string());
        }
        let recorded = self
            .recorded_scheduler
            .as_deref()
            .and_then(SchedKind::parse);
        if recorded == Some(cfg.sched) {
            let known: &[&str] = match cfg.sched {
                SchedKind::Bfq => sched::bfq::KEYS,
                SchedKind::MqDeadline => sched::deadline::KEYS,
                SchedKind::Kyber => sched::kyber::KEYS,
                SchedKind::Cfq => sched::cfq::KEYS,
                SchedKind::None => &[],
            };
            for (k, v) in &self.workload.device.iosched {
                if known.contains(&k.as_str()) && v.trim().parse::<u64>().is_ok() {
                    s.0.insert(k.clone(), v.trim().to_string());
                }
            }
            // `x_us` and `x` say the same (slice_idle, CFQ's slices and latencies); the
            // recorded finer one gives way to a coarse one the configuration sets.
            for k in cfg.settings.0.keys() {
                s.0.remove(&format!("{k}_us"));
            }
        }
        s.0.extend(cfg.settings.0.clone());
        s
    }

    /// Driver tags as the recording shows them: `nr_requests` is the driver's depth under
    /// `none`, and twice it (up to 128) under a scheduler (`blk_mq_init_sched`). Without
    /// it, the most the recording had in the driver at once, at least 32.
    pub fn recorded_depth(&self) -> u32 {
        let dev = &self.workload.device;
        let from_nr = dev.nr_requests.map(|n| match dev.scheduler.as_deref() {
            Some("none") | None => n,
            Some(_) => (n / 2).max(1),
        });
        from_nr
            .unwrap_or(self.workload.max_in_driver.max(32))
            .max(1)
    }

    /// The simulator's settings: `depth` (driver tags), `nr_requests` (requests that may
    /// exist: the driver tags under `none`, else 2 x min(depth, 128) by default),
    /// `nomerges`, `max_sectors_kb`, `iodepth` (bios each process with several in flight
    /// keeps in flight; default: its recorded maximum), `wbt_limit` (writeback throttling:
    /// requests of buffered writes that may exist at once; default: no wbt), `wbt_drain`
    /// (1: wbt wakes its sleepers only when no buffered write holds a request).
    fn sim_config(
        &self,
        sched: SchedKind,
        settings: &Settings,
        emit: bool,
    ) -> Result<SimConfig, ReplayError> {
        let depth = settings
            .u64_or("depth", u64::from(self.recorded_depth()))?
            .clamp(1, 4096) as u32;
        let default_nr = match sched {
            SchedKind::None => depth,
            _ => 2 * depth.min(128),
        };
        let max_requests = match sched {
            // Under `none` requests are driver tags; nr_requests cannot exceed them.
            SchedKind::None => depth,
            _ => settings
                .u64_or("nr_requests", u64::from(default_nr))?
                .clamp(1, 1 << 20) as u32,
        };
        Ok(SimConfig {
            depth,
            max_requests: max_requests.max(depth),
            nomerges: settings.u64_or("nomerges", 0)?.min(2) as u8,
            iodepth: settings
                .0
                .contains_key("iodepth")
                .then(|| settings.u64_or("iodepth", 1))
                .transpose()?
                .map(|d| d.clamp(1, 1 << 20) as u32),
            max_sectors: (settings.u64_or("max_sectors_kb", 1280)?.max(4) * 2) as u32,
            wbt_limit: settings
                .0
                .contains_key("wbt_limit")
                .then(|| settings.u64_or("wbt_limit", 1))
                .transpose()?
                .map(|l| l.clamp(1, 1 << 20) as u32),
            wbt_drain: settings.bool_or("wbt_drain", false)?,
            emit,
        })
    }

    /// Replays under `cfg`, its scheduler's CPU cost charged ([`crate::cpu`]): where the
    /// machine's CPUs or the scheduler's lock cannot keep up with the simulated rate, the
    /// workload and the device are replayed again, stretched until they can.
    pub fn run(&self, cfg: &Config) -> Result<Run, ReplayError> {
        self.run_maybe_binned(cfg, None)
    }

    /// [`run`](Self::run), with the run's numbers over time in `n` bins (`replay --html`).
    pub fn run_binned(&self, cfg: &Config, n: usize) -> Result<Run, ReplayError> {
        self.run_maybe_binned(cfg, Some(n))
    }

    fn run_maybe_binned(&self, cfg: &Config, bins: Option<usize>) -> Result<Run, ReplayError> {
        let (mut run, charge) = self.charged(cfg, |r| {
            let run = r.run_simulated(cfg, bins)?;
            let iops = run.summary.iops;
            Ok((run, iops))
        })?;
        run.cpu = Some(charge);
        Ok(run)
    }

    /// `sim` on this replayer (what it produced, and the rate it simulated), `cfg`'s
    /// scheduler charged for that rate, and `sim` again on the stretched replayer where the
    /// charge binds ([`crate::cpu`]).
    fn charged<T>(
        &self,
        cfg: &Config,
        sim: impl Fn(&Replayer) -> Result<(T, f64), ReplayError>,
    ) -> Result<(T, CpuCharge), ReplayError> {
        let (out, iops) = sim(self)?;
        let charge = self.cpu.charge(cfg.sched, iops, self.cpu.kyber_domains);
        let out = if charge.stretches() {
            sim(&self.stretched(charge.stretch))?.0
        } else {
            out
        };
        Ok((out, charge))
    }

    /// The same workload on the same device with every interval `f` times as long.
    fn stretched(&self, f: f64) -> Replayer {
        let mut r = self.on_device(self.device.stretched(f));
        r.workload = self.workload.stretched(f);
        r
    }

    /// Replays under `cfg` as the simulator times it, no CPU charged.
    fn run_simulated(&self, cfg: &Config, bins: Option<usize>) -> Result<Run, ReplayError> {
        if let Some(ioprio) = cfg.settings.ioprio("ioprio")? {
            let every: Vec<u32> = (0..self.workload.streams.len() as u32).collect();
            let mut plain = cfg.clone();
            let spelt = plain.settings.0.remove("ioprio").expect("read above");
            let mut run = self
                .with_ioprio(&every, ioprio)
                .run_simulated(&plain, bins)?;
            run.config.settings.0.insert("ioprio".into(), spelt);
            return Ok(run);
        }
        let settings = self.effective_settings(cfg);
        let sim_cfg = self.sim_config(cfg.sched, &settings, true)?;
        let scheduler = sched::build(cfg.sched, &settings, &self.env)?;
        let regrouped = settings.0.get("own_group").map(|comm| {
            let mut w = self.workload.clone();
            for s in &mut w.streams {
                if s.comm.as_str() == comm.as_str() {
                    // An id no recorded cgroup has, outside the root group.
                    s.cgroup_id = sched::OWN_GROUP_CGROUP;
                }
            }
            w
        });
        let workload = regrouped.as_ref().unwrap_or(&self.workload);
        let plan = continuation::plan(workload, continuation::Mode::of(&settings)?);
        let (result, continued) = match plan {
            None => (sim::run(workload, &self.device, scheduler, sim_cfg), None),
            Some(plan) => {
                let (result, note) = self.run_continued(workload, plan, cfg.sched, &settings)?;
                (result, Some(note))
            }
        };
        let mut info = self.workload.device.clone();
        info.scheduler = Some(cfg.sched.name().to_string());
        let with_log = cfg.sched == SchedKind::Bfq && !self.notes.is_empty();
        let points = with_log.then(|| self.dispatch_points(&result));
        let mut src = MemorySource::new(vec![info], result.events);
        let (report, bins) = match bins {
            None => (
                analysis::analyze(&mut src, &analysis::Options::default())?,
                None,
            ),
            Some(n) => {
                let (agg, bins, anomalies) =
                    analysis::analyze_binned(&mut src, &analysis::Options::default(), n)?;
                (analysis::report::build(&agg, &anomalies, &src), Some(bins))
            }
        };
        let summary = Summary::of(&report);
        let decision_check = points
            .as_ref()
            .map(|(recorded, _)| self.decision_check(&settings, recorded))
            .transpose()?
            .flatten();
        let log_comparison = points.map(|(recorded, modelled)| {
            super::bfqlog::compare(
                &self.notes,
                &result.decisions,
                |s| self.workload.streams[s as usize].pid,
                &recorded,
                &modelled,
            )
        });
        Ok(Run {
            log_comparison,
            decision_check,
            continued,
            cpu: None,
            config: Config {
                settings,
                ..cfg.clone()
            },
            summary,
            report,
            bins,
            decision_counts: DecisionCounts::of(&result.decisions),
            decisions: result.decisions,
        })
    }

    /// Replays `w` with the processes of `plan` continued: from a first guess of how many
    /// bios each adds, doubled for those that ran out before their end until none does.
    fn run_continued(
        &self,
        w: &Workload,
        plan: continuation::Plan,
        sched_kind: SchedKind,
        settings: &Settings,
    ) -> Result<(sim::SimResult, ContinuedNote), ReplayError> {
        let mut counts = continuation::first_guess(w, &plan, &self.device);
        loop {
            let (extended, lasts) = continuation::extend(w, &plan, &counts);
            let scheduler = sched::build(sched_kind, settings, &self.env)?;
            let sim_cfg = self.sim_config(sched_kind, settings, true)?;
            let result = sim::run(&extended, &self.device, scheduler, sim_cfg);
            // A process whose last bio was queued had none left before its end.
            let short: Vec<usize> = lasts
                .iter()
                .enumerate()
                .filter(|(_, last)| result.queued[**last as usize] > 0)
                .map(|(k, _)| k)
                .collect();
            let total: u64 = counts.iter().sum();
            let cut = !short.is_empty() && total >= continuation::MAX_ADDED;
            if short.is_empty() || cut {
                let added_ios = (w.ios.len()..extended.ios.len())
                    .filter(|i| result.queued[*i] > 0)
                    .count() as u64;
                return Ok((
                    result,
                    ContinuedNote {
                        plan,
                        added_ios,
                        cut,
                    },
                ));
            }
            for k in short {
                counts[k] = (counts[k] * 2).max(64);
            }
            let total: u64 = counts.iter().sum();
            if total > continuation::MAX_ADDED {
                // Scale down to the bound, keeping the proportions.
                for c in &mut counts {
                    *c = (*c as f64 * continuation::MAX_ADDED as f64 / total as f64) as u64;
                }
            }
        }
    }

    /// The recording's and a run's dispatches as (ns, pid, index of the request among its
    /// process's), each on the clock of its decisions (the notes' for the recording, the
    /// run's for the model); a request is known by its start sector, whose bio says its
    /// process and index.
    fn dispatch_points(&self, result: &sim::SimResult) -> (Vec<DispatchPoint>, Vec<DispatchPoint>) {
        let w = &self.workload;
        // Each bio's process and its index among that process's bios.
        let mut seen = vec![0u64; w.streams.len()];
        let io_at: rustc_hash::FxHashMap<u64, (u32, u64)> = w
            .ios
            .iter()
            .map(|io| {
                let n = &mut seen[io.stream as usize];
                *n += 1;
                (io.sector, (w.streams[io.stream as usize].pid, *n - 1))
            })
            .collect();
        let point = |t: u64, sector: u64| io_at.get(&sector).map(|&(pid, i)| (t, pid, i));
        let recorded = w
            .service
            .iter()
            .filter_map(|s| point(s.d, s.sector))
            .collect();
        let modelled = result
            .events
            .iter()
            .filter(|e| e.kind == iosched_core::event::EventKind::Issue)
            // Recorded bios only, not those a continuation added.
            .filter(|e| sim::bio_index(e.bio).is_some_and(|i| (i as usize) < w.ios.len()))
            .filter_map(|e| point(e.ts_ns.checked_sub(result.start_ns)?, e.sector))
            .collect();
        (recorded, modelled)
    }

    /// Reads the recording's requests through the scheduler (a second pass over the trace)
    /// when it has BFQ's log, for [`Run::decision_check`].
    pub fn load_recorded_requests(
        &mut self,
        source: &mut dyn TraceSource,
    ) -> Result<(), ReplayError> {
        if self.notes.is_empty() {
            return Ok(());
        }
        self.recorded_requests =
            super::bfqcheck::recorded_requests(source, self.workload.device.dev)?;
        Ok(())
    }

    /// The trace-driven decision check under BFQ `settings`, when the recording's requests
    /// are loaded.
    fn decision_check(
        &self,
        settings: &Settings,
        recorded: &[DispatchPoint],
    ) -> Result<Option<super::bfqcheck::DecisionCheck>, ReplayError> {
        if self.recorded_requests.is_empty() {
            return Ok(None);
        }
        let bfq = sched::bfq::Bfq::new(settings, &self.env)?;
        let depth = self.sim_config(SchedKind::Bfq, settings, false)?.depth;
        // `own_group=COMM` as in the replay: those processes' requests in a group of their
        // own.
        let regrouped = settings.0.get("own_group").map(|comm| {
            let pids: Vec<u32> = self
                .workload
                .streams
                .iter()
                .filter(|s| s.comm.as_str() == comm.as_str())
                .map(|s| s.pid)
                .collect();
            let mut rqs = self.recorded_requests.clone();
            for r in rqs.iter_mut().filter(|r| pids.contains(&r.pid)) {
                r.cgroup = sched::OWN_GROUP_CGROUP;
            }
            rqs
        });
        Ok(Some(super::bfqcheck::check(
            bfq,
            &self.workload,
            regrouped.as_deref().unwrap_or(&self.recorded_requests),
            &self.notes,
            recorded,
            self.env.rotational,
            depth,
        )))
    }

    /// Replays without writing events (speed measurements): requests simulated, the CPU
    /// charged as [`Replayer::run`] charges it (a stretched rerun where it binds).
    pub fn run_bare(&self, cfg: &Config) -> Result<u64, ReplayError> {
        let settings = self.effective_settings(cfg);
        let bare = |r: &Replayer| -> Result<sim::SimResult, ReplayError> {
            let scheduler = sched::build(cfg.sched, &settings, &r.env)?;
            let sim_cfg = r.sim_config(cfg.sched, &settings, false)?;
            Ok(sim::run(&r.workload, &r.device, scheduler, sim_cfg))
        };
        let (requests, _) = self.charged(cfg, |r| {
            let result = bare(r)?;
            let span_s = (result.end_ns - result.start_ns) as f64 / 1e9;
            let iops = if span_s > 0.0 {
                result.requests as f64 / span_s
            } else {
                0.0
            };
            Ok((result.requests, iops))
        })?;
        Ok(requests)
    }
}

/// The recording's own numbers for the replayed device, by the same analysis, over its
/// workload's span.
pub fn recorded_summary(
    source: &mut dyn TraceSource,
    w: &Workload,
) -> Result<(Summary, Report), ReplayError> {
    let opts = analysis::Options {
        devices: vec![w.device.dev.to_string()],
        ..Default::default()
    };
    // Over the workload's span, first queued to last completed, as a replay is measured: a
    // timer note before the first request (wbt's, left from the device's last I/O) or
    // BFQ's messages after the last completion would stretch the recording's window and
    // lower its throughput against the replay's (tiny-seq-writes: 0.2 s in 3.2 s).
    let report = analysis::analyze_between(source, &opts, w.start_ns, w.end_ns)?;
    Ok((Summary::of(&report), report))
}

/// Idle episodes of one stream in a run's decision log.
pub fn idle_episodes(decisions: &[Decided], stream: u32) -> (u64, u64, BTreeMap<IdleReason, u64>) {
    let mut n = 0;
    let mut ns = 0;
    let mut reasons = BTreeMap::new();
    for d in decisions {
        match &d.d {
            Decision::Idle {
                stream: s, reason, ..
            } if *s == stream => {
                n += 1;
                *reasons.entry(*reason).or_insert(0) += 1;
            }
            Decision::IdleEnd {
                stream: s,
                waited_ns,
                ..
            } if *s == stream => ns += waited_ns,
            _ => {}
        }
    }
    (n, ns, reasons)
}

/// Expirations of one stream by reason.
pub fn expirations(decisions: &[Decided], stream: u32) -> BTreeMap<ExpireReason, u64> {
    let mut m = BTreeMap::new();
    for d in decisions {
        if let Decision::Expire {
            stream: s, reason, ..
        } = &d.d
            && *s == stream
        {
            *m.entry(*reason).or_insert(0) += 1;
        }
    }
    m
}
