//! The fragment table: what the first fragment of a NAT or FullNAT datagram decided, kept
//! for the fragments that follow it.
//!
//! Only the first fragment carries the ports, so only it can be balanced and NATed; the
//! later ones are found here by (source, destination, protocol, IP identification) and get
//! the same addresses and next hop (their bytes are the middle of the datagram: no L4 header
//! to rewrite, and the L4 checksum, which covers the whole datagram, was fixed in the first
//! fragment). The table is per worker (all fragments of a datagram reach one worker, see
//! `owner`), fixed in size ([`SLOTS`] entries in sets of [`WAYS`], allocated once) and each
//! entry lives [`TIMEOUT_NS`] or until its datagram is complete. A full set evicts its
//! oldest entry (counted). Each entry remembers the byte ranges it has forwarded, so an
//! overlapping or inconsistent fragment (the tiny-fragment and overlap attacks of RFC 1858,
//! a duplicate, a piece past the datagram's end) is dropped rather than forwarded, and a
//! datagram in more than [`MAX_PIECES`] pieces is dropped once it exceeds that.
//!
//! Fragments that arrive before their first fragment are dropped and counted
//! (`fragment_no_first`): holding them would need frame buffers the datapath gives back
//! after each batch. Linux, the usual sender, emits the first fragment first.

use super::DropReason;
use crate::tables::NextHop;

/// Entries per worker (a power of two).
pub const SLOTS: usize = 1024;
/// Entries per set: a key may live in any of the [`WAYS`] slots of its set.
const WAYS: usize = 4;
/// How long a datagram's decision is kept for its later fragments.
pub const TIMEOUT_NS: u64 = 2_000_000_000;
/// Fragments one datagram may have (a 9000-byte datagram over a 1280-byte IPv6 path is 8).
pub const MAX_PIECES: usize = 16;

/// A datagram's identity: the fields RFC 791 / RFC 8200 say identify its fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FragKey {
    /// Source address (IPv4-mapped for IPv4).
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// IPv4 identification (16 bits) or IPv6 fragment identification.
    pub ident: u32,
    /// Upper-layer protocol.
    pub proto: u8,
    /// IPv6.
    pub v6: bool,
}

impl FragKey {
    fn hash(&self) -> u64 {
        use crate::hash::mix64;
        let a = (self.src as u64) ^ ((self.src >> 64) as u64).rotate_left(17);
        let b = (self.dst as u64) ^ ((self.dst >> 64) as u64).rotate_left(29);
        mix64(a ^ mix64(b ^ (u64::from(self.ident) << 8 | u64::from(self.proto))))
    }
}

/// What the first fragment was rewritten to, for its later fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// New source address, when rewritten.
    pub src: Option<u128>,
    /// New destination address, when rewritten.
    pub dst: Option<u128>,
    /// MACs and egress interface.
    pub next_hop: NextHop,
    /// VIP slot (for the counters).
    pub vip: u32,
    /// Backend slot (for the counters).
    pub backend: u32,
}

/// One fragment's place in its datagram: payload bytes `start..end` after the IP header
/// (and IPv6 Fragment header), and whether it is the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Offset of its first payload byte in the datagram.
    pub start: u32,
    /// Offset after its last payload byte.
    pub end: u32,
    /// More Fragments is clear: this piece ends the datagram.
    pub last: bool,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: FragKey,
    born: u64,
    rewrite: Rewrite,
    pieces: [(u32, u32); MAX_PIECES],
    n: u8,
    /// The datagram's end, once its last piece was seen.
    total: Option<u32>,
    got: u32,
}

impl Entry {
    /// Accepts `p` if it overlaps nothing seen and agrees with the datagram's end; true when
    /// the datagram is then complete.
    fn accept(&mut self, p: Piece) -> Result<bool, DropReason> {
        let seen = &self.pieces[..usize::from(self.n)];
        if seen.iter().any(|&(s, e)| p.start < e && s < p.end) {
            return Err(DropReason::FragmentOverlap);
        }
        let max_end = seen.iter().map(|&(_, e)| e).max().unwrap_or(0);
        let bad_end = match (self.total, p.last) {
            (Some(t), _) if p.end > t => true,
            (Some(_), true) => true,
            (Some(_), false) => false,
            (None, true) => p.end < max_end,
            (None, false) => false,
        };
        if bad_end {
            return Err(DropReason::FragmentOverlap);
        }
        if usize::from(self.n) == MAX_PIECES {
            return Err(DropReason::FragmentOversize);
        }
        self.pieces[usize::from(self.n)] = (p.start, p.end);
        self.n += 1;
        self.got += p.end - p.start;
        if p.last {
            self.total = Some(p.end);
        }
        Ok(self.total == Some(self.got))
    }
}

