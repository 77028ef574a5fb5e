//! The worker's side of connection sync (`crate::standby`): the flows peers synced, looked
//! up on a miss and imported into the worker's own table.

use std::sync::Arc;

use super::WorkerState;
use crate::conntrack::ConnTable;
use crate::hash::FlowKey;
use crate::tables::Tables;

impl WorkerState {
    /// Shares the appliance's standby table (connection sync) with this worker.
    pub fn set_standby(&mut self, table: Arc<crate::standby::Standby>) {
        self.standby = Some(table);
    }

    /// The flow a peer synced for the client → VIP `key`, taken into `ct` as a flow of
    /// `tables` (see [`crate::standby`]): its id, or `None` (nothing synced, or refused).
    pub(crate) fn standby_flow(
        &self,
        key: &FlowKey,
        tables: &Tables,
        ct: &mut ConnTable,
        now: u64,
    ) -> Option<u32> {
        let sb = self.standby.as_deref()?;
        let r = sb.find(key, now)?;
        take_standby(sb, &r, tables, ct, now)
    }

    /// [`WorkerState::standby_flow`] for a FullNAT return frame carrying `rk`.
    pub(crate) fn standby_return(
        &self,
        rk: &crate::conntrack::RevKey,
        tables: &Tables,
        ct: &mut ConnTable,
        now: u64,
    ) -> Option<u32> {
        let sb = self.standby.as_deref()?;
        let r = sb.find_rev(rk, now)?;
        take_standby(sb, &r, tables, ct, now)
    }
}

/// Imports the synced record `r` into `ct` unless its FullNAT port is another flow's here.
fn take_standby(
    sb: &crate::standby::Standby,
    r: &crate::conntrack::FlowRecord,
    tables: &Tables,
    ct: &mut ConnTable,
    now: u64,
) -> Option<u32> {
    let port_taken = r.snat.is_some_and(|(local, local_port)| {
        let rk = crate::conntrack::RevKey {
            proto: r.key.proto,
            backend: r.backend.0,
            backend_port: r.backend.1,
            local,
            local_port,
        };
        ct.lookup_rev(&rk, now)
            .is_some_and(|id| ct.flow(id).key != r.key)
    });
    match (port_taken, ct.import(r, tables, now)) {
        (false, Ok(id)) => {
            sb.taken();
            Some(id)
        }
        _ => {
            sb.refused();
            None
        }
    }
}
