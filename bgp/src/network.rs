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
//!
//! BFD (RFC 5881) sockets live here too: a receive socket per local address on port 3784
//! that reports each datagram's TTL / hop limit (`IP_RECVTTL` / `IPV6_RECVHOPLIMIT` and
//! `recvmsg` control messages, through `nix`'s safe wrappers), and a send socket per session
//! from a port in 49152–65535 with TTL 255.

use crate::codec::{self, DecodeError, Message};
use crate::speaker::{Md5Key, PeerConfig, SocketOptions, SpeakerError};
use socket2::{Domain, Protocol, SockRef, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};

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

/// Reads messages until the connection closes or one fails to decode, handing each to the
/// peer task on `tx` as connection `id`; while that bounded channel is full the socket is
/// not read (TCP pushes back on the peer). Stops early when nobody listens any more.
pub(crate) async fn read_messages(
    mut r: OwnedReadHalf,
    id: crate::fsm::ConnId,
    tx: tokio::sync::mpsc::Sender<(crate::fsm::ConnId, Received)>,
) {
    let deliver = async |item| tx.send((id, item)).await.is_ok();
    let mut buf: Vec<u8> = Vec::with_capacity(codec::MAX_MESSAGE_LEN * 2);
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        loop {
            match codec::frame_len(&buf) {
                Ok(Some(len)) => {
                    let item = match codec::decode(&buf[..len]) {
                        Ok(m) => Received::Message(m),
                        Err(e) => {
                            deliver(Received::Malformed(e)).await;
                            return;
                        }
                    };
                    buf.drain(..len);
                    if !deliver(item).await {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    deliver(Received::Malformed(e)).await;
                    return;
                }
            }
        }
        match r.read(&mut chunk).await {
            Ok(0) => {
                deliver(Received::Closed(None)).await;
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                deliver(Received::Closed(Some(e))).await;
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

/// The single-hop BFD control port (RFC 5881 §4).
pub(crate) const BFD_PORT: u16 = 3784;

/// Source ports for BFD control packets (RFC 5881 §4).
const BFD_SRC_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;

/// Binds the BFD receive socket on `local`:3784 with TTL / hop-limit reporting on, so
/// [`bfd_recv`] can apply the RFC 5881 §5 check (only TTL 255 comes from a neighbour). No
/// SO_REUSEADDR: a second socket on the same port would silently take half the packets.
pub(crate) fn bfd_listen(local: IpAddr) -> io::Result<UdpSocket> {
    use nix::sys::socket::{setsockopt, sockopt};
    let addr = SocketAddr::new(local, BFD_PORT);
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if local.is_ipv6() {
        sock.set_only_v6(true)?;
        setsockopt(&sock, sockopt::Ipv6RecvHopLimit, &true)?;
    } else {
        setsockopt(&sock, sockopt::Ipv4RecvTtl, &true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    UdpSocket::from_std(sock.into())
}

/// Receives one datagram into `buf`: its length, source address, and TTL / hop limit
/// (`None` when the kernel reported none, which the caller treats as not 255).
pub(crate) async fn bfd_recv(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> io::Result<(usize, IpAddr, Option<u8>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};
    use std::os::fd::AsRawFd;
    sock.async_io(Interest::READABLE, || {
        let mut iov = [io::IoSliceMut::new(&mut *buf)];
        // One int-sized control message needs CMSG_SPACE(4) = 24 octets on 64-bit Linux.
        let mut cmsg = [0u8; 64];
        let msg = recvmsg::<SockaddrStorage>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        )?;
        let mut ttl = None;
        for c in msg.cmsgs()? {
            if let ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) = c {
                ttl = u8::try_from(t).ok();
            }
        }
        let from = msg.address.as_ref().and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        });
        let from = from.ok_or_else(|| io::Error::other("datagram without a source address"))?;
        Ok((msg.bytes, from.to_canonical(), ttl))
    })
    .await
}

/// A send socket for one BFD session: bound to `local` and a free port in 49152–65535
/// (trying from `seed` on), TTL / hop limit 255, connected to `remote`:3784.
pub(crate) fn bfd_sender(local: IpAddr, remote: IpAddr, seed: u32) -> io::Result<UdpSocket> {
    let remote = SocketAddr::new(remote, BFD_PORT);
    let sock = Socket::new(
        Domain::for_address(remote),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if remote.is_ipv6() {
        sock.set_unicast_hops_v6(255)?;
    } else {
        sock.set_ttl_v4(255)?;
    }
    let span = u32::from(BFD_SRC_PORTS.end() - BFD_SRC_PORTS.start()) + 1;
    let mut bound = Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free source port",
    ));
    // A handful of tries: the range is large and a busy one says something else is wrong.
    for i in 0..64 {
        let port = BFD_SRC_PORTS.start() + (seed.wrapping_add(i * 7919) % span) as u16;
        bound = sock.bind(&SocketAddr::new(local, port).into());
        if bound.is_ok() {
            break;
        }
    }
    bound?;
    sock.connect(&remote.into())?;
    sock.set_nonblocking(true)?;
    UdpSocket::from_std(sock.into())
}
