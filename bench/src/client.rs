//! The connection-rate bench's client: threads of non-blocking sockets on epoll (mio), each
//! keeping its share of N connections in flight, each connection one short HTTP exchange
//! (connect, `GET /` with `Connection: close`, read to the server's close, close).
//!
//! It is ours rather than `wrk` so that it records what a connection-rate figure needs and
//! `wrk` does not give: the connect latency of every connection (from the `connect()` call,
//! which sends the SYN, to the socket turning writable, which is the SYN-ACK arriving), the
//! connections that failed or timed out, and nothing else in the way (no HTTP parsing beyond
//! the status line, no keep-alive).

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// A connection that has not finished within this long counts as failed and is replaced: a
/// lost SYN is retransmitted after 1 s, so this still lets a retransmitted one complete.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(3);

/// The request every connection sends.
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";

/// What the client does.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Where it connects (a VIP or a backend).
    pub target: SocketAddr,
    /// Connections in flight, over all threads.
    pub concurrency: usize,
    /// Threads, each with its own epoll instance.
    pub threads: usize,
    /// How long it opens new connections; those in flight at the end are not counted.
    pub duration: Duration,
}

/// What the client saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientResult {
    /// Connections that completed the exchange (a `200` and the server's close).
    pub completed: u64,
    /// Connections refused, reset, timed out, or answered with something other than `200`.
    pub failed: u64,
    /// From the first connect to the end of the last counted connection.
    pub elapsed: Duration,
    /// Connect latency of every completed connection in microseconds, sorted.
    pub connect_us: Vec<u32>,
    /// The first failure seen, for the report.
    pub first_error: Option<String>,
}

impl ClientResult {
    /// Completed connections per second.
    pub fn rate(&self) -> f64 {
        self.completed as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile (0..=100) of the connect latency, in microseconds.
    pub fn connect_percentile(&self, p: f64) -> Option<u32> {
        percentile(&self.connect_us, p)
    }
}

/// The `p`-th percentile (0..=100) of `sorted` by the nearest-rank method: the smallest
/// value with at least `p` percent of the values at or below it. `None` for no values.
pub fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let p = p.clamp(0.0, 100.0);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Where one connection is.
enum Phase {
    /// `connect()` called; waiting for the handshake.
    Connecting,
    /// Connected; `sent` bytes of the request written.
    Sending { sent: usize },
    /// Request sent; reading until the server closes. `head` holds the first bytes.
    Reading { head: Vec<u8> },
}

struct Conn {
    stream: TcpStream,
    started: Instant,
    /// Set when the handshake completed; recorded only if the exchange completes too.
    connect_us: u32,
    phase: Phase,
}

/// One thread's tally.
#[derive(Default)]
struct Tally {
    completed: u64,
    failed: u64,
    connect_us: Vec<u32>,
    first_error: Option<String>,
    last_done: Option<Instant>,
}

impl Tally {
    fn fail(&mut self, why: impl FnOnce() -> String) {
        self.failed += 1;
        if self.first_error.is_none() {
            self.first_error = Some(why());
        }
    }
}

/// Runs the client from the calling thread's network namespace (its threads inherit it).
/// `stop` (Ctrl-C) ends it early; what was counted until then is returned.
pub fn run(options: &ClientOptions, stop: &AtomicBool) -> ClientResult {
    let threads = options.threads.clamp(1, options.concurrency.max(1));
    let t0 = Instant::now();
    let deadline = t0 + options.duration;
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                // Spread the remainder so the threads' shares add up to the concurrency.
                let share =
                    options.concurrency / threads + usize::from(k < options.concurrency % threads);
                s.spawn(move || worker(options.target, share.max(1), deadline, stop))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Tally {
                    first_error: Some("a client thread panicked".into()),
                    ..Tally::default()
                })
            })
            .collect()
    });
    let mut result = ClientResult::default();
    let mut last = t0;
    for t in tallies {
        result.completed += t.completed;
        result.failed += t.failed;
        result.connect_us.extend(t.connect_us);
        if result.first_error.is_none() {
            result.first_error = t.first_error;
        }
        last = last.max(t.last_done.unwrap_or(t0));
    }
    result.connect_us.sort_unstable();
    result.elapsed = last
        .saturating_duration_since(t0)
        .max(Duration::from_millis(1));
    result
}

/// One thread: `share` connections in flight until `deadline`.
fn worker(target: SocketAddr, share: usize, deadline: Instant, stop: &AtomicBool) -> Tally {
    let mut tally = Tally::default();
    let mut poll = match Poll::new() {
        Ok(p) => p,
        Err(e) => {
            tally.fail(|| format!("epoll: {e}"));
            return tally;
        }
    };
    let mut events = Events::with_capacity(share.max(16));
    let mut slots: Vec<Option<Conn>> = (0..share).map(|_| None).collect();
    let mut last_sweep = Instant::now();
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = open(&poll, target, i, &mut tally);
            }
        }
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() != ErrorKind::Interrupted {
                tally.fail(|| format!("epoll_wait: {e}"));
                return tally;
            }
            continue;
        }
        for ev in events.iter() {
            let i = ev.token().0;
            let Some(conn) = slots.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            match advance(conn, &mut tally) {
                Step::Continue => {}
                Step::Done => {
                    // One finished after the deadline is neither counted nor its latency.
                    if Instant::now() <= deadline {
                        tally.completed += 1;
                        tally.connect_us.push(conn.connect_us);
                        tally.last_done = Some(Instant::now());
                    }
                    close(&poll, &mut slots[i]);
                }
                Step::Failed => close(&poll, &mut slots[i]),
            }
        }
        if last_sweep.elapsed() >= Duration::from_millis(100) {
            last_sweep = Instant::now();
            for slot in &mut slots {
                if slot
                    .as_ref()
                    .is_some_and(|c| c.started.elapsed() > CONNECTION_TIMEOUT)
                {
                    tally.fail(|| format!("a connection to {target} took over 3 s"));
                    close(&poll, slot);
                }
            }
        }
    }
    tally
}

