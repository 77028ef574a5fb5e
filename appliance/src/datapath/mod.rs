//! The datapath's I/O: the XDP steering program, AF_XDP sockets and the worker threads that
//! run the packet core over them, plus neighbour and route resolution through rtnetlink.
//!
//! This is the edge where Sluice touches the kernel: the control plane calls
//! [`Datapath::start`] with a [`FrameHandler`] factory (`engine::LbHandler` runs `lb::process`), edits
//! what is steered with [`Datapath::set_vips`] and [`Datapath::set_return_keys`], reads
//! [`Datapath::stats`], and calls [`Datapath::stop`] (or drops it) to join the workers and
//! detach XDP. See docs/ARCHITECTURE.md, "Packet path".
//!
//! Attaching, detaching and interface lookups go through netlink and ioctl sockets opened
//! by the calling thread, so `start` and `stop` must run in the network namespace of the
//! datapath interfaces (the tests run the datapath on a thread that entered the appliance
//! namespace first). No BPF object is pinned, so bpffs is not needed.
//!
//! ```text
//! NIC/veth rx -> steer.bpf.c --owned--> XSKMAP[slot(ifindex) * MAX_QUEUES + queue] -> Xsk rx ring
//!                           \--else--> kernel stack
//! worker w: rx batch -> FrameHandler::handle -> Tx{ifindex} -> tx ring (same socket, or a
//!           copy into w's socket on the egress interface) | Drop -> free stack -> fill ring
//! ```

mod abi;
pub mod capture;
pub mod doorbell;
mod error;
pub mod flowcache;
pub mod frame;
mod handoff;
pub mod neigh;
mod ntuple;
pub mod stateless;
pub mod steer;
pub mod vipprobe;
pub mod watch;
mod worker;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use sys::xsk;

pub use error::{DatapathError, SettingsError};
pub use frame::{Frame, FrameHandler, HEADROOM};
pub use ntuple::ReturnSteering;
pub use steer::{
    AclDrops, AclKey, AttachMode, Attached, FloodCounters, ReturnKey, SteerCounters, VipKey,
};
pub use watch::{LinkState, WatchEvent, WatchReport};
pub use worker::{instant_ns, monotonic_ns};

use crate::config::model::{Appliance, XdpMode};
use steer::{MAX_INTERFACES, MAX_QUEUES, Steer};
use worker::{Port, RingCounters, Worker};
pub use xsk::KernelStats;
use xsk::{Xsk, XskConfig, kernel_stats};

/// What [`Datapath::start`] needs; usually built from the config's `[appliance]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatapathConfig {
    /// Datapath interfaces (one-arm: one; two-arm: uplink first).
    pub interfaces: Vec<String>,
    /// How to attach the steering program.
    pub xdp_mode: XdpMode,
    /// Spin on the rings instead of sleeping in `poll`.
    pub busy_poll: bool,
    /// Pin worker `i` to CPU `i` modulo the CPU count.
    pub pin_workers: bool,
    /// Frames in each socket's UMEM.
    pub umem_frames: u32,
    /// Descriptors in each ring (power of two).
    pub ring_size: u32,
}

impl From<&Appliance> for DatapathConfig {
    fn from(a: &Appliance) -> Self {
        DatapathConfig {
            interfaces: a.interfaces.clone(),
            xdp_mode: a.xdp_mode,
            busy_poll: a.busy_poll,
            pin_workers: a.pin_workers,
            umem_frames: a.umem_frames,
            ring_size: a.ring_size,
        }
    }
}

/// One datapath interface as it ended up configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceStatus {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: u32,
    /// Queues served (one socket each).
    pub queues: u32,
    /// How the steering program is attached.
    pub xdp_mode: AttachMode,
    /// True when every socket on the interface is bound zero-copy, false for copy mode.
    pub zero_copy: bool,
    /// In copy mode, the kernel's reason for refusing zero-copy (its first socket's).
    pub zero_copy_refused: Option<String>,
    /// The kernel's drop counters, summed over the interface's sockets (zero after stop).
    pub kernel: KernelStats,
    /// How FullNAT return traffic reaches the worker that owns it (ntuple rules or the
    /// handoff, and why).
    pub return_steering: ReturnSteering,
    /// Whether it forwards, as the watch last saw it (see `watch.rs`).
    pub state: LinkState,
}

