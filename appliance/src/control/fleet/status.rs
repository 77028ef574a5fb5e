//! The fleet document (`GET /v1/fleet`, `sluice fleet status`, the console's Fleet view)
//! as a pure function of a member's view of the fleet: members and their versions, the
//! spread of the last activation, the backends the members' probes disagree on.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::lb::Tables;
use ::api::{Disagreement, FleetMember, FleetStatus, Refusal};
use ::fleet::quorum::Verdict;
use ::fleet::{Readiness, View};

/// The table fingerprint members compare and `GET /v1/status` shows: [`Tables::fingerprint`]
/// (VIPs, backends with weight, state and health, and every ring through its digest) as 16
/// hex digits. It costs a pass over the VIPs and backends, not over the ring slots.
pub fn fingerprint(t: &Tables) -> String {
    format!("{:016x}", t.fingerprint())
}

/// What the document is made of.
pub struct Parts<'a> {
    pub name: &'a str,
    pub view: &'a View,
    pub connected: bool,
    /// How long etcd has been out of reach, while it is.
    pub stale_for: Option<Duration>,
    pub last_error: Option<&'a str>,
    /// The revision this member runs.
    pub running: u64,
    pub verdicts: &'a BTreeMap<String, Verdict>,
    pub refused: Option<&'a (u64, Vec<(String, String)>)>,
    /// The running revision was read from the state directory, not yet confirmed by etcd.
    pub from_disk: bool,
    pub last_good_errors: u64,
}

/// The fleet document of member `me`.
pub fn status(p: Parts<'_>, me: &str, announcing: bool, fingerprint: &str) -> FleetStatus {
    let v = p.view;
    let members: Vec<FleetMember> = v
        .members
        .iter()
        .map(|(name, m)| FleetMember {
            name: name.clone(),
            prepared: m.prepared,
            readiness: match m.readiness {
                Readiness::Ready => "ready",
                Readiness::Refused => "refused",
            }
            .into(),
            running: m.running,
            sync_lag_ms: m.sync_lag_ms,
            error: m.error.clone(),
            table_fingerprint: m.fingerprint.clone(),
        })
        .collect();
    FleetStatus {
        fleet: p.name.to_string(),
        member: me.to_string(),
        connected: p.connected,
        stale: !p.connected,
        stale_seconds: p.stale_for.map(|d| d.as_secs_f64()),
        last_error: p.last_error.map(str::to_string),
        config_revision: v.config.as_ref().map_or(0, |c| c.revision),
        activated_revision: v.activated(),
        running_revision: p.running,
        refused: refusal(v).or_else(|| {
            p.refused
                .filter(|(r, _)| v.activated() < *r)
                .map(|(revision, by)| Refusal {
                    revision: *revision,
                    by: by.clone(),
                })
        }),
        activation_spread_ms: spread(v),
        disagreements: disagreements(p.verdicts),
        members,
        table_fingerprint: fingerprint.to_string(),
        announcing,
        running_from_disk: p.from_disk,
        last_good_errors: p.last_good_errors,
        ignored_keys: v.undecodable.clone(),
    }
}

/// The live members that refused the newest pushed revision, whether or not it was
/// activated (a member that reported after the activation timeout, or rejoined with a file
/// that contradicts the fleet, refuses an activated revision and keeps running its own).
pub fn refusal(v: &View) -> Option<Refusal> {
    let pushed = v.config.as_ref()?.revision;
    let by: Vec<(String, String)> = v
        .members
        .iter()
        .filter(|(_, m)| m.prepared == pushed && m.readiness == Readiness::Refused)
        .map(|(n, m)| (n.clone(), m.error.clone().unwrap_or_default()))
        .collect();
    (!by.is_empty()).then_some(Refusal {
        revision: pushed,
        by,
    })
}

