//! A real server's checkers as Sluice checks, with the timing they inherit.
//!
//! keepalived runs each checker every `delay_loop`, retries a failed one `retry` times
//! `delay_before_retry` apart, and puts the server back after one success; a real server is
//! up while all its checkers are. Sluice's mapping: interval = delay_loop, timeout =
//! connect_timeout, fall = retry + 1, rise = 1, and the backend's checks all-of. Settings
//! inherit virtual_server -> real_server -> checker, as in keepalived. A checker's own
//! target (`connect_ip`, `connect_port`, `bindto`) is the check's `address`, `port` and
//! `source`.

use std::net::IpAddr;

use super::lvs::{Cx, shown};
use super::parse::Node;
use super::{Check, CheckKind};

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
    /// Reads one timing keyword; false when `c` is not one. `nb_get_retry` is read only where
    /// the caller says keepalived defines it (HTTP_GET and SSL_GET).
    pub fn read(&mut self, c: &Node, cx: &mut Cx) -> bool {
        let arg = c.args().first().map(String::as_str);
        let secs = |cx: &mut Cx| match arg.and_then(|a| a.parse::<f64>().ok()) {
            Some(v) if v.is_finite() && v >= 0.0 => Some(v),
            _ => {
                cx.refuse(
                    c.line,
                    format!(
                        "{}: {:?} is not a number of seconds",
                        c.keyword(),
                        shown(arg.unwrap_or(""))
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
            "retry" => self.read_retry(c, cx),
            "alpha" => self.alpha = Some(flag()),
            "inhibit_on_failure" => self.inhibit_on_failure = Some((flag(), c.line)),
            _ => return false,
        }
        true
    }

    /// `retry N` (or `nb_get_retry N` where defined).
    pub fn read_retry(&mut self, c: &Node, cx: &mut Cx) {
        match c.args().first().and_then(|a| a.parse::<u32>().ok()) {
            Some(r) => self.retry = Some(r),
            None => cx.refuse(c.line, format!("{}: not a count", c.keyword())),
        }
    }

    /// These settings where set, else `parent`'s.
    pub fn over(&self, parent: &Timing) -> Timing {
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

/// Every checker keepalived defines.
pub(crate) const CHECKERS: &[&str] = &[
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
pub(crate) struct CheckCx<'a> {
    pub timing: &'a Timing,
    pub vhost: Option<&'a str>,
    pub backend_address: IpAddr,
    pub backend_port: u16,
}

/// The common keys of a checker: its target and timing; the rest for its kind.
#[derive(Debug, Default)]
pub(crate) struct Common<'a> {
    pub timing: Timing,
    pub port: Option<u16>,
    pub address: Option<IpAddr>,
    pub source: Option<IpAddr>,
    pub rest: Vec<&'a Node>,
}

/// Reads a checker's common keys.
fn common<'a>(c: &'a Node, cx: &mut Cx) -> Common<'a> {
    let mut out = Common::default();
    for k in c.children() {
        if k.keyword() == "nb_get_retry" {
            // Defined in HTTP_GET and SSL_GET only; elsewhere keepalived ignores it (1.x
            // silently, 2.x with "unknown keyword"), so the checker keeps its default retry.
            if matches!(c.keyword(), "HTTP_GET" | "SSL_GET") {
                out.timing.read_retry(k, cx);
            } else {
                cx.note(
                    k.line,
                    format!(
                        "nb_get_retry in {}: not a keyword of this checker: keepalived ignores \
                         it and keeps the default retry, so does the import",
                        c.keyword()
                    ),
                );
            }
            continue;
        }
        if out.timing.read(k, cx) {
            continue;
        }
        let arg = k.args().first().map(String::as_str).unwrap_or("");
        match k.keyword() {
            "connect_port" => match arg.parse::<u16>() {
                Ok(p) if p > 0 => out.port = Some(p),
                _ => cx.refuse(k.line, format!("connect_port {:?}: not a port", shown(arg))),
            },
            "connect_ip" => match arg.parse::<IpAddr>() {
                Ok(a) => out.address = Some(a),
                Err(_) => cx.refuse(
                    k.line,
                    format!("connect_ip {:?}: not an IP address", shown(arg)),
                ),
            },
            "bindto" => match arg.parse::<IpAddr>() {
                Ok(a) => out.source = Some(a),
                Err(_) => cx.refuse(
                    k.line,
                    format!("bindto {:?}: not an IP address", shown(arg)),
                ),
            },
            "bind_if" | "bind_port" | "fwmark" => cx.note(
                k.line,
                format!(
                    "{}: not carried over: Sluice's prober chooses its own source port and \
                     route (the check reaches the same target)",
                    k.keyword()
                ),
            ),
            "log_all_failures" => cx.note(
                k.line,
                "log_all_failures: Sluice records every health transition as an event",
            ),
            "warmup" => cx.note(
                k.line,
                "warmup: not carried over: Sluice spreads probes with `jitter` instead",
            ),
            _ => out.rest.push(k),
        }
    }
    out
}

/// One checker as Sluice checks (HTTP_GET and SSL_GET give one per `url`); none when it maps
/// to nothing (noted, or the import refused).
pub(crate) fn checker(c: &Node, ctx: &CheckCx<'_>, cx: &mut Cx) -> Vec<Check> {
    let com = common(c, cx);
    let name = c.keyword();
    let kinds = super::check_kind::kinds(c, &com.rest, ctx, cx);
    let timing = com.timing.over(ctx.timing);
    let from: &'static str = CHECKERS
        .iter()
        .find(|k| **k == name)
        .copied()
        .unwrap_or("checker");
    let (interval_ms, mut timeout_ms, fall) = times(c.line, name, &timing, cx);
    kinds
        .into_iter()
        .map(|k| {
            // A script's or a host block's target is its own; the checker's otherwise.
            let (address, port) = match k.target {
                Some((a, p)) => (a.or(com.address), p.or(com.port)),
                None => (com.address, com.port),
            };
            if let Some(t) = k.timeout_ms {
                timeout_ms = t.min(interval_ms).max(10);
            }
            Check {
                line: k.line,
                from,
                kind: k.kind,
                port: port.filter(|p| *p != ctx.backend_port || ctx.backend_port == 0),
                address: address.filter(|a| *a != ctx.backend_address),
                source: com.source,
                interval_ms,
                timeout_ms,
                rise: 1,
                fall,
                initial_up: !timing.alpha.unwrap_or(false),
            }
        })
        .collect()
}

/// One kind a checker maps to, at its line, with the target a script names and a
/// script's own timeout.
pub(crate) struct Kind {
    pub line: usize,
    pub kind: CheckKind,
    pub target: Option<(Option<IpAddr>, Option<u16>)>,
    pub timeout_ms: Option<u64>,
}

/// Interval, timeout and fall from keepalived's timers, within Sluice's ranges (what is
/// moved into them is noted).
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
        cx.note(
            line,
            format!(
                "connect_timeout {timeout}ms is longer than delay_loop {interval}ms: Sluice \
                 starts a probe every interval and gives each at most that long"
            ),
        );
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
                    "delay_before_retry {dbr}s: Sluice re-probes every interval, so a failing \
                     backend goes down after {fall} failed probes {interval}ms apart \
                     (keepalived: retries {dbr}s apart)"
                ),
            );
        }
    }
    (interval, timeout, fall)
}
