//! BGP test helpers shared by the router tests: a speaker living in a namespace, BIRD
//! instances with their own config and control socket, and bounded waits.
#![allow(dead_code)]

use super::common::{Netns, require_program};
use bgp::{IpNet, PeerStatus, RouteAttrs, Speaker, SpeakerConfig};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// Commands the test thread sends to a speaker living in another namespace.
pub enum Cmd {
    Announce(IpNet, RouteAttrs),
    Withdraw(IpNet),
    Peers(std::sync::mpsc::Sender<Vec<PeerStatus>>),
    GracefulShutdown(std::sync::mpsc::Sender<()>),
}

/// A speaker running on a dedicated thread that entered `ns` with setns(2), so every
/// socket it opens lives in that namespace. Dropping it drops the runtime (sessions die
/// without NOTIFICATION).
pub struct NsSpeaker {
    tx: Option<tokio::sync::mpsc::UnboundedSender<Cmd>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NsSpeaker {
    pub fn start(ns: &Netns, cfg: SpeakerConfig) -> NsSpeaker {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Cmd>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let path = format!("/run/netns/{}", ns.name);
        let thread = std::thread::spawn(move || {
            let f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("open {path}: {e}")));
                    return;
                }
            };
            if let Err(e) = nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET) {
                let _ = ready_tx.send(Err(format!("setns {path}: {e}")));
                return;
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            rt.block_on(async move {
                let speaker = match Speaker::start(cfg).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                while let Some(cmd) = rx.recv().await {
                    match cmd {
                        Cmd::Announce(p, a) => speaker.announce(p, a).expect("announce"),
                        Cmd::Withdraw(p) => speaker.withdraw(p).expect("withdraw"),
                        Cmd::Peers(reply) => {
                            let _ = reply.send(speaker.peers());
                        }
                        Cmd::GracefulShutdown(done) => {
                            speaker.graceful_shutdown().await;
                            let _ = done.send(());
                            return;
                        }
                    }
                }
            });
        });
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("speaker did not start: {e}"),
            Err(_) => panic!("speaker thread died during start"),
        }
        NsSpeaker {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    pub fn send(&self, c: Cmd) {
        self.tx
            .as_ref()
            .expect("speaker running")
            .send(c)
            .expect("speaker thread gone");
    }

    pub fn announce(&self, p: &str, a: RouteAttrs) {
        self.send(Cmd::Announce(p.parse().expect("prefix"), a));
    }

    pub fn withdraw(&self, p: &str) {
        self.send(Cmd::Withdraw(p.parse().expect("prefix")));
    }

    pub fn peers(&self) -> Vec<PeerStatus> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Cmd::Peers(tx));
        rx.recv_timeout(Duration::from_secs(5))
            .expect("speaker status")
    }

    /// Starts the RFC 8326 shutdown; `wait()` on the result blocks until it finished.
    pub fn graceful_shutdown(&self) -> std::sync::mpsc::Receiver<()> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Cmd::GracefulShutdown(tx));
        rx
    }
}

impl Drop for NsSpeaker {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Polls `f` every 100 ms until it returns true or `limit` passes; on timeout fails with
/// `what` and the router's view from `context`.
pub fn wait_for(
    what: &str,
    limit: Duration,
    mut f: impl FnMut() -> bool,
    context: impl Fn() -> String,
) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "timed out after {limit:?} waiting for {what}\n--- router view ---\n{}",
        context()
    );
}

pub fn stdout(o: std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("{}-{}", tag, super::common::unique("d")));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed on drop (before its namespace goes).
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A BIRD 2 instance in `ns` with its own config and control socket.
pub struct Bird<'a> {
    ns: &'a Netns,
    sock: String,
    _daemon: Daemon,
    _dir: TempDir,
}

impl<'a> Bird<'a> {
    pub fn start(ns: &'a Netns, config: &str) -> Bird<'a> {
        require_program("bird", "bird2");
        require_program("birdc", "bird2");
        let dir = TempDir::new("bird");
        let conf = dir.path("bird.conf");
        let sock = dir.path("bird.ctl");
        std::fs::write(&conf, config).expect("write bird.conf");
        let pid = dir.path("bird.pid");
        let daemon = Daemon(ns.spawn(&["bird", "-f", "-c", &conf, "-s", &sock, "-P", &pid]));
        let b = Bird {
            ns,
            sock,
            _daemon: daemon,
            _dir: dir,
        };
        wait_for(
            "bird control socket",
            Duration::from_secs(10),
            || {
                b.ns.output(&["birdc", "-s", &b.sock, "show", "status"])
                    .status
                    .success()
            },
            || "bird did not start (config error?)".to_string(),
        );
        b
    }

    pub fn cmd(&self, args: &[&str]) -> String {
        let mut full = vec!["birdc", "-s", &self.sock];
        full.extend_from_slice(args);
        stdout(self.ns.output(&full))
    }

    /// BIRD's word for the session state ("Established", "Active", "Connect") of `proto`.
    pub fn bgp_state(&self, proto: &str) -> String {
        let out = self.cmd(&["show", "protocols", "all", proto]);
        out.lines()
            .find_map(|l| l.trim().strip_prefix("BGP state:"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| format!("no BGP state in:\n{out}"))
    }

    pub fn view(&self) -> String {
        format!(
            "{}\n{}",
            self.cmd(&["show", "protocols", "all"]),
            self.cmd(&["show", "route", "all"])
        )
    }
}
