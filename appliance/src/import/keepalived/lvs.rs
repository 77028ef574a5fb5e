//! keepalived's LVS blocks as Sluice VIPs: `virtual_server` (address and port, or a
//! `virtual_server_group`; `fwmark` services have no Sluice equivalent), its scheduler,
//! forwarding method, persistence and flags, and each `real_server` as a backend. Every
//! keyword keepalived defines here is either carried over or reported with why not; a
//! keyword it does not define is an error (a typo must not silently drop a setting).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::check::{self, Timing};
use super::parse::Node;
use super::{Backend, Mode, Note, Vip};

/// What the walk collects besides VIPs.
#[derive(Debug, Default)]
pub(crate) struct Cx {
    pub notes: Vec<Note>,
    pub unknown: Vec<Note>,
    pub hints: Hints,
}

/// Facts of the old setup that help fill the placeholders.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Hints {
    /// Interfaces the VRRP instances ran on.
    pub interfaces: Vec<String>,
}

impl Cx {
    pub fn note(&mut self, line: usize, text: impl Into<String>) {
        self.notes.push(Note {
            line,
            text: text.into(),
        });
    }

    /// A word keepalived does not define where it stands. It is repeated only when it
    /// looks like a keyword: a line of another kind of file is not echoed.
    pub(crate) fn unknown(&mut self, n: &Node, inside: &str) {
        let text = if looks_like_keyword(n.keyword()) {
            format!(
                "{:?} is not a keepalived keyword inside {inside}",
                n.keyword()
            )
        } else {
            format!(
                "not a keepalived keyword inside {inside} (not shown: it does not look like one)"
            )
        };
        self.unknown.push(Note { line: n.line, text });
    }
}

/// Top-level keywords that configure the host, VRRP or keepalived itself, with why Sluice
/// does not carry them over.
const NOT_CARRIED: &[(&str, &str)] = &[
    (
        "global_defs",
        "keepalived's daemon settings (notification e-mail, SNMP, scripts, router_id) have no \
         Sluice equivalent; the appliance's own settings are [appliance] and [api]",
    ),
    (
        "vrrp_instance",
        "Sluice announces each healthy VIP over BGP (fill in [bgp]) instead of moving the \
         address between hosts with VRRP",
    ),
    ("vrrp_sync_group", "VRRP: Sluice announces VIPs over BGP"),
    (
        "vrrp_script",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "garp_group",
        "VRRP gratuitous ARP: Sluice announces VIPs over BGP",
    ),
    (
        "vrrp_track_process",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "track_process",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "track_file",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "vrrp_track_file",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "track_group",
        "VRRP tracking: Sluice announces VIPs over BGP",
    ),
    (
        "linkbeat_interfaces",
        "VRRP link tracking: not used by Sluice",
    ),
    (
        "static_ipaddress",
        "host addresses are the system's to configure, not Sluice's",
    ),
    ("static_routes", "host routes are the system's to configure"),
    (
        "static_rules",
        "host routing rules are the system's to configure",
    ),
    (
        "bfd_instance",
        "keepalived's BFD; Sluice runs BFD on its BGP sessions ([bgp] bfd)",
    ),
    (
        "SSL",
        "client certificates for SSL_GET: Sluice's https check presents none",
    ),
    (
        "net_namespace",
        "Sluice runs in the namespace it is started in",
    ),
    (
        "net_namespace_ipvs",
        "Sluice runs in the namespace it is started in",
    ),
    ("namespace_with_ipsets", "ipsets: not used by Sluice"),
    ("instance", "keepalived's pid-file naming"),
    ("use_pid_dir", "keepalived's pid files"),
    (
        "linkbeat_use_polling",
        "VRRP link tracking: not used by Sluice",
    ),
    ("child_wait_time", "keepalived's process handling"),
];

