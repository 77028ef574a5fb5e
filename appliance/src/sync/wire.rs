//! One connection-sync datagram, pure: a 32-byte header, a body, and an HMAC-SHA256 over
//! both with the group's shared key. Little-endian.
//!
//! ```text
//! 0  magic "SLSY"   4  version u8 (1)   5  kind u8   6  reserved u16 (0)
//! 8  session u64 (the sender's, new at each start)   16 sequence u64 (from 1, per session)
//! 24 sent at, unix ms u64 (the sender's clock)
//! 32 body: records: one SLFR batch (lb::conntrack::codec); ended: u32 count, then count
//!    flow keys of 44 bytes (client u128, VIP u128, client port u16, VIP port u16,
//!    protocol u8, flags u8 (1: IPv6), zone u32, 2 reserved bytes (0)); catch-up
//!    request and done: empty
//! .. HMAC-SHA256 (32 bytes) over everything before it
//! ```
//! [`open`] checks the tag before it reads anything else, so bytes without the key are
//! refused whatever they hold; [`Window`] refuses a datagram seen before (its session and
//! sequence) or sent outside the clock window, so a recorded datagram replayed later does
//! nothing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::lb::FlowKey;
use crate::lb::conntrack::{FlowRecord, codec};

/// The first bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"SLSY";
/// The layout this build writes and reads.
pub const VERSION: u8 = 1;
/// Header bytes.
pub const HEADER_LEN: usize = 32;
/// Tag bytes.
pub const TAG_LEN: usize = 32;
/// The largest datagram sent: fits a 1500-byte MTU with IPv6 and UDP headers.
pub const MAX_DATAGRAM: usize = 1400;
/// Records per records datagram.
pub const RECORDS_PER_DATAGRAM: usize =
    (MAX_DATAGRAM - HEADER_LEN - TAG_LEN - codec::HEADER_LEN) / codec::RECORD_LEN;
/// Bytes of one ended flow's key.
const KEY_LEN: usize = 44;
/// Keys per ended datagram.
pub const KEYS_PER_DATAGRAM: usize = (MAX_DATAGRAM - HEADER_LEN - TAG_LEN - 4) / KEY_LEN;
/// How far a datagram's clock may be from the receiver's, either way.
pub const CLOCK_WINDOW_MS: u64 = 30_000;
/// Sequence numbers below the highest seen that are still told apart (older: refused).
const WINDOW_BITS: u64 = 1024;

/// What a datagram says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Flows the sender established (or holds, in a catch-up).
    Records(Vec<FlowRecord>),
    /// Flows the sender ended.
    Ended(Vec<FlowKey>),
    /// The sender (re)joined: send it every flow you hold, then [`Body::CatchUpDone`].
    CatchUpRequest,
    /// The catch-up the receiver asked for is complete.
    CatchUpDone,
}

impl Body {
    fn kind(&self) -> u8 {
        match self {
            Body::Records(_) => 1,
            Body::Ended(_) => 2,
            Body::CatchUpRequest => 3,
            Body::CatchUpDone => 4,
        }
    }
}

/// A datagram's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The sender's session (random, new at each start).
    pub session: u64,
    /// Its sequence number within the session.
    pub seq: u64,
    /// When it was sent, unix milliseconds.
    pub sent_ms: u64,
}

/// Why a datagram was refused (each has its counter).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than a header and a tag.
    #[error("datagram cut short ({0} bytes)")]
    Truncated(usize),
    /// The tag does not match: another key, or bytes changed on the way.
    #[error("authentication failed (another [sync] key, or a forged datagram)")]
    BadTag,
    /// Authentic, but not something this version reads.
    #[error("unreadable datagram: {0}")]
    Garbage(String),
    /// Seen before, or too far behind the newest of its session.
    #[error("replayed datagram (session {session:x}, sequence {seq})")]
    Replay {
        /// Its session.
        session: u64,
        /// Its sequence number.
        seq: u64,
    },
    /// Sent outside the clock window.
    #[error("datagram sent {0} ms away from this clock (window {CLOCK_WINDOW_MS} ms)")]
    Stale(i64),
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length.
    HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key"))
}

/// The datagram of `body` with header `h`, tagged with `key`.
pub fn seal(key: &[u8], h: Header, body: &Body) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAX_DATAGRAM);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(body.kind());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&h.session.to_le_bytes());
    out.extend_from_slice(&h.seq.to_le_bytes());
    out.extend_from_slice(&h.sent_ms.to_le_bytes());
    match body {
        Body::Records(r) => codec::encode_into(r, &mut out),
        Body::Ended(keys) => {
            out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
            for k in keys {
                put_key(k, &mut out);
            }
        }
        Body::CatchUpRequest | Body::CatchUpDone => {}
    }
    let mut m = mac(key);
    m.update(&out);
    out.extend_from_slice(&m.finalize().into_bytes());
    out
}

