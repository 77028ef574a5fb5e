//! Sluice: a layer-4 load-balancer appliance.
//!
//! The control plane computes tables; the data plane executes them (see
//! docs/ARCHITECTURE.md). The crates `config` (a TOML file into a validated model) and `lb`
//! (with `wire`, the pure packet core) are re-exported here under their own names; `engine` runs it on the datapath's worker threads over the tables `control`
//! publishes; `datapath` and `control` are the I/O around it. The kernel interfaces that
//! need `unsafe` live in the `sys` crate, so this one forbids it.
#![forbid(unsafe_code)]

pub use config;
pub use lb;

pub mod control;
pub mod ctl;
pub mod datapath;
pub mod engine;
pub mod fleetctl;
pub mod image;
pub mod import;
pub mod quiclb;
pub mod sync;
pub mod trace;
