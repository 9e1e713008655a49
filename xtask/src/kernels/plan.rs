//! What runs inside a guest: the kernel's features read from its config (which schedulers it
//! has, which of them and of the drivers the tests need are modules), the tests that run
//! under them, the guest's /init, and the results read back from its serial console.
//!
//! The tests are the real-kernel tests' own executables, built on the host, each run with one
//! exact test name, so a guest checks exactly what the host's run checks. `--sched-log`'s
//! test runs first: only then is tracing unused since boot, the state in which Debian's 6.1
//! shows `buffer_size_kb` as `7 (expanded: 1408)`. `check`'s test runs before the late
//! scheduler modules load (kyber: check must call it a module not loaded yet) and again
//! after.
//!
//! Owns: the test list, the /init text, the console markers. Must not: build or boot.

/// Marks our lines on the console (the kernel's messages share it).
pub const MARK: &str = "@@kernels";
/// Where the recorder and the test executables go in the guest.
pub const GUEST_BIN: &str = "/bin/iosched-trace";
pub const GUEST_TESTS: &str = "/tests";

/// busybox applets /init and the tests call (`sh`, `mount`, `insmod`, ...).
pub const APPLETS: &[&str] = &[
    "sh", "mount", "umount", "mkdir", "insmod", "cat", "echo", "poweroff", "sleep", "cut", "ls",
    "sync", "uname", "rm", "grep", "kill", "head", "tail", "dmesg", "true", "false", "test", "env",
    "ps", "chmod", "ln", "cp", "sed", "tr", "wc", "date", "id", "mknod", "free", "df",
];

/// The host's own tools the tests run, copied with their libraries (the same as on the
/// host: util-linux's losetup has `--direct-io`, coreutils' dd the flags the tests use).
pub const HOST_TOOLS: &[&str] = &["losetup", "mkfs.ext4", "dd", "fio", "blkparse", "btt"];

/// Size of the guest's /dev/shm: an ext4 file system on a brd ramdisk, where the tests keep
/// their loop devices' backing files. Not tmpfs: a loop device over a tmpfs file refuses
/// direct I/O on 6.1 (tmpfs has no O_DIRECT there), and the tests ask for it.
const SHM_MIB: u64 = 512;

/// What a kernel's config says it has.
#[derive(Debug, PartialEq, Eq)]
pub struct Features {
    /// The schedulers to test under, `none` first.
    pub schedulers: Vec<&'static str>,
    /// Modules to load at boot (the built-in ones are left out): the drivers the tests need
    /// and every scheduler built as a module.
    pub modules: Vec<&'static str>,
}

impl Features {
    pub fn from_config(config: &str) -> Self {
        let value = |key: &str| {
            config.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|rest| rest.strip_prefix('='))
                    .map(str::trim)
            })
        };
        let mut schedulers = vec!["none"];
        let mut modules = Vec::new();
        for (key, module) in [
            ("CONFIG_BLK_DEV_LOOP", "loop"),
            ("CONFIG_BLK_DEV_RAM", "brd"),
        ] {
            if value(key) == Some("m") {
                modules.push(module);
            }
        }
        for (key, scheduler, module) in [
            ("CONFIG_MQ_IOSCHED_DEADLINE", "mq-deadline", "mq-deadline"),
            ("CONFIG_IOSCHED_BFQ", "bfq", "bfq"),
            ("CONFIG_MQ_IOSCHED_KYBER", "kyber", "kyber-iosched"),
        ] {
            match value(key) {
                Some("y") => schedulers.push(scheduler),
                Some("m") => {
                    schedulers.push(scheduler);
                    modules.push(module);
                }
                _ => {}
            }
        }
        Features {
            schedulers,
            modules,
        }
    }
}

/// A module's parameters for insmod.
pub fn module_params(module: &str) -> String {
    match module {
        // One ramdisk of SHM_MIB (rd_size is in KiB).
        "brd" => format!("rd_nr=1 rd_size={}", SHM_MIB << 10),
        _ => String::new(),
    }
}

/// One test run in the guest: `/tests/<target> --exact <name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestTest {
    pub label: String,
    /// The test file, `tests/tests/<target>.rs`.
    pub target: String,
    pub name: String,
    /// Runs before the late modules load (see [`LATE_MODULES`]).
    pub early: bool,
}

