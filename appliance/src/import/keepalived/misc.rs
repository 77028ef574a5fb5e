//! MISC_CHECK: keepalived runs a script and counts the real server up while it exits 0.
//! Sluice runs no scripts, so a script becomes a check only when it is plainly a probe Sluice
//! makes too, aimed at the same host, port, scheme and path: `nc -z HOST PORT` (a TCP
//! connect), nagios' `check_tcp -H HOST -p PORT` and `check_http -I|-H HOST [-p PORT] [-u
//! PATH] [-S]`, `curl [-f] URL` and `wget URL` (an HTTP GET, with the status codes the tool
//! exits 0 on). Every option is understood or the script is refused, as is any other script,
//! a host given by name (Sluice resolves no names) or a shell construct: the line says which.

use std::net::IpAddr;

use super::CheckKind;
use super::check::Kind;
use super::lvs::{Cx, shown};
use super::parse::Node;

/// The script's probe: kind, target and its own timeout (milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    pub kind: CheckKind,
    pub address: IpAddr,
    pub port: u16,
    pub timeout_ms: Option<u64>,
}

/// MISC_CHECK `c` as a check, or `None` with the line refused.
pub(crate) fn misc(c: &Node, rest: &[&Node], cx: &mut Cx) -> Option<Kind> {
    let mut path = None;
    let mut timeout = None;
    for k in rest {
        match k.keyword() {
            "misc_path" => path = Some(k.args().join(" ")),
            "misc_timeout" => timeout = k.args().first().and_then(|t| t.parse::<u64>().ok()),
            "user" => {}
            "misc_dynamic" => cx.note(
                k.line,
                "misc_dynamic: the probe the script makes exits 0 or 1 only, so it never set a \
                 weight: nothing to carry",
            ),
            _ => cx.unknown(k, "MISC_CHECK"),
        }
    }
    let script = path.unwrap_or_default();
    match read(&script) {
        Ok(p) => {
            cx.note(
                c.line,
                format!(
                    "MISC_CHECK {:?}: carried over as the {} check it makes, on {}:{} (the \
                     script itself is not run)",
                    shown(&script),
                    kind_name(&p.kind),
                    p.address,
                    p.port
                ),
            );
            let timeout_ms = match (p.timeout_ms, timeout) {
                (Some(a), Some(b)) => Some(a.min(b * 1000)),
                (a, b) => a.or(b.map(|s| s * 1000)),
            };
            Some(Kind {
                line: c.line,
                kind: p.kind,
                target: Some((Some(p.address), Some(p.port))),
                timeout_ms,
            })
        }
        Err(why) => {
            cx.refuse(
                c.line,
                format!(
                    "MISC_CHECK {:?}: Sluice runs no scripts, and {why}",
                    shown(&script)
                ),
            );
            None
        }
    }
}

fn kind_name(k: &CheckKind) -> &'static str {
    match k {
        CheckKind::Tcp { .. } => "tcp",
        CheckKind::Http { tls: true, .. } => "https",
        CheckKind::Http { .. } => "http",
        CheckKind::Udp { .. } => "udp",
        CheckKind::Icmp => "icmp",
    }
}

/// The probe a script makes, or why it is not one the import can carry.
pub(crate) fn read(script: &str) -> Result<Probe, String> {
    if script.contains(['|', '&', ';', '>', '<', '`', '$', '(']) {
        return Err("this one is a shell construct, not a single probe".into());
    }
    let words = split(script)?;
    let program = words
        .first()
        .map_or("", |w| w.rsplit('/').next().unwrap_or(w));
    let args = words.get(1..).unwrap_or(&[]);
    match program {
        "nc" | "ncat" | "netcat" => nc(args),
        "check_tcp" => check_tcp(args),
        "check_http" => check_http(args),
        "curl" => curl(args),
        "wget" => wget(args),
        "" => Err("the check has no misc_path".into()),
        other => Err(format!(
            "{:?} is not a probe it knows (nc -z, check_tcp, check_http, curl, wget)",
            shown(other)
        )),
    }
}

