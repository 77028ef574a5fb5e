//! The control plane under hostile load, in lab namespaces (root): idle connections held to
//! the metrics and TCP API listeners under the usual soft limit of 1,024 descriptors, a BGP
//! peer that announces a million prefixes, a reload whose steering-map update fails, the
//! control plane stalled under live BGP and BFD sessions, and a full flow cache walked while
//! the API and the control loop must keep answering.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bgp::codec::{self, AsSegment, AsSegmentKind, Capability, Message, Open, Origin, PathAttr};
use lab::bird::Config;
use lab::testing::{Said, file_text, sample, steady_client};
use lab::{LB_LAN4, Lab, LabMode, LabOptions, ROUTER_LAN4, http_get};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde_json::Value;

fn nat_vip() -> SocketAddr {
    SocketAddr::new(LabMode::Nat.vip(false), 80)
}

/// `sluice ctl --json ARGS` over `socket`, read as JSON.
fn ctl_json(socket: &Path, args: &[&str]) -> Value {
    lab::sluice!().ctl_json(socket, args)
}

fn version(socket: &Path) -> u64 {
    ctl_json(socket, &["status"])["config_version"]
        .as_u64()
        .expect("config_version")
}

/// The newest event's sequence number.
fn last_event(socket: &Path) -> u64 {
    let ev = ctl_json(socket, &["events"]);
    ev.as_array()
        .and_then(|a| a.iter().filter_map(|e| e["seq"].as_u64()).max())
        .unwrap_or(0)
}

/// The health events after `since`.
fn health_events(socket: &Path, since: u64) -> Vec<String> {
    let ev = ctl_json(socket, &["events", "--since", &since.to_string()]);
    ev.as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["kind"] == "health")
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// One sample of the Prometheus text, 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    sample(text, name).unwrap_or(0.0)
}

/// The resident memory of `pid`, in kB.
fn vm_rss_kb(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A script that starts sluice under a soft descriptor limit of 1,024, as systemd and a
/// login shell leave it.
fn soft_limited_sluice(dir: &Path) -> PathBuf {
    lab::sluice!().wrapper(dir, "sluice-nofile-1024", "ulimit -S -n 1024 || exit 1")
}

/// A [`steady_client`] in the lab through the NAT VIP, a request every 100 ms until `stop`;
/// returns (requests, failures).
fn nat_client(lab: &Lab, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(usize, usize)> {
    lab.client
        .in_thread(move || {
            let every = Duration::from_millis(100);
            let r = steady_client(nat_vip(), every, Duration::from_secs(3), stop);
            (r.attempts, r.attempts - r.answered)
        })
        .expect("client thread")
}

#[test]
fn hd_idle_connections_to_metrics_and_tcp_api_change_no_health_and_ctl_answers() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        ..LabOptions::default()
    });
    let socket = lab.api_socket_at(0);
    let (cfg, _) = lab.config_with_listeners("hd-0123456789abcdef-token", "plain_tcp = true\n");
    lab.write_config(&cfg).expect("config");
    let log = lab.start_serving(&soft_limited_sluice(&lab.dir), &[nat_vip()]);
    let log_text = || file_text(&log);
    // Let the probes settle, then note where the events are.
    std::thread::sleep(Duration::from_secs(2));
    let since = last_event(&socket);

    // 4,000 idle connections to each listener, from the appliance's namespace (the
    // listeners are on its loopback), held for 15 s.
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let holder = {
        let (stop, opened) = (Arc::clone(&stop), Arc::clone(&opened));
        lab.lb
            .in_thread(move || {
                use nix::sys::resource::{Resource, getrlimit, setrlimit};
                if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
                    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
                }
                let mut held = Vec::new();
                for port in [9300u16, 9400] {
                    for _ in 0..4000 {
                        let addr = SocketAddr::from(([127, 0, 0, 1], port));
                        if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                            opened.fetch_add(1, Ordering::Relaxed);
                            held.push(s);
                        }
                    }
                }
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
                held.len()
            })
            .expect("holder thread")
    };
    let client = nat_client(&lab, Arc::clone(&stop));
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut answers = 0;
    while started.elapsed() < Duration::from_secs(15) {
        let t = Instant::now();
        let said = lab::sluice!().ctl(&socket, &["--json", "status"]);
        let took = t.elapsed();
        assert!(
            said.ok(),
            "ctl status failed under load: {}\n{}",
            said.stderr,
            log_text()
        );
        slowest = slowest.max(took);
        answers += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    let metrics = lab::sluice!().ctl(&socket, &["--json", "metrics"]).stdout;
    stop.store(true, Ordering::Relaxed);
    let held = holder.join().expect("holder");
    let (requests, failed) = client.join().expect("client");
    let health = health_events(&socket, since);
    println!(
        "hd idle: {held} connections held ({} opened), ctl status answered {answers} times, \
         slowest {slowest:?}; VIP {requests} requests, {failed} failed; refused: metrics {} \
         tcp {}; timed out: metrics {} tcp {}",
        opened.load(Ordering::Relaxed),
        metric(
            &metrics,
            "sluice_api_connections_refused_total{listener=\"metrics\"}"
        ),
        metric(
            &metrics,
            "sluice_api_connections_refused_total{listener=\"tcp\"}"
        ),
        metric(
            &metrics,
            "sluice_api_connection_timeouts_total{listener=\"metrics\"}"
        ),
        metric(
            &metrics,
            "sluice_api_connection_timeouts_total{listener=\"tcp\"}"
        ),
    );
    assert!(
        held >= 7000,
        "the test held only {held} connections: it did not load the listeners"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "ctl status took {slowest:?} under load"
    );
    assert!(health.is_empty(), "backends changed health: {health:?}");
    assert_eq!(failed, 0, "{failed} of {requests} VIP requests failed");
    assert!(
        metric(
            &metrics,
            "sluice_api_connections_refused_total{listener=\"metrics\"}"
        ) > 0.0,
        "the metrics listener's cap never refused:\n{metrics}"
    );
    assert!(
        metric(&metrics, "sluice_api_connections{listener=\"metrics\"}") <= 256.0,
        "more connections open than the cap"
    );
    assert!(
        log_text().contains("descriptor limit raised from 1024"),
        "{}",
        log_text()
    );
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
    assert!(!socket.exists(), "the socket is removed at exit");
}

