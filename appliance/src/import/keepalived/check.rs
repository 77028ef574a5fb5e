//! `real_server` blocks as backends, and their checkers as the VIP's one health check.
//!
//! keepalived runs a checker per real server every `delay_loop`, retries a failed one
//! `retry` times `delay_before_retry` apart, and puts the server back after one success;
//! Sluice runs one `[[health_check]]` per VIP on every backend, so the mapping is interval =
//! delay_loop, timeout = connect_timeout, fall = retry + 1, rise = 1. Settings inherit
//! virtual_server -> real_server -> checker, as in keepalived.

use std::net::IpAddr;

use super::lvs::{Cx, Service, method};
use super::parse::Node;
use super::{Backend, Check, CheckKind, Vip};

/// Settings a checker inherits from its real server and virtual server.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Timing {
    pub delay_loop: Option<f64>,
    pub connect_timeout: Option<f64>,
    pub retry: Option<u32>,
    pub delay_before_retry: Option<f64>,
    pub alpha: Option<bool>,
    pub inhibit_on_failure: Option<(bool, usize)>,
}

impl Timing {
    /// Reads one timing keyword; false when `c` is not one.
    pub fn read(&mut self, c: &Node, cx: &mut Cx) -> bool {
        let arg = c.args().first().map(String::as_str);
        let secs = |cx: &mut Cx| match arg.and_then(|a| a.parse::<f64>().ok()) {
            Some(v) if v.is_finite() && v >= 0.0 => Some(v),
            _ => {
                cx.note(
                    c.line,
                    format!(
                        "{}: {:?} is not a number of seconds: left out",
                        c.keyword(),
                        arg.unwrap_or("")
                    ),
                );
                None
            }
        };
        let flag = || !matches!(arg, Some("off" | "false" | "no"));
        match c.keyword() {
            "delay_loop" => self.delay_loop = secs(cx).or(self.delay_loop),
            "connect_timeout" => self.connect_timeout = secs(cx).or(self.connect_timeout),
            "delay_before_retry" => self.delay_before_retry = secs(cx).or(self.delay_before_retry),
            "retry" | "nb_get_retry" => match arg.and_then(|a| a.parse::<u32>().ok()) {
                Some(r) => self.retry = Some(r),
                None => cx.note(c.line, format!("{}: not a count: left out", c.keyword())),
            },
            "alpha" => self.alpha = Some(flag()),
            "inhibit_on_failure" => self.inhibit_on_failure = Some((flag(), c.line)),
            _ => return false,
        }
        true
    }

    /// These settings where set, else `parent`'s.
    fn over(&self, parent: &Timing) -> Timing {
        Timing {
            delay_loop: self.delay_loop.or(parent.delay_loop),
            connect_timeout: self.connect_timeout.or(parent.connect_timeout),
            retry: self.retry.or(parent.retry),
            delay_before_retry: self.delay_before_retry.or(parent.delay_before_retry),
            alpha: self.alpha.or(parent.alpha),
            inhibit_on_failure: self.inhibit_on_failure.or(parent.inhibit_on_failure),
        }
    }
}

/// Real-server keywords with no Sluice equivalent, with why.
const RS_NOT_CARRIED: &[(&str, &str)] = &[
    (
        "notify_up",
        "no notify scripts: watch the `health` events or metrics",
    ),
    (
        "notify_down",
        "no notify scripts: watch the `health` events or metrics",
    ),
    (
        "smtp_alert",
        "Sluice reports health changes as events and metrics, not e-mail",
    ),
    ("snmp_name", "Sluice has no SNMP agent"),
    (
        "warmup",
        "Sluice spreads probes with `jitter` instead of a start-up delay",
    ),
];

/// The backends of a virtual server, and its health check.
pub(crate) fn real_servers(
    reals: &[&Node],
    s: &Service,
    vip: &Vip,
    cx: &mut Cx,
) -> (Vec<Backend>, Option<Check>) {
    let mut backends = Vec::new();
    let mut checks: Vec<(usize, Option<Check>, bool)> = Vec::new();
    for rs in reals {
        if let Some((b, check, had_checker)) = real_server(rs, s, vip, cx) {
            checks.push((b.line, check, had_checker));
            backends.push(b);
        }
    }
    let check = pick_check(&checks, vip, cx);
    (backends, check)
}

