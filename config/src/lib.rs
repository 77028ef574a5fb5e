//! Configuration: a TOML file (read with the `config` crate) plus `SLUICE_`-prefixed
//! environment overrides, validated whole into a [`Config`] model. A file with errors is
//! rejected with every error it has, each naming its key path; nothing half-valid escapes.
//!
//! Environment overrides use `__` between key segments:
//! `SLUICE_APPLIANCE__NAME=lb2`, `SLUICE_BGP__ASN=65011`. Only variables with `__` are read, so
//! unrelated `SLUICE_*` variables are not mistaken for keys.

pub mod acl;
pub mod error;
pub mod keys;
pub mod model;
mod policy;
pub mod quic;
mod range;
mod reader;
mod tree;
mod validate;
mod zone;

use std::path::{Path, PathBuf};

pub use acl::{AclMatch, AclRule, Prefix, PrefixError, PrefixList, SourceAcl};
pub use error::{ConfigError, ConfigErrors, LoadError};
pub use model::*;
pub use quic::{QuicLb, ServerId};
pub use range::PortRange;
pub use validate::FLEET_SECTIONS;
pub use validate::{
    DEFAULT_HEALTH_BATCH, DEFAULT_HEALTH_BATCH_DELAY, DEFAULT_METRICS, DEFAULT_SOCKET,
    DEFAULT_SYNC_RATE, DEFAULT_SYNC_STANDBY, DEFAULT_TABLE_SIZES, MAX_ACL_RULES, MD5_KEY_MAX_LEN,
    MIN_SLOTS_PER_BACKEND, default_table_size, min_table_size, prime_at_least,
};
pub use zone::{TENANT_ZONE, vni_of, zone_of};

/// Where `sluice` looks for its configuration unless told otherwise.
pub const DEFAULT_PATH: &str = "/etc/sluice/sluice.toml";

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "SLUICE";

/// The largest configuration file read (100,000 VIPs of a few backends take about 50 MiB).
pub const MAX_FILE: usize = 256 << 20;

/// Reads `path` in 64 KiB chunks, refusing it at the first chunk holding a control byte (a
/// binary, `/dev/zero`) and once over [`MAX_FILE`]: a wrong path never fills the memory.
fn read_bounded(path: &Path) -> Result<String, LoadError> {
    use std::io::Read;
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => LoadError::NotFound {
            path: path.to_path_buf(),
        },
        _ => LoadError::Io {
            path: path.to_path_buf(),
            source: e,
        },
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        if out.len() + n > MAX_FILE {
            return Err(LoadError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let start = out.len();
        out.extend_from_slice(&chunk[..n]);
        let control = |b: &u8| *b < 0x20 && !matches!(b, b'\t' | b'\r' | b'\n') || *b == 0x7f;
        if let Some(at) = out[start..].iter().position(control) {
            return Err(LoadError::NotText {
                path: path.to_path_buf(),
                line: 1 + out[..start + at].iter().filter(|b| **b == b'\n').count(),
                byte: out[start + at],
            });
        }
    }
    String::from_utf8(out).map_err(|e| LoadError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

impl Config {
    /// Parses and validates TOML text (no environment overrides).
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigErrors> {
        match load_str(text, Path::new("<string>"), std::iter::empty()) {
            Ok(c) => Ok(c),
            Err(LoadError::Invalid { errors, .. }) => Err(errors),
            Err(other) => {
                let mut errs = ConfigErrors::default();
                errs.push("", other.to_string());
                Err(errs)
            }
        }
    }
}

/// Reads, parses and validates `path`, applying `SLUICE_` overrides from the process
/// environment.
pub fn load(path: &Path) -> Result<Config, LoadError> {
    load_with_env(path, std::env::vars())
}

/// Like [`load`] with an explicit environment (for tests).
pub fn load_with_env(
    path: &Path,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, LoadError> {
    let text = read_bounded(path)?;
    load_str(&text, path, env)
}

/// Loads `path` (a fleet member's file) with the fleet's configuration `fleet_text` at
/// revision `revision` merged in (see `validate/fleet.rs`), validated whole like a file;
/// every error names its key path.
pub fn load_fleet(path: &Path, fleet_text: &str, revision: u64) -> Result<Config, LoadError> {
    let local_text = read_bounded(path)?;
    let merged = merge_fleet(path, &local_text, fleet_text, revision)?;
    load_str(&merged, path, std::env::vars())
}

/// The merged TOML text of a member's file and the fleet's configuration.
pub fn merge_fleet(
    path: &Path,
    local_text: &str,
    fleet_text: &str,
    revision: u64,
) -> Result<String, LoadError> {
    let local: toml::Table = local_text.parse().map_err(|e| LoadError::Syntax {
        path: path.to_path_buf(),
        message: syntax_message(local_text, &e),
    })?;
    let fleet_path = PathBuf::from(format!("fleet config (revision {revision})"));
    let fleet: toml::Table = fleet_text.parse().map_err(|e| LoadError::Syntax {
        path: fleet_path.clone(),
        message: syntax_message(fleet_text, &e),
    })?;
    let merged =
        validate::merge(&local, &fleet, revision).map_err(|errors| LoadError::Invalid {
            path: fleet_path.clone(),
            errors,
        })?;
    toml::to_string(&merged).map_err(|e| LoadError::Syntax {
        path: fleet_path,
        message: e.to_string(),
    })
}

fn load_str(
    text: &str,
    path: &Path,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, LoadError> {
    let path_buf = || PathBuf::from(path);
    if text.trim().is_empty() {
        return Err(LoadError::Empty { path: path_buf() });
    }
    let overrides: config::Map<String, String> = env
        .into_iter()
        .filter(|(k, _)| {
            k.strip_prefix(ENV_PREFIX)
                .and_then(|rest| rest.strip_prefix('_'))
                .is_some_and(|rest| rest.contains("__"))
        })
        .collect();
    let direct = if overrides.is_empty() {
        tree::direct(text)
    } else {
        None
    };
    let map = match direct {
        Some(map) => map,
        None => {
            // Parse with `toml` first for a precise, one-line syntax error with line and
            // column.
            if let Err(e) = text.parse::<toml::Table>() {
                return Err(LoadError::Syntax {
                    path: path_buf(),
                    message: syntax_message(text, &e),
                });
            }
            tree::through_config(text, overrides).map_err(|e| match e {
                tree::Error::Config(e) => LoadError::Environment(e),
                tree::Error::NotATable => LoadError::Syntax {
                    path: path_buf(),
                    message: "the top level is not a table".into(),
                },
            })?
        }
    };
    let validated = validate::validate(&map);
    // The parsed documents are dead now: at 10,000 VIPs they are well over a hundred
    // megabytes; a long-lived caller gives the freed heap back (`sys::mem`) after loading.
    drop(map);
    validated.map_err(|errors| LoadError::Invalid {
        path: path_buf(),
        errors,
    })
}

/// One line: "line L, column C: what the parser expected".
fn syntax_message(text: &str, e: &toml::de::Error) -> String {
    let what = e.message().lines().next().unwrap_or("syntax error").trim();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {col}: {what}")
        }
        None => what.to_string(),
    }
}

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod lvs_tests;
#[cfg(test)]
mod outbound_tests;
#[cfg(test)]
mod policy_tests;
#[cfg(test)]
mod quic_tests;
#[cfg(test)]
mod tenant_tests;
#[cfg(test)]
mod tests;
