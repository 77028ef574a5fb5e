//! The SYN proxy (issue 42; DPVS's `synproxy` is the model): for a NAT or FullNAT TCP VIP
//! with `syn_proxy = "always"`, or `"flood"` while flood mode is on, the appliance answers
//! a client's SYN itself with a SYN-ACK whose sequence number is a SYN cookie
//! ([`cookie`]), and keeps nothing. Only the client's ACK that carries a valid cookie
//! makes state: it is turned in place into the SYN the client sent ([`open`]), which goes
//! the way of any new flow (scheduling, budgets, the FullNAT port, the client-address
//! carry). The backend's SYN-ACK is turned into the handshake's last ACK toward the backend
//! ([`backend_answered`]); from then on the backend's sequence numbers lose a constant
//! (its initial sequence number less the cookie) on their way to the client, and the
//! client's acknowledgements and SACK edges gain it on theirs ([`shift_forward`],
//! [`shift_reverse`]), with window fields rescaled where the two handshakes agreed on
//! different window scales. The ACK toward the backend is the client's own (its ACK of
//! the cookie), so with it the flow is established and its client → backend direction is
//! recorded for a flow cache, which repeats the shift and the rescale in the kernel
//! (appliance bpf/carry.h, `CARRY_PX_*`) for flows without a client-address carry.
//!
//! What the cookie cannot carry is lost, as with Linux's cookies without timestamps: the
//! client's timestamps option (the connection runs without timestamps), and the data of a
//! client segment that comes before the backend answered (dropped as `proxy_opening`; the
//! client sends it again).

pub mod cookie;

use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use wire::{EtherType, IpProtocol, IpRepr, Ipv4Repr, Ipv6Repr, TcpRepr, tcp};

pub use cookie::CookieKey;
use cookie::{NO_WSCALE, Options};

use super::headers::{Ip, L4, parse_ip, parse_l4, set_macs, u128_v4};
use super::icmp::reply_egress;
use super::tcpopt::{self, kind};
use super::{DropReason, OUTER_TTL, Verdict, WorkerState};
use crate::conntrack::{Proxied, Rescale};
use crate::frame::Frame;
use crate::hash::FlowKey;
use crate::tables::{NextHop, Tables, VipEntry};
use config::{Mode, SynProxy};

/// The window scale the appliance announces to a client that offered one: what Linux
/// announces with its default buffers, so that behind a Linux backend no window needs
/// rescaling.
pub const OUR_WSCALE: u8 = 7;

/// The flags that tell a handshake's segments apart.
const SAFR: u8 = tcp::flags::SYN | tcp::flags::ACK | tcp::flags::FIN | tcp::flags::RST;

/// What the SYN proxy takes of a client segment whose flow the table does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Ask {
    /// A SYN: answered with a cookie.
    pub(super) syn: bool,
    /// An ACK: checked for a cookie.
    pub(super) ack: bool,
}

impl Ask {
    /// Nothing: every segment goes the way it would without the proxy.
    pub(super) const NONE: Ask = Ask {
        syn: false,
        ack: false,
    };

    /// Whether a segment with TCP `flags` is the proxy's.
    #[inline(always)]
    pub(super) fn takes(self, flags: u8) -> bool {
        match flags & SAFR {
            tcp::flags::SYN => self.syn,
            tcp::flags::ACK => self.ack,
            _ => false,
        }
    }
}

/// What the proxy takes of VIP `v`'s TCP segments: SYNs while it answers them (always, or
/// in flood mode), ACKs while it may have answered (flood mode is on, or a
/// cookie this appliance made may still come back, see [`WorkerState::cookies_out`]), so
/// that without a flood a flow-less ACK costs no cookie check. Tenant VIPs are left alone:
/// their clients are behind VXLAN, where the appliance originates nothing.
#[inline(always)]
pub(super) fn ask(v: &VipEntry, ip: &Ip, worker: &WorkerState, now: u64) -> Ask {
    if ip.proto != IpProtocol::TCP || ip.zone != 0 || !matches!(v.mode, Mode::Nat | Mode::FullNat) {
        return Ask::NONE;
    }
    match v.syn_proxy {
        SynProxy::Off => Ask::NONE,
        SynProxy::Flood => {
            let flood = worker.flood_on();
            Ask {
                syn: flood,
                ack: flood || worker.cookies_out(now),
            }
        }
        SynProxy::Always => Ask {
            syn: true,
            ack: true,
        },
    }
}

