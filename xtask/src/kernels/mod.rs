//! `cargo xtask kernels`: the kernel matrix. Boots Debian's 6.1 and 6.12 kernels in qemu and
//! runs the real-kernel tests that depend most on the kernel inside them (docs/KERNELS.md).
//!
//! One concern per child module, and this file passes data between them (siblings never call
//! each other): `fetch` gets a kernel package and unpacks it into the cache, `initramfs`
//! writes the guest's root (a newc cpio of busybox, modules, binaries and their libraries),
//! `qemu` boots it and reads the serial console back, `plan` says what runs inside (the
//! guest's /init) and reads the results out of the console text.

mod fetch;
mod initramfs;
mod plan;
mod qemu;

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

use crate::cmd;

/// A kernel of the matrix: a Debian package pinned to a version that downloads here.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// What `--kernel` takes and the summary shows.
    pub name: &'static str,
    pub package: &'static str,
    pub version: &'static str,
    /// `uname -r` of the kernel (the directory under /lib/modules).
    pub release: &'static str,
}

/// Debian 12's own kernel (the cloud flavour: small, with BTF for vmlinux and modules) and
/// the 6.12 that bookworm-security ships. Superseded versions leave the mirrors; then pin the
/// current one (`apt-cache search linux-image-6.12 cloud-amd64-unsigned`) after checking it
/// boots (the cache keeps a machine on the version it already has).
pub const KERNELS: &[Kernel] = &[
    Kernel {
        name: "6.1",
        package: "linux-image-6.1.0-47-cloud-amd64-unsigned",
        version: "6.1.170-3",
        release: "6.1.0-47-cloud-amd64",
    },
    Kernel {
        name: "6.12",
        package: "linux-image-6.12.118+deb12-cloud-amd64-unsigned",
        version: "6.12.118-1~deb12u1",
        release: "6.12.118+deb12-cloud-amd64",
    },
];

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum KernelChoice {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
}

#[derive(Args, Debug)]
pub struct KernelsArgs {
    /// The iosched-trace binary to run in the guests (default: a fresh release build).
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// Boot only this kernel (default: all of them).
    #[arg(long)]
    kernel: Option<KernelChoice>,
    /// Seconds a guest may run before qemu is killed and the kernel counts as failed.
    #[arg(long, default_value_t = 600, value_name = "S")]
    timeout: u64,
    /// Keep each guest's initramfs and serial log in DIR/<kernel>/ (default: under the
    /// target directory, replaced on each run).
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Also run this test in every guest, after the plan's (repeatable): TARGET::NAME, a
    /// test of tests/tests/TARGET.rs, e.g. the bfq prediction on a RAM device, which is not
    /// in the matrix (docs/KERNELS.md).
    #[arg(long, value_name = "TARGET::NAME")]
    also: Vec<String>,
    /// Run only the `--also` tests, not the matrix's (a measurement in a guest, not a check
    /// of the tool on that kernel).
    #[arg(long, requires = "also")]
    only_also: bool,
    /// The guest's virtual CPUs. Under TCG one host thread runs them all in turn, so a vCPU
    /// holding a lock can be switched out while another spins on it: lock-heavy work (bfq)
    /// costs erratically with more than one (docs/KERNELS.md).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    cpus: u32,
}

/// How each guest runs.
#[derive(Clone, Copy, Debug)]
struct GuestSetup {
    /// Seconds before qemu is killed.
    timeout: u64,
    cpus: u32,
    /// Run the matrix's tests before the `--also` ones.
    matrix: bool,
}

/// One kernel's run, for the summary.
struct KernelRun {
    kernel: &'static str,
    booted: Option<String>,
    wall: Duration,
    results: Vec<plan::TestResult>,
    problem: Option<String>,
}

