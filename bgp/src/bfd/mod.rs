//! BFD (RFC 5880 asynchronous mode) for the BGP sessions: a BGP hold timer notices a silent
//! appliance in seconds, BFD in a few hundred milliseconds, so routers drop the dead next hop
//! before clients notice.
//!
//! Like the BGP side, this is layered pure-first: [`packet`] is the control-packet codec and
//! the per-packet reception checks, [`session`] the state machine as a transition function
//! fed `now`, returning [`Action`]s. Neither reads the clock nor touches a socket; the UDP
//! transport (RFC 5881) is the private `tasks` module (sockets in the crate's `network`),
//! and the BGP wiring is in the peer tasks ([`crate::PeerConfig::bfd`]).

pub mod packet;
pub mod session;
pub(crate) mod tasks;

pub use packet::{BfdDecodeError, ControlPacket, Diag, State};
pub use session::{Action, Discard, ParamError, Session, SessionConfig, Timers};
