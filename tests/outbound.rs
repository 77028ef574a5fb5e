//! Outbound connections through a DR VIP (issue 23).
//!
//! `the_xdp_program_forwards_outbound_answers_as_the_engine_does` replays the golden
//! outbound rows through the XDP program (BPF_PROG_TEST_RUN): a DR answer leaves the program
//! toward its port's owner byte for byte as out of the engine, a tunnel answer goes to the
//! engine, a port past the range or another protocol stays the kernel's.
//!
//! `backends_open_outbound_connections_through_two_appliances` is the namespace test: two
//! appliances behind BIRD (ECMP), a DR VIP with an outbound range, the backends applying the
//! nftables lines the API gives them, and a server namespace "outside". Every connection a
//! backend opens reaches the server from the VIP address and a port of that backend's share,
//! and completes; after a backend is added, connections in flight on moved ports finish
//! through the drain, and new ones use the new shares. Needs root, bird2, nftables, python3.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Duration;

#[path = "datapath_common/mod.rs"]
mod datapath_common;

use datapath_common::golden_cache;
use lab::netns::Netns;
use lab::testing::{golden_netns, sample, wait_for};
use lab::{Lab, LabMode, LabOptions};
use libbpf_rs::libbpf_sys::{XDP_PASS, XDP_REDIRECT};
use sluice::control::outbound;
use sluice::datapath::steer::Steer;
use sluice::lb::Verdict;
use testkit::golden;

#[test]
fn the_xdp_program_forwards_outbound_answers_as_the_engine_does() {
    lab::netns::require_root();
    // The golden next hops leave by index 2 (golden::BACKENDS); lo is index 1 (UPLINK).
    let ns = golden_netns("ob-x", "obx");
    let name = ns.name.clone();
    let report = std::thread::spawn(move || {
        lab::netns::enter(&name);
        let cache = golden_cache();
        let mut steer = Steer::load_with_cache(Some(&cache)).expect("load the steering program");
        let config = golden::config();
        let t = golden::tables();
        let steering = sluice::control::prepare::steering(&config);
        steer.set_vips(&steering.vips).expect("golden vips");
        let mut returns = steering.returns.clone();
        returns.extend(outbound::keys(&t, golden::NOW));
        steer.set_return_keys(&returns).expect("outbound keys");
        steer.set_stateless(&t, Some(&cache)).expect("next hops");
        let mut seen = Vec::new();
        for fx in golden::outbound_fixtures() {
            let engine = golden::run_alone(&fx, &t)
                .unwrap_or_else(|m| panic!("{}: engine: {}", fx.description, m.what));
            let (action, out, steered) = steer.test_run(&fx.input, 0).expect("test run");
            let dr = fx.description.starts_with("dro");
            match fx.verdict {
                Verdict::Tx { .. } if dr => {
                    assert_eq!(
                        (action, steered),
                        (XDP_REDIRECT, false),
                        "{}: forwarded by the program",
                        fx.description
                    );
                    assert_eq!(
                        out[..engine.len()],
                        engine[..],
                        "{}: the program's bytes are the engine's",
                        fx.description
                    );
                    seen.push("xdp");
                }
                Verdict::Tx { .. } => {
                    assert!(
                        action == XDP_PASS && steered,
                        "{}: a tunnel answer goes to the engine (action {action}, steered \
                         {steered})",
                        fx.description
                    );
                    seen.push("engine");
                }
                _ => {
                    assert!(
                        action == XDP_PASS && !steered,
                        "{}: the kernel's (action {action}, steered {steered})",
                        fx.description
                    );
                    seen.push("kernel");
                }
            }
        }
        (seen, steer.counters().expect("counters").outbound)
    })
    .join()
    .expect("outbound thread");
    let (seen, forwarded) = report;
    println!("MEASURE outbound xdp parity: {seen:?}, {forwarded} forwarded by the program");
    let count = |w: &str| seen.iter().filter(|s| **s == w).count();
    assert_eq!((count("xdp"), count("engine"), count("kernel")), (6, 1, 2));
    assert_eq!(forwarded, 6, "the program's outbound counter");
}

/// The server outside: 203.0.113.9 and 2001:db8:e::9 behind the router.
const OUTSIDE4: &str = "203.0.113.9";
const OUTSIDE6: &str = "2001:db8:e::9";
const SERVER_PORT: u16 = 9000;
/// The DR VIPs' outbound ranges and drain (short, so the test sees it end).
const RANGE4: &str = "40000-40999";
const RANGE6: &str = "50000-50999";
const DRAIN: Duration = Duration::from_secs(20);
/// How often the waits for the appliances' documents ask again.
const POLL: Duration = Duration::from_millis(200);

