//! Next hops from the kernel: the MAC of every backend and of the default gateways, asked
//! through rtnetlink before a change is prepared (see [`super::prepare::NextHops`]).

use std::net::IpAddr;

use tracing::warn;

use super::prepare::NextHops;
use crate::config::Config;
use crate::datapath::neigh::{self, Resolver};
use crate::lb;

fn next_hop(n: &neigh::Neighbor) -> lb::NextHop {
    lb::NextHop {
        ifindex: n.ifindex,
        src_mac: wire::ethernet::MacAddr(n.src_mac),
        dst_mac: wire::ethernet::MacAddr(n.dst_mac),
    }
}

/// Default gateways from the kernel's routing tables (procfs), for return traffic to
/// clients: `[v4, v6]`.
fn default_gateways() -> [Option<IpAddr>; 2] {
    let mut out = [None, None];
    if let Ok(t) = std::fs::read_to_string("/proc/net/route") {
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Destination 0.0.0.0: the default route; the gateway is little-endian hex.
            if f.len() > 2
                && f[1] == "00000000"
                && let Ok(g) = u32::from_str_radix(f[2], 16)
            {
                out[0] = Some(IpAddr::V4(std::net::Ipv4Addr::from(g.swap_bytes())));
                break;
            }
        }
    }
    if let Ok(t) = std::fs::read_to_string("/proc/net/ipv6_route") {
        for line in t.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            // dst, dst_len, src, src_len, next hop, metric, refcnt, use, flags, device
            let zero = "0".repeat(32);
            if f.len() >= 10
                && f[0] == zero
                && f[1] == "00"
                && f[4] != zero
                && let Ok(g) = u128::from_str_radix(f[4], 16)
            {
                out[1] = Some(IpAddr::V6(std::net::Ipv6Addr::from(g)));
                break;
            }
        }
    }
    out
}

/// Resolves every backend of `config` and the default gateways into `hops`; returns whether
/// anything changed. A backend that does not resolve loses its entry; a gateway keeps its
/// last one.
pub async fn resolve(resolver: &Resolver, config: &Config, hops: &mut NextHops) -> bool {
    let mut changed = false;
    let mut wanted: Vec<IpAddr> = config
        .vips
        .iter()
        .flat_map(|v| v.backends.iter().map(|b| b.address))
        .collect();
    wanted.sort();
    wanted.dedup();
    for ip in wanted {
        match resolver.resolve(ip).await {
            Ok(n) => {
                let n = next_hop(&n);
                if hops.backends.insert(ip, n) != Some(n) {
                    changed = true;
                }
            }
            Err(e) => {
                if hops.backends.remove(&ip).is_some() {
                    changed = true;
                }
                warn!(backend = %ip, "neighbour unresolved: {e}");
            }
        }
    }
    for (i, gw) in default_gateways().into_iter().enumerate() {
        let Some(gw) = gw else { continue };
        match resolver.resolve(gw).await {
            Ok(n) => {
                let n = Some(next_hop(&n));
                if hops.gateways[i] != n {
                    hops.gateways[i] = n;
                    changed = true;
                }
            }
            Err(e) => warn!(gateway = %gw, "gateway unresolved: {e}"),
        }
    }
    changed
}

/// Whether `config` has a backend without a next hop.
pub fn missing(config: &Config, hops: &NextHops) -> bool {
    config
        .vips
        .iter()
        .flat_map(|v| &v.backends)
        .any(|b| !hops.backends.contains_key(&b.address))
}

/// Whether a kernel notification may change the next hops: a neighbour entry with a MAC
/// none of them has, a neighbour entry gone, or any route change.
pub fn matters(change: &neigh::NetChange, hops: &NextHops) -> bool {
    let known = |mac: &[u8; 6]| {
        hops.backends
            .values()
            .chain(hops.gateways.iter().flatten())
            .any(|n| n.dst_mac.0 == *mac)
    };
    match change {
        neigh::NetChange::Neighbour { mac: Some(mac), .. } => !known(mac),
        neigh::NetChange::Neighbour { mac: None, .. } | neigh::NetChange::Route { .. } => true,
    }
}
