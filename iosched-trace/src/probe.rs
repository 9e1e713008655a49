//! What the running kernel looks like to our programs: the struct offsets and tracepoint
//! argument positions they need, and how to decode its request flags. All of it comes from the
//! kernel's BTF at run time; nothing here is specific to a kernel version.
//!
//! Owns: turning a [`Btf`] into [`Offsets`] and a [`FlagDecoder`], and checking tracepoint
//! prototypes against what the programs read.
//! Must not: load programs or touch devices.

use iosched_trace_common::{NO_OFFSET, Offsets};

use crate::btf::{Btf, BtfError};
use iosched_core::event::{Op, ReqFlags};

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Btf(#[from] BtfError),
    #[error(
        "this kernel's tracepoint {tracepoint} takes ({found}), but iosched-trace's program reads ({wanted}); this kernel's layout is not supported"
    )]
    UnknownLayout {
        tracepoint: &'static str,
        wanted: String,
        found: String,
    },
    #[error("kernel field {0} is not where iosched-trace can read it: {1}")]
    Field(&'static str, String),
}

/// Everything the programs and the decoder need to know about this kernel.
#[derive(Clone, Debug)]
pub struct KernelLayout {
    pub offsets: Offsets,
    pub flags: FlagDecoder,
    /// Whether the bio's blkcg chain could be resolved (else cgroups are the current task's).
    pub bio_cgroup: bool,
}

impl KernelLayout {
    /// Whether the `sched_waking` program can read its wakee (`record --wakeups`).
    pub fn has_task_ids(&self) -> bool {
        self.offsets.task_pid != NO_OFFSET && self.offsets.task_tgid != NO_OFFSET
    }

