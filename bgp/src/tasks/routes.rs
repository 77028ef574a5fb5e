//! The Adj-RIB-Out on the wire: UPDATEs that announce and withdraw what the embedder wants
//! the peer to have, answers to route refresh, and the count of what the peer announces.

use std::net::IpAddr;

use ipnet::IpNet;
use tracing::{debug, warn};

use super::{PeerTask, Up, lock};
use crate::codec::{
    AFI_IPV4, AFI_IPV6, AsSegment, AsSegmentKind, Capability, GRACEFUL_SHUTDOWN, Message, MpReach,
    MpUnreach, Notification, Origin, PathAttr, RouteRefresh, SAFI_UNICAST, Update, cease, code,
};
use crate::fsm::Event;
use crate::speaker::{RouteAttrs, TRACKED_PREFIXES};

/// Why a route cannot be sent on this session (counted in `unsendable_routes`).
#[derive(Debug, thiserror::Error)]
enum Unsendable {
    /// The session did not negotiate the prefix's address family.
    #[error("{prefix}: address family not negotiated")]
    FamilyNotNegotiated { prefix: IpNet },
    /// An IPv4 prefix, and neither the route, the peer config nor the session has an IPv4
    /// address to use as next hop.
    #[error("{prefix}: no IPv4 next hop on an IPv6 session")]
    NoIpv4NextHop { prefix: IpNet },
    /// The same for an IPv6 prefix.
    #[error("{prefix}: no IPv6 next hop on an IPv4 session")]
    NoIpv6NextHop { prefix: IpNet },
}

impl PeerTask {
    /// Path attributes for `prefix` on this session, or why it cannot be sent.
    fn build(&self, up: &Up, prefix: &IpNet, a: &RouteAttrs) -> Result<Update, Unsendable> {
        let ibgp = self.cfg.asn == self.local_asn;
        let afi = if prefix.addr().is_ipv4() {
            AFI_IPV4
        } else {
            AFI_IPV6
        };
        if !up.session.family(afi) {
            return Err(Unsendable::FamilyNotNegotiated { prefix: *prefix });
        }
        let export = &self.cfg.export;
        let copies = 1 + usize::from(a.as_path_prepend) + usize::from(export.as_path_prepend);
        let mut attrs = vec![
            PathAttr::Origin(Origin::Igp),
            PathAttr::AsPath(if ibgp {
                vec![]
            } else {
                vec![AsSegment {
                    kind: AsSegmentKind::Sequence,
                    asns: vec![self.local_asn; copies],
                }]
            }),
        ];
        let mut update = Update::default();
        match prefix {
            IpNet::V4(p) => {
                let nh = match (a.next_hop, self.cfg.next_hop_v4, up.local) {
                    (Some(IpAddr::V4(n)), _, _) | (_, Some(n), _) | (_, _, IpAddr::V4(n)) => n,
                    _ => return Err(Unsendable::NoIpv4NextHop { prefix: *prefix }),
                };
                attrs.push(PathAttr::NextHop(nh));
                update.nlri.push(*p);
            }
            IpNet::V6(_) => {
                let nh = match (a.next_hop, self.cfg.next_hop_v6, up.local) {
                    (Some(IpAddr::V6(n)), _, _) | (_, Some(n), _) | (_, _, IpAddr::V6(n)) => n,
                    _ => return Err(Unsendable::NoIpv6NextHop { prefix: *prefix }),
                };
                attrs.push(PathAttr::MpReach(MpReach {
                    next_hops: vec![IpAddr::V6(nh)],
                    nlri: vec![*prefix],
                    afi: AFI_IPV6,
                }));
            }
        }
        if let Some(m) = a.med.or(export.med) {
            attrs.push(PathAttr::Med(m));
        }
        if ibgp {
            // RFC 8326 §4: also lower LOCAL_PREF inside the AS during graceful shutdown.
            let lp = if self.gshut {
                0
            } else {
                a.local_pref.or(export.local_pref).unwrap_or(100)
            };
            attrs.push(PathAttr::LocalPref(lp));
        }
        let mut communities = a.communities.clone();
        communities.extend(&export.communities);
        if self.gshut {
            communities.push(GRACEFUL_SHUTDOWN);
        }
        communities.sort_unstable();
        communities.dedup();
        if !communities.is_empty() {
            attrs.push(PathAttr::Communities(communities));
        }
        let mut large = a.large_communities.clone();
        large.extend(&export.large_communities);
        large.sort_unstable();
        large.dedup();
        if !large.is_empty() {
            attrs.push(PathAttr::LargeCommunities(large));
        }
        update.attrs = attrs;
        Ok(update)
    }

