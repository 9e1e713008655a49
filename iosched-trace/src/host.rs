//! What `check` says about a host before anything is traced: the kernel release, its BTF
//! (vmlinux and modules), lockdown, the caller's capabilities, which tracepoints the programs
//! can hang on (with the same decision `record` makes, [`crate::capture::tracepoint_usable`]),
//! the ftrace blk tracer (BFQ's log, `--sched-log`), the I/O schedulers (built in, modules,
//! loaded) and the disks (request-based or bio-based); and the verdict: the reasons, if any,
//! why recording will not work.
//!
//! Owns: gathering those facts under a root directory (`/` on a real host, a fake tree in
//! tests) and the verdict over them. Must not: change anything, load programs (the trial load
//! is `capture::trial`'s), or word the facts (`views::check`).

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    btf::Btf,
    capture::{self, When},
    devices::Sysfs,
    preflight,
    probe::KernelLayout,
};

/// Everything `check` reports.
#[derive(Clone, Debug, Serialize)]
pub struct HostFacts {
    /// `uname -r` (`/proc/sys/kernel/osrelease`).
    pub kernel_release: Option<String>,
    pub btf: BtfFacts,
    pub lockdown: Lockdown,
    pub capabilities: Capabilities,
    /// This binary carries the eBPF programs (a build with AYA_BUILD_SKIP has none).
    pub programs_embedded: bool,
    pub programs_bytes: usize,
    /// Why the kernel's layout cannot be read from its BTF (the programs need it), if so.
    pub layout_error: Option<String>,
    pub tracepoints: Vec<Tracepoint>,
    pub blk_tracer: BlkTracer,
    pub schedulers: Vec<Scheduler>,
    pub devices: Vec<Device>,
    pub sched_log: SchedLog,
}

