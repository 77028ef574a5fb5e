//! Health probes against real servers in network namespaces.
//!
//! Each test builds a two-namespace lab: the prober runs in `prb` (10.201.0.1) on a thread
//! that has entered it with setns, the servers run in `srv` (10.201.0.2 answers ICMP,
//! 10.201.0.3 drops it with nftables) on another such thread. Tests assert the exact
//! transitions (which probe number flipped the state, and why) and timing bounds counted
//! in rounds of the check interval, never tight wall-clock thresholds.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use health::{
    CheckKind, Failure, Health, HealthCheck, HttpCheck, HttpMethod, InitialHealth, Prober, Reason,
    Status, Target, Transition,
};
use lab::netns::{Netns, enter, require_program, require_root, veth};
use lab::testing::async_in;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

const PROBER: &str = "10.201.0.1";
const SERVER: &str = "10.201.0.2";
const SILENT: &str = "10.201.0.3";
/// A second prober address, used as a check's configured source.
const SOURCE: &str = "10.201.0.11";
const INTERVAL: Duration = Duration::from_millis(400);
const TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling and I/O latency allowed on top of round boundaries (a loaded 2-core box).
const SLACK: Duration = Duration::from_millis(250);

struct Lab {
    prb: Netns,
    srv: Netns,
}

fn lab() -> Lab {
    lab_named("hprb", "hsrv")
}

/// The same lab with namespaces named from `prb` and `srv`.
fn lab_named(prb: &str, srv: &str) -> Lab {
    require_root();
    require_program("ip", "iproute2");
    require_program("sysctl", "procps");
    let prb = Netns::new(prb);
    let srv = Netns::new(srv);
    veth(&prb, "eth0", &srv, "eth0");
    prb.run(&["ip", "addr", "add", &format!("{PROBER}/24"), "dev", "eth0"]);
    prb.run(&["ip", "addr", "add", &format!("{SOURCE}/24"), "dev", "eth0"]);
    srv.run(&["ip", "addr", "add", &format!("{SERVER}/24"), "dev", "eth0"]);
    srv.run(&["ip", "addr", "add", &format!("{SILENT}/24"), "dev", "eth0"]);
    // Unreachables for the UDP test must not be rate limited away.
    srv.run(&["sysctl", "-qw", "net.ipv4.icmp_ratelimit=0"]);
    Lab { prb, srv }
}

/// Servers running on a thread inside a namespace; stopped and joined on drop.
struct Servers {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs the future `make` returns inside `ns`. `make` runs in the namespace and in the
/// runtime's context, so it can bind listeners before this returns.
fn serve<F, Fut>(ns: &Netns, make: F) -> Servers
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let name = ns.name.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        enter(&name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let fut = {
            let _guard = rt.enter();
            make()
        };
        ready_tx.send(()).expect("signal ready");
        rt.block_on(async move {
            tokio::select! {
                () = fut => {}
                _ = stop_rx => {}
            }
        });
    });
    ready_rx.recv().expect("servers failed to start");
    Servers {
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

fn tcp_listener(addr: &str, port: u16) -> TcpListener {
    let l = std::net::TcpListener::bind((addr, port))
        .unwrap_or_else(|e| panic!("bind {addr}:{port}: {e}"));
    l.set_nonblocking(true).expect("nonblocking");
    TcpListener::from_std(l).expect("tokio listener")
}

/// Reads a request head (up to the blank line) or gives up at EOF.
async fn read_head<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    head
}

