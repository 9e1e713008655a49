//! BTF tests on blobs built by hand (`encoder`): layout lookups, bitfields, enums,
//! tracepoints, split BTF, and damaged input (errors, never a panic or a hang, also on
//! random bytes); `vmlinux` asks the running kernel's.

mod encoder;
mod vmlinux;

use proptest::prelude::*;

use super::parse::{
    HEADER_LEN, KIND_CONST, KIND_DATASEC, KIND_DECL_TAG, KIND_FLOAT, KIND_FUNC, KIND_FWD,
    KIND_RESTRICT, KIND_STRUCT, KIND_TYPE_TAG, KIND_TYPEDEF, KIND_UNION, KIND_VAR, KIND_VOLATILE,
};
use super::*;

use encoder::Enc;

/// A blob shaped like the kernel types the loader cares about, plus one of every kind.
fn test_encoder() -> Enc {
    let mut e = Enc::new();
    let int = e.int("int", 4, 1);
    let uint = e.int("unsigned int", 4, 0);
    let chr = e.int("char", 1, 2);
    let ulong = e.int("long unsigned int", 8, 0);
    let boolean = e.int("_Bool", 1, 4);
    let u8_ = e.int("unsigned char", 1, 0);
    let bool_t = e.refer(KIND_TYPEDEF, "bool", boolean);
    let u32_a = e.refer(KIND_TYPEDEF, "__u32", uint);
    let u32_b = e.refer(KIND_TYPEDEF, "u32", u32_a);
    let kdev = e.refer(KIND_TYPEDEF, "__kernel_dev_t", u32_b);
    let dev_t = e.refer(KIND_TYPEDEF, "dev_t", kdev);
    let sector_t = e.refer(KIND_TYPEDEF, "sector_t", ulong);
    let const_char = e.refer(KIND_CONST, "", chr);
    let const_char_ptr = e.ptr(const_char);
    let void_ptr = e.ptr(0);
    let blk_status = e.refer(KIND_TYPEDEF, "blk_status_t", u8_);

    let rq_queue = e.composite(KIND_STRUCT, "request_queue", 8, &[("disk", void_ptr, 0, 0)]);
    let rq_queue_ptr = e.ptr(rq_queue);
    let inner = e.composite(
        KIND_STRUCT,
        "inner",
        16,
        &[("a", u32_b, 0, 0), ("b", ulong, 64, 0)],
    );
    let xy = e.composite(KIND_UNION, "", 8, &[("x", uint, 0, 0), ("y", ulong, 0, 0)]);
    let deep = e.composite(KIND_UNION, "", 4, &[("dd", uint, 0, 0)]);
    let pq = e.composite(KIND_STRUCT, "", 8, &[("p", uint, 0, 0), ("", deep, 32, 0)]);
    let arr_idx = e.int("__ARRAY_SIZE_TYPE__", 4, 0);
    let u32x2 = e.array(u32_b, arr_idx, 2);
    let ptrx2 = e.array(void_ptr, arr_idx, 2);
    let elv = e.composite(
        KIND_STRUCT,
        "",
        24,
        &[("icq", void_ptr, 0, 0), ("priv", ptrx2, 64, 0)],
    );
    let flush = e.composite(KIND_STRUCT, "", 4, &[("seq", uint, 0, 0)]);
    let elv_flush = e.composite(
        KIND_UNION,
        "",
        24,
        &[("elv", elv, 0, 0), ("flush", flush, 0, 0)],
    );
    let request = e.composite(
        KIND_STRUCT,
        "request",
        96,
        &[
            ("q", rq_queue_ptr, 0, 0),
            ("", xy, 64, 0),
            ("__sector", sector_t, 128, 0),
            ("flag_a", uint, 192, 3),
            ("flag_b", uint, 195, 5),
            ("aligned_bf", uint, 200, 8),
            ("nested", inner, 256, 0),
            ("", pq, 384, 0),
            ("dev", dev_t, 448, 0),
            ("arr", u32x2, 480, 0),
            ("", elv_flush, 576, 0),
        ],
    );
    let request_ptr = e.ptr(request);

    // Old-style bitfields: no kind_flag, widths carried by INT types.
    let nib = e.int_bits("unsigned int", 4, 0, 4);
    let shifted = e.int_bits("unsigned int", 4, 4, 4);
    e.composite(
        KIND_STRUCT,
        "oldstyle",
        8,
        &[("lo", nib, 0, 0), ("hi", nib, 4, 0), ("sh", shifted, 32, 0)],
    );

    let anon = e.composite(KIND_STRUCT, "", 4, &[("v", uint, 0, 0)]);
    e.refer(KIND_TYPEDEF, "anon_t", anon);

    e.enum32(
        "req_op",
        false,
        &[
            ("REQ_OP_READ", 0),
            ("REQ_OP_WRITE", 1),
            ("REQ_OP_DRV_OUT", 35),
        ],
    );
    e.enum32("", false, &[("__REQ_FAILFAST_DEV", 8), ("__REQ_SYNC", 11)]);
    e.enum32("sgn", true, &[("NEG_ONE", -1)]);
    e.enum32("uns", false, &[("ALL_ONES", -1)]);
    e.enum64("e64", false, &[("E64_BIG", 1 << 40), ("E64_MAX", u64::MAX)]);
    e.enum64("e64s", true, &[("E64_NEG", -5i64 as u64)]);

    e.tracepoint(
        "block_rq_complete",
        &[
            ("", void_ptr),
            ("", request_ptr),
            ("error", blk_status),
            ("nr_bytes", uint),
        ],
    );
    let char_ptr = e.ptr(chr);
    let char_ptr_ptr = e.ptr(char_ptr);
    let cb_proto = e.func_proto(int, &[("", int)]);
    let cb = e.ptr(cb_proto);
    let const_void_ptr = e.refer(KIND_CONST, "", void_ptr);
    let user = e.refer(KIND_TYPE_TAG, "user", const_char);
    let user_ptr = e.ptr(user);
    e.tracepoint(
        "render_tp",
        &[
            ("__data", void_ptr),
            ("name", const_char_ptr),
            ("flag", bool_t),
            ("dev", dev_t),
            ("argv", char_ptr_ptr),
            ("cb", cb),
            ("cp", const_void_ptr),
            ("u", user_ptr),
            ("", 0),
        ],
    );
    let int_ptr = e.ptr(int);
    e.tracepoint("bad_first", &[("", int_ptr), ("", uint)]);
    e.tracepoint("no_params", &[]);
    e.refer(KIND_TYPEDEF, "btf_trace_not_a_ptr", int);

    // One of each remaining kind, so parsing all of them is exercised.
    e.head("fwd_s", KIND_FWD, false, 0, 0);
    e.head("fwd_u", KIND_FWD, true, 0, 0);
    e.refer(KIND_VOLATILE, "", int);
    e.refer(KIND_RESTRICT, "", char_ptr);
    let func_proto = e.func_proto(int, &[("a", int)]);
    e.refer(KIND_FUNC, "my_func", func_proto);
    let var = e.head("my_var", KIND_VAR, false, 0, int);
    e.word(1);
    e.head(".data", KIND_DATASEC, false, 1, 4);
    e.word(var);
    e.word(0);
    e.word(4);
    e.head("double", KIND_FLOAT, false, 0, 8);
    e.head("tag", KIND_DECL_TAG, false, 0, request);
    e.word(u32::MAX); // component_idx -1: tags the whole struct
    e
}

