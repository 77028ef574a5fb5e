//! The control plane's vocabulary for changes, shared by everyone and importing nothing of
//! the control plane: what the API asks for ([`Command`], [`Request`]), the operator's
//! layer over the file ([`Override`]), what a change comes back with ([`Applied`] as data
//! when it runs, [`ChangeError`] when it does not) and why a version was not built or put
//! in place ([`PrepareError`], [`CommitError`]). The API renders them into its documents at
//! the edge (`control/api.rs`); the sentences are their `Display`.

use std::net::{IpAddr, SocketAddr};

use tokio::sync::oneshot;

use crate::config::{self, Backend, BackendState, Config};
use crate::datapath::DatapathError;
use crate::lb::{BackendId, TableError};

/// A change the API asks the control loop for, with where its answer goes.
#[derive(Debug)]
pub struct Command {
    pub request: Request,
    pub reply: oneshot::Sender<Result<Applied, ChangeError>>,
}

/// What an operator asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A change to one backend of a VIP (`backend`: `address:port`, or the address alone).
    Backend {
        vip: String,
        backend: String,
        op: BackendOp,
    },
    /// Announce a VIP again, or withdraw it from BGP.
    Announce { vip: String, announce: bool },
    /// Read the config file again.
    Reload,
    /// Take every datapath interface another XDP program holds back from it.
    Reclaim,
}

/// What an operator does to a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendOp {
    Action(api::BackendAction),
    Weight(u32),
}

/// An operator's change to a backend, layered over the config file until the backend
/// leaves the file or the operator sets it back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Override {
    pub state: Option<BackendState>,
    pub weight: Option<u32>,
}

impl Override {
    /// The override with `op` applied.
    pub fn with(mut self, op: BackendOp) -> Override {
        use api::BackendAction as A;
        match op {
            BackendOp::Action(A::Drain) => self.state = Some(BackendState::Drain),
            BackendOp::Action(A::Undrain | A::Enable) => self.state = Some(BackendState::Active),
            BackendOp::Action(A::Disable) => self.state = Some(BackendState::Disabled),
            BackendOp::Weight(w) => self.weight = Some(w),
        }
        self
    }
}

/// Why the next table version could not be prepared; the running version stays.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The config is valid, but its tables cannot be built (the error names the VIP).
    #[error(transparent)]
    Tables(#[from] TableError),
}

/// Why a prepared version could not become the running one. Each is returned to the
/// operator; the running version (tables, steering maps, speaker) stays.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("steering maps: {0}; the XDP program keeps steering the running version's keys")]
    Steering(#[source] DatapathError),
    #[error("[bgp]: {0}")]
    SpeakerConfig(#[source] bgp::SpeakerConfigError),
    #[error("[bgp]: the new speaker did not start: {0}")]
    Speaker(#[source] bgp::SpeakerError),
    #[error(
        "[bgp]: the running speaker did not start again either ({0}): no announcements until the next successful reload"
    )]
    SpeakerRestore(#[source] bgp::SpeakerError),
}

/// Every error of a version that was not committed.
#[derive(Debug)]
pub struct CommitFailed(pub Vec<CommitError>);

impl std::fmt::Display for CommitFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "not applied, running version kept: {}", all.join("; "))
    }
}

impl std::error::Error for CommitFailed {}

/// Why a change kept the running version: it was not built, or not put in place.
#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Commit(#[from] CommitFailed),
}

impl UpdateError {
    /// One line per error.
    pub fn errors(&self) -> Vec<String> {
        match self {
            UpdateError::Prepare(e) => vec![e.to_string()],
            UpdateError::Commit(c) => c.0.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A change that is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The config file is running as `version`; `deferred` lists sections whose change waits
    /// for the next start.
    Reloaded {
        version: u64,
        deferred: Vec<Deferred>,
    },
    /// An operator's change to one backend is running as `version`.
    Backend {
        op: BackendOp,
        backend: SocketAddr,
        vip: String,
        version: u64,
    },
    /// An operator announced (or withdrew) a VIP.
    Announce { vip: String, announce: bool },
    /// The datapath took these interfaces back from these programs (interface, id, name).
    Reclaimed(Vec<(String, u32, String)>),
}

/// A config section a reload changed that only a restart applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferred {
    /// `[appliance] flow_cache`: the XDP program is loaded with or without the cache.
    FlowCache,
    /// `[api]`: the listeners keep their sockets.
    Api,
}

impl std::fmt::Display for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Deferred::FlowCache => "[appliance] flow_cache takes effect at the next start",
            Deferred::Api => "[api] changes take effect at the next start",
        })
    }
}

/// The name of a backend change in messages: `drain`, `weight 7`.
pub fn op_name(op: BackendOp) -> String {
    match op {
        BackendOp::Action(a) => a.name().to_string(),
        BackendOp::Weight(w) => format!("weight {w}"),
    }
}

