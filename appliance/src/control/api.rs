//! The local API: HTTP/1.1 + JSON on the unix socket from `[api] socket` (mode 0600, so
//! root only), optionally on `[api] listen` over TLS behind a bearer token (see
//! [`super::gate`]: the token is checked before a connection holds a slot), and the Prometheus
//! exposition on `[api] metrics`. The documents are the `api` crate's; `docs/api/openapi.json`
//! describes every route and a test checks it against the real responses.
//!
//! Every route names a VIP by its name (`{vip}`), never by its address: tenant VIPs
//! (`tenant_vni`) may share an address, port and protocol with each other and with an
//! underlay VIP, so an address does not name one VIP. The VIP documents carry `tenant_vni`
//! and the backend documents `vtep` for tenant VIPs only (omitted otherwise); a backend
//! (`{backend}`) is named by its address in the VIP's own network, as its `id` shows.
//!
//! Reads are served from [`Shared`] without involving the control loop; writes become
//! [`Command`]s the loop applies as a new table version, and the reply waits (briefly) until
//! every worker runs it, so a client that drained a backend knows new flows avoid it.

pub use super::secret::ApiStartError;
use super::secret::{constant_time_eq, not_private};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use api::{ApiError, BackendAction};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use tokio::sync::oneshot;

use super::change::{self, BackendOp, Command};
use super::model::Shared;

/// How long a write waits for every worker to run the new version before it replies.
const SYNC_WAIT: Duration = Duration::from_secs(2);

/// The OpenAPI document, served at `/openapi.json`.
pub const OPENAPI: &str = include_str!("../../../docs/api/openapi.json");

type S = Arc<Shared>;

/// An error reply: status plus the JSON document.
pub struct Error(StatusCode, ApiError);

impl Error {
    fn new(status: StatusCode, error: impl Into<String>, field: Option<&str>) -> Error {
        Error(
            status,
            ApiError {
                error: error.into(),
                field: field.map(str::to_string),
                errors: Vec::new(),
            },
        )
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.0, axum::Json(self.1)).into_response()
    }
}

fn json<T: serde::Serialize>(v: &T) -> Response {
    axum::Json(v).into_response()
}

/// The API's routes over `shared`.
pub fn router(shared: S) -> Router {
    with_token(shared, None)
}

/// The API's routes over `shared`, behind `Authorization: Bearer <token>` when `token` is
/// set. Refusals are counted outside the token check, so a 401 counts like any other 4xx.
fn with_token(shared: S, token: Option<Arc<String>>) -> Router {
    let mut r = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/vips", get(vips))
        .route("/v1/vips/{vip}", get(vip))
        .route("/v1/vips/{vip}/backends", get(backends))
        .route("/v1/vips/{vip}/outbound", get(outbound))
        .route("/v1/vips/{vip}/withdraw", post(withdraw))
        .route("/v1/vips/{vip}/announce", post(announce))
        .route(
            "/v1/vips/{vip}/backends/{backend}/{action}",
            post(backend_action),
        )
        .route("/v1/vips/{vip}/backends/{backend}/weight", put(set_weight))
        .route("/v1/bgp", get(bgp))
        .route("/v1/fleet", get(fleet))
        .route("/v1/events", get(events))
        .route("/v1/reload", post(reload))
        .route("/v1/datapath/reclaim", post(reclaim))
        .route("/v1/capture", post(super::capture_api::route))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed);
    if let Some(t) = token {
        r = r.layer(middleware::from_fn_with_state(t, bearer));
    }
    r.layer(middleware::from_fn_with_state(
        Arc::clone(&shared),
        count_errors,
    ))
    .with_state(shared)
}

/// The API's routes behind `token`, for the TCP gate's tests.
#[cfg(test)]
pub(crate) fn with_token_for_tests(shared: S, token: Arc<String>) -> Router {
    with_token(shared, Some(token))
}

/// The metrics listener's routes: `/metrics` only.
pub fn metrics_router(shared: S) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared)
}

async fn count_errors(State(s): State<S>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if resp.status().is_client_error() {
        s.counters.api_errors.fetch_add(1, Ordering::Relaxed);
    }
    resp
}

/// Requires `Authorization: Bearer <token>` (the TCP listener).
async fn bearer(State(token): State<Arc<String>>, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
    if ok {
        return next.run(req).await;
    }
    let mut r = Error::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token",
        Some("Authorization"),
    )
    .into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

async fn not_found() -> Error {
    Error::new(StatusCode::NOT_FOUND, "no such API route", None)
}

