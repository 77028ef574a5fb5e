//! `[[health_check]]`: named probes a VIP refers to, each kind with its own keys.

use std::time::Duration;

use super::check_name;
use crate::error::ConfigErrors;
use crate::model::{CheckKind, HealthCheck, HttpCheck, HttpMethod, InitialHealth};
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
    let kind = kind(t, kind_name?, errs);
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
            ],
            errs,
        )
    } else {
        errs.push(
            t.key("kind"),
            "missing (required): one of tcp, http, https, udp, icmp",
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

/// The keys of one check kind; the other kinds' keys are rejected.
fn kind(t: &mut Table<'_>, kind_name: &str, errs: &mut ConfigErrors) -> CheckKind {
    let http_keys = ["method", "path", "host", "expect_status", "expect_body"];
    match kind_name {
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
    }
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
