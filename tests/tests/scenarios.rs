//! The seed scenarios on the real kernel (6.18 here), on the emulated rotational disk: each
//! asserts the phenomenon in our own report's numbers (`iosched-trace report --json`), and
//! where a seed's effect does not happen on this kernel, what the kernel does instead (the
//! why is in docs/SCENARIOS.md). Root only, serially; about 4 minutes together.
//!
//! Only large effects are asserted (factors, not percents): the machine is shared and noisy.

use iosched_testbed::scenario::{self, RunOptions, RunSummary, Tools};
use iosched_trace_tests::{binary, hdd::daemon_binary, real_kernel_available, scheduler_available};

/// Runs the scenario, prints its table (so a failure shows the numbers), and returns the
/// runs' summaries. Every run's recording must be complete.
fn run(name: &str) -> Vec<RunSummary> {
    let scenario = scenario::by_name(name).unwrap();
    let tools = Tools {
        trace_bin: binary(),
        daemon_bin: daemon_binary(),
    };
    let outcomes = scenario::run(&scenario, &tools, &RunOptions::default())
        .unwrap_or_else(|e| panic!("scenario {name}: {e}"));
    let runs: Vec<RunSummary> = outcomes.into_iter().map(|o| o.summary).collect();
    eprintln!("{name}:\n{}", scenario::table(&runs));
    for r in &runs {
        assert_eq!(r.lost_events, 0, "{}: the recording lost events", r.label);
    }
    runs
}

fn get<'a>(runs: &'a [RunSummary], label: &str) -> &'a RunSummary {
    runs.iter()
        .find(|r| r.label == label)
        .unwrap_or_else(|| panic!("no run {label}"))
}

/// Seed 000. One 4 KiB sequential reader streams (~15 MB/s at iodepth 1) under every
/// scheduler. Two readers under bfq with low_latency=1 (both new queues weight-raised, which
/// switches off idling for throughput), mq-deadline and none alternate, one seek per request:
/// an order of magnitude less, and the device never idles with I/O waiting. bfq with
/// low_latency=0 is bistable on this kernel (docs/SCENARIOS.md): some runs stream both
/// readers, some fall into the same alternation; when it streams, our report shows the
/// idling that makes it possible.
#[test]
fn multi_reader_two_readers_alternate_unless_bfq_idles() {
    if !real_kernel_available("multi_reader_two_readers_alternate_unless_bfq_idles")
        || !scheduler_available("multi_reader_two_readers_alternate_unless_bfq_idles", "bfq")
    {
        return;
    }
    let runs = run("multi-reader");
    for label in ["bfq-ll1-1j", "bfq-ll0-1j", "mq-deadline-1j", "none-1j"] {
        let r = get(&runs, label);
        assert!(
            r.mb_per_s > 8.0,
            "{label}: one reader streams: {:.2} MB/s",
            r.mb_per_s
        );
    }
    let one = get(&runs, "mq-deadline-1j").mb_per_s;
    for label in ["bfq-ll1-2j", "mq-deadline-2j", "none-2j"] {
        let r = get(&runs, label);
        assert!(
            r.mb_per_s < one / 5.0,
            "{label}: two alternating readers are seek-bound: {:.2} MB/s vs one reader {one:.2}",
            r.mb_per_s
        );
        assert!(
            r.idle_with_pending_pct < 0.5,
            "{label}: no idling: {:.2}%",
            r.idle_with_pending_pct
        );
        // Alternation, seen from outside: one-request service slices.
        for p in r.processes.iter().filter(|p| p.comm == "fio") {
            assert!(
                p.slices > 20 && p.slice_mean_requests < 3.0,
                "{label}: fio ({}) alternates: {} slices of {:.1} requests",
                p.pid,
                p.slices,
                p.slice_mean_requests
            );
        }
    }
    let idling = get(&runs, "bfq-ll0-2j");
    if idling.mb_per_s > one / 2.0 {
        // Streaming two readers means serving each for long runs: BFQ keeps the device for
        // the in-service reader (its idle timer bridges the reader's think time, mostly too
        // short to count as waste) until its budget is spent.
        for p in idling.processes.iter().filter(|p| p.comm == "fio") {
            assert!(
                p.slice_mean_requests > 20.0,
                "bfq low_latency=0 streamed two readers ({:.2} MB/s) but fio ({}) had slices of \
                 {:.1} requests",
                idling.mb_per_s,
                p.pid,
                p.slice_mean_requests
            );
        }
        eprintln!(
            "bfq low_latency=0 streamed two readers ({:.2} MB/s), idle with I/O waiting {:.2}%",
            idling.mb_per_s, idling.idle_with_pending_pct
        );
    } else {
        eprintln!(
            "bfq low_latency=0 with two readers fell into alternation this time ({:.2} MB/s)",
            idling.mb_per_s
        );
    }
}