/// What a SYN's options ask for (MSS, window scale, SACK-permitted), as a cookie keeps it.
fn syn_options(d: &[u8], ip: &Ip) -> Options {
    let t = tcpopt::tcp(d, ip);
    let (mut mss, mut ws, mut sack) = (None, None, false);
    for (k, at, len) in tcpopt::options(d, ip.l4, t.hlen) {
        let v = ip.l4 + at + 2;
        match (k, len) {
            (kind::MSS, 4) => mss = Some(u16::from_be_bytes([d[v], d[v + 1]])),
            (kind::WSCALE, 3) => ws = Some(d[v]),
            (kind::SACK_PERMITTED, 2) => sack = true,
            _ => {}
        }
    }
    Options::of_syn(mss, ws, sack)
}

/// The options of a SYN or SYN-ACK that asks for `o`, announcing `wscale` for its sender
/// when `o` has one: MSS, then SACK-permitted and window scale each behind NOPs (12 bytes
/// at most, 4-aligned).
fn handshake_options(o: Options, wscale: u8, out: &mut [u8; 12]) -> usize {
    let mss = o.mss_value().to_be_bytes();
    out[..4].copy_from_slice(&[kind::MSS, 4, mss[0], mss[1]]);
    let mut n = 4;
    if o.sack {
        out[n..n + 4].copy_from_slice(&[kind::NOP, kind::NOP, kind::SACK_PERMITTED, 2]);
        n += 4;
    }
    if o.wscale != NO_WSCALE {
        out[n..n + 4].copy_from_slice(&[kind::NOP, kind::WSCALE, 3, wscale]);
        n += 4;
    }
    n
}

/// A TCP segment with no payload built over the frame from its IP header on: `src` to
/// `dst` (addresses in the packet path's `u128` form, of `ip`'s family) with `ttl`.
fn emit(
    frame: &mut Frame<'_>,
    ip: &Ip,
    (src, dst): (u128, u128),
    ttl: u8,
    seg: &TcpRepr<'_>,
) -> Result<(), DropReason> {
    let l3 = ip.l3;
    let tcp_len = tcp::HEADER_LEN + seg.options.len().next_multiple_of(4) + seg.payload.len();
    let hdr = if ip.v6 { 40 } else { 20 };
    frame
        .set_len(l3 + hdr + tcp_len)
        .map_err(|_| DropReason::NoRoom)?;
    let ip_repr: IpRepr = if ip.v6 {
        let mut r = Ipv6Repr::new(
            Ipv6Addr::from_bits(src),
            Ipv6Addr::from_bits(dst),
            IpProtocol::Tcp,
            tcp_len,
        );
        r.hop_limit = ttl;
        r.into()
    } else {
        let mut r = Ipv4Repr::new(u128_v4(src), u128_v4(dst), IpProtocol::Tcp, tcp_len);
        r.ttl = ttl;
        r.into()
    };
    let d = frame.data_mut();
    ip_repr
        .emit(&mut d[l3..], true)
        .and_then(|at| seg.emit(&mut d[l3 + at..], ip_repr.src(), ip_repr.dst(), true))
        .map(|_| ())
        .map_err(|_| DropReason::NoRoom)
}

/// A client's SYN to a proxied VIP: answered in place with a SYN-ACK from the VIP whose
/// sequence number is the cookie, toward the client by route; nothing is kept.
pub(super) fn answer(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    now: u64,
) -> Verdict {
    let n = match reply_egress(tables, ip) {
        Ok(n) => n,
        Err(m) => return worker.drop(m.into()),
    };
    let o = syn_options(frame.data(), ip);
    let cookie = cookie::make(&worker.cookie_key, key, l4.seq, o, now);
    worker.cookie_made(now);
    let mut opts = [0u8; 12];
    let len = handshake_options(o, OUR_WSCALE, &mut opts);
    let syn_ack = TcpRepr {
        src_port: l4.dport,
        dst_port: l4.sport,
        seq_number: cookie,
        ack_number: l4.seq.wrapping_add(1),
        flags: tcp::flags::SYN | tcp::flags::ACK,
        window_len: u16::MAX,
        urgent_at: 0,
        options: &opts[..len],
        payload: &[],
    };
    if let Err(r) = emit(frame, ip, (ip.dst, ip.src), OUTER_TTL, &syn_ack) {
        return worker.drop(r);
    }
    set_macs(frame.data_mut(), &n);
    worker.stats.syn_proxy_answered += 1;
    worker.tx(n.ifindex)
}

