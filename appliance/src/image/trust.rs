//! Who may sign an update: the image carries the public halves of the keys its builds are
//! signed with (minisign public key files, `*.pub` in `/usr/lib/sluice/update-keys/`;
//! image/build.sh installs them), and a bundle's manifest must carry a minisign signature
//! (Ed25519) by one of them. The manifest names the size and sha256 of every other member,
//! so its signature vouches for the whole bundle, and it is checked before a byte is
//! written. `--allow-unsigned` (labs) accepts a bundle without a signature or signed by
//! another key; a signature by a trusted key that does not match is refused always.

use std::fs;
use std::path::{Path, PathBuf};

use minisign_verify::{Error as MinisignError, PublicKey, Signature};

use super::ImageError;

/// Where the image keeps the public keys that may sign its updates.
pub const KEYS: &str = "/usr/lib/sluice/update-keys";

/// Who vouched for a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// Signed by this trusted key (its file name).
    Key(String),
    /// Accepted unsigned (`--allow-unsigned`); says why it was not verified.
    Unverified(String),
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signer::Key(k) => write!(f, "signed by {k}"),
            Signer::Unverified(why) => write!(f, "NOT VERIFIED ({why}; --allow-unsigned)"),
        }
    }
}

/// The trusted keys in `dir` (every `*.pub`, by name); none when `dir` does not exist.
pub fn keys(dir: &Path) -> Result<Vec<(String, PublicKey)>, ImageError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ImageError::Key {
                path: dir.to_path_buf(),
                reason: e.to_string(),
            });
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pub"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bad = |reason: String| ImageError::Key {
                path: path.clone(),
                reason,
            };
            let text = fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
            let key = PublicKey::decode(&text).map_err(|e| bad(e.to_string()))?;
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            Ok((name, key))
        })
        .collect()
}

/// Checks `signature` (the bundle's signature member, if it has one) over `manifest` (the
/// manifest member's bytes) against the keys in `dir`.
pub fn verify(
    manifest: &[u8],
    signature: Option<&[u8]>,
    dir: &Path,
    allow_unsigned: bool,
) -> Result<Signer, ImageError> {
    let keys = keys(dir)?;
    let Some(sig) = signature else {
        return if allow_unsigned {
            Ok(Signer::Unverified("the bundle is not signed".into()))
        } else {
            Err(ImageError::Unsigned {
                keys: dir.to_path_buf(),
            })
        };
    };
    let sig = std::str::from_utf8(sig)
        .map_err(|e| ImageError::Signature(e.to_string()))
        .and_then(|s| Signature::decode(s).map_err(|e| ImageError::Signature(e.to_string())))?;
    for (name, key) in &keys {
        match key.verify(manifest, &sig, true) {
            Ok(()) => return Ok(Signer::Key(name.clone())),
            Err(MinisignError::UnexpectedKeyId) => continue,
            Err(_) => return Err(ImageError::BadSignature { key: name.clone() }),
        }
    }
    let why = match keys.len() {
        0 => format!("{} holds no key", dir.display()),
        n => format!("none of the {n} keys in {} signed it", dir.display()),
    };
    if allow_unsigned {
        return Ok(Signer::Unverified(why));
    }
    Err(ImageError::UnknownSigner {
        keys: dir.to_path_buf(),
        why,
    })
}
