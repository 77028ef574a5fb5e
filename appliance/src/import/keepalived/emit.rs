//! The plan as sluice.toml text: a header listing what was not carried over, `[appliance]`
//! and `[bgp]` with placeholders for the facts only the appliance knows, then per
//! `virtual_server` its `[[health_check]]` and `[[vip]]`s, each commented with its source
//! lines. Written by hand, not serialised, so every value can carry its comment.

use std::fmt::Write as _;

use super::lvs::Hints;
use super::{Check, CheckKind, Mode, Note, PLACEHOLDER, Vip};

/// A TOML basic string.
fn q(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A placeholder value `sluice check` rejects with `what` as the thing to fill in.
fn fill(what: &str) -> String {
    q(&format!("{PLACEHOLDER}{what}>"))
}

/// `60s`, `1500ms`.
fn dur(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The whole file.
pub(crate) fn emit(vips: &[Vip], notes: &[Note], source: &str, hints: &Hints) -> String {
    let mut o = String::new();
    header(&mut o, notes, source);
    appliance(&mut o, hints);
    let mut check_of: Option<(usize, String)> = None;
    for v in vips {
        let shared = match &check_of {
            Some((line, name)) if *line == v.lines.0 => Some(name.clone()),
            _ => None,
        };
        let check_name = match (shared, &v.check) {
            (Some(name), _) => Some(name),
            (None, Some(c)) => {
                let _ = writeln!(
                    o,
                    "\n# ---- virtual_server at lines {}-{}",
                    v.lines.0, v.lines.1
                );
                health_check(&mut o, &v.name, c);
                check_of = Some((v.lines.0, v.name.clone()));
                Some(v.name.clone())
            }
            (None, None) => None,
        };
        vip(&mut o, v, check_name.as_deref());
    }
    o
}

fn header(o: &mut String, notes: &[Note], source: &str) {
    let _ = writeln!(
        o,
        "# sluice.toml written by `sluice import keepalived` from {source}.\n\
         # Fill in every \"{PLACEHOLDER}...>\" (`sluice check` names each one that is left), then\n\
         # check the file with `sluice check --config FILE`. Values not written take Sluice's\n\
         # defaults (README, examples/sluice.toml)."
    );
    if notes.is_empty() {
        let _ = writeln!(o, "#\n# Everything in {source} was carried over.");
    } else {
        let _ = writeln!(
            o,
            "#\n# Not carried over, or carried over differently ({} line(s), also printed on stderr):",
            notes.len()
        );
        for n in notes {
            for (i, part) in wrap(&n.to_string(), 92).iter().enumerate() {
                let _ = writeln!(o, "#   {}{part}", if i == 0 { "" } else { "    " });
            }
        }
    }
}

/// Splits a long note at spaces so the header stays readable.
fn wrap(s: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in s.split(' ') {
        let cur = lines.last_mut().map_or(0, |l| l.len());
        if cur > 0 && cur + 1 + word.len() > width {
            lines.push(String::new());
        }
        if let Some(l) = lines.last_mut() {
            if !l.is_empty() {
                l.push(' ');
            }
            l.push_str(word);
        }
    }
    lines
}

fn appliance(o: &mut String, hints: &Hints) {
    let example = hints
        .interfaces
        .first()
        .map_or("eth0".to_string(), Clone::clone);
    let _ = writeln!(
        o,
        "\n[appliance]\nname = {}",
        fill("this appliance's name, e.g. lb1")
    );
    if !hints.interfaces.is_empty() {
        let _ = writeln!(
            o,
            "# keepalived's VRRP ran on {}: the datapath interfaces are usually those",
            hints.interfaces.join(", ")
        );
    }
    let _ = writeln!(
        o,
        "interfaces = [{}]   # uplink first when there are two\n\
         \n\
         # Sluice announces each healthy VIP as a host route over BGP where keepalived moved the\n\
         # address with VRRP. Fill in this appliance's AS, router id and its routers, or delete\n\
         # [bgp] and [[bgp.peer]] to announce nothing (then route the VIPs here statically).\n\
         [bgp]\n\
         asn = {}\n\
         router_id = {}\n\
         \n\
         [[bgp.peer]]\n\
         address = {}\n\
         asn = {}",
        fill(&format!("datapath interface, e.g. {example}")),
        fill("this appliance's AS number"),
        fill("this appliance's IPv4 router id"),
        fill("the router's address"),
        fill("the router's AS number"),
    );
}

fn health_check(o: &mut String, name: &str, c: &Check) {
    let kind = match &c.kind {
        CheckKind::Tcp { .. } => "tcp",
        CheckKind::Http { tls: false, .. } => "http",
        CheckKind::Http { tls: true, .. } => "https",
        CheckKind::Udp { .. } => "udp",
        CheckKind::Icmp => "icmp",
    };
    let _ = writeln!(
        o,
        "[[health_check]]\nname = {}\nkind = {}   # from {}, line {}",
        q(name),
        q(kind),
        c.from,
        c.line
    );
    match &c.kind {
        CheckKind::Tcp { expect } => {
            if let Some(e) = expect {
                let _ = writeln!(o, "expect = {}", q(e));
            }
        }
        CheckKind::Http {
            tls,
            path,
            host,
            status,
            server_name,
        } => {
            let _ = writeln!(o, "path = {}", q(path));
            if status.0 == status.1 {
                let _ = writeln!(o, "expect_status = {}", status.0);
            } else {
                let _ = writeln!(
                    o,
                    "expect_status = {}",
                    q(&format!("{}-{}", status.0, status.1))
                );
            }
            if let Some(h) = host {
                let _ = writeln!(o, "host = {}", q(h));
            }
            if *tls {
                let _ = writeln!(
                    o,
                    "verify_tls = false   # keepalived's SSL_GET did not verify"
                );
                if let Some(s) = server_name {
                    let _ = writeln!(o, "server_name = {}", q(s));
                }
            }
        }
        CheckKind::Udp { payload } => {
            let _ = writeln!(o, "payload = {}", q(payload));
        }
        CheckKind::Icmp => {}
    }
    if let Some(p) = c.port {
        let _ = writeln!(o, "port = {p}   # connect_port");
    }
    if let Some(s) = c.source {
        let _ = writeln!(o, "source = {}   # bindto", q(&s.to_string()));
    }
    let _ = writeln!(
        o,
        "interval = {}   # delay_loop\ntimeout = {}   # connect_timeout\nrise = {}\nfall = {}   # retry + 1",
        q(&dur(c.interval_ms)),
        q(&dur(c.timeout_ms)),
        c.rise,
        c.fall
    );
    if c.initial_up {
        let _ = writeln!(
            o,
            "initial = \"up\"   # keepalived without alpha starts real servers up"
        );
    }
}

fn vip(o: &mut String, v: &Vip, check: Option<&str>) {
    let from = match v.group_line {
        Some(g) => format!(
            "virtual_server lines {}-{}, group entry line {g}",
            v.lines.0, v.lines.1
        ),
        None => format!("virtual_server lines {}-{}", v.lines.0, v.lines.1),
    };
    let _ = writeln!(
        o,
        "\n[[vip]]   # {from}\nname = {}\naddress = {}\nport = {}{}\nprotocol = {}",
        q(&v.name),
        q(&v.address.to_string()),
        v.port,
        if v.port == 0 {
            "   # every port (a persistent service without a port)"
        } else {
            ""
        },
        q(v.protocol)
    );
    mode(o, v.mode);
    let _ = writeln!(o, "scheduler = {}", q(v.scheduler));
    if let Some(h) = v.hash {
        let _ = writeln!(
            o,
            "hash = {}   # mh hashed the client address{}",
            q(h),
            if h == "5-tuple" { " and port" } else { "" }
        );
    }
    if !v.flags.is_empty() {
        let flags: Vec<String> = v.flags.iter().map(|f| q(f)).collect();
        let _ = writeln!(o, "scheduler_flags = [{}]", flags.join(", "));
    }
    if let Some(p) = v.persistence {
        let _ = writeln!(
            o,
            "persistence = {}   # persistence_timeout",
            q(&format!("{p}s"))
        );
    }
    if let Some(m) = v.netmask {
        let _ = writeln!(o, "persistence_netmask = {m}   # persistence_granularity");
    }
    if v.udp_one_packet {
        let _ = writeln!(o, "udp_one_packet = true   # ops");
    }
    if let Some(p) = v.overflow {
        let _ = writeln!(
            o,
            "overflow = {}   # every backend at uthreshold: IPVS answered ICMP port unreachable",
            q(p)
        );
    }
    if let Some(c) = check {
        let _ = writeln!(o, "health_check = {}", q(c));
        let udp_check = matches!(
            v.check.as_ref().map(|c| &c.kind),
            Some(CheckKind::Udp { .. })
        );
        if !matches!(v.mode, Mode::Nat) && v.protocol == "udp" && !udp_check {
            let _ = writeln!(
                o,
                "health_via_vip = false   # the VIP probe of a UDP VIP needs a udp check"
            );
        }
    }
    backends(o, v);
}

fn backends(o: &mut String, v: &Vip) {
    for b in &v.backends {
        let _ = writeln!(
            o,
            "\n[[vip.backend]]   # real_server line {}\naddress = {}\nport = {}\nweight = {}",
            b.line,
            q(&b.address.to_string()),
            b.port,
            b.weight
        );
        if let Some(m) = b.max_connections {
            let _ = writeln!(o, "max_connections = {m}   # uthreshold");
        }
        if let Some(r) = b.resume_connections {
            let _ = writeln!(
                o,
                "resume_connections = {r}   # lthreshold (IPVS without one: 3/4 of uthreshold)"
            );
        }
    }
}

fn mode(o: &mut String, mode: Mode) {
    match mode {
        Mode::Nat => {
            let _ = writeln!(
                o,
                "mode = \"nat\"   # backends route their replies through the appliance, as with LVS NAT"
            );
        }
        Mode::Dr => {
            let _ = writeln!(
                o,
                "mode = \"dr\"   # backends hold the VIP on lo, as with LVS DR"
            );
        }
        Mode::Tunnel { encap, port } => {
            let _ = writeln!(o, "mode = \"tunnel\"\ntunnel = {}", q(encap));
            if let Some(p) = port {
                let _ = writeln!(o, "tunnel_port = {p}");
            }
        }
    }
}