/// Fills `map` with keys of a kind the program never looks up (0xEE); returns them.
fn fill(map: &MapHandle) -> Vec<Vec<u8>> {
    let size = map.key_size() as usize;
    // Whatever the steering value holds, junk keys only need a value of the right size.
    let value = vec![0u8; map.value_size() as usize];
    let present = map.keys().count();
    let room = map.max_entries() as usize - present;
    let mut junk = Vec::with_capacity(room);
    for i in 0..room as u32 {
        let mut k = vec![0u8; size];
        k[..4].copy_from_slice(&i.to_be_bytes());
        k[19] = 0xEE;
        map.update(&k, &value, MapFlags::NO_EXIST)
            .expect("fill the steering map");
        junk.push(k);
    }
    junk
}

#[test]
fn hd_a_reload_whose_steering_update_fails_is_rejected_whole() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        ..LabOptions::default()
    });
    let socket = lab.api_socket_at(0);
    let cfg = lab.config(&socket);
    lab.write_config(&cfg).expect("config");
    let log = lab.start_serving(lab::sluice!().path(), &[nat_vip()]);
    let log_text = || file_text(&log);
    let before = version(&socket);
    let map = map_named(lab.appliance_pid(0).expect("pid"), "steer_keys");
    let junk = fill(&map);

    // A new VIP needs steering keys the full map cannot take.
    let extra = format!(
        "{cfg}\n[[vip]]\nname = \"hd-extra\"\naddress = \"192.0.2.77\"\nport = 80\n\
         mode = \"nat\"\n[[vip.backend]]\naddress = \"10.0.0.21\"\nport = 8080\n"
    );
    lab.write_config(&extra).expect("config");
    let Said {
        code,
        stdout: out,
        stderr: err,
    } = lab::sluice!().ctl(&socket, &["--json", "reload"]);
    let ok = code == 0;
    println!("hd reload with a full steering map: ok={ok} {out}{err}");
    assert!(!ok, "the reload was reported applied: {out}");
    assert!(
        err.contains("steering maps"),
        "the reply names the failure: {err}"
    );
    assert_eq!(version(&socket), before, "the old version still runs");
    let vips = ctl_json(&socket, &["vips"]);
    assert!(
        !vips.to_string().contains("hd-extra"),
        "the rejected VIP was published: {vips}"
    );
    for _ in 0..5 {
        let (status, _) = lab
            .from_client(|| http_get(nat_vip(), "/whoami", Duration::from_secs(3)))
            .expect("client")
            .expect("old VIP serves");
        assert_eq!(status, 200);
    }
    let rejected = {
        let m = lab::sluice!().ctl(&socket, &["--json", "metrics"]).stdout;
        metric(&m, "sluice_config_reloads_rejected_total")
    };
    assert!(rejected >= 1.0, "rejection counted");

    // With room again the same file applies.
    for k in &junk {
        map.delete(k).expect("remove a filler key");
    }
    let said = lab::sluice!().ctl(&socket, &["--json", "reload"]);
    assert!(
        said.ok(),
        "reload with room: {}\n{}",
        said.stderr,
        log_text()
    );
    assert!(version(&socket) > before, "{}", said.stdout);
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}

