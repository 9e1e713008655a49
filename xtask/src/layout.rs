//! `cargo xtask layout`: the layout rules as a check CI runs (a step of `cargo xtask test`).
//!
//! 1. No import cycle between the modules of a crate. Each file-module's references to other
//!    modules (`use` items, inline `crate::`/`self::`/`super::` paths) become edges of a graph;
//!    an edge between two files is lifted to the two siblings just below their lowest common
//!    ancestor, and a cycle among siblings is a finding. A child using its ancestors' items
//!    (or a parent its children's) is how modules nest and is not an edge. Test-only code
//!    (`#[cfg(test)]` items, modules declared only under it, test-support features) is left
//!    out: tests may reach anywhere.
//! 2. Crates depend only on crates of lower layers ([`LAYERS`]), dev-dependencies too, and the
//!    product crates not on the test rig.
//!
//! The sources are read with a small tokenizer (comments, strings and character literals
//! skipped; no macro expansion), enough for `use` trees and paths. Owns the rules and their
//! reading of the sources; must not change a file.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    fs,
    path::Path,
};

use anyhow::{Context as _, bail};

use crate::cmd;

/// The userspace crates bottom-up, as (directory, package): each may depend only on those
/// before it. The eBPF programs' crate is built for the kernel and is not checked here.
const LAYERS: &[(&str, &str)] = &[
    ("iosched-trace-common", "iosched-trace-common"),
    ("iosched-disk", "iosched-disk"),
    ("iosched-core", "iosched-core"),
    ("iosched-model", "iosched-model"),
    ("iosched-trace", "iosched-trace"),
    ("iosched-testbed", "iosched-testbed"),
    ("xtask", "xtask"),
    ("tests", "iosched-trace-tests"),
];

/// What users run; none of it may need the test rig.
const PRODUCT: &[&str] = &[
    "iosched-core",
    "iosched-model",
    "iosched-disk",
    "iosched-trace",
];
const TEST_RIG: &str = "iosched-testbed";

/// Crates (directories) whose modules are checked for cycles.
const MODULE_CRATES: &[&str] = &[
    "iosched-core",
    "iosched-model",
    "iosched-disk",
    "iosched-trace",
    "iosched-testbed",
    "xtask",
    "tests",
];

/// Features that exist only to give other crates' tests fixtures: code behind them is test
/// code (iosched-core's Cargo.toml says so of `test-support`).
const TEST_FEATURES: &[&str] = &["test-support"];

pub fn run() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let mut findings = Vec::new();

    let mut manifests = Vec::new();
    for (dir, package) in LAYERS {
        let path = root.join(dir).join("Cargo.toml");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        manifests.push((*package, text));
    }
    findings.extend(layer_findings(&manifests));

    let mut files_read = 0;
    for dir in MODULE_CRATES {
        let package = LAYERS
            .iter()
            .find(|(d, _)| d == dir)
            .map_or(*dir, |(_, p)| p);
        let src = root.join(dir).join("src");
        let tree = read_tree(&src).with_context(|| format!("reading {}", src.display()))?;
        files_read += tree.len();
        for crate_root in crate_roots(&tree) {
            for cycle in module_cycles(&tree, &crate_root) {
                findings.push(format!("{package}: {}", cycle.path.join(" -> ")));
                for edge in &cycle.because {
                    findings.push(format!("    {edge}"));
                }
            }
        }
    }

    if findings.is_empty() {
        println!(
            "layout: ok ({} crates layered, {} source files, no module cycle)",
            LAYERS.len(),
            files_read
        );
        return Ok(());
    }
    for f in &findings {
        println!("{f}");
    }
    let problems = findings.iter().filter(|f| !f.starts_with(' ')).count();
    bail!("layout: {problems} problem(s), listed above")
}

// ---------------------------------------------------------------------------------------------
// Crate layers.

