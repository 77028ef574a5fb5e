//! Sluice: a layer-4 load-balancer appliance.
//!
//! The control plane computes tables; the data plane executes them (see DESIGN.md).
//! `config` turns a TOML file into a validated model; `wire` and `lb` are the pure
//! packet core; `engine` runs it on the datapath's worker threads over the tables `control`
//! publishes; `datapath` and `control` are the I/O around it. The kernel interfaces that
//! need `unsafe` live in the `sys` crate, so this one forbids it.
#![forbid(unsafe_code)]

pub mod config;
pub mod control;
pub mod ctl;
pub mod datapath;
pub mod engine;
pub mod fleetctl;
pub mod image;
pub mod import;
pub mod lb;
pub mod trace;
