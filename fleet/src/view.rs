//! What a member knows of the fleet: the keys under the fleet's root as last read or
//! watched, decoded. A document that does not decode is kept out and counted, so one bad
//! write (a hand edit, a newer release) is reported instead of stopping the fleet.

use std::collections::BTreeMap;

use crate::doc::{Activation, Epoch, HealthReport, MemberReport, OverrideDoc};
use crate::keys::{Key, Keys};

/// How an activation above the config's revision is named.
const ABOVE: &str = "names revision";

/// Why a member's key written without a lease is not counted.
pub const LEASELESS: &str = "written without a lease: not counted as a live member";

/// The config key's value at one revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigAt {
    /// The key's mod revision: the fleet's config version.
    pub revision: u64,
    pub text: String,
}

/// The fleet as one member sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// The etcd revision this view is current to.
    pub revision: u64,
    /// The etcd cluster's ID (0: not known), from the responses' headers.
    pub cluster: u64,
    /// The fleet's epoch (`sluice fleet rebase`), when one was written.
    pub epoch: Option<Epoch>,
    pub config: Option<ConfigAt>,
    pub activation: Option<Activation>,
    /// The activate key's mod revision (0: never written), for the write-once transaction.
    pub activation_mod: i64,
    /// Live members (their keys are under their leases).
    pub members: BTreeMap<String, MemberReport>,
    pub health: BTreeMap<String, HealthReport>,
    /// (VIP name, backend `address:port`) to the override.
    pub overrides: BTreeMap<(String, String), OverrideDoc>,
    /// Keys under the root whose value did not decode, with why.
    pub undecodable: BTreeMap<String, String>,
}

impl View {
    /// Applies a put of `value` at `key` (mod revision `modrev`, under lease `lease`; 0: no
    /// lease).
    pub fn put(&mut self, keys: &Keys, key: &str, value: &[u8], modrev: i64, lease: i64) {
        self.undecodable.remove(key);
        let bad = |e: String, v: &mut View| {
            v.undecodable.insert(key.to_string(), e);
        };
        match keys.parse(key) {
            Some(Key::Config) => match std::str::from_utf8(value) {
                Ok(text) => {
                    self.config = Some(ConfigAt {
                        revision: modrev.max(0) as u64,
                        text: text.to_string(),
                    })
                }
                Err(e) => bad(format!("not UTF-8: {e}"), self),
            },
            Some(Key::Activate) => match serde_json::from_slice(value) {
                Ok(a) => {
                    self.activation = Some(a);
                    self.activation_mod = modrev;
                }
                Err(e) => bad(e.to_string(), self),
            },
            Some(Key::Epoch) => match serde_json::from_slice(value) {
                Ok(e) => self.epoch = Some(e),
                Err(e) => bad(e.to_string(), self),
            },
            // A member's keys live under its lease: one written without (a hand edit, a
            // restore of a snapshot) would count as a live member forever.
            Some(Key::Member(_) | Key::Health(_)) if lease == 0 => {
                self.forget(keys, key);
                bad(LEASELESS.to_string(), self);
            }
            Some(Key::Member(m)) => match serde_json::from_slice(value) {
                Ok(r) => {
                    self.members.insert(m.to_string(), r);
                }
                Err(e) => bad(e.to_string(), self),
            },
            Some(Key::Health(m)) => match serde_json::from_slice(value) {
                Ok(r) => {
                    self.health.insert(m.to_string(), r);
                }
                Err(e) => bad(e.to_string(), self),
            },
            Some(Key::Override(vip, b)) => match serde_json::from_slice::<OverrideDoc>(value) {
                Ok(o) => match o.problem() {
                    None => {
                        self.overrides.insert((vip.to_string(), b.to_string()), o);
                    }
                    Some(p) => {
                        self.overrides.remove(&(vip.to_string(), b.to_string()));
                        bad(p, self);
                    }
                },
                Err(e) => bad(e.to_string(), self),
            },
            None => {}
        }
        self.check_activation(keys);
    }

    /// Forgets what `key` held (its document is no longer one to act on).
    fn forget(&mut self, keys: &Keys, key: &str) {
        match keys.parse(key) {
            Some(Key::Member(m)) => {
                self.members.remove(m);
            }
            Some(Key::Health(m)) => {
                self.health.remove(m);
            }
            _ => {}
        }
    }

    /// An activation naming a revision above the config key's (a hand edit, or a key left
    /// from before etcd went back to an older snapshot) activates nothing: it is named in
    /// `undecodable`, and the fleet activates the config's revision over it.
    fn check_activation(&mut self, keys: &Keys) {
        let k = keys.activate();
        match (&self.activation, &self.config) {
            (Some(a), Some(c)) if a.revision > c.revision => {
                let why = format!(
                    "{ABOVE} {}, above the config's {}: ignored",
                    a.revision, c.revision
                );
                self.undecodable.insert(k, why);
            }
            // Only this check's own word goes: a later write that did not decode stays
            // named (the activation before it is kept).
            _ if self
                .undecodable
                .get(&k)
                .is_some_and(|w| w.starts_with(ABOVE)) =>
            {
                self.undecodable.remove(&k);
            }
            _ => {}
        }
    }

    /// Applies a delete of `key` (a lease that expired, an override undone).
    pub fn delete(&mut self, keys: &Keys, key: &str) {
        self.undecodable.remove(key);
        match keys.parse(key) {
            Some(Key::Config) => self.config = None,
            Some(Key::Epoch) => self.epoch = None,
            Some(Key::Activate) => {
                self.activation = None;
                self.activation_mod = 0;
            }
            Some(Key::Member(m)) => {
                self.members.remove(m);
            }
            Some(Key::Health(m)) => {
                self.health.remove(m);
            }
            Some(Key::Override(vip, b)) => {
                self.overrides.remove(&(vip.to_string(), b.to_string()));
            }
            None => {}
        }
        self.check_activation(keys);
    }

