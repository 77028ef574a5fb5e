//! The XDP steering program: loading, attaching, map updates and counters.
//!
//! One loaded program serves every datapath interface and decides per frame whether the load
//! balancer owns it (bpf/steer.bpf.c). The control plane changes what is steered by editing
//! its maps (VIPs, return-traffic keys, our own addresses); it is never reloaded for that.
//! Attaching first removes a Sluice program a crashed run left behind, and refuses to touch
//! anybody else's program.

mod acl;
mod keys;
mod timing;

use std::mem::offset_of;
use std::net::IpAddr;
use std::os::fd::{AsFd, RawFd};

use libbpf_rs::{MapCore, MapFlags, Object, ObjectBuilder, Xdp, XdpFlags};

pub use self::acl::{AclDrops, AclKey};
use self::keys::{KeySet, SteerKey};
use super::DatapathError;
use super::abi::{
    MapDef, flood_conf, flood_counter, flood_cpu, maps, rodata, steer_counter, steer_val,
};
use super::flowcache::FlowCache;
use super::stateless::{self, StatelessFill};
use crate::config::model::{Flood, XdpMode};
use crate::lb::Tables;

/// The object clang built from bpf/steer.bpf.c and its headers (see build.rs).
static STEER_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/steer.bpf.o"));

/// Name of the program in the object; also how a leftover Sluice program is recognised.
pub const PROG_NAME: &str = "sluice_steer";
/// Interfaces the program has slots for (its `if_slots` and `tx_ports`: bpf/consts.h
/// MAX_INTERFACES).
pub const MAX_INTERFACES: u32 = maps::IF_SLOTS.entries;
/// Queues per interface the XSKMAP has slots for (bpf/consts.h MAX_QUEUES): its slot of a
/// frame is interface slot * MAX_QUEUES + queue.
pub const MAX_QUEUES: u32 = maps::XSKS.entries / MAX_INTERFACES;
const _: () = assert!(
    maps::XSKS.entries == MAX_INTERFACES * MAX_QUEUES && maps::TX_PORTS.entries == MAX_INTERFACES,
    "maps.h: an XSKMAP slot per queue of every interface slot, an egress per interface slot"
);

pub use lb::steering::{ReturnKey, VipKey};

/// Counters the program keeps, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// Frames redirected to an AF_XDP socket.
    pub steered: u64,
    /// Frames passed to the kernel stack.
    pub passed: u64,
    /// Owned frames passed to the kernel because no socket serves their queue.
    pub no_socket: u64,
    /// Steered non-first fragments (matched on address only).
    pub fragments: u64,
    /// Answers to DR VIPs' outbound ports the program forwarded to their owner itself.
    pub outbound: u64,
    /// Of the steered frames, VXLAN frames for a tenant VIP.
    pub tenant: u64,
    /// IPv6 frames to a VIP with more extension headers than either parser walks, dropped
    /// in the program (the engine drops them as `too_many_headers`).
    pub deep: u64,
    /// Frames for the engine dropped because no socket took them while the program was
    /// held (a hand-over between processes, or a crashed one): never the kernel's.
    pub held: u64,
    /// Frames to a VIP its allow and deny lists refused, dropped in the program (bpf/acl.h).
    pub denied: u64,
    /// Frames a running capture copied into its ring (bpf/capture.h).
    pub captured: u64,
    /// Frames a running capture lost because its ring had no room.
    pub capture_lost: u64,
    /// Flood mode.
    pub flood: FloodCounters,
}

/// Flood mode's counters (the program's `flood_counters`), summed over CPUs, and its state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodCounters {
    /// VIP frames that may open a flow: the detector's input.
    pub first: u64,
    /// Of those, passed on to the engine while the mode was on (inside their source's
    /// bucket).
    pub admitted: u64,
    /// Dropped in XDP while the mode was on (their source over its bucket).
    pub shed: u64,
    /// Times a CPU switched the mode on.
    pub switched_on: u64,
    /// Times a CPU switched it off.
    pub switched_off: u64,
    /// First frames from a source that got no bucket (the bucket map refused the insert),
    /// let through.
    pub no_room: u64,
    /// Flows that proved themselves (their first frame forwarded by the flow cache, or their
    /// first FIN or RST while the cache held them) and gave their source's bucket tokens
    /// back.
    pub refunded: u64,
    /// Answered by the program itself from a DR VIP's ring while the mode was on.
    pub stateless: u64,
    /// CPUs in flood mode now: on, and still seeing first frames in the last two seconds.
    pub active_cpus: u32,
}

