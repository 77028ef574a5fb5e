//! When the SYN proxy checks flow-less ACKs of a `syn_proxy = "flood"` VIP: while flood mode
//! is on, and for two cookie periods after a cookie was made (by this process or, through
//! the shared time the control plane sets at a restart, by the one before). Otherwise an
//! ACK without a flow costs no cookie check (issue 42: it was 1.8-1.9x slower).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::tests::{ct_for, one_vip, tables};
use super::*;
use config::{Scheduler, SynProxy};
use testkit::golden::{Pkt, tcp};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const ISN: u32 = 7000;
const SEC: u64 = 1_000_000_000;

fn run(t: &Tables, ct: &mut ConnTable, w: &mut WorkerState, l4: Vec<u8>, now: u64) -> Vec<u8> {
    let input = Pkt::new("198.51.100.7", "192.0.2.100", 6, l4).build();
    let mut buf = vec![0u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
    let v = process(&mut f, t, ct, w, now);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    f.data().to_vec()
}

/// The client's ACK of the SYN-ACK whose sequence number was `cookie`.
fn ack_of(sport: u16, cookie: u32) -> Vec<u8> {
    let mut l4 = tcp(sport, 80, ACK, ISN + 1, &[]);
    l4[8..12].copy_from_slice(&cookie.wrapping_add(1).to_be_bytes());
    l4
}

fn worker(flood: bool, until: u64) -> (WorkerState, Arc<AtomicBool>, Arc<AtomicU64>) {
    let mut w = WorkerState::new();
    let (f, u) = (
        Arc::new(AtomicBool::new(flood)),
        Arc::new(AtomicU64::new(until)),
    );
    w.set_flood_flag(Arc::clone(&f));
    w.set_cookies_until(Arc::clone(&u));
    (w, f, u)
}

#[test]
fn flow_less_acks_are_checked_only_while_cookies_may_come_back() {
    let mut c = one_vip(Mode::Nat, Scheduler::Maglev, 2);
    c.vips[0].syn_proxy = SynProxy::Flood;
    let t = tables(&c, 1, &|_| true);
    let now = 1_000 * SEC;

    // Flood mode on: the SYN is answered with a cookie; ACKs are checked two periods on.
    let (mut w, flood, until) = worker(true, 0);
    let mut ct = ct_for(&t, 64);
    let answer = run(&t, &mut ct, &mut w, tcp(4000, 80, SYN, ISN, &[]), now);
    let cookie = u32::from_be_bytes(answer[38..42].try_into().expect("seq"));
    assert_eq!(w.stats.syn_proxy_answered, 1);
    assert_eq!(
        until.load(Ordering::Relaxed),
        now + 2 * syn_cookie::PERIOD_NS
    );
    assert_eq!(ct.len(), 0, "an answered SYN keeps nothing");

    // Flood mode ends; the client's ACK comes a second later and opens the flow.
    flood.store(false, Ordering::Relaxed);
    run(&t, &mut ct, &mut w, ack_of(4000, cookie), now + SEC);
    assert_eq!(
        w.stats.syn_proxy_opened, 1,
        "the cookie's ACK opened the flow"
    );
    assert_eq!(ct.len(), 1);

    // Past the window, a flow-less ACK is not checked: it takes the way it takes without
    // the proxy (NAT: the stateless answer), with or without a cookie.
    let later = now + 2 * syn_cookie::PERIOD_NS + SEC;
    run(&t, &mut ct, &mut w, ack_of(4001, 12345), later);
    assert_eq!(w.stats.syn_proxy_bad_cookies, 0, "not checked");
    assert_eq!(w.stats.stateless_no_entry, 1);

    // A worker of a process that made no cookie and took over none checks nothing...
    let (mut fresh, _, _) = worker(false, 0);
    let mut ct2 = ct_for(&t, 64);
    run(&t, &mut ct2, &mut fresh, ack_of(4000, cookie), now + SEC);
    assert_eq!(
        fresh.stats.syn_proxy_opened + fresh.stats.syn_proxy_bad_cookies,
        0
    );
    // ...while one that took over (the window starts at the takeover) opens the flow.
    let (mut next, _, _) = worker(false, now + 2 * syn_cookie::PERIOD_NS);
    let mut ct3 = ct_for(&t, 64);
    run(&t, &mut ct3, &mut next, ack_of(4000, cookie), now + SEC);
    assert_eq!(next.stats.syn_proxy_opened, 1);
}

/// A client that speaks first (HTTP): its request comes right after its ACK, before the
/// backend answered the appliance's SYN. The request is kept and goes to the backend with
/// the handshake's last ACK, so the client does not wait for its retransmission.
#[test]
fn the_clients_first_data_goes_with_the_handshakes_last_ack() {
    let (t, mut w, mut ct) = proxied(Mode::Nat, None);
    let now = 1_000 * SEC;
    let (cookie, syn) = opened(&t, &mut ct, &mut w, now);
    let backend = std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&syn[30..34]).expect("dst"));
    let bport = u16::from_be_bytes([syn[36], syn[37]]);

    // The request, before the backend answered: dropped, kept.
    let get = b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n";
    let mut data = tcp(4000, 80, ACK | 0x08, ISN + 1, get);
    data[8..12].copy_from_slice(&cookie.wrapping_add(1).to_be_bytes());
    let input = Pkt::new("198.51.100.7", "192.0.2.100", 6, data).build();
    let mut buf = vec![0u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
    let v = process(&mut f, &t, &mut ct, &mut w, now + 2000);
    assert!(
        matches!(v, Verdict::Drop(DropReason::ProxyOpening)),
        "{v:?}"
    );
    assert_eq!(w.early.len(), 1);

    // The backend's SYN-ACK becomes the last ACK, carrying the request.
    let mut sa = tcp(bport, 4000, SYN | ACK, 0x5000_0000, &[]);
    sa[8..12].copy_from_slice(&(ISN + 1).to_be_bytes());
    let (out, d) = run_from(&t, &mut ct, &mut w, &backend.to_string(), sa, now + 3000);
    // That ACK was the client's: the flow is established, and its client → backend
    // direction is recorded (a flow cache forwards the client's next segments), with the
    // request counted in the client's sequence space.
    let d = d.expect("the client's direction is recorded");
    assert!(!d.reverse);
    assert_eq!((d.key.sport, d.key.dport), (4000, 80));
    assert_eq!(d.dst.map(|(_, p)| p), Some(bport));
    assert_eq!(d.tcp_flags, ACK | 0x08);
    assert!(
        matches!(d.carry.proxy, crate::conntrack::Proxied::Open { .. }),
        "{:?}",
        d.carry
    );
    let id = ct.lookup(&d.key, now + 3000).expect("flow");
    assert_eq!(ct.flow(id).state, FlowState::TcpEstablished);
    assert_eq!(ct.flow(id).track.client_next, ISN + 1 + get.len() as u32);
    let l4 = 14 + 20;
    let hlen = usize::from(out[l4 + 12] >> 4) * 4;
    assert_eq!(out[l4 + 13], ACK | 0x08, "ACK and PSH");
    assert_eq!(
        u32::from_be_bytes(out[l4 + 4..l4 + 8].try_into().expect("seq")),
        ISN + 1
    );
    assert_eq!(&out[l4 + hlen..], get, "the request rides on the ACK");
    assert_eq!(w.early.len(), 0, "kept once, sent once");
}

