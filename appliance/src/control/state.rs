//! The running state of the control plane: what the running table version was built from,
//! plus what the control loop learned since (health verdicts, the operator's changes).
//! Only [`super::commit`] replaces the parts a [`super::prepare::Prepared`] carries.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::prepare::{NextHops, Prepared, Steering, Targets};
use super::shared::Override;
use super::slowstart::Ramps;
use crate::config::Config;
use crate::lb::BackendId;
use crate::lb::Tables;

/// What the control plane knows besides the tables.
pub struct State {
    pub path: PathBuf,
    /// The config file as loaded.
    pub file_config: Arc<Config>,
    /// `file_config` with the operator's overrides: what the tables are built from.
    pub config: Arc<Config>,
    /// The newest version number handed out (a change that failed to prepare used one).
    pub version: u64,
    /// Prober verdicts; a backend missing here has no check, or no verdict yet.
    pub health: HashMap<BackendId, bool>,
    /// The reason of each backend's last health transition.
    pub reasons: HashMap<BackendId, String>,
    /// Operator changes to backends (API), layered over the file.
    pub overrides: HashMap<BackendId, Override>,
    /// VIPs an operator withdrew from BGP.
    pub withdrawn: BTreeSet<String>,
    pub next_hops: NextHops,
    /// What the XDP program steers now.
    pub steering: Steering,
    /// A fleet member behind its fleet announces nothing until it has caught up.
    pub fleet_hold: bool,
    /// The slow-start ramps the running version was built with.
    pub ramps: Ramps,
    /// When the next slow-start level is due (the control loop commits it).
    pub ramp_due: Option<Instant>,
    /// Several checks per backend and the agents' answers (see `policy.rs`).
    pub policy: super::policy::PolicyState,
}

impl State {
    /// The state before the first version: `file` as loaded, nothing learned yet.
    pub fn new(path: PathBuf, file: Config) -> State {
        let file = Arc::new(file);
        State {
            path,
            file_config: Arc::clone(&file),
            config: file,
            version: 0,
            health: HashMap::new(),
            reasons: HashMap::new(),
            overrides: HashMap::new(),
            withdrawn: BTreeSet::new(),
            next_hops: NextHops::default(),
            steering: Steering::default(),
            fleet_hold: false,
            ramps: Ramps::default(),
            ramp_due: None,
            policy: Default::default(),
        }
    }

    /// Hands out the next version number.
    pub fn next_version(&mut self) -> u64 {
        self.version += 1;
        self.version
    }

    /// Takes what `p` was built from as the running state; returns the rest for the commit
    /// to apply.
    pub fn adopt(&mut self, p: Prepared) -> ToApply {
        self.withdrawn.retain(|n| p.config.vip(n).is_some());
        self.file_config = p.file_config;
        self.config = p.config;
        self.overrides = p.overrides;
        self.health = p.health;
        self.ramps = p.ramps;
        self.ramp_due = p.ramp_due;
        self.policy.adopt(p.combined, p.agents, &p.targets);
        ToApply {
            tables: p.tables,
            steering: p.steering,
            targets: p.targets,
            settle_by: p.settle_by,
        }
    }
}

/// The part of a [`Prepared`] version that leaves the control state: for the workers, the
/// XDP program, the prober and the speaker.
pub struct ToApply {
    pub tables: Tables,
    pub steering: Steering,
    pub targets: Targets,
    pub settle_by: Option<Instant>,
}
