//! Next hops from the kernel: route lookup, neighbour (ARP/ND) resolution and change
//! notifications, through rtnetlink.
//!
//! The control plane asks [`Resolver::resolve`] for each backend: which interface a frame
//! to it leaves by, from which MAC and source address, and to which next-hop MAC. Sluice
//! never guesses a MAC: when the kernel has no usable entry, the resolver makes the kernel
//! resolve it by sending one empty UDP datagram to the next hop's discard port (9) from an
//! ordinary socket (the kernel then runs ARP or ND exactly as for any local traffic), waits
//! for the entry, and otherwise reports [`NeighError::Unresolved`] and counts it.
//! [`watch`] turns RTNLGRP_NEIGH / RTNLGRP_IPV4_ROUTE / RTNLGRP_IPV6_ROUTE notifications into
//! [`NetChange`] messages, and [`Resolver::snapshot`] dumps the interfaces, the main routing
//! table and the neighbour table into the [`NetState`] the datapath's egress is built from
//! (`lb::egress`). [`provoke_resolution`] asks the kernel to resolve a next hop without
//! waiting: the answer arrives as a neighbour notification.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::link::LinkAttribute;
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteNextHopFlags, RouteType, RouteVia,
};

use crate::lb::egress::{Link, NetState, Route, RouteHop};
use rtnetlink::{Handle, MulticastGroup, RouteMessageBuilder};
use wire::MacAddr;

/// How to reach a destination at layer 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor {
    /// Egress interface.
    pub ifindex: u32,
    /// MAC of the egress interface.
    pub src_mac: [u8; 6],
    /// MAC of the next hop.
    pub dst_mac: [u8; 6],
    /// Source address the kernel would use toward the destination.
    pub src_ip: IpAddr,
    /// The next hop: the gateway, or the destination itself when directly connected.
    pub next_hop: IpAddr,
}

