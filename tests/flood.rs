//! Spoofed-source floods against a DR VIP and a FullNAT VIP (issue 18): for 10 s one hping3
//! process floods the VIP (SYN, ACK or UDP) from four unused addresses of the client's subnet
//! in turn, hping3 incrementing the source port, while four slow 1 MB downloads run through
//! the same VIP and the client opens a new connection every 50 ms. The FullNAT VIP gets
//! hping3's full rate; the DR VIP a paced one ([`DR_PACE`]), because a DR appliance forwards
//! the flood to the backends, and here they share the two cores with everything else.
//! What must hold: 4/4 downloads intact, at least 99% of the client's new connections
//! answered, the appliance up. Every figure (flood rate, what reached the appliance, the
//! connection table's fill, the appliance's counters) is printed as `MEASURE flood ...`.
//!
//! The spoofed addresses exist nowhere: the router blackholes them, so every reply to the
//! flood dies inside the lab. Needs root and hping3 (scripts/setup.sh installs it).
//!
//! The other tests drive the XDP program alone through BPF_PROG_TEST_RUN, frame by frame:
//! when the mode switches on, which source's frames it drops and what it counts, that a
//! tunnel VIP's established flows are never shed, and that a busy source whose flows
//! complete (many clients behind one NAT address) keeps opening them, and that the
//! stateless answer for DR VIPs gives the golden rows' bytes, the engine's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use std::net::Ipv4Addr;

#[path = "datapath_common/mod.rs"]
mod datapath_common;

use datapath_common::golden_cache;
use lab::netns::Netns;
use lab::testing::{golden_netns, steady_client};
use lab::{Lab, LabMode, LabOptions, blob, slow_download};
use sluice::config::{Encap, Flood, Mode, Protocol};
use sluice::datapath::VipKey;
use sluice::datapath::flowcache::{CacheAction, CacheEntry, FlowCache, Hairpin};
use sluice::datapath::steer::Steer;
use sluice::lb::FlowKey;
use sluice::lb::hash::addr_to_u128;
use testkit::golden;

/// hping3's interval for the DR VIP's flood: about 16,000-19,000 packets a second here, eight
/// to ten times the flood threshold below and well over what the debug engine takes. At
/// hping3's full rate (about 88,000 a second) the appliance still answers every packet in
/// XDP, but the three backends it forwards them to, answering each SYN with a cookie or each
/// ACK with a reset on these same two cores, fall behind: the host's per-CPU backlog queues
/// dropped 212,616 packets in one such run (softnet_stat), legitimate ones among them, and the
/// test failed on what the lab's backends lost, not on anything the appliance did.
const DR_PACE: &str = "u20";
/// How long each flood lasts, spread evenly over the spoofed addresses.
const FLOOD: Duration = Duration::from_secs(10);
/// Unused addresses of the client's subnet (198.51.100.0/24): the flood's sources.
const SPOOFED: [&str; 4] = [
    "198.51.100.200",
    "198.51.100.201",
    "198.51.100.202",
    "198.51.100.203",
];
const SPOOFED_NET: &str = "198.51.100.200/30";
/// The steady client's pace.
const CLIENT_EVERY: Duration = Duration::from_millis(50);
/// The tunnel client's pace: 500 datagrams a second, over the test's per-source rate.
const TUNNEL_EVERY: Duration = Duration::from_millis(2);
/// How long one of its connections may take (connect, request, whole answer): room for one
/// lost SYN (the first retransmission leaves after 1 s) on a loaded machine.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between the downloads' 8 KB reads: 128 reads, about 13 s, longer than the flood
/// (the flood's length was 20 s until the suite had to fit CI's 45 minutes: flood mode is on
/// within a second, so 10 s tests the same and each kind takes 25 s less).
const DOWNLOAD_PACE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
enum Kind {
    Syn,
    Ack,
    Udp,
}

impl Kind {
    fn flag(self) -> &'static str {
        match self {
            Kind::Syn => "-S",
            Kind::Ack => "-A",
            Kind::Udp => "--udp",
        }
    }
}

/// Extra config appended to the lab's (the flood keys, when a test sets them).
fn start(extra: &str) -> Lab {
    lab::netns::require_program("python3", "python3");
    lab::netns::require_program("hping3", "hping3");
    lab::netns::require_program("timeout", "coreutils");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr, LabMode::FullNat, LabMode::Vxlan],
        scheduler: "maglev".into(),
        prefix: "fl",
        ..LabOptions::default()
    });
    // Replies to the spoofed sources die on the router; strict reverse-path filtering would
    // drop the flood there instead of letting it reach the appliance.
    lab.router
        .sh(&format!("ip route add blackhole {SPOOFED_NET}"));
    lab.router
        .sh("sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.client.rp_filter=0");
    // The lab's health checks (300 ms timeout, two misses) are tuned to show failover fast;
    // on a machine shared with other work a probe answered late under the flood would mark
    // a backend down and move flows, which is not what this test looks at.
    let fast = "interval = \"500ms\"\ntimeout = \"300ms\"\nrise = 2\nfall = 2";
    let mut config = lab.config(&lab.api_socket_at(0));
    assert!(
        config.contains(fast),
        "the lab's health checks changed:\n{config}"
    );
    config = config.replace(
        fast,
        "interval = \"1s\"\ntimeout = \"900ms\"\nrise = 2\nfall = 4",
    );
    config.push_str(extra);
    lab.write_config(&config).expect("write config");
    let vips =
        [LabMode::Dr, LabMode::FullNat, LabMode::Vxlan].map(|m| SocketAddr::new(m.vip(false), 80));
    lab.start_serving(lab::sluice!().path(), &vips);
    lab
}

