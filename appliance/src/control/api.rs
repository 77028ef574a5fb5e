//! The local API: HTTP/1.1 + JSON on the unix socket from `[api] socket` (mode 0600, so
//! root only), optionally on `[api] listen` behind a bearer token, and the Prometheus
//! exposition on `[api] metrics`. The documents are the `api` crate's; `docs/api/openapi.json`
//! describes every route and a test checks it against the real responses.
//!
//! Reads are served from [`Shared`] without involving the control loop; writes become
//! [`Command`]s the loop applies as a new table version, and the reply waits (briefly) until
//! every worker runs it, so a client that drained a backend knows new flows avoid it.

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

use super::change::{Applied, ChangeError};
use super::shared::{BackendOp, Command, Shared};

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
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/vips", get(vips))
        .route("/v1/vips/{vip}", get(vip))
        .route("/v1/vips/{vip}/backends", get(backends))
        .route("/v1/vips/{vip}/withdraw", post(withdraw))
        .route("/v1/vips/{vip}/announce", post(announce))
        .route(
            "/v1/vips/{vip}/backends/{backend}/{action}",
            post(backend_action),
        )
        .route("/v1/vips/{vip}/backends/{backend}/weight", put(set_weight))
        .route("/v1/bgp", get(bgp))
        .route("/v1/events", get(events))
        .route("/v1/reload", post(reload))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            count_errors,
        ))
        .with_state(shared)
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
        s.api_errors.fetch_add(1, Ordering::Relaxed);
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

async fn vips(State(s): State<S>) -> Response {
    json(&s.vips())
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

async fn backends(State(s): State<S>, UrlPath(name): UrlPath<String>) -> Result<Response, Error> {
    s.backends(&name)
        .map(|v| json(&v))
        .ok_or_else(|| unknown_vip(&name))
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

/// Sends a command to the control loop and turns its answer into a [`api::Commit`].
async fn command(
    s: &Shared,
    make: impl FnOnce(oneshot::Sender<Result<Applied, ChangeError>>) -> Command,
    status_on_error: StatusCode,
) -> Result<Response, Error> {
    let (tx, rx) = oneshot::channel();
    if s.commands.send(make(tx)).await.is_err() {
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
        |reply| Command::Backend {
            vip,
            backend,
            op: BackendOp::Action(a),
            reply,
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
        |reply| Command::Backend {
            vip,
            backend,
            op: BackendOp::Weight(weight),
            reply,
        },
        StatusCode::BAD_REQUEST,
    )
    .await
}

async fn withdraw(State(s): State<S>, UrlPath(vip): UrlPath<String>) -> Result<Response, Error> {
    command(
        &s,
        |reply| Command::Announce {
            vip,
            announce: false,
            reply,
        },
        StatusCode::CONFLICT,
    )
    .await
}

async fn announce(State(s): State<S>, UrlPath(vip): UrlPath<String>) -> Result<Response, Error> {
    command(
        &s,
        |reply| Command::Announce {
            vip,
            announce: true,
            reply,
        },
        StatusCode::CONFLICT,
    )
    .await
}

async fn reload(State(s): State<S>) -> Result<Response, Error> {
    command(
        &s,
        |reply| Command::Reload { reply },
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await
}

/// Why an API listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiStartError {
    #[error("api.socket {path}: {source}")]
    Socket {
        path: String,
        source: std::io::Error,
    },
    #[error("api.listen {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("api.token_file {path}: {reason}")]
    Token { path: String, reason: String },
    #[error("api.metrics {addr}: {source}")]
    Metrics {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Binds the unix socket (replacing a stale one), root-only.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, ApiStartError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ApiStartError::Socket {
        path: path.display().to_string(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
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
    let l = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(l)
}

/// Starts every configured listener; returns their tasks.
pub async fn start(
    shared: S,
    cfg: &crate::config::Api,
) -> Result<Vec<tokio::task::JoinHandle<()>>, ApiStartError> {
    let mut tasks = Vec::new();
    let unix = bind_unix(&cfg.socket)?;
    let app = router(Arc::clone(&shared));
    tasks.push(tokio::spawn(async move {
        if let Err(e) = axum::serve(unix, app).await {
            tracing::error!("api socket server stopped: {e}");
        }
    }));
    if let Some(addr) = cfg.listen {
        let path = cfg.token_file.clone().unwrap_or_default();
        let token = std::fs::read_to_string(&path)
            .map_err(|e| ApiStartError::Token {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?
            .trim()
            .to_string();
        if token.len() < 16 {
            return Err(ApiStartError::Token {
                path: path.display().to_string(),
                reason: "the token must be at least 16 characters".into(),
            });
        }
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ApiStartError::Listen { addr, source })?;
        let app = router(Arc::clone(&shared))
            .layer(middleware::from_fn_with_state(Arc::new(token), bearer));
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(l, app).await {
                tracing::error!("api tcp server stopped: {e}");
            }
        }));
    }
    if let Some(addr) = cfg.metrics {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ApiStartError::Metrics { addr, source })?;
        let app = metrics_router(Arc::clone(&shared));
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(l, app).await {
                tracing::error!("metrics server stopped: {e}");
            }
        }));
    }
    Ok(tasks)
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
}
