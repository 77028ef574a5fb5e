//! Where a fleet's state lives in etcd: every key of fleet `name` is under
//! `{prefix}/{name}/`, so one prefix watch sees all of it and fleets sharing an etcd
//! cluster never see each other's keys.
//!
//! ```text
//! {prefix}/{name}/config              the fleet's TOML (its mod revision is the version)
//! {prefix}/{name}/activate            JSON Activation: the version members switch to
//! {prefix}/{name}/epoch               JSON Epoch: the history members follow (`sluice fleet rebase`)
//! {prefix}/{name}/members/{member}    JSON MemberReport, under the member's lease
//! {prefix}/{name}/health/{member}     JSON HealthReport, under the member's lease
//! {prefix}/{name}/overrides/{vip}/{backend}  JSON OverrideDoc (operator changes)
//! ```

/// The keys of one fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    root: String,
}

/// What a key under the fleet's root is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key<'a> {
    Config,
    Activate,
    Epoch,
    Member(&'a str),
    Health(&'a str),
    /// VIP name and backend `address:port`.
    Override(&'a str, &'a str),
}

impl Keys {
    /// The keys of fleet `name` under `prefix` (a trailing '/' is ignored).
    pub fn new(prefix: &str, name: &str) -> Keys {
        Keys {
            root: format!("{}/{name}/", prefix.trim_end_matches('/')),
        }
    }

    /// The prefix every key of the fleet starts with (ends in '/').
    pub fn root(&self) -> &str {
        &self.root
    }

    pub fn config(&self) -> String {
        format!("{}config", self.root)
    }

    pub fn activate(&self) -> String {
        format!("{}activate", self.root)
    }

    pub fn epoch(&self) -> String {
        format!("{}epoch", self.root)
    }

    pub fn member(&self, member: &str) -> String {
        format!("{}members/{member}", self.root)
    }

    pub fn health(&self, member: &str) -> String {
        format!("{}health/{member}", self.root)
    }

    /// The override of backend `backend` (`address:port`) of VIP `vip`.
    pub fn override_key(&self, vip: &str, backend: &str) -> String {
        format!("{}overrides/{vip}/{backend}", self.root)
    }

    /// What `key` is, or `None` for a key outside the fleet or unknown to this release.
    pub fn parse<'a>(&self, key: &'a str) -> Option<Key<'a>> {
        let rest = key.strip_prefix(self.root.as_str())?;
        match rest {
            "config" => return Some(Key::Config),
            "activate" => return Some(Key::Activate),
            "epoch" => return Some(Key::Epoch),
            _ => {}
        }
        let (kind, tail) = rest.split_once('/')?;
        match kind {
            "members" if !tail.is_empty() && !tail.contains('/') => Some(Key::Member(tail)),
            "health" if !tail.is_empty() && !tail.contains('/') => Some(Key::Health(tail)),
            "overrides" => {
                let (vip, backend) = tail.split_once('/')?;
                (!vip.is_empty() && !backend.is_empty()).then_some(Key::Override(vip, backend))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_parse() {
        let k = Keys::new("/sluice/", "edge");
        assert_eq!(k.config(), "/sluice/edge/config");
        assert_eq!(k.parse(&k.config()), Some(Key::Config));
        assert_eq!(k.parse(&k.activate()), Some(Key::Activate));
        assert_eq!(k.parse(&k.member("lb1")), Some(Key::Member("lb1")));
        assert_eq!(k.parse(&k.health("lb2")), Some(Key::Health("lb2")));
        let o = k.override_key("web", "[2001:db8::1]:80");
        assert_eq!(k.parse(&o), Some(Key::Override("web", "[2001:db8::1]:80")));
    }

    #[test]
    fn foreign_and_malformed_keys_are_not_ours() {
        let k = Keys::new("/sluice", "edge");
        assert_eq!(k.parse("/sluice/edge2/config"), None);
        assert_eq!(k.parse("/sluice/edge/members/"), None);
        assert_eq!(k.parse("/sluice/edge/members/a/b"), None);
        assert_eq!(k.parse("/sluice/edge/overrides/web"), None);
        assert_eq!(k.parse("/sluice/edge/whatever"), None);
    }
}
