//! Where a TCP flow's sequence spaces stand, as far as the mode sees them: what each side
//! sent last and what it acknowledged last. NAT and FullNAT see both directions; DR and
//! tunnel only the client's. A FIN or RST moves a flow's state only when it lands where
//! its sender's sequence space says it must (RFC 5961 3.2): an off-path spoofer, who
//! cannot see the traffic, would have to guess a number in 2^32.

/// A flow's sequence bookkeeping. All values are in the sender's own sequence space as
/// it appears on the wire on its side of the appliance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Track {
    /// The client's next sequence number: the highest `seq + len` of its segments (a SYN
    /// and a FIN count one).
    pub client_next: u32,
    /// The highest acknowledgement number the client sent (the backend's space).
    pub client_acked: u32,
    /// The backend's next sequence number (NAT and FullNAT).
    pub backend_next: u32,
    /// The highest acknowledgement number the backend sent (the client's space as the
    /// backend sees it).
    pub backend_acked: u32,
    /// [`seen`] bits: which of the four are known, and which side sent a FIN.
    pub seen: u8,
}

/// [`Track::seen`] bits.
pub mod seen {
    /// `client_next` is known (the client's SYN passed).
    pub const CLIENT: u8 = 0x01;
    /// `client_acked` is known.
    pub const CLIENT_ACK: u8 = 0x02;
    /// `backend_next` is known (the backend's SYN-ACK passed).
    pub const BACKEND: u8 = 0x04;
    /// `backend_acked` is known.
    pub const BACKEND_ACK: u8 = 0x08;
    /// The client sent a FIN that was in its window.
    pub const CLIENT_FIN: u8 = 0x10;
    /// The backend sent a FIN that was in its window.
    pub const BACKEND_FIN: u8 = 0x20;
    /// An RST that was in its sender's window passed.
    pub const RESET: u8 = 0x40;
    /// Every bit defined so far (a record with others is from a newer writer).
    pub const ALL: u8 = 0x7f;
}

/// How far below what a side sent (or what the other side acknowledged) a FIN may start,
/// and how far past it: retransmitted and reordered FINs of a real endpoint land here; a
/// blind guess does one time in 2^32 / (2 * 2^16).
pub const FIN_SLACK: u32 = 1 << 16;

/// How far one segment may move a side's next sequence number on: more than any one
/// segment (64 KiB with segmentation offload) and any gap the flow cache leaves between two
/// segments the engine sees. A spoofed segment past it moves nothing.
pub const MAX_ADVANCE: u32 = 1 << 20;

/// One TCP segment as the tracker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segment {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (meaningful with ACK in `flags`).
    pub ack: u32,
    /// Payload bytes.
    pub len: u32,
    /// TCP flags.
    pub flags: u8,
}

/// What a FIN or RST of a segment means for the flow's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    /// Neither FIN nor RST.
    None,
    /// A FIN or RST where its sender's sequence space says it must be.
    InWindow,
    /// A FIN or RST off its sender's sequence space: forwarded, it moves nothing.
    OutOfWindow,
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// `a` comes after `b` in sequence space (RFC 1982 serial arithmetic).
#[inline]
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `x` lies in `[lo, hi]` in sequence space.
#[inline]
fn within(x: u32, lo: u32, hi: u32) -> bool {
    x.wrapping_sub(lo) <= hi.wrapping_sub(lo)
}

impl Track {
    /// The tracker of a flow whose first segment (the client's SYN) is `s`.
    pub fn opened(s: &Segment) -> Track {
        Track {
            client_next: s.seq.wrapping_add(1),
            seen: seen::CLIENT,
            ..Track::default()
        }
    }

    /// Judges segment `s` from the client (`from_client`) or the backend, then records
    /// it: a FIN or RST is judged before the segment can move anything, and only an
    /// in-window one is recorded. `shift` is what the client's sequence numbers gain on
    /// their way to the backend (a PROXY header sent), so the backend's acknowledgements
    /// are read back in the client's space.
    pub fn segment(&mut self, from_client: bool, s: &Segment, shift: u32) -> Teardown {
        let verdict = self.judge(from_client, s, shift);
        if verdict != Teardown::OutOfWindow {
            self.record(from_client, s);
            if verdict == Teardown::InWindow {
                if s.flags & RST != 0 {
                    self.seen |= seen::RESET;
                } else if from_client {
                    self.seen |= seen::CLIENT_FIN;
                } else {
                    self.seen |= seen::BACKEND_FIN;
                }
            }
        }
        verdict
    }