/// Packets received on `dev` in `ns` so far.
fn rx_packets(ns: &Netns, dev: &str) -> u64 {
    ns.sysfs(dev, "statistics/rx_packets")
        .parse()
        .unwrap_or_else(|e| panic!("rx_packets of {dev} in {}: {e}", ns.name))
}

/// The kernel counters that say where a lost packet died outside the appliance: each
/// backend's listen-queue overflows, SYN cookies, resets, socket-buffer and backlog drops, and
/// the host's per-CPU backlog drops (softnet_stat's second column, all namespaces together).
fn kernel_drops(lab: &Lab) -> String {
    const KEYS: [&str; 12] = [
        "TcpExtListenOverflows",
        "TcpExtListenDrops",
        "TcpExtSyncookiesSent",
        "TcpExtSyncookiesRecv",
        "TcpExtSyncookiesFailed",
        "TcpOutRsts",
        "TcpExtTCPBacklogDrop",
        "TcpExtTCPReqQFullDrop",
        "TcpExtTCPReqQFullDoCookies",
        "UdpRcvbufErrors",
        "UdpInErrors",
        "IpExtInNoRoutes",
    ];
    let mut out = Vec::new();
    for (i, be) in lab.backends.iter().enumerate() {
        let text = String::from_utf8_lossy(&be.run(&["nstat", "-asz"]).stdout).into_owned();
        let got: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (k, v) = (w.next()?, w.next()?);
                (KEYS.contains(&k) && v != "0").then(|| format!("{k}={v}"))
            })
            .collect();
        out.push(format!("be{}: {}", i + 1, got.join(" ")));
    }
    let softnet = std::fs::read_to_string("/proc/net/softnet_stat").unwrap_or_default();
    let dropped: u64 = softnet
        .lines()
        .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .sum();
    out.push(format!("softnet backlog drops {dropped}"));
    out.join("; ")
}

/// What one flood run saw.
#[derive(Debug, Default)]
struct Run {
    /// Packets the router received from the client's link during the flood (the flood and
    /// the client's own), per second.
    flood_rate: f64,
    /// Of those, per second, what reached the appliance's interface.
    appliance_rate: f64,
    attempts: usize,
    answered: usize,
    /// Answered, but after a second or more (a lost SYN, retransmitted).
    slow: usize,
    first_error: Option<String>,
    downloads_intact: usize,
    download_errors: Vec<String>,
    /// The tunnel client's datagrams sent and echoed.
    tunnel_sent: usize,
    tunnel_echoed: usize,
}

/// A busy client of the tunnel VIP while the other VIP is flooded: one UDP flow, a datagram
/// every [`TUNNEL_EVERY`] (more than `per_source_rate` a second), each echoed by a backend.
/// Tunnel VIPs are never in the flow cache; none of these may be shed. Runs in the client's
/// namespace; returns (sent, echoed).
fn tunnel_stream(vip: SocketAddr, stop: Arc<AtomicBool>) -> (usize, usize) {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
    s.connect(vip).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let rx = s.try_clone().expect("clone");
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let echoes = std::thread::spawn(move || {
        let (mut n, mut buf) = (0, [0u8; 256]);
        // Until the sender is done and a quiet read says the last echoes are in.
        loop {
            match rx.recv(&mut buf) {
                Ok(_) => n += 1,
                Err(_) if d.load(Ordering::Relaxed) => return n,
                Err(_) => {}
            }
        }
    });
    let (start, mut sent) = (Instant::now(), 0u32);
    while !stop.load(Ordering::Relaxed) {
        if s.send(format!("t{sent}").as_bytes()).is_ok() {
            sent += 1;
        }
        let next = start + TUNNEL_EVERY * sent;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::Relaxed);
    (sent as usize, echoes.join().expect("echo reader"))
}

