//! Sluice: a layer-4 load-balancer appliance.
//!
//! The control plane computes tables; the data plane executes them (see DESIGN.md).
//! `config` turns a TOML file into a validated model; `wire` and `lb` are the pure
//! packet core; `datapath` and `control` are the I/O around it.

pub mod bench;
pub mod config;
pub mod control;
pub mod ctl;
pub mod datapath;
pub mod lab;
pub mod lb;
pub mod sockopt;
pub mod trace;
