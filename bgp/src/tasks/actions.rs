//! Carrying out the FSM's actions: connections opened, written and closed, and timers set.

use std::net::SocketAddr;

use tokio::net::TcpStream;
use tracing::{debug, info};

use super::{Input, PeerTask, lock};
use crate::codec::Message;
use crate::fsm::{Action, ConnId, DownReason, Event};
use crate::network;

impl PeerTask {
    /// Carries out one action of the FSM.
    pub(super) async fn act(&mut self, a: Action) {
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
            } => self.on_down(reason, established),
            Action::UpdateReceived(u) => self.on_update(u),
            Action::RouteRefreshRequested(r) => self.on_route_refresh(r).await,
        }
    }

    pub(super) async fn send(&mut self, id: ConnId, m: &Message) {
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

    /// The session (or an attempt at one) ended: forget what it advertised and received.
    pub(super) fn on_down(&mut self, reason: DownReason, established: bool) {
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

    pub(super) fn new_conn(&mut self, stream: TcpStream) -> Option<ConnId> {
        if let Err(e) = network::prepare(&stream, &self.sec) {
            self.set_error(format!("socket options: {e}"));
            return None;
        }
        self.next_id += 1;
        let id = ConnId(self.next_id);
        let (r, w) = stream.into_split();
        let reader = tokio::spawn(network::read_messages(r, id, self.reads.clone()));
        self.writers.insert(id, w);
        self.readers.insert(id, reader);
        Some(id)
    }
}
