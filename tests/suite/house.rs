//! The house rules, read off the source tree: the top-level modules of `src/` import each other
//! without a cycle, and `docs/ARCHITECTURE.md`'s file map lists every file of `src/` and none
//! that is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, as paths relative to `root`, `/`-separated.
fn rust_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under the root");
            let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy()).collect();
            out.insert(parts.join("/"));
        }
    }
}

fn src_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn src_files() -> BTreeSet<String> {
    let root = src_root();
    let mut files = BTreeSet::new();
    rust_files(&root, &root, &mut files);
    files
}

/// The top-level module a file of `src/` belongs to (`None` for the crate root).
fn top_module(file: &str) -> Option<String> {
    let first = file.split('/').next()?;
    match first {
        "lib.rs" => None,
        name => Some(name.trim_end_matches(".rs").to_owned()),
    }
}

/// The module path of a file: `a.rs` and `a/mod.rs` are `[a]`, `a/b.rs` is `[a, b]`.
fn module_path(file: &str) -> Vec<String> {
    let mut parts: Vec<String> = file
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a line without its comment (a line comment, or a whole doc line).
fn code_of(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return "";
    }
    // A trailing comment starts at ` //` outside a string; strings holding ` //` are rare
    // enough in this crate's code lines that cutting there only loses text, never adds a path.
    match line.find(" //") {
        Some(at) if !line[..at].contains('"') => &line[..at],
        _ => line,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first segments of every path that starts at `prefix` in `code`: `crate::a::x` gives
/// `a`, `crate::{a::x, b}` gives `a` and `b`.
fn roots_after(code: &str, prefix: &str) -> Vec<String> {
    let mut roots = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before_ok = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        rest = &rest[at + prefix.len()..];
        if !before_ok {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if start && is_ident(c) => {
                        let name: String =
                            group[i..].chars().take_while(|&c| is_ident(c)).collect();
                        roots.push(name);
                        start = false;
                    }
                    c if c.is_whitespace() => {}
                    _ => start = false,
                }
            }
        } else {
            let name: String = rest.chars().take_while(|&c| is_ident(c)).collect();
            if !name.is_empty() {
                roots.push(name);
            }
        }
    }
    roots
}

/// Which top-level modules each top-level module of `files` names (through `crate::` paths, or
/// `super::` paths that climb to the crate root), with one file that does, for the message.
fn import_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeMap<String, String>> {
    let tops: BTreeSet<String> = files.keys().filter_map(|f| top_module(f)).collect();
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (file, text) in files {
        let Some(from) = top_module(file) else {
            continue;
        };
        let depth = module_path(file).len();
        let node = graph.entry(from.clone()).or_default();
        for line in text.lines() {
            let code = code_of(line);
            let mut named = roots_after(code, "crate::");
            // `super::` repeated `depth` times from a file's own module is the crate root.
            let climb = "super::".repeat(depth);
            named.extend(roots_after(code, &climb));
            for to in named {
                if to != from && tops.contains(&to) {
                    node.entry(to).or_insert_with(|| file.clone());
                }
            }
        }
    }
    graph
}

/// The cycles of `graph`: its strongly connected components of more than one module.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            for next in self.graph.get(node).into_iter().flat_map(|n| n.keys()) {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.stack.contains(&next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    component.push(top.to_owned());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

fn describe(graph: &BTreeMap<String, BTreeMap<String, String>>, cycle: &[String]) -> String {
    let mut lines = vec![format!("a cycle through {}:", cycle.join(", "))];
    for from in cycle {
        for (to, file) in &graph[from] {
            if cycle.contains(to) {
                lines.push(format!("  {from} -> {to} (src/{file})"));
            }
        }
    }
    lines.join("\n")
}

fn read_src() -> BTreeMap<String, String> {
    let root = src_root();
    src_files()
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(root.join(&file)).expect("a readable source file");
            (file, text)
        })
        .collect()
}

#[test]
fn top_level_modules_import_without_a_cycle() {
    let graph = import_graph(&read_src());
    assert!(graph.len() > 10, "the graph was read: {graph:?}");
    let found = cycles(&graph);
    let message: Vec<String> = found.iter().map(|c| describe(&graph, c)).collect();
    assert!(found.is_empty(), "{}", message.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_back_import() {
    // The checker itself, on a tree with one back-import: it must see it.
    let files: BTreeMap<String, String> = [
        ("builder.rs", "use crate::gate::Gate;\n"),
        (
            "gate.rs",
            "use crate::layer::GateLayer;\n// use crate::builder::x;\n",
        ),
        ("layer/mod.rs", "use crate::{settings::Settings, mcp};\n"),
        (
            "layer/service.rs",
            "use super::super::builder::GateBuilder; // back\n",
        ),
        ("settings.rs", "pub struct Settings;\n"),
        ("mcp/mod.rs", "/// [`crate::layer`]\npub struct M;\n"),
    ]
    .into_iter()
    .map(|(f, t)| (f.to_owned(), t.to_owned()))
    .collect();
    let graph = import_graph(&files);
    assert_eq!(
        graph["layer"].keys().collect::<Vec<_>>(),
        ["builder", "mcp", "settings"]
    );
    assert!(graph["mcp"].is_empty(), "doc links are not imports");
    assert_eq!(
        cycles(&graph),
        [vec![
            "builder".to_owned(),
            "gate".to_owned(),
            "layer".to_owned()
        ]]
    );
}

/// The file map of `docs/ARCHITECTURE.md`: the code block that starts with `src/`, one entry
/// per line (a name ending in `.rs` or `/`, indented two spaces a level), descriptions after
/// it and on deeper-indented lines.
fn file_map() -> BTreeSet<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .expect("docs/ARCHITECTURE.md");
    let block = doc
        .split("```")
        .find(|block| block.trim_start_matches(['\n', ' ']).starts_with("src/"))
        .expect("a code block starting with src/");
    let mut listed = BTreeSet::new();
    let mut folders: Vec<String> = Vec::new();
    for line in block.lines().skip_while(|l| !l.starts_with("src/")).skip(1) {
        let indent = line.len() - line.trim_start().len();
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let is_entry = indent % 2 == 0
            && indent <= 2 * (folders.len() + 1)
            && (name.ends_with(".rs") || name.ends_with('/'))
            && name
                .trim_end_matches(".rs")
                .trim_end_matches('/')
                .chars()
                .all(is_ident);
        if !is_entry {
            continue;
        }
        let level = indent / 2 - 1;
        folders.truncate(level);
        let path: Vec<&str> = folders.iter().map(String::as_str).chain([name]).collect();
        let path = path.concat();
        if name.ends_with('/') {
            folders.push(name.to_owned());
        } else {
            listed.insert(path);
        }
    }
    listed
}

#[test]
fn the_architecture_file_map_lists_every_file_of_src() {
    let listed = file_map();
    let present = src_files();
    let missing: Vec<_> = present.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&present).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "docs/ARCHITECTURE.md's file map is out of date.\nnot listed: {missing:?}\nlisted but gone: {gone:?}"
    );
}
