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
//! API ([`api`]) reads [`model::Shared`] and sends writes to the loop as
//! [`change::Command`]s, answered with [`change::Applied`] or [`change::ChangeError`].

pub mod announce;
pub mod api;
mod batch;
pub mod cache;
pub mod change;
pub mod cores;
pub mod counters;
mod decide;
mod effect;
pub mod events;
pub mod fleet;
mod flood;
mod input;
mod io;
pub mod kept;
pub mod metrics;
pub mod model;
mod neighbours;
mod notify;
pub mod outbound;
mod pending;
pub mod prepare;
mod run;
pub mod serve;
pub mod slowstart;
mod state;
mod view;

pub use run::{RunError, run};
