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
//!
//! This file holds the decoded tables ([`Btf`]), the errors, reading BTF from sysfs, and
//! the lookups the others share (strings, names, type ids, spans, aliases).
//! - `parse`: the `.BTF` format: the header, the sections, type records into the tables;
//! - `layout`: member offsets, sizes and types, struct sizes, enum values;
//! - `tracepoint`: the arguments of BTF tracepoints, from their `btf_trace_*` typedefs;
//! - `render`: a type written as C, for messages and member types.

mod layout;
mod parse;
mod render;
#[cfg(test)]
mod tests;
mod tracepoint;

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

pub use tracepoint::Param;

/// Where the kernel exposes its own BTF (needs `CONFIG_DEBUG_INFO_BTF`).
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Directory holding the split BTF of loaded modules, one file per module.
const SYS_BTF_DIR: &str = "/sys/kernel/btf";

/// Longest chain of typedefs, qualifiers and array dimensions followed. Real chains are a few
/// links deep (`dev_t` -> `__kernel_dev_t` -> `u32` -> `__u32` -> `unsigned int`); the cap
/// only exists so that cyclic garbage ends in an error instead of a hang.
const MAX_CHAIN: usize = 64;

/// Shown for a name whose bytes are not UTF-8 (kernel BTF names are ASCII identifiers, so this
/// only appears for damaged input); it never equals a name anyone looks up.
const BAD_NAME: &str = "\u{fffd}";

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

    /// Number of type ids, counting id 0 (`void`); the first id of a split BTF on top of this.
    pub fn type_count(&self) -> usize {
        self.types.len()
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
}

fn too_long(id: u32) -> BtfError {
    BtfError::malformed(format!(
        "type id {id} starts a chain of typedefs/qualifiers/arrays longer than {MAX_CHAIN} (a cycle?)"
    ))
}