/// One real server: its backend, its check (if one maps) and whether it had any checker.
fn real_server(
    rs: &Node,
    s: &Service,
    vip: &Vip,
    cx: &mut Cx,
) -> Option<(Backend, Option<Check>, bool)> {
    let (address, port) = rs_target(rs, cx)?;
    let mut b = Backend {
        line: rs.line,
        address,
        port,
        weight: 1,
        max_connections: None,
        resume_connections: None,
    };
    let mut timing = Timing::default();
    let mut vhost = None;
    let mut checkers = Vec::new();
    for c in rs.children() {
        if timing.read(c, cx) {
            continue;
        }
        let arg = c.args().first().map(String::as_str).unwrap_or("");
        match c.keyword() {
            "weight" => match arg.parse::<u32>() {
                Ok(w) if w <= 65535 => b.weight = w,
                _ => cx.note(
                    c.line,
                    format!("weight {arg:?}: not 0..=65535: keepalived's default 1 used"),
                ),
            },
            "uthreshold" => b.max_connections = count(c, cx),
            "lthreshold" => b.resume_connections = count(c, cx),
            "lvs_method" => {
                if method(c.args(), c.line, cx) != Some(vip.mode) {
                    cx.note(c.line, format!("lvs_method {}: Sluice forwards every backend of a VIP the same way: this real server uses the VIP's mode", c.args().join(" ")));
                }
            }
            "virtualhost" => vhost = Some(arg.to_string()),
            k if CHECKERS.contains(&k) => checkers.push(c),
            k => match RS_NOT_CARRIED.iter().find(|(n, _)| *n == k) {
                Some((_, why)) => cx.note(
                    c.line,
                    format!("{}: not carried over: {why}", c.words.join(" ")),
                ),
                None => cx.unknown(c, "real_server"),
            },
        }
    }
    thresholds(&mut b, cx);
    let timing = timing.over(&s.timing);
    if let Some((true, line)) = timing.inhibit_on_failure {
        cx.note(line, "inhibit_on_failure: not carried over: an unhealthy Sluice backend loses its flows at once (keepalived kept them at weight 0); drain a backend by hand (`sluice ctl drain`) to keep them");
    }
    let vhost = vhost.or_else(|| s.virtualhost.clone());
    let check = rs_check(&checkers, &timing, vhost.as_deref(), b.port, vip, cx);
    Some((b, check, !checkers.is_empty()))
}

/// `real_server ADDRESS [PORT]`.
fn rs_target(rs: &Node, cx: &mut Cx) -> Option<(IpAddr, u16)> {
    let Some(address) = rs.args().first().and_then(|a| a.parse::<IpAddr>().ok()) else {
        cx.note(
            rs.line,
            format!(
                "real_server {:?}: not an IP address: left out",
                rs.args().join(" ")
            ),
        );
        return None;
    };
    let port = match rs.args().get(1).map(|p| p.parse::<u16>()) {
        None => 0,
        Some(Ok(p)) => p,
        Some(Err(_)) => {
            cx.note(
                rs.line,
                format!("real_server {}: not a port: left out", rs.args().join(" ")),
            );
            return None;
        }
    };
    Some((address, port))
}

/// The first of a real server's checkers that maps; the others are noted.
fn rs_check(
    checkers: &[&Node],
    timing: &Timing,
    vhost: Option<&str>,
    backend_port: u16,
    vip: &Vip,
    cx: &mut Cx,
) -> Option<Check> {
    let mut check = None;
    for c in checkers {
        let ctx = CheckCx {
            timing,
            vhost,
            backend_port,
            vip,
        };
        match (check.is_some(), checker(c, &ctx, cx)) {
            (false, Some(k)) => check = Some(k),
            (true, Some(k)) => cx.note(
                k.line,
                format!(
                    "{}: Sluice runs one health check per VIP: this second checker is left out",
                    k.from
                ),
            ),
            (_, None) => {}
        }
    }
    check
}

fn count(c: &Node, cx: &mut Cx) -> Option<u32> {
    match c.args().first().and_then(|a| a.parse::<u32>().ok()) {
        Some(0) => None,
        Some(n) => Some(n),
        None => {
            cx.note(c.line, format!("{}: not a count: left out", c.keyword()));
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
                format!("lthreshold {min} is above uthreshold {max}: the limit itself is used"),
            );
            b.resume_connections = Some(max);
        }
        (None, Some(_)) => {
            cx.note(
                b.line,
                "lthreshold without uthreshold: nothing to resume from, left out",
            );
            b.resume_connections = None;
        }
        _ => {}
    }
}

/// Every checker keepalived defines.
const CHECKERS: &[&str] = &[
    "HTTP_GET",
    "SSL_GET",
    "TCP_CHECK",
    "SMTP_CHECK",
    "DNS_CHECK",
    "MISC_CHECK",
    "BFD_CHECK",
    "UDP_CHECK",
    "PING_CHECK",
    "FILE_CHECK",
];

/// What a checker inherits and checks against.
struct CheckCx<'a> {
    timing: &'a Timing,
    vhost: Option<&'a str>,
    backend_port: u16,
    vip: &'a Vip,
}

