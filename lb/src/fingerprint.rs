//! A table version's fingerprint: a digest of what decides where flows go (every VIP, its
//! backends with their weight, state and health, and its ring), equal on every appliance of
//! the same release forwarding the same way, so a fleet can tell its members agree.

use crate::tables::Core;

impl Core {
    /// A stable 64-bit digest of every VIP (name, address, port, protocol, mode), its
    /// backend list (address, port, weight, state, health) and its ring, in VIP order:
    /// equal on every appliance of the same release forwarding the same way.
    pub fn fingerprint(&self) -> u64 {
        let mut h = crate::maglev::DIGEST_SEED;
        let mut put = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        for v in &self.vips {
            put(&(v.name.len() as u32).to_le_bytes());
            put(v.name.as_bytes());
            put(&v.address.to_le_bytes());
            put(&v.port.to_le_bytes());
            put(&[v.proto, v.v6 as u8]);
            put(&v.zone.to_le_bytes());
            put(format!("{:?}", v.mode).as_bytes());
            put(&(v.backends.len() as u32).to_le_bytes());
            for b in &self.backends[v.backends.start as usize..v.backends.end as usize] {
                put(&b.address.to_le_bytes());
                put(&b.port.to_le_bytes());
                put(&b.weight.to_le_bytes());
                put(&[b.state as u8, b.healthy as u8]);
            }
            put(&v.ring.digest().to_le_bytes());
        }
        h
    }
}
