//! A `virtual_server` as Sluice VIPs: its protocol (keepalived compares it without regard to
//! case), forwarding method (compared exactly: keepalived does not take `lb_kind dr` for DR
//! and runs such a service as NAT, so the import refuses it rather than guess), scheduler
//! (ipvsadm's names map one to one except `mh`, Sluice's Maglev; `fo`, `ovf` and `twos` have
//! no equivalent), scheduler flags, persistence, one-packet scheduling and quorum; its real
//! and sorry servers are `server.rs`'s.

use std::collections::HashMap;
use std::net::IpAddr;

use super::check::Timing;
use super::lvs::{Cx, shown, targets, vip_name};
use super::parse::Node;
use super::{Mode, Vip};

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
    /// The real servers' default weight (`weight` in the virtual_server; keepalived's 1).
    pub weight: Option<u32>,
    pub quorum: Option<(u32, usize)>,
    pub hysteresis: Option<(u32, usize)>,
    /// The line of a `quorum_up` or `quorum_down` script.
    pub quorum_scripts: Option<usize>,
    /// `sorry_server ADDRESS [PORT]`, its line, `sorry_server_inhibit` and
    /// `sorry_server_lvs_method`.
    pub sorry: Option<(Vec<String>, usize)>,
    pub sorry_inhibit: bool,
    pub sorry_method: Option<(Vec<String>, usize)>,
}

/// Keywords of `virtual_server` that change nothing Sluice forwards or checks, with why.
const VS_NOTES: &[(&str, &str)] = &[
    (
        "ha_suspend",
        "not carried over: Sluice checks backends whether or not it announces the VIP",
    ),
    (
        "smtp_alert",
        "not carried over: Sluice reports health changes as events and metrics, not e-mail",
    ),
    (
        "snmp_name",
        "not carried over: Sluice has no SNMP agent; metrics are Prometheus",
    ),
    ("omega", "not carried over: keepalived's shutdown notifiers"),
    (
        "warmup",
        "not carried over: Sluice spreads probes with `jitter` instead of a start-up delay",
    ),
    (
        "hashed",
        "not carried over: an IPVS table flag with no effect on scheduling",
    ),
    (
        "ip_family",
        "not needed: Sluice takes each VIP's family from its address",
    ),
];

