//! What the control loop decides on: every event `run.rs` receives (a signal, an API write,
//! health transitions, routes and neighbours, the tick, the fleet's etcd session) and every
//! answer the executor (`io.rs`) brings back from an effect whose outcome the decision must
//! see (a config file read, the fallible half of a commit, an etcd write), as one
//! [`Input`]; with it, [`Now`]: the clocks and what the executor read of the world at that
//! moment. The decision (`decide`) sees nothing else.
//!
//! New sources are new variants here, each with one arm in `decide::handle`: the takeover
//! of a running process's connections, connection-sync records from a peer, the datapath
//! watch (the XDP program detached).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use ::fleet::client::Update;

use super::change::{BackendOp, ChangeError, CommitError, Override, Request};
use super::kept::{Kept, KeptError};
use super::neighbours::NetEvent;
use crate::config::{Config, LoadError};
use crate::datapath::{DatapathStats, WatchReport};
use crate::lb::BackendId;

/// The moment an input is handled: its clocks, and what the executor read then.
#[derive(Debug, Clone)]
pub struct Now {
    pub at: Instant,
    /// `at` on the datapath's clock (CLOCK_MONOTONIC, ns): outbound drains run on it.
    pub ns: u64,
    /// Wall-clock time, ms since the Unix epoch: fleet activations compare it across
    /// members.
    pub wall_ms: u64,
    /// The prober's status of every probe (empty for inputs that decide nothing on it,
    /// see [`Input::reads_world`]).
    pub probes: Vec<health::Status>,
    /// This host's addresses: replies to its own traffic (health probes) are the kernel's.
    pub host_addresses: Vec<IpAddr>,
}

impl Now {
    /// `at` with nothing read: tests and inputs that need no readings fill in the rest.
    pub fn at(at: Instant) -> Now {
        Now {
            at,
            ns: 0,
            wall_ms: 0,
            probes: Vec::new(),
            host_addresses: Vec::new(),
        }
    }
}

/// Where an API write's answer goes: the executor keeps the reply channel under this
/// number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyTo(pub u64);

/// Who asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// SIGHUP: the answer goes to the log.
    Signal,
    /// `POST /v1/reload`.
    Api(ReplyTo),
}

impl Reload {
    /// How the event log and the log name it.
    pub fn how(self) -> &'static str {
        match self {
            Reload::Signal => "SIGHUP reload",
            Reload::Api(_) => "API reload",
        }
    }
}

/// An operator's change to a backend on its way: in a fleet it is written to etcd first
/// and comes back with [`Input::OverrideWritten`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendChange {
    pub vip: String,
    pub op: BackendOp,
    pub id: BackendId,
    /// Every override, this change's included.
    pub overrides: HashMap<BackendId, Override>,
    pub reply: ReplyTo,
}

/// What the tick reads besides [`Now`].
#[derive(Debug, Clone)]
pub struct Tick {
    /// The datapath's counters, or why they could not be read.
    pub datapath: Result<DatapathStats, String>,
    /// The BGP peers (none without a speaker).
    pub peers: Vec<bgp::PeerStatus>,
    /// Frames the workers dropped so far, every reason.
    pub drops: u64,
    /// Probes not run so far for a local shortage (descriptors, buffers, ports).
    pub probes_not_run: u64,
    /// New flows the workers' connection tables refused so far, full of established flows.
    pub table_full: u64,
}

/// How the fallible half of a commit went (see `effect::Stage`).
#[derive(Debug)]
pub struct Staged {
    pub result: Result<(), Vec<CommitError>>,
    /// The steering maps hold the new version's keys (else the running ones, as far as
    /// the executor could put them back).
    pub steered: bool,
    /// A speaker runs now.
    pub speaker: bool,
}

/// One thing for the control loop to decide on.
#[derive(Debug)]
pub enum Input {
    /// The datapath forwards and the API answers with the first version.
    Started {
        /// The speaker started (`[bgp]` configured and its sockets bound).
        speaker: bool,
        datapath: Option<DatapathStats>,
        /// Why the fleet's last good revision kept on disk could not be used.
        fleet_problem: Option<String>,
    },
    /// SIGHUP: reload the config file.
    Hangup,
    /// An API write.
    Api { request: Request, reply: ReplyTo },
    /// The config file, read for a reload.
    Loaded {
        reload: Reload,
        file: Result<Config, LoadError>,
    },
    /// A fleet member's backend change was written to etcd for every member, or not.
    OverrideWritten {
        change: BackendChange,
        result: Result<(), ChangeError>,
    },
    /// The prober's transitions, as many as were queued.
    Transitions(Vec<health::Transition>),
    /// The health batch is due (`State::due`).
    HealthDue,
    /// A slow-start level (or the end of an outbound drain) is due.
    RampDue,
    /// Routes or neighbours changed, as many events as were queued.
    Net(Vec<NetEvent>),
    /// Once a second.
    Tick(Box<Tick>),
    /// The fleet's etcd session: a view, an outage, an activation's outcome.
    Fleet(Update),
    /// A fleet revision merged with the local file, read for its prepare.
    RevisionLoaded {
        revision: u64,
        text: String,
        file: Result<Config, LoadError>,
    },
    /// The fallible half of the commit under way ran.
    Staged(Staged),
    /// The operator overrides file was written (or not).
    OverridesSaved {
        kept: Kept,
        result: Result<(), KeptError>,
    },
    /// The fleet's running revision could not be kept on disk.
    LastGoodNotSaved(String),
    /// The datapath watch saw something change (or an operator's reclaim ran): what it did
    /// and every interface's state.
    Datapath {
        report: WatchReport,
        /// The datapath's counters and states after it, for the readers' view.
        stats: Option<DatapathStats>,
    },
    /// SIGTERM or SIGINT.
    Terminate(&'static str),
    /// Connection sync has every peer's flows (or stopped waiting for them): the VIPs may
    /// be announced.
    SyncCaughtUp,
}

impl Input {
    /// Whether handling it may need the prober's status or the host's addresses (the
    /// executor reads them only then: transitions and routes come in storms).
    pub fn reads_world(&self) -> bool {
        !matches!(
            self,
            Input::Transitions(_)
                | Input::Net(_)
                | Input::OverridesSaved { .. }
                | Input::LastGoodNotSaved(_)
        )
    }
}