/// Ring counters of one worker: what it moved between the sockets' rings and the handler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Frames received.
    pub rx: u64,
    /// Frames queued for transmission.
    pub tx: u64,
    /// Frames the handler dropped.
    pub dropped: u64,
    /// Frames the handler wanted passed to the kernel; AF_XDP cannot, so they were dropped.
    pub unpassable: u64,
    /// Frames dropped because a tx ring was full.
    pub tx_ring_full: u64,
    /// Two-arm frames dropped for lack of a free frame on the egress socket.
    pub no_tx_frame: u64,
    /// Frames dropped because the handler named an interface that is not a datapath one.
    pub bad_egress: u64,
    /// Kernel descriptors outside our UMEM (should stay zero).
    pub bad_desc: u64,
    /// Frames handed to the worker that owns their flow (FullNAT return traffic that RSS
    /// put on another worker's queue).
    pub handed_off: u64,
    /// Frames dropped because the handoff ring toward their owner was full.
    pub handoff_ring_full: u64,
    /// Frames other workers handed to this one.
    pub handoff_received: u64,
}

/// A snapshot of the datapath's counters and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatapathStats {
    /// Per worker, in worker order.
    pub workers: Vec<RingStats>,
    /// Per interface, in configuration order.
    pub interfaces: Vec<InterfaceStatus>,
    /// The steering program's counters.
    pub steer: SteerCounters,
    /// Frames the program dropped for the VIPs' allow and deny lists, per (VIP, list).
    pub acl_drops: AclDrops,
}

/// The running datapath. Dropping it stops it.
pub struct Datapath {
    /// What it was started with: the watch re-binds with it.
    cfg: DatapathConfig,
    steer: Mutex<Steer>,
    ntuple: Mutex<ntuple::Ntuple>,
    interfaces: Vec<InterfaceStatus>,
    /// (index in `interfaces`, socket fd), valid until the workers stop.
    sockets: Vec<(usize, std::os::fd::RawFd)>,
    workers: Vec<JoinHandle<Box<dyn FrameHandler>>>,
    counters: Vec<Arc<RingCounters>>,
    stop: Arc<AtomicBool>,
    /// Each worker's handoff doorbell: `stop` rings them, so a sleeping worker sees the
    /// flag at once.
    bells: Vec<doorbell::Doorbell>,
    /// The workers' handlers while no worker runs them (a re-bind that failed half-way):
    /// the next re-bind starts workers with them.
    parked: Mutex<Vec<Box<dyn FrameHandler>>>,
    /// `sluice capture`'s copies of the engine's frames, shared by every worker.
    capture: Arc<capture::Tap>,
    stopped: bool,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("interfaces", &self.interfaces)
            .field("workers", &self.workers.len())
            .finish()
    }
}

/// Number of rx queues of an interface: the driver's channel count, else what sysfs lists,
/// else 1.
fn queue_count(ifname: &str) -> u32 {
    if let Some(n) = xsk::channel_count(ifname) {
        return n;
    }
    let dir = format!("/sys/class/net/{ifname}/queues");
    let n = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(0);
    u32::try_from(n).unwrap_or(u32::MAX).max(1)
}

/// Every address configured on this host (namespace): health-probe replies to these belong
/// to the kernel even when they come from a backend.
pub fn host_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|s| {
            if let Some(v4) = s.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

fn socket_err(ifname: &str, queue: u32, e: std::io::Error) -> DatapathError {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => DatapathError::SocketNotPermitted {
            interface: ifname.to_string(),
            queue,
            source: e,
        },
        Some(libc::EAFNOSUPPORT) => DatapathError::AfXdpUnsupported(e),
        _ => DatapathError::Socket {
            interface: ifname.to_string(),
            queue,
            source: e,
        },
    }
}

