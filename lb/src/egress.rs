//! Egress: which interface a frame the datapath sends leaves by, and with which MACs.
//!
//! Every frame the engine or the flow cache sends (NAT and FullNAT replies toward clients,
//! ICMP replies and errors, frames toward backends) is routed the way the kernel would:
//! longest-prefix match over the kernel's main routing table, the next hop picked among a
//! multipath route's hops by the flow hash (so a flow stays on one router), and the next
//! hop's MAC from the kernel's neighbour table. The control plane snapshots both tables
//! through rtnetlink ([`NetState`]) and builds an [`Egress`] from them; workers only look it
//! up (no syscalls, no locks, no allocation). An on-link destination whose MAC the snapshot
//! lacks is dropped as [`Miss::NoNeighbor`] and its address is offered, without blocking, on
//! a bounded queue the control plane drains to make the kernel resolve it ([`MissQueue`]).
//!
//! Routes over interfaces that are not the datapath's (management ports, loopback, tunnels
//! without a MAC) cannot carry the datapath's frames: they resolve to [`Miss::NotDatapath`].
//! Unreachable, blackhole and prohibit routes are kept, so they shadow less specific routes
//! as in the kernel, and resolve to [`Miss::NoRoute`].

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::hash::{FlowKey, addr_to_u128, u128_to_addr};
use crate::tables::{FastMap, NextHop};
use config::HashFields;
use wire::MacAddr;

/// Hop slots a weighted multipath route may expand to: kernel weights (1..=256) are scaled
/// down so that one route never takes more than this many entries.
const MAX_EXPANDED_HOPS: usize = 64;

/// The hash that picks a multipath route's next hop for a frame the datapath sends back
/// (NAT and FullNAT return traffic, ICMP replies): the received frame's 5-tuple. The flow
/// cache's eviction recomputes it from the same key.
#[inline]
pub fn return_hash(key: &FlowKey) -> u32 {
    key.hash(HashFields::FiveTuple)
}

/// One interface of the host as the snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface name.
    pub name: String,
    /// Its MAC, when it has one (loopback and tunnels have none usable).
    pub mac: Option<MacAddr>,
    /// Its MTU (IFLA_MTU), 0 when unknown: what a frame sent there may carry after the
    /// Ethernet header (tunnel modes fit their frames to it).
    pub mtu: u32,
}

/// One next hop of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteHop {
    /// Egress interface.
    pub ifindex: u32,
    /// The router to send to, `None` for an on-link (connected) route.
    pub gateway: Option<IpAddr>,
    /// Multipath weight (the kernel's `weight`, 1 when not multipath).
    pub weight: u16,
}

/// One route of the kernel's main table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Destination prefix (unmasked bits are ignored).
    pub dst: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Route metric (priority); the lowest wins among routes to the same prefix.
    pub metric: u32,
    /// Next hops; empty for unreachable, blackhole and prohibit routes.
    pub hops: Vec<RouteHop>,
}

/// What the control plane knows of the kernel's interfaces, routes and neighbours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetState {
    /// Interfaces by index.
    pub links: BTreeMap<u32, Link>,
    /// The main table's unicast, unreachable, blackhole and prohibit routes.
    pub routes: Vec<Route>,
    /// Usable neighbour entries: (interface, address) to MAC.
    pub neighbours: HashMap<(u32, IpAddr), MacAddr>,
}

/// Why a destination has no egress; the datapath drops and counts each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Miss {
    /// No route covers the destination (or an unreachable/blackhole route does).
    NoRoute,
    /// The route leaves by an interface the datapath does not drive.
    NotDatapath,
    /// The next hop's MAC is not in the kernel's neighbour table (yet).
    NoNeighbor,
}

/// A neighbour the datapath missed: the control plane makes the kernel resolve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Unresolved {
    /// Interface the next hop is on.
    pub ifindex: u32,
    /// The next hop's address.
    pub addr: IpAddr,
}

/// The workers' side of the miss queue: a bounded channel that never blocks (a full queue
/// drops the request; the next miss asks again).
#[derive(Debug, Clone)]
pub struct MissQueue(SyncSender<Unresolved>);

