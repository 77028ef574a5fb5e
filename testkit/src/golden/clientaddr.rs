//! FullNAT rows with the client's address passed on (`client_address`): the PROXY v2
//! header in front of the first data and the sequence shift it brings (both ways, SACK
//! included, a retransmission, a flow that closes before data), and the TOA option on the
//! handshake's ACK; the SYN-ACK's MSS lowered for each. The expected bytes are built from
//! the specifications (HAProxy's proxy-protocol.txt, DPVS's TOA layout), not by the code
//! under test.

use lb::Tables;

use super::build::{ACK, Pkt, SYNACK, TCP};
use super::setup::{flow_hash, mac_of, snat_port};
use super::{BACKENDS, Counter, Fixture, Given, OUR_MAC, ROUTER_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    p4_synack,
    p4_first_data,
    p4_first_data_again,
    p4_later_data,
    p4_backend_ack,
    p4_backend_sack,
    p4_fin_first,
    p4_fin_first_acked,
    p6_first_data,
    p6_backend_ack,
    t4_synack,
    t4_handshake_ack,
    t4_after_backend_data,
    t6_handshake_ack,
    p4_syn_keeps_the_shift,
    p4_rst_off,
];

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSHACK: u8 = 0x18;
/// The client's ISN and the backend's.
const CISN: u32 = 1000;
const BISN: u32 = 5000;
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// One VIP of this file: client, VIP, SNAT address, backend.
struct Vip {
    name: &'static str,
    client: &'static str,
    vip: &'static str,
    snat: &'static str,
    backend: &'static str,
}

const P4: Vip = Vip {
    name: "fnat4p",
    client: "198.51.100.7",
    vip: "192.0.2.21",
    snat: "10.1.0.5",
    backend: "10.0.0.12",
};
const P6: Vip = Vip {
    name: "fnat6p",
    client: "2001:db8:c::7",
    vip: "2001:db8::21",
    snat: "2001:db8:f::5",
    backend: "2001:db8:a::12",
};
const T4: Vip = Vip {
    name: "fnat4t",
    client: "198.51.100.7",
    vip: "192.0.2.22",
    snat: "10.1.0.6",
    backend: "10.0.0.13",
};
const T6: Vip = Vip {
    name: "fnat6t",
    client: "2001:db8:c::7",
    vip: "2001:db8::22",
    snat: "2001:db8:f::6",
    backend: "2001:db8:a::13",
};

/// A TCP segment with explicit acknowledgement number and options (a multiple of 4).
fn seg(sport: u16, dport: u16, flags: u8, seq: u32, ack: u32, opts: &[u8], data: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(data);
    t
}

/// An MSS option.
fn mss(v: u16) -> Vec<u8> {
    let b = v.to_be_bytes();
    vec![2, 4, b[0], b[1]]
}

/// The PROXY v2 header of the spec (section 2.2): client → VIP, TCP over the client's
/// family.
fn proxy_v2(v: &Vip) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21);
    let (c, d) = (super::build::ip(v.client), super::build::ip(v.vip));
    match (c, d) {
        (std::net::IpAddr::V4(c), std::net::IpAddr::V4(d)) => {
            h.extend_from_slice(&[0x11, 0, 12]);
            h.extend_from_slice(&c.octets());
            h.extend_from_slice(&d.octets());
        }
        (std::net::IpAddr::V6(c), std::net::IpAddr::V6(d)) => {
            h.extend_from_slice(&[0x21, 0, 36]);
            h.extend_from_slice(&c.octets());
            h.extend_from_slice(&d.octets());
        }
        _ => unreachable!("one family per VIP"),
    }
    h.extend_from_slice(&40000u16.to_be_bytes());
    h.extend_from_slice(&443u16.to_be_bytes());
    h
}

/// The TOA option of DPVS: kind 254, length 8 or 20, client port, client address.
fn toa(v: &Vip) -> Vec<u8> {
    let mut o = vec![254, 0];
    o.extend_from_slice(&40000u16.to_be_bytes());
    match super::build::ip(v.client) {
        std::net::IpAddr::V4(a) => o.extend_from_slice(&a.octets()),
        std::net::IpAddr::V6(a) => o.extend_from_slice(&a.octets()),
    }
    o[1] = o.len() as u8;
    o
}

