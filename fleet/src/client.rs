//! The thin layer over etcd: one session at a time (a lease kept alive, the member's keys
//! written under it, a read of every fleet key, then a watch from the revision read), views
//! handed to the control loop, writes asked for by it. When etcd cannot be reached the
//! session ends, the loop hears [`Update::Down`] (and keeps forwarding on what it runs), and
//! the next session starts after a backoff that doubles up to [`MAX_BACKOFF`]. A new
//! session writes the member's last report and probe results again under its new lease
//! before it reads, so a member that was away is back in the fleet's view at once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    TlsOptions, Txn, TxnOp, WatchOptions,
};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::claim::{claim, joining, put_held};
use crate::doc::{Activation, HealthReport, Holder, MemberReport, OverrideDoc};
use crate::keys::Keys;
use crate::view::View;

/// The longest wait between two attempts to reach etcd.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Each etcd request's deadline: a leader election takes about a second.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// How to reach the fleet's etcd cluster, and who this member is.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `host:port` or `http(s)://host:port`.
    pub endpoints: Vec<String>,
    /// User and password for etcd's authentication.
    pub user: Option<(String, String)>,
    pub tls: Option<TlsFiles>,
    pub keys: Keys,
    pub member: String,
    /// The member's lease: its keys vanish this long after it stops keeping them alive.
    pub lease_ttl: Duration,
    /// This process, as its claim on the member's name says ([`crate::claim`]).
    pub holder: Holder,
}

/// PEM files for TLS to etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA that signed etcd's server certificates.
    pub ca: PathBuf,
    /// A client certificate and key, when etcd asks for one.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Why etcd could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("cannot read {path}: {source} (check the [fleet] tls paths)")]
    Tls {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "etcd refused user {user:?}: {message} (check [fleet] user and the password in \
         password_file)"
    )]
    AuthFailed { user: String, message: String },
    #[error("etcd requires authentication: {message} (set [fleet] user and password_file)")]
    AuthRequired { message: String },
    #[error(
        "etcd's server certificate was refused: {message} (check that [fleet] tls_ca is the \
         CA that signed etcd's certificates, for the address in endpoints)"
    )]
    CertificateRefused { message: String },
    #[error("the member's etcd lease expired (etcd did not hear from it within the lease ttl)")]
    LeaseExpired,
    #[error("the etcd watch ended (etcd restarted or the fleet's keys were compacted)")]
    WatchEnded,
    #[error("cannot encode a fleet document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the fleet client has stopped")]
    Stopped,
    #[error(
        "etcd is out of reach ({error}); the member tries again in {:.1}s",
        retry_in.as_secs_f64()
    )]
    Unreachable { error: String, retry_in: Duration },
    #[error(
        "the member name {member:?} is taken: {why}; this appliance stays out of the fleet \
         (give it its own [appliance] name)"
    )]
    NameTaken { member: String, why: String },
    #[error("the member's name changed hands while it was being claimed; trying again")]
    NameContested,
}

/// A write the control loop asks for.
#[derive(Debug)]
pub enum Request {
    /// This member's report, under its lease.
    Report(MemberReport),
    /// This member's probe verdicts, under its lease.
    Health(HealthReport),
    /// The coordinator's write, done only if the activate key is unchanged.
    Activate { activation: Activation, expect: i64 },
    /// An operator's change to a backend, for every member (`None` removes it).
    Override {
        vip: String,
        backend: String,
        doc: Option<OverrideDoc>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    },
    /// The member leaves: its lease is revoked so nobody waits for it.
    Leave { reply: oneshot::Sender<()> },
}

/// What the session tells the control loop.
#[derive(Debug, Clone)]
pub enum Update {
    /// The fleet as of `view.revision`; `fresh` for the first view of a new session.
    View { view: Box<View>, fresh: bool },
    /// etcd is out of reach; the next attempt is in `retry_in`.
    Down { error: String, retry_in: Duration },
    /// The coordinator's write was done (`won`) or another member's came first.
    Activation { revision: u64, won: bool },
}

