//! Whether a recording realises its run's I/O priority. BFQ weighs each queue by it and, since
//! 5.12, weight-raises only queues of the default one, so a set recorded at another priority
//! (a test bed started under `nice -n 10`: every process at best-effort 6) compares other
//! workloads than its runs name, and nothing else in the tables shows it.

use super::{Run, Workload};

/// Best-effort 4: what a process that set no priority has at nice 0, and what the recorder
/// sees for it.
const DEFAULT: u16 = (2 << 13) | 4;

/// The program whose processes a run's workload starts (their `comm` in the recording).
fn program(w: &Workload) -> &'static str {
    match w {
        Workload::Fio(_) => "fio",
        Workload::DdRead { .. } | Workload::DsyncJournal { .. } => "dd",
    }
}

/// `ioprio` as ionice and the model's `ioprio=` switch spell it (`be/4`, `rt/0`, `idle`;
/// `none`: no class, the priority follows nice).
pub fn spell(ioprio: u16) -> String {
    let level = ioprio & 0x1fff;
    match ioprio >> 13 {
        0 => "none".into(),
        1 => format!("rt/{level}"),
        2 => format!("be/{level}"),
        3 => "idle".into(),
        c => format!("class {c}/{level}"),
    }
}

/// The priority the run sets for its workload, as the recorder sees it.
fn expected(run: &Run) -> Option<u16> {
    match super::runner::ioprio_value(run.ioprio)? {
        0 => Some(DEFAULT),
        v => u16::try_from(v).ok(),
    }
}

/// The workload's processes of a recording (`(comm, ioprio)` of each process that did I/O)
/// at a priority its run did not set, as one line; `None` when every one is at it.
pub fn mismatch(run: &Run, processes: &[(String, u16)]) -> Option<String> {
    let want = expected(run)?;
    let prog = program(&run.workload);
    let mut off: Vec<u16> = processes
        .iter()
        .filter(|(comm, p)| comm == prog && *p != want && !(want == DEFAULT && *p == 0))
        .map(|(_, p)| *p)
        .collect();
    if off.is_empty() {
        return None;
    }
    let n = off.len();
    off.sort_unstable();
    off.dedup();
    let seen: Vec<String> = off.into_iter().map(spell).collect();
    Some(format!(
        "{n} {prog} process(es) at {}, the run set {}",
        seen.join(", "),
        spell(want)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ioprio: Option<&'static str>) -> Run {
        Run {
            label: "r".into(),
            scheduler: "bfq",
            settings: Vec::new(),
            workload: Workload::Fio(Vec::new()),
            ioprio,
        }
    }

    fn procs(v: &[(&str, u16)]) -> Vec<(String, u16)> {
        v.iter().map(|(c, p)| ((*c).to_owned(), *p)).collect()
    }

    /// A set recorded under `nice -n 10` (best-effort 6) is named; the default priority, class
    /// none, and other programs' processes (jbd2 at best-effort 3) are not.
    #[test]
    fn a_recording_at_another_priority_than_its_run_is_named() {
        let be6 = (2 << 13) | 6;
        let jbd2 = ("jbd2/loop0-8", (2 << 13) | 3);
        assert_eq!(
            mismatch(&run(None), &procs(&[("fio", be6), ("fio", be6), jbd2])).as_deref(),
            Some("2 fio process(es) at be/6, the run set be/4")
        );
        assert_eq!(
            mismatch(&run(None), &procs(&[("fio", DEFAULT), jbd2])),
            None
        );
        assert_eq!(mismatch(&run(None), &procs(&[("fio", 0)])), None);
        // A run that sets best-effort 5 wants it, and the default is then a mismatch.
        let be5 = (2 << 13) | 5;
        assert_eq!(mismatch(&run(Some("be/5")), &procs(&[("fio", be5)])), None);
        assert_eq!(
            mismatch(&run(Some("be/5")), &procs(&[("fio", DEFAULT)])).as_deref(),
            Some("1 fio process(es) at be/4, the run set be/5")
        );
    }

    #[test]
    fn priorities_are_spelt_as_ionice_classes() {
        assert_eq!(spell(DEFAULT), "be/4");
        assert_eq!(spell(1 << 13), "rt/0");
        assert_eq!(spell(3 << 13), "idle");
        assert_eq!(spell(0), "none");
    }
}