    /// The activated revision (0: none, or one above the config's, see
    /// [`View::check_activation`]).
    pub fn activated(&self) -> u64 {
        match (&self.activation, &self.config) {
            (Some(a), Some(c)) if a.revision > c.revision => 0,
            (Some(a), _) => a.revision,
            (None, _) => 0,
        }
    }

    /// The health reports of live members only: a report outliving its member's key is not
    /// counted (both share the lease, but the two deletes arrive one by one).
    pub fn live_health(&self) -> BTreeMap<&str, &HealthReport> {
        self.health
            .iter()
            .filter(|(m, _)| self.members.contains_key(*m))
            .map(|(m, r)| (m.as_str(), r))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc::Readiness;

    #[test]
    fn puts_and_deletes_follow_the_keys() {
        let k = Keys::new("/s", "f");
        let mut v = View::default();
        v.put(&k, &k.config(), b"[[vip]]", 7, 0);
        assert_eq!(v.config.as_ref().map(|c| c.revision), Some(7));
        let r = MemberReport {
            prepared: 7,
            readiness: Readiness::Ready,
            error: None,
            running: 0,
            activated_at_ms: 0,
            sync_lag_ms: None,
            fingerprint: String::new(),
            holder: Default::default(),
        };
        v.put(&k, &k.member("lb1"), &serde_json::to_vec(&r).unwrap(), 8, 5);
        assert_eq!(v.members.get("lb1"), Some(&r));
        v.put(
            &k,
            &k.health("lb1"),
            br#"{"backends":{"web/10.0.0.1:80":true}}"#,
            9,
            5,
        );
        v.put(&k, &k.health("lb9"), br#"{"backends":{}}"#, 9, 6);
        assert_eq!(v.live_health().len(), 1, "lb9 has no member key");
        v.delete(&k, &k.member("lb1"));
        assert!(v.members.is_empty());
        assert!(v.live_health().is_empty());
    }

    #[test]
    fn a_bad_document_is_kept_out_and_named() {
        let k = Keys::new("/s", "f");
        let mut v = View::default();
        v.put(&k, &k.activate(), b"{not json", 3, 0);
        assert!(v.activation.is_none());
        assert!(v.undecodable.contains_key(&k.activate()));
        v.put(
            &k,
            &k.activate(),
            br#"{"revision":2,"by":"lb1","at_ms":1,"all_ready":true}"#,
            4,
            0,
        );
        assert_eq!(v.activated(), 2);
        assert_eq!(v.activation_mod, 4);
        assert!(v.undecodable.is_empty());
        // A later write that does not decode is named, the activation before it kept.
        v.put(&k, &k.activate(), b"{not json either", 5, 0);
        assert_eq!(v.activated(), 2);
        assert!(v.undecodable.contains_key(&k.activate()));
    }

    #[test]
    fn an_activation_above_the_config_activates_nothing_and_is_named() {
        let k = Keys::new("/s", "f");
        let mut v = View::default();
        v.put(&k, &k.config(), b"[[vip]]", 7, 0);
        v.put(
            &k,
            &k.activate(),
            br#"{"revision":999,"by":"hand","at_ms":1,"all_ready":true}"#,
            8,
            0,
        );
        assert_eq!(v.activated(), 0, "a bogus activation holds nothing back");
        assert_eq!(v.activation_mod, 8, "the fleet's next write replaces it");
        assert!(v.undecodable[&k.activate()].contains("above the config's 7"));
        // A newer config that reaches it makes it a real activation again.
        v.put(&k, &k.config(), b"[[vip]]", 999, 0);
        assert_eq!(v.activated(), 999);
        assert!(v.undecodable.is_empty());
    }

    #[test]
    fn leaseless_member_keys_and_overrides_the_api_would_refuse_are_kept_out() {
        let k = Keys::new("/s", "f");
        let mut v = View::default();
        let report = br#"{"prepared":1,"readiness":"ready","running":1}"#;
        v.put(&k, &k.member("lb1"), report, 3, 0);
        v.put(&k, &k.health("lb1"), br#"{"backends":{}}"#, 3, 0);
        assert!(v.members.is_empty() && v.health.is_empty());
        assert_eq!(v.undecodable[&k.member("lb1")], LEASELESS);
        // The same member under a lease counts.
        v.put(&k, &k.member("lb1"), report, 4, 77);
        assert_eq!(v.members.len(), 1);
        assert!(!v.undecodable.contains_key(&k.member("lb1")));
        let key = k.override_key("web", "10.0.0.1:80");
        for (doc, why) in [
            (&br#"{"weight":70000}"#[..], "weight 70000 is over 65535"),
            (&br#"{"state":"paused"}"#[..], "state \"paused\" is none of"),
        ] {
            v.put(&k, &key, doc, 5, 0);
            assert!(v.overrides.is_empty(), "{why}");
            assert!(v.undecodable[&key].contains(why), "{:?}", v.undecodable);
        }
        v.put(&k, &key, br#"{"weight":7,"state":"drain"}"#, 6, 0);
        assert_eq!(v.overrides.len(), 1);
        assert!(!v.undecodable.contains_key(&key));
        assert_eq!(v.undecodable[&k.health("lb1")], LEASELESS);
    }
}
