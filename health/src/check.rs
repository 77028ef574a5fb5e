//! What to probe and how: the check definitions and the targets they apply to.
//!
//! These mirror the appliance's validated config model (`HealthCheck`, `CheckKind`,
//! `HttpCheck`, `InitialHealth`) field for field, so the appliance converts its model into
//! them with a plain struct literal and this crate stays free of any dependency on it.
//! The prober trusts these values as validated, but still clamps the few that would make
//! it misbehave (a zero `rise`, a zero `interval`) instead of panicking.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::vip::ViaVip;

/// One named health check definition, shared by every backend that uses it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    /// The check's name in the config file; shown in logs and the console.
    pub name: String,
    /// What the probe does.
    pub kind: CheckKind,
    /// Port to probe; `None` probes the backend's own port.
    pub port: Option<u16>,
    /// Address to probe; `None` probes the backend's own address. A check of another host
    /// (keepalived's `connect_ip`, a script's target) still decides for the backend.
    pub address: Option<IpAddr>,
    /// Time between the starts of two probes of one target.
    pub interval: Duration,
    /// Time a probe may take before it counts as failed.
    pub timeout: Duration,
    /// Consecutive successes that bring a down backend up.
    pub rise: u32,
    /// Consecutive failures that take an up backend down.
    pub fall: u32,
    /// Random delay in `[0, jitter)` added to each interval (capped at the interval).
    pub jitter: Duration,
    /// State before the first `rise` or `fall` results arrive.
    pub initial: InitialHealth,
    /// Source address to probe from; `None` lets the kernel choose.
    pub source: Option<IpAddr>,
}

/// What a check does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CheckKind {
    /// TCP connect; optionally send bytes and expect bytes in the reply.
    Tcp {
        /// Bytes written once connected.
        send: Option<String>,
        /// Bytes the reply must contain (read until found, EOF or timeout).
        expect: Option<String>,
    },
    /// HTTP/1.1 request over plain TCP.
    Http(HttpCheck),
    /// HTTP/1.1 request over TLS.
    Https {
        /// The request and what the response must look like.
        http: HttpCheck,
        /// Verify the backend's certificate chain and name against the system trust store.
        verify_tls: bool,
        /// SNI and certificate name; defaults to `host`, then to the backend address.
        server_name: Option<String>,
    },
    /// One UDP datagram out, one expected back.
    Udp {
        /// The datagram sent.
        payload: String,
        /// Bytes the reply must contain; `None` accepts any reply.
        expect: Option<String>,
    },
    /// ICMP or ICMPv6 echo.
    Icmp,
    /// HAProxy's agent check: connect, optionally send a line, read the agent's answer
    /// (`up`, `down`, `drain`, `maint`, `ready`, a weight percentage; see [`crate::agent`]).
    Agent {
        /// Bytes written once connected (HAProxy's `agent-send`).
        send: Option<String>,
    },
    /// gRPC health checking (`grpc.health.v1.Health/Check`, the check Kubernetes
    /// workloads expose): passes when the service answers SERVING.
    Grpc(GrpcCheck),
}

/// The gRPC part of a `grpc` check.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrpcCheck {
    /// The service asked about; empty asks about the server as a whole.
    pub service: String,
    /// HTTP/2 over TLS (ALPN h2) instead of cleartext HTTP/2 (h2c, prior knowledge).
    pub tls: bool,
    /// With `tls`: verify the backend's certificate against the system trust store.
    pub verify_tls: bool,
    /// With `tls`: SNI and certificate name; defaults to the backend address.
    pub server_name: Option<String>,
    /// The `:authority` sent; defaults to the probed address and port.
    pub authority: Option<String>,
}

impl CheckKind {
    /// The name used in the config file.
    pub fn name(&self) -> &'static str {
        match self {
            CheckKind::Tcp { .. } => "tcp",
            CheckKind::Http(_) => "http",
            CheckKind::Https { .. } => "https",
            CheckKind::Udp { .. } => "udp",
            CheckKind::Icmp => "icmp",
            CheckKind::Agent { .. } => "agent",
            CheckKind::Grpc(_) => "grpc",
        }
    }
}

/// The HTTP part of `http` and `https` checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpCheck {
    /// Request method.
    pub method: HttpMethod,
    /// Request target, e.g. `/healthz`.
    pub path: String,
    /// `Host` header; defaults to the backend address (and port when not the default).
    pub host: Option<String>,
    /// Accepted status codes: inclusive ranges, any of which may match.
    pub expect_status: Vec<(u16, u16)>,
    /// A substring the body must contain.
    pub expect_body: Option<String>,
    /// The MD5 digest (32 hex digits, lower case) the whole body must have: keepalived's
    /// `digest`, for a page whose exact content proves the service.
    pub expect_digest: Option<String>,
}

