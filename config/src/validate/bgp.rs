//! `[bgp]` and its `[[bgp.peer]]`s: ASNs, timers, BFD and graceful restart with their
//! `[bgp]` defaults, TCP MD5 and communities (also read by `[[vip]]`).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use super::family;
use crate::error::ConfigErrors;
use crate::model::{Bfd, Bgp, Community, Peer};
use crate::reader::Table;

fn community(path: &str, s: &str, errs: &mut ConfigErrors) -> Option<Community> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad =
        || format!("{s:?} is not a community \"ASN:VALUE\" (RFC 1997) or \"ASN:X:Y\" (RFC 8092)");
    match parts.as_slice() {
        [a, b] => match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => Some(Community::Standard(a, b)),
            _ => {
                errs.push(path, bad());
                None
            }
        },
        [a, b, c] => match (a.parse::<u32>(), b.parse::<u32>(), c.parse::<u32>()) {
            (Ok(a), Ok(b), Ok(c)) => Some(Community::Large(a, b, c)),
            _ => {
                errs.push(path, bad());
                None
            }
        },
        _ => {
            errs.push(path, bad());
            None
        }
    }
}

pub(super) fn communities(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<Community> {
    t.strings("communities", errs)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(path, s)| community(&path, &s, errs))
        .collect()
}

/// Valid 4-octet ASNs for a speaker: not 0, not AS_TRANS (23456), not 4294967295 (RFC 7300).
fn asn(t: &mut Table<'_>, key: &str, errs: &mut ConfigErrors) -> Option<u32> {
    let n = t.req_int(key, 1..=4_294_967_294, errs)? as u32;
    if n == 23456 {
        errs.push(
            t.key(key),
            "23456 is AS_TRANS (RFC 6793) and cannot be used",
        );
        return None;
    }
    Some(n)
}

/// A `bfd = { ... }` table as written. Every key is optional so a peer's table can
/// override the `[bgp]` default key by key; a table without `enabled` means enabled.
#[derive(Debug, Clone, Copy, Default)]
struct RawBfd {
    enabled: Option<bool>,
    interval: Option<Duration>,
    multiplier: Option<u8>,
}

/// BFD defaults when neither the peer nor `[bgp]` says: BIRD's and FRR's own.
const BFD_INTERVAL: Duration = Duration::from_millis(300);
const BFD_MULTIPLIER: u8 = 3;

