//! One member's side of the two-phase activation, as a state machine over views: a new
//! config revision is prepared (the appliance validates it and builds its tables), the
//! outcome is reported under the member's lease, the coordinator's decision is written when
//! this member is the one to see it, and the member switches when the activate key names
//! the revision it prepared. Time comes in as an argument (milliseconds since the Unix
//! epoch, the unit the documents carry).
//!
//! Only the newest config revision is prepared: when a push lands before the previous one
//! was activated, the older activation is skipped and the fleet activates the newer one.

use std::time::Duration;

use crate::activation::{Coordination, coordinate};
use crate::doc::{Activation, MemberReport, Readiness};
use crate::view::View;

/// What the appliance must do for the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Validate `text` (revision `revision`) and build its tables, then call
    /// [`Member::prepared`].
    Prepare { revision: u64, text: String },
    /// Write this report under the member's key.
    Report(MemberReport),
    /// Write `activation` if the activate key's mod revision is still `expect`.
    WriteActivation { activation: Activation, expect: i64 },
    /// Switch the tables to the prepared `revision`, then call [`Member::activated`].
    Activate { revision: u64 },
    /// Live members refused `revision`: tell the operator (once per revision).
    Refused {
        revision: u64,
        by: Vec<(String, String)>,
    },
}

/// One member's progress.
#[derive(Debug, Clone)]
pub struct Member {
    name: String,
    timeout: Duration,
    /// The newest revision handed out to prepare, and when this member first saw it.
    preparing: Option<(u64, u64)>,
    /// The newest prepared revision and whether it is good.
    prepared: Option<(u64, Result<(), String>)>,
    running: u64,
    activated_at_ms: u64,
    sync_lag_ms: Option<u64>,
    /// The revision whose activation this member last wrote or tried, and the refused one
    /// last reported, so a view repeated does not repeat them.
    tried: u64,
    told_refused: u64,
    /// The digest of the tables the appliance forwards with, as last reported.
    fingerprint: String,
}

impl Member {
    /// Member `name`, which activates without a laggard after `timeout`.
    pub fn new(name: &str, timeout: Duration) -> Member {
        Member {
            name: name.to_string(),
            timeout,
            preparing: None,
            prepared: None,
            running: 0,
            activated_at_ms: 0,
            sync_lag_ms: None,
            tried: 0,
            told_refused: 0,
            fingerprint: String::new(),
        }
    }

    /// The member starts on `revision`, the last it activated (kept on disk): it runs it
    /// until the fleet activates a newer one, and is caught up if the fleet is still there.
    pub fn restore(&mut self, revision: u64) {
        self.running = revision;
    }

    /// The member's own file was read again (a reload): a revision it refused is prepared
    /// again at the next view, since the refusal may have been its file's (a local setting
    /// that contradicted the fleet, now fixed). A revision it prepared well stays prepared.
    pub fn reconsider(&mut self) {
        if matches!(&self.prepared, Some((_, Err(_)))) {
            self.preparing = None;
            self.prepared = None;
        }
    }

    /// The fleet was re-based (a new epoch, [`crate::history`]): its revisions start over,
    /// so the member prepares and activates the keys as they are now, as a new member
    /// would (the tables it runs keep forwarding until then).
    pub fn rebase(&mut self) {
        self.preparing = None;
        self.prepared = None;
        self.running = 0;
        self.tried = 0;
        self.told_refused = 0;
    }

    /// The member does not follow the history of a view (its revisions went back): it
    /// reports the view's config revision `revision` refused with `why`, which blocks its
    /// activation for every member, until an operator re-bases the fleet.
    pub fn refuse_history(&mut self, revision: u64, why: &str, now_ms: u64) -> Vec<Action> {
        let already = matches!(&self.prepared, Some((r, Err(e))) if *r == revision && e == why);
        if already {
            return Vec::new();
        }
        self.preparing = Some((revision, now_ms));
        self.prepared = Some((revision, Err(why.to_string())));
        vec![Action::Report(self.report())]
    }

    /// The revision the tables run (0: none from the fleet yet).
    pub fn running(&self) -> u64 {
        self.running
    }

    /// The revision prepared last, and its refusal if it was refused.
    pub fn prepared(&self) -> Option<(u64, Option<&str>)> {
        self.prepared
            .as_ref()
            .map(|(r, res)| (*r, res.as_ref().err().map(String::as_str)))
    }

    /// True once the member runs the fleet's activated revision (or a newer one it
    /// prepared): caught up, it may announce its VIPs.
    pub fn caught_up(&self, view: &View) -> bool {
        self.running > 0 && self.running >= view.activated()
    }

