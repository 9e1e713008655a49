//! A type written as C (`struct request *`, `const char *`, `blk_status_t`), for error
//! messages and [`Btf::member_type`]; a budget of type nodes bounds it on garbage input.

use super::{Btf, Kind, MAX_CHAIN};

/// Type nodes visited when rendering one type as C. Real types need a handful; the cap stops
/// garbage shaped like a wide DAG of function pointers from making rendering exponential.
const RENDER_BUDGET: u32 = 256;

impl Btf {
    /// C-like rendering of a type: `struct request *`, `const char *`, `unsigned int`,
    /// `blk_status_t` (typedefs are shown by name, not expanded). Type tags such as `__user`
    /// are left out so the result matches the source as usually written.
    pub(super) fn render(&self, id: u32) -> String {
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