fn open(poll: &Poll, target: SocketAddr, i: usize, tally: &mut Tally) -> Option<Conn> {
    let started = Instant::now();
    let mut stream = match TcpStream::connect(target) {
        Ok(s) => s,
        Err(e) => {
            tally.fail(|| format!("connect to {target}: {e}"));
            return None;
        }
    };
    if let Err(e) = poll.registry().register(
        &mut stream,
        Token(i),
        Interest::READABLE | Interest::WRITABLE,
    ) {
        tally.fail(|| format!("epoll_ctl: {e}"));
        return None;
    }
    Some(Conn {
        stream,
        started,
        connect_us: 0,
        phase: Phase::Connecting,
    })
}

fn close(poll: &Poll, slot: &mut Option<Conn>) {
    if let Some(mut c) = slot.take() {
        let _ = poll.registry().deregister(&mut c.stream);
    }
}

enum Step {
    Continue,
    Done,
    Failed,
}

/// Moves `conn` on as far as its socket allows (edge-triggered: until it would block).
fn advance(conn: &mut Conn, tally: &mut Tally) -> Step {
    loop {
        match &mut conn.phase {
            Phase::Connecting => {
                if let Ok(Some(e)) | Err(e) = conn.stream.take_error() {
                    tally.fail(|| format!("connect: {e}"));
                    return Step::Failed;
                }
                match conn.stream.peer_addr() {
                    Ok(_) => {
                        let us = conn.started.elapsed().as_micros();
                        conn.connect_us = u32::try_from(us).unwrap_or(u32::MAX);
                        conn.phase = Phase::Sending { sent: 0 };
                    }
                    Err(e) if e.kind() == ErrorKind::NotConnected => return Step::Continue,
                    Err(e) => {
                        tally.fail(|| format!("connect: {e}"));
                        return Step::Failed;
                    }
                }
            }
            Phase::Sending { sent } => match conn.stream.write(&REQUEST[*sent..]) {
                Ok(n) => {
                    *sent += n;
                    if *sent == REQUEST.len() {
                        conn.phase = Phase::Reading { head: Vec::new() };
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Continue,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return failed_after_connect(tally, e),
            },
            Phase::Reading { head } => {
                let mut buf = [0u8; 4096];
                match conn.stream.read(&mut buf) {
                    Ok(0) => return finish(head, tally),
                    Ok(n) => {
                        let room = 16usize.saturating_sub(head.len()).min(n);
                        head.extend_from_slice(&buf[..room]);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Continue,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return failed_after_connect(tally, e),
                }
            }
        }
    }
}

fn failed_after_connect(tally: &mut Tally, e: std::io::Error) -> Step {
    tally.fail(|| format!("after connecting: {e}"));
    Step::Failed
}

fn finish(head: &[u8], tally: &mut Tally) -> Step {
    if head.starts_with(b"HTTP/1.1 200") || head.starts_with(b"HTTP/1.0 200") {
        Step::Done
    } else {
        let seen = String::from_utf8_lossy(head).into_owned();
        tally.fail(|| format!("the server answered {seen:?}, not 200"));
        Step::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 0.0), Some(7));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1), "p0 is the smallest");
        // Ten values: p50 is the 5th, p99 rounds up to the 10th (the slowest).
        let ten = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000];
        assert_eq!(percentile(&ten, 50.0), Some(5));
        assert_eq!(percentile(&ten, 99.0), Some(1000));
        assert_eq!(percentile(&ten, 90.0), Some(9));
        // Out-of-range requests are clamped, not a panic.
        assert_eq!(percentile(&ten, 250.0), Some(1000));
        assert_eq!(percentile(&ten, -5.0), Some(1));
    }

    /// The client against a local server on loopback: every connection completes, the
    /// latencies are recorded one per completed connection, and a refused port counts as
    /// failures, not completions.
    #[test]
    fn client_counts_exchanges_and_failures_on_loopback() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            for s in listener.incoming().take(20) {
                let mut s = s.expect("accept");
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n");
            }
        });
        let stop = AtomicBool::new(false);
        // Run until the server has served its 20 and stopped accepting.
        let r = run(
            &ClientOptions {
                target: addr,
                concurrency: 2,
                threads: 2,
                duration: Duration::from_secs(2),
            },
            &stop,
        );
        server.join().expect("server");
        assert!(r.completed >= 18, "completed {} of 20: {r:?}", r.completed);
        assert!(r.completed <= 20, "{r:?}");
        assert_eq!(r.connect_us.len() as u64, r.completed);
        assert!(r.connect_us.windows(2).all(|w| w[0] <= w[1]), "sorted");
        assert!(r.rate() > 0.0);

        // Nothing listens on the port now: refusals, no completions.
        let r = run(
            &ClientOptions {
                target: addr,
                concurrency: 1,
                threads: 1,
                duration: Duration::from_millis(200),
            },
            &stop,
        );
        assert_eq!(r.completed, 0, "{r:?}");
        assert!(r.failed > 0, "{r:?}");
        assert!(r.first_error.is_some());
    }
}
