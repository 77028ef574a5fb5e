//! What the control loop's decisions ask of the world, as data: `decide::handle` returns
//! [`Effect`]s and the executor (`io.rs`) carries them out in order, in one place. An effect
//! whose outcome a decision must see comes back as an `Input` (a config file read, the
//! fallible half of a commit, an etcd write). Each effect prints as one line (its
//! `Display`), which the executor logs at debug level and the decision's tests compare.
//!
//! New work for the executor is a new variant here with its arm in `io.rs` (handing the
//! connection tables and XDP maps over to a process taking over, sending connection-sync
//! records to a peer, re-attaching or withdrawing on a datapath watch), and, when the
//! decision must see how it went, an `Input` back.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use ::fleet::OverrideDoc;
use ::fleet::client::Request as FleetRequest;

use super::announce::Wanted;
use super::change::{Applied, ChangeError};
use super::events::Kind;
use super::fleet::lastgood::LastGood;
use super::input::{BackendChange, Reload, ReplyTo};
use super::kept::Kept;
use super::prepare::{Steering, Targets};
use crate::config;
use crate::datapath::DatapathStats;
use crate::lb::Tables;
use crate::lb::egress::Unresolved;

/// The half of a commit that can fail, done before anything of the new version runs: the
/// XDP program's steering maps and, when `[bgp]` changed, the speaker. The executor undoes
/// what it did when a later step fails, and answers with `Input::Staged`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The new version's keys, and the running ones to put back.
    pub steering: Option<(Steering, Steering)>,
    /// `[bgp]` changed: the speaker for `next` replaces the running one, which starts
    /// again (as `running`) when the new one does not.
    pub speaker: Option<SpeakerChange>,
}

/// A changed `[bgp]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeakerChange {
    pub next: Option<config::Bgp>,
    pub running: Option<config::Bgp>,
}

/// A counter of [`super::counters::Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    HealthTransition,
    HealthCommit,
    ReloadRejected,
    OverridesFileError,
    /// Not an increment: the prober's total, copied.
    ProbesNotRun(u64),
    /// The datapath watch did or saw this (`WatchEvent::name`).
    DatapathWatch(&'static str),
}

/// One thing for the executor to do.
#[derive(Debug)]
pub enum Effect {
    /// Read the config file (a fleet member's merged with the fleet revision it runs);
    /// answered with `Input::Loaded`.
    LoadConfig {
        reload: Reload,
        fleet: Option<(u64, String)>,
    },
    /// The fallible half of a commit; answered with `Input::Staged`.
    Stage(Stage),
    /// Withdraw every announced address but `keep` (VIPs a commit removes, before their
    /// tables go away).
    Withdraw {
        keep: BTreeSet<IpAddr>,
        why: &'static str,
    },
    /// Give the prober these targets (probes that stay keep their state).
    SetProbes(Arc<Targets>),
    /// Write `[flood]` into the XDP program.
    Flood {
        flood: config::Flood,
        why: String,
    },
    /// Tell the workers flood mode switched on or off (the SYN proxy answers `syn_proxy =
    /// "flood"` VIPs' SYNs while it is on).
    FloodMode(bool),
    /// Swap the tables in for the workers, evict the flow-cache entries they would not
    /// repeat, restart the sync-lag clock (`health_since`: a health batch's first
    /// transition).
    Publish {
        tables: Arc<Tables>,
        health_since: Option<Instant>,
    },
    /// Write the tables' DR rings and next hops for the XDP program's stateless answer.
    Stateless {
        tables: Arc<Tables>,
        why: String,
    },
    /// Announce and withdraw so the speaker announces `wanted`; `initial_done`: every VIP
    /// has settled once (End-of-RIB).
    Announce {
        wanted: BTreeMap<IpAddr, Wanted>,
        initial_done: bool,
    },
    /// Republish the readers' view of the state (with fresh datapath counters, if read).
    View {
        datapath: Option<Box<DatapathStats>>,
    },
    /// An event for the API's ring (and the log).
    Event(Kind, String),
    Count(Counter),
    /// Answer an API write; `after_walk`: once the flow-cache walk asked for so far is done.
    Reply {
        to: ReplyTo,
        result: Result<Applied, ChangeError>,
        after_walk: bool,
    },
    /// Make the kernel resolve these next hops.
    Resolve(Vec<Unresolved>),
    /// Write the operator overrides file; answered with `Input::OverridesSaved`.
    SaveOverrides {
        dir: PathBuf,
        kept: Kept,
    },
    /// One line of totals to the log.
    LogStats,
    /// A report, health or activation for the fleet's etcd session.
    FleetSend(FleetRequest),
    /// Write an operator's backend change to etcd; answered with `Input::OverrideWritten`.
    WriteOverride {
        change: BackendChange,
        doc: OverrideDoc,
    },
    /// Read fleet revision `revision` merged with the local file; answered with
    /// `Input::RevisionLoaded`.
    LoadRevision {
        revision: u64,
        text: String,
    },
    /// Keep the running fleet revision on disk.
    SaveLastGood {
        path: PathBuf,
        last_good: LastGood,
    },
    /// Republish the fleet document.
    FleetStatus(Box<api::FleetStatus>),
    /// The process stops: systemd hears so, the API listeners close.
    Stopping,
    /// Leave the fleet (the member's lease is revoked).
    LeaveFleet,
    /// Stop the speaker: close the sessions without withdrawing (graceful restart), or
    /// graceful shutdown then withdraw.
    StopSpeaker {
        graceful_restart: bool,
    },
    /// Take the datapath interfaces another program holds back (the operator's reclaim);
    /// answered on `ReplyTo`, and with `Input::Datapath`.
    Reclaim(ReplyTo),
    /// Detach the datapath; the loop ends.
    Stop,
}

