//! `sluice bench`: the datapath packet-rate benchmark, Sluice against the kernel.
//!
//! A packet rate means little on its own (it depends on the machine, the kernel and whatever
//! else runs), so the benchmark measures a peer in the same run on the same topology and
//! reports the ratio. It builds three namespaces, two-arm:
//!
//! ```text
//!  gen ── g0 ═══ eth0 ── lb ── eth1 ═══ s0 ── sink
//!  10.80.1.2    10.80.1.1      10.80.2.1    10.80.2.2 (the backend; XDP on s0 counts
//!  generator: 64-byte UDP to 192.0.2.10:5001              and drops: bpf/sink.bpf.c)
//! ```
//! Run A starts the real `sluice run` in `lb` (AF_XDP, copy mode on veth) with a NAT VIP;
//! run A2 starts it again with the XDP flow cache on (the first frame goes to the engine,
//! the rest are forwarded by the XDP program); run C attaches a trivial XDP program that
//! rewrites the destination and redirects every VIP frame from eth0 to eth1
//! (bpf/ceiling.bpf.c, the ceiling of any XDP forwarder here); run B lets the kernel forward
//! instead (`ip_forward` and an nftables DNAT rule). Every run gets the same generator load
//! for the same time from a kernel-side generator (live-frame BPF test runs of
//! bpf/generator.bpf.c: see [`generator`]), and each counts the frames that reach the sink
//! rewritten to the backend, and the CPU the whole machine spent meanwhile.
//!
//! Generator, forwarder and sink all run on one CPU (the generator thread's softirq), so
//! the sink's cost per frame is part of every rate. On real hardware the sink would be
//! another machine whose cost nobody counts: here it is measuring apparatus, so it is an
//! XDP program on s0 that counts and drops every UDP frame (bpf/sink.bpf.c), the same for
//! every run; frames XDP forwarded never become an skb.
//!
//! Runs A and A2 are repeated on a second copy of the topology whose veths have two queues,
//! so the appliance runs two workers, fed by two generator threads pinned to CPUs 0 and 1
//! (a veth frame lands on the receive queue of the CPU that sent it), each its own flow.
//!
//! The bench knows the appliance only as the `sluice` binary it starts and the API it asks.
#![forbid(unsafe_code)]

mod abi;
mod answer;
mod appliance;
mod ceiling;
pub mod client;
pub mod counters;
pub mod cps;
pub mod cps_report;
pub mod flows;
pub mod generator;
pub mod idle;
pub mod memory;
pub mod pktgen;
pub mod report;
mod runs;
mod sink;
mod topology;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lab::netns::LabError;

pub use cps::{CpsOptions, SYNC_LISTEN, SYNC_PEER, Variant as CpsVariant, cps_config, run_cps};
pub use cps_report::CpsReport;
pub use flows::{DEFAULT_FLOWS, FlowsReport, run_flows};
pub use idle::{IdleOptions, IdleReport, run_idle};
pub use report::{BenchReport, Round, RunResult};
pub use runs::appliance_config;
use topology::Bench;

/// The VIP the generator floods.
pub const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// The VIP's (and the backend's) UDP port.
pub const PORT: u16 = 5001;
/// The backend: the sink namespace's address.
pub const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 80, 2, 2);
pub(crate) const GEN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 80, 1, 2);
pub(crate) const LB_UPLINK: &str = "10.80.1.1/24";
/// lb's address on the sink's link (a /24), the backend's gateway.
pub(crate) const LB_DOWN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 80, 2, 1);
pub(crate) const GEN_SPORT: u16 = 40000;
/// Ethernet frame length without FCS, as the generator builds it.
pub const FRAME_LEN: usize = 64;
/// How long a run may take to start forwarding before the bench gives up.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What `sluice bench` measures.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Generator time per run.
    pub seconds: u64,
    /// The `sluice` binary to start in run A (normally `std::env::current_exe()`).
    pub sluice: PathBuf,
    /// Run the appliance with `busy_poll = true` (its workers spin instead of sleeping).
    pub busy_poll: bool,
    /// Rounds of (run A, run B): alternating spreads slow changes in the machine's other
    /// load over both sides; the report gives each side's median round.
    pub rounds: usize,
    /// `--flows`: another `sluice` binary (an older build) whose runs A and A2 follow this
    /// build's in every round, for a before and after from one run.
    pub baseline: Option<PathBuf>,
    /// `--flows`: runs A and A2 of this build (not the baseline's) with a `sluice capture` running
    /// through the whole measurement, of an endpoint no bench frame has
    /// ([`CAPTURE_ENDPOINT`]): what a running capture costs the traffic it does not take.
    pub capture: bool,
}