/// A VIP whose Maglev ring size a reload changes (its pool crossed a step of the default
/// sizes, or a size was set anew): every slot of its ring may move, so new flows are spread
/// afresh while established ones keep their backends through the connection table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resized {
    pub vip: String,
    /// The running ring size and the new one.
    pub from: u32,
    pub to: u32,
    /// Configured backends in the new config.
    pub backends: usize,
}

impl std::fmt::Display for Resized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "vip {}: Maglev ring {} -> {} slots ({} backends): every slot may move; \
             established flows keep their backends",
            self.vip, self.from, self.to, self.backends
        )
    }
}

/// The VIPs of both configs (by name) whose ring size differs, in `next`'s order.
pub fn resized(running: &Config, next: &Config) -> Vec<Resized> {
    next.vips
        .iter()
        .filter_map(|v| {
            let old = running.vips.iter().find(|o| o.name == v.name)?;
            (old.maglev_table_size != v.maglev_table_size).then(|| Resized {
                vip: v.name.clone(),
                from: old.maglev_table_size,
                to: v.maglev_table_size,
                backends: v.backends.len(),
            })
        })
        .collect()
}

/// The sections of `next` that differ from `running` but only apply at the next start.
pub fn deferred(running: &Config, next: &Config) -> Vec<Deferred> {
    let mut out = Vec::new();
    if running.appliance.flow_cache != next.appliance.flow_cache {
        out.push(Deferred::FlowCache);
    }
    if running.api != next.api {
        out.push(Deferred::Api);
    }
    out
}

/// ` ([appliance] flow_cache takes effect at the next start)` for each deferred section.
pub fn deferred_note(deferred: &[Deferred]) -> String {
    deferred.iter().map(|d| format!(" ({d})")).collect()
}

impl std::fmt::Display for Applied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Applied::Reloaded { version, deferred } => write!(
                f,
                "config reloaded: version {version}{}",
                deferred_note(deferred)
            ),
            Applied::Backend {
                op,
                backend,
                vip,
                version,
            } => write!(
                f,
                "{} {backend} of VIP {vip}: version {version}",
                op_name(*op)
            ),
            Applied::Announce { vip, announce } => {
                let what = if *announce { "announce" } else { "withdraw" };
                write!(f, "{what} VIP {vip}")
            }
            Applied::Reclaimed(taken) if taken.is_empty() => {
                f.write_str("no other XDP program holds a datapath interface: nothing taken back")
            }
            Applied::Reclaimed(taken) => {
                let each: Vec<String> = taken
                    .iter()
                    .map(|(i, id, name)| format!("{i} from program {id} ({name})"))
                    .collect();
                write!(f, "datapath taken back: {}", each.join(", "))
            }
        }
    }
}

/// Why a change was not applied; the running version stays.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no VIP named {0:?}")]
    NoVip(String),
    #[error("backend {0:?} is not an address or address:port")]
    BadBackend(String),
    #[error("no backend {backend} in VIP {vip:?}")]
    NoBackend { vip: String, backend: String },
    #[error("VIP {vip:?} has several backends at {backend}: give address:port")]
    AmbiguousBackend { vip: String, backend: String },
    #[error("BGP is not running (no [bgp] section, or the speaker failed to start)")]
    NoBgp,
    /// The file does not load or validate.
    #[error("config rejected, running version kept: {} error(s)", load_errors(.0).len())]
    ConfigRejected(#[source] config::LoadError),
    /// The file validates but its tables cannot be built.
    #[error("config rejected, running version kept: {0}")]
    TablesRejected(#[source] PrepareError),
    /// The file's tables were built but could not be put in place (steering maps, BGP
    /// speaker); nothing of the new version runs.
    #[error("config rejected: {0}")]
    NotCommitted(#[source] CommitFailed),
    /// A fleet member could not write an operator's change to etcd, so no member applies it.
    #[error("cannot write the change to the fleet's etcd ({0}): nothing changed")]
    Fleet(String),
    /// The datapath could not take an interface back from another program.
    #[error("cannot take the datapath back: {0}")]
    Reclaim(#[source] DatapathError),
    /// An operator's change to a backend leaves tables that cannot be built or put in place.
    #[error("cannot apply {}: {source}", op_name(*.op))]
    NotApplied {
        op: BackendOp,
        #[source]
        source: UpdateError,
    },
}

fn load_errors(e: &config::LoadError) -> Vec<String> {
    match e.errors() {
        Some(list) => list.0.iter().map(|x| x.to_string()).collect(),
        None => vec![e.to_string()],
    }
}

impl ChangeError {
    /// The request field the error is about, if one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            ChangeError::NoVip(_) | ChangeError::NoBgp => Some("vip"),
            ChangeError::BadBackend(_)
            | ChangeError::NoBackend { .. }
            | ChangeError::AmbiguousBackend { .. } => Some("backend"),
            ChangeError::ConfigRejected(_)
            | ChangeError::TablesRejected(_)
            | ChangeError::NotCommitted(_) => Some("config"),
            ChangeError::NotApplied { .. } | ChangeError::Fleet(_) | ChangeError::Reclaim(_) => {
                None
            }
        }
    }

    /// True when the change names a VIP or backend that does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ChangeError::NoVip(_) | ChangeError::NoBackend { .. })
    }

    /// Every error behind this one, one line each.
    pub fn errors(&self) -> Vec<String> {
        match self {
            ChangeError::ConfigRejected(e) => load_errors(e),
            ChangeError::TablesRejected(e) => vec![e.to_string()],
            ChangeError::NotCommitted(c) => c.0.iter().map(ToString::to_string).collect(),
            ChangeError::NotApplied { source, .. } => source.errors(),
            _ => Vec::new(),
        }
    }

    /// What the event log says after "rejected, running version kept: ".
    pub fn summary(&self) -> String {
        match self {
            ChangeError::ConfigRejected(e) => format!("{} error(s)", load_errors(e).len()),
            ChangeError::TablesRejected(e) => e.to_string(),
            other => other.to_string(),
        }
    }
}

