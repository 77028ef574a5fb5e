//! A virtual server's `real_server`s and `sorry_server` as backends, each with its own checks,
//! and what keepalived repairs in them, repaired the same way with a note
//! (check/check_data.c, `validate_check_config`; check_parser.c): a real server of the other
//! address family is skipped (tunnelled ones excepted), a duplicate is removed, a DR or TUN
//! real server's port is reset to the virtual server's (cleared for a service of every port),
//! a quorum above the real servers' total weight is lowered to it, and a hysteresis not below
//! the quorum is set just below it. What keepalived would run but Sluice cannot (a real
//! server at the VIP's own address, which IPVS hands to the director's own service) is
//! refused.

use std::net::IpAddr;

use super::check::{self, Timing};
use super::lvs::{Cx, shown};
use super::parse::Node;
use super::service::{Service, method};
use super::{Backend, Check, Mode, Vip};

/// Real-server keywords that change nothing Sluice forwards or checks, with why.
const RS_NOTES: &[(&str, &str)] = &[
    (
        "notify_up",
        "not carried over: no notify scripts: watch the `health` events or metrics",
    ),
    (
        "notify_down",
        "not carried over: no notify scripts: watch the `health` events or metrics",
    ),
    (
        "smtp_alert",
        "not carried over: Sluice reports health changes as events and metrics, not e-mail",
    ),
    ("snmp_name", "not carried over: Sluice has no SNMP agent"),
    (
        "warmup",
        "not carried over: Sluice spreads probes with `jitter` instead of a start-up delay",
    ),
];

/// Fills `v`'s backends, checks and quorum from its real servers and sorry server.
pub(crate) fn servers(v: &mut Vip, reals: &[&Node], s: &Service, cx: &mut Cx) {
    for rs in reals {
        if let Some((b, checks)) = real_server(rs, v, s, cx) {
            add(v, b, checks, cx);
        }
    }
    if let Some(b) = sorry_server(v, s, cx) {
        add(v, b, Vec::new(), cx);
    }
    quorum(v, s, cx);
}

/// Adds backend `b` with `checks` to `v`, unless keepalived would remove it as a duplicate.
fn add(v: &mut Vip, mut b: Backend, checks: Vec<Check>, cx: &mut Cx) {
    if let Some(o) = v
        .backends
        .iter()
        .find(|o| (o.address, o.port) == (b.address, b.port))
    {
        let what = if b.sorry {
            "the sorry_server is also a real_server: Sluice needs it once; keepalived served it \
             as a real server while the quorum held, so it stays one"
        } else {
            "real server listed twice: keepalived removes the second (\"is duplicated - \
             removing second rs\"), so does the import"
        };
        cx.note(b.line, format!("{what} (first at line {})", o.line));
        return;
    }
    for c in checks {
        let i = match v.checks.iter().position(|o| o.same_as(&c)) {
            Some(i) => i,
            None => {
                v.checks.push(c);
                v.checks.len() - 1
            }
        };
        if !b.checks.contains(&i) {
            b.checks.push(i);
        }
    }
    v.backends.push(b);
}

