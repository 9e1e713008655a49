//! `dump`'s tests: whole dumps of a synthetic recording, text against blkparse's own output
//! and golden lines, JSON lines field by field, unclean and empty recordings, output errors.

use super::*;
use std::path::Path;

use iosched_core::{
    event::{Comm, Event, Op, ReqFlags},
    record::{
        RecordingReader, RecordingWriter,
        test_support::{event_at, process, sample_header, sample_stats},
    },
    source::RecordingSource,
};

const T0: u64 = 5_000_000_000;

fn ev(ts: u64, kind: EventKind, cpu: u16, pid: u32, comm: &str) -> Event {
    Event {
        kind,
        cpu,
        pid,
        tgid: pid,
        comm: Comm::new(comm),
        bytes: 0,
        op: Op::Read,
        aux: 0,
        ..event_at(T0 + ts, 0)
    }
}

fn io(mut e: Event, sector: u64, sectors: u32, op: Op, flags: u32) -> Event {
    e.sector = sector;
    e.bytes = sectors << 9;
    e.op = op;
    e.flags = ReqFlags(flags);
    e
}

/// The synthetic trace of docs' blkparse sample (tools-and-blktrace-format.md §5.6) up to
/// its first remap, then our own kinds and identities. Slightly out of arrival order.
fn sample() -> Vec<Event> {
    use EventKind::*;
    let ws = ReqFlags::SYNC;
    let w = Op::Write;
    let r = Op::Read;
    let (rq, bio) = (0xffff_8881_0000_1000u64, 0xffff_8882_0000_2000u64);
    let with_id = |mut e: Event, rq_: u64, bio_: u64| {
        e.rq = rq_;
        e.bio = bio_;
        e
    };
    let mut unplug = ev(1300, Unplug, 0, 4242, "dd");
    unplug.error = 1;
    unplug.aux = 1;
    let mut complete = io(ev(251_400, Complete, 0, 0, "swapper/0"), 2048, 16, w, ws);
    complete.aux = 8192;
    let mut split = io(ev(252_500, Split, 0, 4242, "dd"), 100_000, 256, r, 0);
    split.aux = 100_128;
    let mut timer_unplug = ev(260_000, Unplug, 1, 4242, "dd");
    timer_unplug.aux = 4;
    let mut in_rq = with_id(
        io(ev(252_750, BioInRq, 1, 4242, "dd"), 100_000, 128, r, 0),
        rq,
        bio,
    );
    in_rq.aux = 0;
    let mut failed = with_id(
        io(ev(353_000, Complete, 1, 0, "swapper/1"), 100_000, 128, r, 0),
        rq,
        0,
    );
    failed.error = -5;
    failed.aux = 65536;
    let mut flush_done = io(ev(420_000, Complete, 2, 0, ""), 0, 0, Op::Flush, 0);
    flush_done.aux = 0;
    let mut kt = ev(400_000, KyberThrottled, 2, 0, "kworker/2:1");
    kt.aux = 1;
    let mut ka = ev(400_100, KyberAdjust, 2, 0, "kworker/2:1");
    ka.aux = 64 << 32; // domain 0 (read), depth 64
    let mut ws_ = ev(400_200, WbtStep, 2, 0, "kworker/2:1");
    ws_.aux = u64::from(-1i32 as u32) | (31 << 32);
    ws_.sector = 100_000_000;
    let mut wt = ev(400_300, WbtTimer, 2, 0, "kworker/2:1");
    wt.aux = (2 << 32) | 3;
    wt.error = 4;
    vec![
        io(ev(0, Queue, 0, 4242, "dd"), 2048, 8, w, ws),
        io(ev(500, GetRq, 0, 4242, "dd"), 2048, 8, w, ws),
        ev(700, Plug, 0, 4242, "dd"),
        io(ev(1100, Queue, 0, 4242, "dd"), 2056, 8, w, ws), // arrives before I
        io(ev(800, Insert, 0, 4242, "dd"), 2048, 8, w, ws),
        io(ev(1200, BackMerge, 0, 4242, "dd"), 2056, 8, w, ws),
        unplug,
        io(ev(1400, Issue, 0, 4242, "dd"), 2048, 16, w, ws),
        complete,
        io(ev(252_400, Queue, 0, 4242, "dd"), 100_000, 256, r, 0),
        split,
        with_id(
            io(ev(252_700, GetRq, 0, 4242, "dd"), 100_000, 128, r, 0),
            rq,
            bio,
        ),
        in_rq,
        with_id(
            io(ev(252_900, Issue, 1, 4242, "dd"), 100_000, 128, r, 0),
            rq,
            0,
        ),
        with_id(
            io(ev(252_950, IoStart, 1, 4242, "dd"), 100_000, 128, r, 0),
            rq,
            0,
        ),
        timer_unplug,
        with_id(
            io(ev(302_900, Requeue, 1, 0, "swapper/1"), 100_000, 128, r, 0),
            rq,
            0,
        ),
        failed,
        with_id(
            io(ev(353_100, IoDone, 1, 0, "swapper/1"), 100_000, 128, r, 0),
            rq,
            0,
        ),
        io(
            ev(410_000, Issue, 2, 77, "kworker/2:1"),
            0,
            0,
            Op::Flush,
            ReqFlags::PREFLUSH,
        ),
        flush_done,
        io(ev(430_000, Issue, 3, 900, "sg_io"), 0, 1, Op::DrvIn, 0),
        kt,
        ka,
        ws_,
        wt,
    ]
}

