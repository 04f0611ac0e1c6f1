//! The runner's module map stays a layering (issue 12): its top-level modules, read as a graph
//! of `crate::X` paths in their source, have no cycle, and nothing imports the scheduler. A
//! module that needs a type from above it is the sign that the type lives in the wrong room.
//! Inside each module folder, of the runner and of the binary, the files form no cycle either
//! (issue 27), and the binary takes nothing from the scheduler: it starts a run with
//! `heddle_runner::run` and reads `heddle_runner::event`.
//!
//! The graph is read from the source text, not from rustc: `crate::name` (or `super::name`,
//! between files of one folder) in code (comments dropped), including each first segment of a
//! `use crate::{a, b::c}` group.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without `//` comments (doc comments name modules they do not import).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level module names a file's code refers to through `crate::`.
fn references(text: &str) -> BTreeSet<String> {
    references_through(text, "crate::")
}

/// The names a file's code refers to through `prefix` (`crate::`, `super::`).
fn references_through(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find(prefix) {
        // `super::` inside `crate::a::super::` does not occur; a longer word ending in the
        // prefix (`my_crate::`) is not it.
        let word_start = i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        rest = &rest[i + prefix.len()..];
        if !word_start {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a, b::{c, d}, e}`: the first segment of each top-level item.
            let mut depth = 0;
            let mut at_item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_item_start = true,
                    c if at_item_start && (c.is_alphanumeric() || c == '_') => {
                        names.insert(ident_at(&group[j..]).to_string());
                        at_item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident_at(rest).to_string());
        }
    }
    names
}

fn runner_graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for e in fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        // `record.rs` and `record/` are one module: their files add up.
        if p.is_dir() {
            rust_files(&p, modules.entry(name).or_default());
        } else if name != "lib" && p.extension().is_some_and(|x| x == "rs") {
            modules.entry(name).or_default().push(p);
        }
    }
    let mut graph = Graph::new();
    for (name, files) in &modules {
        let mut deps = BTreeSet::new();
        for f in files {
            deps.extend(references(&code(&fs::read_to_string(f).unwrap())));
        }
        deps.retain(|d| d != name && modules.contains_key(d));
        graph.insert(name.clone(), deps);
    }
    graph
}

/// A cycle, as the modules along it, if there is one (depth-first search).
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        n: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut cycle = path[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for d in &g[n] {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(g, n, &mut Vec::new(), &mut done))
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = runner_graph();
    assert!(g.len() > 20, "read too few modules: {g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("module cycle: {}", cycle.join(" → "));
    }
}

#[test]
fn nothing_imports_the_scheduler() {
    let g = runner_graph();
    let importers: Vec<&String> = g
        .iter()
        .filter(|(_, deps)| deps.contains("sched"))
        .map(|(m, _)| m)
        .collect();
    assert!(importers.is_empty(), "these import `sched`: {importers:?}");
}

/// Every module folder under `src`, each as the graph of its files (a sub-folder is one node)
/// through `super::name` and `crate::<folder path>::name`; `mod.rs` is the folder itself, whose
/// children are expected to use what it declares.
fn folder_graphs(src: &Path) -> Vec<(PathBuf, Graph)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut nodes: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                dirs.push(p.clone());
                let mut files = Vec::new();
                rust_files(&p, &mut files);
                nodes.insert(name, files);
            } else if !["mod", "lib", "main"].contains(&name.as_str())
                && p.extension().is_some_and(|x| x == "rs")
            {
                nodes.insert(name, vec![p]);
            }
        }
        if dir == src {
            continue; // the top level is `runner_graph`'s (the binary's is the crate root's)
        }
        let rel = dir
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .replace('/', "::");
        let through_crate = format!("crate::{rel}::");
        let mut graph = Graph::new();
        for (name, files) in &nodes {
            let mut deps = BTreeSet::new();
            for f in files {
                let text = code(&fs::read_to_string(f).unwrap());
                // A file's own `super::` is its folder only if it sits directly in it.
                if f.parent() == Some(dir.as_path()) {
                    deps.extend(references_through(&text, "super::"));
                }
                deps.extend(references_through(&text, &through_crate));
            }
            deps.retain(|d| d != name && nodes.contains_key(d));
            graph.insert(name.clone(), deps);
        }
        out.push((dir, graph));
    }
    out
}

#[test]
fn no_folder_has_a_cycle_between_its_files() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for src in [manifest.join("src"), manifest.join("../src")] {
        for (dir, g) in folder_graphs(&src) {
            checked += 1;
            if let Some(cycle) = find_cycle(&g) {
                panic!(
                    "cycle between files of {}: {}",
                    dir.display(),
                    cycle.join(" → ")
                );
            }
        }
    }
    assert!(checked > 8, "read too few folders: {checked}");
}

#[test]
fn the_binary_takes_nothing_from_the_scheduler() {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut files = Vec::new();
    rust_files(&bin, &mut files);
    assert!(files.len() > 20, "read too few files of the binary");
    let importers: Vec<String> = files
        .iter()
        .filter(|f| code(&fs::read_to_string(f).unwrap()).contains("heddle_runner::sched"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(importers.is_empty(), "these import `sched`: {importers:?}");
}

#[test]
fn the_reader_sees_grouped_and_plain_paths() {
    let text = "use crate::{a, b::{c, d}, e::F};\nlet x = crate::g::h();";
    let got: Vec<String> = references(text).into_iter().collect();
    assert_eq!(got, ["a", "b", "e", "g"]);
    let cyclic: Graph = [("a", "b"), ("b", "a")]
        .iter()
        .map(|(m, d)| (m.to_string(), [d.to_string()].into()))
        .collect();
    assert_eq!(find_cycle(&cyclic).unwrap(), ["a", "b", "a"]);
    let siblings: Vec<String> =
        references_through("use super::{bind, x::Y};\nmy_super::z();", "super::")
            .into_iter()
            .collect();
    assert_eq!(siblings, ["bind", "x"]);
}
