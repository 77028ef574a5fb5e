//! The BFD transport (RFC 5881 single hop): one tokio task per speaker owns every BFD
//! [`Session`], their send sockets and deadlines; one receive task per local address reads
//! port 3784 and hands datagrams over. Peer tasks start a session when their BGP session
//! reaches Established and hear back only "BFD went down".
//!
//! ```text
//!  peer task ──BfdCmd::Start / Stop────────────────┐
//!                                                   │  one unbounded mpsc
//!  rx task (one per local address) ──BfdCmd::Rx─────┤
//!                                                   ▼
//!                              bfd task ──► Session::on_packet / on_timer (pure)
//!                                 │  ├─ send: one connected UdpSocket per session
//!                                 │  └─► Arc<Mutex<PeerStatus>>.bfd ◄── Speaker::peers()
//!                                 └─► peer task: notify() on Up→Down (Input::BfdDown)
//! ```
//! Demultiplexing (RFC 5880 §6.8.6, RFC 5881 §3): by Your Discriminator when nonzero, else
//! by the (source, local) address pair; a session only takes packets from its own peer on
//! its own local address. Packets whose TTL is not 255 are dropped before decoding.

use super::packet::{ControlPacket, State};
use super::session::{Action, Discard, Session, SessionConfig};
use crate::network;
use crate::speaker::{BfdConfig, BfdStatus, PeerStatus};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// Called by the BFD task when a session goes from Up to Down; false when nobody listens.
pub(crate) type Notify = Box<dyn Fn() -> bool + Send>;

/// Inputs of the BFD task.
pub(crate) enum BfdCmd {
    /// Run a session to `peer` from `local` (a no-op when one already runs from there).
    Start {
        peer: IpAddr,
        local: IpAddr,
        cfg: BfdConfig,
        status: Arc<Mutex<PeerStatus>>,
        notify: Notify,
    },
    /// Send AdminDown once and forget the session; `done` fires when the packet is out.
    Stop {
        peer: IpAddr,
        done: oneshot::Sender<()>,
    },
    /// A datagram from a receive task.
    Rx {
        local: IpAddr,
        from: IpAddr,
        ttl: Option<u8>,
        bytes: Vec<u8>,
    },
}

/// The speaker's grip on the BFD task.
#[derive(Debug)]
pub(crate) struct BfdHandle {
    tx: mpsc::UnboundedSender<BfdCmd>,
    unmatched: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl BfdHandle {
    /// A sender for peer tasks.
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<BfdCmd> {
        self.tx.clone()
    }

    /// Packets that matched no session (unknown source, unknown discriminator).
    pub(crate) fn unmatched(&self) -> u64 {
        self.unmatched.load(Ordering::Relaxed)
    }

    pub(crate) fn abort(&self) {
        self.task.abort();
    }
}

/// Starts the BFD task (no socket is opened until a session starts).
pub(crate) fn spawn() -> BfdHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let unmatched = Arc::new(AtomicU64::new(0));
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ (u64::from(std::process::id()) << 32);
    let task = BfdTask {
        tx: tx.clone(),
        sessions: HashMap::new(),
        by_discr: HashMap::new(),
        listeners: HashMap::new(),
        next_discr: (seed as u32) | 1,
        seed,
        unmatched: unmatched.clone(),
    };
    BfdHandle {
        tx,
        unmatched,
        task: tokio::spawn(task.run(rx)),
    }
}

struct Entry {
    session: Session,
    local: IpAddr,
    sock: Option<UdpSocket>,
    status: Arc<Mutex<PeerStatus>>,
    notify: Notify,
}

struct BfdTask {
    tx: mpsc::UnboundedSender<BfdCmd>,
    /// By peer address: one BFD session per BGP peer.
    sessions: HashMap<IpAddr, Entry>,
    /// Local discriminator to peer address.
    by_discr: HashMap<u32, IpAddr>,
    /// Receive tasks by local address.
    listeners: HashMap<IpAddr, JoinHandle<()>>,
    next_discr: u32,
    seed: u64,
    unmatched: Arc<AtomicU64>,
}

impl Drop for BfdTask {
    fn drop(&mut self) {
        // Receive tasks would otherwise keep port 3784 bound until their next packet.
        for (_, h) in self.listeners.drain() {
            h.abort();
        }
    }
}

