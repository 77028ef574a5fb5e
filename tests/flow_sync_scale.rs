//! Connection sync at scale (issue 44's first "must show"): three appliances behind BIRD
//! (ECMP over L4 ports, BFD on every session), 1,000 long-lived TCP connections spread over
//! a FullNAT VIP and a DR VIP on `wrr` (a choice no other appliance would make the same
//! way), and 200 UDP flows over the same two VIPs' UDP twins. Every connection keeps
//! exchanging (an HTTP/1.1 request on the same connection, about once a second; each reply
//! must name the backend the first one named), and every UDP flow keeps asking its echo
//! server. Then lb2 is SIGKILLed: every connection and flow must carry on with its backend
//! (lb2's from the survivors' standby tables, FullNAT replies through lb2's SNAT address,
//! now routed to the survivors). Then lb2 comes back: it catches up before it announces,
//! and nothing is reset. Prints `MEASURE` lines. Needs root, bird2, nftables and python3.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lab::testing::{Api, poll};
use lab::{Lab, LabMode, LabOptions, appliance_addr, snat_addr};

const POLL: Duration = Duration::from_millis(50);
/// TCP connections per VIP (FullNAT and DR).
const TCP_PER_VIP: usize = 500;
/// UDP flows per VIP.
const UDP_PER_VIP: usize = 100;
/// Connections (or flows) one client thread drives, one after the other.
const PER_THREAD: usize = 50;
/// Pause between two rounds of a thread's exchanges.
const ROUND: Duration = Duration::from_millis(1000);
/// Phases: before the loss of lb2, after it, after lb2's return.
const BEFORE: u8 = 0;
const LOST: u8 = 1;
const BACK: u8 = 2;

/// One connection's or flow's story: its backend, exchanges per phase, its first error.
#[derive(Debug, Default)]
struct Story {
    backend: String,
    exchanges: [u64; 3],
    error: Option<String>,
}

impl Story {
    /// Whether it carried on to the end: no error, and exchanges after lb2's return.
    fn whole(&self) -> bool {
        self.error.is_none() && self.exchanges[BACK as usize] > 0
    }
}

/// What the client threads share with the test: the phase, and the stop.
#[derive(Clone)]
struct Control {
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
}

/// One request on a kept-alive connection; returns the body (the backend's name).
fn ask(r: &mut BufReader<TcpStream>) -> std::io::Result<String> {
    r.get_mut()
        .write_all(b"GET /whoami HTTP/1.1\r\nHost: lab\r\n\r\n")?;
    let mut length = None;
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("connection closed mid-reply"));
        }
        if first && !line.starts_with("HTTP/1.1 200") {
            return Err(std::io::Error::other(format!("status {line:?}")));
        }
        first = false;
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length.ok_or_else(|| std::io::Error::other("no length"))?];
    r.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `n` connections to `vip`, opened one after the other, then kept exchanging in rounds
/// until the stop; `ready` hears once every one has its first reply.
fn tcp_thread(
    vip: SocketAddr,
    n: usize,
    ctl: Control,
    ready: std::sync::mpsc::Sender<()>,
) -> Vec<Story> {
    let mut conns: Vec<(Option<BufReader<TcpStream>>, Story)> = (0..n)
        .map(|_| {
            let mut story = Story::default();
            let conn = TcpStream::connect_timeout(&vip, Duration::from_secs(5))
                .and_then(|s| {
                    s.set_read_timeout(Some(Duration::from_secs(20)))?;
                    let mut r = BufReader::new(s);
                    story.backend = ask(&mut r)?;
                    story.exchanges[BEFORE as usize] += 1;
                    Ok(r)
                })
                .map_err(|e| story.error = Some(format!("opening: {e}")))
                .ok();
            std::thread::sleep(Duration::from_millis(2));
            (conn, story)
        })
        .collect();
    let _ = ready.send(());
    while !ctl.stop.load(Ordering::Relaxed) {
        for (conn, story) in &mut conns {
            let Some(r) = conn else { continue };
            let phase = ctl.phase.load(Ordering::Relaxed);
            match ask(r) {
                Ok(name) if name == story.backend => story.exchanges[phase as usize] += 1,
                Ok(name) => {
                    story.error = Some(format!(
                        "phase {phase}: {name} answered, not {}",
                        story.backend
                    ));
                    *conn = None;
                }
                Err(e) => {
                    story.error = Some(format!("phase {phase}: {e} ({:?})", e.kind()));
                    *conn = None;
                }
            }
        }
        std::thread::sleep(ROUND);
    }
    conns.into_iter().map(|(_, s)| s).collect()
}

