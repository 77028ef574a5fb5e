//! The model of a VIP's health and announcement policy: how several checks combine, the
//! quorum and what serves without it, and how the VIP and every route to a peer are
//! announced (validated by `validate/policy.rs`).

use std::net::IpAddr;

use crate::model::Community;

/// `health_combine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Combine {
    /// Up while every check passes.
    #[default]
    All,
    /// Up while any check passes.
    Any,
}

impl Combine {
    pub fn name(self) -> &'static str {
        match self {
            Combine::All => "all",
            Combine::Any => "any",
        }
    }
}

/// `quorum`, `quorum_hysteresis` and `on_quorum_lost`: keepalived's quorum. The VIP has its
/// quorum while the primary backends that may take new flows weigh `quorum` or more in all
/// (with `quorum_hysteresis`: it is gained at `quorum + hysteresis` and lost below `quorum -
/// hysteresis`). Without it, `on_quorum_lost` says what serves new flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fallback {
    pub quorum: u32,
    pub hysteresis: u32,
    pub on_lost: QuorumLost,
}

impl Default for Fallback {
    fn default() -> Self {
        Fallback {
            quorum: 1,
            hysteresis: 0,
            on_lost: QuorumLost::Serve,
        }
    }
}

/// `on_quorum_lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuorumLost {
    /// The primaries still up keep serving (keepalived without a sorry server).
    Serve,
    /// The `sorry` backends take new flows instead of the primaries (keepalived's
    /// `sorry_server`): the default when the VIP has some.
    Sorry,
    /// The VIP is withdrawn from BGP; what still arrives is served by what is up.
    Withdraw,
}

impl QuorumLost {
    pub fn name(self) -> &'static str {
        match self {
            QuorumLost::Serve => "serve",
            QuorumLost::Sorry => "sorry",
            QuorumLost::Withdraw => "withdraw",
        }
    }
}

/// A VIP's announcement policy (`med`, `as_path_prepend`, `local_pref`, `announce_to`,
/// `role`), on top of its `communities`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Announce {
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// Extra copies of the appliance's AS on eBGP sessions.
    pub as_path_prepend: u8,
    /// LOCAL_PREF on iBGP sessions.
    pub local_pref: Option<u32>,
    /// The peers (by address) the VIP is announced to; empty: every peer.
    pub announce_to: Vec<IpAddr>,
    /// Active, or standby: announced with the worse path of `[bgp] standby`.
    pub role: Role,
}

/// `role` of a VIP on this appliance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Role {
    #[default]
    Active,
    /// Announced with a worse path (`[bgp] standby`): routers use it only when no active
    /// appliance announces the VIP.
    Standby,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }
}

/// `[bgp] standby`: what makes a standby VIP's path worse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standby {
    /// Copies of the appliance's AS prepended on eBGP sessions.
    pub as_path_prepend: u8,
    /// MED at least this.
    pub med: u32,
    /// LOCAL_PREF at most this on iBGP sessions.
    pub local_pref: u32,
    /// Communities added (e.g. one the routers map to a low local preference).
    pub communities: Vec<Community>,
}

impl Default for Standby {
    fn default() -> Self {
        Standby {
            as_path_prepend: 3,
            med: 1000,
            local_pref: 50,
            communities: Vec::new(),
        }
    }
}

/// `[[bgp.peer]]` `med`, `as_path_prepend`, `local_pref` and `communities`: attributes of
/// every route sent to this peer (a VIP's own MED and local preference win).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PeerExport {
    pub med: Option<u32>,
    pub as_path_prepend: u8,
    pub local_pref: Option<u32>,
    pub communities: Vec<Community>,
}
