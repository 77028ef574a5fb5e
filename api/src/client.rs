//! A small HTTP/1.1 client for the local API, over the unix socket or a TCP address with a
//! bearer token, over TLS (rustls) unless the appliance serves plain TCP. One connection
//! per request: the API is local and requests are rare (a console refresh a second), so
//! pooling would only add states to get wrong.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;

use crate::command::Command;
use crate::model::{ApiError, Backend, BackendAction, Bgp, Commit, Event, SetWeight, Status, Vip};

/// Everything but RFC 3986 unreserved characters is escaped in path segments.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Where the API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The unix socket (`[api] socket`).
    Unix(PathBuf),
    /// A TCP address (`[api] listen`), the bearer token it wants, and how its TLS
    /// certificate is checked (`None`: plain TCP, `[api] plain_tcp = true`).
    Tcp {
        addr: String,
        token: String,
        tls: Option<crate::tls::Tls>,
    },
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "{}", p.display()),
            Endpoint::Tcp {
                addr, tls: None, ..
            } => write!(f, "http://{addr}"),
            Endpoint::Tcp { addr, .. } => write!(f, "https://{addr}"),
        }
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens (the appliance is not running, or restarting).
    #[error("cannot reach the appliance at {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    /// The request could not be built (a VIP or backend name no URI can carry).
    #[error("API request failed: {0}")]
    Request(#[source] hyper::http::Error),
    /// The connection broke or the reply was not HTTP.
    #[error("API request failed: {0}")]
    Http(#[source] hyper::Error),
    /// A route without a JSON document (`/metrics`) answered with an error status.
    #[error("API request failed: {path}: {status}")]
    Status {
        path: &'static str,
        status: StatusCode,
    },
    /// The API answered with an error.
    #[error("{status}: {}", .error.error)]
    Api { status: u16, error: ApiError },
    /// The reply was not the JSON we expected.
    #[error("API reply not understood: {0}")]
    Decode(#[source] serde_json::Error),
    /// No reply within the timeout.
    #[error("API request timed out after {0:?}")]
    Timeout(Duration),
    /// The TLS handshake failed, or its settings could not be used.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

/// A client of one appliance's API.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    timeout: Duration,
}

impl Client {
    pub fn new(endpoint: Endpoint) -> Client {
        Client {
            endpoint,
            timeout: Duration::from_secs(10),
        }
    }

    /// Per-request timeout (default 10 s: a reload may take a few seconds).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends one request; returns the status and body, whatever the status.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let (status, _, body) = self.raw_with_headers(method, path, body).await?;
        Ok((status, body))
    }

    /// [`Client::raw`] with the reply's headers.
    async fn raw_with_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), ClientError> {
        match tokio::time::timeout(self.timeout, self.raw_inner(method, path, body)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout(self.timeout)),
        }
    }

    async fn raw_inner(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), ClientError> {
        let connect_err = |source| ClientError::Connect {
            endpoint: self.endpoint.to_string(),
            source,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "sluice");
        if body.is_some() {
            req = req.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let sender = match &self.endpoint {
            Endpoint::Unix(p) => {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(connect_err)?;
                handshake(s).await?
            }
            Endpoint::Tcp { addr, token, tls } => {
                req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
                let s = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .map_err(connect_err)?;
                match tls {
                    None => handshake(s).await?,
                    Some(tls) => handshake(tls.connect(s).await?).await?,
                }
            }
        };
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(ClientError::Request)?;
        let mut sender = sender;
        let resp = sender.send_request(req).await.map_err(ClientError::Http)?;
        let status = resp.status();
        let head = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(ClientError::Http)?
            .to_bytes();
        Ok((status, head, body))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.raw(method, path, body).await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        serde_json::from_slice(&bytes).map_err(ClientError::Decode)
    }

    pub async fn status(&self) -> Result<Status, ClientError> {
        self.call(Method::GET, "/v1/status", None).await
    }

    pub async fn vips(&self) -> Result<Vec<Vip>, ClientError> {
        self.call(Method::GET, "/v1/vips", None).await
    }

    /// One page of the VIPs (see [`crate::Page`]).
    pub async fn vips_page(&self, page: &crate::Page) -> Result<Vec<Vip>, ClientError> {
        self.call(Method::GET, &format!("/v1/vips{}", page.query()), None)
            .await
    }

    pub async fn vip(&self, vip: &str) -> Result<Vip, ClientError> {
        self.call(Method::GET, &format!("/v1/vips/{}", seg(vip)), None)
            .await
    }

    pub async fn backends(&self, vip: &str) -> Result<Vec<Backend>, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/vips/{}/backends", seg(vip)),
            None,
        )
        .await
    }

    /// `GET /v1/vips/{vip}/outbound`: the VIP's outbound range and its backends' shares.
    pub async fn outbound(&self, vip: &str) -> Result<crate::Outbound, ClientError> {
        self.call(
            Method::GET,
            &format!("/v1/vips/{}/outbound", seg(vip)),
            None,
        )
        .await
    }

    pub async fn bgp(&self) -> Result<Bgp, ClientError> {
        self.call(Method::GET, "/v1/bgp", None).await
    }

    /// The fleet document (`GET /v1/fleet`); `Ok(None)` on an appliance that runs alone
    /// (the API answers 404 without a `[fleet]` section).
    pub async fn fleet(&self) -> Result<Option<crate::FleetStatus>, ClientError> {
        match self.call(Method::GET, "/v1/fleet", None).await {
            Ok(doc) => Ok(Some(doc)),
            Err(ClientError::Api { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Events after `since` (all kept events with 0), oldest first.
    pub async fn events(&self, since: u64) -> Result<Vec<Event>, ClientError> {
        self.call(Method::GET, &format!("/v1/events?since={since}"), None)
            .await
    }

    /// Drain, undrain, disable or enable a backend (`address:port`, or the address alone
    /// when the VIP has one backend at that address).
    pub async fn backend_action(
        &self,
        vip: &str,
        backend: &str,
        action: BackendAction,
    ) -> Result<Commit, ClientError> {
        let path = format!(
            "/v1/vips/{}/backends/{}/{}",
            seg(vip),
            seg(backend),
            action.name()
        );
        self.call(Method::POST, &path, None).await
    }

    pub async fn set_weight(
        &self,
        vip: &str,
        backend: &str,
        weight: u32,
    ) -> Result<Commit, ClientError> {
        let path = format!("/v1/vips/{}/backends/{}/weight", seg(vip), seg(backend));
        let body = serde_json::to_vec(&SetWeight { weight }).map_err(ClientError::Decode)?;
        self.call(Method::PUT, &path, Some(body)).await
    }

    /// Withdraw (`announce = false`) or announce again a VIP.
    pub async fn vip_announce(&self, vip: &str, announce: bool) -> Result<Commit, ClientError> {
        let action = if announce { "announce" } else { "withdraw" };
        self.call(
            Method::POST,
            &format!("/v1/vips/{}/{action}", seg(vip)),
            None,
        )
        .await
    }

    /// Makes one write call; a refused one comes back as [`ClientError::Api`].
    pub async fn send(&self, command: &Command) -> Result<Commit, ClientError> {
        match command {
            Command::Backend {
                vip,
                backend,
                action,
            } => self.backend_action(vip, backend, *action).await,
            Command::Weight {
                vip,
                backend,
                weight,
            } => self.set_weight(vip, backend, *weight).await,
            Command::Announce { vip, announce } => self.vip_announce(vip, *announce).await,
            Command::Reload => self.reload().await,
            Command::ReclaimDatapath => self.reclaim_datapath().await,
        }
    }

    /// Takes every datapath interface another XDP program holds back from it (`POST
    /// /v1/datapath/reclaim`).
    pub async fn reclaim_datapath(&self) -> Result<Commit, ClientError> {
        self.call(Method::POST, "/v1/datapath/reclaim", None).await
    }

    /// Reloads the config file; a rejected file comes back as [`ClientError::Api`] with
    /// every error in `error.errors`.
    pub async fn reload(&self) -> Result<Commit, ClientError> {
        self.call(Method::POST, "/v1/reload", None).await
    }

    /// Captures frames (`POST /v1/capture`): the pcapng body and the frames the appliance
    /// lost (its `x-sluice-capture-lost` header). The request may take `duration_ms` and
    /// more, so the client's timeout is raised to cover it.
    pub async fn capture(&self, req: &crate::CaptureRequest) -> Result<(Bytes, u64), ClientError> {
        let body = serde_json::to_vec(req).map_err(ClientError::Decode)?;
        let this = Client {
            timeout: self
                .timeout
                .max(Duration::from_millis(req.duration_ms) + Duration::from_secs(10)),
            ..self.clone()
        };
        let (status, head, bytes) = this
            .raw_with_headers(Method::POST, "/v1/capture", Some(body))
            .await?;
        if !status.is_success() {
            return Err(api_error(status, &bytes));
        }
        let lost = head
            .get(crate::capture_headers::LOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok((bytes, lost))
    }

    /// The Prometheus exposition (`GET /metrics`).
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let (status, bytes) = self.raw(Method::GET, "/metrics", None).await?;
        if !status.is_success() {
            return Err(ClientError::Status {
                path: "/metrics",
                status,
            });
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// An error reply: its JSON document, or its text when it is not one.
fn api_error(status: StatusCode, bytes: &[u8]) -> ClientError {
    let error = serde_json::from_slice::<ApiError>(bytes).unwrap_or_else(|_| ApiError {
        error: String::from_utf8_lossy(bytes).trim().to_string(),
        field: None,
        errors: Vec::new(),
    });
    ClientError::Api {
        status: status.as_u16(),
        error,
    }
}

/// `s` percent-encoded for a path segment or a query value.
pub(crate) fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn handshake<S>(stream: S) -> Result<Sender, ClientError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(ClientError::Http)?;
    tokio::spawn(async move {
        // Ends when the reply has been read and the sender dropped.
        let _ = conn.await;
    });
    Ok(sender)
}