fn response(status: u16, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// What one prober run saw.
struct Run {
    started: Instant,
    transitions: Vec<Transition>,
    status: Vec<Status>,
}

impl Run {
    fn status(&self, target: &Target) -> &Status {
        let key = target.key();
        self.status
            .iter()
            .find(|s| s.key == key)
            .expect("status for target")
    }

    fn of(&self, target: &Target) -> Vec<(Health, u64, String)> {
        let key = target.key();
        self.transitions
            .iter()
            .filter(|t| t.key == key)
            .map(|t| (t.to, t.probe, t.reason.to_string()))
            .collect()
    }

    /// The deciding result of probe `n` (1-based) arrives after the start of round n - 1
    /// (the first round starts within one interval of start-up) and before round n ends,
    /// plus the probe's own time and slack.
    fn assert_in_round(&self, t: &Transition) {
        let n = u32::try_from(t.probe).expect("probe count");
        let since = t.at - self.started;
        let lo = INTERVAL * (n - 1);
        let hi = INTERVAL * n + TIMEOUT + SLACK;
        assert!(
            since >= lo && since <= hi,
            "{t}: at {since:?}, expected within [{lo:?}, {hi:?}]"
        );
    }
}

/// Runs a prober for `targets` inside `ns` until `done` holds for the transitions seen
/// (or `max` passes), then for `settle` more to catch any extra transition.
fn probe<D>(ns: &Netns, targets: Vec<Target>, max: Duration, settle: Duration, done: D) -> Run
where
    D: Fn(&[Transition]) -> bool + Send + 'static,
{
    async_in(ns, move || async move {
        let (prober, mut rx) = Prober::spawn();
        let started = Instant::now();
        prober.set_targets(targets);
        let mut transitions = Vec::new();
        let mut end = started + max;
        let mut settling = false;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.recv()).await {
                Ok(Some(t)) => transitions.push(t),
                Ok(None) => panic!("prober stopped"),
                Err(_) => break,
            }
            if !settling && done(&transitions) {
                settling = true;
                end = Instant::now() + settle;
            }
        }
        Run {
            started,
            transitions,
            status: prober.status(),
        }
    })
    .join()
    .expect("prober thread panicked")
}

fn check(
    name: &str,
    kind: CheckKind,
    rise: u32,
    fall: u32,
    initial: InitialHealth,
) -> Arc<HealthCheck> {
    Arc::new(HealthCheck {
        name: name.into(),
        kind,
        port: None,
        interval: INTERVAL,
        timeout: TIMEOUT,
        rise,
        fall,
        jitter: Duration::ZERO,
        initial,
        source: None,
        address: None,
    })
}

fn target(addr: &str, port: u16, check: &Arc<HealthCheck>) -> Target {
    Target {
        address: addr.parse::<IpAddr>().expect("address"),
        port,
        check: Arc::clone(check),
        via_vip: None,
    }
}

fn http(expect_body: Option<&str>) -> HttpCheck {
    HttpCheck {
        method: HttpMethod::Get,
        path: "/healthz".into(),
        host: Some("backend.test".into()),
        expect_status: vec![(200, 299)],
        expect_body: expect_body.map(String::from),
        expect_digest: None,
    }
}

fn up(probe: u64, reason: &str) -> (Health, u64, String) {
    (Health::Up, probe, reason.to_string())
}

fn down(probe: u64, reason: &str) -> (Health, u64, String) {
    (Health::Down, probe, reason.to_string())
}

#[test]
fn http_200_then_503_then_200() {
    let lab = lab();
    // Requests 1-4 get 200, 5-7 get 503, then 200 again; port 8081 always serves a
    // maintenance page whose body lacks the expected text.
    let _servers = serve(&lab.srv, || {
        let flappy = tcp_listener(SERVER, 8080);
        let maint = tcp_listener(SERVER, 8081);
        let count = Arc::new(AtomicU32::new(0));
        async move {
            let flappy = async {
                loop {
                    let (mut s, _) = flappy.accept().await.expect("accept");
                    let count = Arc::clone(&count);
                    tokio::spawn(async move {
                        let head = read_head(&mut s).await;
                        assert!(
                            head.starts_with(b"GET /healthz HTTP/1.1\r\nHost: backend.test\r\n")
                        );
                        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                        let status = if (5..=7).contains(&n) { 503 } else { 200 };
                        let _ = s.write_all(response(status, "all ok").as_bytes()).await;
                    });
                }
            };
            let maint = async {
                loop {
                    let (mut s, _) = maint.accept().await.expect("accept");
                    tokio::spawn(async move {
                        read_head(&mut s).await;
                        let _ = s.write_all(response(200, "maintenance").as_bytes()).await;
                    });
                }
            };
            tokio::join!(flappy, maint);
        }
    });
    let c = check(
        "web",
        CheckKind::Http(http(Some("ok"))),
        2,
        3,
        InitialHealth::Down,
    );
    let m = check(
        "maint",
        CheckKind::Http(http(Some("ok"))),
        2,
        2,
        InitialHealth::Up,
    );
    let (web, maint) = (target(SERVER, 8080, &c), target(SERVER, 8081, &m));
    let run = probe(
        &lab.prb,
        vec![web.clone(), maint.clone()],
        INTERVAL * 14,
        INTERVAL * 3,
        |ts| ts.len() >= 4,
    );
    assert_eq!(
        run.of(&web),
        vec![
            up(2, "status 200"),
            down(7, "status 503"),
            up(9, "status 200")
        ]
    );
    assert_eq!(
        run.of(&maint),
        vec![down(2, "body mismatch: expected \"ok\"")]
    );
    for t in &run.transitions {
        run.assert_in_round(t);
    }
    let w = run.of_at(&web);
    // Rounds between flips are one interval apart: 5 rounds from up to down, 2 back.
    assert_gap(w[0], w[1], 5);
    assert_gap(w[1], w[2], 2);
    let st = run.status(&web);
    assert_eq!(st.state, Health::Up);
    assert_eq!(st.failed, 3);
    assert_eq!(st.last_failure, Some(Failure::Status(503)));
}

