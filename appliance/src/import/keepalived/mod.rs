//! `sluice import keepalived`: a keepalived.conf's LVS half (`virtual_server`,
//! `virtual_server_group`, `real_server`, `sorry_server` and their checkers) as a commented
//! sluice.toml. The import carries meaning or refuses: every keyword is matched as keepalived
//! matches it, what Sluice can do the same way is carried (several checkers and urls as
//! several checks, status lists and digests, `connect_ip`/`connect_port`, a MISC_CHECK
//! script that is plainly a known probe, sorry servers, quorum, `inhibit_on_failure`), what
//! keepalived itself repairs is repaired the same way with a note, and anything else in the
//! LVS half refuses the whole import, line by line. keepalived moves VIP addresses with VRRP;
//! Sluice announces them over BGP, so the VRRP half is reported, never translated.
//!
//! Three steps, each pure: [`parse`] reads the grammar into a tree (following `include`
//! through [`parse::Includes`]; [`files`] is the one place that reads the disk), [`lvs`]
//! (with `service`, `server`, `check`, `check_kind` and `misc`) turns the tree into a plan
//! of VIPs, backends and health checks plus notes and refusals, and [`emit`] writes the plan
//! as TOML. Facts only the appliance knows (its name, interfaces, BGP) are left as `"<fill
//! in: ...>"` placeholders that `sluice check` rejects, naming what to fill in; filled in,
//! what the import writes always passes `sluice check`.

mod check;
mod check_kind;
mod emit;
pub mod files;
mod lvs;
#[cfg(test)]
mod meaning_tests;
mod misc;
pub mod parse;
#[cfg(test)]
mod samples_tests;
mod server;
mod service;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

pub use parse::SyntaxError;

/// A line number of a file of the import: the main file's lines are 1, 2, ...; the lines of
/// the `k`th included file carry `k` above [`FILE_SHIFT`] (see [`Located`]).
pub const FILE_SHIFT: u32 = 32;

/// The file and line of a global line number: (file index, line in that file).
pub fn split_line(line: usize) -> (usize, usize) {
    (line >> FILE_SHIFT, line & ((1 << FILE_SHIFT) - 1))
}

/// One thing the import could not carry over (or carried over differently), at its line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// 1-based line, of an included file when above [`FILE_SHIFT`].
    pub line: usize,
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (file, line) = split_line(self.line);
        match file {
            0 => write!(f, "line {line}: {}", self.text),
            k => write!(f, "included file {k} line {line}: {}", self.text),
        }
    }
}

/// Notes with the names of the files their lines are in (index 0 is the main file).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Located {
    pub notes: Vec<Note>,
    pub files: Vec<String>,
}

impl Located {
    /// `line N: text`, or `FILE line N: text` for an included file.
    pub fn show(&self, n: &Note) -> String {
        let (file, line) = split_line(n.line);
        match (file, self.files.get(file)) {
            (0, _) | (_, None) => format!("line {line}: {}", n.text),
            (_, Some(name)) => format!("{name} line {line}: {}", n.text),
        }
    }
}

/// A successful import: the sluice.toml text and what it left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub toml: String,
    /// Sorted by line, with the files they are in.
    pub notes: Located,
    /// VIPs written.
    pub vips: usize,
}

/// Why nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("{0}")]
    Syntax(#[from] SyntaxError),
    /// No statement at the file's top level is one keepalived knows: the wrong file. Its
    /// contents are not repeated (it may be anything, such as /etc/shadow).
    #[error(
        "not a keepalived.conf: none of its {statements} top-level statement(s) starts with a \
         keepalived keyword (virtual_server, global_defs, vrrp_instance, ...); is this the right file?"
    )]
    NotKeepalived { statements: usize },
    /// Lines of the LVS half that Sluice cannot carry as keepalived meant them (and words
    /// keepalived does not define, a typo that would otherwise drop a setting).
    #[error("{}", list("cannot be imported without changing what it means: change or remove these lines, then import again", .0))]
    Refused(Located),
    /// Not one `virtual_server` in the file.
    #[error("{}", list("no virtual_server to import (Sluice needs at least one VIP)", .0))]
    Nothing(Located),
}

