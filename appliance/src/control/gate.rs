//! The TCP API's front door: a connection takes one of the listener's slots
//! ([`super::serve::Limits::max_connections`]) only once its first request showed the
//! bearer token. Before that it is pending: it must finish its TLS handshake and send that
//! request's headers within [`PreAuth::deadline`], each source address may have at most
//! [`PreAuth::per_source`] pending connections and the listener [`PreAuth::pending`] (more
//! are closed at once, counted as refused). A first request without the right token gets
//! the API's 401 and the connection is closed (counted as unauthorized and as an API
//! error), so a client without the token holds no slot however often it asks; the token
//! is checked again on every later request of the connection (`api::bearer`).
//!
//! With `[api] tls_cert` and `tls_key` the connection is TLS from its first byte (rustls),
//! so the token never crosses the network in clear text; plain TCP only with
//! `plain_tcp = true`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::debug;

use super::model::Shared;
use super::secret::ApiStartError;
use super::serve::{Limits, Which, serve_connection};

/// What a connection may do before it holds a slot.
#[derive(Debug, Clone, Copy)]
pub struct PreAuth {
    /// Pending connections of the listener.
    pub pending: usize,
    /// Pending connections of one source address.
    pub per_source: usize,
    /// From accept to the first request's last header byte, TLS handshake included.
    pub deadline: Duration,
}

impl PreAuth {
    /// An operator's tools connect and ask at once; nothing legitimate waits seconds.
    pub const DEFAULT: PreAuth = PreAuth {
        pending: 512,
        per_source: 8,
        deadline: Duration::from_secs(5),
    };
}

/// The longest first-request head read before the token is checked.
const HEAD_MAX: usize = 16 * 1024;

/// The token a first request must carry, and the TLS the connection speaks.
#[derive(Clone)]
pub struct Gate {
    pub token: Arc<String>,
    /// `None`: plain TCP (`plain_tcp = true`).
    pub tls: Option<TlsAcceptor>,
}