/// Every dependency of `manifests` ((package, Cargo.toml text), in [`LAYERS`] order) on a
/// crate of the same or a higher layer, and every product crate's on the test rig.
fn layer_findings(manifests: &[(&str, String)]) -> Vec<String> {
    let layer = |package: &str| LAYERS.iter().position(|(_, p)| *p == package);
    let mut findings = Vec::new();
    for (package, text) in manifests {
        let Some(own) = layer(package) else {
            continue;
        };
        for (section, dep) in dependencies(text) {
            if PRODUCT.contains(package) && dep == TEST_RIG {
                findings.push(format!(
                    "{package}: depends on {dep} ([{section}]): the product must not need the \
                     test rig"
                ));
            } else if let Some(theirs) = layer(&dep)
                && theirs >= own
            {
                findings.push(format!(
                    "{package}: depends on {dep} ([{section}]), which is {} (layers bottom-up: {})",
                    if theirs == own {
                        "itself"
                    } else {
                        "a higher layer"
                    },
                    LAYERS
                        .iter()
                        .map(|(_, p)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    findings
}

/// The (section, crate) of every dependency a Cargo.toml names: `[dependencies]`,
/// `[dev-dependencies]`, `[build-dependencies]`, their `[target.'...'.*]` forms, and
/// `[dependencies.NAME]` tables.
fn dependencies(manifest: &str) -> Vec<(String, String)> {
    let mut deps = Vec::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[') {
            section = header.trim_end_matches(']').trim().to_owned();
            // `[dependencies.foo]`: a table for one dependency.
            for kind in ["dependencies", "dev-dependencies", "build-dependencies"] {
                if let Some(name) = section.strip_prefix(&format!("{kind}.")) {
                    deps.push((kind.to_owned(), name.trim_matches('"').to_owned()));
                }
            }
            continue;
        }
        let is_dep_section = ["dependencies", "dev-dependencies", "build-dependencies"]
            .iter()
            .any(|kind| section == *kind || section.ends_with(&format!(".{kind}")));
        if !is_dep_section {
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            // `name = ...` or `name.workspace = true`.
            let name = key.trim().split('.').next().unwrap_or("").trim_matches('"');
            if !name.is_empty() {
                deps.push((section.clone(), name.to_owned()));
            }
        }
    }
    deps
}

// ---------------------------------------------------------------------------------------------
// Module cycles.

/// A crate's sources: path relative to `src/` (with `/`) -> contents.
type SourceTree = BTreeMap<String, String>;

fn read_tree(src: &Path) -> anyhow::Result<SourceTree> {
    fn walk(dir: &Path, rel: &str, tree: &mut SourceTree) -> anyhow::Result<()> {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type()?.is_dir() {
                walk(&path, &rel, tree)?;
            } else if name.ends_with(".rs") {
                let text = fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                tree.insert(rel, text);
            }
        }
        Ok(())
    }
    let mut tree = SourceTree::new();
    walk(src, "", &mut tree)?;
    Ok(tree)
}

/// The crate roots cargo builds from `src/`: the library, the main binary, `src/bin/*.rs`.
fn crate_roots(tree: &SourceTree) -> Vec<String> {
    tree.keys()
        .filter(|p| {
            *p == "lib.rs"
                || *p == "main.rs"
                || p.strip_prefix("bin/").is_some_and(|f| !f.contains('/'))
        })
        .cloned()
        .collect()
}

/// A module cycle: the sibling modules' files (first repeated at the end), and for each step
/// the reference that makes it.
#[derive(Debug, PartialEq, Eq)]
struct Cycle {
    path: Vec<String>,
    because: Vec<String>,
}

/// A module's path from the crate root: `["sched", "bfq"]`.
type ModPath = Vec<String>;

/// The module tree of one crate root, test-only modules left out.
struct ModuleTree {
    /// File modules: path -> file.
    files: BTreeMap<ModPath, String>,
    /// File and inline modules.
    all: BTreeSet<ModPath>,
    /// Each file module's scan.
    scans: BTreeMap<ModPath, Scan>,
}

impl ModuleTree {
    fn build(tree: &SourceTree, root: &str) -> Self {
        let mut this = Self {
            files: BTreeMap::new(),
            all: BTreeSet::new(),
            scans: BTreeMap::new(),
        };
        let root_dir = root.rsplit_once('/').map_or("", |(dir, _)| dir).to_owned();
        let mut queue = VecDeque::from([(ModPath::new(), root.to_owned(), root_dir)]);
        while let Some((path, file, dir)) = queue.pop_front() {
            let Some(text) = tree.get(&file) else {
                continue;
            };
            let scan = scan(&strip_test_only(tokenize(text)));
            for (inline, name) in &scan.children {
                let mut dir = dir.clone();
                for m in inline.iter().chain([name]) {
                    dir = if dir.is_empty() {
                        m.clone()
                    } else {
                        format!("{dir}/{m}")
                    };
                }
                // `a/b.rs` or `a/b/mod.rs`; either way its children live in `a/b/`.
                let candidates = [format!("{dir}.rs"), format!("{dir}/mod.rs")];
                if let Some(child) = candidates.into_iter().find(|c| tree.contains_key(c)) {
                    let mut child_path = path.clone();
                    child_path.extend(inline.iter().cloned());
                    child_path.push(name.clone());
                    queue.push_back((child_path, child, dir));
                }
            }
            for inline in &scan.inline_modules {
                let mut p = path.clone();
                p.extend(inline.iter().cloned());
                this.all.insert(p);
            }
            this.all.insert(path.clone());
            this.files.insert(path.clone(), file);
            this.scans.insert(path, scan);
        }
        this
    }

    /// The module a reference from `from` (a file module, then `inline` modules in it) names:
    /// its path from the root, or `None` for another crate's.
    fn resolve(&self, from: &ModPath, inline: &[String], segments: &[String]) -> Option<ModPath> {
        let here: ModPath = from.iter().chain(inline).cloned().collect();
        let (mut path, rest) = match segments.first()?.as_str() {
            "crate" => (ModPath::new(), &segments[1..]),
            "self" | "super" => (here, segments),
            // A `use` of a child module by its bare name (`use sched::Kind`).
            name => {
                let mut child = here.clone();
                child.push(name.to_owned());
                if !self.all.contains(&child) {
                    return None;
                }
                (here, segments)
            }
        };
        for seg in rest {
            match seg.as_str() {
                "self" => {}
                "super" => {
                    path.pop()?;
                }
                name => path.push(name.to_owned()),
            }
        }
        Some(path)
    }

    /// The file module holding `path` (the longest prefix of it that is a file).
    fn file_module(&self, path: &ModPath) -> ModPath {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| self.files.contains_key(p))
            .unwrap_or_default()
    }

    /// How a sibling node is shown: its file, or `file::inline` for an inline module.
    fn show(&self, node: &ModPath) -> String {
        let file = self.file_module(node);
        let mut shown = self.files.get(&file).cloned().unwrap_or_default();
        for seg in &node[file.len()..] {
            shown.push_str("::");
            shown.push_str(seg);
        }
        shown
    }
}

/// The module cycles of the crate rooted at `root` (a file of `tree`), each shown once through
/// every sibling in it.
fn module_cycles(tree: &SourceTree, root: &str) -> Vec<Cycle> {
    let modules = ModuleTree::build(tree, root);

    // Sibling edges, each with the first reference that makes it.
    let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for (from, scan) in &modules.scans {
        for r in &scan.refs {
            let Some(target) = modules.resolve(from, &r.inline, &r.segments) else {
                continue;
            };
            let to = modules.file_module(&target);
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // the same file, an ancestor or a descendant
            }
            let (a, b) = (from[..=common].to_vec(), to[..=common].to_vec());
            edges.entry(a).or_default().entry(b).or_insert_with(|| {
                format!(
                    "{}:{} uses {}",
                    modules.files[from],
                    r.line,
                    r.segments.join("::")
                )
            });
        }
    }

    let reach = |start: &ModPath| -> BTreeSet<ModPath> {
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([start.clone()]);
        while let Some(n) = queue.pop_front() {
            for next in edges.get(&n).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(next.clone()) {
                    queue.push_back(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<ModPath, BTreeSet<ModPath>> =
        edges.keys().map(|n| (n.clone(), reach(n))).collect();

    let mut covered = BTreeSet::new();
    let mut cycles = Vec::new();
    for start in edges.keys() {
        if covered.contains(start) || !reachable[start].contains(start) {
            continue;
        }
        // The shortest way back to `start`, within its strongly connected component.
        let in_component = |n: &ModPath| {
            reachable[start].contains(n) && reachable.get(n).is_some_and(|r| r.contains(start))
        };
        let mut came_from: BTreeMap<ModPath, ModPath> = BTreeMap::new();
        let mut queue = VecDeque::from([start.clone()]);
        'search: while let Some(n) = queue.pop_front() {
            for next in edges.get(&n).into_iter().flat_map(|e| e.keys()) {
                if !in_component(next) || came_from.contains_key(next) {
                    continue;
                }
                came_from.insert(next.clone(), n.clone());
                if next == start {
                    break 'search;
                }
                queue.push_back(next.clone());
            }
        }
        let mut nodes = vec![start.clone()];
        let mut n = came_from[start].clone();
        while n != *start {
            nodes.push(n.clone());
            n = came_from[&n].clone();
        }
        nodes[1..].reverse();
        nodes.push(start.clone());
        let because = nodes
            .windows(2)
            .map(|w| {
                format!(
                    "{} -> {}: {}",
                    modules.show(&w[0]),
                    modules.show(&w[1]),
                    edges[&w[0]][&w[1]]
                )
            })
            .collect();
        covered.extend(nodes.iter().cloned());
        cycles.push(Cycle {
            path: nodes.iter().map(|n| modules.show(n)).collect(),
            because,
        });
    }
    cycles
}

// ---------------------------------------------------------------------------------------------
// Reading Rust sources.

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// A string literal's text (escapes left as written).
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
    /// Numbers, character literals, lifetimes.
    Other,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: u32,
}

/// Rust source as tokens, comments dropped; good enough for items and paths, not a lexer.
fn tokenize(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let mut out = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    // Skips a quoted literal whose opening quote is at `i` (raw with `hashes` `#`s, or with
    // escapes); returns the index after it and its text.
    let quoted = |mut i: usize, hashes: Option<usize>, line: &mut u32| -> (usize, String) {
        let mut text = String::new();
        i += 1;
        while i < c.len() {
            match (c[i], hashes) {
                ('\\', None) => {
                    text.push(c[i]);
                    text.push(at(i + 1));
                    if at(i + 1) == '\n' {
                        *line += 1;
                    }
                    i += 2;
                    continue;
                }
                ('"', None) => return (i + 1, text),
                ('"', Some(n)) if (1..=n).all(|k| at(i + k) == '#') => return (i + 1 + n, text),
                (ch, _) => {
                    if ch == '\n' {
                        *line += 1;
                    }
                    text.push(ch);
                }
            }
            i += 1;
        }
        (i, text)
    };
    let ident_char = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let ch = c[i];
        let start_line = line;
        let mut push = |tok: Tok| {
            out.push(Token {
                tok,
                line: start_line,
            })
        };
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' {
            let (next, text) = quoted(i, None, &mut line);
            push(Tok::Str(text));
            i = next;
        } else if let Some((prefix, raw)) = literal_prefix(&c, i) {
            // b"..", b'..', r".."/r#".."#, br.., c"..", cr..
            let mut j = i + prefix;
            if at(j) == '\'' {
                // b'x', b'\n'
                j += if at(j + 1) == '\\' { 2 } else { 1 };
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                push(Tok::Other);
                i = j + 1;
            } else if raw {
                let hashes = c[j..].iter().take_while(|&&h| h == '#').count();
                let (next, text) = quoted(j + hashes, Some(hashes), &mut line);
                push(Tok::Str(text));
                i = next;
            } else {
                let (next, text) = quoted(j, None, &mut line);
                push(Tok::Str(text));
                i = next;
            }
        } else if ch == 'r' && at(i + 1) == '#' && ident_char(at(i + 2)) {
            // A raw identifier: never a keyword.
            let mut j = i + 2;
            while j < c.len() && ident_char(c[j]) {
                j += 1;
            }
            push(Tok::Ident(c[i..j].iter().collect()));
            i = j;
        } else if ch == '\'' {
            if at(i + 1) == '\\' {
                let mut j = i + 3;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label.
                i += 1;
                while i < c.len() && ident_char(c[i]) {
                    i += 1;
                }
            }
            push(Tok::Other);
        } else if ch.is_ascii_digit() {
            while i < c.len() && (ident_char(c[i]) || (c[i] == '.' && at(i + 1).is_ascii_digit())) {
                i += 1;
            }
            push(Tok::Other);
        } else if ident_char(ch) {
            let mut j = i;
            while j < c.len() && ident_char(c[j]) {
                j += 1;
            }
            push(Tok::Ident(c[i..j].iter().collect()));
            i = j;
        } else if ch == ':' && at(i + 1) == ':' {
            push(Tok::PathSep);
            i += 2;
        } else {
            push(Tok::Punct(ch));
            i += 1;
        }
    }
    out
}

/// At `i`, the length of a literal's prefix (`b`, `r`, `br`, `c`, `cr`) and whether the literal
/// is raw, if one starts there.
fn literal_prefix(c: &[char], i: usize) -> Option<(usize, bool)> {
    let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None; // inside an identifier
    }
    let raw_start = |k: usize| {
        at(k) == '"' || (at(k) == '#' && c[i + k..].iter().find(|&&h| h != '#') == Some(&'"'))
    };
    match (at(0), at(1)) {
        ('b', '"') | ('b', '\'') | ('c', '"') => Some((1, false)),
        ('b' | 'c', 'r') if raw_start(2) => Some((2, true)),
        ('r', _) if raw_start(1) => Some((1, true)),
        _ => None,
    }
}

fn is_punct(t: Option<&Token>, ch: char) -> bool {
    matches!(t, Some(Token { tok: Tok::Punct(p), .. }) if *p == ch)
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token {
            tok: Tok::Ident(s), ..
        }) => Some(s),
        _ => None,
    }
}