fn validate(cfg: &DatapathConfig) -> Result<(), SettingsError> {
    const MAX_UMEM_FRAMES: u32 = 1 << 20;
    if cfg.interfaces.is_empty() {
        return Err(SettingsError::NoInterfaces);
    }
    if cfg.interfaces.len() > MAX_INTERFACES as usize {
        return Err(SettingsError::TooManyInterfaces(cfg.interfaces.len()));
    }
    if !cfg.ring_size.is_power_of_two() || cfg.ring_size < 64 {
        return Err(SettingsError::RingSize(cfg.ring_size));
    }
    if cfg.umem_frames < cfg.ring_size || cfg.umem_frames > MAX_UMEM_FRAMES {
        return Err(SettingsError::UmemFrames {
            frames: cfg.umem_frames,
            ring_size: cfg.ring_size,
            max: MAX_UMEM_FRAMES,
        });
    }
    for (i, name) in cfg.interfaces.iter().enumerate() {
        if cfg.interfaces[..i].contains(name) {
            return Err(SettingsError::DuplicateInterface(name.clone()));
        }
    }
    Ok(())
}

/// A configured datapath interface as found on the host.
struct Interface {
    name: String,
    ifindex: u32,
    /// Queues served, one socket each.
    queues: u32,
}

/// Looks every configured interface up, with its queue count.
fn lookup_interfaces(cfg: &DatapathConfig) -> Result<Vec<Interface>, DatapathError> {
    cfg.interfaces
        .iter()
        .map(|name| {
            let ifindex = nix::net::if_::if_nametoindex(name.as_str())
                .map_err(|_| DatapathError::InterfaceMissing(name.clone()))?;
            Ok(Interface {
                name: name.clone(),
                ifindex,
                queues: queue_count(name).min(MAX_QUEUES),
            })
        })
        .collect()
}

/// Makes every datapath interface a possible egress of the flow cache's hits, with the
/// hairpin its driver needs.
fn add_cache_egress(c: &flowcache::FlowCache, ifaces: &[Interface]) -> Result<(), DatapathError> {
    for (slot, i) in ifaces.iter().enumerate() {
        let driver = xsk::driver_name(&i.name);
        let hairpin = flowcache::Hairpin::for_driver(driver.as_deref());
        tracing::info!(interface = %i.name, driver = driver.as_deref().unwrap_or("?"), hairpin = ?hairpin, "flow cache egress");
        c.add_egress(slot as u32, i.ifindex, hairpin)?;
    }
    Ok(())
}

/// The AF_XDP sockets of every interface queue, dealt out to the workers.
struct Sockets {
    /// Per worker, the sockets it serves.
    ports: Vec<Vec<Port>>,
    /// Per interface, whether every socket on it is bound zero-copy, and else the kernel's
    /// first reason.
    zero_copy: Vec<ZeroCopy>,
    /// (index in the interfaces, socket fd) of every socket.
    fds: Vec<(usize, std::os::fd::RawFd)>,
}

/// Whether an interface's sockets are all bound zero-copy, and else why not.
#[derive(Debug, Clone)]
struct ZeroCopy {
    all: bool,
    refused: Option<String>,
}

impl Default for ZeroCopy {
    fn default() -> ZeroCopy {
        ZeroCopy {
            all: true,
            refused: None,
        }
    }
}

impl ZeroCopy {
    fn add(&mut self, xsk: &Xsk) {
        self.all &= xsk.zero_copy();
        if self.refused.is_none() {
            self.refused = xsk.zero_copy_refused().map(str::to_string);
        }
    }
}

/// Opens one socket per interface queue and enters it in the steering program's maps;
/// queue `q` goes to worker `q % n_workers`.
fn open_sockets(
    steer: &Steer,
    cfg: &DatapathConfig,
    ifaces: &[Interface],
    n_workers: usize,
) -> Result<Sockets, DatapathError> {
    let mut out = Sockets {
        ports: (0..n_workers).map(|_| Vec::new()).collect(),
        zero_copy: vec![ZeroCopy::default(); ifaces.len()],
        fds: Vec::new(),
    };
    for (slot, i) in ifaces.iter().enumerate() {
        steer.set_interface_slot(i.ifindex, slot as u32)?;
        for q in 0..i.queues {
            let xsk = Xsk::new(&XskConfig {
                ifname: i.name.clone(),
                queue: q,
                frames: cfg.umem_frames,
                ring_size: cfg.ring_size,
                headroom: HEADROOM as u32,
                busy_poll: cfg.busy_poll,
            })
            .map_err(|e| socket_err(&i.name, q, e))?;
            out.zero_copy[slot].add(&xsk);
            steer.set_socket(slot as u32, q, xsk.fd())?;
            out.fds.push((slot, xsk.fd()));
            out.ports[q as usize % n_workers].push(Port {
                xsk,
                ifindex: i.ifindex,
            });
        }
    }
    Ok(out)
}

