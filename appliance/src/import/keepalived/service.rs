//! A `virtual_server`'s own settings in Sluice's terms: protocol, forwarding mode, the
//! scheduler (ipvsadm's names map one to one except `mh`, which is Sluice's Maglev, and
//! `fo`/`ovf`/`twos`, which Sluice lacks), scheduler flags, persistence and one-packet
//! scheduling.

use std::net::IpAddr;

use super::lvs::{Cx, Service, method};
use super::parse::Node;
use super::{Mode, Vip};

/// The VIP a `virtual_server` describes, without address, port and backends yet; `None`
/// (with the reason noted) when Sluice cannot serve it.
pub(crate) fn service(n: &Node, s: &Service, cx: &mut Cx) -> Option<Vip> {
    let protocol = match s.protocol.as_ref().map(|(p, l)| (p.as_str(), *l)) {
        None | Some(("TCP", _)) => "tcp",
        Some(("UDP", _)) => "udp",
        Some((p, line)) => {
            cx.note(
                line,
                format!(
                    "protocol {p}: Sluice serves TCP and UDP only: virtual_server {} left out",
                    n.args().join(" ")
                ),
            );
            return None;
        }
    };
    let mode = match &s.method {
        None => Mode::Nat,
        Some((words, line)) => method(words, *line, cx)?,
    };
    let (scheduler, hash, flags) = scheduler(s, cx);
    let persistence = s.persistence;
    let netmask = match (&s.granularity, persistence) {
        (None, _) => None,
        (Some((_, line)), None) => {
            cx.note(
                *line,
                "persistence_granularity without persistence_timeout: nothing to group, left out",
            );
            None
        }
        (Some((g, line)), Some(_)) => {
            let v6 = n.args().first().is_some_and(|a| a.contains(':'));
            granularity(g, v6).or_else(|| {
                cx.note(
                    *line,
                    format!(
                        "persistence_granularity {g:?}: not a netmask or prefix length: left out"
                    ),
                );
                None
            })
        }
    };
    let udp_one_packet = s.ops && protocol == "udp";
    if s.ops && protocol != "udp" {
        cx.note(
            n.line,
            "ops: one-packet scheduling is for UDP services only: left out",
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
        persistence,
        netmask,
        udp_one_packet,
        overflow: None,
        check: None,
        backends: Vec::new(),
    })
}

/// `255.255.255.0` (IPv4) or `64` (a prefix length) as a prefix length.
fn granularity(g: &str, v6: bool) -> Option<u8> {
    if let Ok(len) = g.trim_start_matches('/').parse::<u8>() {
        return (len <= if v6 { 128 } else { 32 }).then_some(len);
    }
    let mask: std::net::Ipv4Addr = g.parse().ok()?;
    let m = u32::from(mask);
    // Contiguous ones from the top only.
    (m.leading_ones() + m.trailing_zeros() == 32 && !v6).then_some(m.leading_ones() as u8)
}

type Sched = (&'static str, Option<&'static str>, Vec<&'static str>);

/// Scheduler, hash fields and scheduler flags, with notes for what does not carry over.
fn scheduler(s: &Service, cx: &mut Cx) -> Sched {
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
            cx.note(
                line,
                format!(
                    "scheduler {name}: Sluice has no {}; wrr (weighted round robin) stands in",
                    match name {
                        "fo" => "weighted failover (all traffic to the heaviest backend)",
                        "ovf" => "overflow scheduler",
                        _ => "weighted random twos choice",
                    }
                ),
            );
            "wrr"
        }
        other => {
            cx.note(
                line,
                format!("scheduler {other:?}: unknown to LVS; wlc (keepalived's default) used"),
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
                format!("{f}: has no meaning for scheduler {name}: left out"),
            );
        }
    }
    (sched, hash, flags)
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
