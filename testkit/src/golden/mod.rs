//! Golden packets: `{ description, input, verdict, output }` for [`process`].
//!
//! One shared setup ([`setup`]: VIPs in every mode and family, neighbours resolved) and a
//! table of frames run through [`process`] in order at a fixed `now`; later fixtures may
//! rely on flows created by earlier ones (return traffic after the forward packet), as the
//! datapath would see them. Expected frames are built field by field with the small packet
//! builder below, whose checksums are computed from scratch, never derived from the code
//! under test. The table is public (hidden from docs) so a later XDP fast path can replay
//! the same bytes and compare.

/// The golden VIPs as a configuration file, for the appliance's own unit tests: they parse
/// it with `Config::from_toml_str` into their copy of the types.
pub const CONFIG_TOML: &str = include_str!("golden.toml");

use std::net::IpAddr;

use sluice::config::{
    Backend, BackendState, Config, Encap, HashFields, Mode, Protocol, Scheduler, Vip,
};
use sluice::lb::conntrack::ConnTable;
use sluice::lb::hash::{FlowKey, addr_to_u128};
use sluice::lb::process::{DropReason, Verdict, WorkerStats, process, tunnel_source};
use sluice::lb::tables::{NextHop, Tables};
use sluice::lb::{Frame, HEADROOM, WorkerState};
use wire::MacAddr;

/// The fixed clock of every fixture.
pub const NOW: u64 = 1_000_000_000_000;
/// Interface the client side (uplink) is on.
pub const UPLINK: u32 = 1;
/// Interface the backends are on (two-arm).
pub const BACKENDS: u32 = 2;
/// The router's MAC on the uplink.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The appliance's MAC.
pub const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];

/// One golden packet.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// What it shows.
    pub description: &'static str,
    /// Frame as received.
    pub input: Vec<u8>,
    /// Interface it arrives on.
    pub ifindex: u32,
    /// Expected verdict.
    pub verdict: Verdict,
    /// Expected frame for `Tx` (for `Pass` and `Drop` the input, untouched).
    pub output: Vec<u8>,
    /// A worker statistic that must grow by exactly one.
    pub stat: Option<fn(&WorkerStats) -> u64>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("fixture address")
}

fn backend_mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, i]
}

// ---- packet builder (independent of wire and lb) -----------------------------------

fn csum_sum(data: &[u8], mut acc: u64) -> u64 {
    let mut i = 0;
    while i + 1 < data.len() {
        acc += u64::from(u16::from_be_bytes([data[i], data[i + 1]]));
        i += 2;
    }
    if i < data.len() {
        acc += u64::from(data[i]) << 8;
    }
    acc
}

fn csum_finish(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// RFC 1071 checksum of an L4 segment with its pseudo-header (none for ICMPv4).
pub fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8]) -> u16 {
    let mut acc = 0u64;
    if proto != 1 {
        acc = csum_sum(&addr_bytes(src), acc);
        acc = csum_sum(&addr_bytes(dst), acc);
        acc += u64::from(proto) + seg.len() as u64;
    }
    csum_finish(csum_sum(seg, acc))
}

/// Plain RFC 1071 checksum.
pub fn checksum(data: &[u8]) -> u16 {
    csum_finish(csum_sum(data, 0))
}

/// A packet to build: Ethernet (with VLAN tags), IPv4 or IPv6, and an L4 segment.
#[derive(Debug, Clone)]
pub struct Pkt {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// 802.1Q VIDs, outermost first.
    pub vlans: Vec<u16>,
    /// Source address (family selects IPv4/IPv6).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// TTL / hop limit.
    pub ttl: u8,
    /// DSCP/ECN (IPv4 TOS, IPv6 traffic class).
    pub tos: u8,
    /// IPv4 DF.
    pub df: bool,
    /// IPv4 identification.
    pub ident: u16,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// IPv4 options (multiple of 4).
    pub options: Vec<u8>,
    /// IPv6 hop-by-hop options header body (6 bytes after next-header/len), if any.
    pub hop_by_hop: Option<[u8; 6]>,
    /// Fragment: (offset in bytes, more fragments, identification).
    pub frag: Option<(u16, bool, u32)>,
    /// L4 protocol.
    pub proto: u8,
    /// L4 bytes (header and payload).
    pub l4: Vec<u8>,
    /// Offset of the L4 checksum to fill; `None` leaves the bytes as given.
    pub csum_at: Option<usize>,
    /// Pad the frame with zeros to this length (Ethernet minimum 60).
    pub pad_to: usize,
}

/// A TCP segment: 20-byte header, window 65535, no options.
pub fn tcp(sport: u16, dport: u16, flags: u8, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&(if flags & 0x10 != 0 { 0x1000_0001u32 } else { 0 }).to_be_bytes());
    t.push(0x50);
    t.push(flags);
    t.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// A UDP datagram with its length set.
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// An ICMP/ICMPv6 message: type, code, the 4 bytes after the checksum, body.
pub fn icmp(ty: u8, code: u8, rest: [u8; 4], body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(body);
    m
}

impl Pkt {
    /// A client → `dst` packet from the router with TTL 64.
    pub fn new(src: &str, dst: &str, proto: u8, l4: Vec<u8>) -> Pkt {
        let csum_at = match proto {
            6 => Some(16),
            17 => Some(6),
            1 | 58 => Some(2),
            _ => None,
        };
        Pkt {
            dst_mac: OUR_MAC,
            src_mac: ROUTER_MAC,
            vlans: Vec::new(),
            src: ip(src),
            dst: ip(dst),
            ttl: 64,
            tos: 0,
            df: false,
            ident: 0x1234,
            flow_label: 0,
            options: Vec::new(),
            hop_by_hop: None,
            frag: None,
            proto,
            l4,
            csum_at,
            pad_to: 0,
        }
    }

    fn v6(&self) -> bool {
        self.src.is_ipv6()
    }

    /// Sets the L4 source port (bytes 0..2).
    pub fn sport(mut self, p: u16) -> Pkt {
        self.l4[0..2].copy_from_slice(&p.to_be_bytes());
        self
    }

    /// Sets the L4 destination port (bytes 2..4).
    pub fn dport(mut self, p: u16) -> Pkt {
        self.l4[2..4].copy_from_slice(&p.to_be_bytes());
        self
    }

    /// Sets both MACs.
    pub fn macs(mut self, dst: [u8; 6], src: [u8; 6]) -> Pkt {
        self.dst_mac = dst;
        self.src_mac = src;
        self
    }

    /// The IP packet (header, extension headers, L4) with checksums filled.
    pub fn ip_bytes(&self) -> Vec<u8> {
        let mut l4 = self.l4.clone();
        if let Some(at) = self.csum_at
            && self.frag.is_none()
        {
            l4[at] = 0;
            l4[at + 1] = 0;
            let mut c = l4_checksum(self.src, self.dst, self.proto, &l4);
            if self.proto == 17 && c == 0 {
                c = 0xffff;
            }
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        let mut out = Vec::new();
        if self.v6() {
            let mut ext = Vec::new();
            let mut first_nh = self.proto;
            if let Some((off, more, id)) = self.frag {
                let mut f = vec![self.proto, 0];
                f.extend_from_slice(&(off | u16::from(more)).to_be_bytes());
                f.extend_from_slice(&id.to_be_bytes());
                ext = f;
                first_nh = 44;
            }
            if let Some(body) = self.hop_by_hop {
                let mut h = vec![first_nh, 0];
                h.extend_from_slice(&body);
                h.extend_from_slice(&ext);
                ext = h;
                first_nh = 0;
            }
            let vtcf = (6u32 << 28) | (u32::from(self.tos) << 20) | self.flow_label;
            out.extend_from_slice(&vtcf.to_be_bytes());
            out.extend_from_slice(&((ext.len() + l4.len()) as u16).to_be_bytes());
            out.push(first_nh);
            out.push(self.ttl);
            out.extend_from_slice(&addr_bytes(self.src));
            out.extend_from_slice(&addr_bytes(self.dst));
            out.extend_from_slice(&ext);
        } else {
            let hl = 20 + self.options.len();
            out.push(0x40 | (hl / 4) as u8);
            out.push(self.tos);
            out.extend_from_slice(&((hl + l4.len()) as u16).to_be_bytes());
            out.extend_from_slice(&self.ident.to_be_bytes());
            let (off, more) = self.frag.map(|(o, m, _)| (o, m)).unwrap_or((0, false));
            let flags = (u16::from(self.df) << 14) | (u16::from(more) << 13) | (off / 8);
            out.extend_from_slice(&flags.to_be_bytes());
            out.push(self.ttl);
            out.push(self.proto);
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&addr_bytes(self.src));
            out.extend_from_slice(&addr_bytes(self.dst));
            out.extend_from_slice(&self.options);
            let c = checksum(&out[..hl]);
            out[10..12].copy_from_slice(&c.to_be_bytes());
        }
        out.extend_from_slice(&l4);
        out
    }

