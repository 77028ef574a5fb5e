//! The XDP flow cache against the engine.
//!
//! Parity: every golden fixture runs alone through `lb::process` (a fresh connection table
//! with the row's given frames run first; the engine records its decision), the
//! entry the worker would install for that decision goes into the cache, and the same input
//! frame runs through the XDP program with BPF_PROG_TEST_RUN. A frame the cache forwards
//! must come out byte for byte as the engine's, with XDP_TX or XDP_REDIRECT as the engine's
//! egress says; every other frame must come out untouched, to the engine (AF_XDP) or the
//! kernel. Fixtures that open a TCP flow (SYN) are also replayed as their established
//! continuation (flags ACK), so every mode and family is compared on an established frame.

#[path = "datapath_common/mod.rs"]
mod datapath_common;

use std::thread;

use datapath_common::golden_cache;
use lab::netns::{enter, require_root};
use lab::testing::golden_netns;
use sluice::datapath::flowcache::{self, FlowCache, Hairpin};
use sluice::datapath::steer::Steer;
use sluice::lb::BackendId;
use sluice::lb::process::{Decision, Verdict, process_recorded};
use sluice::lb::{Frame, HEADROOM};
use testkit::golden;

const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;
/// A test run without a context arrives on the namespace's loopback device.
const LOOPBACK: u32 = 1;

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join("")
}

/// The L4 offset of an untagged frame with a plain IPv4 or IPv6 (no extension header) TCP
/// header, else `None`.
fn tcp_offset(f: &[u8]) -> Option<usize> {
    if f.len() < 54 {
        return None;
    }
    let l4 = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 if f[23] == 6 => Some(14 + usize::from(f[14] & 0x0f) * 4),
        0x86dd if f[20] == 6 => Some(54),
        _ => None,
    }?;
    (l4 + 20 <= f.len()).then_some(l4)
}

/// The same TCP segment with flags `flags` and its checksum patched (RFC 1624).
fn with_tcp_flags(input: &[u8], flags: u8) -> Option<Vec<u8>> {
    let l4 = tcp_offset(input)?;
    let mut f = input.to_vec();
    let old = u16::from_be_bytes([f[l4 + 12], f[l4 + 13]]);
    f[l4 + 13] = flags;
    let new = u16::from_be_bytes([f[l4 + 12], f[l4 + 13]]);
    let c = u16::from_be_bytes([f[l4 + 16], f[l4 + 17]]);
    let mut sum = u32::from(!c) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[l4 + 16..l4 + 18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    Some(f)
}

/// Runs `input` through the engine, recording nothing.
fn engine_only(
    t: &sluice::lb::Tables,
    ct: &mut sluice::lb::ConnTable,
    st: &mut sluice::lb::WorkerState,
    input: &[u8],
    ifindex: u32,
) {
    let mut buf = vec![0u8; HEADROOM + input.len() + 256];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), ifindex).expect("frame");
    let mut rec: Option<Decision> = None;
    process_recorded(&mut frame, t, ct, st, golden::NOW, &mut rec);
}

/// The backend's answer to the newest embryonic flow in `ct` (a SYN-ACK, or a datagram),
/// addressed as the backend sends it (to the client for NAT, to the SNAT address for
/// FullNAT); `None` for the modes that do not see answers.
fn answer(t: &sluice::lb::Tables, ct: &sluice::lb::ConnTable) -> Option<Vec<u8>> {
    use sluice::lb::FlowState;
    use sluice::lb::hash::u128_to_addr;
    let f = ct
        .ids()
        .map(|id| *ct.flow(id))
        .find(|f| matches!(f.state, FlowState::TcpSyn | FlowState::UdpNew))?;
    if !matches!(
        t.vips[f.vip as usize].mode,
        sluice::config::Mode::Nat | sluice::config::Mode::FullNat
    ) {
        return None;
    }
    let (dst, dport) = f.snat.unwrap_or((f.key.src, f.key.sport));
    let l4 = if f.key.proto == 6 {
        golden::tcp(f.backend_port, dport, 0x12, golden::PEER_ISN, b"")
    } else {
        golden::udp(f.backend_port, dport, b"a")
    };
    let v6 = f.key.v6;
    Some(
        golden::Pkt::new(
            &u128_to_addr(f.backend_addr, v6).to_string(),
            &u128_to_addr(dst, v6).to_string(),
            f.key.proto,
            l4,
        )
        .build(),
    )
}

/// Whether `ct` holds an embryonic UDP flow (a fixture's first datagram).
fn udp_embryonic(ct: &sluice::lb::ConnTable) -> bool {
    ct.ids()
        .any(|id| ct.flow(id).state == sluice::lb::FlowState::UdpNew)
}

/// What establishes the embryonic UDP flow a fixture opened: the backend's answer for NAT
/// and FullNAT, the client's second datagram for DR.
/// A TCP segment with `flags` and sequence number `seq` from the backend of the table's
/// (only) TCP flow, toward its client (NAT) or SNAT address (FullNAT).
fn backend_segment(ct: &sluice::lb::ConnTable, flags: u8, seq: u32) -> Option<Vec<u8>> {
    use sluice::lb::hash::u128_to_addr;
    let f = ct.ids().map(|id| *ct.flow(id)).find(|f| f.key.proto == 6)?;
    let rk = f.rev_key()?;
    let v6 = f.key.v6;
    Some(
        golden::Pkt::new(
            &u128_to_addr(rk.backend, v6).to_string(),
            &u128_to_addr(rk.local, v6).to_string(),
            6,
            golden::tcp(rk.backend_port, rk.local_port, flags, seq, b""),
        )
        .build(),
    )
}

fn establish_udp(
    t: &sluice::lb::Tables,
    ct: &mut sluice::lb::ConnTable,
    st: &mut sluice::lb::WorkerState,
    first: &[u8],
    ifindex: u32,
) {
    let frame = answer(t, ct).unwrap_or_else(|| first.to_vec());
    engine_only(t, ct, st, &frame, ifindex);
}

/// What takes the embryonic flow a SYN opened to established under the engine's rules
/// (`lb::conntrack::state`): for NAT and FullNAT, which see the handshake, the backend's
/// SYN-ACK and then the client's ACK; for DR and tunnel the client's ACK, which the
/// caller's continuation segment then follows (they need a second segment after the SYN).
fn establish(
    t: &sluice::lb::Tables,
    ct: &mut sluice::lb::ConnTable,
    st: &mut sluice::lb::WorkerState,
    _syn: &[u8],
    ifindex: u32,
) {
    use sluice::lb::hash::u128_to_addr;
    let Some(f) = ct
        .ids()
        .map(|id| *ct.flow(id))
        .find(|f| f.state == sluice::lb::FlowState::TcpSyn)
    else {
        return;
    };
    if let Some(a) = answer(t, ct) {
        engine_only(t, ct, st, &a, ifindex);
    }
    let v6 = f.key.v6;
    let ack = golden::Pkt::new(
        &u128_to_addr(f.key.src, v6).to_string(),
        &u128_to_addr(f.key.dst, v6).to_string(),
        6,
        golden::tcp(f.key.sport, f.key.dport, 0x10, 2, b""),
    )
    .build();
    engine_only(t, ct, st, &ack, ifindex);
}