/// Floods `mode`'s IPv4 VIP with `kind` for [`FLOOD`] while the downloads and the client run.
fn flood(lab: &Lab, mode: LabMode, kind: Kind) -> Run {
    let vip = SocketAddr::new(mode.vip(false), 80);
    let (tx, rx) = mpsc::channel();
    let mut downloads = Vec::new();
    for _ in 0..4 {
        let tx = tx.clone();
        downloads.push(
            lab.client
                .in_thread(move || slow_download(vip, DOWNLOAD_PACE, tx))
                .expect("download thread"),
        );
    }
    for _ in 0..4 {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("a download never started");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let client = lab
        .client
        .in_thread(move || steady_client(vip, CLIENT_EVERY, CLIENT_TIMEOUT, st))
        .expect("client thread");
    let st = stop.clone();
    let tunnel_vip = SocketAddr::new(LabMode::Vxlan.vip(false), 80);
    let tunnel = lab
        .client
        .in_thread(move || tunnel_stream(tunnel_vip, st))
        .expect("tunnel client thread");
    let (router0, lb0) = (
        rx_packets(&lab.router, "client"),
        rx_packets(&lab.lb, "eth0"),
    );
    let started = Instant::now();
    let each = FLOOD / SPOOFED.len() as u32;
    for src in SPOOFED {
        // SIGINT makes hping3 stop and print its statistics; `timeout` ends it on time.
        let secs = format!("{}", each.as_secs_f64());
        let pace: &[&str] = if mode == LabMode::Dr {
            &["-i", DR_PACE]
        } else {
            &["--flood"]
        };
        let mut args = vec!["timeout", "-s", "INT", &secs, "hping3"];
        args.extend_from_slice(pace);
        args.extend_from_slice(&["-q", kind.flag(), "-a", src, "-p", "80"]);
        let dst = vip.ip().to_string();
        args.push(&dst);
        let out = lab.client.output(&args);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("packets transmitted"),
            "hping3 did not flood from {src}: {text}"
        );
    }
    let secs = started.elapsed().as_secs_f64();
    let (router1, lb1) = (
        rx_packets(&lab.router, "client"),
        rx_packets(&lab.lb, "eth0"),
    );
    stop.store(true, Ordering::Relaxed);
    let steady = client.join().expect("client");
    let (tunnel_sent, tunnel_echoed) = tunnel.join().expect("tunnel client");
    let expected = blob();
    let mut run = Run {
        flood_rate: (router1 - router0) as f64 / secs,
        appliance_rate: (lb1 - lb0) as f64 / secs,
        attempts: steady.attempts,
        answered: steady.answered,
        slow: steady.slower_than(Duration::from_secs(1)),
        first_error: steady.first_error,
        tunnel_sent,
        tunnel_echoed,
        ..Run::default()
    };
    for d in downloads {
        match d.join().expect("download thread") {
            Ok(body) if body == expected => run.downloads_intact += 1,
            Ok(body) => run
                .download_errors
                .push(format!("body of {} bytes differs", body.len())),
            Err(e) => run.download_errors.push(e.to_string()),
        }
    }
    run
}

/// The appliance's own view: status (table fill, drops, flow cache, flood mode), the flood
/// and connection-table lines of its metrics, and its flood events.
fn appliance_view(lab: &Lab) -> (api::Status, Vec<String>, String) {
    let api = lab.api_at(0);
    let status = api
        .call(|c| c.status())
        .unwrap_or_else(|e| panic!("the appliance does not answer after the flood: {e}"));
    let events: Vec<String> = api
        .call(|c| c.events(0))
        .expect("events")
        .into_iter()
        .filter(|e| e.kind == "flood" || e.kind == "health")
        .map(|e| format!("{}: {}", e.kind, e.message))
        .collect();
    let metrics = api.call(|c| c.metrics()).unwrap_or_default();
    let lines: Vec<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && (l.contains("flood") || l.contains("conntrack")))
        .collect();
    let drops: Vec<String> = status
        .drops
        .iter()
        .filter(|c| c.value > 0)
        .map(|c| format!("{}={}", c.name, c.value))
        .collect();
    let text = format!(
        "conntrack {}/{} fallbacks {} flow_cache {:?} drops {drops:?}\n  {}",
        status.conntrack_entries,
        status.conntrack_capacity,
        status.conntrack_fallbacks,
        status.flow_cache,
        lines.join("\n  ")
    );
    (status, events, text)
}