/// A client's SYN rebuilt from its ACK: the headers to forward it with, and what the flow
/// keeps of the cookie.
pub(super) struct Opened {
    pub(super) ip: Ip,
    pub(super) l4: L4,
    pub(super) proxied: Proxied,
}

/// A client's ACK without a flow: when its acknowledgement is a cookie this appliance made
/// (this period or the last) for its tuple and sequence number, the frame becomes the SYN
/// the client sent (same addresses, ports, TTL and initial sequence number; the options the
/// cookie kept) and the flow opens with it. `None` (counted) for any other ACK, which goes
/// the way it would without the proxy.
pub(super) fn open(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    now: u64,
) -> Result<Option<Opened>, DropReason> {
    let isn = l4.seq.wrapping_sub(1);
    let cookie = l4.ack.wrapping_sub(1);
    let Some(o) = cookie::check(&worker.cookie_key, key, isn, cookie, now) else {
        worker.stats.syn_proxy_bad_cookies += 1;
        return Ok(None);
    };
    let d = frame.data();
    let window = u16::from_be_bytes([d[ip.l4 + 14], d[ip.l4 + 15]]);
    let ttl = d[ip.ttl_at()];
    if l4.len > 0 {
        worker.stats.syn_proxy_early += 1;
    }
    let (new_ip, new_l4) = as_backend_syn(frame, (ip, l4), isn, o, window, ttl)?;
    worker.stats.syn_proxy_opened += 1;
    Ok(Some(Opened {
        ip: new_ip,
        l4: new_l4,
        proxied: Proxied::Opening {
            cookie,
            options: o.byte(),
            window,
        },
    }))
}

/// Rewrites `frame` (a client segment of the flow of `ip` and `l4`) in place as the SYN
/// toward the backend: initial sequence number `isn`, the options of the client's SYN
/// (`o`), its window `window` scaled by its window scale (a SYN's window is never scaled:
/// the client's, as far as 16 bits say it), TTL `ttl`. Returns the new headers.
fn as_backend_syn(
    frame: &mut Frame<'_>,
    (ip, l4): (&Ip, &L4),
    isn: u32,
    o: Options,
    window: u16,
    ttl: u8,
) -> Result<(Ip, L4), DropReason> {
    let ws = if o.wscale == NO_WSCALE { 0 } else { o.wscale };
    let mut opts = [0u8; 12];
    let len = handshake_options(o, o.wscale, &mut opts);
    let syn = TcpRepr {
        src_port: l4.sport,
        dst_port: l4.dport,
        seq_number: isn,
        ack_number: 0,
        flags: tcp::flags::SYN,
        window_len: (u32::from(window) << ws).min(0xffff) as u16,
        urgent_at: 0,
        options: &opts[..len],
        payload: &[],
    };
    emit(frame, ip, (ip.src, ip.dst), ttl, &syn)?;
    let ethertype = if ip.v6 {
        EtherType::Ipv6
    } else {
        EtherType::Ipv4
    };
    let new_ip = parse_ip(frame.data(), ip.l3, ethertype)?.ok_or(DropReason::Malformed)?;
    let new_l4 = parse_l4(frame.data(), &new_ip)?;
    let new_ip = Ip {
        zone: ip.zone,
        ..new_ip
    };
    Ok((new_ip, new_l4))
}

/// The backend's window scale in its SYN-ACK, if it agreed to scaling.
pub(super) fn backend_wscale(frame: &Frame<'_>, ip: &Ip) -> Option<u8> {
    let d = frame.data();
    let t = tcpopt::tcp(d, ip);
    tcpopt::options(d, ip.l4, t.hlen)
        .find(|(k, _, len)| *k == kind::WSCALE && *len == 3)
        .map(|(_, at, _)| d[ip.l4 + at + 2].min(14))
}

