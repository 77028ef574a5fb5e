//! The health checks' model: what to probe and how, as the validated config states it
//! (`[[health_check]]`) and the prober (`health`) runs it. A leaf crate of plain types
//! (std only), so the config crate and the prober share them without the config crate, and
//! the pure core under it (`lb`), depending on the prober and its runtime.

#![forbid(unsafe_code)]

use std::net::IpAddr;
use std::time::Duration;

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
