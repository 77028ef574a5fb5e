//! SYN proxy rows (issue 42): `pnat4` (NAT, IPv4) and `pfnat6` (FullNAT, IPv6) have
//! `syn_proxy = "always"`. The appliance answers a SYN with a cookie and keeps nothing; the
//! client's ACK carrying the cookie becomes the client's SYN toward the backend; the
//! backend's SYN-ACK becomes the handshake's last ACK toward the backend; afterwards the
//! backend's sequence numbers lose `PEER_ISN - cookie` toward the client and the client's
//! acknowledgements gain it toward the backend.
//!
//! The cookie is computed here with the engine's cookie function under the worker's
//! default key ([`lb::process::CookieKey`]), at [`NOW`]: the rows check what is built
//! around it (the handshake's options, the rewrites, the shift), the cookie's own
//! properties are `lb::process::syn_cookie`'s unit tests.

use lb::FlowState;
use lb::Tables;
use lb::hash::{FlowKey, addr_to_u128};
use lb::process::{CookieKey, DropReason, syn_cookie};

use super::build::{ACK, PEER_ISN, Pkt, SYN, SYNACK, TCP, ip};
use super::setup::{flow_hash, mac_of, snat_port};
use super::{BACKENDS, Counter, Fixture, Given, NOW, OUR_MAC, ROUTER_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    nat4_syn_answered,
    nat4_cookie_ack_opens,
    nat4_backend_syn_ack_finishes,
    nat4_client_data_shifted,
    nat4_backend_data_shifted,
    nat4_data_before_backend_dropped,
    nat4_off_path_rst_closes_nothing,
    nat4_backend_refuses,
    nat4_client_sack_shifted,
    nat4_unscaled_backend_client_window,
    nat4_unscaled_backend_window,
    fnat6_syn_answered,
    fnat6_cookie_ack_opens,
    fnat6_spoofed_ack_no_state,
    fnat6_client_data_shifted,
    fnat6_backend_data_shifted,
];

const PSH: u8 = 0x08;
const RST: u8 = 0x04;
/// The client's initial sequence number.
const ISN: u32 = 7000;
/// The client's SYN options: MSS 1460, SACK-permitted, window scale 7; the appliance
/// answers with the same (its own scale is 7) and asks the backend for the same.
const SYN_OPTS: [u8; 12] = [2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7];
/// The backend's SYN-ACK options: MSS 1460, window scale 7.
const BACKEND_OPTS: [u8; 8] = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
/// A backend's SYN-ACK that declines window scaling: MSS 1460 only.
const UNSCALED_OPTS: [u8; 4] = [2, 4, 0x05, 0xb4];
/// The backend's first bytes in the rows that need some: 30 of them.
const RESPONSE: &[u8; 30] = b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n";

/// A TCP segment with every field given; window 65535.
fn seg(ports: (u16, u16), flags: u8, seq: u32, ack: u32, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&ports.0.to_be_bytes());
    t.extend_from_slice(&ports.1.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.push((((20 + opts.len()) / 4) as u8) << 4);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(opts);
    t.extend_from_slice(payload);
    t
}

/// One proxied connection.
struct Conn {
    vip_name: &'static str,
    client: &'static str,
    cport: u16,
    vip: &'static str,
    vport: u16,
    backend: &'static str,
    bport: u16,
    /// FullNAT's source address ("" for NAT).
    snat: &'static str,
}

const PNAT4: Conn = Conn {
    vip_name: "pnat4",
    client: "198.51.100.7",
    cport: 41000,
    vip: "192.0.2.100",
    vport: 80,
    backend: "10.0.0.81",
    bport: 8080,
    snat: "",
};
const PFNAT6: Conn = Conn {
    vip_name: "pfnat6",
    client: "2001:db8:c::7",
    cport: 41000,
    vip: "2001:db8::100",
    vport: 443,
    backend: "2001:db8:a::81",
    bport: 8443,
    snat: "2001:db8:f::9",
};

impl Conn {
    /// The cookie the appliance answers this connection's SYN with.
    fn cookie(&self) -> u32 {
        let key = FlowKey {
            src: addr_to_u128(ip(self.client)),
            dst: addr_to_u128(ip(self.vip)),
            sport: self.cport,
            dport: self.vport,
            proto: TCP,
            v6: ip(self.client).is_ipv6(),
            zone: 0,
        };
        let o = syn_cookie::Options::of_syn(Some(1460), Some(7), true);
        syn_cookie::make(&CookieKey::default(), &key, ISN, o, NOW)
    }

    /// The backend's sequence numbers less the client's view of them.
    fn shift(&self) -> u32 {
        PEER_ISN.wrapping_sub(self.cookie())
    }

