//! Every tokio task of the speaker, and the channels between them. Each peer task owns its
//! state machine, its Adj-RIB-Out (what we want the peer to have) and the write halves of
//! its connections, so no lock guards routing state; only the status snapshot is shared.
//!
//! ```text
//!  Speaker (API) ──Input::Cmd (announce/withdraw/gshut/stop)──┐
//!                                                             │  one unbounded mpsc per peer
//!  listener task ──Input::Accepted(stream) by peer address────┤
//!                                                             ▼
//!  connect task (one per attempt) ──Input::Connected──► peer task ──► Fsm::on_event
//!  reader task (one per connection) ──bounded reads──►   │  │
//!                                                        │  └─ writes: OwnedWriteHalf per conn
//!                                                        └─► Arc<Mutex<PeerStatus>> ◄── Speaker::peers()
//! ```
//! The reads channel is bounded ([`READ_QUEUE`] messages): a peer task that falls behind
//! stops its readers, whose sockets then stop being read, and TCP pushes back on the peer.
//! Timers are deadlines in the peer task's map; its `select!` sleeps until the earliest one.
//! BFD runs in its own task (`bfd/tasks.rs`): a peer task starts its BFD session on
//! Established and receives `Input::BfdDown` when it fails.
//!
//! Graceful restart (RFC 4724), when configured: the OPEN carries the capability with the
//! forwarding-state bit for each negotiated family, and the Restart State bit on the first
//! session after the process started. End-of-RIB then waits for
//! `PeerCmd::InitialRoutesDone` (the embedder has announced what it had), or at most the
//! restart time, so a router in helper mode does not flush our stale routes on an empty
//! RIB.
//!
//! The peer task is split by concern: this file routes its inputs, `actions` carries out
//! the FSM's actions on sockets and timers, `session` opens and starts a session
//! (capabilities, Established, End-of-RIB), `routes` keeps the Adj-RIB-Out in step with the
//! peer (announce, withdraw, route refresh) and counts what it receives.

mod actions;
mod routes;
mod session;

use crate::bfd::tasks::BfdCmd;
use crate::codec::{Notification, cease};
use crate::fsm::{ConnId, Event, Fsm, FsmConfig, Session, State, Timer};
use crate::network::{self, Received, Security};
use crate::speaker::{BfdStatus, PeerConfig, PeerStatus, RouteAttrs, SocketOptions};
use ipnet::IpNet;
use session::capabilities;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// Commands from the API to a peer task.
#[derive(Debug)]
pub(crate) enum PeerCmd {
    Announce(IpNet, RouteAttrs),
    Withdraw(IpNet),
    /// Re-advertise everything with GRACEFUL_SHUTDOWN.
    GracefulShutdown,
    /// Withdraw everything, send Cease with this text, close, end the task.
    Stop(String, oneshot::Sender<()>),
    /// The embedder announced its initial routes: End-of-RIB may go out (graceful restart).
    InitialRoutesDone,
}

/// Decoded messages a peer task's readers may queue before they stop reading.
const READ_QUEUE: usize = 64;

/// What a reader hands its peer task: the connection and what arrived on it.
type Read = (ConnId, Received);

/// Everything a peer task reacts to.
#[derive(Debug)]
enum Input {
    Cmd(PeerCmd),
    Accepted(TcpStream),
    Connected(u64, std::io::Result<TcpStream>),
    /// The BFD session went from Up to Down.
    BfdDown,
}

/// The API's grip on one peer task.
#[derive(Debug)]
pub(crate) struct PeerHandle {
    address: IpAddr,
    tx: mpsc::UnboundedSender<Input>,
    status: Arc<Mutex<PeerStatus>>,
    established_at: Arc<Mutex<Option<Instant>>>,
    task: JoinHandle<()>,
}

impl PeerHandle {
    /// The router's address.
    pub(crate) fn address(&self) -> IpAddr {
        self.address
    }