/// Slots of `counters` (bpf/consts.h `enum steer_counter`).
const CNT_MAX: usize = steer_counter::CNT_MAX.0 as usize;
/// Slots of `flood_counters` (bpf/consts.h `enum flood_counter`).
const FL_MAX: usize = flood_counter::FL_MAX.0 as usize;
const _: () = assert!(
    maps::COUNTERS.entries as usize == CNT_MAX && maps::FLOOD_COUNTERS.entries as usize == FL_MAX
);
/// How recent a CPU's last first frame must be for its mode to count as on: a CPU the flood
/// left sees no frame that would switch it off.
const FLOOD_ACTIVE_NS: u64 = 2_000_000_000;

/// How the program ended up attached to an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (XDP_FLAGS_DRV_MODE).
    Native,
    /// In the generic skb path (XDP_FLAGS_SKB_MODE).
    Generic,
}

impl AttachMode {
    fn flags(self) -> XdpFlags {
        match self {
            AttachMode::Native => XdpFlags::DRV_MODE,
            AttachMode::Generic => XdpFlags::SKB_MODE,
        }
    }

    /// Lower-case name for logs and the console.
    pub fn name(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        }
    }
}

/// What an interface's XDP hook holds, seen from one loaded program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    /// This program, in this mode.
    Ours(AttachMode),
    /// Nothing at all.
    Nothing,
    /// Another program (another loader's, or another Sluice process's).
    Other {
        id: u32,
        name: String,
        mode: AttachMode,
    },
}

/// The loaded program and its maps.
pub struct Steer {
    obj: Object,
    vips: KeySet,
    returns: KeySet,
    hosts: KeySet,
    stateless: stateless::Held,
    /// The VIPs' allow and deny lists (bpf/acl.h), and the ids the VIP keys point at.
    acls: acl::AclState,
    acls_used: std::collections::HashSet<u16>,
}

impl std::fmt::Debug for Steer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Steer")
            .field("vips", &self.vips.len())
            .finish()
    }
}

/// True when libbpf's error is missing privileges (EPERM from bpf() or netlink).
fn not_permitted(e: &libbpf_rs::Error) -> bool {
    matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || e.to_string().contains("Operation not permitted")
}

/// Maps a libbpf error to ours, singling out missing privileges.
pub(super) fn bpf_err(what: &'static str, source: libbpf_rs::Error) -> DatapathError {
    if not_permitted(&source) {
        DatapathError::NotPermitted { what, source }
    } else {
        DatapathError::Bpf { what, source }
    }
}

/// What the steering object is called in errors.
const OBJECT: &str = "steering";

impl Steer {
    /// Loads the program and its maps into the kernel (nothing is attached yet), without
    /// the flow cache.
    pub fn load() -> Result<Steer, DatapathError> {
        Steer::load_with_cache(None)
    }

    /// Loads the program; with `cache`, the program forwards the cache's hits itself and
    /// uses the cache's maps (see flowcache.rs). Without it the cache code is pruned by the
    /// verifier (its switch is read-only data) and its maps are one entry each.
    pub fn load_with_cache(cache: Option<&FlowCache>) -> Result<Steer, DatapathError> {
        Steer::load_object(STEER_OBJ, cache)
    }