    /// The client's side as the backend sees it: address and port.
    fn near(&self) -> (&'static str, u16) {
        if self.snat.is_empty() {
            return (self.client, self.cport);
        }
        let h = flow_hash(self.client, self.vip, self.cport, self.vport, TCP);
        (
            self.snat,
            snat_port(TCP, self.backend, self.bport, self.snat, h),
        )
    }

    /// A client → VIP segment.
    fn client(&self, flags: u8, seq: u32, ack: u32, opts: &[u8], payload: &[u8]) -> Pkt {
        let l4 = seg((self.cport, self.vport), flags, seq, ack, opts, payload);
        Pkt::new(self.client, self.vip, TCP, l4)
    }

    /// A backend → client segment as it arrives.
    fn backend(
        &self,
        t: &Tables,
        flags: u8,
        seq: u32,
        ack: u32,
        opts: &[u8],
        payload: &[u8],
    ) -> Pkt {
        let (to, port) = self.near();
        let l4 = seg((self.bport, port), flags, seq, ack, opts, payload);
        Pkt::new(self.backend, to, TCP, l4).macs(OUR_MAC, mac_of(t, self.vip_name))
    }

    /// A segment the appliance sends the backend from the client's side, as built.
    fn to_backend(&self, t: &Tables, p: Pkt) -> Vec<u8> {
        let (from, port) = self.near();
        p.macs(mac_of(t, self.vip_name), OUR_MAC)
            .src(from)
            .sport(port)
            .dst(self.backend)
            .dport(self.bport)
            .build()
    }

    /// The cookie's ACK.
    fn cookie_ack(&self) -> Pkt {
        self.client(ACK, ISN + 1, self.cookie().wrapping_add(1), &[], b"")
    }

    /// The handshake with the appliance done (the cookie's ACK), and, with `answered`,
    /// the backend's SYN-ACK.
    fn open(&self, t: &Tables, answered: bool) -> Vec<Given> {
        if answered {
            return self.open_with(t, &BACKEND_OPTS);
        }
        vec![Given::from_client(&self.cookie_ack())]
    }

    /// The handshake with the appliance done and the backend's SYN-ACK with `opts`.
    fn open_with(&self, t: &Tables, opts: &[u8]) -> Vec<Given> {
        vec![
            Given::from_client(&self.cookie_ack()),
            self.backend_given(t, SYNACK, PEER_ISN, ISN + 1, opts, b""),
        ]
    }

    /// A backend → client segment as a given frame.
    fn backend_given(
        &self,
        t: &Tables,
        flags: u8,
        seq: u32,
        ack: u32,
        opts: &[u8],
        payload: &[u8],
    ) -> Given {
        Given {
            frame: self.backend(t, flags, seq, ack, opts, payload).build(),
            ifindex: BACKENDS,
        }
    }

    /// The client's first data ("GET /") as the client sends it, acknowledging the cookie.
    fn request(&self) -> Pkt {
        self.client(
            PSH | ACK,
            ISN + 1,
            self.cookie().wrapping_add(1),
            &[],
            b"GET /",
        )
    }

    /// A VIP → client segment as the appliance forwards it.
    fn to_client(&self, flags: u8, seq: u32, ack: u32, payload: &[u8]) -> Pkt {
        let l4 = seg((self.vport, self.cport), flags, seq, ack, &[], payload);
        Pkt::new(self.vip, self.client, TCP, l4)
            .ttl(63)
            .macs(ROUTER_MAC, OUR_MAC)
    }
}

/// `p` with its TCP window field set to `w`.
fn window(p: Pkt, w: u16) -> Pkt {
    p.with(|p| p.l4[14..16].copy_from_slice(&w.to_be_bytes()))
}

/// An appliance-built header: TTL 64, DF, identification 0.
fn built(p: Pkt) -> Pkt {
    p.ttl(64).ident(0).with(|p| p.df = true)
}

fn syn_answered(c: &Conn, what: &'static str) -> Fixture {
    let syn = c.client(SYN, ISN, 0, &SYN_OPTS, b"");
    let l4 = seg(
        (c.vport, c.cport),
        SYNACK,
        c.cookie(),
        ISN + 1,
        &SYN_OPTS,
        b"",
    );
    let out = built(Pkt::new(c.vip, c.client, TCP, l4)).macs(ROUTER_MAC, OUR_MAC);
    Fixture::tx(what, syn.build(), UPLINK, out.build()).counting(Counter::SynProxyAnswered)
}

fn cookie_ack_opens(c: &Conn, t: &Tables, what: &'static str) -> Fixture {
    let syn = c.client(SYN, ISN, 0, &SYN_OPTS, b"");
    let out = c.to_backend(t, built(syn).ttl(63));
    Fixture::tx(what, c.cookie_ack().build(), BACKENDS, out)
        .counting(Counter::SynProxyOpened)
        .leaving(FlowState::TcpSyn)
}