fn flood_both_vips(kind: Kind, extra: &str) {
    // One flood at a time on this 2-core machine: the generator must leave the appliance CPU.
    let _serial = lab::testing::serial();
    let lab = start(extra);
    let mut failures = Vec::new();
    let (mut shed_before, mut stateless_before) = (0, 0);
    for mode in [LabMode::FullNat, LabMode::Dr] {
        let run = flood(&lab, mode, kind);
        let (status, events, view) = appliance_view(&lab);
        let kernel = kernel_drops(&lab);
        let counters = status.flood.expect("status shows flood mode");
        // The connection table evicts only when it is full (and then never an established
        // entry): one still short of full after the flood is the check available from
        // outside (the API has no eviction counter).
        if status.conntrack_entries >= status.conntrack_capacity {
            failures.push(format!(
                "{kind:?} {}: the connection table filled ({}/{})",
                mode.name(),
                status.conntrack_entries,
                status.conntrack_capacity
            ));
        }
        // The mechanism, not luck: the XDP program answered the flood to the DR VIP itself
        // from its ring, and dropped the FullNAT VIP's (which needs a port), and said so.
        let shed = counters.shed - shed_before;
        shed_before = counters.shed;
        let stateless = counters.stateless - stateless_before;
        stateless_before = counters.stateless;
        let took = if mode == LabMode::Dr { stateless } else { shed };
        if counters.switched_on == 0 || took == 0 {
            failures.push(format!(
                "{kind:?} {}: flood mode did not shed ({counters:?})",
                mode.name()
            ));
        }
        if !events.iter().any(|e| e.starts_with("flood: flood mode on")) {
            failures.push(format!(
                "{kind:?} {}: no flood event ({events:?})",
                mode.name()
            ));
        }
        let share = run.answered as f64 / run.attempts.max(1) as f64;
        println!(
            "MEASURE flood {kind:?} {}: {:.0} pkt/s from the client link, {:.0} pkt/s reached \
             the appliance; client {}/{} answered ({:.2}%, {} after >= 1 s, first error {:?}); \
             downloads {}/4 intact {:?}; shed in XDP {shed}, answered in XDP {stateless}; tunnel client {}/{} echoed\n  \
             appliance: {view}\n  kernel (so far): {kernel}\n  flood and health events: {events:?}",
            mode.name(),
            run.flood_rate,
            run.appliance_rate,
            run.answered,
            run.attempts,
            share * 100.0,
            run.slow,
            run.first_error,
            run.downloads_intact,
            run.download_errors,
            run.tunnel_echoed,
            run.tunnel_sent,
        );
        // The tunnel client is one source well over its rate: before flood mode told tunnel
        // VIPs apart, the mode cut it to that rate (200 of its 500 datagrams a second, 40%).
        // 2% is left for datagrams a busy 2-core machine loses in socket buffers.
        if run.tunnel_sent < 2500 || (run.tunnel_echoed as f64) < 0.98 * run.tunnel_sent as f64 {
            failures.push(format!(
                "{kind:?} {}: the tunnel client's flow had {}/{} echoed",
                mode.name(),
                run.tunnel_echoed,
                run.tunnel_sent
            ));
        }
        if run.downloads_intact != 4 {
            failures.push(format!(
                "{kind:?} {}: {}/4 downloads intact ({:?})",
                mode.name(),
                run.downloads_intact,
                run.download_errors
            ));
        }
        // 10 s at one every 50 ms: about 200 attempts; fewer than 150 means the client
        // itself stalled and the share would prove nothing.
        if run.attempts < 150 || share < 0.99 {
            failures.push(format!(
                "{kind:?} {}: {}/{} new connections answered ({:?})",
                mode.name(),
                run.answered,
                run.attempts,
                run.first_error
            ));
        }
        let pid = lab.appliance_pid(0).expect("the appliance runs");
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')));
        assert!(alive, "the appliance died during the {kind:?} flood");
    }
    assert!(
        failures.is_empty(),
        "{}\nappliance log:\n{}",
        failures.join("\n"),
        std::fs::read_to_string(lab.log_path_at(0)).unwrap_or_default()
    );
}

/// Flood mode sized to this machine: the debug build's engine on two shared cores takes a
/// few thousand new flows a second, so the mode must switch on well below that (the default
/// suits a release build on a dedicated machine).
const FLOOD_CONFIG: &str = "[flood]\nthreshold = 2000\n";

#[test]
fn syn_flood_spares_downloads_and_new_connections() {
    flood_both_vips(Kind::Syn, FLOOD_CONFIG);
}

#[test]
fn ack_flood_spares_downloads_and_new_connections() {
    flood_both_vips(Kind::Ack, FLOOD_CONFIG);
}

#[test]
fn udp_flood_spares_downloads_and_new_connections() {
    flood_both_vips(Kind::Udp, FLOOD_CONFIG);
}

/// An IPv4 frame from `src` to `dst` carrying `l4` (protocol `proto`), with a valid header
/// checksum (the flow cache declines a bad one).
fn ip4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    let len = (20 + l4.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&len.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let csum = !(((folded & 0xffff) + (folded >> 16)) as u16);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(l4);
    f
}

/// A TCP segment from `src:sport` to `dst:80` with `flags` (checksum not computed: nothing
/// here verifies it).
fn tcp_to(dst: Ipv4Addr, src: Ipv4Addr, sport: u16, flags: u8) -> Vec<u8> {
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&80u16.to_be_bytes());
    t.extend_from_slice(&[0; 8]);
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    ip4(src, dst, 6, &t)
}

/// A UDP datagram from `src:sport` to `dst:80` with 4 bytes of payload, no checksum.
fn udp_to(dst: Ipv4Addr, src: Ipv4Addr, sport: u16) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&80u16.to_be_bytes());
    u.extend_from_slice(&12u16.to_be_bytes());
    u.extend_from_slice(&[0, 0, b'p', b'i', b'n', b'g']);
    ip4(src, dst, 17, &u)
}

/// A TCP segment from `src:sport` to 192.0.2.10:80 with `flags`, as an Ethernet frame.
fn tcp4(src: Ipv4Addr, sport: u16, flags: u8) -> Vec<u8> {
    tcp_to(Ipv4Addr::new(192, 0, 2, 10), src, sport, flags)
}

