//! The last fleet revision this member activated, kept on disk under `[fleet] state_dir`,
//! so a member restarted while etcd is out of reach starts on the fleet's VIPs (the version
//! it ran, marked stale) instead of its file alone, which has none. The file is written
//! after every activation, atomically: a temporary file in the same directory, synced, then
//! renamed over the old one and the directory synced, so a crash leaves the old revision or
//! the new one, never half of either.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What is kept: the fleet's document as pushed, with its revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastGood {
    /// `[fleet] name`, so a file of another fleet is never taken.
    pub fleet: String,
    pub revision: u64,
    /// The fleet's TOML text of `revision` (merged with the local file when loaded).
    pub text: String,
    /// The etcd history `revision` belongs to (`fleet::history`); none from a release
    /// before it.
    #[serde(default)]
    pub history: Option<::fleet::history::History>,
}

/// Why the last good revision could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum LastGoodError {
    #[error(
        "fleet.state_dir: cannot write {path}: {source} (the last good revision is not kept; \
         check the directory exists and is writable)"
    )]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("fleet.state_dir: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("fleet.state_dir: {path} is not a last good revision ({source}); it is ignored")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("fleet.state_dir: {path} belongs to fleet {found:?}, not {wanted:?}; it is ignored")]
    OtherFleet {
        path: PathBuf,
        found: String,
        wanted: String,
    },
}

/// The file of fleet `name` under `dir`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("fleet-{name}.last-good.json"))
}

/// Writes `lg` to `path` atomically (see the module comment).
pub fn save(path: &Path, lg: &LastGood) -> Result<(), LastGoodError> {
    let err = |source| LastGoodError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(err)?;
    let body = serde_json::to_vec_pretty(lg).map_err(|e| err(std::io::Error::other(e)))?;
    let name = path
        .file_name()
        .map_or("last-good".into(), |n| n.to_string_lossy());
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(&body).map_err(err)?;
    f.sync_all().map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(err)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(err)
}

/// Reads the last good revision of fleet `fleet` from `path`; `None` when there is none.
pub fn load(path: &Path, fleet: &str) -> Result<Option<LastGood>, LastGoodError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LastGoodError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let lg: LastGood = serde_json::from_slice(&bytes).map_err(|source| LastGoodError::Corrupt {
        path: path.to_path_buf(),
        source,
    })?;
    if lg.fleet != fleet {
        return Err(LastGoodError::OtherFleet {
            path: path.to_path_buf(),
            found: lg.fleet,
            wanted: fleet.to_string(),
        });
    }
    Ok(Some(lg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_revision_reads_back_and_bad_files_are_errors_not_revisions() {
        let dir = std::env::temp_dir().join(format!("sluice-lastgood-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let p = path(&dir.join("state"), "edge");
        assert!(load(&p, "edge").unwrap().is_none(), "nothing kept yet");
        let lg = LastGood {
            fleet: "edge".into(),
            revision: 41,
            text: "[[vip]]\nname = \"web\"\n".into(),
            history: None,
        };
        save(&p, &lg).unwrap();
        let newer = LastGood {
            revision: 42,
            ..lg.clone()
        };
        save(&p, &newer).unwrap();
        assert_eq!(load(&p, "edge").unwrap(), Some(newer));
        let leftovers: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left: {leftovers:?}");

        let e = load(&p, "core").unwrap_err().to_string();
        assert!(e.contains("belongs to fleet \"edge\", not \"core\""), "{e}");
        std::fs::write(&p, b"{\"fleet\": \"edge\", \"rev").unwrap();
        let e = load(&p, "edge").unwrap_err().to_string();
        assert!(e.contains("is not a last good revision"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
