//! The appliance's local API as every party sees it: the JSON documents ([`model`]) the
//! appliance serves, the [`Command`]s that change it, a [`Client`] for `sluice ctl` and the
//! console, and one text formatting ([`fmt`]) of the numbers, durations and addresses in
//! those documents, so the command line and the console spell them alike.
//!
//! Nothing here knows the appliance's tables or the console's screen: the appliance
//! depends on this crate to serve the documents, the clients to read them.
#![forbid(unsafe_code)]

pub mod client;
pub mod command;
pub mod fleet;
pub mod fmt;
pub mod model;
pub mod page;
pub mod tls;

pub use client::{Client, ClientError, Endpoint};
pub use command::Command;
pub use fleet::{Disagreement, FleetMember, FleetStatus, Refusal};
pub use model::*;
pub use page::{Page, PageError};
pub use tls::{Tls, Trust};