    pub(super) async fn advertise(&mut self, prefixes: &[IpNet]) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let mut updates = Vec::new();
        for p in prefixes {
            let Some(a) = self.rib.get(p) else { continue };
            match self.build(up, p, a) {
                Ok(u) => updates.push((*p, u)),
                Err(e) => {
                    warn!(peer = %self.cfg.address, "bgp: cannot announce {e}");
                    let mut s = lock(&self.status);
                    s.unsendable_routes += 1;
                    s.last_error = Some(format!("cannot announce {e}"));
                }
            }
        }
        for (p, u) in updates {
            self.send(conn, &Message::Update(u)).await;
            self.advertised.insert(p);
        }
        lock(&self.status).prefixes_announced = self.advertised.len();
    }

    pub(super) async fn withdraw(&mut self, prefixes: &[IpNet]) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let mut u = Update::default();
        let mut v6 = Vec::new();
        for p in prefixes {
            if !self.advertised.remove(p) {
                continue;
            }
            match p {
                IpNet::V4(p4) => u.withdrawn.push(*p4),
                IpNet::V6(_) => v6.push(*p),
            }
        }
        if !v6.is_empty() {
            u.attrs.push(PathAttr::MpUnreach(MpUnreach {
                afi: AFI_IPV6,
                withdrawn: v6,
            }));
        }
        if !u.withdrawn.is_empty() || !u.attrs.is_empty() {
            // Withdrawals are 5 (IPv4) or 17 (IPv6) octets each: chunk well under 4096.
            for chunk in split_withdrawals(u) {
                self.send(conn, &Message::Update(chunk)).await;
            }
        }
        lock(&self.status).prefixes_announced = self.advertised.len();
    }

    pub(super) fn on_update(&mut self, u: Update) {
        if let Some(cause) = &u.withdraw_cause {
            warn!(peer = %self.cfg.address, %cause, "bgp: UPDATE treated as withdraw (RFC 7606)");
            lock(&self.status).treat_as_withdraw += 1;
        }
        for p in u.withdrawn_all() {
            self.received.remove(&p);
        }
        let announced = u.announced();
        if !announced.is_empty() {
            debug!(peer = %self.cfg.address, n = announced.len(), "bgp: routes received (not installed)");
        }
        let Some(max) = self.cfg.max_prefixes else {
            // No limit: keep the session and bound what counting costs.
            for p in announced {
                if self.received.len() >= TRACKED_PREFIXES {
                    break;
                }
                self.received.insert(p);
            }
            lock(&self.status).prefixes_received = self.received.len();
            return;
        };
        let afi = announced.first().map(|p| p.addr().is_ipv4());
        self.received.extend(announced);
        lock(&self.status).prefixes_received = self.received.len();
        if self.received.len() > max {
            warn!(peer = %self.cfg.address, max, "bgp: peer exceeded max_prefixes; closing the session (RFC 4486)");
            let afi = if afi.unwrap_or(true) {
                AFI_IPV4
            } else {
                AFI_IPV6
            };
            // RFC 4486 §4: AFI, SAFI and the upper bound.
            let mut data = afi.to_be_bytes().to_vec();
            data.push(SAFI_UNICAST);
            data.extend_from_slice(&u32::try_from(max).unwrap_or(u32::MAX).to_be_bytes());
            let n = Notification {
                code: code::CEASE,
                subcode: cease::MAX_PREFIXES,
                data,
            };
            self.events.push_back(Event::PrefixLimit(n));
        }
    }

    pub(super) async fn on_route_refresh(&mut self, r: RouteRefresh) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let enhanced = up.session.both(&Capability::EnhancedRouteRefresh);
        if r.safi != SAFI_UNICAST || !matches!(r.afi, AFI_IPV4 | AFI_IPV6) || r.subtype != 0 {
            return;
        }
        let marker = |subtype| {
            Message::RouteRefresh(RouteRefresh {
                afi: r.afi,
                subtype,
                safi: SAFI_UNICAST,
            })
        };
        if enhanced {
            self.send(conn, &marker(1)).await;
        }
        let family: Vec<IpNet> = self
            .rib
            .keys()
            .filter(|p| p.addr().is_ipv4() == (r.afi == AFI_IPV4))
            .copied()
            .collect();
        self.advertise(&family).await;
        if enhanced {
            self.send(conn, &marker(2)).await;
        }
    }
}

/// Splits a withdraw-only UPDATE into pieces that each fit a 4096-octet message.
fn split_withdrawals(u: Update) -> Vec<Update> {
    const PER_MESSAGE: usize = 200;
    let mut out = Vec::new();
    for c in u.withdrawn.chunks(PER_MESSAGE) {
        out.push(Update {
            withdrawn: c.to_vec(),
            ..Update::default()
        });
    }
    for a in u.attrs {
        if let PathAttr::MpUnreach(m) = a {
            for c in m.withdrawn.chunks(PER_MESSAGE) {
                out.push(Update {
                    attrs: vec![PathAttr::MpUnreach(MpUnreach {
                        afi: m.afi,
                        withdrawn: c.to_vec(),
                    })],
                    ..Update::default()
                });
            }
        }
    }
    out
}
