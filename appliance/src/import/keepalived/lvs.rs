//! keepalived.conf's top level as a plan: the `virtual_server`s (by address and port, or
//! through a `virtual_server_group`; `fwmark` services have no Sluice equivalent and refuse
//! the import) become VIPs (`service.rs`), everything else (VRRP, global_defs, static
//! routes) is reported as not carried over, and a word keepalived does not define is
//! refused (a typo must not silently drop a setting).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::parse::Node;
use super::{Note, Vip};

/// What the walk collects besides VIPs.
#[derive(Debug, Default)]
pub(crate) struct Cx {
    /// What was carried differently, repaired as keepalived repairs it, or is outside the
    /// LVS half.
    pub notes: Vec<Note>,
    /// What cannot be carried as keepalived meant it: the import fails with these.
    pub refused: Vec<Note>,
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
        self.refused.push(Note { line: n.line, text });
    }

    /// A line the import cannot carry without changing its meaning.
    pub fn refuse(&mut self, line: usize, text: impl Into<String>) {
        self.refused.push(Note {
            line,
            text: text.into(),
        });
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

/// `w` when it is short printable text (an address, a port, a script): what a note may
/// repeat.
pub(crate) fn shown(w: &str) -> &str {
    if w.len() <= 200 && w.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        w
    } else {
        "(not shown)"
    }
}

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
                for v in super::service::virtual_server(n, &groups, cx) {
                    if !taken.insert((v.address, v.port, v.protocol)) {
                        cx.refuse(
                            v.lines.0,
                            format!(
                                "{} is defined twice: keepalived refuses the second service (it \
                                 exists): remove one",
                                v.name
                            ),
                        );
                    } else {
                        vips.push(v);
                    }
                }
            }
            "virtual_server_group" => {}
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
pub(crate) fn targets(
    n: &Node,
    groups: &HashMap<&str, &Node>,
    cx: &mut Cx,
) -> Option<Vec<(IpAddr, u16, Option<usize>)>> {
    let args = n.args();
    match args.first().map(String::as_str) {
        Some("fwmark") => {
            cx.refuse(
                n.line,
                format!(
                    "virtual_server fwmark {} (lines {}-{}): Sluice matches VIPs by address, port \
                     and protocol and cannot read firewall marks; define a virtual_server per \
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
                cx.refuse(
                    n.line,
                    format!("virtual_server group {name:?}: no virtual_server_group of that name"),
                );
                return None;
            };
            Some(group_entries(g, cx))
        }
        Some(addr) => match (addr.parse::<IpAddr>(), args.get(1)) {
            (Ok(ip), Some(p)) => match p.parse::<u16>() {
                Ok(port) => Some(vec![(ip, port, None)]),
                Err(_) => {
                    cx.refuse(
                        n.line,
                        format!("virtual_server {addr} {p}: {p:?} is not a port"),
                    );
                    None
                }
            },
            // No port: a persistent service of every port (ipvsadm's port 0).
            (Ok(ip), None) => Some(vec![(ip, 0, None)]),
            (Err(_), _) => {
                cx.refuse(
                    n.line,
                    format!(
                        "virtual_server {:?}: not an IP address (Sluice resolves no names)",
                        shown(addr)
                    ),
                );
                None
            }
        },
        None => {
            cx.refuse(n.line, "virtual_server without an address");
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
            cx.refuse(
                e.line,
                format!(
                    "virtual_server_group entry fwmark {}: Sluice cannot match firewall marks",
                    e.args().join(" ")
                ),
            );
            continue;
        }
        let port = match e.args().first().map(|p| p.parse::<u16>()) {
            None => 0,
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                cx.refuse(
                    e.line,
                    format!("group entry {:?}: not a port", e.words.join(" ")),
                );
                continue;
            }
        };
        match expand_range(first) {
            Some(addrs) => out.extend(addrs.into_iter().map(|a| (a, port, Some(e.line)))),
            None => cx.refuse(
                e.line,
                format!(
                    "group entry {:?}: not an address, or a range of more than 256 addresses \
                     (define the VIPs one by one)",
                    shown(first)
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

/// A VIP name from its address, port and protocol: `192.0.2.10-80`, `2001-db8--10-443`,
/// `192.0.2.53-53-udp` (letters, digits, '.', '_' and '-', as `sluice check` wants).
pub(crate) fn vip_name(address: IpAddr, port: u16, protocol: &str) -> String {
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
