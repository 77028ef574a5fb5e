//! What the BGP router tests share that needs the bgp crate (everything else, routers and
//! waits included, is in `lab::testing`): a speaker living in a namespace, on a thread of
//! this process or in a process of its own.
#![allow(dead_code)]

use bgp::{IpNet, PeerConfig, PeerStatus, RouteAttrs, Speaker, SpeakerConfig};
use lab::netns::Netns;
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
        let name = ns.name.clone();
        let thread = std::thread::spawn(move || {
            lab::netns::enter(&name);
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

/// A peer at `addr` in `asn`, reached from `local`, with the timers every router test uses:
/// hold time 3 s, connect retry 1 s.
pub fn peer(addr: &str, asn: u32, local: &str) -> PeerConfig {
    let mut p = PeerConfig::new(addr.parse().expect("peer address"), asn);
    p.local_address = Some(local.parse().expect("local address"));
    p.hold_time = Duration::from_secs(3);
    p.connect_retry = Duration::from_secs(1);
    p
}

/// A speaker in its own process (the `sluice-bgp-speaker` binary of the bgp crate) inside
/// `ns`, so a test can freeze it (SIGSTOP) or kill it like a crashed appliance. Its status
/// lines ("bgp Established bfd up resets 0") are collected with their arrival time. Killed
/// on drop.
pub struct SpeakerProc {
    child: Option<Child>,
    lines: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl SpeakerProc {
    /// Starts `bin` (pass `env!("CARGO_BIN_EXE_sluice-bgp-speaker")`) with `args`.
    pub fn start(ns: &Netns, bin: &str, args: &[&str]) -> SpeakerProc {
        use std::io::BufRead;
        // `ip netns exec` execs the program, so the child's pid is the speaker's.
        let mut child = ns
            .command(bin)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {bin} in {}: {e}", ns.name));
        let out = child.stdout.take().expect("piped stdout");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                println!("speaker: {l}");
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((Instant::now(), l));
            }
        });
        SpeakerProc {
            child: Some(child),
            lines,
        }
    }

    /// Starts `bin` in `s` as the speaker of the /24 `net` (AS 65001 at `net`.2) peering with
    /// the router (AS 65000 at `net`.1), proposing `hold`, announcing `vip`, with `extra`
    /// arguments (BFD, graceful restart).
    pub fn start_on(
        s: &Netns,
        bin: &str,
        net: &str,
        hold: Duration,
        vip: &str,
        extra: &[&str],
    ) -> SpeakerProc {
        let (me, router) = (format!("{net}.2"), format!("{net}.1"));
        let hold = hold.as_secs().to_string();
        let mut args = vec!["--asn", "65001", "--router-id", &me, "--peer", &router];
        args.extend(["--peer-asn", "65000", "--local", &me, "--hold", &hold]);
        args.extend(["--announce", vip]);
        args.extend_from_slice(extra);
        SpeakerProc::start(s, bin, &args)
    }

    /// The first status line after `since` that satisfies `f`, with its arrival time.
    pub fn line_after(
        &self,
        since: Instant,
        f: impl Fn(&str) -> bool,
    ) -> Option<(Instant, String)> {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|(t, l)| *t >= since && f(l))
            .cloned()
    }

    /// Every status line so far.
    pub fn output(&self) -> String {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(_, l)| format!("{l}\n"))
            .collect()
    }

    fn pid(&self) -> nix::unistd::Pid {
        let c = self.child.as_ref().expect("speaker process running");
        nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("pid fits i32"))
    }

    /// SIGSTOP: the process keeps its sockets but sends and answers nothing.
    pub fn freeze(&self) {
        nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGSTOP)
            .expect("SIGSTOP speaker");
    }

    /// SIGCONT after [`SpeakerProc::freeze`].
    pub fn thaw(&self) {
        nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGCONT)
            .expect("SIGCONT speaker");
    }

    /// SIGKILL and reap: the kernel closes its sockets, no NOTIFICATION goes out.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SpeakerProc {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A frozen process must be resumed to die promptly on some kernels.
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        }
        self.kill();
    }
}