/// The endpoint `--capture` captures: an address of the VIPs' documentation range no bench
/// frame carries.
pub const CAPTURE_ENDPOINT: &str = "192.0.2.254";

/// Why the benchmark could not produce numbers.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A setup or measurement command failed.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// Ctrl-C or SIGTERM arrived; everything was torn down.
    #[error("interrupted; namespaces removed")]
    Interrupted,
    /// A run never delivered a probe frame to the sink.
    #[error("{run}: {detail}")]
    NotForwarding {
        /// Which run.
        run: String,
        /// What was seen (and the appliance log for run A).
        detail: String,
    },
    /// The traffic generator failed.
    #[error("traffic generator: {0}")]
    Generator(String),
    /// A counter could not be read or parsed.
    #[error("reading {what}: {detail}")]
    Counter {
        /// The counter.
        what: String,
        /// Why it could not be read.
        detail: String,
    },
}

/// Runs the rounds and returns the report; progress goes to stderr. Every namespace is
/// removed before it returns, also on error and when `stop` is set (Ctrl-C).
pub fn run(options: &BenchOptions, stop: Arc<AtomicBool>) -> Result<BenchReport, BenchError> {
    let options = BenchOptions {
        seconds: options.seconds.max(1),
        rounds: options.rounds.max(1),
        ..options.clone()
    };
    let mut bench = Bench::build(1, generator::FlowSpace::ONE)?;
    // The same runs of Sluice over two queues (two workers), fed by one generator per CPU:
    // what two cores allow.
    let mut two = Bench::build(2, generator::FlowSpace::ONE)?;
    for b in [&bench, &two] {
        eprintln!(
            "bench: namespaces {} -- {} -- {} up, {} queue(s)",
            b.gen_ns.name, b.lb.name, b.sink.name, b.queues
        );
    }
    bench.start_generators(&stop)?;
    two.start_generators(&stop)?;
    let mut rounds = Vec::new();
    let mut datapath = Vec::new();
    let mut forwarders = Vec::new();
    for round in 1..=options.rounds {
        eprintln!("bench: round {round} of {}", options.rounds);
        let sluice = bench.run_sluice(&options, false, &stop)?;
        datapath = sluice.datapath;
        let cache = bench.run_sluice(&options, true, &stop)?;
        let (ceiling, ceiling_line) = bench.run_ceiling(options.seconds, None, &stop)?;
        let nftables = bench.run_kernel(options.seconds, &stop)?;
        let sluice_2q = two.run_sluice(&options, false, &stop)?;
        let cache_2q = two.run_sluice(&options, true, &stop)?;
        forwarders = cache
            .cache
            .into_iter()
            .chain([ceiling_line])
            .chain(sluice_2q.cache)
            .chain(cache_2q.cache)
            .collect();
        rounds.push(Round {
            sluice: sluice.result,
            nftables,
            cache: Some(cache.result),
            ceiling: Some(ceiling),
            sluice_2q: Some(sluice_2q.result),
            cache_2q: Some(cache_2q.result),
        });
    }
    drop(bench);
    drop(two);
    let mut report = BenchReport::new(options.seconds, rounds);
    report.busy_poll = options.busy_poll;
    report
        .notes
        .extend(datapath.iter().map(|l| format!("appliance log: {l}")));
    report.notes.extend(forwarders);
    Ok(report)
}

/// The index of interface `name` in the calling thread's namespace.
pub(crate) fn ifindex(name: &str) -> Result<u32, String> {
    nix::net::if_::if_nametoindex(name).map_err(|e| format!("interface {name}: {e}"))
}