/// Counters of the table itself (the drops are [`DropReason`]s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FragStats {
    /// First fragments whose decision was remembered.
    pub tracked: u64,
    /// Later fragments rewritten from a remembered decision.
    pub rewritten: u64,
    /// Datagrams whose every byte went through.
    pub completed: u64,
    /// Live entries evicted from a full set for a new datagram.
    pub evicted: u64,
}

impl FragStats {
    /// Adds `o`'s counts to these (summing workers).
    pub fn add(&mut self, o: &FragStats) {
        self.tracked += o.tracked;
        self.rewritten += o.rewritten;
        self.completed += o.completed;
        self.evicted += o.evicted;
    }
}

/// A worker's fragment table (see the module docs).
#[derive(Debug, Clone)]
pub struct FragTable {
    slots: Vec<Option<Entry>>,
    /// Its counters.
    pub stats: FragStats,
}

impl Default for FragTable {
    fn default() -> Self {
        FragTable {
            slots: vec![None; SLOTS],
            stats: FragStats::default(),
        }
    }
}

impl FragTable {
    fn set(&self, key: &FragKey) -> std::ops::Range<usize> {
        let s = (key.hash() as usize) & (SLOTS / WAYS - 1);
        s * WAYS..s * WAYS + WAYS
    }

    fn live(e: &Option<Entry>, now: u64) -> bool {
        e.is_some_and(|e| now.saturating_sub(e.born) < TIMEOUT_NS)
    }

    /// Remembers the first fragment's decision (`p` is the first fragment's piece), over
    /// an entry of the same key if there is one (the caller refuses a first fragment whose
    /// key is live: [`FragTable::contains`]).
    pub fn insert(&mut self, key: FragKey, rewrite: Rewrite, p: Piece, now: u64) {
        let set = self.set(&key);
        let same = self.find(&key, now);
        let free = same.or_else(|| set.clone().find(|&i| !Self::live(&self.slots[i], now)));
        let slot = match free {
            Some(i) => i,
            None => {
                self.stats.evicted += 1;
                let oldest = set.min_by_key(|&i| self.slots[i].map_or(0, |e| e.born));
                oldest.unwrap_or(0)
            }
        };
        let mut e = Entry {
            key,
            born: now,
            rewrite,
            pieces: [(0, 0); MAX_PIECES],
            n: 0,
            total: None,
            got: 0,
        };
        // The first piece of an empty entry always fits.
        let _ = e.accept(p);
        self.slots[slot] = Some(e);
        self.stats.tracked += 1;
    }

    /// Whether a live entry holds `key` (a first fragment for it again is a duplicate, or
    /// an identification reused while its datagram is incomplete).
    pub fn contains(&self, key: &FragKey, now: u64) -> bool {
        self.find(key, now).is_some()
    }

    fn find(&self, key: &FragKey, now: u64) -> Option<usize> {
        self.set(key).find(|&i| {
            Self::live(&self.slots[i], now) && self.slots[i].is_some_and(|e| e.key == *key)
        })
    }

    /// The decision for a later fragment `p` of `key`: `None` when no first fragment was
    /// seen (or its entry timed out), `Err` when `p` overlaps or contradicts what went
    /// through. A datagram whose every byte went through is forgotten.
    pub fn later(
        &mut self,
        key: &FragKey,
        p: Piece,
        now: u64,
    ) -> Option<Result<Rewrite, DropReason>> {
        let i = self.find(key, now)?;
        let e = self.slots[i].as_mut()?;
        let rewrite = e.rewrite;
        Some(match e.accept(p) {
            Ok(done) => {
                self.stats.rewritten += 1;
                if done {
                    self.stats.completed += 1;
                    self.slots[i] = None;
                }
                Ok(rewrite)
            }
            Err(r) => Err(r),
        })
    }
}

/// Which worker a FullNAT return datagram's first fragment was handed to, remembered by the
/// receiving worker for the later fragments (which carry no port to tell the owner by).
/// Direct-mapped and overwritten freely: a stale slot only misroutes a fragment whose first
/// fragment was never seen, which its owner would drop anyway.
#[derive(Debug, Clone)]
pub struct FragOwners {
    slots: Vec<Option<(FragKey, u16)>>,
}

impl Default for FragOwners {
    fn default() -> Self {
        FragOwners {
            slots: vec![None; SLOTS],
        }
    }
}

impl FragOwners {
    fn slot(key: &FragKey) -> usize {
        (key.hash() as usize) & (SLOTS - 1)
    }

