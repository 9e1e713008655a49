//! The layout questions the loader asks before it fills offsets into the eBPF programs:
//! the offset, size and type of a member along a dotted path (through anonymous members,
//! typedefs and qualifiers; bitfields in both encodings), the size of a struct, the values
//! of an enum or of one enumerator. Every chain walk is depth-limited.

use std::collections::HashSet;

use super::{Btf, BtfError, Kind, MAX_CHAIN, Member, too_long};

/// How deep anonymous struct/union members may nest; bounds recursion on garbage input.
const MAX_ANON_DEPTH: usize = 32;

/// Where a member path led: its bit offset from the start of the outer struct, its bitfield
/// width (0 for an ordinary member) and its type.
#[derive(Debug, Clone, Copy)]
struct MemberLoc {
    bit_offset: u64,
    bits: u32,
    ty: u32,
}

impl Btf {
    fn is_composite(&self, id: u32) -> bool {
        matches!(
            self.types.get(id as usize).map(|t| t.kind),
            Some(Kind::Struct { .. } | Kind::Union { .. })
        )
    }

    /// Size in bytes of type `id`; `what` names it in the error if it has none.
    pub(super) fn size_of(&self, id: u32, what: &str) -> Result<u32, BtfError> {
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
}

fn too_big(id: u32) -> BtfError {
    BtfError::malformed(format!("type id {id} is larger than 4 GiB"))
}
