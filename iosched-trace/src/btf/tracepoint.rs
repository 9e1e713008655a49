//! BTF tracepoints: the arguments a `tp_btf` program receives, read from the typedef the
//! kernel declares for every tracepoint, `typedef void (*btf_trace_<name>)(void *__data,
//! <args>)`.

use std::{fmt, path::Path};

use super::{Btf, BtfError, Kind, SYS_BTF_DIR, Span};

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

impl Btf {
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
}

impl Btf {
    /// The loaded module that declares `tracepoint` (where e.g. kyber is built as a module,
    /// its `btf_trace_kyber_*` typedefs live only in `/sys/kernel/btf/kyber_iosched`), with
    /// `self` (vmlinux) extended by that module's split BTF. `None`: no loaded module
    /// declares it (the module is not loaded, or the kernel lacks the tracepoint).
    pub fn with_module_of_tracepoint(
        &self,
        tracepoint: &str,
    ) -> Result<Option<(String, Btf)>, BtfError> {
        self.with_module_of_tracepoint_in(Path::new(SYS_BTF_DIR), tracepoint)
    }

    /// [`with_module_of_tracepoint`](Self::with_module_of_tracepoint) over the module BTF
    /// files in `dir` (tests use a directory of their own).
    pub fn with_module_of_tracepoint_in(
        &self,
        dir: &Path,
        tracepoint: &str,
    ) -> Result<Option<(String, Btf)>, BtfError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(BtfError::Read {
                    path: dir.to_owned(),
                    source,
                });
            }
        };
        // The typedef's name as it sits in a string section: a module that does not hold
        // these bytes cannot declare the tracepoint, so only the one that does is parsed (a
        // distribution kernel has a hundred modules loaded, each with its own BTF).
        let needle = format!("btf_trace_{tracepoint}\0");
        let mut names: Vec<_> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|name| name != "vmlinux")
            .collect();
        names.sort();
        for module in names {
            let path = dir.join(&module);
            let Ok(bytes) = std::fs::read(&path) else {
                // Unloaded between the listing and the read.
                continue;
            };
            if !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                continue;
            }
            let btf = Btf::parse_split(&bytes, self)?;
            if btf.has_tracepoint(tracepoint) {
                return Ok(Some((module, btf)));
            }
        }
        Ok(None)
    }
}
