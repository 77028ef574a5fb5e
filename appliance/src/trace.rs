//! `sluice trace`: explain where a flow would go, with the datapath's own code.
//!
//! Operators ask "which backend gets this client, and why?". The answer must come from the
//! exact functions the workers run (flow key, jhash, Maglev ring, LVS scheduler), not from
//! a re-implementation that could drift, so this module builds [`Tables`] from the config
//! and calls [`crate::lb::process::choose_backend`] as a new flow on a fresh worker would.
//! Health is not known offline: every backend is taken as healthy, operator states
//! (`drain`, `disabled`) and weights apply.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::config::{Config, Mode, Protocol, Scheduler};
use crate::lb::DropReason;
use crate::lb::conntrack::ConnTable;
use crate::lb::egress::{Choice as EgressChoice, Egress, NetState, return_hash};
use crate::lb::hash::{FlowKey, addr_to_u128};
use crate::lb::process::{Choice, Load, choose_backend, tunnel_source};
use crate::lb::sched::{self, SchedState};
use crate::lb::tables::{TableError, Tables, VipEntry};

/// Why a trace could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The flow string does not parse.
    #[error(
        "cannot read flow {flow:?}: {why} (expected e.g. \"tcp 198.51.100.7:40000 -> 192.0.2.10:80\" \
         or \"udp [2001:db8::7]:5000 -> [2001:db8::10]:53\")"
    )]
    BadFlow {
        /// The input.
        flow: String,
        /// What is wrong with it.
        why: String,
    },
    /// The tables could not be built from the config.
    #[error(transparent)]
    Tables(#[from] TableError),
    /// No VIP serves the destination.
    #[error("no vip serves {proto} {dst}: the datapath hands this flow to the kernel")]
    NoVip {
        /// Protocol name.
        proto: &'static str,
        /// Destination.
        dst: SocketAddr,
    },
}

/// One backend as the trace shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceBackend {
    /// Address.
    pub address: IpAddr,
    /// Port after NAT.
    pub port: u16,
    /// Weight.
    pub weight: u32,
    /// Operator state name.
    pub state: &'static str,
    /// Takes new flows.
    pub eligible: bool,
    /// Maglev ring slots held.
    pub ring_slots: u32,
}

/// The answer of [`trace`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceReport {
    /// Protocol.
    pub protocol: Protocol,
    /// Client.
    pub src: SocketAddr,
    /// Destination (the VIP).
    pub dst: SocketAddr,
    /// Matched VIP name.
    pub vip: String,
    /// Its mode name.
    pub mode: Mode,
    /// Its scheduler.
    pub scheduler: Scheduler,
    /// Hash fields name.
    pub hash_fields: &'static str,
    /// The jhash key words (see `lb::hash`).
    pub key_words: Vec<u32>,
    /// The flow hash.
    pub hash: u32,
    /// Maglev ring size.
    pub ring_size: usize,
    /// The ring slot `hash % M`, `None` if the ring is empty.
    pub ring_slot: Option<usize>,
    /// Backend the ring slot holds (also the stateless fallback for LVS schedulers).
    pub ring_backend: Option<usize>,
    /// The chosen backend's index in `backends`, `None` when nothing is eligible.
    pub chosen: Option<usize>,
    /// Why that backend.
    pub reason: String,
    /// The VIP's backends.
    pub backends: Vec<TraceBackend>,
    /// FullNAT local address and port a fresh worker would use.
    pub snat: Option<SocketAddr>,
    /// Tunnel outer source address and (GUE/VXLAN) UDP source port.
    pub tunnel_source: Option<(IpAddr, u16)>,
    /// Where the frames leave (toward the backend, and replies toward the client), when
    /// the kernel's routes were read ([`trace_with`]).
    pub egress: Vec<TraceEgress>,
    /// `sh` / `dh`: the fields their bucket hash reads and the bucket (of 256) it gives.
    pub lvs_hash: Option<(&'static str, usize)>,
}

/// One egress decision of a traced flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEgress {
    /// "backend" or "reply".
    pub leg: &'static str,
    /// The destination routed.
    pub toward: IpAddr,
    /// The route, next hop and interface taken; `None` without a route.
    pub choice: Option<EgressChoice>,
    /// The interface's name.
    pub interface: Option<String>,
}

