//! The plan as sluice.toml text: a header listing what was not carried over, `[appliance]`
//! and `[bgp]` with placeholders for the facts only the appliance knows, then per
//! `virtual_server` its `[[health_check]]`s and `[[vip]]`s, each commented with its source
//! lines. A VIP's `health_check` is the set of checks most of its real servers have; a
//! backend with another set (none, for a real server without checkers or the sorry server)
//! names its own. Written by hand, not serialised, so every value can carry its comment.

use std::fmt::Write as _;

use super::lvs::Hints;
use super::{Check, CheckKind, Located, Mode, PLACEHOLDER, Vip};

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
pub(crate) fn emit(vips: &[Vip], notes: &Located, source: &str, hints: &Hints) -> String {
    let mut o = String::new();
    header(&mut o, notes, source);
    appliance(&mut o, hints);
    // The check names of the last virtual_server block written, shared by the VIPs of one
    // group whose checks are the same.
    let mut written: Option<(usize, Vec<Check>, Vec<String>)> = None;
    for v in vips {
        let names = match &written {
            Some((line, checks, names)) if *line == v.lines.0 && same(checks, &v.checks) => {
                names.clone()
            }
            _ => {
                if !v.checks.is_empty() {
                    let _ = writeln!(
                        o,
                        "\n# ---- virtual_server at lines {}-{}",
                        v.lines.0, v.lines.1
                    );
                }
                let names: Vec<String> = (0..v.checks.len())
                    .map(|i| match i {
                        0 => v.name.clone(),
                        i => format!("{}-check{}", v.name, i + 1),
                    })
                    .collect();
                for (i, (c, name)) in v.checks.iter().zip(&names).enumerate() {
                    if i > 0 {
                        o.push('\n');
                    }
                    health_check(&mut o, name, c);
                }
                written = Some((v.lines.0, v.checks.clone(), names.clone()));
                names
            }
        };
        vip(&mut o, v, &names);
    }
    o
}

fn same(a: &[Check], b: &[Check]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_as(y))
}

