//! Address spaces: the underlay's, and one per tenant VNI. Tenants reuse addresses, so a
//! flow, a VIP and a persistence entry are told apart by their zone as well.

/// Bit 24 marks a tenant zone (VNIs are 24 bits, VNI 0 included).
pub const TENANT_ZONE: u32 = 1 << 24;

/// The zone of a VIP with tenant VNI `vni` (none: the underlay's, 0).
#[inline]
pub fn zone_of(vni: Option<u32>) -> u32 {
    vni.map_or(0, |v| TENANT_ZONE | (v & 0x00ff_ffff))
}

/// The tenant VNI of `zone`, if it is a tenant's.
#[inline]
pub fn vni_of(zone: u32) -> Option<u32> {
    (zone & TENANT_ZONE != 0).then_some(zone & 0x00ff_ffff)
}