/// Words as keepalived splits a script line: on blanks, with '...' and "..." quoting.
fn split(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut w = String::new();
    let mut quote = None;
    let mut started = false;
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => w.push(c),
            (None, '"' | '\'') => {
                quote = Some(ch);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !w.is_empty() {
                    out.push(std::mem::take(&mut w));
                    started = false;
                }
            }
            (None, c) => w.push(c),
        }
    }
    if quote.is_some() {
        return Err("its quotes do not close".into());
    }
    if started || !w.is_empty() {
        out.push(w);
    }
    Ok(out)
}

/// Options of a probe tool: `-x VALUE`, `-xVALUE`, `--long=VALUE` or `--long VALUE` for those
/// in `with_value`, flags for those in `flags`; the rest of the words are positional.
struct Opts {
    values: Vec<(String, String)>,
    flags: Vec<String>,
    positional: Vec<String>,
}

fn opts(args: &[String], with_value: &[&str], flags: &[&str]) -> Result<Opts, String> {
    let mut o = Opts {
        values: Vec::new(),
        flags: Vec::new(),
        positional: Vec::new(),
    };
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if !a.starts_with('-') || a == "-" {
            o.positional.push(a.clone());
            continue;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if a.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ if !a.starts_with("--") && a.len() > 2 && with_value.contains(&&a[..2]) => {
                (a[..2].to_string(), Some(a[2..].to_string()))
            }
            _ => (a.clone(), None),
        };
        if with_value.contains(&name.as_str()) {
            let v = match inline {
                Some(v) => v,
                None => {
                    let v = args.get(i).ok_or(format!("option {name} has no value"))?;
                    i += 1;
                    v.clone()
                }
            };
            o.values.push((name, v));
        } else if flags.contains(&name.as_str()) {
            o.flags.push(name);
        } else if !a.starts_with("--")
            && a.len() > 2
            && a[1..]
                .chars()
                .all(|c| flags.contains(&format!("-{c}").as_str()))
        {
            // Grouped short flags: `-zv`.
            o.flags.extend(a[1..].chars().map(|c| format!("-{c}")));
        } else {
            return Err(format!(
                "its option {:?} is not one the import knows",
                shown(a)
            ));
        }
    }
    Ok(o)
}

impl Opts {
    fn value(&self, names: &[&str]) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(n, _)| names.contains(&n.as_str()))
            .map(|(_, v)| v.as_str())
    }

    fn flag(&self, names: &[&str]) -> bool {
        self.flags.iter().any(|f| names.contains(&f.as_str()))
    }

    /// A timeout option in seconds, as milliseconds.
    fn seconds(&self, names: &[&str]) -> Result<Option<u64>, String> {
        self.value(names)
            .map(|v| {
                v.parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map(|s| (s * 1000.0).round() as u64)
                    .ok_or(format!(
                        "its timeout {:?} is not a number of seconds",
                        shown(v)
                    ))
            })
            .transpose()
    }
}

/// An IP address literal (`[v6]` too); a name refuses.
fn ip(host: &str) -> Result<IpAddr, String> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| {
            format!(
                "its host {:?} is not an IP address (Sluice resolves no names)",
                shown(host)
            )
        })
}

fn port(p: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or(format!("its port {:?} is not a port", shown(p)))
}

/// `nc -z [-w SECS] [-v] [-n] HOST PORT`: a TCP connect.
fn nc(args: &[String]) -> Result<Probe, String> {
    let o = opts(args, &["-w", "-G", "-s"], &["-z", "-v", "-n", "-4", "-6"])?;
    if !o.flag(&["-z"]) {
        return Err("nc without -z sends and waits for data, not a connect check".into());
    }
    if o.value(&["-s"]).is_some() {
        return Err("nc -s sets a source address the import cannot tell is the appliance's".into());
    }
    let [host, p] = o.positional.as_slice() else {
        return Err("nc -z needs one host and one port".into());
    };
    Ok(Probe {
        kind: CheckKind::Tcp { expect: None },
        address: ip(host)?,
        port: port(p)?,
        timeout_ms: o.seconds(&["-w", "-G"])?,
    })
}

