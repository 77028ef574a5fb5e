//! The `steer_keys` map's entries (bpf/structs.h `struct steer_key` and `struct steer_val`):
//! which keys a VIP, a return key or one of our own addresses becomes, and their bytes.

use std::collections::HashMap;
use std::net::IpAddr;

use super::{ReturnKey, VipKey};
use crate::config::model::{Mode, Protocol};
use crate::datapath::abi::{ip_family, steer_key, steer_kind, steer_val, vip_mode, vip_ring};

// Key kinds (bpf/consts.h `enum steer_kind`), as the key's byte.
const KIND_VIP: u8 = steer_kind::KIND_VIP.0;
const KIND_BACKEND: u8 = steer_kind::KIND_BACKEND.0;
const KIND_LOCAL: u8 = steer_kind::KIND_LOCAL.0;
const KIND_HOST: u8 = steer_kind::KIND_HOST.0;
const KIND_OUTBOUND: u8 = steer_kind::KIND_OUTBOUND.0;
const KIND_TENANT: u8 = steer_kind::KIND_TENANT.0;
const KIND_ADDR: u8 = steer_kind::KIND_ADDR.0;

/// A key of the `steer_keys` map (bpf/structs.h `struct steer_key`, laid out by
/// [`SteerKey::bytes`] from the generated mirror).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SteerKey {
    addr: [u8; 16],
    port: u16,
    proto: u8,
    kind: u8,
    family: u8,
    /// KIND_TENANT: the VNI; 0 in other kinds.
    vni: u32,
}

impl SteerKey {
    fn new(addr: IpAddr, port: u16, proto: u8, kind: u8) -> SteerKey {
        let (bytes, family) = match addr {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (b, ip_family::FAMILY_V4.0)
            }
            IpAddr::V6(a) => (a.octets(), ip_family::FAMILY_V6.0),
        };
        SteerKey {
            addr: bytes,
            port,
            proto,
            kind,
            family,
            vni: 0,
        }
    }

    /// A tenant VIP's key: VXLAN frames with `vni` to `addr:port/proto` inside.
    fn tenant(vni: u32, addr: IpAddr, port: u16, proto: Protocol) -> SteerKey {
        SteerKey {
            vni,
            ..SteerKey::new(addr, port, proto.number(), KIND_TENANT)
        }
    }

    /// The key and its address-only twin (for frames without ports).
    fn pair(addr: IpAddr, port: u16, proto: Protocol, kind: u8) -> [SteerKey; 2] {
        [
            SteerKey::new(addr, port, proto.number(), kind),
            SteerKey::new(addr, 0, 0, kind | KIND_ADDR),
        ]
    }

    pub(super) fn bytes(&self) -> [u8; steer_key::LEN] {
        steer_key {
            addr: self.addr,
            // The program compares the port as the packet carries it: network order.
            port: self.port.to_be(),
            proto: self.proto,
            kind: steer_kind(self.kind),
            family: ip_family(self.family),
            // The VNI's three bytes as VXLAN carries them: network order.
            vni: vni_bytes(self.vni),
        }
        .to_bytes()
    }
}

/// A 24-bit VNI in network order (the bits above 24 are not a VNI's).
fn vni_bytes(vni: u32) -> [u8; 3] {
    let [_, a, b, c] = vni.to_be_bytes();
    [a, b, c]
}

/// The value of a `steer_keys` entry (bpf/structs.h `struct steer_val`): a VIP's mode, slot
/// and stateless ring slot.
fn steer_value(vip: Option<(Mode, u32, Option<u16>)>, acl: u16) -> [u8; steer_val::LEN] {
    let (mode, slot, ring) = match vip {
        None => (vip_mode::VMODE_NONE, 0, None),
        Some((m, slot, ring)) => {
            let mode = match m {
                Mode::Nat => vip_mode::VMODE_NAT,
                Mode::FullNat => vip_mode::VMODE_FULLNAT,
                Mode::Dr => vip_mode::VMODE_DR,
                Mode::Tunnel(_) => vip_mode::VMODE_TUNNEL,
            };
            (mode, slot, ring)
        }
    };
    steer_val {
        vip: slot,
        ring: ring.map_or(vip_ring::NO_RING, vip_ring),
        mode,
        acl,
        ..Default::default()
    }
    .to_bytes()
}

