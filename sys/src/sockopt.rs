//! The Linux socket options BGP session security needs and no safe Rust API offers:
//! `TCP_MD5SIG` (RFC 2385 signatures) and `IP_MINTTL`/`IPV6_MINHOPCOUNT` (the receive check
//! of GTSM, RFC 5082). `socket2`, `nix` and `rustix` expose neither, and the `bgp` crate
//! forbids `unsafe`, so it asks for them through [`bgp::SocketOptions`] and this module
//! answers with `setsockopt(2)` ([`KernelSocketOptions`], which the appliance and the BGP
//! tests hand the speaker). The unsafe surface is two calls that pass a pointer to a
//! plain `repr(C)` value and its size; every address and key is laid out in safe code.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `TCP_MD5SIG_MAXKEYLEN` in `include/uapi/linux/tcp.h`.
const MAX_KEY_LEN: usize = 80;

/// `struct tcp_md5sig` from `include/uapi/linux/tcp.h`, with its
/// `struct __kernel_sockaddr_storage tcpm_addr` spelled out as the family, the port and
/// the 124 bytes after them, so both address shapes are written without pointer casts:
///
/// ```text
/// sockaddr_in:  family(2) port(2) addr(4)     zero(8)
/// sockaddr_in6: family(2) port(2) flowinfo(4) addr(16) scope_id(4)
/// ```
#[repr(C, align(8))]
struct TcpMd5Sig {
    /// `ss_family`, host byte order (`sa_family_t`).
    family: u16,
    /// Port, network order; the kernel ignores it (a key covers every port of the peer).
    port: u16,
    /// The rest of `sockaddr_storage`.
    addr: [u8; 124],
    /// `tcpm_flags`: 0, no prefix or interface scoping.
    flags: u8,
    /// `tcpm_prefixlen`: unused without `TCP_MD5SIG_FLAG_PREFIX`.
    prefixlen: u8,
    /// `tcpm_keylen`: bytes of `key` in use; 0 deletes the peer's key.
    keylen: u16,
    /// `tcpm_ifindex`: unused without `TCP_MD5SIG_FLAG_IFINDEX`.
    ifindex: i32,
    /// `tcpm_key`.
    key: [u8; MAX_KEY_LEN],
}

// The kernel reads this struct by offset; a layout slip would sign with garbage.
const _: () = {
    assert!(mem::size_of::<TcpMd5Sig>() == 216);
    assert!(mem::offset_of!(TcpMd5Sig, flags) == mem::size_of::<libc::sockaddr_storage>());
    assert!(mem::offset_of!(TcpMd5Sig, keylen) == 130);
    assert!(mem::offset_of!(TcpMd5Sig, ifindex) == 132);
    assert!(mem::offset_of!(TcpMd5Sig, key) == 136);
};

impl TcpMd5Sig {
    fn new(peer: IpAddr, key: &[u8]) -> io::Result<TcpMd5Sig> {
        if key.len() > MAX_KEY_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "TCP MD5 key is {} bytes, the kernel takes at most {MAX_KEY_LEN}",
                    key.len()
                ),
            ));
        }
        let mut sig = TcpMd5Sig {
            family: 0,
            port: 0,
            addr: [0; 124],
            flags: 0,
            prefixlen: 0,
            keylen: key.len() as u16,
            ifindex: 0,
            key: [0; MAX_KEY_LEN],
        };
        sig.key[..key.len()].copy_from_slice(key);
        match peer {
            IpAddr::V4(a) => {
                sig.family = libc::AF_INET as u16;
                sig.addr[..4].copy_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                sig.family = libc::AF_INET6 as u16;
                sig.addr[4..20].copy_from_slice(&a.octets());
            }
        }
        Ok(sig)
    }
}

