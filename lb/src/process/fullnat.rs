//! FullNAT: NAT that also replaces the client's address with one of the VIP's SNAT addresses.
//!
//! Backends then answer the appliance without a route back through it, at the price of
//! state: the SNAT address and port are allocated per flow ([`snat_for`]), and return traffic
//! is recognised only by its flow ([`reverse_flow`]); without one there is no client to send
//! it to. The rewrites themselves are NAT's ([`super::nat`]).
//!
//! Since the backend sees only the SNAT address, a TCP VIP may pass the client's address on
//! (`client_address`): [`carry_forward`] and [`carry_reverse`] apply the PROXY v2 header or
//! the TOA option and the sequence shift they imply, per flow ([`Carry`]).

use super::headers::{Ip, L4};
use super::nat::{Return, from_flow};
use super::{DropReason, WorkerState, proxyhdr, tcpopt, toa};
use crate::conntrack::{Carry, ConnTable, RevKey, is_syn, tcp_flags};
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::tables::{BackendEntry, VipEntry};
use config::{ClientAddress, Mode};
use wire::IpProtocol;

/// The SNAT address and port of a new flow of `v` to backend `b`: `None` for the other modes.
/// A port a peer's synced flow holds (`standby`) is not handed out: after this appliance's
/// restart, its former flows carry on at the survivors with its address and their ports.
pub(super) fn snat_for(
    ct: &mut ConnTable,
    v: &VipEntry,
    key: &FlowKey,
    b: &BackendEntry,
    (hash, now): (u32, u64),
    standby: Option<&crate::standby::Standby>,
) -> Result<Option<(u128, u16)>, DropReason> {
    if v.mode != Mode::FullNat {
        return Ok(None);
    }
    let busy = |rk: &RevKey| standby.is_some_and(|sb| sb.find_rev(rk, now).is_some());
    match ct.alloc_snat_avoiding(
        key.proto,
        b.address,
        b.port,
        &v.snat_alloc,
        hash,
        now,
        &busy,
    ) {
        Some(s) => Ok(Some(s)),
        None => Err(DropReason::SnatExhausted),
    }
}

/// FullNAT return traffic (backend → SNAT address): only through its flow.
pub(super) fn reverse_flow(
    ct: &mut ConnTable,
    ip: &Ip,
    l4: &L4,
    rk: &RevKey,
    now: u64,
) -> Result<Return, DropReason> {
    match ct.lookup_rev(rk, now) {
        Some(id) => Ok(from_flow(ct, id, ip, l4, now)),
        None => Err(DropReason::NoFlow),
    }
}

/// Whether a client → VIP segment about to be forwarded by FullNAT (to backend `b` from
/// `snat`) goes through [`carry_forward`]: TCP, on a VIP with `client_address` or a flow
/// that began with one.
#[inline(always)]
pub(super) fn carries(
    v: &VipEntry,
    c: &Carry,
    ip: &Ip,
    b: &BackendEntry,
    snat: Option<(u128, u16)>,
) -> bool {
    v.mode == Mode::FullNat
        && ip.proto == IpProtocol::TCP
        && (c.kind != ClientAddress::None || v.client_address != ClientAddress::None)
        && b.v6 == ip.v6
        && snat.is_some()
}

/// A client → backend TCP segment of a FullNAT VIP with `client_address` (or of a flow
/// that started with one): a SYN records where the flow's stream starts, later segments
/// get the PROXY header or the TOA option ([`proxyhdr`], [`toa`]) or their shift. The
/// caller has checked the segment will be forwarded (backend of the client's family, SNAT
/// port allocated); the NAT rewrite follows.
#[allow(clippy::too_many_arguments)]
pub(super) fn carry_forward(
    frame: &mut Frame<'_>,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    v: &VipEntry,
    now: u64,
) -> Result<(), DropReason> {
    let Some(id) = ct.lookup(key, now) else {
        return Ok(());
    };
    let c = ct.flow(id).carry;
    if is_syn(l4.flags) {
        // Only the flow's own SYN (and its retransmissions, before anything went to the
        // backend) sets where the stream starts: a SYN on a flow past its handshake (a
        // spoofer's) must not move the shift under a running stream.
        if ct.flow(id).state != crate::conntrack::FlowState::TcpSyn || c.armed {
            return Ok(());
        }
        // The flow's kind is fixed at its SYN: a reload that changes the VIP's
        // client_address leaves running streams as they began.
        let seq = tcpopt::tcp(frame.data(), ip).seq;
        let fresh = match v.client_address {
            ClientAddress::ProxyV2 => Carry {
                kind: ClientAddress::ProxyV2,
                base: seq.wrapping_add(1),
                delta: proxyhdr::header_len(ip.v6),
                armed: false,
                proxy: c.proxy,
            },
            ClientAddress::Toa => Carry {
                kind: ClientAddress::Toa,
                proxy: c.proxy,
                ..Carry::default()
            },
            ClientAddress::None => Carry {
                proxy: c.proxy,
                ..Carry::default()
            },
        };
        ct.set_carry(id, fresh);
        return Ok(());
    }
    match c.kind {
        ClientAddress::ProxyV2 => {
            let (next, sent) = proxyhdr::forward(frame, ip, l4, key, c)?;
            worker.stats.proxy_headers += u64::from(sent);
            if next != c {
                ct.set_carry(id, next);
            }
        }
        ClientAddress::Toa => match toa::forward(frame, ip, l4, key, c)? {
            toa::Added::Yes => worker.stats.toa_options += 1,
            toa::Added::NoRoom => worker.stats.toa_no_room += 1,
            toa::Added::No => {}
        },
        ClientAddress::None => {}
    }
    Ok(())
}

/// A backend → client TCP segment of a flow with a client-address kind, after the NAT
/// rewrite: the SYN-ACK's MSS lowered by what the client's segments will carry extra (and,
/// for toa, the backend's first sequence number recorded); later segments' acknowledgements
/// and SACK edges moved back (proxy-v2).
pub(super) fn carry_reverse(d: &mut [u8], ct: &mut ConnTable, ip: &Ip, l4: &L4, id: u32, c: Carry) {
    if ip.proto != IpProtocol::TCP {
        return;
    }
    let t = tcpopt::tcp(d, ip);
    const SYN_ACK: u8 = tcp_flags::SYN | tcp_flags::ACK;
    if t.flags & SYN_ACK == SYN_ACK {
        let by = match c.kind {
            ClientAddress::ProxyV2 => c.delta,
            ClientAddress::Toa => toa::option_len(ip.v6),
            ClientAddress::None => return,
        };
        let acc = tcpopt::lower_mss(d, ip, &t, u16::from(by));
        l4.csum.patch_delta(d, acc);
        if c.kind == ClientAddress::Toa {
            let base = t.seq.wrapping_add(1);
            ct.set_carry(
                id,
                Carry {
                    base,
                    armed: true,
                    ..c
                },
            );
        }
        return;
    }
    if c.kind == ClientAddress::ProxyV2 {
        proxyhdr::reverse(d, ip, l4, c);
    }
}
