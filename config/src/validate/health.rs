//! `[[health_check]]`: named probes a VIP refers to, each kind with its own keys; any kind
//! may probe another host (`address`) or port (`port`) than the backend's own.

use std::time::Duration;

use super::check_name;
use crate::error::ConfigErrors;
use crate::model::{CheckKind, GrpcCheck, HealthCheck, HttpCheck, HttpMethod, InitialHealth};
use crate::reader::{Table, element_path};

pub(super) fn health_checks(top: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<HealthCheck> {
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
    check_name(t, name.as_ref(), errs);
    let kind_name = kind_name(t, errs);
    let Timing {
        interval,
        timeout,
        rise,
        fall,
        jitter,
    } = timing(t, errs);
    let initial = t
        .choice(
            "initial",
            &[("down", InitialHealth::Down), ("up", InitialHealth::Up)],
            errs,
        )
        .unwrap_or(InitialHealth::Down);
    let source = t.ip("source", errs);
    let port = t.int("port", 1..=65535, errs).map(|n| n as u16);
    let address = t.ip("address", errs);
    if let Some(a) = address
        && (a.is_unspecified() || a.is_multicast())
    {
        errs.push(
            t.key("address"),
            format!("\"{a}\" cannot be probed (unspecified or multicast)"),
        );
    }
    if let (Some(a), Some(s)) = (address, source)
        && a.is_ipv4() != s.is_ipv4()
    {
        errs.push(
            t.key("source"),
            format!("\"{s}\" cannot reach address \"{a}\": the families differ"),
        );
    }
    let kind_name = kind_name?;
    if kind_name == "agent" && port.is_none() {
        errs.push(
            t.key("port"),
            "missing (required for kind \"agent\"): the agent listens on a port of its own",
        );
    }
    let kind = kind(t, kind_name, errs);
    Some(HealthCheck {
        name: name?,
        kind,
        port,
        address,
        interval,
        timeout,
        rise,
        fall,
        jitter,
        initial,
        source,
    })
}

/// How often a check probes, how long a probe may take, and how many results in a row
/// change a backend's state.
struct Timing {
    interval: Duration,
    timeout: Duration,
    rise: u32,
    fall: u32,
    jitter: Duration,
}

/// `kind`, required.
fn kind_name(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<&'static str> {
    if t.has("kind") {
        t.choice(
            "kind",
            &[
                ("tcp", "tcp"),
                ("http", "http"),
                ("https", "https"),
                ("udp", "udp"),
                ("icmp", "icmp"),
                ("agent", "agent"),
                ("grpc", "grpc"),
            ],
            errs,
        )
    } else {
        errs.push(
            t.key("kind"),
            "missing (required): one of tcp, http, https, udp, icmp, agent, grpc",
        );
        None
    }
}

/// `interval`, `timeout` (no longer than the interval), `rise`, `fall` and `jitter`
/// (shorter than the interval).
fn timing(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Timing {
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
    Timing {
        interval,
        timeout,
        rise,
        fall,
        jitter,
    }
}

/// Keys of the HTTP kinds.
const HTTP_KEYS: [&str; 6] = [
    "method",
    "path",
    "host",
    "expect_status",
    "expect_body",
    "expect_digest",
];
/// Keys of the gRPC kind.
const GRPC_KEYS: [&str; 3] = ["service", "tls", "authority"];

/// Rejects each of `keys` as not valid for kind `kind`.
fn reject_all<'k>(
    t: &mut Table<'_>,
    keys: impl IntoIterator<Item = &'k str>,
    kind: &str,
    errs: &mut ConfigErrors,
) {
    let why = format!("for kind {kind:?}");
    for k in keys {
        t.reject(k, &why, errs);
    }
}

/// The keys of one check kind; the other kinds' keys are rejected.
fn kind(t: &mut Table<'_>, kind_name: &str, errs: &mut ConfigErrors) -> CheckKind {
    let tls_keys = ["verify_tls", "server_name"];
    match kind_name {
        "tcp" => {
            let other = HTTP_KEYS.iter().chain(&GRPC_KEYS).chain(&tls_keys);
            reject_all(t, other.copied().chain(["payload"]), kind_name, errs);
            CheckKind::Tcp {
                send: t.string("send", errs),
                expect: t.string("expect", errs),
            }
        }
        "agent" => {
            let other = HTTP_KEYS.iter().chain(&GRPC_KEYS).chain(&tls_keys);
            reject_all(
                t,
                other.copied().chain(["payload", "expect"]),
                kind_name,
                errs,
            );
            CheckKind::Agent {
                send: t.string("send", errs),
            }
        }
        "udp" => {
            let other = HTTP_KEYS.iter().chain(&GRPC_KEYS).chain(&tls_keys);
            reject_all(t, other.copied().chain(["send"]), kind_name, errs);
            let payload = t.req_string("payload", errs);
            CheckKind::Udp {
                payload: payload.unwrap_or_default(),
                expect: t.string("expect", errs),
            }
        }
        "icmp" => {
            let other = HTTP_KEYS.iter().chain(&GRPC_KEYS).chain(&tls_keys);
            let own = ["send", "expect", "payload", "port"];
            reject_all(t, other.copied().chain(own), kind_name, errs);
            CheckKind::Icmp
        }
        "grpc" => {
            let other = HTTP_KEYS.iter().copied();
            reject_all(
                t,
                other.chain(["send", "expect", "payload"]),
                kind_name,
                errs,
            );
            grpc_check(t, errs)
        }
        kind => {
            reject_all(t, GRPC_KEYS.iter().copied(), kind, errs);
            reject_all(t, ["send", "expect", "payload"], kind, errs);
            let http = http_check(t, errs);
            if kind == "https" {
                CheckKind::Https {
                    http,
                    verify_tls: t.bool("verify_tls", errs).unwrap_or(true),
                    server_name: t.string("server_name", errs),
                }
            } else {
                reject_all(t, tls_keys, "http", errs);
                CheckKind::Http(http)
            }
        }
    }
}

/// `service` (the whole server when empty), `tls` with `verify_tls` and `server_name`, and
/// `authority`.
fn grpc_check(t: &mut Table<'_>, errs: &mut ConfigErrors) -> CheckKind {
    let service = t.string("service", errs).unwrap_or_default();
    if service.len() > 200 || service.contains(|c: char| c.is_control()) {
        errs.push(
            t.key("service"),
            format!("{service:?} is not a gRPC service name"),
        );
    }
    let tls = t.bool("tls", errs).unwrap_or(false);
    if !tls {
        for k in ["verify_tls", "server_name"] {
            t.reject(k, "for kind \"grpc\" without tls = true", errs);
        }
    }
    let authority = t.string("authority", errs);
    if let Some(a) = &authority
        && (a.is_empty() || a.contains([' ', '/', '\r', '\n']))
    {
        errs.push(
            t.key("authority"),
            format!("{a:?} is not a valid authority"),
        );
    }
    CheckKind::Grpc(GrpcCheck {
        service,
        tls,
        verify_tls: t.bool("verify_tls", errs).unwrap_or(true),
        server_name: t.string("server_name", errs),
        authority,
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
    let expect_status = expect_status(t, errs);
    let expect_body = t.string("expect_body", errs);
    let expect_digest = t.string("expect_digest", errs);
    if let Some(d) = &expect_digest
        && !(d.len() == 32 && d.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        errs.push(
            t.key("expect_digest"),
            format!("{d:?} is not an MD5 digest (32 hex digits, as keepalived's genhash prints)"),
        );
    }
    HttpCheck {
        method,
        path,
        host,
        expect_status,
        expect_body,
        expect_digest: expect_digest.map(|d| d.to_ascii_lowercase()),
    }
}

/// `expect_status`: a code, a range such as `"200-299"`, or a list of them (200 to 399 when
/// absent).
fn expect_status(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<(u16, u16)> {
    let default = vec![(200, 399)];
    let Some(v) = t.raw("expect_status") else {
        return default;
    };
    let key = t.key("expect_status");
    let one = |v: &config::Value, path: &str, errs: &mut ConfigErrors| -> Option<(u16, u16)> {
        let parsed = match &v.kind {
            config::ValueKind::String(s) => {
                let (a, b) = s.split_once('-').unwrap_or((s, s));
                let (a, b) = (a.trim().parse::<u16>().ok(), b.trim().parse::<u16>().ok());
                a.zip(b)
            }
            config::ValueKind::I64(n) => u16::try_from(*n).ok().map(|n| (n, n)),
            config::ValueKind::U64(n) => u16::try_from(*n).ok().map(|n| (n, n)),
            _ => None,
        };
        match parsed {
            Some((a, b)) if (100..=599).contains(&a) && (a..=599).contains(&b) => Some((a, b)),
            _ => {
                errs.push(
                    path,
                    format!(
                        "{} is not a status code (100-599) or a range such as \"200-299\"",
                        crate::reader::describe(v)
                    ),
                );
                None
            }
        }
    };
    let out: Vec<(u16, u16)> = match &v.kind {
        config::ValueKind::Array(items) if items.is_empty() => {
            errs.push(key, "an empty list accepts no status");
            return default;
        }
        config::ValueKind::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| one(item, &format!("{key}[{i}]"), errs))
            .collect(),
        _ => one(v, &key, errs).into_iter().collect(),
    };
    if out.is_empty() { default } else { out }
}
