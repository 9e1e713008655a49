//! Tests against the running kernel's BTF (skipped where it has none).

use std::path::Path;

use crate::btf::{Btf, Param, VMLINUX_BTF};

fn sys_btf() -> Option<Btf> {
    if !Path::new(VMLINUX_BTF).exists() {
        eprintln!("note: {VMLINUX_BTF} does not exist; skipping test against the real kernel");
        return None;
    }
    Some(Btf::from_sys().expect("the kernel's BTF parses"))
}

#[test]
fn btf_vmlinux_facts() {
    let Some(btf) = sys_btf() else { return };
    for m in ["__sector", "__data_len", "cmd_flags", "bio", "q"] {
        btf.member_offset("request", m)
            .unwrap_or_else(|e| panic!("request.{m}: {e}"));
    }
    assert_eq!(btf.member_size("request", "__sector").unwrap(), 8);
    btf.member_offset("bio", "bi_iter.bi_sector").unwrap();
    assert_eq!(btf.member_size("bio", "bi_iter.bi_sector").unwrap(), 8);
    let tys = |tp: &str| -> Vec<String> {
        btf.tracepoint_params(tp)
            .unwrap_or_else(|e| panic!("{tp}: {e}"))
            .into_iter()
            .map(|p| p.ty)
            .collect()
    };
    assert_eq!(
        tys("block_rq_complete"),
        ["struct request *", "blk_status_t", "unsigned int"]
    );
    assert_eq!(tys("block_bio_queue"), ["struct bio *"]);
    assert!(btf.find_enumerator("__REQ_SYNC").is_some());
    assert!(
        btf.enum_values("req_op")
            .unwrap()
            .contains(&("REQ_OP_WRITE".to_owned(), 1))
    );
    assert!(!btf.has_tracepoint("no_such_tracepoint_anywhere"));
}

#[test]
fn btf_vmlinux_parse_time() {
    if !Path::new(VMLINUX_BTF).exists() {
        eprintln!("note: {VMLINUX_BTF} does not exist; skipping");
        return;
    }
    let bytes = std::fs::read(VMLINUX_BTF).unwrap();
    let start = std::time::Instant::now();
    let btf = Btf::parse(&bytes).unwrap();
    let parsed = start.elapsed();
    let start = std::time::Instant::now();
    for _ in 0..50 {
        btf.member_offset("bio", "bi_iter.bi_sector").unwrap();
    }
    eprintln!(
        "parsed {} bytes, {} types in {parsed:?}; 50 member lookups in {:?}",
        bytes.len(),
        btf.type_count(),
        start.elapsed()
    );
}

/// Prints the layout facts the loader depends on (`cargo test -p iosched-trace
/// btf_vmlinux_report -- --nocapture`). Facts missing on this kernel print as errors.
#[test]
fn btf_vmlinux_report() {
    let Some(btf) = sys_btf() else { return };
    let members: &[(&str, &[&str])] = &[
        (
            "request",
            &[
                "q",
                "bio",
                "__sector",
                "__data_len",
                "cmd_flags",
                "ioprio",
                "part",
            ],
        ),
        ("request_queue", &["disk"]),
        ("gendisk", &["major", "first_minor"]),
        (
            "bio",
            &[
                "bi_bdev",
                "bi_opf",
                "bi_iter.bi_sector",
                "bi_iter.bi_size",
                "bi_ioprio",
                "bi_next",
                "bi_status",
                "bi_blkg",
            ],
        ),
        ("block_device", &["bd_dev", "bd_disk"]),
        ("blkcg_gq", &["blkcg"]),
        ("blkcg", &["css"]),
        ("cgroup_subsys_state", &["cgroup"]),
        ("cgroup", &["kn"]),
        ("kernfs_node", &["id"]),
    ];
    for (s, paths) in members {
        for p in *paths {
            match (
                btf.member_offset(s, p),
                btf.member_size(s, p),
                btf.member_type(s, p),
            ) {
                (Ok(off), Ok(size), Ok(ty)) => {
                    println!("{s}.{p}: offset {off}, size {size}, type {ty}")
                }
                (off, size, _) => println!("{s}.{p}: {off:?} / {size:?}"),
            }
        }
    }
    for tp in [
        "block_rq_insert",
        "block_rq_issue",
        "block_rq_complete",
        "block_rq_requeue",
        "block_rq_merge",
        "block_bio_queue",
        "block_getrq",
        "block_bio_backmerge",
        "block_bio_frontmerge",
        "block_plug",
        "block_unplug",
        "block_split",
        "block_bio_complete",
        "block_io_start",
        "block_io_done",
        "kyber_throttled",
        "kyber_adjust",
        "kyber_latency",
        "wbt_step",
        "wbt_timer",
        "wbt_lat",
        "sched_waking",
    ] {
        match btf.tracepoint_params(tp) {
            Ok(params) => {
                let shown: Vec<String> = params.iter().map(Param::to_string).collect();
                println!("{tp}({})", shown.join(", "));
            }
            Err(e) => println!("{tp}: {e}"),
        }
    }
    for e in ["req_op", "req_flag_bits"] {
        println!("enum {e}: {:?}", btf.enum_values(e));
    }
}
