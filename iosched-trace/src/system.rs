//! What the host says about itself, read from `/proc` and `/sys`: its mount table, its
//! cgroup hierarchies (where cgroup2 is, whether the io controller is on v1, a cgroup id's
//! path), this process's capabilities, a disk's completion counters, and the machine's and
//! this process's CPU time.
//!
//! Owns: reading and parsing those files, each in one place. Must not: change anything
//! (raising limits is `preflight`'s, tracefs settings `schedlog`'s), nor decide what a fact
//! means for a capture. Naming disks from sysfs is `devices`'s; a device's settings for the
//! recording header are read by `iosched_core::record` (`DeviceInfo::from_sysfs`).

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use iosched_core::record::{ClockBase, CpuSample, DiskCounters, parse_pid_stat_cpu};

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount point, as the kernel writes it (spaces and such octal-escaped, `\040`).
    pub dir: PathBuf,
    pub fstype: String,
    /// Mount options (`rw`, `nosuid`, and for a cgroup v1 hierarchy its controllers).
    pub options: Vec<String>,
}

/// This process's mount table (`/proc/self/mounts`); empty if it cannot be read.
pub fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|text| parse_mounts(&text))
        .unwrap_or_default()
}

/// The lines of a `/proc/self/mounts` (fstab format: device, directory, type, options, ...);
/// lines without a type are skipped.
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_device, dir, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            Some(Mount {
                dir: PathBuf::from(dir),
                fstype: fstype.to_string(),
                options: fields
                    .next()
                    .map(|o| o.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup` or `/sys/fs/cgroup/unified`).
pub fn cgroup2_root() -> Option<PathBuf> {
    cgroup2_root_in(&mounts())
}

fn cgroup2_root_in(mounts: &[Mount]) -> Option<PathBuf> {
    mounts
        .iter()
        .find(|m| m.fstype == "cgroup2")
        .map(|m| m.dir.clone())
}

/// Where the v1 `blkio` hierarchy is mounted, on hybrid hosts that keep the io controller
/// there.
pub fn blkio_v1_root() -> Option<PathBuf> {
    mounts()
        .into_iter()
        .find(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "blkio"))
        .map(|m| m.dir)
}

/// Whether the block I/O controller is on a cgroup v1 hierarchy (a `blkio` mount, on
/// hybrid hosts): a bio's blkcg is then a v1 cgroup, whose ids are not cgroup2 ids.
pub fn blkio_on_cgroup_v1() -> bool {
    blkio_on_cgroup_v1_in(&mounts())
}

fn blkio_on_cgroup_v1_in(mounts: &[Mount]) -> bool {
    mounts
        .iter()
        .any(|m| m.fstype == "cgroup" && m.options.iter().any(|o| o == "blkio"))
}

/// cgroup v2 id -> path. The id is the cgroup directory's inode number in the cgroup2
/// filesystem, so a walk of that mount finds it (only that mount: hybrid hosts also mount a
/// tmpfs and v1 hierarchies under /sys/fs/cgroup, whose inode numbers collide). The walk is
/// redone, at most once a second, for ids not yet known.
#[derive(Default)]
pub struct CgroupPaths {
    known: HashMap<u64, String>,
    last_walk: Option<Instant>,
    /// The hierarchy the ids are from when it is not cgroup2's (`in_hierarchy`).
    root: Option<PathBuf>,
}

impl CgroupPaths {
    /// Ids of the hierarchy mounted at `root` (the v1 blkio one, whose ids a bio's blkcg
    /// carries on hybrid hosts), not cgroup2's.
    pub fn in_hierarchy(root: PathBuf) -> Self {
        Self {
            root: Some(root),
            ..Self::default()
        }
    }

    /// The path of cgroup `id` below the cgroup2 root (`/` for the root), if it is known or
    /// a walk finds it; `None` for id 0 (no cgroup).
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.known.contains_key(&id)
            && self
                .last_walk
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            self.walk();
        }
        self.known.get(&id).cloned()
    }

    fn walk(&mut self) {
        use std::os::unix::fs::MetadataExt;
        self.last_walk = Some(Instant::now());
        let Some(root) = self.root.clone().or_else(cgroup2_root) else {
            return;
        };
        let Ok(root_meta) = std::fs::metadata(&root) else {
            return;
        };
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else {
                continue;
            };
            if meta.dev() != root_meta.dev() {
                continue;
            }
            let relative = dir
                .strip_prefix(&root)
                .map(|p| format!("/{}", p.display()))
                .unwrap_or_default();
            self.known.insert(meta.ino(), relative);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .filter_map(|e| e.ok())
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
    }
}

/// This process's effective capabilities (`CapEff` of `/proc/self/status`).
pub fn effective_capabilities() -> Option<u64> {
    parse_cap_eff(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The `CapEff:` mask of a `/proc/PID/status` text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Reads `/sys/block/<name>/stat` now (Documentation/block/stat.rst: fields 1, 5 and 12
/// are reads, writes and discards completed, field 9 the requests in flight; kernels
/// before 4.18 have no discard fields).
pub fn read_disk_counters(name: &str) -> io::Result<DiskCounters> {
    read_disk_counters_at(Path::new("/sys/block"), name)
}

/// As [`read_disk_counters`] under another root than `/sys/block` (tests).
pub fn read_disk_counters_at(root: &Path, name: &str) -> io::Result<DiskCounters> {
    let path = root.join(name).join("stat");
    let text = std::fs::read_to_string(&path)?;
    let ts_ns = iosched_core::record::ClockBase::now().monotonic_ns;
    DiskCounters::parse_stat(&text, ts_ns).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a block device stat line: {text:?}", path.display()),
        )
    })
}

/// The machine's and this process's CPU time now (a CPU chunk's sample): `/proc/stat`'s
/// `cpu` line, `getrusage(RUSAGE_SELF)` (all threads), the CPUs online. A `/proc/stat` that
/// cannot be read or parsed gives zero machine times (never an error: a recording goes on
/// without its CPU context).
pub fn cpu_sample() -> CpuSample {
    let (busy_ns, idle_ns) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| parse_proc_stat_cpu(&text, clock_tick_ns()))
        .unwrap_or_default();
    CpuSample {
        ts_ns: ClockBase::now().monotonic_ns,
        busy_ns,
        idle_ns,
        recorder_ns: self_cpu_ns(),
        online_cpus: online_cpus(),
    }
}

/// CPUs online now (`sysconf(_SC_NPROCESSORS_ONLN)`, at least 1).
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).unwrap_or(1).max(1)
}

/// Nanoseconds per USER_HZ tick, the unit of `/proc/stat` (`sysconf(_SC_CLK_TCK)`, 100 on
/// nearly every kernel).
fn clock_tick_ns() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// This process's CPU time, user + system, all threads, ns.
pub fn self_cpu_ns() -> u64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF and a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// CPU time of every user-space process but this one, ns, for telling a measurement's own
/// CPU use from other work on the machine: per process `utime + stime + cutime + cstime` of
/// `/proc/PID/stat` (the whole thread group, and its children reaped so far, so that a
/// process that exits between two readings still counts, in its parent's), summed; kernel
/// threads (kthreadd and its children) are left out, as they do the I/O's work. Tick
/// resolution (`sysconf(_SC_CLK_TCK)`).
pub fn other_processes_cpu_ns() -> u64 {
    let me = std::process::id();
    let tick = clock_tick_ns();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && pid != 2)
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|text| parse_pid_stat_cpu(&text))
        .filter(|&(ppid, _)| ppid != 2)
        .map(|(_, ticks)| ticks * tick)
        .sum()
}

/// `(busy, idle)` ns of `/proc/stat`'s aggregate `cpu` line (proc(5): user nice system idle
/// iowait irq softirq steal guest guest_nice, in ticks of `tick_ns`): busy = user + nice +
/// system + irq + softirq + steal (guest time is already counted in user and nice), idle =
/// idle + iowait. `None` without such a line.
pub fn parse_proc_stat_cpu(text: &str, tick_ns: u64) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    if f.len() < 4 {
        return None;
    }
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    let idle = at(3) + at(4);
    Some((busy * tick_ns, idle * tick_ns))
}

/// A reader of a stream (`-`, a FIFO) lets Ctrl-C pass: in `record -o - | report -` the
/// terminal's SIGINT reaches both, and the recorder ends on it, closing the stream, after
/// which the reader reports what it read. Killed on it, the reader would print nothing.
/// (SIGTERM and a closed output still end it.)
pub fn let_interrupt_pass_for_stream(path: &Path) {
    if iosched_core::trace_file::is_stream(path) {
        // SAFETY: installs the ignore disposition; no handler runs.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_cpu_line_is_busy_and_idle_in_ns() {
        let text = "cpu  100 5 50 1000 20 3 2 1 7 0\ncpu0 50 2 25 500 10 1 1 0 0 0\nintr 1\n";
        // busy 100+5+50+3+2+1 = 161 ticks, idle 1000+20; guest (7) not added again.
        assert_eq!(
            parse_proc_stat_cpu(text, 10_000_000),
            Some((1_610_000_000, 10_200_000_000))
        );
        // An old kernel's four fields.
        assert_eq!(parse_proc_stat_cpu("cpu 1 2 3 4\n", 1), Some((6, 4)));
        assert_eq!(parse_proc_stat_cpu("cpu0 1 2 3 4\n", 1), None);
        assert_eq!(parse_proc_stat_cpu("cpu 1 x 3 4\n", 1), None);
    }

    #[test]
    fn other_processes_use_cpu_time() {
        assert!(other_processes_cpu_ns() > 0);
    }

    #[test]
    fn this_hosts_sample_moves_forward() {
        let a = cpu_sample();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = cpu_sample();
        assert!(b.ts_ns > a.ts_ns && b.recorder_ns >= a.recorder_ns);
        assert!(a.busy_ns + a.idle_ns > 0 && a.online_cpus >= 1);
    }

    /// A hybrid host's table (systemd's layout): a tmpfs, cgroup2 at `unified`, v1
    /// hierarchies beside it, one of them with the io controller.
    const HYBRID: &str = "\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/blkio cgroup rw,nosuid,nodev,noexec,relatime,blkio 0 0
";

    #[test]
    fn mounts_are_parsed_and_cgroup_hierarchies_found() {
        let mounts = parse_mounts(HYBRID);
        assert_eq!(mounts.len(), 5);
        assert_eq!(mounts[2].fstype, "cgroup2");
        assert_eq!(
            cgroup2_root_in(&mounts).as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(blkio_on_cgroup_v1_in(&mounts));
        // cgroup2 only: no v1 blkio, and cgroup2's options never count as controllers.
        let unified = parse_mounts(
            "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,blkio 0 0\n\
             short line\n",
        );
        assert_eq!(unified.len(), 1);
        assert_eq!(
            cgroup2_root_in(&unified).as_deref(),
            Some(Path::new("/sys/fs/cgroup"))
        );
        assert!(!blkio_on_cgroup_v1_in(&unified));
        // A line without options is still a mount, with none.
        assert_eq!(
            parse_mounts("none /x cgroup\n")[0].options,
            Vec::<String>::new()
        );
    }

    #[test]
    fn cgroup_root_resolves_when_cgroup2_is_mounted() {
        use std::os::unix::fs::MetadataExt;
        let Some(meta) = cgroup2_root().and_then(|r| std::fs::metadata(r).ok()) else {
            return;
        };
        let mut paths = CgroupPaths::default();
        assert_eq!(paths.path(meta.ino()).as_deref(), Some("/"));
        assert_eq!(paths.path(0), None);
    }
}