    /// Notes that `key`'s datagram belongs to worker `owner`.
    pub fn remember(&mut self, key: FragKey, owner: u16) {
        self.slots[Self::slot(&key)] = Some((key, owner));
    }

    /// The worker `key`'s first fragment went to.
    pub fn recall(&self, key: &FragKey) -> Option<u16> {
        match self.slots[Self::slot(key)] {
            Some((k, o)) if k == *key => Some(o),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::MacAddr;

    fn key(ident: u32) -> FragKey {
        FragKey {
            src: 1,
            dst: 2,
            ident,
            proto: 17,
            v6: false,
        }
    }

    fn rw(vip: u32) -> Rewrite {
        Rewrite {
            src: None,
            dst: Some(9),
            next_hop: NextHop {
                ifindex: 2,
                src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
                dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            },
            vip,
            backend: 0,
        }
    }

    fn piece(start: u32, end: u32, last: bool) -> Piece {
        Piece { start, end, last }
    }

    #[test]
    fn later_fragments_get_the_first_ones_decision_until_the_datagram_is_whole() {
        let mut t = FragTable::default();
        assert_eq!(t.later(&key(1), piece(1480, 2960, true), 0), None);
        t.insert(key(1), rw(3), piece(0, 1480, false), 0);
        assert_eq!(
            t.later(&key(2), piece(1480, 2960, true), 0),
            None,
            "other id"
        );
        assert_eq!(
            t.later(&key(1), piece(1480, 2960, false), 1),
            Some(Ok(rw(3)))
        );
        assert_eq!(
            t.later(&key(1), piece(2960, 3000, true), 2),
            Some(Ok(rw(3)))
        );
        assert_eq!(t.stats.completed, 1);
        assert_eq!(
            t.later(&key(1), piece(2960, 3000, true), 3),
            None,
            "forgotten"
        );
    }

    #[test]
    fn overlaps_duplicates_and_contradictions_are_refused() {
        let mut t = FragTable::default();
        t.insert(key(1), rw(0), piece(0, 1480, false), 0);
        let overlap = Some(Err(DropReason::FragmentOverlap));
        assert_eq!(
            t.later(&key(1), piece(8, 16, false), 0),
            overlap,
            "RFC 1858"
        );
        assert!(
            t.contains(&key(1), 0),
            "a first fragment again is a duplicate"
        );
        assert!(!t.contains(&key(2), 0));
        assert_eq!(
            t.later(&key(1), piece(2960, 3000, true), 0),
            Some(Ok(rw(0)))
        );
        assert_eq!(
            t.later(&key(1), piece(3000, 3008, false), 0),
            overlap,
            "past the end"
        );
        assert_eq!(
            t.later(&key(1), piece(1480, 2000, true), 0),
            overlap,
            "two ends"
        );
        assert_eq!(
            t.later(&key(1), piece(1480, 2960, false), 0),
            Some(Ok(rw(0)))
        );
        // Too many pieces.
        t.insert(key(5), rw(0), piece(0, 8, false), 0);
        for i in 1..MAX_PIECES as u32 {
            assert_eq!(
                t.later(&key(5), piece(i * 8, i * 8 + 8, false), 0),
                Some(Ok(rw(0)))
            );
        }
        assert_eq!(
            t.later(&key(5), piece(800, 808, false), 0),
            Some(Err(DropReason::FragmentOversize))
        );
    }

    #[test]
    fn entries_time_out_and_a_full_set_evicts_its_oldest() {
        let mut t = FragTable::default();
        t.insert(key(1), rw(0), piece(0, 8, false), 0);
        assert_eq!(
            t.later(&key(1), piece(8, 16, false), TIMEOUT_NS),
            None,
            "expired"
        );
        // Many datagrams at once: the table stays its size and evicts.
        for i in 0..(SLOTS as u32 * 2) {
            t.insert(
                key(100 + i),
                rw(i),
                piece(0, 8, false),
                TIMEOUT_NS + u64::from(i),
            );
        }
        assert!(t.stats.evicted >= SLOTS as u64, "{:?}", t.stats);
        let last = 100 + SLOTS as u32 * 2 - 1;
        let at = TIMEOUT_NS + u64::from(SLOTS as u32 * 2);
        assert_eq!(
            t.later(&key(last), piece(8, 16, true), at),
            Some(Ok(rw(last - 100)))
        );
    }

    #[test]
    fn owners_are_recalled_by_key() {
        let mut o = FragOwners::default();
        assert_eq!(o.recall(&key(1)), None);
        o.remember(key(1), 3);
        assert_eq!(o.recall(&key(1)), Some(3));
        assert_eq!(o.recall(&key(2)), None);
    }
}
