//! BFQ's depth cut with answers known by construction: one process keeps more sync writes
//! in flight (fio `--iodepth`, libaio) than BFQ lets its queue have, merging off, on a disk
//! that serves one request at a time in `SVC_NS` each, behind enough driver tags for every
//! request BFQ allows.
//!
//! `bfq_limit_depth` gives a sync write a depth of `limit` = 3/4 of nr_requests; from 5.18,
//! a bio whose queue already holds its share (`bfqq_request_over_limit`; alone, all of it)
//! gets depth 1, which since 6.18 is tag 0 alone. So with `limit` requests out the next
//! bio sleeps until the request holding tag 0 completes, not the next one:
//! - tag 0 held by the newest request: the queue drains to empty (`limit` completions, with
//!   `limit`, ..., 1 requests in flight), then the sleeper takes tag 0 as the oldest and its
//!   process refills the queue at once;
//! - tag 0 held by the oldest: one completion (`limit` in flight), and the sleeper takes it
//!   as the newest.
//!
//! Over one cycle of `limit + 1` completions, one `SVC_NS` each, the requests in flight sum
//! to `limit (limit + 1) / 2 + limit` request-services, and one bio (Q'd, asleep) is in
//! flight throughout on top: mean bios in flight `limit (limit + 3) / (2 (limit + 1)) + 1`,
//! about half the limit, where without the cut it is `limit + 1`. The longest Q2G is the
//! drain, `limit` services.

use super::{
    replay::{Config, Replayer, Run},
    scenarios::{WRITE_SECTORS, flat_disk, mean_in_flight, windowed_writer},
    sched::Settings,
};

/// A 4 KiB write, contiguous with the previous one (the first with the head at sector 0):
/// costs the disk's overhead alone.
const BIO_SECTORS: u32 = WRITE_SECTORS;
const SVC_NS: f64 = 100_000.0;
/// nr_requests 32: BFQ lets sync writes have 24 (low_latency off: no raised queue).
const SETTINGS: &str = "low_latency=0,depth=32,nr_requests=32,nomerges=2,iodepth=64";
const LIMIT: f64 = 24.0;

fn run(spec: &str) -> Run {
    let r = Replayer::new(
        windowed_writer(5000, 64, 0, "bfq"),
        Some(flat_disk(5_000_000.0, SVC_NS)),
        vec![0, 1],
    )
    .unwrap();
    r.run(&Config::parse(spec, &Settings::default()).unwrap())
        .unwrap()
}

fn max_q2g_ns(run: &Run) -> u64 {
    run.report.devices[0].latency["q2g"].max_ns
}

#[test]
fn a_queue_at_its_limit_waits_for_tag_zero_and_drains_every_other_cycle() {
    let cut = run(&format!("bfq:{SETTINGS}"));
    // The disk never idles beyond a refill: one request per service.
    let mb = cut.summary.mb_per_s;
    let want_mb = 4096.0 / SVC_NS * 1e3;
    assert!((mb - want_mb).abs() / want_mb < 0.02, "{mb} MB/s");
    let want = LIMIT * (LIMIT + 3.0) / (2.0 * (LIMIT + 1.0)) + 1.0;
    let got = mean_in_flight(&cut, BIO_SECTORS);
    assert!(
        (got - want).abs() / want < 0.05,
        "{got} in flight, want {want}"
    );
    let drain = (LIMIT * SVC_NS) as u64;
    let q2g = max_q2g_ns(&cut);
    assert!(
        q2g.abs_diff(drain) < (SVC_NS as u64),
        "longest Q2G {q2g} ns"
    );
}

#[test]
fn before_5_18_a_queue_at_its_limit_waits_for_any_completion() {
    // No `bfqq_request_over_limit`: the limit stays full, one bio asleep for the next tag.
    let full = run(&format!("bfq:{SETTINGS},kernel=5.17"));
    let got = mean_in_flight(&full, BIO_SECTORS);
    let want = LIMIT + 1.0;
    assert!(
        (got - want).abs() / want < 0.03,
        "{got} in flight, want {want}"
    );
    let q2g = max_q2g_ns(&full);
    assert!(q2g <= (2.0 * SVC_NS) as u64, "longest Q2G {q2g} ns");
}