const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const XDP_TX: u32 = 3;
const XDP_REDIRECT: u32 = 4;
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// Runs `frame` through the program; `true` when it went on to the engine (a test run has
/// no socket: steered frames come back as XDP_PASS with `no_socket` counted), `false` when
/// flood mode dropped it.
fn steered(steer: &Steer, frame: &[u8]) -> bool {
    let (action, _, steered) = steer.test_run(frame, 0).expect("test run");
    match action {
        XDP_PASS if steered => true,
        XDP_DROP => false,
        other => panic!("action {other} (steered {steered}) for a VIP frame"),
    }
}

/// The calling thread on CPU 0: the detector's state is per CPU, and test runs execute on
/// the caller's.
fn pin_to_cpu0() {
    let mut cpus = nix::sched::CpuSet::new();
    cpus.set(0).expect("cpu 0");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus).expect("pin to CPU 0");
}

/// Without the flow cache only SYNs count as first packets. With a threshold of 10 a
/// second the second SYN in a 100 ms window switches the mode on; a bucket 5 deep refilled
/// at 1 a second then lets 5 more through and sheds the rest of that source's SYNs, while
/// another source and the first source's non-SYN segments still reach the engine.
#[test]
fn the_xdp_program_sheds_only_sources_over_their_rate_while_the_mode_is_on() {
    lab::netns::require_root();
    pin_to_cpu0();
    let mut steer = Steer::load().expect("load the steering program");
    steer
        .set_vips(&[VipKey {
            addr: Ipv4Addr::new(192, 0, 2, 10).into(),
            port: 80,
            proto: Protocol::Tcp,
            mode: Mode::Dr,
            slot: 0,
            tenant_vni: None,
        }])
        .expect("vip");
    let flood = Flood {
        enabled: true,
        threshold: 10,
        per_source_rate: 1,
        per_source_burst: 5,
    };
    steer.set_flood(&flood).expect("flood settings");
    let (a, b) = (
        Ipv4Addr::new(198, 51, 100, 200),
        Ipv4Addr::new(198, 51, 100, 2),
    );
    let through = (0..50u16)
        .filter(|i| steered(&steer, &tcp4(a, 1000 + i, SYN)))
        .count();
    // One before the mode, then the bucket's 5 (a refill of 1 a second adds none in the
    // milliseconds this takes, but allow one).
    assert!((6..=7).contains(&through), "{through} of 50 SYNs went on");
    let c = steer.counters().expect("counters").flood;
    assert_eq!(c.switched_on, 1, "{c:?}");
    assert_eq!(c.shed, 50 - through as u64, "{c:?}");
    assert_eq!(c.first, 50, "{c:?}");
    assert_eq!(c.active_cpus, 1, "{c:?}");
    assert!(
        steered(&steer, &tcp4(b, 2000, SYN)),
        "another source is spared"
    );
    assert!(
        steered(&steer, &tcp4(a, 1000, ACK)),
        "a non-SYN segment is no first packet with the cache off"
    );
    assert!(
        steered(&steer, &tcp4(a, 1001, SYN | ACK)),
        "nor is a SYN-ACK"
    );
    assert!(!steered(&steer, &tcp4(a, 3000, SYN)), "still over its rate");
    // Disabled: the mode never bites, whatever the rate.
    steer
        .set_flood(&Flood {
            enabled: false,
            ..flood
        })
        .expect("flood settings");
    assert!(
        (0..20u16).all(|i| steered(&steer, &tcp4(a, 4000 + i, SYN))),
        "[flood] enabled = false lets every SYN through"
    );
}

/// The test's VIPs behind a program with the flow cache on: DR 192.0.2.12:80 (TCP and UDP,
/// cached) and tunnel 192.0.2.13:80 (TCP and UDP, never cached), flood mode at a threshold
/// of 10 a second with buckets 5 deep refilled at 1 a second. Hits leave by `lo`.
struct CachedLab {
    steer: Steer,
    cache: FlowCache,
}

const DR_VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 12);
const TUNNEL_VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 13);
/// Unused addresses of the client's subnet the tests spoof.
const SPOOF_A: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
const SPOOF_B: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 201);

fn cached_lab() -> CachedLab {
    lab::netns::require_root();
    pin_to_cpu0();
    let cache = FlowCache::create(4096).expect("flow cache maps");
    cache
        .add_egress(0, 1, Hairpin::XdpTx)
        .expect("lo as the cache's egress");
    let mut steer = Steer::load_with_cache(Some(&cache)).expect("load the steering program");
    let vips: Vec<VipKey> = [
        (DR_VIP, Mode::Dr),
        (
            TUNNEL_VIP,
            Mode::Tunnel(Encap::Vxlan { port: 4789, vni: 1 }),
        ),
    ]
    .into_iter()
    .enumerate()
    .flat_map(|(slot, (addr, mode))| {
        [Protocol::Tcp, Protocol::Udp].map(|proto| VipKey {
            addr: addr.into(),
            port: 80,
            proto,
            mode,
            slot: slot as u32,
            tenant_vni: None,
        })
    })
    .collect();
    steer.set_vips(&vips).expect("vips");
    steer
        .set_flood(&Flood {
            enabled: true,
            threshold: 10,
            per_source_rate: 1,
            per_source_burst: 5,
        })
        .expect("flood settings");
    CachedLab { steer, cache }
}