    /// The Ethernet header (with tags) for an EtherType.
    pub fn eth(&self, ethertype: u16) -> Vec<u8> {
        let mut e = Vec::new();
        e.extend_from_slice(&self.dst_mac);
        e.extend_from_slice(&self.src_mac);
        for v in &self.vlans {
            e.extend_from_slice(&0x8100u16.to_be_bytes());
            e.extend_from_slice(&v.to_be_bytes());
        }
        e.extend_from_slice(&ethertype.to_be_bytes());
        e
    }

    /// The whole frame.
    pub fn build(&self) -> Vec<u8> {
        let mut f = self.eth(if self.v6() { 0x86dd } else { 0x0800 });
        f.extend_from_slice(&self.ip_bytes());
        if f.len() < self.pad_to {
            f.resize(self.pad_to, 0);
        }
        f
    }
}

/// The expected tunnel frame: `outer` (its `l4` is replaced) around `inner`'s IP bytes,
/// with an optional UDP header (GUE/VXLAN) and VXLAN header + inner Ethernet.
fn encap_frame(
    inner: &Pkt,
    mut outer: Pkt,
    udp_ports: Option<(u16, u16)>,
    vxlan: Option<(u32, [u8; 6], [u8; 6])>,
) -> Vec<u8> {
    let ipb = inner.ip_bytes();
    let mut body = Vec::new();
    if let Some((vni, dmac, smac)) = vxlan {
        body.extend_from_slice(&[0x08, 0, 0, 0]);
        body.extend_from_slice(&(vni << 8).to_be_bytes());
        body.extend_from_slice(&dmac);
        body.extend_from_slice(&smac);
        body.extend_from_slice(&(if inner.v6() { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    }
    body.extend_from_slice(&ipb);
    match udp_ports {
        Some((s, d)) => {
            outer.proto = 17;
            outer.l4 = udp(s, d, &body);
            // Zero UDP checksum over IPv4; computed over IPv6.
            outer.csum_at = if outer.v6() { Some(6) } else { None };
        }
        None => {
            outer.proto = if inner.v6() { 41 } else { 4 };
            outer.l4 = body;
            outer.csum_at = None;
        }
    }
    outer.vlans = inner.vlans.clone();
    outer.build()
}

// ---- the shared setup ---------------------------------------------------------------

fn be(addr: &str, port: u16) -> Backend {
    Backend {
        address: ip(addr),
        port,
        weight: 1,
        state: BackendState::Active,
    }
}

fn vip(name: &str, addr: &str, port: u16, proto: Protocol, mode: Mode, b: Backend) -> Vip {
    Vip {
        name: name.into(),
        address: ip(addr),
        port,
        protocol: proto,
        mode,
        scheduler: Scheduler::Maglev,
        hash: HashFields::FiveTuple,
        health_check: None,
        snat: Vec::new(),
        communities: Vec::new(),
        backends: vec![b],
    }
}

/// The VIPs of the golden setup.
pub fn config() -> Config {
    use Protocol::{Tcp, Udp};
    let gue = Mode::Tunnel(Encap::Gue { port: 6080 });
    let vx = Mode::Tunnel(Encap::Vxlan {
        port: 4789,
        vni: 4242,
    });
    let ipip = Mode::Tunnel(Encap::Ipip);
    let mut fnat4 = vip(
        "fnat4",
        "192.0.2.20",
        443,
        Tcp,
        Mode::FullNat,
        be("10.0.0.3", 8443),
    );
    fnat4.snat = vec![ip("10.1.0.1")];
    let mut fnat4u = vip(
        "fnat4u",
        "192.0.2.20",
        443,
        Udp,
        Mode::FullNat,
        be("10.0.0.3", 8443),
    );
    fnat4u.snat = vec![ip("10.1.0.1")];
    let mut fnat6 = vip(
        "fnat6",
        "2001:db8::20",
        443,
        Tcp,
        Mode::FullNat,
        be("2001:db8:a::3", 8443),
    );
    fnat6.snat = vec![ip("2001:db8:f::1")];
    let mut drained = vip(
        "drained",
        "192.0.2.70",
        80,
        Tcp,
        Mode::Dr,
        be("10.0.0.10", 80),
    );
    drained.backends[0].state = BackendState::Drain;
    let vips = vec![
        vip(
            "nat4",
            "192.0.2.10",
            80,
            Tcp,
            Mode::Nat,
            be("10.0.0.1", 8080),
        ),
        vip(
            "nat4u",
            "192.0.2.10",
            53,
            Udp,
            Mode::Nat,
            be("10.0.0.2", 5353),
        ),
        vip(
            "nat6",
            "2001:db8::10",
            80,
            Tcp,
            Mode::Nat,
            be("2001:db8:a::1", 8080),
        ),
        vip(
            "nat6u",
            "2001:db8::10",
            53,
            Udp,
            Mode::Nat,
            be("2001:db8:a::2", 53),
        ),
        fnat4,
        fnat4u,
        fnat6,
        vip("dr4", "192.0.2.30", 80, Tcp, Mode::Dr, be("10.0.0.4", 80)),
        vip("dr4u", "192.0.2.30", 0, Udp, Mode::Dr, be("10.0.0.4", 0)),
        vip(
            "dr6",
            "2001:db8::30",
            80,
            Tcp,
            Mode::Dr,
            be("2001:db8:a::4", 80),
        ),
        vip("ipip4", "192.0.2.40", 80, Tcp, ipip, be("10.0.0.5", 80)),
        vip(
            "ipip6",
            "2001:db8::40",
            80,
            Tcp,
            ipip,
            be("2001:db8:a::5", 80),
        ),
        vip(
            "ipip46",
            "192.0.2.41",
            80,
            Tcp,
            ipip,
            be("2001:db8:a::6", 80),
        ),
        vip("ipip64", "2001:db8::41", 80, Tcp, ipip, be("10.0.0.6", 80)),
        vip("gue4", "192.0.2.50", 80, Tcp, gue, be("10.0.0.7", 80)),
        vip(
            "gue6",
            "2001:db8::50",
            80,
            Tcp,
            gue,
            be("2001:db8:a::7", 80),
        ),
        vip("vxlan4", "192.0.2.60", 80, Tcp, vx, be("10.0.0.8", 80)),
        vip(
            "vxlan6",
            "2001:db8::60",
            80,
            Tcp,
            vx,
            be("2001:db8:a::8", 80),
        ),
        drained,
        vip(
            "noneigh",
            "192.0.2.80",
            80,
            Tcp,
            Mode::Dr,
            be("10.0.0.9", 80),
        ),
        vip(
            "ambig80",
            "192.0.2.90",
            80,
            Udp,
            Mode::Dr,
            be("10.0.0.11", 80),
        ),
        vip(
            "ambig81",
            "192.0.2.90",
            81,
            Udp,
            Mode::Dr,
            be("10.0.0.11", 81),
        ),
    ];
    let mut c = base_config();
    c.vips = vips;
    c
}

/// A config with no VIPs and default appliance settings.
pub fn base_config() -> Config {
    use sluice::config::{Api, Appliance, Timeouts, XdpMode};
    Config {
        appliance: Appliance {
            name: "golden".into(),
            interfaces: vec!["up0".into(), "be0".into()],
            xdp_mode: XdpMode::Auto,
            busy_poll: false,
            flow_cache: false,
            pin_workers: false,
            umem_frames: 4096,
            ring_size: 2048,
            conntrack_capacity: 4096,
            maglev_table_size: 65537,
            timeouts: Timeouts::default(),
        },
        api: Api {
            socket: "/run/sluice/api.sock".into(),
            metrics: None,
            listen: None,
            token_file: None,
        },
        bgp: None,
        health_checks: Vec::new(),
        vips: Vec::new(),
    }
}

/// Tables, connection table and worker state of the golden setup: every backend except
/// `noneigh`'s has a neighbour on [`BACKENDS`] with MAC `02:00:00:00:01:<n>` (n = backend
/// slot + 1), the gateway is the router on [`UPLINK`].
pub fn setup() -> (Tables, ConnTable, WorkerState) {
    let c = config();
    let mut t = Tables::build(&c, &|_, _| true, 1).expect("golden tables");
    for slot in 0..t.backends.len() as u32 {
        if t.vips[t.backends[slot as usize].vip as usize].name == "noneigh" {
            continue;
        }
        t.set_next_hop(
            slot,
            NextHop {
                ifindex: BACKENDS,
                src_mac: MacAddr(OUR_MAC),
                dst_mac: MacAddr(backend_mac(slot as u8 + 1)),
            },
        );
    }
    let gw = NextHop {
        ifindex: UPLINK,
        src_mac: MacAddr(OUR_MAC),
        dst_mac: MacAddr(ROUTER_MAC),
    };
    t.set_gateway(false, gw);
    t.set_gateway(true, gw);
    t.set_local_addresses(&[ip("10.0.0.254"), ip("2001:db8:a::fe")]);
    let ct = ConnTable::new(4096, c.appliance.timeouts, t.backends.len(), 0, 1);
    (t, ct, WorkerState::new())
}

fn mac_of(t: &Tables, vip: &str) -> [u8; 6] {
    let v = t.vips.iter().position(|v| v.name == vip).expect("vip");
    backend_mac(t.vips[v].backends.start as u8 + 1)
}

fn flow_hash(src: &str, dst: &str, sport: u16, dport: u16, proto: u8) -> u32 {
    let s = ip(src);
    FlowKey {
        src: addr_to_u128(s),
        dst: addr_to_u128(ip(dst)),
        sport,
        dport,
        proto,
        v6: s.is_ipv6(),
    }
    .hash(HashFields::FiveTuple)
}

fn tsrc(v6: bool, hash: u32) -> (IpAddr, u16) {
    let (a, p) = tunnel_source(&sluice::lb::TunnelSource::default(), v6, hash);
    (sluice::lb::hash::u128_to_addr(a, v6), p)
}

// ---- the fixtures -------------------------------------------------------------------

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const SYNACK: u8 = 0x12;
const PSHACK: u8 = 0x18;

fn tx(
    description: &'static str,
    input: &Pkt,
    ifindex: u32,
    output: Vec<u8>,
    stat: Option<fn(&WorkerStats) -> u64>,
) -> Fixture {
    Fixture {
        description,
        input: input.build(),
        ifindex: UPLINK,
        verdict: Verdict::Tx { ifindex },
        output,
        stat,
    }
}

fn not_tx(description: &'static str, input: Vec<u8>, verdict: Verdict) -> Fixture {
    Fixture {
        description,
        output: input.clone(),
        input,
        ifindex: UPLINK,
        verdict,
        stat: None,
    }
}

fn drop(description: &'static str, input: Vec<u8>, r: DropReason) -> Fixture {
    not_tx(description, input, Verdict::Drop(r))
}

/// The FullNAT local port the golden setup's first flow toward `backend:port` gets, from a
/// fresh table (the allocator itself is tested in `conntrack`).
fn snat_port(proto: u8, backend: &str, port: u16, pool: &str, hash: u32) -> u16 {
    let mut ct = ConnTable::new(16, Default::default(), 1, 0, 1);
    let pool = [addr_to_u128(ip(pool))];
    ct.alloc_snat(proto, addr_to_u128(ip(backend)), port, &pool, hash, NOW)
        .expect("port")
        .1
}

/// The whole table, in replay order.
pub fn fixtures() -> Vec<Fixture> {
    let (t, _, _) = setup();
    let mut f = Vec::new();
    let c4 = "198.51.100.7";
    let c6 = "2001:db8:c::7";
    let router4 = "203.0.113.1";
    let router6 = "2001:db8:ffff::1";

    // ---------------- NAT, IPv4 ----------------
    let syn = Pkt::new(c4, "192.0.2.10", 6, tcp(40000, 80, SYN, 1000, b""));
    let mut out = syn.clone().dport(8080).macs(mac_of(&t, "nat4"), OUR_MAC);
    out.dst = ip("10.0.0.1");
    out.ttl = 63;
    f.push(tx(
        "nat4 tcp syn: dnat to backend 10.0.0.1:8080, ttl-1",
        &syn,
        BACKENDS,
        out.build(),
        None,
    ));

    let synack = Pkt::new("10.0.0.1", c4, 6, tcp(8080, 40000, SYNACK, 5000, b""))
        .macs(OUR_MAC, mac_of(&t, "nat4"));
    let mut out = synack.clone().sport(80).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("192.0.2.10");
    out.ttl = 63;
    let mut fx = tx(
        "nat4 tcp syn-ack return: snat back to vip:80",
        &synack,
        UPLINK,
        out.build(),
        None,
    );
    fx.ifindex = BACKENDS;
    f.push(fx);

    let ack = Pkt::new(
        c4,
        "192.0.2.10",
        6,
        tcp(40000, 80, PSHACK, 1001, b"GET / HTTP/1.0\r\n\r\n"),
    );
    let mut out = ack.clone().dport(8080).macs(mac_of(&t, "nat4"), OUR_MAC);
    out.dst = ip("10.0.0.1");
    out.ttl = 63;
    f.push(tx(
        "nat4 tcp established data: dnat",
        &ack,
        BACKENDS,
        out.build(),
        None,
    ));

    let mut opt = Pkt::new(c4, "192.0.2.10", 6, tcp(40001, 80, SYN, 7, b""));
    opt.options = vec![0x01, 0x01, 0x01, 0x00];
    let mut out = opt.clone().dport(8080).macs(mac_of(&t, "nat4"), OUR_MAC);
    out.dst = ip("10.0.0.1");
    out.ttl = 63;
    f.push(tx(
        "nat4 with ip options (ihl 6): options kept",
        &opt,
        BACKENDS,
        out.build(),
        None,
    ));

    let mut tagged = Pkt::new(c4, "192.0.2.10", 6, tcp(40002, 80, SYN, 9, b""));
    tagged.vlans = vec![100];
    let mut out = tagged.clone().dport(8080).macs(mac_of(&t, "nat4"), OUR_MAC);
    out.dst = ip("10.0.0.1");
    out.ttl = 63;
    f.push(tx(
        "nat4 vlan 100 tagged: tag kept",
        &tagged,
        BACKENDS,
        out.build(),
        None,
    ));

    let mut ttl1 = Pkt::new(c4, "192.0.2.10", 6, tcp(40003, 80, SYN, 11, b""));
    ttl1.ttl = 1;
    let inb = ttl1.ip_bytes();
    let mut out =
        Pkt::new("192.0.2.10", c4, 1, icmp(11, 0, [0; 4], &inb[..28])).macs(ROUTER_MAC, OUR_MAC);
    out.ident = 0;
    f.push(Fixture {
        verdict: Verdict::Tx { ifindex: UPLINK },
        ..tx(
            "nat4 ttl 1: icmp time exceeded from the vip",
            &ttl1,
            UPLINK,
            out.build(),
            Some(|s| s.time_exceeded_sent),
        )
    });

    let stray = Pkt::new("10.0.0.1", "198.51.100.8", 6, tcp(8080, 41000, ACK, 1, b""))
        .macs(OUR_MAC, mac_of(&t, "nat4"));
    let mut out = stray.clone().sport(80).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("192.0.2.10");
    out.ttl = 63;
    let mut fx = tx(
        "nat4 return without a flow: stateless snat",
        &stray,
        UPLINK,
        out.build(),
        Some(|s| s.stateless_return),
    );
    fx.ifindex = BACKENDS;
    f.push(fx);

    let mut r1 = Pkt::new("10.0.0.1", c4, 6, tcp(8080, 40000, ACK, 5001, b""))
        .macs(OUR_MAC, mac_of(&t, "nat4"));
    r1.ttl = 1;
    f.push(drop(
        "nat4 return with ttl 1: dropped",
        r1.build(),
        DropReason::TtlExceeded,
    ));

    let mut padded = Pkt::new(c4, "192.0.2.10", 6, tcp(40004, 80, SYN, 13, b""));
    padded.pad_to = 60;
    let mut out = padded.clone().dport(8080).macs(mac_of(&t, "nat4"), OUR_MAC);
    out.dst = ip("10.0.0.1");
    out.ttl = 63;
    f.push(tx(
        "nat4 with ethernet padding: padding kept",
        &padded,
        BACKENDS,
        out.build(),
        None,
    ));

    // ---------------- NAT, IPv4 UDP ----------------
    let q = Pkt::new(c4, "192.0.2.10", 17, udp(5555, 53, b"\x12\x34query"));
    let mut out = q.clone().dport(5353).macs(mac_of(&t, "nat4u"), OUR_MAC);
    out.dst = ip("10.0.0.2");
    out.ttl = 63;
    f.push(tx(
        "nat4u udp: dnat with port mapping 53 -> 5353",
        &q,
        BACKENDS,
        out.build(),
        None,
    ));

    let r = Pkt::new("10.0.0.2", c4, 17, udp(5353, 5555, b"\x12\x34answer"))
        .macs(OUR_MAC, mac_of(&t, "nat4u"));
    let mut out = r.clone().sport(53).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("192.0.2.10");
    out.ttl = 63;
    let mut fx = tx(
        "nat4u udp return: snat to vip:53",
        &r,
        UPLINK,
        out.build(),
        None,
    );
    fx.ifindex = BACKENDS;
    f.push(fx);

    let mut z = Pkt::new(c4, "192.0.2.10", 17, udp(5556, 53, b"nocsum"));
    z.csum_at = None;
    let mut out = z.clone().dport(5353).macs(mac_of(&t, "nat4u"), OUR_MAC);
    out.dst = ip("10.0.0.2");
    out.ttl = 63;
    f.push(tx(
        "nat4u udp with zero checksum: stays zero",
        &z,
        BACKENDS,
        out.build(),
        None,
    ));

    // ---------------- NAT, IPv6 ----------------
    let syn6 = Pkt::new(c6, "2001:db8::10", 6, tcp(40000, 80, SYN, 1, b""));
    let mut out = syn6.clone().dport(8080).macs(mac_of(&t, "nat6"), OUR_MAC);
    out.dst = ip("2001:db8:a::1");
    out.ttl = 63;
    f.push(tx(
        "nat6 tcp syn: dnat, hop limit-1",
        &syn6,
        BACKENDS,
        out.build(),
        None,
    ));

    let sa6 = Pkt::new("2001:db8:a::1", c6, 6, tcp(8080, 40000, SYNACK, 2, b""))
        .macs(OUR_MAC, mac_of(&t, "nat6"));
    let mut out = sa6.clone().sport(80).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("2001:db8::10");
    out.ttl = 63;
    let mut fx = tx("nat6 tcp return: snat", &sa6, UPLINK, out.build(), None);
    fx.ifindex = BACKENDS;
    f.push(fx);

    let mut h1 = Pkt::new(c6, "2001:db8::10", 6, tcp(40001, 80, SYN, 3, b""));
    h1.ttl = 1;
    let inb = h1.ip_bytes();
    let out = Pkt::new("2001:db8::10", c6, 58, icmp(3, 0, [0; 4], &inb)).macs(ROUTER_MAC, OUR_MAC);
    f.push(tx(
        "nat6 hop limit 1: icmpv6 time exceeded",
        &h1,
        UPLINK,
        out.build(),
        Some(|s| s.time_exceeded_sent),
    ));

    let u6 = Pkt::new(c6, "2001:db8::10", 17, udp(6000, 53, b"q6"));
    let mut out = u6.clone().macs(mac_of(&t, "nat6u"), OUR_MAC);
    out.dst = ip("2001:db8:a::2");
    out.ttl = 63;
    f.push(tx("nat6u udp: dnat", &u6, BACKENDS, out.build(), None));

    let u6r =
        Pkt::new("2001:db8:a::2", c6, 17, udp(53, 6000, b"a6")).macs(OUR_MAC, mac_of(&t, "nat6u"));
    let mut out = u6r.clone().macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("2001:db8::10");
    out.ttl = 63;
    let mut fx = tx("nat6u udp return: snat", &u6r, UPLINK, out.build(), None);
    fx.ifindex = BACKENDS;
    f.push(fx);

    let mut hbh = Pkt::new(c6, "2001:db8::10", 6, tcp(40002, 80, SYN, 4, b""));
    hbh.hop_by_hop = Some([1, 4, 0, 0, 0, 0]);
    let mut out = hbh.clone().dport(8080).macs(mac_of(&t, "nat6"), OUR_MAC);
    out.dst = ip("2001:db8:a::1");
    out.ttl = 63;
    f.push(tx(
        "nat6 with hop-by-hop header: walked and kept",
        &hbh,
        BACKENDS,
        out.build(),
        None,
    ));

    // ---------------- FullNAT ----------------
    let s = Pkt::new(c4, "192.0.2.20", 6, tcp(40000, 443, SYN, 1, b""));
    let h = flow_hash(c4, "192.0.2.20", 40000, 443, 6);
    let lport = snat_port(6, "10.0.0.3", 8443, "10.1.0.1", h);
    let mut out = s
        .clone()
        .sport(lport)
        .dport(8443)
        .macs(mac_of(&t, "fnat4"), OUR_MAC);
    out.src = ip("10.1.0.1");
    out.dst = ip("10.0.0.3");
    out.ttl = 63;
    f.push(tx(
        "fnat4 tcp syn: dnat + snat to 10.1.0.1",
        &s,
        BACKENDS,
        out.build(),
        None,
    ));

    let r = Pkt::new("10.0.0.3", "10.1.0.1", 6, tcp(8443, lport, SYNACK, 9, b""))
        .macs(OUR_MAC, mac_of(&t, "fnat4"));
    let mut out = r.clone().sport(443).dport(40000).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("192.0.2.20");
    out.dst = ip(c4);
    out.ttl = 63;
    let mut fx = tx(
        "fnat4 tcp return to the local port: back to the client",
        &r,
        UPLINK,
        out.build(),
        None,
    );
    fx.ifindex = BACKENDS;
    f.push(fx);

    let s = Pkt::new(c4, "192.0.2.20", 17, udp(40000, 443, b"quic"));
    let h = flow_hash(c4, "192.0.2.20", 40000, 443, 17);
    let uport = snat_port(17, "10.0.0.3", 8443, "10.1.0.1", h);
    let mut out = s
        .clone()
        .sport(uport)
        .dport(8443)
        .macs(mac_of(&t, "fnat4u"), OUR_MAC);
    out.src = ip("10.1.0.1");
    out.dst = ip("10.0.0.3");
    out.ttl = 63;
    f.push(tx(
        "fnat4u udp: dnat + snat",
        &s,
        BACKENDS,
        out.build(),
        None,
    ));

    let r = Pkt::new("10.0.0.3", "10.1.0.1", 17, udp(8443, uport, b"quic-reply"))
        .macs(OUR_MAC, mac_of(&t, "fnat4u"));
    let mut out = r.clone().sport(443).dport(40000).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("192.0.2.20");
    out.dst = ip(c4);
    out.ttl = 63;
    let mut fx = tx("fnat4u udp return", &r, UPLINK, out.build(), None);
    fx.ifindex = BACKENDS;
    f.push(fx);

    let s = Pkt::new(c6, "2001:db8::20", 6, tcp(40000, 443, SYN, 1, b""));
    let h = flow_hash(c6, "2001:db8::20", 40000, 443, 6);
    let p6 = snat_port(6, "2001:db8:a::3", 8443, "2001:db8:f::1", h);
    let mut out = s
        .clone()
        .sport(p6)
        .dport(8443)
        .macs(mac_of(&t, "fnat6"), OUR_MAC);
    out.src = ip("2001:db8:f::1");
    out.dst = ip("2001:db8:a::3");
    out.ttl = 63;
    f.push(tx(
        "fnat6 tcp syn: dnat + snat",
        &s,
        BACKENDS,
        out.build(),
        None,
    ));

    let r = Pkt::new(
        "2001:db8:a::3",
        "2001:db8:f::1",
        6,
        tcp(8443, p6, SYNACK, 1, b""),
    )
    .macs(OUR_MAC, mac_of(&t, "fnat6"));
    let mut out = r.clone().sport(443).dport(40000).macs(ROUTER_MAC, OUR_MAC);
    out.src = ip("2001:db8::20");
    out.dst = ip(c6);
    out.ttl = 63;
    let mut fx = tx("fnat6 tcp return", &r, UPLINK, out.build(), None);
    fx.ifindex = BACKENDS;
    f.push(fx);

    let other = lport.wrapping_add(2);
    let r = Pkt::new("10.0.0.3", "10.1.0.1", 6, tcp(8443, other, ACK, 9, b""));
    f.push(drop(
        "fnat4 return to an unallocated local port",
        r.build(),
        DropReason::NoFlow,
    ));

    // ---------------- DR ----------------
    let d = Pkt::new(c4, "192.0.2.30", 6, tcp(40000, 80, SYN, 1, b""));
    let out = d.clone().macs(mac_of(&t, "dr4"), OUR_MAC);
    f.push(tx("dr4 tcp: macs only", &d, BACKENDS, out.build(), None));

    let d = Pkt::new(c4, "192.0.2.30", 17, udp(1234, 9999, b"any port"));
    let out = d.clone().macs(mac_of(&t, "dr4u"), OUR_MAC);
    f.push(tx(
        "dr4u udp to a port-0 vip: macs only",
        &d,
        BACKENDS,
        out.build(),
        None,
    ));

    let d = Pkt::new(c6, "2001:db8::30", 6, tcp(40000, 80, SYN, 1, b""));
    let out = d.clone().macs(mac_of(&t, "dr6"), OUR_MAC);
    f.push(tx("dr6 tcp: macs only", &d, BACKENDS, out.build(), None));

    let mut d = Pkt::new(c4, "192.0.2.30", 6, tcp(40001, 80, SYN, 1, b""));
    d.vlans = vec![200];
    let out = d.clone().macs(mac_of(&t, "dr4"), OUR_MAC);
    f.push(tx(
        "dr4 vlan-tagged: tag kept",
        &d,
        BACKENDS,
        out.build(),
        None,
    ));

    let mut d = Pkt::new(c4, "192.0.2.30", 6, tcp(40002, 80, SYN, 1, b""));
    d.ttl = 1;
    let out = d.clone().macs(mac_of(&t, "dr4"), OUR_MAC);
    f.push(tx(
        "dr4 ttl 1: dr does not decrement, forwarded",
        &d,
        BACKENDS,
        out.build(),
        None,
    ));

    let mut qinq = Pkt::new(c4, "192.0.2.30", 6, tcp(40003, 80, ACK, 1, b""));
    qinq.vlans = vec![10, 20];
    let out = qinq.clone().macs(mac_of(&t, "dr4"), OUR_MAC);
    f.push(tx(
        "dr4 double-tagged (q-in-q): both tags kept",
        &qinq,
        BACKENDS,
        out.build(),
        None,
    ));

    // ---------------- tunnels ----------------
    let tun = |name: &'static str,
               desc: &'static str,
               client: &str,
               vip_addr: &str,
               backend: &str,
               udp_port: Option<u16>,
               vxlan: Option<u32>,
               mutate: &dyn Fn(&mut Pkt)|
     -> Fixture {
        let mut inner = Pkt::new(client, vip_addr, 6, tcp(40000, 80, SYN, 77, b""));
        mutate(&mut inner);
        let h = flow_hash(client, vip_addr, 40000, 80, 6);
        let b = ip(backend);
        let (osrc, sport) = tsrc(b.is_ipv6(), h);
        let mut outer = Pkt::new(client, vip_addr, 4, Vec::new()).macs(mac_of(&t, name), OUR_MAC);
        outer.src = osrc;
        outer.dst = b;
        outer.ttl = 64;
        outer.tos = inner.tos;
        outer.ident = 0;
        outer.df = !inner.v6() && inner.df || inner.v6();
        if b.is_ipv6() {
            outer.flow_label = h & 0xfffff;
        }
        let vx = vxlan.map(|vni| (vni, mac_of(&t, name), OUR_MAC));
        let output = encap_frame(&inner, outer, udp_port.map(|p| (sport, p)), vx);
        Fixture {
            description: desc,
            input: inner.build(),
            ifindex: UPLINK,
            verdict: Verdict::Tx { ifindex: BACKENDS },
            output,
            stat: None,
        }
    };
    let none = |_: &mut Pkt| {};
    f.push(tun(
        "ipip4",
        "ipip 4in4: outer src 172.16.x.x from the flow hash",
        c4,
        "192.0.2.40",
        "10.0.0.5",
        None,
        None,
        &none,
    ));
    f.push(tun(
        "ipip6",
        "ipip 6in6: outer flow label from the flow hash",
        c6,
        "2001:db8::40",
        "2001:db8:a::5",
        None,
        None,
        &none,
    ));
    f.push(tun(
        "ipip46",
        "ipip 4in6 for an ipv6 backend",
        c4,
        "192.0.2.41",
        "2001:db8:a::6",
        None,
        None,
        &none,
    ));
    f.push(tun(
        "ipip64",
        "ipip 6in4 for an ipv4 backend",
        c6,
        "2001:db8::41",
        "10.0.0.6",
        None,
        None,
        &none,
    ));
    f.push(tun(
        "gue4",
        "gue over ipv4: udp 6080, zero udp checksum",
        c4,
        "192.0.2.50",
        "10.0.0.7",
        Some(6080),
        None,
        &none,
    ));
    f.push(tun(
        "gue6",
        "gue over ipv6: udp checksum computed",
        c6,
        "2001:db8::50",
        "2001:db8:a::7",
        Some(6080),
        None,
        &none,
    ));
    f.push(tun(
        "vxlan4",
        "vxlan over ipv4: vni 4242, inner ethernet",
        c4,
        "192.0.2.60",
        "10.0.0.8",
        Some(4789),
        Some(4242),
        &none,
    ));
    f.push(tun(
        "vxlan6",
        "vxlan over ipv6",
        c6,
        "2001:db8::60",
        "2001:db8:a::8",
        Some(4789),
        Some(4242),
        &none,
    ));
    f.push(tun(
        "ipip4",
        "ipip 4in4 with inner df and dscp: copied to the outer header",
        c4,
        "192.0.2.40",
        "10.0.0.5",
        None,
        None,
        &|p: &mut Pkt| {
            p.df = true;
            p.tos = 0xb8;
        },
    ));
    f.push(tun(
        "ipip4",
        "ipip 4in4 vlan-tagged: outer keeps the tag",
        c4,
        "192.0.2.40",
        "10.0.0.5",
        None,
        None,
        &|p: &mut Pkt| {
            p.vlans = vec![300];
        },
    ));
    f.push(tun(
        "gue4",
        "gue with inner ttl 1: inner ttl untouched",
        c4,
        "192.0.2.50",
        "10.0.0.7",
        Some(6080),
        None,
        &|p: &mut Pkt| {
            p.ttl = 1;
        },
    ));
    f.push(tun(
        "ipip6",
        "ipip 6in6 with inner traffic class",
        c6,
        "2001:db8::40",
        "2001:db8:a::5",
        None,
        None,
        &|p: &mut Pkt| {
            p.tos = 0x28;
        },
    ));

    // ---------------- ICMP ----------------
    let e = Pkt::new(
        c4,
        "192.0.2.10",
        1,
        icmp(8, 0, [0x12, 0x34, 0, 1], b"ping-payload"),
    );
    let mut out = Pkt::new(
        "192.0.2.10",
        c4,
        1,
        icmp(0, 0, [0x12, 0x34, 0, 1], b"ping-payload"),
    )
    .macs(ROUTER_MAC, OUR_MAC);
    out.ttl = 64;
    f.push(tx(
        "icmp echo to a vip: answered by the appliance",
        &e,
        UPLINK,
        out.build(),
        Some(|s| s.echo_replies),
    ));

    let mut e = Pkt::new(c4, "192.0.2.30", 1, icmp(8, 0, [0, 7, 0, 9], b""));
    e.ttl = 3;
    let out =
        Pkt::new("192.0.2.30", c4, 1, icmp(0, 0, [0, 7, 0, 9], b"")).macs(ROUTER_MAC, OUR_MAC);
    f.push(tx(
        "icmp echo with ttl 3 to a dr vip: reply ttl 64",
        &e,
        UPLINK,
        out.build(),
        Some(|s| s.echo_replies),
    ));

    let e = Pkt::new(
        c6,
        "2001:db8::30",
        58,
        icmp(128, 0, [0xab, 0xcd, 0, 2], b"ping6"),
    );
    let out = Pkt::new(
        "2001:db8::30",
        c6,
        58,
        icmp(129, 0, [0xab, 0xcd, 0, 2], b"ping6"),
    )
    .macs(ROUTER_MAC, OUR_MAC);
    f.push(tx(
        "icmpv6 echo to a vip: answered",
        &e,
        UPLINK,
        out.build(),
        Some(|s| s.echo_replies),
    ));

    let e = Pkt::new(c4, "192.0.2.99", 1, icmp(8, 0, [0, 1, 0, 1], b""));
    f.push(not_tx(
        "icmp echo to a non-vip address: kernel",
        e.build(),
        Verdict::Pass,
    ));

    // An error quoting dr4's flow (the backend answered with src = VIP).
    let quoted = Pkt::new("192.0.2.30", c4, 6, tcp(80, 40000, SYNACK, 5, b"x")).ip_bytes();
    let mut e = Pkt::new(
        router4,
        "192.0.2.30",
        1,
        icmp(3, 4, [0, 0, 0x05, 0x78], &quoted[..28]),
    );
    e.ttl = 250;
    let out = e.clone().macs(mac_of(&t, "dr4"), OUR_MAC);
    f.push(tx(
        "icmp frag-needed quoting a dr flow: to that flow's backend",
        &e,
        BACKENDS,
        out.build(),
        Some(|s| s.icmp_errors_forwarded),
    ));

    let quoted = Pkt::new("2001:db8::30", c6, 6, tcp(80, 40000, ACK, 5, &[0u8; 64])).ip_bytes();
    let e = Pkt::new(
        router6,
        "2001:db8::30",
        58,
        icmp(2, 0, [0, 0, 0x05, 0x00], &quoted),
    );
    let out = e.clone().macs(mac_of(&t, "dr6"), OUR_MAC);
    f.push(tx(
        "icmpv6 packet-too-big quoting a dr6 flow: to its backend",
        &e,
        BACKENDS,
        out.build(),
        Some(|s| s.icmp_errors_forwarded),
    ));

    // Quoting nat4's flow as the client saw it (VIP:80 -> client:40000).
    let q_in = Pkt::new("192.0.2.10", c4, 6, tcp(80, 40000, ACK, 5, b"data")).ip_bytes();
    let e = Pkt::new(
        router4,
        "192.0.2.10",
        1,
        icmp(3, 4, [0, 0, 0x05, 0x78], &q_in[..28]),
    );
    let mut q_out = Pkt::new("10.0.0.1", c4, 6, tcp(8080, 40000, ACK, 5, b"data"));
    q_out.csum_at = None;
    let q_out = q_out.ip_bytes();
    let mut out = Pkt::new(
        router4,
        "10.0.0.1",
        1,
        icmp(3, 4, [0, 0, 0x05, 0x78], &q_out[..28]),
    )
    .macs(mac_of(&t, "nat4"), OUR_MAC);
    out.ttl = 63;
    f.push(tx(
        "icmp frag-needed quoting a nat flow: outer dst and quoted src rewritten to the backend",
        &e,
        BACKENDS,
        out.build(),
        Some(|s| s.icmp_errors_forwarded),
    ));

    // Quoting nat4u's flow: the quoted UDP checksum is patched too.
    let q_in = Pkt::new("192.0.2.10", c4, 17, udp(53, 5555, b"\x12\x34answer")).ip_bytes();
    let e = Pkt::new(router4, "192.0.2.10", 1, icmp(3, 3, [0; 4], &q_in));
    let q_out = Pkt::new("10.0.0.2", c4, 17, udp(5353, 5555, b"\x12\x34answer")).ip_bytes();
    let mut out = Pkt::new(router4, "10.0.0.2", 1, icmp(3, 3, [0; 4], &q_out))
        .macs(mac_of(&t, "nat4u"), OUR_MAC);
    out.ttl = 63;
    f.push(tx(
        "icmp port-unreachable quoting a nat udp flow: quoted udp checksum patched",
        &e,
        BACKENDS,
        out.build(),
        Some(|s| s.icmp_errors_forwarded),
    ));

    // Quoting fnat4's flow.
    let q_in = Pkt::new("192.0.2.20", c4, 6, tcp(443, 40000, ACK, 5, b"")).ip_bytes();
    let e = Pkt::new(router4, "192.0.2.20", 1, icmp(11, 0, [0; 4], &q_in[..28]));
    let mut q_out = Pkt::new("10.0.0.3", "10.1.0.1", 6, tcp(8443, lport, ACK, 5, b""));
    q_out.csum_at = None;
    let q_out = q_out.ip_bytes();
    let mut out = Pkt::new("10.1.0.1", "10.0.0.3", 1, icmp(11, 0, [0; 4], &q_out[..28]))
        .macs(mac_of(&t, "fnat4"), OUR_MAC);
    out.ttl = 63;
    f.push(tx(
        "icmp time-exceeded quoting a fullnat flow: from the snat address to the backend",
        &e,
        BACKENDS,
        out.build(),
        Some(|s| s.icmp_errors_forwarded),
    ));

    // Quoting a tunnel VIP's flow: encapsulated like the flow.
    let quoted = Pkt::new("192.0.2.40", c4, 6, tcp(80, 40000, SYNACK, 5, b"")).ip_bytes();
    let e = Pkt::new(
        router4,
        "192.0.2.40",
        1,
        icmp(3, 4, [0, 0, 0x05, 0x78], &quoted[..28]),
    );
    let h = flow_hash(c4, "192.0.2.40", 40000, 80, 6);
    let (osrc, _) = tsrc(false, h);
    let mut outer = Pkt::new(c4, "10.0.0.5", 4, Vec::new()).macs(mac_of(&t, "ipip4"), OUR_MAC);
    outer.src = osrc;
    outer.ident = 0;
    f.push(Fixture {
        description: "icmp frag-needed quoting an ipip flow: encapsulated to its backend",
        input: e.build(),
        ifindex: UPLINK,
        verdict: Verdict::Tx { ifindex: BACKENDS },
        output: encap_frame(&e, outer, None, None),
        stat: Some(|s| s.icmp_errors_forwarded),
    });

    let quoted = Pkt::new("192.0.2.10", c4, 6, tcp(9999, 40000, ACK, 5, b"")).ip_bytes();
    let e = Pkt::new(router4, "192.0.2.10", 1, icmp(3, 1, [0; 4], &quoted[..28]));
    f.push(drop(
        "icmp error quoting a port no vip serves",
        e.build(),
        DropReason::IcmpNoFlow,
    ));

    let e = Pkt::new(router4, "192.0.2.10", 1, icmp(3, 1, [0; 4], &[0x45, 0, 0]));
    f.push(drop(
        "icmp error with a truncated quote",
        e.build(),
        DropReason::IcmpNoFlow,
    ));

    let mut ns = Pkt::new(c6, "2001:db8::30", 58, icmp(135, 0, [0; 4], &[0u8; 16]));
    ns.ttl = 255;
    f.push(not_tx(
        "icmpv6 neighbour solicitation to a vip address: kernel",
        ns.build(),
        Verdict::Pass,
    ));

    // ---------------- fragments ----------------
    let mut fr = Pkt::new(c4, "192.0.2.30", 17, udp(7000, 9000, &[7u8; 32]));
    fr.frag = Some((0, true, 0));
    let out = fr.clone().macs(mac_of(&t, "dr4u"), OUR_MAC);
    f.push(tx(
        "dr4u first fragment: 3-tuple maglev",
        &fr,
        BACKENDS,
        out.build(),
        Some(|s| s.fragments),
    ));

    let mut fr = Pkt::new(c4, "192.0.2.30", 17, vec![9u8; 24]);
    fr.frag = Some((40, false, 0));
    let out = fr.clone().macs(mac_of(&t, "dr4u"), OUR_MAC);
    f.push(tx(
        "dr4u non-first fragment (no ports): same backend",
        &fr,
        BACKENDS,
        out.build(),
        Some(|s| s.fragments),
    ));

    let mut fr = Pkt::new(c6, "2001:db8::30", 6, tcp(40000, 80, ACK, 1, &[1u8; 40]));
    fr.frag = Some((0, true, 0xdead));
    let out = fr.clone().macs(mac_of(&t, "dr6"), OUR_MAC);
    f.push(tx(
        "dr6 ipv6 first fragment (fragment header): forwarded",
        &fr,
        BACKENDS,
        out.build(),
        Some(|s| s.fragments),
    ));

    let mut fr = Pkt::new(c6, "2001:db8::30", 6, vec![2u8; 16]);
    fr.frag = Some((48, false, 0xdead));
    let out = fr.clone().macs(mac_of(&t, "dr6"), OUR_MAC);
    f.push(tx(
        "dr6 ipv6 last fragment: same backend",
        &fr,
        BACKENDS,
        out.build(),
        Some(|s| s.fragments),
    ));

    let mut fr = Pkt::new(c4, "192.0.2.10", 17, udp(5555, 53, &[0u8; 16]));
    fr.frag = Some((0, true, 0));
    f.push(drop(
        "fragment to a nat vip: needs reassembly",
        fr.build(),
        DropReason::FragmentNat,
    ));

    let mut fr = Pkt::new(c4, "192.0.2.90", 17, vec![0u8; 16]);
    fr.frag = Some((64, false, 0));
    f.push(drop(
        "fragment for an address with two udp vips",
        fr.build(),
        DropReason::FragmentAmbiguous,
    ));

    let mut fr = Pkt::new(c4, "192.0.2.40", 6, tcp(40000, 80, ACK, 1, &[3u8; 16]));
    fr.frag = Some((0, true, 0));
    let h = FlowKey {
        src: addr_to_u128(ip(c4)),
        dst: addr_to_u128(ip("192.0.2.40")),
        sport: 0,
        dport: 0,
        proto: 6,
        v6: false,
    }
    .hash(HashFields::ThreeTuple);
    let (osrc, _) = tsrc(false, h);
    let mut outer = Pkt::new(c4, "10.0.0.5", 4, Vec::new()).macs(mac_of(&t, "ipip4"), OUR_MAC);
    outer.src = osrc;
    outer.ident = 0;
    f.push(Fixture {
        description: "ipip4 fragment: encapsulated, outer source from the 3-tuple hash",
        input: fr.build(),
        ifindex: UPLINK,
        verdict: Verdict::Tx { ifindex: BACKENDS },
        output: encap_frame(&fr, outer, None, None),
        stat: Some(|s| s.fragments),
    });

    // ---------------- malformed ----------------
    let good = Pkt::new(c4, "192.0.2.10", 6, tcp(40100, 80, SYN, 1, b"")).build();
    f.push(drop(
        "truncated ethernet header",
        good[..10].to_vec(),
        DropReason::Truncated,
    ));
    f.push(drop(
        "truncated ipv4 header",
        good[..14 + 12].to_vec(),
        DropReason::Truncated,
    ));
    let mut b = good.clone();
    b[14] = 0x55;
    f.push(drop("ipv4 header with version 5", b, DropReason::Malformed));
    let mut b = good.clone();
    b[14] = 0x44;
    f.push(drop("ipv4 ihl 4", b, DropReason::Malformed));
    let mut b = good.clone();
    b[16..18].copy_from_slice(&200u16.to_be_bytes());
    let c = checksum_fix(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    f.push(drop(
        "ipv4 total length beyond the frame",
        b,
        DropReason::Truncated,
    ));
    let mut b = good.clone();
    b[24] ^= 0xff;
    f.push(drop("ipv4 bad header checksum", b, DropReason::BadChecksum));
    let mut b = good.clone();
    b[16..18].copy_from_slice(&10u16.to_be_bytes());
    let c = checksum_fix(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
    f.push(drop(
        "ipv4 total length below the header length",
        b,
        DropReason::Malformed,
    ));
    let mut short = Pkt::new(
        c4,
        "192.0.2.10",
        6,
        vec![0x9c, 0x40, 0, 80, 0, 0, 0, 1, 0, 0],
    );
    short.csum_at = None;
    f.push(drop(
        "tcp header cut short (10 bytes) to a vip",
        short.build(),
        DropReason::Truncated,
    ));
    let mut bad = Pkt::new(c4, "192.0.2.10", 6, tcp(40101, 80, SYN, 1, b""));
    bad.l4[12] = 0x40;
    f.push(drop(
        "tcp data offset 4",
        bad.build(),
        DropReason::Malformed,
    ));
    let mut bad = Pkt::new(c4, "192.0.2.10", 6, tcp(40102, 80, SYN, 1, b""));
    bad.l4[12] = 0xf0;
    f.push(drop(
        "tcp data offset beyond the segment",
        bad.build(),
        DropReason::BadLength,
    ));
    let mut bad = Pkt::new(c4, "192.0.2.10", 17, udp(5000, 53, b"abc"));
    bad.l4[4..6].copy_from_slice(&100u16.to_be_bytes());
    f.push(drop(
        "udp length beyond the ip payload",
        bad.build(),
        DropReason::BadLength,
    ));
    let mut b6 = Pkt::new(c6, "2001:db8::10", 6, tcp(40000, 80, SYN, 1, b"")).build();
    b6[18..20].copy_from_slice(&500u16.to_be_bytes());
    f.push(drop(
        "ipv6 payload length beyond the frame",
        b6,
        DropReason::Truncated,
    ));
    let mut tri = Pkt::new(c4, "192.0.2.30", 6, tcp(40000, 80, SYN, 1, b""));
    tri.vlans = vec![1, 2, 3];
    f.push(drop(
        "three vlan tags",
        tri.build(),
        DropReason::TooManyHeaders,
    ));
    let b6 = Pkt::new(c6, "2001:db8::10", 6, tcp(40000, 80, SYN, 1, b"")).build();
    f.push(drop(
        "ipv6 header cut short",
        b6[..14 + 30].to_vec(),
        DropReason::Truncated,
    ));

    // ---------------- not for us ----------------
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&ROUTER_MAC);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&ROUTER_MAC);
    arp.extend_from_slice(&[203, 0, 113, 1, 0, 0, 0, 0, 0, 0, 192, 0, 2, 10]);
    f.push(not_tx("arp request for a vip: kernel", arp, Verdict::Pass));
    let o = Pkt::new(c4, "192.0.2.200", 6, tcp(40000, 22, SYN, 1, b""));
    f.push(not_tx(
        "tcp to a non-vip address: kernel",
        o.build(),
        Verdict::Pass,
    ));
    let o = Pkt::new(c4, "192.0.2.10", 6, tcp(40000, 22, SYN, 1, b""));
    f.push(not_tx(
        "tcp to a vip address on a port no vip serves: kernel",
        o.build(),
        Verdict::Pass,
    ));
    let mut ns = Pkt::new(c6, "ff02::1:ff00:30", 58, icmp(135, 0, [0; 4], &[0u8; 16]));
    ns.ttl = 255;
    f.push(not_tx(
        "icmpv6 neighbour solicitation to solicited-node multicast: kernel",
        ns.build(),
        Verdict::Pass,
    ));
    let gre = Pkt::new(c4, "192.0.2.10", 47, vec![0, 0, 0x08, 0]);
    f.push(not_tx(
        "gre to a vip address: kernel",
        gre.build(),
        Verdict::Pass,
    ));
    let u = Pkt::new("10.0.0.77", c4, 17, udp(5353, 5555, b"x"));
    f.push(not_tx(
        "udp from a non-backend: kernel",
        u.build(),
        Verdict::Pass,
    ));
    let probe = Pkt::new(
        "10.0.0.1",
        "10.0.0.254",
        6,
        tcp(8080, 50000, SYNACK, 1, b""),
    )
    .macs(OUR_MAC, mac_of(&t, "nat4"));
    f.push(not_tx(
        "nat backend's reply to the appliance's own address (health probe): kernel",
        probe.build(),
        Verdict::Pass,
    ));

    // ---------------- no backend / neighbour ----------------
    let p = Pkt::new(c4, "192.0.2.70", 6, tcp(40000, 80, SYN, 1, b""));
    f.push(drop(
        "vip whose only backend drains: no backend for new flows",
        p.build(),
        DropReason::NoBackend,
    ));
    let p = Pkt::new(c4, "192.0.2.80", 6, tcp(40000, 80, SYN, 1, b""));
    f.push(drop(
        "backend without a resolved neighbour",
        p.build(),
        DropReason::NoNeighbor,
    ));

    f
}

fn checksum_fix(hdr: &[u8]) -> u16 {
    let mut h = hdr.to_vec();
    h[10] = 0;
    h[11] = 0;
    checksum(&h)
}

/// Runs one fixture against the shared state, returning the frame as left in the buffer
/// and the verdict. The buffer around the frame is filled with poison 0xa5.
pub fn run(
    fx: &Fixture,
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
) -> (Verdict, Vec<u8>) {
    let mut buf = vec![0xa5u8; HEADROOM + fx.input.len() + 2048];
    buf[HEADROOM..HEADROOM + fx.input.len()].copy_from_slice(&fx.input);
    let mut frame = Frame::new(&mut buf, HEADROOM, fx.input.len(), fx.ifindex).expect("frame");
    let v = process(&mut frame, t, ct, w, NOW);
    (v, frame.data().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.chunks(16)
            .enumerate()
            .map(|(i, c)| {
                let h: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
                format!("{:04x}: {}\n", i * 16, h.join(" "))
            })
            .collect()
    }

    /// Verifies every checksum of an Ethernet frame from scratch, descending into IPIP,
    /// GUE, VXLAN and ICMP quotes' outer layers. Fragments' L4 checksums are skipped.
    fn verify_checksums(frame: &[u8], desc: &str) {
        let mut off = 12;
        let mut et = u16::from_be_bytes([frame[off], frame[off + 1]]);
        while et == 0x8100 {
            off += 4;
            et = u16::from_be_bytes([frame[off], frame[off + 1]]);
        }
        verify_ip(&frame[off + 2..], et == 0x86dd, desc);
    }

    fn verify_ip(p: &[u8], v6: bool, desc: &str) {
        let (src, dst, mut proto, mut l4, end, frag): (IpAddr, IpAddr, u8, usize, usize, bool);
        if v6 {
            let s: [u8; 16] = p[8..24].try_into().unwrap();
            let d: [u8; 16] = p[24..40].try_into().unwrap();
            src = IpAddr::from(s);
            dst = IpAddr::from(d);
            proto = p[6];
            l4 = 40;
            end = 40 + usize::from(u16::from_be_bytes([p[4], p[5]]));
            let mut fr = false;
            loop {
                match proto {
                    0 => {
                        proto = p[l4];
                        l4 += (usize::from(p[l4 + 1]) + 1) * 8;
                    }
                    44 => {
                        proto = p[l4];
                        l4 += 8;
                        fr = true;
                    }
                    _ => break,
                }
            }
            frag = fr;
        } else {
            let hl = usize::from(p[0] & 0xf) * 4;
            assert_eq!(checksum(&p[..hl]), 0, "{desc}: ipv4 header checksum");
            let s: [u8; 4] = p[12..16].try_into().unwrap();
            let d: [u8; 4] = p[16..20].try_into().unwrap();
            src = IpAddr::from(s);
            dst = IpAddr::from(d);
            proto = p[9];
            l4 = hl;
            end = usize::from(u16::from_be_bytes([p[2], p[3]]));
            frag = u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0;
        }
        let seg = &p[l4..end];
        match proto {
            4 => verify_ip(seg, false, desc),
            41 => verify_ip(seg, true, desc),
            _ if frag => {}
            6 | 58 | 1 => {
                assert_eq!(
                    l4_checksum(src, dst, proto, seg),
                    0,
                    "{desc}: l4 checksum ({proto})"
                );
            }
            17 => {
                let zero = seg[6] == 0 && seg[7] == 0;
                if !zero {
                    assert_eq!(l4_checksum(src, dst, proto, seg), 0, "{desc}: udp checksum");
                } else {
                    assert!(!v6, "{desc}: zero udp checksum over ipv6");
                }
                let dport = u16::from_be_bytes([seg[2], seg[3]]);
                if dport == 6080 {
                    verify_ip(&seg[8..], seg[8] >> 4 == 6, desc);
                } else if dport == 4789 {
                    verify_checksums(&seg[16..], desc);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn golden_fixtures() {
        let fixtures = fixtures();
        assert!(fixtures.len() >= 60, "{} fixtures", fixtures.len());
        let (t, mut ct, mut w) = setup();
        let mut failures = Vec::new();
        for fx in &fixtures {
            let drops_before = w.drops;
            let stat_before = fx.stat.map(|s| s(&w.stats));
            let (v, out) = run(fx, &t, &mut ct, &mut w);
            if v != fx.verdict {
                failures.push(format!(
                    "{}: verdict {:?}, want {:?}",
                    fx.description, v, fx.verdict
                ));
                continue;
            }
            if out != fx.output {
                failures.push(format!(
                    "{}: output differs\n got:\n{}want:\n{}",
                    fx.description,
                    hex(&out),
                    hex(&fx.output)
                ));
                continue;
            }
            match v {
                Verdict::Drop(r) => {
                    assert_eq!(
                        w.drops[r.index()],
                        drops_before[r.index()] + 1,
                        "{}",
                        fx.description
                    );
                    assert_eq!(w.total_drops(), drops_before.iter().sum::<u64>() + 1);
                }
                Verdict::Tx { .. } => {
                    verify_checksums(&out, fx.description);
                    // A time-exceeded answer counts its drop; nothing else may drop.
                    let extra = u64::from(fx.description.contains("time exceeded"));
                    assert_eq!(
                        w.total_drops(),
                        drops_before.iter().sum::<u64>() + extra,
                        "{}",
                        fx.description
                    );
                }
                Verdict::Pass => {
                    assert_eq!(w.drops, drops_before, "{}", fx.description);
                }
            }
            if let (Some(s), Some(before)) = (fx.stat, stat_before) {
                assert_eq!(s(&w.stats), before + 1, "{}: statistic", fx.description);
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} fixtures failed:\n{}",
            failures.len(),
            fixtures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn fixture_builder_checksums_are_self_consistent() {
        let p = Pkt::new("198.51.100.7", "192.0.2.10", 6, tcp(1, 2, SYN, 3, b"abc")).build();
        verify_checksums(&p, "builder tcp");
        let p = Pkt::new("2001:db8::1", "2001:db8::2", 17, udp(1, 2, b"abc")).build();
        verify_checksums(&p, "builder udp6");
    }
}