impl Run {
    fn of_at(&self, target: &Target) -> Vec<Instant> {
        let key = target.key();
        self.transitions
            .iter()
            .filter(|t| t.key == key)
            .map(|t| t.at)
            .collect()
    }
}

fn assert_gap(a: Instant, b: Instant, rounds: u32) {
    let gap = b - a;
    let lo = (INTERVAL * rounds).saturating_sub(TIMEOUT + SLACK);
    let hi = INTERVAL * rounds + TIMEOUT + SLACK;
    assert!(
        gap >= lo && gap <= hi,
        "gap {gap:?} not ~{rounds} rounds of {INTERVAL:?}"
    );
}

#[test]
fn silent_server_times_out_and_closed_port_is_refused() {
    let lab = lab();
    // Accepts connections and never says a word; the TCP check with send/expect is
    // answered by an echo server.
    let _servers = serve(&lab.srv, || {
        let silent = tcp_listener(SERVER, 9000);
        let echo = tcp_listener(SERVER, 9001);
        async move {
            let silent = async {
                let mut held = Vec::new();
                loop {
                    let (s, _) = silent.accept().await.expect("accept");
                    held.push(s);
                }
            };
            let echo = async {
                loop {
                    let (mut s, peer) = echo.accept().await.expect("accept");
                    tokio::spawn(async move {
                        // Echo the request and say who asked, so the test can see that
                        // the configured source address was used.
                        let mut b = [0u8; 64];
                        if let Ok(n) = s.read(&mut b).await {
                            let mut reply = b[..n].to_vec();
                            reply.extend_from_slice(format!("from {}\r\n", peer.ip()).as_bytes());
                            let _ = s.write_all(&reply).await;
                        }
                    });
                }
            };
            tokio::join!(silent, echo);
        }
    });
    let http_check = check("slow", CheckKind::Http(http(None)), 2, 3, InitialHealth::Up);
    let tcp_check = check(
        "conn",
        CheckKind::Tcp {
            send: None,
            expect: None,
        },
        2,
        2,
        InitialHealth::Up,
    );
    let ping_check = Arc::new(HealthCheck {
        source: Some(SOURCE.parse().expect("source")),
        ..(*check(
            "echo",
            CheckKind::Tcp {
                send: Some("PING\r\n".into()),
                expect: Some(format!("PING\r\nfrom {SOURCE}")),
            },
            2,
            2,
            InitialHealth::Down,
        ))
        .clone()
    });
    // A source address the prober's namespace does not have.
    let bad_source = Arc::new(HealthCheck {
        source: Some("10.201.0.99".parse().expect("source")),
        ..(*tcp_check).clone()
    });
    let slow = target(SERVER, 9000, &http_check);
    let connects = target(SERVER, 9000, &tcp_check);
    let closed = target(SERVER, 9999, &tcp_check);
    let echo = target(SERVER, 9001, &ping_check);
    let unbindable = target(SERVER, 9001, &bad_source);
    let run = probe(
        &lab.prb,
        vec![
            slow.clone(),
            connects.clone(),
            closed.clone(),
            echo.clone(),
            unbindable.clone(),
        ],
        INTERVAL * 10,
        INTERVAL * 3,
        |ts| ts.len() >= 4,
    );
    assert_eq!(run.of(&slow), vec![down(3, "timeout")]);
    let b = run.of(&unbindable);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!((b[0].0, b[0].1), (Health::Down, 2));
    assert!(
        b[0].2.starts_with("cannot bind source 10.201.0.99: "),
        "{}",
        b[0].2
    );
    assert_eq!(run.of(&closed), vec![down(2, "connection refused")]);
    assert_eq!(run.of(&echo), vec![up(2, "connected")]);
    // Accepting without answering is healthy for a plain connect check.
    assert_eq!(run.of(&connects), vec![]);
    assert_eq!(run.status(&connects).failed, 0);
    for t in &run.transitions {
        run.assert_in_round(t);
    }
    let st = run.status(&slow);
    assert!(
        st.started >= 3 && st.failed >= 3 && st.passed == 0,
        "{st:?}"
    );
}