fn recording(events: &[Event], footer: bool) -> Vec<u8> {
    let mut w = RecordingWriter::new(Vec::new(), &sample_header())
        .unwrap()
        .with_chunk_events(5);
    w.add_process(&process(4242, "dd")).unwrap();
    for e in events {
        w.push(e).unwrap();
    }
    if footer {
        let f = w.footer(sample_stats(events.len() as u64), 1_000_000, "signal");
        w.finish(&f).unwrap()
    } else {
        w.write_stats(&sample_stats(3)).unwrap();
        w.flush().unwrap();
        w.get_ref().clone()
    }
}

fn quiet() -> DumpOptions {
    DumpOptions {
        warnings_to_stderr: false,
    }
}

fn source(bytes: &[u8]) -> RecordingSource<&[u8]> {
    RecordingSource::new(Path::new("test"), RecordingReader::new(bytes).unwrap())
}

fn text(bytes: &[u8]) -> (String, DumpSummary) {
    let mut out = Vec::new();
    let summary = write_text_with(&mut out, &mut source(bytes), &quiet()).unwrap();
    (String::from_utf8(out).unwrap(), summary)
}

/// Verbatim from blkparse 1.2.0 on the same synthetic trace (lines 1-11).
const BLKPARSE: &str = r#"
  8,0    0        1     0.000000000  4242  Q  WS 2048 + 8 [dd]
  8,0    0        2     0.000000500  4242  G  WS 2048 + 8 [dd]
  8,0    0        3     0.000000700  4242  P   N [dd]
  8,0    0        4     0.000000800  4242  I  WS 2048 + 8 [dd]
  8,0    0        5     0.000001100  4242  Q  WS 2056 + 8 [dd]
  8,0    0        6     0.000001200  4242  M  WS 2056 + 8 [dd]
  8,0    0        7     0.000001300  4242  U   N [dd] 1
  8,0    0        8     0.000001400  4242  D  WS 2048 + 16 [dd]
  8,0    0        9     0.000251400     0  C  WS 2048 + 16 [0]
  8,0    0       10     0.000252400  4242  Q   R 100000 + 256 [dd]
  8,0    0       11     0.000252500  4242  X   R 100000 / 100128 [dd]
"#;

const PROLOGUE: &str = r#"
# iosched-trace recording, format 1.6, written by iosched-trace 0.1.0
# host testhost, kernel 6.18.0-test, boot 00000000-1111-2222-3333-444444444444
# started 2025-11-30 12:00:00.000000000 UTC (monotonic 1.000000000)
# command: iosched-trace record -d sda
# device sda 8:0 scheduler bfq, rotational, 512-byte blocks, nr_requests 64, model "QEMU HARDDISK"
#   iosched: low_latency=1 slice_idle=8
# device zram0 252:0 scheduler none, bio-based (no request events)
# time 0 = first event, monotonic 5.000000000 = 2025-11-30 12:00:04.000000000 UTC
"#;

