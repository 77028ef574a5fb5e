//! Why the datapath could not start or change. Each error names what it was doing and on
//! which interface, queue or map, carries the kernel's or libbpf's error as its source, and
//! says what to check.

use std::io;

use super::steer::MAX_INTERFACES;

/// Why the datapath could not start or change.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    /// A configured interface does not exist.
    #[error("interface {0} does not exist (check [appliance] interfaces and `ip link`)")]
    InterfaceMissing(String),
    /// The settings cannot work.
    #[error("invalid datapath settings: {0}")]
    Config(#[from] SettingsError),
    /// The XDP program has no room left for the VIPs' allow and deny lists.
    #[error(
        "the XDP program has no room for more allow and deny {what}: fewer VIPs with          lists, or fewer lists per VIP"
    )]
    AclFull {
        /// What ran out.
        what: &'static str,
    },
    /// A BPF step needs privileges the process lacks.
    #[error(
        "not permitted: {what}: {source} (run as root, or with CAP_NET_ADMIN, CAP_BPF and \
         CAP_NET_RAW)"
    )]
    NotPermitted {
        /// What was being done ("loading the steering program").
        what: &'static str,
        /// libbpf's error (EPERM from bpf(2) or netlink).
        #[source]
        source: libbpf_rs::Error,
    },
    /// Opening an AF_XDP socket needs privileges the process lacks.
    #[error(
        "not permitted: AF_XDP socket on {interface} queue {queue}: {source} (run as root, \
         or with CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW)"
    )]
    SocketNotPermitted {
        /// Interface name.
        interface: String,
        /// Queue index.
        queue: u32,
        /// The kernel's answer (EPERM or EACCES).
        #[source]
        source: io::Error,
    },
    /// The kernel refused to attach the steering program.
    #[error(
        "cannot attach XDP ({mode}) to {interface}: {source} (check that the driver supports \
         {mode} XDP, or set [appliance] xdp_mode)"
    )]
    XdpAttach {
        /// Interface name.
        interface: String,
        /// Attach mode tried: "native" or "generic".
        mode: &'static str,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// The flow cache's front-table numbers could not be mapped into our memory.
    #[error(
        "cannot mmap the flow cache's front_gen map: {0} (a kernel without BPF_F_MMAPABLE arrays?)"
    )]
    FrontTable(#[source] io::Error),
    /// The programs attached to an interface could not be listed.
    #[error("cannot query the XDP programs attached to {interface}: {source}")]
    XdpQuery {
        /// Interface name.
        interface: String,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// Somebody else's XDP program is attached where the steering program must go.
    #[error(
        "cannot attach XDP ({mode}) to {interface}: another XDP program is attached (id {id}, \
         name {name}); remove it first (`ip link set dev {interface} xdp off`)"
    )]
    ForeignProgram {
        /// Interface name.
        interface: String,
        /// Attach mode it is in: "native" or "generic".
        mode: &'static str,
        /// Its program id.
        id: u32,
        /// Its name, "?" when the kernel did not say.
        name: String,
    },
    /// The steering program attached before (a run handing over, or one that crashed) could
    /// not be replaced.
    #[error(
        "cannot replace the steering program (id {id}) attached to {interface} before this \
         run: {source} (`ip link set dev {interface} xdp off` removes it)"
    )]
    Leftover {
        /// Interface name.
        interface: String,
        /// Its program id.
        id: u32,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// Detaching the steering program failed.
    #[error("cannot detach XDP from ifindex {ifindex}: {source}")]
    Detach {
        /// Interface index.
        ifindex: u32,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// The kernel has no AF_XDP (CONFIG_XDP_SOCKETS off).
    #[error("AF_XDP sockets are not supported by this kernel (CONFIG_XDP_SOCKETS): {0}")]
    AfXdpUnsupported(#[source] io::Error),
    /// Creating or binding an AF_XDP socket failed.
    #[error("cannot create AF_XDP socket on {interface} queue {queue}: {source}")]
    Socket {
        /// Interface name.
        interface: String,
        /// Queue index.
        queue: u32,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// Loading a BPF program or editing its maps failed.
    #[error("BPF: {what}: {source}")]
    Bpf {
        /// What was being done ("adding a steering key (map full?)").
        what: &'static str,
        /// libbpf's error.
        #[source]
        source: libbpf_rs::Error,
    },
    /// The embedded BPF object lacks a map this code uses.
    #[error("BPF: the {object} object has no map {map} (it does not match this build: rebuild)")]
    MissingMap {
        /// The object ("steering").
        object: &'static str,
        /// The map's name.
        map: &'static str,
    },
    /// The embedded BPF object lacks the program this code runs.
    #[error(
        "BPF: the {object} object has no program {program} (it does not match this build: \
         rebuild)"
    )]
    MissingProgram {
        /// The object ("steering").
        object: &'static str,
        /// The program's name.
        program: &'static str,
    },
    /// A test run of the steering program returned an action a test run cannot take.
    #[error("BPF: test run returned XDP action {0} (a test run has no socket to redirect to)")]
    TestRunAction(u32),
    /// The flow cache was given an egress slot the program has no room for.
    #[error("flow cache egress slot {0} out of range: the program has {MAX_INTERFACES} slots")]
    EgressSlot(u32),
    /// A flow cache entry would leave by an interface the datapath does not drive.
    #[error(
        "flow cache entry toward ifindex {0}, not a datapath interface (the route to the \
         backend leaves by an interface missing from [appliance] interfaces)"
    )]
    NotAnEgress(u32),
    /// A worker thread could not be started.
    #[error("cannot start worker thread: {0}")]
    Thread(#[source] io::Error),
    /// The eventfds that wake a worker for frames handed to it could not be created.
    #[error("cannot create the workers' handoff eventfds: {0} (check the open-file limit)")]
    Handoff(#[source] io::Error),
}

/// Datapath settings that cannot work (from `[appliance]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// No interface is configured.
    #[error("no interfaces")]
    NoInterfaces,
    /// More interfaces than the XSKMAP has slots for.
    #[error("{0} interfaces; at most {MAX_INTERFACES}")]
    TooManyInterfaces(usize),
    /// A ring size the kernel refuses or that starves the workers.
    #[error("ring_size {0} must be a power of two of at least 64")]
    RingSize(u32),
    /// A UMEM that cannot fill its rings, or is unreasonably large.
    #[error("umem_frames {frames} must be between ring_size ({ring_size}) and {max}")]
    UmemFrames {
        /// Frames asked for.
        frames: u32,
        /// The ring size they must cover.
        ring_size: u32,
        /// The largest UMEM accepted.
        max: u32,
    },
    /// The same interface listed twice.
    #[error("interface {0} listed twice")]
    DuplicateInterface(String),
}
