//! VIP announcement: the appliance announces a VIP's host route only while its datapath is up
//! and the VIP has at least one backend that can take new flows (a sorry backend counts; a
//! VIP whose quorum is lost with `on_quorum_lost = "withdraw"` does not), and withdraws it
//! otherwise. Routers then spread traffic over every appliance that announces (ECMP) and stop
//! sending to one whose VIPs are unhealthy or whose session died. Each route carries the
//! VIP's announcement policy: communities, MED, AS-path prepends, local preference, the peers
//! it goes to, and for a `standby` VIP the worse path of `[bgp.standby]`, so the routers
//! prefer the active appliance's and fall back on it only when that one is gone.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use bgp::{BfdConfig, IpNet, Md5Key, PeerConfig, RouteAttrs, Speaker, SpeakerConfig};
use tracing::{error, info, warn};

use crate::config::{self, Announce, Community, Config, Role};
use crate::lb::Tables;
use sys::sockopt::KernelSocketOptions;

/// The speaker configuration for `[bgp]`.
pub fn speaker_config(b: &config::Bgp) -> SpeakerConfig {
    let mut s = SpeakerConfig::new(b.asn, b.router_id);
    s.graceful_shutdown_wait = b.graceful_shutdown_wait;
    s.peers = b
        .peers
        .iter()
        .filter_map(|p| {
            let mut pc = PeerConfig::new(p.address, p.asn);
            pc.port = p.port;
            pc.hold_time = p.hold_time;
            pc.connect_retry = p.connect_retry;
            pc.local_address = p.source;
            pc.passive = p.passive;
            pc.ttl_security = p.ttl_security;
            pc.max_prefixes = p.max_prefixes.map(|n| n as usize);
            pc.bfd = p.bfd.map(|f| BfdConfig {
                interval: f.interval,
                multiplier: f.multiplier,
            });
            pc.graceful_restart = b.graceful_restart;
            if let Some(password) = &p.password {
                match Md5Key::new(password.as_bytes()) {
                    Ok(k) => pc.md5_key = Some(k),
                    Err(e) => {
                        // Validation holds passwords to 1..=80 bytes, so only a Config built
                        // in code gets here. Fail closed: an unsigned session is what the
                        // password was meant to prevent; the router's connections are then
                        // refused and counted as from an unconfigured address.
                        error!(peer = %p.address, "bgp: peer left out: password unusable: {e}");
                        return None;
                    }
                }
            }
            match p.next_hop {
                Some(IpAddr::V4(a)) => pc.next_hop_v4 = Some(a),
                Some(IpAddr::V6(a)) => pc.next_hop_v6 = Some(a),
                None => {}
            }
            let e = &p.export;
            let c = attrs(e.communities.iter().copied(), &Announce::default(), None);
            pc.export = bgp::ExportAttrs {
                med: e.med,
                as_path_prepend: e.as_path_prepend,
                local_pref: e.local_pref,
                communities: c.communities,
                large_communities: c.large_communities,
            };
            Some(pc)
        })
        .collect();
    s.socket_options = Some(Arc::new(KernelSocketOptions));
    s
}

/// The route's attributes: `communities`, and `policy`'s MED, prepends, local preference
/// and peers, made worse by `standby` for a standby VIP.
fn attrs(
    communities: impl IntoIterator<Item = Community>,
    policy: &Announce,
    standby: Option<&config::Standby>,
) -> RouteAttrs {
    let mut a = RouteAttrs {
        med: policy.med,
        local_pref: policy.local_pref,
        as_path_prepend: policy.as_path_prepend,
        peers: (!policy.announce_to.is_empty()).then(|| policy.announce_to.clone()),
        ..RouteAttrs::default()
    };
    let extra = match (policy.role, standby) {
        (Role::Standby, Some(s)) => {
            a.as_path_prepend = a.as_path_prepend.saturating_add(s.as_path_prepend);
            a.med = Some(a.med.unwrap_or(0).max(s.med));
            a.local_pref = Some(a.local_pref.unwrap_or(100).min(s.local_pref));
            s.communities.as_slice()
        }
        _ => &[],
    };
    for c in communities.into_iter().chain(extra.iter().copied()) {
        match c {
            Community::Standard(x, y) => a.communities.push((u32::from(x) << 16) | u32::from(y)),
            Community::Large(g, l1, l2) => a.large_communities.push([g, l1, l2]),
        }
    }
    a.communities.sort_unstable();
    a.communities.dedup();
    a.large_communities.sort_unstable();
    a.large_communities.dedup();
    a
}