/// A minimal BGP peer on the router side: accepts the appliance's session and exchanges
/// OPEN and KEEPALIVE.
struct Peer {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    fn accept(l: &TcpListener) -> Peer {
        l.set_nonblocking(false).expect("blocking");
        let (s, _) = l.accept().expect("the appliance connects");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut p = Peer { s, buf: Vec::new() };
        match p.read() {
            Some(Message::Open(_)) => {}
            other => panic!("expected OPEN, got {other:?}"),
        }
        let open = Open::new(
            65000,
            30,
            ROUTER_LAN4.parse().expect("literal"),
            vec![
                Capability::FourOctetAs(65000),
                Capability::Multiprotocol { afi: 1, safi: 1 },
            ],
        );
        p.send(&Message::Open(open));
        p.send(&Message::Keepalive);
        p
    }

    fn send(&mut self, m: &Message) -> bool {
        self.s.write_all(&m.encode()).is_ok()
    }

    /// The next message, or None when the session closed.
    fn read(&mut self) -> Option<Message> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Ok(Some(len)) = codec::frame_len(&self.buf) {
                let m = codec::decode(&self.buf[..len]).expect("decodable message");
                self.buf.drain(..len);
                return Some(m);
            }
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// UPDATEs announcing `count` /24s from 16.0.0.0, 900 a message; false when the session
    /// broke.
    fn announce(&mut self, count: u32) -> bool {
        let attrs = vec![
            PathAttr::Origin(Origin::Igp),
            PathAttr::AsPath(vec![AsSegment {
                kind: AsSegmentKind::Sequence,
                asns: vec![65000],
            }]),
            PathAttr::NextHop(ROUTER_LAN4.parse().expect("literal")),
        ];
        let mut i = 0;
        let mut last_keepalive = Instant::now();
        while i < count {
            let n = (count - i).min(900);
            let nlri = (i..i + n)
                .map(|k| {
                    let addr = std::net::Ipv4Addr::from(0x1000_0000u32 + (k << 8));
                    match format!("{addr}/24").parse::<bgp::IpNet>() {
                        Ok(bgp::IpNet::V4(p)) => p,
                        _ => unreachable!("an IPv4 prefix"),
                    }
                })
                .collect();
            let u = codec::Update {
                attrs: attrs.clone(),
                nlri,
                ..codec::Update::default()
            };
            if !self.send(&Message::Update(u)) {
                return false;
            }
            if last_keepalive.elapsed() > Duration::from_secs(5) {
                last_keepalive = Instant::now();
                self.send(&Message::Keepalive);
            }
            i += n;
        }
        true
    }
}

fn bgp_config(cfg: &str, max_prefixes: Option<u32>) -> String {
    let limit = max_prefixes.map_or(String::new(), |n| format!("max_prefixes = {n}\n"));
    format!(
        "{cfg}\n[bgp]\nasn = 65001\nrouter_id = \"{LB_LAN4}\"\n\n[[bgp.peer]]\n\
         address = \"{ROUTER_LAN4}\"\nasn = 65000\nhold_time = \"30s\"\nconnect_retry = \"1s\"\n\
         source = \"{LB_LAN4}\"\n{limit}"
    )
}

