//! The engine: the per-packet glue between the datapath and `lb`, on worker threads.
//!
//! ```text
//! datapath worker --FrameHandler::handle--> LbHandler --lb::process(&Tables)--> Verdict
//!                                              ^  \--decisions--> XDP flow cache
//! control plane --Published::publish(Tables)---+  \--CounterSnapshot--> control (API, metrics)
//! ```
//! The datapath knows only the [`FrameHandler`](crate::datapath::FrameHandler) trait and
//! `lb::Verdict`; the control plane only publishes tables here and reads the counters back.

mod counters;
mod handler;
mod handover;
mod published;
pub mod rebuild;
#[cfg(test)]
mod rebuild_tests;

pub use counters::{BackendTotals, CounterSnapshot, VipTotals};
pub use handler::{LbHandler, PUBLISH_EVERY};
pub use handover::Imported;
pub use published::{Published, draw_cookie_key};
