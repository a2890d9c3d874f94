//! The crate's modules form no import cycle: no two modules of `src/` (a
//! file is a module) import each other, directly or through others. A module
//! reaches another through `use` and through paths in its code
//! (`crate::reconcile::Context`, `super::answer::Verdict`); a path names the
//! deepest module it goes through (`crate::api::Findings` is `api`). A parent
//! declaring or re-exporting its own children (`pub mod http;`, `pub use
//! lookup::Lookup;`) is containment, not an import, so only edges to modules
//! outside a module's own subtree count. `#[cfg(test)]` code, comments and
//! string literals are left out: tests may reach anywhere.
//!
//! This is the rule `src/plan/mod.rs` states for the plans, held for the whole
//! crate. A failure names each cycle and, for every edge in it, a line that
//! makes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use petgraph::algo::tarjan_scc;
use petgraph::graphmap::DiGraphMap;

type Module = Vec<String>;

/// Every module of `src/` (but the binary's `main.rs`), by path, with its
/// source.
fn modules(src: &Path) -> BTreeMap<Module, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match module.last().map(String::as_str) {
                Some("main") if module.len() == 1 => continue,
                Some("lib") if module.len() == 1 => module.clear(),
                Some("mod") => {
                    module.pop();
                }
                _ => {}
            }
            found.insert(module, std::fs::read_to_string(&path).unwrap());
        }
    }
    found
}

