//! NAT: the destination becomes the backend, and its replies come back through us.
//!
//! The appliance routes here, so TTL / hop limit drops by one. Client → VIP packets get the
//! backend's address and port ([`to_backend`]); backend → client packets get the VIP's back
//! ([`reverse`]), from the flow when the connection table has it and statelessly from the
//! tables otherwise (a flow that started before a restart, or on another worker). FullNAT
//! rewrites the source as well and shares this code; what differs is in [`super::fullnat`].
//! Every rewrite patches the IPv4 header and L4 checksums once, with the summed RFC 1624
//! deltas of all changed fields.

use std::net::{Ipv4Addr, Ipv6Addr};

use wire::checksum::{self, addr_delta_v4, addr_delta_v6, delta16};

use super::headers::{Ip, L4, set_macs};
use super::{Decision, DropReason, Record, Verdict, WorkerState, fullnat, synproxy};
use crate::conntrack::{Carry, ConnTable, Proxied, RevKey, Seen, Teardown};
use crate::frame::Frame;
use crate::tables::{BackendEntry, NextHop, Tables};
use config::{ClientAddress, Mode};
use wire::{Ipv4Packet, Ipv6Packet};

/// NAT and FullNAT, client → VIP: rewrite toward backend `b` (from `snat` for FullNAT).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn to_backend(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    mode: Mode,
    n: &NextHop,
    b: &BackendEntry,
    snat: Option<(u128, u16)>,
) -> Verdict {
    if b.v6 != ip.v6 {
        return worker.drop(DropReason::FamilyMismatch);
    }
    if mode == Mode::FullNat && snat.is_none() {
        return worker.drop(DropReason::NoFlow);
    }
    let d = frame.data_mut();
    nat_rewrite(d, ip, l4, snat, Some((b.address, b.port)));
    set_macs(d, n);
    worker.tx(n.ifindex)
}

/// The flow a return packet belongs to, as [`reverse`] rewrites it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Return {
    /// The VIP's address and port: the new source.
    pub(super) vip_addr: (u128, u16),
    /// The client's address and port: the new destination (FullNAT only).
    pub(super) client: (u128, u16),
    pub(super) vip: u32,
    pub(super) backend: u32,
    /// The flow's id and client-address state, for a FullNAT flow that has one.
    pub(super) carry: Option<(u32, Carry)>,
    /// What the packet's FIN or RST counted for.
    pub(super) teardown: Teardown,
    /// The flow's id and how the SYN proxy opened it, for a flow it opened.
    pub(super) proxied: Option<(u32, Proxied)>,
}

/// A return packet matched a connection-table flow: refresh it and read what to rewrite.
pub(super) fn from_flow(ct: &mut ConnTable, id: u32, ip: &Ip, l4: &L4, now: u64) -> Return {
    let f = *ct.flow(id);
    let seen = Seen {
        reverse: true,
        both_ways: true,
        payload: l4.payload,
        seq: l4.seq,
        ack: l4.ack,
        len: l4.len,
        closes: false,
    };
    let (_, teardown) = ct.step(id, now, l4.flags, seen);
    let client = if f.snat.is_some() {
        (f.key.src, f.key.sport)
    } else {
        (ip.dst, l4.dport)
    };
    Return {
        vip_addr: (f.key.dst, f.key.dport),
        client,
        vip: f.vip,
        backend: f.backend,
        carry: (f.carry.kind != ClientAddress::None).then_some((id, f.carry)),
        teardown,
        proxied: (f.carry.proxy != Proxied::No).then_some((id, f.carry.proxy)),
    }
}

/// NAT return traffic: by flow, or statelessly from the backend's VIP. `Err` is the verdict
/// for a packet that is not ours after all.
fn nat_return(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    rk: &RevKey,
    now: u64,
) -> Result<Return, Verdict> {
    let Some(slot) = tables.nat_backend(ip.src, l4.sport, ip.proto) else {
        return Err(worker.pass());
    };
    if let Some(id) = ct.lookup_rev(rk, now) {
        return Ok(from_flow(ct, id, ip, l4, now));
    }
    // To one of our own addresses (a health probe's reply), not to a client.
    if tables.is_local(ip.dst) {
        return Err(worker.pass());
    }
    let vip = tables.backends[slot as usize].vip;
    let v = &tables.vips[vip as usize];
    worker.stats.stateless_return += 1;
    Ok(Return {
        vip_addr: (v.address, v.port),
        client: (ip.dst, l4.dport),
        vip,
        backend: slot,
        carry: None,
        teardown: Teardown::None,
        proxied: None,
    })
}