/// An address that may be announced, with the route's attributes. `settled` is false while
/// the health checks of some VIP on it have not decided yet: such an address is not
/// announced for the first time (flows that arrive while the pool is still filling would be
/// pinned to the few backends up so far, and another appliance with the full pool would send
/// them elsewhere after an ECMP change), but one already announced stays announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The global and the VIPs' communities, and the announcement policy (validation keeps
    /// it equal for every VIP of an address), made worse by `[bgp.standby]` for a standby.
    pub attrs: RouteAttrs,
    pub settled: bool,
    pub role: Role,
}

/// Which VIP addresses should be announced now, and with what: an address is announced
/// when any VIP on it has a backend that can take new flows (and did not lose its quorum
/// with `on_quorum_lost = "withdraw"`). `settled(vip)` says whether that VIP's health
/// checks have all decided.
pub fn wanted(
    config: &Config,
    tables: &Tables,
    settled: &dyn Fn(&config::Vip) -> bool,
) -> BTreeMap<IpAddr, Wanted> {
    let global = config
        .bgp
        .as_ref()
        .map(|b| b.communities.clone())
        .unwrap_or_default();
    // Every VIP of an address must have settled, the ones with no backend up yet included:
    // a UDP VIP whose checks decided first must not announce the address while the TCP VIP
    // beside it still has none of its backends (CI's flow-sync test: the returning
    // appliance took the TCP flows' synced entries, found their backends not up yet and
    // scheduled them afresh, resetting them).
    let unsettled: std::collections::HashSet<IpAddr> = config
        .vips
        .iter()
        .filter(|v| !settled(v))
        .map(|v| v.address)
        .collect();
    let mut found: BTreeMap<IpAddr, (Vec<Community>, bool, &Announce)> = BTreeMap::new();
    for (slot, v) in tables.vips.iter().enumerate() {
        let healthy = v.backends.clone().any(|b| tables.eligible[b as usize]);
        if !healthy || v.quorum.withdraw {
            continue;
        }
        let Some(cv) = config.vips.get(slot) else {
            continue;
        };
        // A tenant's address means nothing in the underlay: its clients reach the
        // appliance's VTEP address, which the operator routes.
        if cv.tenant_vni.is_some() {
            continue;
        }
        let e = found
            .entry(cv.address)
            .or_insert_with(|| (global.clone(), true, &cv.announce));
        e.0.extend(cv.communities.iter().copied());
        e.1 &= !unsettled.contains(&cv.address);
    }
    let standby = config.bgp.as_ref().map(|b| &b.standby);
    found
        .into_iter()
        .map(|(ip, (communities, settled, policy))| {
            let attrs = attrs(communities, policy, standby);
            let role = policy.role;
            (
                ip,
                Wanted {
                    attrs,
                    settled,
                    role,
                },
            )
        })
        .collect()
}

/// With `[sync] snat`, the FullNAT source addresses to announce beside `vips` (what
/// [`wanted`] chose, gated): every address of the pools of the FullNAT VIPs announced, this
/// appliance's own (`[sync] snat`) as active and the group's others with `[bgp.standby]`'s
/// worse path. The routers then send a backend's reply to the appliance that took its port,
/// and to the survivors, which hold its synced flows, once that one is gone. An address
/// that is also a VIP's keeps the VIP's announcement.
pub fn snat_routes(config: &Config, vips: &BTreeMap<IpAddr, Wanted>) -> BTreeMap<IpAddr, Wanted> {
    let Some(own) = config
        .sync
        .as_ref()
        .map(|s| &s.snat)
        .filter(|o| !o.is_empty())
    else {
        return BTreeMap::new();
    };
    let global = config
        .bgp
        .as_ref()
        .map(|b| b.communities.clone())
        .unwrap_or_default();
    let standby = config.bgp.as_ref().map(|b| &b.standby);
    let mut out = BTreeMap::new();
    for v in config
        .vips
        .iter()
        .filter(|v| v.mode == config::Mode::FullNat)
    {
        let Some(w) = vips.get(&v.address) else {
            continue;
        };
        for a in v.snat.iter().filter(|a| !vips.contains_key(a)) {
            let role = if own.contains(a) {
                Role::Active
            } else {
                Role::Standby
            };
            let policy = Announce {
                role,
                ..Announce::default()
            };
            let e = out.entry(*a).or_insert_with(|| Wanted {
                attrs: attrs(global.iter().copied(), &policy, standby),
                settled: w.settled,
                role,
            });
            // Several VIPs share a pool: announced once every one of them has settled.
            e.settled &= w.settled;
        }
    }
    out
}