/// The index of the delimiter closing the one at `open`.
fn closing(tokens: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, t) in tokens.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    tokens.len()
}

/// `tokens` without test-only code: items, statements and fields under a `#[cfg]` that holds
/// only in tests, or everything when the file starts with such a `#![cfg]`.
fn strip_test_only(tokens: Vec<Token>) -> Vec<Token> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        if matches!(t.tok, Tok::Punct('#')) {
            let inner = is_punct(tokens.get(i + 1), '!');
            let open = i + 1 + usize::from(inner);
            if is_punct(tokens.get(open), '[') {
                let close = closing(&tokens, open);
                let attr = &tokens[open + 1..close.min(tokens.len())];
                if is_test_cfg(attr) {
                    if inner && depth == 0 {
                        return Vec::new();
                    }
                    if !inner {
                        i = skip_item(&tokens, close + 1);
                        continue;
                    }
                }
                out.extend_from_slice(&tokens[i..=close.min(tokens.len() - 1)]);
                i = close + 1;
                continue;
            }
        }
        match t.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        out.push(t.clone());
        i += 1;
    }
    out
}

/// Whether an attribute's tokens (inside `#[...]`) are a `cfg` that holds only in tests.
fn is_test_cfg(attr: &[Token]) -> bool {
    if ident(attr.first()) != Some("cfg") || !is_punct(attr.get(1), '(') {
        return false;
    }
    let mut i = 2;
    test_only(attr, &mut i)
}