/// Attaches the steering program to every interface; on a failure, detaches the ones
/// already attached and returns the error.
fn attach_all(
    steer: &Steer,
    cfg: &DatapathConfig,
    ifaces: &[Interface],
    zero_copy: &[ZeroCopy],
) -> Result<Vec<InterfaceStatus>, DatapathError> {
    let mut interfaces: Vec<InterfaceStatus> = Vec::new();
    for (i, zero_copy) in ifaces.iter().zip(zero_copy) {
        match steer.attach(&i.name, i.ifindex, cfg.xdp_mode) {
            Ok(mode) => {
                tracing::info!(
                    interface = %i.name,
                    xdp = mode.name(),
                    af_xdp = if zero_copy.all { "zero-copy" } else { "copy" },
                    queues = i.queues,
                    "datapath interface up"
                );
                interfaces.push(InterfaceStatus {
                    name: i.name.clone(),
                    ifindex: i.ifindex,
                    queues: i.queues,
                    xdp_mode: mode,
                    zero_copy: zero_copy.all,
                    zero_copy_refused: zero_copy.refused.clone(),
                    kernel: KernelStats::default(),
                    return_steering: ReturnSteering::OneWorker,
                    state: LinkState::Forwarding,
                });
            }
            Err(e) => {
                for up in interfaces {
                    let _ = steer.detach(up.ifindex, up.xdp_mode);
                }
                return Err(e);
            }
        }
    }
    Ok(interfaces)
}

/// The steering program loaded into the kernel (verified), not attached yet.
pub struct Loaded(Steer);

impl Loaded {
    /// Loads the program, with `cache`'s maps when there is a flow cache.
    pub fn load(cache: Option<&flowcache::FlowCache>) -> Result<Loaded, DatapathError> {
        Ok(Loaded(Steer::load_with_cache(cache)?))
    }

    /// The program's maps, to fill before it is attached: a program attached with no VIPs
    /// would hand their frames to the kernel until they are written.
    pub fn steer(&mut self) -> &mut Steer {
        &mut self.0
    }
}

impl Datapath {
    /// Loads the steering program, opens one AF_XDP socket per interface queue, attaches
    /// the program and starts one worker per queue; `handler_factory(i, n)` builds the handler
    /// of worker `i` of `n`. Nothing stays attached when this fails.
    pub fn start<F>(cfg: DatapathConfig, handler_factory: F) -> Result<Datapath, DatapathError>
    where
        F: Fn(usize, usize) -> Box<dyn FrameHandler>,
    {
        Datapath::start_with_cache(cfg, None, handler_factory)
    }

    /// [`Datapath::start`] with the XDP flow cache in front of the workers (see
    /// `flowcache`): the program uses `cache`'s maps and every datapath interface becomes a
    /// possible egress for its hits.
    pub fn start_with_cache<F>(
        cfg: DatapathConfig,
        cache: Option<Arc<flowcache::FlowCache>>,
        handler_factory: F,
    ) -> Result<Datapath, DatapathError>
    where
        F: Fn(usize, usize) -> Box<dyn FrameHandler>,
    {
        let loaded = Loaded::load(cache.as_deref())?;
        Datapath::start_loaded(cfg, loaded, cache, handler_factory)
    }

