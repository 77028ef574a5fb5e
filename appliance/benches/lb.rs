//! Per-packet cost of `lb::process` and build time of Maglev rings.
//!
//! Established flows (opened by a handshake first, as only earned flows get state): the
//! frame bytes are copied back into the buffer before every call
//! (the rewrite is in place), so each figure includes one ~100 byte copy, and `now` advances
//! 100 ns per packet. New flows: each
//! packet has a fresh client address, so every call runs the Maglev lookup and a connection
//! table insert; the table is emptied outside the timed region whenever it fills.
//! ACKs without a flow (`process_ack_no_flow`): what a blind ACK (or one of a flow whose
//! entry is gone) costs a NAT or FullNAT TCP VIP with `syn_proxy = "off"`, with the default
//! `"flood"` while no cookie may come back (flood mode off and none made for two periods:
//! the appliance's usual state, no cookie check), and with `"flood"` while cookies may come
//! back (`flood/cookies_out`: the ACK is checked as a cookie first, then handled as without
//! the proxy), side by side; no state is made either way.
//! QUIC-LB (`process_quic`): an established UDP flow's short-header datagram through the
//! same VIP routed by its 5-tuple (no `quic_lb`) and by its connection ID in each encoding
//! (plaintext, single-pass AES, four-pass), side by side.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice::lb::conntrack::ConnTable;
use sluice::lb::hash::{backend_identity, u128_to_addr};
use sluice::lb::maglev::{MaglevBackend, Ring};
use sluice::lb::{FlowState, Frame, HEADROOM, Tables, Verdict, WorkerState, process};
use testkit::golden::{self, NOW, Pkt, tcp, udp};

const CASES: [(&str, &str, &str); 7] = [
    ("nat4", "192.0.2.10", "198.51.100.7"),
    ("nat6", "2001:db8::10", "2001:db8:c::7"),
    ("fullnat4", "192.0.2.20", "198.51.100.7"),
    ("dr4", "192.0.2.30", "198.51.100.7"),
    ("ipip4", "192.0.2.40", "198.51.100.7"),
    ("gue4", "192.0.2.50", "198.51.100.7"),
    ("vxlan4", "192.0.2.60", "198.51.100.7"),
];

fn port(vip: &str) -> u16 {
    if vip == "192.0.2.20" { 443 } else { 80 }
}

/// Opens the flow as a client and backend do, so it is established
/// (`lb::conntrack::state`): the SYN, the backend's SYN-ACK (which NAT and FullNAT see),
/// then two ACKs (DR and tunnel need a second segment after the SYN).
fn open(t: &Tables, ct: &mut ConnTable, w: &mut WorkerState, client: &str, vip: &str) {
    let run = |ct: &mut ConnTable, w: &mut WorkerState, frame: Vec<u8>| {
        let mut buf = vec![0u8; HEADROOM + frame.len() + 256];
        buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(&frame);
        let mut f = Frame::new(&mut buf, HEADROOM, frame.len(), 1).expect("frame");
        process(&mut f, t, ct, w, NOW);
    };
    run(
        ct,
        w,
        Pkt::new(client, vip, 6, tcp(40000, port(vip), 0x02, 1, b"")).build(),
    );
    let flow = *ct.flow(ct.ids().next().expect("the SYN's entry"));
    let v6 = flow.key.v6;
    let (to, to_port) = flow.snat.unwrap_or((flow.key.src, flow.key.sport));
    let synack = Pkt::new(
        &u128_to_addr(flow.backend_addr, v6).to_string(),
        &u128_to_addr(to, v6).to_string(),
        6,
        tcp(flow.backend_port, to_port, 0x12, golden::PEER_ISN, b""),
    );
    run(ct, w, synack.build());
    for _ in 0..2 {
        run(
            ct,
            w,
            Pkt::new(client, vip, 6, tcp(40000, port(vip), 0x10, 1, b"")).build(),
        );
    }
}