impl CachedLab {
    /// A spoofed SYN flood at the DR VIP: the mode switches on and the source is cut to its
    /// bucket.
    fn flood(&self) {
        let through = (0..50u16)
            .filter(|i| steered(&self.steer, &tcp_to(DR_VIP, SPOOF_A, 1000 + i, SYN)))
            .count();
        assert!(through <= 7, "{through} of 50 spoofed SYNs went on");
        let c = self.steer.counters().expect("counters").flood;
        assert!(c.switched_on >= 1 && c.active_cpus == 1, "{c:?}");
    }

    /// What the engine does once it has established `src:sport -> DR_VIP:80` (TCP): the
    /// DR rewrite in the cache, as never hit yet.
    fn establish(&self, src: Ipv4Addr, sport: u16) {
        let key = FlowKey {
            src: addr_to_u128(src.into()),
            dst: addr_to_u128(DR_VIP.into()),
            sport,
            dport: 80,
            proto: 6,
            v6: false,
            zone: 0,
        };
        let entry = CacheEntry {
            action: CacheAction::Dr,
            carry: Default::default(),
            shift: Default::default(),
            v6: false,
            dst_mac: [2, 0, 0, 0, 0, 0x21],
            src_mac: [2, 0, 0, 0, 0, 0x0a],
            ifindex: 1,
            stat: 0,
            last_seen: 0,
            seq_next: None,
            ack_max: None,
        };
        self.cache.install(&key, &entry).expect("install");
    }
}

/// A frame the flow cache forwarded: a test run arrives on `lo`, the entries' egress, so
/// the hit is an XDP_TX.
fn cached(steer: &Steer, frame: &[u8]) -> bool {
    let (action, _, steered) = steer.test_run(frame, 0).expect("test run");
    action == XDP_TX && !steered
}

/// The known defect of the first flood mode: with the cache on, every miss counted as a
/// first packet, and a tunnel VIP's established flows miss it frame by frame, so a busy
/// client of a tunnel VIP was cut to its source's rate as soon as a flood elsewhere
/// switched the mode on. Its UDP and its TCP segments other than SYNs are never policed
/// now; its SYNs still are, and so is every miss of the cached DR VIP.
#[test]
fn an_established_tunnel_flow_is_never_shed_during_a_flood() {
    let lab = cached_lab();
    lab.flood();
    let client = Ipv4Addr::new(198, 51, 100, 2);
    let udp = (0..1000)
        .filter(|_| steered(&lab.steer, &udp_to(TUNNEL_VIP, client, 5000)))
        .count();
    assert_eq!(udp, 1000, "datagrams of one tunnel UDP flow went on");
    let tcp = (0..1000)
        .filter(|_| steered(&lab.steer, &tcp_to(TUNNEL_VIP, client, 5001, ACK)))
        .count();
    assert_eq!(tcp, 1000, "segments of one tunnel TCP flow went on");
    let shed_before = lab.steer.counters().expect("counters").flood.shed;
    let syns = (0..20u16)
        .filter(|i| steered(&lab.steer, &tcp_to(TUNNEL_VIP, client, 6000 + i, SYN)))
        .count();
    assert!(
        syns <= 6,
        "{syns} of 20 new tunnel flows from one source went on"
    );
    let udp_dr = (0..20u16)
        .filter(|i| steered(&lab.steer, &udp_to(DR_VIP, SPOOF_B, 7000 + i)))
        .count();
    assert!(
        udp_dr <= 6,
        "{udp_dr} of 20 uncached datagrams to the DR VIP from one source went on"
    );
    let c = lab.steer.counters().expect("counters").flood;
    assert_eq!(c.shed - shed_before, (40 - syns - udp_dr) as u64, "{c:?}");
}

/// Many clients behind one NAT address: one source opens far more flows than its rate
/// while the mode is on. Each flow costs its SYN and its handshake's ACK (both misses) and
/// proves itself when the cache forwards its first frame, which pays the source back; a
/// spoofed source opening as many flows, which never complete, stays cut to its rate.
#[test]
fn a_busy_source_whose_flows_complete_keeps_opening_them_during_a_flood() {
    let lab = cached_lab();
    lab.flood();
    let office = Ipv4Addr::new(198, 51, 100, 3);
    let mut opened = 0;
    for port in 10_000..11_000u16 {
        let syn = steered(&lab.steer, &tcp_to(DR_VIP, office, port, SYN));
        let ack = steered(&lab.steer, &tcp_to(DR_VIP, office, port, ACK));
        if syn && ack {
            opened += 1;
            lab.establish(office, port);
            assert!(
                cached(&lab.steer, &tcp_to(DR_VIP, office, port, ACK)),
                "the established flow's next segment is the cache's"
            );
        }
    }
    assert_eq!(opened, 1000, "flows the office opened and completed");
    let c = lab.steer.counters().expect("counters").flood;
    assert_eq!(c.refunded, 1000, "{c:?}");
    let spoofed = (20_000..21_000u16)
        .filter(|&port| {
            steered(&lab.steer, &tcp_to(DR_VIP, SPOOF_B, port, SYN))
                & steered(&lab.steer, &tcp_to(DR_VIP, SPOOF_B, port, ACK))
        })
        .count();
    assert!(
        spoofed <= 3,
        "{spoofed} of 1000 never-completed flows went on"
    );
}