fn test_btf() -> Btf {
    Btf::parse(&test_encoder().finish()).expect("test blob parses")
}

#[test]
fn btf_member_offsets_and_sizes() {
    let btf = test_btf();
    assert_eq!(btf.member_offset("request", "q").unwrap(), 0);
    assert_eq!(btf.member_size("request", "q").unwrap(), 8);
    assert_eq!(
        btf.member_type("request", "q").unwrap(),
        "struct request_queue *"
    );
    // Through an anonymous union.
    assert_eq!(btf.member_offset("request", "x").unwrap(), 8);
    assert_eq!(btf.member_size("request", "y").unwrap(), 8);
    assert_eq!(btf.member_offset("request", "__sector").unwrap(), 16);
    assert_eq!(btf.member_size("request", "__sector").unwrap(), 8);
    // Nested named struct.
    assert_eq!(btf.member_offset("request", "nested.b").unwrap(), 40);
    assert_eq!(btf.member_size("request", "nested.a").unwrap(), 4);
    // Anonymous struct containing an anonymous union.
    assert_eq!(btf.member_offset("request", "p").unwrap(), 48);
    assert_eq!(btf.member_offset("request", "dd").unwrap(), 52);
    // Typedef chain dev_t -> __kernel_dev_t -> u32 -> __u32 -> unsigned int.
    assert_eq!(btf.member_offset("request", "dev").unwrap(), 56);
    assert_eq!(btf.member_size("request", "dev").unwrap(), 4);
    assert_eq!(btf.member_type("request", "dev").unwrap(), "dev_t");
    assert_eq!(btf.member_size("request", "arr").unwrap(), 8);
    // Named member of anonymous struct type, inside an anonymous union.
    assert_eq!(btf.member_offset("request", "elv.priv").unwrap(), 80);
    assert_eq!(btf.member_size("request", "elv.priv").unwrap(), 16);
    assert_eq!(btf.member_offset("request", "flush.seq").unwrap(), 72);
    assert_eq!(btf.struct_size("request").unwrap(), 96);
    assert_eq!(btf.struct_size("inner").unwrap(), 16);
    assert_eq!(btf.struct_size("anon_t").unwrap(), 4);
    assert_eq!(btf.member_offset("anon_t", "v").unwrap(), 0);
}

