//! Which worker a frame belongs to, asked before [`process`](super::process) runs.
//!
//! Every worker keeps its own connection table, so a FullNAT flow lives only in the table of
//! the worker that allocated its local port, and that worker is named by the port
//! (`port % workers`, see `ConnTable::alloc_snat`). Return traffic to a FullNAT local address
//! arrives on whatever queue the NIC's RSS picks, so the datapath asks [`owner`] first and
//! hands a frame that belongs to another worker over to it. ICMP errors quoting a FullNAT
//! flow (the quoted packet's source port is the local port) go the same way.
//!
//! A NAT flow keeps the client's address and port in both directions, so its owner is
//! named by them ([`nat_owner`]): the client's frames to a NAT VIP and the backend's replies
//! to that client go to the same worker whichever queues RSS put them on. The reply
//! direction's 5-tuple differs from the request's (the backend, not the VIP), so no RSS
//! hash can put both on one queue. Without this, a TCP flow whose SYN-ACK arrived on
//! another worker's queue would never see it in its own table, never earn established
//! (the client's ACK must acknowledge that SYN-ACK, `lb::conntrack::state`), never be
//! cached, and in flood mode never pay its source back. Everything else (client → a DR,
//! tunnel or FullNAT VIP) belongs to the worker that received it.
//!
//! Fragments of FullNAT return traffic: the first fragment carries the local port and goes
//! to its owner; the later ones carry no port. RSS hashes every fragment of a datagram on
//! the addresses alone (NICs classify fragments as their own traffic type with a 2-tuple
//! hash, and Linux's flow dissector, which picks a veth's queue, reads no ports from any
//! fragment), so all of them arrive on one queue, in the order sent. The receiving worker
//! remembers where it sent the first fragment ([`FragOwners`]) and sends the later ones
//! after it, into the same ring, so they reach the owner behind their first fragment.

use wire::{EthernetFrame, IpProtocol, l3_offset};

use super::fragment::frag_info;
use super::fragtable::FragOwners;
use super::headers::{Ip, parse_ip, parse_l4, parse_l4_first_fragment};
use crate::frame::Frame;
use crate::tables::Tables;
use config::Mode;

/// ICMPv4 types that quote the packet they answer (unreachable, time exceeded, parameter
/// problem).
const ICMP4_ERRORS: [u8; 3] = [3, 11, 12];
/// ICMPv6 error types (destination unreachable, packet too big, time exceeded, parameter
/// problem).
const ICMP6_ERRORS: [u8; 4] = [1, 2, 3, 4];
/// Bytes of the ICMP header before the quoted packet.
const ICMP_HEADER: usize = 8;

/// The worker (of `workers`) whose connection table holds the flow `frame` belongs to: a
/// FullNAT flow's return traffic, a NAT flow's frames either way (see the module docs);
/// `None` for every other frame, including malformed ones (the receiving worker drops and
/// counts those) and NAT fragments (their reassembly is the receiver's). `memo` is the
/// receiving worker's memory of where FullNAT return fragments went.
pub fn owner(
    frame: &Frame<'_>,
    tables: &Tables,
    workers: u16,
    memo: &mut FragOwners,
) -> Option<u16> {
    if workers <= 1 || tables.vips.is_empty() {
        return None;
    }
    let d = frame.data();
    let (l3, ethertype) = {
        let eth = EthernetFrame::new_unchecked(d);
        l3_offset(&eth).ok().map(|(o, t, _)| (o, t))?
    };
    let ip = parse_ip(d, l3, ethertype).ok()??;
    if tables.snat_vip(ip.dst).is_none() {
        return nat_flow_owner(d, &ip, tables, workers);
    }
    if ip.frag {
        return fragment_owner(d, &ip, workers, memo);
    }
    let port = match ip.proto {
        IpProtocol::TCP | IpProtocol::UDP => parse_l4(d, &ip).ok()?.dport,
        IpProtocol::ICMP if !ip.v6 => quoted_source_port(d, &ip, &ICMP4_ERRORS)?,
        IpProtocol::ICMPV6 if ip.v6 => quoted_source_port(d, &ip, &ICMP6_ERRORS)?,
        _ => return None,
    };
    Some(port % workers)
}