    /// Queues a command; false when the task is gone.
    pub(crate) fn send(&self, cmd: PeerCmd) -> bool {
        self.tx.send(Input::Cmd(cmd)).is_ok()
    }

    pub(crate) fn status(&self) -> PeerStatus {
        let mut s = lock(&self.status).clone();
        s.uptime = lock(&self.established_at).map(|t| t.elapsed());
        s
    }

    pub(crate) fn abort(&self) {
        self.task.abort();
    }

    pub(crate) async fn join(self) {
        let _ = self.task.await;
    }
}

/// Status locks are held for a few field writes; a poisoned one still holds valid counters.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Accepts connections and hands each to the peer task of its source address.
pub(crate) fn spawn_listener(
    l: TcpListener,
    peers: &[PeerHandle],
    rejected: Arc<AtomicU64>,
) -> JoinHandle<()> {
    let routes: HashMap<IpAddr, mpsc::UnboundedSender<Input>> =
        peers.iter().map(|p| (p.address, p.tx.clone())).collect();
    tokio::spawn(async move {
        loop {
            match network::accept(&l).await {
                Ok((stream, from)) => match routes.get(&from) {
                    Some(tx) => {
                        let _ = tx.send(Input::Accepted(stream));
                    }
                    None => {
                        rejected.fetch_add(1, Ordering::Relaxed);
                        warn!(%from, "bgp: connection from unconfigured address refused");
                    }
                },
                Err(e) => {
                    warn!(error = %e, "bgp: accept failed");
                    // Out of descriptors and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

/// Starts the task for one peer; its session starts at once.
pub(crate) fn spawn_peer(
    asn: u32,
    router_id: Ipv4Addr,
    cfg: PeerConfig,
    opts: Option<Arc<dyn SocketOptions>>,
    bfd: Option<mpsc::UnboundedSender<BfdCmd>>,
) -> PeerHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let (reads_tx, reads_rx) = mpsc::channel(READ_QUEUE);
    let status = Arc::new(Mutex::new(PeerStatus {
        address: cfg.address,
        asn: cfg.asn,
        state: State::Idle,
        established_since: None,
        uptime: None,
        prefixes_announced: 0,
        prefixes_received: 0,
        last_error: None,
        messages_in: 0,
        messages_out: 0,
        decode_errors: 0,
        treat_as_withdraw: 0,
        flaps: 0,
        unsendable_routes: 0,
        bfd: cfg.bfd.map(|_| BfdStatus::default()),
    }));
    let established_at = Arc::new(Mutex::new(None));
    let capabilities = capabilities(asn, &cfg, true);
    let fsm = Fsm::new(FsmConfig {
        local_asn: asn,
        peer_asn: cfg.asn,
        router_id,
        hold_time: cfg.hold_time.as_secs() as u16,
        passive: cfg.passive,
        connect_retry: cfg.connect_retry,
        connect_retry_max: cfg.connect_retry * 8,
        idle_hold: cfg.idle_hold,
        idle_hold_max: cfg.idle_hold * 64,
        capabilities,
    });
    let task = PeerTask {
        local_asn: asn,
        sec: Security::new(&cfg, opts),
        cfg: cfg.clone(),
        fsm,
        timers: HashMap::new(),
        writers: HashMap::new(),
        readers: HashMap::new(),
        connect: None,
        next_id: 0,
        rib: BTreeMap::new(),
        advertised: HashSet::new(),
        received: HashSet::new(),
        session: None,
        gshut: false,
        status: status.clone(),
        established_at: established_at.clone(),
        tx: tx.clone(),
        reads: reads_tx,
        events: VecDeque::new(),
        bfd,
        first_session: true,
        initial_done: cfg.graceful_restart.is_none(),
        eor_due: None,
    };
    let handle = tokio::spawn(task.run(rx, reads_rx));
    PeerHandle {
        address: cfg.address,
        tx,
        status,
        established_at,
        task: handle,
    }
}

struct Up {
    session: Session,
    local: IpAddr,
}

struct PeerTask {
    local_asn: u32,
    /// MD5 key and GTSM for every socket of this peer.
    sec: Security,
    cfg: PeerConfig,
    fsm: Fsm,
    timers: HashMap<Timer, Instant>,
    writers: HashMap<ConnId, OwnedWriteHalf>,
    readers: HashMap<ConnId, JoinHandle<()>>,
    /// The outgoing attempt in flight: its number and task.
    connect: Option<(u64, JoinHandle<()>)>,
    next_id: u64,
    /// Adj-RIB-Out: what the peer should have while the session is up.
    rib: BTreeMap<IpNet, RouteAttrs>,
    /// What this session actually advertised.
    advertised: HashSet<IpNet>,
    /// Prefixes the peer announces to us (counted, never installed).
    received: HashSet<IpNet>,
    session: Option<Up>,
    gshut: bool,
    status: Arc<Mutex<PeerStatus>>,
    established_at: Arc<Mutex<Option<Instant>>>,
    tx: mpsc::UnboundedSender<Input>,
    /// The readers' side of the bounded reads channel.
    reads: mpsc::Sender<Read>,
    /// FSM events produced while carrying out actions (a failed write), fed next.
    events: VecDeque<Event>,
    /// The speaker's BFD task, when any peer uses BFD.
    bfd: Option<mpsc::UnboundedSender<BfdCmd>>,
    /// No session has reached Established yet in this process.
    first_session: bool,
    /// End-of-RIB may be sent (always without graceful restart).
    initial_done: bool,
    /// End-of-RIB still owed on this session, and when it goes out regardless.
    eor_due: Option<Instant>,
}

impl PeerTask {
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Input>,
        mut reads: mpsc::Receiver<Read>,
    ) {
        self.events.push_back(Event::ManualStart);
        self.drain().await;
        loop {
            let next = self.timers.values().copied().chain(self.eor_due).min();
            let sleep = async {
                match next {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                input = rx.recv() => {
                    let Some(input) = input else { break };
                    if self.on_input(input).await {
                        break;
                    }
                }
                // Never closed: the task holds a sender for new connections.
                Some((id, r)) = reads.recv() => self.on_read(id, r),
                () = sleep => {
                    let now = Instant::now();
                    let due: Vec<Timer> = self
                        .timers
                        .iter()
                        .filter(|(_, d)| **d <= now)
                        .map(|(t, _)| *t)
                        .collect();
                    for t in due {
                        self.timers.remove(&t);
                        self.events.push_back(Event::TimerExpired(t));
                    }
                    if self.eor_due.is_some_and(|d| d <= now) {
                        warn!(peer = %self.cfg.address, "bgp: initial routes not done within the restart time; sending End-of-RIB anyway");
                        self.send_end_of_rib().await;
                    }
                }
            }
            self.drain().await;
        }
        self.teardown();
    }

    fn teardown(&mut self) {
        if let Some((_, h)) = self.connect.take() {
            h.abort();
        }
        for (_, h) in self.readers.drain() {
            h.abort();
        }
        self.writers.clear();
    }

    /// Handles one input; true when the task should end.
    async fn on_input(&mut self, input: Input) -> bool {
        match input {
            Input::Cmd(cmd) => return self.on_cmd(cmd).await,
            Input::BfdDown => {
                if self.fsm.state() == State::Established {
                    warn!(peer = %self.cfg.address, "bgp: BFD down, closing the session");
                    if let Some(b) = lock(&self.status).bfd.as_mut() {
                        b.bgp_resets += 1;
                    }
                }
                self.events.push_back(Event::BfdDown);
            }
            Input::Accepted(stream) => {
                if let Some(id) = self.new_conn(stream) {
                    self.events.push_back(Event::TcpAccepted(id));
                }
            }
            Input::Connected(attempt, result) => self.on_connected(attempt, result),
        }
        false
    }

    /// A command from the API; true when the task should end.
    async fn on_cmd(&mut self, cmd: PeerCmd) -> bool {
        match cmd {
            PeerCmd::Announce(p, a) => {
                let changed = self.rib.get(&p) != Some(&a);
                self.rib.insert(p, a);
                if changed && self.fsm.state() == State::Established {
                    self.advertise(&[p]).await;
                }
            }
            PeerCmd::Withdraw(p) => {
                if self.rib.remove(&p).is_some() && self.advertised.contains(&p) {
                    self.withdraw(&[p]).await;
                }
            }
            PeerCmd::GracefulShutdown => {
                self.gshut = true;
                if self.fsm.state() == State::Established {
                    let all: Vec<IpNet> = self.rib.keys().copied().collect();
                    self.advertise(&all).await;
                }
            }
            PeerCmd::InitialRoutesDone => {
                self.initial_done = true;
                if self.eor_due.is_some() {
                    self.send_end_of_rib().await;
                }
            }
            PeerCmd::Stop(msg, done) => {
                self.stop(&msg).await;
                let _ = done.send(());
                return true;
            }
        }
        false
    }

    /// Ends the session for good: BFD AdminDown, withdraw everything, Cease with `msg`.
    async fn stop(&mut self, msg: &str) {
        if let Some(bfd) = &self.bfd {
            // AdminDown first: the router then knows BFD did not fail, and the
            // Cease below is what ends the session (RFC 5882 §3.2).
            let (tx, rx) = oneshot::channel();
            if bfd
                .send(BfdCmd::Stop {
                    peer: self.cfg.address,
                    done: tx,
                })
                .is_ok()
            {
                let _ = tokio::time::timeout(Duration::from_secs(1), rx).await;
            }
        }
        if self.fsm.state() == State::Established {
            let all: Vec<IpNet> = self.advertised.iter().copied().collect();
            self.withdraw(&all).await;
        }
        let n = Notification::cease(cease::ADMINISTRATIVE_SHUTDOWN, msg);
        self.events.push_back(Event::ManualStop(n));
        self.drain().await;
    }

    /// The outcome of connect attempt `attempt`.
    fn on_connected(&mut self, attempt: u64, result: std::io::Result<TcpStream>) {
        if self.connect.as_ref().map(|c| c.0) != Some(attempt) {
            // An attempt the FSM already abandoned; drop its socket.
            return;
        }
        self.connect = None;
        match result {
            Ok(stream) => match self.new_conn(stream) {
                Some(id) => self.events.push_back(Event::TcpConnected(id)),
                None => self.events.push_back(Event::TcpFailed(ConnId(0))),
            },
            Err(e) => {
                debug!(peer = %self.cfg.address, error = %e, "bgp: connect failed");
                self.set_error(format!("connect: {e}"));
                self.events.push_back(Event::TcpFailed(ConnId(0)));
            }
        }
    }

    /// What a connection's reader task delivered.
    fn on_read(&mut self, id: ConnId, r: Received) {
        match r {
            Received::Message(m) => {
                lock(&self.status).messages_in += 1;
                self.events.push_back(Event::Message(id, m));
            }
            Received::Malformed(e) => {
                warn!(peer = %self.cfg.address, error = %e, "bgp: malformed message");
                lock(&self.status).decode_errors += 1;
                self.events.push_back(Event::DecodeError(id, e));
            }
            Received::Closed(e) => {
                if let Some(e) = e {
                    self.set_error(format!("connection: {e}"));
                }
                self.events.push_back(Event::TcpFailed(id));
            }
        }
    }

    fn set_error(&self, e: String) {
        lock(&self.status).last_error = Some(e);
    }

    /// Feeds queued events to the FSM and carries out its actions until nothing is left.
    async fn drain(&mut self) {
        while let Some(ev) = self.events.pop_front() {
            let actions = self.fsm.on_event(ev, Instant::now());
            for a in actions {
                self.act(a).await;
            }
            lock(&self.status).state = self.fsm.state();
        }
    }
}
