//! Golden frames of the VIP probe (DR and each tunnel encapsulation, both families), the
//! capture filter run through a small classic-BPF interpreter, and answer classification.

use super::*;
use crate::config::BackendState;
use crate::config::Encap;
use crate::lb::hash::addr_to_u128;
use wire::MacAddr;
use wire::tcp::flags;

const APPLIANCE_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x10]);
const BACKEND_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x21]);

fn flow(v6: bool) -> ProbeFlow {
    let (src, vip): (IpAddr, SocketAddr) = if v6 {
        (
            "2001:db8:a::10".parse().unwrap(),
            "[2001:db8:f::12]:80".parse().unwrap(),
        )
    } else {
        (
            "10.0.0.10".parse().unwrap(),
            "192.0.2.12:80".parse().unwrap(),
        )
    };
    ProbeFlow {
        src,
        sport: 40000,
        vip,
        seq: 0x0102_0304,
    }
}

fn path(mode: Mode, v6: bool) -> Path {
    let backend: IpAddr = if v6 {
        "2001:db8:a::21".parse().unwrap()
    } else {
        "10.0.0.21".parse().unwrap()
    };
    Path {
        mode,
        backend: BackendEntry {
            vip: 0,
            address: addr_to_u128(backend),
            v6,
            port: 80,
            weight: 100,
            state: BackendState::Active,
            limit: None,
            limit_index: 0,
            token: 0,
            healthy: true,
            sorry: false,
            inhibit: false,
        },
        next_hop: NextHop {
            ifindex: 7,
            src_mac: APPLIANCE_MAC,
            dst_mac: BACKEND_MAC,
        },
        tunnel_source: TunnelSource::default(),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const GUE: Mode = Mode::Tunnel(Encap::Gue { port: 6080 });
const VXLAN: Mode = Mode::Tunnel(Encap::Vxlan {
    port: 4789,
    vni: 42,
});
const IPIP: Mode = Mode::Tunnel(Encap::Ipip);

/// The DR SYNs: the client-shaped frame every encapsulation wraps.
const DR_SYN4: &str = "02000000002102000000001008004500002c0000400040066eb60a00000ac000020c9c40005001020304000000006002faf030890000020405b4";
const DR_SYN6: &str = "02000000002102000000001086dd600000000018064020010db8000a0000000000000000001020010db8000f000000000000000000129c40005001020304000000006002faf0a0f20000020405b4";

/// `{ family, mode, payload, frame }`: every probe frame byte for byte.
const GOLDEN: [(bool, Mode, Payload<'static>, &str); 10] = [
    (false, Mode::Dr, Payload::Syn, DR_SYN4),
    (
        false,
        IPIP,
        Payload::Syn,
        "0200000000210200000000100800450000400000400040044291ac1042040a0000154500002c0000400040066eb60a00000ac000020c9c40005001020304000000006002faf030890000020405b4",
    ),
    (
        false,
        GUE,
        Payload::Syn,
        "020000000021020000000010080045000048000040004011427cac1042040a000015c20417c0003400004500002c0000400040066eb60a00000ac000020c9c40005001020304000000006002faf030890000020405b4",
    ),
    (
        false,
        VXLAN,
        Payload::Syn,
        "02000000002102000000001008004500005e0000400040114266ac1042040a000015c20412b5004a00000800000000002a0002000000002102000000001008004500002c0000400040066eb60a00000ac000020c9c40005001020304000000006002faf030890000020405b4",
    ),
    (
        false,
        Mode::Dr,
        Payload::Udp(b"ping"),
        "0200000000210200000000100800450000200000400040116eb70a00000ac000020c9c400050000cb85e70696e67",
    ),
    (true, Mode::Dr, Payload::Syn, DR_SYN6),
    (
        true,
        IPIP,
        Payload::Syn,
        "02000000002102000000001086dd60034204004029400100000000000000000000001fb3420420010db8000a00000000000000000021600000000018064020010db8000a0000000000000000001020010db8000f000000000000000000129c40005001020304000000006002faf0a0f20000020405b4",
    ),
    (
        true,
        GUE,
        Payload::Syn,
        "02000000002102000000001086dd60034204004811400100000000000000000000001fb3420420010db8000a00000000000000000021c20417c000482ec4600000000018064020010db8000a0000000000000000001020010db8000f000000000000000000129c40005001020304000000006002faf0a0f20000020405b4",
    ),
    (
        true,
        VXLAN,
        Payload::Syn,
        "02000000002102000000001086dd60034204005e11400100000000000000000000001fb3420420010db8000a00000000000000000021c20412b5005e76940800000000002a0002000000002102000000001086dd600000000018064020010db8000a0000000000000000001020010db8000f000000000000000000129c40005001020304000000006002faf0a0f20000020405b4",
    ),
    (
        true,
        Mode::Dr,
        Payload::Udp(b"ping"),
        "02000000002102000000001086dd60000000000c114020010db8000a0000000000000000001020010db8000f000000000000000000129c400050000c28c870696e67",
    ),
];

#[test]
fn probe_frames_match_the_golden_bytes() {
    for (v6, mode, payload, want) in GOLDEN {
        let got = build(&flow(v6), payload, &path(mode, v6)).unwrap();
        assert_eq!(hex(&got), want, "v6={v6} {mode:?} {payload:?}");
    }
}

/// The golden DR frames, read back by the wire parser with every checksum verified: the
/// fields a backend looks at, independently of the bytes above.
#[test]
fn dr_frames_are_a_clients_syn_to_the_vip() {
    for (v6, want) in [(false, DR_SYN4), (true, DR_SYN6)] {
        let bytes = unhex(want);
        let f = FrameRepr::parse(&bytes, true).unwrap();
        let fl = flow(v6);
        assert_eq!(
            (f.ethernet.src, f.ethernet.dst),
            (APPLIANCE_MAC, BACKEND_MAC)
        );
        assert_eq!((f.ip.src(), f.ip.dst()), (fl.src, fl.vip.ip()));
        let L4Repr::Tcp(t) = f.l4 else {
            panic!("not TCP")
        };
        assert_eq!((t.src_port, t.dst_port), (40000, 80));
        assert_eq!(
            (t.flags, t.seq_number, t.ack_number),
            (flags::SYN, fl.seq, 0)
        );
    }
    let rst = build(&flow(false), Payload::Rst, &path(Mode::Dr, false)).unwrap();
    let f = FrameRepr::parse(&rst, true).unwrap();
    let L4Repr::Tcp(t) = f.l4 else {
        panic!("not TCP")
    };
    assert_eq!((t.flags, t.seq_number), (flags::RST, 0x0102_0305));
}

/// Every encapsulation carries the DR frame's IP packet unchanged, to the backend's address,
/// with the encapsulation's own fields where the backend's decapsulator reads them.
#[test]
fn tunnel_frames_wrap_the_dr_packet() {
    for (v6, mode, _, want) in GOLDEN {
        let Mode::Tunnel(encap) = mode else { continue };
        let bytes = unhex(want);
        let inner_ip = &unhex(if v6 { DR_SYN6 } else { DR_SYN4 })[14..];
        assert!(
            bytes.ends_with(inner_ip),
            "{mode:?} v6={v6}: inner packet changed"
        );
        let outer = if v6 { 40 } else { 20 };
        let l3 = &bytes[14..];
        let (proto, dst) = if v6 {
            let p = Ipv6Packet::new_checked(l3).unwrap();
            (p.next_header(), IpAddr::from(p.dst()))
        } else {
            let p = Ipv4Packet::new_checked(l3).unwrap();
            assert!(p.verify_checksum());
            (p.protocol(), IpAddr::from(p.dst()))
        };
        assert_eq!(dst, path(mode, v6).backend.ip());
        let udp = &l3[outer..];
        match encap {
            Encap::Ipip => assert_eq!(proto, if v6 { 41 } else { 4 }),
            Encap::Gue { port } => {
                assert_eq!(proto, 17);
                assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), port);
            }
            Encap::Vxlan { port, vni } => {
                assert_eq!(proto, 17);
                assert_eq!(u16::from_be_bytes([udp[2], udp[3]]), port);
                assert_eq!(udp[8], 0x08, "VXLAN I flag");
                assert_eq!(u32::from_be_bytes([0, udp[12], udp[13], udp[14]]), vni);
                // The inner Ethernet header: to the backend's MAC, as the datapath sends.
                assert_eq!(&udp[16..22], &BACKEND_MAC.0);
            }
        }
    }
}

/// A classic BPF interpreter for the few opcodes the filter uses, so the program the
/// kernel runs is tested here. As in the kernel, a load past the frame's end returns 0.
fn run_filter(prog: &[SockFilter], pkt: &[u8]) -> u32 {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let load = |off: usize, n: usize| {
        pkt.get(off..off + n)
            .map(|b| b.iter().fold(0u32, |v, x| (v << 8) | u32::from(*x)))
    };
    loop {
        let i = prog[pc];
        pc += 1;
        let k = i.k as usize;
        let loaded = match i.code {
            bpf::LD_W_ABS => load(k, 4),
            bpf::LD_H_ABS => load(k, 2),
            bpf::LD_B_ABS => load(k, 1),
            bpf::LD_H_IND => load(x as usize + k, 2),
            bpf::LDX_B_MSH => {
                x = 4 * (load(k, 1).unwrap_or(0) & 0x0f);
                continue;
            }
            bpf::JEQ_K => {
                pc += usize::from(if a == i.k { i.jt } else { i.jf });
                continue;
            }
            bpf::AND_K => Some(a & i.k),
            bpf::RET_K => return i.k,
            c => panic!("opcode {c:#x} not interpreted"),
        };
        match loaded {
            Some(v) => a = v,
            None => return 0,
        }
    }
}

/// The backend's SYN-ACK (or RST, or UDP reply) to the probe, as captured.
fn answer_frame(v6: bool, l4: L4Repr<'_>, from_vip: bool) -> Vec<u8> {
    let fl = flow(v6);
    let src = if from_vip {
        fl.vip.ip()
    } else {
        path(Mode::Dr, v6).backend.ip()
    };
    let ip = match (src, fl.src) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Ipv4Repr::new(s, d, IpProtocol::Tcp, 0).into(),
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Repr::new(s, d, IpProtocol::Tcp, 0).into(),
        _ => unreachable!(),
    };
    let repr = FrameRepr {
        ethernet: EthernetRepr {
            src: BACKEND_MAC,
            dst: APPLIANCE_MAC,
            vlan_tci: None,
            ethertype: EtherType::Unknown(0),
        },
        ip,
        l4,
    };
    let mut buf = vec![0u8; 256];
    let n = repr.emit(&mut buf, true).unwrap();
    buf.truncate(n);
    buf
}