const OURS: &str = r#"
  8,0    0       12     0.000252700  4242  G   R 100000 + 128 [dd] rq=0xffff888100001000 bio=0xffff888200002000
  8,0    1        1     0.000252750  4242  b   R 100000 + 128 [dd] #0 rq=0xffff888100001000 bio=0xffff888200002000
  8,0    1        2     0.000252900  4242  D   R 100000 + 128 [dd] rq=0xffff888100001000
  8,0    1        3     0.000252950  4242  s   R 100000 + 128 [dd] rq=0xffff888100001000
  8,0    1        4     0.000260000  4242 UT   N [dd] 4
  8,0    1        5     0.000302900     0  R   R 100000 + 128 [0] rq=0xffff888100001000
  8,0    1        6     0.000353000     0  C   R 100000 + 128 [-5] rq=0xffff888100001000
  8,0    1        7     0.000353100     0  d   R 100000 + 128 [swapper/1] rq=0xffff888100001000
  8,0    2        1     0.000400000     0 kt   N [kworker/2:1] domain=write
  8,0    2        2     0.000400100     0 ka   N [kworker/2:1] domain=read depth=64
  8,0    2        3     0.000400200     0 ws   N [kworker/2:1] step=-1 window=100000us background=8 normal=16 max=31
  8,0    2        4     0.000400300     0 wt   N [kworker/2:1] status=4 inflight=3 step=2
  8,0    2        5     0.000410000    77  D  FN [kworker/2:1]
  8,0    2        6     0.000420000     0  C  FN 0 [0]
  8,0    3        1     0.000430000   900  D   R 512 [sg_io]
"#;

const SUMMARY: &str = r#"
# summary: 26 events over 0.000430000 s
#   queue                     3
#   getrq                     2
#   backmerge                 1
#   insert                    1
#   issue                     4
#   complete                  3
#   requeue                   1
#   plug                      1
#   unplug                    2
#   split                     1
#   io_start                  1
#   io_done                   1
#   bio_in_rq                 1
#   kyber_throttled           1
#   kyber_adjust              1
#   wbt_step                  1
#   wbt_timer                 1
# lost events: 9 (4 with the ring buffer full: cpu1 3, cpu3 1; 5 the kernel did not run our programs for (already running on that CPU)): the trace is incomplete
# kernel read errors: 2
# sda: plugs counted in the kernel: 7 plugs, 5 explicit + 2 timer unplugs, 11 requests unplugged
# plugs not counted: 1 (the kernel's table of devices was full)
# device change: sda: scheduler bfq -> mq-deadline at 0.250 s
# sda: completed requests by the kernel's count 5 (r 5 w 0 d 0), traced 4: 1 without a completion event
# recording closed cleanly (ended by signal)
# warning: sda: 1 completed request counted by the kernel has no completion event (kernel: 5 reads, 0 writes, 0 discards; traced: 4, 0, 0, and up to 1 more may hide behind requests in flight at the counter reads); no block_rq_complete event for it reached the recorder (which lost none it was given)
"#;

#[test]
fn text_matches_blkparse_and_golden_lines() {
    let (out, summary) = text(&recording(&sample(), true));
    let expected: String = [PROLOGUE, BLKPARSE, OURS, SUMMARY]
        .iter()
        .map(|s| &s[1..])
        .collect();
    assert_eq!(out, expected);
    assert_eq!(summary.events, 26);
    assert_eq!(summary.lost, Some(9));
    assert!(summary.closed_cleanly);
    // The only warning: the sample's completion check (5 counted, 4 traced).
    assert_eq!(summary.untraced_completions, Some(1));
    assert_eq!(summary.warnings.len(), 1, "{:?}", summary.warnings);
    assert_eq!(summary.out_of_order, 0);
}

#[test]
fn unclean_recordings_say_so() {
    let bytes = recording(&sample(), false);
    // Cut inside the last chunk too.
    let (out, summary) = text(&bytes[..bytes.len() - 3]);
    assert!(!summary.closed_cleanly);
    assert!(
        out.contains("# recording was not closed cleanly\n"),
        "{out}"
    );
    assert!(out.contains("# warning: truncated: "), "{out}");
    assert!(
        out.contains("# warning: recording was not closed cleanly: no footer"),
        "{out}"
    );
    // The STATS chunk was cut off: loss is unknown, and said so.
    assert_eq!(summary.lost, None);
    assert!(out.contains("# lost events: unknown"), "{out}");
    // Every event chunk was complete.
    assert_eq!(summary.events, 26);

    let (out, summary) = text(&bytes);
    assert_eq!(summary.lost, Some(9));
    assert!(
        out.contains("# lost events: 9 (4 with the ring buffer full: cpu1 3, cpu3 1; 5 "),
        "{out}"
    );
}