/// The TLS side of the listener from `[api] tls_cert` and `tls_key` (PEM); the key file
/// must be root's alone, like the token's.
pub fn acceptor(tls: &crate::config::ApiTls) -> Result<TlsAcceptor, ApiStartError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |key: &'static str, path: &std::path::Path, reason: String| ApiStartError::Tls {
        key,
        path: path.display().to_string(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| bad("tls_cert", &tls.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("tls_cert", &tls.cert, "no certificate in it".into()));
    }
    if let Some(why) = super::secret::not_private(&tls.key) {
        return Err(bad("tls_key", &tls.key, why));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| bad("tls_key", &tls.key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| bad("tls_key", &tls.key, format!("does not fit tls_cert: {e}")))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Why a connection was closed before it held a slot.
enum Closed {
    /// It did not finish the TLS handshake, or closed, or sent what is not an HTTP request.
    Broken,
    /// Its first request had no or a wrong token: answered 401.
    Token(Box<dyn Io>),
}

/// Serves `app` on `l` behind `gate` until the task is aborted.
pub async fn serve(
    l: TcpListener,
    app: Router,
    gate: Gate,
    limits: Limits,
    pre: PreAuth,
    shared: Arc<Shared>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let pending = Arc::new(Semaphore::new(pre.pending));
    let sources = Arc::new(Sources::default());
    let c = || shared.counters.listeners.of(Which::Tcp);
    loop {
        let (stream, peer) = match l.accept().await {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: let descriptors come back.
                debug!("api tcp accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(wait) = Arc::clone(&pending).try_acquire_owned() else {
            c().refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let Some(source) = Sources::take(&sources, peer.ip(), pre.per_source) else {
            c().refused.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (app, gate, slots, shared) = (
            app.clone(),
            gate.clone(),
            Arc::clone(&slots),
            Arc::clone(&shared),
        );
        tokio::spawn(async move {
            let first = tokio::time::timeout(pre.deadline, admit(stream, &gate)).await;
            drop((wait, source));
            let c = shared.counters.listeners.of(Which::Tcp);
            let (io, head) = match first {
                Ok(Ok(admitted)) => admitted,
                Ok(Err(Closed::Token(io))) => {
                    c.unauthorized.fetch_add(1, Ordering::Relaxed);
                    shared.counters.api_errors.fetch_add(1, Ordering::Relaxed);
                    unauthorized(io).await;
                    return;
                }
                Ok(Err(Closed::Broken)) => {
                    c.unauthorized.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(_) => {
                    c.timed_out.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let Ok(permit) = slots.try_acquire_owned() else {
                c.refused.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let io = Rewind { head, at: 0, io };
            let stats = Arc::clone(&shared.counters.listeners);
            serve_connection(io, app, limits, stats, Which::Tcp, permit).await;
        });
    }
}

/// The TLS handshake and the first request's head: the connection and the bytes read
/// (hyper reads them again), once the head carries the token.
async fn admit(
    stream: tokio::net::TcpStream,
    gate: &Gate,
) -> Result<(Box<dyn Io>, Vec<u8>), Closed> {
    let mut io: Box<dyn Io> = match &gate.tls {
        Some(tls) => Box::new(tls.accept(stream).await.map_err(|e| {
            debug!("api tcp: TLS handshake failed: {e}");
            Closed::Broken
        })?),
        None => Box::new(stream),
    };
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        let n = io.read(&mut buf).await.map_err(|_| Closed::Broken)?;
        if n == 0 {
            return Err(Closed::Broken);
        }
        head.extend_from_slice(&buf[..n]);
        match bearer(&head) {
            Head::Partial if head.len() < HEAD_MAX => continue,
            Head::Partial | Head::NotHttp => return Err(Closed::Broken),
            Head::Token(t) if super::secret::constant_time_eq(&t, gate.token.as_bytes()) => {
                return Ok((io, head));
            }
            Head::Token(_) | Head::NoToken => return Err(Closed::Token(io)),
        }
    }
}

/// What a request head says about its token.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Partial,
    NotHttp,
    NoToken,
    /// The `Authorization: Bearer` value.
    Token(Vec<u8>),
}

fn bearer(bytes: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::NotHttp,
    }
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .and_then(|h| h.value.strip_prefix(b"Bearer "))
        .map_or(Head::NoToken, |t| Head::Token(t.to_vec()))
}

/// Answers 401 with the API's error document, as `api::bearer` does, and closes.
async fn unauthorized(mut io: Box<dyn Io>) {
    let body = serde_json::to_vec(&api::ApiError {
        error: "missing or wrong bearer token".into(),
        field: Some("Authorization".into()),
        errors: Vec::new(),
    })
    .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\nwww-authenticate: \
         Bearer\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let wrote = async {
        io.write_all(head.as_bytes()).await?;
        io.write_all(&body).await?;
        io.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), wrote).await;
}

/// The pending connections of each source address.
#[derive(Default)]
struct Sources(Mutex<HashMap<IpAddr, usize>>);

/// One pending connection of a source; gives its place back when dropped.
struct Source {
    sources: Arc<Sources>,
    ip: IpAddr,
}

impl Sources {
    fn take(sources: &Arc<Sources>, ip: IpAddr, cap: usize) -> Option<Source> {
        let mut m = sources.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(Source {
            sources: Arc::clone(sources),
            ip,
        })
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        let mut m = self.sources.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// A connection whose first bytes were read already: they are read again first.
struct Rewind {
    head: Vec<u8>,
    at: usize,
    io: Box<dyn Io>,
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.at < me.head.len() {
            let n = (me.head.len() - me.at).min(buf.remaining());
            buf.put_slice(&me.head[me.at..me.at + n]);
            me.at += n;
            if me.at == me.head.len() {
                me.head = Vec::new();
                me.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