    /// The report this member would write now.
    pub fn report(&self) -> MemberReport {
        let (prepared, readiness, error) = match &self.prepared {
            Some((r, Ok(()))) => (*r, Readiness::Ready, None),
            Some((r, Err(e))) => (*r, Readiness::Refused, Some(e.clone())),
            None => (0, Readiness::Ready, None),
        };
        MemberReport {
            prepared,
            readiness,
            error,
            running: self.running,
            activated_at_ms: self.activated_at_ms,
            sync_lag_ms: self.sync_lag_ms,
            fingerprint: self.fingerprint.clone(),
            holder: Default::default(),
        }
    }

    /// The appliance's tables now have digest `fingerprint`: the report is written again
    /// when it changed (a commit: a revision, a health batch, an override).
    pub fn tables_are(&mut self, fingerprint: &str) -> Vec<Action> {
        if self.fingerprint == fingerprint {
            return Vec::new();
        }
        self.fingerprint = fingerprint.to_string();
        vec![Action::Report(self.report())]
    }

    /// The fleet changed (or a second passed: `now_ms` moves the timeout).
    pub fn on_view(&mut self, view: &View, now_ms: u64) -> Vec<Action> {
        let mut out = Vec::new();
        let Some(cfg) = &view.config else {
            return out;
        };
        let r = cfg.revision;
        if self.preparing.is_none_or(|(p, _)| p < r) {
            self.preparing = Some((r, now_ms));
            out.push(Action::Prepare {
                revision: r,
                text: cfg.text.clone(),
            });
            return out;
        }
        let ready = matches!(&self.prepared, Some((p, Ok(()))) if *p == r);
        let activated = view.activated();
        if ready && activated == r && self.running < r {
            out.push(Action::Activate { revision: r });
            return out;
        }
        if !matches!(&self.prepared, Some((p, _)) if *p == r) {
            return out;
        }
        let waited = self
            .preparing
            .map_or(0, |(_, seen)| now_ms.saturating_sub(seen));
        match coordinate(view, Duration::from_millis(waited), self.timeout) {
            Coordination::Activate {
                revision,
                all_ready,
            } if ready && self.tried < revision => {
                self.tried = revision;
                out.push(Action::WriteActivation {
                    activation: Activation {
                        revision,
                        by: self.name.clone(),
                        at_ms: now_ms,
                        all_ready,
                    },
                    expect: view.activation_mod,
                });
            }
            Coordination::Refused { revision, by } if self.told_refused < revision => {
                self.told_refused = revision;
                out.push(Action::Refused { revision, by });
            }
            _ => {}
        }
        out
    }

    /// The appliance prepared `revision` (or refused it with every error).
    pub fn prepared_result(&mut self, revision: u64, result: Result<(), String>) -> Vec<Action> {
        if self.preparing.is_some_and(|(p, _)| p != revision) {
            return Vec::new();
        }
        self.prepared = Some((revision, result));
        vec![Action::Report(self.report())]
    }

    /// The tables run `revision` since `now_ms`; `view` gives the activation's write time.
    pub fn activated(&mut self, revision: u64, view: &View, now_ms: u64) -> Vec<Action> {
        self.running = revision;
        self.activated_at_ms = now_ms;
        self.sync_lag_ms = view
            .activation
            .as_ref()
            .filter(|a| a.revision == revision)
            .map(|a| now_ms.saturating_sub(a.at_ms));
        vec![Action::Report(self.report())]
    }