/// Status locks are held for a few field writes; a poisoned one still holds valid counters.
fn with_bfd(status: &Mutex<PeerStatus>, f: impl FnOnce(&mut BfdStatus)) {
    let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
    f(s.bfd.get_or_insert_with(BfdStatus::default));
}

impl BfdTask {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<BfdCmd>) {
        loop {
            let next = self
                .sessions
                .values()
                .filter_map(|e| e.session.timers().next())
                .min();
            let sleep = async {
                match next {
                    Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    self.on_cmd(cmd);
                }
                () = sleep => {
                    let now = Instant::now();
                    let due: Vec<IpAddr> = self
                        .sessions
                        .iter()
                        .filter(|(_, e)| e.session.timers().next().is_some_and(|t| t <= now))
                        .map(|(p, _)| *p)
                        .collect();
                    for p in due {
                        if let Some(e) = self.sessions.get_mut(&p) {
                            let acts = e.session.on_timer(now);
                            apply(e, acts);
                        }
                    }
                }
            }
        }
    }

    fn on_cmd(&mut self, cmd: BfdCmd) {
        let now = Instant::now();
        match cmd {
            BfdCmd::Start {
                peer,
                local,
                cfg,
                status,
                notify,
            } => {
                if self.sessions.get(&peer).is_some_and(|e| e.local == local) {
                    return;
                }
                if let Some(old) = self.sessions.remove(&peer) {
                    self.by_discr.remove(&old.session.local_discriminator());
                }
                self.start(peer, local, cfg, status, notify, now);
            }
            BfdCmd::Stop { peer, done } => {
                if let Some(mut e) = self.sessions.remove(&peer) {
                    self.by_discr.remove(&e.session.local_discriminator());
                    let acts = e.session.admin_down(now);
                    apply(&mut e, acts);
                }
                let _ = done.send(());
            }
            BfdCmd::Rx {
                local,
                from,
                ttl,
                bytes,
            } => self.on_rx(local, from, ttl, &bytes, now),
        }
    }

    fn alloc_discr(&mut self) -> u32 {
        loop {
            let d = self.next_discr;
            self.next_discr = self.next_discr.wrapping_add(1);
            if d != 0 && !self.by_discr.contains_key(&d) {
                return d;
            }
        }
    }

    fn start(
        &mut self,
        peer: IpAddr,
        local: IpAddr,
        cfg: BfdConfig,
        status: Arc<Mutex<PeerStatus>>,
        notify: Notify,
        now: Instant,
    ) {
        let mut errors = Vec::new();
        if !self.listeners.contains_key(&local) {
            match network::bfd_listen(local) {
                Ok(sock) => {
                    let tx = self.tx.clone();
                    self.listeners
                        .insert(local, tokio::spawn(rx_loop(sock, local, tx)));
                }
                Err(e) => errors.push(format!("bind {local}:{}: {e}", network::BFD_PORT)),
            }
        }
        let discr = self.alloc_discr();
        let sock = match network::bfd_sender(local, peer, (self.seed as u32) ^ discr) {
            Ok(s) => Some(s),
            Err(e) => {
                errors.push(format!("send socket {local} -> {peer}: {e}"));
                None
            }
        };
        let session = match Session::new(
            SessionConfig {
                local_discriminator: discr,
                desired_min_tx: cfg.interval,
                required_min_rx: cfg.interval,
                detect_mult: cfg.multiplier,
                jitter_seed: self.seed ^ u64::from(discr),
            },
            now,
        ) {
            Ok(s) => s,
            Err(e) => {
                // Speaker validation rules these out; record rather than panic.
                with_bfd(&status, |b| b.error = Some(e.to_string()));
                return;
            }
        };
        for e in &errors {
            warn!(%peer, "bfd: {e}");
        }
        info!(%peer, %local, discriminator = discr, "bfd: session started");
        with_bfd(&status, |b| {
            b.error = (!errors.is_empty()).then(|| errors.join("; "));
            b.local_discriminator = discr;
        });
        self.by_discr.insert(discr, peer);
        let mut e = Entry {
            session,
            local,
            sock,
            status,
            notify,
        };
        refresh(&mut e);
        self.sessions.insert(peer, e);
    }

    fn on_rx(&mut self, local: IpAddr, from: IpAddr, ttl: Option<u8>, bytes: &[u8], now: Instant) {
        // The session this packet's addresses belong to, for counting drops against it.
        let owner = self
            .sessions
            .get(&from)
            .filter(|e| e.local == local)
            .map(|_| from);
        let count = |sessions: &HashMap<IpAddr, Entry>, f: &dyn Fn(&mut BfdStatus)| match owner
            .and_then(|o| sessions.get(&o))
        {
            Some(e) => with_bfd(&e.status, f),
            None => {
                self.unmatched.fetch_add(1, Ordering::Relaxed);
            }
        };
        if ttl != Some(255) {
            count(&self.sessions, &|b| b.discards.bad_ttl += 1);
            return;
        }
        let pkt = match ControlPacket::decode(bytes) {
            Ok(p) => p,
            Err(err) => {
                count(&self.sessions, &|b| b.discards.malformed[err.index()] += 1);
                return;
            }
        };
        let target = if pkt.your_discriminator != 0 {
            self.by_discr.get(&pkt.your_discriminator).copied()
        } else {
            owner
        };
        let Some(peer) = target.filter(|p| Some(*p) == owner) else {
            count(&self.sessions, &|b| b.discards.wrong_discriminator += 1);
            return;
        };
        let Some(e) = self.sessions.get_mut(&peer) else {
            return;
        };
        let acts = e.session.on_packet(&pkt, now);
        let accepted = !acts.iter().any(|a| matches!(a, Action::Discarded(_)));
        with_bfd(&e.status, |b| {
            if accepted {
                b.packets_in += 1;
                b.remote_diag = pkt.diag;
            }
        });
        apply(e, acts);
    }
}

