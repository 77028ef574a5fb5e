//! The configuration reference: every key the validator reads, with its type, default, an
//! example and what it does, written once in `config/reference.toml`. `sluice check
//! --explain KEY`, the manual's configuration reference and `sluice.toml(5)` are all rendered
//! from it, and a test (`keys_tests.rs`) holds it to the validator: a key the validator reads
//! without an entry, an entry for a key it does not read, or a type that differs from what
//! the reader checks fails the build.

use std::sync::LazyLock;

/// The reference's source, embedded so every build of `sluice` can explain every key.
const SOURCE: &str = include_str!("../reference.toml");

/// One key of the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDoc {
    /// The key's path without element names or indexes: `vip.backend.weight`.
    pub path: String,
    /// What the value must be: `integer 0..=65535`, `one of nat, fullnat`, `duration ...`.
    pub kind: String,
    /// The value when the key is absent (None: required, or absent means "off").
    pub default: Option<String>,
    /// A line of TOML that sets it, as it would appear in its table.
    pub example: Option<String>,
    /// The release that first read it.
    pub since: String,
    /// What it does, for an operator.
    pub text: String,
}

/// Every key of the reference, in its file's order (tables before their keys).
pub fn reference() -> &'static [KeyDoc] {
    static KEYS: LazyLock<Vec<KeyDoc>> =
        LazyLock::new(|| parse(SOURCE).unwrap_or_else(|e| panic!("config/reference.toml: {e}")));
    &KEYS
}

/// The entry for `path`, written generically (`vip.backend.weight`) or as an error names it
/// (`vip "web".backend[0].weight`).
pub fn explain(path: &str) -> Option<&'static KeyDoc> {
    let want = generic_path(path.trim());
    reference().iter().find(|k| k.path == want)
}

/// Entries whose path starts with `prefix` (a table's keys), for a lookup that matched none.
pub fn under(prefix: &str) -> Vec<&'static KeyDoc> {
    let want = generic_path(prefix.trim());
    let dotted = format!("{want}.");
    reference()
        .iter()
        .filter(|k| k.path.starts_with(&dotted))
        .collect()
}

/// Entries whose last segment is the last segment of `path` (a key asked for in the wrong
/// table: `weight` finds `vip.backend.weight`), at most ten.
pub fn near(path: &str) -> Vec<&'static KeyDoc> {
    let want = generic_path(path.trim());
    let leaf = want.rsplit('.').next().unwrap_or_default().to_string();
    reference()
        .iter()
        .filter(|k| k.path.rsplit('.').next() == Some(leaf.as_str()) || k.path.contains(&want))
        .take(10)
        .collect()
}

/// `path` without element names and indexes: `vip "web".backend[0].weight` becomes
/// `vip.backend.weight`.
pub fn generic_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' if chars.peek() == Some(&'"') => {
                chars.next();
                let mut escaped = false;
                for q in chars.by_ref() {
                    match (escaped, q) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        _ => escaped = false,
                    }
                }
            }
            '[' => {
                for q in chars.by_ref() {
                    if q == ']' {
                        break;
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

fn parse(text: &str) -> Result<Vec<KeyDoc>, String> {
    let doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
    let Some(toml::Value::Array(items)) = doc.get("key") else {
        return Err("no [[key]] entries".into());
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let t = item
                .as_table()
                .ok_or_else(|| format!("key[{i}] is not a table"))?;
            let get = |name: &str| t.get(name).and_then(|v| v.as_str()).map(str::to_string);
            let req = |name: &str| get(name).ok_or_else(|| format!("key[{i}] has no {name}"));
            let path = req("path")?;
            if let Some(unknown) = t.keys().find(|k| !FIELDS.contains(&k.as_str())) {
                return Err(format!("{path}: unknown field {unknown}"));
            }
            Ok(KeyDoc {
                kind: req("type").map_err(|e| format!("{path}: {e}"))?,
                default: get("default"),
                example: get("example"),
                since: req("since").map_err(|e| format!("{path}: {e}"))?,
                text: req("text")
                    .map_err(|e| format!("{path}: {e}"))?
                    .trim()
                    .to_string(),
                path,
            })
        })
        .collect()
}

const FIELDS: [&str; 6] = ["path", "type", "default", "example", "since", "text"];

impl KeyDoc {
    /// The entry as `sluice check --explain` prints it.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n  type: {}\n", self.path, self.kind);
        out += &format!(
            "  default: {}\n",
            self.default.as_deref().unwrap_or("none (unset)")
        );
        if let Some(e) = &self.example {
            out += &format!("  example: {e}\n");
        }
        out += &format!("  since: {}\n\n", self.since);
        for line in wrap(&self.text, 78) {
            out += &format!("{line}\n");
        }
        out
    }
}

/// `text`'s paragraphs wrapped at `width` columns (blank lines kept).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split("\n\n") {
        if !lines.is_empty() {
            lines.push(String::new());
        }
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line += word;
        }
        lines.push(line);
    }
    lines
}

