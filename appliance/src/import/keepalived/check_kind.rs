//! What each keepalived checker sends and expects, as Sluice check kinds: TCP_CHECK as
//! `tcp`; SMTP_CHECK as `tcp` expecting the 220 greeting (one check per `host` block);
//! HTTP_GET and SSL_GET as `http` and `https`, one check per `url` (keepalived needs every
//! url to pass), with the url's path, status codes (a list), digest (MD5 of the page) and a
//! regex that is plain text as a body match; PING_CHECK as `icmp`; UDP_CHECK as `udp` when it
//! requires a reply (without one keepalived counts silence as up, which no Sluice check
//! does); MISC_CHECK when its script is a known probe (`misc.rs`). DNS_CHECK, BFD_CHECK and
//! FILE_CHECK, and anything that would check something else than keepalived checked, refuse.

use super::CheckKind;
use super::check::{CheckCx, Kind};
use super::lvs::{Cx, shown};
use super::parse::Node;

/// The kinds checker `c` (its own keywords in `rest`) maps to; none with why noted or
/// refused.
pub(crate) fn kinds(c: &Node, rest: &[&Node], ctx: &CheckCx<'_>, cx: &mut Cx) -> Vec<Kind> {
    let one = |kind| Kind {
        line: c.line,
        kind,
        target: None,
        timeout_ms: None,
    };
    match c.keyword() {
        "TCP_CHECK" => {
            for k in rest {
                cx.unknown(k, "TCP_CHECK");
            }
            vec![one(CheckKind::Tcp { expect: None })]
        }
        "SMTP_CHECK" => smtp(c, rest, cx),
        "HTTP_GET" | "SSL_GET" => http(c, rest, ctx.vhost, cx),
        "PING_CHECK" => {
            for k in rest {
                cx.unknown(k, "PING_CHECK");
            }
            vec![one(CheckKind::Icmp)]
        }
        "UDP_CHECK" => udp(c, rest, cx).map(one).into_iter().collect(),
        "MISC_CHECK" => super::misc::misc(c, rest, cx).into_iter().collect(),
        other => {
            let why = match other {
                "DNS_CHECK" => "Sluice has no DNS check (its udp check sends a fixed payload)",
                "BFD_CHECK" => "Sluice runs BFD only on its BGP sessions",
                _ => "Sluice cannot watch a file for a backend's state",
            };
            cx.refuse(c.line, format!("{other}: {why}"));
            Vec::new()
        }
    }
}

/// SMTP_CHECK: the 220 greeting, on the real server or on each `host` block's target.
fn smtp(c: &Node, rest: &[&Node], cx: &mut Cx) -> Vec<Kind> {
    let expect = || CheckKind::Tcp {
        expect: Some("220".into()),
    };
    let mut hosts = Vec::new();
    for k in rest {
        match k.keyword() {
            "helo_name" => cx.note(
                k.line,
                "helo_name: Sluice's check reads the greeting and sends no HELO",
            ),
            "host" => hosts.push(*k),
            _ => cx.unknown(k, "SMTP_CHECK"),
        }
    }
    cx.note(
        c.line,
        "SMTP_CHECK: a tcp check that expects the \"220\" greeting (keepalived also sends \
         HELO and QUIT); each host block is a check of its own, as keepalived makes it",
    );
    if hosts.is_empty() {
        return vec![Kind {
            line: c.line,
            kind: expect(),
            target: None,
            timeout_ms: None,
        }];
    }
    hosts
        .into_iter()
        .map(|h| {
            let mut address = None;
            let mut port = None;
            for k in h.children() {
                let arg = k.args().first().map(String::as_str).unwrap_or("");
                match k.keyword() {
                    "connect_ip" => address = arg.parse().ok(),
                    "connect_port" => port = arg.parse().ok(),
                    "bindto" | "bind_port" | "bind_if" | "fwmark" => cx.note(
                        k.line,
                        format!(
                            "{}: not carried over: Sluice's prober chooses its own source \
                             address, port and route (the check reaches the same host)",
                            k.keyword()
                        ),
                    ),
                    _ => cx.unknown(k, "SMTP_CHECK host"),
                }
            }
            Kind {
                line: h.line,
                kind: expect(),
                target: Some((address, port)),
                timeout_ms: None,
            }
        })
        .collect()
}

/// HTTP_GET / SSL_GET: one check per `url`.
fn http(c: &Node, rest: &[&Node], vhost: Option<&str>, cx: &mut Cx) -> Vec<Kind> {
    let tls = c.keyword() == "SSL_GET";
    let mut urls = Vec::new();
    let mut server_name = None;
    let mut sni = false;
    let mut vhost = vhost.map(str::to_string);
    for k in rest {
        let arg = k.args().first().cloned();
        match k.keyword() {
            "url" => urls.push(*k),
            "enable_sni" => sni = true,
            "sni_name" => server_name = arg,
            "virtualhost" => vhost = arg,
            "tls_compliant" => {}
            "http_protocol" => cx.note(
                k.line,
                format!(
                    "http_protocol {}: Sluice's check speaks HTTP/1.1 (with Connection: close)",
                    shown(&arg.unwrap_or_default())
                ),
            ),
            "fast_recovery" => cx.note(
                k.line,
                "fast_recovery: not needed: the import's checks bring a backend up after one \
                 good probe (rise = 1)",
            ),
            _ => cx.unknown(k, c.keyword()),
        }
    }
    if tls && sni && server_name.is_none() {
        server_name = vhost.clone();
    }
    if tls {
        cx.note(
            c.line,
            "SSL_GET: https checks with verify_tls = false (keepalived does not verify the \
             certificate either)",
        );
    }
    if urls.is_empty() {
        cx.note(
            c.line,
            format!(
                "{} without a url: keepalived drops the checker, so does the import",
                c.keyword()
            ),
        );
    }
    urls.into_iter()
        .filter_map(|u| url(u, tls, vhost.as_deref(), server_name.as_deref(), cx))
        .collect()
}