#[test]
fn udp_echo_and_port_unreachable() {
    let lab = lab();
    let _servers = serve(&lab.srv, || {
        let std_sock = std::net::UdpSocket::bind((SERVER, 5353)).expect("bind udp");
        std_sock.set_nonblocking(true).expect("nonblocking");
        let sock = UdpSocket::from_std(std_sock).expect("tokio udp");
        async move {
            let mut b = [0u8; 1500];
            loop {
                let (n, peer) = sock.recv_from(&mut b).await.expect("recv");
                let mut reply = b"echo:".to_vec();
                reply.extend_from_slice(&b[..n]);
                let _ = sock.send_to(&reply, peer).await;
            }
        }
    });
    let matching = check(
        "udp",
        CheckKind::Udp {
            payload: "hello".into(),
            expect: Some("echo:hello".into()),
        },
        3,
        2,
        InitialHealth::Down,
    );
    let wrong = check(
        "udpx",
        CheckKind::Udp {
            payload: "hello".into(),
            expect: Some("pong".into()),
        },
        2,
        2,
        InitialHealth::Up,
    );
    let echo = target(SERVER, 5353, &matching);
    let mismatch = target(SERVER, 5353, &wrong);
    let closed = target(SERVER, 5354, &matching);
    let run = probe(
        &lab.prb,
        vec![echo.clone(), mismatch.clone(), closed.clone()],
        INTERVAL * 10,
        INTERVAL * 3,
        |ts| ts.len() >= 2,
    );
    assert_eq!(run.of(&echo), vec![up(3, "reply received")]);
    assert_eq!(
        run.of(&mismatch),
        vec![down(2, "reply mismatch: expected \"pong\"")]
    );
    // Closed port from initial Down: confirmed down, never up, with the right cause.
    assert_eq!(run.of(&closed), vec![]);
    let st = run.status(&closed);
    assert_eq!((st.state, st.decided, st.passed), (Health::Down, true, 0));
    assert_eq!(st.last_failure, Some(Failure::PortUnreachable));
    for t in &run.transitions {
        run.assert_in_round(t);
    }
}

#[test]
fn https_self_signed_fails_verification_and_passes_without() {
    let lab = lab();
    let cert = rcgen::generate_simple_self_signed(vec!["backend.test".to_string()]).expect("cert");
    let cert_der = cert.cert.der().clone();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(
        rustls::pki_types::PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()),
    );
    let _servers = serve(&lab.srv, move || {
        let listener = tcp_listener(SERVER, 8443);
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert_der], key_der)
        .expect("server cert");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        async move {
            loop {
                let (s, _) = listener.accept().await.expect("accept");
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // Handshakes the verifying client aborts end here.
                    let Ok(mut tls) = acceptor.accept(s).await else {
                        return;
                    };
                    read_head(&mut tls).await;
                    let _ = tls.write_all(response(200, "secure ok").as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        }
    });
    let https = |verify: bool, name: &str, initial| {
        check(
            name,
            CheckKind::Https {
                http: http(Some("secure ok")),
                verify_tls: verify,
                server_name: Some("backend.test".into()),
            },
            2,
            2,
            initial,
        )
    };
    let verified = target(SERVER, 8443, &https(true, "strict", InitialHealth::Up));
    let insecure = target(SERVER, 8443, &https(false, "lenient", InitialHealth::Down));
    let run = probe(
        &lab.prb,
        vec![verified.clone(), insecure.clone()],
        INTERVAL * 10,
        INTERVAL * 3,
        |ts| ts.len() >= 2,
    );
    let v = run.of(&verified);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].0, v[0].1), (Health::Down, 2));
    assert!(
        v[0].2.starts_with("TLS error: ") && v[0].2.contains("certificate"),
        "reason should name the certificate: {}",
        v[0].2
    );
    assert_eq!(run.of(&insecure), vec![up(2, "status 200")]);
    for t in &run.transitions {
        run.assert_in_round(t);
    }
    let st = run.status(&verified);
    assert!(matches!(st.last_failure, Some(Failure::Tls(_))), "{st:?}");
}

