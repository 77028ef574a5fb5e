//! Connection states and the rules that move a flow between them.
//!
//! A flow earns state in two steps. Its first packet (a TCP SYN, or any first UDP datagram)
//! makes an *embryonic* entry: cheap, short-lived and the first to be evicted, because a
//! spoofed source can send one packet as easily as a client. It becomes *established* when
//! it has shown that a real client stands behind it, and how it shows that depends on what
//! the mode can see:
//!
//! - **NAT and FullNAT** see both directions, so they see the handshake: a TCP flow is
//!   established by the client's ACK of the backend's SYN-ACK (its acknowledgement number
//!   at most 64 KiB past the SYN-ACK's sequence number, room for data a Fast Open backend
//!   sends before it), a UDP flow by the backend's first answer. A blind spoofer never sees
//!   the SYN-ACK: its ACKs, timed after the SYN-ACK passed or not, match one time in 65,536,
//!   so it cannot get past embryonic (and cannot earn flood mode's refunds, which need an
//!   established flow in the cache).
//! - **DR and tunnel** see only the client's side. A TCP flow is established by its first
//!   segment that carries payload after the SYN, or by its second segment after the SYN
//!   (the ACK that completes the handshake and the next one, for protocols where the server
//!   speaks first); a UDP flow by its second datagram. A spoofer can still do that blind,
//!   but it then pays three packets per established TCP entry instead of one ACK, and every
//!   one-packet flood (SYN, ACK, one-shot UDP) stays in the embryonic classes, where new
//!   flows take its room.
//!
//! Functions here are pure: the table applies what they return.

/// Connection state, which selects the idle timeout and the LRU list (timeout class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// Embryonic TCP: a SYN was seen, the flow has not earned established yet.
    TcpSyn,
    /// Established TCP: the handshake completed (or the flow proved itself, DR and tunnel).
    TcpEstablished,
    /// FIN or RST seen.
    TcpClosing,
    /// Established UDP: an answer came back (NAT, FullNAT) or a second datagram (DR, tunnel).
    Udp,
    /// Embryonic UDP: one datagram so far (and, where the mode sees both ways, no answer).
    UdpNew,
    /// One-way UDP (DR, tunnel): the client sent more than one datagram, and nothing proves
    /// a real client stands behind it (the mode cannot see an answer). Kept as long as an
    /// established UDP flow, but reclaimed for new flows, after the embryonic and closing
    /// ones.
    UdpOneWay,
}

/// Number of states, which is also the number of timeout classes.
pub const CLASSES: usize = 6;

impl FlowState {
    /// All states, in [`FlowState::class`] order.
    pub const ALL: [FlowState; CLASSES] = [
        FlowState::TcpSyn,
        FlowState::TcpEstablished,
        FlowState::TcpClosing,
        FlowState::Udp,
        FlowState::UdpNew,
        FlowState::UdpOneWay,
    ];

    /// The state's name for traces, metrics and the console.
    pub fn name(self) -> &'static str {
        match self {
            FlowState::TcpSyn => "syn",
            FlowState::TcpEstablished => "established",
            FlowState::TcpClosing => "closing",
            FlowState::Udp => "udp",
            FlowState::UdpNew => "udp_new",
            FlowState::UdpOneWay => "udp_oneway",
        }
    }

    /// Index of the state's timeout class (its LRU list and fill counter).
    #[inline(always)]
    pub fn class(self) -> usize {
        self as usize
    }

    /// Counted as an active connection by the LVS schedulers.
    pub(super) fn is_active(self) -> bool {
        self == FlowState::TcpEstablished
    }

    /// Embryonic: the first to go when the table is full.
    pub fn is_embryonic(self) -> bool {
        matches!(self, FlowState::TcpSyn | FlowState::UdpNew)
    }

    /// Established: never evicted to make room for a new flow.
    pub fn is_established(self) -> bool {
        matches!(self, FlowState::TcpEstablished | FlowState::Udp)
    }
}

/// TCP flag bits as they appear in the header's flags byte.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// True for a connection-opening segment: SYN without ACK (and without FIN or RST).
#[inline(always)]
pub fn is_syn(flags: u8) -> bool {
    flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN | tcp_flags::RST) == tcp_flags::SYN
}

