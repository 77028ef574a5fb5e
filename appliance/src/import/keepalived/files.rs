//! The importer's only I/O: reading a keepalived.conf and the files it includes from disk,
//! bounded. A file is read in chunks, each checked for bytes no text file has before the
//! next is read, and never past [`MAX_FILE`] bytes (all files together): `/dev/zero`, a
//! binary or a huge log is refused after its first chunk, not held in memory whole.
//!
//! `include` patterns are globbed as keepalived globs them (`GLOB_BRACE`: `{a,b}`
//! alternatives; each pattern's matches in name order; directories skipped; a pattern that
//! matches nothing passed over), relative to the directory of the file that includes them
//! (keepalived changes into it). A relative pattern may not leave that directory, symbolic
//! links resolved; an absolute one is followed only inside a directory the operator names
//! with `--allow-include`. A file that includes itself, directly or through others, is an
//! include loop and refused.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse::{self, Includes, Resolved, SyntaxError};

/// The largest keepalived.conf read (100,000 virtual servers take about 22 MiB).
pub const MAX_FILE: usize = 32 << 20;

/// Bytes read and checked at a time.
const CHUNK: usize = 64 << 10;

/// Why a file could not be read as keepalived.conf text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read: {0}")]
    Io(String),
    #[error(
        "larger than {} MiB: too large to be a keepalived.conf this importer reads",
        MAX_FILE >> 20
    )]
    TooLarge,
    #[error("{0}")]
    NotText(SyntaxError),
}

/// The contents of `path`, refused at the first chunk with a byte that is not text, or
/// once over [`MAX_FILE`].
pub fn read(path: &Path) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path).map_err(|e| ReadError::Io(e.to_string()))?;
    read_bounded(file)
}

/// [`read`] over any reader.
pub fn read_bounded(mut r: impl Read) -> Result<Vec<u8>, ReadError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e.to_string())),
        };
        if out.len() + n > MAX_FILE {
            return Err(ReadError::TooLarge);
        }
        let start = out.len();
        out.extend_from_slice(&chunk[..n]);
        // A control byte ends the read at once; UTF-8 is judged whole once read (a
        // character may straddle two chunks).
        if let Some(at) = out[start..].iter().position(|b| parse::control_byte(*b)) {
            let line = 1 + out[..start + at].iter().filter(|b| **b == b'\n').count();
            return Err(ReadError::NotText(SyntaxError::NotText {
                line,
                byte: out[start + at],
            }));
        }
    }
    Ok(out)
}

/// Brace alternatives one `include` may expand to.
const MAX_ALTERNATIVES: usize = 64;
/// Files one import may read.
const MAX_FILES: usize = 1024;

/// One file of the import.
#[derive(Debug)]
struct Opened {
    /// Canonical (symbolic links resolved).
    path: PathBuf,
    /// As messages name it: relative to the main file's directory when inside it.
    name: String,
    /// The file that included it.
    parent: Option<usize>,
}

/// The disk, for [`super::import_file`].
#[derive(Debug)]
pub struct Disk {
    files: Vec<Opened>,
    /// `--allow-include` directories, canonical.
    allowed: Vec<PathBuf>,
    /// Bytes read so far (the main file's too).
    total: usize,
}

impl Disk {
    /// The includes of the main file `main`; absolute patterns followed inside `allowed`.
    pub fn new(main: &Path, allowed: &[PathBuf]) -> Result<Disk, ReadError> {
        let path = main
            .canonicalize()
            .map_err(|e| ReadError::Io(e.to_string()))?;
        let total = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Ok(Disk {
            files: vec![Opened {
                path,
                name,
                parent: None,
            }],
            allowed: allowed
                .iter()
                .filter_map(|a| a.canonicalize().ok())
                .collect(),
            total,
        })
    }

