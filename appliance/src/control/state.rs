//! Everything the control loop's decisions own, in one place: what the running version was
//! built from and the tables themselves, what the loop learned since (health verdicts and
//! their reasons, the operator's changes, routes and neighbours), the pacing of health
//! batches and slow-start steps, what the tick saw last, the fleet membership and a commit
//! under way. Only `decide` changes it; the executor (`io.rs`) reads it to carry effects
//! out, and the readers get a view of it (`view.rs`).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::batch::{HealthBatch, Pacing};
use super::change::Override;
use super::fleet::Membership;
use super::flood;
use super::kept::Keeper;
use super::neighbours::NextHops;
use super::pending::Pending;
use super::policy::PolicyState;
use super::prepare::{Prepared, Steering, Targets};
use super::slowstart::{self, Ramps};
use crate::config::Config;
use crate::lb::exec::Executor;
use crate::lb::{BackendId, Tables};

/// Version numbers: one counter, read by anyone, advanced by `decide/commit.rs` alone,
/// once for every version it builds (or fails to build).
#[derive(Debug, Default)]
pub struct Versions {
    last: u64,
}

impl Versions {
    /// Numbers that go on from `last` (a takeover's).
    pub fn after(last: u64) -> Versions {
        Versions { last }
    }

    /// The newest number handed out.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Hands out the next number.
    pub(super) fn take(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

/// What the tick saw the last time, for its events.
#[derive(Debug, Default)]
pub struct LastTick {
    pub ticks: u64,
    /// Each BGP peer's state.
    pub peers: HashMap<IpAddr, bgp::State>,
    /// Frames dropped, and when the last spike was reported.
    pub drops: u64,
    pub spike: Option<Instant>,
    pub flood: flood::Watch,
    /// Probes not run (local shortage) at the last event about them.
    pub not_run: u64,
    /// New flows refused by a full connection table, and when that was last reported.
    pub table_full: u64,
    pub full_reported: Option<Instant>,
}

/// When the loop must wake for the state's own sake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The health batch commits.
    pub health: Option<Instant>,
    /// The next slow-start level (or the end of an outbound drain) commits.
    pub ramp: Option<Instant>,
}

/// What the control plane knows.
pub struct State {
    pub path: PathBuf,
    /// The config file as loaded.
    pub file_config: Arc<Config>,
    /// `file_config` with the operator's overrides: what the tables are built from.
    pub config: Arc<Config>,
    /// The running tables: the version the workers were handed last.
    pub tables: Arc<Tables>,
    pub versions: Versions,
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
    /// The prober's targets, with the pairs each decides.
    pub targets: Arc<Targets>,
    /// Until when BGP waits for the health checks to decide.
    pub settle_by: Instant,
    /// A BGP speaker runs.
    pub speaker: bool,
    /// A fleet member behind its fleet announces nothing until it has caught up.
    pub fleet_hold: bool,
    /// The datapath interfaces that do not forward, in words (the datapath watch): while
    /// any does, nothing is announced.
    pub datapath_faults: Vec<String>,
    /// With `[sync]`, the appliance announces nothing until it has its peers' flows.
    pub sync_hold: bool,
    /// The slow-start ramps the running version was built with.
    pub ramps: Ramps,
    /// When the next slow-start level is due.
    pub ramp_due: Option<Instant>,
    /// Several checks per backend and the agents' answers (see `policy.rs`).
    pub policy: PolicyState,
    /// When the last slow-start step was committed (steps keep `MIN_STEP_GAP` apart).
    pub last_ramp_step: Option<Instant>,
    /// Health transitions received and not yet committed.
    pub batch: HealthBatch,
    pub last: LastTick,
    /// The operator overrides on disk.
    pub keeper: Keeper,
    /// The fleet this appliance is a member of (`[fleet]`).
    pub fleet: Option<Membership>,
    /// A commit waiting for its staged half.
    pub pending: Option<Pending>,
    /// Builds many VIPs' rings at once (the control plane's cores; tests run them in turn).
    pub exec: &'static dyn Executor,
}

/// What the state starts from, besides its first version.
pub struct First {
    pub path: PathBuf,
    /// The config file (a fleet member's merged with its last good revision).
    pub file: Arc<Config>,
    /// The operator's overrides kept on disk, and their keeper.
    pub overrides: HashMap<BackendId, Override>,
    pub withdrawn: BTreeSet<String>,
    pub keeper: Keeper,
    pub next_hops: NextHops,
    pub exec: &'static dyn Executor,
    /// The health verdicts the process before this one ran on (a takeover; empty
    /// otherwise): the first version's rings are its rings.
    pub health: HashMap<BackendId, bool>,
    /// The last version number the process before handed out: this one numbers on.
    pub versions_from: u64,
    /// The outbound states the process before ran (a takeover; empty otherwise): a drain
    /// under way goes on.
    pub outbound: Vec<crate::lb::outbound::Carried>,
}

impl State {
    /// The state running `p`, the first version (`versions` handed out its number).
    pub(super) fn new(f: First, p: Prepared, versions: Versions, now: Instant) -> State {
        let mut withdrawn = f.withdrawn;
        withdrawn.retain(|n| p.config.vip(n).is_some());
        let sync_hold = p.config.sync.is_some();
        State {
            path: f.path,
            settle_by: now + super::prepare::settle_time(&p.config),
            file_config: p.file_config,
            config: p.config,
            tables: Arc::new(p.tables),
            versions,
            health: p.health,
            reasons: HashMap::new(),
            overrides: p.overrides,
            withdrawn,
            next_hops: f.next_hops,
            steering: p.steering,
            targets: Arc::new(p.targets),
            speaker: false,
            fleet_hold: false,
            datapath_faults: Vec::new(),
            sync_hold,
            ramps: p.ramps,
            ramp_due: p.ramp_due,
            policy: PolicyState::of(p.combined, p.agents),
            last_ramp_step: None,
            batch: HealthBatch::default(),
            last: LastTick::default(),
            keeper: f.keeper,
            fleet: None,
            pending: None,
            exec: f.exec,
        }
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
            targets: p.targets,
            settle_by: p.settle_by,
        }
    }

    /// When the loop must wake next for the health batch and slow start.
    pub fn due(&self) -> Due {
        Due {
            health: self.batch.due(Pacing::of(&self.config)),
            ramp: self.ramp_at(),
        }
    }

    /// When the next slow-start step commits: when its level is due, but no sooner than
    /// `MIN_STEP_GAP` after the last step; `None` while nothing ramps.
    fn ramp_at(&self) -> Option<Instant> {
        let due = self.ramp_due?;
        Some(match self.last_ramp_step {
            Some(t) => due.max(t + slowstart::MIN_STEP_GAP),
            None => due,
        })
    }
}

/// The part of a [`Prepared`] version that leaves the control state: for the workers, the
/// prober and the speaker (the steering keys were staged before: `decide/commit.rs`).
pub struct ToApply {
    pub tables: Tables,
    pub targets: Targets,
    pub settle_by: Option<Instant>,
}