#[derive(Default, Debug)]
struct Tally {
    /// Forwarded by the cache and compared byte for byte with the engine.
    compared: usize,
    /// An entry was installed but the program left the frame to the engine (VLAN tag, IP
    /// options, extension headers, SYN/FIN/RST, TTL 1...).
    declined: usize,
    /// The engine's decision is not one the cache takes (no entry installed).
    not_cached: usize,
    /// Shorter than an Ethernet header: BPF_PROG_TEST_RUN refuses them (the NIC would too).
    too_short: usize,
    /// Which modes were compared.
    modes: std::collections::BTreeSet<String>,
    /// Compared frames whose entry carries a client-address shift or hold.
    carried: usize,
    /// Compared frames whose entry carries the SYN proxy's shift.
    shifted: usize,
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    steer: &Steer,
    cache: &FlowCache,
    t: &sluice::lb::Tables,
    ct: &mut sluice::lb::ConnTable,
    st: &mut sluice::lb::WorkerState,
    what: &str,
    input: &[u8],
    ifindex: u32,
    hairpin: Hairpin,
    tally: &mut Tally,
) {
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 256];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), ifindex).expect("frame");
    let mut rec: Option<Decision> = None;
    let verdict = process_recorded(&mut frame, t, ct, st, golden::NOW, &mut rec);
    let engine_out = frame.data().to_vec();
    let installed = rec.filter(flowcache::cacheable).and_then(|d| {
        let v = &t.vips[d.vip as usize];
        let b = &t.backends[d.backend as usize];
        let slot = cache.stat_slot(&BackendId::new(&v.name, b.ip(), b.port));
        let e = flowcache::entry_for(&d, slot)?;
        cache.install(&d.key, &e).expect("install");
        Some((d, e))
    });
    // No context: a test run that names its ingress needs a registered XDP rx queue there,
    // which lo and an idle veth lack. It then arrives on lo (index 1, golden::UPLINK), so
    // a hit toward the uplink is XDP_TX and one toward the backends a redirect.
    let (action, out, _steered) = match steer.test_run(input, 0) {
        Ok(r) => r,
        // The kernel refuses test frames shorter than an Ethernet header.
        Err(e) if input.len() < 14 => {
            assert!(installed.is_none(), "{what}: {e}");
            tally.too_short += 1;
            return;
        }
        Err(e) => panic!("{what}: test run: {e}"),
    };
    match (installed, action) {
        (Some((d, e)), XDP_TX | XDP_REDIRECT) => {
            let Verdict::Tx { ifindex: egress } = verdict else {
                panic!("{what}: engine said {verdict:?} but recorded a decision");
            };
            assert_eq!(e.ifindex, egress, "{what}: entry egress");
            let want = if egress == LOOPBACK && hairpin == Hairpin::XdpTx {
                XDP_TX
            } else {
                XDP_REDIRECT
            };
            assert_eq!(action, want, "{what}: XDP action");
            assert_eq!(
                hex(&out),
                hex(&engine_out),
                "{what}: XDP output (left) differs from lb::process (right)"
            );
            tally.compared += 1;
            tally.carried += usize::from(e.carry != flowcache::CacheCarry::None);
            tally.shifted += usize::from(e.shift != flowcache::CacheShift::None);
            tally.modes.insert(format!(
                "{:?} {} {} {}",
                d.mode,
                if d.key.v6 { "v6" } else { "v4" },
                if d.key.proto == 6 { "tcp" } else { "udp" },
                if d.reverse { "return" } else { "forward" }
            ));
            cache.evict(&d.key);
        }
        (installed, XDP_PASS) => {
            assert_eq!(
                hex(&out),
                hex(input),
                "{what}: a passed frame must be untouched"
            );
            match installed {
                Some((d, _)) => {
                    tally.declined += 1;
                    cache.evict(&d.key);
                }
                None => tally.not_cached += 1,
            }
        }
        (installed, a) => panic!(
            "{what}: XDP action {a} with entry {:?} (engine: {verdict:?})",
            installed.map(|x| x.1)
        ),
    }
}

#[test]
fn golden_fixtures_come_out_of_the_cache_as_out_of_the_engine() {
    require_root();
    let ns = golden_netns("hx-p", "hxd");
    let name = ns.name.clone();
    let tallies = thread::spawn(move || {
        enter(&name);
        let cache = golden_cache();
        let steer = Steer::load_with_cache(Some(&cache)).expect("load with cache");
        // Hits that leave where they came in: XDP_TX (real NICs), then a redirect (veth).
        let mut tallies = Vec::new();
        for hairpin in [Hairpin::XdpTx, Hairpin::Redirect] {
            cache
                .add_egress(0, golden::UPLINK, hairpin)
                .expect("egress lo");
            let hits_before = cache.counters().hits;
            let t = golden::tables();
            let mut tally = Tally::default();
            for fx in golden::fixtures() {
                let (mut ct, mut st) = golden::state_for(&fx, &t);
                run_one(
                    &steer,
                    &cache,
                    &t,
                    &mut ct,
                    &mut st,
                    fx.description,
                    &fx.input,
                    fx.ifindex,
                    hairpin,
                    &mut tally,
                );
                // The established continuation of a flow this fixture opened.
                if tcp_offset(&fx.input).is_some_and(|l4| fx.input[l4 + 13] & 0x02 != 0)
                    && matches!(fx.verdict, Verdict::Tx { .. })
                    && let Some(ack) = with_tcp_flags(&fx.input, 0x10)
                {
                    establish(&t, &mut ct, &mut st, &fx.input, fx.ifindex);
                    let what = format!("{} (then ack)", fx.description);
                    run_one(
                        &steer, &cache, &t, &mut ct, &mut st, &what, &ack, fx.ifindex, hairpin,
                        &mut tally,
                    );
                } else if udp_embryonic(&ct) {
                    establish_udp(&t, &mut ct, &mut st, &fx.input, fx.ifindex);
                    let what = format!("{} (then again)", fx.description);
                    run_one(
                        &steer, &cache, &t, &mut ct, &mut st, &what, &fx.input, fx.ifindex,
                        hairpin, &mut tally,
                    );
                }
            }
            let hits = cache.counters().hits - hits_before;
            assert_eq!(
                hits as usize, tally.compared,
                "{hairpin:?}: every compared frame is a hit"
            );
            tallies.push(tally);
        }
        tallies
    })
    .join()
    .expect("parity thread");
    assert_eq!(
        tallies[0].compared, tallies[1].compared,
        "the same frames hit whichever way hairpins are sent: {tallies:?}"
    );
    let tally = &tallies[0];
    eprintln!(
        "flow cache parity: {} compared ({} with a client-address shift, {} with the SYN \
         proxy's), {} declined by the program, {} not cached; modes: {:?}",
        tally.compared, tally.carried, tally.shifted, tally.declined, tally.not_cached, tally.modes
    );
    assert!(
        tally.compared >= 20,
        "too few fixtures exercised the cache: {tally:?}"
    );
    // proxy-v2 later data (seq + 28), the backend's ACKs (IPv4 and IPv6: ack less the
    // header) and its SACK blocks, and toa's ACK after the backend spoke (no option) go
    // through the kernel.
    assert!(
        tally.carried >= 5,
        "too few client-address frames compared: {tally:?}"
    );
    // The SYN proxy's flows: the client's data and SACK (acknowledgements and edges into
    // the backend's space) and the backend's data (sequence numbers back), NAT IPv4 and
    // FullNAT IPv6, and both windows behind a backend without window scaling.
    assert!(
        tally.shifted >= 7,
        "too few SYN-proxied frames compared: {tally:?}"
    );
    for m in [
        "Nat v4 tcp forward",
        "Nat v4 udp return",
        "Nat v6 tcp forward",
        "FullNat v4 tcp forward",
        "FullNat v6 tcp return",
        "Dr v4 tcp forward",
    ] {
        assert!(tally.modes.contains(m), "no {m} frame compared: {tally:?}");
    }
}

