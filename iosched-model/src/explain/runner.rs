//! The what-if runner: the replay as recorded first, then every diagnosis's what-ifs
//! gathered and each distinct one replayed once, then their follow-ups (what-ifs that
//! depend on those runs) the same way, then every diagnosis judges, in order, from the runs
//! it asked for.
//!
//! Owns: what a what-if is replayed on, the rounds, and the runs they made. Must not: judge.

use iosched_core::analysis::Report;

use super::super::{
    device::DeviceModel,
    replay::{Config, ReplayError, Replayer, Run, Summary},
    sched::{SchedKind, Settings},
};
use super::{
    Finding,
    parts::{Estimate, Fix, estimate, range_end},
};

/// One diagnosis: a cause's what-ifs and its judgement of their runs.
pub(super) trait Diagnosis {
    /// The what-ifs it needs, from the workload and the replay as recorded.
    fn what_ifs(&self, cx: &Context) -> Vec<WhatIf>;
    /// What-ifs it needs only given the first round's runs (none by default).
    fn follow_ups(&self, cx: &Context, runs: &Runs) -> Vec<WhatIf> {
        let _ = (cx, runs);
        Vec::new()
    }
    /// Its findings from the runs of the what-ifs it asked for; `earlier`: the findings of
    /// the diagnoses before it.
    fn judge(&self, cx: &Context, runs: &Runs, earlier: &[Finding]) -> Vec<Finding>;
}

/// What a what-if's configuration is replayed on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum On {
    /// The replayer as given.
    Recorded,
    /// Its rotational device without the latency its fit assumed because the recording hid
    /// it ([`Context::latency_unseen`]).
    WithoutUnseenLatency,
    /// Its workload with these streams at this I/O priority ([`Replayer::with_ioprio`]).
    AtPriority { streams: Vec<u32>, ioprio: u16 },
}

/// A configuration to replay, and on what.
#[derive(Clone, Debug)]
pub(super) struct WhatIf {
    pub on: On,
    pub config: Config,
}

impl WhatIf {
    pub fn of(config: Config) -> WhatIf {
        WhatIf {
            on: On::Recorded,
            config,
        }
    }

    /// `sched` with `pairs` set, labelled as `replay --sched` spells it
    /// (`bfq:slice_idle=0`).
    pub fn spec(sched: SchedKind, pairs: &[(&str, &str)]) -> WhatIf {
        let mut s = Settings::default();
        for (k, v) in pairs {
            s.0.insert((*k).into(), (*v).into());
        }
        let mut label = sched.name().to_string();
        if !pairs.is_empty() {
            let kv: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            label = format!("{label}:{}", kv.join(","));
        }
        WhatIf::of(Config {
            label,
            sched,
            settings: s,
        })
    }

    /// The same configuration on `on`.
    pub fn on(&self, on: On) -> WhatIf {
        WhatIf {
            on,
            config: self.config.clone(),
        }
    }

    /// Its estimate's fix: the configuration, by its label.
    pub fn fix(&self) -> Fix {
        Fix::Config(self.config.label.clone())
    }

    /// Replays the same: the label is a name, not part of the configuration.
    fn same(&self, other: &WhatIf) -> bool {
        self.on == other.on
            && self.config.sched == other.config.sched
            && self.config.settings == other.config.settings
    }
}

/// What every diagnosis sees: the replayer, the recording, and its replay as recorded.
pub(super) struct Context<'a> {
    pub r: &'a Replayer,
    /// The recording's own summary and report.
    pub recorded: &'a Summary,
    pub report: &'a Report,
    /// The recorded configuration (none when the recording does not name its scheduler).
    pub base: WhatIf,
    pub base_run: Run,
    /// `r` without the latency the recording hid, where it did.
    unseen: Option<Replayer>,
}