/// Scheduler modules whose tracepoints the recorder hangs on, with what `record -v` must say
/// while they are not loaded: the guest checks that message before it loads them.
const LATE_MODULES: &[(&str, &str)] = &[(
    "kyber-iosched",
    "kyber is a module in this kernel (kyber_iosched) and not loaded yet",
)];

/// tests/tests/check.rs's comparison of `check` with the host and with `record -v`.
const CHECK_TEST: &str = "check_says_what_this_host_is_and_record_agrees";

/// The label of the check that `record -v` names a scheduler module not loaded yet.
const NOT_LOADED_CHECK: &str = "record::names_a_scheduler_module_not_loaded";

pub fn tests(features: &Features) -> Vec<GuestTest> {
    let test = |target: &'static str, name: String| GuestTest {
        label: format!("{target}::{name}"),
        target: target.to_owned(),
        name,
        early: false,
    };
    let mut tests = Vec::new();
    let late = features
        .modules
        .iter()
        .any(|m| LATE_MODULES.iter().any(|(late, _)| late == m));
    if features.schedulers.contains(&"bfq") {
        // First: see the module docs.
        tests.push(GuestTest {
            early: true,
            ..test(
                "model",
                "sched_log_keeps_bfqs_decisions_and_restores_tracefs".into(),
            )
        });
        // `check` on its scratch bfq disk, each line against the guest's own files and
        // against `record -v`, while kyber is still a module not loaded (check must say so,
        // and record must leave out kyber's programs for the same reason) ...
        tests.push(GuestTest {
            early: true,
            ..test("check", CHECK_TEST.into())
        });
        tests.push(GuestTest {
            early: true,
            ..test("check", "check_text_is_one_line_per_fact".into())
        });
        // ... and again once it is loaded (check then says so, and kyber's programs attach).
        if late {
            tests.push(GuestTest {
                label: format!("check::{CHECK_TEST}@modules_loaded"),
                ..test("check", CHECK_TEST.into())
            });
        }
    }
    for s in &features.schedulers {
        tests.push(test(
            "capture",
            format!("known_writes_{}", s.replace('-', "_")),
        ));
    }
    if features.schedulers.contains(&"mq-deadline") {
        tests.push(test("capture", "ftrace_blk_oracle_agrees".into()));
        tests.push(test(
            "blktrace",
            "blkparse_and_btt_agree_with_our_recording".into(),
        ));
    }
    tests.push(test(
        "live",
        "batch_intervals_equal_report_windows_of_a_simultaneous_recording".into(),
    ));
    // The exporter's programs and maps on this kernel: a device that appears, exact counts,
    // a scheduler switch, SIGHUP, the device gone (no Prometheus server in the guest).
    if features.schedulers.contains(&"mq-deadline") {
        tests.push(test(
            "exporter",
            "a_device_that_comes_and_goes_gets_series_and_loses_them".into(),
        ));
    }
    tests
}

/// `--also TARGET::NAME`: a test of `tests/tests/TARGET.rs` run in the guests after the
/// plan's own (for a test that is not in the matrix, such as the bfq prediction on a RAM
/// device, whose figures the serial log then holds).
pub fn extra_test(spec: &str) -> Result<GuestTest, String> {
    let (target, name) = spec
        .split_once("::")
        .filter(|(t, n)| !t.is_empty() && !n.is_empty())
        .ok_or_else(|| format!("--also {spec:?}: expected TARGET::NAME, e.g. fast_device::NAME"))?;
    Ok(GuestTest {
        label: spec.to_owned(),
        target: target.to_owned(),
        name: name.to_owned(),
        early: false,
    })
}

