//! Reader for the running kernel's BTF type information (`/sys/kernel/btf/vmlinux`).
//!
//! This module owns decoding the raw `.BTF` format (header, type section, string section, as
//! specified in the kernel's `Documentation/bpf/btf.rst`) and answering the layout questions
//! the loader asks before it fills offsets into the eBPF programs: member offsets and sizes,
//! struct sizes, enum values, and the argument lists of BTF-enabled tracepoints. Deciding
//! *which* offsets the programs need belongs to `probe`, not here.
//!
//! It is written directly from the spec because aya-obj's BTF keeps its members private and
//! btf-rs is LGPL. Only little-endian BTF is read (the byte order is detected from the magic and
//! the other order is refused with a clear error).
//!
//! Parsing decodes every type once into flat tables and builds a sorted name-hash index, so
//! name lookups cost a binary search. Nothing derived from the input is trusted: every offset,
//! count and type id is bounds-checked, and every chain walk is depth-limited, so garbage input
//! yields a [`BtfError`] rather than a panic or a hang.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Where the kernel exposes its own BTF (needs `CONFIG_DEBUG_INFO_BTF`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
/// Directory holding the split BTF of loaded modules, one file per module.
const SYS_BTF_DIR: &str = "/sys/kernel/btf";

/// `BTF_MAGIC`, stored in the byte order of the kernel that produced the data.
const MAGIC: u16 = 0xeb9f;
/// Size of the version-1 header; newer kernels may append fields, which `hdr_len` tells us to
/// skip.
const HEADER_LEN: u32 = 24;
/// Longest chain of typedefs, qualifiers and array dimensions followed. Real chains are a few
/// links deep (`dev_t` -> `__kernel_dev_t` -> `u32` -> `__u32` -> `unsigned int`); the cap
/// only exists so that cyclic garbage ends in an error instead of a hang.
const MAX_CHAIN: usize = 64;
/// How deep anonymous struct/union members may nest; bounds recursion on garbage input.
const MAX_ANON_DEPTH: usize = 32;
/// Type nodes visited when rendering one type as C. Real types need a handful; the cap stops
/// garbage shaped like a wide DAG of function pointers from making rendering exponential.
const RENDER_BUDGET: u32 = 256;
/// Shown for a name whose bytes are not UTF-8 (kernel BTF names are ASCII identifiers, so this
/// only appears for damaged input); it never equals a name anyone looks up.
const BAD_NAME: &str = "\u{fffd}";

// Type kinds, from `include/uapi/linux/btf.h`.
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Everything that can go wrong reading BTF or answering a question about it. Each variant
/// displays as one self-explanatory line.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error(
        "no BTF at {}: this kernel was built without CONFIG_DEBUG_INFO_BTF; iosched-trace needs it",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error(
        "no BTF for module `{module}` at {}: the module is not loaded, or was built without \
         CONFIG_DEBUG_INFO_BTF_MODULES",
        path.display()
    )]
    ModuleMissing { module: String, path: PathBuf },
    #[error("cannot read BTF at {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "BTF is big-endian (magic bytes eb 9f); this reader only handles little-endian BTF as \
         produced by little-endian kernels"
    )]
    ForeignByteOrder,
    #[error("not BTF data: magic is {found:#06x}, expected 0xeb9f")]
    BadMagic { found: u16 },
    #[error("unsupported BTF version {version}; this reader knows version 1")]
    UnsupportedVersion { version: u8 },
    #[error("malformed BTF: {reason}")]
    Malformed { reason: String },
    #[error("no {kind} named `{name}` in the kernel's BTF")]
    NoSuchType { kind: &'static str, name: String },
    #[error("`{ty}` has no member `{member}` (looking up `{path}`)")]
    NoSuchMember {
        ty: String,
        member: String,
        path: String,
    },
    #[error(
        "`{path}` is not a member path: expected names separated by dots, like `bi_iter.bi_sector`"
    )]
    BadPath { path: String },
    #[error(
        "`{path}` has type `{ty}`, which is not a struct or union, so `.{next}` cannot follow it"
    )]
    NotComposite {
        path: String,
        ty: String,
        next: String,
    },
    #[error(
        "`{path}` is a {bits}-bit bitfield at bit offset {bit_offset}, not a byte-addressable member"
    )]
    Bitfield {
        path: String,
        bit_offset: u64,
        bits: u32,
    },
    #[error("`{what}` has type `{ty}`, which has no size")]
    Unsized { what: String, ty: String },
    #[error("no BTF tracepoint `{name}`: the kernel's BTF has no typedef `btf_trace_{name}`")]
    NoSuchTracepoint { name: String },
    #[error(
        "`btf_trace_{name}` is not a pointer to a prototype taking `void *__data` first: {reason}"
    )]
    BadTracepoint { name: String, reason: String },
}

impl BtfError {
    fn malformed(reason: impl Into<String>) -> Self {
        BtfError::Malformed {
            reason: reason.into(),
        }
    }
}

/// One tracepoint argument: its name as recorded in BTF (often empty, because the kernel's
/// `btf_trace_*` typedefs are function-pointer types whose parameters DWARF may leave unnamed)
/// and a C-like rendering of its type, e.g. `struct request *`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: String,
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name.is_empty() {
            f.write_str(&self.ty)
        } else if self.ty.ends_with('*') {
            write!(f, "{}{}", self.ty, self.name)
        } else {
            write!(f, "{} {}", self.ty, self.name)
        }
    }
}

/// A range in one of the flat side tables (`members`, `enumerators`, `params`). Keeping these
/// flat instead of a `Vec` per type saves ~100k small allocations on vmlinux.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    len: u16,
}