impl<'a> Context<'a> {
    /// Replays the recorded configuration.
    pub fn new(
        r: &'a Replayer,
        recorded: &'a Summary,
        report: &'a Report,
    ) -> Result<Context<'a>, ReplayError> {
        let base = match r.recorded_config() {
            Some(c) => WhatIf::of(c),
            None => WhatIf::spec(SchedKind::None, &[]),
        };
        let base_run = r.run(&base.config)?;
        Ok(Context {
            r,
            recorded,
            report,
            base,
            base_run,
            unseen: without_unseen_latency(r),
        })
    }

    pub fn sched(&self) -> SchedKind {
        self.base.config.sched
    }

    /// The recording hid the latency of each request's way to the disk and back: a what-if
    /// that serves processes one request at a time (where every request pays it) from a
    /// recording where every request queued (where none showed it) depends on it, and its
    /// estimate has another end, without it.
    pub fn latency_unseen(&self) -> bool {
        self.unseen.is_some()
    }

    /// What [`Context::other_end`] of `what_if` needs replayed.
    pub fn other_end_what_ifs(&self, what_if: &WhatIf) -> Vec<WhatIf> {
        if !self.latency_unseen() {
            return Vec::new();
        }
        vec![
            what_if.on(On::WithoutUnseenLatency),
            self.base.on(On::WithoutUnseenLatency),
        ]
    }

    /// `what_if`'s estimate without the latency the recording hid, against the recorded
    /// configuration without it; `None` where the recording showed it.
    pub fn other_end(&self, runs: &Runs, what_if: &WhatIf) -> Option<Estimate> {
        self.latency_unseen().then(|| {
            estimate(
                what_if.fix(),
                runs.get(&what_if.on(On::WithoutUnseenLatency)),
                runs.get(&self.base.on(On::WithoutUnseenLatency)),
                self.recorded,
                &[],
            )
        })
    }

    /// `what_if`'s estimate against the replay as recorded, for `pids` (all when empty).
    pub fn estimate(&self, runs: &Runs, what_if: &WhatIf, pids: &[u32]) -> Estimate {
        estimate(
            what_if.fix(),
            runs.get(what_if),
            &self.base_run,
            self.recorded,
            pids,
        )
    }

    /// [`Context::estimate`] with its other end, where it has one.
    pub fn estimate_with_other_end(&self, runs: &Runs, what_if: &WhatIf) -> Estimate {
        let mut e = self.estimate(runs, what_if, &[]);
        e.range_end = self.other_end(runs, what_if).as_ref().map(range_end);
        e
    }

    fn replay(&self, w: &WhatIf) -> Result<Run, ReplayError> {
        match &w.on {
            On::Recorded => self.r.run(&w.config),
            On::WithoutUnseenLatency => self
                .unseen
                .as_ref()
                .expect("asked for only where the latency was unseen")
                .run(&w.config),
            On::AtPriority { streams, ioprio } => {
                self.r.with_ioprio(streams, *ioprio).run(&w.config)
            }
        }
    }
}

/// `r`'s rotational device without the latency its fit assumed because the recording hid
/// it ([`Context::latency_unseen`]): the best case of a what-if that depends on it.
fn without_unseen_latency(r: &Replayer) -> Option<Replayer> {
    let unseen = r.fit.as_ref().is_some_and(|q| q.latency_unseen);
    match &r.device {
        DeviceModel::Rotational(m) if unseen && m.latency_ns > 0.0 => {
            let mut m = m.clone();
            m.latency_ns = 0.0;
            Some(r.on_device(DeviceModel::Rotational(m)))
        }
        _ => None,
    }
}

/// The runs the what-ifs made, the replay as recorded among them.
pub(super) struct Runs<'a> {
    cx: &'a Context<'a>,
    done: Vec<(WhatIf, Run)>,
}

impl Runs<'_> {
    /// The run of `w`, which its diagnosis asked for.
    pub fn get(&self, w: &WhatIf) -> &Run {
        if w.same(&self.cx.base) {
            return &self.cx.base_run;
        }
        self.done
            .iter()
            .find(|(d, _)| d.same(w))
            .map(|(_, run)| run)
            .unwrap_or_else(|| panic!("what-if {:?} judged but not asked for", w.config.label))
    }

    fn has(&self, w: &WhatIf) -> bool {
        w.same(&self.cx.base) || self.done.iter().any(|(d, _)| d.same(w))
    }

    /// Replays those of `wanted` not replayed yet, each once.
    fn replay(&mut self, wanted: Vec<WhatIf>) -> Result<(), ReplayError> {
        for w in wanted {
            if !self.has(&w) {
                let run = self.cx.replay(&w)?;
                self.done.push((w, run));
            }
        }
        Ok(())
    }
}

