//! What the API's listeners share about secrets: why one could not start, whether a
//! secret's file is root's alone, and a comparison that does not tell an attacker how much
//! of a token was right. A leaf: `api` (the routes) and `gate` (the TCP listener) both use
//! it, and neither imports the other for it.

use std::path::Path;

/// Why an API listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiStartError {
    #[error("api.socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "api.socket {path}: its directory {dir} is {why}; the socket is root's only while \
         nobody else can replace it (use a directory owned by root with mode 0700 or 0755, \
         or one that does not exist yet: it is created 0700)"
    )]
    UnsafeDir {
        path: String,
        dir: String,
        why: String,
    },
    #[error("api.listen {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("api.token_file {path}: {reason}")]
    Token { path: String, reason: String },
    #[error("api.{key} {path}: {reason}")]
    Tls {
        key: &'static str,
        path: String,
        reason: String,
    },
    #[error("api.metrics {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Why a secret's file (the token, the TLS key) is not root's alone, if it is not.
pub(super) fn not_private(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Some(format!(
            "owned by uid {}; it must be owned by root (uid {me})",
            m.uid()
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Some(format!(
            "mode {:04o} lets others read or change it; chmod 600 it",
            m.mode() & 0o7777
        ));
    }
    None
}

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
