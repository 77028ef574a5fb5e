//! A commit under way, and what each kind of change does once its version runs or is
//! refused. A commit whose fallible half (steering maps, a new speaker) must run first is
//! kept in the state while the executor runs it, and finishes with `Input::Staged`; the
//! others finish at once. Either way the change that asked for it goes on with [`Then`].

use std::net::SocketAddr;
use std::time::Instant;

use super::change::{BackendOp, Deferred, Resized, UpdateError};
use super::input::{Reload, ReplyTo};
use super::prepare::Prepared;

/// A prepared version on its way to the workers.
#[derive(Debug)]
pub struct Commit {
    pub prepared: Box<Prepared>,
    /// What made it (the event log's words).
    pub why: String,
    /// The change it belongs to.
    pub then: Then,
    /// A health batch's first transition (the sync lag counts from there).
    pub health_since: Option<Instant>,
}

/// A commit waiting for its staged half.
#[derive(Debug)]
pub struct Pending {
    pub commit: Commit,
    /// `[bgp]` changed: a speaker was (re)started.
    pub speaker: bool,
}

/// What a change does when its version runs, or is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    /// A reload answers (the log, or the API) and tells the event log.
    Reload {
        reload: Reload,
        deferred: Vec<Deferred>,
        resized: Vec<Resized>,
    },
    /// An operator's backend change answers the API.
    Backend {
        vip: String,
        op: BackendOp,
        backend: SocketAddr,
        reply: ReplyTo,
    },
    /// A slow-start level (or a drain's end): a failure tries again a second later.
    Ramp,
    /// A health batch that needed a full version.
    Health,
    /// A fleet member's health batch.
    FleetHealth,
    /// The fleet's operator overrides.
    FleetOverrides,
    /// The fleet's revision `revision`, as table version `version`.
    FleetActivate { revision: u64, version: u64 },
}

/// A change whose commit finished.
#[derive(Debug)]
pub struct Done {
    pub then: Then,
    pub why: String,
    /// The version running now, or why the running one stays.
    pub result: Result<u64, UpdateError>,
}