/// Return traffic of NAT and FullNAT VIPs (backend → client).
#[allow(clippy::too_many_arguments)]
pub(super) fn reverse<R: Record>(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    len: u64,
    now: u64,
    rec: &mut R,
) -> Verdict {
    let fullnat = tables.snat_vip(ip.dst).is_some();
    let rk = RevKey {
        proto: ip.proto,
        backend: ip.src,
        backend_port: l4.sport,
        local: ip.dst,
        local_port: l4.dport,
    };
    if R::ON
        && super::teardown_flags(ip, l4)
        && let Some(id) = ct.lookup_rev(&rk, now)
    {
        super::catch_up(ct, id, rec);
    }
    let r = match return_flow(tables, ct, worker, ip, l4, &rk, fullnat, now) {
        Ok(r) => r,
        Err(v) => return v,
    };
    if let Some((id, p)) = r.proxied
        && ip.proto == wire::IpProtocol::TCP
        && l4.flags & SYN_ACK == SYN_ACK
    {
        return proxy_answered(frame, (tables, ct, worker), ip, l4, &r, (id, p), now, rec);
    }
    let client = fullnat.then_some(r.client);
    let to = client.map_or(ip.dst, |c| c.0);
    // A reply to a client the VIP's lists deny goes nowhere (a stateless NAT return
    // included): nothing is forwarded for a denied source's flows, either way.
    if let Some(v) = tables.vips.get(r.vip as usize)
        && !v.admits(to)
    {
        return worker.drop(DropReason::Denied);
    }
    let gw =
        match tables
            .egress()
            .route_learned(to, ip.v6, egress_hash(ip, l4), &worker.learned, now)
        {
            Ok(n) => n,
            Err(m) => return worker.drop(m.into()),
        };
    let d = frame.data_mut();
    if d[ip.ttl_at()] <= 1 {
        return worker.drop(DropReason::TtlExceeded);
    }
    nat_rewrite(d, ip, l4, Some(r.vip_addr), client);
    if let Some((id, c)) = r.carry {
        fullnat::carry_reverse(d, ct, ip, l4, id, c);
    }
    if let Some((_, p)) = r.proxied
        && ip.proto == wire::IpProtocol::TCP
    {
        synproxy::shift_reverse(d, ip, l4, p);
    }
    set_macs(d, &gw);
    count_return(worker, r.vip as usize, r.backend as usize, len);
    if R::ON {
        rec.decision(reverse_decision(
            tables, ct, ip, l4, &rk, &r, client, gw, now,
        ));
    }
    worker.tx(gw.ifindex)
}

/// The flow of a return frame carrying `rk` (FullNAT: by its local address and port, else
/// the NAT entry or the stateless answer).
#[allow(clippy::too_many_arguments)]
fn return_flow(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    rk: &RevKey,
    fullnat: bool,
    now: u64,
) -> Result<Return, Verdict> {
    if !fullnat {
        return nat_return(tables, ct, worker, ip, l4, rk, now);
    }
    fullnat::reverse_flow(ct, ip, l4, rk, now)
        .or_else(|e| {
            // A return frame of a flow a peer synced, before any of the client's.
            worker
                .standby_return(rk, tables, ct, now)
                .map(|id| from_flow(ct, id, ip, l4, now))
                .ok_or(e)
        })
        .map_err(|r| worker.drop(r))
}

const SYN_ACK: u8 = wire::tcp::flags::SYN | wire::tcp::flags::ACK;