/// The guest's /init: mounts, loopback up (the exporter's test scrapes 127.0.0.1), modules,
/// /dev/shm, then each test with a result line, then
/// power off. `modules`: (guest path, parameters) in load order.
pub fn init_script(modules: &[(std::path::PathBuf, String)], tests: &[GuestTest]) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tracefs tracefs /sys/kernel/tracing\n\
         mount -t debugfs debugfs /sys/kernel/debug\n\
         mount -t bpf bpf /sys/fs/bpf\n\
         mount -t tmpfs tmpfs /tmp\n\
         ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up\n",
    );
    s.push_str(&format!(
        "say() {{ echo; echo \"{MARK} $*\"; }}\n\
         up() {{ cut -d' ' -f1 /proc/uptime; }}\n\
         fatal() {{ say FATAL \"$*\"; sync; poweroff -f; sleep 5; echo o > /proc/sysrq-trigger; }}\n"
    ));
    let insmod = |(path, params): &(std::path::PathBuf, String)| {
        format!(
            "insmod {} {params} || fatal insmod {}\n",
            path.display(),
            path.display()
        )
    };
    let late_message = |path: &std::path::Path| {
        let stem = path.file_stem()?.to_str()?;
        LATE_MODULES
            .iter()
            .find(|(module, _)| *module == stem)
            .map(|(_, message)| *message)
    };
    let (late, early): (Vec<_>, Vec<_>) =
        modules.iter().partition(|m| late_message(&m.0).is_some());
    for m in &early {
        s.push_str(&insmod(m));
    }
    s.push_str(
        "mkdir -p /dev/shm\n\
         mkfs.ext4 -q -F /dev/ram0 || fatal mkfs.ext4 /dev/ram0\n\
         mount -t ext4 /dev/ram0 /dev/shm || fatal mount /dev/shm\n\
         chmod 1777 /dev/shm\n",
    );
    s.push_str(&format!(
        "say BOOTED $(uname -r) at $(up) s\n\
         say NOTE buffer_size_kb before any tracing: $(cat /sys/kernel/tracing/buffer_size_kb)\n\
         say NOTE modules: $(cut -d' ' -f1 /proc/modules | tr '\\n' ' ')\n\
         say NOTE block tracepoints: $(ls /sys/kernel/tracing/events/block | tr '\\n' ' ')\n\
         say NOTE module BTF: $(ls /sys/kernel/btf | grep -v vmlinux | tr '\\n' ' ')\n\
         say NOTE trace_clock: $(cat /sys/kernel/tracing/trace_clock)\n\
         export IOSCHED_TRACE_BIN={GUEST_BIN} IOSCHED_TRACE_REQUIRE_ROOT_TESTS=1 CI=1 RUST_BACKTRACE=1\n\
         cd /tmp\n\
         run() {{\n\
         \x20 label=$1; shift\n\
         \x20 start=$(up)\n\
         \x20 if \"$@\"; then r=PASS; else r=FAIL; fi\n\
         \x20 say RESULT $label $r $start $(up)\n\
         }}\n"
    ));
    let run = |t: &GuestTest| {
        format!(
            // --nocapture: what a test prints (the bfq prediction's figures, a failure's
            // context) is in the serial log either way.
            "run {} {GUEST_TESTS}/{} --exact {} --test-threads=1 --nocapture\n",
            t.label, t.target, t.name
        )
    };
    for t in tests.iter().filter(|t| t.early) {
        s.push_str(&run(t));
    }
    if !late.is_empty() {
        // Recording a scratch loop device while the scheduler modules are not loaded: the
        // recorder must name the module to load (it reads modules.dep, which the initramfs
        // carries). losetup by its path: busybox's sh runs its own applet for a bare name,
        // and that one has no --show.
        s.push_str(&format!(
            "not_loaded() {{\n\
             \x20 dd if=/dev/zero of=/dev/shm/nl.img bs=1M count=16 2>/dev/null\n\
             \x20 dev=$(/bin/losetup -f --show /dev/shm/nl.img) || return 1\n\
             \x20 {GUEST_BIN} record -v -d ${{dev#/dev/}} -o /tmp/nl.istrace --duration 1 > /tmp/nl.out 2>&1\n\
             \x20 /bin/losetup -d $dev; rm -f /dev/shm/nl.img /tmp/nl.istrace\n\
             \x20 cat /tmp/nl.out\n\
             \x20 ok=0\n"
        ));
        for m in &late {
            let message = late_message(&m.0).unwrap_or_default();
            s.push_str(&format!("  grep -qF '{message}' /tmp/nl.out || ok=1\n"));
        }
        s.push_str(&format!(
            "  return $ok\n}}\nrun {NOT_LOADED_CHECK} not_loaded\n"
        ));
        for m in &late {
            s.push_str(&insmod(m));
        }
    }
    // securityfs, as a Debian host's systemd mounts it: the early tests ran without it
    // (`check` must then say it cannot read lockdown and why), the late ones read lockdown.
    s.push_str(
        "mount -t securityfs securityfs /sys/kernel/security\n\
         say NOTE lockdown: $(cat /sys/kernel/security/lockdown)\n",
    );
    for t in tests.iter().filter(|t| !t.early) {
        s.push_str(&run(t));
    }
    s.push_str("say NOTE buffer_size_kb at the end: $(cat /sys/kernel/tracing/buffer_size_kb)\n");
    s.push_str(
        "say DONE\n\
         sync\n\
         poweroff -f\n\
         sleep 5\n\
         echo o > /proc/sysrq-trigger\n",
    );
    s
}