/// One `virtual_server` block: its VIP(s), or none with the reason refused.
pub(crate) fn virtual_server(n: &Node, groups: &HashMap<&str, &Node>, cx: &mut Cx) -> Vec<Vip> {
    let Some(targets) = targets(n, groups, cx) else {
        return Vec::new();
    };
    let mut s = Service::default();
    let mut reals: Vec<&Node> = Vec::new();
    for c in n.children() {
        if service_keyword(c, &mut s, cx) {
            continue;
        }
        match c.keyword() {
            "real_server" => reals.push(c),
            k => match VS_NOTES.iter().find(|(name, _)| *name == k) {
                Some((_, why)) => cx.note(c.line, format!("{}: {why}", c.words.join(" "))),
                None => cx.unknown(c, "virtual_server"),
            },
        }
    }
    let Some(mut base) = service(n, &s, cx) else {
        return Vec::new();
    };
    // keepalived's check_data.c: "zero port only valid for persistent services - setting"
    // (IPVS_SVC_PERSISTENT_TIMEOUT, 360 s), for the whole service when any of its addresses
    // (a group's too) has no port.
    if base.persistence.is_none()
        && let Some((address, _, group_line)) = targets.iter().find(|t| t.1 == 0)
    {
        cx.note(
            group_line.unwrap_or(n.line),
            format!(
                "{address} without a port and without persistence_timeout: keepalived makes \
                 the service persistent for 360 s (it warns \"zero port only valid for \
                 persistent services\"): imported with persistence = 360"
            ),
        );
        base.persistence = Some(360);
    }
    let mut out = Vec::new();
    for (address, port, group_line) in targets {
        let line = group_line.unwrap_or(n.line);
        if port == 0 && base.mode == Mode::Nat {
            cx.refuse(
                line,
                format!(
                    "{address} without a port (every port): Sluice's NAT rewrites ports and \
                     needs one; use lvs_method DR or TUN, or give a port"
                ),
            );
            continue;
        }
        let mut v = base.clone();
        v.address = address;
        v.port = port;
        v.group_line = group_line;
        v.name = vip_name(address, port, v.protocol);
        // Each target is judged on its own (repairs depend on its family and port); notes
        // repeat per target and merge by text.
        super::server::servers(&mut v, &reals, &s, cx);
        if v.backends.iter().all(|b| b.sorry) {
            cx.refuse(
                n.line,
                format!(
                    "virtual_server {} has no real_server Sluice can use (keepalived would run \
                     it with no real server: it serves nothing)",
                    n.args().join(" ")
                ),
            );
            continue;
        }
        limits(&mut v, n.line, out.is_empty(), cx);
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
                "uthreshold/lthreshold with ops: IPVS keeps no connections for a one-packet \
                 service either, so the thresholds never applied: left out",
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

/// A count keyword's value, or the line refused.
fn count(c: &Node, cx: &mut Cx) -> Option<u32> {
    let arg = c.args().first().map(String::as_str).unwrap_or("");
    match arg.parse::<u32>() {
        Ok(n) => Some(n),
        Err(_) => {
            cx.refuse(
                c.line,
                format!("{} {:?}: not a count", c.keyword(), shown(arg)),
            );
            None
        }
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
        "persistence_timeout" => s.persistence = persistence(c, cx),
        "persistence_granularity" => s.granularity = Some((arg, c.line)),
        "persistence_engine" => cx.refuse(
            c.line,
            format!(
                "persistence_engine {}: Sluice persists by client address only (no SIP Call-ID \
                 engine)",
                shown(&arg)
            ),
        ),
        "protocol" => s.protocol = Some((arg, c.line)),
        "virtualhost" => s.virtualhost = Some(arg),
        "weight" => s.weight = count(c, cx),
        "quorum" => s.quorum = count(c, cx).map(|q| (q, c.line)),
        "hysteresis" => s.hysteresis = count(c, cx).map(|h| (h, c.line)),
        "quorum_up" | "quorum_down" => s.quorum_scripts = Some(c.line),
        "sorry_server" => s.sorry = Some((c.args().to_vec(), c.line)),
        "sorry_server_inhibit" => s.sorry_inhibit = !matches!(arg.as_str(), "off" | "false" | "no"),
        "sorry_server_lvs_method" => s.sorry_method = Some((c.args().to_vec(), c.line)),
        _ => return s.timing.read(c, cx),
    }
    true
}

/// `persistence_timeout [SECONDS]` (keepalived's default 360 without a value).
fn persistence(c: &Node, cx: &mut Cx) -> Option<u32> {
    match c.args().first() {
        None => Some(360),
        Some(t) => match t.parse::<u32>() {
            Ok(t) if t > 0 => Some(t),
            _ => {
                cx.refuse(
                    c.line,
                    format!(
                        "persistence_timeout {:?}: not a number of seconds",
                        shown(t)
                    ),
                );
                None
            }
        },
    }
}

/// The VIP a `virtual_server` describes, without address, port and backends yet; `None`
/// (with the reason refused) when Sluice cannot serve it as keepalived did.
pub(crate) fn service(n: &Node, s: &Service, cx: &mut Cx) -> Option<Vip> {
    let protocol = match s.protocol.as_ref() {
        None => {
            // keepalived's check_data.c: "no protocol set - defaulting to UDP" (IPVS takes
            // protocol 0 as UDP), so the file's service was UDP.
            cx.note(
                n.line,
                "no protocol: keepalived serves it as UDP (it warns \"no protocol set - \
                 defaulting to UDP\"): imported as UDP; add protocol TCP to the file if the \
                 service is TCP",
            );
            "udp"
        }
        Some((p, _)) if p.eq_ignore_ascii_case("tcp") => "tcp",
        Some((p, _)) if p.eq_ignore_ascii_case("udp") => "udp",
        Some((p, line)) => {
            cx.refuse(
                *line,
                format!(
                    "protocol {}: Sluice serves TCP and UDP only (keepalived takes TCP, UDP and \
                     SCTP in any case)",
                    shown(p)
                ),
            );
            return None;
        }
    };
    let mode = match &s.method {
        None => {
            cx.note(
                n.line,
                "no lb_kind: keepalived's default NAT (it warns \"no forwarding method set\")",
            );
            Mode::Nat
        }
        Some((words, line)) => method(words, *line, cx)?,
    };
    let (scheduler, hash, flags) = scheduler(s, cx)?;
    let netmask = granularity(n, s, cx);
    let udp_one_packet = s.ops && protocol == "udp";
    if s.ops && protocol != "udp" {
        cx.note(
            n.line,
            "ops: keepalived sets the one-packet flag on TCP too, but IPVS schedules TCP \
             per connection anyway: left out",
        );
    }
    Some(Vip {
        name: String::new(),
        lines: (n.line, n.end_line),
        group_line: None,
        address: IpAddr::V4([0, 0, 0, 0].into()),
        port: 0,
        protocol,
        mode,
        scheduler,
        hash,
        flags,
        persistence: s.persistence,
        netmask,
        udp_one_packet,
        overflow: None,
        checks: Vec::new(),
        backends: Vec::new(),
        quorum: None,
    })
}

/// `persistence_granularity` as a prefix length.
fn granularity(n: &Node, s: &Service, cx: &mut Cx) -> Option<u8> {
    match (&s.granularity, s.persistence) {
        (None, _) => None,
        (Some((_, line)), None) => {
            cx.note(
                *line,
                "persistence_granularity without persistence_timeout: nothing to group (IPVS \
                 ignores it too): left out",
            );
            None
        }
        (Some((g, line)), Some(_)) => {
            let v6 = n.args().first().is_some_and(|a| a.contains(':'));
            let len = granularity_len(g, v6);
            if len.is_none() {
                cx.refuse(
                    *line,
                    format!(
                        "persistence_granularity {:?}: not a netmask or prefix length",
                        shown(g)
                    ),
                );
            }
            len
        }
    }
}

/// `255.255.255.0` (IPv4) or `64` (a prefix length) as a prefix length.
fn granularity_len(g: &str, v6: bool) -> Option<u8> {
    if let Ok(len) = g.trim_start_matches('/').parse::<u8>() {
        return (len <= if v6 { 128 } else { 32 }).then_some(len);
    }
    let mask: std::net::Ipv4Addr = g.parse().ok()?;
    let m = u32::from(mask);
    // Contiguous ones from the top only.
    (m.leading_ones() + m.trailing_zeros() == 32 && !v6).then_some(m.leading_ones() as u8)
}

type Sched = (&'static str, Option<&'static str>, Vec<&'static str>);

/// Scheduler, hash fields and scheduler flags; `None` with the line refused for a scheduler
/// Sluice lacks.
fn scheduler(s: &Service, cx: &mut Cx) -> Option<Sched> {
    let (name, line) = match &s.sched {
        Some((n, l)) => (n.as_str(), *l),
        // keepalived's default (IPVS_DEF_SCHED).
        None => ("wlc", s.flags.first().map_or(0, |f| f.1)),
    };
    let has = |words: &[&str]| s.flags.iter().find(|(f, _)| words.contains(&f.as_str()));
    let mut flags = Vec::new();
    let mut hash = None;
    let sched: &'static str = match name {
        "rr" => "rr",
        "wrr" => "wrr",
        "lc" => "lc",
        "wlc" => "wlc",
        "lblc" => "lblc",
        "lblcr" => "lblcr",
        "sed" => "sed",
        "nq" => "nq",
        "dh" => "dh",
        "sh" => {
            flags = sh_flags(&has, cx);
            "sh"
        }
        "mh" => {
            hash = Some(mh_hash(&has, line, cx));
            "maglev"
        }
        "fo" | "ovf" | "twos" => {
            cx.refuse(
                line,
                format!(
                    "lb_algo {name}: Sluice has no {}",
                    match name {
                        "fo" => "weighted failover scheduler (all traffic to the heaviest server)",
                        "ovf" => "overflow scheduler",
                        _ => "weighted random twos choice scheduler",
                    }
                ),
            );
            return None;
        }
        other => {
            // keepalived refuses the name ("invalid scheduler") and uses its default.
            cx.note(
                line,
                format!(
                    "lb_algo {:?}: not an LVS scheduler; keepalived uses its default wlc, so \
                     does the import",
                    shown(other)
                ),
            );
            "wlc"
        }
    };
    for (f, l) in &s.flags {
        let used = match sched {
            "sh" => matches!(f.as_str(), "sh-port" | "flag-2" | "sh-fallback" | "flag-1"),
            "maglev" => matches!(f.as_str(), "mh-port" | "flag-2" | "mh-fallback" | "flag-1"),
            _ => false,
        };
        if !used {
            cx.note(
                *l,
                format!("{f}: has no meaning for scheduler {name} (IPVS ignores it too): left out"),
            );
        }
    }
    Some((sched, hash, flags))
}

/// A flag of the service and its line, by any of its spellings.
type Has<'a> = dyn Fn(&[&str]) -> Option<&'a (String, usize)> + 'a;

/// sh's flags: `sh-port` carries over; `sh-fallback` is what Sluice's sh does anyway.
fn sh_flags(has: &Has<'_>, cx: &mut Cx) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if has(&["sh-port", "flag-2"]).is_some() {
        flags.push("sh-port");
    }
    if let Some((f, l)) = has(&["sh-fallback", "flag-1"]) {
        cx.note(
            *l,
            format!(
                "{f} (sh-fallback): not needed: Sluice's sh table holds only backends that \
                 can take new flows and is rebuilt when one fails, so such a client always \
                 gets another"
            ),
        );
    }
    flags
}

/// mh as Maglev: IPVS's mh hashes the client address (and its port with mh-port); Sluice's
/// Maglev hashes the fields `hash` names, the VIP's address being fixed.
fn mh_hash(has: &Has<'_>, line: usize, cx: &mut Cx) -> &'static str {
    if let Some((f, l)) = has(&["mh-fallback", "flag-1"]) {
        cx.note(
            *l,
            format!("{f} (mh-fallback): not needed: Sluice's Maglev ring holds only backends that can take new flows"),
        );
    }
    cx.note(
        line,
        "mh: Sluice's Maglev (scheduler \"maglev\"), the same consistent hashing; every appliance builds the same ring",
    );
    if has(&["mh-port", "flag-2"]).is_some() {
        "5-tuple"
    } else {
        "2-tuple"
    }
}

/// The forwarding method: `NAT`, `DR` or `TUN [type ipip|gue port N] [csum|nocsum|remcsum]`,
/// spelt exactly (keepalived compares with strcmp).
pub(crate) fn method(words: &[String], line: usize, cx: &mut Cx) -> Option<Mode> {
    match words.first().map(String::as_str) {
        Some("NAT") => Some(Mode::Nat),
        Some("DR") => Some(Mode::Dr),
        Some("TUN") => tunnel(words, line, cx),
        Some(other)
            if ["NAT", "DR", "TUN"]
                .iter()
                .any(|m| m.eq_ignore_ascii_case(other)) =>
        {
            cx.refuse(
                line,
                format!(
                    "lb_kind {other}: keepalived matches NAT, DR and TUN in capitals only: it \
                     logs \"unknown routing method\" and runs this service as NAT; write {} if \
                     that is what you meant, or NAT to keep what keepalived did",
                    other.to_ascii_uppercase()
                ),
            );
            None
        }
        other => {
            cx.refuse(
                line,
                format!(
                    "lb_kind {:?}: not NAT, DR or TUN (keepalived runs such a service as NAT)",
                    shown(other.unwrap_or(""))
                ),
            );
            None
        }
    }
}

/// `TUN type ipip|gue port N [csum|nocsum|remcsum]`.
fn tunnel(words: &[String], line: usize, cx: &mut Cx) -> Option<Mode> {
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
        cx.refuse(
            line,
            "tunnel checksum option (csum, remcsum): Sluice sends GUE without checksum options, \
             which real servers that require them drop",
        );
        return None;
    }
    match (ty, port) {
        ("gue", Some(p)) => Some(Mode::Tunnel {
            encap: "gue",
            port: Some(p),
        }),
        ("ipip", None) => Some(Mode::Tunnel {
            encap: "ipip",
            port: None,
        }),
        ("gue", None) => {
            cx.refuse(
                line,
                "TUN type gue without a port (keepalived refuses it too)",
            );
            None
        }
        (other, _) => {
            cx.refuse(
                line,
                format!(
                    "tunnel type {}: Sluice tunnels with ipip, gue or vxlan; real servers that \
                     decapsulate it would not take those",
                    shown(other)
                ),
            );
            None
        }
    }
}