fn header(o: &mut String, notes: &Located, source: &str) {
    let _ = writeln!(
        o,
        "# sluice.toml written by `sluice import keepalived` from {source}.\n\
         # Fill in every \"{PLACEHOLDER}...>\" (`sluice check` names each one that is left), then\n\
         # check the file with `sluice check --config FILE`. Values not written take Sluice's\n\
         # defaults (README, examples/sluice.toml)."
    );
    if notes.notes.is_empty() {
        let _ = writeln!(o, "#\n# Everything in {source} was carried over.");
    } else {
        let _ = writeln!(
            o,
            "#\n# Not carried over, or carried over differently ({} line(s), also printed on stderr):",
            notes.notes.len()
        );
        for n in &notes.notes {
            for (i, part) in wrap(&notes.show(n), 92).iter().enumerate() {
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

fn kind_name(k: &CheckKind) -> &'static str {
    match k {
        CheckKind::Tcp { .. } => "tcp",
        CheckKind::Http { tls: false, .. } => "http",
        CheckKind::Http { tls: true, .. } => "https",
        CheckKind::Udp { .. } => "udp",
        CheckKind::Icmp => "icmp",
    }
}

fn health_check(o: &mut String, name: &str, c: &Check) {
    let _ = writeln!(
        o,
        "[[health_check]]\nname = {}\nkind = {}   # from {}, line {}",
        q(name),
        q(kind_name(&c.kind)),
        c.from,
        c.line
    );
    match &c.kind {
        CheckKind::Tcp { expect } => {
            if let Some(e) = expect {
                let _ = writeln!(o, "expect = {}", q(e));
            }
        }
        CheckKind::Http { .. } => http(o, &c.kind),
        CheckKind::Udp { payload, expect } => {
            let _ = writeln!(o, "payload = {}", q(payload));
            if let Some(e) = expect {
                let _ = writeln!(o, "expect = {}   # require_reply", q(e));
            }
        }
        CheckKind::Icmp => {}
    }
    if let Some(a) = c.address {
        let _ = writeln!(o, "address = {}   # the host it checks", q(&a.to_string()));
    }
    if let Some(p) = c.port.filter(|_| c.kind != CheckKind::Icmp) {
        let _ = writeln!(o, "port = {p}   # the port it checks");
    }
    if let Some(s) = c.source {
        let _ = writeln!(o, "source = {}   # bindto", q(&s.to_string()));
    }
    let _ = writeln!(
        o,
        "interval = {}   # delay_loop\ntimeout = {}\nrise = {}\nfall = {}   # retry + 1",
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

/// The keys of an http or https check.
fn http(o: &mut String, k: &CheckKind) {
    let CheckKind::Http {
        tls,
        verify,
        head,
        path,
        host,
        status,
        body,
        digest,
        server_name,
    } = k
    else {
        return;
    };
    if *head {
        let _ = writeln!(o, "method = \"HEAD\"");
    }
    let _ = writeln!(o, "path = {}", q(path));
    let one = |(a, b): (u16, u16)| {
        if a == b {
            a.to_string()
        } else {
            q(&format!("{a}-{b}"))
        }
    };
    match status.as_slice() {
        [s] => {
            let _ = writeln!(o, "expect_status = {}", one(*s));
        }
        many => {
            let all: Vec<String> = many.iter().map(|s| one(*s)).collect();
            let _ = writeln!(o, "expect_status = [{}]", all.join(", "));
        }
    }
    if let Some(b) = body {
        let _ = writeln!(o, "expect_body = {}", q(b));
    }
    if let Some(d) = digest {
        let _ = writeln!(o, "expect_digest = {}   # digest", q(d));
    }
    if let Some(h) = host {
        let _ = writeln!(o, "host = {}", q(h));
    }
    if *tls {
        let why = if *verify {
            "   # the script's tool verified it"
        } else {
            "   # keepalived did not verify it"
        };
        let _ = writeln!(o, "verify_tls = {verify}{why}");
        if let Some(s) = server_name {
            let _ = writeln!(o, "server_name = {}", q(s));
        }
    }
}

/// A list of check names as a TOML value: one name, or a list.
fn names_value(names: &[&String]) -> String {
    match names {
        [one] => q(one),
        many => {
            let all: Vec<String> = many.iter().map(|n| q(n)).collect();
            format!("[{}]", all.join(", "))
        }
    }
}

/// The check set most primary backends have, and whether most inhibit on failure.
fn common(v: &Vip) -> (Vec<usize>, bool) {
    let primaries: Vec<_> = v.backends.iter().filter(|b| !b.sorry).collect();
    let mut best: (usize, Vec<usize>) = (0, Vec::new());
    for b in &primaries {
        let n = primaries.iter().filter(|o| o.checks == b.checks).count();
        if n > best.0 {
            best = (n, b.checks.clone());
        }
    }
    let inhibit = primaries.iter().filter(|b| b.inhibit).count() * 2 > primaries.len();
    (best.1, inhibit)
}

fn vip(o: &mut String, v: &Vip, names: &[String]) {
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
            "   # every port (a service without a port)"
        } else {
            ""
        },
        q(v.protocol)
    );
    mode(o, v.mode);
    scheduling(o, v);
    let (set, inhibit) = common(v);
    let of = |set: &[usize]| -> Vec<&String> { set.iter().map(|&i| &names[i]).collect() };
    if !set.is_empty() {
        let _ = writeln!(o, "health_check = {}", names_value(&of(&set)));
        let udp_checks = set
            .iter()
            .all(|&i| matches!(v.checks[i].kind, CheckKind::Udp { .. }));
        if !matches!(v.mode, Mode::Nat) && v.protocol == "udp" && !udp_checks {
            let _ = writeln!(
                o,
                "health_via_vip = false   # the VIP probe of a UDP VIP needs udp checks"
            );
        }
    }
    if inhibit {
        let _ = writeln!(o, "inhibit_on_failure = true");
    }
    if let Some((quorum, hysteresis)) = v.quorum {
        if (quorum, hysteresis) != (1, 0) {
            let _ = writeln!(
                o,
                "quorum = {quorum}   # the weight of real servers up it needs"
            );
            if hysteresis > 0 {
                let _ = writeln!(o, "quorum_hysteresis = {hysteresis}");
            }
        }
        if v.backends.iter().any(|b| b.sorry) {
            let _ = writeln!(
                o,
                "on_quorum_lost = \"sorry\"   # keepalived swaps in the sorry_server"
            );
        }
    }
    for b in &v.backends {
        backend(o, b, &set, inhibit, &of);
    }
}

/// Scheduler, hash, flags, persistence, one-packet scheduling and overflow.
fn scheduling(o: &mut String, v: &Vip) {
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
}

fn backend<'a>(
    o: &mut String,
    b: &super::Backend,
    set: &[usize],
    inhibit: bool,
    of: &dyn Fn(&[usize]) -> Vec<&'a String>,
) {
    let what = if b.sorry {
        "sorry_server"
    } else {
        "real_server"
    };
    let _ = writeln!(
        o,
        "\n[[vip.backend]]   # {what} line {}\naddress = {}",
        b.line,
        q(&b.address.to_string()),
    );
    // A backend of a VIP of every port takes the port each flow came to.
    if b.port != 0 {
        let _ = writeln!(o, "port = {}", b.port);
    }
    let _ = writeln!(o, "weight = {}", b.weight);
    if b.sorry {
        let _ = writeln!(
            o,
            "role = \"sorry\"   # takes new flows only without the quorum"
        );
    }
    if b.checks != set {
        let why = match (b.sorry, b.checks.is_empty()) {
            (true, _) => "   # keepalived checks no sorry_server",
            (false, true) => "   # no checker: keepalived counts it up",
            _ => "",
        };
        let _ = writeln!(o, "health_check = [{}]{why}", {
            let n: Vec<String> = of(&b.checks).iter().map(|n| q(n)).collect();
            n.join(", ")
        });
    }
    if b.inhibit != inhibit && !b.sorry {
        let _ = writeln!(o, "inhibit_on_failure = {}", b.inhibit);
    }
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
