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
//!  reader task (one per connection) ──Input::Read────►   │  │
//!                                                        │  └─ writes: OwnedWriteHalf per conn
//!                                                        └─► Arc<Mutex<PeerStatus>> ◄── Speaker::peers()
//! ```
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

use crate::bfd::tasks::BfdCmd;
use crate::codec::{
    AFI_IPV4, AFI_IPV6, AsSegment, AsSegmentKind, Capability, GRACEFUL_SHUTDOWN, Message, MpReach,
    MpUnreach, Notification, Origin, PathAttr, RouteRefresh, SAFI_UNICAST, Update, cease,
};
use crate::fsm::{Action, ConnId, DownReason, Event, Fsm, FsmConfig, Session, State, Timer};
use crate::network::{self, Received, Security};
use crate::speaker::{BfdStatus, PeerConfig, PeerStatus, RouteAttrs, SocketOptions};
use ipnet::IpNet;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

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

/// Everything a peer task reacts to.
#[derive(Debug)]
enum Input {
    Cmd(PeerCmd),
    Accepted(TcpStream),
    Connected(u64, std::io::Result<TcpStream>),
    Read(ConnId, Received),
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
        events: VecDeque::new(),
        bfd,
        first_session: true,
        initial_done: cfg.graceful_restart.is_none(),
        eor_due: None,
    };
    let handle = tokio::spawn(task.run(rx));
    PeerHandle {
        address: cfg.address,
        tx,
        status,
        established_at,
        task: handle,
    }
}

/// RFC 4724 §3 flags octet per family: forwarding state preserved. A load balancer keeps
/// forwarding through a control-plane restart only if its datapath survives it; when it
/// does not, the router still sends traffic here for up to the restart time: the
/// documented trade-off of enabling graceful restart.
const GR_FORWARDING: u8 = 0x80;

