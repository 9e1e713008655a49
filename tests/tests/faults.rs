//! Faults while recording, on the real kernel: what the recorder does when the world changes
//! under it. A scheduler switched: the recording says when, and `report` splits the device's
//! figures there. A traced loop device detached and then removed: noted, its events up to then
//! kept, the other device still recorded. The output filesystem full: a clear error naming the
//! file, and the file reads back up to its last complete chunk. Many devices and two
//! recorders at once: every event in each recording exactly once.

use std::{fs, os::fd::AsRawFd as _, process::Command, time::Duration};

use iosched_core::{
    event::{EventKind, Op},
    record::{DeviceChangeKind, RecordingReader},
};
use iosched_trace_tests::{
    ScratchLoop, binary, dd, first_scheduler, kernel_has_scheduler, read_recording,
    real_kernel_available, record, report_json, run, scratch_dir,
};

/// The device watch polls every 100 ms: a change is in the recording after two polls.
const AFTER_A_POLL: Duration = Duration::from_millis(400);

fn direct_writes(disk: &ScratchLoop, count: u32, seek: u32) {
    dd(&[
        "if=/dev/zero",
        &format!("of={}", disk.dev().display()),
        "bs=4096",
        &format!("count={count}"),
        &format!("seek={seek}"),
        "oflag=direct",
    ])
    .unwrap();
}

