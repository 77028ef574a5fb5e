//! The control plane of `sluice run`: it computes, the datapath executes.
//!
//! ```text
//! signals, API writes, health transitions,     run.rs: one Input at a time
//! routes/neighbours, etcd, the tick, deadlines ----------------------------+
//!                                                                          v
//!  io.rs (executor): Now = clocks + prober status + host addresses -> decide::handle
//!     ^                                                                    |
//!     | Inputs the decision must see           (pure: State, Input, Now -> Vec<Effect>;
//!     | (config read, staged commit,            prepare builds the next version)
//!     |  etcd write)                                                       |
//!     +--- Effects: stage steering maps + speaker, publish (one swap) -> workers,
//!          flow-cache eviction, prober targets, BGP announcements, the readers' model,
//!          events, counters, replies to the API, fleet requests
//! ```
//! Every change (a reload, an operator's API call, a health batch, a slow-start step, a
//! neighbour that resolved, a fleet revision) is decided by [`decide`]: the next table
//! version is built by [`prepare::prepare`] from the config, the overrides, the health
//! verdicts and the next hops, touching nothing that runs; one that cannot be built changes
//! nothing and returns why. Otherwise it is committed all or nothing: what can fail (the
//! steering maps, a new speaker) is staged by the executor first, and only then does the
//! state take the version and the workers get the tables in one swap (they report the
//! version they run, so the API knows when a change is everywhere). The local API ([`api`])
//! reads the readers' model ([`model::Shared`], [`counters`]) and sends writes to the loop as
//! [`change::Command`]s, answered with [`change::Applied`] or [`change::ChangeError`].
//! [`change`] is the vocabulary everyone shares; it imports nothing of the control plane.

pub mod announce;
pub mod api;
mod batch;
pub mod cache;
pub mod capture;
mod capture_api;
pub mod change;
pub mod cookie_secret;
pub mod cores;
pub mod counters;
mod decide;
mod effect;
pub mod events;
pub mod fleet;
mod flood;
pub mod gate;
mod input;
mod io;
mod io_handover;
pub mod kept;
mod leftovers;
pub mod metrics;
pub mod model;
mod neighbours;
mod notify;
pub mod outbound;
mod pending;
pub mod policy;
pub mod prepare;
mod probes;
mod run;
mod secret;
pub mod serve;
pub mod slowstart;
mod state;
pub mod takeover;
mod takeover_run;
mod view;

pub use run::{RunError, run};

#[cfg(test)]
#[path = "imports_tests.rs"]
mod imports_tests;
