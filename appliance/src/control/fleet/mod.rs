//! A fleet member (`[fleet]`): versions come from etcd instead of the file. The `fleet`
//! crate's session task hands views of the fleet's keys to the loop; the member state
//! machine turns them into actions, which the loop carries out (`decide/fleet.rs`): prepare
//! a revision (the fleet's TOML merged with the local file, validated and built like a
//! reload, running nothing), report ready or refused, write the coordinator's activation,
//! and switch when the activation names the prepared revision. Health in a fleet is the
//! fleet's: local probe verdicts are published under the member's lease and the tables use
//! the quorum over every live member's; operator overrides are written to etcd and applied
//! from it by every member. When etcd is out of reach the member keeps forwarding on what it
//! runs, says it is stale, and the session retries with backoff; the VIPs stay announced.
//! A member that comes back behind the fleet holds its announcements until it has caught up.
//!
//! [`Membership`] is what the loop knows of its fleet (pure data); `session.rs` the etcd
//! session's handle and the start-up reads; `status.rs` the fleet document; `lastgood.rs`
//! the revision kept on disk.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub mod lastgood;
pub mod session;
pub mod status;

pub use session::{FleetError, Session, Start, start_from};
pub use status::fingerprint;

use ::fleet::member::{Action, Member};
use ::fleet::quorum::{self, Verdict};
use ::fleet::{HealthReport, OverrideDoc, View};

use super::change::Override;
use super::prepare::Prepared;
use crate::config::{self, BackendState};
use crate::lb::BackendId;
use lastgood::LastGood;
use status::Parts;

/// What the loop knows of its fleet.
#[derive(Debug)]
pub struct Membership {
    pub name: String,
    pub member: Member,
    pub view: View,
    pub quorum: Option<usize>,
    pub connected: bool,
    /// When etcd was last reached (or the member started), for the stale time.
    pub last_contact: Instant,
    pub last_error: Option<String>,
    /// This member's own probe verdicts.
    pub local: HashMap<BackendId, bool>,
    pub verdicts: BTreeMap<String, Verdict>,
    /// The fleet's overrides as last applied.
    pub applied_overrides: BTreeMap<(String, String), OverrideDoc>,
    /// The prepared revision: its file config (fleet merged with the local file), and the
    /// tables built for it with the version number they took, committed as they are at
    /// the activation when no version number was taken since.
    pub pending: Option<(u64, Arc<config::Config>)>,
    pub built: Option<(u64, Box<Prepared>)>,
    pub refused: Option<(u64, Vec<(String, String)>)>,
    /// The fleet's text of the prepared revision, and of the running one (what a reload
    /// merges with the file, and what is kept on disk).
    pub prepared_text: Option<(u64, String)>,
    pub running_doc: Option<(u64, String)>,
    /// Where the last good revision is kept; whether the running one was read from there
    /// and etcd has not confirmed it yet; failed writes and reads of it.
    pub state_file: PathBuf,
    pub from_disk: bool,
    pub last_good_errors: u64,
    /// The etcd history the member follows (`fleet::history`), and why it refuses the one
    /// etcd shows now, while it does.
    pub history: Option<::fleet::history::History>,
    pub off_history: Option<String>,
    /// The member's actions not carried out yet, in order.
    pub actions: VecDeque<Action>,
    /// An action waits for the executor (a revision's config read, a commit).
    pub waiting: bool,
}

impl Membership {
    /// Member `member` of `cfg` at `now`, running `restored` when it started on its last
    /// good revision.
    pub fn new(
        cfg: &config::Fleet,
        member: &str,
        restored: Option<&LastGood>,
        now: Instant,
    ) -> Membership {
        let mut m = Member::new(member, cfg.activation_timeout);
        if let Some(lg) = restored {
            m.restore(lg.revision);
        }
        Membership {
            name: cfg.name.clone(),
            member: m,
            view: View::default(),
            quorum: cfg.quorum.map(|q| q as usize),
            connected: false,
            last_contact: now,
            last_error: None,
            local: HashMap::new(),
            verdicts: BTreeMap::new(),
            applied_overrides: BTreeMap::new(),
            pending: None,
            built: None,
            refused: None,
            prepared_text: None,
            running_doc: restored.map(|lg| (lg.revision, lg.text.clone())),
            state_file: lastgood::path(&cfg.state_dir, &cfg.name),
            from_disk: restored.is_some(),
            last_good_errors: 0,
            history: restored.and_then(|lg| lg.history.clone()),
            off_history: None,
            actions: VecDeque::new(),
            waiting: false,
        }
    }

    /// The fleet's health verdicts as backend ids, counting this member's newest verdicts.
    pub fn fleet_health(&mut self, me: &str) -> HashMap<BackendId, bool> {
        let mine = self.local_report();
        let mut live: BTreeMap<&str, &HealthReport> = self.view.live_health();
        live.insert(me, &mine);
        self.verdicts = quorum::decide(&live, self.quorum);
        self.verdicts
            .iter()
            .filter_map(|(name, v)| Some((backend_id(name)?, v.up)))
            .collect()
    }

    /// This member's own verdicts, as the fleet keeps them.
    pub fn local_report(&self) -> HealthReport {
        HealthReport {
            backends: self
                .local
                .iter()
                .map(|(id, up)| {
                    let addr = SocketAddr::new(id.address, id.port);
                    (::fleet::doc::backend_name(&id.vip, &addr), *up)
                })
                .collect(),
        }
    }

    /// The fleet's overrides as backend ids.
    pub fn overrides(&self) -> HashMap<BackendId, Override> {
        self.view
            .overrides
            .iter()
            .filter_map(|((vip, b), doc)| {
                let a: SocketAddr = b.parse().ok()?;
                Some((BackendId::new(vip, a.ip(), a.port()), override_of(doc)))
            })
            .collect()
    }

    /// What the fleet document is made of, at `now`.
    pub fn parts(&self, now: Instant) -> Parts<'_> {
        Parts {
            name: &self.name,
            view: &self.view,
            connected: self.connected,
            stale_for: (!self.connected).then(|| now.saturating_duration_since(self.last_contact)),
            last_error: self.last_error.as_deref(),
            running: self.member.running(),
            verdicts: &self.verdicts,
            refused: self.refused.as_ref(),
            from_disk: self.from_disk,
            last_good_errors: self.last_good_errors,
        }
    }
}

/// `vip/address:port` back to a backend id.
fn backend_id(name: &str) -> Option<BackendId> {
    let (vip, addr) = name.split_once('/')?;
    let a: SocketAddr = addr.parse().ok()?;
    Some(BackendId::new(vip, a.ip(), a.port()))
}

fn override_of(doc: &OverrideDoc) -> Override {
    Override {
        state: doc.state.as_deref().and_then(|s| match s {
            "active" => Some(BackendState::Active),
            "drain" => Some(BackendState::Drain),
            "disabled" => Some(BackendState::Disabled),
            _ => None,
        }),
        weight: doc.weight,
    }
}

/// An override as the fleet keeps it.
pub fn doc_of(o: &Override) -> OverrideDoc {
    OverrideDoc {
        state: o.state.map(|s| {
            match s {
                BackendState::Active => "active",
                BackendState::Drain => "drain",
                BackendState::Disabled => "disabled",
            }
            .to_string()
        }),
        weight: o.weight,
    }
}
