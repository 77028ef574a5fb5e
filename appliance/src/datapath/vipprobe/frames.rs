//! The VIP probe's frames, its capture filter and the reading of its answers: pure, so the
//! bytes can be checked without a network.
//!
//! The probe is the frame a client's first packet becomes on the way to the backend: a TCP
//! SYN (or the check's UDP datagram) from the appliance's own address to VIP:port, with
//! the backend's MAC (DR), or wrapped by the engine's own tunnel code
//! ([`crate::lb::process::encapsulate_probe`]). The backend answers from the VIP straight to
//! the appliance's address; the filter keeps only frames to that address and port.

use std::net::{IpAddr, SocketAddr};

use sys::packet::{SockFilter, bpf};
use wire::tcp::flags;
use wire::{
    EtherType, EthernetRepr, FrameRepr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    L4Repr, TcpPacket, TcpRepr, UdpPacket, UdpRepr,
};

use crate::config::Mode;
use crate::lb::frame::Frame;
use crate::lb::process::encapsulate_probe;
use crate::lb::tables::{BackendEntry, NextHop, TunnelSource};
use crate::lb::{DropReason, HEADROOM};

/// The most a probe frame takes before encapsulation (a UDP payload is cut to fit).
const MAX_FRAME: usize = 1500;
/// Bytes of an answer the filter copies to user space: headers and a UDP reply's start.
const SNAP: u32 = 2048;
/// Window of the probe's SYN (the Linux default for a fresh socket).
const WINDOW: u16 = 64_240;
/// The SYN's options: MSS 1460, so the backend sees a plausible client.
const SYN_OPTIONS: [u8; 4] = [2, 4, 0x05, 0xb4];

/// One probe's addresses: who sends, which VIP, which port of ours the answer comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeFlow {
    /// The appliance's address toward the backend.
    pub src: IpAddr,
    /// The port the appliance holds for this probe.
    pub sport: u16,
    /// The VIP and the port probed on it.
    pub vip: SocketAddr,
    /// The SYN's sequence number.
    pub seq: u32,
}

/// What the probe frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// TCP SYN.
    Syn,
    /// TCP RST after the SYN-ACK, so the backend drops its half-open connection at once.
    Rst,
    /// UDP datagram.
    Udp(&'a [u8]),
}

/// How a probe frame reaches the backend: the VIP's mode and the backend's L2 next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Path {
    /// DR (MACs only) or tunnel (encapsulated).
    pub mode: Mode,
    /// The backend's table entry (address and family, for the outer header).
    pub backend: BackendEntry,
    /// Egress interface and MACs.
    pub next_hop: NextHop,
    /// Outer source addresses of tunnel mode.
    pub tunnel_source: TunnelSource,
}

/// Why a probe frame could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The source and the VIP are of different families.
    #[error("source {src} and VIP {vip} are of different families")]
    Family {
        /// The source address.
        src: IpAddr,
        /// The VIP.
        vip: IpAddr,
    },
    /// The frame or its encapsulation failed (length, room).
    #[error("cannot build the probe frame: {0:?}")]
    Frame(DropReason),
}

/// The whole probe frame as it leaves on `path.next_hop.ifindex`.
pub fn build(flow: &ProbeFlow, payload: Payload<'_>, path: &Path) -> Result<Vec<u8>, BuildError> {
    let ip = match (flow.src, flow.vip.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr::new(s, d, IpProtocol::Tcp, 0).into(),
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr::new(s, d, IpProtocol::Tcp, 0).into(),
        (src, vip) => return Err(BuildError::Family { src, vip }),
    };
    let tcp = |flags, seq, options| {
        L4Repr::Tcp(TcpRepr {
            src_port: flow.sport,
            dst_port: flow.vip.port(),
            seq_number: seq,
            ack_number: 0,
            flags,
            window_len: WINDOW,
            urgent_at: 0,
            options,
            payload: &[],
        })
    };
    let l4 = match payload {
        Payload::Syn => tcp(flags::SYN, flow.seq, &SYN_OPTIONS[..]),
        Payload::Rst => tcp(flags::RST, flow.seq.wrapping_add(1), &[][..]),
        Payload::Udp(data) => L4Repr::Udp(UdpRepr {
            src_port: flow.sport,
            dst_port: flow.vip.port(),
            payload: &data[..data.len().min(MAX_FRAME - 14 - 40 - 8)],
        }),
    };
    let n = &path.next_hop;
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: n.src_mac,
            dst: n.dst_mac,
            vlan_tci: None,
            ethertype: EtherType::Unknown(0),
        },
        ip,
        l4,
    };
    let mut buf = vec![0u8; HEADROOM + MAX_FRAME];
    let len = repr
        .emit(&mut buf[HEADROOM..], true)
        .map_err(|e| BuildError::Frame(e.into()))?;
    let mut frame = Frame::new(&mut buf, HEADROOM, len, n.ifindex)
        .ok_or(BuildError::Frame(DropReason::BadLength))?;
    if let Mode::Tunnel(encap) = path.mode {
        let hash = flow_hash(flow);
        encapsulate_probe(
            &mut frame,
            encap,
            &path.backend,
            n,
            &path.tunnel_source,
            hash,
        )
        .map_err(BuildError::Frame)?;
    }
    Ok(frame.data().to_vec())
}

