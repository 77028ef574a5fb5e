//! `sluice import keepalived`: a keepalived.conf's LVS half (`virtual_server`,
//! `virtual_server_group`, `real_server` and their checkers) as a commented sluice.toml, and
//! line by line what could not be carried over and why. keepalived moves VIP addresses with
//! VRRP; Sluice announces them over BGP, so the VRRP half is reported, never translated.
//!
//! Three steps, each pure: [`parse`] reads the grammar into a tree, [`lvs`] (with
//! [`check`] for the checkers) turns the tree into a plan of VIPs, backends and health
//! checks plus notes, and [`emit`] writes the plan as TOML. Facts only the appliance knows
//! (its name, interfaces, BGP) are left as `"<fill in: ...>"` placeholders that `sluice
//! check` rejects, naming what to fill in.

mod check;
mod check_kind;
mod emit;
pub mod files;
mod lvs;
pub mod parse;
mod service;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

pub use parse::SyntaxError;

/// One thing the import could not carry over (or carried over differently), at its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// 1-based line in the keepalived.conf.
    pub line: usize,
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.text)
    }
}

/// A successful import: the sluice.toml text and what it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    /// Sorted by line.
    pub notes: Vec<Note>,
    /// VIPs written.
    pub vips: usize,
}

/// Why nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    /// Keywords keepalived does not define where they stand (a typo would otherwise drop a
    /// setting, such as persistence, without a word).
    #[error("{}", list("unknown keyword(s): fix or remove them, then import again", .0))]
    Unknown(Vec<Note>),
    /// No statement at the file's top level is one keepalived knows: the wrong file. Its
    /// contents are not repeated (it may be anything, such as /etc/shadow).
    #[error(
        "not a keepalived.conf: none of its {statements} top-level statement(s) starts with a \
         keepalived keyword (virtual_server, global_defs, vrrp_instance, ...); is this the right file?"
    )]
    NotKeepalived { statements: usize },
    /// Not one `virtual_server` could become a VIP.
    #[error("{}", list("no virtual_server could be imported (Sluice needs at least one VIP)", .0))]
    Nothing(Vec<Note>),
}

fn list(head: &str, notes: &[Note]) -> String {
    let mut s = head.to_string();
    for n in notes {
        s.push_str("\n  ");
        s.push_str(&n.to_string());
    }
    s
}

/// The placeholder prefix `sluice check` recognises (see `config::validate`).
pub const PLACEHOLDER: &str = "<fill in: ";