/// The OPEN capabilities for this peer; `first` sets graceful restart's Restart State bit
/// (this process has just started, so the peer need not wait for our End-of-RIB before
/// sending its own).
fn capabilities(asn: u32, cfg: &PeerConfig, first: bool) -> Vec<Capability> {
    let mut capabilities = vec![Capability::FourOctetAs(asn), Capability::RouteRefresh];
    if cfg.ipv4_unicast {
        capabilities.push(Capability::Multiprotocol {
            afi: AFI_IPV4,
            safi: SAFI_UNICAST,
        });
    }
    if cfg.ipv6_unicast {
        capabilities.push(Capability::Multiprotocol {
            afi: AFI_IPV6,
            safi: SAFI_UNICAST,
        });
    }
    if cfg.enhanced_route_refresh {
        capabilities.push(Capability::EnhancedRouteRefresh);
    }
    if let Some(gr) = cfg.graceful_restart {
        let mut families = Vec::new();
        if cfg.ipv4_unicast {
            families.push((AFI_IPV4, SAFI_UNICAST, GR_FORWARDING));
        }
        if cfg.ipv6_unicast {
            families.push((AFI_IPV6, SAFI_UNICAST, GR_FORWARDING));
        }
        capabilities.push(Capability::GracefulRestart {
            restarting: first,
            restart_time: gr.as_secs().min(4095) as u16,
            families,
        });
    }
    capabilities
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
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Input>) {
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

    fn new_conn(&mut self, stream: TcpStream) -> Option<ConnId> {
        if let Err(e) = network::prepare(&stream, &self.sec) {
            self.set_error(format!("socket options: {e}"));
            return None;
        }
        self.next_id += 1;
        let id = ConnId(self.next_id);
        let (r, w) = stream.into_split();
        let tx = self.tx.clone();
        let reader = tokio::spawn(network::read_messages(r, move |item| {
            tx.send(Input::Read(id, item)).is_ok()
        }));
        self.writers.insert(id, w);
        self.readers.insert(id, reader);
        Some(id)
    }

    /// Handles one input; true when the task should end.
    async fn on_input(&mut self, input: Input) -> bool {
        match input {
            Input::Cmd(PeerCmd::Announce(p, a)) => {
                let changed = self.rib.get(&p) != Some(&a);
                self.rib.insert(p, a);
                if changed && self.fsm.state() == State::Established {
                    self.advertise(&[p]).await;
                }
            }
            Input::Cmd(PeerCmd::Withdraw(p)) => {
                if self.rib.remove(&p).is_some() && self.advertised.contains(&p) {
                    self.withdraw(&[p]).await;
                }
            }
            Input::Cmd(PeerCmd::GracefulShutdown) => {
                self.gshut = true;
                if self.fsm.state() == State::Established {
                    let all: Vec<IpNet> = self.rib.keys().copied().collect();
                    self.advertise(&all).await;
                }
            }
            Input::Cmd(PeerCmd::InitialRoutesDone) => {
                self.initial_done = true;
                if self.eor_due.is_some() {
                    self.send_end_of_rib().await;
                }
            }
            Input::BfdDown => {
                if self.fsm.state() == State::Established {
                    warn!(peer = %self.cfg.address, "bgp: BFD down, closing the session");
                    if let Some(b) = lock(&self.status).bfd.as_mut() {
                        b.bgp_resets += 1;
                    }
                }
                self.events.push_back(Event::BfdDown);
            }
            Input::Cmd(PeerCmd::Stop(msg, done)) => {
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
                let n = Notification::cease(cease::ADMINISTRATIVE_SHUTDOWN, &msg);
                self.events.push_back(Event::ManualStop(n));
                self.drain().await;
                let _ = done.send(());
                return true;
            }
            Input::Accepted(stream) => {
                if let Some(id) = self.new_conn(stream) {
                    self.events.push_back(Event::TcpAccepted(id));
                }
            }
            Input::Connected(attempt, result) => {
                if self.connect.as_ref().map(|c| c.0) != Some(attempt) {
                    // An attempt the FSM already abandoned; drop its socket.
                    return false;
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
            Input::Read(id, Received::Message(m)) => {
                lock(&self.status).messages_in += 1;
                self.events.push_back(Event::Message(id, m));
            }
            Input::Read(id, Received::Malformed(e)) => {
                warn!(peer = %self.cfg.address, error = %e, "bgp: malformed message");
                lock(&self.status).decode_errors += 1;
                self.events.push_back(Event::DecodeError(id, e));
            }
            Input::Read(id, Received::Closed(e)) => {
                if let Some(e) = e {
                    self.set_error(format!("connection: {e}"));
                }
                self.events.push_back(Event::TcpFailed(id));
            }
        }
        false
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

    async fn act(&mut self, a: Action) {
        match a {
            Action::Connect => {
                self.next_id += 1;
                let attempt = self.next_id;
                let tx = self.tx.clone();
                let remote = SocketAddr::new(self.cfg.address, self.cfg.port);
                let (local, sec) = (self.cfg.local_address, self.sec.clone());
                let h = tokio::spawn(async move {
                    let r = network::connect(remote, local, sec).await;
                    let _ = tx.send(Input::Connected(attempt, r));
                });
                self.connect = Some((attempt, h));
            }
            Action::AbortConnect => {
                if let Some((_, h)) = self.connect.take() {
                    h.abort();
                }
            }
            Action::Send(id, m) => self.send(id, &m).await,
            Action::Close(id) => {
                if let Some(h) = self.readers.remove(&id) {
                    h.abort();
                }
                if let Some(w) = self.writers.remove(&id) {
                    network::close(w).await;
                }
            }
            Action::SetTimer(t, Some(d)) => {
                self.timers.insert(t, d);
            }
            Action::SetTimer(t, None) => {
                self.timers.remove(&t);
            }
            Action::Established(session) => self.on_established(session).await,
            Action::Down {
                reason,
                established,
            } => {
                if established {
                    info!(peer = %self.cfg.address, %reason, "bgp: session down");
                } else {
                    debug!(peer = %self.cfg.address, %reason, "bgp: session attempt failed");
                }
                self.session = None;
                self.eor_due = None;
                self.advertised.clear();
                self.received.clear();
                *lock(&self.established_at) = None;
                let mut s = lock(&self.status);
                if established {
                    s.flaps += 1;
                }
                if reason != DownReason::Stopped {
                    s.last_error = Some(reason.to_string());
                }
                s.established_since = None;
                s.prefixes_announced = 0;
                s.prefixes_received = 0;
            }
            Action::UpdateReceived(u) => self.on_update(u),
            Action::RouteRefreshRequested(r) => self.on_route_refresh(r).await,
        }
    }

    async fn send(&mut self, id: ConnId, m: &Message) {
        let Some(w) = self.writers.get_mut(&id) else {
            return;
        };
        let bytes = m.encode();
        match network::write(w, &bytes).await {
            Ok(()) => lock(&self.status).messages_out += 1,
            Err(e) => {
                self.set_error(format!("send {}: {e}", m.kind()));
                self.events.push_back(Event::TcpFailed(id));
            }
        }
    }

    async fn on_established(&mut self, session: Session) {
        let Some(local) = self
            .writers
            .get(&session.conn)
            .and_then(|w| w.local_addr().ok())
            .map(|a| a.ip().to_canonical())
        else {
            return;
        };
        info!(peer = %self.cfg.address, hold = session.hold_time, "bgp: session established");
        {
            let mut s = lock(&self.status);
            s.established_since = Some(SystemTime::now());
            s.last_error = None;
        }
        *lock(&self.established_at) = Some(Instant::now());
        self.session = Some(Up { session, local });
        if self.first_session {
            self.first_session = false;
            // Later sessions of this process are not restarts: clear the R bit.
            self.fsm
                .set_capabilities(capabilities(self.local_asn, &self.cfg, false));
        }
        if let (Some(bfd), Some(cfg)) = (&self.bfd, self.cfg.bfd) {
            let tx = self.tx.clone();
            let _ = bfd.send(BfdCmd::Start {
                peer: self.cfg.address,
                local,
                cfg,
                status: self.status.clone(),
                notify: Box::new(move || tx.send(Input::BfdDown).is_ok()),
            });
        }
        let all: Vec<IpNet> = self.rib.keys().copied().collect();
        self.advertise(&all).await;
        self.eor_due = Some(Instant::now() + self.cfg.graceful_restart.unwrap_or_default());
        if self.initial_done {
            self.send_end_of_rib().await;
        }
    }

    /// End-of-RIB (RFC 4724 §2) for every negotiated family, once per session.
    async fn send_end_of_rib(&mut self) {
        if self.eor_due.take().is_none() {
            return;
        }
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let mut eors = Vec::new();
        if up.session.family(AFI_IPV4) {
            eors.push(Update::default());
        }
        if up.session.family(AFI_IPV6) {
            eors.push(Update {
                attrs: vec![PathAttr::MpUnreach(MpUnreach {
                    afi: AFI_IPV6,
                    withdrawn: vec![],
                })],
                ..Update::default()
            });
        }
        for u in eors {
            self.send(conn, &Message::Update(u)).await;
        }
    }

    /// Path attributes for `prefix` on this session, or why it cannot be sent.
    fn build(&self, up: &Up, prefix: &IpNet, a: &RouteAttrs) -> Result<Update, String> {
        let ibgp = self.cfg.asn == self.local_asn;
        let afi = if prefix.addr().is_ipv4() {
            AFI_IPV4
        } else {
            AFI_IPV6
        };
        if !up.session.family(afi) {
            return Err(format!("{prefix}: address family not negotiated"));
        }
        let mut attrs = vec![
            PathAttr::Origin(Origin::Igp),
            PathAttr::AsPath(if ibgp {
                vec![]
            } else {
                vec![AsSegment {
                    kind: AsSegmentKind::Sequence,
                    asns: vec![self.local_asn],
                }]
            }),
        ];
        let mut update = Update::default();
        match prefix {
            IpNet::V4(p) => {
                let nh = match (a.next_hop, self.cfg.next_hop_v4, up.local) {
                    (Some(IpAddr::V4(n)), _, _) | (_, Some(n), _) | (_, _, IpAddr::V4(n)) => n,
                    _ => return Err(format!("{prefix}: no IPv4 next hop on an IPv6 session")),
                };
                attrs.push(PathAttr::NextHop(nh));
                update.nlri.push(*p);
            }
            IpNet::V6(_) => {
                let nh = match (a.next_hop, self.cfg.next_hop_v6, up.local) {
                    (Some(IpAddr::V6(n)), _, _) | (_, Some(n), _) | (_, _, IpAddr::V6(n)) => n,
                    _ => return Err(format!("{prefix}: no IPv6 next hop on an IPv4 session")),
                };
                attrs.push(PathAttr::MpReach(MpReach {
                    next_hops: vec![IpAddr::V6(nh)],
                    nlri: vec![*prefix],
                    afi: AFI_IPV6,
                }));
            }
        }
        if let Some(m) = a.med {
            attrs.push(PathAttr::Med(m));
        }
        if ibgp {
            // RFC 8326 §4: also lower LOCAL_PREF inside the AS during graceful shutdown.
            let lp = if self.gshut {
                0
            } else {
                a.local_pref.unwrap_or(100)
            };
            attrs.push(PathAttr::LocalPref(lp));
        }
        let mut communities = a.communities.clone();
        if self.gshut && !communities.contains(&GRACEFUL_SHUTDOWN) {
            communities.push(GRACEFUL_SHUTDOWN);
        }
        if !communities.is_empty() {
            attrs.push(PathAttr::Communities(communities));
        }
        if !a.large_communities.is_empty() {
            attrs.push(PathAttr::LargeCommunities(a.large_communities.clone()));
        }
        update.attrs = attrs;
        Ok(update)
    }

    async fn advertise(&mut self, prefixes: &[IpNet]) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let mut updates = Vec::new();
        for p in prefixes {
            let Some(a) = self.rib.get(p) else { continue };
            match self.build(up, p, a) {
                Ok(u) => updates.push((*p, u)),
                Err(e) => {
                    warn!(peer = %self.cfg.address, "bgp: cannot announce {e}");
                    let mut s = lock(&self.status);
                    s.unsendable_routes += 1;
                    s.last_error = Some(format!("cannot announce {e}"));
                }
            }
        }
        for (p, u) in updates {
            self.send(conn, &Message::Update(u)).await;
            self.advertised.insert(p);
        }
        lock(&self.status).prefixes_announced = self.advertised.len();
    }

    async fn withdraw(&mut self, prefixes: &[IpNet]) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let mut u = Update::default();
        let mut v6 = Vec::new();
        for p in prefixes {
            if !self.advertised.remove(p) {
                continue;
            }
            match p {
                IpNet::V4(p4) => u.withdrawn.push(*p4),
                IpNet::V6(_) => v6.push(*p),
            }
        }
        if !v6.is_empty() {
            u.attrs.push(PathAttr::MpUnreach(MpUnreach {
                afi: AFI_IPV6,
                withdrawn: v6,
            }));
        }
        if !u.withdrawn.is_empty() || !u.attrs.is_empty() {
            // Withdrawals are 5 (IPv4) or 17 (IPv6) octets each: chunk well under 4096.
            for chunk in split_withdrawals(u) {
                self.send(conn, &Message::Update(chunk)).await;
            }
        }
        lock(&self.status).prefixes_announced = self.advertised.len();
    }

    fn on_update(&mut self, u: Update) {
        if let Some(cause) = &u.withdraw_cause {
            warn!(peer = %self.cfg.address, %cause, "bgp: UPDATE treated as withdraw (RFC 7606)");
            lock(&self.status).treat_as_withdraw += 1;
        }
        for p in u.withdrawn_all() {
            self.received.remove(&p);
        }
        let announced = u.announced();
        if !announced.is_empty() {
            debug!(peer = %self.cfg.address, ?announced, "bgp: routes received (not installed)");
        }
        self.received.extend(announced);
        lock(&self.status).prefixes_received = self.received.len();
    }

    async fn on_route_refresh(&mut self, r: RouteRefresh) {
        let Some(up) = &self.session else { return };
        let conn = up.session.conn;
        let enhanced = up.session.both(&Capability::EnhancedRouteRefresh);
        if r.safi != SAFI_UNICAST || !matches!(r.afi, AFI_IPV4 | AFI_IPV6) || r.subtype != 0 {
            return;
        }
        let marker = |subtype| {
            Message::RouteRefresh(RouteRefresh {
                afi: r.afi,
                subtype,
                safi: SAFI_UNICAST,
            })
        };
        if enhanced {
            self.send(conn, &marker(1)).await;
        }
        let family: Vec<IpNet> = self
            .rib
            .keys()
            .filter(|p| p.addr().is_ipv4() == (r.afi == AFI_IPV4))
            .copied()
            .collect();
        self.advertise(&family).await;
        if enhanced {
            self.send(conn, &marker(2)).await;
        }
    }
}

/// Splits a withdraw-only UPDATE into pieces that each fit a 4096-octet message.
fn split_withdrawals(u: Update) -> Vec<Update> {
    const PER_MESSAGE: usize = 200;
    let mut out = Vec::new();
    for c in u.withdrawn.chunks(PER_MESSAGE) {
        out.push(Update {
            withdrawn: c.to_vec(),
            ..Update::default()
        });
    }
    for a in u.attrs {
        if let PathAttr::MpUnreach(m) = a {
            for c in m.withdrawn.chunks(PER_MESSAGE) {
                out.push(Update {
                    attrs: vec![PathAttr::MpUnreach(MpUnreach {
                        afi: m.afi,
                        withdrawn: c.to_vec(),
                    })],
                    ..Update::default()
                });
            }
        }
    }
    out
}