/// Seed 001. On 6.18 bfq no longer idles for dd while jbd2's commit waits: after the first
/// few writes BFQ has detected jbd2 as dd's waker and injects its I/O (5.3, "detect wakers
/// and unconditionally inject their I/O"), and one non-root cgroup no longer makes the
/// scenario asymmetric (~6.1). So bfq is as fast as mq-deadline, and the idling our report
/// finds between dd and jbd2 is the learning phase only: a slice or two, not one per write.
#[test]
fn dsync_journal_bfq_idles_only_until_it_learns_the_waker() {
    if !real_kernel_available("dsync_journal_bfq_idles_only_until_it_learns_the_waker")
        || !scheduler_available(
            "dsync_journal_bfq_idles_only_until_it_learns_the_waker",
            "bfq",
        )
    {
        return;
    }
    let runs = run("dsync-journal");
    let count = u64::from(scenario::DSYNC_COUNT);
    for r in &runs {
        let dd = r.process("dd").expect("dd in the report");
        let jbd2 = r.process("jbd2").expect("jbd2 in the report");
        // One data write per dd write (more: block allocation), one commit (plus its
        // descriptor and commit blocks) per write for jbd2.
        assert!(
            dd.requests >= count,
            "{}: dd {} requests",
            r.label,
            dd.requests
        );
        assert!(
            jbd2.requests >= count,
            "{}: jbd2 {} requests",
            r.label,
            jbd2.requests
        );
    }
    let (bfq, deadline) = (get(&runs, "bfq"), get(&runs, "mq-deadline"));
    // The 2019 mechanism would add slice_idle (8 ms) to every ~20 ms write here: x1.4.
    assert!(
        bfq.workload_secs < 1.25 * deadline.workload_secs,
        "dd took {:.2} s under bfq, {:.2} s under mq-deadline",
        bfq.workload_secs,
        deadline.workload_secs
    );
    let waste = bfq.idle_between("dd", "jbd2");
    assert!(
        waste < count * 8_000_000 / 10,
        "bfq idled {waste} ns after dd while jbd2 waited: a slice per write?"
    );
}

/// Seed 002. A bio merges only into a request that still waits (plug, scheduler): at
/// iodepth 32 the loop device (128 tags) takes every request at once, so nothing merges even
/// with nomerges=0, the blk-mq behaviour the seed complained about. At iodepth 256 requests
/// wait in mq-deadline: with nomerges=0 4 KiB bios merge and throughput rises; with
/// nomerges=2 there is exactly one request per bio.
#[test]
fn tiny_seq_writes_merge_only_when_requests_wait() {
    if !real_kernel_available("tiny_seq_writes_merge_only_when_requests_wait") {
        return;
    }
    let runs = run("tiny-seq-writes");
    for label in ["dl-qd32-nomerges0", "dl-qd32-nomerges2"] {
        let r = get(&runs, label);
        assert!(
            r.merge_ratio < 1.05,
            "{label}: merge ratio {:.3}",
            r.merge_ratio
        );
    }
    let (merging, unmerged) = (
        get(&runs, "dl-qd256-nomerges0"),
        get(&runs, "dl-qd256-nomerges2"),
    );
    assert!(
        merging.merge_ratio > 1.5,
        "merge ratio {:.3}",
        merging.merge_ratio
    );
    assert!(merging.requests_dispatched * 3 < merging.bios_queued * 2);
    assert_eq!(unmerged.merge_ratio, 1.0);
    assert_eq!(unmerged.requests_dispatched, unmerged.bios_queued);
    assert!(
        merging.mb_per_s > 1.3 * unmerged.mb_per_s,
        "merged {:.1} MB/s vs unmerged {:.1} MB/s",
        merging.mb_per_s,
        unmerged.mb_per_s
    );
}

