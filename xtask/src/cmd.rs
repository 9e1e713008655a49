//! Running external commands: echo, status checks with context, PATH lookup, root check.

use std::{
    env,
    ffi::OsStr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Cargo's target directory, as cargo itself sees it (honours CARGO_TARGET_DIR and config).
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let out = output(cargo().args(["metadata", "--no-deps", "--format-version", "1"]))?;
    let meta: serde_json::Value =
        serde_json::from_str(&out).context("parsing `cargo metadata` output")?;
    let dir = meta["target_directory"]
        .as_str()
        .context("`cargo metadata` output has no target_directory")?;
    Ok(PathBuf::from(dir))
}

/// `cargo` through the rustup proxy on PATH, run from the workspace root.
///
/// Not `$CARGO`: under `cargo run` that is the toolchain's own cargo binary, which does not
/// understand `+nightly`.
pub fn cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root());
    cmd
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Fails with one clear line unless we are root.
pub fn require_root(what: &str, why: &str) -> anyhow::Result<()> {
    if !is_root() {
        bail!("`cargo xtask {what}` must run as root ({why})");
    }
    Ok(())
}

/// A shell-like rendering of a command, for echoing and error messages.
pub fn display(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(arg: &OsStr) -> String {
    let s = arg.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Echoes and runs `cmd` with inherited stdio; fails unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = display(cmd);
    eprintln!("+ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` quietly and returns its stdout; fails (with its stderr) unless it exits 0.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let shown = display(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start `{shown}`"))?;
    if !out.status.success() {
        bail!(
            "`{shown}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{shown}` printed non-UTF-8 output"))
}

/// Whether `cmd` runs and exits 0, with all output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Finds an executable on PATH, plus the sbin directories a non-login root shell may lack.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = env::var_os("PATH").unwrap_or_default();
    env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_what_needs_it() {
        let mut cmd = Command::new("fio");
        cmd.args(["--name=bench", "a b", "it's"]).env("CI", "1");
        assert_eq!(display(&cmd), r"CI=1 fio --name=bench 'a b' 'it'\''s'");
    }
}