/// Keeps the speaker's announcements equal to [`wanted`].
pub struct Announcer {
    speaker: Speaker,
    /// What the speaker announces now, with the attributes it was given.
    announced: BTreeMap<IpAddr, RouteAttrs>,
    /// RFC 4724 graceful restart is configured.
    graceful_restart: bool,
    /// End-of-RIB has been released (every VIP settled once).
    initial_done: bool,
}

impl Announcer {
    pub async fn start(b: &config::Bgp) -> Result<Announcer, bgp::SpeakerError> {
        Ok(Announcer {
            speaker: Speaker::start(speaker_config(b)).await?,
            announced: BTreeMap::new(),
            graceful_restart: b.graceful_restart.is_some(),
            initial_done: false,
        })
    }

    /// Graceful restart is configured: stopping keeps the routes in the routers.
    pub fn graceful_restart(&self) -> bool {
        self.graceful_restart
    }

    /// Tells the speaker the initial announcements are out (every VIP's health checks have
    /// decided once), so it sends End-of-RIB and restarting routers drop stale routes.
    /// Only the first call does anything.
    pub fn initial_routes_done(&mut self) {
        if self.initial_done {
            return;
        }
        self.initial_done = true;
        match self.speaker.initial_routes_done() {
            Ok(()) => info!("bgp: initial announcements done (End-of-RIB)"),
            Err(e) => warn!("bgp: cannot send End-of-RIB: {e}"),
        }
    }

    /// Stops for a graceful restart: the sessions close without NOTIFICATION or
    /// withdrawals, so routers keep the routes (marked stale) for the restart time while the
    /// next process starts. A crash looks the same to them.
    pub fn abandon(self) {
        info!(
            announced = self.announced.len(),
            "bgp: graceful restart: closing sessions without withdrawing"
        );
        drop(self.speaker);
    }

    /// Announces and withdraws so that what is announced follows `wanted` (see [`Wanted`]).
    pub fn sync(&mut self, wanted: &BTreeMap<IpAddr, Wanted>) {
        for (ip, w) in wanted {
            match self.announced.get(ip) {
                Some(now) if *now == w.attrs => continue,
                None if !w.settled => continue,
                _ => {}
            }
            let prefix = IpNet::from(*ip);
            if let Err(e) = self.speaker.announce(prefix, w.attrs.clone()) {
                warn!(vip = %ip, "announce failed: {e}");
                continue;
            }
            self.announced.insert(*ip, w.attrs.clone());
            info!(vip = %ip, role = w.role.name(), "bgp: announce");
        }
        self.withdraw_unless(|ip| wanted.contains_key(ip), "no healthy backend");
    }

    /// Withdraws every announced address `keep` rejects, and nothing else; `why` goes to
    /// the log.
    pub fn withdraw_unless(&mut self, keep: impl Fn(&IpAddr) -> bool, why: &str) {
        let gone: Vec<IpAddr> = self
            .announced
            .keys()
            .filter(|ip| !keep(ip))
            .copied()
            .collect();
        for ip in gone {
            match self.speaker.withdraw(IpNet::from(ip)) {
                Ok(()) => {
                    self.announced.remove(&ip);
                    info!(vip = %ip, "bgp: withdraw ({why})");
                }
                Err(e) => warn!(vip = %ip, "withdraw failed: {e}"),
            }
        }
    }

    /// Addresses announced now.
    pub fn announced(&self) -> impl Iterator<Item = &IpAddr> {
        self.announced.keys()
    }

    pub fn peers(&self) -> Vec<bgp::PeerStatus> {
        self.speaker.peers()
    }