/// One VIP in `mode` with `syn_proxy = "always"` (and `client_address`, when given): its
/// tables, a worker and a connection table.
fn proxied(mode: Mode, carry: Option<config::ClientAddress>) -> (Tables, WorkerState, ConnTable) {
    let mut c = one_vip(mode, Scheduler::Maglev, 1);
    c.vips[0].syn_proxy = SynProxy::Always;
    if let Some(k) = carry {
        c.vips[0].client_address = k;
    }
    let t = tables(&c, 1, &|_| true);
    let (w, _, _) = worker(false, 0);
    let ct = ct_for(&t, 64);
    (t, w, ct)
}

/// The client's SYN answered with a cookie at `now` and its ACK a millisecond later: the
/// cookie, and the SYN the ACK became toward the backend.
fn opened(t: &Tables, ct: &mut ConnTable, w: &mut WorkerState, now: u64) -> (u32, Vec<u8>) {
    let answer = run(t, ct, w, tcp(4000, 80, SYN, ISN, &[]), now);
    let cookie = u32::from_be_bytes(answer[38..42].try_into().expect("seq"));
    let syn = run(t, ct, w, ack_of(4000, cookie), now + 1000);
    assert_eq!(syn[47], SYN, "the cookie's ACK became the client's SYN");
    (cookie, syn)
}