/// `cfg` (a lab config) with outbound ranges on the DR TCP VIPs, and the IPv4 one's pool cut
/// to its first `backends` backends.
fn with_outbound(cfg: &str, backends: usize) -> String {
    let mut out = String::new();
    for block in cfg.split_inclusive("\n\n") {
        let range = if block.contains("name = \"dr4-tcp\"") {
            RANGE4
        } else if block.contains("name = \"dr6-tcp\"") {
            RANGE6
        } else {
            out.push_str(block);
            continue;
        };
        let mut b = block.replace(
            "mode = \"dr\"\n",
            &format!(
                "mode = \"dr\"\noutbound = \"{range}\"\noutbound_drain = \"{}s\"\n",
                DRAIN.as_secs()
            ),
        );
        if range == RANGE4 {
            for i in backends..3 {
                b = b.replace(
                    &format!(
                        "[[vip.backend]]\naddress = \"10.0.0.{}\"\nport = 80\n",
                        21 + i
                    ),
                    "",
                );
            }
        }
        assert!(
            b.contains("outbound ="),
            "the lab's DR block changed:\n{block}"
        );
        out.push_str(&b);
    }
    out
}

/// The outside namespace on its own link to the router, with a server that answers every
/// line with the address and port it sees the connection come from.
struct Outside {
    _ns: Netns,
    seen: Arc<Mutex<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
}

impl Outside {
    fn start(lab: &Lab) -> Outside {
        let ns = Netns::new("ob-out");
        ns.sh("sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0");
        lab.router.sh(&format!(
            "ip link add outside type veth peer name obout0 && ip link set obout0 netns {} && \
             ip addr add 203.0.113.1/24 dev outside && ip -6 addr add 2001:db8:e::1/64 dev outside \
             && ip link set outside up",
            ns.name
        ));
        ns.sh(&format!(
            "ip link set obout0 name eth0 && ip link set eth0 up && ip link set lo up && \
             ip addr add {OUTSIDE4}/24 dev eth0 && ip -6 addr add {OUTSIDE6}/64 dev eth0 && \
             ip route add default via 203.0.113.1 && ip -6 route add default via 2001:db8:e::1"
        ));
        let (seen, stop) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicBool::new(false)),
        );
        let (s, st) = (seen.clone(), stop.clone());
        let (ready_tx, ready) = std::sync::mpsc::channel();
        ns.in_thread(move || serve(s, st, ready_tx))
            .expect("server thread");
        ready
            .recv_timeout(Duration::from_secs(5))
            .expect("the server listens");
        Outside {
            _ns: ns,
            seen,
            stop,
        }
    }

    fn seen(&self) -> Vec<SocketAddr> {
        self.seen.lock().expect("seen").clone()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Accepts on [::]:9000 (both families) until `stop`; each connection on its own thread.
fn serve(seen: Arc<Mutex<Vec<SocketAddr>>>, stop: Arc<AtomicBool>, ready: mpsc::Sender<()>) {
    let l = TcpListener::bind(("::", SERVER_PORT)).expect("listen");
    l.set_nonblocking(true).expect("nonblocking");
    let _ = ready.send(());
    while !stop.load(Ordering::Relaxed) {
        let (c, peer) = match l.accept() {
            Ok(x) => x,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        seen.lock().expect("seen").push(peer);
        std::thread::spawn(move || {
            let _ = c.set_nonblocking(false);
            let mut r = BufReader::new(c.try_clone().expect("clone"));
            let mut w = c;
            let mut line = String::new();
            while r.read_line(&mut line).is_ok_and(|n| n > 0) {
                if writeln!(w, "{peer}").is_err() {
                    return;
                }
                line.clear();
            }
        });
    }
}

/// A connection from the backend's namespace to the server.
fn connect(server: SocketAddr) -> std::io::Result<TcpStream> {
    TcpStream::connect_timeout(&server, Duration::from_secs(3))
}

/// One exchange on `s`: a line out, the server's view of our address back.
fn ask(s: &mut TcpStream) -> Result<SocketAddr, String> {
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"hello\n").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&*s)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    line.trim()
        .parse()
        .map_err(|e| format!("answer {line:?}: {e}"))
}