    fn name_of(&self, path: &Path) -> String {
        let root = self.files[0].path.parent().unwrap_or(Path::new("/"));
        path.strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Refuses `path` when it may not be included from file `from`.
    fn check(&self, pattern: &str, path: &Path, from: usize, absolute: bool) -> Result<(), String> {
        let dir = self.files[from].path.parent().unwrap_or(Path::new("/"));
        if absolute && !self.allowed.iter().any(|a| path.starts_with(a)) {
            return Err(format!(
                "include {pattern}: {} is outside the directories --allow-include names: give \
                 --allow-include {} to follow it",
                path.display(),
                path.parent().unwrap_or(Path::new("/")).display()
            ));
        }
        if !absolute && !path.starts_with(dir) {
            return Err(format!(
                "include {pattern}: {} is outside {}, the directory of the file that includes \
                 it (a relative include may not leave it)",
                path.display(),
                dir.display()
            ));
        }
        let mut chain = vec![self.files[from].name.clone()];
        let mut at = Some(from);
        while let Some(i) = at {
            if self.files[i].path == path {
                chain.reverse();
                return Err(format!(
                    "include loop: {} includes {} again",
                    chain.join(" -> "),
                    self.name_of(path)
                ));
            }
            at = self.files[i].parent;
            if let Some(p) = at {
                chain.push(self.files[p].name.clone());
            }
        }
        Ok(())
    }

    /// Reads `path` as file number `self.files.len()`.
    fn open(&mut self, path: PathBuf, from: usize) -> Result<(usize, String), String> {
        if self.files.len() >= MAX_FILES {
            return Err(format!("more than {MAX_FILES} files included"));
        }
        let name = self.name_of(&path);
        let bytes = read(&path).map_err(|e| format!("{name}: {e}"))?;
        self.total += bytes.len();
        if self.total > MAX_FILE {
            return Err(format!(
                "{name}: the files included come to more than {} MiB",
                MAX_FILE >> 20
            ));
        }
        let text = parse::as_text(&bytes)
            .map_err(|e| format!("{name}: {e}"))?
            .to_string();
        self.files.push(Opened {
            path,
            name,
            parent: Some(from),
        });
        Ok((self.files.len() - 1, text))
    }
}

impl Includes for Disk {
    fn include(&mut self, pattern: &str, from: usize) -> Result<Resolved, String> {
        let absolute = pattern.starts_with('/');
        let dir = self.files[from]
            .path
            .parent()
            .unwrap_or(Path::new("/"))
            .to_path_buf();
        let mut out = Resolved::default();
        let mut matched = false;
        for alt in braces(pattern)? {
            let full = if absolute {
                alt
            } else {
                format!("{}/{alt}", glob::Pattern::escape(&dir.to_string_lossy()))
            };
            let paths = glob::glob(&full).map_err(|e| format!("include {pattern}: {e}"))?;
            for found in paths.filter_map(Result::ok) {
                matched = true;
                let meta = std::fs::metadata(&found)
                    .map_err(|e| format!("include {pattern}: {}: {e}", found.display()))?;
                if meta.is_dir() {
                    out.notes.push(format!(
                        "include {pattern}: {} is a directory: skipped, as keepalived does",
                        found.display()
                    ));
                    continue;
                }
                if !meta.is_file() {
                    return Err(format!(
                        "include {pattern}: {} is not a regular file",
                        found.display()
                    ));
                }
                let path = found
                    .canonicalize()
                    .map_err(|e| format!("include {pattern}: {}: {e}", found.display()))?;
                self.check(pattern, &path, from, absolute)?;
                out.files.push(self.open(path, from)?);
            }
        }
        if !matched {
            out.notes.push(format!(
                "include {pattern}: no file matches: keepalived goes on without it"
            ));
        }
        Ok(out)
    }

    fn names(&self, main: &str) -> Vec<String> {
        let mut v: Vec<String> = self.files.iter().map(|f| f.name.clone()).collect();
        if let Some(first) = v.first_mut() {
            *first = main.to_string();
        }
        v
    }
}

/// `a{b,c}d` as `abd` and `acd` (glibc's `GLOB_BRACE`, nested groups included), at most
/// [`MAX_ALTERNATIVES`] of them.
pub fn braces(pattern: &str) -> Result<Vec<String>, String> {
    let mut done = Vec::new();
    let mut todo = vec![pattern.to_string()];
    while let Some(p) = todo.pop() {
        let Some((open, close, commas)) = group(&p) else {
            done.push(p);
            continue;
        };
        let mut start = open + 1;
        let mut alts = Vec::new();
        for c in commas.into_iter().chain([close]) {
            alts.push(format!("{}{}{}", &p[..open], &p[start..c], &p[close + 1..]));
            start = c + 1;
        }
        // Depth first, in order: the last pushed is expanded first.
        todo.extend(alts.into_iter().rev());
        if done.len() + todo.len() > MAX_ALTERNATIVES {
            return Err(format!(
                "include {pattern}: more than {MAX_ALTERNATIVES} brace alternatives"
            ));
        }
    }
    Ok(done)
}

/// The first `{...}` with a comma at its own level: its braces and those commas.
fn group(p: &str) -> Option<(usize, usize, Vec<usize>)> {
    let b = p.as_bytes();
    let mut from = 0;
    while let Some(open) = p[from..].find('{').map(|i| i + from) {
        let mut depth = 0;
        let mut commas = Vec::new();
        for (i, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        if !commas.is_empty() {
                            return Some((open, i, commas));
                        }
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        from = open + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_expand_as_glob_brace_does() {
        assert_eq!(braces("a.conf").unwrap(), ["a.conf"]);
        assert_eq!(
            braces("conf.d/{web,db}.conf").unwrap(),
            ["conf.d/web.conf", "conf.d/db.conf"]
        );
        assert_eq!(braces("{a,b{1,2}}x").unwrap(), ["ax", "b1x", "b2x"]);
        assert!(braces(&"{a,b}".repeat(7)).is_err(), "2^7 alternatives");
        assert_eq!(braces("x{y}z").unwrap(), ["x{y}z"], "no comma: literal");
    }

    /// A reader that yields `byte` forever, counting what it gave.
    struct Endless {
        byte: u8,
        given: usize,
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(self.byte);
            self.given += buf.len();
            Ok(buf.len())
        }
    }

    #[test]
    fn an_endless_stream_of_zeros_stops_at_its_first_chunk() {
        let mut zero = Endless { byte: 0, given: 0 };
        let e = read_bounded(&mut zero).unwrap_err();
        assert_eq!(
            e,
            ReadError::NotText(SyntaxError::NotText { line: 1, byte: 0 })
        );
        assert!(zero.given <= CHUNK, "read {} bytes", zero.given);
    }

    #[test]
    fn an_endless_stream_of_text_stops_at_the_limit() {
        let mut text = Endless {
            byte: b'a',
            given: 0,
        };
        assert_eq!(read_bounded(&mut text).unwrap_err(), ReadError::TooLarge);
        assert!(text.given <= MAX_FILE + CHUNK, "read {} bytes", text.given);
        let ok = read_bounded(&b"virtual_server 192.0.2.1 80 {\n}\n"[..]).expect("text");
        assert_eq!(ok.len(), 32);
    }
}
