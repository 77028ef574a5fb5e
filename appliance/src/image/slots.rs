//! The two system slots as systemd-boot sees them: one boot loader entry per slot on the
//! ESP (`loader/entries/sluice-a.conf`, `sluice-b+3.conf`, ...), each booting its own kernel
//! and initrd (`/sluice/{a,b}/`) with `root=PARTLABEL=sluice-root-{a,b}`. Every entry has
//! `sort-key sluice` and a `version` that grows with each install, so systemd-boot boots the
//! newest entry that still has tries left; a new entry carries a boot counter (`+3`) that
//! systemd-bless-boot removes once the boot completes (`boot-complete.target`, which
//! `sluice-boot-check.service` holds until sluice.service is ready). An entry whose tries are
//! used up sorts last, so the previous slot boots again by itself.

use std::fmt;
use std::fs;
use std::path::Path;

use super::ImageError;

/// One of the two system slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    /// `a` or `b`, as in partition labels, entry names and `sluice.slot=`.
    pub fn name(self) -> &'static str {
        match self {
            Slot::A => "a",
            Slot::B => "b",
        }
    }

    /// The slot that is not `self`.
    pub fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    fn parse(s: &str) -> Option<Slot> {
        match s {
            "a" => Some(Slot::A),
            "b" => Some(Slot::B),
            _ => None,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The running slot, from `sluice.slot=` on the kernel command line `cmdline`.
pub fn running(cmdline: &str) -> Option<Slot> {
    cmdline
        .split_whitespace()
        .find_map(|w| w.strip_prefix("sluice.slot="))
        .and_then(Slot::parse)
}

/// A slot's boot loader entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub slot: Slot,
    /// The file name in `loader/entries/`.
    pub file: String,
    /// The install generation (the entry's `version`): newer installs sort first.
    pub generation: u64,
    /// The build's version (from the title).
    pub build: String,
    /// The boot counter: (tries left, tries done); `None` once the slot booted well.
    pub tries: Option<(u32, u32)>,
}

impl Entry {
    /// Whether systemd-boot gave up on it (no tries left).
    pub fn failed(&self) -> bool {
        matches!(self.tries, Some((0, _)))
    }
}

/// The entries directory on the ESP mounted at `esp`.
pub fn entries_dir(esp: &Path) -> std::path::PathBuf {
    esp.join("loader/entries")
}

/// Every slot entry on the ESP, sorted by slot.
pub fn entries(esp: &Path) -> Result<Vec<Entry>, ImageError> {
    let dir = entries_dir(esp);
    let list = fs::read_dir(&dir).map_err(|source| ImageError::Esp {
        path: dir.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for e in list.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some((slot, tries)) = parse_name(&file) else {
            continue;
        };
        let text = fs::read_to_string(e.path()).unwrap_or_default();
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
        };
        let build = field("title ")
            .and_then(|t| t.strip_prefix("Sluice ").map(str::to_string))
            .map(|t| t.split(" (slot").next().unwrap_or("").to_string())
            .unwrap_or_default();
        out.push(Entry {
            slot,
            file,
            generation: field("version ").and_then(|v| v.parse().ok()).unwrap_or(0),
            build,
            tries,
        });
    }
    out.sort_by_key(|e| (e.slot, std::cmp::Reverse(e.generation)));
    Ok(out)
}

/// `sluice-a.conf`, `sluice-b+3.conf`, `sluice-b+0-3.conf`: the slot and the counter.
fn parse_name(file: &str) -> Option<(Slot, Option<(u32, u32)>)> {
    let stem = file.strip_prefix("sluice-")?.strip_suffix(".conf")?;
    let (slot, counter) = match stem.split_once('+') {
        Some((s, c)) => (s, Some(c)),
        None => (stem, None),
    };
    let slot = Slot::parse(slot)?;
    let tries = match counter {
        None => None,
        Some(c) => {
            let (left, done) = match c.split_once('-') {
                Some((l, d)) => (l.parse().ok()?, d.parse().ok()?),
                None => (c.parse().ok()?, 0),
            };
            Some((left, done))
        }
    };
    Some((slot, tries))
}

/// The entry file's name and text for `slot` installed as `generation` with `tries` boots to
/// prove itself.
pub fn entry(
    slot: Slot,
    generation: u64,
    build: &str,
    cmdline: &str,
    tries: u32,
) -> (String, String) {
    let name = format!("sluice-{slot}+{tries}.conf");
    let text = format!(
        "title Sluice {build} (slot {slot})\nsort-key sluice\nversion {generation}\n\
         linux /sluice/{slot}/vmlinuz\ninitrd /sluice/{slot}/initrd\n\
         options root=PARTLABEL=sluice-root-{slot} sluice.slot={slot} {cmdline}\n"
    );
    (name, text)
}

/// What `sluice image status` prints: one line per slot, the running one first.
pub fn describe(running: Option<Slot>, entries: &[Entry], last_failure: Option<&str>) -> String {
    let mut out = String::new();
    let newest = |s: Slot| entries.iter().find(|e| e.slot == s);
    let running_gen = running.and_then(newest).map_or(0, |e| e.generation);
    match running {
        Some(s) => match newest(s) {
            Some(e) => out.push_str(&format!(
                "running: slot {s}, Sluice {} (install {}){}\n",
                e.build,
                e.generation,
                match e.tries {
                    None => ", good".to_string(),
                    Some((l, _)) =>
                        format!(", on trial ({l} tries left; kept once sluice is ready)"),
                }
            )),
            None => out.push_str(&format!("running: slot {s}, no boot entry for it\n")),
        },
        None => out.push_str(
            "running: no slot (not booted through a slot's entry: no sluice.slot= on the \
             kernel command line)\n",
        ),
    }
    for s in [Slot::A, Slot::B] {
        if Some(s) == running {
            continue;
        }
        let line = match newest(s) {
            None => format!("slot {s}: empty"),
            Some(e) if e.failed() && e.generation > running_gen => format!(
                "slot {s}: Sluice {} (install {}) FAILED: {} boot(s) did not reach sluice ready; \
                 the previous slot was booted again",
                e.build,
                e.generation,
                e.tries.map_or(0, |t| t.1).max(1)
            ),
            Some(e) if e.failed() => format!(
                "slot {s}: Sluice {} (install {}), failed earlier",
                e.build, e.generation
            ),
            Some(e) if e.generation > running_gen => format!(
                "slot {s}: Sluice {} (install {}) installed: the next boot tries it",
                e.build, e.generation
            ),
            Some(e) => format!(
                "slot {s}: Sluice {} (install {}), the fallback",
                e.build, e.generation
            ),
        };
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(f) = last_failure {
        out.push_str(&format!("last failed trial boot: {f}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(slot: Slot, generation: u64, tries: Option<(u32, u32)>) -> Entry {
        Entry {
            slot,
            file: String::new(),
            generation,
            build: format!("0.{generation}"),
            tries,
        }
    }

    #[test]
    fn entry_names_carry_the_slot_and_the_boot_counter() {
        assert_eq!(parse_name("sluice-a.conf"), Some((Slot::A, None)));
        assert_eq!(parse_name("sluice-b+3.conf"), Some((Slot::B, Some((3, 0)))));
        assert_eq!(
            parse_name("sluice-b+0-3.conf"),
            Some((Slot::B, Some((0, 3))))
        );
        assert_eq!(parse_name("sluice-c.conf"), None);
        assert_eq!(parse_name("debian.conf"), None);
        assert_eq!(running("root=x sluice.slot=b rw"), Some(Slot::B));
        assert_eq!(running("root=x rw"), None);
    }

    #[test]
    fn a_written_entry_reads_back() {
        let d = std::env::temp_dir().join(format!("sluice-slots-{}", std::process::id()));
        let dir = entries_dir(&d);
        fs::create_dir_all(&dir).unwrap();
        let (name, text) = entry(Slot::B, 2, "0.2.0", "console=ttyS0 rw", 3);
        assert_eq!(name, "sluice-b+3.conf");
        assert!(
            text.contains("options root=PARTLABEL=sluice-root-b sluice.slot=b console=ttyS0 rw")
        );
        fs::write(dir.join(&name), text).unwrap();
        fs::write(
            dir.join("sluice-a.conf"),
            entry(Slot::A, 1, "0.1.0", "rw", 3).1,
        )
        .unwrap();
        let got = entries(&d).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].slot, got[0].generation, got[0].build.as_str()),
            (Slot::A, 1, "0.1.0")
        );
        assert_eq!((got[1].slot, got[1].tries), (Slot::B, Some((3, 0))));
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn status_says_which_slot_runs_and_that_a_newer_one_failed() {
        let s = describe(
            Some(Slot::A),
            &[e(Slot::A, 1, None), e(Slot::B, 2, Some((0, 1)))],
            None,
        );
        assert!(
            s.starts_with("running: slot a, Sluice 0.1 (install 1), good\n"),
            "{s}"
        );
        assert!(s.contains("slot b: Sluice 0.2 (install 2) FAILED"), "{s}");
        let s = describe(
            Some(Slot::B),
            &[e(Slot::A, 1, None), e(Slot::B, 2, None)],
            None,
        );
        assert!(
            s.contains("slot a: Sluice 0.1 (install 1), the fallback"),
            "{s}"
        );
        let s = describe(
            Some(Slot::A),
            &[e(Slot::A, 1, None), e(Slot::B, 2, Some((3, 0)))],
            None,
        );
        assert!(s.contains("installed: the next boot tries it"), "{s}");
        let s = describe(None, &[], Some("x"));
        assert!(
            s.contains("running: no slot") && s.contains("slot b: empty"),
            "{s}"
        );
        assert!(s.contains("last failed trial boot: x"), "{s}");
    }
}