impl MissQueue {
    /// A queue of `depth` requests and the control plane's end of it.
    pub fn new(depth: usize) -> (MissQueue, Receiver<Unresolved>) {
        let (tx, rx) = sync_channel(depth);
        (MissQueue(tx), rx)
    }

    #[inline]
    fn offer(&self, u: Unresolved) {
        match self.0.try_send(u) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// How long a MAC learned from a client's own frame stands in for the kernel's entry.
const LEARNED_FOR_NS: u64 = 5_000_000_000;

/// MACs a worker learned from the first frame of a flow (a TCP SYN, a UDP datagram) of an
/// on-link source the tables have no neighbour entry for yet.
///
/// The kernel learns such a client's MAC from its ARP/ND for the appliance's address, but
/// the notification reaches the tables a little after the backend's first answer: without
/// this, that answer (the SYN-ACK) is dropped and the client waits a retransmission. Only
/// a source that is on-link on the interface its frame arrived by is learned, entries live
/// a few seconds, and the kernel's entry wins as soon as the tables have it. Fixed size,
/// allocated once per worker.
#[derive(Debug, Clone)]
pub struct LearnedMacs {
    slots: Vec<Option<(u32, u128, MacAddr, u64)>>,
}

impl Default for LearnedMacs {
    fn default() -> Self {
        LearnedMacs {
            slots: vec![None; 1024],
        }
    }
}

impl LearnedMacs {
    #[inline]
    fn slot(&self, ifindex: u32, addr: u128) -> usize {
        let h = crate::hash::mix64((addr as u64) ^ ((addr >> 64) as u64) ^ u64::from(ifindex));
        (h as usize) & (self.slots.len() - 1)
    }

    fn get(&self, ifindex: u32, addr: u128, now: u64) -> Option<MacAddr> {
        match self.slots[self.slot(ifindex, addr)] {
            Some((i, a, m, at))
                if i == ifindex && a == addr && now.saturating_sub(at) < LEARNED_FOR_NS =>
            {
                Some(m)
            }
            _ => None,
        }
    }
}

/// One usable hop as the datapath needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hop {
    ifindex: u32,
    /// Our MAC on `ifindex`; `None` when the interface is not the datapath's.
    src_mac: Option<MacAddr>,
    /// The router (IPv4-mapped for IPv4), `None` when on-link.
    gateway: Option<u128>,
    /// The router's MAC, resolved at build time.
    gateway_mac: Option<MacAddr>,
}

/// One route in the lookup table: its prefix and its slice of [`Egress::hops`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    prefix: u128,
    len: u8,
    v6: bool,
    metric: u32,
    hops: (u32, u32),
}

/// Longest-prefix match for one family: one hash probe per prefix length present.
#[derive(Debug, Clone, Default)]
struct Lpm {
    /// Prefix lengths present, longest first.
    lens: Vec<u8>,
    by_prefix: FastMap<(u128, u8), u32>,
}

impl Lpm {
    #[inline]
    fn find(&self, dst: u128, v6: bool) -> Option<u32> {
        self.lens
            .iter()
            .find_map(|&len| self.by_prefix.get(&(mask(dst, len, v6), len)).copied())
    }
}

/// `addr` with only its first `len` bits of the family's address kept (IPv4 addresses are
/// IPv4-mapped, their prefix counts from bit 96).
#[inline]
fn mask(addr: u128, len: u8, v6: bool) -> u128 {
    let bits = if v6 { 128 } else { 32 };
    let len = u32::from(len.min(bits));
    let host = bits as u32 - len;
    if host == 0 {
        return addr;
    }
    let keep = if host >= 128 { 0 } else { !0u128 << host };
    if v6 {
        addr & keep
    } else {
        addr & (keep | !0xffff_ffffu128)
    }
}

/// The egress of a route lookup, for `sluice trace`, tests and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteLookup {
    /// The matching route's prefix and length.
    pub prefix: (IpAddr, u8),
    /// The next hop: the router, or the destination itself on-link.
    pub next_hop: IpAddr,
    /// Egress interface.
    pub ifindex: u32,
    /// The MACs and interface, or why the frame would be dropped.
    pub result: Result<NextHop, Miss>,
}

