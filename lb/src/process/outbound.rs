//! Answers to the backends' own outbound connections (issue 23): a frame to a DR or tunnel
//! VIP's address at a port of its `outbound` range goes to the backend that owns the port
//! (`lb::outbound`), from the table alone: no connection-table entry, so any appliance of
//! an ECMP group forwards it the same, and the answers of a connection opened before a pool
//! change keep reaching their backend through the drain.

use super::headers::{Ip, L4};
use super::{DropReason, Verdict, WorkerState, dr, mss};
use crate::frame::Frame;
use crate::hash::addr_to_u128;
use crate::tables::Tables;
use config::Mode;

/// The verdict for an answer to an outbound port; `None` when the frame is not one (no
/// range on its address and protocol, or a port outside it).
#[allow(clippy::too_many_arguments)]
pub(super) fn answer(
    frame: &mut Frame<'_>,
    tables: &Tables,
    worker: &mut WorkerState,
    ip: &Ip,
    l4: &L4,
    len: u64,
    now: u64,
) -> Option<Verdict> {
    let o = tables.outbound_for(ip.dst, ip.proto)?;
    if !o.state.range().contains(l4.dport) {
        return None;
    }
    let v = &tables.vips[o.vip as usize];
    let slot = o
        .state
        .forward_at(l4.dport, now)
        .and_then(|a| tables.backend_slot(o.vip, addr_to_u128(*a), v.port));
    let Some(backend) = slot else {
        worker.stats.outbound_unowned += 1;
        return Some(worker.drop(DropReason::NoBackend));
    };
    let n = match tables.backend_egress(backend) {
        Ok(n) => n,
        Err(m) => return Some(worker.drop(m.into())),
    };
    let b = tables.backends[backend as usize];
    worker.count_forward(o.vip, backend, len);
    worker.stats.outbound_answers += 1;
    if let Mode::Tunnel(encap) = v.mode
        && let Some(verdict) = mss::fit(frame, tables, worker, ip, encap, &n, &b, o.vip, now)
    {
        return Some(verdict);
    }
    let hash = super::headers::flow_key(ip, l4).hash(v.hash);
    Some(dr::direct_to_backend(
        frame, tables, worker, ip, v.mode, &n, &b, hash,
    ))
}
