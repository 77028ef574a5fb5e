//! The immutable forwarding tables a worker reads for every packet.
//!
//! The control plane builds a [`Tables`] from a validated [`Config`] plus the prober's view
//! of backend health, fills in the neighbour (L2) information it resolved through rtnetlink,
//! and publishes it with one atomic swap (`Arc<Tables>`). Workers never write to it: state
//! that changes per packet (round-robin cursors, connection counts) lives in the worker.
//!
//! Backends of all VIPs live in one array (the *backend slot* indexes it and the per-worker
//! counters); each VIP owns a contiguous range of slots, so a scheduler sees its pool as
//! plain slices. Every VIP gets a Maglev ring, also when it uses an LVS scheduler: the ring
//! is the stateless answer used when the connection table is full.
//!
//! A new version is built against the running one ([`Tables::build_from`]): a VIP whose
//! ring inputs (table size, backend identities and effective weights) are unchanged shares
//! the running version's ring (`Arc`), so a commit builds only the rings of what changed
//! and two versions in memory cost one set of rings plus the changed ones.

use crate::egress::{Egress, Miss};
use crate::hash::{addr_to_u128, backend_identity, mix64};
use crate::limits::{Limit, LimitBoard};
use crate::maglev::{MaglevBackend, MaglevError, Ring};
use crate::sched::lvs_bucket_table;
use config::{Backend, BackendState, Config, HashFields, Mode, Overflow, Scheduler, Timeouts, Vip};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;
use wire::MacAddr;

