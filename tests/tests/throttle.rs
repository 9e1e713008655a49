//! Real kernel: `explain` names wbt and Kyber throttling that really happened, with counts an
//! independent record agrees with: the kernel's own trace events (block, wbt, kyber) read
//! through a tracefs instance of the test's own (its own ring buffer and switches: the
//! global tracer other tools use is not touched), not through our eBPF programs.
//! Root only, serially (`cargo xtask test`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::Context;
use iosched_core::event::EventKind;
use iosched_trace_tests::{
    ScratchLoop, binary, fio, read_recording, real_kernel_available, record, run, scratch_dir,
};
use serde_json::Value;

/// A tracefs instance (`/sys/kernel/tracing/instances/NAME`), removed on drop (which
/// disables its events and frees its buffer).
struct TraceInstance {
    dir: PathBuf,
}

impl TraceInstance {
    fn new(tag: &str) -> anyhow::Result<Self> {
        let tracing = Path::new("/sys/kernel/tracing");
        if !tracing.join("instances").is_dir() {
            run(Command::new("mount")
                .args(["-t", "tracefs", "tracefs"])
                .arg(tracing))?;
        }
        let dir = tracing
            .join("instances")
            .join(format!("iosched-trace-test-{tag}-{}", std::process::id()));
        fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let instance = Self { dir };
        // 64 MiB per CPU: the runs below write a few hundred thousand events at most.
        instance.write("buffer_size_kb", "65536")?;
        // CLOCK_MONOTONIC, the clock of our events' timestamps.
        instance.write("trace_clock", "mono")?;
        Ok(instance)
    }

    fn write(&self, rel: &str, value: &str) -> anyhow::Result<()> {
        let path = self.dir.join(rel);
        fs::write(&path, value).with_context(|| format!("writing {value:?} to {}", path.display()))
    }

    /// Enables `group/event`, with a filter.
    fn enable(&self, event: &str, filter: &str) -> anyhow::Result<()> {
        self.write(&format!("events/{event}/filter"), filter)?;
        self.write(&format!("events/{event}/enable"), "1")
    }

    /// The events, as (timestamp ns, event name, payload).
    fn events(&self) -> anyhow::Result<Vec<(u64, String, String)>> {
        let text = fs::read_to_string(self.dir.join("trace"))?;
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            // `dd-123 [001] ..... 30257.223287: block_getrq: 7,1 WS 253952 + 8 [dd]`
            let Some((head, rest)) = line.split_once(": ") else {
                continue;
            };
            let Some((name, payload)) = rest.split_once(": ") else {
                continue;
            };
            let ts = head.split_whitespace().last().unwrap_or("");
            let Some((s, us)) = ts.split_once('.') else {
                continue;
            };
            let ns = s.parse::<u64>()? * 1_000_000_000 + us.parse::<u64>()? * 1000;
            out.push((ns, name.to_string(), payload.to_string()));
        }
        Ok(out)
    }

    /// Events the instance's ring buffer overwrote.
    fn overruns(&self) -> anyhow::Result<u64> {
        let mut n = 0;
        for cpu in fs::read_dir(self.dir.join("per_cpu"))? {
            let stats = fs::read_to_string(cpu?.path().join("stats"))?;
            for l in stats.lines() {
                if let Some(v) = l.strip_prefix("overrun: ") {
                    n += v.trim().parse::<u64>()?;
                }
            }
        }
        Ok(n)
    }
}

impl Drop for TraceInstance {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("events/enable"), "0");
        let _ = fs::remove_dir(&self.dir);
    }
}

fn explain_json(file: &Path) -> Value {
    let out = run(Command::new(binary()).args(["explain", "--json"]).arg(file)).unwrap();
    serde_json::from_str(&out).unwrap()
}

/// The finding whose cause starts with `cause` (`wbt_throttling`, or `wbt_throttling_pays`
/// when the model says the throttle pays for itself).
fn finding<'a>(e: &'a Value, cause: &str) -> Option<&'a Value> {
    e["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["cause"].as_str().is_some_and(|c| c.starts_with(cause)))
}

/// The kernel's `dev_t` of a (major, minor).
fn kernel_dev((major, minor): (u32, u32)) -> u32 {
    (major << 20) | minor
}

