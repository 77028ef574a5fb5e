//! FullNAT: NAT that also replaces the client's address with one of the VIP's SNAT addresses.
//!
//! Backends then answer the appliance without a route back through it, at the price of
//! state: the SNAT address and port are allocated per flow ([`snat_for`]), and return traffic
//! is recognised only by its flow ([`reverse_flow`]); without one there is no client to send
//! it to. The rewrites themselves are NAT's ([`super::nat`]).

use super::DropReason;
use super::headers::{Ip, L4};
use super::nat::{Return, from_flow};
use crate::config::Mode;
use crate::lb::conntrack::{ConnTable, RevKey};
use crate::lb::hash::FlowKey;
use crate::lb::tables::{BackendEntry, VipEntry};

/// The SNAT address and port of a new flow of `v` to backend `b`: `None` for the other modes.
pub(super) fn snat_for(
    ct: &mut ConnTable,
    v: &VipEntry,
    key: &FlowKey,
    b: &BackendEntry,
    hash: u32,
    now: u64,
) -> Result<Option<(u128, u16)>, DropReason> {
    if v.mode != Mode::FullNat {
        return Ok(None);
    }
    match ct.alloc_snat(key.proto, b.address, b.port, &v.snat, hash, now) {
        Some(s) => Ok(Some(s)),
        None => Err(DropReason::SnatExhausted),
    }
}

/// FullNAT return traffic (backend → SNAT address): only through its flow.
pub(super) fn reverse_flow(
    ct: &mut ConnTable,
    ip: &Ip,
    l4: &L4,
    rk: &RevKey,
    now: u64,
) -> Result<Return, DropReason> {
    match ct.lookup_rev(rk, now) {
        Some(id) => Ok(from_flow(ct, id, ip, l4, now)),
        None => Err(DropReason::NoFlow),
    }
}