    /// [`Datapath::start_with_cache`] with the program loaded (and verified) beforehand: a
    /// takeover loads it while the old process still forwards, so the time in which no
    /// engine runs is only the sockets' and the attach's.
    pub fn start_loaded<F>(
        cfg: DatapathConfig,
        loaded: Loaded,
        cache: Option<Arc<flowcache::FlowCache>>,
        handler_factory: F,
    ) -> Result<Datapath, DatapathError>
    where
        F: Fn(usize, usize) -> Box<dyn FrameHandler>,
    {
        validate(&cfg)?;
        let ifaces = lookup_interfaces(&cfg)?;
        // Every worker needs a socket on every interface to send on, so there are as many
        // workers as the interface with the fewest queues has queues.
        let n_workers = ifaces.iter().map(|i| i.queues).min().unwrap_or(1).max(1) as usize;

        let mut steer = loaded.0;
        if let Some(c) = &cache {
            add_cache_egress(c, &ifaces)?;
        }
        steer.set_host_addresses(&host_addresses())?;
        let sockets = open_sockets(&steer, &cfg, &ifaces, n_workers)?;
        let interfaces = attach_all(&steer, &cfg, &ifaces, &sockets.zero_copy)?;
        steer.set_hold(true)?;
        let mut dp = Datapath {
            cfg: cfg.clone(),
            steer: Mutex::new(steer),
            ntuple: Mutex::new(ntuple::Ntuple::new(&cfg.interfaces, n_workers as u32)),
            interfaces,
            sockets: sockets.fds,
            workers: Vec::new(),
            counters: Vec::new(),
            stop: Arc::new(AtomicBool::new(false)),
            bells: Vec::new(),
            parked: Mutex::new(Vec::new()),
            capture: Arc::default(),
            stopped: false,
        };
        let handlers = (0..n_workers)
            .map(|w| handler_factory(w, n_workers))
            .collect();
        dp.spawn_workers(&ifaces, sockets.ports, handlers)?;
        Ok(dp)
    }

    /// Starts one worker thread per entry of `ports`, worker `w` with `handlers[w]` and the
    /// counters worker `w` had before, if any.
    fn spawn_workers(
        &mut self,
        ifaces: &[Interface],
        ports: Vec<Vec<Port>>,
        handlers: Vec<Box<dyn FrameHandler>>,
    ) -> Result<(), DatapathError> {
        let n_workers = ports.len();
        let cfg = self.cfg.clone();
        let mut handoffs = handoff::HandoffPort::mesh(n_workers)
            .map_err(DatapathError::Handoff)?
            .into_iter();
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        for (w, (ports, handler)) in ports.into_iter().zip(handlers).enumerate() {
            let egress = ifaces
                .iter()
                .filter_map(|i| {
                    ports
                        .iter()
                        .position(|p| p.ifindex == i.ifindex)
                        .map(|at| (i.ifindex, at))
                })
                .collect();
            let counters = match self.counters.get(w) {
                Some(c) => Arc::clone(c),
                None => {
                    let c = Arc::new(RingCounters::default());
                    self.counters.push(Arc::clone(&c));
                    c
                }
            };
            let handoff = handoffs.next().ok_or_else(|| {
                DatapathError::Handoff(std::io::Error::other("fewer handoff ports than workers"))
            })?;
            self.bells.push(handoff.doorbell());
            let worker = Worker {
                ports,
                egress,
                handler,
                counters: counters.clone(),
                stop: self.stop.clone(),
                busy_poll: cfg.busy_poll,
                handoff,
                capture: Arc::clone(&self.capture),
            };
            let pin = cfg.pin_workers.then_some(w % ncpu);
            let handle = std::thread::Builder::new()
                .name(format!("sluice-dp{w}"))
                .spawn(move || {
                    if let Some(cpu) = pin {
                        pin_to(cpu);
                    }
                    worker.run()
                })
                .map_err(DatapathError::Thread)?;
            self.workers.push(handle);
        }
        Ok(())
    }

    fn steer(&self) -> MutexGuard<'_, Steer> {
        // A panic while holding the lock cannot leave the maps half-written in a way a later
        // full replacement would not fix, so a poisoned lock is still usable.
        self.steer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `sluice capture`'s two sides: the workers' tap, and the XDP program's maps (disarmed:
    /// a process before this one may have died with a capture running).
    pub fn capture(&self) -> Result<(Arc<capture::Tap>, capture::XdpMaps), DatapathError> {
        let maps = capture::XdpMaps::of(&self.steer())?;
        maps.disarm()?;
        Ok((Arc::clone(&self.capture), maps))
    }