    /// [`Steer::load_with_cache`] of another build of bpf/steer.bpf.c (the xdp bench's
    /// baseline: an older build's object, whose maps are found by the same names).
    pub fn load_object(object: &[u8], cache: Option<&FlowCache>) -> Result<Steer, DatapathError> {
        let mut open = ObjectBuilder::default()
            .open_memory(object)
            .map_err(|e| bpf_err("opening the steering program", e))?;
        for mut m in open.maps_mut() {
            let name = m.name().to_string_lossy().into_owned();
            if name.ends_with(".rodata") {
                // The program's read-only data (bpf/maps.h): `cache_on` is its switch.
                let at = offset_of!(rodata, cache_on);
                if let (Some(v), Some(_)) = (m.initial_value_mut(), cache)
                    && let Some(on) = v.get_mut(at..at + size_of::<u32>())
                {
                    on.copy_from_slice(&1u32.to_ne_bytes());
                }
            } else if let Some(c) = cache {
                if let Some(fd) = c.map_fd(&name) {
                    m.reuse_fd(fd)
                        .map_err(|e| bpf_err("sharing the flow cache maps", e))?;
                }
            } else if [maps::FLOW_CACHE4, maps::FLOW_CACHE6, maps::STATELESS_RINGS]
                .iter()
                .any(|m| m.name == name)
            {
                m.set_max_entries(1)
                    .map_err(|e| bpf_err("sizing the unused flow cache", e))?;
            }
        }
        let obj = open
            .load()
            .map_err(|e| bpf_err("loading the steering program", e))?;
        Ok(Steer {
            obj,
            vips: KeySet::new(),
            returns: KeySet::new(),
            hosts: KeySet::new(),
            stateless: stateless::Held::default(),
            acls: acl::AclState::default(),
            acls_used: Default::default(),
        })
    }