/// The owner of a NAT flow's frame: a client's to a NAT VIP, or a NAT backend's reply to a
/// client; `None` for anything else.
fn nat_flow_owner(d: &[u8], ip: &Ip, tables: &Tables, workers: u16) -> Option<u16> {
    if ip.frag || !matches!(ip.proto, IpProtocol::TCP | IpProtocol::UDP) {
        return None;
    }
    let l4 = parse_l4(d, ip).ok()?;
    if let Some(vip) = tables.vip_lookup(ip.dst, l4.dport, ip.proto) {
        return (tables.vips.get(vip as usize)?.mode == Mode::Nat)
            .then(|| nat_owner(ip.src, l4.sport, workers));
    }
    tables.nat_backend(ip.src, l4.sport, ip.proto)?;
    // A reply to one of our own addresses (a health probe's) is not a client's flow.
    if tables.is_local(ip.dst) {
        return None;
    }
    Some(nat_owner(ip.dst, l4.dport, workers))
}

/// The worker that owns a NAT flow of the client `addr:port`: the same for the client's
/// frames and the backend's replies, and spread evenly over the workers by a
/// multiplicative hash (a client's ports are often consecutive).
pub fn nat_owner(addr: u128, port: u16, workers: u16) -> u16 {
    let folded = (addr as u64) ^ ((addr >> 64) as u64) ^ u64::from(port).rotate_left(32);
    let h = (folded ^ u64::from(port)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((h >> 32) % u64::from(workers.max(1))) as u16
}

/// The owner of a FullNAT return fragment: by its port for the first, as remembered for the
/// later ones.
fn fragment_owner(d: &[u8], ip: &Ip, workers: u16, memo: &mut FragOwners) -> Option<u16> {
    if !matches!(ip.proto, IpProtocol::TCP | IpProtocol::UDP) {
        return None;
    }
    let f = frag_info(d, ip)?;
    if f.piece.start != 0 {
        return memo.recall(&f.key);
    }
    let o = parse_l4_first_fragment(d, ip).ok()?.dport % workers;
    memo.remember(f.key, o);
    Some(o)
}

/// The source port of the TCP/UDP packet an ICMP error quotes, when it quotes one sent from
/// a FullNAT local address.
fn quoted_source_port(d: &[u8], ip: &Ip, errors: &[u8]) -> Option<u16> {
    let icmp = d.get(ip.l4..ip.end())?;
    if !errors.contains(icmp.first()?) {
        return None;
    }
    // The quoted packet may be cut short (only its IP header and first 8 bytes are
    // promised), so its header is read by hand rather than validated.
    let inner = &icmp[ICMP_HEADER.min(icmp.len())..];
    let (proto, l4) = if ip.v6 {
        (*inner.get(6)?, 40)
    } else {
        let b0 = *inner.first()?;
        (*inner.get(9)?, usize::from(b0 & 0x0f) * 4)
    };
    if !matches!(proto, IpProtocol::TCP | IpProtocol::UDP) {
        return None;
    }
    let ports = inner.get(l4..l4 + 2)?;
    Some(u16::from_be_bytes([ports[0], ports[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConnTable;
    use config::Mode;
    use testkit::golden::{self, Pkt, icmp, tcp, udp};
    use testkit::unit;

    fn fullnat_tables(v6: bool) -> Tables {
        let mut c = unit::parse(golden::CONFIG_TOML);
        let (vip, snat, backend) = if v6 {
            ("2001:db8:f::10", "2001:db8:1::1", "2001:db8:2::1")
        } else {
            ("192.0.2.100", "10.1.0.1", "10.2.0.1")
        };
        let mut v = unit::vip(
            "web",
            vip,
            80,
            Mode::FullNat,
            vec![unit::backend(backend, 8080, 1)],
        );
        v.snat = vec![snat.parse().expect("literal")];
        c.vips = vec![v];
        Tables::build(&c, &|_, _| true, 1).expect("tables")
    }

    fn owner_of(pkt: &[u8], t: &Tables, workers: u16) -> Option<u16> {
        owner_with(pkt, t, workers, &mut FragOwners::default())
    }

    fn owner_with(pkt: &[u8], t: &Tables, workers: u16, memo: &mut FragOwners) -> Option<u16> {
        let mut buf = vec![0u8; 64 + pkt.len()];
        buf[64..].copy_from_slice(pkt);
        let f = Frame::new(&mut buf, 64, pkt.len(), 1).expect("frame");
        owner(&f, t, workers, memo)
    }

    #[test]
    fn fullnat_return_fragments_follow_their_first_fragment_to_its_owner() {
        for v6 in [false, true] {
            let t = fullnat_tables(v6);
            let (snat, backend) = if v6 {
                ("2001:db8:1::1", "2001:db8:2::1")
            } else {
                ("10.1.0.1", "10.2.0.1")
            };
            let mut memo = FragOwners::default();
            let later = Pkt::new(backend, snat, 17, vec![7u8; 64])
                .raw_l4()
                .ident(99)
                .frag(512, false, 99)
                .build();
            assert_eq!(owner_with(&later, &t, 4, &mut memo), None, "no first yet");
            let first = Pkt::new(backend, snat, 17, udp(8080, 1026, &[1u8; 504]))
                .raw_l4()
                .ident(99)
                .frag(0, true, 99)
                .build();
            assert_eq!(
                owner_with(&first, &t, 4, &mut memo),
                Some(1026 % 4),
                "by port"
            );
            assert_eq!(
                owner_with(&later, &t, 4, &mut memo),
                Some(1026 % 4),
                "v6 {v6}"
            );
            let other = Pkt::new(backend, snat, 17, vec![7u8; 64])
                .raw_l4()
                .ident(100)
                .frag(512, false, 100)
                .build();
            assert_eq!(
                owner_with(&other, &t, 4, &mut memo),
                None,
                "another datagram"
            );
        }
    }

    #[test]
    fn fullnat_return_traffic_belongs_to_the_worker_that_allocated_its_port() {
        for v6 in [false, true] {
            let t = fullnat_tables(v6);
            let (snat, backend, client, vip) = if v6 {
                (
                    "2001:db8:1::1",
                    "2001:db8:2::1",
                    "2001:db8:c::7",
                    "2001:db8:f::10",
                )
            } else {
                ("10.1.0.1", "10.2.0.1", "198.51.100.7", "192.0.2.100")
            };
            let timeouts = config::Timeouts::default();
            for w in 0..4u16 {
                let mut ct = ConnTable::new(64, timeouts, 1, w, 4);
                let b = t.vips[0].snat[0];
                let (_, port) = ct
                    .alloc_snat(6, 1, 8080, &[b], 12345 + u32::from(w), 0)
                    .expect("a port");
                let reply = Pkt::new(backend, snat, 6, tcp(8080, port, 0x12, 1, b"")).build();
                assert_eq!(owner_of(&reply, &t, 4), Some(w), "v6 {v6} port {port}");
                let udp_reply = Pkt::new(backend, snat, 17, udp(8080, port, b"x")).build();
                assert_eq!(owner_of(&udp_reply, &t, 4), Some(w));
                // An ICMP error quoting the packet the appliance sent from that port.
                let quoted = Pkt::new(snat, backend, 6, tcp(port, 8080, 0x02, 1, b"")).build();
                let (ty, proto) = if v6 { (1, 58) } else { (3, 1) };
                let body = &quoted[14..14 + if v6 { 48 } else { 28 }];
                let err = Pkt::new(backend, snat, proto, icmp(ty, 4, [0; 4], body)).build();
                assert_eq!(owner_of(&err, &t, 4), Some(w), "ICMP error v6 {v6}");
                let echo = Pkt::new(
                    backend,
                    snat,
                    proto,
                    icmp(if v6 { 128 } else { 8 }, 0, [0; 4], b""),
                )
                .build();
                assert_eq!(owner_of(&echo, &t, 4), None, "not an error: the kernel's");
            }
            // Client → VIP and anything on one worker belongs to whoever received it.
            let request = Pkt::new(client, vip, 6, tcp(40000, 80, 0x02, 1, b"")).build();
            assert_eq!(owner_of(&request, &t, 4), None);
            let reply = Pkt::new(backend, snat, 6, tcp(8080, 1027, 0x12, 1, b"")).build();
            assert_eq!(owner_of(&reply, &t, 1), None);
            assert_eq!(owner_of(&reply, &t, 4), Some(3));
            assert_eq!(
                owner_of(&reply[..30], &t, 4),
                None,
                "cut short: the receiver drops it"
            );
        }
    }

    /// A NAT flow's two directions reach one worker whichever queue each arrived on: the
    /// client's frames to the VIP and the backend's replies are owned by the client's
    /// address and port, spread over every worker; DR VIPs, health-probe replies and one
    /// worker stay with the receiver.
    #[test]
    fn a_nat_flows_request_and_reply_share_one_owner() {
        let c = testkit::unit::parse(golden::CONFIG_TOML);
        let t = Tables::build(&c, &|_, _| true, 1).expect("tables");
        let mut per_worker = [0u32; 4];
        for port in 20_000..24_000u16 {
            let syn =
                Pkt::new("198.51.100.7", "192.0.2.10", 6, tcp(port, 80, 0x02, 1, b"")).build();
            let synack =
                Pkt::new("10.0.0.1", "198.51.100.7", 6, tcp(8080, port, 0x12, 1, b"")).build();
            let owner = owner_of(&syn, &t, 4).expect("a NAT VIP's frame has an owner");
            assert_eq!(owner_of(&synack, &t, 4), Some(owner), "port {port}");
            assert_eq!(owner, nat_owner(addr("198.51.100.7"), port, 4));
            let dgram = Pkt::new("198.51.100.7", "192.0.2.10", 17, udp(port, 53, b"q")).build();
            let answer = Pkt::new("10.0.0.2", "198.51.100.7", 17, udp(5353, port, b"a")).build();
            assert_eq!(owner_of(&dgram, &t, 4), owner_of(&answer, &t, 4));
            per_worker[usize::from(owner)] += 1;
            assert_eq!(owner_of(&syn, &t, 1), None, "one worker owns everything");
        }
        assert!(
            per_worker.iter().all(|n| (800..=1200).contains(n)),
            "one client's consecutive ports spread over the workers: {per_worker:?}"
        );
        let v6 = Pkt::new(
            "2001:db8:c::7",
            "2001:db8::10",
            6,
            tcp(40000, 80, 0x02, 1, b""),
        )
        .build();
        let v6_reply = Pkt::new(
            "2001:db8:a::1",
            "2001:db8:c::7",
            6,
            tcp(8080, 40000, 0x12, 1, b""),
        )
        .build();
        assert!(owner_of(&v6, &t, 4).is_some());
        assert_eq!(owner_of(&v6, &t, 4), owner_of(&v6_reply, &t, 4), "IPv6 too");
        let dr = Pkt::new(
            "198.51.100.7",
            "192.0.2.30",
            6,
            tcp(40000, 80, 0x02, 1, b""),
        )
        .build();
        assert_eq!(
            owner_of(&dr, &t, 4),
            None,
            "a DR VIP's frame stays where it came"
        );
        let stranger = Pkt::new(
            "10.9.9.9",
            "198.51.100.7",
            6,
            tcp(8080, 40000, 0x12, 1, b""),
        )
        .build();
        assert_eq!(owner_of(&stranger, &t, 4), None, "not a backend: not ours");
        assert_eq!(
            owner_of(&syn_cut(), &t, 4),
            None,
            "cut short: the receiver drops it"
        );
    }

    fn syn_cut() -> Vec<u8> {
        let syn = Pkt::new(
            "198.51.100.7",
            "192.0.2.10",
            6,
            tcp(40000, 80, 0x02, 1, b""),
        )
        .build();
        syn[..40].to_vec()
    }

    fn addr(a: &str) -> u128 {
        crate::hash::addr_to_u128(a.parse().expect("literal"))
    }
}
