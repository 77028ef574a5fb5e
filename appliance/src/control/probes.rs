//! Which probes decide which backends: each check a backend has (its VIP's `health_check`
//! list, or its own) is one probe of the prober, shared by every backend with the same
//! target (address, port, check); a DR or tunnel backend's probe also asks through the VIP.
//! Pure: the config in, the prober's targets with the pairs each decides out.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{self, Backend, Config, Mode, Vip};
use crate::lb::BackendId;

/// The prober's targets, with the VIP/backend pairs each one decides.
pub type Targets = HashMap<health::ProbeKey, Vec<BackendId>>;

/// Health targets for the prober, with the VIP/backend pairs each one decides (a backend
/// of several checks is in several).
pub fn health_targets(config: &Config) -> Targets {
    let mut out: Targets = HashMap::new();
    let checks = shared_checks(config);
    for v in &config.vips {
        for b in &v.backends {
            for target in probes_of(&checks, v, b) {
                out.entry(target.key())
                    .or_default()
                    .push(BackendId::of(v, b));
            }
        }
    }
    out
}

/// The VIP a DR or tunnel backend must also answer for, on the VIP's port (for a VIP of
/// every port: the backend's, else the check's port; none when that leaves no port). A
/// check of another host than the backend proves nothing about the backend's VIP.
fn via_vip(v: &Vip, b: &Backend, check: &config::HealthCheck) -> Option<health::ViaVip> {
    if !v.health_via_vip || !matches!(v.mode, Mode::Dr | Mode::Tunnel(_)) {
        return None;
    }
    if check.address.is_some() {
        return None;
    }
    let port = [v.port, b.port, check.port.unwrap_or(0)]
        .into_iter()
        .find(|p| *p != 0)?;
    Some(health::ViaVip {
        vip: std::net::SocketAddr::new(v.address, port),
        protocol: match v.protocol {
            config::Protocol::Tcp => health::VipProtocol::Tcp,
            config::Protocol::Udp => health::VipProtocol::Udp,
        },
        backend_port: b.port,
        tenant_vni: v.tenant_vni,
    })
}

/// Every check of `config` by name, shared.
pub fn shared_checks(config: &Config) -> HashMap<&str, Arc<config::HealthCheck>> {
    config
        .health_checks
        .iter()
        .map(|c| (c.name.as_str(), Arc::new(c.clone())))
        .collect()
}

/// The probe of each check that decides backend `b` of `v`, in the VIP's order of checks.
pub fn probes_of(
    checks: &HashMap<&str, Arc<config::HealthCheck>>,
    v: &Vip,
    b: &Backend,
) -> Vec<health::Target> {
    v.checks_of(b)
        .iter()
        .filter_map(|name| checks.get(name.as_str()))
        .map(|check| health::Target {
            // A tenant backend's own address is the tenant's: probe its host (VTEP).
            address: b.underlay(),
            port: b.port,
            check: Arc::clone(check),
            via_vip: via_vip(v, b, check),
        })
        .collect()
}