/// The state a flow's first packet gives it: a SYN or a UDP datagram makes an embryonic
/// entry; anything else earns no state (`None`: the stateless answer).
pub fn first_state(tcp: bool, flags: u8) -> Option<FlowState> {
    if !tcp {
        Some(FlowState::UdpNew)
    } else if is_syn(flags) {
        Some(FlowState::TcpSyn)
    } else {
        None
    }
}

/// What a packet tells the state machine, besides its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// Return traffic (backend → client).
    pub reverse: bool,
    /// The mode sees both directions (NAT, FullNAT).
    pub both_ways: bool,
    /// The segment carries payload (TCP) or any datagram (UDP).
    pub payload: bool,
    /// TCP: the segment's sequence number (0 for UDP).
    pub seq: u32,
    /// TCP: the segment's acknowledgement number (0 for UDP).
    pub ack: u32,
    /// TCP: payload bytes (0 for UDP).
    pub len: u32,
    /// The segment ends the connection: an RST, or the FIN that leaves no side open
    /// (the second of a mode that sees both ways, the client's in DR and tunnel), each
    /// where its sender's sequence space says it must be ([`super::track`]). Set by
    /// [`super::ConnTable::step`].
    pub closes: bool,
}

/// How far past the backend's SYN-ACK the handshake's ACK may acknowledge: data a TCP Fast
/// Open backend sends with or right after its SYN-ACK (an initial window, about 15 KB on
/// Linux) is acknowledged with it.
pub const HANDSHAKE_ACK_WINDOW: u32 = 65_536;

/// Per-flow evidence toward established, kept between packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Evidence {
    /// [`marks`] bits.
    pub marks: u8,
    /// With [`marks::REPLY`] on a TCP flow: the backend's SYN-ACK's sequence number plus
    /// one, the least the client's handshake ACK acknowledges.
    pub syn_ack: u32,
}

/// Per-flow evidence the state machine keeps between packets ([`Flow::marks`] bits).
///
/// [`Flow::marks`]: super::Flow::marks
pub mod marks {
    /// The backend's SYN-ACK (TCP) or first answer (UDP) passed.
    pub const REPLY: u8 = 0x01;
    /// One client segment after the SYN passed (DR, tunnel).
    pub const FOLLOWED: u8 = 0x02;
}

/// The next state of a flow in `cur` with evidence `m` after a packet with `flags`
/// (0 for UDP) and `seen`; returns the new state and evidence.
pub fn advance(cur: FlowState, m: Evidence, flags: u8, seen: Seen) -> (FlowState, Evidence) {
    use FlowState as S;
    match cur {
        S::Udp => (S::Udp, m),
        // Where the mode sees both ways, only the backend's answer earns a UDP flow: a
        // spoofer can send a second datagram as easily as a first. Where it sees only the
        // client's (DR, tunnel), a second datagram makes the flow one-way: kept for the UDP
        // timeout and cached, but reclaimed before established flows, so a two-datagram
        // spray cannot fill the table for good.
        S::UdpNew | S::UdpOneWay if seen.both_ways => {
            if seen.reverse {
                (S::Udp, m)
            } else {
                (cur, m)
            }
        }
        S::UdpNew | S::UdpOneWay => (S::UdpOneWay, m),
        _ if seen.closes => (S::TcpClosing, m),
        // A SYN on a closing tuple is a new connection: the caller removes the entry and
        // schedules it anew (`lb::process::flow`), so it never reaches this state machine.
        S::TcpClosing | S::TcpEstablished => (cur, m),
        S::TcpSyn => syn_advance(m, flags, seen),
    }
}