/// What [`diagnose`] found: the findings, the replays it ran (the one as recorded
/// included), and the configuration among the what-ifs on the recording as it is under which
/// the model moved the workload most, with its throughput change against the replay as
/// recorded, %: a verdict of "nothing is wrong" must not contradict it.
pub(super) struct Diagnosed {
    pub findings: Vec<Finding>,
    pub replays: usize,
    pub fastest: Option<(String, f64)>,
}

/// Runs every diagnosis's what-ifs (each distinct one once), then their follow-ups, then
/// judges them in order.
pub(super) fn diagnose(
    cx: &Context,
    diagnoses: &[&dyn Diagnosis],
) -> Result<Diagnosed, ReplayError> {
    let mut runs = Runs {
        cx,
        done: Vec::new(),
    };
    runs.replay(diagnoses.iter().flat_map(|d| d.what_ifs(cx)).collect())?;
    let follow_ups = diagnoses
        .iter()
        .flat_map(|d| d.follow_ups(cx, &runs))
        .collect();
    runs.replay(follow_ups)?;
    let mut findings = Vec::new();
    for d in diagnoses {
        let found = d.judge(cx, &runs, &findings);
        findings.extend(found);
    }
    let base_mb_s = cx.base_run.summary.mb_per_s;
    let fastest = runs
        .done
        .iter()
        .filter(|(w, _)| w.on == On::Recorded && base_mb_s > 0.0)
        .map(|(w, run)| {
            (
                w.config.label.clone(),
                100.0 * (run.summary.mb_per_s / base_mb_s - 1.0),
            )
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    Ok(Diagnosed {
        findings,
        replays: 1 + runs.done.len(),
        fastest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::{dsync_journal, flat_disk};
    use std::cell::RefCell;

    /// Asks for `wants` and records the configurations it was handed back.
    struct Asks {
        wants: Vec<WhatIf>,
        follow_up: Option<WhatIf>,
        got: RefCell<Vec<String>>,
    }

    impl Diagnosis for Asks {
        fn what_ifs(&self, _: &Context) -> Vec<WhatIf> {
            self.wants.clone()
        }
        fn follow_ups(&self, _: &Context, runs: &Runs) -> Vec<WhatIf> {
            // The first round's runs are in hand.
            for w in &self.wants {
                runs.get(w);
            }
            self.follow_up.iter().cloned().collect()
        }
        fn judge(&self, _: &Context, runs: &Runs, _: &[Finding]) -> Vec<Finding> {
            for w in self.wants.iter().chain(&self.follow_up) {
                self.got.borrow_mut().push(runs.get(w).config.label.clone());
            }
            Vec::new()
        }
    }

    /// Two diagnoses asking for the same configuration (under two labels), one for the
    /// recorded one, and a follow-up the other already asked for: the runner replays the
    /// recorded configuration and each distinct other one once, and hands the same run to
    /// both.
    #[test]
    fn each_distinct_what_if_is_replayed_once() {
        let r = Replayer::new(
            dsync_journal(50),
            Some(flat_disk(400_000.0, 100_000.0)),
            vec![0, 1],
        )
        .unwrap();
        let as_recorded = r.run(&WhatIf::spec(SchedKind::Bfq, &[]).config).unwrap();
        let recorded = Summary::of(&as_recorded.report);
        let cx = Context::new(&r, &recorded, &as_recorded.report).unwrap();
        let relabelled = {
            let mut w = WhatIf::spec(SchedKind::MqDeadline, &[]);
            w.config.label = "mq-deadline by another name".into();
            w
        };
        let no_idle = WhatIf::spec(SchedKind::Bfq, &[("slice_idle", "0")]);
        let one = Asks {
            wants: vec![WhatIf::spec(SchedKind::MqDeadline, &[]), cx.base.clone()],
            follow_up: Some(no_idle.clone()),
            got: RefCell::default(),
        };
        let two = Asks {
            wants: vec![relabelled, no_idle],
            follow_up: None,
            got: RefCell::default(),
        };
        let Diagnosed {
            findings, replays, ..
        } = diagnose(&cx, &[&one, &two]).unwrap();
        assert!(findings.is_empty());
        // The recorded configuration, mq-deadline, bfq:slice_idle=0.
        assert_eq!(replays, 3);
        assert_eq!(
            *one.got.borrow(),
            [
                "mq-deadline",
                cx.base.config.label.as_str(),
                "bfq:slice_idle=0"
            ]
        );
        assert_eq!(*two.got.borrow(), ["mq-deadline", "bfq:slice_idle=0"]);
    }
}
