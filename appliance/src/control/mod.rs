//! The control plane of `sluice run`: it computes, the datapath executes.
//!
//! ```text
//! config file --load/validate--> Config --+
//! operator (API) -> overrides ------------+--prepare (pure)--> Prepared --commit--> Published
//! health transitions -> verdicts ---------+                      |   (one atomic swap) | workers
//! rtnetlink -> next hops -----------------+                      |                     v
//!                                                     steering maps, flow-cache eviction,
//!                                                     prober targets, BGP announcements
//! ```
//! Every change (a reload, an operator's API call, a health transition, a neighbour that
//! resolved) is first prepared: [`prepare::prepare`] builds the next table version from the
//! config, the overrides, the health verdicts and the next hops, touching nothing that runs.
//! A change that cannot be prepared changes nothing and returns why. Otherwise
//! [`commit`] applies it: the state takes what it was built from, the workers get the tables
//! in one swap and report the version they run, so the API knows when a change is
//! everywhere. The event loop ([`run`]) only hands each event to its handler. The local
//! API ([`api`]) reads [`shared::Shared`] and sends writes to the loop as
//! [`shared::Command`]s, answered with [`change::Applied`] or [`change::ChangeError`].

pub mod announce;
pub mod api;
mod batch;
pub mod cache;
pub mod change;
mod commit;
mod cores;
pub mod events;
pub mod fleet;
mod flood;
mod handlers;
pub mod kept;
pub mod metrics;
mod neighbours;
mod notify;
pub mod outbound;
pub mod policy;
pub mod prepare;
mod run;
pub mod serve;
pub mod shared;
pub mod slowstart;
mod state;
mod view;

pub use run::run;

use crate::config;
use crate::datapath::neigh::NeighError;

/// Why `sluice run` could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Config(#[from] config::LoadError),
    #[error("sluice run needs root (or CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW and CAP_SYS_ADMIN)")]
    NotRoot,
    #[error("cannot build tables: {0}")]
    Tables(#[from] prepare::PrepareError),
    #[error("datapath: {0}")]
    Datapath(#[from] crate::datapath::DatapathError),
    /// Routes and neighbours come from rtnetlink in the appliance's network namespace.
    #[error("netlink: {0} (sluice run reads routes and neighbours over rtnetlink)")]
    Netlink(#[source] NeighError),
    #[error("cannot install signal handlers: {0}")]
    Signal(#[source] std::io::Error),
    #[error("{0}")]
    Api(#[from] api::ApiStartError),
    #[error("{0}")]
    Fleet(#[from] fleet::FleetError),
    #[error("cannot start the flow cache's walker thread: {0} (out of threads or memory?)")]
    Thread(#[source] std::io::Error),
}
