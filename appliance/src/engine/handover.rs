//! A worker's side of the hand-over between two processes (`control::takeover`): the
//! connection table leaves as [`FlowRecord`]s, and a new process's worker takes them in,
//! with the kernel entries the flow cache already holds for them, before it handles a
//! frame.

use crate::lb::FlowKey;
use crate::lb::conntrack::{Flow, FlowRecord};

use super::LbHandler;

/// What a worker took in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// Records that became flows of its table.
    pub flows: usize,
    /// Records refused (no VIP serves them now, expired, or no room): those flows are lost.
    pub refused: usize,
    /// Of the flows taken, those whose flow-cache entries the kernel still held.
    pub cached: usize,
}

impl Imported {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: Imported) {
        self.flows += other.flows;
        self.refused += other.refused;
        self.cached += other.cached;
    }
}

/// The map key of a flow's return direction in the flow cache (the frame's own 5-tuple:
/// backend → client for NAT, backend → SNAT address for FullNAT).
fn return_key(f: &Flow) -> Option<FlowKey> {
    let rk = f.rev_key()?;
    Some(FlowKey {
        src: rk.backend,
        dst: rk.local,
        sport: rk.backend_port,
        dport: rk.local_port,
        proto: rk.proto,
        v6: f.key.v6,
        zone: 0,
    })
}

impl LbHandler {
    /// Takes `records` (a run before this one's flows for this worker) into the table as of
    /// `now_ns`, bound to the tables this worker runs.
    pub fn import_flows(&mut self, records: &[FlowRecord], now_ns: u64) -> Imported {
        let mut out = Imported::default();
        for r in records {
            match self.ct.import(r, &self.tables, now_ns) {
                Ok(id) => {
                    out.flows += 1;
                    let f = *self.ct.flow(id);
                    if let Some(fc) = &mut self.flow_cache {
                        let cache_key = FlowKey { zone: 0, ..f.key };
                        if fc.adopt(&f.key, [Some(cache_key), return_key(&f)]) > 0 {
                            out.cached += 1;
                        }
                    }
                }
                Err(_) => out.refused += 1,
            }
        }
        out
    }
}

impl LbHandler {
    /// The flows of this worker's table at `now_ns` (see
    /// [`crate::datapath::FrameHandler::export_flows`]).
    pub(super) fn export(&mut self, now_ns: u64) -> Vec<FlowRecord> {
        self.ct.export(now_ns).collect()
    }
}