/// The VIP and backend an API call names; `backend` is `address:port`, or the address alone
/// when the VIP has one backend there.
pub fn find_backend(cfg: &Config, vip: &str, backend: &str) -> Result<BackendId, ChangeError> {
    let Some(v) = cfg.vip(vip) else {
        return Err(ChangeError::NoVip(vip.to_string()));
    };
    let matches: Vec<&Backend> = if let Ok(sa) = backend.parse::<SocketAddr>() {
        v.backends
            .iter()
            .filter(|b| b.address == sa.ip() && b.port == sa.port())
            .collect()
    } else if let Ok(ip) = backend.parse::<IpAddr>() {
        v.backends.iter().filter(|b| b.address == ip).collect()
    } else {
        return Err(ChangeError::BadBackend(backend.to_string()));
    };
    let named = || (vip.to_string(), backend.to_string());
    match matches.as_slice() {
        [b] => Ok(BackendId::of(v, b)),
        [] => {
            let (vip, backend) = named();
            Err(ChangeError::NoBackend { vip, backend })
        }
        _ => {
            let (vip, backend) = named();
            Err(ChangeError::AmbiguousBackend { vip, backend })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(a: &str, p: u16) -> BackendId {
        BackendId::new("web", a.parse().expect("literal"), p)
    }

    #[test]
    fn backends_are_named_by_address_and_port_or_a_unique_address() {
        let c = Config::from_toml_str(crate::control::prepare::tests::CFG)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            find_backend(&c, "web", "10.1.0.11").ok(),
            Some(key("10.1.0.11", 8080))
        );
        assert_eq!(
            find_backend(&c, "web", "10.1.0.12:8081").ok(),
            Some(key("10.1.0.12", 8081))
        );
        let field = |vip: &str, b: &str| find_backend(&c, vip, b).err().and_then(|e| e.field());
        assert_eq!(field("web", "10.1.0.12"), Some("backend"), "ambiguous");
        assert_eq!(field("web", "10.1.0.99"), Some("backend"));
        assert_eq!(field("web", "nonsense"), Some("backend"));
        assert_eq!(field("api", "10.1.0.11"), Some("vip"));
    }

    #[test]
    fn a_pool_that_grows_past_a_default_step_is_named_with_its_new_ring_size() {
        let base = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
                    [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n";
        let pool = |n: usize| {
            let mut t = base.to_string();
            for i in 0..n {
                t.push_str(&format!(
                    "[[vip.backend]]\naddress = \"10.1.0.{}\"\n",
                    i + 1
                ));
            }
            testkit::unit::parse(&t)
        };
        assert_eq!(
            resized(&pool(3), &pool(10)),
            vec![],
            "one step: same ring size"
        );
        let r = resized(&pool(10), &pool(11));
        assert_eq!(
            r.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "vip web: Maglev ring 1021 -> 4093 slots (11 backends): every slot may move; \
              established flows keep their backends"
            ]
        );
        assert_eq!(resized(&pool(11), &pool(10))[0].to, 1021);
    }

    #[test]
    fn the_messages_are_the_ones_the_api_has_always_sent() {
        let e = ChangeError::NoBackend {
            vip: "web".into(),
            backend: "10.1.0.99".into(),
        };
        assert_eq!(e.to_string(), "no backend 10.1.0.99 in VIP \"web\"");
        assert!(e.is_not_found());
        assert!(!ChangeError::NoBgp.is_not_found());
        let a = Applied::Reloaded {
            version: 4,
            deferred: vec![Deferred::FlowCache, Deferred::Api],
        };
        assert_eq!(
            a.to_string(),
            "config reloaded: version 4 ([appliance] flow_cache takes effect at the next start) \
             ([api] changes take effect at the next start)"
        );
        let b = Applied::Backend {
            op: BackendOp::Weight(7),
            backend: "10.1.0.11:8080".parse().expect("literal"),
            vip: "web".into(),
            version: 5,
        };
        assert_eq!(
            b.to_string(),
            "weight 7 10.1.0.11:8080 of VIP web: version 5"
        );
    }
}