/// One real server: its backend and checks, `None` when keepalived skips it (noted) or the
/// import cannot carry it (refused).
fn real_server(rs: &Node, v: &Vip, s: &Service, cx: &mut Cx) -> Option<(Backend, Vec<Check>)> {
    let (address, port) = target(rs.args(), rs.line, "real_server", cx)?;
    let mut b = Backend {
        line: rs.line,
        address,
        port,
        weight: s.weight.unwrap_or(1),
        max_connections: None,
        resume_connections: None,
        checks: Vec::new(),
        inhibit: false,
        sorry: false,
    };
    let mut timing = Timing::default();
    let mut vhost = None;
    let mut checkers = Vec::new();
    let mut mode = v.mode;
    for c in rs.children() {
        if timing.read(c, cx) {
            continue;
        }
        let arg = c.args().first().map(String::as_str).unwrap_or("");
        match c.keyword() {
            "weight" => match arg.parse::<u32>() {
                Ok(w) if w <= 65535 => b.weight = w,
                _ => cx.refuse(c.line, format!("weight {:?}: not 0..=65535", shown(arg))),
            },
            "uthreshold" => b.max_connections = threshold(c, cx),
            "lthreshold" => b.resume_connections = threshold(c, cx),
            "lvs_method" => mode = method(c.args(), c.line, cx)?,
            "virtualhost" => vhost = Some(arg.to_string()),
            k if check::CHECKERS.contains(&k) => checkers.push(c),
            k => match RS_NOTES.iter().find(|(n, _)| *n == k) {
                Some((_, why)) => cx.note(c.line, format!("{}: {why}", c.words.join(" "))),
                None => cx.unknown(c, "real_server"),
            },
        }
    }
    if mode != v.mode {
        cx.refuse(
            rs.line,
            "lvs_method differs from the virtual server's: Sluice forwards every backend of a \
             VIP the same way",
        );
        return None;
    }
    repair(&mut b, v, cx)?;
    thresholds(&mut b, cx);
    let timing = timing.over(&s.timing);
    b.inhibit = timing.inhibit_on_failure.is_some_and(|(on, _)| on);
    let vhost = vhost.or_else(|| s.virtualhost.clone());
    let ctx = check::CheckCx {
        timing: &timing,
        vhost: vhost.as_deref(),
        backend_address: b.address,
        backend_port: b.port,
    };
    let checks = checkers
        .iter()
        .flat_map(|c| check::checker(c, &ctx, cx))
        .collect();
    Some((b, checks))
}

/// What keepalived repairs in a real server, for VIP `v`; `None` (noted or refused) when it
/// cannot be served.
fn repair(b: &mut Backend, v: &Vip, cx: &mut Cx) -> Option<()> {
    let tunnel = matches!(v.mode, Mode::Tunnel { .. });
    if b.address.is_ipv4() != v.address.is_ipv4() && !tunnel {
        cx.note(
            b.line,
            format!(
                "real_server {}: its address family differs from the virtual server {}'s: \
                 keepalived skips it (\"don't match - skipping real server\"), so does the import",
                b.address, v.address
            ),
        );
        return None;
    }
    if b.address == v.address {
        cx.refuse(
            b.line,
            format!(
                "real_server {} is the VIP itself: IPVS hands these connections to a service \
                 on the director (its local node); Sluice forwards to other hosts only: move \
                 that service to a backend",
                b.address
            ),
        );
        return None;
    }
    match (v.mode, b.port) {
        (_, 0) => b.port = v.port,
        (Mode::Nat, _) => {}
        (_, p) if p != v.port => {
            cx.note(
                b.line,
                format!(
                    "real_server {} port {p}: {} does not change ports, and keepalived resets \
                     it to the virtual server's {} (\"ports don't match - resetting\"), so does \
                     the import",
                    b.address,
                    if v.mode == Mode::Dr { "DR" } else { "TUN" },
                    if v.port == 0 {
                        "0 (every port)".to_string()
                    } else {
                        v.port.to_string()
                    }
                ),
            );
            b.port = v.port;
        }
        _ => {}
    }
    Some(())
}

/// `sorry_server ADDRESS [PORT]`: a backend that takes new flows only without the quorum;
/// keepalived runs no checker on it.
fn sorry_server(v: &Vip, s: &Service, cx: &mut Cx) -> Option<Backend> {
    let (words, line) = s.sorry.as_ref()?;
    let (address, port) = target(words, *line, "sorry_server", cx)?;
    if let Some((m, l)) = &s.sorry_method
        && method(m, *l, cx)? != v.mode
    {
        cx.refuse(
            *l,
            "sorry_server_lvs_method differs from the virtual server's: Sluice forwards every \
             backend of a VIP the same way",
        );
        return None;
    }
    if s.sorry_inhibit {
        cx.note(
            *line,
            "sorry_server_inhibit: not needed: Sluice's sorry backend has no check, so it never \
             fails",
        );
    }
    let mut b = Backend {
        line: *line,
        address,
        port,
        weight: 1,
        max_connections: None,
        resume_connections: None,
        checks: Vec::new(),
        inhibit: false,
        sorry: true,
    };
    repair(&mut b, v, cx)?;
    Some(b)
}

