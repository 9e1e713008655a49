//! Builds the eBPF programs (crate `iosched-trace-ebpf`) with nightly + bpf-linker through
//! aya-build, and leaves the object at `$OUT_DIR/iosched-trace` for `include_bytes_aligned!`.
//! `cargo xtask setup` installs what this needs.

use std::{env, fs, path::PathBuf};

fn main() -> anyhow::Result<()> {
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
