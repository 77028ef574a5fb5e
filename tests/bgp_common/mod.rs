//! BGP test helpers shared by the router tests: a speaker living in a namespace, BIRD
//! instances with their own config and control socket, and bounded waits.
#![allow(dead_code)]

use bgp::{IpNet, PeerStatus, RouteAttrs, Speaker, SpeakerConfig};
use lab::netns::{Netns, require_program};
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
        let p = std::env::temp_dir().join(format!("{}-{}", tag, lab::netns::unique("d")));
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
    daemon: Daemon,
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
            daemon,
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

    /// The control socket path (for `birdc -s` from another thread).
    pub fn sock(&self) -> &str {
        &self.sock
    }

    /// SIGSTOP (`stop = true`) or SIGCONT the daemon: a router that hangs.
    pub fn freeze(&self, stop: bool) {
        let pid = nix::unistd::Pid::from_raw(self.daemon.0.id() as i32);
        let sig = if stop {
            nix::sys::signal::Signal::SIGSTOP
        } else {
            nix::sys::signal::Signal::SIGCONT
        };
        nix::sys::signal::kill(pid, sig).expect("signal bird");
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

/// Polls `f` every 20 ms (fine enough to time failover) until it returns true or `limit`
/// passes; returns the time it took, or `None` on timeout.
pub fn poll_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `ip route show PREFIX` in `ns` (the kernel's forwarding view).
pub fn kernel_route(ns: &Netns, prefix: &str) -> String {
    let fam = if prefix.contains(':') { "-6" } else { "-4" };
    stdout(ns.output(&["ip", fam, "route", "show", prefix]))
}

/// FRR in `ns`: zebra, bfdd and bgpd with private sockets in a scratch directory.
pub struct Frr<'a> {
    ns: &'a Netns,
    vty: String,
    _daemons: Vec<Daemon>,
    _dir: TempDir,
}

impl<'a> Frr<'a> {
    /// Starts the daemons; `bgpd_conf` and `bfdd_conf` are whole config files.
    pub fn start(ns: &'a Netns, bgpd_conf: &str, bfdd_conf: &str) -> Frr<'a> {
        use std::os::unix::fs::PermissionsExt;
        require_program("vtysh", "frr");
        for d in ["zebra", "bfdd", "bgpd"] {
            let p = format!("/usr/lib/frr/{d}");
            assert!(
                std::path::Path::new(&p).exists(),
                "{p} is missing: install the Debian package frr"
            );
        }
        let dir = TempDir::new("frr");
        // The daemons drop privileges to the frr user, which must create its sockets here.
        std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777))
            .expect("chmod frr dir");
        let vty = dir.path("");
        let zsock = dir.path("zserv.api");
        std::fs::write(dir.path("zebra.conf"), "hostname r\n").expect("zebra.conf");
        std::fs::write(dir.path("bfdd.conf"), bfdd_conf).expect("bfdd.conf");
        std::fs::write(dir.path("bgpd.conf"), bgpd_conf).expect("bgpd.conf");
        let mut daemons = Vec::new();
        for d in ["zebra", "bfdd", "bgpd"] {
            let mut args = vec![
                format!("/usr/lib/frr/{d}"),
                "-f".into(),
                dir.path(&format!("{d}.conf")),
                "-i".into(),
                dir.path(&format!("{d}.pid")),
                "-z".into(),
                zsock.clone(),
                "--vty_socket".into(),
                vty.clone(),
                "-P".into(),
                "0".into(),
            ];
            if d == "bfdd" {
                args.push("--bfdctl".into());
                args.push(dir.path("bfdd.sock"));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            daemons.push(Daemon(ns.spawn(&args)));
            if d == "zebra" {
                wait_for(
                    "zebra socket",
                    Duration::from_secs(10),
                    || std::path::Path::new(&zsock).exists(),
                    || "zebra did not start".to_string(),
                );
            }
        }
        Frr {
            ns,
            vty,
            _daemons: daemons,
            _dir: dir,
        }
    }

    /// One vtysh command's output.
    pub fn show(&self, cmd: &str) -> String {
        stdout(
            self.ns
                .output(&["vtysh", "--vty_socket", &self.vty, "-c", cmd]),
        )
    }
}
