//! Client → VIP: one frame's way through the engine, as stages over one context: the TTL
//! a routing mode needs, the flow (found, reopened or scheduled: `flow`), the client's MAC
//! the reply will need, the backend's egress, the client-address carry (FullNAT), the
//! mode's rewrite, and the decision a flow cache repeats. A new stage (source lists, the
//! SYN proxy, connection-ID routing) takes its place in [`forward`] over the same [`Ctx`]
//! and [`Seg`].

use super::flow::{FlowHit, Packet, flow_for};
use super::headers::{Ip, L4};
use super::synproxy::{self, Ask};
use super::{
    Decision, DropReason, Record, Verdict, WorkerState, catch_up, dr, fullnat, icmp, mss, nat,
    reset, teardown_flags,
};
use crate::conntrack::{Carry, ConnTable, Proxied, Teardown, is_syn};
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::tables::{BackendEntry, NextHop, Tables};
use config::Mode;
use wire::{EthernetFrame, IpProtocol};

/// What one frame's step works with besides the frame: the version's tables, the worker's
/// connection table and state, its clock, and where the decision is recorded.
pub(super) struct Ctx<'a, R> {
    pub(super) tables: &'a Tables,
    pub(super) ct: &'a mut ConnTable,
    pub(super) worker: &'a mut WorkerState,
    pub(super) now: u64,
    pub(super) rec: &'a mut R,
}

/// The frame as the stages read it: its headers, flow key, VIP slot and length.
pub(super) struct Seg<'h> {
    pub(super) ip: &'h Ip,
    pub(super) l4: &'h L4,
    pub(super) key: FlowKey,
    pub(super) vip: u32,
    pub(super) len: u64,
}

impl Seg<'_> {
    /// The packet as [`flow_for`] needs it.
    fn packet(&self) -> Packet<'_> {
        Packet {
            key: &self.key,
            flags: self.l4.flags,
            payload: self.l4.payload,
            seq: self.l4.seq,
            ack: self.l4.ack,
            len: self.l4.len,
        }
    }
}

/// Client → VIP: the flow's backend, then the rewrite its mode asks for.
#[inline(always)]
pub(super) fn forward<R: Record>(
    frame: &mut Frame<'_>,
    cx: &mut Ctx<'_, R>,
    s: &Seg<'_>,
) -> Verdict {
    let v = &cx.tables.vips[s.vip as usize];
    if !v.admits(s.key.src) {
        // Before any state: a denied source makes no entry, no answer and no reset.
        return cx.worker.drop(DropReason::Denied);
    }
    let mode = v.mode;
    let nat = matches!(mode, Mode::Nat | Mode::FullNat);
    if nat && frame.data()[s.ip.ttl_at()] <= 1 {
        return ttl_expired(frame, cx, s);
    }
    if R::ON
        && teardown_flags(s.ip, s.l4)
        && let Some(id) = cx.ct.lookup(&s.key, cx.now)
    {
        catch_up(cx.ct, id, cx.rec);
    }
    let ask = synproxy::ask(v, s.ip, cx.worker, cx.now);
    let found = match &v.quic {
        Some(q) if s.ip.proto == IpProtocol::UDP => {
            let payload = frame.data().get(s.ip.l4 + 8..s.ip.end()).unwrap_or(&[]);
            let (t, p) = (cx.tables, s.packet());
            super::quic::flow_for_cid(t, cx.ct, cx.worker, s.vip, q, p, payload, cx.now).map(Some)
        }
        _ => flow_for(cx.tables, cx.ct, cx.worker, s.vip, s.packet(), ask, cx.now),
    };
    let hit = match found {
        Ok(Some(x)) => x,
        Ok(None) => return proxied(frame, cx, s),
        Err(r) => return reset::refuse(frame, cx.tables, cx.worker, s.ip, s.l4, r),
    };
    deliver(frame, cx, s, hit)
}

/// The stages after the flow: the client's MAC, the backend's egress, the rewrite, the
/// record.
#[inline(always)]
fn deliver<R: Record>(
    frame: &mut Frame<'_>,
    cx: &mut Ctx<'_, R>,
    s: &Seg<'_>,
    hit: FlowHit,
) -> Verdict {
    let mode = cx.tables.vips[s.vip as usize].mode;
    if matches!(mode, Mode::Nat | Mode::FullNat) {
        learn_client(frame, cx, s, &hit);
    }
    let n = match cx.tables.backend_egress(hit.backend) {
        Ok(n) => n,
        Err(m) => return cx.worker.drop(m.into()),
    };
    let b = cx.tables.backends[hit.backend as usize];
    cx.worker.count_forward(s.vip, hit.backend, s.len);
    let verdict = rewrite(frame, cx, s, &hit, &n, &b);
    if R::ON && matches!(verdict, Verdict::Tx { .. }) {
        record(cx, s, &hit, n, &b);
    }
    verdict
}