#[test]
fn json_lines() {
    let bytes = recording(&sample(), true);
    let mut out = Vec::new();
    let summary = write_json_with(&mut out, &mut source(&bytes), &quiet()).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1 + 26 + 1);
    assert_eq!(lines[0]["header"]["host"], "testhost");
    assert_eq!(lines[0]["header"]["devices"][0]["scheduler"], "bfq");
    let g = &lines[12];
    assert_eq!(g["kind"], "getrq");
    assert_eq!(g["action"], "G");
    assert_eq!(g["dev"], "8:0");
    assert_eq!(g["rwbs"], "R");
    assert_eq!(g["comm"], "dd");
    assert_eq!(g["rq"], "0xffff888100001000");
    assert_eq!(g["bio"], "0xffff888200002000");
    assert_eq!(g["ts_ns"], T0 + 252_700);
    assert_eq!(g["t_ns"], 252_700);
    assert_eq!(g["seq"], 12);
    assert_eq!(lines[1]["rq"], serde_json::Value::Null);
    assert_eq!(lines[7]["action"], "U");
    let last = &lines[27]["summary"];
    assert_eq!(last["events"], 26);
    assert_eq!(last["lost"], 9);
    assert_eq!(last["lost_per_cpu"], serde_json::json!([0, 3, 0, 1]));
    assert_eq!(last["kernel_skipped"], 5);
    assert_eq!(last["events_per_kind"]["issue"], 4);
    assert_eq!(summary.events, 26);
}

#[test]
fn wakeups_name_their_wakee_in_text_and_json() {
    let q = io(
        ev(0, EventKind::Queue, 0, 4242, "dd"),
        2048,
        8,
        Op::Write,
        0,
    );
    let mut wk = ev(900, EventKind::Wakeup, 1, 310, "jbd2/loop0-8");
    wk.aux = 4242 | (4240u64 << 32);
    let bytes = recording(&[q, wk], true);
    let (out, summary) = text(&bytes);
    assert!(
        out.contains(
            "  8,0    1        1     0.000000900   310 wk   N [jbd2/loop0-8] wakee=4242 tgid=4240\n"
        ),
        "{out}"
    );
    assert_eq!(summary.events_per_kind["wakeup"], 1);

    let mut json = Vec::new();
    write_json_with(&mut json, &mut source(&bytes), &quiet()).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(json)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let wk = &lines[2];
    assert_eq!(wk["kind"], "wakeup");
    assert_eq!(wk["action"], "wk");
    assert_eq!(wk["pid"], 310);
    assert_eq!(wk["wakee_pid"], 4242);
    assert_eq!(wk["wakee_tgid"], 4240);
    // Other kinds carry no wakee.
    assert!(lines[1].get("wakee_pid").is_none(), "{}", lines[1]);
}

#[test]
fn empty_recording() {
    let (out, summary) = text(&recording(&[], true));
    assert!(out.contains("# no events\n"));
    assert!(out.contains("# summary: 0 events\n"));
    assert_eq!(summary.events, 0);
}

#[test]
fn output_errors_are_reported_as_such() {
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let bytes = recording(&sample(), true);
    let err = write_text_with(&mut Full, &mut source(&bytes), &quiet()).unwrap_err();
    assert!(err.is_broken_pipe(), "{err}");
}

/// Format 1.5: the prologue names the CPUs online and the host profile, the summary the CPU
/// samples and the use between the first and the last; the JSON summary carries both.
#[test]
fn cpu_context_in_prologue_and_summary() {
    use iosched_core::record::{CpuSample, HostProfile};
    let mut header = sample_header();
    header.online_cpus = Some(2);
    let mut profile = HostProfile::defaults();
    profile.source = "calibrate on testhost, 2026-12-01T23:59:00Z".into();
    header.host_profile = Some(profile);
    let mut w = RecordingWriter::new(Vec::new(), &header).unwrap();
    let sample = |i: u64| CpuSample {
        ts_ns: T0 + i * 2_000_000_000,
        busy_ns: 100 + i * 1_000_000_000,
        idle_ns: 100 + i * 3_000_000_000,
        recorder_ns: i * 40_000_000,
        online_cpus: 2,
    };
    w.write_cpu(&sample(0)).unwrap();
    w.push(&event_at(T0 + 1, 1)).unwrap();
    w.write_cpu(&sample(1)).unwrap();
    let f = w.footer(sample_stats(1), 1_000_000, "signal");
    let bytes = w.finish(&f).unwrap();
    let (out, summary) = text(&bytes);
    assert!(out.contains("# cpus online: 2\n"), "{out}");
    assert!(
        out.contains(
            "# host profile: calibrate on testhost, 2026-12-01T23:59:00Z (CPU per request over \
             none: bfq +1900 ns, kyber +700 ns, mq-deadline +700 ns, none +0 ns)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "# cpu samples: 2 over 2.000000000 s: machine 25.0% busy, recorder 1.0% (2 CPUs)\n"
        ),
        "{out}"
    );
    assert_eq!(summary.cpu_samples, 2);
    assert_eq!(summary.cpu_use.unwrap().busy_ns, 1_000_000_000);
}