fn run_from(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    src: &str,
    l4: Vec<u8>,
    now: u64,
) -> (Vec<u8>, Option<Decision>) {
    let input = Pkt::new(src, "198.51.100.7", 6, l4).build();
    let mut buf = vec![0u8; HEADROOM + input.len() + 256];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
    let mut rec: Option<Decision> = None;
    let v = process_recorded(&mut f, t, ct, w, now, &mut rec);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    (f.data().to_vec(), rec)
}

/// A client segment of an opening flow, through `process`: its verdict and the frame.
fn client_data(
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
    cookie: u32,
    body: &[u8],
    now: u64,
) -> (Verdict, Vec<u8>) {
    let mut data = tcp(4000, 80, ACK | 0x08, ISN + 1, body);
    data[8..12].copy_from_slice(&cookie.wrapping_add(1).to_be_bytes());
    let input = Pkt::new("198.51.100.7", "192.0.2.100", 6, data).build();
    let mut buf = vec![0u8; HEADROOM + input.len() + 128];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
    let v = process(&mut f, t, ct, w, now);
    (v, f.data().to_vec())
}

/// The SYN the appliance sends the backend on the client's ACK is lost: the client sends
/// its request again after its retransmission timer, and that copy becomes the SYN again
/// (same sequence number, window and options), while copies sooner than [`RETRY_NS`] are
/// only dropped; the backend's SYN-ACK then gets the kept request with the last ACK.
/// Before, every copy was dropped and the connection waited until its client gave up.
#[test]
fn a_lost_syn_to_the_backend_is_sent_again_on_the_clients_retransmission() {
    use super::synproxy::RETRY_NS;
    let (t, mut w, mut ct) = proxied(Mode::Nat, None);
    let now = 1_000 * SEC;
    let (cookie, first) = opened(&t, &mut ct, &mut w, now);
    let get = b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n";
    // The request at once, and a duplicate soon after: kept, then dropped.
    for at in [2000, 2000 + RETRY_NS / 2] {
        let (v, _) = client_data(&t, &mut ct, &mut w, cookie, get, now + at);
        assert!(
            matches!(v, Verdict::Drop(DropReason::ProxyOpening)),
            "{v:?}"
        );
    }
    assert_eq!(w.stats.syn_proxy_resent, 0);
    // The client's retransmission after its timer: the SYN again, to the same backend.
    let (v, again) = client_data(&t, &mut ct, &mut w, cookie, get, now + 2000 + RETRY_NS);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    assert_eq!(w.stats.syn_proxy_resent, 1);
    assert_eq!(again.len(), first.len(), "no payload: the SYN alone");
    assert_eq!(again[47], SYN);
    // Addresses, ports, sequence number, window and options as the first SYN's (the IP
    // identification and checksums aside).
    assert_eq!(&again[26..34], &first[26..34], "addresses");
    assert_eq!(
        &again[34..50],
        &first[34..50],
        "ports, sequence, flags, window"
    );
    assert_eq!(&again[54..], &first[54..], "options");
    // The next copy waits for its own timer again.
    let (v, _) = client_data(&t, &mut ct, &mut w, cookie, get, now + 2001 + RETRY_NS);
    assert!(matches!(v, Verdict::Drop(DropReason::ProxyOpening)));
    assert_eq!(w.stats.syn_proxy_resent, 1);
    // The backend answers: the kept request goes with the handshake's last ACK.
    let backend = std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&first[30..34]).expect("dst"));
    let bport = u16::from_be_bytes([first[36], first[37]]);
    let mut sa = tcp(bport, 4000, SYN | ACK, 0x5000_0000, &[]);
    sa[8..12].copy_from_slice(&(ISN + 1).to_be_bytes());
    let t3 = now + 3000 + RETRY_NS;
    let (out, _) = run_from(&t, &mut ct, &mut w, &backend.to_string(), sa, t3);
    let l4 = 14 + 20;
    let hlen = usize::from(out[l4 + 12] >> 4) * 4;
    assert_eq!(&out[l4 + hlen..], get, "the request rides on the ACK");
}

