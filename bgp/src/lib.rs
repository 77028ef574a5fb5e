//! Sluice's embedded BGP speaker: announces VIPs as host routes to upstream routers.
//!
//! Layers, from pure to I/O: [`codec`] (wire format), [`fsm`] (RFC 4271 state machine as a
//! pure transition function), then `network` (every socket) and `tasks` (every tokio task),
//! and [`Speaker`], the announcer API the appliance calls, whose tasks run on a thread of
//! their own (`runtime`) so that no embedder can make them late. [`bfd`] holds the BFD codec,
//! session state machine (RFC 5880) and UDP transport (RFC 5881); a peer with
//! [`PeerConfig::bfd`] set loses its BGP session as soon as BFD goes down:
//!
//! ```no_run
//! # async fn demo() -> Result<(), bgp::SpeakerError> {
//! use bgp::{PeerConfig, RouteAttrs, Speaker, SpeakerConfig};
//! let mut cfg = SpeakerConfig::new(65001, "192.0.2.1".parse().unwrap());
//! cfg.peers.push(PeerConfig::new("192.0.2.254".parse().unwrap(), 65000));
//! let speaker = Speaker::start(cfg).await?;
//! speaker.announce("198.51.100.10/32".parse().unwrap(), RouteAttrs::default())?;
//! for p in speaker.peers() {
//!     println!("{} {} {}", p.address, p.state, p.prefixes_announced);
//! }
//! speaker.graceful_shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod bfd;
pub mod codec;
pub mod fsm;
mod network;
mod runtime;
mod speaker;
mod tasks;

pub use fsm::State;
pub use ipnet::IpNet;
pub use runtime::THREAD_NAME;
pub use speaker::{
    BfdConfig, BfdDiscards, BfdStatus, ExportAttrs, Md5Key, PeerConfig, PeerStatus, RouteAttrs,
    SocketOptions, Speaker, SpeakerConfig, SpeakerConfigError, SpeakerError, TRACKED_PREFIXES,
    validate,
};