#[test]
fn btf_bitfields() {
    let btf = test_btf();
    // kind_flag bitfields.
    assert_eq!(btf.member_offset("request", "flag_a").unwrap(), 24);
    match btf.member_offset("request", "flag_b") {
        Err(BtfError::Bitfield {
            bit_offset: 195,
            bits: 5,
            ..
        }) => {}
        other => panic!("expected a bitfield error, got {other:?}"),
    }
    assert_eq!(btf.member_offset("request", "aligned_bf").unwrap(), 25);
    assert!(matches!(
        btf.member_size("request", "aligned_bf"),
        Err(BtfError::Bitfield { bits: 8, .. })
    ));
    // Old-style bitfields, described by narrow INT types.
    assert_eq!(btf.member_offset("oldstyle", "lo").unwrap(), 0);
    assert!(matches!(
        btf.member_size("oldstyle", "lo"),
        Err(BtfError::Bitfield { bits: 4, .. })
    ));
    assert!(matches!(
        btf.member_offset("oldstyle", "hi"),
        Err(BtfError::Bitfield { bit_offset: 4, .. })
    ));
    // The INT's own offset counts too: bit 32 + 4.
    assert!(matches!(
        btf.member_offset("oldstyle", "sh"),
        Err(BtfError::Bitfield { bit_offset: 36, .. })
    ));
}

#[test]
fn btf_lookup_errors() {
    let btf = test_btf();
    assert!(matches!(
        btf.member_offset("nope", "q"),
        Err(BtfError::NoSuchType { .. })
    ));
    assert!(matches!(
        btf.member_offset("request", "nope"),
        Err(BtfError::NoSuchMember { .. })
    ));
    assert!(matches!(
        btf.member_offset("request", "nested.nope"),
        Err(BtfError::NoSuchMember { .. })
    ));
    // Pointers are not followed: the programs would have to dereference them.
    assert!(matches!(
        btf.member_offset("request", "q.disk"),
        Err(BtfError::NotComposite { .. })
    ));
    for bad in ["", ".", "q.", ".q", "nested..a"] {
        assert!(matches!(
            btf.member_offset("request", bad),
            Err(BtfError::BadPath { .. })
        ));
    }
    // A forward declaration has no layout.
    assert!(matches!(
        btf.struct_size("fwd_s"),
        Err(BtfError::NoSuchType { .. })
    ));
    let msg = btf
        .member_offset("request", "nested.nope")
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "`struct inner` has no member `nope` (looking up `request.nested.nope`)"
    );
}