/// Q->G waits of writes in the kernel's own block events: a write bio whose request came
/// more than 20 µs after its Q, with a completion of the device in between (what wakes a
/// sleeper in `rq_qos_wait`). Write bios are paired by start sector (dd writes each once;
/// the reader's bios, on the same sectors, are left out).
fn write_waits_in(events: &[(u64, String, String)]) -> u64 {
    let mut queued = std::collections::HashMap::new();
    let mut completions = Vec::new();
    let mut waits = Vec::new();
    for (ts, name, payload) in events {
        let f: Vec<&str> = payload.split_whitespace().collect();
        match name.as_str() {
            "block_bio_queue" if f.get(1).is_some_and(|r| r.contains('W')) => {
                queued.insert(f[2].to_string(), *ts);
            }
            "block_getrq" if f.get(1).is_some_and(|r| r.contains('W')) => {
                if let Some(q) = queued.remove(f[2]) {
                    waits.push((q, *ts));
                }
            }
            "block_rq_complete" => completions.push(*ts),
            _ => {}
        }
    }
    completions.sort_unstable();
    waits
        .iter()
        .filter(|(q, g)| {
            g - q > 20_000
                && completions.partition_point(|c| c <= q) < completions.partition_point(|c| c <= g)
        })
        .count() as u64
}

/// Runs of the flood before the test gives up on the kernel throttling it.
const FLOOD_ATTEMPTS: usize = 3;

/// One buffered write flood under a direct reader, recorded by us and by the kernel's own
/// events; `oracle`: the writes the kernel's events show waiting in wbt.
struct Flood {
    _out: iosched_trace_tests::TempDir,
    file: PathBuf,
    kernel: Vec<(u64, String, String)>,
    recording: iosched_trace_tests::Recording,
    timers: usize,
    oracle: u64,
    writer_pid: u32,
}