    pub(super) fn map(&self, def: MapDef) -> Result<libbpf_rs::Map<'_>, DatapathError> {
        map_in(&self.obj, def)
    }

    fn prog(&self) -> Result<libbpf_rs::Program<'_>, DatapathError> {
        self.obj
            .progs()
            .find(|p| p.name() == std::ffi::OsStr::new(PROG_NAME))
            .ok_or(MISSING_PROG)
    }

    fn prog_mut(&self) -> Result<libbpf_rs::ProgramMut<'_>, DatapathError> {
        self.obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(PROG_NAME))
            .ok_or(MISSING_PROG)
    }

    /// Attaches to `ifindex` in `mode`, first removing a Sluice program a previous run left
    /// there; refuses when another program is attached.
    pub fn attach(
        &self,
        ifname: &str,
        ifindex: u32,
        mode: XdpMode,
    ) -> Result<AttachMode, DatapathError> {
        let prog = self.prog()?;
        let xdp = Xdp::new(prog.as_fd());
        let idx = ifindex as i32;
        if let Some((old, mode)) = sluice_attached(&xdp, ifname, idx)? {
            return replace(prog.as_fd(), ifname, ifindex, old, mode);
        }
        let try_mode = |m: AttachMode| xdp.attach(idx, m.flags() | XdpFlags::UPDATE_IF_NOEXIST);
        match mode {
            XdpMode::Native => try_mode(AttachMode::Native)
                .map(|()| AttachMode::Native)
                .map_err(|e| attach_err(ifname, AttachMode::Native, e)),
            XdpMode::Generic => try_mode(AttachMode::Generic)
                .map(|()| AttachMode::Generic)
                .map_err(|e| attach_err(ifname, AttachMode::Generic, e)),
            XdpMode::Auto => match try_mode(AttachMode::Native) {
                Ok(()) => Ok(AttachMode::Native),
                Err(native) => {
                    tracing::info!(interface = ifname, error = %native, "native XDP refused; trying generic");
                    try_mode(AttachMode::Generic)
                        .map(|()| AttachMode::Generic)
                        .map_err(|e| attach_err(ifname, AttachMode::Generic, e))
                }
            },
        }
    }

    /// Detaches from `ifindex` if (and only if) our program is what is attached there.
    pub fn detach(&self, ifindex: u32, mode: AttachMode) -> Result<(), DatapathError> {
        let prog = self.prog()?;
        let xdp = Xdp::new(prog.as_fd());
        let q = match xdp.query(ifindex as i32, XdpFlags::NONE) {
            Ok(q) => q,
            // The interface is gone: so is the attachment.
            Err(_) => return Ok(()),
        };
        let attached = match mode {
            AttachMode::Native => q.drv_prog_id,
            AttachMode::Generic => q.skb_prog_id,
        };
        if attached != 0 && prog_name(attached).as_deref() == Some(PROG_NAME) {
            xdp.detach(ifindex as i32, mode.flags())
                .map_err(|source| DatapathError::Detach { ifindex, source })?;
        }
        Ok(())
    }

    /// What is attached to `ifindex` now, seen from this program (see [`Attached`]).
    pub fn attached_on(&self, ifname: &str, ifindex: u32) -> Result<Attached, DatapathError> {
        let prog = self.prog()?;
        let ours = libbpf_rs::Program::id_from_fd(prog.as_fd())
            .map_err(|e| bpf_err("reading the steering program's id", e))?;
        let q = Xdp::new(prog.as_fd())
            .query(ifindex as i32, XdpFlags::NONE)
            .map_err(|source| DatapathError::XdpQuery {
                interface: ifname.to_string(),
                source,
            })?;
        let both = [
            (q.drv_prog_id, AttachMode::Native),
            (q.skb_prog_id, AttachMode::Generic),
        ];
        if let Some((_, mode)) = both.iter().find(|(id, _)| *id == ours) {
            return Ok(Attached::Ours(*mode));
        }
        Ok(match both.iter().find(|(id, _)| *id != 0) {
            Some(&(id, mode)) => Attached::Other {
                id,
                name: prog_name(id).unwrap_or_else(|| "?".into()),
                mode,
            },
            None => Attached::Nothing,
        })
    }

    /// Puts this program in the place of program `old` (attached in `mode`) on `ifindex`,
    /// in one step: an operator taking the interface back from another program.
    pub fn take_back(
        &self,
        ifname: &str,
        ifindex: u32,
        old: u32,
        mode: AttachMode,
    ) -> Result<AttachMode, DatapathError> {
        replace(self.prog()?.as_fd(), ifname, ifindex, old, mode)
    }

    /// Holds (`true`) or releases the program's frames for the engine: held, a frame that
    /// finds no socket is dropped and counted instead of passed to the kernel (see
    /// bpf/maps.h `hold`). The running appliance holds from the moment its sockets are
    /// bound, so a hand-over or a crash never hands a flow's frames to the kernel.
    pub fn set_hold(&self, on: bool) -> Result<(), DatapathError> {
        self.map(maps::HOLD)?
            .update(
                &0u32.to_ne_bytes(),
                &u32::from(on).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|e| bpf_err("setting the steering program's hold", e))
    }

    /// Gives interface `ifindex` an XSKMAP slot.
    pub fn set_interface_slot(&self, ifindex: u32, slot: u32) -> Result<(), DatapathError> {
        self.map(maps::IF_SLOTS)?
            .update(&ifindex.to_ne_bytes(), &slot.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("setting an interface slot", e))
    }

    /// Directs frames of interface slot `slot`, queue `queue` to the socket `fd`.
    pub fn set_socket(&self, slot: u32, queue: u32, fd: RawFd) -> Result<(), DatapathError> {
        let key = slot * MAX_QUEUES + queue;
        self.map(maps::XSKS)?
            .update(
                &key.to_ne_bytes(),
                &(fd as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .map_err(|e| bpf_err("inserting an AF_XDP socket into the XSKMAP", e))
    }

    fn sync(&mut self, which: Which, want: KeySet) -> Result<(), DatapathError> {
        let map = self.map(maps::STEER_KEYS)?;
        let current = match which {
            Which::Vips => &self.vips,
            Which::Returns => &self.returns,
            Which::Hosts => &self.hosts,
        };
        // Add before removing, so a key present in both versions is never missing. When an
        // add fails (map full), take back this call's additions and changes: the old set
        // stays whole. A changed value (a VIP's mode or slot) is one update in place.
        let mut done: Vec<(SteerKey, Option<[u8; steer_val::LEN]>)> = Vec::new();
        for (k, v) in &want {
            let old = current.get(k);
            if old == Some(v) {
                continue;
            }
            if let Err(e) = map.update(&k.bytes(), v, MapFlags::ANY) {
                for (k, old) in &done {
                    let _ = match old {
                        Some(old) => map.update(&k.bytes(), old, MapFlags::ANY),
                        None => map.delete(&k.bytes()),
                    };
                }
                return Err(bpf_err("adding a steering key (map full?)", e));
            }
            done.push((*k, old.copied()));
        }
        // The kind byte keeps the three sets' keys apart, so removing one never removes
        // another set's key. A key that is already gone is what we wanted.
        for k in current.keys().filter(|k| !want.contains_key(k)) {
            let _ = map.delete(&k.bytes());
        }
        match which {
            Which::Vips => self.vips = want,
            Which::Returns => self.returns = want,
            Which::Hosts => self.hosts = want,
        }
        Ok(())
    }

    /// Replaces the VIP set; no VIP has allow or deny lists.
    pub fn set_vips(&mut self, vips: &[VipKey]) -> Result<(), DatapathError> {
        self.set_vips_with_acls(vips, &[])
    }

    /// Replaces the VIP set and the VIPs' allow and deny lists: a VIP's new lists are
    /// written before its key points at them, its old ones removed after (steer/acl.rs).
    pub fn set_vips_with_acls(
        &mut self,
        vips: &[VipKey],
        acls: &[AclKey],
    ) -> Result<(), DatapathError> {
        let mut state = std::mem::take(&mut self.acls);
        let ids = state.write(self, acls);
        self.acls = state;
        let ids = ids?;
        let rings = stateless::ring_slots(vips.iter().map(|v| (v.slot, v.mode)));
        let want = vips
            .iter()
            .flat_map(|v| {
                let acl = ids.get(&v.slot).copied().unwrap_or(0);
                keys::vip_entries(v, rings.get(&v.slot).copied(), acl)
            })
            .collect();
        let synced = self.sync(Which::Vips, want);
        if synced.is_ok() {
            self.acls_used = ids.values().copied().collect();
        }
        let mut state = std::mem::take(&mut self.acls);
        state.retire(self, &self.acls_used);
        self.acls = state;
        synced
    }

    /// Frames the program dropped for a VIP's lists, per (VIP, list).
    pub fn acl_drops(&self) -> Result<AclDrops, DatapathError> {
        let map = self.map(maps::ACL_DROPS)?;
        let mut out = Vec::new();
        for (slot, k) in self.acls.slots() {
            let per_cpu = map
                .lookup_percpu(&u32::from(slot).to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| bpf_err("reading allow and deny counters", e))?
                .unwrap_or_default();
            let n: u64 = per_cpu
                .iter()
                .filter_map(|v| v.get(..8).and_then(|b| b.try_into().ok()))
                .map(u64::from_ne_bytes)
                .sum();
            out.push((k, n));
        }
        Ok(out)
    }

    /// The entries of the IPv4 and IPv6 tries (for tests: a change leaves no stale ones).
    pub fn acl_entries(&self) -> Result<(usize, usize), DatapathError> {
        let n = |def| self.map(def).map(|m| m.keys().count());
        Ok((n(maps::ACL4)?, n(maps::ACL6)?))
    }

    /// Replaces the return-traffic set.
    pub fn set_return_keys(&mut self, keys: &[ReturnKey]) -> Result<(), DatapathError> {
        let want = keys.iter().flat_map(keys::return_entries).collect();
        self.sync(Which::Returns, want)
    }

    /// Replaces the appliance's own addresses: a backend's frames to these are health-probe
    /// replies for the kernel, not NAT return traffic.
    pub fn set_host_addresses(&mut self, addrs: &[IpAddr]) -> Result<(), DatapathError> {
        let want = addrs.iter().map(|a| keys::host_entry(*a)).collect();
        self.sync(Which::Hosts, want)
    }

    /// Runs `frame` through the loaded program with BPF_PROG_TEST_RUN and says whether the
    /// program claims it (it then looks for a socket, finds none for a test run, and counts
    /// `no_socket`). For tests and `trace`-style diagnostics on a program that is not
    /// attached anywhere, so that no other frame moves the counters meanwhile.
    pub fn classify(&self, frame: &[u8]) -> Result<bool, DatapathError> {
        let before = self.counters()?.no_socket;
        let prog = self.prog_mut()?;
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        let out = prog
            .test_run(input)
            .map_err(|e| bpf_err("test-running the steering program", e))?;
        if out.return_value != libbpf_rs::libbpf_sys::XDP_PASS {
            return Err(DatapathError::TestRunAction(out.return_value));
        }
        Ok(self.counters()?.no_socket > before)
    }

    /// Runs `frame` through the loaded program with BPF_PROG_TEST_RUN, arriving on
    /// `ingress` (an existing interface, or 0 for none), and returns the XDP action, the
    /// frame as the program left it, and whether the steering claimed it for the engine
    /// (which a test run sees as XDP_PASS with `no_socket` counted).
    pub fn test_run(
        &self,
        frame: &[u8],
        ingress: u32,
    ) -> Result<(u32, Vec<u8>, bool), DatapathError> {
        let before = self.counters()?.no_socket;
        let prog = self.prog_mut()?;
        let mut ctx = timing::test_ctx(frame, ingress);
        let mut out = vec![0u8; frame.len() + 512];
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            context_in: (ingress != 0).then_some(&mut ctx[..]),
            ..Default::default()
        };
        let res = prog
            .test_run(input)
            .map_err(|e| bpf_err("test-running the steering program", e))?;
        let action = res.return_value;
        let data = res.data.map(|d| d.to_vec()).unwrap_or_default();
        let steered = self.counters()?.no_socket > before;
        Ok((action, data, steered))
    }

    /// The program's counters summed over CPUs.
    pub fn counters(&self) -> Result<SteerCounters, DatapathError> {
        let c = self.sums::<CNT_MAX>(maps::COUNTERS)?;
        let at = |i: steer_counter| c[i.0 as usize];
        Ok(SteerCounters {
            steered: at(steer_counter::CNT_STEERED),
            passed: at(steer_counter::CNT_PASSED),
            no_socket: at(steer_counter::CNT_NO_SOCKET),
            fragments: at(steer_counter::CNT_FRAGMENTS),
            outbound: at(steer_counter::CNT_OUTBOUND),
            tenant: at(steer_counter::CNT_TENANT),
            deep: at(steer_counter::CNT_DEEP),
            held: at(steer_counter::CNT_HELD),
            denied: at(steer_counter::CNT_DENIED),
            captured: at(steer_counter::CNT_CAPTURED),
            capture_lost: at(steer_counter::CNT_CAPTURE_LOST),
            flood: self.flood_counters()?,
        })
    }

    /// Slots `0..N` of the per-CPU counter array `def`, each summed over CPUs.
    fn sums<const N: usize>(&self, def: MapDef) -> Result<[u64; N], DatapathError> {
        let map = self.map(def)?;
        let mut sums = [0u64; N];
        for (i, sum) in sums.iter_mut().enumerate() {
            let per_cpu = map
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| bpf_err("reading steering counters", e))?
                .unwrap_or_default();
            *sum = per_cpu
                .iter()
                .filter_map(|v| {
                    v.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map(u64::from_ne_bytes)
                })
                .sum();
        }
        Ok(sums)
    }

    /// Writes `[flood]` into the program's `flood_conf` (the mode never switches on when
    /// it is disabled). Takes effect at the next frame.
    pub fn set_flood(&self, flood: &Flood) -> Result<(), DatapathError> {
        let conf = flood_conf {
            threshold: if flood.enabled {
                u64::from(flood.threshold)
            } else {
                0
            },
            src_rate: u64::from(flood.per_source_rate),
            src_burst: u64::from(flood.per_source_burst),
        };
        self.map(maps::FLOOD_CONF)?
            .update(&0u32.to_ne_bytes(), &conf.to_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("writing the flood-mode settings", e))
    }

    /// Writes the stateless answer's rings and next hops from `tables` (see stateless.rs);
    /// `cache` is the flow cache the program was loaded with (the answer leaves through
    /// its egress map, so without it there is nothing to write).
    pub fn set_stateless(
        &mut self,
        tables: &Tables,
        cache: Option<&FlowCache>,
    ) -> Result<StatelessFill, DatapathError> {
        let Some(cache) = cache else {
            return Ok(StatelessFill::default());
        };
        let maps = stateless::Maps {
            vips: map_in(&self.obj, maps::STATELESS_VIPS)?,
            rings: map_in(&self.obj, maps::STATELESS_RINGS)?,
            hops: map_in(&self.obj, maps::STATELESS_HOPS)?,
        };
        let filled = stateless::fill(&maps, &mut self.stateless, tables, cache);
        if filled.is_err() {
            // Half-written rings must not answer: no VIP has one until a fill succeeds.
            stateless::switch_off(&maps.vips, &mut self.stateless);
        }
        filled
    }

    fn flood_counters(&self) -> Result<FloodCounters, DatapathError> {
        let c = self.sums::<FL_MAX>(maps::FLOOD_COUNTERS)?;
        let at = |i: flood_counter| c[i.0 as usize];
        let per_cpu = self
            .map(maps::FLOOD_CPUS)?
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("reading the flood-mode state", e))?
            .unwrap_or_default();
        // bpf_ktime_get_ns is CLOCK_MONOTONIC.
        let now = super::monotonic_ns();
        let active_cpus = per_cpu
            .iter()
            .filter_map(|b| flood_cpu::from_bytes(b))
            .filter(|c| c.on != 0 && now.saturating_sub(c.last_seen) < FLOOD_ACTIVE_NS)
            .count() as u32;
        Ok(FloodCounters {
            first: at(flood_counter::FL_FIRST),
            admitted: at(flood_counter::FL_ADMITTED),
            shed: at(flood_counter::FL_SHED),
            switched_on: at(flood_counter::FL_ON),
            switched_off: at(flood_counter::FL_OFF),
            no_room: at(flood_counter::FL_NO_ROOM),
            refunded: at(flood_counter::FL_REFUNDED),
            stateless: at(flood_counter::FL_STATELESS),
            active_cpus,
        })
    }
}