    /// A new session (a fresh lease after etcd was gone): the report must be written again
    /// and the coordinator's write may be retried.
    pub fn reconnected(&mut self) -> Vec<Action> {
        self.tried = 0;
        vec![Action::Report(self.report())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::ConfigAt;

    fn fleet(rev: u64, members: &[&Member]) -> View {
        let mut v = View {
            config: Some(ConfigAt {
                revision: rev,
                text: format!("# r{rev}"),
            }),
            ..View::default()
        };
        for m in members {
            v.members.insert(m.name.clone(), m.report());
        }
        v
    }

    /// Drives one member through the actions that need no etcd, returning the rest.
    fn prepare_ok(m: &mut Member, v: &View, now: u64) -> Vec<Action> {
        let acts = m.on_view(v, now);
        let Some(Action::Prepare { revision, .. }) = acts.first() else {
            panic!("expected Prepare, got {acts:?}");
        };
        m.prepared_result(*revision, Ok(()))
    }

    #[test]
    fn two_members_go_through_both_phases() {
        let t = Duration::from_secs(5);
        let mut a = Member::new("lb1", t);
        let mut b = Member::new("lb2", t);
        let v = fleet(7, &[&a, &b]);
        prepare_ok(&mut a, &v, 1000);
        // lb1 is ready but lb2 has not reported: no activation yet.
        let v = fleet(7, &[&a, &b]);
        assert!(a.on_view(&v, 1001).is_empty());
        prepare_ok(&mut b, &v, 1002);
        let mut v = fleet(7, &[&a, &b]);
        let acts = b.on_view(&v, 1003);
        let [Action::WriteActivation { activation, expect }] = acts.as_slice() else {
            panic!("lb2 sees both ready and must write the activation: {acts:?}");
        };
        assert_eq!(
            (activation.revision, activation.all_ready, *expect),
            (7, true, 0)
        );
        // The write is not repeated for the same view.
        assert!(b.on_view(&v, 1004).is_empty());
        v.activation = Some(activation.clone());
        v.activation_mod = 12;
        for m in [&mut a, &mut b] {
            assert_eq!(m.on_view(&v, 1005), vec![Action::Activate { revision: 7 }]);
            let r = m.activated(7, &v, 1010);
            let [Action::Report(r)] = r.as_slice() else {
                panic!()
            };
            assert_eq!((r.running, r.sync_lag_ms), (7, Some(7)));
            assert!(m.caught_up(&v));
        }
    }

    #[test]
    fn a_refused_version_is_reported_and_never_activated() {
        let t = Duration::from_secs(1);
        let mut a = Member::new("lb1", t);
        let mut b = Member::new("lb2", t);
        let v = fleet(9, &[&a, &b]);
        prepare_ok(&mut a, &v, 0);
        b.on_view(&v, 0);
        b.prepared_result(9, Err("vip \"web\".port: 0 is out of range".into()));
        let v = fleet(9, &[&a, &b]);
        let acts = a.on_view(&v, 60_000);
        assert!(
            matches!(acts.as_slice(), [Action::Refused { revision: 9, by }] if by[0].0 == "lb2"),
            "{acts:?}"
        );
        assert!(a.on_view(&v, 61_000).is_empty(), "told once");
        assert_eq!(b.report().readiness, Readiness::Refused);
    }

    #[test]
    fn a_member_that_refused_prepares_again_after_its_file_is_reloaded() {
        let t = Duration::from_secs(1);
        let mut a = Member::new("lb1", t);
        let mut b = Member::new("lb2", t);
        let v = fleet(9, &[&a, &b]);
        prepare_ok(&mut a, &v, 0);
        b.on_view(&v, 0);
        b.prepared_result(9, Err("vip \"web\".address: contradicts the fleet".into()));
        let v = fleet(9, &[&a, &b]);
        let acts = b.on_view(&v, 1_000);
        assert!(
            !acts.iter().any(|a| matches!(a, Action::Prepare { .. })),
            "no new revision: no new preparation without a reload: {acts:?}"
        );
        b.reconsider();
        let acts = b.on_view(&v, 2_000);
        assert!(
            matches!(acts.as_slice(), [Action::Prepare { revision: 9, .. }]),
            "{acts:?}"
        );
        let acts = b.prepared_result(9, Ok(()));
        assert!(
            matches!(&acts[..], [Action::Report(r)] if r.readiness == Readiness::Ready),
            "{acts:?}"
        );
        // A member that prepared well keeps its result across a reload.
        a.reconsider();
        assert_eq!(a.prepared(), Some((9, None)));
    }

    #[test]
    fn a_rejoining_member_prepares_the_current_revision_and_catches_up() {
        let t = Duration::from_secs(5);
        let mut a = Member::new("lb3", t);
        let mut v = fleet(20, &[]);
        v.activation = Some(Activation {
            revision: 20,
            by: "lb1".into(),
            at_ms: 5,
            all_ready: false,
        });
        assert!(!a.caught_up(&v));
        prepare_ok(&mut a, &v, 100);
        assert_eq!(a.on_view(&v, 101), vec![Action::Activate { revision: 20 }]);
        a.activated(20, &v, 102);
        assert!(a.caught_up(&v));
    }

    #[test]
    fn a_new_table_digest_is_reported_once() {
        let mut a = Member::new("lb1", Duration::from_secs(5));
        let acts = a.tables_are("00ff");
        let [Action::Report(r)] = acts.as_slice() else {
            panic!("a changed digest is reported: {acts:?}");
        };
        assert_eq!(r.fingerprint, "00ff");
        assert!(
            a.tables_are("00ff").is_empty(),
            "unchanged: nothing to write"
        );
        assert_eq!(a.report().fingerprint, "00ff");
    }

    #[test]
    fn a_newer_push_supersedes_the_one_being_prepared() {
        let mut a = Member::new("lb1", Duration::from_secs(5));
        let v = fleet(3, &[]);
        assert!(matches!(
            a.on_view(&v, 0).as_slice(),
            [Action::Prepare { revision: 3, .. }]
        ));
        let v = fleet(5, &[]);
        assert!(matches!(
            a.on_view(&v, 1).as_slice(),
            [Action::Prepare { revision: 5, .. }]
        ));
        // The late result for 3 is dropped.
        assert!(a.prepared_result(3, Ok(())).is_empty());
        assert_eq!(a.prepared(), None);
    }
}
