//! What each keepalived checker sends and expects, as a Sluice check kind: TCP_CHECK and
//! SMTP_CHECK (connect, and the 220 greeting) as `tcp`, HTTP_GET and SSL_GET as `http` and
//! `https`, PING_CHECK as `icmp`, UDP_CHECK as `udp` when its payload is text, and
//! MISC_CHECK when its script is a recognisable TCP or HTTP probe (`nc -z`, nagios'
//! `check_tcp` / `check_http`, `curl` or `wget` of a URL). The rest is reported.

use super::CheckKind;
use super::lvs::Cx;
use super::parse::Node;

/// The kind of checker `c` (its specific keywords in `rest`), or `None` with why noted.
pub(crate) fn kind(
    c: &Node,
    rest: &[&Node],
    vhost: Option<&str>,
    protocol: &str,
    cx: &mut Cx,
) -> Option<CheckKind> {
    let name = c.keyword();
    match name {
        "TCP_CHECK" | "SMTP_CHECK" => {
            for k in rest {
                match (name, k.keyword()) {
                    ("SMTP_CHECK", "helo_name") => cx.note(
                        k.line,
                        "helo_name: Sluice's check reads the greeting and sends no HELO",
                    ),
                    ("SMTP_CHECK", "host") => cx.note(
                        k.line,
                        "SMTP_CHECK host block: Sluice checks each backend on its own address",
                    ),
                    _ => cx.unknown(k, name),
                }
            }
            if name == "SMTP_CHECK" {
                cx.note(
                    c.line,
                    "SMTP_CHECK: a TCP check that expects the \"220\" greeting",
                );
                return Some(CheckKind::Tcp {
                    expect: Some("220".into()),
                });
            }
            (protocol == "tcp")
                .then_some(CheckKind::Tcp { expect: None })
                .or_else(|| {
                    cx.note(
                        c.line,
                        "TCP_CHECK on a UDP service: Sluice checks a UDP VIP's backends by UDP; left out",
                    );
                    None
                })
        }
        "HTTP_GET" | "SSL_GET" => http(c, rest, vhost, cx),
        "PING_CHECK" => {
            for k in rest {
                cx.unknown(k, name);
            }
            Some(CheckKind::Icmp)
        }
        "UDP_CHECK" => udp(c, rest, cx),
        "MISC_CHECK" => misc(c, rest, cx),
        other => {
            let why = match other {
                "DNS_CHECK" => "Sluice's udp check sends a fixed text payload, not a DNS query",
                "BFD_CHECK" => "Sluice runs BFD only on its BGP sessions",
                _ => "Sluice cannot watch a file for a backend's state",
            };
            cx.note(
                c.line,
                format!("{other}: no Sluice equivalent ({why}): left out"),
            );
            None
        }
    }
}

/// HTTP_GET / SSL_GET: the first `url`'s path and status codes.
fn http(c: &Node, rest: &[&Node], vhost: Option<&str>, cx: &mut Cx) -> Option<CheckKind> {
    let tls = c.keyword() == "SSL_GET";
    let mut urls = Vec::new();
    let mut server_name = None;
    let mut sni = false;
    for k in rest {
        let arg = k.args().first().cloned();
        match k.keyword() {
            "url" => urls.push(*k),
            "enable_sni" => sni = true,
            "sni_name" => server_name = arg,
            "tls_compliant" => {}
            "http_protocol" if arg.as_deref() != Some("1.1") => cx.note(
                k.line,
                format!(
                    "http_protocol {}: Sluice's check speaks HTTP/1.1",
                    arg.unwrap_or_default()
                ),
            ),
            "http_protocol" => {}
            "fast_recovery" => cx.note(
                k.line,
                "fast_recovery: Sluice needs `rise` good probes (1 here) to bring a backend up",
            ),
            "virtualhost" => {}
            _ => cx.unknown(k, c.keyword()),
        }
    }
    let vhost = rest
        .iter()
        .find(|k| k.keyword() == "virtualhost")
        .and_then(|k| k.args().first().map(String::as_str))
        .or(vhost);
    let (mut path, mut status, mut host) = ("/".to_string(), (200, 299), vhost.map(str::to_string));
    for (i, u) in urls.iter().enumerate() {
        url(u, i, &mut path, &mut status, &mut host, cx);
    }
    if !path.starts_with('/') || path.contains([' ', '\r', '\n']) {
        cx.note(
            c.line,
            format!("url path {path:?}: not a request path: \"/\" used"),
        );
        path = "/".into();
    }
    if tls && sni && server_name.is_none() {
        server_name = host.clone();
    }
    if tls {
        cx.note(
            c.line,
            "SSL_GET: an https check with verify_tls = false (keepalived does not verify the certificate either)",
        );
    }
    Some(CheckKind::Http {
        tls,
        path,
        host: host.take(),
        status,
        server_name,
    })
}

