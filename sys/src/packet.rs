//! AF_PACKET sockets with a classic BPF filter: the VIP health probe's way onto the wire.
//!
//! A probe that proves a DR or tunnel backend holds the VIP must leave exactly as the
//! datapath's frames do (to the backend's MAC, or encapsulated), which no kernel socket
//! routing allows when the appliance holds the VIP itself; and its answer, addressed to the
//! appliance, must be read without copying the datapath's traffic. [`PacketSocket`] is one
//! raw socket bound to one interface whose filter the kernel applies before queueing, so
//! only the frames the filter accepts ever reach user space. The socket is non-blocking:
//! the caller waits for readability through its event loop ([`AsFd`]).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct SockFilter {
    /// Opcode (`BPF_LD | BPF_H | BPF_ABS`, ...).
    pub code: u16,
    /// Instructions to skip when a jump's condition holds.
    pub jt: u8,
    /// Instructions to skip when it does not.
    pub jf: u8,
    /// The instruction's constant.
    pub k: u32,
}

// The kernel reads the program as an array of `struct sock_filter`.
const _: () = assert!(size_of::<SockFilter>() == size_of::<libc::sock_filter>());
const _: () = assert!(align_of::<SockFilter>() == align_of::<libc::sock_filter>());

/// Classic BPF opcodes the filters use (`linux/filter.h`).
pub mod bpf {
    /// Load a 32-bit word at an absolute offset.
    pub const LD_W_ABS: u16 = 0x20;
    /// Load a 16-bit half-word at an absolute offset.
    pub const LD_H_ABS: u16 = 0x28;
    /// Load a byte at an absolute offset.
    pub const LD_B_ABS: u16 = 0x30;
    /// Load a 16-bit half-word at X + offset.
    pub const LD_H_IND: u16 = 0x48;
    /// X = 4 * (byte at offset & 0x0f): the IPv4 header length.
    pub const LDX_B_MSH: u16 = 0xb1;
    /// Jump if A == k.
    pub const JEQ_K: u16 = 0x15;
    /// A &= k.
    pub const AND_K: u16 = 0x54;
    /// Return k (bytes to keep; 0 drops the frame).
    pub const RET_K: u16 = 0x06;
}

/// A raw AF_PACKET socket bound to one interface, receiving only what its filter accepts.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Opens a socket on interface `ifindex` that receives the frames `filter` accepts (in
    /// both directions; a filter that matches on the destination address sees no outgoing
    /// frame of ours). The filter is attached before the socket is bound, so no frame is
    /// queued unfiltered.
    pub fn open(ifindex: u32, filter: &[SockFilter]) -> io::Result<PacketSocket> {
        let len = u16::try_from(filter.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF filter too long"))?;
        // SAFETY: plain socket(2) call; the returned descriptor is checked and owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let prog = libc::sock_fprog {
            len,
            // The kernel copies the program during the call and never writes it.
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at `len` instructions laid out as `struct sock_filter`
        // (asserted above), alive for the duration of the call.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_FILTER,
                (&raw const prog).cast(),
                size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let ifindex = i32::try_from(ifindex)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "ifindex out of range"))?;
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and its size is passed with it.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const sll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSocket { fd })
    }

    /// Sends one whole Ethernet frame out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is a valid buffer of `frame.len()` bytes for the call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        match n {
            n if n < 0 => Err(io::Error::last_os_error()),
            n if n as usize != frame.len() => {
                Err(io::Error::new(io::ErrorKind::WriteZero, "frame sent short"))
            }
            _ => Ok(()),
        }
    }

    /// Receives one frame into `buf` (cut to its length); `WouldBlock` when none is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is a valid writable buffer of `buf.len()` bytes for the call.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

/// A [`PacketSocket`] registered with the tokio reactor: `recv` waits for a frame.
#[derive(Debug)]
pub struct AsyncPacketSocket {
    fd: tokio::io::unix::AsyncFd<PacketSocket>,
}

impl AsyncPacketSocket {
    /// Registers `socket` with the current tokio runtime's reactor.
    pub fn new(socket: PacketSocket) -> io::Result<AsyncPacketSocket> {
        // SAFETY: the AsyncFd owns the PacketSocket, which owns the descriptor, so the
        // descriptor stays open until the AsyncFd has deregistered it on drop.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(socket) }.map_err(io::Error::from)?;
        Ok(AsyncPacketSocket { fd })
    }

    /// Sends one whole Ethernet frame (AF_PACKET sends do not block for long: the frame
    /// goes to the interface's queue or fails).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        self.fd.get_ref().send(frame)
    }

    /// Waits for the next frame the filter accepts and copies it into `buf`.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|s| s.get_ref().recv(buf)) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ret #0`: accepts nothing.
    const DROP_ALL: [SockFilter; 1] = [SockFilter {
        code: bpf::RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    }];

    #[test]
    fn opens_on_loopback_and_receives_nothing_the_filter_refuses() {
        // Loopback is ifindex 1 in every namespace.
        let s = PacketSocket::open(1, &DROP_ALL).expect("AF_PACKET needs root (CAP_NET_RAW)");
        let mut frame = [0u8; 60];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        s.send(&frame).expect("send on lo");
        let mut buf = [0u8; 128];
        let e = s.recv(&mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn rejects_a_missing_interface() {
        assert!(PacketSocket::open(u32::MAX >> 1, &DROP_ALL).is_err());
    }
}