#[test]
fn icmp_answered_and_dropped() {
    let lab = lab();
    require_program("nft", "nftables");
    lab.srv.run(&[
        "nft",
        &format!(
            "add table inet hdrop; add chain inet hdrop input {{ type filter hook input priority 0; }}; \
             add rule inet hdrop input ip daddr {SILENT} icmp type echo-request drop"
        ),
    ]);
    let c_up = check("ping", CheckKind::Icmp, 2, 2, InitialHealth::Down);
    let c_down = check("ping", CheckKind::Icmp, 2, 3, InitialHealth::Up);
    let answered = target(SERVER, 80, &c_up);
    // Same check on two ports of one host: one echo probe, not two.
    let answered_other_port = target(SERVER, 443, &c_up);
    let dropped = target(SILENT, 80, &c_down);
    let run = probe(
        &lab.prb,
        vec![answered.clone(), answered_other_port, dropped.clone()],
        INTERVAL * 10,
        INTERVAL * 3,
        |ts| ts.len() >= 2,
    );
    let a = run.of(&answered);
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].0, a[0].1), (Health::Up, 2));
    assert!(a[0].2.starts_with("echo reply in "), "{}", a[0].2);
    assert_eq!(run.of(&dropped), vec![down(3, "timeout")]);
    assert_eq!(run.status.len(), 2, "icmp probes deduplicated across ports");
    assert_eq!(run.status(&answered).users, 2);
    for t in &run.transitions {
        run.assert_in_round(t);
    }
    let reasons: Vec<&Reason> = run.transitions.iter().map(|t| &t.reason).collect();
    assert!(reasons.contains(&&Reason::Failed(Failure::Timeout)));
}

#[test]
fn reload_keeps_running_probes_and_stops_removed_ones() {
    let lab = lab();
    let _servers = serve(&lab.srv, || {
        let a = tcp_listener(SERVER, 7001);
        let b = tcp_listener(SERVER, 7002);
        async move {
            let accept = |l: TcpListener| async move {
                while let Ok((s, _)) = l.accept().await {
                    drop(s);
                }
            };
            tokio::join!(accept(a), accept(b));
        }
    });
    let c = check(
        "conn",
        CheckKind::Tcp {
            send: None,
            expect: None,
        },
        2,
        2,
        InitialHealth::Down,
    );
    let (a, b) = (target(SERVER, 7001, &c), target(SERVER, 7002, &c));
    async_in(&lab.prb, move || async move {
        let (prober, mut rx) = Prober::spawn();
        let first = prober.set_targets([a.clone()]);
        assert_eq!((first.added.len(), first.kept), (1, 0));
        let up_a = tokio::time::timeout(INTERVAL * 4, rx.recv())
            .await
            .expect("a up")
            .expect("channel");
        assert_eq!(
            (up_a.key.clone(), up_a.to, up_a.probe),
            (a.key(), Health::Up, 2)
        );
        let before = prober.status_of(&a).expect("a probed");

        // Same check for a (an equal copy, as a reload builds), plus b.
        let copy = Target {
            check: Arc::new((*a.check).clone()),
            ..a.clone()
        };
        let reload = prober.set_targets([copy, b.clone()]);
        assert_eq!(
            (reload.added, reload.removed.len(), reload.kept),
            (vec![b.key()], 0, 1)
        );
        let up_b = tokio::time::timeout(INTERVAL * 4, rx.recv())
            .await
            .expect("b up")
            .expect("channel");
        assert_eq!(
            (up_b.key.clone(), up_b.to, up_b.probe),
            (b.key(), Health::Up, 2)
        );
        let after = prober.status_of(&a).expect("a still probed");
        assert_eq!(after.state, Health::Up);
        assert_eq!(after.last_change, before.last_change, "a's state was reset");
        assert!(after.passed > before.passed, "a stopped being probed");

        let gone = prober.set_targets([b.clone()]);
        assert_eq!(gone.removed, vec![a.key()]);
        assert!(prober.status_of(&a).is_none());
        let probes_b = prober.status_of(&b).expect("b").started;
        tokio::time::sleep(INTERVAL * 3).await;
        let st = prober.status();
        assert_eq!(st.len(), 1);
        assert!(
            st[0].started >= probes_b + 2,
            "b kept its rhythm: {}",
            st[0].started
        );
        assert!(rx.try_recv().is_err(), "no transition from a reload");
    })
    .join()
    .expect("prober thread");
}