/// Seed 003. A single buffered sequential reader loses nothing to bfq's idling on 6.18:
/// with no other queue waiting, idling holds back no one, and readahead keeps the reader's
/// queue busy. slice_idle 8, 0 and mq-deadline stream alike.
#[test]
fn single_reader_streams_whatever_slice_idle() {
    if !real_kernel_available("single_reader_streams_whatever_slice_idle")
        || !scheduler_available("single_reader_streams_whatever_slice_idle", "bfq")
    {
        return;
    }
    let runs = run("single-reader-idle");
    let fastest = runs.iter().map(|r| r.mb_per_s).fold(0.0, f64::max);
    for r in &runs {
        assert!(r.mb_per_s > 80.0, "{}: {:.1} MB/s", r.label, r.mb_per_s);
        // Throughput alike within 30%: what bfq's idling would cost shows in the idle time
        // asserted next, while a shared machine moved one run of the same three by 15%
        // (91.4 MB/s against 107.7, clean-clone CI with another build running beside it).
        assert!(
            r.mb_per_s > 0.7 * fastest,
            "{}: {:.1} MB/s vs the fastest {fastest:.1}",
            r.label,
            r.mb_per_s
        );
        assert!(
            r.idle_with_pending_pct < 1.0,
            "{}: idle with I/O waiting {:.2}%",
            r.label,
            r.idle_with_pending_pct
        );
    }
}

/// Seed 004. 32 synchronous readers on a seek-bound disk: the FIFO-like schedulers serve
/// them round-robin, so every reader waits about one round (32 x ~8 ms) and never much more.
/// bfq is bimodal on this kernel (docs/SCENARIOS.md): in most runs its worst Q2C is several
/// times a round (1.8-4.2 s measured), in some it is one round like the others. Asserted: the
/// round for the others, and bfq never better than about one round.
#[test]
fn many_readers_wait_a_round_and_bfq_no_less() {
    if !real_kernel_available("many_readers_wait_a_round_and_bfq_no_less")
        || !scheduler_available("many_readers_wait_a_round_and_bfq_no_less", "bfq")
    {
        return;
    }
    let runs = run("many-readers-latency");
    // 32 readers x ~7 ms per random 4 KiB read (measured ~125 IOPS): a round is ~250 ms.
    let round_ns = 32 * 7_000_000u64;
    for pattern in ["rand", "seq"] {
        let bfq = get(&runs, &format!("bfq-{pattern}"));
        for scheduler in ["mq-deadline", "kyber", "none"] {
            let other = get(&runs, &format!("{scheduler}-{pattern}"));
            assert!(
                other.q2c_max_ns > round_ns / 2 && other.q2c_max_ns < 1_000_000_000,
                "{}: worst Q2C {} ns, a round is ~{round_ns} ns",
                other.label,
                other.q2c_max_ns
            );
        }
        assert!(
            bfq.q2c_max_ns > round_ns / 2,
            "{}: worst Q2C {} ns, below one round",
            bfq.label,
            bfq.q2c_max_ns
        );
        if bfq.q2c_max_ns > 3 * get(&runs, &format!("mq-deadline-{pattern}")).q2c_max_ns {
            eprintln!("{}: bfq's worst Q2C is several rounds this time", bfq.label);
        }
    }
}
