//! Real kernel: `record --wakeups` on a scratch ext4 filesystem shows who woke whom. A dd
//! writing with `oflag=dsync` waits after each write for the journal commit, and the journal
//! thread (jbd2) wakes it when the commit is done: the recording must hold those wakeups,
//! with dd as the wakee and a `jbd2/` thread as the waker, however the kernel delivers them. Run as root (`cargo xtask test`).

use iosched_core::{event::EventKind, record::RecordingReader};
use iosched_trace_tests::{
    Mount, ScratchLoop, dd, read_recording, real_kernel_available, record, scratch_dir,
};

#[test]
fn jbd2_wakes_a_dsync_writer() {
    if !real_kernel_available("jbd2_wakes_a_dsync_writer") {
        return;
    }
    let disk = ScratchLoop::new("wakeups", 64, "mq-deadline").unwrap();
    let dev = disk.dev_numbers().unwrap();
    let mount = Mount::ext4(&disk, "wakeups-mnt").unwrap();
    let out = scratch_dir("wakeups-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &["--wakeups"]).unwrap();
    let target = mount.point.join("f");
    let pid = dd(&[
        "if=/dev/zero",
        &format!("of={}", target.display()),
        "bs=4k",
        "count=200",
        "oflag=dsync",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let rec = read_recording(&file).unwrap();
    assert!(rec.warnings.is_empty(), "warnings: {:?}", rec.warnings);
    assert_eq!(rec.lost, 0);
    let notes = RecordingReader::open(&file).unwrap().header().notes.clone();
    assert!(
        notes.iter().any(|n| n.contains("(--wakeups)")),
        "header notes: {notes:?}"
    );

    let wakeups: Vec<_> = rec
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Wakeup)
        .collect();
    // Every wakee queued I/O on the traced device (the kernel-side filter), so each one has
    // a Q event of its own in the recording, and the wakeup names that device.
    for w in &wakeups {
        let (wakee, _) = w.wakee().unwrap();
        assert_eq!((w.dev.major, w.dev.minor), dev, "{w:?}");
        assert!(
            rec.events
                .iter()
                .any(|e| e.kind == EventKind::Queue && e.pid == wakee),
            "wakee {wakee} never queued I/O: {w:?}"
        );
    }
    let by_jbd2 = wakeups
        .iter()
        .filter(|w| w.wakee() == Some((pid, pid)) && w.comm.as_str().starts_with("jbd2/"))
        .count();
    // 200 synchronous writes, each waiting for a commit: nearly every one is woken by jbd2
    // (a commit that ends before dd sleeps wakes nobody). The waker is the task in whose
    // context `sched_waking` fires, jbd2 itself, whether the kernel then activates dd at once
    // or from an IPI on dd's idle CPU (`ttwu_queue_wakelist`, where `sched_wakeup` would have
    // named `swapper`: 1 of 1003 on the CI run that found it). 200 of 200 in every run seen.
    assert!(
        by_jbd2 >= 150,
        "{by_jbd2} wakeups of dd ({pid}) by jbd2, of {} wakeups: {:?}",
        wakeups.len(),
        wakeups.iter().take(20).collect::<Vec<_>>()
    );
    eprintln!(
        "{} wakeups recorded, {by_jbd2} of dd by jbd2",
        wakeups.len()
    );

    // The model reads the same: dd's writes wait for jbd2's commits, and (observed now, not
    // guessed from timing) jbd2's commits wait for dd's writes.
    let mut source = iosched_core::trace_file::open(&file).unwrap();
    let w = iosched_model::workload::extract(source.as_mut(), None).unwrap();
    let stream = |pred: &dyn Fn(&iosched_model::workload::Stream) -> bool| {
        w.streams.iter().position(pred).unwrap() as u32
    };
    let dd_s = stream(&|s| s.pid == pid);
    let jbd2_s = stream(&|s| s.comm.as_str().starts_with("jbd2/"));
    let deps = |s: u32| w.streams[s as usize].depends_on.clone();
    assert_eq!(
        deps(dd_s).first().map(|d| d.0),
        Some(jbd2_s),
        "{:?}",
        deps(dd_s)
    );
    assert!(deps(dd_s)[0].1 >= 20, "{:?}", deps(dd_s));
    assert_eq!(
        deps(jbd2_s).first().map(|d| d.0),
        Some(dd_s),
        "{:?}",
        deps(jbd2_s)
    );
    drop(mount);
}

/// Without `--wakeups` a recording holds none (the program is not attached).
#[test]
fn no_wakeups_unless_asked() {
    if !real_kernel_available("no_wakeups_unless_asked") {
        return;
    }
    let disk = ScratchLoop::new("nowakeups", 64, "mq-deadline").unwrap();
    let mount = Mount::ext4(&disk, "nowakeups-mnt").unwrap();
    let out = scratch_dir("nowakeups-out").unwrap();
    let file = out.path().join("rec.istrace");
    let mut recorder = record(&[disk.name()], &file, &[]).unwrap();
    dd(&[
        "if=/dev/zero",
        &format!("of={}", mount.point.join("f").display()),
        "bs=4k",
        "count=20",
        "oflag=dsync",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let rec = read_recording(&file).unwrap();
    assert!(rec.events.iter().any(|e| e.kind == EventKind::Queue));
    assert!(!rec.events.iter().any(|e| e.kind == EventKind::Wakeup));
}