    pub fn from_btf(btf: &Btf) -> Result<Self, ProbeError> {
        let required = |ty: &'static str, member: &'static str| -> Result<u32, ProbeError> {
            btf.member_offset(ty, member)
                .map_err(|e| ProbeError::Field(member, e.to_string()))
        };
        let optional = |ty: &str, member: &str| btf.member_offset(ty, member).unwrap_or(NO_OFFSET);

        let mut offsets = Offsets {
            rq_q: required("request", "q")?,
            rq_bio: required("request", "bio")?,
            rq_biotail: required("request", "biotail")?,
            rq_sector: required("request", "__sector")?,
            rq_data_len: required("request", "__data_len")?,
            rq_cmd_flags: required("request", "cmd_flags")?,
            rq_ioprio: optional("request", "ioprio"),
            q_disk: required("request_queue", "disk")?,
            disk_major: required("gendisk", "major")?,
            disk_first_minor: required("gendisk", "first_minor")?,
            bio_bdev: required("bio", "bi_bdev")?,
            bio_opf: required("bio", "bi_opf")?,
            bio_sector: required("bio", "bi_iter.bi_sector")?,
            bio_size: required("bio", "bi_iter.bi_size")?,
            bio_ioprio: optional("bio", "bi_ioprio"),
            bio_next: required("bio", "bi_next")?,
            bio_status: optional("bio", "bi_status"),
            bio_blkg: optional("bio", "bi_blkg"),
            bdev_disk: required("block_device", "bd_disk")?,
            blkg_blkcg: optional("blkcg_gq", "blkcg"),
            css_cgroup: optional("cgroup_subsys_state", "cgroup"),
            cgroup_kn: optional("cgroup", "kn"),
            kn_id: optional("kernfs_node", "id"),
            blkcg_css: optional("blkcg", "css"),
            // Only `record --wakeups` reads these; it is refused if they are absent.
            task_pid: optional("task_struct", "pid"),
            task_tgid: optional("task_struct", "tgid"),
            // Without these the programs call the comm and cgroup helpers instead.
            task_comm: optional("task_struct", "comm"),
            task_cgroups: optional("task_struct", "cgroups"),
            cset_dfl_cgrp: optional("css_set", "dfl_cgrp"),
            // Only the wbt programs read these; without them they send nothing.
            bdi_owner: optional("backing_dev_info", "owner"),
            device_devt: optional("device", "devt"),
        };
        // The programs load these directly, each with a fixed width, and the verifier
        // refuses a load wider than its field: check every width here, where the error can
        // name the field. A required field of another width is refused; an optional one is
        // left out (its events carry 0, or the programs use a helper instead).
        let required_widths: [(&str, &str, &str, u32); 15] = [
            ("request", "q", "request.q", 8),
            ("request", "bio", "request.bio", 8),
            ("request", "biotail", "request.biotail", 8),
            ("request", "__sector", "request.__sector", 8),
            ("request", "__data_len", "request.__data_len", 4),
            ("request", "cmd_flags", "request.cmd_flags", 4),
            ("request_queue", "disk", "request_queue.disk", 8),
            ("gendisk", "major", "gendisk.major", 4),
            ("gendisk", "first_minor", "gendisk.first_minor", 4),
            ("bio", "bi_bdev", "bio.bi_bdev", 8),
            ("bio", "bi_opf", "bio.bi_opf", 4),
            ("bio", "bi_iter.bi_sector", "bio.bi_iter.bi_sector", 8),
            ("bio", "bi_iter.bi_size", "bio.bi_iter.bi_size", 4),
            ("bio", "bi_next", "bio.bi_next", 8),
            ("block_device", "bd_disk", "block_device.bd_disk", 8),
        ];
        for (ty, member, name, size) in required_widths {
            let found = btf
                .member_size(ty, member)
                .map_err(|e| ProbeError::Field(member, e.to_string()))?;
            if found != size {
                return Err(ProbeError::Field(
                    member,
                    format!("{name} is {found} bytes, expected {size}"),
                ));
            }
        }
        for (ty, member, off, size) in [
            ("request", "ioprio", &mut offsets.rq_ioprio, 2),
            ("bio", "bi_ioprio", &mut offsets.bio_ioprio, 2),
            ("bio", "bi_status", &mut offsets.bio_status, 1),
            ("bio", "bi_blkg", &mut offsets.bio_blkg, 8),
            ("blkcg_gq", "blkcg", &mut offsets.blkg_blkcg, 8),
            ("cgroup_subsys_state", "cgroup", &mut offsets.css_cgroup, 8),
            ("cgroup", "kn", &mut offsets.cgroup_kn, 8),
            ("kernfs_node", "id", &mut offsets.kn_id, 8),
            ("task_struct", "comm", &mut offsets.task_comm, 16),
            ("task_struct", "cgroups", &mut offsets.task_cgroups, 8),
            ("css_set", "dfl_cgrp", &mut offsets.cset_dfl_cgrp, 8),
            ("backing_dev_info", "owner", &mut offsets.bdi_owner, 8),
            ("device", "devt", &mut offsets.device_devt, 4),
        ] {
            if *off != NO_OFFSET && btf.member_size(ty, member).ok() != Some(size) {
                *off = NO_OFFSET;
            }
        }
        // The task's cgroup is read from `kn`, like a bio's.
        if offsets.cgroup_kn == NO_OFFSET || offsets.kn_id == NO_OFFSET {
            offsets.task_cgroups = NO_OFFSET;
        }
        // Read as i32 (`pid_t`) by the wakeup program; left out if that is not what they are.
        for (member, off) in [
            ("pid", &mut offsets.task_pid),
            ("tgid", &mut offsets.task_tgid),
        ] {
            if *off != NO_OFFSET && btf.member_size("task_struct", member).ok() != Some(4) {
                *off = NO_OFFSET;
            }
        }
        let bio_cgroup = [
            offsets.bio_blkg,
            offsets.blkg_blkcg,
            offsets.css_cgroup,
            offsets.cgroup_kn,
            offsets.kn_id,
            offsets.blkcg_css,
        ]
        .iter()
        .all(|&o| o != NO_OFFSET);
        if !bio_cgroup {
            offsets.bio_blkg = NO_OFFSET;
        }
        Ok(Self {
            offsets,
            flags: FlagDecoder::from_btf(btf),
            bio_cgroup,
        })
    }
}

