//! The operator's overrides on disk, so a drain, a weight, a disabled backend or a VIP
//! withdrawn from BGP outlives a restart of `sluice run` (an upgrade, a crash, a reboot).
//! They are written to `overrides.json` in the state directory (`[appliance] state_dir`, or
//! systemd's `$STATE_DIRECTORY`) after every change that alters them, atomically (a temp
//! file, fsync, rename, fsync of the directory), and read at start before the first version
//! is built. A file that cannot be read or parsed is reported with its path, counted and
//! ignored: the appliance starts on its config file alone. A fleet member keeps nothing
//! here; the fleet holds its overrides in etcd.

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::change::Override;
use crate::config::{BackendState, Config};
use crate::lb::BackendId;

/// The file's name in the state directory.
pub const FILE: &str = "overrides.json";

/// The only format this version writes and reads.
const FORMAT: u32 = 1;

/// Why the overrides file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeptError {
    #[error(
        "appliance.state_dir: cannot write {path}: {source} (operator overrides will not \
         survive a restart; make the directory writable by sluice)"
    )]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "appliance.state_dir: cannot read {path}: {source}; starting without the operator's \
         overrides"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "appliance.state_dir: {path} is not a sluice overrides file ({reason}); it is \
         ignored, the config file runs without overrides (the next operator change \
         replaces it)"
    )]
    Corrupt { path: PathBuf, reason: String },
}

/// The operator's changes that outlive a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Kept {
    pub backends: HashMap<BackendId, Override>,
    pub withdrawn: BTreeSet<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    format: u32,
    backends: Vec<Entry>,
    withdrawn: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    vip: String,
    backend: SocketAddr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
}

/// The state directory: `[appliance] state_dir`, else systemd's (`systemd`: the first entry
/// of `$STATE_DIRECTORY`, which `StateDirectory=` in the unit sets); `None` keeps nothing.
pub fn dir(cfg: &Config, systemd: Option<&Path>) -> Option<PathBuf> {
    if cfg.fleet.is_some() {
        return None;
    }
    if let Some(d) = &cfg.appliance.state_dir {
        return Some(d.clone());
    }
    systemd.map(Path::to_path_buf)
}

/// The first entry of `$STATE_DIRECTORY`, when it is an absolute path.
fn systemd_dir() -> Option<PathBuf> {
    let env = std::env::var_os("STATE_DIRECTORY")?;
    let first = env.to_str()?.split(':').next()?;
    let p = PathBuf::from(first);
    p.is_absolute().then_some(p)
}

/// Reads `dir`'s overrides file; a missing file is no overrides.
pub fn load(dir: &Path) -> Result<Kept, KeptError> {
    let path = dir.join(FILE);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Kept::default()),
        Err(source) => return Err(KeptError::Read { path, source }),
    };
    let corrupt = |reason: String| KeptError::Corrupt {
        path: path.clone(),
        reason,
    };
    let doc: Doc = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
    if doc.format != FORMAT {
        return Err(corrupt(format!(
            "format {}, this sluice reads {FORMAT}",
            doc.format
        )));
    }
    let mut kept = Kept {
        withdrawn: doc.withdrawn.into_iter().collect(),
        ..Kept::default()
    };
    for e in doc.backends {
        let state = match e.state.as_deref() {
            None => None,
            Some("active") => Some(BackendState::Active),
            Some("drain") => Some(BackendState::Drain),
            Some("disabled") => Some(BackendState::Disabled),
            Some(s) => return Err(corrupt(format!("backend {} state {s:?}", e.backend))),
        };
        if e.weight.is_some_and(|w| w > u32::from(u16::MAX)) {
            return Err(corrupt(format!("backend {} weight over 65535", e.backend)));
        }
        let id = BackendId::new(&e.vip, e.backend.ip(), e.backend.port());
        kept.backends.insert(
            id,
            Override {
                state,
                weight: e.weight,
            },
        );
    }
    Ok(kept)
}

/// Writes `kept` to `dir`'s overrides file so that a crash at any point leaves either the
/// old file or the new one whole.
pub fn save(dir: &Path, kept: &Kept) -> Result<(), KeptError> {
    let path = dir.join(FILE);
    let mut backends: Vec<Entry> = kept
        .backends
        .iter()
        .filter(|(_, o)| o.state.is_some() || o.weight.is_some())
        .map(|(id, o)| Entry {
            vip: id.vip.clone(),
            backend: id.socket_addr(),
            state: o.state.map(|s| s.name().to_string()),
            weight: o.weight,
        })
        .collect();
    backends.sort_by(|a, b| (&a.vip, a.backend).cmp(&(&b.vip, b.backend)));
    let doc = Doc {
        format: FORMAT,
        backends,
        withdrawn: kept.withdrawn.iter().cloned().collect(),
    };
    let mut text = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    text.push(b'\n');
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let write = || -> std::io::Result<()> {
        fs::create_dir_all(dir)?;
        let mut f = File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|source| {
        let _ = fs::remove_file(&tmp);
        KeptError::Write {
            path: path.clone(),
            source,
        }
    })
}

/// The control loop's side: what was written last, so only a change writes.
#[derive(Debug, Default)]
pub struct Keeper {
    /// systemd's state directory, read once at start.
    systemd: Option<PathBuf>,
    written: Kept,
    /// The last write error reported (the same one is logged once, counted every time).
    last_error: Option<String>,
    /// What went wrong at start, reported once the shared state exists.
    start_problem: Option<String>,
    restored: Option<String>,
}