/// Routes and neighbours for one table version (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct Egress {
    v4: Lpm,
    v6: Lpm,
    entries: Vec<Entry>,
    hops: Vec<Hop>,
    neighbours: FastMap<(u32, u128), MacAddr>,
    /// Per backend slot: its egress, precomputed.
    backends: Vec<Result<NextHop, Miss>>,
    misses: Option<MissQueue>,
    /// MTU by interface index, for the interfaces whose MTU is known.
    mtus: FastMap<u32, u32>,
}

impl Egress {
    /// Builds the lookup tables from `net`: `datapath` names the interfaces the datapath
    /// drives, `backends` the backend addresses by slot, `misses` where workers report
    /// neighbours they lacked.
    pub fn build(
        net: &NetState,
        datapath: &[String],
        backends: &[IpAddr],
        misses: Option<MissQueue>,
    ) -> Egress {
        let mut e = Egress {
            misses,
            ..Egress::default()
        };
        for ((ifindex, addr), mac) in &net.neighbours {
            e.neighbours.insert((*ifindex, addr_to_u128(*addr)), *mac);
        }
        for (ifindex, link) in &net.links {
            if link.mtu > 0 {
                e.mtus.insert(*ifindex, link.mtu);
            }
        }
        let mut best: HashMap<(u128, u8, bool), &Route> = HashMap::new();
        for r in &net.routes {
            let v6 = r.dst.is_ipv6();
            let key = (mask(addr_to_u128(r.dst), r.len, v6), r.len, v6);
            match best.get(&key) {
                Some(b) if b.metric <= r.metric => {}
                _ => {
                    best.insert(key, r);
                }
            }
        }
        let mut routes: Vec<_> = best.into_iter().collect();
        routes.sort_by_key(|(k, _)| *k);
        for ((prefix, len, v6), r) in routes {
            let hops = e.add_hops(net, datapath, &r.hops);
            e.insert(Entry {
                prefix,
                len,
                v6,
                metric: r.metric,
                hops,
            });
        }
        e.backends = backends
            .iter()
            .map(|b| e.choose(addr_to_u128(*b), b.is_ipv6(), 0).result)
            .collect();
        e
    }

    /// Appends a route's hops (expanded by weight) and returns their range.
    fn add_hops(&mut self, net: &NetState, datapath: &[String], hops: &[RouteHop]) -> (u32, u32) {
        let start = self.hops.len() as u32;
        let total: usize = hops.iter().map(|h| usize::from(h.weight.max(1))).sum();
        let scale = total.div_ceil(MAX_EXPANDED_HOPS).max(1);
        for h in hops {
            let link = net.links.get(&h.ifindex);
            let src_mac = link
                .filter(|l| datapath.contains(&l.name))
                .and_then(|l| l.mac);
            let gateway = h.gateway.map(addr_to_u128);
            let gateway_mac = h
                .gateway
                .and_then(|g| net.neighbours.get(&(h.ifindex, g)).copied());
            let hop = Hop {
                ifindex: h.ifindex,
                src_mac,
                gateway,
                gateway_mac,
            };
            let copies = (usize::from(h.weight.max(1)) / scale).max(1);
            for _ in 0..copies {
                self.hops.push(hop);
            }
        }
        (start, self.hops.len() as u32)
    }

    fn insert(&mut self, e: Entry) {
        let idx = self.entries.len() as u32;
        self.entries.push(e);
        let lpm = if e.v6 { &mut self.v6 } else { &mut self.v4 };
        lpm.by_prefix.insert((e.prefix, e.len), idx);
        if !lpm.lens.contains(&e.len) {
            lpm.lens.push(e.len);
            lpm.lens.sort_unstable_by(|a, b| b.cmp(a));
        }
    }

    /// Sizes the per-backend egress for `n` backend slots, each unresolved.
    pub(crate) fn with_backends(mut self, n: usize) -> Egress {
        self.backends = vec![Err(Miss::NoNeighbor); n];
        self
    }