impl Vip {
    fn lport(&self) -> u16 {
        let h = flow_hash(self.client, self.vip, 40000, 443, TCP);
        snat_port(TCP, self.backend, 8443, self.snat, h)
    }

    /// A client → VIP segment.
    fn client(&self, flags: u8, seq: u32, ack: u32, opts: &[u8], data: &[u8]) -> Pkt {
        Pkt::new(
            self.client,
            self.vip,
            TCP,
            seg(40000, 443, flags, seq, ack, opts, data),
        )
    }

    /// A backend → SNAT address segment, as it arrives.
    fn backend(&self, t: &Tables, flags: u8, seq: u32, ack: u32, opts: &[u8]) -> Pkt {
        let s = seg(8443, self.lport(), flags, seq, ack, opts, b"");
        Pkt::new(self.backend, self.snat, TCP, s).macs(OUR_MAC, mac_of(t, self.name))
    }

    /// A segment as FullNAT sends it to the backend.
    fn to_backend(
        &self,
        t: &Tables,
        flags: u8,
        seq: u32,
        ack: u32,
        opts: &[u8],
        data: &[u8],
    ) -> Vec<u8> {
        let s = seg(self.lport(), 8443, flags, seq, ack, opts, data);
        Pkt::new(self.snat, self.backend, TCP, s)
            .macs(mac_of(t, self.name), OUR_MAC)
            .ttl(63)
            .build()
    }

    /// A segment as FullNAT returns it to the client.
    fn to_client(&self, flags: u8, seq: u32, ack: u32, opts: &[u8]) -> Vec<u8> {
        let s = seg(443, 40000, flags, seq, ack, opts, b"");
        Pkt::new(self.vip, self.client, TCP, s)
            .macs(ROUTER_MAC, OUR_MAC)
            .ttl(63)
            .build()
    }

    fn syn(&self) -> Given {
        Given::from_client(&self.client(SYN, CISN, 0, &mss(1460), b""))
    }

    fn synack(&self, t: &Tables) -> Given {
        Given {
            frame: self.backend(t, SYNACK, BISN, CISN + 1, &mss(1460)).build(),
            ifindex: BACKENDS,
        }
    }

    fn ack(&self) -> Given {
        Given::from_client(&self.client(ACK, CISN + 1, BISN + 1, &[], b""))
    }

    fn request(&self) -> Pkt {
        self.client(PSHACK, CISN + 1, BISN + 1, &[], REQUEST)
    }

    /// The handshake done.
    fn open(&self, t: &Tables) -> Vec<Given> {
        vec![self.syn(), self.synack(t), self.ack()]
    }

    /// The handshake and the request (the header went out).
    fn requested(&self, t: &Tables) -> Vec<Given> {
        let mut g = self.open(t);
        g.push(Given::from_client(&self.request()));
        g
    }

    /// The request with the header in front, as the backend gets it.
    fn request_out(&self, t: &Tables) -> Vec<u8> {
        let mut data = proxy_v2(self);
        data.extend_from_slice(REQUEST);
        self.to_backend(t, PSHACK, CISN + 1, BISN + 1, &[], &data)
    }
}

fn hdr(v: &Vip) -> u32 {
    proxy_v2(v).len() as u32
}