/// The flow hash that picks a tunnel's outer source port (and address), from the probe's
/// own port so that probes spread over the backend's receive queues like clients do.
fn flow_hash(flow: &ProbeFlow) -> u32 {
    (u32::from(flow.sport) ^ flow.seq).wrapping_mul(0x9e37_79b1)
}

/// A jump target while the filter is written: the next instruction, accept or drop.
#[derive(Clone, Copy)]
enum To {
    Next,
    Accept,
    Drop,
}

/// The capture filter: frames to `src` that are TCP or UDP (as `udp` says) to `sport`, or
/// ICMP (an error quoting the probe). No VLAN tag: the kernel hands tags to AF_PACKET out
/// of band.
pub fn filter(src: IpAddr, sport: u16, udp: bool) -> Vec<SockFilter> {
    let proto = u32::from(if udp { 17u8 } else { 6 });
    let port = u32::from(sport);
    let ld = |code, k| (code, To::Next, To::Next, k);
    let eq = |k, t, f| (bpf::JEQ_K, t, f, k);
    let mut p = Vec::new();
    p.push(ld(bpf::LD_H_ABS, 12));
    match src {
        IpAddr::V4(a) => {
            p.push(eq(0x0800, To::Next, To::Drop));
            p.push(ld(bpf::LD_W_ABS, 30));
            p.push(eq(a.to_bits(), To::Next, To::Drop));
            p.push(ld(bpf::LD_B_ABS, 23));
            p.push(eq(1, To::Accept, To::Next));
            p.push(eq(proto, To::Next, To::Drop));
            p.push(ld(bpf::LDX_B_MSH, 14));
            p.push(ld(bpf::LD_H_IND, 16));
        }
        IpAddr::V6(a) => {
            p.push(eq(0x86dd, To::Next, To::Drop));
            for (i, w) in a.segments().chunks(2).enumerate() {
                p.push(ld(bpf::LD_W_ABS, 38 + 4 * i as u32));
                let word = (u32::from(w[0]) << 16) | u32::from(w[1]);
                p.push(eq(word, To::Next, To::Drop));
            }
            p.push(ld(bpf::LD_B_ABS, 20));
            p.push(eq(58, To::Accept, To::Next));
            p.push(eq(proto, To::Next, To::Drop));
            p.push(ld(bpf::LD_H_ABS, 56));
        }
    }
    p.push(eq(port, To::Accept, To::Drop));
    let (accept, drop) = (p.len(), p.len() + 1);
    let mut out: Vec<SockFilter> = p
        .iter()
        .enumerate()
        .map(|(pc, &(code, t, f, k))| {
            let off = |to| match to {
                To::Next => 0,
                To::Accept => (accept - pc - 1) as u8,
                To::Drop => (drop - pc - 1) as u8,
            };
            SockFilter {
                code,
                jt: off(t),
                jf: off(f),
                k,
            }
        })
        .collect();
    for k in [SNAP, 0] {
        out.push(SockFilter {
            code: bpf::RET_K,
            jt: 0,
            jf: 0,
            k,
        });
    }
    out
}