fn throttled_flood() -> Flood {
    let disk = ScratchLoop::new("wbt", 768, "mq-deadline").unwrap();
    // A 1 µs read-latency target: wbt on (it is by default under mq-deadline), and every
    // read misses the target, so wbt scales its depth down to a write or two while the
    // reader runs. Put back when the device is dropped.
    disk.set_queue("wbt_lat_usec", "1").unwrap();
    let dev = disk.dev_numbers().unwrap();
    let trace = TraceInstance::new("wbt").unwrap();
    let by_dev = format!("dev == {}", kernel_dev(dev));
    for ev in ["block_bio_queue", "block_getrq", "block_rq_complete"] {
        trace.enable(&format!("block/{ev}"), &by_dev).unwrap();
    }
    // The wbt events name their device by its backing_dev_info, "MAJ:MIN".
    let by_name = format!("name == \"{}:{}\"", dev.0, dev.1);
    for ev in ["wbt_step", "wbt_timer"] {
        trace.enable(&format!("wbt/{ev}"), &by_name).unwrap();
    }
    let out = scratch_dir("wbt-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    // A direct reader for as long as a buffered flood lasts, which ends with fsync: 512
    // MiB, more than the dirty limits hold, so writeback runs during the flood and at its
    // fsync.
    let mut reader = Command::new("dd")
        .arg(format!("if={}", disk.dev().display()))
        .args(["of=/dev/null", "bs=4k", "iflag=direct", "status=none"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let mut writer = Command::new("dd")
        .args([
            "if=/dev/zero",
            "bs=1M",
            "count=512",
            "conv=fsync",
            "status=none",
        ])
        .arg(format!("of={}", disk.dev().display()))
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let writer_pid = writer.id();
    assert!(writer.wait().unwrap().success());
    // The reader reads through the writeback (wbt scales down on its latencies); it is our
    // child, stopped by its pid once the writer is done.
    let _ = reader.kill();
    let _ = reader.wait();
    recorder.stop().unwrap();
    fs::write(trace.dir.join("tracing_on"), "0").unwrap();
    assert_eq!(trace.overruns().unwrap(), 0, "the oracle lost events");
    let kernel = trace.events().unwrap();
    let recording = read_recording(&file).unwrap();
    assert_eq!(recording.lost, 0);

    let timers = kernel.iter().filter(|e| e.1 == "wbt_timer").count();
    assert!(timers > 0, "wbt never ran on {}", disk.name());
    // wbt's own events, through our programs and through tracefs: the same ones. The
    // instance was on before the recorder attached and after it detached, and wbt's timer
    // keeps firing (every 50-100 ms) while its step is not 0: the kernel's events are
    // counted over the span of ours.
    for (ours, theirs) in [
        (EventKind::WbtTimer, "wbt_timer"),
        (EventKind::WbtStep, "wbt_step"),
    ] {
        let times: Vec<u64> = recording
            .events
            .iter()
            .filter(|e| e.kind == ours)
            .map(|e| e.ts_ns)
            .collect();
        let (Some(first), Some(last)) = (times.iter().min(), times.iter().max()) else {
            assert!(ours == EventKind::WbtStep, "no {theirs} recorded");
            continue;
        };
        let span = first - 1_000_000..=last + 1_000_000;
        let in_span = kernel
            .iter()
            .filter(|e| e.1 == theirs && span.contains(&e.0))
            .count();
        // Every one of ours is one of theirs. The other way, one may be missing: on this
        // kernel an event from interrupt context now and then never reaches the BPF program
        // although the tracepoint fired (the same as the ~4 in 100,000 completions that
        // `record` reports as untraced), and the kernel counts no recursion miss for it.
        assert!(
            times.len() <= in_span,
            "{theirs}: {} of ours, {in_span} of the kernel's",
            times.len()
        );
        assert!(
            in_span - times.len() <= 1.max(in_span / 20),
            "{theirs}: {} of ours, {in_span} of the kernel's",
            times.len()
        );
    }
    let oracle = write_waits_in(&kernel);
    Flood {
        _out: out,
        file,
        kernel,
        recording,
        timers,
        oracle,
        writer_pid,
    }
}

#[test]
fn explain_names_wbt_throttling_of_a_buffered_write_flood() {
    if !real_kernel_available("explain_names_wbt_throttling_of_a_buffered_write_flood") {
        return;
    }
    // The premise, that the kernel throttled the flood, is the kernel's doing, not ours: it
    // did in every run measured alone (444-972 waits in the 6 whose count was printed), but
    // a clean-clone CI run once saw 4, for a reason not found (our count agreed: 4). A flood
    // it did not throttle is run again, on a fresh device, up to [`FLOOD_ATTEMPTS`] times in
    // all; what is asserted below is checked on the one it throttled.
    let mut attempts = Vec::new();
    let flood = loop {
        let flood = throttled_flood();
        if flood.oracle >= 5 {
            break flood;
        }
        attempts.push(flood.oracle);
        assert!(
            attempts.len() < FLOOD_ATTEMPTS,
            "the kernel did not throttle the flood in {FLOOD_ATTEMPTS} runs: {attempts:?} waits"
        );
        eprintln!(
            "note: the kernel throttled the flood only {} times; running it again",
            flood.oracle
        );
    };
    let Flood {
        _out: _keep,
        file,
        kernel,
        recording,
        timers,
        oracle,
        writer_pid,
    } = flood;
    let e = explain_json(&file);
    let wbt = &e["throttling"]["wbt"];
    let ours = wbt["waits"]["count"].as_u64().unwrap();
    eprintln!(
        "wbt: {ours} waits in the recording, {oracle} in the kernel's events; {timers} \
         wbt_timer events; tag-bound {}; limit seen {}",
        wbt["tag_bound"], wbt["limit_seen"]
    );
    // The two records time the same waits with different clocks: borderline ones (near
    // 20 µs) may fall on either side.
    assert!(
        ours.abs_diff(oracle) <= 3.max(oracle / 10),
        "{ours} waits found, the kernel's events show {oracle}"
    );
    // The writer (dd, or the flusher writing its pages back) is among those that waited.
    let waited: Vec<u64> = wbt["waits"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    assert!(!waited.is_empty());
    // wbt lets at most its max depth of writes through: 16 (RWB_DEF_DEPTH) unless a
    // wbt_step changed it.
    let max_depth = kernel
        .iter()
        .filter(|e| e.1 == "wbt_step")
        .filter_map(|e| e.2.split("max=").nth(1)?.trim().parse::<u64>().ok())
        .chain([16])
        .max()
        .unwrap();
    assert_eq!(
        e["throttling"]["wbt_steps"].as_array().unwrap().len(),
        recording
            .events
            .iter()
            .filter(|e| e.kind == EventKind::WbtStep)
            .count()
    );
    let limit = wbt["limit_seen"].as_u64().unwrap();
    assert!(
        (1..=max_depth).contains(&limit),
        "limit {limit}, max depth {max_depth}"
    );
    let f = finding(&e, "wbt_throttling").unwrap_or_else(|| panic!("{e:#}"));
    let title = f["title"].as_str().unwrap();
    assert!(
        title.contains(&format!("held {ours} buffered writes")),
        "{title}"
    );
    eprintln!("writer dd was pid {writer_pid}; {title}");
    for l in f["evidence"].as_array().unwrap() {
        eprintln!("  - {}", l.as_str().unwrap());
    }
    eprintln!("  => {}", f["estimate"]);
    assert!(f["estimate"]["change_pct"].as_f64().is_some());
}

#[test]
fn explain_names_kyber_throttling_of_reads() {
    if !real_kernel_available("explain_names_kyber_throttling_of_reads") {
        return;
    }
    let disk = ScratchLoop::new("kyber", 512, "kyber").unwrap();
    // Writes far over their 1 µs target, reads far under their 1 s one: Kyber cuts the read
    // domain's depth (down to 1), and reads queue for its tokens.
    disk.set_queue("iosched/read_lat_nsec", "1000000000")
        .unwrap();
    disk.set_queue("iosched/write_lat_nsec", "1000").unwrap();
    let dev = disk.dev_numbers().unwrap();
    let trace = TraceInstance::new("kyber").unwrap();
    let by_dev = format!("dev == {}", kernel_dev(dev));
    for ev in ["kyber_throttled", "kyber_adjust"] {
        trace.enable(&format!("kyber/{ev}"), &by_dev).unwrap();
    }
    let out = scratch_dir("kyber-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    let target = format!("--filename={}", disk.dev().display());
    fio(
        out.path(),
        &[
            &target,
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=32",
            "--bs=4k",
            "--runtime=2",
            "--time_based",
            "--name=reader",
            "--rw=randread",
            "--size=256m",
            "--name=writer",
            "--rw=randwrite",
            "--offset=256m",
            "--size=256m",
        ],
    )
    .unwrap();
    recorder.stop().unwrap();
    fs::write(trace.dir.join("tracing_on"), "0").unwrap();
    assert_eq!(trace.overruns().unwrap(), 0, "the oracle lost events");
    let kernel = trace.events().unwrap();
    assert_eq!(read_recording(&file).unwrap().lost, 0);
    let kernel_read_throttles = kernel
        .iter()
        .filter(|e| e.1 == "kyber_throttled" && e.2.trim_end().ends_with("READ"))
        .count() as u64;
    let e = explain_json(&file);
    let domains = e["throttling"]["kyber"].as_array().unwrap();
    let read = domains
        .iter()
        .find(|d| d["name"] == "read")
        .unwrap_or_else(|| panic!("no read domain throttled: {domains:#?}"));
    let ours = read["throttled_events"].as_u64().unwrap();
    eprintln!(
        "kyber: {ours} read throttles in the recording, {kernel_read_throttles} in the kernel's \
         events; {} requests waited",
        read["waits"]["count"]
    );
    assert!(kernel_read_throttles > 0, "Kyber never throttled reads");
    // The same tracepoint, through two paths: every event in both.
    // (Equal in every run seen; an event the kernel never hands to the program, as above, is
    // tolerated at one in a thousand.)
    assert!(ours <= kernel_read_throttles);
    assert!(kernel_read_throttles - ours <= 1.max(kernel_read_throttles / 1000));
    assert!(read["waits"]["count"].as_u64().unwrap() > 0);
    assert!(read["depth_at_throttle"].as_u64().unwrap() < 32, "{read:#}");
    let f = finding(&e, "kyber_throttling").unwrap_or_else(|| panic!("{e:#}"));
    eprintln!("{}", f["title"].as_str().unwrap());
    for l in f["evidence"].as_array().unwrap() {
        eprintln!("  - {}", l.as_str().unwrap());
    }
    eprintln!("  => {}", f["estimate"]);
    // The what-if's size follows the parallelism fitted to a loop device over tmpfs, which
    // varies with the machine's load (-2% to +94% seen on one VM): not asserted here. The
    // unit tests (model/throttle_tests.rs) check the estimate on devices with known answers.
    assert!(f["estimate"]["change_pct"].as_f64().is_some(), "{f:#}");
    assert!(
        f["estimate"]["what_if"]
            .as_str()
            .is_some_and(|w| w.contains("initial depths")),
        "{f:#}"
    );
}