/// One `url` block as an http(s) check; `None` (noted or refused) when keepalived ignores
/// it or Sluice cannot check it alike.
fn url(
    u: &Node,
    tls: bool,
    vhost: Option<&str>,
    server_name: Option<&str>,
    cx: &mut Cx,
) -> Option<Kind> {
    let mut path = None;
    let mut status = Vec::new();
    let mut host = vhost.map(str::to_string);
    let mut digest = None;
    let mut body = None;
    for k in u.children() {
        let arg = k.args().first().cloned().unwrap_or_default();
        match k.keyword() {
            "path" => path = Some(arg),
            "status_code" => status.extend(status_codes(k, cx)),
            "virtualhost" => host = Some(arg),
            "digest" => match arg.len() == 32 && arg.bytes().all(|b| b.is_ascii_hexdigit()) {
                true => digest = Some(arg.to_ascii_lowercase()),
                false => cx.refuse(
                    k.line,
                    format!("digest {:?}: not an MD5 digest", shown(&arg)),
                ),
            },
            "regex" => body = regex(k, &arg, cx),
            "regex_no_match" | "regex_options" | "regex_stack" | "regex_min_offset"
            | "regex_max_offset" => cx.refuse(
                k.line,
                format!(
                    "{}: Sluice matches a body substring, not a regex with options",
                    k.keyword()
                ),
            ),
            "tls_compliant" => {}
            _ => cx.unknown(k, "url"),
        }
    }
    let Some(path) = path else {
        cx.note(
            u.line,
            "url without a path: keepalived ignores it (\"url has no path - ignoring\"), so \
             does the import",
        );
        return None;
    };
    if !path.starts_with('/') || path.contains([' ', '\r', '\n']) {
        cx.refuse(
            u.line,
            format!("url path {:?}: not a request path", shown(&path)),
        );
        return None;
    }
    if status.is_empty() {
        // keepalived's default (HTTP_DEFAULT_STATUS_CODE_MIN..MAX).
        status.push((200, 299));
    }
    Some(Kind {
        line: u.line,
        kind: CheckKind::Http {
            tls,
            verify: false,
            head: false,
            path,
            host,
            status,
            body,
            digest,
            server_name: server_name.map(str::to_string),
        },
        target: None,
        timeout_ms: None,
    })
}

/// A `regex` that is plain text is a body substring; any other refuses.
fn regex(k: &Node, pattern: &str, cx: &mut Cx) -> Option<String> {
    let special = |c: char| "\\.^$|?*+()[]{}".contains(c);
    if !pattern.is_empty() && !pattern.contains(special) {
        return Some(pattern.to_string());
    }
    cx.refuse(
        k.line,
        format!(
            "regex {:?}: Sluice matches a body substring, not a regular expression",
            shown(pattern)
        ),
    );
    None
}

/// `status_code 200 301-302 ...`: each a code or a range.
fn status_codes(k: &Node, cx: &mut Cx) -> Vec<(u16, u16)> {
    let mut out = Vec::new();
    for s in k.args() {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) if (100..=599).contains(&a) && (a..=599).contains(&b) => {
                out.push((a, b))
            }
            _ => cx.note(
                k.line,
                format!(
                    "status_code {:?}: not a code or range: keepalived ignores it (\"Invalid \
                     HTTP_GET status code\"), so does the import",
                    shown(s)
                ),
            ),
        }
    }
    out
}

/// UDP_CHECK: only with `require_reply` (keepalived counts silence as up without it) and a
/// text payload.
fn udp(c: &Node, rest: &[&Node], cx: &mut Cx) -> Option<CheckKind> {
    let mut payload = Some(String::new());
    let mut reply: Option<Option<String>> = None;
    for k in rest {
        let hex = k.args().concat();
        match k.keyword() {
            "payload" => payload = text(&hex),
            "require_reply" if hex.is_empty() => reply = Some(None),
            "require_reply" => match text(&hex) {
                Some(t) => reply = Some(Some(t)),
                None => {
                    cx.refuse(
                        k.line,
                        "require_reply: not text: Sluice's udp check expects text",
                    );
                    return None;
                }
            },
            "min_reply_length" | "max_reply_length" => cx.refuse(
                k.line,
                format!(
                    "{}: Sluice's udp check does not bound the reply's length",
                    k.keyword()
                ),
            ),
            _ => cx.unknown(k, "UDP_CHECK"),
        }
    }
    let Some(payload) = payload else {
        cx.refuse(
            c.line,
            "UDP_CHECK payload: not text: Sluice's udp payload is text",
        );
        return None;
    };
    let Some(expect) = reply else {
        cx.refuse(
            c.line,
            "UDP_CHECK without require_reply: keepalived counts a server up unless an ICMP \
             error comes back, and every Sluice udp check needs a reply: add require_reply \
             if the service answers",
        );
        return None;
    };
    if expect.is_some() {
        cx.note(
            c.line,
            "UDP_CHECK require_reply: Sluice accepts the reply's bytes anywhere in it \
             (keepalived: at its start)",
        );
    }
    Some(CheckKind::Udp { payload, expect })
}

/// Hex bytes as printable text, or `None`.
fn text(hex: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = hex
        .as_bytes()
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
        })
        .collect();
    bytes
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|t| t.chars().all(|ch| ch.is_ascii_graphic() || ch == ' '))
}
