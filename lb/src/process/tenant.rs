//! Tenant VIPs (issue 23): a VIP in a tenant's virtual network, after Ananta and Azure SLB.
//!
//! The tenant's gateway sends the VIP's traffic to the appliance in VXLAN (RFC 7348, UDP
//! port [`VXLAN_PORT`], addressed to one of the appliance's own addresses). The engine
//! looks through the outer headers: a frame whose VNI, inner destination address, port and
//! protocol name a tenant VIP is decapsulated (the outer headers are dropped, the inner
//! Ethernet frame is what the modes see) and forwarded as any tunnel VIP's: its flow lives in
//! the connection table under the tenant's zone, so two tenants' flows with the same 5-tuple
//! stay apart, and it leaves toward the backend's VTEP in VXLAN with the backend network's
//! VNI. The backend answers its client in the tenant's network (direct return, like every
//! tunnel VIP).
//!
//! Policies (each has a golden fixture):
//! - Only TCP and UDP first fragments-free frames are a tenant VIP's; an inner frame with a
//!   VLAN tag (RFC 7348 section 6.1: a VTEP drops those unless configured otherwise), ICMP,
//!   fragments, an unknown VNI or a VNI whose tenant has no such VIP stay the kernel's,
//!   untouched.
//! - The appliance originates nothing into a tenant's network: a tenant flow refused by
//!   `overflow = "reset"` gets no RST, an inner frame too big for the tunnel no ICMP (the
//!   SYN's MSS is clamped as for every tunnel VIP). Those frames are dropped and counted.
//! - Tenant flows never enter the XDP flow cache (its keys have no VNI): the engine forwards
//!   every frame.

use wire::{EthernetFrame, IpProtocol, VxlanHeader, l3_offset};

use super::headers::{Ip, L4, parse_ip, parse_l4};
use super::{Verdict, WorkerState};
use crate::conntrack::ConnTable;
use crate::frame::Frame;
use crate::hash::zone_of;
use crate::tables::Tables;

/// The UDP port tenant traffic arrives on: VXLAN's (IANA).
pub const VXLAN_PORT: u16 = 4789;
/// An untagged Ethernet header: the only kind a tenant's inner frame may have.
const ETH_LEN: usize = 14;

/// A VXLAN frame for a tenant VIP: decapsulated and forwarded; `None` when the frame is not
/// one (the caller goes on with it untouched).
pub(super) fn arrive(
    frame: &mut Frame<'_>,
    tables: &Tables,
    ct: &mut ConnTable,
    worker: &mut WorkerState,
    outer: &Ip,
    l4: &L4,
    now: u64,
) -> Option<Verdict> {
    if outer.proto != IpProtocol::UDP || l4.dport != VXLAN_PORT || !tables.is_local(outer.dst) {
        return None;
    }
    let (at, ip, l4, vip) = inner(frame.data(), tables, outer)?;
    // The tenant's lists judge the inner source; a denied frame is dropped as it came.
    if !tables.vips[vip as usize].admits(ip.src) {
        return Some(worker.drop(super::DropReason::Denied));
    }
    // The frame is the tenant's inner Ethernet frame from here on.
    frame.pull_front(at).ok()?;
    let len = frame.len() as u64;
    Some(super::forward(
        frame,
        tables,
        ct,
        worker,
        &ip,
        &l4,
        vip,
        len,
        now,
        &mut (),
    ))
}

/// Where the inner Ethernet frame starts, its IP and L4 facts (offsets from that start, the
/// tenant's zone set) and the tenant VIP it is for.
fn inner(d: &[u8], tables: &Tables, outer: &Ip) -> Option<(usize, Ip, L4, u32)> {
    // The VXLAN header follows the outer UDP header; the inner Ethernet frame follows it.
    let vx = outer.l4 + 8;
    let end = outer.end().min(d.len());
    let h = VxlanHeader::new_checked(d.get(vx..end)?).ok()?;
    if !h.has_vni() {
        return None;
    }
    let zone = zone_of(Some(h.vni()));
    let at = vx + 8;
    let inner = d.get(at..end)?;
    let (l3, ethertype, _) = l3_offset(&EthernetFrame::new_checked(inner).ok()?).ok()?;
    if l3 != ETH_LEN {
        return None;
    }
    let mut ip = parse_ip(inner, l3, ethertype).ok()??;
    if ip.frag || !matches!(ip.proto, IpProtocol::TCP | IpProtocol::UDP) {
        return None;
    }
    ip.zone = zone;
    let l4 = parse_l4(inner, &ip).ok()?;
    let vip = tables.tenant_vip(zone, ip.dst, l4.dport, ip.proto)?;
    Some((at, ip, l4, vip))
}