#[test]
fn hd_a_million_prefixes_end_the_session_with_a_limit_and_stay_bounded_without() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        bgp: Some(false),
        ..LabOptions::default()
    });
    let socket = lab.api_socket_at(0);
    let base = lab.config(&socket);
    // The router's side of the session: this test.
    let listener = lab
        .router
        .call(|| TcpListener::bind((ROUTER_LAN4, 179)).expect("bind 179 on the router"));
    lab.write_config(&bgp_config(&base, Some(1000)))
        .expect("config");
    let log = lab.start_serving(lab::sluice!().path(), &[nat_vip()]);
    let log_text = || file_text(&log);

    // With max_prefixes = 1000: a million prefixes end the session with Cease subcode 1
    // (the writes fail once the appliance closed it), and the VIP serves throughout.
    let mut peer = Peer::accept(&listener);
    assert!(
        matches!(peer.read(), Some(Message::Keepalive)),
        "session up"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let client = nat_client(&lab, Arc::clone(&stop));
    let all_sent = peer.announce(1_000_000);
    let notification = loop {
        match peer.read() {
            Some(Message::Notification(n)) => break n,
            Some(_) => continue,
            None => panic!("closed without a NOTIFICATION:\n{}", log_text()),
        }
    };
    // The VIP keeps serving after the session ended too.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (requests, failed) = client.join().expect("client");
    println!(
        "hd max_prefixes 1000: received {notification:?} (every UPDATE written: {all_sent}); \
         VIP {requests} requests, {failed} failed"
    );
    assert_eq!(failed, 0, "{failed} of {requests} VIP requests failed");
    assert_eq!(
        (notification.code, notification.subcode),
        (6, 1),
        "Cease/Max Prefixes"
    );
    assert_eq!(
        notification.data,
        [0, 1, 1, 0, 0, 0x03, 0xe8],
        "AFI 1, SAFI 1, bound 1000"
    );
    drop(peer);

    // Without a limit (a reload restarts the speaker): a million prefixes, the process
    // grows by less than 24 MB and the VIP keeps answering.
    lab.write_config(&bgp_config(&base, None)).expect("config");
    let said = lab::sluice!().ctl(&socket, &["--json", "reload"]);
    assert!(said.ok(), "reload: {}", said.stderr);
    // The old speaker may have reconnected after its Cease before the reload stopped it:
    // that connection is in the backlog, and closed.
    let mut peer = (0..5)
        .find_map(|_| {
            let mut p = Peer::accept(&listener);
            matches!(p.read(), Some(Message::Keepalive)).then_some(p)
        })
        .expect("the new speaker's session comes up");
    let pid = lab.appliance_pid(0).expect("pid");
    let rss_before = vm_rss_kb(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let client = nat_client(&lab, Arc::clone(&stop));
    let t = Instant::now();
    assert!(
        peer.announce(1_000_000),
        "the session broke:\n{}",
        log_text()
    );
    let sent_in = t.elapsed();
    // Keepalives until the appliance has counted everything it tracks.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut received = 0;
    while Instant::now() < deadline {
        let bgp = ctl_json(&socket, &["bgp"]);
        received = bgp["peers"][0]["prefixes_received"].as_u64().unwrap_or(0);
        if received >= bgp::TRACKED_PREFIXES as u64 {
            break;
        }
        peer.send(&Message::Keepalive);
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss_after = vm_rss_kb(pid);
    stop.store(true, Ordering::Relaxed);
    let (requests, failed) = client.join().expect("client");
    println!(
        "hd 1,000,000 prefixes sent in {sent_in:?}; prefixes_received {received}; VmRSS \
         {rss_before} kB -> {rss_after} kB; VIP {requests} requests, {failed} failed"
    );
    assert_eq!(
        received,
        bgp::TRACKED_PREFIXES as u64,
        "tracked up to the bound"
    );
    assert!(
        rss_after < rss_before + 24 * 1024,
        "memory grew by {} kB",
        rss_after.saturating_sub(rss_before)
    );
    assert_eq!(failed, 0, "{failed} of {requests} VIP requests failed");
    let bgp = ctl_json(&socket, &["bgp"]);
    assert_eq!(bgp["peers"][0]["state"], "Established", "{bgp}");
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}

/// A script that starts sluice with the control-plane stall hook armed (`SIGUSR2` blocks
/// every worker of its runtime for `ms`).
fn stallable_sluice(dir: &Path, ms: u64) -> PathBuf {
    lab::sluice!().wrapper(
        dir,
        "sluice-stallable",
        &format!("export SLUICE_TEST_STALL_MS={ms}"),
    )
}

/// BIRD on the lab router with one BFD-protected session to the appliance: BFD at 100 ms x 3
/// (300 ms detection), hold time 3 s.
fn bird_with_bfd() -> String {
    Config::new(ROUTER_LAN4, 65000)
        .bfd(Duration::from_millis(100), 3)
        .quick_retry()
        .peer("cr1", LB_LAN4, 65001)
        .render()
}

/// `birdc show protocols cr1`'s line for the session (name, proto, table, state, since,
/// info) and `show bfd sessions`' line for the appliance.
fn bird_view(lab: &Lab, bird: &lab::bird::Bird) -> (String, String) {
    let protos = bird
        .cmd(&lab.router, &["show", "protocols", "cr1"])
        .unwrap_or_default();
    let bfd = bird
        .cmd(&lab.router, &["show", "bfd", "sessions"])
        .unwrap_or_default();
    let line = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.contains(key))
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    (line(&protos, "cr1"), line(&bfd, LB_LAN4))
}

#[test]
fn hd_bgp_and_bfd_stay_up_while_the_control_plane_is_stalled() {
    lab::netns::require_root();
    const STALL: Duration = Duration::from_secs(6);
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        bgp: Some(false),
        prefix: "cr",
        ..LabOptions::default()
    });
    let bird_dir = lab.dir.join("cr-bird");
    std::fs::create_dir_all(&bird_dir).expect("bird dir");
    let bird = lab::bird::Bird::start(&lab.router, &bird_dir, &bird_with_bfd())
        .unwrap_or_else(|e| panic!("bird: {e}"));
    let socket = lab.api_socket_at(0);
    let cfg = format!(
        "{}\n[bgp]\nasn = 65001\nrouter_id = \"{LB_LAN4}\"\ngraceful_shutdown_wait = \"1s\"\n\n\
         [[bgp.peer]]\naddress = \"{ROUTER_LAN4}\"\nasn = 65000\nhold_time = \"3s\"\n\
         connect_retry = \"1s\"\nsource = \"{LB_LAN4}\"\n\
         bfd = {{ interval = \"100ms\", multiplier = 3 }}\n",
        lab.config(&socket)
    );
    lab.write_config(&cfg).expect("config");
    let wrapper = stallable_sluice(&lab.dir, STALL.as_millis() as u64);
    let log = lab.start_appliance(&wrapper).expect("start");
    let log_text = || file_text(&log);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (proto, bfd) = loop {
        let (p, b) = bird_view(&lab, &bird);
        if p.contains("Established") && b.contains(" Up ") {
            break (p, b);
        }
        assert!(
            Instant::now() < deadline,
            "BGP and BFD never came up: {p} / {b}\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    println!("cr before the stall: {proto} / {bfd}");
    // Settle: the first seconds of a BFD session see its timers renegotiated.
    std::thread::sleep(Duration::from_secs(2));
    let (proto, bfd) = bird_view(&lab, &bird);
    let pid = lab.appliance_pid(0).expect("pid");
    let t = Instant::now();
    assert!(
        std::process::Command::new("kill")
            .args(["-USR2", &pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let mut polls = 0;
    while t.elapsed() < STALL + Duration::from_secs(2) {
        let (p, b) = bird_view(&lab, &bird);
        polls += 1;
        assert!(
            p.contains("Established") && b.contains(" Up "),
            "{:?} into a {STALL:?} stall of the control plane the router saw: {p} / {b}\n{}",
            t.elapsed(),
            log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (proto_after, bfd_after) = bird_view(&lab, &bird);
    println!("cr after the stall ({polls} polls): {proto_after} / {bfd_after}");
    // BIRD keeps 'since' on its monotonic clock and prints it as wall time from the two
    // clocks' offset at the moment of the command, so the printed value wanders by tens of
    // milliseconds on a busy machine without any state change. A flap moves it by seconds:
    // the session cannot come back before the stall ends (connect delay 1 s, 6 s stall).
    for (what, before, after) in [("BGP", &proto, &proto_after), ("BFD", &bfd, &bfd_after)] {
        let d = since_ms(after).abs_diff(since_ms(before));
        let moved = d.min(86_400_000 - d); // across midnight
        assert!(
            moved < 500,
            "the {what} session flapped (its 'since' moved {moved} ms): {before} -> {after}"
        );
    }
    let stalled = format!("stalled 2 of 2 runtime workers for {STALL:?}");
    assert!(
        log_text().contains(&stalled),
        "the hook did not hold both control-runtime workers ({stalled}):\n{}",
        log_text()
    );
    let said = lab::sluice!().ctl(&socket, &["--json", "bgp"]);
    assert!(
        said.ok() && said.stdout.contains("Established"),
        "{}{}",
        said.stdout,
        said.stderr
    );
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}

/// The milliseconds of the day in the first `HH:MM:SS.mmm` field of a `bird_view` line
/// (its 'since').
fn since_ms(line: &str) -> u64 {
    let field = line
        .split_whitespace()
        .find(|f| f.len() == 12 && f.as_bytes()[2] == b':' && f.as_bytes()[5] == b':')
        .unwrap_or_else(|| panic!("no HH:MM:SS.mmm 'since' in {line:?}"));
    let n = |r: std::ops::Range<usize>| -> u64 {
        field[r]
            .parse()
            .unwrap_or_else(|_| panic!("bad 'since' {field:?} in {line:?}"))
    };
    ((n(0..2) * 60 + n(3..5)) * 60 + n(6..8)) * 1000 + n(9..12)
}

/// The BPF map named `name` of the appliance process `pid`, found through its descriptors.
fn map_named(pid: u32, name: &str) -> MapHandle {
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("fdinfo") {
        let Ok(text) = std::fs::read_to_string(fd.expect("entry").path()) else {
            continue;
        };
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("map_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok());
        if let Some(m) = id.and_then(|id| MapHandle::from_map_id(id).ok())
            && m.name() == name
        {
            return m;
        }
    }
    panic!("appliance {pid} holds no {name} map");
}

/// Fills a flow-cache map with DR entries for flows nobody sends (198.18.0.0/15 and
/// 2001:2::/48 benchmark addresses) counted in a slot no backend has, so any walk evicts
/// them; returns how many entries the map holds then (an LRU map makes room before it is
/// quite full).
fn fill_cache(map: &MapHandle, v6: bool) -> usize {
    let (ks, vs) = (map.key_size() as usize, map.value_size() as usize);
    let mut value = vec![0u8; vs];
    value[60..64].copy_from_slice(&(4095u32).to_ne_bytes()); // stat: an unused slot
    value[64] = 2; // ACT_DR
    for i in 0..map.max_entries() {
        let mut k = vec![0u8; ks];
        // The ports follow the two addresses.
        let src = if v6 {
            k[..6].copy_from_slice(&[0x20, 0x01, 0, 2, 0, 0]);
            k[12..16].copy_from_slice(&i.to_be_bytes());
            k[16..22].copy_from_slice(&[0x20, 0x01, 0, 2, 0, 1]);
            32
        } else {
            k[..4].copy_from_slice(&(0xC612_0000u32 | (i & 0xffff)).to_be_bytes());
            k[4..8].copy_from_slice(&(0xC613_0000u32 | (i >> 16)).to_be_bytes());
            8
        };
        k[src..src + 2].copy_from_slice(&40000u16.to_be_bytes());
        k[src + 2..src + 4].copy_from_slice(&80u16.to_be_bytes());
        k[src + 4] = 6;
        map.update(&k, &value, MapFlags::ANY)
            .expect("a flow-cache entry");
    }
    map.keys().count()
}

/// How long `sluice ctl ARGS` took, and whether it succeeded.
fn timed_ctl(socket: &Path, args: &[&str]) -> (Duration, bool, String) {
    let t = Instant::now();
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let said = lab::sluice!().ctl(socket, &all);
    (
        t.elapsed(),
        said.ok(),
        format!("{}{}", said.stdout, said.stderr),
    )
}

#[test]
fn hd_ctl_and_the_control_loop_answer_while_a_full_flow_cache_is_walked() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        flow_cache: Some(true),
        prefix: "cr",
        ..LabOptions::default()
    });
    let socket = lab.api_socket_at(0);
    let cfg = lab.config(&socket);
    lab.write_config(&cfg).expect("config");
    let log = lab.start_serving(lab::sluice!().path(), &[nat_vip()]);
    let log_text = || file_text(&log);
    let pid = lab.appliance_pid(0).expect("pid");
    let t = Instant::now();
    let filled = fill_cache(&map_named(pid, "flow_cache4"), false)
        + fill_cache(&map_named(pid, "flow_cache6"), true);
    println!(
        "cr filled the flow cache with {filled} entries in {:?}",
        t.elapsed()
    );
    assert!(filled >= 200_000, "only {filled} entries went in");

    // A reload of the same file commits a new version, whose walk evicts every filler entry.
    let reload = std::thread::spawn({
        let socket = socket.clone();
        move || timed_ctl(&socket, &["reload"])
    });
    let (mut status_max, mut loop_max, mut polls) = (Duration::ZERO, Duration::ZERO, 0);
    while !reload.is_finished() || polls < 3 {
        let (d, ok, out) = timed_ctl(&socket, &["status"]);
        assert!(ok, "status: {out}");
        status_max = status_max.max(d);
        // Goes through the control loop, which refuses it at once: no BGP in this lab.
        let (d, ok, out) = timed_ctl(&socket, &["withdraw", "nat4-tcp"]);
        assert!(!ok && out.contains("BGP"), "withdraw: {out}");
        loop_max = loop_max.max(d);
        polls += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let (reload_took, ok, out) = reload.join().expect("reload thread");
    assert!(ok, "reload: {out}");
    let walk = log_text()
        .lines()
        .find(|l| l.contains("flow cache: evicted"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no eviction walk logged:\n{}", log_text()));
    println!(
        "cr reload answered in {reload_took:?} (after its walk: {walk}); during it {polls} \
         polls, slowest status {status_max:?}, slowest loop command {loop_max:?}"
    );
    let evicted: usize = walk
        .split_whitespace()
        .find_map(|w| w.strip_prefix("evicted="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        evicted >= filled * 9 / 10,
        "the walk evicted {evicted} of {filled}"
    );
    assert!(
        status_max < Duration::from_secs(1),
        "status took {status_max:?}"
    );
    assert!(
        loop_max < Duration::from_secs(1),
        "the loop answered in {loop_max:?}"
    );
    for _ in 0..5 {
        let (status, _) = lab
            .from_client(|| http_get(nat_vip(), "/whoami", Duration::from_secs(3)))
            .expect("client")
            .expect("VIP serves");
        assert_eq!(status, 200);
    }
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}

#[test]
fn hd_a_reload_whose_new_speaker_cannot_start_is_rejected_whole() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        bgp: Some(false),
        prefix: "cr",
        ..LabOptions::default()
    });
    let socket = lab.api_socket_at(0);
    let base = lab.config(&socket);
    lab.write_config(&base).expect("config");
    let log = lab.start_serving(lab::sluice!().path(), &[nat_vip()]);
    let log_text = || file_text(&log);
    let before = version(&socket);
    // Another process of the appliance's namespace holds the BGP port.
    let holder = lab
        .appliance_ns(0)
        .call(|| TcpListener::bind("[::]:179").expect("hold port 179"));
    lab.write_config(&bgp_config(&base, None)).expect("config");
    let Said {
        code,
        stdout: out,
        stderr: err,
    } = lab::sluice!().ctl(&socket, &["--json", "reload"]);
    let ok = code == 0;
    println!("cr reload with port 179 taken: ok={ok} {out}{err}");
    assert!(!ok, "the reload was reported applied: {out}");
    assert!(
        err.contains("[bgp]: the new speaker did not start") && err.contains("179"),
        "the reply names the failure: {err}"
    );
    assert_eq!(version(&socket), before, "the old version still runs");
    assert_eq!(
        ctl_json(&socket, &["bgp"])["enabled"],
        false,
        "no [bgp] published"
    );
    for _ in 0..5 {
        let (status, _) = lab
            .from_client(|| http_get(nat_vip(), "/whoami", Duration::from_secs(3)))
            .expect("client")
            .expect("old VIP serves");
        assert_eq!(status, 200);
    }
    let m = lab::sluice!().ctl(&socket, &["--json", "metrics"]).stdout;
    assert!(metric(&m, "sluice_config_reloads_rejected_total") >= 1.0);

    // With the port free again the same file applies and the speaker listens.
    drop(holder);
    let said = lab::sluice!().ctl(&socket, &["--json", "reload"]);
    assert!(
        said.ok(),
        "reload with the port free: {}\n{}",
        said.stderr,
        log_text()
    );
    assert!(version(&socket) > before, "{}", said.stdout);
    assert_eq!(ctl_json(&socket, &["bgp"])["enabled"], true);
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}