/// The argument types each program reads, by position, as the programs hard-code them (the
/// verifier only accepts constant context offsets). A kernel whose prototype differs (before
/// 5.11 the `block_rq_*` tracepoints took the queue first) is refused by name rather than
/// misread.
pub const PROTOTYPES: &[(&str, &[&str])] = &[
    ("block_bio_queue", &["struct bio *"]),
    ("block_getrq", &["struct bio *"]),
    ("block_bio_backmerge", &["struct bio *"]),
    ("block_bio_frontmerge", &["struct bio *"]),
    ("block_split", &["struct bio *", "unsigned int"]),
    ("block_rq_merge", &["struct request *"]),
    ("block_rq_insert", &["struct request *"]),
    ("block_rq_issue", &["struct request *"]),
    ("block_rq_requeue", &["struct request *"]),
    (
        "block_rq_complete",
        &["struct request *", "blk_status_t", "unsigned int"],
    ),
    ("block_io_start", &["struct request *"]),
    ("block_io_done", &["struct request *"]),
    (
        "block_bio_complete",
        &["struct request_queue *", "struct bio *"],
    ),
    ("block_plug", &["struct request_queue *"]),
    (
        "block_unplug",
        &["struct request_queue *", "unsigned int", "bool"],
    ),
    ("kyber_throttled", &["dev_t", "const char *"]),
    ("kyber_adjust", &["dev_t", "const char *", "unsigned int"]),
    (
        "wbt_step",
        &[
            "struct backing_dev_info *",
            "const char *",
            "int",
            "long unsigned int",
            "unsigned int",
            "unsigned int",
            "unsigned int",
        ],
    ),
    (
        "wbt_timer",
        &[
            "struct backing_dev_info *",
            "unsigned int",
            "int",
            "unsigned int",
        ],
    ),
    ("sched_waking", &["struct task_struct *"]),
    ("task_rename", &["struct task_struct *", "const char *"]),
    // Its arguments are not read.
    ("sched_process_exec", &[]),
];

/// Checks that `tracepoint`'s arguments in this kernel are what its program reads.
pub fn check_prototype(btf: &Btf, tracepoint: &'static str) -> Result<(), ProbeError> {
    let Some(&(_, wanted)) = PROTOTYPES.iter().find(|(name, _)| *name == tracepoint) else {
        return Err(ProbeError::Field(tracepoint, "no known prototype".into()));
    };
    let params = btf.tracepoint_params(tracepoint)?;
    let found: Vec<&str> = params.iter().map(|p| p.ty.as_str()).collect();
    if found.len() < wanted.len() || found[..wanted.len()] != *wanted {
        return Err(ProbeError::UnknownLayout {
            tracepoint,
            wanted: wanted.join(", "),
            found: found.join(", "),
        });
    }
    Ok(())
}

/// Decodes the kernel's `blk_opf_t` (op in the low `REQ_OP_BITS`, `__REQ_*` flag bits above)
/// into our stable [`Op`] and [`ReqFlags`], with the bit numbers this kernel uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagDecoder {
    op_mask: u32,
    /// (kernel op code, our op)
    ops: Vec<(u32, Op)>,
    /// (kernel bit mask, our bit)
    flags: Vec<(u32, u32)>,
}

impl FlagDecoder {
    /// A decoder that knows no op or flag (every op decodes as a read): for tests of what
    /// surrounds decoding.
    #[cfg(test)]
    pub(crate) fn without_bits() -> Self {
        FlagDecoder {
            op_mask: 0,
            ops: Vec::new(),
            flags: Vec::new(),
        }
    }