/// Connects to etcd as `s` says.
pub async fn connect(s: &Settings) -> Result<Client, ClientError> {
    let mut opts = ConnectOptions::new()
        .with_timeout(REQUEST_TIMEOUT)
        .with_connect_timeout(Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    if let Some((u, p)) = &s.user {
        opts = opts.with_user(u.clone(), p.clone());
    }
    if let Some(t) = &s.tls {
        let read = |p: &PathBuf| {
            std::fs::read(p).map_err(|source| ClientError::Tls {
                path: p.clone(),
                source,
            })
        };
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&t.ca)?));
        if let (Some(c), Some(k)) = (&t.cert, &t.key) {
            tls = tls.identity(Identity::from_pem(read(c)?, read(k)?));
        }
        opts = opts.with_tls(tls);
    }
    // One endpoint at a time, from the one after the last that was tried, each checked
    // with a status call: a member that is down (its leader killed, its machine gone) is
    // skipped at once instead of failing the requests the balancer would send it.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = s.endpoints.len().max(1);
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut last = None;
    for i in 0..n {
        let Some(ep) = s.endpoints.get((start + i) % n) else {
            break;
        };
        let r = match Client::connect([ep.as_str()], Some(opts.clone())).await {
            Ok(mut c) => c.status().await.map(|_| c),
            Err(e) => Err(e),
        };
        match r {
            Ok(c) => return Ok(c),
            // Every endpoint would say the same: tell the operator what to fix now.
            Err(e) => match auth_error(&e, s.user.as_ref().map(|(u, _)| u.as_str())) {
                Some(a) => return Err(a),
                None => last = Some(e),
            },
        }
    }
    Err(last.map_or(ClientError::Stopped, ClientError::Etcd))
}

/// An authentication or certificate refusal in `e`, as the operator's error; `None` for
/// anything else.
fn auth_error(e: &etcd_client::Error, user: Option<&str>) -> Option<ClientError> {
    let etcd_client::Error::GRpcStatus(st) = e else {
        return None;
    };
    let message = st.message().trim_start_matches("etcdserver: ").to_string();
    if message.contains("invalid peer certificate") {
        return Some(ClientError::CertificateRefused { message });
    }
    if message.contains("authentication failed") {
        return Some(ClientError::AuthFailed {
            user: user.unwrap_or_default().to_string(),
            message,
        });
    }
    message
        .contains("user name is empty")
        .then_some(ClientError::AuthRequired { message })
}

/// Every key of the fleet, decoded, as of one etcd revision.
pub async fn read(client: &mut Client, keys: &Keys) -> Result<View, ClientError> {
    let resp = client
        .get(keys.root(), Some(GetOptions::new().with_prefix()))
        .await?;
    let mut view = View {
        revision: resp.header().map_or(0, |h| h.revision().max(0) as u64),
        cluster: resp.header().map_or(0, |h| h.cluster_id()),
        ..View::default()
    };
    for kv in resp.kvs() {
        if let Ok(k) = kv.key_str() {
            view.put(keys, k, kv.value(), kv.mod_revision(), kv.lease());
        }
    }
    Ok(view)
}

/// Writes the fleet's configuration; returns its revision (the new version).
pub async fn push(client: &mut Client, keys: &Keys, text: &str) -> Result<u64, ClientError> {
    let resp = client.put(keys.config(), text, None).await?;
    Ok(resp.header().map_or(0, |h| h.revision().max(0) as u64))
}

/// Writes a new epoch (`sluice fleet rebase`): every member follows etcd's keys as they
/// are now, whatever revisions it ran before ([`crate::history`]). Returns the epoch.
pub async fn rebase(
    client: &mut Client,
    keys: &Keys,
    id: String,
    at_ms: u64,
) -> Result<crate::doc::Epoch, ClientError> {
    let epoch = crate::doc::Epoch { id, at_ms };
    client
        .put(keys.epoch(), serde_json::to_vec(&epoch)?, None)
        .await?;
    Ok(epoch)
}

/// Starts the session task; it runs until the request sender is dropped.
pub fn spawn(s: Settings) -> (mpsc::Sender<Request>, mpsc::Receiver<Update>) {
    let (req_tx, req_rx) = mpsc::channel(64);
    let (upd_tx, upd_rx) = mpsc::channel(64);
    tokio::spawn(sessions(s, req_rx, upd_tx));
    (req_tx, upd_rx)
}

/// What a new session writes again: the member's last words.
#[derive(Default)]
struct Memo {
    report: Option<MemberReport>,
    health: Option<HealthReport>,
}