/// The golden tables built from `c`, with the next hops `golden::tables` gives.
fn golden_tables(c: &sluice::config::Config, version: u64) -> sluice::lb::Tables {
    let base = golden::tables();
    let mut t = sluice::lb::Tables::build(c, &|_, _| true, version).expect("tables");
    // Same config, same backend slots: the golden egress applies as it is.
    t.set_egress(base.egress().clone());
    t
}

/// Installs what the engine would for every golden fixture (each alone, after its given
/// frames) and its established continuation; returns the number of entries.
fn install_golden(cache: &FlowCache, t: &sluice::lb::Tables) -> usize {
    for fx in golden::fixtures() {
        let (mut ct, mut st) = golden::state_for(&fx, t);
        let mut inputs = vec![(fx.input.clone(), false)];
        if let Some(ack) = with_tcp_flags(&fx.input, 0x10) {
            inputs.push((ack, true));
        } else {
            inputs.push((fx.input.clone(), true));
        }
        for (input, continuation) in inputs {
            if continuation && udp_embryonic(&ct) {
                establish_udp(t, &mut ct, &mut st, &fx.input, fx.ifindex);
            } else if continuation {
                establish(t, &mut ct, &mut st, &fx.input, fx.ifindex);
            }
            let mut buf = vec![0u8; HEADROOM + input.len() + 256];
            buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(&input);
            let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), fx.ifindex).expect("f");
            let mut rec: Option<Decision> = None;
            process_recorded(&mut frame, t, &mut ct, &mut st, golden::NOW, &mut rec);
            if let Some(d) = rec.filter(flowcache::cacheable) {
                let v = &t.vips[d.vip as usize];
                let b = &t.backends[d.backend as usize];
                let slot = cache.stat_slot(&BackendId::new(&v.name, b.ip(), b.port));
                if let Some(e) = flowcache::entry_for(&d, slot) {
                    cache.install(&d.key, &e).expect("install");
                }
            }
        }
    }
    cache.len()
}

#[test]
fn a_commit_evicts_exactly_the_flows_the_engine_would_move() {
    require_root();
    let ns = golden_netns("hx-c", "hxd");
    let name = ns.name.clone();
    let tally = thread::spawn(move || {
        enter(&name);
        let cache = golden_cache();
        let c = golden::config();
        let t = golden_tables(&c, 1);
        let installed = install_golden(&cache, &t);
        assert!(installed >= 20, "only {installed} entries installed");
        let backend_of = |name: &str| {
            cache
                .entries()
                .into_iter()
                .filter(|(_, e)| {
                    cache
                        .slot_ids()
                        .get(&e.stat)
                        .is_some_and(|id| id.vip == name)
                })
                .count()
        };
        let nat4 = backend_of("nat4");
        assert!(nat4 >= 2, "nat4 has forward and return entries: {nat4}");

        // The same tables again (a reload that changed nothing): nothing moves.
        let same = golden_tables(&c, 2);
        assert_eq!(sluice::control::cache::after_commit(&cache, &t, &same), 0);

        // Draining nat4's backend keeps its flows, in the engine and so in the cache.
        let mut drained = c.clone();
        let v = drained
            .vips
            .iter_mut()
            .find(|v| v.name == "nat4")
            .expect("nat4");
        v.backends[0].state = sluice::config::BackendState::Drain;
        let t_drain = golden_tables(&drained, 3);
        assert_eq!(
            sluice::control::cache::after_commit(&cache, &same, &t_drain),
            0
        );

        // Disabling it moves them: every nat4 entry goes, nothing else does.
        let mut disabled = c.clone();
        let v = disabled
            .vips
            .iter_mut()
            .find(|v| v.name == "nat4")
            .expect("nat4");
        v.backends[0].state = sluice::config::BackendState::Disabled;
        let t_dis = golden_tables(&disabled, 4);
        let evicted = sluice::control::cache::after_commit(&cache, &t_drain, &t_dis);
        assert_eq!(evicted, nat4, "exactly nat4's entries are evicted");
        assert_eq!(backend_of("nat4"), 0);
        assert_eq!(cache.len(), installed - nat4);

        // A VIP removed from the config takes its entries with it.
        let mut removed = c.clone();
        removed.vips.retain(|v| v.name != "fnat4");
        let fnat4 = backend_of("fnat4");
        assert!(fnat4 >= 2, "fnat4 has forward and return entries: {fnat4}");
        let t_rm = golden_tables(&removed, 5);
        let evicted = sluice::control::cache::after_commit(&cache, &t_dis, &t_rm);
        assert!(evicted >= fnat4, "fnat4's entries go ({evicted} < {fnat4})");
        assert_eq!(backend_of("fnat4"), 0);
        (installed, nat4, fnat4)
    })
    .join()
    .expect("commit thread");
    eprintln!("after_commit: {tally:?} (installed, nat4 evicted on disable, fnat4 on removal)");
}

// ---- real traffic ----------------------------------------------------------------------