impl HttpCheck {
    /// Whether `status` is one of the accepted codes.
    pub fn accepts(&self, status: u16) -> bool {
        self.expect_status
            .iter()
            .any(|&(lo, hi)| (lo..=hi).contains(&status))
    }
}

/// HTTP request method of a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpMethod {
    /// `GET`: the body is read when `expect_body` is set.
    Get,
    /// `HEAD`: status only; a body expectation can never match.
    Head,
}

impl HttpMethod {
    /// The method token on the request line.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Head => "HEAD",
        }
    }
}

/// A backend's health before its check has decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InitialHealth {
    /// Down (unknown) until `rise` consecutive successes.
    Down,
    /// Up until `fall` consecutive failures.
    Up,
}

/// A backend as one VIP's pool sees it: where it is and which check applies.
///
/// Several VIPs may name the same backend with the same check; the scheduler folds them
/// into one [`ProbeKey`] and probes once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Backend address.
    pub address: IpAddr,
    /// Backend port (the service port; the check's `port` overrides it for probing).
    pub port: u16,
    /// The check definition.
    pub check: Arc<HealthCheck>,
    /// DR and tunnel VIPs: the VIP the backend must also answer for (see [`crate::vip`]).
    pub via_vip: Option<ViaVip>,
}

impl Target {
    /// The identity of the probe that serves this target.
    pub fn key(&self) -> ProbeKey {
        let port = match self.check.kind {
            // ICMP has no ports: two services on one host share one echo probe.
            CheckKind::Icmp => 0,
            _ => self.check.port.unwrap_or(self.port),
        };
        ProbeKey {
            address: self.check.address.unwrap_or(self.address),
            port,
            check: Arc::clone(&self.check),
            via_vip: self.via_vip,
        }
    }
}

/// One distinct probe: target address, effective port and check definition.
///
/// Two keys are equal when the address, the probed port and the whole check definition
/// are equal, so a reload that leaves these alone keeps the probe and its state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeKey {
    /// Address probed.
    pub address: IpAddr,
    /// Port probed (the check's override, else the backend's port; 0 for ICMP).
    pub port: u16,
    /// The check definition.
    pub check: Arc<HealthCheck>,
    /// The VIP the backend must also answer for, if any.
    pub via_vip: Option<ViaVip>,
}

impl std::fmt::Display for ProbeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.check.kind.name();
        match (self.address, self.check.kind == CheckKind::Icmp) {
            (a, true) => write!(f, "{} {kind} {a}", self.check.name),
            (IpAddr::V4(a), false) => write!(f, "{} {kind} {a}:{}", self.check.name, self.port),
            (IpAddr::V6(a), false) => write!(f, "{} {kind} [{a}]:{}", self.check.name, self.port),
        }?;
        match &self.via_vip {
            Some(v) => write!(f, " {v}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: CheckKind, port: Option<u16>) -> Arc<HealthCheck> {
        Arc::new(HealthCheck {
            name: "c".into(),
            kind,
            port,
            address: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_millis(500),
            rise: 2,
            fall: 3,
            jitter: Duration::ZERO,
            initial: InitialHealth::Down,
            source: None,
        })
    }

    #[test]
    fn key_uses_port_override_and_ignores_port_for_icmp() {
        let tcp = check(
            CheckKind::Tcp {
                send: None,
                expect: None,
            },
            Some(8080),
        );
        let t = Target {
            address: "10.0.0.1".parse().unwrap(),
            port: 80,
            check: tcp,
            via_vip: None,
        };
        assert_eq!(t.key().port, 8080);
        assert_eq!(t.key().to_string(), "c tcp 10.0.0.1:8080");

        let icmp = check(CheckKind::Icmp, None);
        let a = Target {
            address: "10.0.0.1".parse().unwrap(),
            port: 80,
            check: Arc::clone(&icmp),
            via_vip: None,
        };
        let b = Target {
            port: 443,
            ..a.clone()
        };
        assert_eq!(a.key(), b.key());
        assert_eq!(a.key().to_string(), "c icmp 10.0.0.1");

        // The VIP is part of the identity: one backend in two DR VIPs is two probes.
        let via = |vip: &str| ViaVip {
            vip: vip.parse().unwrap(),
            protocol: crate::vip::VipProtocol::Tcp,
            backend_port: 80,
            tenant_vni: None,
        };
        let c = Target {
            via_vip: Some(via("192.0.2.12:80")),
            ..a.clone()
        };
        let d = Target {
            via_vip: Some(via("192.0.2.13:80")),
            ..a.clone()
        };
        assert_ne!(c.key(), d.key());
        assert_ne!(c.key(), a.key());
        assert_eq!(
            c.key().to_string(),
            "c icmp 10.0.0.1 via vip tcp 192.0.2.12:80"
        );
    }
}