fn raw_bfd(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<RawBfd> {
    let mut b = t.table("bfd", errs)?;
    let enabled = b.bool("enabled", errs).unwrap_or(true);
    // 10 ms: below that, scheduling noise on a loaded control plane causes false
    // detections; 10 s: beyond that BFD is slower than a short BGP hold time.
    let interval = b.duration(
        "interval",
        Duration::from_millis(10)..=Duration::from_secs(10),
        errs,
    );
    let multiplier = b.int("multiplier", 1..=255, errs).map(|m| m as u8);
    b.finish(errs);
    Some(RawBfd {
        enabled: Some(enabled),
        interval,
        multiplier,
    })
}

/// The peer's BFD after applying the `[bgp]` default.
fn effective_bfd(peer: Option<RawBfd>, default: Option<RawBfd>) -> Option<Bfd> {
    let (p, d) = (peer.unwrap_or_default(), default.unwrap_or_default());
    if !p.enabled.or(d.enabled).unwrap_or(false) {
        return None;
    }
    Some(Bfd {
        interval: p.interval.or(d.interval).unwrap_or(BFD_INTERVAL),
        multiplier: p.multiplier.or(d.multiplier).unwrap_or(BFD_MULTIPLIER),
    })
}

/// `graceful_restart = { enabled = true, restart_time = "30s" }`: the restart time when on.
fn graceful_restart(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<Duration> {
    let mut g = t.table("graceful_restart", errs)?;
    let enabled = g.bool("enabled", errs).unwrap_or(true);
    let restart_time = g
        .duration(
            "restart_time",
            Duration::from_secs(1)..=Duration::from_secs(4095),
            errs,
        )
        .unwrap_or(Duration::from_secs(30));
    if restart_time.subsec_nanos() != 0 {
        errs.push(
            g.key("restart_time"),
            "the restart time is a whole number of seconds (RFC 4724)",
        );
    }
    g.finish(errs);
    enabled.then_some(restart_time)
}

pub(super) fn bgp(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Bgp> {
    let asn_v = asn(&mut t, "asn", errs);
    let router_id = match t.req_ip("router_id", errs) {
        Some(IpAddr::V4(ip)) if ip != Ipv4Addr::UNSPECIFIED => Some(ip),
        Some(ip) => {
            errs.push(
                t.key("router_id"),
                format!("\"{ip}\" is not a usable BGP identifier (a non-zero IPv4 address)"),
            );
            None
        }
        None => None,
    };
    let graceful_shutdown_wait = t
        .duration(
            "graceful_shutdown_wait",
            Duration::ZERO..=Duration::from_secs(600),
            errs,
        )
        .unwrap_or(Duration::from_secs(5));
    let comms = communities(&mut t, errs);
    let standby = super::policy::standby(&mut t, errs);
    let default_bfd = raw_bfd(&mut t, errs);
    let graceful_restart = graceful_restart(&mut t, errs);
    let raw_peers = t.tables("peer", errs);
    if raw_peers.is_empty() && !t.has("peer") {
        errs.push(
            t.key("peer"),
            "missing: [bgp] needs at least one [[bgp.peer]]",
        );
    }
    let mut peers: Vec<Peer> = Vec::new();
    for (i, map) in raw_peers {
        let mut p = Table::new(format!("bgp.peer[{i}]"), map);
        let (address, peer) = peer(&mut p, default_bfd, errs);
        p.finish(errs);
        if let Some(a) = address
            && peers.iter().any(|q| q.address == a)
        {
            errs.push(
                format!("bgp.peer[{i}].address"),
                format!("peer {a} listed twice"),
            );
            continue;
        }
        peers.extend(peer);
    }
    t.finish(errs);
    Some(Bgp {
        asn: asn_v?,
        router_id: router_id?,
        graceful_shutdown_wait,
        communities: comms,
        standby,
        graceful_restart,
        peers,
    })
}

/// One `[[bgp.peer]]`: its address as read (to find duplicates) and the peer, when its
/// address and ASN are valid.
fn peer(
    p: &mut Table<'_>,
    default_bfd: Option<RawBfd>,
    errs: &mut ConfigErrors,
) -> (Option<IpAddr>, Option<Peer>) {
    let address = p.req_ip("address", errs);
    let peer_asn = asn(p, "asn", errs);
    let port = p.int("port", 1..=65535, errs).unwrap_or(179) as u16;
    let hold_time = hold_time(p, errs);
    let connect_retry = p
        .duration(
            "connect_retry",
            Duration::from_secs(1)..=Duration::from_secs(3600),
            errs,
        )
        .unwrap_or(Duration::from_secs(5));
    let source = p.ip("source", errs);
    let next_hop = p.ip("next_hop", errs);
    if let (Some(a), Some(s)) = (address, source)
        && a.is_ipv4() != s.is_ipv4()
    {
        errs.push(
            p.key("source"),
            format!(
                "\"{s}\" is {} but the peer address {a} is {}",
                family(&s),
                family(&a)
            ),
        );
    }
    let passive = p.bool("passive", errs).unwrap_or(false);
    let password = password(p, errs);
    let ttl_security = p.bool("ttl_security", errs).unwrap_or(false);
    let max_prefixes = p
        .int("max_prefixes", 1..=i64::from(u32::MAX), errs)
        .map(|n| n as u32);
    let bfd = effective_bfd(raw_bfd(p, errs), default_bfd);
    let export = super::policy::peer_export(p, errs);
    let peer = match (address, peer_asn) {
        (Some(address), Some(asn)) => Some(Peer {
            address,
            asn,
            port,
            hold_time,
            connect_retry,
            source,
            next_hop,
            passive,
            password,
            ttl_security,
            max_prefixes,
            bfd,
            export,
        }),
        _ => None,
    };
    (address, peer)
}

/// `hold_time`: 0 or at least 3 s, in whole seconds (RFC 4271).
fn hold_time(p: &mut Table<'_>, errs: &mut ConfigErrors) -> Duration {
    let hold_time = p
        .duration(
            "hold_time",
            Duration::ZERO..=Duration::from_secs(65535),
            errs,
        )
        .unwrap_or(Duration::from_secs(9));
    if !hold_time.is_zero() && hold_time < Duration::from_secs(3) {
        errs.push(
            p.key("hold_time"),
            format!(
                "{} is not allowed: a hold time is 0 or at least 3s (RFC 4271)",
                humantime::format_duration(hold_time)
            ),
        );
    }
    if hold_time.subsec_nanos() != 0 {
        errs.push(
            p.key("hold_time"),
            "BGP hold time is a whole number of seconds",
        );
    }
    hold_time
}

/// The longest TCP MD5 secret Linux takes (TCP_MD5SIG_MAXKEYLEN); the speaker's
/// `Md5Key::MAX_LEN`, which the appliance's tests check it against (this crate does not
/// depend on the speaker).
pub const MD5_KEY_MAX_LEN: usize = 80;

/// `password`: the TCP MD5 secret (RFC 2385).
fn password(p: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<String> {
    let password = p.string("password", errs);
    if let Some(pw) = &password
        && !(1..=MD5_KEY_MAX_LEN).contains(&pw.len())
    {
        // The key is used byte for byte as the RFC 2385 secret, and Linux takes at most
        // TCP_MD5SIG_MAXKEYLEN (80) bytes; an empty one would mean "no signature".
        errs.push(
            p.key("password"),
            format!(
                "TCP MD5 password is {} bytes; it must be 1 to {} bytes",
                pw.len(),
                MD5_KEY_MAX_LEN
            ),
        );
    }
    password
}