/// `n` connections from backend `i` to `server`, each opened, asked once and closed; the
/// server's view of each, or why it failed.
fn open_from(lab: &Lab, i: usize, server: SocketAddr, n: usize) -> Vec<Result<SocketAddr, String>> {
    lab.backends[i].call(move || {
        (0..n)
            .map(|_| {
                let mut s = connect(server).map_err(|e| e.to_string())?;
                ask(&mut s)
            })
            .collect()
    })
}

/// `n` connections from backend `i`, asked once and kept open, with the port each has on
/// the VIP (the backend's SNAT picks it from its share).
fn hold_from(lab: &Lab, i: usize, server: SocketAddr, n: usize) -> Vec<(TcpStream, u16)> {
    lab.backends[i].call(move || {
        (0..n)
            .map(|k| {
                let mut s = connect(server).unwrap_or_else(|e| panic!("connect {k}: {e}"));
                let seen = ask(&mut s).unwrap_or_else(|e| panic!("ask {k}: {e}"));
                (s, seen.port())
            })
            .collect()
    })
}

/// VIP `vip`'s outbound document on every appliance.
fn docs(lab: &Lab, vip: &str) -> Vec<api::Outbound> {
    (0..lab.appliance_count())
        .map(|k| {
            lab.api_at(k)
                .call(|c| c.outbound(vip))
                .unwrap_or_else(|e| panic!("lb{}: outbound {vip}: {e}", k + 1))
        })
        .collect()
}

/// VIP `vip`'s outbound document; every appliance must agree on every share.
fn shares(lab: &Lab, vip: &str) -> api::Outbound {
    let docs = docs(lab, vip);
    let ports = |d: &api::Outbound| -> Vec<(String, Option<String>)> {
        d.backends
            .iter()
            .map(|b| (b.address.clone(), b.ports.clone()))
            .collect()
    };
    for d in &docs[1..] {
        assert_eq!(
            ports(d),
            ports(&docs[0]),
            "the appliances disagree on {vip}'s shares"
        );
    }
    docs.into_iter().next().expect("one appliance")
}

/// Runs backend `i`'s nft lines from `doc` (none when it has no ports: its rule is flushed).
fn apply(lab: &Lab, i: usize, doc: &api::Outbound) {
    let addr = lab.backends[i].name.clone();
    let b = &doc.backends[i];
    if b.snat.is_empty() {
        let family = if doc.address.contains(':') {
            "ip6"
        } else {
            "ip"
        };
        lab.backends[i].sh(&format!(
            "nft flush chain {family} sluice_outbound out_{} 2>/dev/null; true",
            doc.vip
        ));
        return;
    }
    for line in &b.snat {
        let out = lab.backends[i].output(&["sh", "-c", line]);
        assert!(
            out.status.success(),
            "{addr}: {line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn range_of(s: &Option<String>) -> std::ops::RangeInclusive<u16> {
    let s = s.as_deref().expect("a share");
    let (a, b) = s.split_once('-').expect("FIRST-LAST");
    a.parse().expect("first")..=b.parse().expect("last")
}

/// Every result a success, from `vip` and a port of `share`.
#[track_caller]
fn all_from(what: &str, got: &[Result<SocketAddr, String>], vip: IpAddr, share: &Option<String>) {
    let r = range_of(share);
    let bad: Vec<String> = got
        .iter()
        .filter_map(|g| match g {
            Ok(a) if a.ip() == vip && r.contains(&a.port()) => None,
            Ok(a) => Some(format!("seen from {a}")),
            Err(e) => Some(e.clone()),
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} of {} connections wrong ({:?} expected from {vip} ports {r:?}): {bad:?}",
        bad.len(),
        got.len(),
        share
    );
}

/// Whether appliance `k` committed the version a drain's end asks for (its event).
fn drain_ended(lab: &Lab, k: usize) -> bool {
    let events = lab.api_at(k).call(|c| c.events(0)).expect("events");
    events
        .iter()
        .any(|e| e.kind == "commit" && e.message.ends_with("outbound: a drain ended"))
}

/// `sluice_outbound_answers_total` on appliance `k`, engine and XDP together.
fn answers_at(lab: &Lab, k: usize) -> (u64, u64) {
    let text = lab.api_at(k).call(|c| c.metrics()).expect("metrics");
    let get = |by: &str| {
        sample(
            &text,
            &format!("sluice_outbound_answers_total{{by=\"{by}\"}}"),
        )
        .map(|v| v as u64)
        .unwrap_or_else(|| panic!("no outbound answers ({by}) in lb{}'s metrics", k + 1))
    };
    (get("engine"), get("xdp"))
}

fn share_is(doc: &api::Outbound, i: usize, want: Option<&str>) {
    assert_eq!(
        doc.backends[i].ports.as_deref(),
        want,
        "backend {} of {}: {doc:?}",
        doc.backends[i].address,
        doc.vip
    );
}

/// Two appliances behind BIRD with the outbound ranges (the IPv4 pool cut to two backends),
/// every VIP routed through both, every backend up, and the outside server.
fn start(flow_cache: Option<bool>) -> (MutexGuard<'static, ()>, Lab, Outside) {
    lab::netns::require_root();
    // Every connection must complete: one two-appliance lab at a time on two cores.
    let serial = lab::testing::serial();
    lab::netns::require_program("python3", "python3");
    lab::netns::require_program("bird", "bird2");
    lab::netns::require_program("nft", "nftables");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr],
        appliances: Some(2),
        prefix: "ob",
        flow_cache,
        ..LabOptions::default()
    });
    for k in 0..2 {
        let cfg = with_outbound(&lab.config_for(k, &lab.api_socket_at(k)), 2);
        lab.write_config_at(k, &cfg).expect("write config");
    }
    lab.start_routed(lab::sluice!().path());
    let outside = Outside::start(&lab);
    (serial, lab, outside)
}

