//! Opening a session: the OPEN's capabilities, what Established starts (BFD, the initial
//! advertisement) and the End-of-RIB graceful restart waits for.

use std::time::{Instant, SystemTime};

use ipnet::IpNet;
use tracing::info;

use super::{Input, PeerTask, Up, lock};
use crate::bfd::tasks::BfdCmd;
use crate::codec::{
    AFI_IPV4, AFI_IPV6, Capability, Message, MpUnreach, PathAttr, SAFI_UNICAST, Update,
};
use crate::fsm::Session;
use crate::speaker::PeerConfig;

/// RFC 4724 §3 flags octet per family: forwarding state preserved. A load balancer keeps
/// forwarding through a control-plane restart only if its datapath survives it; when it
/// does not, the router still sends traffic here for up to the restart time: the
/// documented trade-off of enabling graceful restart.
const GR_FORWARDING: u8 = 0x80;

/// The OPEN capabilities for this peer; `first` sets graceful restart's Restart State bit
/// (this process has just started, so the peer need not wait for our End-of-RIB before
/// sending its own).
pub(super) fn capabilities(asn: u32, cfg: &PeerConfig, first: bool) -> Vec<Capability> {
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

impl PeerTask {
    pub(super) async fn on_established(&mut self, session: Session) {
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
    pub(super) async fn send_end_of_rib(&mut self) {
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
}