/// A segment without a flow that the SYN proxy takes (`synproxy`): a SYN is answered with
/// a cookie; an ACK with a valid cookie becomes the client's SYN and opens the flow; any
/// other ACK goes the way it would without the proxy.
#[inline(never)]
fn proxied<R: Record>(frame: &mut Frame<'_>, cx: &mut Ctx<'_, R>, s: &Seg<'_>) -> Verdict {
    if is_syn(s.l4.flags) {
        return synproxy::answer(frame, cx.tables, cx.worker, s.ip, s.l4, &s.key, cx.now);
    }
    let opened = match synproxy::open(frame, cx.worker, s.ip, s.l4, &s.key, cx.now) {
        Ok(o) => o,
        Err(r) => return cx.worker.drop(r),
    };
    let (ip, l4, proxied) = match &opened {
        Some(o) => (&o.ip, &o.l4, o.proxied),
        None => (s.ip, s.l4, Proxied::No),
    };
    let seg = Seg {
        ip,
        l4,
        key: s.key,
        vip: s.vip,
        len: frame.len() as u64,
    };
    let p = seg.packet();
    let mut hit = match flow_for(cx.tables, cx.ct, cx.worker, s.vip, p, Ask::NONE, cx.now) {
        Ok(Some(x)) => x,
        Ok(None) => return cx.worker.drop(DropReason::NoFlow),
        Err(r) => return reset::refuse(frame, cx.tables, cx.worker, seg.ip, seg.l4, r),
    };
    if proxied != Proxied::No
        && let Some(id) = cx.ct.lookup(&s.key, cx.now)
    {
        hit.carry.proxy = proxied;
        let carry = Carry {
            proxy: proxied,
            ..cx.ct.flow(id).carry
        };
        cx.ct.set_carry(id, carry);
    }
    deliver(frame, cx, &seg, hit)
}

/// A routed frame (NAT, FullNAT) that arrived with TTL 1: time exceeded, within the ICMP
/// rate limits.
#[inline(never)]
fn ttl_expired<R>(frame: &mut Frame<'_>, cx: &mut Ctx<'_, R>, s: &Seg<'_>) -> Verdict {
    cx.worker.drops[DropReason::TtlExceeded.index()] += 1;
    if !cx.worker.icmp.allow(s.vip, s.ip.v6, cx.now) {
        cx.worker.stats.icmp_rate_limited += 1;
        return Verdict::Drop(DropReason::TtlExceeded);
    }
    icmp::time_exceeded(frame, cx.tables, cx.worker, s.ip)
}

/// A flow's first frame (a SYN; a datagram of no flow the table held): the reply will need
/// this client's MAC. Not on every datagram: the check is two hash lookups and a route
/// lookup, a quarter of the engine's own time on an established UDP flow.
#[inline(always)]
fn learn_client<R>(frame: &Frame<'_>, cx: &mut Ctx<'_, R>, s: &Seg<'_>, hit: &FlowHit) {
    let first = match s.ip.proto {
        IpProtocol::UDP => !hit.found,
        _ => s.l4.flags & 0x12 == 0x02,
    };
    if first {
        let mac = EthernetFrame::new_unchecked(frame.data()).src();
        cx.tables.egress().learn(
            &mut cx.worker.learned,
            frame.ifindex,
            s.ip.src,
            s.ip.v6,
            mac,
            cx.now,
        );
    }
}

/// The mode's rewrite toward backend `b` over next hop `n` (the client-address carry
/// first, for FullNAT).
#[inline(always)]
fn rewrite<R>(
    frame: &mut Frame<'_>,
    cx: &mut Ctx<'_, R>,
    s: &Seg<'_>,
    hit: &FlowHit,
    n: &NextHop,
    b: &BackendEntry,
) -> Verdict {
    let v = &cx.tables.vips[s.vip as usize];
    let (mut ip, mut l4) = (s.ip, s.l4);
    let resent;
    let proxy = hit.carry.proxy;
    if proxy != Proxied::No && ip.proto == IpProtocol::TCP {
        if let Proxied::Opening { .. } = proxy
            && !is_syn(l4.flags)
        {
            let again = synproxy::again(frame, cx.worker, (ip, l4), &s.key, proxy, cx.now);
            match again {
                Some(Ok(rebuilt)) => {
                    resent = rebuilt;
                    (ip, l4) = (&resent.0, &resent.1);
                }
                Some(Err(r)) => return cx.worker.drop(r),
                None => {
                    let plain = hit.carry.kind == config::ClientAddress::None;
                    return synproxy::early(frame, cx.worker, ip, l4, &s.key, plain, cx.now);
                }
            }
        }
        synproxy::shift_forward(frame.data_mut(), ip, l4, proxy);
    }
    if fullnat::carries(v, &hit.carry, ip, b, hit.snat)
        && let Err(r) = fullnat::carry_forward(frame, cx.ct, cx.worker, ip, l4, &s.key, v, cx.now)
    {
        return cx.worker.drop(r);
    }
    match v.mode {
        Mode::Nat | Mode::FullNat => {
            nat::to_backend(frame, cx.worker, ip, l4, v.mode, n, b, hit.snat)
        }
        Mode::Tunnel(encap)
            if let Some(verdict) =
                mss::fit(frame, cx.tables, cx.worker, ip, encap, n, b, s.vip, cx.now) =>
        {
            verdict
        }
        _ => dr::direct_to_backend(frame, cx.tables, cx.worker, ip, v.mode, n, b, hit.hash),
    }
}

/// The decision a flow cache repeats for the flow's next frames.
#[inline(never)]
fn record<R: Record>(
    cx: &mut Ctx<'_, R>,
    s: &Seg<'_>,
    hit: &FlowHit,
    n: NextHop,
    b: &BackendEntry,
) {
    let mode = cx.tables.vips[s.vip as usize].mode;
    let nat = matches!(mode, Mode::Nat | Mode::FullNat);
    let f = cx.ct.lookup(&s.key, cx.now).map(|id| *cx.ct.flow(id));
    cx.rec.decision(Decision {
        key: s.key,
        reverse: false,
        mode,
        vip: s.vip,
        backend: hit.backend,
        src: if nat { hit.snat } else { None },
        dst: nat.then_some((b.address, b.port)),
        next_hop: n,
        flow: f.map(|f| (s.key, f.state)),
        tcp_flags: s.l4.flags,
        carry: f.map_or(Carry::default(), |f| f.carry),
        teardown: hit.teardown == Teardown::InWindow,
        track: f.map_or(Default::default(), |f| f.track),
    });
}