/// The header and body of an authentic datagram.
pub fn open(key: &[u8], d: &[u8]) -> Result<(Header, Body), WireError> {
    if d.len() < HEADER_LEN + TAG_LEN {
        return Err(WireError::Truncated(d.len()));
    }
    let (signed, tag) = d.split_at(d.len() - TAG_LEN);
    let mut m = mac(key);
    m.update(signed);
    m.verify_slice(tag).map_err(|_| WireError::BadTag)?;
    let garbage = |s: &str| WireError::Garbage(s.to_string());
    if signed[..4] != MAGIC {
        return Err(garbage("no SLSY magic"));
    }
    if signed[4] != VERSION {
        return Err(WireError::Garbage(format!(
            "version {} (this build reads {VERSION})",
            signed[4]
        )));
    }
    if signed[6..8] != [0, 0] {
        return Err(garbage("reserved bytes are not zero"));
    }
    let u64_at = |o: usize| u64::from_le_bytes(signed[o..o + 8].try_into().unwrap_or([0; 8]));
    let h = Header {
        session: u64_at(8),
        seq: u64_at(16),
        sent_ms: u64_at(24),
    };
    let b = &signed[HEADER_LEN..];
    let body = match signed[5] {
        1 => {
            let (records, used) =
                codec::decode(b).map_err(|e| WireError::Garbage(e.to_string()))?;
            if used != b.len() {
                return Err(garbage("bytes after the records"));
            }
            Body::Records(records)
        }
        2 => Body::Ended(keys(b)?),
        3 | 4 if !b.is_empty() => return Err(garbage("a catch-up message with a body")),
        3 => Body::CatchUpRequest,
        4 => Body::CatchUpDone,
        k => return Err(WireError::Garbage(format!("unknown kind {k}"))),
    };
    Ok((h, body))
}

fn put_key(k: &FlowKey, out: &mut Vec<u8>) {
    out.extend_from_slice(&k.src.to_le_bytes());
    out.extend_from_slice(&k.dst.to_le_bytes());
    out.extend_from_slice(&k.sport.to_le_bytes());
    out.extend_from_slice(&k.dport.to_le_bytes());
    out.push(k.proto);
    out.push(u8::from(k.v6));
    out.extend_from_slice(&k.zone.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
}

fn keys(b: &[u8]) -> Result<Vec<FlowKey>, WireError> {
    let garbage = |s: &str| WireError::Garbage(s.to_string());
    if b.len() < 4 {
        return Err(garbage("ended flows without a count"));
    }
    let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let rest = &b[4..];
    if rest.len() != n.saturating_mul(KEY_LEN) {
        return Err(garbage("ended-flow count does not match the bytes"));
    }
    let u128_at =
        |c: &[u8], o: usize| u128::from_le_bytes(c[o..o + 16].try_into().unwrap_or([0; 16]));
    rest.chunks_exact(KEY_LEN)
        .map(|c| {
            if c[37] > 1 || c[42..] != [0, 0] {
                return Err(garbage("unknown flow-key flags or reserved bytes"));
            }
            Ok(FlowKey {
                src: u128_at(c, 0),
                dst: u128_at(c, 16),
                sport: u16::from_le_bytes([c[32], c[33]]),
                dport: u16::from_le_bytes([c[34], c[35]]),
                proto: c[36],
                v6: c[37] == 1,
                zone: u32::from_le_bytes([c[38], c[39], c[40], c[41]]),
            })
        })
        .collect()
}

/// The replay window of one peer: its newest session and the sequence numbers seen near
/// the highest (a bitmap, as IPsec's anti-replay window, RFC 4303 3.4.3). A new session
/// (the peer restarted) replaces the old one when its datagram is authentic and within
/// the clock window, so an old session's datagrams, replayed, are refused from then on.
#[derive(Debug, Clone, Default)]
pub struct Window {
    session: u64,
    highest: u64,
    seen: [u64; (WINDOW_BITS / 64) as usize],
    /// Sessions this peer has had; an older one is refused.
    retired: Vec<u64>,
}

impl Window {
    /// Accepts `h` at `now_ms` (this clock) unless replayed or stale.
    pub fn accept(&mut self, h: &Header, now_ms: u64) -> Result<(), WireError> {
        let skew = h.sent_ms as i64 - now_ms as i64;
        if skew.unsigned_abs() > CLOCK_WINDOW_MS {
            return Err(WireError::Stale(skew));
        }
        let replay = WireError::Replay {
            session: h.session,
            seq: h.seq,
        };
        if h.session != self.session {
            if self.retired.contains(&h.session) || h.seq == 0 {
                return Err(replay);
            }
            if self.session != 0 {
                self.retired.push(self.session);
                // A bounded memory of old sessions (each lived its clock window at least).
                if self.retired.len() > 16 {
                    self.retired.remove(0);
                }
            }
            *self = Window {
                session: h.session,
                retired: std::mem::take(&mut self.retired),
                ..Window::default()
            };
        }
        if h.seq == 0 || h.seq + WINDOW_BITS <= self.highest {
            return Err(replay);
        }
        if h.seq > self.highest {
            let shift = h.seq - self.highest;
            for s in self.highest + 1..=h.seq.min(self.highest + WINDOW_BITS) {
                self.clear(s);
            }
            let _ = shift;
            self.highest = h.seq;
        } else if self.is_set(h.seq) {
            return Err(replay);
        }
        self.set(h.seq);
        Ok(())
    }

    fn bit(seq: u64) -> (usize, u64) {
        let i = seq % WINDOW_BITS;
        ((i / 64) as usize, 1 << (i % 64))
    }

    fn is_set(&self, seq: u64) -> bool {
        let (w, b) = Self::bit(seq);
        self.seen[w] & b != 0
    }

    fn set(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.seen[w] |= b;
    }

    fn clear(&mut self, seq: u64) {
        let (w, b) = Self::bit(seq);
        self.seen[w] &= !b;
    }
}

#[cfg(test)]
mod tests;