fn p4_synack(t: &Tables) -> Fixture {
    let out = P4.to_client(SYNACK, BISN, CISN + 1, &mss(1460 - 28));
    let input = P4.backend(t, SYNACK, BISN, CISN + 1, &mss(1460)).build();
    Fixture::tx(
        "fnat4p syn-ack: mss lowered by the 28-byte proxy v2 header",
        input,
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(vec![P4.syn()])
}

fn p4_first_data(t: &Tables) -> Fixture {
    Fixture::tx(
        "fnat4p first data: proxy v2 header before the payload",
        P4.request().build(),
        BACKENDS,
        P4.request_out(t),
    )
    .given(P4.open(t))
    .counting(Counter::ProxyHeaders)
}

fn p4_first_data_again(t: &Tables) -> Fixture {
    Fixture::tx(
        "fnat4p first data retransmitted: the header again",
        P4.request().build(),
        BACKENDS,
        P4.request_out(t),
    )
    .given(P4.requested(t))
    .counting(Counter::ProxyHeaders)
}

fn p4_later_data(t: &Tables) -> Fixture {
    let seq = CISN + 1 + REQUEST.len() as u32;
    let input = P4.client(PSHACK, seq, BISN + 1, &[], b"more");
    let out = P4.to_backend(t, PSHACK, seq + hdr(&P4), BISN + 1, &[], b"more");
    Fixture::tx(
        "fnat4p later data: seq shifted by the header's 28 bytes",
        input.build(),
        BACKENDS,
        out,
    )
    .given(P4.requested(t))
}

fn p4_backend_ack(t: &Tables) -> Fixture {
    let acked = CISN + 1 + hdr(&P4) + REQUEST.len() as u32;
    let input = P4.backend(t, ACK, BISN + 1, acked, &[]).build();
    let out = P4.to_client(ACK, BISN + 1, acked - hdr(&P4), &[]);
    Fixture::tx("fnat4p backend ack: ack less 28", input, UPLINK, out)
        .arriving_on(BACKENDS)
        .given(P4.requested(t))
}

/// SACK option: NOP NOP, kind 5, two blocks.
fn sack(blocks: &[(u32, u32)]) -> Vec<u8> {
    let mut o = vec![1, 1, 5, (2 + 8 * blocks.len()) as u8];
    for (l, r) in blocks {
        o.extend_from_slice(&l.to_be_bytes());
        o.extend_from_slice(&r.to_be_bytes());
    }
    o
}

fn p4_backend_sack(t: &Tables) -> Fixture {
    let h = hdr(&P4);
    let acked = CISN + 1 + h + REQUEST.len() as u32;
    let blocks = [(acked + 100, acked + 200), (acked + 300, acked + 400)];
    let input = P4.backend(t, ACK, BISN + 1, acked, &sack(&blocks)).build();
    let back: Vec<(u32, u32)> = blocks.iter().map(|(l, r)| (l - h, r - h)).collect();
    let out = P4.to_client(ACK, BISN + 1, acked - h, &sack(&back));
    Fixture::tx(
        "fnat4p backend sack: ack and every sack edge less 28",
        input,
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(P4.requested(t))
}

fn p4_fin_first(t: &Tables) -> Fixture {
    let input = P4.client(FIN | ACK, CISN + 1, BISN + 1, &[], b"");
    let out = P4.to_backend(t, FIN | ACK, CISN + 1, BISN + 1, &[], b"");
    Fixture::tx(
        "fnat4p fin before any data: no header, no shift",
        input.build(),
        BACKENDS,
        out,
    )
    .given(P4.open(t))
}

fn p4_fin_first_acked(t: &Tables) -> Fixture {
    let mut given = P4.open(t);
    given.push(Given::from_client(&P4.client(
        FIN | ACK,
        CISN + 1,
        BISN + 1,
        &[],
        b"",
    )));
    let input = P4.backend(t, ACK, BISN + 1, CISN + 2, &[]).build();
    let out = P4.to_client(ACK, BISN + 1, CISN + 2, &[]);
    Fixture::tx(
        "fnat4p backend acks a fin before data: ack unchanged",
        input,
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(given)
}

fn p6_first_data(t: &Tables) -> Fixture {
    Fixture::tx(
        "fnat6p first data: proxy v2 header (tcp over ipv6, 52 bytes) before the payload",
        P6.request().build(),
        BACKENDS,
        P6.request_out(t),
    )
    .given(P6.open(t))
    .counting(Counter::ProxyHeaders)
}

fn p6_backend_ack(t: &Tables) -> Fixture {
    let acked = CISN + 1 + hdr(&P6) + REQUEST.len() as u32;
    let input = P6.backend(t, ACK, BISN + 1, acked, &[]).build();
    let out = P6.to_client(ACK, BISN + 1, acked - hdr(&P6), &[]);
    Fixture::tx("fnat6p backend ack: ack less 52", input, UPLINK, out)
        .arriving_on(BACKENDS)
        .given(P6.requested(t))
}

fn t4_synack(t: &Tables) -> Fixture {
    let out = T4.to_client(SYNACK, BISN, CISN + 1, &mss(1460 - 8));
    let input = T4.backend(t, SYNACK, BISN, CISN + 1, &mss(1460)).build();
    Fixture::tx(
        "fnat4t syn-ack: mss lowered by the 8-byte toa option",
        input,
        UPLINK,
        out,
    )
    .arriving_on(BACKENDS)
    .given(vec![T4.syn()])
}

fn t4_handshake_ack(t: &Tables) -> Fixture {
    let input = T4.client(ACK, CISN + 1, BISN + 1, &[], b"");
    let out = T4.to_backend(t, ACK, CISN + 1, BISN + 1, &toa(&T4), b"");
    Fixture::tx(
        "fnat4t handshake ack: toa option with the client's address and port",
        input.build(),
        BACKENDS,
        out,
    )
    .given(vec![T4.syn(), T4.synack(t)])
    .counting(Counter::ToaOptions)
}

fn t4_after_backend_data(t: &Tables) -> Fixture {
    let seq = CISN + 1 + REQUEST.len() as u32;
    let input = T4.client(ACK, seq, BISN + 101, &[], b"");
    let out = T4.to_backend(t, ACK, seq, BISN + 101, &[], b"");
    Fixture::tx(
        "fnat4t ack after the backend sent data: no option",
        input.build(),
        BACKENDS,
        out,
    )
    .given(T4.open(t))
}

fn t6_handshake_ack(t: &Tables) -> Fixture {
    let input = T6.client(ACK, CISN + 1, BISN + 1, &[], b"");
    let out = T6.to_backend(t, ACK, CISN + 1, BISN + 1, &toa(&T6), b"");
    Fixture::tx(
        "fnat6t handshake ack: toa option (ipv6, 20 bytes)",
        input.build(),
        BACKENDS,
        out,
    )
    .given(vec![T6.syn(), T6.synack(t)])
    .counting(Counter::ToaOptions)
}

/// Issue 42: a SYN on the established flow (an off-path spoofer's, any sequence number)
/// resets neither its state nor where its stream's shift starts: the next data is shifted
/// by the header's length as before, and no second header goes out.
fn p4_syn_keeps_the_shift(t: &Tables) -> Fixture {
    let seq = CISN + 1 + REQUEST.len() as u32;
    let input = P4.client(PSHACK, seq, BISN + 1, &[], b"more");
    let out = P4.to_backend(t, PSHACK, seq + hdr(&P4), BISN + 1, &[], b"more");
    let mut given = P4.requested(t);
    for spoofed in [77, seq + 5000] {
        given.push(Given::from_client(&P4.client(
            SYN,
            spoofed,
            0,
            &mss(1460),
            b"",
        )));
    }
    Fixture::tx(
        "fnat4p: a syn on the established flow keeps its shift and its state",
        input.build(),
        BACKENDS,
        out,
    )
    .given(given)
    .leaving(lb::FlowState::TcpEstablished)
}

/// Issue 42: an RST off the client's sequence space of a PROXY v2 flow is forwarded with
/// the stream's shift and closes nothing.
fn p4_rst_off(t: &Tables) -> Fixture {
    let seq = CISN + 1 + REQUEST.len() as u32 + (1 << 30);
    let input = P4.client(RST, seq, 0, &[], b"");
    let out = P4.to_backend(t, RST, seq + hdr(&P4), 0, &[], b"");
    Fixture::tx(
        "fnat4p: an rst off the client's sequence space is forwarded shifted and closes nothing",
        input.build(),
        BACKENDS,
        out,
    )
    .given(P4.requested(t))
    .counting(Counter::RstOutOfWindow)
    .leaving(lb::FlowState::TcpEstablished)
}
