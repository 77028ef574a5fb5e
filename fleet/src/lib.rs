//! A fleet of Sluice appliances driven by one etcd v3 cluster, so that every appliance behind
//! the same ECMP routers builds the same Maglev tables. etcd holds the fleet's configuration
//! (one TOML key, whose revision is the version everywhere), each member's readiness and
//! probe results under the member's lease, the coordinator key that activates a version, and
//! the operators' backend overrides.
//!
//! The decisions are pure functions over a [`View`] of those keys: [`member::Member`] turns
//! views into actions (prepare, report, write the activation, activate), [`quorum`] turns
//! the members' probe results into one fleet verdict per backend. [`client`] is the thin
//! layer that keeps a session with etcd (lease, keep-alive, watch, writes) and hands views
//! to the appliance's control loop; nothing else here touches a socket or reads the clock.

#![forbid(unsafe_code)]

pub mod activation;
pub mod claim;
pub mod client;
pub mod doc;
pub mod history;
pub mod keys;
pub mod member;
pub mod quorum;
pub mod view;

pub use doc::{Activation, Epoch, HealthReport, Holder, MemberReport, OverrideDoc, Readiness};
pub use keys::Keys;
pub use view::View;
