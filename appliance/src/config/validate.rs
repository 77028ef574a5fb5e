//! Turns the raw configuration tree into a validated [`Config`], checking every key, range
//! and cross-reference, and collecting all errors of a file.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use config::{Map, Value};

use super::error::ConfigErrors;
use super::model::*;
use super::reader::{Table, element_path};

const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
const NAME_HELP: &str = "letters, digits, '.', '_' and '-', at most 63 characters";

/// Default Prometheus exposition address.
pub const DEFAULT_METRICS: &str = "127.0.0.1:9300";
/// Default API socket.
pub const DEFAULT_SOCKET: &str = "/run/sluice/api.sock";

/// Validates the whole tree. Returns the model only when there is no error at all.
pub fn validate(root: &Map<String, Value>) -> Result<Config, ConfigErrors> {
    let mut errs = ConfigErrors::default();
    let mut top = Table::new("", root);

    let appliance = match top.table("appliance", &mut errs) {
        Some(t) => appliance(t, &mut errs),
        None => {
            if !top.has("appliance") {
                errs.push("appliance", "missing: the [appliance] section is required");
            }
            None
        }
    };
    let api = match top.table("api", &mut errs) {
        Some(t) => api(t, &mut errs),
        None => Some(default_api()),
    };
    let bgp = top.table("bgp", &mut errs).map(|t| bgp(t, &mut errs));
    let health_checks = health_checks(&mut top, &mut errs);
    let check_names: HashSet<String> = health_checks.iter().map(|c| c.name.clone()).collect();
    let vips = vips(&mut top, &check_names, appliance.as_ref(), &mut errs);
    top.finish(&mut errs);

    if !errs.is_empty() {
        return Err(errs);
    }
    match (appliance, api, bgp) {
        (Some(appliance), Some(api), bgp) => Ok(Config {
            appliance,
            api,
            bgp: bgp.flatten(),
            health_checks,
            vips,
        }),
        // A part that failed always records an error, so this is unreachable in practice;
        // stay total anyway.
        _ => {
            errs.push("", "configuration incomplete");
            Err(errs)
        }
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let n = u64::from(n);
    let mut d = 2u64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "IPv4" } else { "IPv6" }
}

