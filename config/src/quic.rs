//! A VIP's QUIC-LB configuration (`[vip.quic_lb]`, draft-ietf-quic-load-balancers): the
//! parameters the appliance and the VIP's QUIC servers share, and each backend's server ID.
//!
//! Server IDs are the operator's (`quic_server_id` on a backend) or derived from the
//! backend's identity (address and port) by a fixed hash, so every appliance of a fleet
//! computes the same ID from the same config, a reload keeps it, and adding a backend never
//! moves another's. Two backends landing on one ID is a configuration error naming both
//! ([`QuicLb::server_ids`]), never a silent re-numbering: the fix (a longer ID, or one set
//! by hand) is the operator's.

use std::fmt;
use std::net::IpAddr;

/// The longest server ID: nonce (at least 4) and server ID fit in 19 octets.
pub const MAX_SERVER_ID_LEN: u8 = 15;
/// The shortest nonce the draft allows.
pub const MIN_NONCE_LEN: u8 = 4;
/// Server ID and nonce together (a QUIC v1 connection ID is at most 20 octets, the first
/// one being the config octet).
pub const MAX_PLAINTEXT_LEN: u8 = 19;
/// The config rotation codepoint reserved for servers without a configuration.
pub const FAILOVER_CONFIG_ID: u8 = 0b111;

/// One server ID: opaque octets, 1 to [`MAX_SERVER_ID_LEN`] of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId {
    len: u8,
    bytes: [u8; MAX_SERVER_ID_LEN as usize],
}

impl ServerId {
    /// The ID of these octets; `None` when empty or longer than [`MAX_SERVER_ID_LEN`].
    pub fn new(octets: &[u8]) -> Option<ServerId> {
        if octets.is_empty() || octets.len() > usize::from(MAX_SERVER_ID_LEN) {
            return None;
        }
        let mut bytes = [0u8; MAX_SERVER_ID_LEN as usize];
        bytes[..octets.len()].copy_from_slice(octets);
        Some(ServerId {
            len: octets.len() as u8,
            bytes,
        })
    }

    /// Its octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Parses hex ("0a1b", an optional "0x" in front).
    pub fn from_hex(s: &str) -> Option<ServerId> {
        ServerId::new(&hex_octets(s)?)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Octets written as hex (an optional "0x" in front, an even number of digits).
pub fn hex_octets(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// How the server ID and nonce are carried in a connection ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// No key: the server ID in clear after the first octet.
    Plaintext,
    /// A key, and server ID + nonce of exactly 16 octets: one AES-128-ECB block.
    SinglePass,
    /// A key and any other length: a four-round Feistel network over AES-128-ECB.
    FourPass,
}

impl Encoding {
    /// Its name in `sluice quic-lb config`.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Plaintext => "plaintext",
            Encoding::SinglePass => "single-pass",
            Encoding::FourPass => "four-pass",
        }
    }
}

/// `[vip.quic_lb]`: route a UDP VIP's QUIC packets by the server ID their servers put in
/// the connection IDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicLb {
    /// `config_id`: the config rotation codepoint (0 to 6) in the first octet's top bits.
    pub config_id: u8,
    /// `server_id_len`: octets of every server ID.
    pub server_id_len: u8,
    /// `nonce_len`: octets of the nonce after the server ID.
    pub nonce_len: u8,
    /// `key`: the AES-128 key of the encrypted encodings; `None` for plaintext.
    pub key: Option<[u8; 16]>,
    /// `quic_server_id` set on backends, by (address, port).
    pub assigned: Vec<(IpAddr, u16, ServerId)>,
}

/// Two backends of one VIP with one server ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdClash {
    /// The ID both have.
    pub id: ServerId,
    /// The first backend (address, port).
    pub first: (IpAddr, u16),
    /// The second.
    pub second: (IpAddr, u16),
    /// Whether the second's ID was derived (not set by the operator).
    pub derived: bool,
}

impl fmt::Display for ServerIdClash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |(a, p): (IpAddr, u16)| match a {
            IpAddr::V4(a) => format!("{a}:{p}"),
            IpAddr::V6(a) => format!("[{a}]:{p}"),
        };
        write!(
            f,
            "backends {} and {} both have QUIC-LB server ID {}",
            show(self.first),
            show(self.second),
            self.id
        )?;
        if self.derived {
            write!(
                f,
                " (derived from their addresses): set quic_server_id on one of them, or raise \
                 quic_lb.server_id_len"
            )?;
        } else {
            write!(f, ": give each backend its own quic_server_id")?;
        }
        Ok(())
    }
}