/// Evaluates one cfg predicate at `i` (advancing past it): true when it can hold only in a
/// test build.
fn test_only(t: &[Token], i: &mut usize) -> bool {
    let Some(name) = ident(t.get(*i)) else {
        *i += 1;
        return false;
    };
    *i += 1;
    if is_punct(t.get(*i), '=') {
        *i += 1;
        let value = match t.get(*i) {
            Some(Token {
                tok: Tok::Str(s), ..
            }) => s.clone(),
            _ => String::new(),
        };
        *i += 1;
        return name == "feature" && TEST_FEATURES.contains(&value.as_str());
    }
    if !is_punct(t.get(*i), '(') {
        return name == "test";
    }
    *i += 1;
    let mut parts = Vec::new();
    while *i < t.len() && !is_punct(t.get(*i), ')') {
        parts.push(test_only(t, i));
        if is_punct(t.get(*i), ',') {
            *i += 1;
        }
    }
    *i += 1;
    match name {
        "any" => !parts.is_empty() && parts.iter().all(|&p| p),
        "all" => parts.iter().any(|&p| p),
        _ => false, // not(..) and the unknown
    }
}

/// The index just past the item (or statement, field, match arm) starting at `start`.
fn skip_item(tokens: &[Token], start: usize) -> usize {
    let mut i = start;
    while is_punct(tokens.get(i), '#') && is_punct(tokens.get(i + 1), '[') {
        i = closing(tokens, i + 1) + 1;
    }
    if is_punct(tokens.get(i), '{') {
        return closing(tokens, i) + 1; // a block statement
    }
    let mut j = i;
    if ident(tokens.get(j)) == Some("pub") {
        j += 1;
        if is_punct(tokens.get(j), '(') {
            j = closing(tokens, j) + 1;
        }
    }
    while matches!(
        ident(tokens.get(j)),
        Some("unsafe" | "async" | "default" | "extern")
    ) || (ident(tokens.get(j)) == Some("const")
        && matches!(ident(tokens.get(j + 1)), Some("fn" | "unsafe" | "async")))
    {
        j += 1;
        if matches!(
            tokens.get(j),
            Some(Token {
                tok: Tok::Str(_),
                ..
            })
        ) {
            j += 1; // extern "C"
        }
    }
    let kind = ident(tokens.get(j)).unwrap_or("");
    let ends_with_semicolon = matches!(kind, "use" | "type" | "let" | "static" | "const");
    let item = ends_with_semicolon
        || matches!(
            kind,
            "fn" | "mod" | "impl" | "struct" | "enum" | "trait" | "union" | "macro_rules" | "crate"
        );
    let macro_call = !item && is_punct(tokens.get(j + 1), '!');
    let mut depth = 0usize;
    let mut k = i;
    while k < tokens.len() {
        match tokens[k].tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(close @ (')' | ']' | '}')) => {
                if depth == 0 {
                    return k; // the end of what encloses the item
                }
                depth -= 1;
                if close == '}' && depth == 0 && !ends_with_semicolon && (item || macro_call) {
                    return k + 1;
                }
            }
            Tok::Punct(';') if depth == 0 => return k + 1,
            Tok::Punct(',') if depth == 0 && !item => return k + 1,
            _ => {}
        }
        k += 1;
    }
    k
}