/// `setsockopt(2)` with a plain value.
fn set<T>(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    let len = mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live, initialised `T` of exactly `len` bytes that the kernel only
    // reads during the call, and `fd` is an open descriptor borrowed for at least as long.
    let rc =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getsockopt(2)` of an `int` option.
fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals the kernel writes at most `len` (= the size
    // of an int) bytes into during the call; `fd` is open for at least as long.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Installs (or with an empty key, removes) the RFC 2385 key for `peer` on a TCP socket.
/// On a listener it covers the SYNs from `peer` and is copied to the accepted socket.
/// `peer` must be of the socket's family (v4-mapped for IPv4 peers on IPv6 sockets).
pub fn set_tcp_md5(fd: BorrowedFd<'_>, peer: IpAddr, key: &[u8]) -> io::Result<()> {
    let sig = TcpMd5Sig::new(peer, key)?;
    set(fd, libc::IPPROTO_TCP, libc::TCP_MD5SIG, &sig)
}

/// Makes the kernel drop received segments with a TTL (IPv4) below `ttl`, and on an IPv6
/// socket also those with a hop limit below it: v4-mapped connections on that socket are
/// checked against the IPv4 limit, native IPv6 ones against the IPv6 limit.
pub fn set_min_ttl(fd: BorrowedFd<'_>, v6: bool, ttl: u8) -> io::Result<()> {
    let ttl = libc::c_int::from(ttl);
    if v6 {
        set(fd, libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT, &ttl)?;
    }
    set(fd, libc::IPPROTO_IP, libc::IP_MINTTL, &ttl)
}

/// The minimum TTL (`v6`: hop limit) currently enforced on a socket.
pub fn min_ttl(fd: BorrowedFd<'_>, v6: bool) -> io::Result<u8> {
    let v = if v6 {
        get_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MINHOPCOUNT)?
    } else {
        get_int(fd, libc::IPPROTO_IP, libc::IP_MINTTL)?
    };
    u8::try_from(v).map_err(|_| io::Error::other(format!("kernel reported minimum TTL {v}")))
}

/// The appliance's [`bgp::SocketOptions`]: the Linux kernel's own implementation.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelSocketOptions;

impl bgp::SocketOptions for KernelSocketOptions {
    fn tcp_md5(&self, fd: BorrowedFd<'_>, peer: IpAddr, key: &[u8]) -> io::Result<()> {
        set_tcp_md5(fd, peer, key)
    }

    fn min_ttl(&self, fd: BorrowedFd<'_>, v6: bool, ttl: u8) -> io::Result<()> {
        set_min_ttl(fd, v6, ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::AsFd;
    use std::time::Duration;
    use tokio::net::{TcpListener, TcpSocket, TcpStream};

    const LO4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn layout_places_each_family_where_the_kernel_reads_it() {
        let s = TcpMd5Sig::new("192.0.2.7".parse().unwrap(), b"k3y").unwrap();
        assert_eq!(s.family, libc::AF_INET as u16);
        assert_eq!(&s.addr[..4], &[192, 0, 2, 7]);
        assert!(s.addr[4..].iter().all(|&b| b == 0));
        assert_eq!((s.keylen, &s.key[..4]), (3, &b"k3y\0"[..]));
        let a: Ipv6Addr = "2001:db8::9".parse().unwrap();
        let s = TcpMd5Sig::new(IpAddr::V6(a), b"").unwrap();
        assert_eq!(s.family, libc::AF_INET6 as u16);
        assert_eq!(&s.addr[..4], &[0; 4], "flowinfo");
        assert_eq!(&s.addr[4..20], &a.octets());
        assert_eq!(s.keylen, 0);
    }

    #[test]
    fn overlong_key_is_refused_before_the_kernel() {
        let l = std::net::TcpListener::bind((LO4, 0)).unwrap();
        let e = set_tcp_md5(l.as_fd(), LO4, &[b'x'; 81]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        set_tcp_md5(l.as_fd(), LO4, &[b'x'; 80]).expect("80 bytes is the maximum");
    }

    #[test]
    fn ipv6_peer_on_ipv4_socket_is_a_kernel_error() {
        let l = std::net::TcpListener::bind((LO4, 0)).unwrap();
        let e = set_tcp_md5(l.as_fd(), IpAddr::V6(Ipv6Addr::LOCALHOST), b"k").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    }

    #[test]
    fn md5_on_a_non_tcp_socket_is_a_kernel_error() {
        let u = std::net::UdpSocket::bind((LO4, 0)).unwrap();
        assert!(set_tcp_md5(u.as_fd(), LO4, b"k").is_err());
    }

    #[test]
    fn min_ttl_reads_back_for_both_families() {
        let l4 = std::net::TcpListener::bind((LO4, 0)).unwrap();
        assert_eq!(min_ttl(l4.as_fd(), false).unwrap(), 0);
        set_min_ttl(l4.as_fd(), false, 255).unwrap();
        assert_eq!(min_ttl(l4.as_fd(), false).unwrap(), 255);

        let l6 = std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)).unwrap();
        set_min_ttl(l6.as_fd(), true, 254).unwrap();
        assert_eq!(min_ttl(l6.as_fd(), true).unwrap(), 254);
        assert_eq!(min_ttl(l6.as_fd(), false).unwrap(), 254, "v4-mapped limit");
    }

    /// A loopback listener with `prep` applied before `listen`.
    fn listener(prep: impl FnOnce(BorrowedFd<'_>)) -> (TcpListener, SocketAddr) {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(SocketAddr::new(LO4, 0)).unwrap();
        prep(s.as_fd());
        let l = s.listen(8).unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    /// Connects with `prep` applied first; `None` when no SYN-ACK came back in time (the
    /// kernel dropped our SYN).
    async fn connect(to: SocketAddr, prep: impl FnOnce(BorrowedFd<'_>)) -> Option<TcpStream> {
        let s = TcpSocket::new_v4().unwrap();
        prep(s.as_fd());
        tokio::time::timeout(Duration::from_millis(1500), s.connect(to))
            .await
            .ok()
            .map(|r| r.expect("connect"))
    }

    #[tokio::test]
    async fn md5_key_gates_the_handshake() {
        let (l, addr) = listener(|fd| set_tcp_md5(fd, LO4, b"right").unwrap());
        let ok = connect(addr, |fd| set_tcp_md5(fd, LO4, b"right").unwrap()).await;
        assert!(ok.is_some(), "same key must connect");
        let (_conn, _) = l.accept().await.unwrap();
        let wrong = connect(addr, |fd| set_tcp_md5(fd, LO4, b"wrong").unwrap()).await;
        assert!(wrong.is_none(), "a wrong key must not get through");
        let none = connect(addr, |_| {}).await;
        assert!(none.is_none(), "an unsigned SYN must not get through");
    }

    #[tokio::test]
    async fn min_ttl_drops_segments_from_afar() {
        let (_l, addr) = listener(|fd| set_min_ttl(fd, false, 255).unwrap());
        let near = connect(addr, |fd| {
            set(fd, libc::IPPROTO_IP, libc::IP_TTL, &255_i32).unwrap()
        })
        .await;
        assert!(near.is_some(), "TTL 255 must connect");
        let far = connect(addr, |fd| {
            set(fd, libc::IPPROTO_IP, libc::IP_TTL, &254_i32).unwrap()
        })
        .await;
        assert!(far.is_none(), "TTL 254 must be dropped");
    }
}
