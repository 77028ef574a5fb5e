//! `[[vip]]` and its `[[vip.backend]]`s: address, port and protocol, the forwarding mode
//! with its keys, scheduling, the health check it refers to (and whether DR and tunnel
//! backends must also answer for the VIP), and the backends.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::bgp::communities;
use super::{check_name, family, lvs};
use crate::error::ConfigErrors;
use crate::model::{
    Appliance, Backend, BackendState, Encap, HashFields, Mode, Protocol, Scheduler, Vip,
};
use crate::reader::{Table, element_path};

pub(super) fn vips(
    top: &mut Table<'_>,
    checks: &HashMap<String, &'static str>,
    lists: &[crate::acl::PrefixList],
    appliance: Option<&Appliance>,
    errs: &mut ConfigErrors,
) -> Vec<Vip> {
    let raw = top.tables("vip", errs);
    // A fleet member's VIPs come from the fleet (see fleet.rs).
    if raw.is_empty() && !top.has("vip") && !top.has("fleet") {
        errs.push("vip", "missing: at least one [[vip]] is required");
    }
    let mut out: Vec<Vip> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut placed = super::placed::Placed::default();
    for (i, map) in raw {
        let path = element_path("", "vip", i, map);
        let mut t = Table::new(path.clone(), map);
        let vip = vip(&mut t, checks, lists, appliance, errs);
        t.finish(errs);
        let Some(vip) = vip else { continue };
        if names.insert(vip.name.clone(), i).is_some() {
            errs.push(path, format!("vip name {:?} used twice", vip.name));
            continue;
        }
        if let Some(why) = placed.clash(&out, &vip) {
            errs.push(path, why);
            continue;
        }
        placed.add(out.len(), &vip);
        out.push(vip);
    }
    out
}

fn vip(
    t: &mut Table<'_>,
    checks: &HashMap<String, &'static str>,
    lists: &[crate::acl::PrefixList],
    appliance: Option<&Appliance>,
    errs: &mut ConfigErrors,
) -> Option<Vip> {
    let name = t.req_string("name", errs);
    check_name(t, name.as_ref(), errs);
    let address = address(t, errs);
    let port = t.req_int("port", 0..=65535, errs).map(|n| n as u16);
    let protocol = protocol(t, errs);
    let (mode_name, mode) = mode(t, errs);
    let tenant_vni = super::tenant::tenant_vni(t, mode, errs);
    let mode = super::tenant::backend_vni(t, mode, tenant_vni);
    all_ports(t, port, mode, mode_name, errs);
    let scheduler = t
        .choice("scheduler", &Scheduler::ALL, errs)
        .unwrap_or(Scheduler::Maglev);
    let hash = hash(t, scheduler, errs);
    let (health_checks, health_combine) = super::policy::health(t, checks, errs);
    let health_via_vip = via_vip(t, mode, protocol, &health_checks, checks, errs);
    let snat = snat(t, mode, mode_name, address, errs);
    let client_address = super::client_address::client_address(t, mode, protocol, errs);
    let syn_proxy = super::syn_proxy::syn_proxy(t, mode, protocol, errs);
    let comms = communities(t, errs);
    let facts = lvs::VipFacts {
        scheduler,
        protocol,
        mode,
        address,
    };
    let lvs = lvs::vip_keys(t, &facts, errs);
    let outbound = super::outbound::outbound(t, port, mode, errs);
    let tenant = t.has("tenant_vni"); // its backends need their VTEP even if it is refused
    let (backends, quic_lb) = backends(t, port, &facts, lvs.udp_one_packet, tenant, checks, errs);
    let maglev_table_size = super::scale::vip_table_size(t, appliance, backends.len(), errs);
    let (inhibit_on_failure, fallback, announce) = super::policy::vip(t, &backends, errs);
    Some(Vip {
        acl: super::acl::vip_acl(t, lists, address, errs),
        name: name?,
        address: address?,
        port: port?,
        protocol,
        mode: mode?,
        scheduler,
        hash,
        maglev_table_size: maglev_table_size?,
        health_checks,
        health_combine,
        inhibit_on_failure,
        fallback,
        announce,
        health_via_vip,
        snat,
        client_address,
        syn_proxy,
        communities: comms,
        backends,
        scheduler_flags: lvs.scheduler_flags,
        persistence: lvs.persistence,
        persistence_netmask: lvs.persistence_netmask,
        overflow: lvs.overflow,
        slow_start: lvs.slow_start,
        udp_one_packet: lvs.udp_one_packet,
        outbound,
        tenant_vni,
        quic_lb,
    })
}

