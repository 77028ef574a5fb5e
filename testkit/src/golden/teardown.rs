//! Teardown rows (issue 42): a FIN or RST moves a flow's state only where its sender's
//! sequence space says it must be (RFC 5961 3.2). An off-path spoofer's RST or FIN is
//! forwarded like any segment (the endpoint answers it with a challenge ACK) and closes
//! nothing, counted; the endpoints' own still close, in every mode that keeps state.
//!
//! Each connection is a consistent conversation: the client's ISN is [`ISN`], the backend's
//! SYN-ACK has sequence number [`PEER_ISN`] (what every ACK the golden builder makes
//! acknowledges), so the handshake is one the engine accepts as complete.

use lb::{FlowState, Tables};

use super::build::{ACK, PEER_ISN, Pkt, SYN, SYNACK, TCP, tcp};
use super::setup::{flow_hash, mac_of, snat_port};
use super::{BACKENDS, Counter, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    nat4_rst_off,
    nat4_rst_at_next,
    nat4_rst_at_acked,
    nat4_fin_off,
    nat4_backend_rst_off,
    nat4_backend_fin_after_client_fin,
    nat4_one_fin_leaves_it_open,
    nat6_rst_off,
    fnat4_rst_off,
    fnat4_backend_rst_off,
    dr4_rst_off,
    dr4_rst_at_next,
    dr6_fin_off,
];

const FIN: u8 = 0x01;
const RST: u8 = 0x04;
/// The client's initial sequence number.
const ISN: u32 = 1000;
/// How far off an off-path spoofer's guess lands: a quarter of the sequence space.
const OFF: u32 = 1 << 30;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nat,
    FullNat,
    Dr,
}

/// One connection of this file: who talks to whom through which VIP.
struct Conn {
    vip_name: &'static str,
    mode: Mode,
    client: &'static str,
    cport: u16,
    vip: &'static str,
    vport: u16,
    backend: &'static str,
    bport: u16,
    snat: &'static str,
}

const NAT4: Conn = Conn {
    vip_name: "nat4",
    mode: Mode::Nat,
    client: "198.51.100.7",
    cport: 41000,
    vip: "192.0.2.10",
    vport: 80,
    backend: "10.0.0.1",
    bport: 8080,
    snat: "",
};
const NAT6: Conn = Conn {
    vip_name: "nat6",
    client: "2001:db8:c::7",
    vip: "2001:db8::10",
    backend: "2001:db8:a::1",
    ..NAT4
};
const FNAT4: Conn = Conn {
    vip_name: "fnat4",
    mode: Mode::FullNat,
    vip: "192.0.2.20",
    vport: 443,
    backend: "10.0.0.3",
    bport: 8443,
    snat: "10.1.0.1",
    ..NAT4
};
const DR4: Conn = Conn {
    vip_name: "dr4",
    mode: Mode::Dr,
    vip: "192.0.2.30",
    backend: "",
    bport: 80,
    ..NAT4
};
const DR6: Conn = Conn {
    vip_name: "dr6",
    client: "2001:db8:c::7",
    vip: "2001:db8::30",
    ..DR4
};

impl Conn {
    /// The FullNAT local port of the connection.
    fn lport(&self) -> u16 {
        let h = flow_hash(self.client, self.vip, self.cport, self.vport, TCP);
        snat_port(TCP, self.backend, self.bport, self.snat, h)
    }

    /// A client → VIP segment.
    fn client(&self, flags: u8, seq: u32) -> Pkt {
        Pkt::new(
            self.client,
            self.vip,
            TCP,
            tcp(self.cport, self.vport, flags, seq, b""),
        )
    }

    /// A backend → client segment as it arrives (NAT, FullNAT).
    fn backend(&self, t: &Tables, flags: u8, seq: u32) -> Pkt {
        let (to, port) = match self.mode {
            Mode::FullNat => (self.snat, self.lport()),
            _ => (self.client, self.cport),
        };
        Pkt::new(
            self.backend,
            to,
            TCP,
            tcp(self.bport, port, flags, seq, b""),
        )
        .macs(OUR_MAC, mac_of(t, self.vip_name))
    }

    /// A client segment as the appliance forwards it.
    fn forwarded(&self, t: &Tables, p: &Pkt) -> Vec<u8> {
        let out = p.clone().macs(mac_of(t, self.vip_name), OUR_MAC);
        match self.mode {
            Mode::Dr => out.build(),
            Mode::Nat => out
                .dport(self.bport)
                .dst(self.backend)
                .ttl(p.ttl - 1)
                .build(),
            Mode::FullNat => out
                .sport(self.lport())
                .dport(self.bport)
                .src(self.snat)
                .dst(self.backend)
                .ttl(p.ttl - 1)
                .build(),
        }
    }

    /// A backend segment as the appliance returns it to the client.
    fn returned(&self, p: &Pkt) -> Vec<u8> {
        let out = p
            .clone()
            .sport(self.vport)
            .macs(ROUTER_MAC, OUR_MAC)
            .src(self.vip)
            .ttl(p.ttl - 1);
        match self.mode {
            Mode::FullNat => out.dport(self.cport).dst(self.client).build(),
            _ => out.build(),
        }
    }