/// One `url` block: the first gives path, status codes and host; further ones are noted.
fn url(
    u: &Node,
    i: usize,
    path: &mut String,
    status: &mut (u16, u16),
    host: &mut Option<String>,
    cx: &mut Cx,
) {
    if i > 0 {
        let what: Vec<String> = u.children().iter().map(|k| k.words.join(" ")).collect();
        cx.note(
            u.line,
            format!(
                "url {{ {} }}: Sluice's http check requests one path: this further url is left out",
                what.join("; ")
            ),
        );
        return;
    }
    for k in u.children() {
        let arg = k.args().first().cloned().unwrap_or_default();
        match k.keyword() {
            "path" => *path = arg,
            "status_code" => *status = status_codes(k, cx),
            "virtualhost" => *host = Some(arg),
            "digest" => cx.note(
                k.line,
                "digest: Sluice does not compare a body digest (use expect_body for a substring): left out",
            ),
            "regex" | "regex_no_match" | "regex_options" | "regex_stack"
            | "regex_min_offset" | "regex_max_offset" => cx.note(
                k.line,
                format!(
                    "{}: Sluice matches a body substring (expect_body), not a regex: left out",
                    k.keyword()
                ),
            ),
            "tls_compliant" => {}
            _ => cx.unknown(k, "url"),
        }
    }
}

/// `status_code 200` or `200-299`; Sluice takes one code or one range.
fn status_codes(k: &Node, cx: &mut Cx) -> (u16, u16) {
    let parse = |s: &str| -> Option<(u16, u16)> {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let (a, b) = (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?);
        ((100..=599).contains(&a) && (a..=599).contains(&b)).then_some((a, b))
    };
    let Some(first) = k.args().first().and_then(|s| parse(s)) else {
        cx.note(
            k.line,
            format!(
                "status_code {}: not a code or range: 200-299 used",
                k.args().join(" ")
            ),
        );
        return (200, 299);
    };
    if k.args().len() > 1 {
        cx.note(
            k.line,
            format!(
                "status_code {}: Sluice accepts one code or range: {}-{} used",
                k.args().join(" "),
                first.0,
                first.1
            ),
        );
    }
    first
}

/// UDP_CHECK: a text payload (keepalived writes it in hex).
fn udp(c: &Node, rest: &[&Node], cx: &mut Cx) -> Option<CheckKind> {
    let mut payload = None;
    for k in rest {
        match k.keyword() {
            "payload" => payload = Some((k.args().concat(), k.line)),
            "require_reply" | "min_reply_length" | "max_reply_length" => cx.note(
                k.line,
                format!("{}: Sluice's udp check accepts any reply", k.keyword()),
            ),
            _ => cx.unknown(k, "UDP_CHECK"),
        }
    }
    let Some((hex, line)) = payload else {
        cx.note(c.line, "UDP_CHECK without payload: Sluice's udp check needs one (payload = \"ping\" written; it must draw a reply)");
        return Some(CheckKind::Udp {
            payload: "ping".into(),
        });
    };
    let bytes: Option<Vec<u8>> = hex
        .as_bytes()
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
        })
        .collect();
    match bytes.and_then(|b| String::from_utf8(b).ok()) {
        Some(text)
            if !text.is_empty() && text.chars().all(|ch| ch.is_ascii_graphic() || ch == ' ') =>
        {
            Some(CheckKind::Udp { payload: text })
        }
        _ => {
            cx.note(
                line,
                format!("UDP_CHECK payload {hex}: Sluice's udp payload is text: left out"),
            );
            None
        }
    }
}

/// MISC_CHECK: only a script that is plainly a TCP connect or an HTTP GET maps.
fn misc(c: &Node, rest: &[&Node], cx: &mut Cx) -> Option<CheckKind> {
    let mut path = None;
    for k in rest {
        match k.keyword() {
            "misc_path" => path = Some(k.args().join(" ")),
            "misc_timeout" | "user" => {}
            "misc_dynamic" => cx.note(
                k.line,
                "misc_dynamic: Sluice's checks do not set weights (use `sluice ctl weight`)",
            ),
            _ => cx.unknown(k, "MISC_CHECK"),
        }
    }
    let script = path.unwrap_or_default();
    let words: Vec<&str> = script.split_whitespace().collect();
    let program = words
        .first()
        .map_or("", |w| w.rsplit('/').next().unwrap_or(w));
    let url = words
        .iter()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"));
    let kind = match program {
        "check_tcp" => Some(CheckKind::Tcp { expect: None }),
        "nc" | "ncat" if words.contains(&"-z") => Some(CheckKind::Tcp { expect: None }),
        "curl" | "wget" | "check_http" => {
            let (tls, path) = match url {
                Some(u) => {
                    let tls = u.starts_with("https://");
                    let after = u.split_once("://").map_or("", |x| x.1);
                    (
                        tls,
                        after
                            .find('/')
                            .map_or("/".to_string(), |i| after[i..].to_string()),
                    )
                }
                None => {
                    let p = words
                        .iter()
                        .position(|w| *w == "-u")
                        .and_then(|i| words.get(i + 1));
                    (
                        words.contains(&"-S"),
                        p.map_or("/".to_string(), |p| p.to_string()),
                    )
                }
            };
            Some(CheckKind::Http {
                tls,
                path,
                host: None,
                status: (200, 299),
                server_name: None,
            })
        }
        _ => None,
    };
    match &kind {
        Some(k) => cx.note(
            c.line,
            format!(
                "MISC_CHECK {script:?}: carried over as Sluice's {} check (the script itself is not run)",
                match k {
                    CheckKind::Tcp { .. } => "tcp",
                    CheckKind::Http { tls: true, .. } => "https",
                    _ => "http",
                }
            ),
        ),
        None => cx.note(
            c.line,
            format!("MISC_CHECK {script:?}: Sluice runs no scripts and this one is not a TCP or HTTP probe it recognises: left out"),
        ),
    }
    kind
}
