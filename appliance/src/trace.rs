//! `sluice trace`: explain where a flow would go, with the datapath's own code.
//!
//! Operators ask "which backend gets this client, and why?". The answer must come from the
//! exact functions the workers run (flow key, jhash, Maglev ring, LVS scheduler), not from
//! a re-implementation that could drift, so this module builds [`Tables`] from the config
//! and calls [`crate::lb::process::choose_backend`] as a new flow on a fresh worker would.
//! Health is not known offline: every backend is taken as healthy, operator states
//! (`drain`, `disabled`) and weights apply.
//!
//! A flow given with a VNI (`sluice trace --vni 100`) is one that arrives VXLAN-encapsulated
//! in that tenant's network: it is matched against the tenant VIPs of that VNI only, in the
//! tenant's connection-table zone, as the engine matches a decapsulated frame. Without a VNI
//! only the underlay's VIPs match: a tenant's address in the underlay is not a VIP.

mod acl;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::config::{Config, Mode, Protocol, Scheduler};
use crate::lb::DropReason;
use crate::lb::conntrack::ConnTable;
use crate::lb::egress::{Egress, NetState, RouteLookup, return_hash};
use crate::lb::hash::{FlowKey, addr_to_u128, zone_of};
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
    /// The VNI is wider than VXLAN's 24 bits.
    #[error("vni {0} is out of range: a VXLAN VNI is 0 to 16777215")]
    BadVni(u32),
    /// The tables could not be built from the config.
    #[error(transparent)]
    Tables(#[from] TableError),
    /// No VIP serves the destination (in the VNI's tenant network, with a VNI).
    #[error("{}", no_vip(.proto, .dst, .vni, .elsewhere))]
    NoVip {
        /// Protocol name.
        proto: &'static str,
        /// Destination.
        dst: SocketAddr,
        /// The VNI the flow was given with.
        vni: Option<u32>,
        /// The VIPs serving the destination in other address spaces (`t100 (vni 100)`,
        /// `web (underlay)`): what the operator may have meant.
        elsewhere: Vec<String>,
    },
}

/// [`TraceError::NoVip`]'s message: what else serves the address, if anything.
fn no_vip(proto: &str, dst: &SocketAddr, vni: &Option<u32>, elsewhere: &[String]) -> String {
    let mut s = format!("no vip serves {proto} {dst}");
    if let Some(n) = vni {
        s.push_str(&format!(" in vni {n}"));
    }
    s.push_str(": the datapath hands this flow to the kernel");
    if !elsewhere.is_empty() {
        let what = if vni.is_some() {
            "other networks' VIPs on this address"
        } else {
            "tenant VIPs on this address, matched with --vni only"
        };
        s.push_str(&format!(" ({what}: {})", elsewhere.join(", ")));
    }
    s
}

/// One backend as the trace shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceBackend {
    /// Address (a tenant VIP's backend: its address in the tenant's network).
    pub address: IpAddr,
    /// A tenant VIP's backend: the underlay address of its host, where its frames go.
    pub vtep: Option<IpAddr>,
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

impl TraceBackend {
    /// Where its frames are sent: its VTEP, else its address.
    pub fn underlay(&self) -> IpAddr {
        self.vtep.unwrap_or(self.address)
    }
}

impl fmt::Display for TraceBackend {
    /// `10.0.0.1:8080`, a tenant's `10.0.0.5:80 vtep 10.0.0.101`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.address, self.port)?;
        match self.vtep {
            Some(v) => write!(f, " vtep {v}"),
            None => Ok(()),
        }
    }
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
    /// The VXLAN VNI the flow arrived with: a tenant VIP's flow; `None` in the underlay.
    pub vni: Option<u32>,
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
    /// The VIP's `allow` and `deny`: the rule that decides the client ("DENIED ..." when
    /// the frame is dropped before any backend is chosen); `None` without lists.
    pub source: Option<String>,
    /// The lists deny the client: no backend would see the flow.
    pub denied: bool,
}

/// One egress decision of a traced flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEgress {
    /// "backend" or "reply".
    pub leg: &'static str,
    /// The destination routed.
    pub toward: IpAddr,
    /// The route, next hop and interface taken; `None` without a route.
    pub choice: Option<RouteLookup>,
    /// The interface's name.
    pub interface: Option<String>,
}

