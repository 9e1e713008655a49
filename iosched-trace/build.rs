//! Builds the eBPF programs (crate `iosched-trace-ebpf`) with nightly + bpf-linker through
//! aya-build, and leaves the object at `$OUT_DIR/iosched-trace` for `include_bytes_aligned!`.
//! `cargo xtask setup` installs what this needs. Also names the commit the binary is built
//! from, for `--version` (`IOSCHED_TRACE_COMMIT`).

use std::{env, fs, path::PathBuf, process::Command};

fn main() -> anyhow::Result<()> {
    commit();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let object = out_dir.join("iosched-trace");
    // With AYA_BUILD_SKIP=1 (docs, `cargo check` without nightly) aya-build builds nothing;
    // an empty object keeps `include_bytes_aligned!` compiling, and the loader reports it.
    if !object.exists() {
        fs::write(&object, [])?;
    }
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?)
        .parent()
        .expect("crate lives in the workspace")
        .join("iosched-trace-ebpf");
    let root = root.to_str().expect("workspace path is UTF-8");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "iosched-trace-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

/// `IOSCHED_TRACE_COMMIT`: the commit `--version` names: `IOSCHED_TRACE_COMMIT` from the
/// environment (a build from a source tarball can pass it), else git's HEAD, else
/// `unknown commit` (no git, or not a checkout). Rebuilt when HEAD or its branch moves.
fn commit() {
    println!("cargo:rerun-if-env-changed=IOSCHED_TRACE_COMMIT");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(env::var_os("CARGO_MANIFEST_DIR")?)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let commit = env::var("IOSCHED_TRACE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]).map(|c| format!("commit {c}")))
        .unwrap_or_else(|| "unknown commit".to_string());
    println!("cargo:rustc-env=IOSCHED_TRACE_COMMIT={commit}");
    // HEAD itself (a checkout of another branch) and the ref it points to (a new commit);
    // `--git-path` resolves both inside a worktree too.
    for path in ["HEAD", "packed-refs"]
        .into_iter()
        .map(str::to_string)
        .chain(git(&["symbolic-ref", "-q", "HEAD"]))
    {
        // Only files that exist: a missing one would rerun this script on every build.
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &path])
            .filter(|p| std::path::Path::new(p).exists())
        {
            println!("cargo:rerun-if-changed={p}");
        }
    }
}
