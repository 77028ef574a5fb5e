//! The fleet's I/O as the control loop's executor sees it: the etcd session task's handle
//! (requests out; its updates come to `run.rs`), and what a member reads at start (its
//! password file, the last good revision kept on disk).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::fleet::client::{self, Request, Settings, TlsFiles, Update};
use ::fleet::{Keys, OverrideDoc};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::lastgood::{self, LastGood};
use crate::config::{self, Config};
use crate::control::change::ChangeError;
use crate::lb::BackendId;

/// Why a fleet member could not start.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("fleet.password_file: cannot read {path}: {source}")]
    PasswordFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a member starts on: its file, or its file merged with the last good fleet revision
/// kept on disk (stale until etcd answers), and any problem reading that revision.
pub struct Start {
    pub config: Config,
    pub restored: Option<LastGood>,
    pub problem: Option<String>,
}

/// The config a member at `path` starts on (see [`Start`]); `file` alone without `[fleet]`.
pub fn start_from(path: &Path, file: Config) -> Start {
    let alone = |file, problem| Start {
        config: file,
        restored: None,
        problem,
    };
    let Some(f) = &file.fleet else {
        return alone(file, None);
    };
    let at = lastgood::path(&f.state_dir, &f.name);
    match lastgood::load(&at, &f.name) {
        Ok(None) => alone(file, None),
        Ok(Some(lg)) => match config::load_fleet(path, &lg.text, lg.revision) {
            Ok(config) => Start {
                config,
                restored: Some(lg),
                problem: None,
            },
            Err(e) => {
                let m = format!(
                    "fleet: the last good revision {} in {} does not validate with {} now, \
                     starting without it: {e}",
                    lg.revision,
                    at.display(),
                    path.display()
                );
                alone(file, Some(m))
            }
        },
        Err(e) => alone(file, Some(e.to_string())),
    }
}

/// The etcd session task's handle.
pub struct Session {
    requests: mpsc::Sender<Request>,
}

impl Session {
    /// Starts the etcd session for member `member` of `cfg`; returns its handle and the
    /// updates it sends.
    pub fn start(
        cfg: &config::Fleet,
        member: &str,
        holder: fleet::Holder,
    ) -> Result<(Session, mpsc::Receiver<Update>), FleetError> {
        let user = match (&cfg.user, &cfg.password_file) {
            (Some(u), Some(p)) => {
                let pw = std::fs::read_to_string(p).map_err(|source| FleetError::PasswordFile {
                    path: p.clone(),
                    source,
                })?;
                Some((u.clone(), pw.trim_end_matches(['\n', '\r']).to_string()))
            }
            _ => None,
        };
        let settings = Settings {
            endpoints: cfg.endpoints.clone(),
            user,
            tls: cfg.tls.as_ref().map(|t| TlsFiles {
                ca: t.ca.clone(),
                cert: t.cert.clone(),
                key: t.key.clone(),
            }),
            keys: Keys::new(&cfg.prefix, &cfg.name),
            member: member.to_string(),
            lease_ttl: cfg.lease_ttl,
            holder,
        };
        let (requests, updates) = client::spawn(settings);
        Ok((Session { requests }, updates))
    }

    /// Hands `r` to the session; a full queue drops it (the member's next report repeats
    /// what matters).
    pub fn send(&self, r: Request) {
        if let Err(e) = self.requests.try_send(r) {
            warn!("fleet: request to the etcd session dropped: {e}");
        }
    }

    /// Writes an operator's change to backend `id` to etcd for every member; refused while
    /// etcd is out of reach (it would hold on this member only).
    pub async fn write_override(
        &self,
        id: &BackendId,
        doc: OverrideDoc,
    ) -> Result<(), ChangeError> {
        let (reply, rx) = oneshot::channel();
        let req = Request::Override {
            vip: id.vip.clone(),
            backend: SocketAddr::new(id.address, id.port).to_string(),
            doc: Some(doc),
            reply,
        };
        self.requests
            .send(req)
            .await
            .map_err(|e| ChangeError::Fleet(e.to_string()))?;
        match tokio::time::timeout(Duration::from_secs(5), rx).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(ChangeError::Fleet(e.to_string())),
            _ => Err(ChangeError::Fleet("no answer from etcd within 5s".into())),
        }
    }

    /// The member leaves the fleet: its lease is revoked so nobody waits for it (at most
    /// two seconds).
    pub async fn leave(&self) {
        let (reply, rx) = oneshot::channel();
        if self.requests.send(Request::Leave { reply }).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), rx).await;
        }
    }
}

/// This process as the claim on its member name says: the machine (`/etc/machine-id`, or
/// the host name without one) and the API socket, which a process that takes over from
/// the one before shares and a second appliance of the same machine does not; and when it
/// started.
pub fn holder(api_socket: &std::path::Path, started_ms: u64) -> fleet::Holder {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let machine = read("/etc/machine-id")
        .filter(|m| !m.is_empty())
        .or_else(|| read("/proc/sys/kernel/hostname"))
        .unwrap_or_default();
    fleet::Holder {
        appliance: format!("{machine}:{}", api_socket.display()),
        started_ms,
    }
}