/// [`advance`] for an embryonic TCP flow (not closed by this segment).
fn syn_advance(m: Evidence, flags: u8, seen: Seen) -> (FlowState, Evidence) {
    use FlowState as S;
    const SYN_ACK: u8 = tcp_flags::SYN | tcp_flags::ACK;
    if seen.reverse {
        // The latest SYN-ACK counts: a backend that restarted the handshake answers anew.
        let m = if flags & SYN_ACK == SYN_ACK {
            Evidence {
                marks: m.marks | marks::REPLY,
                syn_ack: seen.seq.wrapping_add(1),
            }
        } else {
            m
        };
        return (S::TcpSyn, m);
    }
    if flags & tcp_flags::SYN != 0 || flags & tcp_flags::ACK == 0 {
        // A retransmitted SYN, or a segment no handshake produces: no evidence.
        return (S::TcpSyn, m);
    }
    if seen.both_ways {
        let answers =
            m.marks & marks::REPLY != 0 && seen.ack.wrapping_sub(m.syn_ack) < HANDSHAKE_ACK_WINDOW;
        return if answers {
            (S::TcpEstablished, m)
        } else {
            (S::TcpSyn, m)
        };
    }
    if seen.payload || m.marks & marks::FOLLOWED != 0 {
        (S::TcpEstablished, m)
    } else {
        let m = Evidence {
            marks: m.marks | marks::FOLLOWED,
            ..m
        };
        (S::TcpSyn, m)
    }
}

#[cfg(test)]
mod tests {
    use super::tcp_flags::{ACK, FIN, RST, SYN};
    use super::*;

    /// The backend's initial sequence number in these tests' handshakes.
    const ISN: u32 = 0xffff_fff0;
    /// A client segment that acknowledges the backend's SYN-ACK (sequence `ISN`).
    const FWD_NAT: Seen = Seen {
        reverse: false,
        both_ways: true,
        payload: false,
        seq: 7,
        ack: ISN.wrapping_add(1),
        len: 0,
        closes: false,
    };
    /// A backend segment with sequence `ISN` (its SYN-ACK when the flags say so).
    const REV_NAT: Seen = Seen {
        reverse: true,
        seq: ISN,
        ack: 8,
        ..FWD_NAT
    };
    const FWD_DR: Seen = Seen {
        both_ways: false,
        ..FWD_NAT
    };

    fn run(seq: &[(u8, Seen)], first: FlowState) -> FlowState {
        let (mut s, mut m) = (first, Evidence::default());
        for (f, seen) in seq {
            (s, m) = advance(s, m, *f, *seen);
        }
        s
    }

    #[test]
    fn only_syn_and_udp_make_state() {
        assert_eq!(first_state(true, SYN), Some(FlowState::TcpSyn));
        for f in [ACK, ACK | 0x08, SYN | ACK, FIN | ACK, RST, SYN | RST, 0] {
            assert_eq!(first_state(true, f), None, "flags {f:#x}");
        }
        assert_eq!(first_state(false, 0), Some(FlowState::UdpNew));
    }

    #[test]
    fn nat_needs_the_backends_syn_ack() {
        // Spoofed: SYN then blind ACKs, no SYN-ACK seen.
        let blind = [(ACK, FWD_NAT), (ACK, FWD_NAT), (ACK | 0x08, FWD_NAT)];
        assert_eq!(run(&blind, FlowState::TcpSyn), FlowState::TcpSyn);
        let real = [(SYN | ACK, REV_NAT), (ACK, FWD_NAT)];
        assert_eq!(run(&real, FlowState::TcpSyn), FlowState::TcpEstablished);
        // The backend's ACK without SYN is not the handshake's answer.
        assert_eq!(
            run(&[(ACK, REV_NAT), (ACK, FWD_NAT)], FlowState::TcpSyn),
            FlowState::TcpSyn
        );
    }