/// 100 direct writes under mq-deadline, the scheduler switched to bfq (kyber on a kernel
/// without bfq), 150 more: one change recorded (between the two batches), and the report's
/// spans hold exactly 100 and 150 writes, each under its scheduler.
#[test]
fn a_scheduler_switch_is_recorded_and_splits_the_report() {
    if !real_kernel_available("a_scheduler_switch_is_recorded_and_splits_the_report") {
        return;
    }
    // To bfq where the kernel has it, else to kyber.
    let to = first_scheduler(&["bfq", "kyber"]);
    let disk = ScratchLoop::new("switch", 64, "mq-deadline").unwrap();
    let out = scratch_dir("switch-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    direct_writes(&disk, 100, 0);
    std::thread::sleep(AFTER_A_POLL);
    disk.set_queue("scheduler", to).unwrap();
    std::thread::sleep(AFTER_A_POLL);
    direct_writes(&disk, 150, 1000);
    recorder.stop().unwrap();

    let mut reader = RecordingReader::open(&file).unwrap();
    let mut last_write_before = 0;
    let mut first_write_after = u64::MAX;
    while let Some(ev) = reader.next_event() {
        let ev = ev.unwrap();
        if ev.kind == EventKind::Complete && ev.op == Op::Write {
            if ev.sector < 1000 * 8 {
                last_write_before = last_write_before.max(ev.ts_ns);
            } else {
                first_write_after = first_write_after.min(ev.ts_ns);
            }
        }
    }
    let changes = &reader.stats().unwrap().device_changes;
    let [change] = changes.as_slice() else {
        panic!("one change expected: {changes:?}");
    };
    assert_eq!(change.device, disk.name());
    assert_eq!(
        change.what,
        DeviceChangeKind::Scheduler {
            from: "mq-deadline".into(),
            to: to.into()
        }
    );
    assert!(
        last_write_before < change.ts_ns && change.ts_ns < first_write_after,
        "the switch is noted between the batches"
    );

    let report = report_json(&file, &[]).unwrap();
    let spans = report["by_scheduler"].as_array().expect("spans");
    let got: Vec<(String, u64)> = spans
        .iter()
        .map(|s| {
            (
                s["scheduler"].as_str().unwrap().to_string(),
                s["report"]["write"]["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("mq-deadline".to_string(), 100), (to.to_string(), 150)]
    );
    // The whole device still has both.
    assert_eq!(report["devices"][0]["write"]["requests"], 250);
    let text = run(Command::new(binary()).arg("report").arg(&file)).unwrap();
    assert!(
        text.contains("device change: ")
            && text.contains(&format!("scheduler mq-deadline -> {to} at")),
        "{text}"
    );
    assert!(
        text.contains("by scheduler (switched while recording)"),
        "{text}"
    );
}

/// `LOOP_CTL_REMOVE` (linux/loop.h): removes a free loop device, as hot-unplug removes a disk.
const LOOP_CTL_REMOVE: libc::c_ulong = 0x4C81;

/// Two loop devices traced; 50 writes to each; the first detached (`losetup -d`) and then
/// removed (`LOOP_CTL_REMOVE`: gone from /sys/block) while recording; 60 more writes to the
/// second. The recorder notes both changes, keeps the first device's 50 writes, records the
/// second's 110, and ends cleanly.
#[test]
fn a_removed_device_is_noted_and_the_others_still_recorded() {
    if !real_kernel_available("a_removed_device_is_noted_and_the_others_still_recorded") {
        return;
    }
    let gone = ScratchLoop::new("removed", 64, "none").unwrap();
    let stays = ScratchLoop::new("stays", 64, "none").unwrap();
    let gone_name = gone.name().to_string();
    let minor = gone.dev_numbers().unwrap().1;
    let out = scratch_dir("removed-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[gone.name(), stays.name()], &file, &[]).unwrap();
    direct_writes(&gone, 50, 0);
    direct_writes(&stays, 50, 0);
    run(Command::new("losetup").arg("-d").arg(gone.dev())).unwrap();
    std::thread::sleep(AFTER_A_POLL);
    let control = fs::File::open("/dev/loop-control").unwrap();
    // SAFETY: ioctl on an open fd with an integer argument, as loop(4) documents.
    let rc = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_REMOVE, minor as libc::c_ulong) };
    assert_eq!(
        rc,
        0,
        "LOOP_CTL_REMOVE: {}",
        std::io::Error::last_os_error()
    );
    std::thread::sleep(AFTER_A_POLL);
    direct_writes(&stays, 60, 100);
    recorder.stop().unwrap();
    // The scratch guard finds its device gone and leaves it.
    drop(gone);

    let rec = read_recording(&file).unwrap();
    assert_eq!(rec.lost, 0);
    let writes_on = |name: &str| {
        let (major, minor) = if name == gone_name {
            (7, minor)
        } else {
            stays.dev_numbers().unwrap()
        };
        rec.events
            .iter()
            .filter(|e| {
                e.kind == EventKind::Complete
                    && e.op == Op::Write
                    && (e.dev.major, e.dev.minor) == (major, minor)
            })
            .count()
    };
    assert_eq!(writes_on(&gone_name), 50);
    assert_eq!(writes_on(stays.name()), 110);
    let reader = RecordingReader::open(&file).unwrap();
    let mut reader = reader;
    while reader.next_event().is_some() {}
    let changes: Vec<_> = reader
        .stats()
        .unwrap()
        .device_changes
        .iter()
        .map(|c| (c.device.clone(), c.what.clone()))
        .collect();
    assert_eq!(
        changes,
        [
            (gone_name.clone(), DeviceChangeKind::Detached),
            (gone_name, DeviceChangeKind::Removed)
        ]
    );
}

/// Recording into a 1 MiB tmpfs while 4000 direct writes (some 20k events, 2 MB) go on: the
/// recorder stops with an error naming the file and the full filesystem, exits non-zero, and
/// the file reads back every complete chunk it holds (events, no footer).
#[test]
fn a_full_output_filesystem_stops_the_recorder_with_a_clear_error() {
    if !real_kernel_available("a_full_output_filesystem_stops_the_recorder_with_a_clear_error") {
        return;
    }
    let disk = ScratchLoop::new("fullfs", 64, "none").unwrap();
    let out = scratch_dir("fullfs-out").unwrap();
    let point = out.path().join("small");
    fs::create_dir(&point).unwrap();
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&point))
    .unwrap();
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(point.clone());
    let file = point.join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    direct_writes(&disk, 4000, 0);
    // The recorder may already have stopped on its own: stop() then reports its failure.
    let err = recorder
        .stop()
        .expect_err("the recorder must fail when the disk is full");
    let said = err.to_string();
    assert!(
        said.contains(&file.display().to_string()) && said.contains("No space left on device"),
        "{said}"
    );
    let rec = read_recording(&file).unwrap();
    assert!(rec.events.len() > 1000, "{} events kept", rec.events.len());
    assert!(rec.footer_total.is_none(), "a full disk leaves no footer");
}

/// One recorder on 8 devices (the four schedulers twice) and a second one at the same time
/// on two of them: each device's known writes appear in each recording that traces it
/// exactly once (each sector queued, issued and completed once, completions paired with
/// their issue), no event of an untraced device, nothing lost; and the two recordings hold
/// the same events of the devices they share.
#[test]
fn eight_devices_and_a_second_recorder_record_each_write_once() {
    if !real_kernel_available("eight_devices_and_a_second_recorder_record_each_write_once") {
        return;
    }
    // The four schedulers twice, or those this kernel has (no bfq on some) in turn.
    let schedulers: Vec<&str> = ["none", "mq-deadline", "bfq", "kyber"]
        .into_iter()
        .filter(|s| kernel_has_scheduler(s))
        .collect();
    let disks: Vec<ScratchLoop> = (0..8)
        .map(|i| {
            ScratchLoop::new(&format!("eight-{i}"), 16, schedulers[i % schedulers.len()]).unwrap()
        })
        .collect();
    let names: Vec<&str> = disks.iter().map(|d| d.name()).collect();
    let out = scratch_dir("eight-out").unwrap();
    let all = out.path().join("all.istrace");
    let pair = out.path().join("pair.istrace");
    let shared = [names[2], names[7]];
    let mut rec_all = record(&names, &all, &[]).unwrap();
    let mut rec_pair = record(&shared, &pair, &[]).unwrap();
    // Device i gets 10 + 3i writes at its own offset: a count and sectors no other device has.
    let writes = |i: usize| 10 + 3 * i as u64;
    let seek = |i: usize| 50 + 7 * i as u64;
    for (i, disk) in disks.iter().enumerate() {
        dd(&[
            "if=/dev/zero",
            &format!("of={}", disk.dev().display()),
            "bs=4096",
            &format!("count={}", writes(i)),
            &format!("seek={}", seek(i)),
            "oflag=direct",
        ])
        .unwrap();
    }
    rec_pair.stop().unwrap();
    rec_all.stop().unwrap();

    let check = |path: &std::path::Path, traced: &[usize]| {
        let rec = read_recording(path).unwrap();
        assert_eq!(rec.lost, 0, "{}", path.display());
        assert_eq!(rec.sent, Some(rec.events.len() as u64));
        let devs: Vec<(u32, u32)> = traced
            .iter()
            .map(|&i| disks[i].dev_numbers().unwrap())
            .collect();
        assert!(
            rec.events
                .iter()
                .all(|e| devs.contains(&(e.dev.major, e.dev.minor))),
            "an event of an untraced device in {}",
            path.display()
        );
        for (&i, &dev) in traced.iter().zip(&devs) {
            let expected: Vec<u64> = (0..writes(i)).map(|b| (seek(i) + b) * 8).collect();
            let sectors = |kind: EventKind| {
                let mut v: Vec<u64> = rec
                    .events
                    .iter()
                    .filter(|e| (e.dev.major, e.dev.minor) == dev)
                    .filter(|e| e.kind == kind && e.op == Op::Write)
                    .map(|e| e.sector)
                    .collect();
                v.sort_unstable();
                v
            };
            for kind in [EventKind::Queue, EventKind::Issue, EventKind::Complete] {
                assert_eq!(
                    sectors(kind),
                    expected,
                    "{} of {} ({}) in {}",
                    kind.name(),
                    names[i],
                    schedulers[i % schedulers.len()],
                    path.display()
                );
            }
            let mut outstanding = std::collections::HashSet::new();
            for e in rec
                .events
                .iter()
                .filter(|e| (e.dev.major, e.dev.minor) == dev)
            {
                match e.kind {
                    EventKind::Issue => assert!(outstanding.insert(e.rq), "rq issued twice"),
                    EventKind::Complete => {
                        assert!(outstanding.remove(&e.rq), "completion never issued")
                    }
                    _ => {}
                }
            }
            assert!(
                outstanding.is_empty(),
                "{}: issued, never completed",
                names[i]
            );
        }
        rec
    };
    let whole = check(&all, &(0..8).collect::<Vec<_>>());
    let part = check(&pair, &[2, 7]);
    let of_shared = |rec: &iosched_trace_tests::Recording| {
        let devs = [
            disks[2].dev_numbers().unwrap(),
            disks[7].dev_numbers().unwrap(),
        ];
        let mut v: Vec<_> = rec
            .events
            .iter()
            .filter(|e| devs.contains(&(e.dev.major, e.dev.minor)))
            .map(|e| (e.kind.name(), e.rq, e.bio, e.sector, e.bytes, e.pid))
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(of_shared(&whole), of_shared(&part));
}
