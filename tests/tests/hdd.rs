//! The emulated rotational disk checked against its own model, on the real kernel: fio on the
//! loop device must see the throughput the model's parameters predict, the daemon must not
//! be the bottleneck, and a disk torn down (also by a panic) must leave nothing behind.
//! Root only, serially (`cargo xtask test`).

use std::{panic, path::Path, process::Command};

use iosched_trace_tests::{
    hdd::{self, DiskParams, Hdd, State},
    real_kernel_available,
};

const GIB: u64 = 1 << 30;
/// Allowed distance between a measurement and the model's prediction.
const TOLERANCE: f64 = 0.15;

/// What fio measured in one job.
struct Fio {
    bytes_per_sec: f64,
    iops: f64,
    mean_latency_us: f64,
}

/// One fio read job on `dev`: direct I/O, libaio, `runtime` seconds.
fn fio(dev: &Path, rw: &str, bs: &str, iodepth: u32, runtime: u32) -> Fio {
    let out = Command::new("fio")
        .args([
            "--name=hdd",
            "--output-format=json",
            "--direct=1",
            "--ioengine=libaio",
            "--time_based",
            "--randrepeat=0",
        ])
        .arg(format!("--filename={}", dev.display()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--iodepth={iodepth}"))
        .arg(format!("--runtime={runtime}"))
        .output()
        .expect("fio is installed (`cargo xtask setup` installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // fio may print notices before its JSON.
    let json: serde_json::Value =
        serde_json::from_str(&text[text.find('{').expect("fio printed JSON")..])
            .expect("fio's JSON parses");
    let read = &json["jobs"][0]["read"];
    let number = |v: &serde_json::Value| v.as_f64().expect("fio reports the figure");
    Fio {
        bytes_per_sec: number(&read["bw_bytes"]),
        iops: number(&read["iops"]),
        mean_latency_us: number(&read["clat_ns"]["mean"]) / 1e3,
    }
}

fn assert_close(what: &str, measured: f64, predicted: f64) {
    let error = (measured - predicted) / predicted;
    eprintln!(
        "{what}: measured {measured:.1}, model {predicted:.1} ({:+.1}%)",
        error * 100.0
    );
    assert!(
        error.abs() <= TOLERANCE,
        "{what}: measured {measured:.1} is {:+.1}% from the model's {predicted:.1}",
        error * 100.0
    );
}

fn assert_clean(state: &State) {
    let left = hdd::leftovers(state);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

/// A few requests always queued (iodepth 4, scheduler none): the emulated disk is never idle,
/// so throughput is the model's service rate, whatever the host adds to each request's
/// round trip. Sequential 1 MiB reads and uniformly random 4 KiB reads over the whole disk,
/// with the default (7200 rpm) parameters and with slower ones, so a parameter that did not
/// reach the daemon would show.
#[test]
fn emulated_disk_matches_its_model() {
    if !real_kernel_available("emulated_disk_matches_its_model") {
        return;
    }
    let mut config = hdd::config("model", GIB);
    config.scheduler = Some("none".into());
    let disk = Hdd::up(&config).unwrap();
    assert_eq!(
        std::fs::read_to_string(disk.queue_path("rotational"))
            .unwrap()
            .trim(),
        "1"
    );
    let model = disk.model();
    let seq = fio(disk.device(), "read", "1M", 4, 4);
    assert_close(
        "7200 rpm: sequential 1 MiB reads, MB/s",
        seq.bytes_per_sec / 1e6,
        model.sequential_bytes_per_sec(1 << 20) / 1e6,
    );
    let random = fio(disk.device(), "randread", "4k", 4, 5);
    assert_close(
        "7200 rpm: random 4 KiB reads, IOPS",
        random.iops,
        model.random_iops(4096),
    );
    let state = disk.state().clone();
    drop(disk);
    assert_clean(&state);

    let mut config = hdd::config("model-slow", GIB);
    config.scheduler = Some("none".into());
    config.params = DiskParams {
        rpm: 5400.0,
        transfer_mb_s: 60.0,
        seek_max_ms: 14.0,
        ..DiskParams::default()
    };
    let disk = Hdd::up(&config).unwrap();
    let model = disk.model();
    let seq = fio(disk.device(), "read", "1M", 4, 3);
    assert_close(
        "5400 rpm: sequential 1 MiB reads, MB/s",
        seq.bytes_per_sec / 1e6,
        model.sequential_bytes_per_sec(1 << 20) / 1e6,
    );
    let random = fio(disk.device(), "randread", "4k", 4, 4);
    assert_close(
        "5400 rpm: random 4 KiB reads, IOPS",
        random.iops,
        model.random_iops(4096),
    );
    let state = disk.state().clone();
    disk.down().unwrap();
    assert_clean(&state);
}

/// With the model's delays off, the daemon and FUSE must stream far faster than the disk they
/// emulate, so that they never shape what the model says.
#[test]
fn daemon_is_not_the_bottleneck() {
    if !real_kernel_available("daemon_is_not_the_bottleneck") {
        return;
    }
    let mut config = hdd::config("nodelay", GIB);
    config.no_delay = true;
    config.scheduler = Some("none".into());
    let disk = Hdd::up(&config).unwrap();
    let model_rate = disk.model().sequential_bytes_per_sec(1 << 20);
    let seq = fio(disk.device(), "read", "1M", 4, 2);
    let floor = fio(disk.device(), "randread", "4k", 1, 2);
    eprintln!(
        "no delay: sequential 1 MiB reads {:.0} MB/s ({:.0}x the model's {:.0}); 4 KiB \
         random reads one at a time: {:.0} us each ({:.0} IOPS)",
        seq.bytes_per_sec / 1e6,
        seq.bytes_per_sec / model_rate,
        model_rate / 1e6,
        floor.mean_latency_us,
        floor.iops
    );
    assert!(
        seq.bytes_per_sec > 5.0 * model_rate,
        "the daemon alone streams only {:.0} MB/s",
        seq.bytes_per_sec / 1e6
    );
    // The latency floor must be small against a disk's milliseconds.
    assert!(
        floor.mean_latency_us < 1000.0,
        "{} us per request without any modelled delay",
        floor.mean_latency_us
    );
    let state = disk.state().clone();
    drop(disk);
    assert_clean(&state);
}

/// A test that panics with the disk up still tears it down: loop device detached, FUSE
/// unmounted, daemon gone, directory removed.
#[test]
fn guard_tears_down_after_a_panic() {
    if !real_kernel_available("guard_tears_down_after_a_panic") {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let result = panic::catch_unwind(move || {
        let disk = Hdd::up(&hdd::config("panic", 64 << 20)).unwrap();
        tx.send(disk.state().clone()).unwrap();
        assert!(hdd::leftovers(disk.state()).len() >= 3, "disk not up?");
        panic!("deliberate panic with the disk up");
    });
    assert!(result.is_err());
    let state = rx.recv().unwrap();
    assert_clean(&state);
}
