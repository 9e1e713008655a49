//! Decoding the raw `.BTF` format (the kernel's `Documentation/bpf/btf.rst`): the header,
//! the type and string sections, every type record into the flat tables, and the checks
//! that turn damaged input into a [`BtfError`] (offsets, counts and type ids bounds-checked,
//! references checked once all types are read). Base BTF, and split BTF (a module's, whose
//! type ids and string offsets continue the base's).

use super::{Btf, BtfError, Enumerator, Kind, Member, RawParam, Span, Type, name_hash};

/// `BTF_MAGIC`, stored in the byte order of the kernel that produced the data.
pub(super) const MAGIC: u16 = 0xeb9f;

/// Size of the version-1 header; newer kernels may append fields, which `hdr_len` tells us to
/// skip.
pub(super) const HEADER_LEN: u32 = 24;

// Type kinds, from `include/uapi/linux/btf.h`.
pub(super) const KIND_INT: u32 = 1;

pub(super) const KIND_PTR: u32 = 2;

pub(super) const KIND_ARRAY: u32 = 3;

pub(super) const KIND_STRUCT: u32 = 4;

pub(super) const KIND_UNION: u32 = 5;

pub(super) const KIND_ENUM: u32 = 6;

pub(super) const KIND_FWD: u32 = 7;

pub(super) const KIND_TYPEDEF: u32 = 8;

pub(super) const KIND_VOLATILE: u32 = 9;

pub(super) const KIND_CONST: u32 = 10;

pub(super) const KIND_RESTRICT: u32 = 11;

pub(super) const KIND_FUNC: u32 = 12;

pub(super) const KIND_FUNC_PROTO: u32 = 13;

pub(super) const KIND_VAR: u32 = 14;

pub(super) const KIND_DATASEC: u32 = 15;

pub(super) const KIND_FLOAT: u32 = 16;

pub(super) const KIND_DECL_TAG: u32 = 17;

pub(super) const KIND_TYPE_TAG: u32 = 18;

pub(super) const KIND_ENUM64: u32 = 19;

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

impl Btf {
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
}

fn span_start(len: usize) -> Result<u32, BtfError> {
    u32::try_from(len).map_err(|_| BtfError::malformed("more than 2^32 members"))
}
