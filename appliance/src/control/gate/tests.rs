//! The TCP API's front door on loopback: clients without the token hold no slot, the
//! pending caps and deadline, TLS with `api::Client` (CA file and pin).

use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::*;
use crate::control::api::with_token_for_tests as app_with_token;
use crate::control::serve::Limits;

const TOKEN: &str = "0123456789abcdef-gate-token";

/// A gate on a loopback port with `slots` slots; returns its address and the shared
/// state (for its counters).
async fn start(
    slots: usize,
    pre: PreAuth,
    tls: Option<TlsAcceptor>,
) -> (SocketAddr, Arc<Shared>, tokio::task::JoinHandle<()>) {
    let shared = Arc::new(crate::control::metrics::tests::shared());
    shared.counters.api_errors.store(0, Ordering::Relaxed);
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let gate = Gate {
        token: Arc::new(TOKEN.into()),
        tls,
    };
    let app = app_with_token(Arc::clone(&shared), Arc::clone(&gate.token));
    let limits = Limits {
        max_connections: slots,
        ..Limits::DEFAULT
    };
    let task = tokio::spawn(serve(l, app, gate, limits, pre, Arc::clone(&shared)));
    (addr, shared, task)
}

/// A connection from `source` (any 127/8 address is this host's).
async fn connect_from(source: [u8; 4], to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::from((source, 0))).expect("bind source");
    s.connect(to).await.expect("connect")
}

/// Sends a keep-alive request without a token every `every` until `until`; returns the
/// status lines read (one per answered request) when the server closes or time is up.
async fn pester(mut c: TcpStream, every: Duration, until: Instant) -> Vec<String> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4096];
    while Instant::now() < until {
        if c.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .is_err()
        {
            break;
        }
        match tokio::time::timeout(Duration::from_secs(2), c.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                let text = String::from_utf8_lossy(&buf[..n]);
                seen.push(text.lines().next().unwrap_or_default().to_string());
            }
            _ => break,
        }
        tokio::time::sleep(every).await;
    }
    seen
}