/// `n` UDP flows to `vip` (a socket each), asking in rounds until the stop; a reply must
/// come from the backend of the flow's first. A datagram lost while the routers move the
/// flow is not an error (the next round asks again); another backend is.
fn udp_thread(
    vip: SocketAddr,
    n: usize,
    ctl: Control,
    ready: std::sync::mpsc::Sender<()>,
) -> Vec<Story> {
    let mut flows: Vec<(UdpSocket, Story)> = (0..n)
        .map(|_| {
            let s = UdpSocket::bind("0.0.0.0:0").expect("udp bind");
            s.connect(vip).expect("udp connect");
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("read timeout");
            (s, Story::default())
        })
        .collect();
    let mut seq = 0u64;
    let mut announced = false;
    while !ctl.stop.load(Ordering::Relaxed) {
        for (i, (s, story)) in flows.iter_mut().enumerate() {
            if story.error.is_some() {
                continue;
            }
            seq += 1;
            let phase = ctl.phase.load(Ordering::Relaxed);
            let ask = format!("u{i}-{seq}");
            if s.send(ask.as_bytes()).is_err() {
                continue;
            }
            let mut buf = [0u8; 256];
            // Replies to earlier rounds may still arrive: read until this one's or none.
            while let Ok(got) = s.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..got]).into_owned();
                let Some((name, echo)) = text.split_once(':') else {
                    story.error = Some(format!("phase {phase}: reply {text:?}"));
                    break;
                };
                if story.backend.is_empty() {
                    story.backend = name.to_string();
                }
                if name != story.backend {
                    story.error = Some(format!(
                        "phase {phase}: {name} answered, not {}",
                        story.backend
                    ));
                    break;
                }
                if echo == ask {
                    story.exchanges[phase as usize] += 1;
                    break;
                }
            }
        }
        if !announced && flows.iter().all(|(_, s)| !s.backend.is_empty()) {
            announced = true;
            let _ = ready.send(());
        }
        std::thread::sleep(ROUND);
    }
    flows.into_iter().map(|(_, s)| s).collect()
}

fn status(lab: &Lab, k: usize) -> api::Status {
    Api::unix(&lab.api_socket_at(k))
        .call(|c| c.status())
        .expect("status")
}

/// Every VIP and lb2's SNAT address routed as with all three up.
fn all_three(lab: &Lab) -> bool {
    let all: Vec<_> = (0..3).map(|k| appliance_addr(k, false)).collect();
    [LabMode::FullNat, LabMode::Dr]
        .iter()
        .all(|m| lab.next_hops(m.vip(false)).is_ok_and(|h| h == all))
        && lab
            .next_hops(snat_addr(1, false))
            .is_ok_and(|h| h == vec![appliance_addr(1, false)])
}

/// (TCP, UDP) stories that did not carry on to the end, as lines.
fn broken(stories: &[Story]) -> Vec<String> {
    stories
        .iter()
        .filter(|s| !s.whole())
        .map(|s| format!("{s:?}"))
        .collect()
}