    /// RFC 8326 graceful shutdown, then withdraw everything and close every session.
    pub async fn shutdown(self) {
        self.speaker.graceful_shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// The config validates passwords against its own copy of the speaker's limit (it does
    /// not depend on the speaker): the two must agree.
    #[test]
    fn the_config_takes_the_md5_passwords_the_speaker_takes() {
        assert_eq!(::config::MD5_KEY_MAX_LEN, Md5Key::MAX_LEN);
    }

    const BASE: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[bgp]
asn = 65010
router_id = "10.0.0.10"
graceful_shutdown_wait = "2s"
communities = ["65010:100"]

[[bgp.peer]]
address = "10.0.0.1"
asn = 65000
hold_time = "3s"
source = "10.0.0.10"
password = "s3cret"
ttl_security = true

[[bgp.peer]]
address = "2001:db8::1"
asn = 65001
port = 1179
passive = true
next_hop = "2001:db8::10"

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
communities = ["65010:80", "65010:1:2"]
[[vip.backend]]
address = "10.1.0.11"
"#;

    #[test]
    fn every_peer_setting_reaches_the_speaker() {
        let cfg = testkit::unit::parse(BASE);
        let s = speaker_config(cfg.bgp.as_ref().expect("bgp"));
        assert_eq!(
            (s.asn, s.router_id.to_string().as_str()),
            (65010, "10.0.0.10")
        );
        assert_eq!(s.graceful_shutdown_wait, std::time::Duration::from_secs(2));
        assert!(
            s.socket_options.is_some(),
            "MD5 and GTSM need the kernel options"
        );
        let [a, b] = s.peers.as_slice() else {
            panic!("two peers expected, got {:?}", s.peers);
        };
        assert_eq!(a.hold_time, std::time::Duration::from_secs(3));
        assert_eq!(a.local_address, Some("10.0.0.10".parse().expect("literal")));
        assert!(a.ttl_security && !a.passive);
        assert_eq!(
            a.md5_key.as_ref().map(|k| k.as_bytes().to_vec()),
            Some(b"s3cret".to_vec())
        );
        assert_eq!((b.asn, b.port, b.passive), (65001, 1179, true));
        assert!(b.md5_key.is_none() && !b.ttl_security);
        assert_eq!(
            b.next_hop_v6,
            Some("2001:db8::10".parse().expect("literal"))
        );
    }

    #[test]
    fn communities_combine_global_and_per_vip() {
        let cfg = testkit::unit::parse(BASE);
        let tables = Tables::build(&cfg, &|_, _| true, 1).expect("tables");
        let w = wanted(&cfg, &tables, &|_| true);
        let vip: IpAddr = "192.0.2.10".parse().expect("literal");
        let got = w.get(&vip).expect("the VIP has a healthy backend");
        assert!(got.settled);
        let a = &got.attrs;
        assert_eq!(a.communities, vec![(65010 << 16) | 80, (65010 << 16) | 100]);
        assert_eq!(a.large_communities, vec![[65010, 1, 2]]);
        // No eligible backend: not wanted (withdrawn).
        let down = Tables::build(&cfg, &|_, _| false, 2).expect("tables");
        assert!(wanted(&cfg, &down, &|_| true).is_empty());
        // Unsettled health: wanted but not settled (not announced for the first time).
        assert!(!wanted(&cfg, &tables, &|_| false)[&vip].settled);
    }

    /// Two VIPs on one address (UDP and TCP): the UDP one's checks decided, its backends up;
    /// the TCP one's not yet, none of its backends up. The address is wanted (UDP serves)
    /// but not settled: it is not announced for the first time until the TCP VIP decided.
    #[test]
    fn an_address_waits_for_every_vip_on_it_even_one_with_no_backend_up_yet() {
        let cfg = Config::from_toml_str(
            "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
             [[vip]]\nname = \"dns\"\naddress = \"192.0.2.10\"\nport = 53\nprotocol = \"udp\"\n\
             [[vip.backend]]\naddress = \"10.1.0.11\"\n\n\
             [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
             [[vip.backend]]\naddress = \"10.1.0.12\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let vip: IpAddr = "192.0.2.10".parse().expect("literal");
        let udp_up = |v: &config::Vip, _: &config::Backend| v.name == "dns";
        let tables = Tables::build(&cfg, &udp_up, 1).expect("tables");
        let only_udp_settled = |v: &config::Vip| v.name == "dns";
        let w = wanted(&cfg, &tables, &only_udp_settled);
        assert!(!w[&vip].settled, "the TCP VIP has not decided yet");
        let w = wanted(&cfg, &tables, &|_| true);
        assert!(w[&vip].settled, "both decided");
    }

    #[test]
    fn bgp_bfd_and_graceful_restart_reach_the_speaker_config() {
        let c = Config::from_toml_str(&format!(
        "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
         [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
         [[vip.backend]]\naddress = \"10.1.0.11\"\n\n\
         [bgp]\nasn = 65010\nrouter_id = \"10.0.0.10\"\n{}\n\
         [[bgp.peer]]\naddress = \"10.0.0.1\"\nasn = 65000\n{}\n\
         [[bgp.peer]]\naddress = \"10.0.0.2\"\nasn = 65000\n{}\n",
        "bfd = { interval = \"50ms\", multiplier = 4 }\ngraceful_restart = { restart_time = \"20s\" }",
        "",
        "bfd = { enabled = false }",
    ))
    .expect("valid");
        let s = speaker_config(c.bgp.as_ref().expect("bgp"));
        assert_eq!(
            s.peers[0].bfd,
            Some(bgp::BfdConfig {
                interval: std::time::Duration::from_millis(50),
                multiplier: 4
            })
        );
        assert_eq!(s.peers[1].bfd, None);
        assert!(
            s.peers
                .iter()
                .all(|p| p.graceful_restart == Some(std::time::Duration::from_secs(20)))
        );
    }

    #[test]
    fn a_standby_vip_is_announced_with_the_worse_path_to_its_peers_only() {
        let text = BASE
            .replace(
                "communities = [\"65010:80\", \"65010:1:2\"]",
                "communities = [\"65010:80\"]\nrole = \"standby\"\nmed = 10\n\
                 announce_to = [\"10.0.0.1\"]",
            )
            .replacen(
                "[[bgp.peer]]",
                "[bgp.standby]\nas_path_prepend = 2\ncommunities = [\"65010:666\"]\n\n[[bgp.peer]]",
                1,
            );
        let text = text.as_str();
        let cfg = Config::from_toml_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let tables = Tables::build(&cfg, &|_, _| true, 1).expect("tables");
        let w = wanted(&cfg, &tables, &|_| true);
        let vip: IpAddr = "192.0.2.10".parse().expect("literal");
        let standby = &cfg.bgp.as_ref().expect("bgp").standby;
        assert_eq!(w[&vip].role, Role::Standby);
        let a = &w[&vip].attrs;
        assert_eq!(a.as_path_prepend, 2);
        assert_eq!(a.med, Some(1000), "the standby MED is the larger");
        assert_eq!(a.local_pref, Some(50));
        assert_eq!(
            a.communities,
            vec![(65010 << 16) | 80, (65010 << 16) | 100, (65010 << 16) | 666]
        );
        assert_eq!(a.peers, Some(vec!["10.0.0.1".parse().expect("literal")]));
        let active = attrs([], &Announce::default(), Some(standby));
        assert_eq!(
            (active.as_path_prepend, active.med, active.peers),
            (0, None, None)
        );
    }

    #[test]
    fn a_vip_that_lost_its_quorum_with_withdraw_is_not_wanted() {
        let text = BASE.replace(
            "[[vip.backend]]\naddress = \"10.1.0.11\"\n",
            "quorum = 2\non_quorum_lost = \"withdraw\"\n\
             [[vip.backend]]\naddress = \"10.1.0.11\"\nweight = 1\n\
             [[vip.backend]]\naddress = \"10.1.0.12\"\nweight = 1\n",
        );
        let cfg = testkit::unit::parse(&text);
        let all = Tables::build(&cfg, &|_, _| true, 1).expect("tables");
        assert_eq!(wanted(&cfg, &all, &|_| true).len(), 1);
        let one = |_: &config::Vip, b: &config::Backend| b.address.to_string() == "10.1.0.11";
        let lost = Tables::build_from(&cfg, &one, 2, Some(&all), &crate::lb::Serial).expect("t");
        assert!(lost.eligible[0], "the primary still up serves what arrives");
        assert!(
            wanted(&cfg, &lost, &|_| true).is_empty(),
            "but the VIP is withdrawn"
        );
    }
}
