//! The load-balancing core: pure logic over bytes and tables, no I/O.
//!
//! Workers call [`process`] once per frame with the current [`Tables`], their own
//! [`ConnTable`] and [`WorkerState`], and a `now` in nanoseconds. Everything that decides
//! where a flow goes (hashing, Maglev, the LVS schedulers, the connection table) lives in
//! submodules that can be tested and benchmarked without a network.

pub mod acl;
pub mod backend;
pub mod conntrack;
pub mod egress;
pub mod exec;
pub mod fallback;
mod fingerprint;
pub mod frame;
pub mod hash;
mod health_version;
#[cfg(test)]
mod incremental_tests;
pub mod limits;
pub mod maglev;
#[cfg(test)]
mod maglev_sizes_tests;
pub mod outbound;
pub mod persist;
pub mod process;
pub mod quic;
mod rings;
pub mod sched;
mod snat_pool;
pub mod standby;
pub mod steering;
pub mod tables;
mod tenant;
#[cfg(test)]
mod tenant_tests;

pub use backend::BackendId;
pub use conntrack::{ConnTable, Flow, FlowState, RevKey};
pub use egress::{Egress, Miss, MissQueue, NetState};
pub use exec::{Executor, Serial};
pub use frame::{Frame, FrameError};
pub use hash::FlowKey;
pub use maglev::Ring;
pub use process::{DropReason, HEADROOM, Verdict, WorkerState, process};
pub use tables::{NextHop, TableError, Tables, TunnelSource};
