//! Tunnel frames that must fit the underlay: the MSS clamp and the too-big decision.
//!
//! Encapsulation adds the outer IP header (20 or 40 bytes), and for GUE a UDP header (8),
//! for VXLAN UDP, VXLAN and an inner Ethernet header (30): a full-size segment from a client
//! on a 1500-byte path no longer fits a 1500-byte underlay. The egress interface's MTU comes
//! from the kernel (`lb::egress`, rtnetlink, updated on change). Two things follow:
//!
//! - **MSS clamp.** A client's SYN through a tunnel VIP has its MSS option lowered to what
//!   fits: egress MTU − tunnel overhead − inner IP (20/40) − TCP (20) (RFC 879, RFC 6691),
//!   the TCP checksum patched. The backend answers the client directly (tunnel mode is
//!   direct return), so its SYN-ACK never passes the appliance: clamping the SYN is what
//!   makes the backend send segments that fit its tunnel. A SYN without an MSS option is
//!   left alone (the default MSS, 536 / 1220, fits every tunnel over a 1280-byte MTU).
//! - **Too big.** A frame that would still exceed the egress MTU once encapsulated (a
//!   client that ignores the MSS, UDP) is answered, when the client forbids fragmentation
//!   (IPv4 with DF, and all IPv6), with ICMP fragmentation-needed (RFC 1191) or Packet Too
//!   Big (RFC 8201, RFC 4443) carrying the inner MTU that fits, within the ICMP rate limits,
//!   and dropped (`too_big`). IPv4 without DF is dropped and counted the same way: the
//!   engine sends one frame per frame received and does not fragment the outer packet.

use wire::IpProtocol;
use wire::checksum::update16;

use super::headers::{Ip, TCP_CSUM_AT};
use super::{DropReason, Verdict, WorkerState, icmp};
use crate::frame::Frame;
use crate::tables::{BackendEntry, NextHop, Tables};
use config::Encap;

/// Bytes a tunnel adds in front of the inner IP packet toward backend `b`.
pub(super) fn overhead(encap: Encap, outer_v6: bool) -> u32 {
    let ip = if outer_v6 { 40 } else { 20 };
    ip + match encap {
        Encap::Ipip => 0,
        Encap::Gue { .. } => 8,
        Encap::Vxlan { .. } => 8 + 8 + 14,
    }
}

/// Fits a client → tunnel VIP frame to the egress MTU of next hop `n`: clamps a SYN's MSS,
/// and answers a frame that cannot fit. `None`: encapsulate and send; `Some`: the verdict.
#[allow(clippy::too_many_arguments)]
pub(super) fn fit(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    encap: Encap,
    n: &NextHop,
    b: &BackendEntry,
    vip: u32,
    now: u64,
) -> Option<Verdict> {
    let mtu = tables.egress().mtu(n.ifindex)?;
    let room = mtu.saturating_sub(overhead(encap, b.v6));
    if ip.proto == IpProtocol::TCP && !ip.frag {
        let inner = if ip.v6 { 40 } else { 20 };
        let mss = room.saturating_sub(inner + 20).min(u32::from(u16::MAX)) as u16;
        if clamp_mss(frame.data_mut(), ip, mss) {
            worker.stats.mss_clamped += 1;
        }
    }
    if ip.ip_len as u32 <= room {
        return None;
    }
    worker.drops[DropReason::TooBig.index()] += 1;
    let df = ip.v6 || frame.data()[ip.l3 + 6] & 0x40 != 0;
    // A tenant's client is not reachable in the underlay: the MSS clamp is its answer.
    if !df || ip.zone != 0 {
        return Some(Verdict::Drop(DropReason::TooBig));
    }
    if !worker.icmp.allow(vip, ip.v6, now) {
        worker.stats.icmp_rate_limited += 1;
        return Some(Verdict::Drop(DropReason::TooBig));
    }
    Some(icmp::too_big(frame, tables, worker, ip, room))
}

/// Lowers the MSS option of a SYN (or SYN-ACK) to `mss` when it is above it, patching the
/// TCP checksum; true when it did. Options are walked as RFC 9293 section 3.1 lays them out;
/// a malformed list is left alone.
pub(super) fn clamp_mss(d: &mut [u8], ip: &Ip, mss: u16) -> bool {
    let t = ip.l4;
    let end = ip.end().min(d.len());
    if t + 20 > end || d[t + 13] & 0x02 == 0 {
        return false;
    }
    let opts_end = (t + usize::from(d[t + 12] >> 4) * 4).min(end);
    let mut i = t + 20;
    while i < opts_end {
        match d[i] {
            0 => return false,
            1 => i += 1,
            kind => {
                let Some(&len) = d.get(i + 1) else {
                    return false;
                };
                let len = usize::from(len);
                if len < 2 || i + len > opts_end {
                    return false;
                }
                if kind == 2 && len == 4 {
                    let old = u16::from_be_bytes([d[i + 2], d[i + 3]]);
                    if old <= mss {
                        return false;
                    }
                    d[i + 2..i + 4].copy_from_slice(&mss.to_be_bytes());
                    let at = t + TCP_CSUM_AT;
                    // The option may sit at an odd offset from the header: patch the
                    // 16-bit words as the checksum sums them.
                    patch_words(d, t, i + 2, old, mss, at);
                    return true;
                }
                i += len;
            }
        }
    }
    false
}

/// Patches the checksum at `csum_at` for a 16-bit value at `at` (counted from the TCP
/// header at `t`) that changed from `old` to `new`.
fn patch_words(d: &mut [u8], t: usize, at: usize, old: u16, new: u16, csum_at: usize) {
    let c = u16::from_be_bytes([d[csum_at], d[csum_at + 1]]);
    let c = if (at - t).is_multiple_of(2) {
        update16(c, old, new)
    } else {
        // Odd offset: the value straddles two words; its bytes sum swapped.
        update16(c, old.swap_bytes(), new.swap_bytes())
    };
    d[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}
