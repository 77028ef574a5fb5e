//! Outbound connections through DR and tunnel VIPs (issue 23), as the control plane serves
//! them: the XDP program's keys for the answers to every outbound port, when the next drain
//! ends (a new version then carries the assignment the drain led to), and the API's view of
//! a VIP's shares with the nftables lines a backend applies to use its own.

use std::time::{Duration, Instant};

use crate::config::{Mode, Vip};
use crate::datapath::ReturnKey;
use crate::lb::Tables;
use crate::lb::hash::{addr_to_u128, u128_to_addr};
use crate::lb::outbound::{PortRange, VipOutbound};

/// Backend slots the XDP program's next-hop array holds; an owner past them has its answers
/// forwarded by the engine.
const XDP_BACKEND_SLOTS: u32 = crate::datapath::stateless::BACKEND_SLOTS as u32;

/// One steering key per outbound port, each with its owner at `now` (ns) for a DR VIP.
pub fn keys(tables: &Tables, now: u64) -> Vec<ReturnKey> {
    let mut out = Vec::new();
    let mut vips: Vec<&VipOutbound> = tables.outbound_vips().collect();
    vips.sort_by_key(|o| o.vip);
    for o in vips {
        let v = &tables.vips[o.vip as usize];
        let addr = u128_to_addr(v.address, v.v6);
        let proto = if v.proto == 17 {
            crate::config::Protocol::Udp
        } else {
            crate::config::Protocol::Tcp
        };
        let range = o.state.range();
        for port in range.first..=range.last {
            let owner = (v.mode == Mode::Dr)
                .then(|| o.state.forward_at(port, now))
                .flatten()
                .and_then(|a| tables.backend_slot(o.vip, addr_to_u128(*a), v.port))
                .filter(|&slot| slot < XDP_BACKEND_SLOTS)
                .map(|slot| slot as u16);
            out.push(ReturnKey::Outbound {
                addr,
                port,
                proto,
                vip: o.vip,
                owner,
            });
        }
    }
    out
}

/// When the first drain under way ends, as an instant (`now` and `now_ns` the same moment),
/// a millisecond late: converting between the two clocks is exact only to a few dozen ns,
/// and the version then must find the drain over.
pub fn drain_due(tables: &Tables, now: Instant, now_ns: u64) -> Option<Instant> {
    tables
        .outbound_vips()
        .filter_map(|o| o.state.drain_ends())
        .min()
        .map(|end| now + Duration::from_nanos(end.saturating_sub(now_ns)) + DUE_SLACK)
}

/// See [`drain_due`].
const DUE_SLACK: Duration = Duration::from_millis(1);

/// The API's view of VIP `v`'s outbound range at `now` (ns); `None` when it has none.
pub fn doc(tables: &Tables, slot: usize, v: &Vip, now: u64) -> Option<api::Outbound> {
    let ports = v.outbound?;
    let o = tables
        .outbound_for(addr_to_u128(v.address), v.protocol.number())
        .filter(|o| o.vip as usize == slot)?;
    let drain_ends_in = o
        .state
        .drain_ends()
        .filter(|&end| end > now)
        .map(|end| Duration::from_nanos(end - now).as_secs_f64());
    let backends = v
        .backends
        .iter()
        .map(|b| {
            let usable = o.state.usable_at(&b.address, now);
            api::OutboundShare {
                address: b.address.to_string(),
                ports: usable.map(|r| r.to_string()),
                snat: usable
                    .map(|r| snat_rules(v, b.address, r))
                    .unwrap_or_default(),
            }
        })
        .collect();
    Some(api::Outbound {
        vip: v.name.clone(),
        address: v.address.to_string(),
        protocol: v.protocol.name().to_string(),
        range: ports.range.to_string(),
        drain_seconds: ports.drain.as_secs_f64(),
        drain_ends_in_seconds: drain_ends_in,
        backends,
    })
}