/// nagios' `check_tcp -H HOST -p PORT [-t SECS] [-w SECS] [-c SECS] [-e TEXT]`.
fn check_tcp(args: &[String]) -> Result<Probe, String> {
    let o = opts(
        args,
        &[
            "-H",
            "--hostname",
            "-p",
            "--port",
            "-t",
            "--timeout",
            "-w",
            "-c",
            "-e",
            "--expect",
        ],
        &["-4", "-6"],
    )?;
    if !o.positional.is_empty() {
        return Err("check_tcp takes no words besides its options".into());
    }
    let host = o.value(&["-H", "--hostname"]).ok_or(
        "check_tcp without -H exits with \"You must provide a server address\": it never passed",
    )?;
    let p = o
        .value(&["-p", "--port"])
        .ok_or("check_tcp without -p has no port to check")?;
    // A connect slower than -w or -c exits non-zero: keepalived counted it a failure.
    let slow = [
        o.seconds(&["-w"])?,
        o.seconds(&["-c"])?,
        o.seconds(&["-t", "--timeout"])?,
    ];
    Ok(Probe {
        kind: CheckKind::Tcp {
            expect: o.value(&["-e", "--expect"]).map(str::to_string),
        },
        address: ip(host)?,
        port: port(p)?,
        timeout_ms: slow.into_iter().flatten().min(),
    })
}

/// nagios' `check_http -I IP | -H HOST [-p PORT] [-u PATH] [-S] [-e CODES] [-s TEXT]`.
fn check_http(args: &[String]) -> Result<Probe, String> {
    let o = opts(
        args,
        &[
            "-H",
            "--hostname",
            "-I",
            "--IP-address",
            "-p",
            "--port",
            "-u",
            "--url",
            "-e",
            "--expect",
            "-s",
            "--string",
            "-t",
            "--timeout",
            "-w",
            "-c",
            "-j",
            "--method",
        ],
        &["-S", "--ssl", "--sni", "-4", "-6", "-N", "--no-body"],
    )?;
    if !o.positional.is_empty() {
        return Err("check_http takes no words besides its options".into());
    }
    let vhost = o.value(&["-H", "--hostname"]);
    let host = o.value(&["-I", "--IP-address"]).or(vhost).ok_or(
        "check_http without -H or -I exits with \"You must specify a server address or host \
         name\": it never passed",
    )?;
    let tls = o.flag(&["-S", "--ssl"]);
    let p = match o.value(&["-p", "--port"]) {
        Some(p) => port(p)?,
        None if tls => 443,
        None => 80,
    };
    let head = match o.value(&["-j", "--method"]) {
        None | Some("GET") => false,
        Some("HEAD") => true,
        Some(m) => {
            return Err(format!(
                "check_http -j {}: Sluice sends GET or HEAD",
                shown(m)
            ));
        }
    };
    // check_http passes on 2xx and 3xx (a redirect is OK unless -f), or on the codes -e lists.
    let status = match o.value(&["-e", "--expect"]) {
        None => vec![(200, 399)],
        Some(e) => codes(e)?,
    };
    let slow = [
        o.seconds(&["-w"])?,
        o.seconds(&["-c"])?,
        o.seconds(&["-t", "--timeout"])?,
    ];
    let address = ip(host)?;
    Ok(Probe {
        kind: CheckKind::Http {
            tls,
            verify: false,
            head,
            path: o.value(&["-u", "--url"]).unwrap_or("/").to_string(),
            host: vhost.filter(|h| ip(h).is_err()).map(str::to_string),
            status,
            body: o.value(&["-s", "--string"]).map(str::to_string),
            digest: None,
            server_name: None,
        },
        address,
        port: p,
        timeout_ms: slow.into_iter().flatten().min(),
    })
}