/// The first part of both tests: the shares on both appliances and in `sluice ctl`, and 230
/// connections from the backends (200 IPv4 from two, 30 IPv6 from three), each seen by the
/// server from the VIP and a port of its backend's share. Returns each appliance's
/// (engine, xdp) answers for them.
fn connections_from_the_vip(lab: &Lab, outside: &Outside) -> Vec<(u64, u64)> {
    let (vip4, vip6) = (LabMode::Dr.vip(false), LabMode::Dr.vip(true));
    let server4 = SocketAddr::new(OUTSIDE4.parse().expect("literal"), SERVER_PORT);
    let server6 = SocketAddr::new(OUTSIDE6.parse().expect("literal"), SERVER_PORT);
    // Two backends share the IPv4 range, three the IPv6 one; both appliances agree.
    let d4 = shares(lab, "dr4-tcp");
    assert_eq!(
        (d4.range.as_str(), d4.drain_ends_in_seconds),
        (RANGE4, None)
    );
    share_is(&d4, 0, Some("40000-40499"));
    share_is(&d4, 1, Some("40500-40999"));
    let d6 = shares(lab, "dr6-tcp");
    share_is(&d6, 0, Some("50000-50333"));
    share_is(&d6, 2, Some("50667-50999"));
    // What an operator runs: `sluice ctl outbound VIP` prints each backend's lines.
    let out = lab::sluice!().ctl_ok(&lab.api_socket_at(1), &["outbound", "dr4-tcp"]);
    for line in d4.backends.iter().flat_map(|b| &b.snat) {
        assert!(out.contains(line.as_str()), "ctl lacks {line:?}:\n{out}");
    }
    assert!(
        out.contains("snat to 192.0.2.12:40500-40999"),
        "be2's share in the ctl output:\n{out}"
    );
    for i in 0..2 {
        apply(lab, i, &d4);
    }
    for i in 0..3 {
        apply(lab, i, &d6);
    }
    let before: Vec<(u64, u64)> = (0..2).map(|k| answers_at(lab, k)).collect();
    for i in 0..2 {
        let got = open_from(lab, i, server4, 100);
        all_from(
            &format!("be{} ipv4", i + 1),
            &got,
            vip4,
            &d4.backends[i].ports,
        );
    }
    for i in 0..3 {
        let got = open_from(lab, i, server6, 10);
        all_from(
            &format!("be{} ipv6", i + 1),
            &got,
            vip6,
            &d6.backends[i].ports,
        );
    }
    let seen = outside.seen();
    assert_eq!(seen.len(), 230, "connections the server saw");
    assert!(
        seen.iter().all(|a| a.ip() == vip4 || a.ip() == vip6),
        "a connection came from a backend's own address: {seen:?}"
    );
    let after: Vec<(u64, u64)> = (0..2).map(|k| answers_at(lab, k)).collect();
    println!(
        "MEASURE outbound: 230 connections (200 IPv4 from 2 backends, 30 IPv6 from 3), every \
         one from the VIP; answers forwarded (engine, xdp) before {before:?} after {after:?}"
    );
    let delta: Vec<(u64, u64)> = (0..2)
        .map(|k| (after[k].0 - before[k].0, after[k].1 - before[k].1))
        .collect();
    for (k, (e, x)) in delta.iter().enumerate() {
        assert!(
            e + x > 0,
            "lb{} forwarded no answer: ECMP sent every one to the other ({delta:?})",
            k + 1
        );
    }
    delta
}