/// [`trace`], plus the egress the datapath would take with the kernel's routes and
/// neighbours `net` (what `sluice trace` reads through rtnetlink).
pub fn trace_with(
    config: &Config,
    flow: &str,
    vni: Option<u32>,
    net: Option<&NetState>,
) -> Result<TraceReport, TraceError> {
    let mut r = trace(config, flow, vni)?;
    if let (Some(net), Some(c)) = (net, r.chosen) {
        // A tenant backend's frames go to its VTEP, in the underlay.
        let (baddr, bport) = (r.backends[c].underlay(), r.backends[c].port);
        let e = Egress::build(net, &config.appliance.interfaces, &[baddr], None);
        let name = |c: &Option<RouteLookup>| {
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
                zone: zone_of(r.vni),
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

/// The VIP slot serving `dst` over `protocol`: with a VNI, that tenant's VIP (as the engine
/// matches a decapsulated VXLAN frame), else the underlay's.
fn lookup(
    config: &Config,
    tables: &Tables,
    protocol: Protocol,
    dst: SocketAddr,
    vni: Option<u32>,
) -> Result<u32, TraceError> {
    let (daddr, proto) = (addr_to_u128(dst.ip()), protocol.number());
    let found = match vni {
        Some(n) => tables.tenant_vip(zone_of(Some(n)), daddr, dst.port(), proto),
        None => tables.vip_lookup(daddr, dst.port(), proto),
    };
    found.ok_or_else(|| TraceError::NoVip {
        proto: protocol.name(),
        dst,
        vni,
        elsewhere: config
            .vips
            .iter()
            .filter(|v| {
                v.tenant_vni != vni
                    && v.address == dst.ip()
                    && v.protocol == protocol
                    && (v.port == dst.port() || v.port == 0)
            })
            .map(|v| match v.tenant_vni {
                Some(n) => format!("{} (vni {n})", v.name),
                None => format!("{} (underlay)", v.name),
            })
            .collect(),
    })
}

/// Traces `flow` through the tables `config` yields; `vni`: the flow arrives in VXLAN
/// with that VNI, for a tenant VIP.
pub fn trace(config: &Config, flow: &str, vni: Option<u32>) -> Result<TraceReport, TraceError> {
    let (protocol, src, dst) = parse_flow(flow)?;
    if let Some(n) = vni.filter(|&n| n > 0xff_ffff) {
        return Err(TraceError::BadVni(n));
    }
    let tables = Tables::build(config, &|_, _| true, 0)?;
    let proto = protocol.number();
    let vip = lookup(config, &tables, protocol, dst, vni)?;
    let v = &tables.vips[vip as usize];
    let key = FlowKey {
        src: addr_to_u128(src.ip()),
        dst: addr_to_u128(dst.ip()),
        sport: src.port(),
        dport: dst.port(),
        proto,
        v6: dst.is_ipv6(),
        zone: v.zone,
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
    let backends = trace_backends(&tables, config, vip, range.clone());
    let ring_slot = v.ring.slot_of(hash);
    let ring_backend = v.ring.lookup(hash).map(|p| p as usize);
    let chosen = choice.map(|(slot, _)| slot as usize - range.start);
    let reason = reason(choice, hash, v);
    let picked = choice.map(|(slot, _)| &tables.backends[slot as usize]);
    let (snat, tunnel_source) = rewrites(&tables, v, picked, proto, hash);
    let source = config
        .vips
        .get(vip as usize)
        .and_then(|c| acl::source_line(&c.acl, v, src.ip()));
    Ok(TraceReport {
        source,
        denied: !v.allows(key.src),
        protocol,
        src,
        dst,
        vni,
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
            ct.alloc_snat(proto, b.address, b.port, &v.snat_alloc, hash, 0)
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

/// The VIP's backends in pool order (the config's), with the ring slots each holds; a
/// tenant VIP's with their tenant address and VTEP (the tables hold the VTEP alone).
fn trace_backends(
    tables: &Tables,
    config: &Config,
    vip: u32,
    range: Range<usize>,
) -> Vec<TraceBackend> {
    let v = &tables.vips[vip as usize];
    let configured = config.vips.get(vip as usize).map(|c| c.backends.as_slice());
    let counts = v.ring.counts(range.len());
    range
        .enumerate()
        .map(|(i, slot)| {
            let b = &tables.backends[slot];
            let c = configured
                .and_then(|c| c.get(i))
                .filter(|c| c.underlay() == b.ip() && c.port == b.port);
            TraceBackend {
                address: c.map_or(b.ip(), |c| c.address),
                vtep: c.and_then(|c| c.vtep),
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
    /// The flow and VIP lines of the report.
    fn fmt_head(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "flow       {} {} -> {}{}",
            self.protocol.name(),
            self.src,
            self.dst,
            match self.vni {
                Some(n) => format!(" vni {n}"),
                None => String::new(),
            }
        )?;
        match self.vni {
            Some(n) => writeln!(
                f,
                "vip        {} ({} mode, tenant vni {n})",
                self.vip,
                self.mode.name()
            )?,
            None => writeln!(f, "vip        {} ({} mode)", self.vip, self.mode.name())?,
        }
        Ok(())
    }

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
        self.fmt_head(f)?;
        if let Some(s) = &self.source {
            writeln!(f, "source     {s}")?;
        }
        if self.denied {
            return writeln!(
                f,
                "verdict    dropped (denied): the flow reaches no backend"
            );
        }
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
                writeln!(
                    f,
                    "maglev     slot {s} of {} -> {}",
                    self.ring_size, self.backends[b]
                )?;
            }
            _ => writeln!(f, "maglev     ring empty")?,
        }
        match self.chosen {
            Some(c) => {
                let b = &self.backends[c];
                writeln!(f, "backend    {b} (weight {}, {})", b.weight, b.state)?;
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
                " {mark} {b} weight {} {}{} ring slots {}",
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

    use testkit::golden::config as golden_config;

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
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.10:80", None).unwrap();
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
        let r = trace(&c, "tcp 198.51.100.7:1 -> 192.0.2.10:80", None).unwrap();
        assert_eq!(r.chosen, Some(0));
        assert!(r.reason.starts_with("rr on a fresh worker"), "{}", r.reason);
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.20:443", None).unwrap();
        let snat = r.snat.unwrap();
        assert_eq!(snat.ip().to_string(), "10.1.0.1");
        assert!(snat.port() >= 1024);
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.40:80", None).unwrap();
        assert!(
            r.tunnel_source
                .unwrap()
                .0
                .to_string()
                .starts_with("172.16.")
        );
        let r = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.70:80", None).unwrap();
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
        let r = trace_with(&c, "tcp 198.51.100.7:1 -> 192.0.2.10:80", None, Some(&net)).unwrap();
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
        let e = trace(&c, "tcp 198.51.100.7:40000 -> 192.0.2.10:22", None).unwrap_err();
        assert!(
            e.to_string().contains("no vip serves tcp 192.0.2.10:22"),
            "{e}"
        );
    }

    /// Two tenants with a VIP on the same address and port, and their backends on the same
    /// tenant address behind different VTEPs.
    const TENANTS: &str = r#"
[appliance]
name = "trace"
interfaces = ["eth0"]
maglev_table_size = 251

[[vip]]
name = "t100"
address = "10.0.0.5"
port = 80
tenant_vni = 100
mode = "tunnel"
tunnel = "vxlan"
backend = [
  { address = "172.16.0.11", vtep = "192.0.2.101" },
  { address = "172.16.0.12", vtep = "192.0.2.102" },
]

[[vip]]
name = "t200"
address = "10.0.0.5"
port = 80
tenant_vni = 200
mode = "tunnel"
tunnel = "vxlan"
backend = [{ address = "172.16.0.11", vtep = "192.0.2.201" }]
"#;

    #[test]
    fn a_vni_picks_its_tenants_vip_and_backends() {
        let c = testkit::unit::parse(TENANTS);
        let flow = "tcp 198.51.100.7:40000 -> 10.0.0.5:80";
        let vtep = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        let r = trace(&c, flow, Some(100)).unwrap();
        assert_eq!((r.vip.as_str(), r.vni), ("t100", Some(100)));
        let vteps: Vec<_> = r.backends.iter().map(|b| b.vtep).collect();
        assert_eq!(vteps, [vtep("192.0.2.101"), vtep("192.0.2.102")]);
        let chosen = &r.backends[r.chosen.expect("a backend")];
        assert!(r.tunnel_source.is_some(), "a tunnel VIP");
        let text = r.to_string();
        for want in [
            "flow       tcp 198.51.100.7:40000 -> 10.0.0.5:80 vni 100\n",
            "vip        t100 (tunnel mode, tenant vni 100)\n",
            &format!("backend    {chosen} (weight 100, active)\n"),
            " 172.16.0.12:80 vtep 192.0.2.102 weight 100 active ring slots",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert!(chosen.to_string().contains(" vtep 192.0.2.10"), "{chosen}");

        let r = trace(&c, flow, Some(200)).unwrap();
        assert_eq!(
            (r.vip.as_str(), r.vni, r.chosen),
            ("t200", Some(200), Some(0))
        );
        assert_eq!(r.backends.len(), 1);
        let b = &r.backends[0];
        assert_eq!(
            (b.address, b.vtep),
            ("172.16.0.11".parse().unwrap(), vtep("192.0.2.201"))
        );
        assert!(
            r.to_string()
                .contains("backend    172.16.0.11:80 vtep 192.0.2.201 (weight")
        );

        // The frames toward the backend are routed to its VTEP, not its tenant address.
        let mut net = NetState::default();
        net.links.insert(
            2,
            crate::lb::egress::Link {
                name: "eth0".into(),
                mac: Some(wire::MacAddr([2, 0, 0, 0, 0, 1])),
                mtu: 1500,
            },
        );
        net.routes = vec![crate::lb::egress::Route {
            dst: "0.0.0.0".parse().unwrap(),
            len: 0,
            metric: 0,
            hops: vec![crate::lb::egress::RouteHop {
                ifindex: 2,
                gateway: Some("192.0.2.254".parse().unwrap()),
                weight: 1,
            }],
        }];
        let r = trace_with(&c, flow, Some(200), Some(&net)).unwrap();
        assert_eq!(r.egress.len(), 1, "tunnel: no reply leg");
        assert_eq!(
            (r.egress[0].leg, r.egress[0].toward),
            ("backend", "192.0.2.201".parse().unwrap())
        );

        // Without a VNI the tenants' address is no VIP in the underlay; the error names them.
        let e = trace(&c, flow, None).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, TraceError::NoVip { vni: None, .. })
                && msg.contains("no vip serves tcp 10.0.0.5:80: the datapath hands")
                && msg.contains("t100 (vni 100), t200 (vni 200)"),
            "{msg}"
        );
        let e = trace(&c, flow, Some(300)).unwrap_err().to_string();
        assert!(
            e.contains("no vip serves tcp 10.0.0.5:80 in vni 300"),
            "{e}"
        );
        assert!(e.contains("t100 (vni 100), t200 (vni 200)"), "{e}");
        let e = trace(&c, flow, Some(1 << 24)).unwrap_err();
        assert!(matches!(e, TraceError::BadVni(_)), "{e}");
    }

    /// An underlay VIP on a tenant's address serves the flow without a VNI, and only then.
    #[test]
    fn the_underlay_vip_on_a_tenant_address_needs_no_vni() {
        let text = format!(
            "{TENANTS}\n[[vip]]\nname = \"u\"\naddress = \"10.0.0.5\"\nport = 80\n\
             mode = \"nat\"\nbackend = [{{ address = \"10.1.0.1\", port = 8080 }}]\n"
        );
        let c = testkit::unit::parse(&text);
        let flow = "tcp 198.51.100.7:40000 -> 10.0.0.5:80";
        let r = trace(&c, flow, None).unwrap();
        assert_eq!((r.vip.as_str(), r.vni), ("u", None));
        assert_eq!(r.backends[0].vtep, None);
        assert!(
            r.to_string()
                .contains("backend    10.1.0.1:8080 (weight 100, active)")
        );
        assert_eq!(trace(&c, flow, Some(100)).unwrap().vip, "t100");
        let e = trace(&c, flow, Some(7)).unwrap_err().to_string();
        assert!(
            e.contains("t100 (vni 100), t200 (vni 200), u (underlay)"),
            "{e}"
        );
    }

    #[test]
    fn names_the_rule_that_decides_the_source() {
        let c = golden_config();
        let line = |flow: &str| {
            let r = trace(&c, flow, None).unwrap();
            (r.source.clone(), r.denied, r.to_string())
        };
        let (s, denied, text) = line("tcp 198.51.100.130:40000 -> 192.0.2.150:80");
        assert_eq!(
            s.as_deref(),
            Some("DENIED by deny 198.51.100.128/25 (deny)")
        );
        assert!(denied);
        assert!(text.contains("verdict    dropped (denied)"), "{text}");
        let (s, denied, _) = line("tcp 198.51.100.200:40000 -> 192.0.2.150:80");
        assert_eq!(
            s.as_deref(),
            Some("allowed by allow 198.51.100.192/26 (allow)")
        );
        assert!(!denied);
        let (s, _, _) = line("tcp 203.0.113.9:40000 -> 192.0.2.150:80");
        assert_eq!(
            s.as_deref(),
            Some("allowed by allow 203.0.113.0/24 (partners)")
        );
        let (s, denied, _) = line("tcp 100.64.0.1:40000 -> 192.0.2.150:80");
        assert_eq!(s.as_deref(), Some("DENIED: no allow rule matches"));
        assert!(denied);
        let (s, _, _) = line("tcp 198.51.100.7:40000 -> 192.0.2.10:80");
        assert_eq!(s, None, "a VIP without lists says nothing");
    }
}
