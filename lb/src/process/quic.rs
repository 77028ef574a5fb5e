//! The connection-ID stage of a `quic_lb` VIP's datagrams (see `lb::quic`), ahead of the
//! flow lookup: a CID that decodes to a backend that keeps flows (active or draining) takes
//! the datagram there, whatever the 5-tuple's entry said, and the 5-tuple's entry is made
//! (or re-made) for that backend so replies and the flow cache follow; any other datagram
//! (an Initial with the client's own DCID, another config's CID, a removed or failed
//! backend's ID, something that is not QUIC) takes the VIP's normal way, where the
//! connection table remembers its choice. Each outcome is counted per VIP.

use super::flow::{FlowHit, Packet, flow_for, found, new_flow};
use super::synproxy::Ask;
use super::{DropReason, WorkerState};
use crate::conntrack::{ConnTable, FlowState, Track};
use crate::quic::{Counter, Route, VipQuic};
use crate::tables::Tables;

/// The flow of a datagram of VIP `vip` (with `q`, its QUIC-LB routing) whose UDP payload
/// is `payload`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(super) fn flow_for_cid(
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    vip: u32,
    q: &VipQuic,
    p: Packet<'_>,
    payload: &[u8],
    now: u64,
) -> Result<FlowHit, DropReason> {
    let route = q.route(payload);
    let counts = &mut worker.quic[vip as usize];
    match route {
        Route::Backend { slot, .. } if tables.backends[slot as usize].keeps_flows() => {
            counts[Counter::Routed as usize] += 1;
            if let Some(id) = ct.lookup(p.key, now) {
                if ct.flow(id).backend == slot {
                    return found(tables, ct, worker, vip, p, id, now);
                }
                ct.remove(id);
            }
            let st = (FlowState::UdpNew, Track::default());
            return new_flow(tables, ct, worker, vip, p.key, st, now, Some(slot));
        }
        Route::UnknownConfig => counts[Counter::UnknownConfig as usize] += 1,
        Route::Undecodable => counts[Counter::DecodeFailure as usize] += 1,
        Route::Backend { .. } | Route::UnknownServer(_) => {}
    }
    counts[Counter::Fallback as usize] += 1;
    // UDP: the SYN proxy takes nothing, so there is always a flow.
    flow_for(tables, ct, worker, vip, p, Ask::NONE, now)
        .and_then(|hit| hit.ok_or(DropReason::NoFlow))
}