/// With the flow cache on (the default), the XDP program forwards the DR answers itself.
#[test]
fn backends_open_outbound_connections_through_two_appliances() {
    let (_serial, lab, outside) = start(None);
    let delta = connections_from_the_vip(&lab, &outside);
    assert!(
        delta.iter().all(|(_, x)| *x > 0),
        "the XDP program forwarded none on some appliance: {delta:?}"
    );
    let vip4 = LabMode::Dr.vip(false);
    let server4 = SocketAddr::new(OUTSIDE4.parse().expect("literal"), SERVER_PORT);

    // Connections in flight when be3 joins, 30 from each: be1's on 40334-40499 move to be2,
    // be2's on 40667-40999 to be3 (about a third and two thirds of them).
    let mut held = hold_from(&lab, 0, server4, 30);
    held.extend(hold_from(&lab, 1, server4, 30));
    let moved = held
        .iter()
        .filter(|(_, p)| (40334..=40499).contains(p) || (40667..=40999).contains(p))
        .count();
    assert!(
        moved > 0,
        "no connection on a port that moves: {:?}",
        held.iter().map(|h| h.1).collect::<Vec<_>>()
    );
    for k in 0..2 {
        let cfg = with_outbound(&lab.config_for(k, &lab.api_socket_at(k)), 3);
        lab.write_config_at(k, &cfg).expect("write config");
        assert!(lab.reload_at(k), "reload lb{}", k + 1);
    }
    wait_for(
        "both appliances run three backends",
        Duration::from_secs(10),
        POLL,
        || {
            let all = docs(&lab, "dr4-tcp").iter().all(|d| d.backends.len() == 3);
            all.then_some(())
        },
    );
    let draining = shares(&lab, "dr4-tcp");
    assert!(draining.drain_ends_in_seconds.is_some(), "{draining:?}");
    // During the drain each backend keeps only what it owns before and after; be3 waits.
    share_is(&draining, 0, Some("40000-40333"));
    share_is(&draining, 1, Some("40500-40666"));
    share_is(&draining, 2, None);
    for (s, port) in held.iter_mut() {
        let a = ask(s).unwrap_or_else(|e| panic!("in-flight connection on {port}, drain: {e}"));
        assert_eq!((a.ip(), a.port()), (vip4, *port));
    }
    drop(held);
    for i in 0..3 {
        apply(&lab, i, &draining);
    }
    for i in 0..2 {
        let got = open_from(&lab, i, server4, 20);
        all_from(
            &format!("be{} during the drain", i + 1),
            &got,
            vip4,
            &draining.backends[i].ports,
        );
    }

    // When the drain ends the new shares hold, on both appliances, once each has committed
    // the version that gives the XDP program the moved ports' new owners.
    let settled = wait_for(
        "the drain ends",
        DRAIN + Duration::from_secs(15),
        POLL,
        || {
            // Each appliance ends the drain at its own commit: until both have, they may
            // show different shares, so agreement is asserted only once both ended.
            let ended = docs(&lab, "dr4-tcp")
                .iter()
                .all(|d| d.drain_ends_in_seconds.is_none());
            let committed = (0..2).all(|k| drain_ended(&lab, k));
            (ended && committed).then(|| shares(&lab, "dr4-tcp"))
        },
    );
    share_is(&settled, 0, Some("40000-40333"));
    share_is(&settled, 1, Some("40334-40666"));
    share_is(&settled, 2, Some("40667-40999"));
    for i in 0..3 {
        apply(&lab, i, &settled);
    }
    for i in 0..3 {
        let got = open_from(&lab, i, server4, 20);
        all_from(
            &format!("be{} after the drain", i + 1),
            &got,
            vip4,
            &settled.backends[i].ports,
        );
    }
    println!(
        "MEASURE outbound: 60 connections in flight ({moved} on ports that moved) finished \
         through the drain; 40 new ones during it and 60 after it used the shares of their time"
    );
}

/// With the flow cache off, the engine forwards every answer (the same shares, no state).
#[test]
fn the_engine_forwards_outbound_answers_without_the_flow_cache() {
    let (_serial, lab, outside) = start(Some(false));
    let delta = connections_from_the_vip(&lab, &outside);
    assert!(
        delta.iter().all(|(e, x)| *e > 0 && *x == 0),
        "with the cache off the engine answers, not XDP: {delta:?}"
    );
}