/// Plain connect checks run on pooled sockets that each probe resets and hands to the
/// next, whatever the last one found: established (reset with RST), refused, or still
/// waiting for a SYN-ACK at its deadline. Many rounds over one shared pool must keep
/// every target's verdict exact (a socket carrying a previous probe's error or state
/// would flip a healthy target) and keep the configured source address.
#[test]
fn plain_connects_reuse_sockets_without_carrying_state() {
    let lab = lab();
    require_program("nft", "nftables");
    // SYNs to these ports on SILENT vanish: the probes time out in SYN-SENT.
    lab.srv.run(&[
        "nft",
        &format!(
            "add table inet hhdrop; add chain inet hhdrop input {{ type filter hook input priority 0; }}; \
             add rule inet hhdrop input ip daddr {SILENT} tcp dport 9300-9309 drop"
        ),
    ]);
    let peers = Arc::new(std::sync::Mutex::new(Vec::<IpAddr>::new()));
    let seen = Arc::clone(&peers);
    let _servers = serve(&lab.srv, move || {
        let listeners: Vec<TcpListener> = (9100..9110).map(|p| tcp_listener(SERVER, p)).collect();
        async move {
            let mut accepts = tokio::task::JoinSet::new();
            for l in listeners {
                let seen = Arc::clone(&seen);
                accepts.spawn(async move {
                    while let Ok((s, peer)) = l.accept().await {
                        seen.lock().expect("peers").push(peer.ip());
                        drop(s);
                    }
                });
            }
            while accepts.join_next().await.is_some() {}
        }
    });
    let plain = CheckKind::Tcp {
        send: None,
        expect: None,
    };
    let from_source = |name: &str, initial| {
        Arc::new(HealthCheck {
            source: Some(SOURCE.parse().expect("source")),
            ..(*check(name, plain.clone(), 2, 2, initial)).clone()
        })
    };
    let (rising, falling) = (
        from_source("rise", InitialHealth::Down),
        from_source("fall", InitialHealth::Up),
    );
    let open: Vec<Target> = (9100..9110).map(|p| target(SERVER, p, &rising)).collect();
    let closed: Vec<Target> = (9200..9210).map(|p| target(SERVER, p, &falling)).collect();
    let dropped: Vec<Target> = (9300..9310).map(|p| target(SILENT, p, &falling)).collect();
    let all: Vec<Target> = open
        .iter()
        .chain(&closed)
        .chain(&dropped)
        .cloned()
        .collect();
    let run = probe(&lab.prb, all, INTERVAL * 10, INTERVAL * 4, |ts| {
        ts.len() >= 30
    });
    for t in &open {
        assert_eq!(run.of(t), vec![up(2, "connected")], "{}", t.key());
        let st = run.status(t);
        assert!(st.passed >= 4 && st.failed == 0, "{st:?}");
    }
    for t in &closed {
        assert_eq!(
            run.of(t),
            vec![down(2, "connection refused")],
            "{}",
            t.key()
        );
        let st = run.status(t);
        assert!(st.failed >= 4 && st.passed == 0, "{st:?}");
    }
    for t in &dropped {
        assert_eq!(run.of(t), vec![down(2, "timeout")], "{}", t.key());
        let st = run.status(t);
        assert!(st.failed >= 3 && st.passed == 0, "{st:?}");
        assert_eq!(st.last_failure, Some(Failure::Timeout));
    }
    for t in &run.transitions {
        run.assert_in_round(t);
    }
    let peers = peers.lock().expect("peers");
    assert!(peers.len() >= 40, "accepted {}", peers.len());
    let source: IpAddr = SOURCE.parse().expect("source");
    assert!(peers.iter().all(|p| *p == source), "{peers:?}");
}

