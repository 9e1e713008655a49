//! The test blobs' encoder: one BTF type record a call, then the header and sections.

use crate::btf::parse::{
    HEADER_LEN, KIND_ARRAY, KIND_ENUM, KIND_ENUM64, KIND_FUNC_PROTO, KIND_INT, KIND_PTR,
    KIND_TYPEDEF, MAGIC,
};

/// Minimal BTF encoder for building test blobs by hand.
pub(super) struct Enc {
    types: Vec<u8>,
    pub(super) strs: Vec<u8>,
    pub(super) next_id: u32,
    /// Offset added to local string offsets: non-zero for split BTF, whose strings follow
    /// the base's.
    str_base: u32,
}

impl Enc {
    pub(super) fn new() -> Enc {
        Enc {
            types: Vec::new(),
            strs: vec![0],
            next_id: 1,
            str_base: 0,
        }
    }

    pub(super) fn split(base: &Enc) -> Enc {
        Enc {
            types: Vec::new(),
            strs: Vec::new(),
            next_id: base.next_id,
            str_base: base.strs.len() as u32,
        }
    }

    fn name(&mut self, s: &str) -> u32 {
        if s.is_empty() {
            return 0;
        }
        let off = self.str_base + self.strs.len() as u32;
        self.strs.extend_from_slice(s.as_bytes());
        self.strs.push(0);
        off
    }

    pub(super) fn word(&mut self, w: u32) {
        self.types.extend_from_slice(&w.to_le_bytes());
    }

    pub(super) fn head(&mut self, name: &str, kind: u32, kflag: bool, vlen: usize, st: u32) -> u32 {
        let n = self.name(name);
        self.word(n);
        self.word((u32::from(kflag) << 31) | (kind << 24) | vlen as u32);
        self.word(st);
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(super) fn int(&mut self, name: &str, size: u32, encoding: u32) -> u32 {
        let id = self.head(name, KIND_INT, false, 0, size);
        self.word((encoding << 24) | (size * 8));
        id
    }

    /// An old-style (no kind_flag) bitfield type: INT of `bits` width at `offset`.
    pub(super) fn int_bits(&mut self, name: &str, size: u32, offset: u32, bits: u32) -> u32 {
        let id = self.head(name, KIND_INT, false, 0, size);
        self.word((offset << 16) | bits);
        id
    }

    pub(super) fn refer(&mut self, kind: u32, name: &str, to: u32) -> u32 {
        self.head(name, kind, false, 0, to)
    }

    pub(super) fn ptr(&mut self, to: u32) -> u32 {
        self.refer(KIND_PTR, "", to)
    }

    pub(super) fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
        let id = self.head("", KIND_ARRAY, false, 0, 0);
        self.word(elem);
        self.word(index);
        self.word(n);
        id
    }

    /// Members are (name, type, bit offset, bitfield bits); kind_flag is set when any
    /// member is a bitfield, as pahole does.
    pub(super) fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        members: &[(&str, u32, u32, u32)],
    ) -> u32 {
        let kflag = members.iter().any(|m| m.3 != 0);
        let id = self.head(name, kind, kflag, members.len(), size);
        for &(n, ty, off, bits) in members {
            let n = self.name(n);
            self.word(n);
            self.word(ty);
            self.word(if kflag { (bits << 24) | off } else { off });
        }
        id
    }

    pub(super) fn enum32(&mut self, name: &str, signed: bool, values: &[(&str, i32)]) -> u32 {
        let id = self.head(name, KIND_ENUM, signed, values.len(), 4);
        for &(n, v) in values {
            let n = self.name(n);
            self.word(n);
            self.word(v as u32);
        }
        id
    }

    pub(super) fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
        let id = self.head(name, KIND_ENUM64, signed, values.len(), 8);
        for &(n, v) in values {
            let n = self.name(n);
            self.word(n);
            self.word(v as u32);
            self.word((v >> 32) as u32);
        }
        id
    }

    pub(super) fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
        let id = self.head("", KIND_FUNC_PROTO, false, params.len(), ret);
        for &(n, ty) in params {
            let n = self.name(n);
            self.word(n);
            self.word(ty);
        }
        id
    }

    /// `typedef void (*btf_trace_<name>)(params)`, as the kernel declares tracepoints.
    pub(super) fn tracepoint(&mut self, name: &str, params: &[(&str, u32)]) -> u32 {
        let proto = self.func_proto(0, params);
        let ptr = self.ptr(proto);
        self.refer(KIND_TYPEDEF, &format!("btf_trace_{name}"), ptr)
    }

    pub(super) fn finish(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.push(1); // version
        out.push(0); // flags
        for w in [
            HEADER_LEN,
            0,
            self.types.len() as u32,
            self.types.len() as u32,
            self.strs.len() as u32,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strs);
        out
    }
}