    /// Replaces the set of VIPs the program steers, with their allow and deny lists.
    pub fn set_vips(&self, vips: &[VipKey], acls: &[AclKey]) -> Result<(), DatapathError> {
        self.steer().set_vips_with_acls(vips, acls)
    }

    /// Frames the program dropped for the VIPs' allow and deny lists, per (VIP, list).
    pub fn acl_drops(&self) -> Result<AclDrops, DatapathError> {
        self.steer().acl_drops()
    }

    /// Replaces the set of return-traffic keys the program steers, and the ntuple rules
    /// that send FullNAT return traffic to its owner's queue where the driver has them.
    pub fn set_return_keys(&self, keys: &[ReturnKey]) -> Result<(), DatapathError> {
        self.steer().set_return_keys(keys)?;
        self.ntuple().follow(keys);
        Ok(())
    }

    fn ntuple(&self) -> MutexGuard<'_, ntuple::Ntuple> {
        // The rule list is rebuilt whole on every change, so a poisoned lock is usable.
        self.ntuple.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes the stateless answer's maps from `tables` (see [`Steer::set_stateless`]).
    pub fn set_stateless(
        &self,
        tables: &crate::lb::Tables,
        cache: Option<&flowcache::FlowCache>,
    ) -> Result<stateless::StatelessFill, DatapathError> {
        self.steer().set_stateless(tables, cache)
    }

    /// Writes `[flood]` into the steering program (see [`Steer::set_flood`]).
    pub fn set_flood(&self, flood: &crate::config::Flood) -> Result<(), DatapathError> {
        self.steer().set_flood(flood)
    }

    /// Replaces the appliance's own addresses (filled from the host at start): backend
    /// frames to these stay with the kernel (health-probe replies).
    pub fn set_host_addresses(&self, addrs: &[IpAddr]) -> Result<(), DatapathError> {
        self.steer().set_host_addresses(addrs)
    }

    /// The interfaces as configured.
    pub fn interfaces(&self) -> &[InterfaceStatus] {
        &self.interfaces
    }

    /// A snapshot of every counter.
    pub fn stats(&self) -> Result<DatapathStats, DatapathError> {
        let workers = self
            .counters
            .iter()
            .map(|c| RingStats {
                rx: c.rx.load(Ordering::Relaxed),
                tx: c.tx.load(Ordering::Relaxed),
                dropped: c.dropped.load(Ordering::Relaxed),
                unpassable: c.unpassable.load(Ordering::Relaxed),
                tx_ring_full: c.tx_ring_full.load(Ordering::Relaxed),
                no_tx_frame: c.no_tx_frame.load(Ordering::Relaxed),
                bad_egress: c.bad_egress.load(Ordering::Relaxed),
                bad_desc: c.bad_desc.load(Ordering::Relaxed),
                handed_off: c.handed_off.load(Ordering::Relaxed),
                handoff_ring_full: c.handoff_ring_full.load(Ordering::Relaxed),
                handoff_received: c.handoff_received.load(Ordering::Relaxed),
            })
            .collect();
        let mut interfaces = self.interfaces.clone();
        {
            let nt = self.ntuple();
            for (i, status) in interfaces.iter_mut().enumerate() {
                status.return_steering = nt.status(i);
            }
        }
        // The fds are only valid while the workers (which own the sockets) run.
        if !self.stopped {
            for &(i, fd) in &self.sockets {
                if let (Ok(k), Some(status)) = (kernel_stats(fd), interfaces.get_mut(i)) {
                    let t = &mut status.kernel;
                    t.rx_dropped += k.rx_dropped;
                    t.rx_ring_full += k.rx_ring_full;
                    t.rx_fill_ring_empty += k.rx_fill_ring_empty;
                    t.rx_invalid += k.rx_invalid;
                    t.tx_invalid += k.tx_invalid;
                }
            }
        }
        // One lock for both reads: a guard held by a temporary lives to the statement's end.
        let (steer, acl_drops) = {
            let s = self.steer();
            (s.counters()?, s.acl_drops()?)
        };
        Ok(DatapathStats {
            workers,
            interfaces,
            steer,
            acl_drops,
        })
    }