/// What a captured frame says about the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// SYN-ACK from the VIP: it is held and the port listens.
    SynAck,
    /// RST from the VIP: held, but the port is closed.
    Reset,
    /// ICMP port unreachable quoting the probe.
    Unreachable,
    /// A UDP reply from the VIP, with its payload.
    Reply(Vec<u8>),
}

/// Reads one captured frame; `None` when it is not an answer to `flow`.
pub fn classify(frame: &[u8], flow: &ProbeFlow, udp: bool) -> Option<Answer> {
    let (src, dst, proto, l4) = ip_of(frame.get(14..)?, frame.get(12..14)?)?;
    if dst != flow.src {
        return None;
    }
    let from_vip = src == flow.vip.ip();
    match proto {
        6 if !udp && from_vip => {
            let t = TcpPacket::new_checked(l4).ok()?;
            if t.src_port() != flow.vip.port() || t.dst_port() != flow.sport {
                return None;
            }
            let acked = t.ack() && t.ack_number() == flow.seq.wrapping_add(1);
            match (t.rst(), t.syn()) {
                (true, _) if acked || !t.ack() => Some(Answer::Reset),
                (false, true) if acked => Some(Answer::SynAck),
                _ => None,
            }
        }
        17 if udp && from_vip => {
            let u = UdpPacket::new_checked(l4).ok()?;
            (u.src_port() == flow.vip.port() && u.dst_port() == flow.sport)
                .then(|| Answer::Reply(u.payload().to_vec()))
        }
        1 | 58 => quoted_probe(l4, proto == 58, flow, udp).then_some(Answer::Unreachable),
        _ => None,
    }
}

/// Source, destination, protocol and L4 bytes of an IP packet (IPv6: no extension headers,
/// which a backend's answers do not carry).
fn ip_of<'a>(l3: &'a [u8], ethertype: &[u8]) -> Option<(IpAddr, IpAddr, u8, &'a [u8])> {
    match ethertype {
        [0x08, 0x00] => {
            let p = Ipv4Packet::new_checked(l3).ok()?;
            let end = usize::from(p.total_len()).min(l3.len());
            let l4 = l3.get(p.header_len()..end)?;
            Some((p.src().into(), p.dst().into(), p.protocol(), l4))
        }
        [0x86, 0xdd] => {
            let p = Ipv6Packet::new_checked(l3).ok()?;
            let end = (40 + usize::from(p.payload_len())).min(l3.len());
            Some((
                p.src().into(),
                p.dst().into(),
                p.next_header(),
                l3.get(40..end)?,
            ))
        }
        _ => None,
    }
}

/// Whether an ICMP message is a port unreachable quoting our probe (from us to the VIP,
/// from our port to its port).
fn quoted_probe(icmp: &[u8], v6: bool, flow: &ProbeFlow, udp: bool) -> bool {
    let (ty, code) = (icmp.first().copied(), icmp.get(1).copied());
    let unreachable = if v6 {
        (ty, code) == (Some(1), Some(4))
    } else {
        (ty, code) == (Some(3), Some(3))
    };
    if !unreachable {
        return false;
    }
    let Some(quoted) = icmp.get(8..) else {
        return false;
    };
    let (src, dst, proto, l4) = if v6 {
        let Ok(p) = Ipv6Packet::new_checked_quoted(quoted) else {
            return false;
        };
        let Some(l4) = quoted.get(40..) else {
            return false;
        };
        (
            IpAddr::from(p.src()),
            IpAddr::from(p.dst()),
            p.next_header(),
            l4,
        )
    } else {
        let Ok(p) = Ipv4Packet::new_checked_quoted(quoted) else {
            return false;
        };
        let Some(l4) = quoted.get(p.header_len()..) else {
            return false;
        };
        (
            IpAddr::from(p.src()),
            IpAddr::from(p.dst()),
            p.protocol(),
            l4,
        )
    };
    let ports = l4.get(0..4).map(|b| {
        (
            u16::from_be_bytes([b[0], b[1]]),
            u16::from_be_bytes([b[2], b[3]]),
        )
    });
    src == flow.src
        && dst == flow.vip.ip()
        && proto == if udp { 17 } else { 6 }
        && ports == Some((flow.sport, flow.vip.port()))
}

#[cfg(test)]
#[path = "frames_tests.rs"]
mod tests;