mod traffic {
    use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Mutex, mpsc};
    use std::thread;
    use std::time::Duration;

    use super::enter;
    use lab::netns::{Netns, require_program, require_root, veth_mq};
    use sluice::config::Protocol;
    use sluice::config::{BackendState, Config, Mode};
    use sluice::control::cache::{after_commit, stats};
    use sluice::datapath::flowcache::FlowCache;
    use sluice::datapath::{Datapath, DatapathConfig, ReturnKey, VipKey};
    use sluice::engine::{CounterSnapshot, LbHandler, Published};
    use sluice::lb::{NextHop, Tables};
    use wire::MacAddr;

    const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 72, 1, 2);
    const APP_C: Ipv4Addr = Ipv4Addr::new(10, 72, 1, 1);
    const VIP: Ipv4Addr = Ipv4Addr::new(10, 72, 9, 9);
    const PORT: u16 = 9000;
    /// The FullNAT VIP's port (its backends serve [`PORT`]), sourced from [`SNAT`].
    const FULLNAT_PORT: u16 = 9001;
    const SNAT: Ipv4Addr = Ipv4Addr::new(10, 72, 9, 100);
    /// Backend i sits behind app interface a{i+1}, at 10.72.{i+2}.2.
    const BACKENDS: [Ipv4Addr; 2] = [Ipv4Addr::new(10, 72, 2, 2), Ipv4Addr::new(10, 72, 3, 2)];

    fn config(states: [BackendState; 2], cache: bool) -> Config {
        let st = |s: BackendState| match s {
            BackendState::Active => "active",
            BackendState::Drain => "drain",
            BackendState::Disabled => "disabled",
        };
        let text = format!(
            r#"
[appliance]
name = "hx"
interfaces = ["a0", "a1", "a2"]
flow_cache = {cache}

[[vip]]
name = "echo"
address = "{VIP}"
port = {PORT}
protocol = "udp"
mode = "nat"
scheduler = "rr"

[[vip.backend]]
address = "{}"
state = "{}"

[[vip.backend]]
address = "{}"
state = "{}"

[[vip]]
name = "echo-fullnat"
address = "{VIP}"
port = {FULLNAT_PORT}
protocol = "udp"
mode = "fullnat"
snat = ["{SNAT}"]
scheduler = "rr"

[[vip.backend]]
address = "{}"
port = {PORT}

[[vip.backend]]
address = "{}"
port = {PORT}
"#,
            BACKENDS[0],
            st(states[0]),
            BACKENDS[1],
            st(states[1]),
            BACKENDS[0],
            BACKENDS[1],
        );
        Config::from_toml_str(&text).unwrap_or_else(|e| panic!("test config: {e}"))
    }

    struct Lab {
        client: Netns,
        app: Netns,
        servers: [Netns; 2],
        /// (ifindex, MAC) of a0, a1, a2 in the appliance namespace.
        app_ifs: [(u32, [u8; 6]); 3],
        client_mac: [u8; 6],
        server_macs: [[u8; 6]; 2],
    }

    fn lab() -> Lab {
        lab_with_queues(1)
    }

    /// The lab with `queues` rx/tx queues on every veth: the datapath runs that many workers.
    fn lab_with_queues(queues: u32) -> Lab {
        let client = Netns::new("hx-c");
        let app = Netns::new("hx-a");
        let servers = [Netns::new("hx-s"), Netns::new("hx-s")];
        veth_mq(&client, "c0", &app, "a0", queues);
        veth_mq(&app, "a1", &servers[0], "s0", queues);
        veth_mq(&app, "a2", &servers[1], "s0", queues);
        client.run(&["ip", "addr", "add", &format!("{CLIENT}/24"), "dev", "c0"]);
        client.run(&["ip", "route", "add", "default", "via", &APP_C.to_string()]);
        app.run(&["ip", "addr", "add", &format!("{APP_C}/24"), "dev", "a0"]);
        app.run(&["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
        for (i, s) in servers.iter().enumerate() {
            let net = i + 2;
            app.run(&[
                "ip",
                "addr",
                "add",
                &format!("10.72.{net}.1/24"),
                "dev",
                &format!("a{}", i + 1),
            ]);
            s.run(&[
                "ip",
                "addr",
                "add",
                &format!("{}/24", BACKENDS[i]),
                "dev",
                "s0",
            ]);
            s.run(&[
                "ip",
                "route",
                "add",
                "default",
                "via",
                &format!("10.72.{net}.1"),
            ]);
        }
        // XDP_TX / XDP_REDIRECT into a veth is dropped unless the receiving end has GRO
        // (or an XDP program): the client's and servers' ends get GRO.
        client.run(&["ethtool", "-K", "c0", "gro", "on"]);
        for s in &servers {
            s.run(&["ethtool", "-K", "s0", "gro", "on"]);
        }
        let app_if = |n: &str| -> (u32, [u8; 6]) {
            (
                app.sysfs(n, "ifindex").parse().expect("ifindex"),
                app.mac(n),
            )
        };
        let app_ifs = [app_if("a0"), app_if("a1"), app_if("a2")];
        let client_mac = client.mac("c0");
        let server_macs = [servers[0].mac("s0"), servers[1].mac("s0")];
        Lab {
            client,
            app,
            servers,
            app_ifs,
            client_mac,
            server_macs,
        }
    }

    fn tables(lab: &Lab, c: &Config, version: u64) -> Tables {
        let mut t = Tables::build(c, &|_, _| true, version).expect("tables");
        for slot in 0..t.backends.len() as u32 {
            let i = BACKENDS
                .iter()
                .position(|b| t.backends[slot as usize].ip() == std::net::IpAddr::V4(*b))
                .expect("backend");
            let (ifindex, src) = lab.app_ifs[i + 1];
            t.set_next_hop(
                slot,
                NextHop {
                    ifindex,
                    src_mac: MacAddr(src),
                    dst_mac: MacAddr(lab.server_macs[i]),
                },
            );
        }
        let (ifindex, src) = lab.app_ifs[0];
        t.set_gateway(
            false,
            NextHop {
                ifindex,
                src_mac: MacAddr(src),
                dst_mac: MacAddr(lab.client_mac),
            },
        );
        t
    }

    /// A UDP echo server in backend namespace `i`: answers "s<i>:" + the request, counts
    /// requests.
    fn echo_server(ns: String, i: usize, stop: Arc<AtomicBool>, seen: Arc<AtomicU64>) {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            enter(&ns);
            let s = UdpSocket::bind(("0.0.0.0", PORT)).expect("bind echo");
            s.set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            tx.send(()).expect("ready");
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                if let Ok((n, from)) = s.recv_from(&mut buf) {
                    seen.fetch_add(1, Ordering::Relaxed);
                    let mut reply = format!("s{i}:").into_bytes();
                    reply.extend_from_slice(&buf[..n]);
                    let _ = s.send_to(&reply, from);
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(5))
            .expect("echo server up");
    }

    /// The answer to `msg` from `vip`: the answering backend's tag (s0/s1), or None when none
    /// comes within the socket's timeout. A late answer to an earlier request is skipped, so
    /// one slow datagram does not make every later one look lost.
    fn answer(s: &UdpSocket, vip: SocketAddr, msg: &str) -> Option<String> {
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        let mut buf = [0u8; 2048];
        while std::time::Instant::now() < deadline {
            match s.recv_from(&mut buf) {
                Ok((len, from)) if from == vip => {
                    let text = String::from_utf8_lossy(&buf[..len]).to_string();
                    if text.ends_with(msg) {
                        return Some(text[..2].to_string());
                    }
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// A client flow: one UDP socket (one source port) in the client namespace.
    struct Flow {
        tx: mpsc::Sender<(u32, mpsc::Sender<Vec<Option<String>>>)>,
    }

    impl Flow {
        fn new(ns: String) -> Flow {
            Flow::to(ns, PORT)
        }

        /// A flow to the VIP's `port` ([`PORT`]: NAT, [`FULLNAT_PORT`]: FullNAT).
        fn to(ns: String, port: u16) -> Flow {
            let (tx, rx) = mpsc::channel::<(u32, mpsc::Sender<Vec<Option<String>>>)>();
            thread::spawn(move || {
                enter(&ns);
                let s = UdpSocket::bind((CLIENT, 0)).expect("bind client");
                // A busy machine may hold a frame in the engine's rings for a while; a
                // late answer read as the next request's would count twice as lost.
                s.set_read_timeout(Some(Duration::from_secs(3)))
                    .expect("timeout");
                let vip = SocketAddr::from((VIP, port));
                let mut seq = 0u32;
                while let Ok((n, back)) = rx.recv() {
                    let mut answers = Vec::new();
                    for _ in 0..n {
                        seq += 1;
                        let msg = format!("req{seq}");
                        let _ = s.send_to(msg.as_bytes(), vip);
                        answers.push(answer(&s, vip, &msg));
                    }
                    let _ = back.send(answers);
                }
            });
            Flow { tx }
        }

        /// Sends `n` requests one after the other; the backend that answered each (s0/s1),
        /// or None for a lost or wrong answer.
        fn exchange(&self, n: u32) -> Vec<Option<String>> {
            let (tx, rx) = mpsc::channel();
            self.tx.send((n, tx)).expect("flow thread");
            rx.recv_timeout(Duration::from_secs(60))
                .expect("flow answers")
        }
    }

    /// The one backend that answered all of `answers`. A new flow's first two datagrams may
    /// be lost (UDP: the engine drops a frame whose next hop it is still resolving, and a
    /// loaded machine drops from socket buffers); from the first answer on, every request
    /// is answered, by the same backend.
    fn only(answers: &[Option<String>], what: &str) -> String {
        let lost = answers.iter().take_while(|a| a.is_none()).count();
        assert!(
            lost <= 2 && lost < answers.len(),
            "{what}: no answer: {answers:?}"
        );
        let first = answers[lost].clone().expect("answered");
        assert!(
            answers[lost..]
                .iter()
                .all(|a| a.as_deref() == Some(first.as_str())),
            "{what}: every answer from {first}: {answers:?}"
        );
        first
    }

    fn start(lab: &Lab, published: &Arc<Published>, cache: Option<Arc<FlowCache>>) -> Datapath {
        let dp_cfg =
            DatapathConfig::from(&config([BackendState::Active; 2], cache.is_some()).appliance);
        let factory = {
            let published = Arc::clone(published);
            let cache = cache.clone();
            move |w: usize, n: usize| -> Box<dyn sluice::datapath::FrameHandler> {
                let h = LbHandler::new(
                    Arc::clone(&published),
                    4096,
                    w as u16,
                    n as u16,
                    Arc::new(Mutex::new(CounterSnapshot::default())),
                    Arc::new(AtomicU64::new(0)),
                );
                Box::new(match &cache {
                    Some(c) => h.with_flow_cache(Arc::clone(c)),
                    None => h,
                })
            }
        };
        let dp = Datapath::start_with_cache(dp_cfg, cache, factory).expect("datapath");
        let vips: Vec<VipKey> = [PORT, FULLNAT_PORT]
            .into_iter()
            .map(|port| VipKey {
                addr: VIP.into(),
                port,
                proto: Protocol::Udp,
                mode: if port == FULLNAT_PORT {
                    Mode::FullNat
                } else {
                    Mode::Nat
                },
                slot: u32::from(port == FULLNAT_PORT),
                tenant_vni: None,
            })
            .collect();
        dp.set_vips(&vips, &[]).expect("vips");
        let ret: Vec<ReturnKey> = BACKENDS
            .iter()
            .map(|b| ReturnKey::Backend {
                addr: (*b).into(),
                port: PORT,
                proto: Protocol::Udp,
            })
            .chain(std::iter::once(ReturnKey::Local {
                addr: SNAT.into(),
                port: 0,
                proto: Protocol::Udp,
            }))
            .collect();
        dp.set_return_keys(&ret).expect("return keys");
        let _ = lab;
        dp
    }

    #[test]
    fn cached_flows_forward_in_the_kernel_and_follow_drain_and_disable() {
        require_root();
        require_program("ethtool", "ethtool");
        let lab = lab();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        for (i, s) in lab.servers.iter().enumerate() {
            echo_server(s.name.clone(), i, Arc::clone(&stop), Arc::clone(&seen[i]));
        }
        let app = lab.app.name.clone();
        let lab = Arc::new(lab);
        let lab2 = Arc::clone(&lab);
        let result = thread::spawn(move || {
            let lab = lab2;
            enter(&app);
            let cache = Arc::new(FlowCache::create(4096).expect("cache maps"));
            let c = config([BackendState::Active; 2], true);
            let t1 = tables(&lab, &c, 1);
            let published = Arc::new(Published::new(t1.clone()));
            let dp = start(&lab, &published, Some(Arc::clone(&cache)));

            // Two flows, round-robin: one per backend.
            let f1 = Flow::new(lab.client.name.clone());
            let f2 = Flow::new(lab.client.name.clone());
            let b1 = only(&f1.exchange(50), "flow 1");
            let b2 = only(&f2.exchange(50), "flow 2");
            assert_ne!(b1, b2, "round-robin spreads the two flows");
            let s = stats(&cache);
            // Each exchange after the first is two frames the kernel forwards.
            assert!(s.hits >= 100, "too few cache hits: {s:?}");
            assert!(s.entries >= 4, "forward and return entries per flow: {s:?}");
            let fwd: u64 = s.backends.values().map(|b| b.packets).sum();
            assert_eq!(fwd, s.hits, "every hit counted for its backend: {s:?}");

            // Drain flow 1's backend: flow 1 stays on it (from the cache), a new flow does not
            // go there.
            let x = if b1 == "s0" { 0 } else { 1 };
            let mut states = [BackendState::Active; 2];
            states[x] = BackendState::Drain;
            let t2 = tables(&lab, &config(states, true), 2);
            published.publish(t2.clone());
            let evicted = after_commit(&cache, &t1, &t2);
            assert_eq!(evicted, 0, "a drained backend keeps its flows");
            let hits_before = stats(&cache).hits;
            assert_eq!(only(&f1.exchange(20), "flow 1 drained"), b1);
            assert!(
                stats(&cache).hits >= hits_before + 40,
                "still from the cache"
            );
            for k in 0..4 {
                let f = Flow::new(lab.client.name.clone());
                assert_ne!(
                    only(&f.exchange(3), "new flow while draining"),
                    b1,
                    "new flow {k} went to the drained backend"
                );
            }

            // Disable it: flow 1's entries go and its next frames move to the other backend;
            // the disabled backend sees nothing more.
            states[x] = BackendState::Disabled;
            let t3 = tables(&lab, &config(states, true), 3);
            published.publish(t3.clone());
            let evicted = after_commit(&cache, &t2, &t3);
            assert!(
                evicted >= 2,
                "flow 1's forward and return entries: {evicted}"
            );
            let seen_x = seen[x].load(Ordering::Relaxed);
            let moved = f1.exchange(20);
            assert!(
                moved.iter().all(|a| a.as_deref() == Some(b2.as_str())),
                "flow 1 moved to {b2}: {moved:?}"
            );
            assert_eq!(
                seen[x].load(Ordering::Relaxed),
                seen_x,
                "disabled backend got frames"
            );
            let s = stats(&cache);
            drop(dp);
            s
        })
        .join();
        stop.store(true, Ordering::Relaxed);
        let s = result.expect("datapath thread");
        eprintln!(
            "flow cache traffic: hits {} misses {} entries {} backends {:?}",
            s.hits, s.misses, s.entries, s.backends
        );
    }

    /// Four queues on every veth, four workers, NAT and FullNAT flows from many source
    /// ports, with the cache on and off: every request is answered by one backend, the
    /// flows spread over at least 3 workers, FullNAT replies that RSS put on another
    /// worker's queue reach the worker owning the flow through the handoff (veth has no
    /// ntuple filters), and with the cache on the kernel forwards both modes' established
    /// frames on whatever queue they arrive.
    #[test]
    fn four_queues_spread_flows_and_hand_fullnat_returns_to_their_owner() {
        require_root();
        require_program("ethtool", "ethtool");
        for cache_on in [false, true] {
            four_queues(cache_on);
        }
    }

    fn four_queues(cache_on: bool) {
        let lab = lab_with_queues(4);
        let stop = Arc::new(AtomicBool::new(false));
        let seen = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        for (i, s) in lab.servers.iter().enumerate() {
            echo_server(s.name.clone(), i, Arc::clone(&stop), Arc::clone(&seen[i]));
        }
        let app = lab.app.name.clone();
        let lab = Arc::new(lab);
        let lab2 = Arc::clone(&lab);
        let r = thread::spawn(move || {
            let lab = lab2;
            enter(&app);
            let cache = cache_on.then(|| Arc::new(FlowCache::create(4096).expect("cache maps")));
            let c = config([BackendState::Active; 2], cache_on);
            let published = Arc::new(Published::new(tables(&lab, &c, 1)));
            let dp = start(&lab, &published, cache.clone());
            // 16 flows per mode, each its own source port, 10 requests each.
            let flows: Vec<(u16, Flow)> = (0..32)
                .map(|i| {
                    let port = if i % 2 == 0 { PORT } else { FULLNAT_PORT };
                    (port, Flow::to(lab.client.name.clone(), port))
                })
                .collect();
            let mut per_backend = std::collections::HashMap::new();
            for (port, f) in &flows {
                let b = only(&f.exchange(10), &format!("flow to port {port}"));
                *per_backend.entry((*port, b)).or_insert(0u32) += 1;
            }
            // The ring counters are the workers' own, published every pass.
            thread::sleep(Duration::from_millis(100));
            let st = dp.stats().expect("stats");
            let cs = cache.as_ref().map(|c| stats(c));
            drop(dp);
            (st, cs, per_backend)
        })
        .join();
        stop.store(true, Ordering::Relaxed);
        let (st, cs, per_backend) = r.expect("datapath thread");
        eprintln!("four queues, cache {cache_on}: {st:?}\n{cs:?}\n{per_backend:?}");
        assert_eq!(st.workers.len(), 4, "one worker per queue");
        for i in &st.interfaces {
            assert_eq!(i.queues, 4);
            assert_eq!(
                i.return_steering,
                sluice::datapath::ReturnSteering::Unsupported,
                "veth refuses ntuple rules: {i:?}"
            );
        }
        let busy = st.workers.iter().filter(|w| w.rx > 0).count();
        assert!(
            busy >= 3,
            "frames reached {busy} of 4 workers: {:?}",
            st.workers
        );
        let handed: u64 = st.workers.iter().map(|w| w.handed_off).sum();
        let received: u64 = st.workers.iter().map(|w| w.handoff_received).sum();
        assert!(
            handed > 0,
            "no FullNAT reply landed on another worker: {:?}",
            st.workers
        );
        assert_eq!(handed, received, "every handed-off reply reached its owner");
        assert!(
            st.workers
                .iter()
                .all(|w| w.handoff_ring_full == 0 && w.bad_egress == 0)
        );
        // Round robin per worker over two backends: both get flows of both modes.
        for port in [PORT, FULLNAT_PORT] {
            for b in ["s0", "s1"] {
                assert!(
                    per_backend
                        .get(&(port, b.to_string()))
                        .copied()
                        .unwrap_or(0)
                        > 0,
                    "port {port}: no flow on {b}: {per_backend:?}"
                );
            }
        }
        if let Some(cs) = cs {
            // Each flow's requests after the first go through the kernel both ways.
            assert!(cs.hits >= 32 * 9, "too few cache hits: {cs:?}");
            let fwd: u64 = cs.backends.values().map(|b| b.packets).sum();
            assert_eq!(fwd, cs.hits, "every hit counted for its backend: {cs:?}");
        }
    }

    #[test]
    fn the_same_traffic_flows_with_the_cache_off() {
        require_root();
        require_program("ethtool", "ethtool");
        let lab = lab();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        for (i, s) in lab.servers.iter().enumerate() {
            echo_server(s.name.clone(), i, Arc::clone(&stop), Arc::clone(&seen[i]));
        }
        let app = lab.app.name.clone();
        let lab = Arc::new(lab);
        let lab2 = Arc::clone(&lab);
        let r = thread::spawn(move || {
            let lab = lab2;
            enter(&app);
            let c = config([BackendState::Active; 2], false);
            let published = Arc::new(Published::new(tables(&lab, &c, 1)));
            let dp = start(&lab, &published, None);
            let f = Flow::new(lab.client.name.clone());
            only(&f.exchange(30), "engine only");
            let st = dp.stats().expect("stats");
            drop(dp);
            st
        })
        .join();
        stop.store(true, Ordering::Relaxed);
        let st = r.expect("datapath thread");
        // Every request and every answer went through the engine (the answers themselves
        // were checked by `only`).
        assert!(st.steer.steered >= 60, "the engine saw every frame: {st:?}");
    }
}

/// Runs `input` through the engine with decisions going to `wc` (as `LbHandler` does).
fn engine(
    wc: &mut flowcache::WorkerCache,
    t: &sluice::lb::Tables,
    ct: &mut sluice::lb::ConnTable,
    st: &mut sluice::lb::WorkerState,
    input: &[u8],
    ifindex: u32,
    now: u64,
) -> Option<Decision> {
    let mut buf = vec![0u8; HEADROOM + input.len() + 256];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), ifindex).expect("frame");
    let mut rec: Option<Decision> = None;
    process_recorded(&mut frame, t, ct, st, now, &mut rec);
    if let Some(d) = &rec {
        wc.after_decision(d, t);
    }
    // The worker's tx kick, then the installs that wait for it.
    wc.install_pending(|_| true);
    rec
}

#[test]
fn workers_install_refresh_age_and_close_their_entries() {
    require_root();
    let ns = golden_netns("hx-w", "hxd");
    let name = ns.name.clone();
    thread::spawn(move || {
        enter(&name);
        workers_install_refresh_age_and_close(golden_cache());
    })
    .join()
    .expect("worker thread");
}

fn workers_install_refresh_age_and_close(cache: FlowCache) {
    let cache = std::sync::Arc::new(cache);
    let mut wc = flowcache::WorkerCache::new(std::sync::Arc::clone(&cache));
    let (t, mut ct, mut st) = golden::setup();
    let fx = golden::fixtures();
    let find = |d: &str| {
        fx.iter()
            .find(|f| f.description.starts_with(d))
            .unwrap_or_else(|| panic!("fixture {d}"))
            .clone()
    };
    let now = golden::NOW;

    // A UDP flow is cached once it is established (NAT: the backend answered), not before:
    // one-shot datagrams cost no map update.
    let q = find("nat4u udp: dnat");
    let d = engine(&mut wc, &t, &mut ct, &mut st, &q.input, q.ifindex, now).expect("decision");
    assert!(
        cache.get(&d.key).is_none(),
        "an embryonic flow is not cached"
    );
    let a = answer(&t, &ct).expect("nat answers");
    let r = engine(&mut wc, &t, &mut ct, &mut st, &a, q.ifindex, now).expect("answer");
    assert!(
        cache.get(&r.key).is_some(),
        "the answer's direction is cached"
    );
    let d = engine(&mut wc, &t, &mut ct, &mut st, &q.input, q.ifindex, now).expect("decision");
    let (flow, _) = d.flow.expect("flow in the table");
    let installed = cache.get(&d.key).expect("udp flow installed");
    assert_eq!(wc.installs, 2);
    // The same decision again (a frame the program declined) installs nothing new.
    engine(&mut wc, &t, &mut ct, &mut st, &q.input, q.ifindex, now);
    assert_eq!(wc.installs, 2);

    assert_eq!(installed.last_seen, 0, "installed without a hit");
    let nowhere = flowcache::CacheEntry {
        ifindex: 4242,
        ..installed
    };
    assert!(
        cache.install(&d.key, &nowhere).is_err(),
        "an entry toward an interface the cache cannot send on is refused"
    );
    assert_eq!(cache.get(&d.key), Some(installed), "and changes nothing");

    // The kernel forwards it (its hits move last_seen, the kernel's jiffies) for longer than
    // the UDP timeout: every walk that sees it moved keeps the flow alive in the table.
    let mut t_walk = now;
    for jiffies in [1_000u64, 2_000, 3_000] {
        t_walk += 200 * 1_000_000_000;
        let hit = flowcache::CacheEntry {
            last_seen: jiffies,
            ..installed
        };
        cache.install(&d.key, &hit).expect("kernel hit");
        wc.tick(&mut ct, t_walk);
        let id = ct
            .lookup(&flow, t_walk)
            .expect("a flow the kernel forwards stays");
        assert_eq!(ct.flow(id).last_seen, t_walk, "refreshed at the walk");
    }
    assert!(cache.get(&d.key).is_some());

    // Then idle: last_seen stops moving. A walk within the timeout keeps it...
    wc.tick(&mut ct, t_walk + 100 * 1_000_000_000);
    assert!(
        cache.get(&d.key).is_some(),
        "idle for less than the timeout"
    );
    // ...and the first walk past the UDP timeout (300 s) evicts it from both sides.
    wc.tick(&mut ct, t_walk + 400 * 1_000_000_000);
    assert!(cache.get(&d.key).is_none(), "aged-out flow evicted");
    assert!(
        ct.lookup(&flow, t_walk).is_none(),
        "and gone from the table"
    );
    assert!(wc.is_empty());

    // A TCP flow: cached from its first established frame, evicted on FIN.
    let syn = find("nat4 tcp syn: dnat");
    let d = engine(&mut wc, &t, &mut ct, &mut st, &syn.input, syn.ifindex, now).expect("syn");
    assert!(cache.get(&d.key).is_none(), "a SYN is not cached");
    establish(&t, &mut ct, &mut st, &syn.input, syn.ifindex);
    let ack = with_tcp_flags(&syn.input, 0x10).expect("ack");
    engine(&mut wc, &t, &mut ct, &mut st, &ack, syn.ifindex, now).expect("ack");
    assert!(cache.get(&d.key).is_some(), "established flow cached");
    let fin = with_tcp_flags(&syn.input, 0x11).expect("fin");
    engine(&mut wc, &t, &mut ct, &mut st, &fin, syn.ifindex, now).expect("fin");
    assert!(cache.get(&d.key).is_none(), "closing flow evicted");
    // The backend's FIN closes it (NAT sees both ways: a flow closes at its second FIN).
    let bfin = backend_segment(&ct, 0x11, golden::PEER_ISN + 1).expect("the flow's backend");
    engine_only(&t, &mut ct, &mut st, &bfin, syn.ifindex);
    assert!(
        ct.ids()
            .all(|id| ct.flow(id).state == sluice::lb::FlowState::TcpClosing),
        "closed at the second FIN"
    );

    // The backend closes first (HTTP with `Connection: close`): its FIN takes the return
    // entry only; the client's entry stays until the client's own FIN, so that FIN still
    // finds it (flood mode's refund, flood_cached_teardown).
    engine(&mut wc, &t, &mut ct, &mut st, &syn.input, syn.ifindex, now).expect("syn again");
    let synack = answer(&t, &ct).expect("the backend's SYN-ACK");
    let r = engine(&mut wc, &t, &mut ct, &mut st, &synack, syn.ifindex, now).expect("syn-ack");
    assert!(r.reverse, "the SYN-ACK is return traffic");
    assert!(
        cache.get(&r.key).is_some(),
        "return direction cached at the SYN-ACK"
    );
    // The client's handshake ACK, acknowledging that SYN-ACK (as `establish` builds it).
    let hs_ack = {
        use sluice::lb::hash::u128_to_addr;
        let f = ct
            .ids()
            .map(|id| *ct.flow(id))
            .find(|f| f.state == sluice::lb::FlowState::TcpSyn)
            .expect("the reopened flow");
        let v6 = f.key.v6;
        golden::Pkt::new(
            &u128_to_addr(f.key.src, v6).to_string(),
            &u128_to_addr(f.key.dst, v6).to_string(),
            6,
            golden::tcp(f.key.sport, f.key.dport, 0x10, 2, b""),
        )
        .build()
    };
    engine(&mut wc, &t, &mut ct, &mut st, &hs_ack, syn.ifindex, now).expect("ack");
    assert!(
        cache.get(&d.key).is_some(),
        "established again, client side cached"
    );
    let backend_fin = with_tcp_flags(&synack, 0x11).expect("backend fin");
    engine(
        &mut wc,
        &t,
        &mut ct,
        &mut st,
        &backend_fin,
        syn.ifindex,
        now,
    )
    .expect("backend fin");
    assert!(
        cache.get(&r.key).is_none(),
        "the backend's FIN takes its return entry"
    );
    assert!(
        cache.get(&d.key).is_some(),
        "the client's entry waits for the client's FIN"
    );
    assert_eq!(wc.len(), 1);
    engine(&mut wc, &t, &mut ct, &mut st, &fin, syn.ifindex, now).expect("client fin");
    assert!(cache.get(&d.key).is_none(), "the client's FIN takes it");
    assert!(wc.is_empty(), "nothing left tracked");
}

/// Issue 18 item 4: an expired FullNAT flow's kernel entries must be gone before its SNAT
/// port serves a new flow to the same backend, or the kernel rewrites the new flow's
/// replies toward the old client. Client A's flow is cached both ways, then expires with no
/// walk in between; client B, whose first-choice port is A's, opens a flow to the same
/// backend. After the engine handles B's SYN, no kernel entry may send a reply toward A.
#[test]
fn an_expired_fullnat_flows_entries_go_before_its_port_is_reused() {
    require_root();
    let ns = golden_netns("hx-m", "hxd");
    let name = ns.name.clone();
    thread::spawn(move || {
        enter(&name);
        expired_fullnat_port_is_not_misdirected(golden_cache());
    })
    .join()
    .expect("misdirection thread");
}

fn expired_fullnat_port_is_not_misdirected(cache: FlowCache) {
    use sluice::datapath::FrameHandler;
    use sluice::engine::{CounterSnapshot, LbHandler, Published};
    use sluice::lb::hash::{FlowKey, addr_to_u128};
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};
    let cache = Arc::new(cache);
    let t = golden::tables();
    let published = Arc::new(Published::new(t.clone()));
    let mut h = LbHandler::new(
        Arc::clone(&published),
        4096,
        0,
        1,
        Arc::new(Mutex::new(CounterSnapshot::default())),
        Arc::new(AtomicU64::new(0)),
    )
    .with_flow_cache(Arc::clone(&cache));
    let (client, vip, backend, pool) = ("198.51.100.7", "192.0.2.20", "10.0.0.3", "10.1.0.1");
    let first_port = |sport: u16| {
        let hash = golden::setup::flow_hash(client, vip, sport, 443, 6);
        golden::setup::snat_port(6, backend, 8443, pool, hash)
    };
    let port_a = first_port(40000);
    let sport_b = (1024..u16::MAX)
        .find(|s| *s != 40000 && first_port(*s) == port_a)
        .expect("a client port whose first SNAT port is A's");
    let mut handle = |frame: Vec<u8>, ifindex: u32, now: u64| {
        let mut buf = vec![0u8; HEADROOM + frame.len() + 256];
        buf[HEADROOM..HEADROOM + frame.len()].copy_from_slice(&frame);
        let mut f = Frame::new(&mut buf, HEADROOM, frame.len(), ifindex).expect("frame");
        let v = h.handle(&mut f, now);
        h.after_tx();
        v
    };
    let seg = |sport: u16, flags: u8| {
        golden::Pkt::new(client, vip, 6, golden::tcp(sport, 443, flags, 1, b"")).build()
    };
    let now = golden::NOW;
    // A: SYN, the backend's SYN-ACK (the return direction is cached), ACK (forward cached).
    assert!(matches!(
        handle(seg(40000, 0x02), golden::UPLINK, now),
        Verdict::Tx { .. }
    ));
    let synack = golden::Pkt::new(
        backend,
        pool,
        6,
        golden::tcp(8443, port_a, 0x12, golden::PEER_ISN, b""),
    );
    assert!(matches!(
        handle(synack.build(), golden::BACKENDS, now),
        Verdict::Tx { .. }
    ));
    assert!(matches!(
        handle(seg(40000, 0x10), golden::UPLINK, now),
        Verdict::Tx { .. }
    ));
    let rev_key = |port: u16| FlowKey {
        src: addr_to_u128(golden::build::ip(backend)),
        dst: addr_to_u128(golden::build::ip(pool)),
        sport: 8443,
        dport: port,
        proto: 6,
        v6: false,
        zone: 0,
    };
    let toward_a = |e: &flowcache::CacheEntry| {
        matches!(e.action, flowcache::CacheAction::Nat { dst: Some((c, 40000)), .. }
            if c == addr_to_u128(golden::build::ip(client)))
    };
    let a_rev = cache
        .get(&rev_key(port_a))
        .expect("A's return entry installed");
    assert!(toward_a(&a_rev));

    // Past the established timeout, before any walk: B's SYN to the same backend.
    let later = now + 901 * 1_000_000_000;
    assert!(matches!(
        handle(seg(sport_b, 0x02), golden::UPLINK, later),
        Verdict::Tx { .. }
    ));
    if let Some(e) = cache.get(&rev_key(port_a)) {
        assert!(
            !toward_a(&e),
            "port {port_a} serves B while the kernel still sends its replies to A"
        );
    }
}

/// The program's front table (steer.bpf.c): each CPU copies the entries it hits, and a copy
/// serves the rest of its jiffy without the map. A copy must never outlive the entry it was
/// made from: after the control plane replaces an entry (here its destination MAC, as a
/// neighbour change does) the very next frame leaves with the new one, and after it evicts
/// the entry the next frame goes to the engine. Each round is a few microseconds, so nearly
/// all of them fall in the jiffy of the copy before them (the test counts those: a round
/// where the entry's last_seen, the kernel's jiffies, did not move).
#[test]
fn the_front_table_never_serves_a_replaced_or_evicted_entry() {
    require_root();
    let ns = golden_netns("hx-f", "hxd");
    let name = ns.name.clone();
    thread::spawn(move || {
        enter(&name);
        // The copies are per CPU: every run must meet the one the run before filled.
        let mut one = nix::sched::CpuSet::new();
        one.set(0).expect("cpu 0");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("pin");
        let cache = golden_cache();
        let steer = Steer::load_with_cache(Some(&cache)).expect("load with cache");
        let t = golden::tables();
        for prefix in ["nat4 tcp syn", "nat6 tcp syn"] {
            front_copies_follow_the_map(&steer, &cache, &t, prefix);
        }
    })
    .join()
    .expect("front table thread");
}

fn front_copies_follow_the_map(
    steer: &Steer,
    cache: &FlowCache,
    t: &sluice::lb::Tables,
    prefix: &str,
) {
    let fx = golden::fixtures()
        .into_iter()
        .find(|f| f.description.starts_with(prefix))
        .unwrap_or_else(|| panic!("fixture {prefix}"));
    let (mut ct, mut st) = golden::state_for(&fx, t);
    engine_only(t, &mut ct, &mut st, &fx.input, fx.ifindex);
    establish(t, &mut ct, &mut st, &fx.input, fx.ifindex);
    let ack = with_tcp_flags(&fx.input, 0x10).expect("ack");
    let mut buf = vec![0u8; HEADROOM + ack.len() + 256];
    buf[HEADROOM..HEADROOM + ack.len()].copy_from_slice(&ack);
    let mut frame = Frame::new(&mut buf, HEADROOM, ack.len(), fx.ifindex).expect("frame");
    let mut rec: Option<Decision> = None;
    process_recorded(&mut frame, t, &mut ct, &mut st, golden::NOW, &mut rec);
    let d = rec
        .filter(flowcache::cacheable)
        .expect("an established, cacheable flow");
    let b = &t.backends[d.backend as usize];
    let slot = cache.stat_slot(&BackendId::new(
        &t.vips[d.vip as usize].name,
        b.ip(),
        b.port,
    ));
    let first = flowcache::entry_for(&d, slot).expect("entry");
    let mut same_jiffy = 0;
    let mut last_seen = None;
    for round in 0..200u8 {
        // Installed, then replaced in place (no eviction between), then evicted.
        for step in 0..2u8 {
            let mut e = first;
            e.dst_mac[4] = step;
            e.dst_mac[5] = round;
            cache.install(&d.key, &e).expect("install");
            // Twice: the first run may copy the entry, the second is then served by the copy.
            for run in 0..2 {
                let (action, out, _) = steer.test_run(&ack, 0).expect("test run");
                assert!(
                    action == XDP_TX || action == XDP_REDIRECT,
                    "{prefix}: round {round} step {step} run {run}: a hit, not action {action}"
                );
                assert_eq!(
                    out[..6],
                    e.dst_mac,
                    "{prefix}: round {round} step {step} run {run}: the MAC of the entry \
                     installed last"
                );
            }
        }
        let seen = cache.get(&d.key).expect("installed").last_seen;
        same_jiffy += usize::from(last_seen == Some(seen));
        last_seen = Some(seen);
        cache.evict(&d.key);
        let (action, out, _) = steer.test_run(&ack, 0).expect("test run");
        assert_eq!(
            action, XDP_PASS,
            "{prefix}: round {round}: evicted, so not forwarded by the kernel"
        );
        assert_eq!(hex(&out), hex(&ack), "{prefix}: round {round}: untouched");
    }
    eprintln!("{prefix}: {same_jiffy} of 200 rounds in the jiffy of the round before");
    assert!(
        same_jiffy >= 100,
        "{prefix}: too few rounds within one jiffy to test the copies ({same_jiffy})"
    );
}
