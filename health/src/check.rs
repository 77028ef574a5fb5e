//! What to probe and how: the check definitions and the targets they apply to.
//!
//! The check definitions are the `checks` crate's, the config's own model (re-exported
//! here). The prober trusts these values as validated, but still clamps the few that would
//! make it misbehave (a zero `rise`, a zero `interval`) instead of panicking.

use std::net::IpAddr;
use std::sync::Arc;

use crate::vip::ViaVip;

pub use checks::{CheckKind, GrpcCheck, HealthCheck, HttpCheck, HttpMethod, InitialHealth};

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
    use std::time::Duration;

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