async fn method_not_allowed() -> Error {
    Error::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
        None,
    )
}

async fn status(State(s): State<S>) -> Response {
    json(&s.status())
}

/// The page a list route's query asks for, or a 400 naming the parameter.
fn page(q: &[(String, String)]) -> Result<api::Page, Error> {
    api::Page::from_pairs(q.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| Error::new(StatusCode::BAD_REQUEST, e.to_string(), Some(e.param())))
}

/// A page of a list, with the number that matched before paging in `X-Total-Count`.
fn paged<T: serde::Serialize>(total: usize, items: &[T]) -> Response {
    let mut r = json(&items);
    r.headers_mut()
        .insert(api::page::TOTAL_HEADER, HeaderValue::from(total));
    r
}

async fn vips(
    State(s): State<S>,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, Error> {
    let (total, vips) = s.vips_page(&page(&q)?);
    Ok(paged(total, &vips))
}

fn unknown_vip(name: &str) -> Error {
    Error::new(
        StatusCode::NOT_FOUND,
        format!("no VIP named {name:?}"),
        Some("vip"),
    )
}

async fn vip(State(s): State<S>, UrlPath(name): UrlPath<String>) -> Result<Response, Error> {
    s.vip(&name)
        .map(|v| json(&v))
        .ok_or_else(|| unknown_vip(&name))
}

async fn backends(
    State(s): State<S>,
    UrlPath(name): UrlPath<String>,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Response, Error> {
    let p = page(&q)?;
    s.backends_page(&name, &p)
        .map(|(total, b)| paged(total, &b))
        .ok_or_else(|| unknown_vip(&name))
}

async fn outbound(State(s): State<S>, UrlPath(name): UrlPath<String>) -> Result<Response, Error> {
    match s.outbound(&name) {
        None => Err(unknown_vip(&name)),
        Some(None) => Err(Error::new(
            StatusCode::NOT_FOUND,
            format!("VIP {name:?} has no outbound range (set outbound = \"FIRST-LAST\" on it)"),
            Some("vip"),
        )),
        Some(Some(doc)) => Ok(json(&doc)),
    }
}

async fn bgp(State(s): State<S>) -> Response {
    json(&s.bgp())
}

async fn events(
    State(s): State<S>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, Error> {
    if let Some(k) = q.keys().find(|k| k.as_str() != "since") {
        return Err(Error::new(
            StatusCode::BAD_REQUEST,
            format!("unknown query parameter {k:?}"),
            Some(k),
        ));
    }
    let since = match q.get("since") {
        None => 0,
        Some(v) => v.parse::<u64>().map_err(|_| {
            Error::new(
                StatusCode::BAD_REQUEST,
                format!("since must be a non-negative integer, not {v:?}"),
                Some("since"),
            )
        })?,
    };
    let ev: Vec<api::Event> = s
        .events
        .lock()
        .map(|e| e.since(since).iter().map(|e| e.document()).collect())
        .unwrap_or_default();
    Ok(json(&ev))
}

async fn metrics(State(s): State<S>) -> Response {
    (
        // prometheus-client writes OpenMetrics (`_total` samples under `counter` families,
        // `# EOF`): say so, and Prometheus picks the matching parser.
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        super::metrics::render(&s),
    )
        .into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// `GET /v1/fleet`: the fleet document, or 404 on an appliance that runs alone.
async fn fleet(State(s): State<S>) -> Result<Response, Error> {
    let doc = s.fleet.lock().ok().and_then(|f| f.clone());
    doc.map(|d| json(&d)).ok_or_else(|| {
        Error::new(
            StatusCode::NOT_FOUND,
            "this appliance is not a fleet member (no [fleet] section)",
            None,
        )
    })
}

/// Sends a request to the control loop and turns its answer into a [`api::Commit`].
async fn command(
    s: &Shared,
    request: change::Request,
    status_on_error: StatusCode,
) -> Result<Response, Error> {
    let (reply, rx) = oneshot::channel();
    if s.commands.send(Command { request, reply }).await.is_err() {
        return Err(Error::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the appliance is shutting down",
            None,
        ));
    }
    let message = match rx.await {
        Ok(Ok(applied)) => applied.to_string(),
        Ok(Err(e)) => {
            let status = if e.is_not_found() {
                StatusCode::NOT_FOUND
            } else {
                status_on_error
            };
            let doc = ApiError {
                error: e.to_string(),
                field: e.field().map(str::to_string),
                errors: e.errors(),
            };
            return Err(Error(status, doc));
        }
        Err(_) => {
            return Err(Error::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the appliance is shutting down",
                None,
            ));
        }
    };
    let version = s.published.version();
    let synced = s.wait_synced(version, SYNC_WAIT).await;
    Ok(json(&api::Commit {
        version,
        synced,
        message,
    }))
}

async fn backend_action(
    State(s): State<S>,
    UrlPath((vip, backend, action)): UrlPath<(String, String, String)>,
) -> Result<Response, Error> {
    let Some(a) = BackendAction::parse(&action) else {
        return Err(Error::new(
            StatusCode::NOT_FOUND,
            format!("unknown backend action {action:?} (drain, undrain, disable, enable)"),
            Some("action"),
        ));
    };
    command(
        &s,
        change::Request::Backend {
            vip,
            backend,
            op: BackendOp::Action(a),
        },
        StatusCode::BAD_REQUEST,
    )
    .await
}

/// Parses `{"weight": N}` by hand so every error names its field.
fn parse_weight(body: &[u8]) -> Result<u32, Error> {
    let bad = |m: String, f: Option<&str>| Error::new(StatusCode::BAD_REQUEST, m, f);
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("body is not valid JSON: {e}"), Some("body")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad(
            "body must be a JSON object like {\"weight\": 100}".into(),
            Some("body"),
        ));
    };
    if let Some(k) = obj.keys().find(|k| k.as_str() != "weight") {
        return Err(bad(format!("unknown field {k:?}"), Some(k)));
    }
    let Some(w) = obj.get("weight") else {
        return Err(bad("missing field weight".into(), Some("weight")));
    };
    match w.as_u64() {
        Some(n) if n <= 65535 => Ok(n as u32),
        _ => Err(bad(
            format!("weight must be an integer in 0..=65535, not {w}"),
            Some("weight"),
        )),
    }
}

