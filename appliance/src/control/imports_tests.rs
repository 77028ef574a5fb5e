//! The control plane's files import each other in no circle: each file's references to
//! another (`super::x`, `crate::control::x`, a child module `x::` it declares), outside
//! tests and comments, are edges between files, and the graph must have no cycle. The
//! layers stay readable (change and the pure leaves, prepare, state, decide, io, run), and
//! a module that needs something of a module above it says so in review, here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`["control", "decide", "fleet"]`) of every file under `root`.
fn modules(root: &Path, dir: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read the control directory")
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            modules(root, &p, out);
            continue;
        }
        let Some(rel) = p.strip_prefix(root).ok().and_then(|r| r.to_str()) else {
            continue;
        };
        let Some(rel) = rel.strip_suffix(".rs") else {
            continue;
        };
        if rel.ends_with("_tests") || rel.ends_with("tests") {
            continue;
        }
        let mut m: Vec<String> = std::iter::once("control".to_string())
            .chain(rel.split('/').map(str::to_string))
            .collect();
        if m.last().is_some_and(|l| l == "mod") {
            m.pop();
        }
        out.insert(m, p);
    }
}

/// The code of a file outside comments and its inline test module.
fn code(text: &str) -> String {
    let text = match text.find("mod tests {") {
        Some(i) => &text[..text[..i].rfind("#[cfg(test)]").unwrap_or(i)],
        None => text,
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `use` tree at the start of `s` names, each as segments after `prefix`.
fn paths(prefix: &[String], s: &str, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut item = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    paths(prefix, &item, out);
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        paths(prefix, &item, out);
        return;
    }
    let mut path = prefix.to_vec();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        path.push(rest[..end].to_string());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with('{') => return paths(&path, r, out),
            Some(r) => rest = r,
            None => break,
        }
    }
    if path.len() > prefix.len() {
        out.push(path);
    }
}

/// The files `m` (whose code is `code`) refers to.
fn edges(m: &[String], code: &str, all: &BTreeMap<Vec<String>, PathBuf>) -> BTreeSet<Vec<String>> {
    let mut named = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let base: Option<(Vec<String>, usize)> = if rest.starts_with("crate::control::") {
            Some((vec!["control".into()], "crate::control::".len()))
        } else if rest.starts_with("super::") {
            let n = (0..)
                .take_while(|k| rest[k * 7..].starts_with("super::"))
                .count();
            Some((m[..m.len().saturating_sub(n)].to_vec(), n * 7))
        } else {
            None
        };
        match base {
            Some((prefix, skip)) => {
                paths(&prefix, &rest[skip..], &mut named);
                i += skip;
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    // A child module the file declares, named bare (`commit::build_full`).
    for (child, _) in all.range(m.to_vec()..) {
        if child.len() == m.len() + 1 && child.starts_with(m) && mentions(code, &child[m.len()]) {
            named.push(child.clone());
        }
    }
    named
        .into_iter()
        .filter_map(|p| {
            (1..=p.len())
                .rev()
                .map(|k| p[..k].to_vec())
                .find(|k| all.contains_key(k))
        })
        .filter(|t| t.as_slice() != m)
        .collect()
}

/// Whether `code` names `name::` on its own (not as the tail of another path).
fn mentions(code: &str, name: &str) -> bool {
    let needle = format!("{name}::");
    code.match_indices(&needle).any(|(i, _)| {
        code[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
    })
}

/// A cycle of `graph` as its files, if there is one.
fn cycle(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<String>> {
    fn visit(
        v: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, bool>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<String>> {
        match state.get(v) {
            Some(true) => return None,
            Some(false) => {
                let from = stack.iter().position(|s| s == v).unwrap_or(0);
                return Some(stack[from..].iter().map(|m| m.join("::")).collect());
            }
            None => {}
        }
        state.insert(v.clone(), false);
        stack.push(v.clone());
        for w in graph.get(v).into_iter().flatten() {
            if let Some(c) = visit(w, graph, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(v.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|v| visit(v, graph, &mut state, &mut Vec::new()))
}

#[test]
fn control_s_files_import_each_other_in_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/control");
    let mut all = BTreeMap::new();
    modules(&root, &root, &mut all);
    let graph: BTreeMap<_, _> = all
        .iter()
        .map(|(m, p)| {
            let text = std::fs::read_to_string(p).expect("read a control file");
            (m.clone(), edges(m, &code(&text), &all))
        })
        .collect();
    let run = vec!["control".to_string(), "run".to_string()];
    assert!(
        graph[&run].contains(&vec!["control".to_string(), "io".to_string()]),
        "the reading works: run.rs uses io.rs"
    );
    assert_eq!(
        cycle(&graph),
        None,
        "a circle of imports between control's files"
    );
}

#[test]
fn a_circle_is_found() {
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let mut all = BTreeMap::new();
    for f in ["control", "control::a", "control::b", "control::b::c"] {
        all.insert(m(f), PathBuf::new());
    }
    assert_eq!(
        edges(
            &m("control::a"),
            "use super::{b::{c, X}};\nlet x = std::b::y;\n",
            &all
        ),
        BTreeSet::from([m("control::b::c"), m("control::b")])
    );
    let mut graph = BTreeMap::new();
    graph.insert(m("control::a"), BTreeSet::from([m("control::b")]));
    graph.insert(m("control::b"), BTreeSet::from([m("control::b::c")]));
    assert_eq!(cycle(&graph), None);
    let back = edges(&m("control::b::c"), "crate::control::a::f();", &all);
    graph.insert(m("control::b::c"), back);
    assert_eq!(
        cycle(&graph),
        Some(vec![
            "control::a".into(),
            "control::b".into(),
            "control::b::c".into()
        ])
    );
}

/// The pure steps of the control plane name no datapath type: `prepare` builds `lb`'s
/// tables and steering keys (`lb::steering`), which the datapath then takes. The ACL keys
/// once came back through `crate::datapath` (issue 51's "prepare no longer imports the
/// datapath").
#[test]
fn prepare_names_no_datapath_type() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/control");
    let text = std::fs::read_to_string(root.join("prepare.rs")).expect("read prepare.rs");
    let code = code(&text);
    assert!(
        !code.contains("crate::datapath") && !code.contains("super::super::datapath"),
        "prepare.rs names the datapath"
    );
}
