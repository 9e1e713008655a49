//! The decision-agreement table of `cargo xtask validate` reads what the library computes:
//! a known BFQ log and a known list of the model's decisions, compared by
//! `model::bfqlog::compare` and written as `replay --json` writes a `decision_check`, give
//! the known agreement in the test bed's table. Needs no root (nothing is recorded), but
//! lives here, the one package that links both the library and the test bed.

use iosched_core::event::Note;
use iosched_model::{
    bfqcheck::DecisionCheck,
    bfqlog::{self, DispatchPoint},
    scenarios::sched_note as note,
    sched::{Decided, Decision, ExpireReason},
};
use iosched_testbed::scenario::validate::{Agreement, AgreementRow, agreement_table};

fn expire(t: u64, reason: ExpireReason) -> Decided {
    Decided {
        t,
        d: Decision::Expire {
            stream: 0,
            sync: true,
            reason,
            served: 0,
            shared: false,
        },
    }
}

/// The table's row for a model that made `model`'s expirations against `notes`.
fn row(run: &str, notes: &[Note], model: &[Decided], dispatches: &[DispatchPoint]) -> AgreementRow {
    let check = DecisionCheck {
        expirations: bfqlog::compare(notes, model, |_| 7, dispatches, dispatches),
        ..DecisionCheck::default()
    };
    let json = serde_json::to_value(&check).unwrap();
    AgreementRow {
        scenario: "known".into(),
        run: format!("{run} (bfq)"),
        has_log: true,
        agreement: Some(Agreement::from_decision_check(&json).unwrap()),
    }
}

/// Process 7 dispatches a request every µs; BFQ put it in service twice and expired it
/// after its 100th and 200th request (budget exhausted, then timed out). A model that
/// expires it at those points for those reasons agrees 100%; one that also expires it
/// twice more (preempted) and gives a wrong reason at the second point matches 1 of the 4
/// expirations it made: 25%, below the target.
#[test]
fn a_known_log_and_model_give_the_known_agreement_in_the_table() {
    use ExpireReason::*;
    let dispatches: Vec<DispatchPoint> = (0..300u64).map(|k| (k * 1000, 7, k)).collect();
    let notes = [
        note(0, "bfq7S set_in_service_queue, cur-budget = 100"),
        note(
            99_500,
            "bfq7S expire (2, slow 0, num_disp 0, short_ttime 1)",
        ),
        note(99_600, "bfq7S set_in_service_queue, cur-budget = 100"),
        note(
            199_500,
            "bfq7S expire (1, slow 0, num_disp 0, short_ttime 1)",
        ),
    ];
    let good = [
        expire(99_500, BudgetExhausted),
        expire(199_500, BudgetTimeout),
    ];
    let noisy = [
        expire(50_500, Preempted),
        expire(99_500, BudgetExhausted),
        expire(150_500, Preempted),
        expire(199_500, NoMoreRequests),
    ];
    let rows = [
        row("good", &notes, &good, &dispatches),
        row("noisy", &notes, &noisy, &dispatches),
    ];
    let good = rows[0].agreement.as_ref().unwrap();
    assert_eq!(good.log_switches, 2);
    assert_eq!((good.log_expirations, good.model_expirations), (2, 2));
    assert_eq!((good.matched, good.agreement_pct), (2, 100.0));
    let noisy = rows[1].agreement.as_ref().unwrap();
    assert_eq!((noisy.log_expirations, noisy.model_expirations), (2, 4));
    assert_eq!((noisy.matched, noisy.agreement_pct), (1, 25.0));
    assert_eq!(noisy.points_agreement_pct, 50.0);

    let table = agreement_table(&rows);
    let line = |run: &str| {
        table
            .lines()
            .find(|l| l.contains(run))
            .unwrap_or_else(|| panic!("no {run} in\n{table}"))
    };
    assert!(line("good (bfq)").contains("100.0%"), "{table}");
    assert!(line("noisy (bfq)").contains("25.0% !"), "{table}");
    assert!(
        table.contains("\n1 of 2 BFQ recordings at >= 90%\n"),
        "{table}"
    );
}
