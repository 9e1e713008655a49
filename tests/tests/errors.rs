//! What a user sees when something is wrong: one clear line on stderr and a non-zero exit,
//! never a panic or a silent empty recording. Plus the bio-based device case, which records
//! what exists and says what does not.

use std::{fs, process::Command};

use iosched_core::event::EventKind;
use iosched_trace_tests::{
    ScratchLoop, binary, dd, read_recording, real_kernel_available, record, scratch_dir,
};

/// Runs the binary and returns (exit success, stderr lines).
fn run_cli(cmd: &mut Command) -> (bool, Vec<String>) {
    let out = cmd.output().expect("spawn iosched-trace");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "iosched-trace panicked: {stderr}"
    );
    (
        out.status.success(),
        stderr.lines().map(str::to_string).collect(),
    )
}

fn assert_one_line_error(result: (bool, Vec<String>), wanted: &str) {
    let (ok, lines) = result;
    assert!(!ok, "expected a failure mentioning {wanted:?}");
    assert_eq!(lines.len(), 1, "expected one line, got {lines:?}");
    assert!(
        lines[0].starts_with("iosched-trace: error: ") && lines[0].contains(wanted),
        "{:?} does not mention {wanted:?}",
        lines[0]
    );
}

/// A kernel without BTF: run in a private mount namespace where /sys/kernel/btf is an empty
/// tmpfs (the host's mounts are untouched), so the real check meets a real missing file.
#[test]
fn no_btf_is_one_line() {
    if !real_kernel_available("no_btf_is_one_line") {
        return;
    }
    let disk = ScratchLoop::new("no-btf", 16, "none").unwrap();
    let out = scratch_dir("no-btf-out").unwrap();
    let script = format!(
        "mount -t tmpfs none /sys/kernel/btf && exec {} record -d {} -o {} --duration 1",
        binary().display(),
        disk.name(),
        out.path().join("x.istrace").display()
    );
    assert_one_line_error(
        run_cli(
            Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c"])
                .arg(&script),
        ),
        "no BTF at /sys/kernel/btf/vmlinux",
    );
    assert!(!out.path().join("x.istrace").exists(), "no file is written");
}

/// A kernel that refuses BPF to the caller: in a new user namespace the recorder holds every
/// capability, but only within the namespace, and the kernel refuses its maps and programs.
/// One line naming what was refused and what to do.
#[test]
fn refused_bpf_is_one_line() {
    if !real_kernel_available("refused_bpf_is_one_line") {
        return;
    }
    let disk = ScratchLoop::new("refused", 16, "none").unwrap();
    let out = scratch_dir("refused-out").unwrap();
    let file = out.path().join("x.istrace");
    assert_one_line_error(
        run_cli(
            Command::new("unshare")
                .arg("-Ur")
                .arg(binary())
                .args(["record", "-d", disk.name(), "-o"])
                .arg(&file)
                .args(["--duration", "1"]),
        ),
        "the kernel refused BPF",
    );
}

#[test]
fn no_such_device() {
    if !real_kernel_available("no_such_device") {
        return;
    }
    let dir = scratch_dir("nodev").unwrap();
    let out = dir.path().join("x.istrace");
    for spec in ["nosuchdisk0", "/dev/nosuchdisk0", "250:250"] {
        assert_one_line_error(
            run_cli(
                Command::new(binary())
                    .args(["record", "-d", spec, "-o"])
                    .arg(&out),
            ),
            &format!("no such block device: {spec}"),
        );
    }
    assert!(
        !out.exists(),
        "no recording may be created for a bad device"
    );
}

#[test]
fn not_root_is_told_what_is_missing() {
    // Runs as root and drops privileges for the child; as non-root, run it directly.
    let dir = scratch_dir("noroot").unwrap();
    let out = dir.path().join("x.istrace");
    let mut cmd = Command::new("setpriv");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // A device that exists, so the answer is about privilege and not the name: a fresh
    // machine has no loop0 until someone attaches one.
    let disk = root.then(|| ScratchLoop::new("noroot", 16, "none").unwrap());
    let device = disk.as_ref().map_or("loop0", |d| d.name());
    if root {
        cmd.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]);
    }
    cmd.arg(binary())
        .args(["record", "-d", device, "-o"])
        .arg(&out);
    assert_one_line_error(run_cli(&mut cmd), "must run as root");
}