/// A decoded type. Only what the queries need is kept; the rest of each record (linkage,
/// DATASEC entries, decl-tag component index) is parsed, validated and dropped.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Type id 0, which BTF reserves for `void`.
    Void,
    Int {
        size: u32,
        /// Bit offset of the value inside the int (non-zero only in old-style bitfields).
        offset: u8,
        bits: u8,
    },
    Ptr(u32),
    Array {
        elem: u32,
        nelems: u32,
    },
    Struct {
        size: u32,
        members: Span,
    },
    Union {
        size: u32,
        members: Span,
    },
    /// ENUM and ENUM64 alike: values are normalised to `i64` at parse time.
    Enum {
        size: u32,
        values: Span,
    },
    Fwd {
        union: bool,
    },
    Typedef(u32),
    Volatile(u32),
    Const(u32),
    Restrict(u32),
    Func,
    FuncProto {
        ret: u32,
        params: Span,
    },
    Var(u32),
    Datasec {
        size: u32,
    },
    Float {
        size: u32,
    },
    DeclTag(u32),
    TypeTag(u32),
}

#[derive(Debug, Clone, Copy)]
struct Type {
    name_off: u32,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    name_off: u32,
    ty: u32,
    bit_offset: u32,
    /// Non-zero only for bitfields in a struct with `kind_flag` set.
    bitfield_bits: u8,
}

#[derive(Debug, Clone, Copy)]
struct Enumerator {
    name_off: u32,
    value: i64,
}

#[derive(Debug, Clone, Copy)]
struct RawParam {
    name_off: u32,
    ty: u32,
}

/// Where a member path led: its bit offset from the start of the outer struct, its bitfield
/// width (0 for an ordinary member) and its type.
#[derive(Debug, Clone, Copy)]
struct MemberLoc {
    bit_offset: u64,
    bits: u32,
    ty: u32,
}

/// The kernel's types, decoded and indexed by name. See the module docs.
#[derive(Clone)]
pub struct Btf {
    /// All string sections concatenated (base first, then split), so that a split BTF's
    /// name offsets, which continue after the base's strings, index it directly.
    strings: Vec<u8>,
    /// Indexed by type id; entry 0 is `void`.
    types: Vec<Type>,
    members: Vec<Member>,
    enumerators: Vec<Enumerator>,
    params: Vec<RawParam>,
    /// `(hash of name, type id)` for every named type, sorted: lookups are a binary search
    /// without allocating a `String` per name at parse time.
    by_name: Vec<(u64, u32)>,
    /// BTF does not record pointer size; it is inferred from `long` (as libbpf does).
    ptr_size: u32,
}

impl fmt::Debug for Btf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Btf")
            .field("types", &self.types.len())
            .field("string_bytes", &self.strings.len())
            .field("ptr_size", &self.ptr_size)
            .finish_non_exhaustive()
    }
}

/// Little-endian cursor over a section; `None` means the data ended early.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> Option<u32> {
        let bytes = self.data.get(self.pos..)?.first_chunk::<4>()?;
        self.pos += 4;
        Some(u32::from_le_bytes(*bytes))
    }

    fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }
}

struct Header {
    hdr_len: u32,
    type_off: u32,
    type_len: u32,
    str_off: u32,
    str_len: u32,
}

impl Header {
    fn read(bytes: &[u8]) -> Result<Header, BtfError> {
        let magic = bytes
            .first_chunk::<2>()
            .ok_or_else(|| BtfError::malformed(format!("only {} bytes", bytes.len())))?;
        if u16::from_le_bytes(*magic) != MAGIC {
            if u16::from_be_bytes(*magic) == MAGIC {
                return Err(BtfError::ForeignByteOrder);
            }
            return Err(BtfError::BadMagic {
                found: u16::from_le_bytes(*magic),
            });
        }
        // Check the version before the length so that a future format is reported as such.
        if let Some(&version) = bytes.get(2)
            && version != 1
        {
            return Err(BtfError::UnsupportedVersion { version });
        }
        let mut r = Reader {
            data: bytes.get(4..).unwrap_or_default(),
            pos: 0,
        };
        let short = || {
            BtfError::malformed(format!(
                "only {} bytes, shorter than the {HEADER_LEN}-byte header",
                bytes.len()
            ))
        };
        let hdr_len = r.u32().ok_or_else(short)?;
        let type_off = r.u32().ok_or_else(short)?;
        let type_len = r.u32().ok_or_else(short)?;
        let str_off = r.u32().ok_or_else(short)?;
        let str_len = r.u32().ok_or_else(short)?;
        if hdr_len < HEADER_LEN || hdr_len as usize > bytes.len() {
            return Err(BtfError::malformed(format!(
                "header length {hdr_len} is outside {HEADER_LEN}..={}",
                bytes.len()
            )));
        }
        Ok(Header {
            hdr_len,
            type_off,
            type_len,
            str_off,
            str_len,
        })
    }
}

/// The bytes of one section; offsets in the header are relative to the end of the header.
fn section<'a>(
    bytes: &'a [u8],
    hdr_len: u32,
    off: u32,
    len: u32,
    what: &str,
) -> Result<&'a [u8], BtfError> {
    // u64 so that the sums cannot overflow on 32-bit hosts.
    let start = u64::from(hdr_len) + u64::from(off);
    let end = start + u64::from(len);
    usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(s, e)| bytes.get(s..e))
        .ok_or_else(|| {
            BtfError::malformed(format!(
                "{what} section {start}..{end} lies outside the {} bytes of data",
                bytes.len()
            ))
        })
}