impl QuicLb {
    /// The encoding these parameters select.
    pub fn encoding(&self) -> Encoding {
        match self.key {
            None => Encoding::Plaintext,
            Some(_) if self.server_id_len + self.nonce_len == 16 => Encoding::SinglePass,
            Some(_) => Encoding::FourPass,
        }
    }

    /// Octets of the connection IDs the servers issue (first octet, server ID, nonce).
    pub fn cid_len(&self) -> u8 {
        1 + self.server_id_len + self.nonce_len
    }

    /// The server ID of the backend at `address` and `port`: the operator's, else derived.
    pub fn server_id(&self, address: IpAddr, port: u16) -> ServerId {
        self.assigned
            .iter()
            .find(|(a, p, _)| *a == address && *p == port)
            .map(|(_, _, id)| *id)
            .unwrap_or_else(|| derive(address, port, self.server_id_len))
    }

    /// The server IDs of `backends` (address, port), in order, or the first two that share
    /// one.
    pub fn server_ids(
        &self,
        backends: impl IntoIterator<Item = (IpAddr, u16)>,
    ) -> Result<Vec<ServerId>, ServerIdClash> {
        let mut out: Vec<ServerId> = Vec::new();
        let mut seen: std::collections::HashMap<ServerId, (IpAddr, u16)> = Default::default();
        for (a, p) in backends {
            let id = self.server_id(a, p);
            if let Some(&first) = seen.get(&id) {
                let set = |x: (IpAddr, u16)| self.assigned.iter().any(|e| (e.0, e.1) == x);
                return Err(ServerIdClash {
                    id,
                    first,
                    second: (a, p),
                    derived: !(set(first) && set((a, p))),
                });
            }
            seen.insert(id, (a, p));
            out.push(id);
        }
        Ok(out)
    }
}

/// The derived server ID of a backend: FNV-1a over its address (IPv4 as IPv4-mapped IPv6)
/// and port, stretched by SplitMix64 to `len` octets. Fixed forever: changing it would move
/// every running connection of every fleet.
pub fn derive(address: IpAddr, port: u16, len: u8) -> ServerId {
    let v6 = match address {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v6.octets().iter().chain(&port.to_be_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut out = [0u8; MAX_SERVER_ID_LEN as usize];
    for chunk in out.chunks_mut(8) {
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let n = chunk.len();
        chunk.copy_from_slice(&z.to_be_bytes()[..n]);
    }
    let len = len.clamp(1, MAX_SERVER_ID_LEN);
    ServerId::new(&out[..usize::from(len)]).unwrap_or(ServerId { len: 1, bytes: out })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_fixed_values() {
        // Pinned: every appliance of a fleet, and every later release, must agree.
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let id = derive(a, 443, 4);
        assert_eq!(id.as_bytes().len(), 4);
        assert_eq!(derive(a, 443, 4), id);
        assert_ne!(derive(a, 444, 4), id);
        assert_eq!(id.to_string(), PINNED_10_0_0_1_443);
        // A longer ID begins with the shorter one.
        assert!(
            derive(a, 443, 8)
                .to_string()
                .starts_with(PINNED_10_0_0_1_443)
        );
    }

    const PINNED_10_0_0_1_443: &str = "627206ce";

    #[test]
    fn hex_round_trip() {
        let id = ServerId::from_hex("0x0a1B").unwrap();
        assert_eq!(id.as_bytes(), &[0x0a, 0x1b]);
        assert_eq!(id.to_string(), "0a1b");
        assert!(ServerId::from_hex("abc").is_none());
        assert!(ServerId::from_hex("").is_none());
        assert!(ServerId::from_hex(&"00".repeat(16)).is_none());
    }

    #[test]
    fn clashes_name_both_backends_and_the_fix() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let id = ServerId::new(&[7]).unwrap();
        let q = QuicLb {
            config_id: 0,
            server_id_len: 1,
            nonce_len: 4,
            key: None,
            assigned: vec![(a, 443, id), (b, 443, id)],
        };
        let e = q.server_ids([(a, 443), (b, 443)]).unwrap_err();
        assert_eq!(e.first, (a, 443));
        assert_eq!(e.second, (b, 443));
        assert!(
            e.to_string()
                .contains("give each backend its own quic_server_id")
        );
        let q = QuicLb {
            assigned: vec![(b, 443, derive(a, 443, 1))],
            ..q
        };
        let e = q.server_ids([(a, 443), (b, 443)]).unwrap_err();
        assert!(e.to_string().contains("raise quic_lb.server_id_len"), "{e}");
    }
}