/// The backend's SYN-ACK of a flow the SYN proxy opened (`synproxy`): the flow learns its
/// shift, the client-address carry its SYN-ACK bookkeeping, and the frame becomes the
/// handshake's last ACK toward the backend. That ACK is the client's (its ACK of the
/// cookie, in the cookie's space), so the flow steps with it to established, and its
/// client → backend direction is recorded as any established flow's: a flow cache forwards
/// the client's next segments (without it a short connection, whose client sends nothing
/// between its request, held as early data, and its FIN, would never reach the cache, and
/// in flood mode never pay its source's bucket back).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn proxy_answered<R: Record>(
    frame: &mut Frame<'_>,
    (tables, ct, worker): (&Tables, &mut ConnTable, &mut WorkerState),
    ip: &Ip,
    l4: &L4,
    r: &Return,
    (id, p): (u32, Proxied),
    now: u64,
    rec: &mut R,
) -> Verdict {
    let n = match tables.backend_egress(r.backend) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    if let Some((id, c)) = r.carry {
        fullnat::carry_reverse(frame.data_mut(), ct, ip, l4, id, c);
    }
    let open = synproxy::open_with(p, l4.seq, synproxy::backend_wscale(frame, ip));
    let carry = Carry {
        proxy: open,
        ..ct.flow(id).carry
    };
    ct.set_carry(id, carry);
    let key = ct.flow(id).key;
    let (verdict, sent) = synproxy::backend_answered(frame, worker, ip, l4, (p, open), &key, &n);
    if !matches!(verdict, Verdict::Tx { .. }) {
        return verdict;
    }
    let flags = match sent {
        0 => wire::tcp::flags::ACK,
        _ => wire::tcp::flags::ACK | wire::tcp::flags::PSH,
    };
    let seen = Seen {
        reverse: false,
        both_ways: true,
        payload: sent > 0,
        seq: l4.ack,
        ack: l4.seq.wrapping_add(1).wrapping_sub(carry.isn_shift()),
        len: sent,
        closes: false,
    };
    ct.step(id, now, flags, seen);
    if R::ON {
        let f = *ct.flow(id);
        let b = &tables.backends[r.backend as usize];
        rec.decision(Decision {
            key,
            reverse: false,
            mode: tables.vips[r.vip as usize].mode,
            vip: r.vip,
            backend: r.backend,
            src: f.snat,
            dst: Some((b.address, b.port)),
            next_hop: n,
            flow: Some((key, f.state)),
            tcp_flags: flags,
            carry: f.carry,
            teardown: false,
            track: f.track,
        });
    }
    verdict
}

/// A return frame of `len` bytes in its VIP's and backend's counters.
fn count_return(worker: &mut WorkerState, vip: usize, backend: usize, len: u64) {
    if let Some(c) = worker.vip_packets.get_mut(vip) {
        *c += 1;
        worker.vip_bytes[vip] += len;
    }
    if let Some(c) = worker.backend_packets.get_mut(backend) {
        *c += 1;
        worker.backend_bytes[backend] += len;
    }
}

/// The hash that picks a multipath route's next hop for return traffic: the received
/// frame's 5-tuple, so every frame of a flow leaves by the same router (the flow cache
/// repeats it from the same key, `control::cache`).
#[inline]
pub(super) fn egress_hash(ip: &Ip, l4: &L4) -> u32 {
    crate::egress::return_hash(&super::headers::flow_key(ip, l4))
}

/// What [`reverse`] did, for the flow cache.
#[allow(clippy::too_many_arguments)]
fn reverse_decision(
    tables: &Tables,
    ct: &mut ConnTable,
    ip: &Ip,
    l4: &L4,
    rk: &RevKey,
    r: &Return,
    client: Option<(u128, u16)>,
    gw: NextHop,
    now: u64,
) -> Decision {
    let f = ct.lookup_rev(rk, now).map(|id| *ct.flow(id));
    Decision {
        key: super::headers::flow_key(ip, l4),
        reverse: true,
        mode: tables.vips[r.vip as usize].mode,
        vip: r.vip,
        backend: r.backend,
        src: Some(r.vip_addr),
        dst: client,
        next_hop: gw,
        flow: f.map(|f| (f.key, f.state)),
        tcp_flags: l4.flags,
        carry: f.map_or(Carry::default(), |f| f.carry),
        teardown: r.teardown == Teardown::InWindow,
        track: f.map_or(Default::default(), |f| f.track),
    }
}

