//! The reference held to the validator: every key the validator reads has an entry, every
//! entry is a key it reads, each entry's type says what the reader checks, and the manual's
//! page is the reference as it is now.

use std::collections::{BTreeMap, BTreeSet};

use crate::Config;
use crate::keys::{self, record};

/// The repository's root.
fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Configurations that together take every branch of the validator that reads a key: the
/// repository's examples (imported keepalived files included) and the corpus written for
/// this test, `keys_corpus/`, which opens every section, mode and check kind once.
fn corpus() -> Vec<(String, String)> {
    let dirs = [
        "examples",
        "examples/quickstart",
        "examples/keepalived",
        "examples/keepalived/samples",
        "config/src/keys_corpus",
    ];
    let mut files = Vec::new();
    for dir in dirs {
        let dir = root().join(dir);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "toml") {
                let text = std::fs::read_to_string(&p).expect("a corpus file");
                files.push((p.display().to_string(), text));
            }
        }
    }
    files.sort();
    assert!(files.len() > 10, "the corpus: {files:?}");
    files
}

/// Every key the validator reads over the corpus, with the kinds its readers check.
fn keys_read() -> BTreeMap<String, BTreeSet<String>> {
    record::keys_read(|| {
        for (_, text) in corpus() {
            let _ = Config::from_toml_str(&text);
        }
    })
}

#[test]
fn every_key_the_validator_reads_has_an_entry_and_every_entry_is_read() {
    let read = keys_read();
    let documented: BTreeSet<&str> = keys::reference().iter().map(|k| k.path.as_str()).collect();
    let undocumented: Vec<&String> = read
        .keys()
        .filter(|k| !documented.contains(k.as_str()))
        .collect();
    let unread: Vec<&&str> = documented
        .iter()
        .filter(|k| !read.contains_key(**k))
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys the validator reads without an entry in config/reference.toml: {undocumented:?}"
    );
    assert!(
        unread.is_empty(),
        "entries of config/reference.toml the validator never reads (a removed key, a \
         typo, or a branch keys_corpus/ does not open): {unread:?}"
    );
    assert_eq!(
        keys::reference().len(),
        documented.len(),
        "one entry per key"
    );
}

#[test]
fn each_entry_says_what_the_reader_checks() {
    let read = keys_read();
    let mut wrong = Vec::new();
    for k in keys::reference() {
        let Some(kinds) = read.get(&k.path) else {
            continue;
        };
        // A reader for addresses, choices or ports reads a string first; the specific kind
        // is the one to document.
        let specific = kinds.iter().filter(|c| kinds.len() == 1 || *c != "string");
        for kind in specific {
            if !k.kind.contains(kind.as_str()) {
                wrong.push(format!(
                    "{}: type {:?} does not say {kind:?}",
                    k.path, k.kind
                ));
            }
        }
        assert!(!k.text.is_empty(), "{}: no text", k.path);
        assert_eq!(k.since, "0.1.0", "{}: no release has been cut yet", k.path);
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A key the validator reads in a branch of its own (a multi-line call) still shows up: every
/// key name the validator's sources pass to a reader is the last segment of a key read.
#[test]
fn every_key_name_in_the_validator_sources_is_read_over_the_corpus() {
    let read = keys_read();
    let leaves: BTreeSet<&str> = read
        .keys()
        .map(|k| k.rsplit('.').next().unwrap_or_default())
        .collect();
    let methods = [
        "table",
        "tables",
        "string",
        "req_string",
        "int",
        "req_int",
        "bool",
        "duration",
        "ip",
        "req_ip",
        "strings",
        "choice",
        "raw",
        "has",
        "reject",
        "socket_addr",
    ];
    let mut sources = Vec::new();
    for dir in ["config/src/validate", "config/src"] {
        for e in std::fs::read_dir(root().join(dir))
            .expect("sources")
            .flatten()
        {
            let p = e.path();
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            if name.ends_with(".rs") && !name.contains("test") {
                sources.push((name, std::fs::read_to_string(&p).expect("source")));
            }
        }
    }
    let mut missing = Vec::new();
    for (name, text) in &sources {
        for m in methods {
            let call = format!(".{m}(");
            for (at, _) in text.match_indices(&call) {
                let rest = text[at + call.len()..].trim_start();
                let Some(lit) = rest.strip_prefix('"') else {
                    continue;
                };
                let key = lit.split('"').next().unwrap_or_default();
                let is_key = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if is_key && !leaves.contains(key) {
                    missing.push(format!("{name}: {key}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the validator reads that the corpus never reaches; open their table in \
         config/src/keys_corpus/: {missing:?}"
    );
}

#[test]
fn the_manuals_configuration_reference_is_the_reference() {
    let path = root().join("docs/manual/config-reference.md");
    let want = keys::markdown();
    if std::env::var_os("SLUICE_WRITE_REFERENCE").is_some() {
        std::fs::write(&path, &want).expect("write the page");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not config/reference.toml rendered; regenerate it with \
         SLUICE_WRITE_REFERENCE=1 cargo test -p sluice-config --lib keys_tests",
        path.display()
    );
}

#[test]
fn explain_finds_a_key_by_its_generic_path_or_as_an_error_names_it() {
    let weight = keys::explain("vip.backend.weight").expect("an entry");
    assert_eq!(weight.path, "vip.backend.weight");
    assert_eq!(
        keys::explain(r#"vip "web".backend[0].weight"#),
        Some(weight)
    );
    assert_eq!(
        keys::explain(r#"vip "w\"e.b".backend[12].weight"#),
        Some(weight)
    );
    assert_eq!(keys::explain("vip.backend.wieght"), None);
    let near: Vec<&str> = keys::near("weight")
        .iter()
        .map(|k| k.path.as_str())
        .collect();
    assert!(near.contains(&"vip.backend.weight"), "{near:?}");
    let text = weight.to_text();
    assert!(
        text.starts_with("vip.backend.weight\n  type: integer 0..=65535\n"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.len() <= 80), "{text}");
    let under: Vec<&str> = keys::under("vip.backend")
        .iter()
        .map(|k| k.path.as_str())
        .collect();
    assert!(under.contains(&"vip.backend.weight"), "{under:?}");
    assert!(!under.contains(&"vip.name"), "{under:?}");
}

#[test]
fn the_man_page_has_every_key_and_no_line_roff_would_take_for_a_request() {
    let page = keys::man_page("0.1.0");
    assert!(page.starts_with(".TH SLUICE.TOML 5 "), "{page}");
    for k in keys::reference() {
        let head = format!(".B {}\n", k.path.replace('-', "\\-"));
        assert!(page.contains(&head), "sluice.toml(5) lacks {}", k.path);
    }
    let requests = [".TH", ".SH", ".PP", ".TP", ".B", ".IP"];
    for line in page.lines() {
        if line.starts_with('.') || line.starts_with('\'') {
            let request = line.split_whitespace().next().unwrap_or_default();
            assert!(
                requests.contains(&request),
                "a text line read as a request: {line}"
            );
        }
    }
}