    /// The handshake done: NAT and FullNAT see the backend's SYN-ACK and the client's ACK
    /// of it; DR sees the client's ACK and its next segment.
    fn open(&self, t: &Tables) -> Vec<Given> {
        let syn = Given::from_client(&self.client(SYN, ISN));
        let ack = Given::from_client(&self.client(ACK, ISN + 1));
        match self.mode {
            Mode::Dr => vec![syn, ack.clone(), ack],
            _ => vec![
                syn,
                Given {
                    frame: self.backend(t, SYNACK, PEER_ISN).build(),
                    ifindex: BACKENDS,
                },
                ack,
            ],
        }
    }

    /// A client segment of this connection, established, as a row.
    fn client_row(&self, t: &Tables, what: &'static str, flags: u8, seq: u32) -> Fixture {
        let p = self.client(flags, seq);
        Fixture::tx(what, p.build(), BACKENDS, self.forwarded(t, &p)).given(self.open(t))
    }

    /// A backend segment of this connection, established, as a row.
    fn backend_row(&self, t: &Tables, what: &'static str, flags: u8, seq: u32) -> Fixture {
        let p = self.backend(t, flags, seq);
        Fixture::tx(what, p.build(), UPLINK, self.returned(&p))
            .arriving_on(BACKENDS)
            .given(self.open(t))
    }
}

fn nat4_rst_off(t: &Tables) -> Fixture {
    NAT4.client_row(
        t,
        "nat4: an rst off the client's sequence space is forwarded and closes nothing",
        RST,
        ISN + 1 + OFF,
    )
    .counting(Counter::RstOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn nat4_rst_at_next(t: &Tables) -> Fixture {
    NAT4.client_row(
        t,
        "nat4: an rst at the client's next sequence number closes the flow",
        RST,
        ISN + 1,
    )
    .leaving(FlowState::TcpClosing)
}

fn nat4_rst_at_acked(t: &Tables) -> Fixture {
    // A host without the connection answers the backend's segment with an RST whose
    // sequence number is that segment's acknowledgement: what the backend acknowledged.
    let mut g = NAT4.open(t);
    g.push(Given {
        frame: NAT4.backend(t, ACK, PEER_ISN + 1).build(),
        ifindex: BACKENDS,
    });
    NAT4.client_row(
        t,
        "nat4: an rst at what the backend acknowledged closes the flow",
        RST,
        ISN + 1,
    )
    .given(g)
    .leaving(FlowState::TcpClosing)
}

fn nat4_fin_off(t: &Tables) -> Fixture {
    NAT4.client_row(
        t,
        "nat4: a fin off the client's sequence space is forwarded and closes nothing",
        FIN | ACK,
        ISN + 1 + OFF,
    )
    .counting(Counter::FinOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn nat4_backend_rst_off(t: &Tables) -> Fixture {
    NAT4.backend_row(
        t,
        "nat4: the backend's rst off its sequence space is returned and closes nothing",
        RST,
        PEER_ISN + 1 + OFF,
    )
    .counting(Counter::RstOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn nat4_backend_fin_after_client_fin(t: &Tables) -> Fixture {
    let mut g = NAT4.open(t);
    g.push(Given::from_client(&NAT4.client(FIN | ACK, ISN + 1)));
    NAT4.backend_row(
        t,
        "nat4: the backend's fin after the client's closes the flow",
        FIN | ACK,
        PEER_ISN + 1,
    )
    .given(g)
    .leaving(FlowState::TcpClosing)
}

fn nat4_one_fin_leaves_it_open(t: &Tables) -> Fixture {
    NAT4.backend_row(
        t,
        "nat4: the backend's fin alone leaves the flow open (half closed)",
        FIN | ACK,
        PEER_ISN + 1,
    )
    .leaving(FlowState::TcpEstablished)
}

fn nat6_rst_off(t: &Tables) -> Fixture {
    NAT6.client_row(
        t,
        "nat6: an rst off the client's sequence space is forwarded and closes nothing",
        RST,
        ISN + 1 + OFF,
    )
    .counting(Counter::RstOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn fnat4_rst_off(t: &Tables) -> Fixture {
    FNAT4
        .client_row(
            t,
            "fnat4: an rst off the client's sequence space is forwarded and closes nothing",
            RST,
            ISN + 1 + OFF,
        )
        .counting(Counter::RstOutOfWindow)
        .leaving(FlowState::TcpEstablished)
}

fn fnat4_backend_rst_off(t: &Tables) -> Fixture {
    FNAT4
        .backend_row(
            t,
            "fnat4: the backend's rst off its sequence space is returned and closes nothing",
            RST,
            PEER_ISN + 1 + OFF,
        )
        .counting(Counter::RstOutOfWindow)
        .leaving(FlowState::TcpEstablished)
}

fn dr4_rst_off(t: &Tables) -> Fixture {
    DR4.client_row(
        t,
        "dr4: an rst off the client's sequence space is forwarded and closes nothing",
        RST,
        ISN + 1 + OFF,
    )
    .counting(Counter::RstOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn dr4_rst_at_next(t: &Tables) -> Fixture {
    DR4.client_row(
        t,
        "dr4: an rst at the client's next sequence number closes the flow",
        RST,
        ISN + 1,
    )
    .leaving(FlowState::TcpClosing)
}

fn dr6_fin_off(t: &Tables) -> Fixture {
    DR6.client_row(
        t,
        "dr6: a fin off the client's sequence space is forwarded and closes nothing",
        FIN | ACK,
        ISN + 1 + OFF,
    )
    .counting(Counter::FinOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}
