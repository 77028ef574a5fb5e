//! `update` from a URL against a scripted HTTP(S) server on loopback: a download streamed
//! into the slot, one that fails or breaks off, a redirect from https to plain http, a
//! server that stalls mid-body, and two updates at once.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::bundle::tests::sha;
use super::tests::{Tree, U, ext4};
use super::*;

/// One step of a scripted answer.
enum Act {
    Send(Vec<u8>),
    /// Tell the test that everything before was sent.
    Notify(mpsc::Sender<()>),
    /// Wait until the test says so (or gives up).
    Wait(mpsc::Receiver<()>),
}

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// Serves one script per connection, in order, on a loopback port: reads the request's
/// headers, then plays the script. Returns the server's base URL.
fn server(tls: Option<Arc<rustls::ServerConfig>>, scripts: Vec<Vec<Act>>) -> (String, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let scheme = if tls.is_some() { "https" } else { "http" };
    std::thread::spawn(move || {
        for (conn, script) in l.incoming().zip(scripts) {
            let tcp = conn.unwrap();
            let mut s: Box<dyn Stream> = match &tls {
                Some(cfg) => {
                    let c = rustls::ServerConnection::new(Arc::clone(cfg)).unwrap();
                    Box::new(rustls::StreamOwned::new(c, tcp))
                }
                None => Box::new(tcp),
            };
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match s.read(&mut b) {
                    Ok(1) => head.push(b[0]),
                    _ => break,
                }
            }
            for act in script {
                match act {
                    Act::Send(bytes) => {
                        let _ = s.write_all(&bytes).and_then(|()| s.flush());
                    }
                    Act::Notify(tx) => {
                        let _ = tx.send(());
                    }
                    Act::Wait(rx) => {
                        let _ = rx.recv_timeout(Duration::from_secs(60));
                    }
                }
            }
        }
    });
    (format!("{scheme}://127.0.0.1:{port}"), port)
}

fn ok_head(len: usize) -> Vec<u8> {
    format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n").into_bytes()
}

fn ok(body: &[u8]) -> Vec<u8> {
    let mut v = ok_head(body.len());
    v.extend_from_slice(body);
    v
}