/// [`trace`], plus the egress the datapath would take with the kernel's routes and
/// neighbours `net` (what `sluice trace` reads through rtnetlink).
pub fn trace_with(
    config: &Config,
    flow: &str,
    net: Option<&NetState>,
) -> Result<TraceReport, TraceError> {
    let mut r = trace(config, flow)?;
    if let (Some(net), Some(c)) = (net, r.chosen) {
        let (baddr, bport) = (r.backends[c].address, r.backends[c].port);
        let e = Egress::build(net, &config.appliance.interfaces, &[baddr], None);
        let name = |c: &Option<EgressChoice>| {
            c.and_then(|c| net.links.get(&c.ifindex).map(|l| l.name.clone()))
        };
        let to_backend = e.explain(baddr, 0);
        r.egress.push(TraceEgress {
            leg: "backend",
            toward: baddr,
            interface: name(&to_backend),
            choice: to_backend,
        });
        if matches!(r.mode, Mode::Nat | Mode::FullNat) {
            let to = r.snat.unwrap_or(r.src);
            let key = FlowKey {
                src: addr_to_u128(baddr),
                dst: addr_to_u128(to.ip()),
                sport: bport,
                dport: to.port(),
                proto: r.protocol.number(),
                v6: baddr.is_ipv6(),
                zone: 0,
            };
            let reply = e.explain(r.src.ip(), return_hash(&key));
            r.egress.push(TraceEgress {
                leg: "reply",
                toward: r.src.ip(),
                interface: name(&reply),
                choice: reply,
            });
        }
    }
    Ok(r)
}

/// The kernel's interfaces, routes and neighbours, read now through rtnetlink.
pub fn kernel_routes() -> Result<NetState, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let r = crate::datapath::neigh::Resolver::new().map_err(|e| e.to_string())?;
        r.snapshot().await.map_err(|e| e.to_string())
    })
}

fn parse_endpoint(s: &str, flow: &str) -> Result<SocketAddr, TraceError> {
    s.trim().parse().map_err(|_| TraceError::BadFlow {
        flow: flow.into(),
        why: format!("{:?} is not address:port", s.trim()),
    })
}

/// Parses `"PROTO SRC:PORT -> DST:PORT"`.
pub fn parse_flow(flow: &str) -> Result<(Protocol, SocketAddr, SocketAddr), TraceError> {
    let bad = |why: &str| TraceError::BadFlow {
        flow: flow.into(),
        why: why.into(),
    };
    let flow_t = flow.trim();
    let (proto, rest) = flow_t
        .split_once(char::is_whitespace)
        .ok_or_else(|| bad("missing protocol"))?;
    let protocol = match proto.to_ascii_lowercase().as_str() {
        "tcp" => Protocol::Tcp,
        "udp" => Protocol::Udp,
        other => return Err(bad(&format!("protocol {other:?} is not tcp or udp"))),
    };
    let (src, dst) = rest.split_once("->").ok_or_else(|| bad("missing \"->\""))?;
    let src = parse_endpoint(src, flow)?;
    let dst = parse_endpoint(dst, flow)?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(bad("source and destination families differ"));
    }
    Ok((protocol, src, dst))
}