/// A busy client's short connections (connect, request, close) while the mode is on: its
/// handshake ACK and its request leave back to back, so both reach the engine before the
/// engine's entry is in the cache, and the next frame it sends is its FIN, which the program
/// hands to the engine without forwarding it. Such a connection never has a first hit; its
/// FIN (or RST) finds the entry, is not policed, and pays the source back. A spoofed source
/// sending FINs and RSTs of flows that do not exist is policed like any miss.
#[test]
fn a_busy_source_whose_short_connections_close_before_a_hit_keeps_opening_them() {
    let lab = cached_lab();
    lab.flood();
    let proxy = Ipv4Addr::new(198, 51, 100, 4);
    let first = |lab: &CachedLab| lab.steer.counters().expect("counters").flood.first;
    let mut opened = 0;
    for port in 30_000..31_000u16 {
        let syn = steered(&lab.steer, &tcp_to(DR_VIP, proxy, port, SYN));
        let ack = steered(&lab.steer, &tcp_to(DR_VIP, proxy, port, ACK));
        let request = steered(&lab.steer, &tcp_to(DR_VIP, proxy, port, ACK | 0x08));
        if syn && ack && request {
            opened += 1;
            lab.establish(proxy, port);
            let before = first(&lab);
            let close = if port % 2 == 0 { FIN | ACK } else { RST };
            assert!(
                steered(&lab.steer, &tcp_to(DR_VIP, proxy, port, close)),
                "the cached flow's teardown goes to the engine"
            );
            assert!(
                steered(&lab.steer, &tcp_to(DR_VIP, proxy, port, close)),
                "its retransmission too"
            );
            assert_eq!(
                first(&lab),
                before,
                "a cached flow's teardown is not policed"
            );
        }
    }
    assert_eq!(opened, 1000, "connections the proxy opened and closed");
    let c = lab.steer.counters().expect("counters").flood;
    assert_eq!(
        c.refunded, 1000,
        "one refund per connection, not per FIN: {c:?}"
    );
    let spoofed = (40_000..41_000u16)
        .filter(|&port| {
            let flags = if port % 2 == 0 { FIN | ACK } else { RST };
            steered(&lab.steer, &tcp_to(DR_VIP, SPOOF_B, port, flags))
        })
        .count();
    assert!(
        spoofed <= 6,
        "{spoofed} of 1000 FINs and RSTs of no flow went on"
    );
}

/// The golden rows of the stateless answer through the XDP program in flood mode: the
/// golden config's steering and tables (four-backend DR VIPs, IPv4 and IPv6, 5-, 3- and
/// 2-tuple hashes), rings written as a commit writes them, and every row's frame comes out
/// of the program byte for byte as out of the engine, toward the backends' interface,
/// without reaching the engine. Outside flood mode the same frames go to the engine.
#[test]
fn the_xdp_stateless_answer_is_the_engines_byte_for_byte() {
    lab::netns::require_root();
    // The golden next hops leave by index 2 (golden::BACKENDS); lo is index 1 (UPLINK).
    let ns = golden_netns("xf-sl", "xfs");
    let name = ns.name.clone();
    let report = std::thread::spawn(move || {
        lab::netns::enter(&name);
        pin_to_cpu0();
        let cache = golden_cache();
        let mut steer = Steer::load_with_cache(Some(&cache)).expect("load the steering program");
        let config = golden::config();
        steer
            .set_vips(&sluice::control::prepare::steering(&config).vips)
            .expect("golden vips");
        let t = golden::tables();
        let fill = steer.set_stateless(&t, Some(&cache)).expect("rings");
        let rows = golden::stateless_fixtures();
        // Outside flood mode (disabled): every row's frame goes to the engine.
        steer
            .set_flood(&Flood {
                enabled: false,
                ..Flood::default()
            })
            .expect("flood off");
        for fx in &rows {
            assert!(
                steered(&steer, &fx.input),
                "{}: to the engine",
                fx.description
            );
        }
        // The first policed frame switches the mode on at a threshold of 1 a second.
        steer
            .set_flood(&Flood {
                enabled: true,
                threshold: 1,
                per_source_rate: 1,
                per_source_burst: 1,
            })
            .expect("flood on");
        let mut macs = std::collections::HashSet::new();
        for fx in &rows {
            let engine = golden::run_alone(fx, &t)
                .unwrap_or_else(|m| panic!("{}: engine: {}", fx.description, m.what));
            assert_eq!(engine, fx.output, "{}: the engine's answer", fx.description);
            let (action, out, steered) = steer.test_run(&fx.input, 0).expect("test run");
            assert_eq!(
                (action, steered),
                (XDP_REDIRECT, false),
                "{}: redirected toward the backends",
                fx.description
            );
            assert_eq!(
                out[..fx.output.len()],
                fx.output[..],
                "{}: the program's bytes",
                fx.description
            );
            macs.insert(fx.output[..6].to_vec());
        }
        let c = steer.counters().expect("counters").flood;
        let dr = |v: &&sluice::lb::tables::VipEntry| v.mode == Mode::Dr;
        let rings = t
            .vips
            .iter()
            .filter(dr)
            .filter(|v| !v.ring.is_empty())
            .count();
        (
            fill,
            c,
            rows.len(),
            macs.len(),
            t.vips.iter().filter(dr).count(),
            rings,
        )
    })
    .join()
    .expect("stateless thread");
    let (fill, c, rows, backends, dr_vips, rings) = report;
    println!("MEASURE flood stateless parity: {rows} rows, {backends} backends, {fill:?}, {c:?}");
    assert_eq!(c.stateless, rows as u64, "{c:?}");
    assert_eq!(c.shed, 0, "{c:?}");
    assert!(backends >= 4, "the rows reach only {backends} backends");
    // Every DR VIP has its ring slot; an empty ring (a drained pool) writes nothing.
    assert_eq!(
        (fill.vips, fill.rings_written),
        (dr_vips, rings),
        "{fill:?}"
    );
}