/// Why a destination could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum NeighError {
    /// The rtnetlink socket could not be opened.
    #[error("cannot open an rtnetlink socket: {0} (the kernel must have NETLINK_ROUTE)")]
    Socket(#[source] std::io::Error),
    /// A request to the kernel failed.
    #[error("rtnetlink: {request}: {source}")]
    Netlink {
        /// What was asked ("route lookup", "link lookup", "neighbour dump").
        request: &'static str,
        /// rtnetlink's error.
        #[source]
        source: rtnetlink::Error,
    },
    /// The route query for a destination could not be built.
    #[error("cannot ask the kernel for a route to {dst}: {source}")]
    RouteQuery {
        /// Destination asked for.
        dst: IpAddr,
        /// rtnetlink's reason.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The kernel has no route.
    #[error("no route to {0}")]
    NoRoute(IpAddr),
    /// The route is not over an Ethernet-like interface with a MAC address.
    #[error("egress interface {ifindex} toward {dst} has no MAC address")]
    NoMac {
        /// Destination asked for.
        dst: IpAddr,
        /// Egress interface.
        ifindex: u32,
    },
    /// The kernel could not resolve the next hop's MAC in time.
    #[error("next hop {next_hop} toward {dst} did not answer ARP/ND on ifindex {ifindex}")]
    Unresolved {
        /// Destination asked for.
        dst: IpAddr,
        /// Next hop.
        next_hop: IpAddr,
        /// Egress interface.
        ifindex: u32,
    },
}

/// Wraps rtnetlink's error for `request`.
fn nl(request: &'static str) -> impl FnOnce(rtnetlink::Error) -> NeighError {
    move |source| NeighError::Netlink { request, source }
}

/// A route and neighbour resolver over one rtnetlink connection.
#[derive(Debug)]
pub struct Resolver {
    handle: Handle,
    unresolved: AtomicU64,
    wait: Duration,
}

/// Discard port (RFC 863): the datagram that makes the kernel resolve a next hop goes here.
const DISCARD_PORT: u16 = 9;

impl Resolver {
    /// Opens an rtnetlink connection, driven by a task on the current tokio runtime.
    pub fn new() -> Result<Resolver, NeighError> {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(NeighError::Socket)?;
        tokio::spawn(conn);
        Ok(Resolver {
            handle,
            unresolved: AtomicU64::new(0),
            wait: Duration::from_secs(3),
        })
    }

    /// How long [`Resolver::resolve`] waits for the kernel to resolve a next hop.
    pub fn with_wait(mut self, wait: Duration) -> Resolver {
        self.wait = wait;
        self
    }

    /// Resolutions that failed because the next hop did not answer.
    pub fn unresolved_count(&self) -> u64 {
        self.unresolved.load(Ordering::Relaxed)
    }

    /// Egress interface, source MAC and address, and next-hop MAC toward `dst`
    /// (`ip route get` followed by `ip neigh`, triggering resolution when needed).
    pub async fn resolve(&self, dst: IpAddr) -> Result<Neighbor, NeighError> {
        let route = self.route(dst).await?;
        let mut ifindex = None;
        let mut gateway = None;
        let mut src_ip = None;
        for a in &route.attributes {
            match a {
                RouteAttribute::Oif(i) => ifindex = Some(*i),
                RouteAttribute::Gateway(g) => gateway = route_addr(g),
                RouteAttribute::PrefSource(s) => src_ip = route_addr(s),
                _ => {}
            }
        }
        let ifindex = ifindex.ok_or(NeighError::NoRoute(dst))?;
        let next_hop = gateway.unwrap_or(dst);
        let src_mac = self
            .link_mac(ifindex)
            .await?
            .ok_or(NeighError::NoMac { dst, ifindex })?;
        let src_ip = src_ip.ok_or(NeighError::NoRoute(dst))?;
        let mut n = Neighbor {
            ifindex,
            src_mac,
            dst_mac: [0; 6],
            src_ip,
            next_hop,
        };
        if let Some(mac) = self.neighbour(ifindex, next_hop).await? {
            n.dst_mac = mac;
            return Ok(n);
        }
        provoke_resolution(next_hop, ifindex);
        let deadline = tokio::time::Instant::now() + self.wait;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if let Some(mac) = self.neighbour(ifindex, next_hop).await? {
                n.dst_mac = mac;
                return Ok(n);
            }
        }
        self.unresolved.fetch_add(1, Ordering::Relaxed);
        Err(NeighError::Unresolved {
            dst,
            next_hop,
            ifindex,
        })
    }

    /// The kernel's interfaces, main-table routes and usable neighbour entries, dumped
    /// now (a few netlink round trips; the control plane calls it off its loop).
    pub async fn snapshot(&self) -> Result<NetState, NeighError> {
        let mut net = NetState::default();
        let mut links = self.handle.link().get().execute();
        while let Some(link) = links.try_next().await.map_err(nl("link dump"))? {
            let mut l = Link {
                name: String::new(),
                mac: None,
                mtu: 0,
            };
            for a in link.attributes {
                match a {
                    LinkAttribute::IfName(n) => l.name = n,
                    LinkAttribute::Mtu(m) => l.mtu = m,
                    LinkAttribute::Address(m) => {
                        l.mac = <[u8; 6]>::try_from(m.as_slice())
                            .ok()
                            .filter(|m| *m != [0; 6])
                            .map(MacAddr)
                    }
                    _ => {}
                }
            }
            net.links.insert(link.header.index, l);
        }
        for v6 in [false, true] {
            let msg = if v6 {
                RouteMessageBuilder::<Ipv6Addr>::new().build()
            } else {
                RouteMessageBuilder::<Ipv4Addr>::new().build()
            };
            let mut routes = self.handle.route().get(msg).execute();
            while let Some(r) = routes.try_next().await.map_err(nl("route dump"))? {
                if let Some(r) = route_of(&r) {
                    net.routes.push(r);
                }
            }
        }
        merge_multipath(&mut net.routes);
        let mut entries = self.handle.neighbours().get().execute();
        while let Some(m) = entries.try_next().await.map_err(nl("neighbour dump"))? {
            if !usable(m.header.state) {
                continue;
            }
            if let (Some(dst), Some(mac)) = neighbour_parts(&m) {
                net.neighbours.insert((m.header.ifindex, dst), MacAddr(mac));
            }
        }
        Ok(net)
    }

    async fn route(&self, dst: IpAddr) -> Result<RouteMessage, NeighError> {
        let full = if dst.is_ipv4() { 32 } else { 128 };
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, full)
            .map_err(|e| NeighError::RouteQuery {
                dst,
                source: Box::new(e),
            })?
            .build();
        let mut routes = self.handle.route().get(msg).execute();
        match routes.try_next().await {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(NeighError::NoRoute(dst)),
            // ENETUNREACH and friends: the kernel's "no route".
            Err(rtnetlink::Error::NetlinkError(_)) => Err(NeighError::NoRoute(dst)),
            Err(e) => Err(nl("route lookup")(e)),
        }
    }

    async fn link_mac(&self, ifindex: u32) -> Result<Option<[u8; 6]>, NeighError> {
        let mut links = self.handle.link().get().match_index(ifindex).execute();
        while let Some(link) = links.try_next().await.map_err(nl("link lookup"))? {
            for a in link.attributes {
                if let LinkAttribute::Address(mac) = a {
                    return Ok(mac.as_slice().try_into().ok());
                }
            }
        }
        Ok(None)
    }

    /// A usable MAC for `addr` on `ifindex` from the kernel's neighbour table.
    async fn neighbour(&self, ifindex: u32, addr: IpAddr) -> Result<Option<[u8; 6]>, NeighError> {
        let mut entries = self.handle.neighbours().get().execute();
        while let Some(m) = entries.try_next().await.map_err(nl("neighbour dump"))? {
            if m.header.ifindex != ifindex || !usable(m.header.state) {
                continue;
            }
            let (dst, mac) = neighbour_parts(&m);
            if dst == Some(addr)
                && let Some(mac) = mac
            {
                return Ok(Some(mac));
            }
        }
        Ok(None)
    }
}

