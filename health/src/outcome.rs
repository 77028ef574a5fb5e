//! What one probe found, in words an operator can act on.
//!
//! Every failure names its cause ("connection refused", "status 503", "TLS error: invalid
//! peer certificate: UnknownIssuer") because a transition to down that says only "failed"
//! sends the operator to tcpdump. The types are plain data so the hysteresis machine and
//! the scheduler can be tested with made-up outcomes.

use std::time::Duration;

/// Why a probe passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// TCP connected (and the expected bytes, if any, arrived).
    Connected,
    /// HTTP(S) answered with an accepted status (and body, if checked).
    Status(u16),
    /// A UDP reply arrived (and contained the expected bytes, if any).
    Reply,
    /// An ICMP echo reply arrived after this round trip.
    Echo(Duration),
    /// The agent answered; what it asked for (weight, drain, maint).
    Agent(crate::agent::AgentState),
    /// The gRPC health service answered SERVING.
    Serving,
}

impl std::fmt::Display for Pass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pass::Connected => f.write_str("connected"),
            Pass::Status(s) => write!(f, "status {s}"),
            Pass::Reply => f.write_str("reply received"),
            Pass::Echo(rtt) => write!(f, "echo reply in {} us", rtt.as_micros()),
            Pass::Agent(a) => write!(f, "agent: {a}"),
            Pass::Serving => f.write_str("SERVING"),
        }
    }
}

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// No answer (or no complete answer) within the check's timeout.
    #[error("timeout")]
    Timeout,
    /// TCP RST to our SYN.
    #[error("connection refused")]
    Refused,
    /// The peer reset an established connection.
    #[error("connection reset")]
    Reset,
    /// ICMP port unreachable to a UDP probe.
    #[error("port unreachable")]
    PortUnreachable,
    /// No route or host unreachable (ICMP or local routing).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The local side could not bind the configured source address.
    #[error("cannot bind source {0}")]
    Bind(String),
    /// The peer closed before sending what the check expects.
    #[error("no reply")]
    NoReply,
    /// A TCP or UDP reply arrived without the expected bytes.
    #[error("reply mismatch: expected {0:?}")]
    ReplyMismatch(String),
    /// An HTTP status outside the accepted range.
    #[error("status {0}")]
    Status(u16),
    /// The HTTP body lacked the expected substring.
    #[error("body mismatch: expected {0:?}")]
    BodyMismatch(String),
    /// The HTTP body's MD5 digest was not the expected one (this is the one it had).
    #[error("body digest {0}")]
    Digest(String),
    /// The agent answered `down` (or `failed`, `stopped`), with its description if any.
    #[error("agent says down{}", if .0.is_empty() { String::new() } else { format!(": {}", .0) })]
    AgentDown(String),
    /// The agent could not be asked or answered nothing it understands: no verdict either
    /// way (as HAProxy, which leaves reachability to the other checks). Counted, never a
    /// failure.
    #[error("agent gave no verdict: {0}")]
    NoVerdict(String),
    /// The gRPC health service did not answer SERVING (or the call failed).
    #[error("gRPC: {0}")]
    Grpc(String),
    /// The HTTP response was not valid HTTP/1.x.
    #[error("bad response: {0}")]
    BadResponse(String),
    /// TLS handshake or record failure (certificate problems land here).
    #[error("TLS error: {0}")]
    Tls(String),
    /// The server name for SNI/verification is not a valid DNS name or address.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
    /// The appliance itself ran short (descriptors, buffers, local ports, memory): the probe
    /// did not run, so it says nothing about the backend. Counted, never a failure.
    #[error("probe not run, local resource exhausted: {0}")]
    Local(String),
    /// Any other socket error, with the OS's words.
    #[error("{0}")]
    Io(String),
    /// The check passed on the backend's address but the VIP probe failed.
    #[error(transparent)]
    Vip(#[from] crate::vip::VipFailure),
}

/// Whether `e` is the appliance's own shortage (EMFILE, ENFILE, ENOBUFS, EADDRNOTAVAIL,
/// ENOMEM) rather than anything the backend did.
pub fn is_local(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let local = [
        Errno::MFILE,
        Errno::NFILE,
        Errno::NOBUFS,
        Errno::ADDRNOTAVAIL,
        Errno::NOMEM,
    ];
    e.raw_os_error()
        .is_some_and(|n| local.iter().any(|l| l.raw_os_error() == n))
}

/// `e` as a [`Failure::Local`] when it is a local shortage, else through `other`.
pub fn local_or(e: std::io::Error, other: impl FnOnce(std::io::Error) -> Failure) -> Failure {
    if is_local(&e) {
        Failure::Local(e.to_string())
    } else {
        other(e)
    }
}

impl Failure {
    /// A short stable label for counters and metrics ("timeout", "refused", ...).
    pub fn label(&self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Refused => "refused",
            Failure::Reset => "reset",
            Failure::PortUnreachable => "port_unreachable",
            Failure::Unreachable(_) => "unreachable",
            Failure::Bind(_) => "bind",
            Failure::NoReply => "no_reply",
            Failure::ReplyMismatch(_) => "reply_mismatch",
            Failure::Status(_) => "status",
            Failure::BodyMismatch(_) => "body_mismatch",
            Failure::Digest(_) => "digest",
            Failure::AgentDown(_) => "agent_down",
            Failure::NoVerdict(_) => "no_verdict",
            Failure::Grpc(_) => "grpc",
            Failure::BadResponse(_) => "bad_response",
            Failure::Tls(_) => "tls",
            Failure::ServerName(_) => "server_name",
            Failure::Local(_) => "local",
            Failure::Io(_) => "io",
            Failure::Vip(v) => v.label(),
        }
    }
}

/// The result of one probe.
pub type Outcome = Result<Pass, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_shortages_are_told_apart_from_backend_errors() {
        let os = std::io::Error::from_raw_os_error;
        for n in [24, 23, 105, 99, 12] {
            assert!(is_local(&os(n)), "errno {n}");
            assert_eq!(local_or(os(n), |_| Failure::Refused).label(), "local");
        }
        assert!(!is_local(&os(111)), "ECONNREFUSED is the backend's");
        assert_eq!(local_or(os(111), |_| Failure::Refused), Failure::Refused);
    }
}
