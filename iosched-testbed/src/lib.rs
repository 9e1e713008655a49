//! An emulated rotational disk for scheduler experiments on machines that have only fast
//! virtual disks.
//!
//! - the service time of a 7200 rpm-like disk is `iosched-disk`'s (pure, no I/O), shared with
//!   the scheduler model's device fit.
//! - [`fuse`]: the FUSE kernel protocol, the part of it a one-file server needs.
//! - [`daemon`]: `iosched-hdd`, which serves one file through FUSE and answers each request
//!   only after the model's service time: one request at a time (rotational), or on N
//!   parallel channels (`--kind flash`, `iosched_disk::flash`).
//! - [`rig`]: the daemon plus a direct-I/O loop device on top, brought up and torn down as
//!   one guard (used by `cargo xtask disk` and by the real-kernel tests).
//! - [`scenario`]: the seed scenarios (the users' reports) run on that disk, each run
//!   recorded and reported by `iosched-trace` (used by `cargo xtask scenario` and the tests).
//!
//! And the scratch resources every experiment from outside the product uses (the scenarios,
//! `cargo xtask`, the real-kernel tests), each a guard undone on drop:
//! - [`tempdir`]: a directory of our own; [`loop_device`]: a direct-I/O loop device on a
//!   file of ours, queue settings restored; [`recorder`]: `iosched-trace record` as a child;
//!   [`mounts`]: the mount table, read.

pub mod args;
pub mod daemon;
pub mod fuse;
pub mod loop_device;
pub mod mounts;
pub mod recorder;
pub mod rig;
pub mod scenario;
pub mod tempdir;