/// The nftables commands backend `backend` runs to open its outbound connections from the
/// VIP address and its ports `r`: new connections from its own address leave with the VIP
/// as their source and a port of `r` (answers to the VIP's clients already carry the VIP
/// and are not touched). Each VIP has its own chain (`out_` and its name, which config
/// names allow in nft), so a backend of several outbound VIPs runs each one's lines without
/// undoing another's; the lines are run again whenever the share changes, and connections
/// already open keep the mapping they have. A backend that also talks to internal hosts
/// adds `ip daddr != ...` to the rule.
fn snat_rules(v: &Vip, backend: std::net::IpAddr, r: PortRange) -> Vec<String> {
    let (family, saddr) = if v.address.is_ipv4() {
        ("ip", "ip saddr")
    } else {
        ("ip6", "ip6 saddr")
    };
    let vip = if v.address.is_ipv4() {
        v.address.to_string()
    } else {
        format!("[{}]", v.address)
    };
    let (table, chain) = ("sluice_outbound", format!("out_{}", v.name));
    vec![
        format!("nft add table {family} {table}"),
        format!(
            "nft add chain {family} {table} {chain} '{{ type nat hook postrouting priority \
             srcnat; }}'"
        ),
        format!("nft flush chain {family} {table} {chain}"),
        format!(
            "nft add rule {family} {table} {chain} {saddr} {backend} meta l4proto {} snat to \
             {vip}:{r}",
            v.protocol.name()
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::control::prepare::{HealthSource, Inputs, NextHops, Prepared, prepare};

    fn config(backends: usize) -> Arc<Config> {
        let addrs: Vec<String> = (0..backends)
            .map(|i| format!("10.1.0.{}", 11 + i))
            .collect();
        let pairs: Vec<(&str, &str)> = addrs.iter().map(|a| (a.as_str(), "active")).collect();
        Arc::new(testkit::unit::outbound_dr(&pairs, "20s"))
    }

    fn version(file: &Arc<Config>, running: Option<&Tables>, now: Instant) -> Prepared {
        prepare(Inputs {
            running,
            file,
            overrides: &HashMap::new(),
            health: HealthSource::Verdicts(&HashMap::new()),
            next_hops: &NextHops::default(),
            host_addresses: &[],
            version: 1,
            now,
            now_ns: crate::datapath::instant_ns(now),
            resettle: false,
            ramps: &Default::default(),
            agents: &Default::default(),
            exec: &crate::lb::exec::Serial,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The owner slot the key of `port` carries.
    fn owner(keys: &[ReturnKey], port: u16) -> Option<u16> {
        keys.iter().find_map(|k| match *k {
            ReturnKey::Outbound { port: p, owner, .. } if p == port => owner,
            _ => None,
        })
    }

    #[test]
    fn a_reload_that_adds_a_backend_drains_and_asks_for_a_version_when_it_ends() {
        let t0 = Instant::now();
        let one = version(&config(2), None, t0);
        assert_eq!(one.ramp_due, None, "nothing drains in a first version");
        let now = t0 + Duration::from_secs(1);
        let two = version(&config(3), Some(&one.tables), now);
        let due = two.ramp_due.expect("a version when the drain ends");
        let late = due.duration_since(now);
        assert!(
            late >= Duration::from_secs(20) && late < Duration::from_millis(20_002),
            "{late:?}"
        );
        let c = config(3);
        let doc = doc(&two.tables, 0, &c.vips[0], crate::datapath::instant_ns(now)).expect("doc");
        let ports: Vec<Option<String>> = doc.backends.iter().map(|b| b.ports.clone()).collect();
        assert_eq!(
            ports,
            [Some("40000-40333".into()), Some("40500-40666".into()), None]
        );
        assert!(doc.drain_ends_in_seconds.is_some_and(|s| s > 19.0));
        // The keys: a moved port's answers go to its old owner while the drain runs.
        let during = keys(&two.tables, crate::datapath::instant_ns(now));
        assert_eq!(during.len(), 1000);
        assert_eq!(
            owner(&during, 40900),
            Some(1),
            "10.1.0.12 keeps 40900 for the drain"
        );
        // The version at the drain's end gives the moved ports to their new owners.
        let end = due;
        let three = version(&config(3), Some(&two.tables), end);
        assert_eq!(three.ramp_due, None);
        let after = keys(&three.tables, crate::datapath::instant_ns(end));
        assert_eq!(owner(&after, 40900), Some(2), "10.1.0.13's after the drain");
    }

    #[test]
    fn each_vip_has_its_own_chain_so_one_share_never_flushes_another() {
        let c = config(2);
        let mut udp = c.vips[0].clone();
        udp.name = "web-udp".into();
        let r = PortRange::new(40000, 40499).expect("range");
        let b = c.vips[0].backends[0].address;
        let tcp_lines = snat_rules(&c.vips[0], b, r);
        let udp_lines = snat_rules(&udp, b, r);
        assert_eq!(tcp_lines[2], "nft flush chain ip sluice_outbound out_web");
        assert_eq!(
            udp_lines[2],
            "nft flush chain ip sluice_outbound out_web-udp"
        );
        assert_eq!(
            tcp_lines[3],
            "nft add rule ip sluice_outbound out_web ip saddr 10.1.0.11 meta l4proto tcp snat \
             to 192.0.2.10:40000-40499"
        );
    }
}