/// The same on a flow that adds the client's address (FullNAT, PROXY v2): its first
/// segment is not kept (it gets the header when the client sends it again), but its place
/// is, so the client's retransmission after [`RETRY_NS`] still sends the SYN again. Before,
/// such a flow whose SYN was lost waited until its client gave up.
#[test]
fn a_lost_syn_is_sent_again_on_a_flow_that_adds_the_clients_address() {
    use super::synproxy::RETRY_NS;
    let proxy_v2 = Some(config::ClientAddress::ProxyV2);
    let (t, mut w, mut ct) = proxied(Mode::FullNat, proxy_v2);
    let now = 1_000 * SEC;
    let (cookie, first) = opened(&t, &mut ct, &mut w, now);
    let get = b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n";
    let (v, _) = client_data(&t, &mut ct, &mut w, cookie, get, now + 2000);
    assert!(
        matches!(v, Verdict::Drop(DropReason::ProxyOpening)),
        "{v:?}"
    );
    assert_eq!(w.stats.syn_proxy_resent, 0);
    let (v, again) = client_data(&t, &mut ct, &mut w, cookie, get, now + 2000 + RETRY_NS);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    assert_eq!(w.stats.syn_proxy_resent, 1);
    assert_eq!(
        again.len(),
        first.len(),
        "no payload, no PROXY header: the SYN alone"
    );
    assert_eq!(
        &again[26..50],
        &first[26..50],
        "addresses, ports, sequence, window"
    );
    // The backend answers (to the FullNAT source): the last ACK carries nothing, and the
    // client's next copy of its request gets the PROXY header before its first byte.
    let src = |a: &[u8]| std::net::Ipv4Addr::from(<[u8; 4]>::try_from(a).expect("ip"));
    let (backend, local) = (src(&first[30..34]), src(&first[26..30]));
    let (bport, lport) = (
        u16::from_be_bytes([first[36], first[37]]),
        u16::from_be_bytes([first[34], first[35]]),
    );
    let mut sa = tcp(bport, lport, SYN | ACK, 0x5000_0000, &[]);
    sa[8..12].copy_from_slice(&(ISN + 1).to_be_bytes());
    let input = Pkt::new(&backend.to_string(), &local.to_string(), 6, sa).build();
    let mut buf = vec![0u8; HEADROOM + input.len() + 256];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
    let mut f = Frame::new(&mut buf, HEADROOM, input.len(), 1).expect("frame");
    let v = process(&mut f, &t, &mut ct, &mut w, now + 3000 + RETRY_NS);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    let out = f.data();
    let hlen = usize::from(out[34 + 12] >> 4) * 4;
    assert_eq!(out[34 + 13], ACK, "the handshake's last ACK");
    assert_eq!(out.len(), 34 + hlen, "nothing rides on it");
    let (v, req) = client_data(&t, &mut ct, &mut w, cookie, get, now + 4000 + RETRY_NS);
    assert!(matches!(v, Verdict::Tx { .. }), "{v:?}");
    let hlen = usize::from(req[34 + 12] >> 4) * 4;
    assert_eq!(
        &req[34 + hlen..34 + hlen + 12],
        b"\r\n\r\n\0\r\nQUIT\n",
        "PROXY v2"
    );
    assert!(req.ends_with(get));
}
