//! Every socket the speaker opens lives here: outgoing connections (source address, GTSM
//! TTL, TCP MD5 key), the listener, and the read and write halves of a session's TCP
//! stream. Keeping them in one file makes the set of socket options we rely on easy to
//! audit.
//!
//! TCP MD5 (RFC 2385) and the receive half of GTSM (`IP_MINTTL`/`IPV6_MINHOPCOUNT`,
//! RFC 5082 §3) have no safe API in `socket2` 0.6, `nix` 0.31 or `rustix` 1.1, and this
//! crate forbids `unsafe`, so they go through the embedder's [`SocketOptions`]. Keys and
//! the minimum TTL are set before `listen`/`connect`: a key added after the SYN would leave
//! the handshake unsigned, and a minimum TTL set late lets far-away segments in meanwhile.

use crate::codec::{self, DecodeError, Message};
use crate::speaker::{Md5Key, PeerConfig, SocketOptions, SpeakerError};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// How long a write may block before the connection counts as dead: long enough for a
/// congested peer, short enough that a wedged one does not stall the peer task forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TTL GTSM sends with and demands (RFC 5082 §3).
const GTSM_TTL: u8 = 255;

/// One peer's transport security, as the sockets of its sessions need it.
#[derive(Debug, Clone)]
pub(crate) struct Security {
    /// Where the options without a safe API come from.
    pub(crate) opts: Option<Arc<dyn SocketOptions>>,
    /// RFC 2385 key.
    pub(crate) md5_key: Option<Md5Key>,
    /// RFC 5082 GTSM.
    pub(crate) ttl_security: bool,
}

impl Security {
    pub(crate) fn new(cfg: &PeerConfig, opts: Option<Arc<dyn SocketOptions>>) -> Security {
        Security {
            opts,
            md5_key: cfg.md5_key.clone(),
            ttl_security: cfg.ttl_security,
        }
    }

    /// Speaker validation refuses keys or GTSM without options; this is the backstop.
    fn opts(&self) -> io::Result<&dyn SocketOptions> {
        self.opts.as_deref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "TCP MD5 / minimum TTL requested but no SocketOptions configured",
            )
        })
    }
}

/// Sets TTL (IPv4) or hop limit (IPv6) to 255 so a GTSM router accepts our segments. An
/// IPv6 socket gets both: its v4-mapped connections send with the IPv4 TTL.
fn set_ttl_255(sock: SockRef<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        sock.set_unicast_hops_v6(u32::from(GTSM_TTL))?;
    }
    sock.set_ttl_v4(u32::from(GTSM_TTL))
}

/// `peer` as the kernel wants it on a socket of the given family: v4-mapped on IPv6
/// sockets, `None` when the socket can never talk to it (IPv6 peer, IPv4 socket).
fn in_family(peer: IpAddr, v6_socket: bool) -> Option<IpAddr> {
    match (peer, v6_socket) {
        (IpAddr::V4(a), true) => Some(IpAddr::V6(a.to_ipv6_mapped())),
        (IpAddr::V6(_), false) => None,
        (p, _) => Some(p),
    }
}

/// Opens a TCP connection to `remote`, from `local` (port chosen by the kernel) if given,
/// with the peer's key and GTSM limits in place before the SYN leaves.
pub(crate) async fn connect(
    remote: SocketAddr,
    local: Option<IpAddr>,
    sec: Security,
) -> io::Result<TcpStream> {
    let domain = Domain::for_address(remote);
    let sock = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    let v6 = remote.is_ipv6();
    if sec.ttl_security {
        set_ttl_255(SockRef::from(&sock), v6)?;
        sec.opts()?.min_ttl(sock.as_fd(), v6, GTSM_TTL)?;
    }
    if let Some(key) = &sec.md5_key {
        sec.opts()?
            .tcp_md5(sock.as_fd(), remote.ip(), key.as_bytes())
            .map_err(|e| io::Error::new(e.kind(), format!("setting TCP MD5 key: {e}")))?;
    }
    if let Some(local) = local {
        sock.bind(&SocketAddr::new(local, 0).into())?;
    }
    let std_stream: std::net::TcpStream = sock.into();
    TcpSocket::from_std_stream(std_stream).connect(remote).await
}

/// Binds the passive-open listener. An IPv6 wildcard also accepts IPv4 (v4-mapped).
///
/// Every peer's MD5 key goes on the listener, because the kernel checks the SYN against
/// the listener's keys and copies them to the accepted socket. The minimum TTL applies to
/// every peer alike, so it is set here only when all peers use GTSM; otherwise `prepare`
/// sets it on each accepted GTSM session (the first segments then escape the check).
pub(crate) fn listen(
    addr: SocketAddr,
    peers: &[PeerConfig],
    opts: Option<&dyn SocketOptions>,
) -> Result<TcpListener, SpeakerError> {
    let io_err = |source| SpeakerError::Listen { addr, source };
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(io_err)?;
    sock.set_reuse_address(true).map_err(io_err)?;
    let v6 = addr.is_ipv6();
    if v6 {
        sock.set_only_v6(false).map_err(io_err)?;
    }
    sock.set_nonblocking(true).map_err(io_err)?;
    sock.bind(&addr.into()).map_err(io_err)?;
    let missing = || io::Error::new(io::ErrorKind::Unsupported, "no SocketOptions configured");
    for p in peers {
        let (Some(key), Some(peer)) = (&p.md5_key, in_family(p.address, v6)) else {
            continue;
        };
        opts.ok_or_else(missing)
            .and_then(|o| o.tcp_md5(sock.as_fd(), peer, key.as_bytes()))
            .map_err(|source| SpeakerError::SocketOption {
                option: "TCP MD5 key",
                peer: p.address,
                source,
            })?;
    }
    if peers.iter().any(|p| p.ttl_security) {
        // SYN-ACKs leave with the listener's TTL; a GTSM router drops anything below 255.
        set_ttl_255(SockRef::from(&sock), v6).map_err(io_err)?;
    }
    if !peers.is_empty() && peers.iter().all(|p| p.ttl_security) {
        opts.ok_or_else(missing)
            .and_then(|o| o.min_ttl(sock.as_fd(), v6, GTSM_TTL))
            .map_err(|e| io_err(io::Error::new(e.kind(), format!("minimum TTL: {e}"))))?;
    }
    sock.listen(64).map_err(io_err)?;
    TcpListener::from_std(sock.into()).map_err(io_err)
}

/// Accepts one connection; the address is normalised (v4-mapped IPv6 becomes IPv4) so it
/// matches the configured peer address.
pub(crate) async fn accept(l: &TcpListener) -> io::Result<(TcpStream, IpAddr)> {
    let (s, addr) = l.accept().await?;
    Ok((s, addr.ip().to_canonical()))
}

/// Options on a session's stream, whichever side opened it. The MD5 key is already there
/// (set before connect, or inherited from the listener).
pub(crate) fn prepare(stream: &TcpStream, sec: &Security) -> io::Result<()> {
    stream.set_nodelay(true)?;
    if sec.ttl_security {
        let v6 = stream.local_addr()?.is_ipv6();
        set_ttl_255(SockRef::from(stream), v6)?;
        sec.opts()?.min_ttl(stream.as_fd(), v6, GTSM_TTL)?;
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