/// The flow's shift and rescales once the backend answered `p` (an opening flow) with a
/// SYN-ACK of initial sequence number `backend_isn` and window scale `backend_ws`.
pub(super) fn open_with(p: Proxied, backend_isn: u32, backend_ws: Option<u8>) -> Proxied {
    let (cookie, options) = match p {
        Proxied::Opening {
            cookie, options, ..
        } => (cookie, options),
        other => return other,
    };
    let client_ws = Options::of_byte(options).wscale;
    let (fwd, rev) = match (client_ws, backend_ws) {
        (NO_WSCALE, _) => (Rescale::default(), Rescale::default()),
        // The backend declined scaling: neither of its directions scales.
        (c, None) => (
            Rescale { from: c, to: 0 },
            Rescale {
                from: 0,
                to: OUR_WSCALE,
            },
        ),
        (c, Some(b)) => (
            Rescale { from: c, to: c },
            Rescale {
                from: b,
                to: OUR_WSCALE,
            },
        ),
    };
    Proxied::Open {
        shift: backend_isn.wrapping_sub(cookie),
        fwd,
        rev,
    }
}

/// The backend's SYN-ACK on a proxied flow (`p`, after [`open_with`]): rebuilt in place as
/// the handshake's last ACK from the client's side (the client's address, or the FullNAT
/// source, and port) toward the backend, over `n`, with the window the client's ACK
/// announced. The client already finished its handshake with the appliance: it never sees
/// the SYN-ACK. With the verdict, the bytes of the client's early data the ACK carries.
pub(super) fn backend_answered(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    (opening, open): (Proxied, Proxied),
    key: &FlowKey,
    n: &NextHop,
) -> (Verdict, u32) {
    let window = match (opening, open) {
        (Proxied::Opening { window, .. }, Proxied::Open { fwd, .. }) => fwd.apply(window),
        // A SYN-ACK sent again after the flow opened: the window is the backend's to
        // learn from the client's next segment.
        (_, Proxied::Open { fwd, .. }) => fwd.apply(u16::MAX),
        _ => u16::MAX,
    };
    // The client's first data, if it came early, goes with the ACK.
    let data = worker.early.take(key, l4.ack).unwrap_or_default();
    let flags = match data.is_empty() {
        true => tcp::flags::ACK,
        false => tcp::flags::ACK | tcp::flags::PSH,
    };
    let ack = TcpRepr {
        src_port: l4.dport,
        dst_port: l4.sport,
        seq_number: l4.ack,
        ack_number: l4.seq.wrapping_add(1),
        flags,
        window_len: window,
        urgent_at: 0,
        options: &[],
        payload: &data,
    };
    if let Err(r) = emit(frame, ip, (ip.dst, ip.src), OUTER_TTL, &ack) {
        return (worker.drop(r), 0);
    }
    set_macs(frame.data_mut(), n);
    worker.stats.syn_proxy_established += 1;
    (worker.tx(n.ifindex), data.len() as u32)
}

/// Client data that came before the backend answered: the first segment of each opening
/// flow, kept (bounded) and sent with the handshake's last ACK toward the backend, so a
/// client that speaks first (every HTTP client: its request follows its ACK at once) does
/// not wait for its retransmission timer (200 ms and more: the bench's proxied connection
/// rate was 0.08x the plain one before). Later early segments are still dropped and sent
/// again by the client.
#[derive(Debug, Default, Clone)]
pub(crate) struct EarlyData {
    held: std::collections::HashMap<FlowKey, Early>,
}

#[derive(Debug, Clone)]
struct Early {
    /// The segment's sequence number (the client's first byte: its ISN + 1).
    seq: u32,
    /// When it came (the worker's clock).
    at: u64,
    bytes: Vec<u8>,
}

/// Flows a worker keeps early data for at most (a few MB at most).
const EARLY_FLOWS: usize = 2048;
/// How long after its kept first segment (or the last SYN sent again) a client's
/// retransmission of it sends the SYN to the backend again: a client's retransmission timer
/// is at least 200 ms, so a sooner copy is a duplicate, not a sign of a lost SYN.
pub(crate) const RETRY_NS: u64 = 200_000_000;
/// Early data older than this is dropped when room is needed (the backend never answered).
const EARLY_AGE_NS: u64 = 3_000_000_000;