/// FNV-1a: the index only needs a cheap, deterministic hash; collisions are resolved by
/// comparing the actual names.
fn name_hash(name: &[u8]) -> u64 {
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Btf {
    /// Reads the running kernel's BTF from [`VMLINUX_BTF`].
    pub fn from_sys() -> Result<Btf, BtfError> {
        Btf::from_file(Path::new(VMLINUX_BTF))
    }

    /// Reads base (non-split) BTF from a file, e.g. a saved copy of another machine's vmlinux
    /// BTF.
    pub fn from_file(path: &Path) -> Result<Btf, BtfError> {
        let bytes = std::fs::read(path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                BtfError::Missing {
                    path: path.to_owned(),
                }
            } else {
                BtfError::Read {
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
        Btf::parse(&bytes)
    }

    /// Returns a copy of `self` (which must be vmlinux BTF) extended with a loaded module's
    /// split BTF from `/sys/kernel/btf/<module>`. Needed where e.g. kyber is built as a module:
    /// its tracepoints' `btf_trace_*` typedefs then live only in the module's BTF.
    pub fn with_sys_module(&self, module: &str) -> Result<Btf, BtfError> {
        let path = Path::new(SYS_BTF_DIR).join(module);
        let missing = || BtfError::ModuleMissing {
            module: module.to_owned(),
            path: path.clone(),
        };
        // A module name is a single path component; anything else would read an unrelated file.
        if module.is_empty() || module.contains('/') || module == "." || module == ".." {
            return Err(missing());
        }
        let bytes = std::fs::read(&path).map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                missing()
            } else {
                BtfError::Read {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        Btf::parse_split(&bytes, self)
    }

    /// Parses base BTF (such as vmlinux's). Never panics: damaged input yields an error.
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        let mut btf = Btf {
            strings: Vec::new(),
            types: vec![Type {
                name_off: 0,
                kind: Kind::Void,
            }],
            members: Vec::new(),
            enumerators: Vec::new(),
            params: Vec::new(),
            by_name: Vec::new(),
            ptr_size: 0,
        };
        btf.append(bytes, true)?;
        btf.ptr_size = btf.infer_ptr_size();
        Ok(btf)
    }

    /// Parses split BTF (a module's), whose type ids and string offsets continue after
    /// `base`'s. The result holds both and answers questions about either.
    pub fn parse_split(bytes: &[u8], base: &Btf) -> Result<Btf, BtfError> {
        let mut btf = base.clone();
        btf.append(bytes, false)?;
        Ok(btf)
    }

    /// Number of type ids, counting id 0 (`void`); the first id of a split BTF on top of this.
    pub fn type_count(&self) -> usize {
        self.types.len()
    }

    fn append(&mut self, bytes: &[u8], is_base: bool) -> Result<(), BtfError> {
        let hdr = Header::read(bytes)?;
        let type_sec = section(bytes, hdr.hdr_len, hdr.type_off, hdr.type_len, "type")?;
        let str_sec = section(bytes, hdr.hdr_len, hdr.str_off, hdr.str_len, "string")?;
        // Offset 0 must name the empty string (anonymous types rely on it); a split BTF
        // inherits that from its base.
        if is_base && str_sec.first() != Some(&0) {
            return Err(BtfError::malformed(
                "string section does not start with the empty string",
            ));
        }
        // With the final NUL guaranteed, every in-range offset names a terminated string.
        if str_sec.last().is_some_and(|&b| b != 0) {
            return Err(BtfError::malformed(
                "string section does not end with a NUL byte",
            ));
        }
        self.strings.extend_from_slice(str_sec);
        if u32::try_from(self.strings.len()).is_err() {
            return Err(BtfError::malformed("string sections exceed 4 GiB"));
        }
        let first_new = self.types.len();
        let mut refs = Vec::new();
        self.read_types(type_sec, &mut refs)?;
        let count = self.types.len();
        if u32::try_from(count).is_err() {
            return Err(BtfError::malformed("more than 2^32 types"));
        }
        // Checked once here so that a dangling reference is reported as what it is, rather
        // than surfacing later as a confusing lookup failure.
        if let Some(&(from, to)) = refs.iter().find(|&&(_, to)| to as usize >= count) {
            return Err(BtfError::malformed(format!(
                "type id {from} refers to type id {to}, but only ids below {count} exist"
            )));
        }
        for (id, t) in self.types.iter().enumerate().skip(first_new) {
            if t.name_off == 0 {
                continue;
            }
            let name = self.str_at(t.name_off);
            if !name.is_empty() {
                self.by_name.push((name_hash(name.as_bytes()), id as u32));
            }
        }
        self.by_name.sort_unstable();
        Ok(())
    }

    /// Decodes the type section, appending to the tables. `refs` collects every
    /// `(referrer, referenced)` type id pair for validation once the type count is known.
    fn read_types(&mut self, sec: &[u8], refs: &mut Vec<(u32, u32)>) -> Result<(), BtfError> {
        let mut r = Reader { data: sec, pos: 0 };
        // Types average ~20 bytes on vmlinux; reserving avoids repeated regrowth.
        self.types.reserve(sec.len() / 20);
        let str_len = self.strings.len();
        while !r.at_end() {
            let id = u32::try_from(self.types.len())
                .map_err(|_| BtfError::malformed("more than 2^32 types"))?;
            let truncated =
                || BtfError::malformed(format!("type section ends inside type id {id}"));
            let name = |off: u32| {
                if (off as usize) < str_len {
                    Ok(off)
                } else {
                    Err(BtfError::malformed(format!(
                        "type id {id} uses name offset {off}, past the {str_len}-byte strings"
                    )))
                }
            };
            let name_off = name(r.u32().ok_or_else(truncated)?)?;
            let info = r.u32().ok_or_else(truncated)?;
            let size_or_type = r.u32().ok_or_else(truncated)?;
            let vlen = (info & 0xffff) as u16;
            let kind_flag = info >> 31 == 1;
            let mut reference = |to: u32| {
                refs.push((id, to));
                to
            };
            let kind = match (info >> 24) & 0x1f {
                KIND_INT => {
                    let enc = r.u32().ok_or_else(truncated)?;
                    Kind::Int {
                        size: size_or_type,
                        offset: ((enc >> 16) & 0xff) as u8,
                        bits: (enc & 0xff) as u8,
                    }
                }
                KIND_PTR => Kind::Ptr(reference(size_or_type)),
                KIND_ARRAY => {
                    let elem = reference(r.u32().ok_or_else(truncated)?);
                    reference(r.u32().ok_or_else(truncated)?); // index type: irrelevant here
                    let nelems = r.u32().ok_or_else(truncated)?;
                    Kind::Array { elem, nelems }
                }
                k @ (KIND_STRUCT | KIND_UNION) => {
                    let start = span_start(self.members.len())?;
                    for _ in 0..vlen {
                        let name_off = name(r.u32().ok_or_else(truncated)?)?;
                        let ty = reference(r.u32().ok_or_else(truncated)?);
                        let offset = r.u32().ok_or_else(truncated)?;
                        // With kind_flag the offset word packs the bitfield size in the top 8
                        // bits; without it, bitfields are described by the member's INT type.
                        let (bit_offset, bitfield_bits) = if kind_flag {
                            (offset & 0x00ff_ffff, (offset >> 24) as u8)
                        } else {
                            (offset, 0)
                        };
                        self.members.push(Member {
                            name_off,
                            ty,
                            bit_offset,
                            bitfield_bits,
                        });
                    }
                    let members = Span { start, len: vlen };
                    if k == KIND_STRUCT {
                        Kind::Struct {
                            size: size_or_type,
                            members,
                        }
                    } else {
                        Kind::Union {
                            size: size_or_type,
                            members,
                        }
                    }
                }
                KIND_ENUM => {
                    let start = span_start(self.enumerators.len())?;
                    for _ in 0..vlen {
                        let name_off = name(r.u32().ok_or_else(truncated)?)?;
                        let raw = r.u32().ok_or_else(truncated)?;
                        // kind_flag marks a signed enum; otherwise values are unsigned.
                        let value = if kind_flag {
                            i64::from(raw as i32)
                        } else {
                            i64::from(raw)
                        };
                        self.enumerators.push(Enumerator { name_off, value });
                    }
                    Kind::Enum {
                        size: size_or_type,
                        values: Span { start, len: vlen },
                    }
                }
                KIND_ENUM64 => {
                    let start = span_start(self.enumerators.len())?;
                    for _ in 0..vlen {
                        let name_off = name(r.u32().ok_or_else(truncated)?)?;
                        let lo = r.u32().ok_or_else(truncated)?;
                        let hi = r.u32().ok_or_else(truncated)?;
                        // Unsigned values above i64::MAX keep their bit pattern; `as u64`
                        // recovers them.
                        let value = ((u64::from(hi) << 32) | u64::from(lo)) as i64;
                        self.enumerators.push(Enumerator { name_off, value });
                    }
                    Kind::Enum {
                        size: size_or_type,
                        values: Span { start, len: vlen },
                    }
                }
                KIND_FWD => Kind::Fwd { union: kind_flag },
                KIND_TYPEDEF => Kind::Typedef(reference(size_or_type)),
                KIND_VOLATILE => Kind::Volatile(reference(size_or_type)),
                KIND_CONST => Kind::Const(reference(size_or_type)),
                KIND_RESTRICT => Kind::Restrict(reference(size_or_type)),
                KIND_FUNC => {
                    reference(size_or_type);
                    Kind::Func
                }
                KIND_FUNC_PROTO => {
                    let ret = reference(size_or_type);
                    let start = span_start(self.params.len())?;
                    for _ in 0..vlen {
                        let name_off = name(r.u32().ok_or_else(truncated)?)?;
                        let ty = reference(r.u32().ok_or_else(truncated)?);
                        self.params.push(RawParam { name_off, ty });
                    }
                    Kind::FuncProto {
                        ret,
                        params: Span { start, len: vlen },
                    }
                }
                KIND_VAR => {
                    r.u32().ok_or_else(truncated)?; // linkage
                    Kind::Var(reference(size_or_type))
                }
                KIND_DATASEC => {
                    for _ in 0..vlen {
                        reference(r.u32().ok_or_else(truncated)?);
                        r.u32().ok_or_else(truncated)?; // offset
                        r.u32().ok_or_else(truncated)?; // size
                    }
                    Kind::Datasec { size: size_or_type }
                }
                KIND_FLOAT => Kind::Float { size: size_or_type },
                KIND_DECL_TAG => {
                    r.u32().ok_or_else(truncated)?; // component_idx
                    Kind::DeclTag(reference(size_or_type))
                }
                KIND_TYPE_TAG => Kind::TypeTag(reference(size_or_type)),
                other => {
                    // Records are variable-length and their size depends on the kind, so an
                    // unknown kind cannot be skipped.
                    return Err(BtfError::malformed(format!(
                        "type id {id} has unknown kind {other}; this reader knows kinds 1..=19"
                    )));
                }
            };
            self.types.push(Type { name_off, kind });
        }
        Ok(())
    }

    /// `long` is pointer-sized on every Linux ABI, and BTF has no pointer size of its own.
    fn infer_ptr_size(&self) -> u32 {
        ["long int", "long unsigned int"]
            .into_iter()
            .flat_map(|n| self.ids_named(n))
            .find_map(|(_, t)| match t.kind {
                Kind::Int {
                    size: s @ (4 | 8), ..
                } => Some(s),
                _ => None,
            })
            .unwrap_or(std::mem::size_of::<usize>() as u32)
    }

    /// The NUL-terminated string at `off`, or [`BAD_NAME`] for damaged input. Names with
    /// control characters count as damaged: kernel names are identifiers, and names end up in
    /// error messages that must stay on one line.
    fn str_at(&self, off: u32) -> &str {
        let Some(tail) = self.strings.get(off as usize..) else {
            return BAD_NAME;
        };
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        tail.get(..end)
            .filter(|s| !s.iter().any(u8::is_ascii_control))
            .and_then(|s| std::str::from_utf8(s).ok())
            .unwrap_or(BAD_NAME)
    }

    /// All types called `name`, in id order.
    fn ids_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (u32, &'a Type)> + 'a {
        let hash = name_hash(name.as_bytes());
        let start = self.by_name.partition_point(|&(h, _)| h < hash);
        self.by_name
            .get(start..)
            .unwrap_or_default()
            .iter()
            .take_while(move |&&(h, _)| h == hash)
            .filter_map(move |&(_, id)| {
                let t = self.types.get(id as usize)?;
                (self.str_at(t.name_off) == name).then_some((id, t))
            })
    }

    fn ty(&self, id: u32) -> Result<&Type, BtfError> {
        self.types.get(id as usize).ok_or_else(|| {
            BtfError::malformed(format!(
                "reference to type id {id}, but only ids below {} exist",
                self.types.len()
            ))
        })
    }

    fn members_of(&self, span: Span) -> &[Member] {
        let start = span.start as usize;
        self.members
            .get(start..start + usize::from(span.len))
            .unwrap_or_default()
    }

    fn enumerators_of(&self, span: Span) -> &[Enumerator] {
        let start = span.start as usize;
        self.enumerators
            .get(start..start + usize::from(span.len))
            .unwrap_or_default()
    }

    fn params_of(&self, span: Span) -> &[RawParam] {
        let start = span.start as usize;
        self.params
            .get(start..start + usize::from(span.len))
            .unwrap_or_default()
    }

    /// Follows typedefs, qualifiers and type tags to the type they stand for.
    fn skip_aliases(&self, mut id: u32) -> Result<u32, BtfError> {
        for _ in 0..MAX_CHAIN {
            match self.ty(id)?.kind {
                Kind::Typedef(to)
                | Kind::Const(to)
                | Kind::Volatile(to)
                | Kind::Restrict(to)
                | Kind::TypeTag(to) => id = to,
                _ => return Ok(id),
            }
        }
        Err(too_long(id))
    }

    fn is_composite(&self, id: u32) -> bool {
        matches!(
            self.types.get(id as usize).map(|t| t.kind),
            Some(Kind::Struct { .. } | Kind::Union { .. })
        )
    }

    /// Size in bytes of type `id`; `what` names it in the error if it has none.
    fn size_of(&self, id: u32, what: &str) -> Result<u32, BtfError> {
        let mut count: u64 = 1;
        let mut cur = id;
        for _ in 0..MAX_CHAIN {
            let size = match self.ty(cur)?.kind {
                Kind::Int { size, .. }
                | Kind::Struct { size, .. }
                | Kind::Union { size, .. }
                | Kind::Enum { size, .. }
                | Kind::Datasec { size }
                | Kind::Float { size } => size,
                Kind::Ptr(_) => self.ptr_size,
                Kind::Typedef(to)
                | Kind::Const(to)
                | Kind::Volatile(to)
                | Kind::Restrict(to)
                | Kind::TypeTag(to)
                | Kind::Var(to) => {
                    cur = to;
                    continue;
                }
                Kind::Array { elem, nelems } => {
                    count = count
                        .checked_mul(u64::from(nelems))
                        .ok_or_else(|| too_big(id))?;
                    cur = elem;
                    continue;
                }
                Kind::Void | Kind::Fwd { .. } | Kind::Func | Kind::FuncProto { .. } => {
                    return Err(BtfError::Unsized {
                        what: what.to_owned(),
                        ty: self.render(id),
                    });
                }
                Kind::DeclTag(_) => {
                    return Err(BtfError::Unsized {
                        what: what.to_owned(),
                        ty: format!("decl tag {}", self.str_at(self.ty(cur)?.name_off)),
                    });
                }
            };
            return count
                .checked_mul(u64::from(size))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| too_big(id));
        }
        Err(too_long(id))
    }

    /// Structs and unions called `name`; failing that, typedefs of them (for
    /// `typedef struct { .. } name_t`).
    fn composites_named(&self, name: &str) -> Vec<u32> {
        let direct: Vec<u32> = self
            .ids_named(name)
            .filter(|(_, t)| matches!(t.kind, Kind::Struct { .. } | Kind::Union { .. }))
            .map(|(id, _)| id)
            .collect();
        if !direct.is_empty() {
            return direct;
        }
        self.ids_named(name)
            .filter(|(_, t)| matches!(t.kind, Kind::Typedef(_)))
            .filter_map(|(id, _)| self.skip_aliases(id).ok())
            .filter(|&id| self.is_composite(id))
            .collect()
    }

    /// Finds member `name` of composite `comp`, looking through anonymous struct/union members
    /// as C does. Returns its bit offset relative to `comp`. `seen` holds anonymous composites
    /// already searched (their answer cannot change), which keeps damaged input linear.
    fn find_member(
        &self,
        comp: u32,
        name: &str,
        seen: &mut HashSet<u32>,
        depth: usize,
    ) -> Result<Option<(u64, Member)>, BtfError> {
        if depth > MAX_ANON_DEPTH {
            return Err(BtfError::malformed(format!(
                "anonymous members nested more than {MAX_ANON_DEPTH} deep"
            )));
        }
        let span = match self.ty(comp)?.kind {
            Kind::Struct { members, .. } | Kind::Union { members, .. } => members,
            _ => return Ok(None),
        };
        for m in self.members_of(span) {
            let member_name = self.str_at(m.name_off);
            if member_name == name {
                return Ok(Some((u64::from(m.bit_offset), *m)));
            }
            if member_name.is_empty() {
                let inner = self.skip_aliases(m.ty)?;
                if self.is_composite(inner)
                    && seen.insert(inner)
                    && let Some((off, found)) = self.find_member(inner, name, seen, depth + 1)?
                {
                    return Ok(Some((u64::from(m.bit_offset) + off, found)));
                }
            }
        }
        Ok(None)
    }

    /// Bitfield width of `m` and the extra bit offset of its value, covering both encodings:
    /// `kind_flag` structs carry the width in the member; older BTF gives the member an INT
    /// type narrower than its storage (possibly with its own bit offset).
    fn bitfield_of(&self, m: &Member) -> Result<(u32, u64), BtfError> {
        if m.bitfield_bits != 0 {
            return Ok((u32::from(m.bitfield_bits), 0));
        }
        if let Kind::Int { size, offset, bits } = self.ty(self.skip_aliases(m.ty)?)?.kind
            && (offset != 0 || u64::from(bits) != u64::from(size) * 8)
        {
            return Ok((u32::from(bits), u64::from(offset)));
        }
        Ok((0, 0))
    }

    fn locate(&self, struct_name: &str, path: &str) -> Result<MemberLoc, BtfError> {
        if path.is_empty() || path.split('.').any(str::is_empty) {
            return Err(BtfError::BadPath {
                path: path.to_owned(),
            });
        }
        let roots = self.composites_named(struct_name);
        let mut first_err = None;
        // Distinct structs may share a name (different subsystems' private types); the first
        // one that has the path wins, and failing all, the first one's error is reported.
        for root in roots {
            match self.locate_in(root, struct_name, path) {
                Ok(loc) => return Ok(loc),
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        Err(first_err.unwrap_or_else(|| BtfError::NoSuchType {
            kind: "struct or union",
            name: struct_name.to_owned(),
        }))
    }

    fn locate_in(&self, root: u32, struct_name: &str, path: &str) -> Result<MemberLoc, BtfError> {
        let mut loc = MemberLoc {
            bit_offset: 0,
            bits: 0,
            ty: root,
        };
        let mut walked = struct_name.to_owned();
        for (i, part) in path.split('.').enumerate() {
            let comp = self.skip_aliases(loc.ty)?;
            if i > 0 && !self.is_composite(comp) {
                return Err(BtfError::NotComposite {
                    path: walked,
                    ty: self.render(loc.ty),
                    next: part.to_owned(),
                });
            }
            let mut seen = HashSet::new();
            let Some((off, member)) = self.find_member(comp, part, &mut seen, 0)? else {
                return Err(BtfError::NoSuchMember {
                    ty: self.render(comp),
                    member: part.to_owned(),
                    path: format!("{struct_name}.{path}"),
                });
            };
            let (bits, extra) = self.bitfield_of(&member)?;
            loc = MemberLoc {
                bit_offset: loc.bit_offset + off + extra,
                bits,
                ty: member.ty,
            };
            walked.push('.');
            walked.push_str(part);
        }
        Ok(loc)
    }

    /// Byte offset of a (possibly nested, dotted) member path in a struct or union, looking
    /// through anonymous struct/union members, e.g. `member_offset("bio", "bi_iter.bi_sector")`.
    /// A byte-aligned bitfield yields its byte; an unaligned one is an error.
    pub fn member_offset(&self, struct_name: &str, path: &str) -> Result<u32, BtfError> {
        let loc = self.locate(struct_name, path)?;
        if loc.bit_offset % 8 != 0 {
            if loc.bits == 0 {
                return Err(BtfError::malformed(format!(
                    "{struct_name}.{path} is at bit offset {} but is not a bitfield",
                    loc.bit_offset
                )));
            }
            return Err(BtfError::Bitfield {
                path: format!("{struct_name}.{path}"),
                bit_offset: loc.bit_offset,
                bits: loc.bits,
            });
        }
        u32::try_from(loc.bit_offset / 8).map_err(|_| {
            BtfError::malformed(format!(
                "{struct_name}.{path} is at bit offset {}, beyond 4 GiB",
                loc.bit_offset
            ))
        })
    }

    /// Size in bytes of a member's type, through typedefs and qualifiers (so `dev_t` is 4).
    /// Bitfields have no byte size and are an error.
    pub fn member_size(&self, struct_name: &str, path: &str) -> Result<u32, BtfError> {
        let loc = self.locate(struct_name, path)?;
        let what = format!("{struct_name}.{path}");
        if loc.bits != 0 {
            return Err(BtfError::Bitfield {
                path: what,
                bit_offset: loc.bit_offset,
                bits: loc.bits,
            });
        }
        self.size_of(loc.ty, &what)
    }

    /// C-like rendering of a member's declared type, e.g. `member_type("request", "q")` is
    /// `struct request_queue *`; lets callers check a member still has the type they read it as.
    pub fn member_type(&self, struct_name: &str, path: &str) -> Result<String, BtfError> {
        Ok(self.render(self.locate(struct_name, path)?.ty))
    }

    /// Size in bytes of the struct or union `name` (or of a typedef naming one).
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        let id = self
            .composites_named(name)
            .into_iter()
            .next()
            .ok_or_else(|| BtfError::NoSuchType {
                kind: "struct or union",
                name: name.to_owned(),
            })?;
        self.size_of(id, name)
    }

    /// Enumerators of the enum (ENUM or ENUM64) called `enum_name`, or of the enum a typedef of
    /// that name stands for, in declaration order.
    pub fn enum_values(&self, enum_name: &str) -> Result<Vec<(String, i64)>, BtfError> {
        let is_enum = |id: u32| matches!(self.types.get(id as usize), Some(t) if matches!(t.kind, Kind::Enum { .. }));
        let id = self
            .ids_named(enum_name)
            .map(|(id, _)| id)
            .find(|&id| is_enum(id))
            .or_else(|| {
                self.ids_named(enum_name)
                    .filter(|(_, t)| matches!(t.kind, Kind::Typedef(_)))
                    .filter_map(|(id, _)| self.skip_aliases(id).ok())
                    .find(|&id| is_enum(id))
            })
            .ok_or_else(|| BtfError::NoSuchType {
                kind: "enum",
                name: enum_name.to_owned(),
            })?;
        let Kind::Enum { values, .. } = self.ty(id)?.kind else {
            return Err(BtfError::malformed(format!("type id {id} changed kind")));
        };
        Ok(self
            .enumerators_of(values)
            .iter()
            .map(|e| (self.str_at(e.name_off).to_owned(), e.value))
            .collect())
    }

    /// Value of the enumerator `name` in whichever enum declares it, named or anonymous (the
    /// kernel's `__REQ_SYNC` lives in `enum req_flag_bits`). If several enums declare it, the
    /// one with the lowest type id wins.
    pub fn find_enumerator(&self, name: &str) -> Option<i64> {
        // A linear scan: vmlinux has ~20k enumerators and callers ask a handful of times, so an
        // index would cost more at startup than it saves.
        self.enumerators
            .iter()
            .find(|e| self.str_at(e.name_off) == name)
            .map(|e| e.value)
    }

    /// The FUNC_PROTO behind `btf_trace_<tracepoint>`: the kernel declares
    /// `typedef void (*btf_trace_<name>)(void *__data, <args>)` for every tracepoint.
    fn tracepoint_proto(&self, tracepoint: &str) -> Result<Span, BtfError> {
        let typedef_name = format!("btf_trace_{tracepoint}");
        let bad = |reason: String| BtfError::BadTracepoint {
            name: tracepoint.to_owned(),
            reason,
        };
        let target = self
            .ids_named(&typedef_name)
            .find_map(|(_, t)| match t.kind {
                Kind::Typedef(to) => Some(to),
                _ => None,
            })
            .ok_or_else(|| BtfError::NoSuchTracepoint {
                name: tracepoint.to_owned(),
            })?;
        let Kind::Ptr(pointee) = self.ty(self.skip_aliases(target)?)?.kind else {
            return Err(bad(format!("it names `{}`", self.render(target))));
        };
        let Kind::FuncProto { params, .. } = self.ty(self.skip_aliases(pointee)?)?.kind else {
            return Err(bad(format!("it names `{}`", self.render(target))));
        };
        Ok(params)
    }

    /// Arguments of a BTF tracepoint (what a `tp_btf` program receives), read from the
    /// `btf_trace_<name>` typedef, without the leading `void *__data` that is the tracepoint's
    /// private data rather than an argument.
    pub fn tracepoint_params(&self, tracepoint: &str) -> Result<Vec<Param>, BtfError> {
        let span = self.tracepoint_proto(tracepoint)?;
        let bad = |reason: String| BtfError::BadTracepoint {
            name: tracepoint.to_owned(),
            reason,
        };
        let Some((data, args)) = self.params_of(span).split_first() else {
            return Err(bad("its prototype has no parameters".to_owned()));
        };
        // Refuse rather than silently drop a real argument if the convention ever changes.
        let is_void_ptr = match self.ty(self.skip_aliases(data.ty)?)?.kind {
            Kind::Ptr(to) => matches!(self.ty(self.skip_aliases(to)?)?.kind, Kind::Void),
            _ => false,
        };
        if !is_void_ptr {
            return Err(bad(format!(
                "its first parameter is `{}`",
                self.render(data.ty)
            )));
        }
        Ok(args
            .iter()
            .map(|p| Param {
                name: self.str_at(p.name_off).to_owned(),
                // A trailing unnamed void parameter is how BTF spells `...`.
                ty: if p.ty == 0 && p.name_off == 0 {
                    "...".to_owned()
                } else {
                    self.render(p.ty)
                },
            })
            .collect())
    }

    /// Whether the kernel has a BTF tracepoint of this name with a well-formed typedef.
    pub fn has_tracepoint(&self, tracepoint: &str) -> bool {
        self.tracepoint_proto(tracepoint).is_ok()
    }

    /// C-like rendering of a type: `struct request *`, `const char *`, `unsigned int`,
    /// `blk_status_t` (typedefs are shown by name, not expanded). Type tags such as `__user`
    /// are left out so the result matches the source as usually written.
    fn render(&self, id: u32) -> String {
        let mut budget = RENDER_BUDGET;
        self.render_inner(id, &mut budget, 0)
    }

    fn render_inner(&self, id: u32, budget: &mut u32, depth: usize) -> String {
        if *budget == 0 || depth > MAX_CHAIN {
            return "...".to_owned();
        }
        *budget -= 1;
        let Some(t) = self.types.get(id as usize) else {
            return format!("<bad type id {id}>");
        };
        let name = self.str_at(t.name_off);
        let tagged = |tag: &str| {
            if name.is_empty() {
                format!("{tag} {{...}}")
            } else {
                format!("{tag} {name}")
            }
        };
        let mut sub = |to: u32| self.render_inner(to, budget, depth + 1);
        match t.kind {
            Kind::Void => "void".to_owned(),
            Kind::Int { .. } | Kind::Float { .. } | Kind::Typedef(_) => name.to_owned(),
            Kind::Struct { .. } => tagged("struct"),
            Kind::Union { .. } => tagged("union"),
            Kind::Enum { .. } => tagged("enum"),
            Kind::Fwd { union } => tagged(if union { "union" } else { "struct" }),
            Kind::Ptr(to) => {
                if let Some(Kind::FuncProto { ret, params }) =
                    self.types.get(to as usize).map(|t| t.kind)
                {
                    let ret = sub(ret);
                    let args: Vec<String> = self
                        .params_of(params)
                        .iter()
                        .map(|p| {
                            if p.ty == 0 && p.name_off == 0 {
                                "...".to_owned()
                            } else {
                                sub(p.ty)
                            }
                        })
                        .collect();
                    return format!("{ret} (*)({})", args.join(", "));
                }
                pointer_to(sub(to))
            }
            Kind::Const(to) => qualify(self, "const", to, sub(to)),
            Kind::Volatile(to) => qualify(self, "volatile", to, sub(to)),
            Kind::Restrict(to) => qualify(self, "restrict", to, sub(to)),
            Kind::TypeTag(to) => sub(to),
            Kind::Array { elem, nelems } => format!("{}[{nelems}]", sub(elem)),
            Kind::FuncProto { ret, params } => {
                let ret = sub(ret);
                let args: Vec<String> = self.params_of(params).iter().map(|p| sub(p.ty)).collect();
                format!("{ret} ({})", args.join(", "))
            }
            Kind::Func | Kind::Var(_) | Kind::Datasec { .. } => name.to_owned(),
            Kind::DeclTag(to) => sub(to),
        }
    }
}

/// `T` -> `T *`, `T *` -> `T **`.
fn pointer_to(inner: String) -> String {
    if inner.ends_with('*') {
        inner + "*"
    } else {
        inner + " *"
    }
}

/// Qualifiers go after a pointer they apply to (`char *const`) and before anything else
/// (`const char`).
fn qualify(btf: &Btf, qualifier: &str, target: u32, inner: String) -> String {
    let applies_to_pointer = btf
        .types
        .get(target as usize)
        .is_some_and(|t| matches!(t.kind, Kind::Ptr(_)));
    if applies_to_pointer {
        format!("{inner}{qualifier}")
    } else {
        format!("{qualifier} {inner}")
    }
}

fn span_start(len: usize) -> Result<u32, BtfError> {
    u32::try_from(len).map_err(|_| BtfError::malformed("more than 2^32 members"))
}

fn too_long(id: u32) -> BtfError {
    BtfError::malformed(format!(
        "type id {id} starts a chain of typedefs/qualifiers/arrays longer than {MAX_CHAIN} (a cycle?)"
    ))
}

fn too_big(id: u32) -> BtfError {
    BtfError::malformed(format!("type id {id} is larger than 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Minimal BTF encoder for building test blobs by hand.
    struct Enc {
        types: Vec<u8>,
        strs: Vec<u8>,
        next_id: u32,
        /// Offset added to local string offsets: non-zero for split BTF, whose strings follow
        /// the base's.
        str_base: u32,
    }

    impl Enc {
        fn new() -> Enc {
            Enc {
                types: Vec::new(),
                strs: vec![0],
                next_id: 1,
                str_base: 0,
            }
        }

        fn split(base: &Enc) -> Enc {
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

        fn word(&mut self, w: u32) {
            self.types.extend_from_slice(&w.to_le_bytes());
        }

        fn head(&mut self, name: &str, kind: u32, kflag: bool, vlen: usize, st: u32) -> u32 {
            let n = self.name(name);
            self.word(n);
            self.word((u32::from(kflag) << 31) | (kind << 24) | vlen as u32);
            self.word(st);
            let id = self.next_id;
            self.next_id += 1;
            id
        }

        fn int(&mut self, name: &str, size: u32, encoding: u32) -> u32 {
            let id = self.head(name, KIND_INT, false, 0, size);
            self.word((encoding << 24) | (size * 8));
            id
        }

        /// An old-style (no kind_flag) bitfield type: INT of `bits` width at `offset`.
        fn int_bits(&mut self, name: &str, size: u32, offset: u32, bits: u32) -> u32 {
            let id = self.head(name, KIND_INT, false, 0, size);
            self.word((offset << 16) | bits);
            id
        }

        fn refer(&mut self, kind: u32, name: &str, to: u32) -> u32 {
            self.head(name, kind, false, 0, to)
        }

        fn ptr(&mut self, to: u32) -> u32 {
            self.refer(KIND_PTR, "", to)
        }

        fn array(&mut self, elem: u32, index: u32, n: u32) -> u32 {
            let id = self.head("", KIND_ARRAY, false, 0, 0);
            self.word(elem);
            self.word(index);
            self.word(n);
            id
        }

        /// Members are (name, type, bit offset, bitfield bits); kind_flag is set when any
        /// member is a bitfield, as pahole does.
        fn composite(
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

        fn enum32(&mut self, name: &str, signed: bool, values: &[(&str, i32)]) -> u32 {
            let id = self.head(name, KIND_ENUM, signed, values.len(), 4);
            for &(n, v) in values {
                let n = self.name(n);
                self.word(n);
                self.word(v as u32);
            }
            id
        }

        fn enum64(&mut self, name: &str, signed: bool, values: &[(&str, u64)]) -> u32 {
            let id = self.head(name, KIND_ENUM64, signed, values.len(), 8);
            for &(n, v) in values {
                let n = self.name(n);
                self.word(n);
                self.word(v as u32);
                self.word((v >> 32) as u32);
            }
            id
        }

        fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
            let id = self.head("", KIND_FUNC_PROTO, false, params.len(), ret);
            for &(n, ty) in params {
                let n = self.name(n);
                self.word(n);
                self.word(ty);
            }
            id
        }

        /// `typedef void (*btf_trace_<name>)(params)`, as the kernel declares tracepoints.
        fn tracepoint(&mut self, name: &str, params: &[(&str, u32)]) -> u32 {
            let proto = self.func_proto(0, params);
            let ptr = self.ptr(proto);
            self.refer(KIND_TYPEDEF, &format!("btf_trace_{name}"), ptr)
        }

        fn finish(&self) -> Vec<u8> {
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

    // ---- Against the running kernel -------------------------------------------------------

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
}
