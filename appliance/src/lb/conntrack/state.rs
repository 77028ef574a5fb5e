//! Connection states and the rules that move a flow between them.
//!
//! A flow earns state in two steps. Its first packet (a TCP SYN, or any first UDP datagram)
//! makes an *embryonic* entry: cheap, short-lived and the first to be evicted, because a
//! spoofed source can send one packet as easily as a client. It becomes *established* when
//! it has shown that a real client stands behind it, and how it shows that depends on what
//! the mode can see:
//!
//! - **NAT and FullNAT** see both directions, so they see the handshake: a TCP flow is
//!   established by the client's ACK after the backend's SYN-ACK passed, a UDP flow by the
//!   backend's first answer. A blind spoofer never sees the SYN-ACK and cannot answer the
//!   backend, so it cannot get past embryonic.
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
    /// Embryonic UDP: one datagram so far.
    UdpNew,
}

/// Number of states, which is also the number of timeout classes.
pub const CLASSES: usize = 5;

impl FlowState {
    /// All states, in [`FlowState::class`] order.
    pub const ALL: [FlowState; CLASSES] = [
        FlowState::TcpSyn,
        FlowState::TcpEstablished,
        FlowState::TcpClosing,
        FlowState::Udp,
        FlowState::UdpNew,
    ];

    /// The state's name for traces, metrics and the console.
    pub fn name(self) -> &'static str {
        match self {
            FlowState::TcpSyn => "syn",
            FlowState::TcpEstablished => "established",
            FlowState::TcpClosing => "closing",
            FlowState::Udp => "udp",
            FlowState::UdpNew => "udp_new",
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
pub fn advance(cur: FlowState, m: u8, flags: u8, seen: Seen) -> (FlowState, u8) {
    use FlowState as S;
    match cur {
        S::Udp => (S::Udp, m),
        // A second datagram of the flow, either way, earns it: the backend's answer where
        // the mode sees it, or the client's next one. One-way services (syslog, statsd,
        // NetFlow) never answer and must still be established and cached; a spoofed flood
        // that moves to a new source port every datagram stays embryonic.
        S::UdpNew => (S::Udp, m),
        _ if flags & (tcp_flags::FIN | tcp_flags::RST) != 0 => (S::TcpClosing, m),
        // A fresh SYN on a closing tuple is a new connection on the same backend.
        S::TcpClosing if !seen.reverse && is_syn(flags) => (S::TcpSyn, 0),
        S::TcpClosing | S::TcpEstablished => (cur, m),
        S::TcpSyn => syn_advance(m, flags, seen),
    }
}

/// [`advance`] for an embryonic TCP flow (no FIN or RST in `flags`).
fn syn_advance(m: u8, flags: u8, seen: Seen) -> (FlowState, u8) {
    use FlowState as S;
    const SYN_ACK: u8 = tcp_flags::SYN | tcp_flags::ACK;
    if seen.reverse {
        let m = if flags & SYN_ACK == SYN_ACK {
            m | marks::REPLY
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
        return if m & marks::REPLY != 0 {
            (S::TcpEstablished, m)
        } else {
            (S::TcpSyn, m)
        };
    }
    if seen.payload || m & marks::FOLLOWED != 0 {
        (S::TcpEstablished, m)
    } else {
        (S::TcpSyn, m | marks::FOLLOWED)
    }
}

#[cfg(test)]
mod tests {
    use super::tcp_flags::{ACK, FIN, RST, SYN};
    use super::*;

    const FWD_NAT: Seen = Seen {
        reverse: false,
        both_ways: true,
        payload: false,
    };
    const REV_NAT: Seen = Seen {
        reverse: true,
        ..FWD_NAT
    };
    const FWD_DR: Seen = Seen {
        both_ways: false,
        ..FWD_NAT
    };

    fn run(seq: &[(u8, Seen)], first: FlowState) -> FlowState {
        let (mut s, mut m) = (first, 0);
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
    fn udp_needs_an_answer_or_a_second_datagram() {
        assert_eq!(run(&[], FlowState::UdpNew), FlowState::UdpNew);
        assert_eq!(run(&[(0, FWD_NAT)], FlowState::UdpNew), FlowState::Udp);
        assert_eq!(run(&[(0, REV_NAT)], FlowState::UdpNew), FlowState::Udp);
        assert_eq!(run(&[(0, FWD_DR)], FlowState::UdpNew), FlowState::Udp);
    }

    #[test]
    fn fin_rst_close_and_syn_reopens() {
        for s in [FlowState::TcpSyn, FlowState::TcpEstablished] {
            assert_eq!(run(&[(RST, FWD_NAT)], s), FlowState::TcpClosing);
            assert_eq!(run(&[(FIN | ACK, REV_NAT)], s), FlowState::TcpClosing);
        }
        assert_eq!(
            run(&[(SYN, FWD_NAT)], FlowState::TcpClosing),
            FlowState::TcpSyn
        );
        // The reopened flow needs a new handshake: the old REPLY mark is gone.
        let (s, m) = advance(FlowState::TcpClosing, marks::REPLY, SYN, FWD_NAT);
        assert_eq!(advance(s, m, ACK, FWD_NAT).0, FlowState::TcpSyn);
    }
}