/// One checker as a Sluice check, or `None` with the reason noted.
fn checker(c: &Node, ctx: &CheckCx<'_>, cx: &mut Cx) -> Option<Check> {
    let mut timing = Timing::default();
    let mut port = None;
    let mut source = None;
    let mut rest: Vec<&Node> = Vec::new();
    for k in c.children() {
        if timing.read(k, cx) {
            continue;
        }
        let arg = k.args().first().map(String::as_str).unwrap_or("");
        match k.keyword() {
            "connect_port" => port = arg.parse::<u16>().ok(),
            "bindto" => source = arg.parse::<IpAddr>().ok(),
            "connect_ip" => cx.note(
                k.line,
                "connect_ip: Sluice probes each backend on its own address: left out",
            ),
            "bind_if" | "bind_port" | "fwmark" => cx.note(
                k.line,
                format!(
                    "{}: Sluice's prober chooses its own source port and route: left out",
                    k.keyword()
                ),
            ),
            "log_all_failures" => cx.note(
                k.line,
                "log_all_failures: Sluice records every health transition as an event",
            ),
            "warmup" => cx.note(
                k.line,
                "warmup: Sluice spreads probes with `jitter` instead",
            ),
            _ => rest.push(k),
        }
    }
    let timing = timing.over(ctx.timing);
    let name = c.keyword();
    let kind = super::check_kind::kind(c, &rest, ctx.vhost, ctx.vip.protocol, cx)?;
    let from: &'static str = CHECKERS
        .iter()
        .find(|k| **k == name)
        .copied()
        .unwrap_or("checker");
    let (interval_ms, timeout_ms, fall) = times(c.line, name, &timing, cx);
    Some(Check {
        line: c.line,
        from,
        kind,
        port: port.filter(|p| *p != ctx.backend_port || ctx.backend_port == 0),
        source,
        interval_ms,
        timeout_ms,
        rise: 1,
        fall,
        initial_up: !timing.alpha.unwrap_or(false),
    })
}

/// Interval, timeout and fall from keepalived's timers, within Sluice's ranges.
fn times(line: usize, name: &str, t: &Timing, cx: &mut Cx) -> (u64, u64, u32) {
    let ms = |s: f64| (s * 1000.0).round() as u64;
    let mut interval = ms(t.delay_loop.unwrap_or(60.0));
    if !(100..=3_600_000).contains(&interval) {
        let clamped = interval.clamp(100, 3_600_000);
        cx.note(
            line,
            format!(
                "delay_loop {}s is outside Sluice's 100ms..1h: {}ms used",
                interval as f64 / 1000.0,
                clamped
            ),
        );
        interval = clamped;
    }
    let mut timeout = ms(t.connect_timeout.unwrap_or(5.0)).max(10);
    if timeout > interval {
        cx.note(line, format!("connect_timeout {}ms is longer than delay_loop {interval}ms: Sluice's timeout cannot exceed its interval, so it is {interval}ms", timeout));
        timeout = interval;
    }
    let default_retry = match name {
        "MISC_CHECK" => 0,
        "DNS_CHECK" => 3,
        _ => 1,
    };
    let retry = t.retry.unwrap_or(default_retry);
    let fall = (retry + 1).min(100);
    if retry > 0 {
        let dbr = t
            .delay_before_retry
            .unwrap_or(if matches!(name, "HTTP_GET" | "SSL_GET") {
                3.0
            } else {
                1.0
            });
        if ms(dbr) != interval {
            cx.note(
                line,
                format!(
                    "delay_before_retry {dbr}s: Sluice re-probes every interval, so a failing backend goes down after {fall} failed probes {interval}ms apart (keepalived: retries {dbr}s apart)"
                ),
            );
        }
    }
    (interval, timeout, fall)
}

/// The VIP's one check: the first real server's; others that differ are noted.
fn pick_check(checks: &[(usize, Option<Check>, bool)], vip: &Vip, cx: &mut Cx) -> Option<Check> {
    let first = checks.iter().find_map(|(_, c, _)| c.clone());
    match &first {
        Some(f) => {
            for (line, c, had) in checks {
                match c {
                    Some(c) if !c.same_as(f) => cx.note(c.line, format!("{} differs from the VIP's check (line {}): Sluice runs one health check per VIP, the first one, on every backend", c.from, f.line)),
                    None if !*had => cx.note(*line, format!("real_server without a checker: Sluice checks it with the VIP's {} (line {})", f.from, f.line)),
                    _ => {}
                }
            }
            first
        }
        None if checks.iter().any(|(_, _, had)| *had) && vip.protocol == "tcp" => {
            let line = checks
                .iter()
                .find(|(_, _, had)| *had)
                .map_or(vip.lines.0, |c| c.0);
            cx.note(line, "no checker of this virtual_server maps to Sluice: a TCP connect check on each backend's port stands in (keepalived defaults: every 60s, timeout 5s)");
            Some(Check {
                line,
                from: "TCP_CHECK",
                kind: CheckKind::Tcp { expect: None },
                port: None,
                source: None,
                interval_ms: 60_000,
                timeout_ms: 5_000,
                rise: 1,
                fall: 2,
                initial_up: true,
            })
        }
        None => {
            if checks.iter().any(|(_, _, had)| *had) {
                cx.note(vip.lines.0, "no checker of this UDP virtual_server maps to Sluice: the VIP has no health check, every backend counts as healthy");
            }
            None
        }
    }
}