/// A gRPC check against tonic's own health service: SERVING passes, NOT_SERVING and an
/// unknown service fail with their names, a change of status is a transition, and a server
/// that does not speak HTTP/2 fails naming what it answered.
#[test]
fn grpc_health_service_of_a_real_grpc_server() {
    use tonic_health::ServingStatus;
    let lab = lab_named("hpgp", "hpgs");
    let (flip_tx, flip_rx) = tokio::sync::oneshot::channel::<()>();
    let _servers = serve(&lab.srv, move || {
        let grpc = tcp_listener(SERVER, 50051);
        let http1 = tcp_listener(SERVER, 8080);
        async move {
            let (reporter, service) = tonic_health::server::health_reporter();
            reporter
                .set_service_status("web", ServingStatus::Serving)
                .await;
            reporter
                .set_service_status("db", ServingStatus::NotServing)
                .await;
            let server = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc));
            let flip = async move {
                let _ = flip_rx.await;
                reporter
                    .set_service_status("web", ServingStatus::NotServing)
                    .await;
                std::future::pending::<()>().await;
            };
            let http1 = async {
                loop {
                    let (mut s, _) = http1.accept().await.expect("accept");
                    tokio::spawn(async move {
                        read_head(&mut s).await;
                        let _ = s.write_all(response(200, "ok").as_bytes()).await;
                    });
                }
            };
            let _ = tokio::join!(server, flip, http1);
        }
    });
    let grpc = |service: &str| {
        CheckKind::Grpc(health::GrpcCheck {
            service: service.into(),
            tls: false,
            verify_tls: true,
            server_name: None,
            authority: None,
        })
    };
    let web = target(
        SERVER,
        50051,
        &check("web", grpc("web"), 1, 2, InitialHealth::Down),
    );
    let db = target(
        SERVER,
        50051,
        &check("db", grpc("db"), 1, 1, InitialHealth::Up),
    );
    let nope = target(
        SERVER,
        50051,
        &check("nope", grpc("nope"), 1, 1, InitialHealth::Up),
    );
    let whole = target(
        SERVER,
        50051,
        &check("whole", grpc(""), 1, 1, InitialHealth::Down),
    );
    let h1 = target(
        SERVER,
        8080,
        &check("h1", grpc(""), 1, 1, InitialHealth::Up),
    );
    let flip = std::sync::Mutex::new(Some(flip_tx));
    let run = probe(
        &lab.prb,
        vec![
            web.clone(),
            db.clone(),
            nope.clone(),
            whole.clone(),
            h1.clone(),
        ],
        INTERVAL * 20,
        INTERVAL * 2,
        move |ts| {
            // Once every target has decided, web's service stops serving.
            if ts.len() >= 5
                && let Some(tx) = flip.lock().expect("lock").take()
            {
                let _ = tx.send(());
            }
            ts.len() >= 6
        },
    );
    let w = run.of(&web);
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(w[0], up(1, "SERVING"));
    assert_eq!(
        (w[1].0, w[1].2.as_str()),
        (Health::Down, "gRPC: NOT_SERVING")
    );
    assert_eq!(run.of(&db), vec![down(1, "gRPC: NOT_SERVING")]);
    assert_eq!(
        run.of(&nope),
        vec![down(
            1,
            "gRPC: grpc-status 5 (NOT_FOUND): service not registered"
        )]
    );
    assert_eq!(run.of(&whole), vec![up(1, "SERVING")]);
    // Its answer, whether the probe failed reading it or writing after the server closed.
    assert_eq!(
        run.of(&h1),
        vec![down(
            1,
            "gRPC: not HTTP/2: the server answered \"HTTP/1.1 200 X\""
        )]
    );
}