async fn set_weight(
    State(s): State<S>,
    UrlPath((vip, backend)): UrlPath<(String, String)>,
    body: Bytes,
) -> Result<Response, Error> {
    let weight = parse_weight(&body)?;
    command(
        &s,
        change::Request::Backend {
            vip,
            backend,
            op: BackendOp::Weight(weight),
        },
        StatusCode::BAD_REQUEST,
    )
    .await
}

async fn withdraw(State(s): State<S>, UrlPath(vip): UrlPath<String>) -> Result<Response, Error> {
    command(
        &s,
        change::Request::Announce {
            vip,
            announce: false,
        },
        StatusCode::CONFLICT,
    )
    .await
}

async fn announce(State(s): State<S>, UrlPath(vip): UrlPath<String>) -> Result<Response, Error> {
    command(
        &s,
        change::Request::Announce {
            vip,
            announce: true,
        },
        StatusCode::CONFLICT,
    )
    .await
}

async fn reload(State(s): State<S>) -> Result<Response, Error> {
    command(
        &s,
        change::Request::Reload,
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

async fn reclaim(State(s): State<S>) -> Result<Response, Error> {
    command(&s, change::Request::Reclaim, StatusCode::CONFLICT).await
}

/// Checks that only root can create or remove entries in `dir` (the socket's directory),
/// creating it 0700 when it does not exist.
fn check_socket_dir(path: &Path, dir: &Path) -> Result<(), ApiStartError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let unsafe_dir = |why: String| ApiStartError::UnsafeDir {
        path: path.display().to_string(),
        dir: dir.display().to_string(),
        why,
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .and_then(|()| {
                // The umask (process-wide, and narrowed while a socket binds) must not
                // decide the directory's mode.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|source| ApiStartError::Socket {
                path: path.display().to_string(),
                source,
            })?;
    }
    let m = std::fs::metadata(dir).map_err(|source| ApiStartError::Socket {
        path: path.display().to_string(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if m.uid() != me {
        return Err(unsafe_dir(format!(
            "owned by uid {}, not by uid {me}",
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "writable by others (mode {:04o})",
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Binds the unix socket (replacing a stale one), root-only: its directory is checked (see
/// [`check_socket_dir`]) and the socket is created under umask 0177, so it is mode 0600 from
/// its first instant instead of being chmod'ed through its path afterwards.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, ApiStartError> {
    use nix::sys::stat::{Mode, umask};
    let err = |source| ApiStartError::Socket {
        path: path.display().to_string(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    check_socket_dir(path, dir)?;
    if path.exists() {
        // A live appliance answers on it; a stale file from a crash does not.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "another appliance is serving this socket",
            )));
        }
        std::fs::remove_file(path).map_err(err)?;
    }
    // The umask is process-wide; the API starts before the prober and the speaker open
    // anything that would care.
    let old = umask(Mode::from_bits_truncate(0o177));
    let l = tokio::net::UnixListener::bind(path);
    umask(old);
    l.map_err(err)
}

/// Reads the TCP API's bearer token; refuses a file anyone but root can read or write.
fn read_token(path: &Path) -> Result<String, ApiStartError> {
    let bad = |reason: String| ApiStartError::Token {
        path: path.display().to_string(),
        reason,
    };
    if let Some(why) = not_private(path) {
        return Err(bad(why));
    }
    let token = std::fs::read_to_string(path)
        .map_err(|e| bad(e.to_string()))?
        .trim()
        .to_string();
    if token.len() < 16 {
        return Err(bad("the token must be at least 16 characters".into()));
    }
    Ok(token)
}

/// The running listeners: their tasks and the socket path they bound.
pub struct Listeners {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    socket: std::path::PathBuf,
}

impl Listeners {
    /// Stops every listener and removes the socket this process bound (not the one a
    /// reloaded config names: `[api]` changes apply at the next start).
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
        if let Err(e) = std::fs::remove_file(&self.socket)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("api.socket {}: not removed: {e}", self.socket.display());
        }
    }
}

/// Starts every configured listener.
pub async fn start(shared: S, cfg: &crate::config::Api) -> Result<Listeners, ApiStartError> {
    use super::serve::{Limits, Which, serve};
    let stats = Arc::clone(&shared.counters.listeners);
    let mut tasks = Vec::new();
    // Everything that can fail is checked before the socket exists, so a failed start
    // leaves no socket behind.
    let gate = match cfg.listen {
        Some(_) => Some(super::gate::Gate {
            token: Arc::new(read_token(&cfg.token_file.clone().unwrap_or_default())?),
            tls: cfg.tls.as_ref().map(super::gate::acceptor).transpose()?,
        }),
        None => None,
    };
    let tcp = match cfg.listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ApiStartError::Listen { addr, source })?,
        ),
        None => None,
    };
    let metrics = match cfg.metrics {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ApiStartError::Metrics { addr, source })?,
        ),
        None => None,
    };
    let unix = bind_unix(&cfg.socket)?;
    let app = router(Arc::clone(&shared));
    let s = Arc::clone(&stats);
    tasks.push(tokio::spawn(serve(
        unix,
        app,
        Limits::DEFAULT,
        s,
        Which::Socket,
    )));
    if let (Some(l), Some(gate)) = (tcp, gate) {
        let app = with_token(Arc::clone(&shared), Some(Arc::clone(&gate.token)));
        tasks.push(tokio::spawn(super::gate::serve(
            l,
            app,
            gate,
            Limits::DEFAULT,
            super::gate::PreAuth::DEFAULT,
            Arc::clone(&shared),
        )));
    }
    if let Some(l) = metrics {
        let app = metrics_router(Arc::clone(&shared));
        let s = Arc::clone(&stats);
        tasks.push(tokio::spawn(serve(
            l,
            app,
            Limits::DEFAULT,
            s,
            Which::Metrics,
        )));
    }
    Ok(Listeners {
        tasks,
        socket: cfg.socket.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weight_errors_name_the_field() {
        let field = |b: &str| parse_weight(b.as_bytes()).err().and_then(|e| e.1.field);
        assert_eq!(parse_weight(br#"{"weight": 7}"#).ok(), Some(7));
        assert_eq!(field("{"), Some("body".into()));
        assert_eq!(field("[1]"), Some("body".into()));
        assert_eq!(field("{}"), Some("weight".into()));
        assert_eq!(field(r#"{"weight": -1}"#), Some("weight".into()));
        assert_eq!(field(r#"{"weight": 70000}"#), Some("weight".into()));
        assert_eq!(field(r#"{"weight": "10"}"#), Some("weight".into()));
        assert_eq!(
            field(r#"{"weight": 1, "wieght": 2}"#),
            Some("wieght".into())
        );
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    /// A fresh directory under the system's temp dir, removed by the caller.
    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("hd-api-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).expect("metadata").permissions().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod");
    }

    #[tokio::test]
    async fn hd_the_socket_dir_is_created_0700_and_the_socket_is_0600() {
        let root = scratch("mk");
        let sock = root.join("run/sluice/api.sock");
        let l = bind_unix(&sock).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode(sock.parent().expect("dir")), 0o700);
        assert_eq!(mode(&sock), 0o600, "socket mode");
        drop(l);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn hd_a_socket_dir_others_can_write_or_own_is_refused() {
        let root = scratch("unsafe");
        std::fs::create_dir_all(&root).expect("mkdir");
        chmod(&root, 0o777);
        let sock = root.join("api.sock");
        let e = bind_unix(&sock).expect_err("world-writable dir refused");
        assert!(matches!(e, ApiStartError::UnsafeDir { .. }), "{e}");
        assert!(e.to_string().contains("writable by others"), "{e}");
        assert!(!sock.exists(), "no socket made");
        chmod(&root, 0o755);
        nix::unistd::chown(&root, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
        let e = bind_unix(&sock).expect_err("foreign-owned dir refused");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        nix::unistd::chown(&root, Some(nix::unistd::geteuid()), None).expect("chown");
        assert!(bind_unix(&sock).is_ok(), "root-owned 0755 is fine");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn hd_the_token_file_must_be_root_s_and_0600() {
        let root = scratch("token");
        std::fs::create_dir_all(&root).expect("mkdir");
        let t = root.join("token");
        std::fs::write(&t, "0123456789abcdef0123\n").expect("write");
        chmod(&t, 0o644);
        let e = read_token(&t).expect_err("0644 refused");
        assert!(e.to_string().contains("chmod 600"), "{e}");
        chmod(&t, 0o640);
        assert!(read_token(&t).is_err(), "group-readable refused");
        chmod(&t, 0o600);
        assert_eq!(read_token(&t).ok().as_deref(), Some("0123456789abcdef0123"));
        chmod(&t, 0o400);
        assert!(read_token(&t).is_ok(), "stricter than 0600 is fine");
        nix::unistd::chown(&t, Some(nix::unistd::Uid::from_raw(65534)), None).expect("chown");
        let e = read_token(&t).expect_err("foreign owner refused");
        assert!(e.to_string().contains("owned by uid 65534"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn hd_a_401_counts_as_an_api_error() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let shared = Arc::new(crate::control::metrics::tests::shared());
        shared.counters.api_errors.store(0, Ordering::Relaxed);
        let app = with_token(Arc::clone(&shared), Some(Arc::new("t".repeat(20))));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let stats = Arc::clone(&shared.counters.listeners);
        let task = tokio::spawn(super::super::serve::serve(
            l,
            app,
            super::super::serve::Limits::DEFAULT,
            stats,
            super::super::serve::Which::Tcp,
        ));
        let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
        c.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut reply = String::new();
        c.read_to_string(&mut reply).await.expect("read");
        assert!(reply.starts_with("HTTP/1.1 401"), "{reply}");
        assert_eq!(
            shared.counters.api_errors.load(Ordering::Relaxed),
            1,
            "401 counted"
        );
        task.abort();
    }

    #[tokio::test]
    async fn hd_a_listener_at_its_cap_closes_new_connections_and_counts_them() {
        use super::super::serve::{Limits, Which, serve};
        use tokio::io::AsyncReadExt;
        let shared = Arc::new(crate::control::metrics::tests::shared());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let limits = Limits {
            max_connections: 2,
            ..Limits::DEFAULT
        };
        let stats = Arc::clone(&shared.counters.listeners);
        let task = tokio::spawn(serve(
            l,
            metrics_router(Arc::clone(&shared)),
            limits,
            stats,
            Which::Metrics,
        ));
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
        }
        let c = shared.counters.listeners.of(Which::Metrics);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.open.load(Ordering::Relaxed) < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(c.open.load(Ordering::Relaxed), 2);
        let mut third = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), third.read(&mut b))
            .await
            .expect("closed at once, not left hanging")
            .unwrap_or(0);
        assert_eq!(n, 0, "the third connection is closed");
        assert_eq!(c.refused.load(Ordering::Relaxed), 1);
        task.abort();
    }

    #[tokio::test]
    async fn hd_stop_removes_the_socket_it_bound() {
        let root = scratch("stop");
        let sock = root.join("api.sock");
        let l = bind_unix(&sock).unwrap_or_else(|e| panic!("{e}"));
        let listeners = Listeners {
            tasks: vec![tokio::spawn(async move {
                let _l = l;
                std::future::pending::<()>().await;
            })],
            socket: sock.clone(),
        };
        listeners.stop();
        assert!(!sock.exists(), "the bound socket is removed");
        let _ = std::fs::remove_dir_all(&root);
    }
}