/// Neighbour states with a MAC the kernel itself would send to.
fn usable(s: NeighbourState) -> bool {
    matches!(
        s,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
            | NeighbourState::Noarp
    )
}

fn route_addr(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn neighbour_parts(m: &NeighbourMessage) -> (Option<IpAddr>, Option<[u8; 6]>) {
    let mut dst = None;
    let mut mac = None;
    for a in &m.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                dst = Some(IpAddr::V4(*v4))
            }
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                dst = Some(IpAddr::V6(*v6))
            }
            NeighbourAttribute::LinkLayerAddress(l) => mac = l.as_slice().try_into().ok(),
            _ => {}
        }
    }
    (dst, mac)
}

/// A main-table route the datapath can use or must honour (unicast, and unreachable,
/// blackhole and prohibit ones that shadow less specific routes); `None` for the rest
/// (local, broadcast, multicast, other tables).
pub fn route_of(r: &RouteMessage) -> Option<Route> {
    let table = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table));
    if table != u32::from(RouteHeader::RT_TABLE_MAIN) {
        return None;
    }
    let v6 = match r.header.address_family {
        rtnetlink::packet_route::AddressFamily::Inet => false,
        rtnetlink::packet_route::AddressFamily::Inet6 => true,
        _ => return None,
    };
    let dst = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Destination(d) => route_addr(d),
            _ => None,
        })
        .unwrap_or(if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        });
    let metric = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0);
    let hops = match r.header.kind {
        RouteType::Unicast => unicast_hops(r),
        RouteType::BlackHole | RouteType::Unreachable | RouteType::Prohibit => Vec::new(),
        _ => return None,
    };
    Some(Route {
        dst,
        len: r.header.destination_prefix_length,
        metric,
        hops,
    })
}

/// The next hops of a unicast route: RTA_MULTIPATH's live ones, or RTA_OIF + RTA_GATEWAY.
fn unicast_hops(r: &RouteMessage) -> Vec<RouteHop> {
    let gateway = |attrs: &[RouteAttribute]| {
        attrs.iter().find_map(|a| match a {
            RouteAttribute::Gateway(g) => route_addr(g),
            RouteAttribute::Via(RouteVia::Inet(a)) => Some(IpAddr::V4(*a)),
            RouteAttribute::Via(RouteVia::Inet6(a)) => Some(IpAddr::V6(*a)),
            _ => None,
        })
    };
    for a in &r.attributes {
        if let RouteAttribute::MultiPath(hops) = a {
            return hops
                .iter()
                .filter(|h| {
                    !h.flags
                        .intersects(RouteNextHopFlags::Dead | RouteNextHopFlags::Linkdown)
                })
                .map(|h| RouteHop {
                    ifindex: h.interface_index,
                    gateway: gateway(&h.attributes),
                    weight: u16::from(h.hops) + 1,
                })
                .collect();
        }
    }
    let oif = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(i) => Some(*i),
        _ => None,
    });
    match oif {
        Some(ifindex) => vec![RouteHop {
            ifindex,
            gateway: gateway(&r.attributes),
            weight: 1,
        }],
        None => Vec::new(),
    }
}

