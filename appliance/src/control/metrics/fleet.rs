//! The fleet's metrics (`[fleet]` members only): the versions (pushed, activated, run here),
//! whether this member is stale (etcd out of reach, forwarding on what it runs), the
//! activation spread and each member's sync lag, and the health disagreements by backend and
//! member, so an alert can name the member whose path to a backend is suspect.

use super::builder::{Builder, gset, labels};

/// Registers the fleet families with `s`'s values.
pub(super) fn families(b: &mut Builder, s: &api::FleetStatus) {
    let rev = b.gauge(
        "sluice_fleet_revision",
        "Fleet config revisions: pushed (newest in etcd), activated, running (this member)",
    );
    for (which, v) in [
        ("pushed", s.config_revision),
        ("activated", s.activated_revision),
        ("running", s.running_revision),
    ] {
        gset(&rev, labels(&[("which", which)]), v as i64);
    }
    b.gauge1(
        "sluice_fleet_stale",
        "1 while etcd is out of reach: this member forwards on the version it runs",
        i64::from(s.stale),
    );
    b.gauge1(
        "sluice_fleet_running_from_disk",
        "1 while the running revision is the last good one read from [fleet] state_dir at start (etcd has not confirmed it)",
        i64::from(s.running_from_disk),
    );
    b.counter1(
        "sluice_fleet_last_good_errors",
        "Failed writes or reads of the last good fleet revision under [fleet] state_dir",
        s.last_good_errors,
    );
    b.gauge1(
        "sluice_fleet_members",
        "Live fleet members (their etcd leases held)",
        s.members.len() as i64,
    );
    b.gauge1(
        "sluice_fleet_activation_spread_ms",
        "Milliseconds between the first and last member's switch to the activated revision (-1 until all run it)",
        s.activation_spread_ms.map_or(-1, |v| v as i64),
    );
    let lag = b.gauge(
        "sluice_fleet_sync_lag_ms",
        "Milliseconds from the activation write to each member's switch",
    );
    for m in &s.members {
        if let Some(l) = m.sync_lag_ms {
            gset(&lag, labels(&[("member", &m.name)]), l as i64);
        }
    }
    let dis = b.gauge(
        "sluice_fleet_health_disagreements",
        "1 per backend and member whose own probe verdict is not the fleet's",
    );
    for d in &s.disagreements {
        for m in &d.members {
            gset(&dis, labels(&[("backend", &d.backend), ("member", m)]), 1);
        }
    }
}