fn appliance(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Appliance> {
    let name = t.req_string("name", errs);
    if let Some(n) = &name
        && !valid_name(n)
    {
        errs.push(
            t.key("name"),
            format!("{n:?} is not a valid name ({NAME_HELP})"),
        );
    }
    let mut interfaces = Vec::new();
    match t.strings("interfaces", errs) {
        None => {
            if !t.has("interfaces") {
                errs.push(
                    t.key("interfaces"),
                    "missing (required): at least one interface",
                );
            }
        }
        Some(list) if list.is_empty() => {
            errs.push(
                t.key("interfaces"),
                "empty: at least one interface is required",
            );
        }
        Some(list) => {
            let mut seen = HashSet::new();
            for (path, ifname) in list {
                let ok = !ifname.is_empty()
                    && ifname.len() <= 15
                    && !ifname.contains(['/', ':', ' ', '\t', '\n'])
                    && ifname != "."
                    && ifname != "..";
                if !ok {
                    errs.push(path, format!("{ifname:?} is not a valid interface name"));
                } else if !seen.insert(ifname.clone()) {
                    errs.push(path, format!("interface {ifname:?} listed twice"));
                } else {
                    interfaces.push(ifname);
                }
            }
        }
    }
    let xdp_mode = t
        .choice(
            "xdp_mode",
            &[
                ("auto", XdpMode::Auto),
                ("native", XdpMode::Native),
                ("generic", XdpMode::Generic),
            ],
            errs,
        )
        .unwrap_or(XdpMode::Auto);
    let busy_poll = t.bool("busy_poll", errs).unwrap_or(false);
    // Off until the cache has run through the lab tests on real deployments: on is the
    // fast path, off is the engine alone, whose behaviour every test already pins down.
    let flow_cache = t.bool("flow_cache", errs).unwrap_or(true);
    let pin_workers = t.bool("pin_workers", errs).unwrap_or(false);
    let umem_frames = t.int("umem_frames", 256..=1 << 20, errs).unwrap_or(8192) as u32;
    let ring_size = t.int("ring_size", 64..=1 << 16, errs).unwrap_or(2048) as u32;
    if !ring_size.is_power_of_two() {
        errs.push(
            t.key("ring_size"),
            format!("{ring_size} is not a power of two"),
        );
    }
    if ring_size * 2 > umem_frames {
        errs.push(
            t.key("umem_frames"),
            format!("{umem_frames} frames cannot fill rx and tx rings of {ring_size} (need at least {})", ring_size * 2),
        );
    }
    let conntrack_capacity = t
        .int("conntrack_capacity", 1024..=1 << 26, errs)
        .unwrap_or(1 << 18) as u32;
    let maglev_table_size = t
        .int("maglev_table_size", 13..=(1 << 24), errs)
        .unwrap_or(65537) as u32;
    if !is_prime(maglev_table_size) {
        errs.push(
            t.key("maglev_table_size"),
            format!(
                "{maglev_table_size} is not a prime (Maglev needs a prime table size, e.g. 65537)"
            ),
        );
    }
    let timeouts = match t.table("timeouts", errs) {
        Some(mut tt) => {
            let d = Timeouts::default();
            let r = Duration::from_secs(1)..=MAX_DURATION;
            let out = Timeouts {
                tcp_syn: tt.duration("tcp_syn", r.clone(), errs).unwrap_or(d.tcp_syn),
                tcp_established: tt
                    .duration("tcp_established", r.clone(), errs)
                    .unwrap_or(d.tcp_established),
                tcp_closing: tt
                    .duration("tcp_closing", r.clone(), errs)
                    .unwrap_or(d.tcp_closing),
                udp: tt.duration("udp", r, errs).unwrap_or(d.udp),
            };
            tt.finish(errs);
            out
        }
        None => Timeouts::default(),
    };
    t.finish(errs);
    Some(Appliance {
        name: name?,
        interfaces,
        xdp_mode,
        busy_poll,
        flow_cache,
        pin_workers,
        umem_frames,
        ring_size,
        conntrack_capacity,
        maglev_table_size,
        timeouts,
    })
}

fn default_api() -> Api {
    Api {
        socket: PathBuf::from(DEFAULT_SOCKET),
        metrics: DEFAULT_METRICS.parse().ok(),
        listen: None,
        token_file: None,
    }
}

fn api(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Api> {
    let d = default_api();
    let socket = match t.string("socket", errs) {
        Some(s) if s.starts_with('/') => PathBuf::from(s),
        Some(s) => {
            errs.push(t.key("socket"), format!("{s:?} is not an absolute path"));
            d.socket
        }
        None => d.socket,
    };
    let metrics = if t.has("metrics") {
        match t.string("metrics", errs).as_deref() {
            // An empty string turns the exposition off.
            Some("") => None,
            Some(_) => t.socket_addr("metrics", errs),
            None => None,
        }
    } else {
        d.metrics
    };
    let listen = t.socket_addr("listen", errs);
    let token_file = t.string("token_file", errs).map(PathBuf::from);
    if listen.is_some() && token_file.is_none() {
        errs.push(
            t.key("token_file"),
            "missing: an API on a TCP address (api.listen) needs a bearer token file",
        );
    }
    t.finish(errs);
    Some(Api {
        socket,
        metrics,
        listen,
        token_file,
    })
}

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

fn communities(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<Community> {
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

fn bgp(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Bgp> {
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
        let address = p.req_ip("address", errs);
        let peer_asn = asn(&mut p, "asn", errs);
        let port = p.int("port", 1..=65535, errs).unwrap_or(179) as u16;
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
        let password = p.string("password", errs);
        if let Some(pw) = &password
            && !(1..=bgp::Md5Key::MAX_LEN).contains(&pw.len())
        {
            // The key is used byte for byte as the RFC 2385 secret, and Linux takes at most
            // TCP_MD5SIG_MAXKEYLEN (80) bytes; an empty one would mean "no signature".
            errs.push(
                p.key("password"),
                format!(
                    "TCP MD5 password is {} bytes; it must be 1 to {} bytes",
                    pw.len(),
                    bgp::Md5Key::MAX_LEN
                ),
            );
        }
        let ttl_security = p.bool("ttl_security", errs).unwrap_or(false);
        let bfd = effective_bfd(raw_bfd(&mut p, errs), default_bfd);
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
        if let (Some(address), Some(asn)) = (address, peer_asn) {
            peers.push(Peer {
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
                bfd,
            });
        }
    }
    t.finish(errs);
    Some(Bgp {
        asn: asn_v?,
        router_id: router_id?,
        graceful_shutdown_wait,
        communities: comms,
        graceful_restart,
        peers,
    })
}

fn health_checks(top: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<HealthCheck> {
    let mut out: Vec<HealthCheck> = Vec::new();
    for (i, map) in top.tables("health_check", errs) {
        let path = element_path("", "health_check", i, map);
        let mut t = Table::new(path.clone(), map);
        let Some(check) = health_check(&mut t, errs) else {
            t.finish(errs);
            continue;
        };
        t.finish(errs);
        if out.iter().any(|c| c.name == check.name) {
            errs.push(path, format!("health check {:?} defined twice", check.name));
            continue;
        }
        out.push(check);
    }
    out
}

fn health_check(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<HealthCheck> {
    let name = t.req_string("name", errs);
    if let Some(n) = &name
        && !valid_name(n)
    {
        errs.push(
            t.key("name"),
            format!("{n:?} is not a valid name ({NAME_HELP})"),
        );
    }
    let kind_name = if t.has("kind") {
        t.choice(
            "kind",
            &[
                ("tcp", "tcp"),
                ("http", "http"),
                ("https", "https"),
                ("udp", "udp"),
                ("icmp", "icmp"),
            ],
            errs,
        )
    } else {
        errs.push(
            t.key("kind"),
            "missing (required): one of tcp, http, https, udp, icmp",
        );
        None
    };
    let interval = t
        .duration(
            "interval",
            Duration::from_millis(100)..=Duration::from_secs(3600),
            errs,
        )
        .unwrap_or(Duration::from_secs(2));
    let timeout = t
        .duration(
            "timeout",
            Duration::from_millis(10)..=Duration::from_secs(3600),
            errs,
        )
        .unwrap_or(Duration::from_secs(1));
    if timeout > interval {
        errs.push(
            t.key("timeout"),
            format!(
                "{} is longer than the interval {}: probes would overlap",
                humantime::format_duration(timeout),
                humantime::format_duration(interval)
            ),
        );
    }
    let rise = t.int("rise", 1..=100, errs).unwrap_or(2) as u32;
    let fall = t.int("fall", 1..=100, errs).unwrap_or(3) as u32;
    let jitter = t
        .duration("jitter", Duration::ZERO..=Duration::from_secs(3600), errs)
        .unwrap_or(Duration::ZERO);
    if jitter >= interval && !jitter.is_zero() {
        errs.push(t.key("jitter"), "must be shorter than the interval");
    }
    let initial = t
        .choice(
            "initial",
            &[("down", InitialHealth::Down), ("up", InitialHealth::Up)],
            errs,
        )
        .unwrap_or(InitialHealth::Down);
    let source = t.ip("source", errs);
    let port = t.int("port", 1..=65535, errs).map(|n| n as u16);

    let http_keys = ["method", "path", "host", "expect_status", "expect_body"];
    let kind = match kind_name? {
        "tcp" => {
            for k in http_keys
                .iter()
                .chain(&["payload", "verify_tls", "server_name"])
            {
                t.reject(k, "for kind \"tcp\"", errs);
            }
            CheckKind::Tcp {
                send: t.string("send", errs),
                expect: t.string("expect", errs),
            }
        }
        "udp" => {
            for k in http_keys
                .iter()
                .chain(&["send", "verify_tls", "server_name"])
            {
                t.reject(k, "for kind \"udp\"", errs);
            }
            let payload = t.req_string("payload", errs);
            CheckKind::Udp {
                payload: payload.unwrap_or_default(),
                expect: t.string("expect", errs),
            }
        }
        "icmp" => {
            for k in http_keys.iter().chain(&[
                "send",
                "expect",
                "payload",
                "verify_tls",
                "server_name",
                "port",
            ]) {
                t.reject(k, "for kind \"icmp\"", errs);
            }
            CheckKind::Icmp
        }
        kind => {
            for k in ["send", "expect", "payload"] {
                t.reject(k, &format!("for kind {kind:?}"), errs);
            }
            let http = http_check(t, errs);
            if kind == "https" {
                CheckKind::Https {
                    http,
                    verify_tls: t.bool("verify_tls", errs).unwrap_or(true),
                    server_name: t.string("server_name", errs),
                }
            } else {
                for k in ["verify_tls", "server_name"] {
                    t.reject(k, "for kind \"http\"", errs);
                }
                CheckKind::Http(http)
            }
        }
    };
    Some(HealthCheck {
        name: name?,
        kind,
        port,
        interval,
        timeout,
        rise,
        fall,
        jitter,
        initial,
        source,
    })
}

fn http_check(t: &mut Table<'_>, errs: &mut ConfigErrors) -> HttpCheck {
    let method = t
        .choice(
            "method",
            &[("GET", HttpMethod::Get), ("HEAD", HttpMethod::Head)],
            errs,
        )
        .unwrap_or(HttpMethod::Get);
    let path = match t.string("path", errs) {
        Some(p) if p.starts_with('/') && !p.contains([' ', '\r', '\n']) => p,
        Some(p) => {
            errs.push(
                t.key("path"),
                format!("{p:?} is not a request path starting with '/'"),
            );
            "/".into()
        }
        None => "/".into(),
    };
    let host = t.string("host", errs);
    if let Some(h) = &host
        && (h.is_empty() || h.contains([' ', '\r', '\n', '/']))
    {
        errs.push(t.key("host"), format!("{h:?} is not a valid Host header"));
    }
    let expect_status = match t.raw("expect_status").map(|v| &v.kind) {
        None => (200, 399),
        Some(config::ValueKind::String(s)) => {
            let parsed = s.split_once('-').and_then(|(a, b)| {
                let (a, b) = (a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?);
                (100..=599).contains(&a).then_some(())?;
                (a..=599).contains(&b).then_some((a, b))
            });
            parsed.unwrap_or_else(|| {
                errs.push(
                    t.key("expect_status"),
                    format!(
                        "{s:?} is not a status code or a range such as \"200-299\" within 100-599"
                    ),
                );
                (200, 399)
            })
        }
        Some(_) => t
            .int("expect_status", 100..=599, errs)
            .map(|n| (n as u16, n as u16))
            .unwrap_or((200, 399)),
    };
    let expect_body = t.string("expect_body", errs);
    HttpCheck {
        method,
        path,
        host,
        expect_status,
        expect_body,
    }
}

fn vips(
    top: &mut Table<'_>,
    checks: &HashSet<String>,
    appliance: Option<&Appliance>,
    errs: &mut ConfigErrors,
) -> Vec<Vip> {
    let raw = top.tables("vip", errs);
    if raw.is_empty() && !top.has("vip") {
        errs.push("vip", "missing: at least one [[vip]] is required");
    }
    let mut out: Vec<Vip> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, map) in raw {
        let path = element_path("", "vip", i, map);
        let mut t = Table::new(path.clone(), map);
        let vip = vip(&mut t, checks, appliance, errs);
        t.finish(errs);
        let Some(vip) = vip else { continue };
        if names.insert(vip.name.clone(), i).is_some() {
            errs.push(path, format!("vip name {:?} used twice", vip.name));
            continue;
        }
        let clash = out.iter().find(|o| {
            o.address == vip.address
                && o.protocol == vip.protocol
                && (o.port == vip.port || o.port == 0 || vip.port == 0)
        });
        if let Some(o) = clash {
            errs.push(
                path,
                format!(
                    "{} {}:{} overlaps vip {:?}",
                    vip.protocol.name(),
                    vip.address,
                    vip.port,
                    o.name
                ),
            );
            continue;
        }
        out.push(vip);
    }
    out
}

fn vip(
    t: &mut Table<'_>,
    checks: &HashSet<String>,
    appliance: Option<&Appliance>,
    errs: &mut ConfigErrors,
) -> Option<Vip> {
    let name = t.req_string("name", errs);
    if let Some(n) = &name
        && !valid_name(n)
    {
        errs.push(
            t.key("name"),
            format!("{n:?} is not a valid name ({NAME_HELP})"),
        );
    }
    let address = t.req_ip("address", errs);
    if let Some(a) = address
        && (a.is_unspecified() || a.is_multicast() || a.is_loopback())
    {
        errs.push(
            t.key("address"),
            format!("\"{a}\" cannot be a VIP (unspecified, multicast or loopback)"),
        );
    }
    let port = t.req_int("port", 0..=65535, errs).map(|n| n as u16);
    let protocol = t
        .choice(
            "protocol",
            &[("tcp", Protocol::Tcp), ("udp", Protocol::Udp)],
            errs,
        )
        .unwrap_or(Protocol::Tcp);
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
        "tunnel" => {
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
            let encap = match encap {
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
            };
            encap.map(Mode::Tunnel)
        }
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
    let rewrites_ports = matches!(mode, Some(Mode::Nat | Mode::FullNat));
    if port == Some(0) && rewrites_ports {
        errs.push(
            t.key("port"),
            format!(
                "0 (all ports) needs mode \"dr\" or \"tunnel\"; mode {mode_name:?} rewrites ports"
            ),
        );
    }
    let scheduler = t
        .choice("scheduler", &Scheduler::ALL, errs)
        .unwrap_or(Scheduler::Maglev);
    let hash = t
        .choice(
            "hash",
            &[
                ("5-tuple", HashFields::FiveTuple),
                ("3-tuple", HashFields::ThreeTuple),
                ("2-tuple", HashFields::TwoTuple),
            ],
            errs,
        )
        .unwrap_or(HashFields::FiveTuple);
    let health_check = t.string("health_check", errs);
    if let Some(hc) = &health_check
        && !checks.contains(hc)
    {
        errs.push(
            t.key("health_check"),
            format!("{hc:?} is not a defined [[health_check]]"),
        );
    }
    let mut snat = Vec::new();
    if matches!(mode, Some(Mode::FullNat)) {
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
    } else {
        t.reject(
            "snat",
            &format!("with mode {mode_name:?} (only with mode = \"fullnat\")"),
            errs,
        );
    }
    let comms = communities(t, errs);
    let backends = backends(t, address, port, mode, errs);
    if let Some(a) = appliance
        && backends.len() as u64 >= u64::from(a.maglev_table_size)
    {
        errs.push(
            t.key("backend"),
            format!(
                "{} backends do not fit a Maglev table of {} slots (appliance.maglev_table_size)",
                backends.len(),
                a.maglev_table_size
            ),
        );
    }
    Some(Vip {
        name: name?,
        address: address?,
        port: port?,
        protocol,
        mode: mode?,
        scheduler,
        hash,
        health_check,
        snat,
        communities: comms,
        backends,
    })
}

fn backends(
    t: &mut Table<'_>,
    vip_addr: Option<IpAddr>,
    vip_port: Option<u16>,
    mode: Option<Mode>,
    errs: &mut ConfigErrors,
) -> Vec<Backend> {
    let raw = t.tables("backend", errs);
    if raw.is_empty() && !t.has("backend") {
        errs.push(
            t.key("backend"),
            "missing: a VIP needs at least one [[vip.backend]]",
        );
    }
    let tunnel = matches!(mode, Some(Mode::Tunnel(_)));
    let maps_ports = matches!(mode, Some(Mode::Nat | Mode::FullNat));
    let mut out: Vec<Backend> = Vec::new();
    for (i, map) in raw {
        let mut b = Table::new(format!("{}[{i}]", t.key("backend")), map);
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
        b.finish(errs);
        let Some(address) = address else { continue };
        if out.iter().any(|o| o.address == address && o.port == port) {
            let shown = match address {
                IpAddr::V4(a) => format!("{a}:{port}"),
                IpAddr::V6(a) => format!("[{a}]:{port}"),
            };
            errs.push(t.path.clone(), format!("backend {shown} listed twice"));
            continue;
        }
        out.push(Backend {
            address,
            port,
            weight,
            state,
        });
    }
    out
}
