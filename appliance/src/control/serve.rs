//! Serving the API's listeners (the unix socket, the TCP API, the metrics port) so that no
//! client can hold the process's descriptors or tasks: each listener takes at most
//! [`Limits::max_connections`] at once (more are accepted and closed at once, counted), a
//! connection must send its request headers within [`Limits::header_read`] (the time between
//! keep-alive requests included), and one that moves no byte either way for
//! [`Limits::idle`] is closed. `axum::serve` has none of the three, so each connection is
//! served by hyper here. The TCP API's connections take a slot only once their first
//! request showed the token (see [`super::gate`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tracing::debug;

/// Which listener a connection came to (the `listener` label of the API metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Socket,
    Tcp,
    Metrics,
}

impl Which {
    /// Every listener, in the order of [`ListenerStats`]' slots.
    pub const ALL: [Which; 3] = [Which::Socket, Which::Tcp, Which::Metrics];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Which::Socket => "socket",
            Which::Tcp => "tcp",
            Which::Metrics => "metrics",
        }
    }
}

/// One listener's connection counters.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections being served now.
    pub open: AtomicU64,
    /// Connections served since start.
    pub accepted: AtomicU64,
    /// Connections closed at once because the listener was at its cap.
    pub refused: AtomicU64,
    /// Connections closed for a header-read or idle timeout (the TCP API's: also for not
    /// completing TLS and a first request within [`super::gate::PreAuth::deadline`]).
    pub timed_out: AtomicU64,
    /// TCP API connections closed before taking a slot: no TLS handshake, or a first
    /// request that was not HTTP or had no or a wrong bearer token.
    pub unauthorized: AtomicU64,
}

/// The counters of every listener, read by the metrics.
#[derive(Debug, Default)]
pub struct ListenerStats([Counters; 3]);

impl ListenerStats {
    /// The counters of `w`.
    pub fn of(&self, w: Which) -> &Counters {
        &self.0[w as usize]
    }
}

/// What a listener allows each client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read: Duration,
    pub idle: Duration,
}

impl Limits {
    /// The limits of the appliance's listeners: far above what an operator's tools and a
    /// Prometheus server use, far below the descriptors the process has.
    pub const DEFAULT: Limits = Limits {
        max_connections: 256,
        header_read: Duration::from_secs(10),
        idle: Duration::from_secs(30),
    };
}

/// Serves `app` on `l` within `limits` until the task is aborted.
pub async fn serve<L: Listener>(
    mut l: L,
    app: Router,
    limits: Limits,
    stats: Arc<ListenerStats>,
    which: Which,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // Errors (EMFILE included) are retried after a pause inside accept().
        let (io, _) = l.accept().await;
        let c = stats.of(which);
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            c.refused.fetch_add(1, Ordering::Relaxed);
            drop(io);
            continue;
        };
        let (app, stats) = (app.clone(), Arc::clone(&stats));
        tokio::spawn(serve_connection(io, app, limits, stats, which, permit));
    }
}

/// Serves one connection that holds `permit` (one of its listener's slots) until it
/// closes or times out; counts it.
pub(super) async fn serve_connection<I>(
    io: I,
    app: Router,
    limits: Limits,
    stats: Arc<ListenerStats>,
    which: Which,
    permit: OwnedSemaphorePermit,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let c = stats.of(which);
    c.accepted.fetch_add(1, Ordering::Relaxed);
    c.open.fetch_add(1, Ordering::Relaxed);
    let io = TokioIo::new(Idle::new(io, limits.idle));
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .serve_connection(io, TowerToHyperService::new(app))
        .await;
    if let Err(e) = served {
        if timed_out(&e) {
            c.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        debug!(listener = which.name(), "api connection closed: {e}");
    }
    c.open.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
}

/// Whether hyper gave up on a connection for one of the two timeouts.
fn timed_out(e: &hyper::Error) -> bool {
    if e.is_timeout() {
        return true;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if s.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
        {
            return true;
        }
        src = s.source();
    }
    false
}

/// A connection that fails with `TimedOut` once no byte moved either way for `idle`.
struct Idle<T> {
    io: T,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<T> Idle<T> {
    fn new(io: T, idle: Duration) -> Idle<T> {
        Idle {
            io,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn progressed(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// Called when the stream is not ready: an error once the deadline passed.
    fn check(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        ready!(self.deadline.as_mut().poll(cx));
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            "no data moved within the idle timeout",
        ))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Idle<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut me.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    me.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => me.check(cx).map(Err),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Idle<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match Pin::new(&mut me.io).poll_write(cx, data) {
            Poll::Ready(r) => {
                if matches!(r, Ok(n) if n > 0) {
                    me.progressed();
                }
                Poll::Ready(r)
            }
            Poll::Pending => me.check(cx).map(Err),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match Pin::new(&mut me.io).poll_flush(cx) {
            Poll::Pending => me.check(cx).map(Err),
            r => r,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_silent_peer_times_out_and_a_talking_one_does_not() {
        let idle_for = Duration::from_millis(300);
        let (a, mut b) = tokio::io::duplex(64);
        let mut idle = Idle::new(a, idle_for);
        let mut buf = [0u8; 4];
        // Past the first deadline, but data is waiting: it is read, and the deadline moves.
        tokio::time::sleep(idle_for * 2).await;
        b.write_all(b"x").await.expect("write");
        assert_eq!(idle.read(&mut buf).await.expect("read"), 1);
        let since = Instant::now();
        let e = idle.read(&mut buf).await.expect_err("silent");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(
            since.elapsed() >= idle_for / 2,
            "timed out before the moved deadline"
        );
    }
}