/// Traces `flow` through the tables `config` yields.
pub fn trace(config: &Config, flow: &str) -> Result<TraceReport, TraceError> {
    let (protocol, src, dst) = parse_flow(flow)?;
    let tables = Tables::build(config, &|_, _| true, 0)?;
    let proto = protocol.number();
    let daddr = addr_to_u128(dst.ip());
    let vip = tables
        .vip_lookup(daddr, dst.port(), proto)
        .ok_or(TraceError::NoVip {
            proto: protocol.name(),
            dst,
        })?;
    let v = &tables.vips[vip as usize];
    let key = FlowKey {
        src: addr_to_u128(src.ip()),
        dst: daddr,
        sport: src.port(),
        dport: dst.port(),
        proto,
        v6: dst.is_ipv6(),
        zone: 0,
    };
    let (words, n) = key.restricted(v.hash).words();
    let hash = key.hash(v.hash);
    let range = tables.pool_range(vip);
    let zeros = vec![0u32; tables.backends.len()];
    let mut st = SchedState::new(v.scheduler);
    let choice = choose_backend(
        &tables,
        vip,
        &key,
        hash,
        Load {
            active: &zeros,
            inactive: &zeros,
        },
        &mut st,
        0,
    );
    let backends = trace_backends(&tables, v, range.clone());
    let ring_slot = v.ring.slot_of(hash);
    let ring_backend = v.ring.lookup(hash).map(|p| p as usize);
    let chosen = choice.map(|(slot, _)| slot as usize - range.start);
    let reason = reason(choice, hash, v);
    let picked = choice.map(|(slot, _)| &tables.backends[slot as usize]);
    let (snat, tunnel_source) = rewrites(&tables, v, picked, proto, hash);
    Ok(TraceReport {
        protocol,
        src,
        dst,
        vip: v.name.clone(),
        mode: v.mode,
        scheduler: v.scheduler,
        hash_fields: v.hash.name(),
        key_words: words[..n].to_vec(),
        hash,
        ring_size: v.ring.len(),
        ring_slot,
        ring_backend,
        chosen,
        reason,
        backends,
        snat,
        tunnel_source,
        egress: Vec::new(),
        lvs_hash: sched::hashed_fields(v.scheduler, v.hash_ports).zip(sched::bucket_of(
            v.scheduler,
            &key,
            v.hash_ports,
        )),
    })
}

/// The FullNAT local address and the tunnel outer source a fresh worker would give the
/// flow toward `picked`.
fn rewrites(
    tables: &Tables,
    v: &VipEntry,
    picked: Option<&crate::lb::tables::BackendEntry>,
    proto: u8,
    hash: u32,
) -> (Option<SocketAddr>, Option<(IpAddr, u16)>) {
    let snat = match (v.mode, picked) {
        (Mode::FullNat, Some(b)) => {
            let mut ct = ConnTable::new(1, tables.timeouts, 0, 0, 1);
            ct.alloc_snat(proto, b.address, b.port, &v.snat, hash, 0)
                .map(|(a, p)| SocketAddr::new(crate::lb::hash::u128_to_addr(a, v.v6), p))
        }
        _ => None,
    };
    let tunnel_source = match (v.mode, picked) {
        (Mode::Tunnel(_), Some(b)) => {
            let (a, p) = tunnel_source(&tables.tunnel_source, b.v6, hash);
            Some((crate::lb::hash::u128_to_addr(a, b.v6), p))
        }
        _ => None,
    };
    (snat, tunnel_source)
}

/// The VIP's backends in pool order, with the ring slots each holds.
fn trace_backends(tables: &Tables, v: &VipEntry, range: Range<usize>) -> Vec<TraceBackend> {
    let counts = v.ring.counts(range.len());
    range
        .enumerate()
        .map(|(i, slot)| {
            let b = &tables.backends[slot];
            TraceBackend {
                address: b.ip(),
                port: b.port,
                weight: b.weight,
                state: b.state.name(),
                eligible: tables.eligible[slot],
                ring_slots: counts[i],
            }
        })
        .collect()
}

/// Why [`choose_backend`] answered `choice`, in the operator's words.
fn reason(choice: Option<(u32, Choice)>, hash: u32, v: &VipEntry) -> String {
    match choice {
        None => {
            "no backend is eligible (all drained, disabled or weight 0): new flows are dropped \
                 as no_backend"
                .to_string()
        }
        Some((_, Choice::Maglev { slot })) => format!(
            "maglev: slot {slot} = hash {hash:#010x} mod {} holds this backend",
            v.ring.len()
        ),
        Some((_, Choice::Scheduler(s))) => format!(
            "{} on a fresh worker (no connections counted yet); with live traffic the choice \
             follows the worker's connection counts. If the connection table is full the flow \
             falls back to the maglev slot.",
            s.name()
        ),
    }
}