impl std::fmt::Display for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Counter::HealthTransition => f.write_str("health transitions"),
            Counter::HealthCommit => f.write_str("health commits"),
            Counter::ReloadRejected => f.write_str("reloads rejected"),
            Counter::OverridesFileError => f.write_str("overrides file errors"),
            Counter::ProbesNotRun(n) => write!(f, "probes not run = {n}"),
            Counter::DatapathWatch(what) => write!(f, "datapath watch {what}"),
        }
    }
}

/// `[a, b]`.
fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let all: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("[{}]", all.join(", "))
}

impl std::fmt::Display for Effect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Effect::LoadConfig { fleet, .. } => match fleet {
                Some((r, _)) => write!(f, "load config (fleet revision {r})"),
                None => f.write_str("load config"),
            },
            Effect::Stage(s) => {
                let parts = [
                    s.steering.as_ref().map(|_| "steering"),
                    s.speaker.as_ref().map(|_| "speaker"),
                ];
                write!(f, "stage {}", list(parts.into_iter().flatten()))
            }
            Effect::Withdraw { keep, why } => write!(f, "withdraw all but {} ({why})", list(keep)),
            Effect::SetProbes(t) => write!(f, "probes: {} targets", t.len()),
            Effect::Flood { .. } => f.write_str("flood settings"),
            Effect::FloodMode(on) => write!(f, "flood mode {}", if *on { "on" } else { "off" }),
            Effect::Publish { tables, .. } => write!(f, "publish version {}", tables.version),
            Effect::Stateless { tables, .. } => {
                write!(f, "stateless rings of version {}", tables.version)
            }
            Effect::Announce {
                wanted,
                initial_done,
            } => {
                let ips = wanted
                    .iter()
                    .map(|(ip, w)| format!("{ip}{}", if w.settled { "" } else { "?" }));
                let eor = if *initial_done { " (initial done)" } else { "" };
                write!(f, "announce {}{eor}", list(ips))
            }
            Effect::View { datapath } => match datapath {
                Some(_) => f.write_str("view with datapath counters"),
                None => f.write_str("view"),
            },
            Effect::Event(kind, m) => write!(f, "event {}: {m}", kind.name()),
            Effect::Count(c) => write!(f, "count {c}"),
            Effect::Reply { to, result, .. } => match result {
                Ok(a) => write!(f, "reply {}: {a}", to.0),
                Err(e) => write!(f, "reply {}: error: {e}", to.0),
            },
            Effect::Resolve(r) => write!(f, "resolve {} next hops", r.len()),
            Effect::SaveOverrides { kept, .. } => write!(
                f,
                "save overrides ({} backends, {} withdrawn)",
                kept.backends.len(),
                kept.withdrawn.len()
            ),
            Effect::LogStats => f.write_str("log stats"),
            Effect::Reclaim(to) => write!(f, "reclaim the datapath (reply {})", to.0),
            Effect::FleetSend(r) => f.write_str(match r {
                FleetRequest::Report(_) => "fleet: report",
                FleetRequest::Health(_) => "fleet: health report",
                FleetRequest::Activate { .. } => "fleet: write activation",
                FleetRequest::Override { .. } => "fleet: override",
                FleetRequest::Leave { .. } => "fleet: leave",
            }),
            Effect::WriteOverride { change, .. } => {
                write!(f, "fleet: write override {}", change.id.socket_addr())
            }
            Effect::LoadRevision { revision, .. } => write!(f, "fleet: load revision {revision}"),
            Effect::SaveLastGood { last_good, .. } => {
                write!(f, "fleet: keep revision {}", last_good.revision)
            }
            Effect::FleetStatus(_) => f.write_str("fleet status"),
            Effect::Stopping => f.write_str("stopping"),
            Effect::LeaveFleet => f.write_str("leave fleet"),
            Effect::StopSpeaker { graceful_restart } => match graceful_restart {
                true => f.write_str("stop speaker (graceful restart: routes kept)"),
                false => f.write_str("stop speaker (graceful shutdown, withdraw)"),
            },
            Effect::Stop => f.write_str("stop datapath"),
        }
    }
}