#[test]
fn btf_enums() {
    let btf = test_btf();
    assert_eq!(
        btf.enum_values("req_op").unwrap(),
        vec![
            ("REQ_OP_READ".to_owned(), 0),
            ("REQ_OP_WRITE".to_owned(), 1),
            ("REQ_OP_DRV_OUT".to_owned(), 35)
        ]
    );
    assert_eq!(btf.find_enumerator("__REQ_SYNC"), Some(11));
    assert_eq!(btf.find_enumerator("REQ_OP_DRV_OUT"), Some(35));
    assert_eq!(btf.find_enumerator("__REQ_NOPE"), None);
    assert_eq!(btf.find_enumerator("NEG_ONE"), Some(-1));
    assert_eq!(btf.find_enumerator("ALL_ONES"), Some(0xffff_ffff));
    assert_eq!(
        btf.enum_values("e64").unwrap(),
        vec![("E64_BIG".to_owned(), 1 << 40), ("E64_MAX".to_owned(), -1)]
    );
    assert_eq!(btf.find_enumerator("E64_NEG"), Some(-5));
    assert!(matches!(
        btf.enum_values("request"),
        Err(BtfError::NoSuchType { kind: "enum", .. })
    ));
}

#[test]
fn btf_tracepoints() {
    let btf = test_btf();
    let p = |name: &str, ty: &str| Param {
        name: name.to_owned(),
        ty: ty.to_owned(),
    };
    assert_eq!(
        btf.tracepoint_params("block_rq_complete").unwrap(),
        vec![
            p("", "struct request *"),
            p("error", "blk_status_t"),
            p("nr_bytes", "unsigned int")
        ]
    );
    assert_eq!(
        btf.tracepoint_params("render_tp").unwrap(),
        vec![
            p("name", "const char *"),
            p("flag", "bool"),
            p("dev", "dev_t"),
            p("argv", "char **"),
            p("cb", "int (*)(int)"),
            p("cp", "void *const"),
            p("u", "const char *"),
            p("", "..."),
        ]
    );
    assert_eq!(p("name", "const char *").to_string(), "const char *name");
    assert_eq!(p("error", "blk_status_t").to_string(), "blk_status_t error");
    assert!(btf.has_tracepoint("block_rq_complete"));
    assert!(!btf.has_tracepoint("block_rq_nope"));
    assert!(matches!(
        btf.tracepoint_params("block_rq_nope"),
        Err(BtfError::NoSuchTracepoint { .. })
    ));
    for bad in ["bad_first", "no_params", "not_a_ptr"] {
        assert!(
            matches!(
                btf.tracepoint_params(bad),
                Err(BtfError::BadTracepoint { .. })
            ),
            "{bad}"
        );
    }
    assert!(!btf.has_tracepoint("not_a_ptr"));
}

#[test]
fn btf_split() {
    let base_enc = test_encoder();
    let base = Btf::parse(&base_enc.finish()).unwrap();
    assert_eq!(base.type_count(), base_enc.next_id as usize);
    let mut e = Enc::split(&base_enc);
    // Base ids: 2 = unsigned int; the base's `struct request *` is found by rendering.
    let request_ptr = (1..base.type_count() as u32)
        .find(|&id| base.render(id) == "struct request *")
        .unwrap();
    let void_ptr = (1..base.type_count() as u32)
        .find(|&id| base.render(id) == "void *")
        .unwrap();
    e.composite(
        KIND_STRUCT,
        "kyber_thing",
        16,
        &[("a", 2, 0, 0), ("rq", request_ptr, 64, 0)],
    );
    e.tracepoint(
        "kyber_latency",
        &[("", void_ptr), ("", request_ptr), ("lat", 2)],
    );
    let both = Btf::parse_split(&e.finish(), &base).unwrap();
    assert_eq!(both.member_offset("kyber_thing", "rq").unwrap(), 8);
    assert_eq!(both.member_offset("request", "__sector").unwrap(), 16);
    assert_eq!(
        both.tracepoint_params("kyber_latency").unwrap()[1],
        Param {
            name: "lat".to_owned(),
            ty: "unsigned int".to_owned()
        }
    );
    assert!(!base.has_tracepoint("kyber_latency"));
}