/// `ADDRESS [PORT]` of a real or sorry server.
fn target(words: &[String], line: usize, what: &str, cx: &mut Cx) -> Option<(IpAddr, u16)> {
    let Some(address) = words.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
        cx.refuse(
            line,
            format!(
                "{what} {:?}: not an IP address (Sluice resolves no names)",
                shown(&words.join(" "))
            ),
        );
        return None;
    };
    let port = match words.get(1).map(|p| p.parse::<u16>()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(_)) => {
            cx.refuse(
                line,
                format!("{what} {}: not a port", shown(&words.join(" "))),
            );
            return None;
        }
    };
    Some((address, port))
}

/// `uthreshold` / `lthreshold`: 0 means none.
fn threshold(c: &Node, cx: &mut Cx) -> Option<u32> {
    match c.args().first().and_then(|a| a.parse::<u32>().ok()) {
        Some(0) => None,
        Some(n) => Some(n),
        None => {
            cx.refuse(c.line, format!("{}: not a count", c.keyword()));
            None
        }
    }
}

/// IPVS's thresholds: without `lthreshold` a server over `uthreshold` takes connections
/// again below three quarters of it (`ip_vs_conn.c`); Sluice's `resume_connections`
/// defaults to the limit itself, so the import writes that three quarters.
fn thresholds(b: &mut Backend, cx: &mut Cx) {
    match (b.max_connections, b.resume_connections) {
        (Some(max), None) => b.resume_connections = Some((max * 3 / 4).max(1)),
        (Some(max), Some(min)) if min > max => {
            cx.note(
                b.line,
                format!(
                    "lthreshold {min} is above uthreshold {max}: IPVS resumes at the limit \
                     itself, so does the import"
                ),
            );
            b.resume_connections = Some(max);
        }
        (None, Some(_)) => {
            cx.note(
                b.line,
                "lthreshold without uthreshold: IPVS has nothing to resume from: left out",
            );
            b.resume_connections = None;
        }
        _ => {}
    }
}

/// keepalived's quorum (the total weight of live real servers it needs, 1 by default) and
/// hysteresis, repaired as keepalived repairs them.
fn quorum(v: &mut Vip, s: &Service, cx: &mut Cx) {
    let total: u32 = v
        .backends
        .iter()
        .filter(|b| !b.sorry)
        .map(|b| b.weight)
        .sum();
    let (mut q, q_line) = s.quorum.unwrap_or((1, v.lines.0));
    let (mut h, h_line) = s.hysteresis.unwrap_or((0, v.lines.0));
    if q > total && total > 0 {
        cx.note(
            q_line,
            format!(
                "quorum {q} exceeds the real servers' total weight {total}: keepalived lowers \
                 it to {total}, so does the import"
            ),
        );
        q = total;
    }
    if q == 0 {
        q = 1;
    }
    if h >= q {
        cx.note(
            h_line,
            format!(
                "hysteresis {h} is not below the quorum {q}: keepalived sets it to {}, so does \
                 the import",
                q - 1
            ),
        );
        h = q - 1;
    }
    let has_sorry = v.backends.iter().any(|b| b.sorry);
    if ((q, h) != (1, 0) || has_sorry) && q + h > total {
        cx.refuse(
            q_line,
            format!(
                "quorum {q} with hysteresis {h} needs the real servers to weigh {} to be \
                 gained, more than their total {total}: keepalived would never gain it (its \
                 sorry server would serve for ever)",
                q + h
            ),
        );
        return;
    }
    if let Some(l) = s.quorum_scripts {
        cx.note(
            l,
            "quorum_up/quorum_down: Sluice runs no scripts; if they announced or withdrew the \
             VIP, set on_quorum_lost = \"withdraw\" (the VIP is withdrawn from BGP without its \
             quorum)",
        );
    }
    if (q, h) != (1, 0) || has_sorry {
        v.quorum = Some((q, h));
    }
}