/// check_http's `-e 200,302`: status codes.
fn codes(e: &str) -> Result<Vec<(u16, u16)>, String> {
    e.split(',')
        .map(|c| {
            let c = c
                .trim()
                .trim_start_matches("HTTP/1.1 ")
                .trim_start_matches("HTTP/1.0 ");
            c.parse::<u16>()
                .ok()
                .filter(|n| (100..=599).contains(n))
                .map(|n| (n, n))
                .ok_or(format!(
                    "its -e {:?} is not a list of status codes",
                    shown(e)
                ))
        })
        .collect()
}

/// `curl [-f] [-k] [-s] [-S] [-o FILE] [-m SECS] [-I] [-H 'Host: NAME'] URL`.
fn curl(args: &[String]) -> Result<Probe, String> {
    let o = opts(
        args,
        &[
            "-o",
            "--output",
            "-m",
            "--max-time",
            "--connect-timeout",
            "-H",
            "--header",
            "-w",
            "--write-out",
        ],
        &[
            "-f",
            "--fail",
            "-k",
            "--insecure",
            "-s",
            "--silent",
            "-S",
            "--show-error",
            "-I",
            "--head",
            "-4",
            "-6",
            "-q",
        ],
    )?;
    if o.flag(&["-w", "--write-out"]) {
        return Err("curl -w prints, it does not decide".into());
    }
    let [url] = o.positional.as_slice() else {
        return Err("curl needs exactly one URL".into());
    };
    let host = match o.value(&["-H", "--header"]) {
        None => None,
        Some(h) => match h.split_once(':') {
            Some((name, v)) if name.trim().eq_ignore_ascii_case("host") => {
                Some(v.trim().to_string())
            }
            _ => {
                return Err(format!(
                    "curl -H {:?}: only a Host header carries over",
                    shown(h)
                ));
            }
        },
    };
    // Without -f curl exits 0 on any HTTP answer; with it, on codes below 400.
    let status = if o.flag(&["-f", "--fail"]) {
        vec![(100, 399)]
    } else {
        vec![(100, 599)]
    };
    let timeout = [
        o.seconds(&["-m", "--max-time"])?,
        o.seconds(&["--connect-timeout"])?,
    ];
    let mut p = http_url(url, status, !o.flag(&["-k", "--insecure"]))?;
    if let CheckKind::Http { head, host: h, .. } = &mut p.kind {
        *head = o.flag(&["-I", "--head"]);
        *h = host.or(h.take());
    }
    p.timeout_ms = timeout.into_iter().flatten().min();
    Ok(p)
}

/// `wget [-q] [-O FILE] [-T SECS] [--spider] [--no-check-certificate] URL`: exits non-zero
/// on a 4xx or 5xx answer.
fn wget(args: &[String]) -> Result<Probe, String> {
    let o = opts(
        args,
        &[
            "-O",
            "--output-document",
            "-T",
            "--timeout",
            "-t",
            "--tries",
        ],
        &[
            "-q",
            "--quiet",
            "--spider",
            "--no-check-certificate",
            "-4",
            "-6",
            "--max-redirect=0",
        ],
    )?;
    let [url] = o.positional.as_slice() else {
        return Err("wget needs exactly one URL".into());
    };
    let mut p = http_url(url, vec![(100, 399)], !o.flag(&["--no-check-certificate"]))?;
    if let CheckKind::Http { head, .. } = &mut p.kind {
        *head = o.flag(&["--spider"]);
    }
    p.timeout_ms = o.seconds(&["-T", "--timeout"])?;
    Ok(p)
}