/// A module's tracepoint is found in the module whose split BTF declares it, not in
/// another module nor in vmlinux; a module holding only a similar name (a string, no
/// typedef) is no match; none at all gives `None`.
#[test]
fn module_of_tracepoint_is_the_module_declaring_it() {
    let base_enc = test_encoder();
    let base = Btf::parse(&base_enc.finish()).unwrap();
    let void_ptr = (1..base.type_count() as u32)
        .find(|&id| base.render(id) == "void *")
        .unwrap();
    let module = |tracepoint: Option<&str>, struct_name: &str| {
        let mut e = Enc::split(&base_enc);
        // A struct named like the typedef: its name is in the strings, but it is no
        // tracepoint (the byte search alone would take it).
        e.composite(KIND_STRUCT, struct_name, 4, &[("a", 2, 0, 0)]);
        if let Some(tp) = tracepoint {
            e.tracepoint(tp, &[("", void_ptr), ("dev", 2)]);
        }
        e.finish()
    };
    let dir = std::env::temp_dir().join(format!("iosched-modbtf-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("vmlinux"), base_enc.finish()).unwrap();
    std::fs::write(dir.join("bfq"), module(None, "btf_trace_kyber_throttled")).unwrap();
    std::fs::write(
        dir.join("kyber_iosched"),
        module(Some("kyber_throttled"), "x"),
    )
    .unwrap();
    std::fs::write(dir.join("loop"), module(Some("loop_thing"), "y")).unwrap();
    let (name, btf) = base
        .with_module_of_tracepoint_in(&dir, "kyber_throttled")
        .unwrap()
        .expect("found");
    assert_eq!(name, "kyber_iosched");
    assert_eq!(btf.tracepoint_params("kyber_throttled").unwrap().len(), 1);
    assert!(!base.has_tracepoint("kyber_throttled"));
    assert!(
        base.with_module_of_tracepoint_in(&dir, "kyber_adjust")
            .unwrap()
            .is_none()
    );
    assert!(
        base.with_module_of_tracepoint_in(&dir.join("absent"), "kyber_throttled")
            .unwrap()
            .is_none()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn btf_header_errors() {
    let good = test_encoder().finish();
    let mut big_endian = good.clone();
    big_endian.swap(0, 1);
    assert!(matches!(
        Btf::parse(&big_endian),
        Err(BtfError::ForeignByteOrder)
    ));
    assert!(matches!(
        Btf::parse(b"\x7fELF\x02\x01\x01"),
        Err(BtfError::BadMagic { .. })
    ));
    let mut v2 = good.clone();
    v2[2] = 2;
    assert!(matches!(
        Btf::parse(&v2),
        Err(BtfError::UnsupportedVersion { version: 2 })
    ));
    let mut unknown_kind = good.clone();
    // Type id 1's info word: kind 20.
    unknown_kind[HEADER_LEN as usize + 7] = 20;
    assert!(matches!(
        Btf::parse(&unknown_kind),
        Err(BtfError::Malformed { .. })
    ));
    // A longer header (future fields) is skipped via hdr_len.
    let mut longer = good[..4].to_vec();
    longer.extend_from_slice(&(HEADER_LEN + 8).to_le_bytes());
    longer.extend_from_slice(&good[8..HEADER_LEN as usize]);
    longer.extend_from_slice(&[0; 8]);
    longer.extend_from_slice(&good[HEADER_LEN as usize..]);
    assert_eq!(
        Btf::parse(&longer)
            .unwrap()
            .member_offset("request", "dev")
            .unwrap(),
        56
    );
}

#[test]
fn btf_rejects_cycles_without_hanging() {
    let mut e = Enc::new();
    // Typedef ids 1 and 2 point at each other.
    e.refer(KIND_TYPEDEF, "a_t", 2);
    e.refer(KIND_TYPEDEF, "b_t", 1);
    // A struct containing itself anonymously.
    e.composite(KIND_STRUCT, "selfish", 4, &[("", 3, 0, 0), ("m", 1, 0, 0)]);
    let btf = Btf::parse(&e.finish()).unwrap();
    assert!(btf.member_size("selfish", "m").is_err());
    assert!(btf.member_offset("selfish", "nope").is_err());
    assert!(btf.render(1).len() < 4096);
}

#[test]
fn btf_control_characters_in_names_stay_out_of_messages() {
    // Found by fuzzing: a damaged name containing a newline made a multi-line error.
    let mut e = Enc::new();
    let uint = e.int("unsigned int", 4, 0);
    e.composite(KIND_STRUCT, "bad\nname", 4, &[("m\n", uint, 0, 0)]);
    let btf = Btf::parse(&e.finish()).unwrap();
    assert_eq!(btf.render(2), format!("struct {BAD_NAME}"));
    let err = btf.member_offset(BAD_NAME, "m").unwrap_err().to_string();
    assert!(!err.contains('\n'), "{err}");
}

/// Runs every query, on names from the blob and on every type, so fuzzed input reaches
/// all the code paths that follow type ids.
fn exercise(btf: &Btf) {
    let check = |r: Result<String, BtfError>| {
        if let Err(e) = r {
            assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
        }
    };
    for (id, t) in btf.types.iter().enumerate() {
        let id = id as u32;
        let _ = btf.render(id);
        let _ = btf.size_of(id, "x");
        let name = btf.str_at(t.name_off);
        if let Kind::Struct { members, .. } | Kind::Union { members, .. } = t.kind {
            for m in btf.members_of(members) {
                let path = btf.str_at(m.name_off);
                check(btf.member_offset(name, path).map(|v| v.to_string()));
                check(btf.member_size(name, path).map(|v| v.to_string()));
                check(btf.member_type(name, path));
            }
            check(btf.struct_size(name).map(|v| v.to_string()));
        }
        if let Kind::Enum { .. } = t.kind {
            check(btf.enum_values(name).map(|v| format!("{v:?}")));
        }
        if let Some(tp) = name.strip_prefix("btf_trace_") {
            check(btf.tracepoint_params(tp).map(|v| format!("{v:?}")));
            let _ = btf.has_tracepoint(tp);
        }
    }
    for (s, p) in [
        ("request", "elv.priv"),
        ("request", "nested.b"),
        ("request", "q.disk"),
        ("oldstyle", "sh"),
    ] {
        check(btf.member_offset(s, p).map(|v| v.to_string()));
    }
    let _ = btf.find_enumerator("__REQ_SYNC");
}

#[test]
fn btf_every_truncation_fails_cleanly() {
    let good = test_encoder().finish();
    exercise(&Btf::parse(&good).unwrap());
    for len in 0..good.len() {
        if let Ok(btf) = Btf::parse(&good[..len]) {
            exercise(&btf);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn btf_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(btf) = Btf::parse(&bytes) {
            exercise(&btf);
        }
    }

    /// A valid header followed by random bytes, so fuzzing gets past the magic check.
    #[test]
    fn btf_random_sections_never_panic(
        types in proptest::collection::vec(any::<u32>(), 0..150),
        strs in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut e = Enc::new();
        for w in types {
            e.word(w);
        }
        e.strs.extend_from_slice(&strs);
        e.strs.push(0);
        if let Ok(btf) = Btf::parse(&e.finish()) {
            exercise(&btf);
        }
    }

    #[test]
    fn btf_mutated_blob_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut blob = test_encoder().finish();
        for (at, byte) in edits {
            let i = at.index(blob.len());
            blob[i] = byte;
        }
        let len = blob.len();
        if let Ok(btf) = Btf::parse(&blob) {
            exercise(&btf);
        }
        if let Ok(btf) = Btf::parse(&blob[..cut.index(len)]) {
            exercise(&btf);
        }
    }
}