pub fn run(args: &KernelsArgs) -> anyhow::Result<()> {
    for tool in [
        "qemu-system-x86_64",
        "apt-get",
        "dpkg",
        "depmod",
        "xz",
        "ldd",
        "losetup",
        "mkfs.ext4",
        "fio",
        "blkparse",
        "btt",
    ] {
        if cmd::find_program(tool).is_none() {
            bail!("{tool} not found: run `cargo xtask setup` (as root) first");
        }
    }
    let busybox = Path::new(initramfs::BUSYBOX);
    anyhow::ensure!(
        busybox.is_file(),
        "{} not found: install busybox-static (`cargo xtask setup`)",
        busybox.display()
    );
    let bin = match &args.bin {
        Some(bin) => {
            anyhow::ensure!(bin.is_file(), "--bin {}: no such file", bin.display());
            bin.clone()
        }
        None => crate::build()?,
    };
    let also = args
        .also
        .iter()
        .map(|spec| plan::extra_test(spec).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let tests = test_executables()?;
    let kernels: Vec<Kernel> = match args.kernel {
        None => KERNELS.to_vec(),
        Some(KernelChoice::V6_1) => vec![KERNELS[0]],
        Some(KernelChoice::V6_12) => vec![KERNELS[1]],
    };
    let work = match &args.keep {
        Some(dir) => dir.clone(),
        None => cmd::target_dir()?.join("kernels"),
    };
    let cache = fetch::cache_dir()?;

    let mut runs = Vec::new();
    for kernel in &kernels {
        let started = Instant::now();
        println!(
            "kernels: {} ({} {})",
            kernel.name, kernel.package, kernel.version
        );
        let setup = GuestSetup {
            timeout: args.timeout,
            cpus: args.cpus,
            matrix: !args.only_also,
        };
        let run = match run_one(kernel, &cache, &work, &bin, &tests, &also, setup) {
            Ok(mut run) => {
                run.wall = started.elapsed();
                run
            }
            Err(e) => KernelRun {
                kernel: kernel.name,
                booted: None,
                wall: started.elapsed(),
                results: Vec::new(),
                problem: Some(format!("{e:#}")),
            },
        };
        runs.push(run);
    }

    println!();
    println!("kernels: summary");
    let mut failed = 0;
    for run in &runs {
        let passed = run.results.iter().filter(|r| r.passed).count();
        println!(
            "  {:<5} {:>6.1} s  {}/{} passed  {}",
            run.kernel,
            run.wall.as_secs_f64(),
            passed,
            run.results.len(),
            run.booted.as_deref().unwrap_or("(did not boot)")
        );
        for r in &run.results {
            println!(
                "        {} {:<56} {:>6.1} s",
                if r.passed { "PASS" } else { "FAIL" },
                r.label,
                r.seconds
            );
        }
        if let Some(problem) = &run.problem {
            println!("        problem: {problem}");
        }
        if run.problem.is_some() || passed != run.results.len() || run.results.is_empty() {
            failed += 1;
        }
    }
    if failed > 0 {
        bail!(
            "{failed} of {} kernels failed (serial logs in {})",
            runs.len(),
            work.display()
        );
    }
    Ok(())
}

fn run_one(
    kernel: &Kernel,
    cache: &Path,
    work: &Path,
    bin: &Path,
    tests: &[(String, PathBuf)],
    also: &[plan::GuestTest],
    setup: GuestSetup,
) -> anyhow::Result<KernelRun> {
    let t = Instant::now();
    let fetched = fetch::fetch(kernel, cache)?;
    println!(
        "kernels: {}: kernel ready in {:.1} s",
        kernel.name,
        t.elapsed().as_secs_f64()
    );

    let config = fs::read_to_string(&fetched.config)
        .with_context(|| format!("reading {}", fetched.config.display()))?;
    let features = plan::Features::from_config(&config);
    let mut guest_tests = if setup.matrix {
        plan::tests(&features)
    } else {
        Vec::new()
    };
    guest_tests.extend(also.iter().cloned());
    let modules = initramfs::modules_in_order(&fetched.modules, &features.modules)?;

    let dir = work.join(kernel.name);
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let t = Instant::now();
    let mut root = initramfs::Root::new();
    root.busybox(plan::APPLETS)?;
    // The host's tools, with the libraries they link: the guest runs the same Debian 12
    // userland as this machine.
    for tool in plan::HOST_TOOLS {
        let path = cmd::find_program(tool).with_context(|| format!("{tool} not found"))?;
        root.executable(&path, &Path::new("/bin").join(tool))?;
    }
    // dist's static binary brings no library (the test executables bring theirs).
    let libs = root.executable(bin, Path::new(plan::GUEST_BIN))?;
    println!(
        "kernels: {}: recorder {}: {}",
        kernel.name,
        bin.display(),
        if libs == 0 {
            "statically linked, no library copied for it".to_string()
        } else {
            format!("dynamic, {libs} libraries")
        }
    );
    for test in &guest_tests {
        let host = tests
            .iter()
            .find(|(name, _)| *name == test.target)
            .map(|(_, path)| path)
            .with_context(|| format!("no test executable for tests/tests/{}.rs", test.target))?;
        root.executable(host, &Path::new(plan::GUEST_TESTS).join(&test.target))?;
    }
    let mut loads = Vec::new();
    for module in &modules {
        let guest = root.module(module)?;
        let params = plan::module_params(&module.name);
        loads.push((guest, params));
    }
    // What the recorder and `check` read to tell a scheduler module from an absent
    // scheduler, and (check) a built-in one from a module.
    for list in ["modules.dep", "modules.builtin"] {
        root.file(
            &fetched.modules.join(list),
            &Path::new("/lib/modules").join(kernel.release).join(list),
        );
    }
    root.script(Path::new("/init"), &plan::init_script(&loads, &guest_tests))?;
    let initrd = dir.join("initramfs.cpio");
    let size = root.write(&initrd)?;
    println!(
        "kernels: {}: initramfs {} ({:.0} MiB, {} modules) in {:.1} s",
        kernel.name,
        initrd.display(),
        size as f64 / (1 << 20) as f64,
        modules.len(),
        t.elapsed().as_secs_f64()
    );

    let serial = dir.join("serial.log");
    let outcome = qemu::boot(&qemu::Boot {
        kernel: fetched.vmlinuz.clone(),
        initrd,
        serial: serial.clone(),
        timeout: Duration::from_secs(setup.timeout),
        cpus: setup.cpus,
        marker: plan::MARK,
    })?;
    println!(
        "kernels: {}: qemu ran {:.1} s",
        kernel.name,
        outcome.elapsed.as_secs_f64()
    );
    let parsed = plan::parse(&outcome.serial);
    let mut problem = None;
    if outcome.timed_out {
        problem = Some(format!(
            "qemu killed after {} s (serial log: {})",
            setup.timeout,
            serial.display()
        ));
    } else if !parsed.done {
        problem = Some(format!(
            "the guest stopped before its last test (serial log: {})",
            serial.display()
        ));
    }
    for note in &parsed.notes {
        println!("kernels: {}: guest: {note}", kernel.name);
    }
    if parsed.results.len() < guest_tests.len() && problem.is_none() {
        problem = Some(format!(
            "{} of {} tests reported (serial log: {})",
            parsed.results.len(),
            guest_tests.len(),
            serial.display()
        ));
    }
    Ok(KernelRun {
        kernel: kernel.name,
        booted: parsed.booted,
        wall: Duration::ZERO,
        results: parsed.results,
        problem,
    })
}

/// `cargo test --release -p iosched-trace-tests --no-run`: the real-kernel test executables,
/// as (test target name, path).
fn test_executables() -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut c = cmd::cargo();
    c.args([
        "test",
        "--release",
        "-p",
        "iosched-trace-tests",
        "--no-run",
        "--message-format=json",
    ]);
    let out = cmd::output(&mut c)?;
    let mut found = Vec::new();
    for line in out.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        if let (Some(name), Some(exe)) =
            (msg["target"]["name"].as_str(), msg["executable"].as_str())
        {
            found.push((name.to_string(), PathBuf::from(exe)));
        }
    }
    anyhow::ensure!(
        !found.is_empty(),
        "`{}` listed no test executables",
        cmd::display(&c)
    );
    Ok(found)
}