/// `http[s]://HOST[:PORT][/PATH]` with the status codes that pass.
fn http_url(url: &str, status: Vec<(u16, u16)>, verify: bool) -> Result<Probe, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{:?} is not an http or https URL", shown(url)));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.contains('@') {
        return Err("its URL carries credentials".into());
    }
    let (host, p) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') && (h.starts_with('[') || !h.contains(':')) => {
            (h, port(p)?)
        }
        _ => (authority, if tls { 443 } else { 80 }),
    };
    Ok(Probe {
        kind: CheckKind::Http {
            tls,
            verify,
            head: false,
            path: path.to_string(),
            host: None,
            status,
            body: None,
            digest: None,
            server_name: None,
        },
        address: ip(host)?,
        port: p,
        timeout_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(a: &str, port: u16) -> (CheckKind, IpAddr, u16) {
        (CheckKind::Tcp { expect: None }, a.parse().unwrap(), port)
    }

    fn got(script: &str) -> (CheckKind, IpAddr, u16) {
        let p = read(script).unwrap_or_else(|e| panic!("{script}: {e}"));
        (p.kind, p.address, p.port)
    }

    #[test]
    fn the_issue_s_scripts_keep_their_host_port_and_scheme() {
        assert_eq!(got("/bin/nc -z -w2 10.2.2.1 9999"), tcp("10.2.2.1", 9999));
        assert_eq!(
            read("nc -zv -w 2 10.2.2.1 9999").unwrap().timeout_ms,
            Some(2000)
        );
        assert_eq!(
            got("/usr/lib/nagios/plugins/check_tcp -H 10.0.0.5 -p 3306"),
            tcp("10.0.0.5", 3306)
        );
        let (k, a, p) =
            got("wget -q -O /dev/null --no-check-certificate https://10.9.9.9:8443/healthz");
        assert_eq!((a.to_string(), p), ("10.9.9.9".into(), 8443));
        let CheckKind::Http {
            tls,
            verify,
            path,
            status,
            ..
        } = k
        else {
            panic!("http")
        };
        assert!(tls && !verify);
        assert_eq!((path.as_str(), status), ("/healthz", vec![(100, 399)]));
        let (k, a, p) = got("check_http -I 10.2.0.7 -p 8081 -u /status -H www.example.com");
        assert_eq!((a.to_string(), p), ("10.2.0.7".into(), 8081));
        let CheckKind::Http {
            host, path, status, ..
        } = k
        else {
            panic!("http")
        };
        assert_eq!(host.as_deref(), Some("www.example.com"));
        assert_eq!((path.as_str(), status), ("/status", vec![(200, 399)]));
        let (k, _, p) = got("curl -fsS http://[2001:db8::7]:8080/ping");
        assert_eq!(p, 8080);
        let CheckKind::Http { status, .. } = k else {
            panic!("http")
        };
        assert_eq!(status, vec![(100, 399)], "-f: fails from 400");
        let CheckKind::Http { status, .. } = got("curl -s http://10.0.0.1/").0 else {
            panic!("http")
        };
        assert_eq!(
            status,
            vec![(100, 599)],
            "without -f curl passes on any answer"
        );
    }

    #[test]
    fn what_is_not_plainly_a_probe_is_refused_with_why() {
        for (script, why) in [
            ("check_tcp -p 3306", "never passed"),
            ("check_http -p 8081 -u /status", "never passed"),
            ("nc 10.0.0.1 80", "without -z"),
            ("nc -z db.example.com 5432", "resolves no names"),
            (
                "/etc/keepalived/check_backlog.sh 10.30.0.11",
                "not a probe it knows",
            ),
            ("curl -L http://10.0.0.1/", "not one the import knows"),
            ("curl http://10.0.0.1/ | grep ok", "shell construct"),
            ("wget http://web.example/health", "resolves no names"),
            ("", "no misc_path"),
        ] {
            let e = read(script).expect_err(script);
            assert!(e.contains(why), "{script}: {e}");
        }
    }
}