    /// A blind spoofer can time its ACK after the backend's SYN-ACK passed but cannot know
    /// its sequence number: only an ACK of the SYN-ACK (or of a Fast Open backend's first
    /// data with it) establishes the flow, across the sequence space's wrap.
    #[test]
    fn nat_needs_the_ack_of_the_backends_syn_ack() {
        let acking = |ack: u32| Seen { ack, ..FWD_NAT };
        let handshake = |ack: u32| {
            run(
                &[(SYN | ACK, REV_NAT), (ACK, acking(ack))],
                FlowState::TcpSyn,
            )
        };
        let first = ISN.wrapping_add(1);
        assert_eq!(handshake(first), FlowState::TcpEstablished);
        assert_eq!(
            handshake(first.wrapping_add(HANDSHAKE_ACK_WINDOW - 1)),
            FlowState::TcpEstablished,
            "a Fast Open backend's data acknowledged with the handshake"
        );
        for blind in [
            ISN.wrapping_sub(1000),
            ISN,
            first.wrapping_sub(1),
            first.wrapping_add(HANDSHAKE_ACK_WINDOW),
            first.wrapping_add(1 << 31),
        ] {
            assert_eq!(handshake(blind), FlowState::TcpSyn, "ack {blind:#x}");
            // Blind ACKs with payload, one after the other, prove nothing either.
            let spoofed = [
                (SYN | ACK, REV_NAT),
                (ACK, acking(blind)),
                (
                    ACK | 0x08,
                    Seen {
                        payload: true,
                        ..acking(blind)
                    },
                ),
            ];
            assert_eq!(run(&spoofed, FlowState::TcpSyn), FlowState::TcpSyn);
        }
        // A backend that answers a retransmitted SYN with a new SYN-ACK: its latest counts.
        let again = Seen { seq: 5, ..REV_NAT };
        let redo = [(SYN | ACK, REV_NAT), (SYN | ACK, again), (ACK, acking(6))];
        assert_eq!(run(&redo, FlowState::TcpSyn), FlowState::TcpEstablished);
        let stale = [(SYN | ACK, REV_NAT), (SYN | ACK, again), (ACK, FWD_NAT)];
        assert_eq!(run(&stale, FlowState::TcpSyn), FlowState::TcpSyn);
    }

    #[test]
    fn dr_needs_payload_or_a_second_segment() {
        let with_data = Seen {
            payload: true,
            ..FWD_DR
        };
        assert_eq!(run(&[(ACK, FWD_DR)], FlowState::TcpSyn), FlowState::TcpSyn);
        assert_eq!(
            run(&[(ACK, FWD_DR), (ACK, FWD_DR)], FlowState::TcpSyn),
            FlowState::TcpEstablished
        );
        assert_eq!(
            run(&[(ACK | 0x08, with_data)], FlowState::TcpSyn),
            FlowState::TcpEstablished
        );
        // Retransmitted SYNs prove nothing.
        assert_eq!(
            run(
                &[(SYN, FWD_DR), (SYN, FWD_DR), (SYN, FWD_DR)],
                FlowState::TcpSyn
            ),
            FlowState::TcpSyn
        );
    }

    #[test]
    fn udp_is_earned_by_the_answer_or_stays_one_way() {
        assert_eq!(run(&[], FlowState::UdpNew), FlowState::UdpNew);
        // Both ways seen: the client's datagrams prove nothing, the backend's answer does.
        let spray = [(0, FWD_NAT), (0, FWD_NAT), (0, FWD_NAT)];
        assert_eq!(run(&spray, FlowState::UdpNew), FlowState::UdpNew);
        assert_eq!(run(&[(0, REV_NAT)], FlowState::UdpNew), FlowState::Udp);
        assert_eq!(
            run(&[(0, FWD_NAT), (0, REV_NAT)], FlowState::UdpNew),
            FlowState::Udp
        );
        // One way seen: a second datagram makes the flow one-way, never established.
        assert_eq!(run(&[(0, FWD_DR)], FlowState::UdpNew), FlowState::UdpOneWay);
        assert_eq!(
            run(&[(0, FWD_DR), (0, FWD_DR)], FlowState::UdpNew),
            FlowState::UdpOneWay
        );
        assert!(!FlowState::UdpOneWay.is_established());
    }

    #[test]
    fn a_closing_segment_closes_whatever_the_state() {
        let closing = Seen {
            closes: true,
            ..FWD_NAT
        };
        for s in [FlowState::TcpSyn, FlowState::TcpEstablished] {
            assert_eq!(run(&[(RST, closing)], s), FlowState::TcpClosing);
            assert_eq!(run(&[(FIN | ACK, closing)], s), FlowState::TcpClosing);
            // A FIN or RST that does not close (out of window, or the first FIN of two)
            // leaves an established flow established.
            if s == FlowState::TcpEstablished {
                assert_eq!(run(&[(RST, FWD_NAT), (FIN | ACK, REV_NAT)], s), s);
            }
        }
        // A closing flow stays closing (a SYN reopens it in the caller, not here).
        assert_eq!(
            run(&[(SYN, FWD_NAT)], FlowState::TcpClosing),
            FlowState::TcpClosing
        );
    }
}
