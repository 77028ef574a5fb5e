//! The one binary form of [`FlowRecord`]s, shared by the restart hand-over and connection
//! sync: a batch is a 16-byte header and fixed-size records, little-endian.
//!
//! ```text
//! header  0  magic "SLFR"      4  version u16   6  record length u16
//!         8  record count u32  12 reserved u32 (0)
//! record  0  client u128       16 VIP u128      32 client port u16  34 VIP port u16
//!         36 protocol u8       37 flags u8      38 state u8         39 evidence marks u8
//!         40 zone u32          44 backend u128  60 backend port u16 62 SNAT port u16
//!         64 SNAT u128         80 SYN-ACK u32   84 carry kind u8    85 carry delta u8
//!         86 carry armed u8    87 track bits u8 88 carry base u32
//!         92 client next u32   96 client acked u32   100 backend next u32
//!         104 backend acked u32  108 age ns u64  116..128 reserved (0)
//! ```
//! A reader never guesses: a batch of another version, record length or magic is refused
//! whole with what it was, and a record with a value this version does not define (a state,
//! a flag bit, a reserved byte) is refused with its index, so a newer writer's state is
//! never misread as something else. A new layout is a new version; readers keep the old.

use super::state::marks;
use super::{Carry, Evidence, FlowRecord, FlowState, Track, track};
use crate::hash::FlowKey;
use config::ClientAddress;

/// The first bytes of every batch.
pub const MAGIC: [u8; 4] = *b"SLFR";
/// The layout this build writes (and the only one it reads).
pub const VERSION: u16 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 16;
/// Bytes per record in [`VERSION`].
pub const RECORD_LEN: usize = 128;

/// Record flag bits (offset 37).
const F_V6: u8 = 0x01;
const F_SNAT: u8 = 0x02;
const F_ALL: u8 = F_V6 | F_SNAT;

/// Why a batch was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a flow-record batch (no SLFR magic)")]
    BadMagic,
    /// Another layout version.
    #[error("flow records of version {found}; this build reads version {VERSION}")]
    UnsupportedVersion {
        /// The version the batch says it is.
        found: u16,
    },
    /// The header's record length is not this version's.
    #[error("record length {found} (version {VERSION} records are {RECORD_LEN} bytes)")]
    BadRecordLength {
        /// The length the header says.
        found: u16,
    },
    /// Fewer bytes than the header promises (or than a header).
    #[error("batch cut short: {have} of {need} bytes")]
    Truncated {
        /// Bytes the header (or a header) needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// A record holds a value this version does not define.
    #[error("record {index}: {what}")]
    BadRecord {
        /// The record's index in the batch.
        index: usize,
        /// What is wrong with it.
        what: &'static str,
    },
}

/// Appends one batch of `records` to `out`.
pub fn encode_into(records: &[FlowRecord], out: &mut Vec<u8>) {
    out.reserve(HEADER_LEN + records.len() * RECORD_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(RECORD_LEN as u16).to_le_bytes());
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for r in records {
        let mut b = [0u8; RECORD_LEN];
        put_record(r, &mut b);
        out.extend_from_slice(&b);
    }
}