/// The manual's configuration reference (`docs/manual/config-reference.md`).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Every key `sluice check` accepts, generated from `config/reference.toml` (a test holds \
         that file to the validator, so this page cannot drift from what the appliance \
         reads). `sluice check --explain KEY` prints one entry; `man 5 sluice.toml` has the \
         same text. Paths leave out element names and indexes: `vip.backend.weight` is the \
         `weight` of any `[[vip.backend]]`.\n",
    );
    let mut section = String::new();
    for k in reference() {
        let top = k.path.split('.').next().unwrap_or_default();
        if top != section {
            section = top.to_string();
            out += &format!("\n## `{section}`\n");
        }
        out += &format!("\n### `{}`\n\n", k.path);
        out += &format!("- type: {}\n", k.kind);
        out += &format!(
            "- default: {}\n",
            k.default
                .as_deref()
                .map_or("none".into(), |d| format!("`{d}`"))
        );
        if let Some(e) = &k.example {
            out += &format!("- example: `{e}`\n");
        }
        out += &format!("- since: {}\n\n{}\n", k.since, k.text);
    }
    out
}

/// `sluice.toml(5)`: the reference as a manual page.
pub fn man_page(version: &str) -> String {
    let mut out = format!(
        ".TH SLUICE.TOML 5 \"\" \"sluice {}\" \"Sluice manual\"\n\
         .SH NAME\nsluice.toml \\- the Sluice load balancer's configuration file\n\
         .SH SYNOPSIS\n/etc/sluice/sluice.toml\n\
         .SH DESCRIPTION\n{}\n\
         .PP\nEvery key below is read by the validator; a key not listed is refused as \
         unknown. A file with any error is rejected whole and the running configuration \
         stays. Paths leave out element names and indexes: vip.backend.weight is the weight \
         of any [[vip.backend]] table.\n\
         .SH KEYS\n",
        roff(version),
        roff(
            "A TOML file: [appliance], [api], [bgp], [flood] and the other sections, and one \
             [[vip]] table per virtual service with its [[vip.backend]] tables. SLUICE_ \
             environment variables override keys (SLUICE_APPLIANCE__NAME=lb2). sluice check \
             validates a file and sluice check --explain KEY prints a key's entry."
        )
    );
    for k in reference() {
        out += &format!(".TP\n.B {}\n", roff(&k.path));
        out += &format!("Type: {}.", roff(&k.kind));
        if let Some(d) = &k.default {
            out += &format!(" Default: {}.", roff(d));
        }
        if let Some(e) = &k.example {
            out += &format!(" Example: {}.", roff(e));
        }
        out += &format!(" Since {}.\n", roff(&k.since));
        for para in k.text.split("\n\n") {
            out += ".IP\n";
            out += &roff(&para.split_whitespace().collect::<Vec<_>>().join(" "));
            out += "\n";
        }
    }
    out += ".SH SEE ALSO\nsluice(8), sluice-check(8)\n";
    out
}

/// `text` safe inside a roff line: backslashes escaped, no line starting with a control
/// character.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.') | Some('\'') => format!("\\&{escaped}"),
        _ => escaped,
    }
}

/// What the validator reads, recorded while a test runs it (see `reader::Table::note`).
#[cfg(test)]
pub(crate) mod record {
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};

    thread_local! {
        static SEEN: RefCell<Option<BTreeMap<String, BTreeSet<String>>>> =
            const { RefCell::new(None) };
    }

    /// Records that the validator reads `path` (as `kind`, when not empty).
    pub(crate) fn note(path: &str, kind: String) {
        SEEN.with(|s| {
            if let Some(seen) = s.borrow_mut().as_mut() {
                let kinds = seen.entry(super::generic_path(path)).or_default();
                if !kind.is_empty() {
                    kinds.insert(kind);
                }
            }
        });
    }

    /// Runs `f` and returns every key the validator read meanwhile on this thread, with
    /// the kinds its readers checked.
    pub(crate) fn keys_read(f: impl FnOnce()) -> BTreeMap<String, BTreeSet<String>> {
        SEEN.with(|s| *s.borrow_mut() = Some(BTreeMap::new()));
        f();
        SEEN.with(|s| s.borrow_mut().take()).unwrap_or_default()
    }
}