/// One path a file names: `segments` as written, from inside the `inline` modules it is in.
#[derive(Debug)]
struct Ref {
    inline: Vec<String>,
    segments: Vec<String>,
    line: u32,
}

/// What a file declares and refers to.
#[derive(Debug, Default)]
struct Scan {
    /// `mod name;` declarations, with the inline modules they are in.
    children: Vec<(Vec<String>, String)>,
    /// Inline modules (`mod name { .. }`), as paths inside the file.
    inline_modules: Vec<Vec<String>>,
    refs: Vec<Ref>,
}

fn scan(tokens: &[Token]) -> Scan {
    let mut found = Scan::default();
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let here = |inline: &[(String, usize)]| inline.iter().map(|(n, _)| n.clone()).collect();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        match &t.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            Tok::Ident(kw) if kw == "mod" => {
                if let Some(name) = ident(tokens.get(i + 1)) {
                    if is_punct(tokens.get(i + 2), ';') {
                        found.children.push((here(&inline), name.to_owned()));
                        i += 3;
                        continue;
                    }
                    if is_punct(tokens.get(i + 2), '{') {
                        depth += 1;
                        inline.push((name.to_owned(), depth));
                        found.inline_modules.push(here(&inline));
                        i += 3;
                        continue;
                    }
                }
            }
            // Not `impl Trait + use<'a>`, which captures lifetimes and imports nothing.
            Tok::Ident(kw) if kw == "use" && !is_punct(tokens.get(i + 1), '<') => {
                let mut j = i + 1;
                let mut leaves = Vec::new();
                if !matches!(tokens.get(j).map(|t| &t.tok), Some(Tok::PathSep)) {
                    use_tree(tokens, &mut j, Vec::new(), &mut leaves);
                }
                for segments in leaves {
                    found.refs.push(Ref {
                        inline: here(&inline),
                        segments,
                        line: t.line,
                    });
                }
                while j < tokens.len() && !is_punct(tokens.get(j), ';') {
                    j += 1;
                }
                i = j + 1;
                continue;
            }
            Tok::Ident(kw)
                if matches!(kw.as_str(), "crate" | "self" | "super")
                    && matches!(tokens.get(i + 1).map(|t| &t.tok), Some(Tok::PathSep)) =>
            {
                let mut segments = vec![kw.clone()];
                let mut j = i + 1;
                while matches!(tokens.get(j).map(|t| &t.tok), Some(Tok::PathSep)) {
                    let Some(seg) = ident(tokens.get(j + 1)) else {
                        break;
                    };
                    segments.push(seg.to_owned());
                    j += 2;
                }
                found.refs.push(Ref {
                    inline: here(&inline),
                    segments,
                    line: t.line,
                });
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// Reads a `use` tree at `i` into its leaf paths (`a::{b, c::{self, d}}` -> `a::b`, `a::c`,
/// `a::c::d`; a glob names its module).
fn use_tree(tokens: &[Token], i: &mut usize, mut path: Vec<String>, leaves: &mut Vec<Vec<String>>) {
    loop {
        match tokens.get(*i).map(|t| &t.tok) {
            Some(Tok::Ident(seg)) => {
                path.push(seg.clone());
                *i += 1;
                if matches!(tokens.get(*i).map(|t| &t.tok), Some(Tok::PathSep)) {
                    *i += 1;
                    continue;
                }
                if ident(tokens.get(*i)) == Some("as") {
                    *i += 2;
                }
                if path.len() > 1 && path.last().is_some_and(|s| s == "self") {
                    path.pop();
                }
                leaves.push(path);
                return;
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                leaves.push(path);
                return;
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < tokens.len() && !is_punct(tokens.get(*i), '}') {
                    let before = *i;
                    use_tree(tokens, i, path.clone(), leaves);
                    if is_punct(tokens.get(*i), ',') {
                        *i += 1;
                    } else if *i == before {
                        *i += 1; // not a use tree; step over it
                    }
                }
                *i += 1;
                return;
            }
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> SourceTree {
        files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    }

    fn cycles(files: &[(&str, &str)]) -> Vec<String> {
        module_cycles(&tree(files), "lib.rs")
            .into_iter()
            .map(|c| c.path.join(" -> "))
            .collect()
    }

    #[test]
    fn a_two_file_cycle_is_found_with_its_references() {
        let files = tree(&[
            ("lib.rs", "pub mod a;\npub mod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B;\n\npub fn f(_: crate::a::A) {}\n"),
        ]);
        let found = module_cycles(&files, "lib.rs");
        assert_eq!(
            found,
            [Cycle {
                path: vec!["a.rs".into(), "b.rs".into(), "a.rs".into()],
                because: vec![
                    "a.rs -> b.rs: a.rs:1 uses crate::b::B".into(),
                    "b.rs -> a.rs: b.rs:3 uses crate::a::A".into(),
                ],
            }]
        );
    }

    #[test]
    fn a_parent_and_its_child_are_not_a_cycle() {
        let found = cycles(&[
            ("lib.rs", "mod p;\nuse p::c::C;\n"),
            ("p/mod.rs", "pub mod c;\nuse self::c::C;\npub struct P;\n"),
            (
                "p/c.rs",
                "use super::P;\nuse crate::p::P as Q;\npub struct C(crate::P);\n",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn test_only_references_are_ignored() {
        let found = cycles(&[
            (
                "lib.rs",
                "mod a;\nmod b;\n#[cfg(test)]\nmod t;\n#[cfg(any(test, feature = \"test-support\"))]\npub mod fixtures;\n",
            ),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            (
                "b.rs",
                "pub struct B;\n\
                 #[cfg(test)]\nuse crate::a::A;\n\
                 #[cfg(test)]\nfn helper() -> crate::a::A { crate::a::A }\n\
                 fn g() {\n    #[cfg(test)]\n    let _ = crate::a::A;\n}\n\
                 #[cfg(test)]\nmod tests {\n    use crate::a::*;\n}\n",
            ),
            // Declared only under cfg(test): not part of the crate's modules at all.
            ("t.rs", "use crate::a::A;\nuse crate::b::B;\n"),
            ("fixtures.rs", "use crate::a::A;\n"),
        ]);
        assert!(found.is_empty(), "{found:?}");
        // The same reference outside test code is a cycle.
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            (
                "b.rs",
                "pub struct B;\n#[cfg(not(test))]\nuse crate::a::A;\n",
            ),
        ]);
        assert_eq!(found, ["a.rs -> b.rs -> a.rs"]);
    }

    #[test]
    fn a_grouped_use_resolves_each_leaf_to_its_file() {
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            (
                "a.rs",
                "use crate::{\n    c::C,\n    b::{self, d::{D, E as F}},\n};\npub struct A;\n",
            ),
            ("b/mod.rs", "pub mod d;\n"),
            ("b/d.rs", "pub struct D;\npub struct E;\nuse crate::a::A;\n"),
            ("c.rs", "pub struct C;\n"),
        ]);
        // b/d.rs is in b: the cycle is between the siblings a and b.
        assert_eq!(found, ["a.rs -> b/mod.rs -> a.rs"]);
    }

    #[test]
    fn super_super_resolves_two_levels_up() {
        let found = cycles(&[
            ("lib.rs", "mod x;\n"),
            ("x/mod.rs", "mod a;\nmod b;\n"),
            ("x/a/mod.rs", "mod deep;\npub struct A;\n"),
            ("x/a/deep.rs", "fn f() { super::super::b::B::new(); }\n"),
            ("x/b.rs", "use crate::x::a::A;\npub struct B;\n"),
        ]);
        assert_eq!(found, ["x/a/mod.rs -> x/b.rs -> x/a/mod.rs"]);
        // One `super` fewer names x::a itself: the file's own parent, no cycle.
        let found = cycles(&[
            ("lib.rs", "mod x;\n"),
            ("x/mod.rs", "mod a;\nmod b;\n"),
            ("x/a/mod.rs", "mod deep;\npub struct A;\n"),
            ("x/a/deep.rs", "fn f() { super::A; }\n"),
            ("x/b.rs", "use crate::x::a::A;\npub struct B;\n"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn comments_strings_and_chars_name_no_module() {
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\n"),
            (
                "b.rs",
                "// use crate::a::A;\n/* crate::a /* nested */ crate::a */\n\
                 const S: &str = \"crate::a::A\";\nconst R: &str = r#\"\" crate::a \"#;\n\
                 const Q: char = '\"';\nconst E: char = '\\'';\nfn f<'a>(x: &'a str) {}\n\
                 const T: &str = \"use crate::a::A;\";\n",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn three_siblings_in_a_ring_are_one_cycle() {
        let found = cycles(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::X;\n"),
            ("b.rs", "use super::c::X;\n"),
            ("c.rs", "fn f() { crate::a::g() }\n"),
        ]);
        assert_eq!(found, ["a.rs -> b.rs -> c.rs -> a.rs"]);
    }

    #[test]
    fn crate_roots_are_the_library_and_the_binaries() {
        let files = tree(&[
            ("lib.rs", ""),
            ("main.rs", ""),
            ("bin/tool.rs", ""),
            ("bin/tool/helper.rs", ""),
            ("other.rs", ""),
        ]);
        assert_eq!(crate_roots(&files), ["bin/tool.rs", "lib.rs", "main.rs"]);
    }

    #[test]
    fn dependencies_on_higher_layers_are_findings() {
        let manifests = vec![
            (
                "iosched-core",
                "[package]\nname = \"iosched-core\"\n\n[dependencies]\n\
                 iosched-trace-common = { workspace = true }\nthiserror = \"2\"\n\
                 iosched-model = { path = \"../iosched-model\" }\n"
                    .to_string(),
            ),
            (
                "iosched-model",
                "[dependencies]\niosched-core = { path = \"../iosched-core\" }\n\n\
                 [dev-dependencies]\niosched-trace-common.workspace = true\n\
                 iosched-trace = { path = \"../iosched-trace\" }\n"
                    .to_string(),
            ),
            (
                "iosched-trace",
                "[dependencies.iosched-testbed]\npath = \"../iosched-testbed\"\n".to_string(),
            ),
            (
                "xtask",
                "[dependencies]\niosched-testbed = { path = \"../iosched-testbed\" }\n".to_string(),
            ),
        ];
        let found = layer_findings(&manifests);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].starts_with("iosched-core: depends on iosched-model ([dependencies])"));
        assert!(
            found[1].starts_with("iosched-model: depends on iosched-trace ([dev-dependencies])")
        );
        assert!(found[2].starts_with("iosched-trace: depends on iosched-testbed"));
        assert!(found[2].contains("test rig"));
    }
}