async fn sessions(s: Settings, mut reqs: mpsc::Receiver<Request>, updates: mpsc::Sender<Update>) {
    let mut memo = Memo::default();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let mut started = false;
        let err = match connect(&s).await {
            Ok(mut c) => {
                match session(&s, &mut c, &mut reqs, &updates, &mut memo, &mut started).await {
                    Ok(()) => return,
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        if started {
            backoff = FIRST_BACKOFF;
        }
        warn!("fleet: {err}; retrying in {backoff:?}");
        let down = Update::Down {
            error: err.to_string(),
            retry_in: backoff,
        };
        if updates.send(down).await.is_err() {
            return;
        }
        // Requests that come while etcd is away update the memo; the next session writes it.
        let retry_at = tokio::time::Instant::now() + backoff;
        let sleep = tokio::time::sleep_until(retry_at);
        tokio::pin!(sleep);
        let error = err.to_string();
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                r = reqs.recv() => match r {
                    None => return,
                    Some(r) => {
                        let away = ClientError::Unreachable {
                            error: error.clone(),
                            retry_in: retry_at.saturating_duration_since(tokio::time::Instant::now()),
                        };
                        if offline(r, &mut memo, away) == Leaving::Left {
                            return;
                        }
                    }
                },
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Whether the member has left (the client ends: no session claims the name again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    Stays,
    Left,
}

/// A request while etcd is out of reach: kept for the next session, or refused with `away`
/// (why, and when the next attempt is); a leave ends the client (there is no lease to
/// revoke, and nothing may claim the name again).
fn offline(r: Request, memo: &mut Memo, away: ClientError) -> Leaving {
    match r {
        Request::Report(x) => memo.report = Some(x),
        Request::Health(x) => memo.health = Some(x),
        Request::Activate { .. } => {}
        Request::Override { reply, .. } => {
            let _ = reply.send(Err(away));
        }
        Request::Leave { reply } => {
            let _ = reply.send(());
            return Leaving::Left;
        }
    }
    Leaving::Stays
}

/// One session; returns `Ok` when the control loop is gone or the member left.
async fn session(
    s: &Settings,
    c: &mut Client,
    reqs: &mut mpsc::Receiver<Request>,
    updates: &mpsc::Sender<Update>,
    memo: &mut Memo,
    started: &mut bool,
) -> Result<(), ClientError> {
    let ttl = s.lease_ttl.as_secs().max(2) as i64;
    let lease = c.lease_grant(ttl, None).await?.id();
    let (mut keeper, mut alive) = c.lease_keep_alive(lease).await?;
    // The name first: nothing else is written under it until it is this process's.
    claim(s, c, lease, memo.report.as_ref().unwrap_or(&joining())).await?;
    if let Some(h) = &memo.health {
        let (key, value) = (s.keys.health(&s.member), serde_json::to_vec(h)?);
        if !put_held(s, c, lease, key, value).await? {
            return Err(ClientError::NameContested);
        }
    }
    let mut view = read(c, &s.keys).await?;
    let watch = WatchOptions::new()
        .with_prefix()
        .with_start_revision(view.revision as i64 + 1);
    let (_watcher, mut stream) = c.watch(s.keys.root(), Some(watch)).await?;
    *started = true;
    debug!(lease, revision = view.revision, "fleet: session started");
    let first = Update::View {
        view: Box::new(view.clone()),
        fresh: true,
    };
    if updates.send(first).await.is_err() {
        return Ok(());
    }
    let mut tick = tokio::time::interval(Duration::from_secs(ttl as u64) / 3);
    loop {
        tokio::select! {
            m = stream.message() => {
                let Some(resp) = m? else { return Err(ClientError::WatchEnded) };
                apply(&s.keys, &mut view, &resp)?;
                kept(s, c, lease, &view, memo).await?;
                let u = Update::View { view: Box::new(view.clone()), fresh: false };
                if updates.send(u).await.is_err() {
                    return Ok(());
                }
            }
            r = reqs.recv() => {
                let Some(r) = r else { return Ok(()) };
                // Leaving ends the session and the client: the lease is revoked, and no
                // watch event, keep-alive or retry may claim the name again afterwards (a
                // stopped member would otherwise be back, live, for a lease ttl).
                if let Request::Leave { reply } = r {
                    let _ = c.lease_revoke(lease).await;
                    let _ = reply.send(());
                    debug!(lease, "fleet: left");
                    return Ok(());
                }
                if let Some(u) = write(s, c, lease, r, memo).await?
                    && updates.send(u).await.is_err()
                {
                    return Ok(());
                }
            }
            _ = tick.tick() => keeper.keep_alive().await?,
            a = alive.message() => match a? {
                Some(r) if r.ttl() > 0 => {}
                _ => return Err(ClientError::LeaseExpired),
            },
        }
    }
}

/// One watch response applied to `view`.
fn apply(
    keys: &Keys,
    view: &mut View,
    resp: &etcd_client::WatchResponse,
) -> Result<(), ClientError> {
    if resp.canceled() {
        return Err(ClientError::WatchEnded);
    }
    for ev in resp.events() {
        let Some(kv) = ev.kv() else { continue };
        let Ok(k) = kv.key_str() else { continue };
        match ev.event_type() {
            EventType::Put => view.put(keys, k, kv.value(), kv.mod_revision(), kv.lease()),
            EventType::Delete => view.delete(keys, k),
        }
    }
    if let Some(h) = resp.header() {
        view.revision = h.revision().max(0) as u64;
        view.cluster = h.cluster_id();
    }
    Ok(())
}

/// The member's name still this session's after a watch response: claimed again when its
/// key was deleted (by hand, or by the lease of a process that had it before); the session
/// ends when another process holds it now (a newer process of this appliance took over).
async fn kept(
    s: &Settings,
    c: &mut Client,
    lease: i64,
    view: &View,
    memo: &Memo,
) -> Result<(), ClientError> {
    match view.members.get(&s.member) {
        None => claim(s, c, lease, memo.report.as_ref().unwrap_or(&joining())).await,
        Some(r) if r.holder != s.holder => Err(ClientError::NameTaken {
            member: s.member.clone(),
            why: crate::claim::may_take(&s.holder, r)
                .err()
                .unwrap_or_else(|| "another process took it over".into()),
        }),
        Some(_) => Ok(()),
    }
}

/// Does one request under `lease`.
async fn write(
    s: &Settings,
    c: &mut Client,
    lease: i64,
    r: Request,
    memo: &mut Memo,
) -> Result<Option<Update>, ClientError> {
    match r {
        Request::Report(mut x) => {
            x.holder = s.holder.clone();
            let v = serde_json::to_vec(&x)?;
            let key = s.keys.member(&s.member);
            // Not under this lease: deleted (claimed again) or taken (refused there).
            if !put_held(s, c, lease, key, v).await? {
                claim(s, c, lease, &x).await?;
            }
            memo.report = Some(x);
        }
        Request::Health(x) => {
            let v = serde_json::to_vec(&x)?;
            memo.health = Some(x);
            if !put_held(s, c, lease, s.keys.health(&s.member), v.clone()).await? {
                claim(s, c, lease, memo.report.as_ref().unwrap_or(&joining())).await?;
                if !put_held(s, c, lease, s.keys.health(&s.member), v).await? {
                    return Err(ClientError::NameContested);
                }
            }
        }
        Request::Activate { activation, expect } => {
            let key = s.keys.activate();
            let txn = Txn::new()
                .when([Compare::mod_revision(key.clone(), CompareOp::Equal, expect)])
                .and_then([TxnOp::put(key, serde_json::to_vec(&activation)?, None)]);
            let won = c.txn(txn).await?.succeeded();
            return Ok(Some(Update::Activation {
                revision: activation.revision,
                won,
            }));
        }
        Request::Override {
            vip,
            backend,
            doc,
            reply,
        } => {
            let key = s.keys.override_key(&vip, &backend);
            let r = match doc {
                Some(d) => match serde_json::to_vec(&d) {
                    Ok(v) => c.put(key, v, None).await.map(|_| ()),
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                        return Ok(None);
                    }
                },
                None => c.delete(key, None).await.map(|_| ()),
            };
            let _ = reply.send(r.map_err(ClientError::Etcd));
        }
        // The session leaves before it asks for a write.
        Request::Leave { reply } => {
            let _ = reply.send(());
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn away() -> ClientError {
        ClientError::Unreachable {
            error: "etcd: connection refused".into(),
            retry_in: Duration::from_millis(2500),
        }
    }

    #[test]
    fn a_change_while_etcd_is_away_is_refused_saying_so_and_when_it_retries() {
        let (reply, mut rx) = oneshot::channel();
        let r = Request::Override {
            vip: "web".into(),
            backend: "10.0.0.1:80".into(),
            doc: None,
            reply,
        };
        assert_eq!(offline(r, &mut Memo::default(), away()), Leaving::Stays);
        let err = rx.try_recv().expect("answered").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "etcd is out of reach (etcd: connection refused); the member tries again in 2.5s"
        );
    }

    #[test]
    fn leaving_while_etcd_is_away_ends_the_client_and_answers() {
        let (reply, mut rx) = oneshot::channel();
        let r = Request::Leave { reply };
        assert_eq!(offline(r, &mut Memo::default(), away()), Leaving::Left);
        assert_eq!(rx.try_recv(), Ok(()));
    }
}
