//! The coordinator's decision, made by every member from the same view: a version is
//! activated once every live member is ready for it, or when the activation timeout has
//! passed since this member saw it with at least one member ready; it is never activated
//! while a live member refuses it. Whoever decides first writes the activate key in an etcd
//! transaction that only succeeds if the key is unchanged since the view, so a version is
//! activated once however many members decide at the same moment.

use std::time::Duration;

use crate::doc::Readiness;
use crate::view::View;

/// What the fleet should do with its newest config revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coordination {
    /// No config, or the newest is already activated.
    Idle,
    /// Members are still preparing.
    Wait {
        ready: Vec<String>,
        pending: Vec<String>,
    },
    /// Write `activate revision`.
    Activate { revision: u64, all_ready: bool },
    /// Live members refused it: it is not activated (until a newer push).
    Refused {
        revision: u64,
        by: Vec<(String, String)>,
    },
}

/// The decision for `view`; `waited` is how long this member has seen the revision.
pub fn coordinate(view: &View, waited: Duration, timeout: Duration) -> Coordination {
    let Some(cfg) = &view.config else {
        return Coordination::Idle;
    };
    let r = cfg.revision;
    if view.activated() >= r {
        return Coordination::Idle;
    }
    let mut ready = Vec::new();
    let mut pending = Vec::new();
    let mut refused = Vec::new();
    for (name, m) in &view.members {
        match (m.prepared == r, m.readiness) {
            (true, Readiness::Ready) => ready.push(name.clone()),
            (true, Readiness::Refused) => {
                refused.push((name.clone(), m.error.clone().unwrap_or_default()))
            }
            (false, _) if m.running >= r => ready.push(name.clone()),
            (false, _) => pending.push(name.clone()),
        }
    }
    if !refused.is_empty() {
        return Coordination::Refused {
            revision: r,
            by: refused,
        };
    }
    if !ready.is_empty() && pending.is_empty() {
        return Coordination::Activate {
            revision: r,
            all_ready: true,
        };
    }
    if !ready.is_empty() && waited >= timeout {
        return Coordination::Activate {
            revision: r,
            all_ready: false,
        };
    }
    Coordination::Wait { ready, pending }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::{Activation, MemberReport};
    use crate::view::ConfigAt;

    fn report(prepared: u64, readiness: Readiness, running: u64) -> MemberReport {
        MemberReport {
            prepared,
            readiness,
            error: (readiness == Readiness::Refused).then(|| "vip.x: bad".to_string()),
            running,
            activated_at_ms: 0,
            sync_lag_ms: None,
            fingerprint: String::new(),
            holder: Default::default(),
        }
    }

    fn view(members: &[(&str, MemberReport)], activated: Option<u64>) -> View {
        let mut v = View {
            config: Some(ConfigAt {
                revision: 10,
                text: String::new(),
            }),
            ..View::default()
        };
        for (n, r) in members {
            v.members.insert(n.to_string(), r.clone());
        }
        v.activation = activated.map(|revision| Activation {
            revision,
            by: "lb1".into(),
            at_ms: 0,
            all_ready: true,
        });
        v
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn every_live_member_ready_activates_at_once() {
        let v = view(
            &[
                ("lb1", report(10, Readiness::Ready, 4)),
                ("lb2", report(10, Readiness::Ready, 4)),
            ],
            Some(4),
        );
        assert_eq!(
            coordinate(&v, Duration::ZERO, T),
            Coordination::Activate {
                revision: 10,
                all_ready: true
            }
        );
    }

    #[test]
    fn a_slow_member_is_waited_for_until_the_timeout() {
        let v = view(
            &[
                ("lb1", report(10, Readiness::Ready, 4)),
                ("lb2", report(4, Readiness::Ready, 4)),
            ],
            Some(4),
        );
        assert_eq!(
            coordinate(&v, Duration::from_secs(1), T),
            Coordination::Wait {
                ready: vec!["lb1".into()],
                pending: vec!["lb2".into()]
            }
        );
        assert_eq!(
            coordinate(&v, T, T),
            Coordination::Activate {
                revision: 10,
                all_ready: false
            }
        );
    }

    #[test]
    fn one_refusal_blocks_the_version_even_after_the_timeout() {
        let v = view(
            &[
                ("lb1", report(10, Readiness::Ready, 4)),
                ("lb2", report(10, Readiness::Refused, 4)),
            ],
            Some(4),
        );
        match coordinate(&v, T * 10, T) {
            Coordination::Refused { revision: 10, by } => {
                assert_eq!(by, vec![("lb2".to_string(), "vip.x: bad".to_string())])
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_activated_version_or_no_member_ready_writes_nothing() {
        let v = view(&[("lb1", report(10, Readiness::Ready, 10))], Some(10));
        assert_eq!(coordinate(&v, T, T), Coordination::Idle);
        let v = view(&[("lb1", report(4, Readiness::Ready, 4))], Some(4));
        assert!(matches!(
            coordinate(&v, T * 3, T),
            Coordination::Wait { .. }
        ));
    }
}
