//! gRPC health checking (`grpc.health.v1.Health/Check`, grpc/grpc `doc/health-checking.md`),
//! the check Kubernetes workloads expose: one unary call over HTTP/2, cleartext (h2c with
//! prior knowledge) or TLS with ALPN `h2`. The messages are two fields, so they are written
//! and read here by hand rather than generated:
//!
//! ```text
//! message HealthCheckRequest  { string service = 1; }
//! message HealthCheckResponse { enum ServingStatus { UNKNOWN = 0; SERVING = 1;
//!                               NOT_SERVING = 2; SERVICE_UNKNOWN = 3; } ServingStatus status = 1; }
//! ```
//!
//! Each gRPC message is framed by a compressed flag (0) and a 4-byte big-endian length; the
//! call's outcome is the `grpc-status` trailer (or header, for a trailers-only answer). The
//! probe passes on status 0 with SERVING and names anything else: `NOT_SERVING`,
//! `grpc-status 12 (UNIMPLEMENTED)` from a server without the health service, `grpc-status
//! 5 (NOT_FOUND)` for a service it does not know.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::check::GrpcCheck;
use crate::outcome::{Failure, Outcome, Pass};

/// The most of a response body read (a health answer is a few bytes).
const MAX_RESPONSE: usize = 64 * 1024;
const PATH: &str = "/grpc.health.v1.Health/Check";

/// One Check call to `addr`; `tls` carries the client configuration (ALPN h2) and name.
pub(crate) async fn probe(
    addr: SocketAddr,
    source: Option<IpAddr>,
    g: &GrpcCheck,
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
) -> Outcome {
    let stream = crate::probe::connect(addr, source, true).await?;
    let authority = g.authority.clone().unwrap_or_else(|| match addr {
        SocketAddr::V4(a) => a.to_string(),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    });
    match tls {
        None => {
            use std::os::fd::AsFd;
            let fd = stream.as_fd().try_clone_to_owned().ok();
            call(stream, fd, "http", &authority, &g.service).await
        }
        Some((config, name)) => {
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(crate::probe::tls_failure)?;
            if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(Failure::Grpc(
                    "the server did not agree to HTTP/2 (ALPN h2) over TLS".into(),
                ));
            }
            call(tls, None, "https", &authority, &g.service).await
        }
    }
}

/// The call over an established stream, driving the HTTP/2 connection alongside it.
async fn call<S>(
    io: S,
    fd: Option<std::os::fd::OwnedFd>,
    scheme: &str,
    authority: &str,
    service: &str,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let heard = Heard::default();
    let io = Sniff {
        io,
        fd,
        heard: heard.clone(),
    };
    let out = h2_call(io, scheme, authority, service).await;
    // A server that is not HTTP/2's (an HTTP/1 server answering the preface) fails the
    // call in one of several ways, by timing; what it said is the reason.
    out.map_err(|f| heard.not_h2().unwrap_or(f))
}

async fn h2_call<S>(io: S, scheme: &str, authority: &str, service: &str) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::handshake(io).await.map_err(h2_failure)?;
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("{scheme}://{authority}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "sluice-health")
        .body(())
        .map_err(|e| Failure::Grpc(format!("request: {e}")))?;
    let exchange = exchange(send, request, service);
    tokio::pin!(exchange);
    tokio::pin!(connection);
    // The connection future only ends when the connection does: the exchange decides.
    tokio::select! {
        out = &mut exchange => out,
        r = &mut connection => match r {
            Err(e) => Err(h2_failure(e)),
            Ok(()) => exchange.await,
        },
    }
}

async fn exchange(
    send: h2::client::SendRequest<Bytes>,
    request: http::Request<()>,
    service: &str,
) -> Outcome {
    let mut send = send.ready().await.map_err(h2_failure)?;
    let (response, mut body) = send.send_request(request, false).map_err(h2_failure)?;
    body.send_data(request_message(service), true)
        .map_err(h2_failure)?;
    let response = response.await.map_err(h2_failure)?;
    let (head, mut recv) = response.into_parts();
    if head.status != http::StatusCode::OK {
        return Err(Failure::Grpc(format!(
            "HTTP status {}",
            head.status.as_u16()
        )));
    }
    // A trailers-only answer carries grpc-status in the headers.
    if let Some(status) = grpc_status(&head.headers) {
        return status.and(Err(Failure::Grpc("no response message".into())));
    }
    let mut data = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(h2_failure)?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
        if data.len() > MAX_RESPONSE {
            return Err(Failure::BadResponse(format!(
                "gRPC response over {MAX_RESPONSE} bytes"
            )));
        }
    }
    let trailers = recv.trailers().await.map_err(h2_failure)?;
    match trailers.as_ref().and_then(grpc_status) {
        Some(Err(f)) => return Err(f),
        Some(Ok(())) => {}
        None => return Err(Failure::Grpc("no grpc-status in the answer".into())),
    }
    match serving_status(&data)? {
        1 => Ok(Pass::Serving),
        n => Err(Failure::Grpc(status_name(n).to_string())),
    }
}