/// An agent answering as HAProxy's agents do, one answer per connection: three times
/// `50%`, three times `drain`, three times nothing (it closes), three times `up`, then
/// `down`. Each new answer reaches the prober's consumer once, as a transition carrying it;
/// silence gives no verdict (the probe numbers skip it); `down` takes the backend down.
#[test]
fn agent_answers_are_transitions_and_silence_is_no_verdict() {
    use health::{AgentAdmin, AgentState};
    let lab = lab_named("hpap", "hpas");
    let _servers = serve(&lab.srv, move || {
        let agent = tcp_listener(SERVER, 9777);
        async move {
            let mut n = 0;
            loop {
                let (mut s, _) = agent.accept().await.expect("accept");
                n += 1;
                let answer = match n {
                    1..=3 => "50%\n",
                    4..=6 => "drain\n",
                    7..=9 => "",
                    10..=12 => "up\n",
                    _ => "down #maintenance window\n",
                };
                let _ = s.write_all(answer.as_bytes()).await;
            }
        }
    });
    let c = check(
        "agent",
        CheckKind::Agent { send: None },
        1,
        1,
        InitialHealth::Up,
    );
    let t = target(SERVER, 9777, &c);
    let run = probe(&lab.prb, vec![t.clone()], INTERVAL * 25, INTERVAL, |ts| {
        ts.len() >= 4
    });
    let at = |admin, weight_percent| {
        Some(AgentState {
            admin,
            weight_percent,
        })
    };
    let seen: Vec<(Health, u64, Option<AgentState>)> = run
        .transitions
        .iter()
        .map(|t| (t.to, t.probe, t.agent))
        .collect();
    assert_eq!(
        seen,
        [
            (Health::Up, 1, at(AgentAdmin::Ready, Some(50))),
            (Health::Up, 4, at(AgentAdmin::Drain, None)),
            (Health::Up, 7, at(AgentAdmin::Ready, None)),
            (Health::Down, 10, None),
        ]
    );
    assert_eq!(
        run.transitions[3].reason.to_string(),
        "agent says down: maintenance window"
    );
    assert_eq!(run.status(&t).agent, at(AgentAdmin::Ready, None));
}

/// A check of another host than the backend's (keepalived's `connect_ip`) probes that host
/// and decides for the backend; a list of status codes accepts any of them; a digest
/// passes on the page's exact MD5 and fails naming the one it got.
#[test]
fn another_host_status_lists_and_digests() {
    let lab = lab_named("hpop", "hpos");
    let _servers = serve(&lab.srv, || {
        let l = tcp_listener(SERVER, 8080);
        async move {
            loop {
                let (mut s, _) = l.accept().await.expect("accept");
                tokio::spawn(async move {
                    let head = read_head(&mut s).await;
                    let status = if head.starts_with(b"GET /maint ") {
                        503
                    } else {
                        200
                    };
                    let _ = s.write_all(response(status, "hello\n").as_bytes()).await;
                });
            }
        }
    });
    let mk = |name: &str, path: &str, status: Vec<(u16, u16)>, digest: &str| {
        let mut h = http(None);
        h.path = path.into();
        h.expect_status = status;
        h.expect_digest = Some(digest.into());
        let mut c = (*check(name, CheckKind::Http(h), 1, 1, InitialHealth::Down)).clone();
        c.address = Some(SERVER.parse().expect("literal"));
        c.port = Some(8080);
        Arc::new(c)
    };
    let md5_hello = "b1946ac92492d2347c6235b4d2611184";
    // The backend itself (10.201.0.99) does not exist: only the check's host answers.
    let good = target(
        "10.201.0.99",
        80,
        &mk("good", "/", vec![(200, 200)], md5_hello),
    );
    let maint = target(
        "10.201.0.99",
        80,
        &mk("maint", "/maint", vec![(200, 200), (500, 503)], md5_hello),
    );
    let wrong = target(
        "10.201.0.99",
        80,
        &mk("wrong", "/", vec![(200, 200)], &"0".repeat(32)),
    );
    let mut closed = (*mk("closed", "/", vec![(200, 200)], md5_hello)).clone();
    closed.port = Some(8081);
    closed.initial = InitialHealth::Up;
    let closed = target("10.201.0.99", 80, &Arc::new(closed));
    let run = probe(
        &lab.prb,
        vec![good.clone(), maint.clone(), wrong.clone(), closed.clone()],
        INTERVAL * 8,
        INTERVAL,
        |ts| ts.len() >= 3,
    );
    assert_eq!(good.key().address.to_string(), SERVER);
    assert_eq!(run.of(&good), vec![up(1, "status 200")]);
    assert_eq!(run.of(&maint), vec![up(1, "status 503")]);
    assert!(run.of(&wrong).is_empty(), "starts down, stays down");
    assert_eq!(
        run.status(&wrong).last_failure,
        Some(Failure::Digest(md5_hello.into()))
    );
    assert_eq!(run.of(&closed), vec![down(1, "connection refused")]);
}