fn redirect(to: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn update_from_a_url_streams_into_the_slot_and_checks_the_whole_sum() {
    let t = Tree::new("url", "a");
    let root = ext4(8192);
    let b = t.signed(&root);
    let u = Update {
        sha256: Some(sha(&b)),
        tries: 2,
        ..U
    };
    let (base, _) = server(None, vec![vec![Act::Send(ok(&b))]]);
    let url = format!("{base}/sluice-update.tar");
    let said = update(&Source::parse(&url), &u, &t.paths).unwrap();
    assert!(said.contains(&format!("written from {url}")), "{said}");
    assert_eq!(t.entry_names(), ["sluice-a.conf", "sluice-b+2.conf"]);
    assert_eq!(&t.part("b")[..root.len()], &root[..]);

    // The right members under a sum that is not the published one: no entry.
    let t = Tree::new("urlsum", "a");
    let wrong = Update {
        sha256: Some("11".repeat(32)),
        ..U
    };
    let (base, _) = server(None, vec![vec![Act::Send(ok(&t.signed(&root)))]]);
    let e = update(&Source::parse(&format!("{base}/b.tar")), &wrong, &t.paths)
        .expect_err("sum")
        .to_string();
    assert!(e.contains("bundle's sha256") && e.contains("slot b"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
}

#[test]
fn a_failed_or_broken_off_download_writes_no_entry() {
    let t = Tree::new("url404", "a");
    let b = t.signed(&ext4(8192));
    let not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\nno";
    let (base, _) = server(None, vec![vec![Act::Send(not_found.to_vec())]]);
    let e = update(&Source::parse(&format!("{base}/b.tar")), &U, &t.paths)
        .expect_err("404")
        .to_string();
    assert!(e.contains("cannot download") && e.contains("404"), "{e}");
    let mut cut = ok_head(b.len());
    cut.extend_from_slice(&b[..b.len() - 3000]);
    let (base, _) = server(None, vec![vec![Act::Send(cut)]]);
    let e = update(&Source::parse(&format!("{base}/b.tar")), &U, &t.paths)
        .expect_err("cut")
        .to_string();
    assert!(e.contains("reading the bundle"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
    assert_eq!(
        t.esp_files(),
        Vec::<String>::new(),
        "no temporary file left"
    );
    // Nothing listens there any more.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/b.tar", l.local_addr().unwrap());
    drop(l);
    let e = update(&Source::parse(&gone), &U, &t.paths)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("cannot download") && e.contains("untouched"),
        "{e}"
    );
}

/// A TLS server config for 127.0.0.1 and the PEM file of its (self-signed) certificate.
fn tls(t: &Tree) -> (Arc<rustls::ServerConfig>, PathBuf) {
    let c =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let pem = t.file("mirror-ca.pem", c.cert.pem().as_bytes());
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(c.signing_key.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![c.cert.der().clone()], key)
    .unwrap();
    (Arc::new(cfg), pem)
}

#[test]
fn an_https_download_is_not_redirected_to_plain_http() {
    let t = Tree::new("downgrade", "a");
    let b = t.signed(&ext4(8192));
    let (cfg, ca) = tls(&t);
    let (plain, _) = server(None, vec![vec![Act::Send(ok(&b))]]);
    // The mirror sends the first request to plain http, the second to its own https.
    let (secure, _) = server(
        Some(cfg),
        vec![
            vec![Act::Send(redirect(&format!("{plain}/b.tar")))],
            vec![Act::Send(redirect("/moved/b.tar"))],
            vec![Act::Send(ok(&b))],
        ],
    );
    let u = Update {
        download: Download {
            ca: Some(ca),
            ..U.download
        },
        ..U
    };
    let e = update(&Source::parse(&format!("{secure}/b.tar")), &u, &t.paths)
        .expect_err("downgrade")
        .to_string();
    assert!(e.contains("redirects from https to plain http"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
    assert!(t.part("b").iter().all(|&x| x == 0), "slot b untouched");
    // https to https is followed.
    let said =
        update(&Source::parse(&format!("{secure}/b.tar")), &u, &t.paths).expect("https redirect");
    assert!(said.contains("signed by test.pub"), "{said}");
}

#[test]
fn a_download_that_stalls_fails_within_the_idle_timeout() {
    let t = Tree::new("stall", "a");
    let b = t.signed(&ext4(32 << 10));
    let (_hold, release) = mpsc::channel();
    let mut part = ok_head(b.len());
    part.extend_from_slice(&b[..b.len() / 2]);
    let (base, _) = server(None, vec![vec![Act::Send(part), Act::Wait(release)]]);
    let u = Update {
        download: Download {
            idle: Duration::from_millis(800),
            ..U.download
        },
        ..U
    };
    let t0 = Instant::now();
    let e = update(&Source::parse(&format!("{base}/b.tar")), &u, &t.paths)
        .expect_err("stalled")
        .to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        e.contains("reading the bundle") && e.contains("timeout"),
        "{e}"
    );
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
    assert_eq!(
        t.esp_files(),
        Vec::<String>::new(),
        "no temporary file left"
    );
}

#[test]
fn a_second_update_while_one_runs_is_refused() {
    let t = Tree::new("twice", "a");
    let root = ext4(32 << 10);
    let b = t.signed(&root);
    let (sent_tx, sent) = mpsc::channel();
    let (go, wait) = mpsc::channel();
    let half = b.len() / 2;
    let mut first = ok_head(b.len());
    first.extend_from_slice(&b[..half]);
    let (base, _) = server(
        None,
        vec![vec![
            Act::Send(first),
            Act::Notify(sent_tx),
            Act::Wait(wait),
            Act::Send(b[half..].to_vec()),
        ]],
    );
    let url = format!("{base}/b.tar");
    let paths = t.paths.clone();
    let running = std::thread::spawn(move || update(&Source::parse(&url), &U, &paths));
    sent.recv_timeout(Duration::from_secs(30)).unwrap();
    let f = t.file("other.tar", &b);
    let e = update(&Source::File(f), &U, &t.paths)
        .expect_err("busy")
        .to_string();
    assert!(
        e.contains("another `sluice image update` is running"),
        "{e}"
    );
    go.send(()).unwrap();
    let said = running.join().unwrap().expect("the first update");
    assert!(said.contains("written"), "{said}");
    assert_eq!(&t.part("b")[..root.len()], &root[..]);
}