/// A port-0 VIP (all ports) needs a mode that keeps ports.
fn all_ports(
    t: &Table<'_>,
    port: Option<u16>,
    mode: Option<Mode>,
    mode_name: &str,
    errs: &mut ConfigErrors,
) {
    if port == Some(0) && matches!(mode, Some(Mode::Nat | Mode::FullNat)) {
        errs.push(
            t.key("port"),
            format!(
                "0 (all ports) needs mode \"dr\" or \"tunnel\"; mode {mode_name:?} rewrites ports"
            ),
        );
    }
}

/// `protocol`: tcp (the default) or udp.
fn protocol(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Protocol {
    t.choice(
        "protocol",
        &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)],
        errs,
    )
    .unwrap_or(Protocol::Tcp)
}

/// `hash`: the flow hash's fields (5-tuple by default); `sh` and `dh` hash addresses as LVS
/// does and refuse it.
fn hash(t: &mut Table<'_>, scheduler: Scheduler, errs: &mut ConfigErrors) -> HashFields {
    if matches!(scheduler, Scheduler::Sh | Scheduler::Dh) {
        lvs::hash_with_lvs_hash(t, scheduler, errs);
        return HashFields::FiveTuple;
    }
    t.choice(
        "hash",
        &[
            ("5-tuple", HashFields::FiveTuple),
            ("3-tuple", HashFields::ThreeTuple),
            ("2-tuple", HashFields::TwoTuple),
        ],
        errs,
    )
    .unwrap_or(HashFields::FiveTuple)
}

