//! Every socket the speaker opens lives here: outgoing connections (source address, GTSM
//! TTL), the listener, and the read and write halves of a session's TCP stream. Keeping
//! them in one file makes the set of socket options we rely on easy to audit.
//!
//! TCP MD5 (RFC 2385) and the receive half of GTSM (`IP_MINTTL`, RFC 5082 §3) are not
//! implemented: neither `socket2` 0.6 nor `nix` 0.31 exposes `TCP_MD5SIG` or `IP_MINTTL`
//! through a safe API, and this crate forbids `unsafe`. With `ttl_security` we still send
//! with TTL/hop limit 255, which is what a GTSM-enabled router checks on its side.

use crate::codec::{self, DecodeError, Message};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long a write may block before the connection counts as dead: long enough for a
/// congested peer, short enough that a wedged one does not stall the peer task forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sets TTL (IPv4) or hop limit (IPv6) to 255 so a GTSM router accepts our segments.
fn set_ttl_255(sock: SockRef<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        sock.set_unicast_hops_v6(255)
    } else {
        sock.set_ttl_v4(255)
    }
}

/// Opens a TCP connection to `remote`, from `local` (port chosen by the kernel) if given.
pub(crate) async fn connect(
    remote: SocketAddr,
    local: Option<IpAddr>,
    ttl_security: bool,
) -> io::Result<TcpStream> {
    let domain = Domain::for_address(remote);
    let sock = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    if ttl_security {
        set_ttl_255(SockRef::from(&sock), remote.is_ipv6())?;
    }
    if let Some(local) = local {
        sock.bind(&SocketAddr::new(local, 0).into())?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    TcpSocket::from_std_stream(std_stream).connect(remote).await
}

/// Binds the passive-open listener. An IPv6 wildcard also accepts IPv4 (v4-mapped).
pub(crate) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(false)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(64)?;
    TcpListener::from_std(sock.into())
}

/// Accepts one connection; the address is normalised (v4-mapped IPv6 becomes IPv4) so it
/// matches the configured peer address.
pub(crate) async fn accept(l: &TcpListener) -> io::Result<(TcpStream, IpAddr)> {
    let (s, addr) = l.accept().await?;
    Ok((s, addr.ip().to_canonical()))
}

/// Options on a session's stream, whichever side opened it.
pub(crate) fn prepare(stream: &TcpStream, ttl_security: bool) -> io::Result<()> {
    stream.set_nodelay(true)?;
    if ttl_security {
        let v6 = stream.local_addr()?.is_ipv6();
        set_ttl_255(SockRef::from(stream), v6)?;
    }
    Ok(())
}

/// What the read side of a connection produced.
#[derive(Debug)]
pub(crate) enum Received {
    /// One decoded message.
    Message(Message),
    /// A malformed message; reading stops.
    Malformed(DecodeError),
    /// The peer closed the connection or it failed.
    Closed(Option<io::Error>),
}

/// Reads messages until the connection closes or one fails to decode, handing each to
/// `deliver`; stops early when `deliver` returns false (nobody listens any more).
pub(crate) async fn read_messages(mut r: OwnedReadHalf, mut deliver: impl FnMut(Received) -> bool) {
    let mut buf: Vec<u8> = Vec::with_capacity(codec::MAX_MESSAGE_LEN * 2);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        loop {
            match codec::frame_len(&buf) {
                Ok(Some(len)) => {
                    let item = match codec::decode(&buf[..len]) {
                        Ok(m) => Received::Message(m),
                        Err(e) => {
                            deliver(Received::Malformed(e));
                            return;
                        }
                    };
                    buf.drain(..len);
                    if !deliver(item) {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    deliver(Received::Malformed(e));
                    return;
                }
            }
        }
        match r.read(&mut chunk).await {
            Ok(0) => {
                deliver(Received::Closed(None));
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                deliver(Received::Closed(Some(e)));
                return;
            }
        }
    }
}

/// Writes one encoded message, failing if the peer does not take it in time.
pub(crate) async fn write(w: &mut OwnedWriteHalf, bytes: &[u8]) -> io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, w.write_all(bytes)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "peer did not accept data in time",
        )),
    }
}

/// Flushes and half-closes the write side so a NOTIFICATION sent just before gets out.
pub(crate) async fn close(mut w: OwnedWriteHalf) {
    let _ = tokio::time::timeout(Duration::from_secs(1), w.shutdown()).await;
}