fn tcp(flags: u8, ack: u32, sport: u16, dport: u16) -> L4Repr<'static> {
    L4Repr::Tcp(TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq_number: 77,
        ack_number: ack,
        flags,
        window_len: 1000,
        urgent_at: 0,
        options: &[],
        payload: &[],
    })
}

#[test]
fn filter_keeps_answers_and_drops_the_rest() {
    for v6 in [false, true] {
        let fl = flow(v6);
        let ack = fl.seq + 1;
        let prog = filter(fl.src, fl.sport, false);
        let syn_ack = answer_frame(v6, tcp(flags::SYN | flags::ACK, ack, 80, 40000), true);
        assert_eq!(run_filter(&prog, &syn_ack), SNAP, "v6={v6}");
        assert_eq!(classify(&syn_ack, &fl, false), Some(Answer::SynAck));
        let rst = answer_frame(v6, tcp(flags::RST | flags::ACK, ack, 80, 40000), true);
        assert_eq!(run_filter(&prog, &rst), SNAP);
        assert_eq!(classify(&rst, &fl, false), Some(Answer::Reset));
        // Another port of ours: not copied to user space at all.
        let other = answer_frame(v6, tcp(flags::SYN | flags::ACK, ack, 80, 40001), true);
        assert_eq!(run_filter(&prog, &other), 0);
        // Our own outgoing SYN (to the VIP): dropped by the destination check.
        let ours = build(&fl, Payload::Syn, &path(Mode::Dr, v6)).unwrap();
        assert_eq!(run_filter(&prog, &ours), 0);
        // The backend answering from its own address, or acking another sequence: not
        // an answer for the VIP.
        let own = answer_frame(v6, tcp(flags::SYN | flags::ACK, ack, 80, 40000), false);
        assert_eq!(classify(&own, &fl, false), None);
        let stale = answer_frame(v6, tcp(flags::SYN | flags::ACK, ack + 9, 80, 40000), true);
        assert_eq!(classify(&stale, &fl, false), None);
        // A UDP probe's filter refuses TCP to the same port, and takes the reply.
        let uprog = filter(fl.src, fl.sport, true);
        assert_eq!(run_filter(&uprog, &syn_ack), 0);
        let reply = answer_frame(
            v6,
            L4Repr::Udp(UdpRepr {
                src_port: 80,
                dst_port: 40000,
                payload: b"pong",
            }),
            true,
        );
        assert_eq!(run_filter(&uprog, &reply), SNAP);
        assert_eq!(
            classify(&reply, &fl, true),
            Some(Answer::Reply(b"pong".to_vec()))
        );
    }
}

#[test]
fn port_unreachable_quoting_the_probe_is_closed() {
    for v6 in [false, true] {
        let fl = flow(v6);
        let probe = build(&fl, Payload::Udp(b"ping"), &path(Mode::Dr, v6)).unwrap();
        let (ty, code) = if v6 { (1u8, 4u8) } else { (3, 3) };
        let mut icmp = vec![ty, code, 0, 0, 0, 0, 0, 0];
        icmp.extend_from_slice(&probe[14..]);
        let frame = answer_frame(
            v6,
            L4Repr::Raw {
                protocol: if v6 {
                    IpProtocol::Icmpv6
                } else {
                    IpProtocol::Icmp
                },
                payload: &icmp,
            },
            true,
        );
        assert_eq!(run_filter(&filter(fl.src, fl.sport, true), &frame), SNAP);
        assert_eq!(classify(&frame, &fl, true), Some(Answer::Unreachable));
        // The same error about another port of ours is someone else's.
        let other = ProbeFlow { sport: 40001, ..fl };
        assert_eq!(classify(&frame, &other, true), None);
    }
}