/// First to last switch to the activated revision, once every live member runs it.
pub fn spread(v: &View) -> Option<u64> {
    let r = v.activated();
    if r == 0 || v.members.is_empty() || v.members.values().any(|m| m.running != r) {
        return None;
    }
    let times = v.members.values().map(|m| m.activated_at_ms);
    let (lo, hi) = times.fold((u64::MAX, 0), |(lo, hi), t| (lo.min(t), hi.max(t)));
    Some(hi - lo)
}

/// The backends some live member disagrees on.
pub fn disagreements(verdicts: &BTreeMap<String, Verdict>) -> Vec<Disagreement> {
    verdicts
        .iter()
        .filter(|(_, v)| !v.dissent.is_empty())
        .map(|(b, v)| Disagreement {
            backend: b.clone(),
            fleet_up: v.up,
            up_votes: v.up_votes as u32,
            down_votes: v.down_votes as u32,
            members: v.dissent.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::fleet::{Activation, HealthReport, MemberReport};

    fn member(running: u64, at: u64) -> MemberReport {
        MemberReport {
            prepared: running,
            readiness: Readiness::Ready,
            error: None,
            running,
            activated_at_ms: at,
            sync_lag_ms: Some(3),
            fingerprint: String::new(),
            holder: Default::default(),
        }
    }

    #[test]
    fn spread_waits_for_every_live_member_and_disagreements_name_the_dissenters() {
        let mut v = View {
            activation: Some(Activation {
                revision: 5,
                by: "lb1".into(),
                at_ms: 100,
                all_ready: true,
            }),
            ..View::default()
        };
        v.members.insert("lb1".into(), member(5, 1_000));
        v.members.insert("lb2".into(), member(4, 900));
        assert_eq!(spread(&v), None, "lb2 has not switched");
        v.members.insert("lb2".into(), member(5, 1_042));
        assert_eq!(spread(&v), Some(42));
        let mut live = BTreeMap::new();
        let mut up = HealthReport::default();
        up.backends.insert("web/10.1.0.11:8080".into(), true);
        let mut down = HealthReport::default();
        down.backends.insert("web/10.1.0.11:8080".into(), false);
        live.insert("lb1", &up);
        live.insert("lb2", &up);
        live.insert("lb3", &down);
        let verdicts = ::fleet::quorum::decide(&live, None);
        let d = disagreements(&verdicts);
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].fleet_up, d[0].members.clone()),
            (true, vec!["lb3".to_string()])
        );
        let s = status(
            Parts {
                name: "edge",
                view: &v,
                connected: false,
                stale_for: Some(Duration::from_secs(3)),
                last_error: Some("etcd: connection refused"),
                running: 5,
                verdicts: &verdicts,
                refused: None,
                from_disk: true,
                last_good_errors: 0,
            },
            "lb1",
            true,
            "00",
        );
        assert!(s.stale);
        assert_eq!((s.activated_revision, s.running_revision), (5, 5));
        assert_eq!(s.members.len(), 2);
    }

    #[test]
    fn a_refusal_of_an_activated_revision_is_reported() {
        let mut v = View {
            config: Some(::fleet::view::ConfigAt {
                revision: 9,
                text: String::new(),
            }),
            activation: Some(Activation {
                revision: 9,
                by: "lb1".into(),
                at_ms: 100,
                all_ready: false,
            }),
            ..View::default()
        };
        v.members.insert("lb1".into(), member(9, 1_000));
        let mut late = member(8, 900);
        late.prepared = 9;
        late.readiness = Readiness::Refused;
        late.error = Some("vip \"web\".address: contradicts the fleet".into());
        v.members.insert("lb3".into(), late);
        let verdicts = BTreeMap::new();
        let s = status(
            Parts {
                name: "edge",
                view: &v,
                connected: true,
                stale_for: None,
                last_error: None,
                running: 9,
                verdicts: &verdicts,
                refused: None,
                from_disk: false,
                last_good_errors: 0,
            },
            "lb1",
            true,
            "00",
        );
        let r = s
            .refused
            .expect("lb3's refusal of the activated revision 9 is shown");
        assert_eq!(r.revision, 9);
        assert_eq!(r.by[0].0, "lb3");
    }
}
