//! "Can we trace here?" checks that run before anything is loaded, so a user gets one clear
//! line about privileges or BTF instead of a raw errno from deep inside the loader.
//!
//! Owns: privilege and BTF checks, the memlock bump. Must not: load or attach anything.

use std::path::Path;

pub const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "iosched-trace must run as root (or with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN) to load its eBPF programs; missing: {missing}"
    )]
    Privileges { missing: String },
    #[error(
        "no BTF at {BTF_PATH}: this kernel was built without CONFIG_DEBUG_INFO_BTF, which iosched-trace needs to find the kernel's struct layouts"
    )]
    NoBtf,
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Names of the capabilities (out of those we need) missing from `caps`.
pub fn missing_caps(caps: u64) -> Vec<&'static str> {
    [
        (CAP_BPF, "CAP_BPF"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ]
    .into_iter()
    .filter(|&(bit, _)| caps & (1 << bit) == 0)
    .map(|(_, name)| name)
    .collect()
}

pub fn check_privileges() -> Result<(), PreflightError> {
    let caps = crate::system::effective_capabilities().unwrap_or(0);
    let missing = missing_caps(caps);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PreflightError::Privileges {
            missing: missing.join(", "),
        })
    }
}

pub fn check_btf() -> Result<(), PreflightError> {
    if Path::new(BTF_PATH).exists() {
        Ok(())
    } else {
        Err(PreflightError::NoBtf)
    }
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK. Raising it needs CAP_SYS_RESOURCE,
/// which root lacks on some machines (ours); newer kernels charge the memcg instead, so a
/// failure here is only worth a note.
pub fn bump_memlock() -> Result<(), std::io::Error> {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit reads a valid, initialised struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_caps_are_named() {
        assert_eq!(missing_caps(0), ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN"]);
        let all = (1 << CAP_BPF) | (1 << CAP_PERFMON) | (1 << CAP_SYS_ADMIN);
        assert!(missing_caps(all).is_empty());
        assert_eq!(missing_caps(all & !(1 << CAP_PERFMON)), ["CAP_PERFMON"]);
    }
}