/// The source without comments, string literals and `#[cfg(test)]` items.
fn code(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let chars: Vec<char> = source.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 12)].iter().collect();
        if rest.starts_with("//") {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if rest.starts_with("/*") {
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if chars[i] == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if chars[i] == '\''
            && i + 2 < chars.len()
            && (chars[i + 2] == '\'' || chars[i + 1] == '\\')
        {
            // A character literal ('"', '\n'); lifetimes ('a) pass through.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if rest == "#[cfg(test)]" {
            // Skip the attribute and the item it is on: to its `;`, or to the
            // end of its braced block.
            i += 12;
            let mut depth = 0usize;
            while i < chars.len() {
                match chars[i] {
                    ';' if depth == 0 => break,
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            i += 1;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// `a::b::{c, d::{e, f as g}}` as the paths it names: `[a,b,c]`, `[a,b,d,e]`,
/// `[a,b,d,f]`.
fn expand(path: &str) -> Vec<Module> {
    let path = path.trim();
    let Some(open) = path.find('{') else {
        return vec![segments(path)];
    };
    let head = segments(&path[..open]);
    let close = path.rfind('}').unwrap_or(path.len());
    let inner = &path[open + 1..close];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (at, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(|item| {
            let item = item.trim();
            let item = item.split(" as ").next().unwrap_or(item);
            expand(item).into_iter().map(|tail| {
                let mut whole = head.clone();
                whole.extend(tail);
                whole
            })
        })
        .collect()
}

fn segments(path: &str) -> Module {
    path.split("::")
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The paths a module's code names: its `use` trees and every
/// `crate::...`/`super::...` path elsewhere.
fn paths(code: &str) -> Vec<Module> {
    let mut found = Vec::new();
    let words: Vec<(usize, &str)> = code
        .match_indices(|c: char| !(c.is_alphanumeric() || c == '_'))
        .fold((Vec::new(), 0), |(mut words, start), (at, sep)| {
            if at > start {
                words.push((start, &code[start..at]));
            }
            (words, at + sep.len())
        })
        .0;
    for (at, word) in &words {
        if *word == "use" {
            let rest = &code[at + 3..];
            if let Some(end) = rest.find(';') {
                found.extend(expand(&rest[..end]));
            }
        } else if (*word == "crate" || *word == "super") && !code[..*at].ends_with("::") {
            let rest = &code[*at..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let path = segments(&rest[..end]);
            if path.len() > 1 {
                found.push(path);
            }
        }
    }
    found
}

/// The module a path from `module` goes to: the deepest module it names.
fn target(module: &Module, path: &Module, known: &BTreeMap<Module, String>) -> Option<Module> {
    let (mut at, rest): (Module, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "self" => (module.clone(), &path[1..]),
        "super" => {
            let mut at = module.clone();
            let mut rest = &path[..];
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
            (at, rest)
        }
        child => {
            let mut at = module.clone();
            at.push(child.to_owned());
            if !known.contains_key(&at) {
                return None;
            }
            (module.clone(), &path[..])
        }
    };
    for segment in rest {
        let mut deeper = at.clone();
        deeper.push(segment.clone());
        if !known.contains_key(&deeper) {
            break;
        }
        at = deeper;
    }
    Some(at)
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// Module -> modules it imports (outside its own subtree), each with the
/// path that makes the edge.
fn imports(known: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeMap<Module, String>> {
    let mut edges: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
    for (module, source) in known {
        let out = edges.entry(module.clone()).or_default();
        for path in paths(&code(source)) {
            let Some(to) = target(module, &path, known) else {
                continue;
            };
            if to.is_empty() || to.starts_with(module) {
                continue;
            }
            out.entry(to).or_insert_with(|| path.join("::"));
        }
    }
    edges
}

#[test]
fn no_module_of_the_crate_imports_one_that_imports_it_back() {
    let known = modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(known.len() > 40, "{} modules", known.len());
    let edges = imports(&known);
    let ids: BTreeMap<&Module, usize> = known.keys().enumerate().map(|(i, m)| (m, i)).collect();
    let modules: Vec<&Module> = known.keys().collect();
    let mut graph = DiGraphMap::<usize, ()>::new();
    for (from, tos) in &edges {
        for to in tos.keys() {
            graph.add_edge(ids[from], ids[to], ());
        }
    }
    let mut cycles = Vec::new();
    for component in tarjan_scc(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: BTreeSet<usize> = component.iter().copied().collect();
        let mut lines = Vec::new();
        for &from in &members {
            for (to, path) in &edges[modules[from]] {
                if members.contains(&ids[to]) {
                    lines.push(format!(
                        "  {} -> {} ({path})",
                        name(modules[from]),
                        name(to)
                    ));
                }
            }
        }
        cycles.push(lines.join("\n"));
    }
    assert!(
        cycles.is_empty(),
        "import cycles in src/:\n{}",
        cycles.join("\n\n")
    );
}

/// The check sees what it is meant to: a cycle made for it is found, and the
/// containment and test code it leaves out are left out.
#[test]
fn the_check_finds_a_cycle_and_ignores_containment_tests_and_comments() {
    let known: BTreeMap<Module, String> = [
        (vec![], "pub mod a; pub mod b;"),
        (
            vec!["a".to_owned()],
            "pub mod inner; pub use inner::Thing; use crate::b::{self, Other as O};",
        ),
        (vec!["a".to_owned(), "inner".to_owned()], "use super::super::b; // crate::c::x"),
        (
            vec!["b".to_owned()],
            "fn f() { let _ = crate::a::inner::Thing; let _ = \"crate::c\"; }\n#[cfg(test)]\nmod tests { use crate::c::X; }",
        ),
        (vec!["c".to_owned()], ""),
    ]
    .into_iter()
    .map(|(m, s)| (m.into_iter().collect::<Module>(), s.to_owned()))
    .collect();
    let edges = imports(&known);
    let names = |m: &str| -> BTreeSet<String> {
        edges[&segments(m)
            .into_iter()
            .filter(|s| s != "crate")
            .collect::<Module>()]
            .keys()
            .map(name)
            .collect()
    };
    assert_eq!(names("a"), BTreeSet::from(["b".to_owned()]));
    assert_eq!(names("a::inner"), BTreeSet::from(["b".to_owned()]));
    assert_eq!(names("b"), BTreeSet::from(["a::inner".to_owned()]));
}

/// The crate's layers, lowest first, by top-level module: a module may
/// import its own top-level module's and those of lower layers, never one
/// of a higher layer, nor one of its own layer. `render` (which `check`
/// reads its files with), `check`, `fuzzing` and `cli` are the crate's
/// entry points; `server` serves admission and the controllers' metrics;
/// admission and the controllers each stand on the observed world
/// (`watch`, the caches they share) and the plan, and neither on the
/// other; the plan on the API types.
const LAYERS: [&[&str]; 9] = [
    &["exit", "logging"],
    &["api"],
    &["plan", "certs"],
    &["watch"],
    &["admission", "reconcile"],
    &["server"],
    &["render"],
    &["check", "fuzzing"],
    &["cli"],
];

/// Every import that breaks [`LAYERS`] (with the path that makes it), and
/// every top-level module no layer names.
fn layering_faults(
    edges: &BTreeMap<Module, BTreeMap<Module, String>>,
    layers: &[&[&str]],
) -> Vec<String> {
    let layer_of = |top: &str| layers.iter().position(|layer| layer.contains(&top));
    let mut faults = Vec::new();
    for (from, tos) in edges {
        let Some(from_top) = from.first() else {
            continue;
        };
        let Some(from_layer) = layer_of(from_top) else {
            faults.push(format!("{} is in no layer", name(from)));
            continue;
        };
        for (to, path) in tos {
            let Some(to_top) = to.first() else {
                continue;
            };
            if to_top == from_top {
                continue;
            }
            let Some(to_layer) = layer_of(to_top) else {
                faults.push(format!("{} is in no layer", name(to)));
                continue;
            };
            if to_layer >= from_layer {
                faults.push(format!(
                    "{} -> {} ({path}): {} imports {}, of {} layer",
                    name(from),
                    name(to),
                    from_top,
                    to_top,
                    if to_layer == from_layer {
                        "its own"
                    } else {
                        "a higher"
                    }
                ));
            }
        }
    }
    faults.sort();
    faults.dedup();
    faults
}

#[test]
fn no_import_runs_up_the_layers() {
    let known = modules(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let faults = layering_faults(&imports(&known), &LAYERS);
    assert!(
        faults.is_empty(),
        "imports against the layers of src/:\n  {}",
        faults.join("\n  ")
    );
}

/// The layering check fails on each defect it is there for: an import up a
/// layer, one across a layer, and a module of no layer.
#[test]
fn the_layering_check_finds_each_kind_of_fault() {
    let module = |m: &str| -> Module { segments(m) };
    let edges: BTreeMap<Module, BTreeMap<Module, String>> = [
        ("low", vec!["high::x"]),
        ("high::x", vec!["low", "peer"]),
        ("peer", vec!["high"]),
        ("stray", vec![]),
    ]
    .into_iter()
    .map(|(from, tos)| {
        (
            module(from),
            tos.into_iter()
                .map(|to| (module(to), format!("crate::{to}")))
                .collect(),
        )
    })
    .collect();
    let layers: [&[&str]; 2] = [&["low"], &["high", "peer"]];
    let faults = layering_faults(&edges, &layers);
    assert_eq!(
        faults,
        [
            "high::x -> peer (crate::peer): high imports peer, of its own layer",
            "low -> high::x (crate::high::x): low imports high, of a higher layer",
            "peer -> high (crate::high): peer imports high, of its own layer",
            "stray is in no layer",
        ]
    );
}