fn list(head: &str, l: &Located) -> String {
    let mut s = head.to_string();
    for n in &l.notes {
        s.push_str("\n  ");
        s.push_str(&l.show(n));
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

/// Imports the keepalived.conf at `path` (read bounded: [`files::read`]), following its
/// includes inside its own directory, and in `allowed` directories for absolute ones.
pub fn import_file(
    path: &std::path::Path,
    allowed: &[std::path::PathBuf],
) -> Result<Imported, FileError> {
    let bytes = files::read(path)?;
    let source = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut disk = files::Disk::new(path, allowed)?;
    Ok(import_with(&bytes, &source, &mut disk)?)
}

/// Imports keepalived.conf bytes; `source` names the file in the output's header. An
/// `include` refuses the import (only [`import_file`] can follow it).
pub fn import(bytes: &[u8], source: &str) -> Result<Imported, ImportError> {
    import_with(bytes, source, &mut parse::NoIncludes)
}

/// Imports with `includes` resolving `include` lines.
pub fn import_with(
    bytes: &[u8],
    source: &str,
    includes: &mut dyn parse::Includes,
) -> Result<Imported, ImportError> {
    let text = parse::as_text(bytes)?;
    if let Some(statements) = foreign(text) {
        return Err(ImportError::NotKeepalived { statements });
    }
    let parsed = parse::parse_with(text, includes)?;
    let mut cx = lvs::Cx::default();
    for s in parsed.skipped {
        cx.note(
            s.line,
            format!(
                "{:?}: conditional configuration is not evaluated (keepalived's config id is \
                 a per-host fact): the line was skipped",
                s.text
            ),
        );
    }
    for n in parsed.notes {
        cx.note(n.line, n.text);
    }
    let files = includes.names(source);
    let vips = lvs::plan(&parsed.tree, &mut cx);
    if !cx.refused.is_empty() {
        let mut notes = cx.refused;
        notes.sort_by_key(|n| n.line);
        return Err(ImportError::Refused(Located { notes, files }));
    }
    let notes = Located {
        notes: merge(cx.notes),
        files,
    };
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

/// Other lines a merged note names before it only counts the rest.
const ALSO_SHOWN: usize = 20;

/// Sorted by line, a text said for several lines once, at its first line, naming the others
/// (the same checker timing repeated in every real server would otherwise fill the list).
fn merge(mut notes: Vec<Note>) -> Vec<Note> {
    notes.sort_by_key(|n| n.line);
    let mut out: Vec<(Note, Vec<usize>)> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for n in notes {
        match seen.get(&n.text) {
            // Sorted by line: a line said twice comes twice in a row.
            Some(&i) if out[i].0.line != n.line && out[i].1.last() != Some(&n.line) => {
                out[i].1.push(n.line)
            }
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
                let mut lines: Vec<String> = also
                    .iter()
                    .take(ALSO_SHOWN)
                    .map(|l| match split_line(*l) {
                        (0, l) => l.to_string(),
                        (k, l) => format!("{l} of included file {k}"),
                    })
                    .collect();
                if also.len() > ALSO_SHOWN {
                    lines.push(format!("and {} more", also.len() - ALSO_SHOWN));
                }
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
    /// The distinct checks of the virtual server; backends name them by index.
    pub checks: Vec<Check>,
    pub backends: Vec<Backend>,
    /// keepalived's quorum and hysteresis, when not its defaults (1 and 0) or with a sorry
    /// server.
    pub quorum: Option<(u32, u32)>,
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
    /// Its checks (indices into [`Vip::checks`]); keepalived holds it up while all pass.
    pub checks: Vec<usize>,
    /// `inhibit_on_failure`.
    pub inhibit: bool,
    /// The `sorry_server`.
    pub sorry: bool,
}

/// One `[[health_check]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// The checker's line (the `url`'s for a further url).
    pub line: usize,
    /// keepalived's name for it (`TCP_CHECK`, ...).
    pub from: &'static str,
    pub kind: CheckKind,
    pub port: Option<u16>,
    /// `connect_ip`, or the host a MISC_CHECK script probes.
    pub address: Option<IpAddr>,
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
        Check {
            line: o.line,
            from: o.from,
            ..self.clone()
        } == *o
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
        /// With `tls`: whether the certificate is verified (curl or wget without `-k`).
        verify: bool,
        head: bool,
        path: String,
        host: Option<String>,
        /// Accepted codes as inclusive ranges.
        status: Vec<(u16, u16)>,
        body: Option<String>,
        digest: Option<String>,
        server_name: Option<String>,
    },
    Udp {
        payload: String,
        expect: Option<String>,
    },
    Icmp,
}