/// An IPv6 TCP segment from `src:sport` to `dst:80` with `flags`, behind `ext` Destination
/// Options headers (8 bytes each, a PadN filling each).
fn tcp6_behind(
    src: std::net::Ipv6Addr,
    dst: std::net::Ipv6Addr,
    sport: u16,
    flags: u8,
    ext: usize,
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
    let mut t = sport.to_be_bytes().to_vec();
    t.extend_from_slice(&80u16.to_be_bytes());
    t.extend_from_slice(&[0; 8]);
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    let mut chain = Vec::new();
    for i in 0..ext {
        let next = if i + 1 == ext { 6 } else { 60 };
        chain.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    }
    let plen = (chain.len() + t.len()) as u16;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&plen.to_be_bytes());
    f.push(if ext == 0 { 6 } else { 60 });
    f.push(64);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&chain);
    f.extend_from_slice(&t);
    f
}

/// Issue 42, one parser truth: an IPv6 SYN behind up to 8 extension headers (as many as the
/// engine walks) is policed in flood mode as a plain one is, and one behind more, which the
/// engine would drop as too_many_headers, is dropped by the program and counted. Before,
/// the program walked 4 and sent every SYN behind 5 to 8 Destination Options headers on
/// unpoliced (9,998 of 9,998 reached the backends in a flood).
#[test]
fn deep_ipv6_chains_are_policed_as_plain_ones_or_dropped() {
    lab::netns::require_root();
    pin_to_cpu0();
    let vip: std::net::Ipv6Addr = "2001:db8::10".parse().expect("literal");
    let mut steer = Steer::load().expect("load the steering program");
    steer
        .set_vips(&[VipKey {
            addr: vip.into(),
            port: 80,
            proto: Protocol::Tcp,
            mode: Mode::Dr,
            slot: 0,
            tenant_vni: None,
        }])
        .expect("vip");
    steer
        .set_flood(&Flood {
            enabled: true,
            threshold: 10,
            per_source_rate: 1,
            per_source_burst: 5,
        })
        .expect("flood settings");
    for ext in [0usize, 5, 8] {
        // A source of its own per depth: each gets its bucket.
        let src: std::net::Ipv6Addr = format!("2001:db8:c::{}", 100 + ext)
            .parse()
            .expect("literal");
        let through = (0..40u16)
            .filter(|i| steered(&steer, &tcp6_behind(src, vip, 1000 + i, SYN, ext)))
            .count();
        println!("MEASURE flood ipv6 SYNs behind {ext} extension headers: {through} of 40 went on");
        assert!(
            through <= 7,
            "{through} of 40 SYNs behind {ext} extension headers went on: not policed"
        );
    }
    let before = steer.counters().expect("counters").deep;
    let src: std::net::Ipv6Addr = "2001:db8:c::200".parse().expect("literal");
    let (action, _, _) = steer
        .test_run(&tcp6_behind(src, vip, 5000, SYN, 9), 0)
        .expect("test run");
    assert_eq!(action, XDP_DROP, "9 extension headers: dropped");
    assert_eq!(steer.counters().expect("counters").deep, before + 1);
    // Not to a VIP: the kernel's business, whatever its depth.
    let other: std::net::Ipv6Addr = "2001:db8::99".parse().expect("literal");
    let (action, _, _) = steer
        .test_run(&tcp6_behind(src, other, 5001, SYN, 9), 0)
        .expect("test run");
    assert_eq!(action, XDP_PASS);
}