/// The `steer_keys` entries of one return key. An outbound port's value carries the VIP's
/// slot and, for a DR VIP, the owner's backend slot in `ring` with mode DR (the program
/// forwards the answer itself); otherwise no mode, and the frame goes to the engine.
pub(super) fn return_entries(k: &ReturnKey) -> Vec<(SteerKey, [u8; steer_val::LEN])> {
    let none = steer_value(None, 0);
    match *k {
        ReturnKey::Backend { addr, port, proto } => SteerKey::pair(addr, port, proto, KIND_BACKEND)
            .map(|k| (k, none))
            .to_vec(),
        ReturnKey::Local { addr, port, proto } => SteerKey::pair(addr, port, proto, KIND_LOCAL)
            .map(|k| (k, none))
            .to_vec(),
        ReturnKey::Outbound {
            addr,
            port,
            proto,
            vip,
            owner,
        } => {
            let key = SteerKey::new(addr, port, proto.number(), KIND_OUTBOUND);
            let val = match owner {
                Some(b) => steer_value(Some((Mode::Dr, vip, Some(b))), 0),
                None => none,
            };
            vec![(key, val)]
        }
    }
}

/// The `steer_keys` entries of one VIP whose stateless ring slot is `ring`: its key with its
/// address-only twin, or for a tenant VIP the one key that matches inside VXLAN (no twin,
/// nothing in the underlay, where the tenant's address means nothing).
pub(super) fn vip_entries(
    v: &VipKey,
    ring: Option<u16>,
    acl: u16,
) -> Vec<(SteerKey, [u8; steer_val::LEN])> {
    let val = steer_value(Some((v.mode, v.slot, ring)), acl);
    match v.tenant_vni {
        Some(vni) => vec![(SteerKey::tenant(vni, v.addr, v.port, v.proto), val)],
        None => SteerKey::pair(v.addr, v.port, v.proto, KIND_VIP)
            .map(|k| (k, val))
            .to_vec(),
    }
}

/// The `steer_keys` entry of one of the appliance's own addresses.
pub(super) fn host_entry(addr: IpAddr) -> (SteerKey, [u8; steer_val::LEN]) {
    (
        SteerKey::new(addr, 0, 0, KIND_HOST | KIND_ADDR),
        steer_value(None, 0),
    )
}

/// What one of the program's key sets holds: each key with its value's bytes.
pub(super) type KeySet = HashMap<SteerKey, [u8; steer_val::LEN]>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn keys_carry_the_address_and_port_in_network_order() {
        let addr = offset_of!(steer_key, addr);
        let port = offset_of!(steer_key, port);
        let k = SteerKey::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 80, 6, KIND_VIP).bytes();
        assert_eq!(&k[addr..addr + 4], &[10, 0, 0, 1]);
        assert!(k[addr + 4..addr + 16].iter().all(|b| *b == 0));
        assert_eq!(&k[port..port + 2], &[0, 80], "port in network order");
        let back = steer_key::from_bytes(&k).expect("whole key");
        assert_eq!((back.proto, back.kind.0, back.family.0), (6, KIND_VIP, 4));
        let v6: Ipv6Addr = "2001:db8::1".parse().expect("literal");
        let k = SteerKey::new(IpAddr::V6(v6), 443, 17, KIND_LOCAL).bytes();
        assert_eq!(&k[addr..addr + 16], &v6.octets());
        assert_eq!(&k[port..port + 2], &[1, 187]);
        let back = steer_key::from_bytes(&k).expect("whole key");
        assert_eq!(
            (back.proto, back.kind.0, back.family.0),
            (17, KIND_LOCAL, 6)
        );
        assert_eq!(back.vni, [0; 3]);
    }

    #[test]
    fn tenant_keys_carry_the_vni_in_network_order() {
        let addr: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5));
        let k = SteerKey::tenant(0x0012_3456, addr, 80, Protocol::Tcp);
        let back = steer_key::from_bytes(&k.bytes()).expect("whole key");
        assert_eq!(back.vni, [0x12, 0x34, 0x56]);
        assert_eq!(
            (back.proto, back.kind.0, back.family.0),
            (6, KIND_TENANT, 4)
        );
        assert_eq!(back.addr[..4], [10, 0, 0, 5]);
        assert_eq!(u16::from_be(back.port), 80);
        let other = SteerKey::tenant(0x0012_3457, addr, 80, Protocol::Tcp);
        assert_ne!(k.bytes(), other.bytes(), "the VNI tells tenants apart");
    }

    #[test]
    fn every_key_has_an_address_only_twin() {
        let [full, addr] = SteerKey::pair(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            53,
            Protocol::Udp,
            KIND_BACKEND,
        );
        assert_eq!((full.port, full.proto, full.kind), (53, 17, KIND_BACKEND));
        assert_eq!(
            (addr.port, addr.proto, addr.kind),
            (0, 0, KIND_BACKEND | KIND_ADDR)
        );
    }
}