fn nat4_syn_answered(_: &Tables) -> Fixture {
    syn_answered(
        &PNAT4,
        "synproxy nat4: a SYN is answered from the VIP with a cookie, its options kept",
    )
}

fn nat4_cookie_ack_opens(t: &Tables) -> Fixture {
    cookie_ack_opens(
        &PNAT4,
        t,
        "synproxy nat4: the ACK carrying the cookie becomes the client's SYN to the backend",
    )
}

fn nat4_backend_syn_ack_finishes(t: &Tables) -> Fixture {
    let c = PNAT4;
    let syn_ack = c.backend(t, SYNACK, PEER_ISN, ISN + 1, &BACKEND_OPTS, b"");
    let ack = c.client(ACK, ISN + 1, PEER_ISN + 1, &[], b"");
    Fixture::tx(
        "synproxy nat4: the backend's SYN-ACK becomes the handshake's last ACK to it",
        syn_ack.build(),
        BACKENDS,
        c.to_backend(t, built(ack)),
    )
    .arriving_on(BACKENDS)
    .given(c.open(t, false))
    .counting(Counter::SynProxyEstablished)
}

fn client_data_shifted(c: &Conn, t: &Tables, what: &'static str) -> Fixture {
    let out = c
        .client(PSH | ACK, ISN + 1, PEER_ISN + 1, &[], b"GET /")
        .ttl(63);
    Fixture::tx(what, c.request().build(), BACKENDS, c.to_backend(t, out))
        .given(c.open(t, true))
        .leaving(FlowState::TcpEstablished)
}

fn backend_data_shifted(c: &Conn, t: &Tables, what: &'static str) -> Fixture {
    let data = c.backend(t, PSH | ACK, PEER_ISN + 1, ISN + 6, &[], b"HTTP/1.1");
    let seq = PEER_ISN.wrapping_sub(c.shift()) + 1;
    let out = c.to_client(PSH | ACK, seq, ISN + 6, b"HTTP/1.1");
    let mut given = c.open(t, true);
    given.push(Given::from_client(&c.request()));
    Fixture::tx(what, data.build(), UPLINK, out.build())
        .arriving_on(BACKENDS)
        .given(given)
        .leaving(FlowState::TcpEstablished)
}

fn nat4_client_data_shifted(t: &Tables) -> Fixture {
    client_data_shifted(
        &PNAT4,
        t,
        "synproxy nat4: the client's data goes on acknowledging in the backend's space",
    )
}

fn nat4_backend_data_shifted(t: &Tables) -> Fixture {
    backend_data_shifted(
        &PNAT4,
        t,
        "synproxy nat4: the backend's data reaches the client in the cookie's space",
    )
}

fn fnat6_client_data_shifted(t: &Tables) -> Fixture {
    client_data_shifted(
        &PFNAT6,
        t,
        "synproxy fnat6: the client's data goes from the FullNAT source, acknowledging in the \
         backend's space",
    )
}

fn fnat6_backend_data_shifted(t: &Tables) -> Fixture {
    backend_data_shifted(
        &PFNAT6,
        t,
        "synproxy fnat6: the backend's data reaches the client in the cookie's space",
    )
}

/// A client's ACK with a SACK block (NOP NOP SACK, one block): bytes 0..10 and 20..30 of
/// the response came, 10..20 did not; both the acknowledgement and the block's edges move
/// into the backend's space.
fn nat4_client_sack_shifted(t: &Tables) -> Fixture {
    let c = PNAT4;
    let cookie = c.cookie().wrapping_add(1);
    let sack = |base: u32| {
        let mut o = vec![1, 1, 5, 10];
        o.extend_from_slice(&base.wrapping_add(20).to_be_bytes());
        o.extend_from_slice(&base.wrapping_add(30).to_be_bytes());
        o
    };
    let ack = c.client(ACK, ISN + 6, cookie + 10, &sack(cookie), b"");
    let out = c
        .client(ACK, ISN + 6, PEER_ISN + 1 + 10, &sack(PEER_ISN + 1), b"")
        .ttl(63);
    let mut given = c.open(t, true);
    given.push(Given::from_client(&c.request()));
    given.push(c.backend_given(t, PSH | ACK, PEER_ISN + 1, ISN + 6, &[], RESPONSE));
    Fixture::tx(
        "synproxy nat4: a client's SACK block reaches the backend in its space",
        ack.build(),
        BACKENDS,
        c.to_backend(t, out),
    )
    .given(given)
    .leaving(FlowState::TcpEstablished)
}