/// A small deterministic hasher for the in-memory lookup maps (SipHash would cost more
/// than the rest of a VIP lookup).
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(23) ^ i).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` keyed through [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// Open-addressing map from (address, port, protocol) to a slot: the per-packet lookups
/// (VIP, NAT backend, SNAT address) in one or two cache lines, no hasher state machine.
#[derive(Debug, Clone)]
pub(crate) struct TupleIndex {
    keys: Vec<(u128, u16, u8)>,
    vals: Vec<u32>,
    mask: usize,
    len: usize,
}

impl TupleIndex {
    const EMPTY: u32 = u32::MAX;

    fn with_capacity(n: usize) -> TupleIndex {
        let size = (n.max(4) * 2).next_power_of_two();
        TupleIndex {
            keys: vec![(0, 0, 0); size],
            vals: vec![Self::EMPTY; size],
            mask: size - 1,
            len: 0,
        }
    }

    /// Every bit of the key reaches the low bits the mask keeps: VIPs that share an address
    /// and differ in port (hundreds on one address is a common layout) must not share a
    /// home slot, or every lookup of that address walks them all.
    #[inline(always)]
    fn home(&self, k: &(u128, u16, u8)) -> usize {
        let ports = (u64::from(k.1) << 8) | u64::from(k.2);
        mix64((k.0 as u64) ^ mix64(((k.0 >> 64) as u64) ^ ports)) as usize & self.mask
    }

    #[inline(always)]
    fn get(&self, k: &(u128, u16, u8)) -> Option<u32> {
        let mut i = self.home(k);
        loop {
            let v = self.vals[i];
            if v == Self::EMPTY {
                return None;
            }
            if self.keys[i] == *k {
                return Some(v);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Inserts unless present; returns the value now stored.
    pub(crate) fn insert_first(&mut self, k: (u128, u16, u8), v: u32) -> u32 {
        if (self.len + 1) * 2 > self.keys.len() {
            let mut bigger = TupleIndex::with_capacity(self.keys.len());
            for i in 0..self.keys.len() {
                if self.vals[i] != Self::EMPTY {
                    bigger.insert_first(self.keys[i], self.vals[i]);
                }
            }
            *self = bigger;
        }
        let mut i = self.home(&k);
        loop {
            if self.vals[i] == Self::EMPTY {
                self.keys[i] = k;
                self.vals[i] = v;
                self.len += 1;
                return v;
            }
            if self.keys[i] == k {
                return self.vals[i];
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// Where a frame leaves and with which MAC addresses: filled by the datapath from
/// rtnetlink (egress interface, our MAC on it, the next hop's MAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// Egress interface index.
    pub ifindex: u32,
    /// Our MAC on that interface.
    pub src_mac: MacAddr,
    /// The next hop's MAC (the backend itself when on-link).
    pub dst_mac: MacAddr,
}

/// Outer source addresses for tunnel mode. The low bits vary with the flow hash so the
/// backend NIC's RSS spreads flows over its queues (Katran's `create_encap_ipv4_src`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelSource {
    /// IPv4 outer source base; the last 16 bits are replaced by flow-hash bits for IPIP.
    pub v4: Ipv4Addr,
    /// IPv6 outer source base; the last 32 bits are replaced by flow-hash bits for IPIP.
    pub v6: Ipv6Addr,
}

impl Default for TunnelSource {
    /// Katran's prefixes: 172.16.0.0/16 and 100::/64 (the RFC 6666 discard-only block, never
    /// routed back toward anyone).
    fn default() -> Self {
        TunnelSource {
            v4: Ipv4Addr::new(172, 16, 0, 0),
            v6: Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        }
    }
}

/// One VIP as the datapath sees it.
#[derive(Debug, Clone)]
pub struct VipEntry {
    /// Config name (traces, counters).
    pub name: String,
    /// Address, IPv4-mapped for IPv4.
    pub address: u128,
    /// Address family.
    pub v6: bool,
    /// Port; 0 serves every port.
    pub port: u16,
    /// IANA protocol number.
    pub proto: u8,
    /// Forwarding mode.
    pub mode: Mode,
    /// Backend choice for new flows.
    pub scheduler: Scheduler,
    /// Fields of the flow hash.
    pub hash: HashFields,
    /// This VIP's backend slots.
    pub backends: Range<u32>,
    /// Maglev ring over the eligible backends (values are positions within `backends`),
    /// shared with earlier versions while its inputs stay the same.
    pub ring: Arc<Ring>,
    /// `sh`/`dh` bucket table (positions within `backends`), empty for other schedulers.
    pub buckets: Vec<u16>,
    /// FullNAT local address pool, IPv4-mapped for IPv4.
    pub snat: Vec<u128>,
    /// The pool's addresses this appliance takes ports on: those of `[sync] snat` when it
    /// is set (the group's other appliances take the rest), else the whole pool. Return
    /// traffic is recognised on the whole pool (a peer's synced flows use its addresses).
    pub snat_alloc: Vec<u128>,
    /// `sh`/`dh` hash the port with the address (`sh-port` / `dh-port`).
    pub hash_ports: bool,
    /// How the client's address reaches the backends (FullNAT TCP only).
    pub client_address: config::ClientAddress,
    /// When the appliance answers the VIP's SYNs itself (`process::synproxy`).
    pub syn_proxy: config::SynProxy,
    /// `udp_one_packet`: every datagram scheduled on its own, no connection-table entry.
    pub one_packet: bool,
    /// `persistence`, when on.
    pub persistence: Option<Persistence>,
    /// What a new flow gets when every eligible backend is at its connection limit.
    pub overflow: Overflow,
    /// Some backend of the VIP has a connection limit.
    pub has_limits: bool,
    /// Its quorum, and whether its sorry backends serve or it is to be withdrawn
    /// (see `lb::fallback`).
    pub quorum: crate::fallback::QuorumState,
    /// The VIP's address space ([`crate::hash::zone_of`]): 0, or a tenant's, whose
    /// frames arrive VXLAN-encapsulated and are matched by [`Core::tenant_vip`] alone.
    pub zone: u32,
    /// `quic_lb`: its server IDs and codec (see `lb::quic`).
    pub quic: Option<Arc<crate::quic::VipQuic>>,
    /// `allow` and `deny` (see `lb::acl`); `None` admits every source.
    pub acl: Option<Arc<crate::acl::VipAcl>>,
}

/// A VIP's persistence settings as the datapath uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Persistence {
    /// Seconds an entry lives after the client's last new connection.
    pub timeout_s: u32,
    /// Prefix length of the client's address that is remembered.
    pub netmask: u8,
    /// Names the VIP in the shared table's keys (its address, port and protocol).
    pub salt: u64,
}

/// One backend of one VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendEntry {
    /// Owning VIP.
    pub vip: u32,
    /// Address, IPv4-mapped for IPv4.
    pub address: u128,
    /// Address family.
    pub v6: bool,
    /// Port after NAT.
    pub port: u16,
    /// Configured weight.
    pub weight: u32,
    /// Operator state.
    pub state: BackendState,
    /// Prober verdict at build time.
    pub healthy: bool,
    /// `max_connections` / `resume_connections`, when set.
    pub limit: Option<Limit>,
    /// This backend's row on the version's [`LimitBoard`] (meaningful with `limit`).
    pub limit_index: u32,
    /// Its persistence token (see `lb::persist::token`).
    pub token: u32,
    /// `role = "sorry"`: takes new flows only while its VIP has lost its quorum.
    pub sorry: bool,
    /// `inhibit_on_failure`: keeps its flows while unhealthy (it takes no new ones).
    pub inhibit: bool,
}

impl BackendEntry {
    /// May take new flows as far as its own health, state and weight go (its VIP's quorum
    /// may still set it aside: `Core::eligible` is the last word).
    pub fn eligible(&self) -> bool {
        self.healthy && self.state == BackendState::Active && self.weight > 0
    }

    /// May keep its existing flows (drain keeps them; disabled and unhealthy do not, unless
    /// it inhibits on failure).
    pub fn keeps_flows(&self) -> bool {
        (self.healthy || self.inhibit) && self.state != BackendState::Disabled
    }

    /// The address as an `IpAddr`.
    pub fn ip(&self) -> IpAddr {
        crate::hash::u128_to_addr(self.address, self.v6)
    }
}

/// How a fragment finds its VIP without ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragmentVip {
    /// Exactly one VIP serves this address and protocol.
    Unique(u32),
    /// Several do (different ports): a non-first fragment cannot tell which.
    Ambiguous,
}

/// Why tables could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// Maglev could not populate the ring.
    #[error("vip {vip}: {source}")]
    Maglev {
        /// VIP name.
        vip: String,
        /// What Maglev said.
        source: MaglevError,
    },
    /// Two VIPs claim the same address, port and protocol.
    #[error("vip {vip}: {addr} port {port} is already served by vip {other}")]
    DuplicateVip {
        /// The later VIP.
        vip: String,
        /// The earlier one.
        other: String,
        /// Shared address.
        addr: IpAddr,
        /// Shared port.
        port: u16,
    },
    /// Scheduler positions are 16-bit.
    #[error("vip {vip}: {count} backends exceed the limit of 65535 per vip")]
    TooManyBackends {
        /// VIP name.
        vip: String,
        /// Backends configured.
        count: usize,
    },
    /// Two backends share a QUIC-LB server ID (the VIP's name, the clash and its fix).
    #[error("vip {0}: {1}")]
    QuicServerId(String, config::quic::ServerIdClash),
}

/// Everything a worker needs to forward, for one table version: the forwarding core
/// (VIPs, backends, rings, indexes) and the egress (routes and neighbours), each in its own
/// `Arc` so that a route or neighbour change makes a new version that shares the core
/// ([`Tables::with_egress`]). Field access reaches the core through `Deref`.
#[derive(Debug, Clone)]
pub struct Tables {
    /// Version number, increasing with every publication.
    pub version: u64,
    pub(super) core: Arc<Core>,
    pub(super) egress: Arc<Egress>,
}

/// The part of [`Tables`] built from the config and health: VIPs, backends, Maglev rings
/// and the per-packet indexes.
#[derive(Debug, Clone)]
pub struct Core {
    /// The version this core was built for; versions that only changed the egress share it.
    pub built_as: u64,
    /// VIPs in configuration order (the VIP slot indexes this).
    pub vips: Vec<VipEntry>,
    /// Backends of all VIPs (the backend slot indexes this).
    pub backends: Vec<BackendEntry>,
    /// Weight per backend slot (scheduler view).
    pub weights: Vec<u32>,
    /// Eligibility per backend slot (scheduler view).
    pub eligible: Vec<bool>,
    vip_index: TupleIndex,
    vip_addresses: TupleIndex,
    fragment_vips: FastMap<(u128, u8), FragmentVip>,
    nat_reverse: TupleIndex,
    pub(crate) snat_addresses: TupleIndex,
    backend_ids: FastMap<(u32, u128, u16), u32>,
    local_addresses: TupleIndex,
    /// Tenant VIPs by (zone, address, port, protocol) (see `lb::tenant`); none of them is
    /// in the other indexes, which hold the underlay's addresses.
    pub(super) tenant_index: FastMap<(u32, u128, u16, u8), u32>,
    /// Tunnel outer source addresses.
    pub tunnel_source: TunnelSource,
    /// Connection-table timeouts.
    pub timeouts: Timeouts,
    /// Limits on the ICMP messages the engine originates.
    pub icmp_limits: config::IcmpLimits,
    /// Embryonic entries one client address may hold in a worker's table (0: no budget).
    pub embryonic_per_source: u16,
    /// Rings built for this version (the others are shared with the version before).
    pub rings_built: u32,
    /// The shared connection counts of this version's limited backends.
    pub limits: Arc<LimitBoard>,
    /// Outbound state of the VIPs with an `outbound` range, by (address, protocol).
    pub(super) outbound: FastMap<(u128, u8), crate::outbound::VipOutbound>,
    /// Slots of the backends with a connection limit, in board order.
    pub limited: Vec<u32>,
}

impl Deref for Tables {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl DerefMut for Tables {
    /// Before publication only: a shared core is copied first.
    fn deref_mut(&mut self) -> &mut Core {
        Arc::make_mut(&mut self.core)
    }
}

fn vip_backend_entry(vip: u32, v: &Vip, b: &Backend, healthy: bool) -> BackendEntry {
    let id = backend_identity(b.address, b.port);
    let id_hash = id.chunks(8).fold(0u64, |h, c| {
        mix64(h ^ c.iter().fold(0u64, |a, x| a << 8 | u64::from(*x)))
    });
    // Tenants reuse addresses: a tenant backend's token is its zone's too, so one tenant's
    // remembered backend never names another's.
    let id_hash = match v.zone() {
        0 => id_hash,
        z => mix64(id_hash ^ u64::from(z) << 32),
    };
    BackendEntry {
        limit: b.max_connections.map(|max| Limit {
            max,
            resume: b.resume_connections.unwrap_or(max).min(max),
        }),
        limit_index: 0,
        token: crate::persist::token(id_hash),
        vip,
        address: addr_to_u128(b.underlay()),
        v6: b.underlay().is_ipv6(),
        port: b.port,
        weight: b.weight,
        state: b.state,
        healthy,
        sorry: b.sorry,
        inhibit: v.inhibits(b),
    }
}

impl Tables {
    /// Builds version `version` from `config`; `healthy(vip, backend)` is the prober's
    /// verdict (return `true` for VIPs without a health check).
    pub fn build(
        config: &Config,
        healthy: &dyn Fn(&Vip, &Backend) -> bool,
        version: u64,
    ) -> Result<Tables, TableError> {
        Tables::build_from(config, healthy, version, None, &crate::exec::Serial)
    }

    /// Builds version `version` like [`Tables::build`], sharing every ring of `previous`
    /// whose VIP (same name) has the same ring inputs: the result equals a full build.
    /// `exec` builds many VIPs' rings at once.
    pub fn build_from(
        config: &Config,
        healthy: &dyn Fn(&Vip, &Backend) -> bool,
        version: u64,
        previous: Option<&Tables>,
        exec: &dyn crate::exec::Executor,
    ) -> Result<Tables, TableError> {
        let prev: FastMap<&str, &VipEntry> = previous
            .map(|p| p.vips.iter().map(|v| (v.name.as_str(), v)).collect())
            .unwrap_or_default();
        let mut t = Core {
            built_as: version,
            vips: Vec::with_capacity(config.vips.len()),
            backends: Vec::new(),
            weights: Vec::new(),
            eligible: Vec::new(),
            vip_index: TupleIndex::with_capacity(config.vips.len()),
            vip_addresses: TupleIndex::with_capacity(config.vips.len()),
            fragment_vips: FastMap::default(),
            nat_reverse: TupleIndex::with_capacity(16),
            snat_addresses: TupleIndex::with_capacity(16),
            backend_ids: FastMap::default(),
            local_addresses: TupleIndex::with_capacity(4),
            tenant_index: FastMap::default(),
            tunnel_source: TunnelSource::default(),
            timeouts: config.appliance.timeouts,
            icmp_limits: config.appliance.icmp_limits,
            embryonic_per_source: config.appliance.embryonic_per_source,
            rings_built: 0,
            limits: Arc::new(LimitBoard::new(0)),
            limited: Vec::new(),
            outbound: FastMap::default(),
        };
        // Every VIP's entries first, each holding its previous ring (or none) until the
        // rings, which read the entries, are built, on every core for a large config.
        let none = Arc::new(Ring::none());
        let own_snat = crate::snat_pool::own(config);
        for v in &config.vips {
            let (held, quorum, acl) = match prev.get(v.name.as_str()) {
                Some(p) => (&p.ring, Some(p.quorum.up), p.acl.as_ref()),
                None => (&none, None, None),
            };
            t.add_vip(v, healthy, Arc::clone(held), quorum)?;
            if let Some(e) = t.vips.last_mut() {
                e.acl = crate::acl::VipAcl::carried(&v.acl, acl);
                e.narrow_snat(&own_snat);
            }
        }
        let all: Vec<(usize, &Vip)> = config.vips.iter().enumerate().collect();
        for ((slot, _), (ring, built)) in all.iter().zip(super::rings::build(&t, &all, true, exec)?)
        {
            t.rings_built += u32::from(built);
            t.vips[*slot].ring = ring;
        }
        t.limits = Arc::new(LimitBoard::new(t.limited.len()));
        let egress = Egress::default().with_backends(t.backends.len());
        Ok(Tables {
            version,
            core: Arc::new(t),
            egress: Arc::new(egress),
        })
    }

    /// The same core with `egress` as version `version`: a route or neighbour change.
    pub fn with_egress(&self, egress: Egress, version: u64) -> Tables {
        Tables {
            version,
            core: Arc::clone(&self.core),
            egress: Arc::new(egress),
        }
    }

    /// Replaces the egress (the control plane, before publishing).
    pub fn set_egress(&mut self, egress: Egress) {
        self.egress = Arc::new(egress);
    }

    /// Routes and neighbours of this version.
    #[inline(always)]
    pub fn egress(&self) -> &Egress {
        &self.egress
    }

    /// Whether `other` shares this version's core (only the egress differs).
    pub fn same_core(&self, other: &Tables) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Pins the egress of a backend slot (tests and fixtures with static next hops).
    pub fn set_next_hop(&mut self, backend: u32, n: NextHop) {
        Arc::make_mut(&mut self.egress).set_backend(backend, n);
    }

    /// Sets an interface's MTU (tests and fixtures).
    pub fn set_mtu(&mut self, ifindex: u32, mtu: u32) {
        Arc::make_mut(&mut self.egress).set_mtu(ifindex, mtu);
    }

    /// Sets a default route through a router whose MACs are known, for one family (tests
    /// and fixtures).
    pub fn set_gateway(&mut self, v6: bool, n: NextHop) {
        Arc::make_mut(&mut self.egress).set_default(v6, n);
    }

    /// The egress of a backend slot.
    #[inline(always)]
    pub fn backend_egress(&self, backend: u32) -> Result<NextHop, Miss> {
        self.egress.backend(backend)
    }

    /// The egress toward `dst` for a flow hashing to `hash` (see [`Egress::route`]).
    #[inline(always)]
    pub fn route(&self, dst: u128, v6: bool, hash: u32) -> Result<NextHop, Miss> {
        self.egress.route(dst, v6, hash)
    }

    /// Declares the appliance's own addresses (the control plane, from rtnetlink), replacing
    /// the ones these tables had: traffic to them that matches no flow is the kernel's
    /// (health-probe replies from a NAT backend's service port look like return traffic
    /// otherwise).
    pub fn set_local_addresses(&mut self, addrs: &[IpAddr]) {
        let core = Arc::make_mut(&mut self.core);
        core.local_addresses = TupleIndex::with_capacity(addrs.len());
        for a in addrs {
            core.local_addresses
                .insert_first((addr_to_u128(*a), 0, 0), 0);
        }
    }
}

impl Core {
    /// Adds one VIP: its backends, Maglev ring (`prev`'s when the inputs match), bucket
    /// table and indexes; `quorum` is whether it had its quorum in the version before.
    fn add_vip(
        &mut self,
        v: &Vip,
        healthy: &dyn Fn(&Vip, &Backend) -> bool,
        ring: Arc<Ring>,
        quorum: Option<bool>,
    ) -> Result<(), TableError> {
        let vslot = self.vips.len() as u32;
        if v.backends.len() > usize::from(u16::MAX) {
            return Err(TableError::TooManyBackends {
                vip: v.name.clone(),
                count: v.backends.len(),
            });
        }
        let address = addr_to_u128(v.address);
        let proto = v.protocol.number();
        let zone = v.zone();
        let taken = if zone != 0 {
            self.tenant_index
                .get(&(zone, address, v.port, proto))
                .copied()
        } else {
            self.vip_index.get(&(address, v.port, proto))
        };
        if let Some(other) = taken {
            return Err(TableError::DuplicateVip {
                vip: v.name.clone(),
                other: self.vips[other as usize].name.clone(),
                addr: v.address,
                port: v.port,
            });
        }
        let range = self.add_backends(vslot, v, proto, healthy);
        let quorum = self.apply_fallback(v, range.clone(), quorum);
        let pool_has_limits = range
            .clone()
            .any(|s| self.backends[s as usize].limit.is_some());
        let buckets = self.buckets(v, range.clone());
        let snat = self.index_snat(v, vslot);
        if zone != 0 {
            self.tenant_index
                .insert((zone, address, v.port, proto), vslot);
        } else {
            self.vip_index.insert_first((address, v.port, proto), vslot);
            self.vip_addresses.insert_first((address, 0, 0), vslot);
            self.fragment_vips
                .entry((address, proto))
                .and_modify(|f| *f = FragmentVip::Ambiguous)
                .or_insert(FragmentVip::Unique(vslot));
        }
        self.vips.push(VipEntry {
            quic: crate::quic::VipQuic::for_vip(v, range.clone())?,
            name: v.name.clone(),
            address,
            v6: v.address.is_ipv6(),
            port: v.port,
            proto,
            mode: v.mode,
            scheduler: v.scheduler,
            hash: v.hash,
            backends: range,
            ring,
            buckets,
            snat_alloc: snat.clone(),
            snat,
            hash_ports: v.hashes_port(),
            client_address: v.client_address,
            syn_proxy: v.syn_proxy,
            one_packet: v.udp_one_packet,
            persistence: crate::persist::settings(v, address, proto, zone),
            overflow: v.overflow,
            has_limits: pool_has_limits,
            quorum,
            zone,
            acl: None,
        });
        Ok(())
    }

    /// The `sh`/`dh` bucket table of a VIP whose backends hold slots `range`; empty for
    /// other schedulers.
    pub(super) fn buckets(&self, v: &Vip, range: Range<u32>) -> Vec<u16> {
        let pool = range.start as usize..range.end as usize;
        let (w, e) = (&self.weights[pool.clone()], &self.eligible[pool]);
        match v.scheduler {
            Scheduler::Sh => lvs_bucket_table(w, e, true),
            Scheduler::Dh => lvs_bucket_table(w, e, false),
            _ => Vec::new(),
        }
    }

    /// Appends VIP `vslot`'s backends and returns their slot range.
    fn add_backends(
        &mut self,
        vslot: u32,
        v: &Vip,
        proto: u8,
        healthy: &dyn Fn(&Vip, &Backend) -> bool,
    ) -> Range<u32> {
        let first = self.backends.len() as u32;
        for b in &v.backends {
            let mut e = vip_backend_entry(vslot, v, b, healthy(v, b));
            let slot = self.backends.len() as u32;
            if e.limit.is_some() {
                e.limit_index = self.limited.len() as u32;
                self.limited.push(slot);
            }
            self.backend_ids.insert((vslot, e.address, e.port), slot);
            if v.mode == Mode::Nat {
                self.nat_reverse
                    .insert_first((e.address, e.port, proto), slot);
            }
            self.weights.push(e.weight);
            self.eligible.push(e.eligible());
            self.backends.push(e);
        }
        first..self.backends.len() as u32
    }

    /// The Maglev ring of a VIP whose backends hold slots `range` (ineligible ones weigh 0):
    /// `prev` when it was built from the same inputs, else a new one; and whether it was
    /// built (not `prev` again).
    pub(super) fn ring_shared(
        &self,
        v: &Vip,
        range: Range<u32>,
        prev: Option<&Arc<Ring>>,
    ) -> Result<(Arc<Ring>, bool), TableError> {
        let ids: Vec<[u8; 18]> = v
            .backends
            .iter()
            .map(|b| backend_identity(b.address, b.port))
            .collect();
        let mb: Vec<MaglevBackend<'_>> = ids
            .iter()
            .zip(range)
            .map(|(id, s)| MaglevBackend {
                id,
                weight: self.weights[s as usize] * u32::from(self.eligible[s as usize]),
            })
            .collect();
        if let Some(p) = prev
            && p.built_from(&mb, v.maglev_table_size)
        {
            return Ok((Arc::clone(p), false));
        }
        Ring::build(&mb, v.maglev_table_size)
            .map(|r| (Arc::new(r), true))
            .map_err(|source| TableError::Maglev {
                vip: v.name.clone(),
                source,
            })
    }

    /// Heap bytes of every ring this version uses, shared ones included.
    pub fn ring_bytes(&self) -> usize {
        self.vips.iter().map(|v| v.ring.heap_bytes()).sum()
    }

    /// The VIP serving `addr:port` over `proto`: an exact port first, then a port-0 VIP.
    #[inline(always)]
    pub fn vip_lookup(&self, addr: u128, port: u16, proto: u8) -> Option<u32> {
        self.vip_index
            .get(&(addr, port, proto))
            .or_else(|| self.vip_index.get(&(addr, 0, proto)))
    }

    /// Whether any VIP uses this address (ICMP echo and errors match on address alone);
    /// returns the first such VIP.
    #[inline]
    pub fn vip_by_address(&self, addr: u128) -> Option<u32> {
        self.vip_addresses.get(&(addr, 0, 0))
    }

    /// The VIP a fragment belongs to, by address and protocol only.
    pub fn fragment_vip(&self, addr: u128, proto: u8) -> Option<FragmentVip> {
        self.fragment_vips.get(&(addr, proto)).copied()
    }

    /// NAT return traffic without a connection-table entry: the backend slot serving
    /// `addr:port` over `proto` in some NAT VIP.
    #[inline]
    pub fn nat_backend(&self, addr: u128, port: u16, proto: u8) -> Option<u32> {
        self.nat_reverse.get(&(addr, port, proto))
    }

    /// Whether `addr` is a FullNAT local address (return traffic to it is ours); the first
    /// VIP using it.
    #[inline]
    pub fn snat_vip(&self, addr: u128) -> Option<u32> {
        self.snat_addresses.get(&(addr, 0, 0))
    }

    /// The slot of the backend `addr:port` of VIP `vip`.
    pub fn backend_slot(&self, vip: u32, addr: u128, port: u16) -> Option<u32> {
        self.backend_ids.get(&(vip, addr, port)).copied()
    }

    /// Whether `addr` is one of the appliance's own addresses.
    #[inline]
    pub fn is_local(&self, addr: u128) -> bool {
        self.local_addresses.get(&(addr, 0, 0)).is_some()
    }

    /// The backend positions of a VIP as slot range `usize`s.
    pub fn pool_range(&self, vip: u32) -> Range<usize> {
        let r = &self.vips[vip as usize].backends;
        r.start as usize..r.end as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use config::{Encap, Protocol};

    /// 1,000 VIPs on one address, ports 1 to 1,000 (and the same ports on 1,000 addresses):
    /// a lookup visits about as many slots as with random keys, whatever field differs.
    #[test]
    fn tuple_keys_that_differ_in_one_field_do_not_cluster() {
        let one_address: Vec<(u128, u16, u8)> =
            (1..=1000u16).map(|p| (0xffff_c000_020a, p, 6)).collect();
        let many: Vec<(u128, u16, u8)> = (0..1000u128)
            .map(|a| (0xffff_c000_0200 + a, 80, 6))
            .collect();
        for (what, keys) in [("one address", one_address), ("many addresses", many)] {
            let mut ix = TupleIndex::with_capacity(keys.len());
            for (v, k) in keys.iter().enumerate() {
                ix.insert_first(*k, v as u32);
            }
            let mut total = 0;
            for (v, k) in keys.iter().enumerate() {
                assert_eq!(ix.get(k), Some(v as u32));
                let home = ix.home(k);
                let at = (0..ix.keys.len())
                    .map(|d| (home + d) & ix.mask)
                    .find(|&i| ix.keys[i] == *k);
                total += (at.expect("present").wrapping_sub(home) & ix.mask) + 1;
            }
            let mean = total as f64 / keys.len() as f64;
            assert!(mean < 2.0, "{what}: {mean:.2} slots per lookup on average");
        }
    }

    use testkit::unit::{backend, vip, with_vips as config};

    #[test]
    fn builds_lookups() {
        let mut dr = vip(
            "dr",
            "192.0.2.10",
            0,
            Mode::Dr,
            vec![backend("10.0.0.1", 0, 1)],
        );
        dr.protocol = Protocol::Udp;
        let mut web = vip(
            "web",
            "192.0.2.10",
            80,
            Mode::Nat,
            vec![backend("10.0.0.1", 8080, 1), backend("10.0.0.2", 8080, 0)],
        );
        web.backends[0].state = BackendState::Drain;
        let tun = vip(
            "tun",
            "2001:db8::10",
            443,
            Mode::Tunnel(Encap::Ipip),
            vec![backend("2001:db8:1::1", 443, 1)],
        );
        let c = config(vec![web, dr, tun]);
        let t = Tables::build(&c, &|_, _| true, 7).unwrap();
        let a = addr_to_u128("192.0.2.10".parse().unwrap());
        assert_eq!(t.vip_lookup(a, 80, 6), Some(0));
        assert_eq!(t.vip_lookup(a, 81, 6), None);
        assert_eq!(t.vip_lookup(a, 81, 17), Some(1));
        assert_eq!(t.vip_by_address(a), Some(0));
        assert_eq!(t.backends.len(), 4);
        // Drain and weight 0 are not eligible, so the NAT VIP's ring is empty.
        assert_eq!(t.eligible, [false, false, true, true]);
        assert!(t.vips[0].ring.is_empty());
        assert!(t.backends[0].keeps_flows());
        let b = addr_to_u128("10.0.0.1".parse().unwrap());
        assert_eq!(t.nat_backend(b, 8080, 6), Some(0));
        assert_eq!(t.backend_slot(1, b, 0), Some(2));
        assert_eq!(t.fragment_vip(a, 6), Some(FragmentVip::Unique(0)));
        assert_eq!(t.backend_egress(0), Err(Miss::NoNeighbor));
    }

    #[test]
    fn unhealthy_backends_leave_the_ring_and_duplicates_fail() {
        let web = vip(
            "web",
            "192.0.2.10",
            80,
            Mode::Dr,
            vec![backend("10.0.0.1", 80, 1), backend("10.0.0.2", 80, 1)],
        );
        let c = config(vec![web.clone()]);
        let t = Tables::build(&c, &|_, b| b.address.to_string() != "10.0.0.1", 1).unwrap();
        assert_eq!(t.vips[0].ring.counts(2), [0, 65537]);
        assert!(!t.backends[0].keeps_flows());
        let mut dup = web.clone();
        dup.name = "web2".into();
        let err = Tables::build(&config(vec![web, dup]), &|_, _| true, 1).unwrap_err();
        assert!(
            err.to_string().contains("already served by vip web"),
            "{err}"
        );
    }

    #[test]
    fn an_inhibiting_backend_keeps_its_flows_while_failed() {
        let mut web = vip(
            "web",
            "192.0.2.10",
            80,
            Mode::Nat,
            vec![backend("10.0.0.1", 80, 1), backend("10.0.0.2", 80, 1)],
        );
        web.inhibit_on_failure = true;
        web.backends[1].inhibit_on_failure = Some(false);
        let t = Tables::build(&config(vec![web]), &|_, _| false, 1).unwrap();
        assert_eq!(t.eligible, [false, false], "no new flows either way");
        assert!(
            t.backends[0].keeps_flows(),
            "inhibited: kept, as at weight 0"
        );
        assert!(!t.backends[1].keeps_flows(), "removed: re-chosen");
    }
}