fn established(c: &mut Criterion) {
    let mut g = c.benchmark_group("process_established");
    g.throughput(Throughput::Elements(1));
    for (name, vip, client) in CASES {
        let (t, mut ct, mut w) = golden::setup();
        let input = Pkt::new(client, vip, 6, tcp(40000, port(vip), 0x10, 1, &[0u8; 32])).build();
        let mut buf = vec![0u8; HEADROOM + input.len() + 256];
        open(&t, &mut ct, &mut w, client, vip);
        assert_eq!(ct.fill()[FlowState::TcpEstablished.class()], 1, "{name}");
        buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
        let v = process(&mut f, &t, &mut ct, &mut w, NOW);
        assert!(matches!(v, Verdict::Tx { .. }), "{name}: {v:?}");
        // 100 ns between packets: one flow at 10 Mpps, so the LRU relink (at most once per
        // millisecond) is paid at its real rate.
        let mut now = NOW;
        g.bench_function(name, |b| {
            b.iter(|| {
                now += 100;
                buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
                let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
                black_box(process(&mut f, &t, &mut ct, &mut w, now))
            })
        });
    }
    g.finish();
}

/// Rewrites the client address of an IPv4 or IPv6 frame to a per-iteration value, fixing
/// the IPv4 header checksum (the L4 checksum is not verified by `process`).
fn set_client(frame: &mut [u8], v6: bool, i: u32) {
    if v6 {
        frame[14 + 20..14 + 24].copy_from_slice(&i.to_be_bytes());
    } else {
        let b = (0x6440_0000u32 + i).to_be_bytes();
        frame[14 + 12..14 + 16].copy_from_slice(&b);
        frame[14 + 10] = 0;
        frame[14 + 11] = 0;
        let c = golden::checksum(&frame[14..34]);
        frame[14 + 10..14 + 12].copy_from_slice(&c.to_be_bytes());
    }
}

fn new_flows(c: &mut Criterion) {
    const CAP: u64 = 1 << 18;
    let mut g = c.benchmark_group("process_new_flow");
    g.throughput(Throughput::Elements(1));
    for (name, vip, client) in CASES {
        let (t, _, mut w) = golden::setup();
        let v6 = vip.contains(':');
        let input = Pkt::new(client, vip, 6, tcp(40000, port(vip), 0x02, 1, b"")).build();
        let mut ct = ConnTable::new(CAP as usize, t.timeouts, t.backends.len(), 0, 1);
        let mut buf = vec![0u8; HEADROOM + input.len() + 256];
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut done = 0u64;
                while done < iters {
                    // Empty the table untimed so every timed insert finds room.
                    ct.expire(u64::MAX, usize::MAX);
                    let n = (iters - done).min(CAP);
                    let start = Instant::now();
                    for i in 0..n {
                        buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
                        set_client(&mut buf[HEADROOM..], v6, i as u32);
                        let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
                        black_box(process(&mut f, &t, &mut ct, &mut w, NOW));
                    }
                    total += start.elapsed();
                    done += n;
                }
                total
            })
        });
    }
    g.finish();
}

fn ack_no_flow(c: &mut Criterion) {
    use sluice::config::SynProxy;
    let mut g = c.benchmark_group("process_ack_no_flow");
    g.throughput(Throughput::Elements(1));
    for (name, vip, client) in [CASES[0], CASES[2]] {
        for (setting, proxy, until) in [
            ("off", SynProxy::Off, 0),
            ("flood", SynProxy::Flood, 0),
            ("flood_cookies_out", SynProxy::Flood, u64::MAX),
        ] {
            let (mut t, mut ct, mut w) = golden::setup();
            // As the appliance's workers run: the flood flag off, the shared time until
            // which cookies may come back.
            w.set_flood_flag(Default::default());
            w.set_cookies_until(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(
                until,
            )));
            let v = t
                .vips
                .iter()
                .position(|v| {
                    let a: std::net::IpAddr = vip.parse().expect("literal");
                    v.address == sluice::lb::hash::addr_to_u128(a) && v.port == port(vip)
                })
                .expect("the case's VIP");
            t.vips[v].syn_proxy = proxy;
            let input = Pkt::new(client, vip, 6, tcp(40000, port(vip), 0x10, 77, b"")).build();
            let mut buf = vec![0u8; HEADROOM + input.len() + 256];
            g.bench_function(format!("{name}/{setting}"), |b| {
                b.iter(|| {
                    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
                    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
                    black_box(process(&mut f, &t, &mut ct, &mut w, NOW))
                })
            });
            assert_eq!(ct.len(), 0, "{name}/{setting}: a blind ACK made state");
        }
    }
    g.finish();
}