#[test]
fn dump_and_report_refuse_foreign_and_broken_files() {
    let dir = scratch_dir("foreign").unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty", b"", "empty"),
        (
            "text",
            b"hello, this is not a trace\n",
            "not an iosched-trace recording",
        ),
        // A blktrace record's magic, little-endian.
        (
            "blktrace",
            &[0x07, 0x74, 0x61, 0x65, 0, 0, 0, 0],
            "blktrace",
        ),
        ("cut", b"\x89IOSCHD\n\x01\x00", "ends inside its header"),
    ];
    for command in ["dump", "report"] {
        for (name, bytes, wanted) in cases {
            let path = dir.path().join(name);
            fs::write(&path, bytes).unwrap();
            let result = run_cli(Command::new(binary()).arg(command).arg(&path));
            let (ok, lines) = &result;
            assert!(!ok, "{command} {name}: succeeded on a {name} file");
            assert_eq!(lines.len(), 1, "{command} {name}: {lines:?}");
            assert!(
                lines[0].to_lowercase().contains(wanted),
                "{command} {name}: {:?} does not say {wanted:?}",
                lines[0]
            );
        }
        assert_one_line_error(
            run_cli(Command::new(binary()).args([command, "/nonexistent/trace.istrace"])),
            "/nonexistent/trace.istrace",
        );
    }
    // Bad windows are refused before the file is opened.
    assert_one_line_error(
        run_cli(Command::new(binary()).args(["report", "x", "--from", "5", "--to", "2"])),
        "--to must be after --from",
    );
}

/// zram is bio-based: no request events exist. The recorder says so and records the bio
/// events that do exist (Q and bio completions), exactly one of each per write.
#[test]
fn bio_based_zram_records_bio_events_and_says_so() {
    if !real_kernel_available("bio_based_zram_records_bio_events_and_says_so") {
        return;
    }
    let control = std::path::Path::new("/sys/class/zram-control/hot_add");
    if !control.exists() {
        panic!("this kernel has no zram: the bio-based path cannot be tested here");
    }
    let zram = Zram::new().unwrap();
    let dir = scratch_dir("zram").unwrap();
    let file = dir.path().join("z.istrace");
    let mut recorder = record(&[&zram.name], &file, &[]).unwrap();
    assert!(
        recorder
            .said()
            .iter()
            .any(|l| l.contains(&format!("{} is bio-based", zram.name))),
        "no bio-based warning: {:?}",
        recorder.said()
    );
    dd(&[
        "if=/dev/zero",
        &format!("of=/dev/{}", zram.name),
        "bs=4096",
        "count=40",
        "oflag=direct",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let rec = read_recording(&file).unwrap();
    let count = |k: EventKind| rec.events.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(EventKind::Queue), 40);
    assert_eq!(count(EventKind::BioComplete), 40);
    assert_eq!(count(EventKind::Issue), 0);
}

/// A zram device of our own, removed on drop.
struct Zram {
    id: String,
    name: String,
}

impl Zram {
    fn new() -> anyhow::Result<Self> {
        let id = fs::read_to_string("/sys/class/zram-control/hot_add")?
            .trim()
            .to_string();
        let zram = Self {
            name: format!("zram{id}"),
            id,
        };
        fs::write(format!("/sys/block/{}/disksize", zram.name), "64M")?;
        Ok(zram)
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        let _ = fs::write(format!("/sys/block/{}/reset", self.name), "1");
        let _ = fs::write("/sys/class/zram-control/hot_remove", &self.id);
    }
}

/// A recorder runs as root: a symbolic link planted where it will write must not make it
/// truncate what the link names, and what it writes is private (a trace names processes and
/// their I/O).
#[test]
fn output_is_private_and_never_through_a_symlink() {
    use std::os::unix::fs::{PermissionsExt as _, symlink};
    if !real_kernel_available("output_is_private_and_never_through_a_symlink") {
        return;
    }
    let disk = ScratchLoop::new("symlink", 16, "none").unwrap();
    let dir = scratch_dir("symlink").unwrap();
    let precious = dir.path().join("precious");
    fs::write(&precious, b"keep me\n").unwrap();
    let planted = dir.path().join("trace.istrace");
    symlink(&precious, &planted).unwrap();
    assert_one_line_error(
        run_cli(
            Command::new(binary())
                .args(["record", "-d", disk.name(), "--duration", "1", "-o"])
                .arg(&planted),
        ),
        "symbolic link",
    );
    assert_eq!(fs::read(&precious).unwrap(), b"keep me\n");

    let fresh = dir.path().join("fresh.istrace");
    let mut recorder = record(&[disk.name()], &fresh, &[]).unwrap();
    dd(&[
        "if=/dev/zero",
        &format!("of=/dev/{}", disk.name()),
        "bs=4096",
        "count=8",
        "oflag=direct",
    ])
    .unwrap();
    recorder.stop().unwrap();
    let mode = fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a new recording is readable by its owner only");
    let rec = read_recording(&fresh).unwrap();
    let queued = rec
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Queue)
        .count();
    assert_eq!(queued, 8, "the 8 direct writes, each queued once");
}