/// `address`, required: one the VIP's clients can reach.
fn address(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<IpAddr> {
    let address = t.req_ip("address", errs);
    if let Some(a) = address
        && (a.is_unspecified() || a.is_multicast() || a.is_loopback())
    {
        errs.push(
            t.key("address"),
            format!("\"{a}\" cannot be a VIP (unspecified, multicast or loopback)"),
        );
    }
    address
}

/// `health_via_vip`: whether the health check also sends a probe to the VIP through the
/// backend, the way the datapath forwards (default: on for DR and tunnel, which it alone
/// can prove anything for; NAT and FullNAT backends never see the VIP address).
fn via_vip(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    protocol: Protocol,
    names: &[String],
    checks: &HashMap<String, &'static str>,
    errs: &mut ConfigErrors,
) -> bool {
    let direct = matches!(mode, Some(Mode::Dr | Mode::Tunnel(_)));
    let Some(on) = t.bool("health_via_vip", errs) else {
        return direct && !names.is_empty();
    };
    if on && !direct {
        let name = mode.map(Mode::name).unwrap_or("?");
        errs.push(
            t.key("health_via_vip"),
            format!(
                "true needs mode \"dr\" or \"tunnel\": mode {name:?} backends never receive \
                 the VIP address, so there is nothing to prove"
            ),
        );
        return false;
    }
    if on && names.is_empty() {
        errs.push(
            t.key("health_via_vip"),
            "true needs a health_check: the VIP probe runs with the VIP's check",
        );
        return false;
    }
    if on
        && protocol == Protocol::Udp
        && let Some((name, kind)) = names
            .iter()
            .filter_map(|n| checks.get(n).map(|k| (n, k)))
            .find(|(_, k)| **k != "udp")
    {
        errs.push(
            t.key("health_via_vip"),
            format!(
                "a udp VIP's probe sends the check's payload, but health_check {name:?} is a \
                 {kind} check: use a udp check or set health_via_vip = false"
            ),
        );
        return false;
    }
    on
}

/// `mode` as written (for messages) and the mode with its keys: only mode "tunnel" takes
/// `tunnel`, `tunnel_port` and `vni`.
fn mode(t: &mut Table<'_>, errs: &mut ConfigErrors) -> (&'static str, Option<Mode>) {
    let mode_name = t
        .choice(
            "mode",
            &[
                ("nat", "nat"),
                ("fullnat", "fullnat"),
                ("dr", "dr"),
                ("tunnel", "tunnel"),
            ],
            errs,
        )
        .unwrap_or("nat");
    let mode = match mode_name {
        "tunnel" => encap(t, errs).map(Mode::Tunnel),
        other => {
            for k in ["tunnel", "tunnel_port", "vni"] {
                t.reject(
                    k,
                    &format!("with mode {other:?} (only with mode = \"tunnel\")"),
                    errs,
                );
            }
            Some(match other {
                "fullnat" => Mode::FullNat,
                "dr" => Mode::Dr,
                _ => Mode::Nat,
            })
        }
    };
    (mode_name, mode)
}

/// `tunnel` (required with mode "tunnel") and the keys of that encapsulation.
fn encap(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<Encap> {
    let encap = if t.has("tunnel") {
        t.choice(
            "tunnel",
            &[("ipip", "ipip"), ("gue", "gue"), ("vxlan", "vxlan")],
            errs,
        )
    } else {
        errs.push(
            t.key("tunnel"),
            "missing: mode \"tunnel\" needs tunnel = \"ipip\", \"gue\" or \"vxlan\"",
        );
        None
    };
    match encap {
        Some("gue") => {
            t.reject("vni", "with tunnel \"gue\"", errs);
            Some(Encap::Gue {
                port: t.int("tunnel_port", 1..=65535, errs).unwrap_or(6080) as u16,
            })
        }
        Some("vxlan") => Some(Encap::Vxlan {
            port: t.int("tunnel_port", 1..=65535, errs).unwrap_or(4789) as u16,
            vni: t.int("vni", 0..=0xff_ffff, errs).unwrap_or(0) as u32,
        }),
        Some(_) => {
            t.reject("vni", "with tunnel \"ipip\"", errs);
            t.reject("tunnel_port", "with tunnel \"ipip\"", errs);
            Some(Encap::Ipip)
        }
        None => None,
    }
}

/// `snat`: FullNAT's source address pool, required with mode "fullnat" and refused with any
/// other; each address of the VIP's family, not the VIP, none twice.
fn snat(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    mode_name: &str,
    address: Option<IpAddr>,
    errs: &mut ConfigErrors,
) -> Vec<IpAddr> {
    let mut snat = Vec::new();
    if !matches!(mode, Some(Mode::FullNat)) {
        t.reject(
            "snat",
            &format!("with mode {mode_name:?} (only with mode = \"fullnat\")"),
            errs,
        );
        return snat;
    }
    match t.strings("snat", errs) {
        None if !t.has("snat") => errs.push(
            t.key("snat"),
            "missing: mode \"fullnat\" needs a snat address pool",
        ),
        Some(list) if list.is_empty() => errs.push(
            t.key("snat"),
            "empty: mode \"fullnat\" needs at least one snat address",
        ),
        _ => {}
    }
    for (path, s) in t.strings("snat", errs).unwrap_or_default() {
        match s.parse::<IpAddr>() {
            Err(_) => errs.push(path, format!("{s:?} is not an IPv4 or IPv6 address")),
            Ok(ip) if address.is_some_and(|a| a.is_ipv4() != ip.is_ipv4()) => errs.push(
                path,
                format!(
                    "\"{ip}\" is {} but the VIP is {}",
                    family(&ip),
                    family(&address.unwrap_or(ip))
                ),
            ),
            Ok(ip) if Some(ip) == address => {
                errs.push(path, format!("\"{ip}\" is the VIP address itself"))
            }
            Ok(ip) if snat.contains(&ip) => errs.push(path, format!("\"{ip}\" listed twice")),
            Ok(ip) => snat.push(ip),
        }
    }
    snat
}

/// The backends, and the VIP's `quic_lb` with their server IDs (read here: a backend may
/// set its own).
fn backends(
    t: &mut Table<'_>,
    vip_port: Option<u16>,
    facts: &lvs::VipFacts,
    one_packet: bool,
    tenant: bool,
    checks: &HashMap<String, &'static str>,
    errs: &mut ConfigErrors,
) -> (Vec<Backend>, Option<crate::QuicLb>) {
    let quic = super::quic::quic_lb(t, facts.protocol, one_packet, errs);
    let raw = t.tables("backend", errs);
    if raw.is_empty() && !t.has("backend") {
        errs.push(
            t.key("backend"),
            "missing: a VIP needs at least one [[vip.backend]]",
        );
    }
    let mut out: Vec<Backend> = Vec::new();
    // What the accepted backends hold: their address and port, and their VTEP and port
    // (with the first backend behind each).
    let mut seen: HashSet<(IpAddr, u16)> = HashSet::with_capacity(raw.len());
    let mut vteps: HashMap<(IpAddr, u16), IpAddr> = HashMap::new();
    let mut server_ids = Vec::new();
    for (i, map) in raw {
        let mut b = Table::new(format!("{}[{i}]", t.key("backend")), map);
        let backend = backend(&mut b, facts.address, vip_port, facts.mode, errs);
        let vtep = super::tenant::vtep(&mut b, tenant, errs);
        let keys = lvs::backend_keys(&mut b, facts, one_packet, errs);
        let policy = super::policy::backend(&mut b, checks, errs);
        let server_id = super::quic::backend_server_id(&mut b, quic.as_ref(), errs);
        // Only a tenant's backends have a VTEP to be ambiguous about.
        let at = tenant.then(|| b.key("vtep"));
        b.finish(errs);
        let backend = backend.map(|mut be| {
            be.max_connections = keys.max_connections;
            be.resume_connections = keys.resume_connections;
            be.slow_start = keys.slow_start;
            be.vtep = vtep;
            be.health_checks = policy.health_checks;
            be.inhibit_on_failure = policy.inhibit_on_failure;
            be.sorry = policy.sorry;
            be
        });
        let Some(backend) = backend else { continue };
        if let Some(why) = super::tenant::ambiguous(&vteps, &backend) {
            errs.push(at.unwrap_or_default(), why);
            continue;
        }
        let (address, port) = (backend.address, backend.port);
        if !seen.insert((address, port)) {
            let shown = match address {
                IpAddr::V4(a) => format!("{a}:{port}"),
                IpAddr::V6(a) => format!("[{a}]:{port}"),
            };
            errs.push(t.path.clone(), format!("backend {shown} listed twice"));
            continue;
        }
        if let Some(v) = backend.vtep {
            vteps.entry((v, port)).or_insert(address);
        }
        if let Some(id) = server_id {
            server_ids.push((address, port, id));
        }
        out.push(backend);
    }
    let quic = quic.and_then(|q| super::quic::finish(&t.path, q, &out, server_ids, errs));
    (out, quic)
}

/// One `[[vip.backend]]`; `None` when its address is missing or unreadable.
fn backend(
    b: &mut Table<'_>,
    vip_addr: Option<IpAddr>,
    vip_port: Option<u16>,
    mode: Option<Mode>,
    errs: &mut ConfigErrors,
) -> Option<Backend> {
    let tunnel = matches!(mode, Some(Mode::Tunnel(_)));
    let maps_ports = matches!(mode, Some(Mode::Nat | Mode::FullNat));
    let address = b.req_ip("address", errs);
    if let (Some(a), Some(v)) = (address, vip_addr) {
        if a == v {
            errs.push(
                b.key("address"),
                format!("\"{a}\" is the VIP address itself"),
            );
        } else if a.is_ipv4() != v.is_ipv4() && !tunnel {
            errs.push(
                b.key("address"),
                format!(
                    "\"{a}\" is {} but the VIP {v} is {} (only mode \"tunnel\" can cross families)",
                    family(&a),
                    family(&v)
                ),
            );
        }
        if a.is_unspecified() || a.is_multicast() {
            errs.push(b.key("address"), format!("\"{a}\" cannot be a backend"));
        }
    }
    let port = match b.int("port", 1..=65535, errs) {
        Some(p) => {
            let p = p as u16;
            if !maps_ports && vip_port.is_some_and(|v| v != p) {
                errs.push(
                    b.key("port"),
                    format!(
                        "{p} differs from the VIP port {}: mode {:?} cannot map ports",
                        vip_port.unwrap_or(0),
                        mode.map(Mode::name).unwrap_or("?")
                    ),
                );
            }
            p
        }
        None => vip_port.unwrap_or(0),
    };
    let weight = b.int("weight", 0..=65535, errs).unwrap_or(100) as u32;
    let state = b
        .choice(
            "state",
            &[
                ("active", BackendState::Active),
                ("drain", BackendState::Drain),
                ("disabled", BackendState::Disabled),
            ],
            errs,
        )
        .unwrap_or(BackendState::Active);
    Some(Backend {
        address: address?,
        port,
        weight,
        state,
        max_connections: None,
        resume_connections: None,
        slow_start: None,
        vtep: None,
        health_checks: None,
        inhibit_on_failure: None,
        sorry: false,
    })
}