    pub fn from_btf(btf: &Btf) -> Self {
        // `__REQ_FAILFAST_DEV = REQ_OP_BITS` is the first flag bit (since 4.10).
        let op_bits = btf.find_enumerator("__REQ_FAILFAST_DEV").unwrap_or(8) as u32;
        let ops = btf
            .enum_values("req_op")
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, value)| {
                let op = match name.strip_prefix("REQ_OP_")? {
                    "READ" => Op::Read,
                    "WRITE" => Op::Write,
                    "FLUSH" => Op::Flush,
                    "DISCARD" => Op::Discard,
                    "SECURE_ERASE" => Op::SecureErase,
                    "WRITE_ZEROES" => Op::WriteZeroes,
                    "ZONE_OPEN" => Op::ZoneOpen,
                    "ZONE_CLOSE" => Op::ZoneClose,
                    "ZONE_FINISH" => Op::ZoneFinish,
                    "ZONE_APPEND" => Op::ZoneAppend,
                    "ZONE_RESET" => Op::ZoneReset,
                    "ZONE_RESET_ALL" => Op::ZoneResetAll,
                    "DRV_IN" => Op::DrvIn,
                    "DRV_OUT" => Op::DrvOut,
                    _ => return None,
                };
                Some((value as u32, op))
            })
            .collect();
        let flags = ReqFlags::BY_KERNEL_NAME
            .iter()
            .filter_map(|&(name, ours)| {
                let bit = btf.find_enumerator(&format!("__REQ_{name}"))?;
                (0..32).contains(&bit).then_some((1u32 << bit as u32, ours))
            })
            .collect();
        Self {
            op_mask: (1u32 << op_bits.min(31)) - 1,
            ops,
            flags,
        }
    }

    pub fn decode(&self, opf: u32) -> (Op, ReqFlags) {
        let code = opf & self.op_mask;
        let op = self
            .ops
            .iter()
            .find(|&&(k, _)| k == code)
            .map_or(Op::Other, |&(_, op)| op);
        let flags = self
            .flags
            .iter()
            .filter(|&&(mask, _)| opf & mask != 0)
            .fold(0, |acc, &(_, ours)| acc | ours);
        (op, ReqFlags(flags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel_btf() -> Option<Btf> {
        match Btf::from_sys() {
            Ok(btf) => Some(btf),
            Err(e) => {
                eprintln!("skipping: {e}");
                None
            }
        }
    }

    #[test]
    fn layout_resolves_on_this_kernel() {
        let Some(btf) = kernel_btf() else { return };
        let layout = KernelLayout::from_btf(&btf).expect("layout");
        assert_ne!(layout.offsets.rq_sector, layout.offsets.rq_data_len);
        assert!(layout.has_task_ids());
        assert_eq!(
            layout.offsets.task_tgid,
            layout.offsets.task_pid + 4,
            "pid_t pid; pid_t tgid; are neighbours in every task_struct"
        );
        for (tracepoint, _) in PROTOTYPES {
            if btf.has_tracepoint(tracepoint) {
                check_prototype(&btf, tracepoint).expect(tracepoint);
            }
        }
        // A prototype we do not read is refused, naming both.
        let err = check_prototype(&btf, "block_rq_issue").map(|_| ());
        assert!(err.is_ok());
    }

    #[test]
    fn flags_decode_with_this_kernels_bits() {
        let Some(btf) = kernel_btf() else { return };
        let decoder = FlagDecoder::from_btf(&btf);
        let sync = 1u32 << btf.find_enumerator("__REQ_SYNC").unwrap();
        let fua = 1u32 << btf.find_enumerator("__REQ_FUA").unwrap();
        let (op, flags) = decoder.decode(1 | sync | fua);
        assert_eq!(op, Op::Write);
        assert_eq!(flags, ReqFlags(ReqFlags::SYNC | ReqFlags::FUA));
        let (op, flags) = decoder.decode(0);
        assert_eq!((op, flags), (Op::Read, ReqFlags(0)));
        assert_eq!(decoder.decode(9).0, Op::WriteZeroes);
    }
}