#[derive(Debug, PartialEq)]
pub struct TestResult {
    pub label: String,
    pub passed: bool,
    /// In the guest, by its uptime clock.
    pub seconds: f64,
}

/// What the console said.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// `uname -r` and the uptime at which the tests began.
    pub booted: Option<String>,
    pub results: Vec<TestResult>,
    pub notes: Vec<String>,
    /// The guest reached its end (`DONE`).
    pub done: bool,
}

/// Reads our marker lines out of the serial console's text; a kernel message printed into
/// the middle of one only costs that line's tail.
pub fn parse(serial: &str) -> Parsed {
    let mut parsed = Parsed::default();
    for line in serial.lines() {
        let Some(at) = line.find(MARK) else {
            continue;
        };
        let rest = line[at + MARK.len()..].trim();
        let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "BOOTED" => parsed.booted = Some(tail.trim().to_string()),
            "NOTE" | "FATAL" => parsed.notes.push(format!("{word} {}", tail.trim())),
            "DONE" => parsed.done = true,
            "RESULT" => {
                let f: Vec<&str> = tail.split_whitespace().collect();
                if let [label, verdict, start, end] = f[..] {
                    let secs = |s: &str| s.parse::<f64>().unwrap_or(0.0);
                    parsed.results.push(TestResult {
                        label: label.to_string(),
                        passed: verdict == "PASS",
                        seconds: secs(end) - secs(start),
                    });
                }
            }
            _ => {}
        }
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEBIAN_6_1: &str = "CONFIG_BLK_DEV_LOOP=m\nCONFIG_BLK_DEV_RAM=m\n\
        CONFIG_MQ_IOSCHED_DEADLINE=y\nCONFIG_MQ_IOSCHED_KYBER=m\nCONFIG_IOSCHED_BFQ=m\n\
        # CONFIG_BFQ_GROUP_IOSCHED is not set\n";

    #[test]
    fn config_gives_schedulers_and_modules() {
        let f = Features::from_config(DEBIAN_6_1);
        assert_eq!(f.schedulers, ["none", "mq-deadline", "bfq", "kyber"]);
        assert_eq!(f.modules, ["loop", "brd", "bfq", "kyber-iosched"]);
        let six_twelve = DEBIAN_6_1.replace("DEADLINE=y", "DEADLINE=m");
        let f = Features::from_config(&six_twelve);
        assert_eq!(
            f.modules,
            ["loop", "brd", "mq-deadline", "bfq", "kyber-iosched"]
        );
        let bare =
            Features::from_config("CONFIG_BLK_DEV_LOOP=y\n# CONFIG_IOSCHED_BFQ is not set\n");
        assert_eq!((bare.schedulers, bare.modules), (vec!["none"], vec![]));
    }

    #[test]
    fn an_extra_test_names_its_file_and_test() {
        let t = extra_test("fast_device::a_none_recording").unwrap();
        assert_eq!(
            (t.target.as_str(), t.name.as_str()),
            ("fast_device", "a_none_recording")
        );
        assert!(!t.early);
        for bad in ["fast_device", "::x", "fast_device::", ""] {
            assert!(extra_test(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sched_log_runs_first_and_every_scheduler_has_its_count_test() {
        let t = tests(&Features::from_config(DEBIAN_6_1));
        let labels: Vec<&str> = t.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels[..8],
            [
                "model::sched_log_keeps_bfqs_decisions_and_restores_tracefs",
                "check::check_says_what_this_host_is_and_record_agrees",
                "check::check_text_is_one_line_per_fact",
                "check::check_says_what_this_host_is_and_record_agrees@modules_loaded",
                "capture::known_writes_none",
                "capture::known_writes_mq_deadline",
                "capture::known_writes_bfq",
                "capture::known_writes_kyber",
            ]
        );
        assert_eq!(t.len(), 12);
        assert_eq!(
            labels.last(),
            Some(&"exporter::a_device_that_comes_and_goes_gets_series_and_loses_them")
        );
        // Without a late module there is no second check.
        let built_in = DEBIAN_6_1.replace("KYBER=m", "KYBER=y");
        assert_eq!(tests(&Features::from_config(&built_in)).len(), 11);
        // Without bfq, neither bfq's own tests nor the bfq prediction.
        let no_bfq = DEBIAN_6_1.replace("CONFIG_IOSCHED_BFQ=m", "# CONFIG_IOSCHED_BFQ is not set");
        assert!(
            !tests(&Features::from_config(&no_bfq))
                .iter()
                .any(|t| t.label.contains("bfq"))
        );
        let init = init_script(
            &[
                ("/modules/kyber-iosched.ko".into(), String::new()),
                ("/modules/brd.ko".into(), module_params("brd")),
            ],
            &t,
        );
        assert!(init.contains("insmod /modules/brd.ko rd_nr=1 rd_size=524288 ||"));
        assert!(init.contains("run capture::known_writes_kyber /tests/capture --exact known_writes_kyber --test-threads=1 --nocapture\n"));
        // The sched-log test, then the not-loaded check, then kyber, then the rest.
        let at = |needle: &str| init.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at("insmod /modules/brd.ko") < at("run model::sched_log"));
        assert!(at("run model::sched_log") < at(&format!("run {NOT_LOADED_CHECK} not_loaded")));
        assert!(
            at(&format!("run {NOT_LOADED_CHECK} not_loaded"))
                < at("insmod /modules/kyber-iosched.ko")
        );
        assert!(
            at("run check::check_text_is_one_line_per_fact")
                < at("insmod /modules/kyber-iosched.ko")
        );
        assert!(
            at("insmod /modules/kyber-iosched.ko")
                < at(
                    "run check::check_says_what_this_host_is_and_record_agrees@modules_loaded /tests/check --exact check_says_what_this_host_is_and_record_agrees "
                )
        );
        assert!(at("insmod /modules/kyber-iosched.ko") < at("run capture::known_writes_none"));
        assert!(at("run check::check_text") < at("mount -t securityfs"));
        assert!(
            at("mount -t securityfs")
                < at("run check::check_says_what_this_host_is_and_record_agrees@")
        );
        assert!(init.contains(
            "grep -qF 'kyber is a module in this kernel (kyber_iosched) and not loaded yet'"
        ));
    }

    #[test]
    fn console_markers_are_read_through_kernel_noise() {
        let serial = "[    7.1] loop: module loaded\n\
            \n@@kernels BOOTED 6.1.0-47-cloud-amd64 at 7.52 s\n\
            @@kernels NOTE buffer_size_kb before any tracing: 7 (expanded: 1408)\n\
            [   9.0] random noise @@kernels RESULT capture::known_writes_none PASS 8.00 11.25\n\
            @@kernels RESULT capture::known_writes_bfq FAIL 11.25 20.00\n\
            @@kernels RESULT truncated\n";
        let p = parse(serial);
        assert_eq!(p.booted.as_deref(), Some("6.1.0-47-cloud-amd64 at 7.52 s"));
        assert_eq!(p.results.len(), 2);
        assert!(p.results[0].passed && !p.results[1].passed);
        assert!((p.results[0].seconds - 3.25).abs() < 1e-9);
        assert_eq!(
            p.notes,
            ["NOTE buffer_size_kb before any tracing: 7 (expanded: 1408)"]
        );
        assert!(!p.done);
        assert!(parse("@@kernels DONE\n").done);
    }
}