#[derive(Debug, Clone, Copy)]
enum Which {
    Vips,
    Returns,
    Hosts,
}

/// The map `def` of the loaded object.
fn map_in(obj: &Object, def: MapDef) -> Result<libbpf_rs::Map<'_>, DatapathError> {
    obj.maps()
        .find(|m| m.name() == std::ffi::OsStr::new(def.name))
        .ok_or(DatapathError::MissingMap {
            object: OBJECT,
            map: def.name,
        })
}

/// The steering object without its program: built from another source.
const MISSING_PROG: DatapathError = DatapathError::MissingProgram {
    object: OBJECT,
    program: PROG_NAME,
};

fn attach_err(ifname: &str, mode: AttachMode, source: libbpf_rs::Error) -> DatapathError {
    if not_permitted(&source) {
        return DatapathError::NotPermitted {
            what: "attaching XDP",
            source,
        };
    }
    DatapathError::XdpAttach {
        interface: ifname.to_string(),
        mode: mode.name(),
        source,
    }
}

/// The name of the loaded BPF program with this id.
/// The id of the Sluice program attached to interface `ifname` (a running appliance that
/// hands over to this process, or one that crashed), if one is.
pub fn attached_sluice(ifname: &str) -> Option<u32> {
    let ifindex = nix::net::if_::if_nametoindex(ifname).ok()?;
    let (drv, skb) = sys::xdp::attached(ifindex).ok()?;
    [drv, skb]
        .into_iter()
        .find(|&id| id != 0 && prog_name(id).as_deref() == Some(PROG_NAME))
}