fn client(addr: SocketAddr, tls: Option<api::Tls>) -> api::Client {
    api::Client::new(api::Endpoint::Tcp {
        addr: addr.to_string(),
        token: TOKEN.into(),
        tls,
    })
    .with_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn hd_clients_without_the_token_hold_no_slot_and_the_operator_is_served() {
    let (addr, shared, task) = start(2, PreAuth::DEFAULT, None).await;
    let until = Instant::now() + Duration::from_secs(3);
    // 24 clients from 6 addresses ask without a token every 200 ms for 3 s: with slots
    // taken at accept they would hold both for as long as they keep asking.
    let pests: Vec<_> = (0..24u8)
        .map(|i| {
            tokio::spawn(async move {
                let c = connect_from([127, 0, 0, 10 + i % 6], addr).await;
                pester(c, Duration::from_millis(200), until).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = client(addr, None);
    let mut served = 0;
    while Instant::now() < until {
        let s = c
            .status()
            .await
            .unwrap_or_else(|e| panic!("the operator was refused: {e}"));
        assert_eq!(s.appliance, "lb1");
        served += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for p in pests {
        let seen = p.await.expect("pest");
        assert_eq!(seen.len(), 1, "one answer, then closed: {seen:?}");
        assert!(seen[0].starts_with("HTTP/1.1 401"), "{seen:?}");
    }
    let c = shared.counters.listeners.of(Which::Tcp);
    assert!(served >= 10, "served {served}");
    assert_eq!(c.unauthorized.load(Ordering::Relaxed), 24);
    assert_eq!(c.refused.load(Ordering::Relaxed), 0);
    assert_eq!(
        shared.counters.api_errors.load(Ordering::Relaxed),
        24,
        "every 401 is an API error"
    );
    task.abort();
}

#[tokio::test]
async fn hd_the_same_clients_starve_a_listener_that_takes_a_slot_at_accept() {
    // What the TCP API did before the gate: the unix socket's way, token checked by the
    // router once the connection holds a slot. The test above would fail there.
    let shared = Arc::new(crate::control::metrics::tests::shared());
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let app = app_with_token(Arc::clone(&shared), Arc::new(TOKEN.into()));
    let limits = Limits {
        max_connections: 2,
        ..Limits::DEFAULT
    };
    let stats = Arc::clone(&shared.counters.listeners);
    let task = tokio::spawn(super::super::serve::serve(
        l,
        app,
        limits,
        stats,
        Which::Tcp,
    ));
    let until = Instant::now() + Duration::from_secs(2);
    let pests: Vec<_> = (0..2u8)
        .map(|i| {
            tokio::spawn(async move {
                let c = connect_from([127, 0, 0, 20 + i], addr).await;
                pester(c, Duration::from_millis(200), until).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = client(addr, None).status().await.expect_err("starved");
    assert!(matches!(e, api::ClientError::Http(_)), "{e}");
    for p in pests {
        assert!(
            p.await.expect("pest").len() > 3,
            "the pests kept their slots"
        );
    }
    task.abort();
}

#[tokio::test]
async fn hd_pending_connections_are_capped_per_source_and_time_out() {
    let pre = PreAuth {
        pending: 64,
        per_source: 3,
        deadline: Duration::from_millis(700),
    };
    let (addr, shared, task) = start(4, pre, None).await;
    // Three silent connections from one address fill its share; a fourth is closed at
    // once, while another address is served.
    let mut silent = Vec::new();
    for _ in 0..3 {
        silent.push(connect_from([127, 0, 0, 30], addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut fourth = connect_from([127, 0, 0, 30], addr).await;
    let mut b = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_millis(500), fourth.read(&mut b))
        .await
        .expect("closed at once")
        .unwrap_or(0);
    assert_eq!(n, 0);
    client(addr, None)
        .status()
        .await
        .expect("another source is served");
    // The silent ones are closed at the deadline and counted.
    for mut s in silent {
        let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut b))
            .await
            .expect("closed by the deadline")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
    let c = shared.counters.listeners.of(Which::Tcp);
    assert_eq!(c.refused.load(Ordering::Relaxed), 1);
    assert_eq!(c.timed_out.load(Ordering::Relaxed), 3);
    // Its share is back: the address is served again.
    let s = connect_from([127, 0, 0, 30], addr).await;
    drop(s);
    task.abort();
}

/// A self-signed certificate for 127.0.0.1, written as PEM files under a scratch dir.
fn cert(tag: &str) -> (crate::config::ApiTls, Vec<u8>, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("hd-gate-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "lb1.example".into()])
        .expect("cert");
    let tls = crate::config::ApiTls {
        cert: dir.join("api.pem"),
        key: dir.join("api.key"),
    };
    std::fs::write(&tls.cert, c.cert.pem()).expect("cert");
    std::fs::write(&tls.key, c.signing_key.serialize_pem()).expect("key");
    std::fs::set_permissions(&tls.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (tls, c.cert.der().to_vec(), dir)
}

#[tokio::test]
async fn hd_tls_with_the_ca_file_or_the_pin_and_nothing_in_clear() {
    use sha2::Digest;
    let (tls, der, dir) = cert("tls");
    let (addr, shared, task) = start(4, PreAuth::DEFAULT, Some(acceptor(&tls).expect("tls"))).await;
    let by_ca = api::Tls {
        server_name: "127.0.0.1".into(),
        trust: api::Trust::Ca(tls.cert.clone()),
    };
    let s = client(addr, Some(by_ca))
        .status()
        .await
        .expect("TLS by CA file");
    assert_eq!(s.appliance, "lb1");
    let pin: [u8; 32] = sha2::Sha256::digest(&der).into();
    let by_pin = api::Tls {
        server_name: "anything.invalid".into(),
        trust: api::Trust::Pin(pin),
    };
    client(addr, Some(by_pin))
        .status()
        .await
        .expect("TLS by pin");
    let wrong = api::Tls {
        server_name: "127.0.0.1".into(),
        trust: api::Trust::Pin([7; 32]),
    };
    let e = client(addr, Some(wrong))
        .status()
        .await
        .expect_err("wrong pin");
    assert!(
        e.to_string().contains("TLS with the appliance failed"),
        "{e}"
    );
    // Plain HTTP to the TLS port: no answer in clear, counted.
    let e = client(addr, None).status().await.expect_err("plain");
    assert!(!matches!(e, api::ClientError::Api { .. }), "{e}");
    let c = shared.counters.listeners.of(Which::Tcp);
    assert!(
        c.unauthorized.load(Ordering::Relaxed) >= 2,
        "wrong pin and plain counted"
    );
    // The key must be root's alone.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tls.key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let e = acceptor(&tls).err().expect("0644 key refused");
    assert!(
        e.to_string().contains("api.tls_key") && e.to_string().contains("chmod 600"),
        "{e}"
    );
    task.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_token_is_read_from_the_first_request_head() {
    assert_eq!(bearer(b"GET / HTTP/1.1\r\nHost: x\r\n"), Head::Partial);
    assert_eq!(bearer(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Head::NoToken);
    assert_eq!(
        bearer(b"GET / HTTP/1.1\r\nauthorization: Bearer abc\r\n\r\nrest"),
        Head::Token(b"abc".to_vec())
    );
    assert_eq!(
        bearer(b"GET / HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n"),
        Head::NoToken
    );
    assert_eq!(bearer(b"\x16\x03\x01\x02\x00\x01\x00"), Head::NotHttp);
}