impl EarlyData {
    /// Keeps `bytes` (sequence number `seq`) for flow `key` unless it holds some already or
    /// no room is left; whether it kept them.
    fn keep(&mut self, key: &FlowKey, seq: u32, bytes: &[u8], now: u64) -> bool {
        if self.held.contains_key(key) {
            return false;
        }
        if self.held.len() >= EARLY_FLOWS {
            self.held
                .retain(|_, e| now.saturating_sub(e.at) < EARLY_AGE_NS);
            if self.held.len() >= EARLY_FLOWS {
                return false;
            }
        }
        let e = Early {
            seq,
            at: now,
            bytes: bytes.to_vec(),
        };
        self.held.insert(*key, e);
        true
    }

    /// Whether a segment at `seq` of flow `key` is the client sending its kept first
    /// segment again at least [`RETRY_NS`] after it was kept (or the SYN last sent again):
    /// the backend has not answered, so its SYN may be lost. Restarts the clock when it is.
    fn retry_due(&mut self, key: &FlowKey, seq: u32, now: u64) -> bool {
        match self.held.get_mut(key) {
            Some(e) if e.seq == seq && now.saturating_sub(e.at) >= RETRY_NS => {
                e.at = now;
                true
            }
            _ => false,
        }
    }

    /// The data kept for flow `key` if it starts at `seq` (the byte the backend expects).
    fn take(&mut self, key: &FlowKey, seq: u32) -> Option<Vec<u8>> {
        let e = self.held.remove(key)?;
        (e.seq == seq).then_some(e.bytes)
    }

    /// Flows with data kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

/// A client segment of an opening flow, when it is the client's kept first segment sent
/// again after [`RETRY_NS`] (the backend has not answered the SYN, which may be lost):
/// rebuilt in place as that SYN (the same sequence number, window and options as the
/// first, from `proxy`), whose new headers are returned for the frame's way to the
/// backend. `None` for any other segment ([`early`] then keeps or drops it). (DPVS sends
/// a kept SYN again on its connection timer; the workers have no timer and act on the
/// client's retransmission.) Without it, a SYN lost on its way to the backend left the
/// connection waiting until its client gave up.
pub(super) fn again(
    frame: &mut Frame<'_>,
    worker: &mut WorkerState,
    (ip, l4): (&Ip, &L4),
    key: &FlowKey,
    proxy: Proxied,
    now: u64,
) -> Option<Result<(Ip, L4), DropReason>> {
    let Proxied::Opening {
        options, window, ..
    } = proxy
    else {
        return None;
    };
    if l4.len == 0 || !worker.early.retry_due(key, l4.seq, now) {
        return None;
    }
    let o = Options::of_byte(options);
    let ttl = frame.data()[ip.ttl_at()];
    let reparsed = as_backend_syn(frame, (ip, l4), l4.seq.wrapping_sub(1), o, window, ttl);
    if reparsed.is_ok() {
        worker.stats.syn_proxy_resent += 1;
    }
    Some(reparsed)
}

/// A client segment of an opening flow (`flow`'s backend has not answered): its payload is
/// kept for the handshake's last ACK when it is the client's first ([`EarlyData`]), and
/// flows that add the client's address (PROXY v2, TOA) keep nothing: their first segment
/// is rewritten on its way, which the replay would skip. The frame itself is dropped.
pub(super) fn early(
    frame: &Frame<'_>,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    key: &FlowKey,
    plain: bool,
    now: u64,
) -> Verdict {
    if l4.len > 0 {
        worker.stats.syn_proxy_early += 1;
        let end = ip.end();
        let start = end.saturating_sub(l4.len as usize);
        // A flow that adds the client's address keeps no bytes (its first segment gets
        // the address when it is sent again), only its place: the client's retransmission
        // of it can then send the SYN again ([`again`]).
        let bytes = match plain {
            true => frame.data().get(start..end),
            false => Some(&[][..]),
        };
        if let Some(bytes) = bytes {
            worker.early.keep(key, l4.seq, bytes, now);
        }
    }
    worker.drop(DropReason::ProxyOpening)
}

/// Writes the window field; returns its checksum delta.
fn set_window(d: &mut [u8], ip: &Ip, r: Rescale) -> u64 {
    let at = ip.l4 + 14;
    let old = u16::from_be_bytes([d[at], d[at + 1]]);
    let new = r.apply(old);
    d[at..at + 2].copy_from_slice(&new.to_be_bytes());
    wire::checksum::delta16(old, new)
}

/// A client → backend segment of an opened proxied flow: its acknowledgement and SACK
/// edges in the backend's space, its window in the backend's scale.
pub(super) fn shift_forward(d: &mut [u8], ip: &Ip, l4: &L4, p: Proxied) {
    let Proxied::Open { shift, fwd, .. } = p else {
        return;
    };
    let t = tcpopt::tcp(d, ip);
    let mut acc = 0;
    if t.flags & tcp::flags::ACK != 0 {
        acc += tcpopt::set_ack(d, ip, t.ack.wrapping_add(shift));
        acc += tcpopt::shift_sack(d, ip, &t, shift);
    }
    if !fwd.is_identity() {
        acc += set_window(d, ip, fwd);
    }
    l4.csum.patch_delta(d, acc);
}

/// A backend → client segment of a proxied flow: opened, its sequence number in the
/// cookie's space and its window in the scale the client was told; still opening, a RST
/// (the backend refused the connection) at the sequence number the client expects, so
/// that it ends the connection the client believes open.
pub(super) fn shift_reverse(d: &mut [u8], ip: &Ip, l4: &L4, p: Proxied) {
    let t = tcpopt::tcp(d, ip);
    let acc = match p {
        Proxied::Open { shift, rev, .. } => {
            let mut acc = tcpopt::set_seq(d, ip, t.seq.wrapping_sub(shift));
            if !rev.is_identity() {
                acc += set_window(d, ip, rev);
            }
            acc
        }
        Proxied::Opening { cookie, .. } if t.flags & tcp::flags::RST != 0 => {
            tcpopt::set_seq(d, ip, cookie.wrapping_add(1))
        }
        _ => return,
    };
    l4.csum.patch_delta(d, acc);
}

/// The worker's SYN-proxy state: the secret, the flood flag and the time until which
/// cookies may come back, shared with the appliance's other workers.
impl WorkerState {
    /// Sets the SYN proxy's cookie secret (drawn once per appliance).
    pub fn set_cookie_key(&mut self, key: CookieKey) {
        self.cookie_key = key;
    }