/// How many of the server's first bytes are kept: enough for an HTTP/1 status line.
const HEARD: usize = 40;

/// The server's first bytes, shared with the stream h2 owns.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<u8>>>);

impl Heard {
    fn note(&self, bytes: &[u8]) {
        let mut h = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let room = HEARD - h.len();
        h.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn is_empty(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// What the server said instead of HTTP/2, whose server speaks first with a SETTINGS
    /// frame (RFC 9113 3.4: type 4 in the frame header's fourth byte): its first line,
    /// printable characters only. `None` while it said too little to tell, or spoke HTTP/2.
    fn not_h2(&self) -> Option<Failure> {
        let h = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if h.len() < 4 || h[3] == 4 {
            return None;
        }
        let line: String = h
            .iter()
            .take_while(|b| !matches!(b, b'\r' | b'\n'))
            .map(|&b| match b.is_ascii_graphic() || b == b' ' {
                true => b as char,
                false => '.',
            })
            .collect();
        Some(Failure::Grpc(format!(
            "not HTTP/2: the server answered {line:?}"
        )))
    }
}

/// The probe's stream, noting the server's first bytes. A write that fails before they
/// were read (the server's reset overtook the probe's request) reads what is already
/// there, so the answer is known whichever failed first.
struct Sniff<S> {
    io: S,
    /// The plain TCP socket under `io`, peeked at directly when a write fails: the runtime
    /// reports a read as pending until its reactor has seen the socket readable, even with
    /// the server's answer already queued (seen: "broken pipe" on a loaded machine).
    fd: Option<std::os::fd::OwnedFd>,
    heard: Heard,
}

impl<S: AsyncRead + Unpin> Sniff<S> {
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if matches!(r, Poll::Ready(Err(_))) && self.heard.is_empty() {
            let mut b = [0u8; HEARD];
            let mut buf = ReadBuf::new(&mut b);
            if let Poll::Ready(Ok(())) = Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                self.heard.note(buf.filled());
            }
            if self.heard.is_empty()
                && let Some(fd) = &self.fd
            {
                use rustix::net::{RecvFlags, recv};
                if let Ok((n, _)) = recv(fd, &mut b, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
                    self.heard.note(&b[..n]);
                }
            }
        }
        r
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Sniff<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        self.heard.note(&buf.filled()[before..]);
        r
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Sniff<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, b);
        self.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.after_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The length-prefixed HealthCheckRequest for `service`.
pub(crate) fn request_message(service: &str) -> Bytes {
    let mut msg = Vec::with_capacity(service.len() + 3);
    if !service.is_empty() {
        msg.push(0x0a); // field 1, length-delimited
        varint(service.len() as u64, &mut msg);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut framed = Vec::with_capacity(5 + msg.len());
    framed.push(0);
    framed.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    framed.extend_from_slice(&msg);
    Bytes::from(framed)
}

fn varint(mut n: u64, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a varint at the start of `b`: its value and length.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, byte) in b.iter().take(10).enumerate() {
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((n, i + 1));
        }
    }
    None
}

/// The `status` of the framed HealthCheckResponse in `data` (0, UNKNOWN, when absent, as
/// proto3 leaves a default value out).
pub(crate) fn serving_status(data: &[u8]) -> Result<u64, Failure> {
    let bad = |what: &str| Failure::BadResponse(format!("gRPC health answer: {what}"));
    if data.len() < 5 {
        return Err(bad("no message"));
    }
    if data[0] != 0 {
        return Err(bad("compressed message (none was asked for)"));
    }
    let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
    let mut msg = data
        .get(5..5 + len)
        .ok_or_else(|| bad("truncated message"))?;
    let mut status = 0;
    while !msg.is_empty() {
        let (key, used) = read_varint(msg).ok_or_else(|| bad("bad field key"))?;
        msg = &msg[used..];
        match key & 7 {
            0 => {
                let (v, used) = read_varint(msg).ok_or_else(|| bad("bad varint"))?;
                msg = &msg[used..];
                if key >> 3 == 1 {
                    status = v;
                }
            }
            2 => {
                let (len, used) = read_varint(msg).ok_or_else(|| bad("bad length"))?;
                let end = used
                    .checked_add(usize::try_from(len).map_err(|_| bad("bad length"))?)
                    .filter(|e| *e <= msg.len())
                    .ok_or_else(|| bad("truncated field"))?;
                msg = &msg[end..];
            }
            5 if msg.len() >= 4 => msg = &msg[4..],
            1 if msg.len() >= 8 => msg = &msg[8..],
            _ => return Err(bad("unknown wire type")),
        }
    }
    Ok(status)
}

