//! The appliance's local API as its clients see it: the JSON documents ([`model`]) and a
//! client ([`client`]) for `sluice ctl` and the console.

pub mod client;
pub mod model;

pub use client::{Client, ClientError, Endpoint};
pub use model::*;