/// Letters, digits, `_` and `-`, at most 48 of them: what keepalived's keywords are made of.
fn looks_like_keyword(w: &str) -> bool {
    (1..=48).contains(&w.len())
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Whether keepalived defines `word` at a file's top level.
pub(crate) fn top_level_keyword(word: &str) -> bool {
    matches!(word, "virtual_server" | "virtual_server_group")
        || INCLUDES.contains(&word)
        || NOT_CARRIED.iter().any(|(k, _)| *k == word)
}

const INCLUDES: &[&str] = &[
    "include", "includer", "includem", "includew", "includeb", "includea",
];

/// The VIPs of a parsed keepalived.conf, in file order.
pub(crate) fn plan(tree: &[Node], cx: &mut Cx) -> Vec<Vip> {
    let mut groups: HashMap<&str, &Node> = HashMap::new();
    for n in tree
        .iter()
        .filter(|n| n.keyword() == "virtual_server_group")
    {
        match n.args().first() {
            Some(name) => {
                groups.insert(name.as_str(), n);
            }
            None => cx.note(n.line, "virtual_server_group without a name: ignored"),
        }
    }
    let mut vips: Vec<Vip> = Vec::new();
    let mut taken: HashSet<(IpAddr, u16, &'static str)> = HashSet::new();
    for n in tree {
        match n.keyword() {
            "virtual_server" => {
                for v in virtual_server(n, &groups, cx) {
                    if !taken.insert((v.address, v.port, v.protocol)) {
                        cx.note(
                            v.lines.0,
                            format!("{} is defined twice: the second is left out", v.name),
                        );
                    } else {
                        vips.push(v);
                    }
                }
            }
            "virtual_server_group" => {}
            k if INCLUDES.contains(&k) => cx.note(
                n.line,
                format!(
                    "{k} {}: not followed: import the included file on its own, or concatenate \
                     the files first",
                    n.args().join(" ")
                ),
            ),
            k => match NOT_CARRIED.iter().find(|(name, _)| *name == k) {
                Some((_, why)) => not_carried(n, why, cx),
                None => cx.unknown(n, "the top level"),
            },
        }
    }
    vips
}

fn not_carried(n: &Node, why: &str, cx: &mut Cx) {
    let what = n.words.join(" ");
    let span = if n.end_line > n.line {
        format!(" (lines {}-{})", n.line, n.end_line)
    } else {
        String::new()
    };
    let mut text = format!("{what}{span}: not carried over: {why}");
    if n.keyword() == "vrrp_instance" {
        for c in n.children() {
            match c.keyword() {
                "interface" => {
                    if let Some(i) = c.args().first()
                        && !i.is_empty()
                    {
                        text.push_str(&format!("; it ran on interface {i}"));
                        if !cx.hints.interfaces.contains(i) {
                            cx.hints.interfaces.push(i.clone());
                        }
                    }
                }
                "virtual_ipaddress" => {
                    let addrs: Vec<&str> = c
                        .children()
                        .iter()
                        .filter_map(|a| a.words.first().map(String::as_str))
                        .collect();
                    if !addrs.is_empty() {
                        text.push_str(&format!(
                            "; its addresses {} must now be routed to the appliances (BGP or static routes)",
                            addrs.join(", ")
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    cx.note(n.line, text);
}

/// Where a `virtual_server` listens: each (address, port, line of the entry).
fn targets(
    n: &Node,
    groups: &HashMap<&str, &Node>,
    cx: &mut Cx,
) -> Option<Vec<(IpAddr, u16, Option<usize>)>> {
    let args = n.args();
    match args.first().map(String::as_str) {
        Some("fwmark") => {
            cx.note(
                n.line,
                format!(
                    "virtual_server fwmark {} (lines {}-{}): not carried over: Sluice matches VIPs by \
                     address, port and protocol and cannot read firewall marks; define a VIP per \
                     address and port the mark selected",
                    args.get(1).map_or("?", String::as_str),
                    n.line,
                    n.end_line
                ),
            );
            None
        }
        Some("group") => {
            let name = args.get(1).map_or("", String::as_str);
            let Some(g) = groups.get(name) else {
                cx.note(
                    n.line,
                    format!("virtual_server group {name:?}: no virtual_server_group of that name: left out"),
                );
                return None;
            };
            Some(group_entries(g, cx))
        }
        Some(addr) => match (addr.parse::<IpAddr>(), args.get(1)) {
            (Ok(ip), Some(p)) => match p.parse::<u16>() {
                Ok(port) => Some(vec![(ip, port, None)]),
                Err(_) => {
                    cx.note(
                        n.line,
                        format!("virtual_server {addr} {p}: {p:?} is not a port: left out"),
                    );
                    None
                }
            },
            // No port: a persistent service of every port (ipvsadm's port 0).
            (Ok(ip), None) => Some(vec![(ip, 0, None)]),
            (Err(_), _) => {
                cx.note(
                    n.line,
                    format!("virtual_server {addr:?}: not an IP address: left out"),
                );
                None
            }
        },
        None => {
            cx.note(n.line, "virtual_server without an address: left out");
            None
        }
    }
}

/// The address entries of a `virtual_server_group`; ranges of up to 256 addresses are
/// expanded, fwmarks reported.
fn group_entries(g: &Node, cx: &mut Cx) -> Vec<(IpAddr, u16, Option<usize>)> {
    let mut out = Vec::new();
    for e in g.children() {
        let first = e.keyword();
        if first == "fwmark" {
            cx.note(
                e.line,
                format!(
                    "virtual_server_group entry fwmark {}: not carried over: Sluice cannot match firewall marks",
                    e.args().join(" ")
                ),
            );
            continue;
        }
        let port = match e.args().first().map(|p| p.parse::<u16>()) {
            None => 0,
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                cx.note(
                    e.line,
                    format!("group entry {:?}: not a port: left out", e.words.join(" ")),
                );
                continue;
            }
        };
        match expand_range(first) {
            Some(addrs) => out.extend(addrs.into_iter().map(|a| (a, port, Some(e.line)))),
            None => cx.note(
                e.line,
                format!(
                    "group entry {first:?}: not an address, or a range of more than 256 addresses: \
                     left out (define the VIPs one by one)"
                ),
            ),
        }
    }
    out
}

/// `192.0.2.1`, `192.0.2.1-10`, `192.0.2.250-192.0.3.4`, `192.0.2.8/29`, or their IPv6
/// forms, as at most 256 addresses.
fn expand_range(s: &str) -> Option<Vec<IpAddr>> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(vec![ip]);
    }
    let (from, to) = if let Some((a, len)) = s.split_once('/') {
        let a: IpAddr = a.parse().ok()?;
        let len: u32 = len.parse().ok()?;
        let bits = if a.is_ipv4() { 32 } else { 128 };
        if len > bits || bits - len > 8 {
            return None;
        }
        let n = to_u128(a) & !((1u128 << (bits - len)) - 1);
        (n, n + (1u128 << (bits - len)) - 1)
    } else {
        let (a, b) = s.split_once('-')?;
        let a: IpAddr = a.parse().ok()?;
        let end = match b.parse::<IpAddr>() {
            Ok(b) if b.is_ipv4() == a.is_ipv4() => to_u128(b),
            Ok(_) => return None,
            Err(_) => {
                // The last group only: `.1-10` (IPv4, decimal) or `::1-ff` (IPv6, hex).
                let last = if a.is_ipv4() {
                    u128::from(b.parse::<u8>().ok()?)
                } else {
                    u128::from(u16::from_str_radix(b, 16).ok()?)
                };
                let mask = if a.is_ipv4() { 0xff } else { 0xffff };
                (to_u128(a) & !mask) | last
            }
        };
        (to_u128(a), end)
    };
    if to < from || to - from >= 256 {
        return None;
    }
    let v4 = !s.contains(':');
    Some((from..=to).map(|n| from_u128(n, v4)).collect())
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(n: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::V4((n as u32).into())
    } else {
        IpAddr::V6(n.into())
    }
}

/// A `virtual_server`'s own settings, before its real servers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Service {
    pub sched: Option<(String, usize)>,
    pub flags: Vec<(String, usize)>,
    pub method: Option<(Vec<String>, usize)>,
    pub persistence: Option<u32>,
    pub granularity: Option<(String, usize)>,
    pub protocol: Option<(String, usize)>,
    pub ops: bool,
    pub timing: Timing,
    pub virtualhost: Option<String>,
}

/// Keywords of `virtual_server` that Sluice has no use for, with why.
const VS_NOT_CARRIED: &[(&str, &str)] = &[
    (
        "persistence_engine",
        "Sluice persists by client address only (no SIP Call-ID engine)",
    ),
    (
        "ha_suspend",
        "Sluice checks backends whether or not it announces the VIP",
    ),
    (
        "smtp_alert",
        "Sluice reports health changes as events and metrics, not e-mail",
    ),
    (
        "snmp_name",
        "Sluice has no SNMP agent; metrics are Prometheus",
    ),
    ("omega", "keepalived's shutdown notifiers"),
    (
        "quorum",
        "no quorum: Sluice withdraws a VIP only when no backend can take flows",
    ),
    ("hysteresis", "no quorum in Sluice"),
    (
        "quorum_up",
        "no quorum scripts: watch the `health` events or metrics",
    ),
    (
        "quorum_down",
        "no quorum scripts: watch the `health` events or metrics",
    ),
    ("quorum_max", "no quorum in Sluice"),
    (
        "ip_family",
        "only needed for fwmark services, which Sluice cannot carry over",
    ),
    (
        "sorry_server",
        "no sorry server: Sluice withdraws the VIP when no backend is up",
    ),
    ("sorry_server_inhibit", "no sorry server in Sluice"),
    ("sorry_server_lvs_method", "no sorry server in Sluice"),
    (
        "warmup",
        "Sluice spreads probes with `jitter` instead of a start-up delay",
    ),
    ("nat_mask", "Sluice's NAT needs no netmask"),
];

/// One `virtual_server` block: its VIP(s), or none with the reason noted.
fn virtual_server(n: &Node, groups: &HashMap<&str, &Node>, cx: &mut Cx) -> Vec<Vip> {
    let Some(targets) = targets(n, groups, cx) else {
        return Vec::new();
    };
    let mut s = Service::default();
    let mut reals: Vec<&Node> = Vec::new();
    for c in n.children() {
        if !service_keyword(c, &mut s, cx) {
            match c.keyword() {
                "real_server" => reals.push(c),
                k => match VS_NOT_CARRIED.iter().find(|(name, _)| *name == k) {
                    Some((_, why)) => cx.note(
                        c.line,
                        format!("{}: not carried over: {why}", c.words.join(" ")),
                    ),
                    None => cx.unknown(c, "virtual_server"),
                },
            }
        }
    }
    let Some(base) = super::service::service(n, &s, cx) else {
        return Vec::new();
    };
    let (backends, check) = check::real_servers(&reals, &s, &base, cx);
    if backends.is_empty() {
        cx.note(
            n.line,
            format!(
                "virtual_server {} has no real_server Sluice can use: left out",
                n.args().join(" ")
            ),
        );
        return Vec::new();
    }
    let mut out = Vec::new();
    for (address, port, group_line) in targets {
        if port == 0 && base.mode == Mode::Nat {
            cx.note(
                group_line.unwrap_or(n.line),
                format!(
                    "{address} without a port (every port): Sluice's NAT rewrites ports and needs \
                     one; use lvs_method DR or TUN, or a port: left out"
                ),
            );
            continue;
        }
        let mut v = base.clone();
        v.address = address;
        v.port = port;
        v.group_line = group_line;
        v.name = vip_name(address, port, v.protocol);
        v.backends = backends
            .iter()
            .map(|b| Backend {
                port: if b.port == 0 { port } else { b.port },
                ..b.clone()
            })
            .collect();
        v.check = check.clone();
        limits(&mut v, n.line, group_line.is_none() || out.is_empty(), cx);
        out.push(v);
    }
    out
}

/// Connection limits as Sluice can hold them: none for a one-packet service (it counts no
/// connections), and the overflow policy closest to IPVS's answer when all are full.
fn limits(v: &mut Vip, line: usize, first: bool, cx: &mut Cx) {
    if v.udp_one_packet && v.backends.iter().any(|b| b.max_connections.is_some()) {
        if first {
            cx.note(
                line,
                "uthreshold/lthreshold with ops: Sluice counts no connections for a \
                 one-packet service: left out",
            );
        }
        for b in &mut v.backends {
            b.max_connections = None;
            b.resume_connections = None;
        }
    }
    if v.backends.iter().any(|b| b.max_connections.is_some()) {
        // IPVS answers ICMP port unreachable when every real server is over its
        // threshold: a reset fails a TCP client as fast; UDP has nothing to reset.
        v.overflow = Some(if v.protocol == "udp" { "drop" } else { "reset" });
    }
}

/// Reads one keyword of the service itself; false when it is not one.
fn service_keyword(c: &Node, s: &mut Service, cx: &mut Cx) -> bool {
    let arg = c.args().first().cloned().unwrap_or_default();
    match c.keyword() {
        "lvs_sched" | "lb_algo" => s.sched = Some((arg, c.line)),
        "flag-1" | "flag-2" | "flag-3" | "sh-port" | "sh-fallback" | "mh-port" | "mh-fallback" => {
            s.flags.push((c.keyword().to_string(), c.line))
        }
        "ops" => s.ops = true,
        "lvs_method" | "lb_kind" => s.method = Some((c.args().to_vec(), c.line)),
        "persistence_timeout" => {
            s.persistence = match c.args().first() {
                None => Some(360),
                Some(t) => match t.parse::<u32>() {
                    Ok(t) if t > 0 => Some(t),
                    _ => {
                        cx.note(
                            c.line,
                            format!("persistence_timeout {t:?}: not a number of seconds: left out"),
                        );
                        None
                    }
                },
            }
        }
        "persistence_granularity" => s.granularity = Some((arg, c.line)),
        "protocol" => s.protocol = Some((arg, c.line)),
        "virtualhost" => s.virtualhost = Some(arg),
        _ => return s.timing.read(c, cx),
    }
    true
}

/// A VIP name from its address, port and protocol: `192.0.2.10-80`, `2001-db8--10-443`,
/// `192.0.2.53-53-udp` (letters, digits, '.', '_' and '-', as `sluice check` wants).
fn vip_name(address: IpAddr, port: u16, protocol: &str) -> String {
    let a = address.to_string().replace(':', "-");
    let p = if port == 0 {
        "all".to_string()
    } else {
        port.to_string()
    };
    if protocol == "tcp" {
        format!("{a}-{p}")
    } else {
        format!("{a}-{p}-{protocol}")
    }
}

/// The forwarding method: `NAT`, `DR` or `TUN [type ipip|gue port N|gre]`.
pub(crate) fn method(words: &[String], line: usize, cx: &mut Cx) -> Option<Mode> {
    match words.first().map(String::as_str) {
        Some("NAT") => Some(Mode::Nat),
        Some("DR") => Some(Mode::Dr),
        Some("TUN") => {
            let ty = words
                .iter()
                .position(|w| w == "type")
                .and_then(|i| words.get(i + 1))
                .map_or("ipip", String::as_str);
            let port = words
                .iter()
                .position(|w| w == "port")
                .and_then(|i| words.get(i + 1))
                .and_then(|p| p.parse::<u16>().ok());
            if words
                .iter()
                .any(|w| matches!(w.as_str(), "csum" | "remcsum"))
            {
                cx.note(
                    line,
                    "tunnel checksum option: Sluice sends GUE without checksum options",
                );
            }
            match ty {
                "gue" => Some(Mode::Tunnel { encap: "gue", port }),
                "ipip" => Some(Mode::Tunnel {
                    encap: "ipip",
                    port: None,
                }),
                other => {
                    cx.note(
                        line,
                        format!(
                            "tunnel type {other:?}: Sluice tunnels with ipip, gue or vxlan; the VIP \
                             uses ipip: reconfigure the real servers to decapsulate IPIP"
                        ),
                    );
                    Some(Mode::Tunnel {
                        encap: "ipip",
                        port: None,
                    })
                }
            }
        }
        other => {
            cx.note(
                line,
                format!(
                    "lvs_method {:?}: not NAT, DR or TUN: left out",
                    other.unwrap_or("")
                ),
            );
            None
        }
    }
}