/// The backend declined window scaling (its SYN-ACK without the option) after the
/// appliance told the client its scale was 7: the client's window field (its scale 7)
/// reaches the backend unscaled, 100 << 7.
fn nat4_unscaled_backend_client_window(t: &Tables) -> Fixture {
    let c = PNAT4;
    let out = c
        .client(PSH | ACK, ISN + 1, PEER_ISN + 1, &[], b"GET /")
        .ttl(63);
    Fixture::tx(
        "synproxy nat4: behind a backend without window scaling the client's window is unscaled",
        window(c.request(), 100).build(),
        BACKENDS,
        c.to_backend(t, window(out, 100 << 7)),
    )
    .given(c.open_with(t, &UNSCALED_OPTS))
    .leaving(FlowState::TcpEstablished)
}

/// The same backend's window field (unscaled) reaches the client in the scale the
/// appliance announced, 7: 1000 >> 7.
fn nat4_unscaled_backend_window(t: &Tables) -> Fixture {
    let c = PNAT4;
    let data = window(
        c.backend(t, PSH | ACK, PEER_ISN + 1, ISN + 6, &[], b"HTTP/1.1"),
        1000,
    );
    let seq = PEER_ISN.wrapping_sub(c.shift()) + 1;
    let out = window(c.to_client(PSH | ACK, seq, ISN + 6, b"HTTP/1.1"), 1000 >> 7);
    let mut given = c.open_with(t, &UNSCALED_OPTS);
    given.push(Given::from_client(&c.request()));
    Fixture::tx(
        "synproxy nat4: a backend's unscaled window reaches the client in the scale it was told",
        data.build(),
        UPLINK,
        out.build(),
    )
    .arriving_on(BACKENDS)
    .given(given)
    .leaving(FlowState::TcpEstablished)
}

fn nat4_data_before_backend_dropped(t: &Tables) -> Fixture {
    let c = PNAT4;
    let data = c.client(
        PSH | ACK,
        ISN + 1,
        c.cookie().wrapping_add(1),
        &[],
        b"GET /",
    );
    Fixture::drop(
        "synproxy nat4: client data before the backend answered is dropped, sent again later",
        data.build(),
        DropReason::ProxyOpening,
    )
    .given(c.open(t, false))
    .leaving(FlowState::TcpSyn)
}

fn nat4_off_path_rst_closes_nothing(t: &Tables) -> Fixture {
    let c = PNAT4;
    let rst = c.client(RST, ISN + 1 + (1 << 30), 0, &[], b"");
    let out = rst.clone().ttl(63);
    let mut given = c.open(t, true);
    given.push(Given::from_client(&c.client(
        ACK,
        ISN + 1,
        c.cookie().wrapping_add(1),
        &[],
        b"",
    )));
    Fixture::tx(
        "synproxy nat4: an off-path RST on a proxied flow is forwarded and closes nothing",
        rst.build(),
        BACKENDS,
        c.to_backend(t, out),
    )
    .given(given)
    .counting(Counter::RstOutOfWindow)
    .leaving(FlowState::TcpEstablished)
}

fn nat4_backend_refuses(t: &Tables) -> Fixture {
    let c = PNAT4;
    let rst = c.backend(t, RST | ACK, 0, ISN + 1, &[], b"");
    let l4 = seg(
        (c.vport, c.cport),
        RST | ACK,
        c.cookie().wrapping_add(1),
        ISN + 1,
        &[],
        b"",
    );
    let out = Pkt::new(c.vip, c.client, TCP, l4)
        .ttl(63)
        .macs(ROUTER_MAC, OUR_MAC);
    Fixture::tx(
        "synproxy nat4: the backend's RST to the SYN reaches the client where it expects one",
        rst.build(),
        UPLINK,
        out.build(),
    )
    .arriving_on(BACKENDS)
    .given(c.open(t, false))
}

fn fnat6_syn_answered(_: &Tables) -> Fixture {
    syn_answered(
        &PFNAT6,
        "synproxy fnat6: a SYN is answered from the VIP with a cookie, its options kept",
    )
}

fn fnat6_cookie_ack_opens(t: &Tables) -> Fixture {
    cookie_ack_opens(
        &PFNAT6,
        t,
        "synproxy fnat6: the ACK carrying the cookie becomes a SYN from the FullNAT source",
    )
}

fn fnat6_spoofed_ack_no_state(_: &Tables) -> Fixture {
    let c = PFNAT6;
    // A blind guess: the cookie moved by three periods (a neighbour of the cookie would
    // pass: its low bits carry the SYN's options, checked only for range, as Linux's).
    let ack = c.client(ACK, ISN + 1, c.cookie().wrapping_add(3 << 24) + 1, &[], b"");
    Fixture::drop(
        "synproxy fnat6: an ACK without a cookie of ours makes no state and takes no port",
        ack.build(),
        DropReason::NoFlow,
    )
    .counting(Counter::SynProxyBadCookies)
}