fn maglev_build(c: &mut Criterion) {
    let mut g = c.benchmark_group("maglev_build_m65537");
    for n in [10usize, 100, 1000] {
        let ids: Vec<[u8; 18]> = (0..n)
            .map(|i| backend_identity([10, 1, (i >> 8) as u8, i as u8].into(), 8080))
            .collect();
        let backends: Vec<MaglevBackend<'_>> = ids
            .iter()
            .map(|id| MaglevBackend { id, weight: 1 })
            .collect();
        g.bench_with_input(BenchmarkId::from_parameter(n), &backends, |b, bs| {
            b.iter(|| black_box(Ring::build(bs, 65537).expect("ring")))
        });
    }
    g.finish();
}

/// The golden `nat4u` VIP (UDP 192.0.2.10:53) with `quic_lb` set to `q` (`None`: routed by
/// its 5-tuple), its tables, and a short-header datagram whose CID names its backend.
fn quic_case(q: Option<sluice::config::quic::QuicLb>) -> (Tables, Vec<u8>) {
    let mut c = golden::config();
    let v = c
        .vips
        .iter()
        .position(|v| v.name == "nat4u")
        .expect("nat4u");
    c.vips[v].quic_lb = q;
    let t = golden::tables_for(&c);
    let mut payload = vec![0x40];
    match &t.vips[v].quic {
        Some(r) => {
            let slot = t.vips[v].backends.start;
            let id = r.id_of(slot).expect("the backend's server ID");
            let nonce = vec![0x5a; r.codec.cid_len() - 1 - id.as_bytes().len()];
            payload.extend_from_slice(&r.codec.encode(id.as_bytes(), &nonce));
        }
        // The same length of CID, never read.
        None => payload.extend_from_slice(&[0x5a; 8]),
    }
    payload.extend_from_slice(&[0u8; 32]);
    let frame = Pkt::new("198.51.100.7", "192.0.2.10", 17, udp(40000, 53, &payload)).build();
    (t, frame)
}

fn quic(c: &mut Criterion) {
    use sluice::config::quic::QuicLb;
    let lb = |sid: u8, nonce: u8, key: Option<[u8; 16]>| QuicLb {
        config_id: 1,
        server_id_len: sid,
        nonce_len: nonce,
        key,
        assigned: Vec::new(),
    };
    let mut g = c.benchmark_group("process_quic");
    g.throughput(Throughput::Elements(1));
    for (name, q) in [
        ("5tuple", None),
        ("cid_plaintext", Some(lb(2, 5, None))),
        ("cid_single_pass", Some(lb(3, 13, Some([0x42; 16])))),
        ("cid_four_pass", Some(lb(2, 5, Some([0x42; 16])))),
    ] {
        let routed_by_cid = q.is_some();
        let (t, input) = quic_case(q);
        let mut ct = golden::fresh_conntrack(&t);
        let mut w = WorkerState::new();
        let mut buf = vec![0u8; HEADROOM + input.len() + 256];
        let mut send = |ct: &mut ConnTable, w: &mut WorkerState, now: u64| {
            buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
            let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
            process(&mut f, &t, ct, w, now)
        };
        // The flow's first datagram makes its entry; the timed ones find it.
        let v = send(&mut ct, &mut w, NOW);
        assert!(matches!(v, Verdict::Tx { .. }), "{name}: {v:?}");
        let mut now = NOW;
        g.bench_function(name, |b| {
            b.iter(|| {
                now += 100;
                black_box(send(&mut ct, &mut w, now))
            })
        });
        let routed: u64 = w.quic.iter().map(|c| c[0]).sum();
        assert_eq!(routed > 0, routed_by_cid, "{name}: {routed} routed by CID");
    }
    g.finish();
}

criterion_group!(
    benches,
    established,
    new_flows,
    ack_no_flow,
    quic,
    maglev_build
);
criterion_main!(benches);