    /// Shares the flag that says flood mode is on (the SYN proxy answers `"flood"` VIPs'
    /// SYNs while it is set).
    pub fn set_flood_flag(&mut self, flag: Arc<AtomicBool>) {
        self.flood = Some(flag);
    }

    /// Whether flood mode is on.
    #[inline(always)]
    pub(in crate::process) fn flood_on(&self) -> bool {
        self.flood
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Shares the time until which cookies may come back (see [`WorkerState::cookies_out`]);
    /// without it, a worker checks every flow-less ACK to a `"flood"` VIP.
    pub fn set_cookies_until(&mut self, until: Arc<AtomicU64>) {
        self.cookies_until = Some(until);
    }

    /// Whether an ACK without a flow may carry a cookie this appliance made: one was made
    /// less than two cookie periods ago (a cookie is good for one to two periods), or the
    /// process before this one may have made one (the control plane starts the window at a
    /// takeover). A worker without the shared time checks always.
    #[inline(always)]
    pub(in crate::process) fn cookies_out(&self, now: u64) -> bool {
        self.cookies_until
            .as_ref()
            .is_none_or(|u| now < u.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// A cookie was made at `now`: ACKs are checked for two periods more. The shared word
    /// is written at most once a second, so a SYN flood answered on every CPU does not
    /// bounce its cache line.
    #[inline(always)]
    pub(in crate::process) fn cookie_made(&self, now: u64) {
        if let Some(u) = &self.cookies_until {
            let until = now.saturating_add(2 * cookie::PERIOD_NS);
            let relaxed = std::sync::atomic::Ordering::Relaxed;
            if u.load(relaxed) < until.saturating_sub(1_000_000_000) {
                u.fetch_max(until, relaxed);
            }
        }
    }
}