    /// Stops the workers and returns their handlers, in worker order, leaving the steering
    /// program attached and held (a frame for the engine finds no socket and is dropped,
    /// never the kernel's): the hand-over to a new process, which replaces the program in
    /// one step. The handlers' connection tables are what it carries on.
    pub fn stop_for_handover(&mut self) -> Vec<Box<dyn FrameHandler>> {
        if let Err(e) = self.steer().set_hold(true) {
            tracing::error!(error = %e, "cannot hold the steering program for the hand-over");
        }
        self.stopped = true;
        self.join_workers()
    }

    /// Stops the workers and returns their handlers (and any parked ones), in worker
    /// order; their sockets close.
    fn join_workers(&mut self) -> Vec<Box<dyn FrameHandler>> {
        self.stop.store(true, Ordering::Relaxed);
        for b in &self.bells {
            b.ring();
        }
        let mut out = std::mem::take(self.parked.get_mut().unwrap_or_else(|p| p.into_inner()));
        for h in self.workers.drain(..) {
            match h.join() {
                Ok(handler) => out.push(handler),
                Err(_) => tracing::error!("a datapath worker panicked"),
            }
        }
        out
    }

    /// Detaches the steering program (so the kernel gets all traffic again), then stops
    /// and joins the workers, closing their sockets. Idempotent.
    pub fn stop(&mut self) -> Result<(), DatapathError> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let mut first_err = None;
        {
            let steer = self.steer();
            for i in &self.interfaces {
                if let Err(e) = steer.detach(i.ifindex, i.xdp_mode) {
                    tracing::error!(interface = %i.name, error = %e, "cannot detach XDP");
                    first_err.get_or_insert(e);
                }
            }
        }
        self.ntuple().clear();
        self.stop.store(true, Ordering::Relaxed);
        for b in &self.bells {
            b.ring();
        }
        for h in self.workers.drain(..) {
            if h.join().is_err() {
                tracing::error!("a datapath worker panicked");
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::error!(error = %e, "datapath stop on drop");
        }
    }
}

fn pin_to(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set
        .set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        tracing::warn!(cpu, error = %e, "cannot pin datapath worker");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DatapathConfig {
        DatapathConfig {
            interfaces: vec!["eth0".into()],
            xdp_mode: XdpMode::Auto,
            busy_poll: false,
            pin_workers: false,
            umem_frames: 4096,
            ring_size: 2048,
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused_with_the_reason() {
        assert!(validate(&cfg()).is_ok());
        let bad = [
            DatapathConfig {
                interfaces: vec![],
                ..cfg()
            },
            DatapathConfig {
                ring_size: 1000,
                ..cfg()
            },
            DatapathConfig {
                umem_frames: 1024,
                ..cfg()
            },
            DatapathConfig {
                interfaces: vec!["a".into(), "a".into()],
                ..cfg()
            },
            DatapathConfig {
                interfaces: (0..17).map(|i| format!("e{i}")).collect(),
                ..cfg()
            },
        ];
        for c in bad {
            validate(&c).expect_err("must be refused");
        }
    }

    #[test]
    fn the_datapath_can_be_shared_with_the_control_plane() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Datapath>();
    }

    #[test]
    fn socket_errors_say_what_to_fix() {
        let e = |errno| socket_err("eth0", 3, std::io::Error::from_raw_os_error(errno));
        assert!(matches!(
            e(libc::EPERM),
            DatapathError::SocketNotPermitted { .. }
        ));
        assert!(matches!(
            e(libc::EAFNOSUPPORT),
            DatapathError::AfXdpUnsupported(_)
        ));
        let busy = e(libc::EBUSY).to_string();
        assert!(
            busy.starts_with("cannot create AF_XDP socket on eth0 queue 3:"),
            "{busy}"
        );
    }

    #[test]
    fn a_missing_interface_is_named() {
        let c = DatapathConfig {
            interfaces: vec!["nosuchif0".into()],
            ..cfg()
        };
        let e = Datapath::start(c, |_, _| unreachable!("no worker starts")).expect_err("missing");
        assert_eq!(
            e.to_string(),
            "interface nosuchif0 does not exist (check [appliance] interfaces and `ip link`)"
        );
    }
}