/// One batch of `records`.
pub fn encode(records: &[FlowRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(records, &mut out);
    out
}

/// The records of the batch at the start of `bytes`, and how many bytes it took.
pub fn decode(bytes: &[u8]) -> Result<(Vec<FlowRecord>, usize), CodecError> {
    let count = header(bytes)?;
    let need = HEADER_LEN + count * RECORD_LEN;
    if bytes.len() < need {
        return Err(CodecError::Truncated {
            need,
            have: bytes.len(),
        });
    }
    let mut out = Vec::with_capacity(count);
    for (index, b) in bytes[HEADER_LEN..need].chunks_exact(RECORD_LEN).enumerate() {
        out.push(get_record(b).map_err(|what| CodecError::BadRecord { index, what })?);
    }
    Ok((out, need))
}

/// The record count of the batch header at the start of `bytes`, after checking magic,
/// version and record length.
pub fn header(bytes: &[u8]) -> Result<usize, CodecError> {
    if bytes.len() < HEADER_LEN {
        if bytes.len() >= 4 && bytes[..4] != MAGIC {
            return Err(CodecError::BadMagic);
        }
        return Err(CodecError::Truncated {
            need: HEADER_LEN,
            have: bytes.len(),
        });
    }
    if bytes[..4] != MAGIC {
        return Err(CodecError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(CodecError::UnsupportedVersion { found: version });
    }
    let len = u16::from_le_bytes([bytes[6], bytes[7]]);
    if usize::from(len) != RECORD_LEN {
        return Err(CodecError::BadRecordLength { found: len });
    }
    Ok(u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize)
}

/// A state's byte in [`VERSION`]: fixed here, not taken from the enum's order.
fn state_byte(s: FlowState) -> u8 {
    match s {
        FlowState::TcpSyn => 0,
        FlowState::TcpEstablished => 1,
        FlowState::TcpClosing => 2,
        FlowState::Udp => 3,
        FlowState::UdpNew => 4,
        FlowState::UdpOneWay => 5,
    }
}

fn state_of(b: u8) -> Option<FlowState> {
    Some(match b {
        0 => FlowState::TcpSyn,
        1 => FlowState::TcpEstablished,
        2 => FlowState::TcpClosing,
        3 => FlowState::Udp,
        4 => FlowState::UdpNew,
        5 => FlowState::UdpOneWay,
        _ => return None,
    })
}

fn carry_kind(k: ClientAddress) -> u8 {
    match k {
        ClientAddress::None => 0,
        ClientAddress::ProxyV2 => 1,
        ClientAddress::Toa => 2,
    }
}

fn put_record(r: &FlowRecord, b: &mut [u8; RECORD_LEN]) {
    let k = &r.key;
    b[0..16].copy_from_slice(&k.src.to_le_bytes());
    b[16..32].copy_from_slice(&k.dst.to_le_bytes());
    b[32..34].copy_from_slice(&k.sport.to_le_bytes());
    b[34..36].copy_from_slice(&k.dport.to_le_bytes());
    b[36] = k.proto;
    b[37] = if k.v6 { F_V6 } else { 0 } | if r.snat.is_some() { F_SNAT } else { 0 };
    b[38] = state_byte(r.state);
    b[39] = r.evidence.marks;
    b[40..44].copy_from_slice(&k.zone.to_le_bytes());
    b[44..60].copy_from_slice(&r.backend.0.to_le_bytes());
    b[60..62].copy_from_slice(&r.backend.1.to_le_bytes());
    let (snat, snat_port) = r.snat.unwrap_or((0, 0));
    b[62..64].copy_from_slice(&snat_port.to_le_bytes());
    b[64..80].copy_from_slice(&snat.to_le_bytes());
    b[80..84].copy_from_slice(&r.evidence.syn_ack.to_le_bytes());
    b[84] = carry_kind(r.carry.kind);
    b[85] = r.carry.delta;
    b[86] = u8::from(r.carry.armed);
    b[87] = r.track.seen;
    b[88..92].copy_from_slice(&r.carry.base.to_le_bytes());
    b[92..96].copy_from_slice(&r.track.client_next.to_le_bytes());
    b[96..100].copy_from_slice(&r.track.client_acked.to_le_bytes());
    b[100..104].copy_from_slice(&r.track.backend_next.to_le_bytes());
    b[104..108].copy_from_slice(&r.track.backend_acked.to_le_bytes());
    b[108..116].copy_from_slice(&r.age_ns.to_le_bytes());
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn u128_at(b: &[u8], o: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[o..o + 16]);
    u128::from_le_bytes(a)
}

/// Whether `a` is an IPv4-mapped address (`::ffff:a.b.c.d`), the form IPv4 keys take.
fn mapped(a: u128) -> bool {
    a >> 32 == 0xffff
}

fn get_record(b: &[u8]) -> Result<FlowRecord, &'static str> {
    if b[116..RECORD_LEN].iter().any(|&x| x != 0) {
        return Err("reserved bytes are not zero");
    }
    let flags = b[37];
    if flags & !F_ALL != 0 {
        return Err("unknown flag bits");
    }
    let v6 = flags & F_V6 != 0;
    let proto = b[36];
    let state = state_of(b[38]).ok_or("unknown state")?;
    let tcp_state = matches!(
        state,
        FlowState::TcpSyn | FlowState::TcpEstablished | FlowState::TcpClosing
    );
    match proto {
        6 if tcp_state => {}
        17 if !tcp_state => {}
        6 | 17 => return Err("state of the other protocol"),
        _ => return Err("protocol is neither TCP nor UDP"),
    }
    let key = FlowKey {
        src: u128_at(b, 0),
        dst: u128_at(b, 16),
        sport: u16_at(b, 32),
        dport: u16_at(b, 34),
        proto,
        v6,
        zone: u32_at(b, 40),
    };
    if !v6 && (!mapped(key.src) || !mapped(key.dst)) {
        return Err("IPv4 flow with an address that is not IPv4-mapped");
    }
    if b[39] & !(marks::REPLY | marks::FOLLOWED) != 0 {
        return Err("unknown evidence marks");
    }
    let kind = match b[84] {
        0 => ClientAddress::None,
        1 => ClientAddress::ProxyV2,
        2 => ClientAddress::Toa,
        _ => return Err("unknown client-address kind"),
    };
    let armed = match b[86] {
        0 => false,
        1 => true,
        _ => return Err("carry armed is neither 0 nor 1"),
    };
    if b[87] & !track::seen::ALL != 0 {
        return Err("unknown sequence-tracking bits");
    }
    let snat = (flags & F_SNAT != 0).then(|| (u128_at(b, 64), u16_at(b, 62)));
    if snat.is_none() && (u16_at(b, 62) != 0 || u128_at(b, 64) != 0) {
        return Err("SNAT address or port without the SNAT flag");
    }
    Ok(FlowRecord {
        key,
        backend: (u128_at(b, 44), u16_at(b, 60)),
        state,
        evidence: Evidence {
            marks: b[39],
            syn_ack: u32_at(b, 80),
        },
        snat,
        carry: Carry {
            kind,
            base: u32_at(b, 88),
            delta: b[85],
            armed,
        },
        track: Track {
            client_next: u32_at(b, 92),
            client_acked: u32_at(b, 96),
            backend_next: u32_at(b, 100),
            backend_acked: u32_at(b, 104),
            seen: b[87],
        },
        age_ns: u64::from(u32_at(b, 108)) | u64::from(u32_at(b, 112)) << 32,
    })
}

#[cfg(test)]
mod tests;