impl Keeper {
    /// Reads the overrides the state directory keeps for `cfg` (before the first version).
    pub fn read(cfg: &Config) -> (Keeper, Kept) {
        let mut k = Keeper {
            systemd: systemd_dir(),
            ..Keeper::default()
        };
        let Some(dir) = k.dir(cfg) else {
            if cfg.fleet.is_none() {
                info!(
                    "operator overrides are kept in memory only: set [appliance] state_dir \
                     (or run under systemd with StateDirectory=) to keep them across restarts"
                );
            }
            return (k, Kept::default());
        };
        match load(&dir) {
            Ok(kept) => {
                if kept != Kept::default() {
                    let msg = format!(
                        "operator overrides restored from {}: {} backend(s), {} withdrawn VIP(s)",
                        dir.join(FILE).display(),
                        kept.backends.len(),
                        kept.withdrawn.len()
                    );
                    info!("{msg}");
                    k.restored = Some(msg);
                }
                k.written = kept.clone();
                (k, kept)
            }
            Err(e) => {
                let mut msg = e.to_string();
                if let KeptError::Corrupt { path, .. } = &e {
                    // Kept aside for the operator: the next change writes a new file.
                    let aside = path.with_extension("json.corrupt");
                    if fs::rename(path, &aside).is_ok() {
                        msg.push_str(&format!("; kept as {}", aside.display()));
                    }
                }
                warn!("{msg}");
                k.start_problem = Some(msg);
                (k, Kept::default())
            }
        }
    }

    /// Where `cfg` keeps the overrides; `None` keeps nothing.
    pub fn dir(&self, cfg: &Config) -> Option<PathBuf> {
        dir(cfg, self.systemd.as_deref())
    }

    /// Whether these overrides differ from what was written last.
    pub fn differs(
        &self,
        backends: &HashMap<BackendId, Override>,
        withdrawn: &BTreeSet<String>,
    ) -> bool {
        *backends != self.written.backends || *withdrawn != self.written.withdrawn
    }

    /// `kept` is on disk now.
    pub fn written(&mut self, kept: Kept) {
        self.written = kept;
        self.last_error = None;
    }

    /// A write failed; the message to report when it is not the one reported last.
    pub fn failed(&mut self, e: &KeptError) -> Option<String> {
        let msg = e.to_string();
        if self.last_error.as_ref() == Some(&msg) {
            return None;
        }
        self.last_error = Some(msg.clone());
        Some(msg)
    }

    /// What the start found, once: the overrides restored, and a problem with the file.
    pub fn started(&mut self) -> (Option<String>, Option<String>) {
        (self.restored.take(), self.start_problem.take())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "sluice-kept-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn sample() -> Kept {
        let mut k = Kept::default();
        k.backends.insert(
            BackendId::new("web", "10.0.0.21".parse().unwrap(), 8080),
            Override {
                state: Some(BackendState::Drain),
                weight: None,
            },
        );
        k.backends.insert(
            BackendId::new("web", "2001:db8::5".parse().unwrap(), 80),
            Override {
                state: None,
                weight: Some(7),
            },
        );
        k.withdrawn.insert("dns".into());
        k
    }

    #[test]
    fn overrides_round_trip_and_leave_no_temp_file() {
        let d = tmp();
        assert_eq!(load(&d).unwrap(), Kept::default(), "no file: nothing kept");
        save(&d, &sample()).unwrap();
        assert_eq!(load(&d).unwrap(), sample());
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE], "only the file itself");
        save(&d, &Kept::default()).unwrap();
        assert_eq!(load(&d).unwrap(), Kept::default(), "an undo empties it");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_an_error_naming_its_path() {
        let d = tmp();
        fs::create_dir_all(&d).unwrap();
        let cases = [
            ("{\"backends\": [", "EOF"),
            (
                "{\"format\": 2, \"backends\": [], \"withdrawn\": []}",
                "format 2",
            ),
            (
                "{\"format\": 1, \"backends\": [{\"vip\": \"w\", \"backend\": \"10.0.0.1:80\", \
                 \"state\": \"sleepy\"}], \"withdrawn\": []}",
                "state \"sleepy\"",
            ),
            (
                "{\"format\": 1, \"backends\": [{\"vip\": \"w\", \"backend\": \"10.0.0.1\"}], \
                 \"withdrawn\": []}",
                "socket address",
            ),
        ];
        for (text, why) in cases {
            fs::write(d.join(FILE), text).unwrap();
            let e = load(&d).expect_err(text).to_string();
            assert!(e.contains(&d.join(FILE).display().to_string()), "{e}");
            assert!(e.contains(why), "{text}: {e}");
        }
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_a_write_error() {
        let d = tmp();
        fs::create_dir_all(&d).unwrap();
        // A file where the directory should be: nothing can be created under it.
        let blocked = d.join("file");
        fs::write(&blocked, "x").unwrap();
        let e = save(&blocked, &sample()).expect_err("write under a file");
        assert!(matches!(e, KeptError::Write { .. }), "{e}");
        assert!(e.to_string().contains("file/overrides.json"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }
}