#[derive(Clone, Debug, Serialize)]
pub struct BtfFacts {
    /// `/sys/kernel/btf/vmlinux` exists.
    pub vmlinux: bool,
    pub vmlinux_bytes: Option<u64>,
    /// Why it could not be parsed, if it exists and could not.
    pub error: Option<String>,
    /// Loaded modules with their own (split) BTF, sorted (`/sys/kernel/btf/*` but vmlinux).
    pub modules: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Lockdown {
    /// `none`, `integrity` or `confidentiality`; `None` when the file is absent.
    pub mode: Option<String>,
    /// Where the mode was read, or why it could not be.
    pub source: String,
}

impl Lockdown {
    /// Confidentiality lockdown refuses BPF reads of kernel memory, which every program does.
    pub fn forbids_tracing(&self) -> bool {
        self.mode.as_deref() == Some("confidentiality")
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Capabilities {
    /// `CapEff` of `/proc/self/status`.
    pub effective: Option<u64>,
    pub uid: u32,
    /// Of CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, those the caller lacks.
    pub missing: Vec<&'static str>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Tracepoint {
    pub name: &'static str,
    pub required: bool,
    /// When a recording attaches it: `always`, `bio-based device`, `--extra-events`,
    /// `--wakeups`, `--plug-events`.
    pub when: &'static str,
    /// `None`: usable; else why `record` leaves it out (the reason `record -v` notes).
    pub missing: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BlkTracer {
    /// tracefs, where it is mounted.
    pub tracefs: Option<PathBuf>,
    /// tracefs could be read (it is root's only).
    pub readable: bool,
    /// `blk` is in `available_tracers` (CONFIG_BLK_DEV_IO_TRACE).
    pub available: bool,
    /// `current_tracer` now (`nop` when idle).
    pub current: Option<String>,
}

/// How a scheduler is present in this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Presence {
    /// Listed in `modules.builtin`, or registered in a kernel without loadable modules.
    BuiltIn,
    /// Registered although neither `modules.builtin` nor `/proc/modules` names it (no
    /// `/lib/modules` for this kernel): built in, as far as can be told.
    Registered,
    /// A module, loaded.
    ModuleLoaded,
    /// A module (in `/lib/modules/RELEASE`'s modules.dep or a file there), not loaded
    /// (`modprobe` it).
    ModuleNotLoaded,
    Absent,
}

#[derive(Clone, Debug, Serialize)]
pub struct Scheduler {
    pub name: &'static str,
    pub module: &'static str,
    pub presence: Presence,
    /// Offered in some blk-mq disk's `queue/scheduler` (selectable now).
    pub registered: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Device {
    pub name: String,
    pub dev: String,
    /// blk-mq (a `mq` directory in sysfs): request events and a scheduler.
    pub request_based: bool,
    /// The scheduler in use (`[bracketed]` in `queue/scheduler`).
    pub scheduler: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SchedLog {
    pub works: bool,
    /// Why not, or a caveat when it works.
    pub note: String,
}

/// The trial load's outcome, as the command found it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Load {
    /// Not tried (`--no-load`, or a problem already rules recording out).
    pub tried: bool,
    pub attached: Vec<&'static str>,
    /// Optional programs the kernel refused, with why (tracepoints `check` found missing are
    /// among them too).
    pub skipped: Vec<(&'static str, String)>,
    pub error: Option<String>,
}

/// The I/O schedulers: (elevator name, module name, module file stem under kernel/block).
const SCHEDULERS: &[(&str, &str, &str)] = &[
    ("mq-deadline", "mq_deadline", "mq-deadline"),
    ("bfq", "bfq", "bfq"),
    ("kyber", "kyber_iosched", "kyber-iosched"),
];

/// Where a host's files are: `/`, or a fake tree in tests.
#[derive(Clone, Debug)]
pub struct Host {
    root: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Host::at("/")
    }
}

impl Host {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Host { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn read(&self, rel: &str) -> Option<String> {
        fs::read_to_string(self.path(rel)).ok()
    }

    /// Reads every fact. Never fails: what cannot be read is reported as such.
    pub fn facts(&self) -> HostFacts {
        let kernel_release = self
            .read("proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string());
        let (btf_facts, btf) = self.btf();
        let (layout_error, layout) = match &btf {
            Some(btf) => match KernelLayout::from_btf(btf) {
                Ok(l) => (None, Some(l)),
                Err(e) => (Some(e.to_string()), None),
            },
            None => (None, None),
        };
        let tracepoints = tracepoints(btf.as_ref(), layout.as_ref());
        let capabilities = self.capabilities();
        let blk_tracer = self.blk_tracer();
        let devices = self.devices();
        let schedulers = self.schedulers(kernel_release.as_deref(), &devices);
        let sched_log = sched_log(&capabilities, &blk_tracer, &schedulers, &devices);
        HostFacts {
            kernel_release,
            btf: btf_facts,
            lockdown: self.lockdown(),
            capabilities,
            programs_embedded: capture::has_programs(),
            programs_bytes: capture::object_bytes(),
            layout_error,
            tracepoints,
            blk_tracer,
            schedulers,
            devices,
            sched_log,
        }
    }

    fn btf(&self) -> (BtfFacts, Option<Btf>) {
        let vmlinux_path = self.path(preflight::BTF_PATH.trim_start_matches('/'));
        let vmlinux_bytes = fs::metadata(&vmlinux_path).ok().map(|m| m.len());
        let (btf, error) = match vmlinux_bytes {
            Some(_) => match Btf::from_file(&vmlinux_path) {
                Ok(b) => (Some(b), None),
                Err(e) => (None, Some(e.to_string())),
            },
            None => (None, None),
        };
        let mut modules: Vec<String> = fs::read_dir(self.path("sys/kernel/btf"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n != "vmlinux")
                    .collect()
            })
            .unwrap_or_default();
        modules.sort();
        (
            BtfFacts {
                vmlinux: vmlinux_bytes.is_some(),
                vmlinux_bytes,
                error,
                modules,
            },
            btf,
        )
    }

    fn lockdown(&self) -> Lockdown {
        const FILE: &str = "sys/kernel/security/lockdown";
        if let Some(text) = self.read(FILE) {
            return Lockdown {
                mode: selected(&text),
                source: format!("/{FILE}"),
            };
        }
        let securityfs = self
            .read("proc/self/mounts")
            .map(|m| crate::system::parse_mounts(&m))
            .unwrap_or_default()
            .iter()
            .any(|m| m.fstype == "securityfs");
        Lockdown {
            mode: None,
            source: if securityfs {
                "securityfs has no lockdown file: the kernel has no lockdown LSM (none)".into()
            } else {
                "securityfs is not mounted (mount -t securityfs none /sys/kernel/security to read it)"
                    .into()
            },
        }
    }

    fn capabilities(&self) -> Capabilities {
        let status = self.read("proc/self/status").unwrap_or_default();
        let effective = crate::system::parse_cap_eff(&status);
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(u32::MAX);
        Capabilities {
            effective,
            uid,
            missing: preflight::missing_caps(effective.unwrap_or(0)),
        }
    }

    fn blk_tracer(&self) -> BlkTracer {
        // Unreadable to a non-root caller (mode 0700): there, but nothing can be told.
        let mut readable = true;
        let tracefs = ["sys/kernel/tracing", "sys/kernel/debug/tracing"]
            .into_iter()
            .map(|p| self.path(p))
            .find(|p| match fs::metadata(p.join("trace")) {
                Ok(_) => true,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    readable = false;
                    true
                }
                Err(_) => false,
            });
        let read = |f: &str| {
            tracefs
                .as_ref()
                .and_then(|t| fs::read_to_string(t.join(f)).ok())
        };
        BlkTracer {
            readable,
            available: read("available_tracers")
                .is_some_and(|t| t.split_whitespace().any(|t| t == "blk")),
            current: read("current_tracer").map(|t| t.trim().to_string()),
            // Reported as the host names it, not under the test root.
            tracefs: tracefs.map(|t| Path::new("/").join(t.strip_prefix(&self.root).unwrap_or(&t))),
        }
    }

    fn devices(&self) -> Vec<Device> {
        Sysfs::at(self.path("sys"))
            .disks()
            .unwrap_or_default()
            .into_iter()
            .map(|d| Device {
                scheduler: self
                    .read(&format!("sys/block/{}/queue/scheduler", d.name))
                    .and_then(|s| selected(&s)),
                dev: d.dev.to_string(),
                name: d.name,
                request_based: d.request_based,
            })
            .collect()
    }

    fn schedulers(&self, release: Option<&str>, devices: &[Device]) -> Vec<Scheduler> {
        let registered: Vec<String> = devices
            .iter()
            .filter(|d| d.request_based)
            .filter_map(|d| self.read(&format!("sys/block/{}/queue/scheduler", d.name)))
            .flat_map(|s| {
                s.split_whitespace()
                    .map(|n| n.trim_matches(['[', ']']).to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        // No /proc/modules: a kernel without loadable modules, where all it has is built in.
        let loaded = self.read("proc/modules").map(|t| parse_proc_modules(&t));
        let modules_dir = release.map(|r| self.path(&format!("lib/modules/{r}")));
        let builtin = modules_dir
            .as_ref()
            .and_then(|d| fs::read_to_string(d.join("modules.builtin")).ok())
            .map(|t| parse_modules_builtin(&t))
            .unwrap_or_default();
        // modules.dep too, as `record` reads it to name a module not loaded yet: the two must
        // agree, also where the module files live elsewhere (the kernel matrix's guests).
        let dep = modules_dir
            .as_ref()
            .and_then(|d| fs::read_to_string(d.join("modules.dep")).ok())
            .map(|t| parse_modules_dep(&t))
            .unwrap_or_default();
        SCHEDULERS
            .iter()
            .map(|&(name, module, file)| {
                let is_registered = registered.iter().any(|r| r == name);
                let has_file = dep.iter().any(|d| d == file)
                    || modules_dir.as_ref().is_some_and(|d| {
                        ["ko", "ko.xz", "ko.zst", "ko.gz"]
                            .iter()
                            .any(|ext| d.join(format!("kernel/block/{file}.{ext}")).exists())
                    });
                let presence = classify(
                    builtin.iter().any(|b| b == file || b == module),
                    loaded.as_ref().map(|l| l.iter().any(|m| m == module)),
                    has_file,
                    is_registered,
                );
                Scheduler {
                    name,
                    module,
                    presence,
                    registered: is_registered,
                }
            })
            .collect()
    }
}

/// How a scheduler is present, from: listed in `modules.builtin`; in `/proc/modules`
/// (`None`: no such file, a kernel without modules); a module file exists (or modules.dep
/// lists it); registered.
pub fn classify(
    in_builtin: bool,
    loaded: Option<bool>,
    module_file: bool,
    registered: bool,
) -> Presence {
    if in_builtin {
        Presence::BuiltIn
    } else if loaded == Some(true) {
        Presence::ModuleLoaded
    } else if loaded.is_none() && registered {
        Presence::BuiltIn
    } else if module_file {
        Presence::ModuleNotLoaded
    } else if registered {
        Presence::Registered
    } else {
        Presence::Absent
    }
}

/// The module names of `/proc/modules` (first field of each line).
pub fn parse_proc_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The module file stems of `modules.builtin` (`kernel/block/bfq.ko` -> `bfq`).
pub fn parse_modules_builtin(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().rsplit('/').next())
        .filter_map(|f| f.strip_suffix(".ko"))
        .map(str::to_string)
        .collect()
}

/// The module file stems of `modules.dep`'s entries (`kernel/block/kyber-iosched.ko.xz: ...`
/// -> `kyber-iosched`).
pub fn parse_modules_dep(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.split(':').next()?.trim().rsplit('/').next())
        .filter_map(|f| f.split_once(".ko").map(|(stem, _)| stem))
        .filter(|stem| !stem.is_empty())
        .map(str::to_string)
        .collect()
}

/// The `[selected]` word of a sysfs choice list (`none [mq-deadline] kyber`), or the only
/// word when there are no brackets (`none` on some kernels).
pub fn selected(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .iter()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .or(match words.as_slice() {
            [only] => Some(*only),
            _ => None,
        })
        .map(str::to_string)
}

fn when_name(when: When) -> &'static str {
    match when {
        When::Always => "always",
        When::BioBasedDevice => "bio-based device",
        When::Extra => "--extra-events",
        When::Wakeups => "--wakeups",
        When::PlugEvents => "--plug-events",
    }
}

/// Each program's tracepoint, with `record`'s own decision about it.
fn tracepoints(btf: Option<&Btf>, layout: Option<&KernelLayout>) -> Vec<Tracepoint> {
    capture::programs()
        .iter()
        .map(|spec| {
            let missing = match btf {
                None => Some("no kernel BTF to find it in".to_string()),
                Some(btf) => {
                    let wakeup = match (spec.when, layout) {
                        (When::Wakeups, Some(layout)) => capture::wakeups_usable(btf, layout),
                        _ => Ok(()),
                    };
                    wakeup
                        .and_then(|()| capture::tracepoint_usable(btf, spec))
                        .err()
                }
            };
            Tracepoint {
                name: spec.name,
                required: spec.required,
                when: when_name(spec.when),
                missing,
            }
        })
        .collect()
}

fn sched_log(
    caps: &Capabilities,
    blk: &BlkTracer,
    schedulers: &[Scheduler],
    devices: &[Device],
) -> SchedLog {
    let no = |note: String| SchedLog { works: false, note };
    if blk.tracefs.is_none() {
        return no(
            "tracefs is not mounted (mount -t tracefs tracefs /sys/kernel/tracing)".to_string(),
        );
    }
    if !blk.readable {
        return no("needs root: tracefs is root's to read and write".to_string());
    }
    if !blk.available {
        return no("the blk tracer is not in this kernel (CONFIG_BLK_DEV_IO_TRACE)".to_string());
    }
    if caps.uid != 0 {
        return no("needs root: it writes tracefs settings".to_string());
    }
    if let Some(current) = blk.current.as_deref().filter(|c| *c != "nop") {
        return SchedLog {
            works: true,
            note: format!(
                "but tracefs's current tracer is `{current}`, in use by something else: --sched-log would take it over"
            ),
        };
    }
    let bfq = schedulers.iter().find(|s| s.name == "bfq");
    let on_bfq: Vec<&str> = devices
        .iter()
        .filter(|d| d.scheduler.as_deref() == Some("bfq"))
        .map(|d| d.name.as_str())
        .collect();
    let note = match bfq.map(|s| s.presence) {
        _ if !on_bfq.is_empty() => format!("bfq logs on {}", on_bfq.join(" ")),
        Some(Presence::Absent) | None => {
            "but bfq is not in this kernel, and only bfq logs its decisions".to_string()
        }
        Some(Presence::ModuleNotLoaded) => {
            "bfq is a module, not loaded (modprobe bfq); only bfq logs its decisions".to_string()
        }
        Some(_) => "no disk uses bfq now; only bfq logs its decisions".to_string(),
    };
    SchedLog { works: true, note }
}

impl HostFacts {
    /// Why recording will not work here; empty when it will.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.programs_embedded {
            out.push(
                "this binary contains no eBPF programs (built with AYA_BUILD_SKIP): rebuild it with `cargo xtask build`"
                    .to_string(),
            );
        }
        if !self.capabilities.missing.is_empty() {
            out.push(format!(
                "missing {}: run as root",
                self.capabilities.missing.join(", ")
            ));
        }
        if !self.btf.vmlinux {
            out.push(format!(
                "no BTF at {}: the kernel needs CONFIG_DEBUG_INFO_BTF",
                preflight::BTF_PATH
            ));
        } else if let Some(e) = &self.btf.error {
            out.push(format!("the kernel's BTF cannot be read: {e}"));
        }
        if let Some(e) = &self.layout_error {
            out.push(format!("the kernel's layout: {e}"));
        }
        if self.lockdown.forbids_tracing() {
            out.push(
                "kernel lockdown is `confidentiality`: BPF may not read kernel memory".to_string(),
            );
        }
        if self.btf.vmlinux && self.btf.error.is_none() {
            for t in self.tracepoints.iter().filter(|t| t.required) {
                if let Some(why) = &t.missing {
                    out.push(format!("required tracepoint {}: {why}", t.name));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedulers_are_classified() {
        // (builtin list, /proc/modules, module file, registered) -> presence
        let cases = [
            ((true, Some(false), false, true), Presence::BuiltIn),
            ((false, Some(true), true, true), Presence::ModuleLoaded),
            ((false, None, false, true), Presence::BuiltIn),
            ((false, None, false, false), Presence::Absent),
            ((false, Some(false), true, false), Presence::ModuleNotLoaded),
            ((false, Some(false), false, true), Presence::Registered),
            ((false, Some(false), false, false), Presence::Absent),
        ];
        for ((b, l, f, r), want) in cases {
            assert_eq!(classify(b, l, f, r), want, "{b} {l:?} {f} {r}");
        }
    }

    #[test]
    fn sysfs_and_proc_texts_are_parsed() {
        assert_eq!(
            selected("none [mq-deadline] kyber bfq\n").as_deref(),
            Some("mq-deadline")
        );
        assert_eq!(selected("none\n").as_deref(), Some("none"));
        assert_eq!(selected("none kyber\n"), None);
        assert_eq!(
            selected("[none] integrity confidentiality\n").as_deref(),
            Some("none")
        );
        assert_eq!(
            parse_proc_modules("bfq 98304 1 - Live 0x0\nloop 40960 0 - Live 0x0\n"),
            ["bfq", "loop"]
        );
        assert_eq!(
            parse_modules_builtin("kernel/block/mq-deadline.ko\nkernel/fs/ext4/ext4.ko\n\n"),
            ["mq-deadline", "ext4"]
        );
        assert_eq!(
            parse_modules_dep(
                "kernel/block/kyber-iosched.ko.xz:\nkernel/a/x.ko: kernel/a/y.ko\n\nbogus\n"
            ),
            ["kyber-iosched", "x"]
        );
    }

    /// A fake host: a 6.1 kernel whose kyber is a loaded module, bfq a module file not
    /// loaded, mq-deadline built in; a blk-mq disk on mq-deadline and a bio-based zram
    /// (whose `queue/scheduler` says `none` and which has no `mq`); integrity lockdown; no
    /// BTF, no capabilities.
    #[test]
    fn a_fake_host_is_read_and_judged() {
        let root = std::env::temp_dir().join(format!("iosched-trace-host-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        w("proc/sys/kernel/osrelease", "6.1.0-47-cloud-amd64\n");
        w(
            "proc/self/status",
            "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
        );
        w("proc/modules", "kyber_iosched 20480 0 - Live 0x0\n");
        w(
            "lib/modules/6.1.0-47-cloud-amd64/modules.builtin",
            "kernel/block/mq-deadline.ko\n",
        );
        // bfq only through modules.dep (as in the kernel matrix's guests, whose module files
        // are elsewhere): still a module not loaded, as `record` says.
        w(
            "lib/modules/6.1.0-47-cloud-amd64/modules.dep",
            "kernel/block/bfq.ko.xz:\nkernel/block/kyber-iosched.ko:\n",
        );
        w(
            "lib/modules/6.1.0-47-cloud-amd64/kernel/block/kyber-iosched.ko",
            "",
        );
        w(
            "sys/kernel/security/lockdown",
            "none [integrity] confidentiality\n",
        );
        w("sys/kernel/btf/kyber_iosched", "");
        w("sys/kernel/tracing/trace", "");
        w("sys/kernel/tracing/available_tracers", "blk function nop\n");
        w("sys/kernel/tracing/current_tracer", "nop\n");
        w("sys/block/sdz/dev", "8:0\n");
        w(
            "sys/block/sdz/queue/scheduler",
            "none [mq-deadline] kyber\n",
        );
        fs::create_dir_all(root.join("sys/block/sdz/mq")).unwrap();
        w("sys/block/zram3/dev", "252:3\n");
        w("sys/block/zram3/queue/scheduler", "none\n");

        let facts = Host::at(&root).facts();
        fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            facts.kernel_release.as_deref(),
            Some("6.1.0-47-cloud-amd64")
        );
        assert!(!facts.btf.vmlinux);
        assert_eq!(facts.btf.modules, ["kyber_iosched"]);
        assert_eq!(facts.lockdown.mode.as_deref(), Some("integrity"));
        assert!(!facts.lockdown.forbids_tracing());
        assert_eq!(facts.capabilities.uid, 1000);
        assert_eq!(facts.capabilities.missing.len(), 3);
        let presence: Vec<_> = facts
            .schedulers
            .iter()
            .map(|s| (s.name, s.presence))
            .collect();
        assert_eq!(
            presence,
            [
                ("mq-deadline", Presence::BuiltIn),
                ("bfq", Presence::ModuleNotLoaded),
                ("kyber", Presence::ModuleLoaded),
            ]
        );
        let devices: Vec<_> = facts
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.request_based, d.scheduler.as_deref()))
            .collect();
        assert_eq!(
            devices,
            [
                ("sdz", true, Some("mq-deadline")),
                ("zram3", false, Some("none"))
            ]
        );
        assert!(facts.blk_tracer.available);
        assert_eq!(
            facts.blk_tracer.tracefs.as_deref(),
            Some(Path::new("/sys/kernel/tracing"))
        );
        // Not root: the log's tracefs writes would be refused.
        assert!(!facts.sched_log.works, "{:?}", facts.sched_log);
        // Every tracepoint is missing for want of BTF, and the verdict names the causes.
        assert!(facts.tracepoints.iter().all(|t| t.missing.is_some()));
        let problems = facts.problems().join("\n");
        assert!(
            problems.contains("missing CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN"),
            "{problems}"
        );
        assert!(
            problems.contains("no BTF at /sys/kernel/btf/vmlinux"),
            "{problems}"
        );
        assert!(!problems.contains("required tracepoint"), "{problems}");
    }
}