/// Replaces the port at `off` and returns its checksum delta.
#[inline(always)]
fn swap_port(d: &mut [u8], off: usize, port: u16) -> u64 {
    let old = u16::from_be_bytes([d[off], d[off + 1]]);
    d[off..off + 2].copy_from_slice(&port.to_be_bytes());
    delta16(old, port)
}

/// The NAT rewrite in one pass: TTL / hop limit down by one (the caller checked it is > 1),
/// source and/or destination address and port replaced, and the IPv4 header and L4
/// checksums patched once each with the summed RFC 1624 deltas.
///
/// IPv4 and IPv6 have separate bodies whose views wrap the fixed header as one array, so
/// IPv4 addresses stay `u32` and every field access is a constant offset with no bounds check.
#[inline(always)]
pub(super) fn nat_rewrite(
    d: &mut [u8],
    ip: &Ip,
    l4: &L4,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) {
    let mut l4_acc = if ip.v6 {
        nat_rewrite_v6(d, ip, src, dst)
    } else {
        nat_rewrite_v4(d, ip, src, dst)
    };
    if let Some((_, port)) = src {
        l4_acc += swap_port(d, ip.l4, port);
    }
    if let Some((_, port)) = dst {
        l4_acc += swap_port(d, ip.l4 + 2, port);
    }
    l4.csum.patch_delta(d, l4_acc);
}

/// IPv4 header part of [`nat_rewrite`]; returns the addresses' L4 checksum delta.
#[inline(always)]
pub(super) fn nat_rewrite_v4(
    d: &mut [u8],
    ip: &Ip,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) -> u64 {
    let mut l4_acc = 0u64;
    // parse_ip checked the 20-byte header is in the frame; a miss would be a parser bug,
    // and leaving the header alone then beats a panic on the packet path.
    if let Some(h) = d.get_mut(ip.l3..).and_then(|h| h.first_chunk_mut::<20>()) {
        let mut p = Ipv4Packet::new_unchecked(h);
        // TTL shares a checksum word with the protocol; the delta is computed from the
        // values, not by reading the word back after the one-byte store.
        let (ttl, proto) = (p.ttl(), p.protocol());
        p.set_ttl(ttl - 1);
        let mut ip_acc = delta16(
            u16::from_be_bytes([ttl, proto]),
            u16::from_be_bytes([ttl - 1, proto]),
        );
        if let Some((addr, _)) = src {
            let (old, new) = (p.src().to_bits(), addr as u32);
            p.set_src(Ipv4Addr::from_bits(new));
            ip_acc += addr_delta_v4(old, new);
            l4_acc += addr_delta_v4(old, new);
        }
        if let Some((addr, _)) = dst {
            let (old, new) = (p.dst().to_bits(), addr as u32);
            p.set_dst(Ipv4Addr::from_bits(new));
            ip_acc += addr_delta_v4(old, new);
            l4_acc += addr_delta_v4(old, new);
        }
        let c = checksum::apply_delta(p.checksum(), ip_acc);
        p.set_checksum(c);
    }
    l4_acc
}

/// IPv6 header part of [`nat_rewrite`] (no header checksum); returns the addresses' L4
/// checksum delta.
#[inline(always)]
pub(super) fn nat_rewrite_v6(
    d: &mut [u8],
    ip: &Ip,
    src: Option<(u128, u16)>,
    dst: Option<(u128, u16)>,
) -> u64 {
    let mut l4_acc = 0u64;
    if let Some(h) = d.get_mut(ip.l3..).and_then(|h| h.first_chunk_mut::<40>()) {
        let mut p = Ipv6Packet::new_unchecked(h);
        p.set_hop_limit(p.hop_limit() - 1);
        if let Some((addr, _)) = src {
            l4_acc += addr_delta_v6(p.src().to_bits(), addr);
            p.set_src(Ipv6Addr::from_bits(addr));
        }
        if let Some((addr, _)) = dst {
            l4_acc += addr_delta_v6(p.dst().to_bits(), addr);
            p.set_dst(Ipv6Addr::from_bits(addr));
        }
    }
    l4_acc
}