#[test]
fn a_thousand_connections_and_200_udp_flows_survive_the_loss_and_return_of_an_appliance() {
    lab::testing::require_sync_lab();
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::FullNat, LabMode::Dr],
        appliances: Some(3),
        scheduler: "wrr".into(),
        prefix: "fz",
        sync: true,
        bfd: true,
        // Sync is tested, not health (see flow_sync.rs).
        inhibit_on_failure: true,
        ..LabOptions::default()
    });
    lab.start_routed(lab::sluice!().path());
    let ctl = Control {
        phase: Arc::new(AtomicU8::new(BEFORE)),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let before = lab.client_packets_to(1).expect("nft").0;
    let mut tcp: Vec<JoinHandle<Vec<Story>>> = Vec::new();
    let mut udp: Vec<JoinHandle<Vec<Story>>> = Vec::new();
    for mode in [LabMode::FullNat, LabMode::Dr] {
        let vip = SocketAddr::new(mode.vip(false), 80);
        for _ in 0..TCP_PER_VIP / PER_THREAD {
            let (c, t) = (ctl.clone(), tx.clone());
            tcp.push(
                lab.client
                    .in_thread(move || tcp_thread(vip, PER_THREAD, c, t))
                    .expect("thread"),
            );
        }
        for _ in 0..UDP_PER_VIP / PER_THREAD {
            let (c, t) = (ctl.clone(), tx.clone());
            udp.push(
                lab.client
                    .in_thread(move || udp_thread(vip, PER_THREAD, c, t))
                    .expect("thread"),
            );
        }
    }
    let threads = tcp.len() + udp.len();
    let t0 = Instant::now();
    for _ in 0..threads {
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "the clients did not all start within 60 s\n{}",
                    lab.bgp_view()
                )
            });
    }
    println!(
        "MEASURE flow_sync_scale: 1,200 connections and flows open in {:?}",
        t0.elapsed()
    );
    // Established flows are synced within milliseconds; give the slowest a margin.
    std::thread::sleep(Duration::from_secs(2));
    let lb2 = status(&lab, 1).conntrack;
    let via_lb2 = lab.client_packets_to(1).expect("nft").0 - before;
    assert!(
        lb2.established_tcp > 0,
        "lb2 carried no TCP connection: {lb2:?}"
    );

    let killed = Instant::now();
    assert!(lab.kill_appliance_at(1), "SIGKILL lb2");
    let gone = poll(Duration::from_secs(15), POLL, || {
        lab.next_hops(snat_addr(1, false))
            .is_ok_and(|h| h == vec![appliance_addr(0, false), appliance_addr(2, false)])
            && [LabMode::FullNat, LabMode::Dr].iter().all(|m| {
                lab.next_hops(m.vip(false))
                    .is_ok_and(|h| !h.contains(&appliance_addr(1, false)) && h.len() == 2)
            })
    });
    assert!(gone.is_some(), "the router kept lb2\n{}", lab.bgp_view());
    ctl.phase.store(LOST, Ordering::Relaxed);
    println!(
        "MEASURE flow_sync_scale: lb2 held {} TCP and {} UDP flows ({via_lb2} client packets); SIGKILL -> routes moved in {:?}",
        lb2.established_tcp,
        lb2.established_udp,
        killed.elapsed()
    );
    std::thread::sleep(Duration::from_secs(5));

    let t1 = Instant::now();
    lab.spawn_appliance_at(1, lab::sluice!().path())
        .expect("restart lb2");
    let back = poll(Duration::from_secs(30), POLL, || all_three(&lab));
    assert!(
        back.is_some(),
        "lb2's routes did not return\n{}",
        lab.bgp_view()
    );
    ctl.phase.store(BACK, Ordering::Relaxed);
    println!(
        "MEASURE flow_sync_scale: lb2 restarted -> caught up and routed again in {:?}",
        t1.elapsed()
    );
    let log = std::fs::read_to_string(lab.log_path_at(1)).unwrap_or_default();
    let caught = log
        .find("sync: caught up")
        .expect("lb2 logged its catch-up");
    assert!(
        caught < log.find("bgp: announce").unwrap_or(usize::MAX),
        "lb2 announced before it caught up:\n{log}"
    );
    let caught_up = status(&lab, 1).sync.expect("sync");
    assert!(
        caught_up.standby_entries > 0,
        "lb2 caught up with nothing: {caught_up:?}"
    );
    std::thread::sleep(Duration::from_secs(5));
    ctl.stop.store(true, Ordering::Relaxed);
    let tcp: Vec<Story> = tcp
        .into_iter()
        .flat_map(|h| h.join().expect("tcp thread"))
        .collect();
    let udp: Vec<Story> = udp
        .into_iter()
        .flat_map(|h| h.join().expect("udp thread"))
        .collect();

    let taken: u64 = [0, 2]
        .iter()
        .map(|k| status(&lab, *k).sync.expect("sync").standby_taken)
        .sum();
    let (bad_tcp, bad_udp) = (broken(&tcp), broken(&udp));
    let resets = tcp
        .iter()
        .filter(|s| {
            s.error
                .as_deref()
                .is_some_and(|e| e.contains("ConnectionReset"))
        })
        .count();
    let exchanges: u64 = tcp.iter().chain(&udp).flat_map(|s| s.exchanges).sum();
    println!(
        "MEASURE flow_sync_scale: {} of {} TCP connections and {} of {} UDP flows carried on with their backend through the loss and the return of lb2 ({resets} resets, {exchanges} exchanges checked); the survivors took {taken} flows over",
        tcp.len() - bad_tcp.len(),
        tcp.len(),
        udp.len() - bad_udp.len(),
        udp.len()
    );
    assert_eq!(tcp.len(), 2 * TCP_PER_VIP);
    assert_eq!(udp.len(), 2 * UDP_PER_VIP);
    assert!(
        bad_tcp.is_empty() && bad_udp.is_empty(),
        "TCP: {bad_tcp:#?}\nUDP: {bad_udp:#?}\nsync: {:?} {:?}\n{}",
        status(&lab, 0).sync,
        status(&lab, 2).sync,
        lab.bgp_view()
    );
    assert!(taken > 0, "no survivor took a flow from its standby table");
    for k in 0..3 {
        let s = status(&lab, k).sync.expect("sync");
        assert_eq!(
            (s.auth_failures, s.garbage, s.replays, s.unknown_peer),
            (0, 0, 0, 0),
            "lb{}: {s:?}",
            k + 1
        );
        assert!(
            s.records_sent > 0 && s.records_received > 0,
            "lb{}: {s:?}",
            k + 1
        );
    }
    for k in 0..3 {
        assert!(lab.stop_appliance_at(k), "lb{} did not exit cleanly", k + 1);
    }
}