/// IPv6 multipath routes may come as one message per next hop: routes with the same
/// prefix and metric become one route with every hop.
fn merge_multipath(routes: &mut Vec<Route>) {
    let mut out: Vec<Route> = Vec::with_capacity(routes.len());
    for r in routes.drain(..) {
        match out
            .iter_mut()
            .find(|o| (o.dst, o.len, o.metric) == (r.dst, r.len, r.metric) && !o.hops.is_empty())
        {
            Some(o) if !r.hops.is_empty() => {
                for h in r.hops {
                    if !o.hops.contains(&h) {
                        o.hops.push(h);
                    }
                }
            }
            _ => out.push(r),
        }
    }
    *routes = out;
}

/// Makes the kernel resolve `next_hop` by sending it an empty datagram on the discard port;
/// does not wait (the entry arrives as a neighbour notification).
pub fn provoke_resolution(next_hop: IpAddr, ifindex: u32) {
    let (bind, to): (SocketAddr, SocketAddr) = match next_hop {
        IpAddr::V4(a) => (
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            SocketAddr::from((a, DISCARD_PORT)),
        ),
        IpAddr::V6(a) => (
            SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
            // A link-local next hop needs the interface as its scope.
            SocketAddr::V6(SocketAddrV6::new(a, DISCARD_PORT, 0, ifindex)),
        ),
    };
    match UdpSocket::bind(bind).and_then(|s| s.send_to(&[], to)) {
        Ok(_) => {}
        Err(e) => tracing::debug!(%next_hop, error = %e, "resolution datagram not sent"),
    }
}

/// One change in the kernel's neighbour or route tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetChange {
    /// A neighbour entry appeared, changed or went away.
    Neighbour {
        /// Interface of the entry.
        ifindex: u32,
        /// Its IP address.
        addr: IpAddr,
        /// Its MAC when the entry is usable, `None` when it is gone or failed.
        mac: Option<[u8; 6]>,
    },
    /// An interface changed (its MTU, state or address): the snapshot is read again.
    Link {
        /// The interface.
        ifindex: u32,
    },
    /// A route was added, changed or removed.
    Route {
        /// Destination prefix (`None` for a default route without RTA_DST).
        destination: Option<(IpAddr, u8)>,
        /// True for a removal.
        removed: bool,
    },
}

/// Parses one notification into a change; `None` for messages Sluice does not care about.
fn change_of(msg: NetlinkMessage<RouteNetlinkMessage>) -> Option<NetChange> {
    let NetlinkPayload::InnerMessage(inner) = msg.payload else {
        return None;
    };
    match inner {
        RouteNetlinkMessage::NewNeighbour(m) => neighbour_change(&m, false),
        RouteNetlinkMessage::DelNeighbour(m) => neighbour_change(&m, true),
        RouteNetlinkMessage::NewLink(l) | RouteNetlinkMessage::DelLink(l) => {
            Some(NetChange::Link {
                ifindex: l.header.index,
            })
        }
        RouteNetlinkMessage::NewRoute(r) => Some(route_change(&r, false)),
        RouteNetlinkMessage::DelRoute(r) => Some(route_change(&r, true)),
        _ => None,
    }
}

fn neighbour_change(m: &NeighbourMessage, removed: bool) -> Option<NetChange> {
    let (addr, mac) = neighbour_parts(m);
    let mac = if removed || !usable(m.header.state) {
        None
    } else {
        mac
    };
    Some(NetChange::Neighbour {
        ifindex: m.header.ifindex,
        addr: addr?,
        mac,
    })
}

fn route_change(r: &RouteMessage, removed: bool) -> NetChange {
    let destination = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Destination(d) => {
            route_addr(d).map(|ip| (ip, r.header.destination_prefix_length))
        }
        _ => None,
    });
    NetChange::Route {
        destination,
        removed,
    }
}

/// Subscribes to link, neighbour and route notifications; changes arrive on the returned channel
/// until it is dropped. Runs on the current tokio runtime.
pub fn watch() -> Result<tokio::sync::mpsc::Receiver<NetChange>, NeighError> {
    let (conn, _handle, mut messages) = rtnetlink::new_multicast_connection(&[
        MulticastGroup::Link,
        MulticastGroup::Neigh,
        MulticastGroup::Ipv4Route,
        MulticastGroup::Ipv6Route,
    ])
    .map_err(NeighError::Socket)?;
    tokio::spawn(conn);
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    tokio::spawn(async move {
        use futures::StreamExt;
        while let Some((msg, _)) = messages.next().await {
            if let Some(change) = change_of(msg)
                && tx.send(change).await.is_err()
            {
                break;
            }
        }
    });
    Ok(rx)
}
