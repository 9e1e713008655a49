//! The emulated flash device on the real kernel: its channels serve requests in parallel,
//! no read completes sooner than its latency, and a write cache acknowledges writes early
//! while an fsync waits for them. Large effects, counts and thresholds: no tight timing.
//! Root only, serially (`cargo xtask test`).

use std::path::Path;

use iosched_trace_tests::{
    hdd::{self, DeviceKind, FlashParams, Hdd},
    real_kernel_available,
};

const SIZE: u64 = 256 << 20;

/// fio on `dev` for `runtime` seconds (else for what `extra` says): direct, libaio; the job's (read or write) IOPS,
/// minimum and mean latency from submission to completion (µs; fio's `lat`, not `clat`:
/// a request the loop device completes inside `io_submit` has most of its time in `slat`).
fn fio(dev: &Path, extra: &[&str], runtime: Option<u32>, dir: &Path) -> (f64, f64, f64) {
    let filename = format!("--filename={}", dev.display());
    let runtime = runtime.map(|s| format!("--runtime={s}"));
    let mut args = vec![
        "--name=flash",
        &filename,
        "--direct=1",
        "--ioengine=libaio",
        "--randrepeat=0",
        "--bs=4k",
        "--group_reporting",
    ];
    if let Some(runtime) = &runtime {
        args.extend(["--time_based", runtime]);
    }
    args.extend_from_slice(extra);
    let json = iosched_trace_tests::fio(dir, &args).expect("fio runs");
    let job = &json["jobs"][0];
    let side = if job["read"]["io_bytes"].as_u64().unwrap_or(0) > 0 {
        &job["read"]
    } else {
        &job["write"]
    };
    let n = |v: &serde_json::Value| v.as_f64().expect("fio reports it");
    (
        n(&side["iops"]),
        n(&side["lat_ns"]["min"]) / 1e3,
        n(&side["lat_ns"]["mean"]) / 1e3,
    )
}

fn flash(tag: &str, params: FlashParams) -> Hdd {
    let mut config = hdd::config(tag, SIZE);
    config.kind = DeviceKind::Flash;
    config.flash = params;
    config.scheduler = Some("none".into());
    Hdd::up(&config).expect("flash device comes up")
}

#[test]
fn flash_channels_serve_in_parallel_and_reads_take_their_latency() {
    if !real_kernel_available("flash_channels_serve_in_parallel_and_reads_take_their_latency") {
        return;
    }
    let params = FlashParams::default(); // 8 channels, 500 µs reads
    let service_us = params.read_latency_us + 4096.0 / params.read_mb_s;
    let disk = flash("par", params.clone());
    let scratch = iosched_trace_tests::scratch_dir("flash-par").unwrap();
    assert_eq!(
        std::fs::read_to_string(disk.queue_path("rotational"))
            .unwrap()
            .trim(),
        "0"
    );
    let (one, min_one, mean_one) = fio(
        disk.device(),
        &["--rw=randread", "--iodepth=1"],
        Some(2),
        scratch.path(),
    );
    let (eight, min_eight, mean_eight) = fio(
        disk.device(),
        &["--rw=randread", "--iodepth=8"],
        Some(2),
        scratch.path(),
    );
    eprintln!(
        "flash: 1 in flight {one:.0} IOPS (latency min {min_one:.0} mean {mean_one:.0} us), \
         8 in flight {eight:.0} IOPS (min {min_eight:.0} mean {mean_eight:.0} us); model \
         {:.0} and {:.0}",
        1e6 / service_us,
        8e6 / service_us
    );
    // No read sooner than its modelled service (the daemon never replies early).
    assert!(
        min_one >= params.read_latency_us && min_eight >= params.read_latency_us,
        "a read completed sooner than the read latency: {min_one} / {min_eight} us"
    );
    // One reader: at most one request per service time (plus the host's round trip).
    assert!(one <= 1.05e6 / service_us, "one reader {one} IOPS");
    // Eight in flight on eight channels: several times one.
    assert!(
        eight >= 4.0 * one,
        "8 in flight: {eight} IOPS, not 4x the {one} of one"
    );
    disk.down().unwrap();
}

#[test]
fn flash_write_cache_acknowledges_early_and_fsync_waits() {
    if !real_kernel_available("flash_write_cache_acknowledges_early_and_fsync_waits") {
        return;
    }
    let params = FlashParams {
        channels: 1,
        write_latency_us: 2000.0,
        write_cache: true,
        write_cache_kb: 1024,
        ..FlashParams::default()
    };
    let disk = flash("wc", params);
    let scratch = iosched_trace_tests::scratch_dir("flash-wc").unwrap();
    // Cached: 16 writes fit in the cache, each acknowledged long before its 2 ms program.
    let (iops, _, mean) = fio(
        disk.device(),
        &["--rw=randwrite", "--iodepth=1", "--io_size=64k"],
        None,
        scratch.path(),
    );
    assert!(mean < 1000.0, "cached write mean latency {mean:.0} us");
    // An fsync after every write waits for it (and first for the 16 above, 32 ms): at most
    // one write per 2 ms.
    let (synced, _, _) = fio(
        disk.device(),
        &[
            "--rw=randwrite",
            "--iodepth=1",
            "--fsync=1",
            "--io_size=256k",
        ],
        None,
        scratch.path(),
    );
    eprintln!("flash write cache: {iops:.0} IOPS cached, {synced:.0} with fsync=1");
    assert!(synced <= 550.0, "{synced} synced writes/s with 2 ms writes");
    disk.down().unwrap();
}