impl TraceReport {
    /// The `egress` lines of the report.
    fn fmt_egress(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.egress {
            match &e.choice {
                None => writeln!(f, "egress     {} {}: no route (no_route)", e.leg, e.toward)?,
                Some(c) => {
                    let how = match c.result {
                        Ok(n) => format!("{} -> {}", n.src_mac, n.dst_mac),
                        Err(m) => format!("dropped as {}", DropReason::from(m).name()),
                    };
                    writeln!(
                        f,
                        "egress     {} {} via {}/{} next hop {} dev {}: {how}",
                        e.leg,
                        e.toward,
                        c.prefix.0,
                        c.prefix.1,
                        c.next_hop,
                        e.interface.as_deref().unwrap_or("?"),
                    )?
                }
            }
        }
        Ok(())
    }
}

impl fmt::Display for TraceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "flow       {} {} -> {}",
            self.protocol.name(),
            self.src,
            self.dst
        )?;
        writeln!(f, "vip        {} ({} mode)", self.vip, self.mode.name())?;
        writeln!(f, "scheduler  {}", self.scheduler.name())?;
        let words: Vec<String> = self.key_words.iter().map(|w| format!("{w:08x}")).collect();
        writeln!(
            f,
            "hash       {} jhash2 [{}] = {:#010x}",
            self.hash_fields,
            words.join(" "),
            self.hash
        )?;
        if let Some((fields, bucket)) = self.lvs_hash {
            writeln!(
                f,
                "{:<10} {fields} -> bucket {bucket} of {}",
                self.scheduler.name(),
                sched::BUCKETS
            )?;
        }
        match (self.ring_slot, self.ring_backend) {
            (Some(s), Some(b)) => {
                let be = &self.backends[b];
                writeln!(
                    f,
                    "maglev     slot {s} of {} -> {}:{}",
                    self.ring_size, be.address, be.port
                )?;
            }
            _ => writeln!(f, "maglev     ring empty")?,
        }
        match self.chosen {
            Some(c) => {
                let b = &self.backends[c];
                writeln!(
                    f,
                    "backend    {}:{} (weight {}, {})",
                    b.address, b.port, b.weight, b.state
                )?;
            }
            None => writeln!(f, "backend    none")?,
        }
        writeln!(f, "why        {}", self.reason)?;
        if let Some(s) = self.snat {
            writeln!(f, "snat       {s}")?;
        }
        if let Some((a, p)) = self.tunnel_source {
            writeln!(f, "outer src  {a} (udp source port {p} for gue/vxlan)")?;
        }
        self.fmt_egress(f)?;
        writeln!(f, "pool")?;
        for (i, b) in self.backends.iter().enumerate() {
            let mark = if Some(i) == self.chosen { "*" } else { " " };
            writeln!(
                f,
                " {mark} {}:{} weight {} {}{} ring slots {}",
                b.address,
                b.port,
                b.weight,
                b.state,
                if b.eligible { "" } else { " (not eligible)" },
                b.ring_slots
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::hash::FlowKey;

    /// The golden VIPs (testkit's `golden.toml`), parsed into this crate's `Config`.
    fn golden_config() -> Config {
        Config::from_toml_str(testkit::golden::CONFIG_TOML).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parses_flows() {
        let (p, s, d) = parse_flow("tcp 198.51.100.7:40000 -> 192.0.2.10:80").unwrap();
        assert_eq!(p, Protocol::Tcp);
        assert_eq!(s.port(), 40000);
        assert_eq!(d.to_string(), "192.0.2.10:80");
        let (p, _, d) = parse_flow("UDP [2001:db8::7]:5000->[2001:db8::10]:53").unwrap();
        assert_eq!(p, Protocol::Udp);
        assert!(d.is_ipv6());
        for bad in [
            "",
            "icmp 1.2.3.4:1 -> 5.6.7.8:2",
            "tcp 1.2.3.4:1 5.6.7.8:2",
            "tcp 1.2.3.4 -> 5.6.7.8:2",
            "tcp 1.2.3.4:1 -> [2001:db8::1]:2",
        ] {
            let e = parse_flow(bad).unwrap_err();
            assert!(e.to_string().contains("expected e.g."), "{e}");
        }
    }

    #[test]
    fn traces_a_maglev_flow_like_the_datapath() {
        let mut c = golden_config();
        // Give nat4 three backends so the choice is not trivial.
        let b = c.vips[0].backends[0].clone();
        for last in [2u8, 3] {
            let mut x = b.clone();
            x.address = IpAddr::from([10, 0, 1, last]);
            c.vips[0].backends.push(x);
        }
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.10:80").unwrap();
        assert_eq!(r.vip, "nat4");
        let key = FlowKey {
            src: addr_to_u128("198.51.100.7".parse().unwrap()),
            dst: addr_to_u128("192.0.2.10".parse().unwrap()),
            sport: 40000,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        };
        assert_eq!(r.hash, key.hash(crate::config::HashFields::FiveTuple));
        assert_eq!(r.ring_slot, Some(r.hash as usize % 65537));
        assert_eq!(r.chosen, r.ring_backend);
        let tables = Tables::build(&c, &|_, _| true, 0).unwrap();
        let slot = tables.vips[0].ring.lookup(r.hash).unwrap() as usize;
        assert_eq!(r.chosen, Some(slot));
        let text = r.to_string();
        assert!(text.contains("vip        nat4 (nat mode)"), "{text}");
        assert!(text.contains(&format!("{:#010x}", r.hash)), "{text}");
        assert!(text.contains("maglev     slot"), "{text}");
        assert_eq!(r.backends.iter().map(|b| b.ring_slots).sum::<u32>(), 65537);
    }

    #[test]
    fn explains_schedulers_snat_tunnels_and_misses() {
        let mut c = golden_config();
        c.vips[0].scheduler = Scheduler::Rr;
        let r = trace(&c, "tcp 198.51.100.7:1 -> 192.0.2.10:80").unwrap();
        assert_eq!(r.chosen, Some(0));
        assert!(r.reason.starts_with("rr on a fresh worker"), "{}", r.reason);
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.20:443").unwrap();
        let snat = r.snat.unwrap();
        assert_eq!(snat.ip().to_string(), "10.1.0.1");
        assert!(snat.port() >= 1024);
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.40:80").unwrap();
        assert!(
            r.tunnel_source
                .unwrap()
                .0
                .to_string()
                .starts_with("172.16.")
        );
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.70:80").unwrap();
        assert_eq!(r.chosen, None);
        assert!(r.egress.is_empty(), "no routes read");
        assert!(r.to_string().contains("backend    none"));
        // With routes: the backend on-link, the reply through a router without a MAC yet.
        let mut net = NetState::default();
        let mac = wire::MacAddr([2, 0, 0, 0, 0, 1]);
        let link = |name: &str| crate::lb::egress::Link {
            name: name.into(),
            mac: Some(mac),
            mtu: 1500,
        };
        net.links.insert(2, link(&c.appliance.interfaces[0]));
        let hop = |gw: Option<&str>| crate::lb::egress::RouteHop {
            ifindex: 2,
            gateway: gw.map(|g| g.parse().unwrap()),
            weight: 1,
        };
        net.routes = vec![
            crate::lb::egress::Route {
                dst: "10.0.0.0".parse().unwrap(),
                len: 16,
                metric: 0,
                hops: vec![hop(None)],
            },
            crate::lb::egress::Route {
                dst: "0.0.0.0".parse().unwrap(),
                len: 0,
                metric: 0,
                hops: vec![hop(Some("10.1.0.254"))],
            },
        ];
        let r = trace_with(&c, "tcp 198.51.100.7:1 -> 192.0.2.10:80", Some(&net)).unwrap();
        let text = r.to_string();
        assert_eq!(r.egress.len(), 2, "{text}");
        assert!(
            text.contains("egress     reply 198.51.100.7 via 0.0.0.0/0 next hop 10.1.0.254")
                && text.contains("dropped as no_neighbor"),
            "{text}"
        );
        assert!(
            text.contains("egress     backend 10.0.0.1 via 10.0.0.0/16 next hop 10.0.0.1"),
            "{text}"
        );
        let e = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.10:22").unwrap_err();
        assert!(
            e.to_string().contains("no vip serves tcp 192.0.2.10:22"),
            "{e}"
        );
    }
}