/// Why `sluice import keepalived FILE` wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error(transparent)]
    Read(#[from] files::ReadError),
    #[error(transparent)]
    Import(#[from] ImportError),
}

/// Imports the keepalived.conf at `path` (read bounded: [`files::read`]).
pub fn import_file(path: &std::path::Path) -> Result<Imported, FileError> {
    let bytes = files::read(path)?;
    let source = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(import(&bytes, &source)?)
}

/// Imports keepalived.conf bytes; `source` names the file in the output's header.
pub fn import(bytes: &[u8], source: &str) -> Result<Imported, ImportError> {
    let text = parse::as_text(bytes)?;
    if let Some(statements) = foreign(text) {
        return Err(ImportError::NotKeepalived { statements });
    }
    let (tree, skipped) = parse::parse_text(text)?;
    let mut cx = lvs::Cx::default();
    for s in skipped {
        cx.note(
            s.line,
            format!(
                "{:?}: conditional configuration is not evaluated (keepalived's config id is \
                 a per-host fact): the line was skipped",
                s.text
            ),
        );
    }
    let vips = lvs::plan(&tree, &mut cx);
    if !cx.unknown.is_empty() {
        return Err(ImportError::Unknown(cx.unknown));
    }
    let notes = merge(cx.notes);
    if vips.is_empty() {
        return Err(ImportError::Nothing(notes));
    }
    let toml = emit::emit(&vips, &notes, source, &cx.hints);
    Ok(Imported {
        toml,
        vips: vips.len(),
        notes,
    })
}

/// How many statements stand at the top level of `text` when not one of them starts with
/// a keyword keepalived defines there; `None` for a keepalived.conf (or a file of comments).
fn foreign(text: &str) -> Option<usize> {
    let mut statements = 0;
    for line in text.lines() {
        let word = line
            .trim_start()
            .split(|c: char| c.is_whitespace() || matches!(c, '{' | '#' | '!'))
            .next()
            .unwrap_or("");
        if word.is_empty() || word.starts_with(['}', '$', '@', '"', '\'']) {
            continue;
        }
        if lvs::top_level_keyword(word) {
            return None;
        }
        statements += 1;
    }
    (statements > 0).then_some(statements)
}

/// Sorted by line, a text said for several lines once, at its first line, naming the others
/// (the same checker timing repeated in every real server would otherwise fill the list).
fn merge(mut notes: Vec<Note>) -> Vec<Note> {
    notes.sort_by_key(|n| n.line);
    let mut out: Vec<(Note, Vec<usize>)> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for n in notes {
        match seen.get(&n.text) {
            Some(&i) if out[i].0.line != n.line => out[i].1.push(n.line),
            Some(_) => {}
            None => {
                seen.insert(n.text.clone(), out.len());
                out.push((n, Vec::new()));
            }
        }
    }
    out.into_iter()
        .map(|(mut n, also)| {
            if !also.is_empty() {
                let lines: Vec<String> = also.iter().map(usize::to_string).collect();
                n.text
                    .push_str(&format!(" (also line {})", lines.join(", ")));
            }
            n
        })
        .collect()
}

/// One `[[vip]]` to write.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Vip {
    pub name: String,
    /// Lines of the `virtual_server` block (and of the group entry it came from).
    pub lines: (usize, usize),
    pub group_line: Option<usize>,
    pub address: IpAddr,
    pub port: u16,
    pub protocol: &'static str,
    pub mode: Mode,
    pub scheduler: &'static str,
    pub hash: Option<&'static str>,
    pub flags: Vec<&'static str>,
    pub persistence: Option<u32>,
    pub netmask: Option<u8>,
    pub udp_one_packet: bool,
    pub overflow: Option<&'static str>,
    pub check: Option<Check>,
    pub backends: Vec<Backend>,
}

/// A VIP's forwarding mode as Sluice spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Nat,
    Dr,
    /// `ipip`, or `gue` with its port.
    Tunnel {
        encap: &'static str,
        port: Option<u16>,
    },
}

/// One `[[vip.backend]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Backend {
    pub line: usize,
    pub address: IpAddr,
    pub port: u16,
    pub weight: u32,
    pub max_connections: Option<u32>,
    pub resume_connections: Option<u32>,
}

/// One `[[health_check]]`, named after its VIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// The checker's line.
    pub line: usize,
    /// keepalived's name for it (`TCP_CHECK`, ...).
    pub from: &'static str,
    pub kind: CheckKind,
    pub port: Option<u16>,
    pub source: Option<IpAddr>,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub rise: u32,
    pub fall: u32,
    /// keepalived without `alpha` counts real servers up until a check fails.
    pub initial_up: bool,
}

impl Check {
    /// Equal as Sluice would run them (line and origin aside).
    pub fn same_as(&self, o: &Check) -> bool {
        (
            &self.kind,
            self.port,
            self.source,
            self.interval_ms,
            self.timeout_ms,
            self.rise,
            self.fall,
            self.initial_up,
        ) == (
            &o.kind,
            o.port,
            o.source,
            o.interval_ms,
            o.timeout_ms,
            o.rise,
            o.fall,
            o.initial_up,
        )
    }
}

/// What a check sends and expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckKind {
    Tcp {
        expect: Option<String>,
    },
    Http {
        tls: bool,
        path: String,
        host: Option<String>,
        status: (u16, u16),
        server_name: Option<String>,
    },
    Udp {
        payload: String,
    },
    Icmp,
}
