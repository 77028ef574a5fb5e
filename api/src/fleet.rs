//! `GET /v1/fleet`: a fleet member's view of its fleet (the etcd-driven versions, each
//! member's readiness and sync lag, health disagreements), for `sluice ctl`, `sluice fleet
//! status` and the console's Fleet view.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The fleet as this member sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetStatus {
    /// `[fleet] name`.
    pub fleet: String,
    /// This member (`[appliance] name`).
    pub member: String,
    /// True while the session with etcd is up.
    pub connected: bool,
    /// True while etcd is out of reach: the member forwards on the last good version.
    pub stale: bool,
    /// Seconds since etcd was last reached, while stale.
    pub stale_seconds: Option<f64>,
    /// Why etcd could not be used, while stale.
    pub last_error: Option<String>,
    /// The config key's newest revision as last seen (the newest pushed version).
    pub config_revision: u64,
    /// The revision the coordinator key activates.
    pub activated_revision: u64,
    /// The revision this member's tables run (0: none from the fleet yet).
    pub running_revision: u64,
    /// The newest pushed revision, when live members refused it, with their errors: not
    /// activated, or (when `activated_revision` reached it before they answered) activated
    /// without them, who keep running the revision they run.
    pub refused: Option<Refusal>,
    /// Live members, by name.
    pub members: Vec<FleetMember>,
    /// Milliseconds between the first and the last live member's switch to
    /// `activated_revision`, once every live member runs it.
    pub activation_spread_ms: Option<u64>,
    /// Backends on which some live member's probes disagree with the fleet's verdict.
    pub disagreements: Vec<Disagreement>,
    /// A digest of this member's forwarding tables (VIPs, backends, states, health, rings):
    /// members on the same version and health show the same one.
    pub table_fingerprint: String,
    /// False while the member holds its announcements until it has caught up.
    pub announcing: bool,
    /// True while the running revision is the last good one read from `[fleet] state_dir`
    /// at start (etcd has not confirmed it yet).
    pub running_from_disk: bool,
    /// Failed writes or reads of the last good revision under `[fleet] state_dir`.
    pub last_good_errors: u64,
    /// Keys under the fleet's root this member does not act on, with why: a document that
    /// does not decode, a member's key written without a lease, an override the API would
    /// refuse, an activation above the config's revision.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ignored_keys: BTreeMap<String, String>,
}

/// One live member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetMember {
    pub name: String,
    /// The revision it prepared last, and whether it is ready for it ("ready", "refused").
    pub prepared: u64,
    pub readiness: String,
    /// The revision its tables run.
    pub running: u64,
    /// Milliseconds from the activation write to its switch, for `running`.
    pub sync_lag_ms: Option<u64>,
    /// Why it refused `prepared`.
    pub error: Option<String>,
    /// The digest of the tables it forwards with, as it last reported it (empty from a
    /// release that does not report it): members on the same version and health show the
    /// same one.
    #[serde(default)]
    pub table_fingerprint: String,
}

/// A revision that was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub revision: u64,
    /// Member and its errors.
    pub by: Vec<(String, String)>,
}

/// A backend whose fleet verdict some live member does not share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disagreement {
    /// `vip/address:port`.
    pub backend: String,
    /// The fleet's verdict (what every member's tables use).
    pub fleet_up: bool,
    pub up_votes: u32,
    pub down_votes: u32,
    /// The members whose own probes say otherwise (their path to it is suspect).
    pub members: Vec<String>,
}
