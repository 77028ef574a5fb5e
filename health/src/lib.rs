//! Sluice's health prober: checks backends with rise/fall hysteresis.
//!
//! Operators trust a balancer whose health checks neither flap nor stick, so the logic
//! that decides (hysteresis, scheduling, deduplication, reloads) is pure and tested
//! without sockets ([`hysteresis`], [`scheduler`]), and the I/O is confined to a few
//! modules: [`probe`] opens the sockets of checks that exchange data (with [`agent`] for
//! HAProxy's agent check and `grpc` for gRPC health checking), `connect` runs plain TCP
//! connect checks on pooled sockets, [`tasks`] owns the one tokio task.
//!
//! Typical use from the appliance: build [`Target`]s from the config model, start a
//! [`Prober`], feed it with [`Prober::set_targets`] on every reload, consume
//! [`Transition`]s from the returned channel to change pool membership, and read
//! [`Prober::status`] for the console. DR and tunnel targets also carry the VIP their
//! backend must answer for ([`vip`]); the appliance supplies the prober that sends those
//! probes through its datapath ([`Prober::spawn_with`]).
#![forbid(unsafe_code)]

pub mod agent;
pub mod check;
mod connect;
mod digest;
mod grpc;
pub mod hysteresis;
pub mod outcome;
pub mod probe;
pub mod scheduler;
pub mod tasks;
pub mod vip;

pub use agent::{AgentAdmin, AgentState};
pub use check::{
    CheckKind, GrpcCheck, HealthCheck, HttpCheck, HttpMethod, InitialHealth, ProbeKey, Target,
};
pub use hysteresis::{Health, Hysteresis, Reason};
pub use outcome::{Failure, Outcome, Pass};
pub use probe::ProbeContext;
pub use scheduler::{
    Counters, Dispatch, ProbeId, Reload, Scheduler, Status, Transition, sort_status,
};
pub use tasks::{Prober, probe_once};
pub use vip::{ViaVip, VipFailure, VipFuture, VipProbe, VipProber, VipProtocol};