fn prog_name(id: u32) -> Option<String> {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| p.name.to_string_lossy().into_owned())
}

/// The Sluice program attached to `ifindex` (a running appliance handing over to this one,
/// or a run that crashed), and in which mode; `None` when nothing is attached. Another
/// program is refused: it is not ours to replace.
fn sluice_attached(
    xdp: &Xdp<'_>,
    ifname: &str,
    ifindex: i32,
) -> Result<Option<(u32, AttachMode)>, DatapathError> {
    let q = xdp
        .query(ifindex, XdpFlags::NONE)
        .map_err(|source| DatapathError::XdpQuery {
            interface: ifname.to_string(),
            source,
        })?;
    let mut found = None;
    for (id, mode) in [
        (q.drv_prog_id, AttachMode::Native),
        (q.skb_prog_id, AttachMode::Generic),
    ] {
        if id == 0 {
            continue;
        }
        match prog_name(id) {
            Some(name) if name == PROG_NAME => found = Some((id, mode)),
            other => {
                return Err(DatapathError::ForeignProgram {
                    interface: ifname.to_string(),
                    mode: mode.name(),
                    id,
                    name: other.unwrap_or_else(|| "?".into()),
                });
            }
        }
    }
    Ok(found)
}

/// Puts `prog` in the place of the Sluice program `old` on `ifindex` in one step: every
/// frame meets one or the other, so a hand-over or a restart after a crash leaves no moment
/// in which the kernel sees the flows' frames.
fn replace(
    prog: std::os::fd::BorrowedFd<'_>,
    ifname: &str,
    ifindex: u32,
    old: u32,
    mode: AttachMode,
) -> Result<AttachMode, DatapathError> {
    let err = |source: std::io::Error| DatapathError::Leftover {
        interface: ifname.to_string(),
        id: old,
        source: libbpf_rs::Error::from(source),
    };
    let old_fd = libbpf_rs::Program::fd_from_id(old).map_err(|e| DatapathError::Leftover {
        interface: ifname.to_string(),
        id: old,
        source: e,
    })?;
    let m = match mode {
        AttachMode::Native => sys::xdp::Mode::Native,
        AttachMode::Generic => sys::xdp::Mode::Generic,
    };
    sys::xdp::replace(ifindex, prog, old_fd.as_fd(), m).map_err(err)?;
    tracing::info!(
        interface = ifname,
        replaced = old,
        mode = mode.name(),
        "steering program replaced the one attached before, in one step"
    );
    Ok(mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated table of maps (abi.rs `maps`) is the object's: every map it declares,
    /// with its size, and nothing else.
    #[test]
    fn the_map_table_is_the_objects() {
        let open = ObjectBuilder::default()
            .open_memory(STEER_OBJ)
            .expect("the embedded object opens");
        let declared: Vec<(String, u32)> = open
            .maps()
            .map(|m| (m.name().to_string_lossy().into_owned(), m.max_entries()))
            .filter(|(name, _)| !name.contains('.'))
            .collect();
        let table: Vec<(String, u32)> = maps::ALL
            .iter()
            .map(|m| (m.name.to_string(), m.entries))
            .collect();
        assert_eq!(table, declared);
    }

    /// What libbpf said while the tests of this module loaded programs.
    static LIBBPF_SAID: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

    fn keep_libbpf_line(_level: libbpf_rs::PrintLevel, line: String) {
        LIBBPF_SAID
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_str(&line);
    }

    /// The kernel's verifier takes the program both ways: without the flow cache (its code
    /// pruned) and with it (every path). A change that makes either too complex for the
    /// verifier fails here, in the unit tests, rather than in every namespace test. And the
    /// kernel takes the object's BTF for every map (an array map's key typed with an enum,
    /// for one, is refused, and libbpf then creates the map without its types). Needs root
    /// (CAP_BPF), as the appliance does.
    #[test]
    fn the_verifier_accepts_the_program_with_and_without_the_cache() {
        assert!(
            nix::unistd::geteuid().is_root(),
            "loading BPF programs needs root (CAP_BPF); run the tests as root"
        );
        let before = libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Warn, keep_libbpf_line)));
        // A refusal shows the verifier's log (libbpf prints it at warning level).
        let said = || {
            let s = LIBBPF_SAID.lock().unwrap_or_else(|p| p.into_inner());
            s[s.len().saturating_sub(6000)..].to_string()
        };
        Steer::load().unwrap_or_else(|e| panic!("without the flow cache: {e}\n{}", said()));
        let cache = FlowCache::create(1024).expect("flow cache maps");
        Steer::load_with_cache(Some(&cache))
            .unwrap_or_else(|e| panic!("with the flow cache: {e}\n{}", said()));
        libbpf_rs::set_print(before);
        let said = LIBBPF_SAID.lock().unwrap_or_else(|p| p.into_inner());
        assert!(!said.contains("without BTF"), "libbpf: {said}");
    }
}