    /// Moves one side's fields on to what a flow cache saw of them (`next`: the end of its
    /// furthest segment; `acked`: its highest acknowledgement), where that lies after them:
    /// the cache moved them a segment at a time by this module's rules.
    pub fn caught_up(&mut self, from_client: bool, next: Option<u32>, acked: Option<u32>) {
        let (n, a, nk, ak) = if from_client {
            (
                &mut self.client_next,
                &mut self.client_acked,
                seen::CLIENT,
                seen::CLIENT_ACK,
            )
        } else {
            (
                &mut self.backend_next,
                &mut self.backend_acked,
                seen::BACKEND,
                seen::BACKEND_ACK,
            )
        };
        if let Some(x) = next
            && self.seen & nk != 0
            && after(x, *n)
        {
            *n = x;
        }
        if let Some(x) = acked
            && self.seen & ak != 0
            && after(x, *a)
        {
            *a = x;
        }
    }

    /// Whether both sides sent a FIN that counted, or an RST did.
    pub fn closed(&self) -> bool {
        self.seen & seen::RESET != 0
            || self.seen & (seen::CLIENT_FIN | seen::BACKEND_FIN)
                == (seen::CLIENT_FIN | seen::BACKEND_FIN)
    }

    /// The sender's next sequence number and the other side's last acknowledgement of it
    /// (in the sender's space), where known.
    fn sides(&self, from_client: bool, shift: u32) -> (Option<u32>, Option<u32>) {
        if from_client {
            (
                (self.seen & seen::CLIENT != 0).then_some(self.client_next),
                (self.seen & seen::BACKEND_ACK != 0)
                    .then(|| self.backend_acked.wrapping_sub(shift)),
            )
        } else {
            (
                (self.seen & seen::BACKEND != 0).then_some(self.backend_next),
                (self.seen & seen::CLIENT_ACK != 0).then_some(self.client_acked),
            )
        }
    }

    fn judge(&self, from_client: bool, s: &Segment, shift: u32) -> Teardown {
        if s.flags & (FIN | RST) == 0 {
            return Teardown::None;
        }
        let (next, acked) = self.sides(from_client, shift);
        // A side whose sequence space is unknown (a flow from before tracking) cannot be
        // judged: its FIN and RST count as they always did.
        let Some(next) = next else {
            return Teardown::InWindow;
        };
        let ok = if s.flags & RST != 0 {
            // RFC 5961 3.2: exactly where the receiver expects it. An endpoint resets from
            // its next sequence number, or (a host without the connection) from the
            // acknowledgement of the segment it answers, which is the other side's.
            s.seq == next || acked == Some(s.seq)
        } else {
            let lo = match acked {
                Some(a) if after(next, a) => a,
                _ => next,
            };
            within(
                s.seq,
                lo.wrapping_sub(FIN_SLACK),
                next.wrapping_add(FIN_SLACK),
            )
        };
        if ok {
            Teardown::InWindow
        } else {
            Teardown::OutOfWindow
        }
    }

    fn record(&mut self, from_client: bool, s: &Segment) {
        let end = s
            .seq
            .wrapping_add(s.len)
            .wrapping_add(u32::from(s.flags & SYN != 0))
            .wrapping_add(u32::from(s.flags & FIN != 0));
        let (next, known, acked, ack_known) = if from_client {
            (
                &mut self.client_next,
                seen::CLIENT,
                &mut self.client_acked,
                seen::CLIENT_ACK,
            )
        } else {
            (
                &mut self.backend_next,
                seen::BACKEND,
                &mut self.backend_acked,
                seen::BACKEND_ACK,
            )
        };
        if self.seen & known == 0 {
            // A side's space starts at its SYN (the client's SYN, the backend's SYN-ACK).
            if s.flags & SYN == 0 {
                return;
            }
            *next = end;
            self.seen |= known;
        } else if s.flags & SYN != 0 {
            // A SYN on a known space (a retransmission, or a spoofer's) moves nothing.
            return;
        } else if after(end, *next) && end.wrapping_sub(*next) <= MAX_ADVANCE {
            *next = end;
        }
        if s.flags & ACK != 0 {
            if self.seen & ack_known == 0 {
                *acked = s.ack;
                self.seen |= ack_known;
            } else if after(s.ack, *acked) && s.ack.wrapping_sub(*acked) <= MAX_ADVANCE {
                *acked = s.ack;
            }
        }
    }
}
