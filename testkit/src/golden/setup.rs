//! The one shared setup every fixture runs against: the VIPs of `golden.toml`, each backend's
//! next hop resolved (except `noneigh`'s), the router as the gateway, the appliance's own
//! addresses; and the values a row computes from it (a backend's MAC, a flow's hash, the
//! tunnel source and FullNAT port the engine will pick).

use std::net::IpAddr;

use config::{Config, HashFields};
use lb::conntrack::ConnTable;
use lb::hash::{FlowKey, addr_to_u128, u128_to_addr};
use lb::process::tunnel_source;
use lb::{NextHop, Tables, TunnelSource, WorkerState};
use wire::MacAddr;

use super::build::ip;
use super::{BACKENDS, NOW, OUR_MAC, ROUTER_MAC, UPLINK};

/// The golden VIPs as a configuration file: one VIP per mode, protocol and family, and the
/// ones the drop fixtures need. Plain text so the appliance's own unit tests can parse it
/// with `Config::from_toml_str` into their copy of the types.
pub const CONFIG_TOML: &str = include_str!("golden.toml");

/// The golden configuration, parsed and validated.
pub fn config() -> Config {
    Config::from_toml_str(CONFIG_TOML).unwrap_or_else(|e| panic!("golden.toml: {e}"))
}

/// The MAC of the backend in table slot `slot`: `02:00:00:00:01:<slot + 1>`.
pub fn backend_mac(slot: u32) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, slot as u8 + 1]
}

/// Tables, connection table and worker state of the golden setup: every backend except
/// `noneigh`'s has a next hop on [`BACKENDS`] with [`backend_mac`], the gateway is the
/// router on [`UPLINK`].
pub fn setup() -> (Tables, ConnTable, WorkerState) {
    let t = tables();
    let ct = fresh_conntrack(&t);
    (t, ct, WorkerState::new())
}

/// The golden tables alone (what [`setup`] returns first).
pub fn tables() -> Tables {
    tables_for(&config())
}

/// The tables of `c` (the golden configuration, changed) with the golden setup's next hops,
/// gateway, MTU and local addresses: what a bench needs to compare one VIP option on and off.
pub fn tables_for(c: &Config) -> Tables {
    let mut t = Tables::build(c, &|_, _| true, 1).expect("golden tables");
    for slot in 0..t.backends.len() as u32 {
        if t.vips[t.backends[slot as usize].vip as usize].name == "noneigh" {
            continue;
        }
        t.set_next_hop(
            slot,
            NextHop {
                ifindex: BACKENDS,
                src_mac: MacAddr(OUR_MAC),
                dst_mac: MacAddr(backend_mac(slot)),
            },
        );
    }
    let gw = NextHop {
        ifindex: UPLINK,
        src_mac: MacAddr(OUR_MAC),
        dst_mac: MacAddr(ROUTER_MAC),
    };
    t.set_gateway(false, gw);
    t.set_gateway(true, gw);
    // The backends' underlay is smaller than the clients' path (the tunnel MTU rows).
    t.set_mtu(BACKENDS, 1400);
    t.set_local_addresses(&[ip("10.0.0.254"), ip("2001:db8:a::fe")]);
    t.set_outbound(c, None, super::NOW);
    t
}

/// An empty connection table sized as the golden setup's.
pub fn fresh_conntrack(t: &Tables) -> ConnTable {
    ConnTable::new(4096, t.timeouts, t.backends.len(), 0, 1)
}

/// The MAC of the (only) backend of `vip`.
pub fn mac_of(t: &Tables, vip: &str) -> [u8; 6] {
    let v = t.vips.iter().position(|v| v.name == vip).expect("vip");
    backend_mac(t.vips[v].backends.start)
}

/// The 5-tuple hash of a flow, as the engine computes it.
pub fn flow_hash(src: &str, dst: &str, sport: u16, dport: u16, proto: u8) -> u32 {
    let s = ip(src);
    FlowKey {
        src: addr_to_u128(s),
        dst: addr_to_u128(ip(dst)),
        sport,
        dport,
        proto,
        v6: s.is_ipv6(),
        zone: 0,
    }
    .hash(HashFields::FiveTuple)
}

/// The 3-tuple hash (no ports) fragments are balanced by.
pub fn three_tuple_hash(src: &str, dst: &str, proto: u8) -> u32 {
    let s = ip(src);
    FlowKey {
        src: addr_to_u128(s),
        dst: addr_to_u128(ip(dst)),
        sport: 0,
        dport: 0,
        proto,
        v6: s.is_ipv6(),
        zone: 0,
    }
    .hash(HashFields::ThreeTuple)
}

/// The outer source address and UDP source port of a tunnel for a flow hash.
pub fn tunnel_src(v6: bool, hash: u32) -> (IpAddr, u16) {
    let (a, p) = tunnel_source(&TunnelSource::default(), v6, hash);
    (u128_to_addr(a, v6), p)
}

/// The FullNAT local port the first flow toward `backend:port` gets from a fresh table
/// (the allocator itself is tested in `conntrack`).
pub fn snat_port(proto: u8, backend: &str, port: u16, pool: &str, hash: u32) -> u16 {
    let mut ct = ConnTable::new(16, Default::default(), 1, 0, 1);
    let pool = [addr_to_u128(ip(pool))];
    ct.alloc_snat(proto, addr_to_u128(ip(backend)), port, &pool, hash, NOW)
        .expect("port")
        .1
}