    /// Pins a backend slot's egress (tests and fixtures with static next hops).
    pub fn set_backend(&mut self, slot: u32, n: NextHop) {
        if let Some(b) = self.backends.get_mut(slot as usize) {
            *b = Ok(n);
        }
    }

    /// Sets an interface's MTU (tests and fixtures).
    pub fn set_mtu(&mut self, ifindex: u32, mtu: u32) {
        self.mtus.insert(ifindex, mtu);
    }

    /// The MTU of interface `ifindex`, when the kernel told it.
    #[inline]
    pub fn mtu(&self, ifindex: u32) -> Option<u32> {
        self.mtus.get(&ifindex).copied()
    }

    /// Adds a default route through a router whose MACs are known (tests and fixtures).
    pub fn set_default(&mut self, v6: bool, n: NextHop) {
        let start = self.hops.len() as u32;
        self.hops.push(Hop {
            ifindex: n.ifindex,
            src_mac: Some(n.src_mac),
            gateway: Some(0),
            gateway_mac: Some(n.dst_mac),
        });
        let prefix = if v6 {
            0
        } else {
            addr_to_u128(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
        };
        if let Some(&i) = self.lpm(v6).by_prefix.get(&(prefix, 0)) {
            self.entries[i as usize].hops = (start, start + 1);
            return;
        }
        self.insert(Entry {
            prefix,
            len: 0,
            v6,
            metric: 0,
            hops: (start, start + 1),
        });
    }

    fn lpm(&self, v6: bool) -> &Lpm {
        if v6 { &self.v6 } else { &self.v4 }
    }

    /// The egress of backend slot `slot`.
    #[inline(always)]
    pub fn backend(&self, slot: u32) -> Result<NextHop, Miss> {
        match self.backends.get(slot as usize) {
            Some(r) => *r,
            None => Err(Miss::NoNeighbor),
        }
    }

    /// The egress toward `dst` (IPv4-mapped for IPv4) for a flow hashing to `hash`; a
    /// missing neighbour is offered to the control plane.
    #[inline]
    pub fn route(&self, dst: u128, v6: bool, hash: u32) -> Result<NextHop, Miss> {
        let Some(i) = self.lpm(v6).find(dst, v6) else {
            return Err(Miss::NoRoute);
        };
        let e = &self.entries[i as usize];
        let (start, end) = e.hops;
        if start == end {
            return Err(Miss::NoRoute);
        }
        let h = &self.hops[(start + hash % (end - start)) as usize];
        let Some(src_mac) = h.src_mac else {
            return Err(Miss::NotDatapath);
        };
        let dst_mac = match h.gateway {
            Some(_) => h.gateway_mac,
            None => self.neighbours.get(&(h.ifindex, dst)).copied(),
        };
        match dst_mac {
            Some(dst_mac) => Ok(NextHop {
                ifindex: h.ifindex,
                src_mac,
                dst_mac,
            }),
            None => {
                if let Some(q) = &self.misses {
                    q.offer(Unresolved {
                        ifindex: h.ifindex,
                        addr: u128_to_addr(h.gateway.unwrap_or(dst), v6),
                    });
                }
                Err(Miss::NoNeighbor)
            }
        }
    }

    /// [`Egress::route`], falling back on a MAC the worker learned for an on-link
    /// destination the tables have no neighbour entry for yet (see [`LearnedMacs`]).
    #[inline]
    pub fn route_learned(
        &self,
        dst: u128,
        v6: bool,
        hash: u32,
        learned: &LearnedMacs,
        now: u64,
    ) -> Result<NextHop, Miss> {
        match self.route(dst, v6, hash) {
            Err(Miss::NoNeighbor) => {
                let Some(RouteLookup {
                    ifindex, next_hop, ..
                }) = self.choose_hop(dst, v6, hash)
                else {
                    return Err(Miss::NoNeighbor);
                };
                let on_link = next_hop == u128_to_addr(dst, v6);
                match (
                    on_link,
                    learned.get(ifindex, dst, now),
                    self.src_mac(ifindex),
                ) {
                    (true, Some(dst_mac), Some(src_mac)) => Ok(NextHop {
                        ifindex,
                        src_mac,
                        dst_mac,
                    }),
                    _ => Err(Miss::NoNeighbor),
                }
            }
            r => r,
        }
    }

    /// Learns `mac` for `src` when the frame came in by `ifindex` and `src` is on-link there
    /// without a neighbour entry in the tables (see [`LearnedMacs`]).
    #[inline]
    pub fn learn(
        &self,
        learned: &mut LearnedMacs,
        ifindex: u32,
        src: u128,
        v6: bool,
        mac: MacAddr,
        now: u64,
    ) {
        if self.neighbours.contains_key(&(ifindex, src)) {
            return;
        }
        let Some(c) = self.choose_hop(src, v6, 0) else {
            return;
        };
        if c.ifindex == ifindex
            && c.next_hop == u128_to_addr(src, v6)
            && c.result == Err(Miss::NoNeighbor)
        {
            let i = learned.slot(ifindex, src);
            learned.slots[i] = Some((ifindex, src, mac, now));
        }
    }

    fn choose_hop(&self, dst: u128, v6: bool, hash: u32) -> Option<RouteLookup> {
        let i = self.lpm(v6).find(dst, v6)?;
        let e = &self.entries[i as usize];
        Some(self.choose_in(e, dst, v6, hash, (u128_to_addr(e.prefix, v6), e.len)))
    }

    fn src_mac(&self, ifindex: u32) -> Option<MacAddr> {
        self.hops
            .iter()
            .find(|h| h.ifindex == ifindex)
            .and_then(|h| h.src_mac)
    }

    /// [`Egress::route`] explained: the route and next hop it took (`None` without a route).
    /// Offers nothing to the miss queue.
    pub fn explain(&self, dst: IpAddr, hash: u32) -> Option<RouteLookup> {
        let v6 = dst.is_ipv6();
        let d = addr_to_u128(dst);
        let i = self.lpm(v6).find(d, v6)?;
        let e = &self.entries[i as usize];
        let prefix = (u128_to_addr(e.prefix, v6), e.len);
        Some(self.choose_in(e, d, v6, hash, prefix))
    }

    fn choose(&self, dst: u128, v6: bool, hash: u32) -> RouteLookup {
        let none = RouteLookup {
            prefix: (u128_to_addr(0, v6), 0),
            next_hop: u128_to_addr(dst, v6),
            ifindex: 0,
            result: Err(Miss::NoRoute),
        };
        match self.lpm(v6).find(dst, v6) {
            Some(i) => {
                let e = &self.entries[i as usize];
                self.choose_in(e, dst, v6, hash, (u128_to_addr(e.prefix, v6), e.len))
            }
            None => none,
        }
    }

    fn choose_in(
        &self,
        e: &Entry,
        dst: u128,
        v6: bool,
        hash: u32,
        prefix: (IpAddr, u8),
    ) -> RouteLookup {
        let (start, end) = e.hops;
        if start == end {
            return RouteLookup {
                prefix,
                next_hop: u128_to_addr(dst, v6),
                ifindex: 0,
                result: Err(Miss::NoRoute),
            };
        }
        let h = &self.hops[(start + hash % (end - start)) as usize];
        let next = h.gateway.unwrap_or(dst);
        let dst_mac = match h.gateway {
            Some(_) => h.gateway_mac,
            None => self.neighbours.get(&(h.ifindex, dst)).copied(),
        };
        let result = match (h.src_mac, dst_mac) {
            (None, _) => Err(Miss::NotDatapath),
            (Some(_), None) => Err(Miss::NoNeighbor),
            (Some(src_mac), Some(dst_mac)) => Ok(NextHop {
                ifindex: h.ifindex,
                src_mac,
                dst_mac,
            }),
        };
        RouteLookup {
            prefix,
            next_hop: u128_to_addr(next, v6),
            ifindex: h.ifindex,
            result,
        }
    }

    /// Every next hop whose MAC the snapshot lacks and that some route or backend needs:
    /// routers of datapath routes, and backends on-link. The control plane asks the kernel
    /// to resolve them.
    pub fn unresolved(&self, backends: &[IpAddr]) -> Vec<Unresolved> {
        let mut out: Vec<Unresolved> = self
            .entries
            .iter()
            .flat_map(|e| {
                let hops = &self.hops[e.hops.0 as usize..e.hops.1 as usize];
                hops.iter().map(move |h| (e.v6, h))
            })
            .filter(|(_, h)| h.src_mac.is_some() && h.gateway_mac.is_none())
            .filter_map(|(v6, h)| {
                Some(Unresolved {
                    ifindex: h.ifindex,
                    addr: u128_to_addr(h.gateway?, v6),
                })
            })
            .collect();
        for b in backends {
            let c = self.choose(addr_to_u128(*b), b.is_ipv6(), 0);
            if c.result == Err(Miss::NoNeighbor) {
                out.push(Unresolved {
                    ifindex: c.ifindex,
                    addr: c.next_hop,
                });
            }
        }
        out.sort_by_key(|u| (u.ifindex, u.addr));
        out.dedup();
        out
    }

    /// Whether a neighbour entry for `addr` on `ifindex` with `mac` is what this egress
    /// already uses (a notification that changes nothing).
    pub fn has_neighbour(&self, ifindex: u32, addr: IpAddr, mac: Option<MacAddr>) -> bool {
        self.neighbours.get(&(ifindex, addr_to_u128(addr))).copied() == mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("literal")
    }
    fn mac(b: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, b])
    }
    fn hop(ifindex: u32, gw: Option<&str>) -> RouteHop {
        RouteHop {
            ifindex,
            gateway: gw.map(ip),
            weight: 1,
        }
    }
    fn route(dst: &str, len: u8, hops: Vec<RouteHop>) -> Route {
        Route {
            dst: ip(dst),
            len,
            metric: 0,
            hops,
        }
    }

    /// Uplink 2 (10.0.0.0/24, 2001:db8::/64), backend side 3 (10.1.0.0/24), management 4
    /// (not the datapath's).
    fn net() -> NetState {
        let mut n = NetState::default();
        for (i, name, m) in [(2, "up", 0x12), (3, "be", 0x13), (4, "mgmt", 0x14)] {
            n.links.insert(
                i,
                Link {
                    name: name.into(),
                    mac: Some(mac(m)),
                    mtu: 1500,
                },
            );
        }
        n.routes = vec![
            route("10.0.0.0", 24, vec![hop(2, None)]),
            route("10.1.0.0", 24, vec![hop(3, None)]),
            route("192.168.0.0", 16, vec![hop(4, None)]),
            route("198.51.100.0", 24, vec![hop(2, Some("10.0.0.2"))]),
            route("2001:db8::", 64, vec![hop(2, None)]),
        ];
        n.neighbours.insert((2, ip("10.0.0.1")), mac(0xc1));
        n.neighbours.insert((2, ip("10.0.0.2")), mac(0xa2));
        n.neighbours.insert((2, ip("10.0.0.3")), mac(0xa3));
        n.neighbours.insert((3, ip("10.1.0.11")), mac(0xb1));
        n.neighbours.insert((2, ip("2001:db8::1")), mac(0xc6));
        n
    }

    fn dp() -> Vec<String> {
        vec!["up".into(), "be".into()]
    }

    fn route_to(e: &Egress, dst: &str, hash: u32) -> Result<NextHop, Miss> {
        let d = ip(dst);
        e.route(addr_to_u128(d), d.is_ipv6(), hash)
    }

    #[test]
    fn longest_prefix_wins_on_link_and_through_routers() {
        let mut n = net();
        n.routes
            .push(route("198.51.100.128", 25, vec![hop(2, Some("10.0.0.3"))]));
        let e = Egress::build(&n, &dp(), &[ip("10.1.0.11"), ip("10.1.0.99")], None);
        let on_link = route_to(&e, "10.0.0.1", 7).expect("client on-link");
        assert_eq!((on_link.ifindex, on_link.dst_mac), (2, mac(0xc1)));
        assert_eq!(on_link.src_mac, mac(0x12));
        let routed = route_to(&e, "198.51.100.7", 7).expect("via router");
        assert_eq!(routed.dst_mac, mac(0xa2));
        let specific = route_to(&e, "198.51.100.200", 7).expect("the /25");
        assert_eq!(specific.dst_mac, mac(0xa3));
        let v6 = route_to(&e, "2001:db8::1", 7).expect("v6 on-link");
        assert_eq!(v6.dst_mac, mac(0xc6));
        assert_eq!(e.backend(0).map(|n| n.dst_mac), Ok(mac(0xb1)));
        assert_eq!(e.backend(1), Err(Miss::NoNeighbor));
        let c = e.explain(ip("198.51.100.200"), 7).expect("route");
        assert_eq!(c.prefix, (ip("198.51.100.128"), 25));
        assert_eq!(c.next_hop, ip("10.0.0.3"));
    }

    #[test]
    fn misses_are_counted_by_reason_and_on_link_misses_are_offered() {
        let mut n = net();
        n.routes.push(route("203.0.113.0", 24, vec![]));
        let (q, rx) = MissQueue::new(4);
        let e = Egress::build(&n, &dp(), &[], Some(q));
        assert_eq!(route_to(&e, "8.8.8.8", 1), Err(Miss::NoRoute), "no default");
        assert_eq!(route_to(&e, "2001:db9::1", 1), Err(Miss::NoRoute));
        assert_eq!(
            route_to(&e, "203.0.113.9", 1),
            Err(Miss::NoRoute),
            "blackhole"
        );
        assert_eq!(route_to(&e, "192.168.1.1", 1), Err(Miss::NotDatapath));
        assert!(rx.try_recv().is_err(), "nothing offered yet");
        assert_eq!(route_to(&e, "10.0.0.77", 1), Err(Miss::NoNeighbor));
        let u = rx.try_recv().expect("offered");
        assert_eq!((u.ifindex, u.addr), (2, ip("10.0.0.77")));
        // A full queue drops the request instead of blocking the worker.
        for _ in 0..10 {
            assert_eq!(route_to(&e, "10.0.0.78", 1), Err(Miss::NoNeighbor));
        }
        assert_eq!(rx.try_iter().count(), 4);
    }

    #[test]
    fn the_lowest_metric_wins_and_mask_ignores_host_bits() {
        let mut n = net();
        let mut worse = route("0.0.0.0", 0, vec![hop(2, Some("10.0.0.3"))]);
        worse.metric = 200;
        let mut better = route("0.0.0.0", 0, vec![hop(2, Some("10.0.0.2"))]);
        better.metric = 100;
        n.routes.push(worse);
        n.routes.push(better);
        n.routes.push(route("10.9.9.9", 8, vec![hop(3, None)]));
        let e = Egress::build(&n, &dp(), &[], None);
        assert_eq!(route_to(&e, "8.8.8.8", 3).map(|n| n.dst_mac), Ok(mac(0xa2)));
        assert_eq!(
            e.explain(ip("10.200.0.1"), 0).map(|c| c.prefix),
            Some((ip("10.0.0.0"), 8))
        );
        assert_eq!(
            mask(addr_to_u128(ip("10.1.2.3")), 0, false),
            addr_to_u128(ip("0.0.0.0"))
        );
        assert_eq!(
            mask(addr_to_u128(ip("10.1.2.3")), 32, false),
            addr_to_u128(ip("10.1.2.3"))
        );
        assert_eq!(
            mask(addr_to_u128(ip("2001:db8::ffff")), 64, true),
            addr_to_u128(ip("2001:db8::"))
        );
        assert_eq!(mask(addr_to_u128(ip("2001:db8::1")), 0, true), 0);
    }

    #[test]
    fn multipath_spreads_by_hash_and_each_flow_stays() {
        let mut n = net();
        n.routes.push(route(
            "0.0.0.0",
            0,
            vec![hop(2, Some("10.0.0.2")), hop(2, Some("10.0.0.3"))],
        ));
        let e = Egress::build(&n, &dp(), &[], None);
        let mut seen = HashMap::new();
        for hash in 0..1000u32 {
            let h = hash.wrapping_mul(0x9e37_79b9);
            let a = route_to(&e, "8.8.8.8", h).expect("default");
            assert_eq!(route_to(&e, "8.8.8.8", h), Ok(a), "stable per flow");
            *seen.entry(a.dst_mac).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen.values().all(|&c| c > 400), "{seen:?}");
        // Weights: 3:1.
        let mut n = net();
        let mut heavy = hop(2, Some("10.0.0.2"));
        heavy.weight = 3;
        n.routes
            .push(route("0.0.0.0", 0, vec![heavy, hop(2, Some("10.0.0.3"))]));
        let e = Egress::build(&n, &dp(), &[], None);
        let to_a2 = (0..4000u32)
            .filter(|h| {
                route_to(&e, "8.8.8.8", h.wrapping_mul(0x9e37_79b9)).map(|n| n.dst_mac)
                    == Ok(mac(0xa2))
            })
            .count();
        assert!(
            (2800..3200).contains(&to_a2),
            "3:1 weights gave {to_a2} of 4000"
        );
    }

    #[test]
    fn a_learned_mac_stands_in_until_the_kernel_has_the_entry() {
        let e = Egress::build(&net(), &dp(), &[], None);
        let mut l = LearnedMacs::default();
        let c = addr_to_u128(ip("10.0.0.77"));
        assert_eq!(e.route_learned(c, false, 0, &l, 0), Err(Miss::NoNeighbor));
        // Not learned from a frame that came in by another interface, nor for a routed source.
        e.learn(&mut l, 3, c, false, mac(0x77), 0);
        e.learn(
            &mut l,
            2,
            addr_to_u128(ip("198.51.100.7")),
            false,
            mac(0x78),
            0,
        );
        assert_eq!(e.route_learned(c, false, 0, &l, 0), Err(Miss::NoNeighbor));
        let routed = e.route_learned(addr_to_u128(ip("198.51.100.7")), false, 0, &l, 0);
        assert_eq!(
            routed.map(|n| n.dst_mac),
            Ok(mac(0xa2)),
            "the router's, not learned"
        );
        e.learn(&mut l, 2, c, false, mac(0x77), 0);
        let n = e.route_learned(c, false, 0, &l, 1_000).expect("learned");
        assert_eq!((n.ifindex, n.src_mac, n.dst_mac), (2, mac(0x12), mac(0x77)));
        assert_eq!(
            e.route_learned(c, false, 0, &l, LEARNED_FOR_NS + 1),
            Err(Miss::NoNeighbor),
            "expired"
        );
        // The kernel's entry wins.
        let mut n2 = net();
        n2.neighbours.insert((2, ip("10.0.0.77")), mac(0x99));
        let e2 = Egress::build(&n2, &dp(), &[], None);
        assert_eq!(
            e2.route_learned(c, false, 0, &l, 0).map(|n| n.dst_mac),
            Ok(mac(0x99))
        );
    }

    #[test]
    fn static_defaults_and_backends_for_fixtures() {
        let mut e = Egress::default().with_backends(2);
        let n = NextHop {
            ifindex: 9,
            src_mac: mac(1),
            dst_mac: mac(2),
        };
        e.set_default(false, n);
        e.set_default(true, n);
        e.set_backend(1, n);
        assert_eq!(route_to(&e, "8.8.8.8", 0), Ok(n));
        assert_eq!(route_to(&e, "2001:db8::1", 0), Ok(n));
        assert_eq!(e.backend(0), Err(Miss::NoNeighbor));
        assert_eq!(e.backend(1), Ok(n));
        assert_eq!(e.mtu(9), None);
        e.set_mtu(9, 1400);
        assert_eq!(e.mtu(9), Some(1400));
        assert_eq!(Egress::build(&net(), &dp(), &[], None).mtu(3), Some(1500));
    }
}