fn status_name(n: u64) -> &'static str {
    match n {
        0 => "UNKNOWN",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "an unknown serving status",
    }
}

/// `grpc-status` of a header block: `Ok` for 0, the failure otherwise; `None` when absent.
fn grpc_status(h: &http::HeaderMap) -> Option<Result<(), Failure>> {
    let v = h.get("grpc-status")?;
    let code: u32 = v.to_str().ok().and_then(|s| s.trim().parse().ok())?;
    if code == 0 {
        return Some(Ok(()));
    }
    let message = h
        .get("grpc-message")
        .map(|m| format!(": {}", percent_decoded(m.as_bytes())))
        .unwrap_or_default();
    Some(Err(Failure::Grpc(format!(
        "grpc-status {code} ({}){message}",
        code_name(code)
    ))))
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2, "Responses"): at most 120
/// printable characters of it, decoded.
fn percent_decoded(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out)
        .chars()
        .filter(|c| !c.is_control())
        .take(120)
        .collect()
}

/// The gRPC status codes' names (grpc/grpc `doc/statuscodes.md`).
fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("unknown code")
}

fn h2_failure(e: h2::Error) -> Failure {
    if let Some(io) = e.get_io() {
        return crate::probe::io_failure(std::io::Error::new(io.kind(), io.to_string()));
    }
    Failure::Grpc(format!("HTTP/2: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_both_ways() {
        assert_eq!(&request_message("")[..], &[0, 0, 0, 0, 0]);
        assert_eq!(
            &request_message("web")[..],
            &[0, 0, 0, 0, 5, 0x0a, 3, b'w', b'e', b'b']
        );
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 1]), Ok(1));
        assert_eq!(serving_status(&[0, 0, 0, 0, 2, 0x08, 2]), Ok(2));
        // proto3 leaves UNKNOWN (0) out; unknown fields are skipped.
        assert_eq!(serving_status(&[0, 0, 0, 0, 0]), Ok(0));
        assert_eq!(
            serving_status(&[0, 0, 0, 0, 5, 0x12, 1, b'x', 0x08, 1]),
            Ok(1)
        );
        assert!(serving_status(&[0, 0, 0, 0, 9, 0x08]).is_err());
        assert!(serving_status(&[1, 0, 0, 0, 0]).is_err());
        assert!(serving_status(&[0, 0, 0, 0, 2, 0x08, 0x80]).is_err());
    }

    #[test]
    fn grpc_status_names_the_code() {
        let mut h = http::HeaderMap::new();
        assert!(grpc_status(&h).is_none());
        h.insert("grpc-status", "12".parse().unwrap());
        assert_eq!(
            grpc_status(&h),
            Some(Err(Failure::Grpc("grpc-status 12 (UNIMPLEMENTED)".into())))
        );
        h.insert("grpc-message", "not%20here".parse().unwrap());
        assert_eq!(
            grpc_status(&h),
            Some(Err(Failure::Grpc(
                "grpc-status 12 (UNIMPLEMENTED): not here".into()
            )))
        );
        h.insert("grpc-status", "0".parse().unwrap());
        assert_eq!(grpc_status(&h), Some(Ok(())));
    }

    const HTTP1: &[u8] = b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n";

    /// The kernel's side of the race: the server's answer waits in the receive queue, its
    /// reset came first, so the probe's next write fails (broken pipe) before it reads.
    struct ResetBeforeRead {
        wrote: bool,
        answer: &'static [u8],
    }

    impl AsyncRead for ResetBeforeRead {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if !self.wrote {
                return std::task::Poll::Pending;
            }
            let n = self.answer.len().min(buf.remaining());
            buf.put_slice(&self.answer[..n]);
            self.answer = &self.answer[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for ResetBeforeRead {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.wrote = true;
            std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// An HTTP/1 server answers the preface and closes. Whether the probe then fails
    /// reading that answer or writing its request (a broken pipe) is a race; either way the
    /// failure names what the server said.
    #[tokio::test]
    async fn an_http1_answer_is_named_whichever_side_fails_first() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let want = Err(Failure::Grpc(
            "not HTTP/2: the server answered \"HTTP/1.1 400 Bad Request\"".into(),
        ));
        let (client, mut server) = tokio::io::duplex(4096);
        server.write_all(HTTP1).await.expect("write");
        let reader = tokio::spawn(async move {
            let mut sink = Vec::new();
            let _ = server.read_to_end(&mut sink).await;
        });
        let read_first = call(client, None, "http", "backend:50051", "").await;
        assert_eq!(read_first, want, "the answer read first");
        reader.abort();
        let io = ResetBeforeRead {
            wrote: false,
            answer: HTTP1,
        };
        let write_first = call(io, None, "http", "backend:50051", "").await;
        assert_eq!(write_first, want, "the write failed first");
    }
}
