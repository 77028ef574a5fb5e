//! DR (direct routing): the frame goes to the backend unchanged but for its MACs.
//!
//! The backend holds the VIP on a loopback and answers the client itself, so the appliance
//! sees one direction only and leaves the IP header (TTL included) alone: a bump in the
//! wire, like Katran. Tunnel mode is the same idea across a routed network
//! ([`super::tunnel`]); [`direct_to_backend`] picks between the two.

use super::headers::{Ip, set_macs};
use super::{Verdict, WorkerState, tunnel};
use crate::frame::Frame;
use crate::tables::{BackendEntry, NextHop, Tables};
use config::Mode;

/// DR and tunnel: send the frame to backend `b`, re-addressed or encapsulated.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn direct_to_backend(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    mode: Mode,
    n: &NextHop,
    b: &BackendEntry,
    hash: u32,
) -> Verdict {
    match mode {
        Mode::Tunnel(encap) => tunnel::to_backend(frame, tables, worker, ip, encap, n, b, hash),
        _ => to_backend(frame, worker, n),
    }
}

/// DR: the next hop's MACs, nothing else.
#[inline(always)]
fn to_backend(frame: &mut Frame<'_>, worker: &mut WorkerState, n: &NextHop) -> Verdict {
    set_macs(frame.data_mut(), n);
    worker.tx(n.ifindex)
}