/// Carries out a session's actions and mirrors its state into the peer status.
fn apply(e: &mut Entry, acts: Vec<Action>) {
    let mut went_down = false;
    for a in acts {
        match a {
            Action::Send(pkt) => {
                let mut buf = [0u8; ControlPacket::LEN];
                let n = pkt.encode(&mut buf);
                // UDP: a full socket buffer or an ICMP error means this packet is lost,
                // which BFD is built to tolerate; the next one follows within the interval.
                if let Some(s) = &e.sock
                    && s.try_send(&buf[..n]).is_ok()
                {
                    with_bfd(&e.status, |b| b.packets_out += 1);
                }
            }
            Action::StateChanged { from, to, diag } => {
                info!(local = %e.local, %from, %to, ?diag, "bfd: state change");
                if from == State::Up && to != State::Up {
                    with_bfd(&e.status, |b| b.downs += 1);
                    // RFC 5882 §3.2: a neighbour going AdminDown is not a path failure, so
                    // BGP is left alone (its own Cease, if any, follows).
                    went_down = e.session.remote_state() != State::AdminDown;
                }
            }
            Action::Discarded(d) => with_bfd(&e.status, |b| match d {
                Discard::Invalid(err) => b.discards.malformed[err.index()] += 1,
                Discard::WrongDiscriminator(_) => b.discards.wrong_discriminator += 1,
                Discard::AdminDown => b.discards.admin_down += 1,
            }),
            Action::Timers(_) => {}
        }
    }
    refresh(e);
    if went_down {
        (e.notify)();
    }
}

fn refresh(e: &mut Entry) {
    let s = &e.session;
    with_bfd(&e.status, |b| {
        b.state = s.state();
        b.remote_state = s.remote_state();
        b.local_discriminator = s.local_discriminator();
        b.remote_discriminator = s.remote_discriminator();
        b.tx_interval = s.tx_interval();
        b.detect_time = s.detection_time();
        b.local_diag = s.local_diag();
    });
}

/// Reads one local address's port 3784 and forwards every datagram to the BFD task.
async fn rx_loop(sock: UdpSocket, local: IpAddr, tx: mpsc::UnboundedSender<BfdCmd>) {
    let mut buf = [0u8; 512];
    loop {
        match network::bfd_recv(&sock, &mut buf).await {
            Ok((n, from, ttl)) => {
                let cmd = BfdCmd::Rx {
                    local,
                    from,
                    ttl,
                    bytes: buf[..n].to_vec(),
                };
                if tx.send(cmd).is_err() {
                    return;
                }
            }
            Err(e) => {
                warn!(%local, error = %e, "bfd: receive failed");
                // Out of buffers and the like: do not spin.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
