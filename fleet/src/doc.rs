//! The JSON documents the members write under the fleet's keys. Every field a newer release
//! adds gets a serde default, so members of two releases read each other's documents during
//! an upgrade.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a member stands with the newest version it prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    /// Validated and prepared: it switches when the coordinator key says so.
    Ready,
    /// Failed validation or table building there: the version must not be activated.
    Refused,
}

/// `members/{member}`: a member's versions, under its lease (gone when it is).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    /// The config revision it prepared last.
    pub prepared: u64,
    pub readiness: Readiness,
    /// Why it refused `prepared` (the validation errors, one a line).
    #[serde(default)]
    pub error: Option<String>,
    /// The config revision its tables run (0: none from the fleet yet).
    pub running: u64,
    /// When it switched to `running`, milliseconds since the Unix epoch.
    #[serde(default)]
    pub activated_at_ms: u64,
    /// Milliseconds from the coordinator's activation write to its switch.
    #[serde(default)]
    pub sync_lag_ms: Option<u64>,
    /// The digest of the tables it forwards with now (as its `GET /v1/status` shows), so
    /// `sluice fleet status` compares the members' tables from etcd alone. Empty from a
    /// release that did not publish it.
    #[serde(default)]
    pub fingerprint: String,
    /// Which appliance process holds the member's name (`claim`): stamped by the session
    /// that writes the report. Empty from a release that did not claim names.
    #[serde(default)]
    pub holder: Holder,
}

/// An appliance process that holds a member name: where it runs and when it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// The machine and the appliance on it: `/etc/machine-id` and the API socket's path
    /// (two appliances of one machine, as in a lab, differ by their sockets; a process
    /// that takes over from the one before has the same).
    #[serde(default)]
    pub appliance: String,
    /// When the process started, milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_ms: u64,
}

/// `activate`: the version every member switches to, written once per version (an etcd
/// transaction on the key's mod revision).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    pub revision: u64,
    /// The member that wrote it.
    pub by: String,
    /// Milliseconds since the Unix epoch when it was written.
    pub at_ms: u64,
    /// Every live member was ready, or the activation timeout passed first.
    pub all_ready: bool,
}

/// `epoch`: the history of this fleet's keys the members follow, written by `sluice fleet
/// rebase` after etcd's history went back (a restore from a snapshot, a move to another
/// cluster): a new `id` tells every member to take the keys as they are now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epoch {
    pub id: String,
    /// Milliseconds since the Unix epoch when it was written.
    #[serde(default)]
    pub at_ms: u64,
}

/// `health/{member}`: a member's probe verdicts, under its lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    /// Backend (`vip/address:port`) to up (true) or down.
    pub backends: BTreeMap<String, bool>,
}

/// `overrides/{vip}/{backend}`: an operator's change to a backend, fleet-wide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideDoc {
    /// "active", "drain" or "disabled"; `None` leaves the config's state.
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub weight: Option<u32>,
}

/// The highest weight the API takes (and the tables keep).
pub const MAX_WEIGHT: u32 = 65535;

impl OverrideDoc {
    /// Why the override cannot be applied, as the API would have refused it: a state
    /// other than "active", "drain" or "disabled", or a weight over [`MAX_WEIGHT`].
    pub fn problem(&self) -> Option<String> {
        if let Some(s) = &self.state
            && !matches!(s.as_str(), "active" | "drain" | "disabled")
        {
            return Some(format!(
                "state {s:?} is none of \"active\", \"drain\", \"disabled\""
            ));
        }
        match self.weight {
            Some(w) if w > MAX_WEIGHT => Some(format!("weight {w} is over {MAX_WEIGHT}")),
            _ => None,
        }
    }
}

/// The name a backend has in health documents: `vip/address:port`.
pub fn backend_name(vip: &str, addr: &std::net::SocketAddr) -> String {
    format!("{vip}/{addr}")
}
