//! The client's view of a VIP: which backend answers new connections, how often, and
//! whether a steady stream of them is served while something changes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::{Lab, http_get};

/// `GET /whoami` through a VIP from the lab's client, each request on a new connection
/// (so each one is scheduled anew), each given `timeout`. It holds the client namespace's
/// name, not the lab, so the test may change the lab between spreads.
pub struct Whoami {
    client: String,
    vip: SocketAddr,
    timeout: Duration,
}

impl Whoami {
    /// Requests to `vip` from `lab`'s client, each given `timeout`.
    pub fn new(lab: &Lab, vip: SocketAddr, timeout: Duration) -> Whoami {
        Whoami {
            client: lab.client.name.clone(),
            vip,
            timeout,
        }
    }

    /// `n` requests: how many each backend answered (by name), and the failures as
    /// `status N` or `error KIND`.
    pub fn spread(&self, n: usize) -> BTreeMap<String, usize> {
        let (client, vip, timeout) = (self.client.clone(), self.vip, self.timeout);
        std::thread::spawn(move || {
            crate::netns::enter(&client);
            let mut seen = BTreeMap::new();
            for _ in 0..n {
                let key = match http_get(vip, "/whoami", timeout) {
                    Ok((200, body)) => String::from_utf8_lossy(&body).into_owned(),
                    Ok((status, _)) => format!("status {status}"),
                    Err(e) => format!("error {}", e.kind()),
                };
                *seen.entry(key).or_insert(0) += 1;
            }
            seen
        })
        .join()
        .unwrap_or_else(|_| panic!("the client's requests to {vip} panicked"))
    }

    /// Waits (at most `limit`, 200 ms between tries) until 30 requests split exactly as
    /// `want`: with round robin, the tables are stable and hold exactly these backends.
    /// Fails the test with the last split and `context()` (the appliance's log).
    pub fn settle_to(&self, want: &[(&str, usize)], limit: Duration, context: &dyn Fn() -> String) {
        let want: BTreeMap<String, usize> = want.iter().map(|(b, n)| (b.to_string(), *n)).collect();
        let deadline = Instant::now() + limit;
        loop {
            let got = self.spread(30);
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: spread {got:?}, expected {want:?}\n{}",
                self.vip,
                context()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// What a [`steady_client`] saw.
#[derive(Debug, Clone, Default)]
pub struct SteadyReport {
    /// Connections started.
    pub attempts: usize,
    /// Requests answered with 200.
    pub answered: usize,
    /// The first failure, as a status or an error.
    pub first_error: Option<String>,
    /// How long each answered request took.
    pub answer_times: Vec<Duration>,
}

impl SteadyReport {
    /// Answered requests that took `at_least` or longer (a lost SYN costs a second).
    pub fn slower_than(&self, at_least: Duration) -> usize {
        self.answer_times.iter().filter(|t| **t >= at_least).count()
    }
}

/// A steady client: a request to `vip` on a new connection every `every` until `stop`,
/// each on its own thread so that a slow one does not delay the next, each given
/// `timeout`. Run it in the client's namespace ([`Lab::from_client`]).
pub fn steady_client(
    vip: SocketAddr,
    every: Duration,
    timeout: Duration,
    stop: Arc<AtomicBool>,
) -> SteadyReport {
    let mut handles = Vec::new();
    let start = Instant::now();
    let mut n = 0u32;
    while !stop.load(Ordering::Relaxed) {
        handles.push(std::thread::spawn(move || {
            let t = Instant::now();
            (http_get(vip, "/whoami", timeout), t.elapsed())
        }));
        n += 1;
        let next = start + every * n;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let mut r = SteadyReport {
        attempts: handles.len(),
        ..SteadyReport::default()
    };
    for h in handles {
        match h.join().expect("client connection thread") {
            (Ok((200, _)), took) => {
                r.answered += 1;
                r.answer_times.push(took);
            }
            (Ok((status, _)), _) => {
                r.first_error.get_or_insert(format!("status {status}"));
            }
            (Err(e), _) => {
                r.first_error.get_or_insert(e.to_string());
            }
        }
    }
    r
}

/// A download of `/blob` in progress ([`crate::slow_download`]); join it for the body.
pub type Download = std::thread::JoinHandle<std::io::Result<Vec<u8>>>;

/// Starts `n` slow downloads of `/blob` through `vip` (`pace` between 8 KB reads, so each
/// lasts seconds) on threads inside `ns`, and waits until every one has its headers, up to
/// `limit` for each; returns them and the backend serving each, in the order the headers
/// came.
pub fn slow_downloads(
    ns: &crate::netns::Netns,
    vip: SocketAddr,
    pace: Duration,
    n: usize,
    limit: Duration,
) -> (Vec<Download>, Vec<String>) {
    slow_downloads_for(ns, vip, pace, Duration::from_secs(30), n, limit)
}

/// [`slow_downloads`] whose downloads give up after `read_timeout` without a byte
/// ([`crate::slow_download_for`]).
pub fn slow_downloads_for(
    ns: &crate::netns::Netns,
    vip: SocketAddr,
    pace: Duration,
    read_timeout: Duration,
    n: usize,
    limit: Duration,
) -> (Vec<Download>, Vec<String>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let downloads = (0..n)
        .map(|_| {
            let tx = tx.clone();
            ns.in_thread(move || crate::slow_download_for(vip, pace, read_timeout, tx))
                .unwrap_or_else(|e| panic!("download thread: {e}"))
        })
        .collect();
    let serving = (0..n)
        .map(|_| {
            rx.recv_timeout(limit)
                .unwrap_or_else(|_| panic!("a download through {vip} never started"))
        })
        .collect();
    (downloads, serving)
}
