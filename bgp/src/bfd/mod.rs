//! BFD (RFC 5880 asynchronous mode) for the BGP sessions: a BGP hold timer notices a silent
//! appliance in seconds, BFD in a few hundred milliseconds, so routers drop the dead next hop
//! before clients notice.
//!
//! Like the BGP side, this is layered pure-first: [`packet`] is the control-packet codec and
//! the per-packet reception checks, [`session`] the state machine as a transition function
//! fed `now`, returning [`Action`]s. Neither reads the clock nor touches a socket; the UDP
//! transport (RFC 5881) and the BGP wiring live elsewhere.

pub mod packet;
pub mod session;

pub use packet::{BfdDecodeError, ControlPacket, Diag, State};
pub use session::{Action, Discard, ParamError, Session, SessionConfig, Timers};
