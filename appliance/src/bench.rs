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
//! run A2 runs the same datapath in-process with the XDP flow cache in front of it (see
//! `datapath::flowcache`: the first frame goes to the engine, the rest are forwarded by the
//! XDP program); run C attaches a trivial XDP program that rewrites the destination and
//! redirects every VIP frame from eth0 to eth1 (bpf/ceiling.bpf.c, the ceiling of any XDP
//! forwarder here); run B lets the kernel forward instead (`ip_forward` and an nftables DNAT
//! rule). Both runs get the same generator load for the same time from a kernel-side
//! generator (live-frame BPF test runs, as in [`crate::datapath::pktgen`], with a program
//! of its own: see [`restoring_generator`]), and each counts the frames that reach the sink
//! rewritten to the backend, and the CPU the whole machine spent meanwhile.
//!
//! Generator, forwarder and sink all run on one CPU (the generator thread's softirq), so
//! the sink's cost per frame is part of every rate. On real hardware the sink would be
//! another machine whose cost nobody counts: here it is measuring apparatus, so it is an
//! XDP program on s0 that counts and drops every UDP frame (`SinkProgram`,
//! bpf/sink.bpf.c), the same for every run; frames XDP forwarded never become an skb.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::lab::netns::{self, LabError, Netns, veth};

/// The VIP the generator floods.
pub const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
/// The VIP's (and the backend's) UDP port.
pub const PORT: u16 = 5001;
/// The backend: the sink namespace's address.
pub const BACKEND: Ipv4Addr = Ipv4Addr::new(10, 80, 2, 2);
const GEN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 80, 1, 2);
const LB_UPLINK: &str = "10.80.1.1/24";
const LB_DOWNLINK: &str = "10.80.2.1/24";
const GEN_SPORT: u16 = 40000;
/// Ethernet frame length without FCS, as the generator builds it.
pub const FRAME_LEN: usize = 64;
/// Frames in the first generator call of a flood. Every live-frame test run costs a fixed
/// 20-30 ms on this kernel (measured: 64 frames take as long as 10 000) during which nothing
/// is sent, so calls must be long; [`next_chunk`] sizes the following ones from the rate
/// seen. The same fixed cost is why the generator cannot be paced to a chosen rate.
const FIRST_CHUNK: u32 = 250_000;
/// Target length of one generator call: the fixed cost stays under ~5 % of the offer,
/// and the run still ends close to its deadline and notices Ctrl-C within a second.
const CALL_TARGET: Duration = Duration::from_millis(500);
/// `/proc/stat` counts in USER_HZ, which is 100 on every Linux ABI Sluice runs on.
const NS_PER_TICK: f64 = 1e7;
/// How long a run may take to start forwarding before the bench gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

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
}

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

/// Busy and softirq CPU time of the whole machine, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks not idle and not waiting for I/O (user, nice, system, irq, softirq, steal).
    pub busy: u64,
    /// Ticks in softirq (where the kernel forwards and veth delivers).
    pub softirq: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user].
    if f.len() < 8 {
        return None;
    }
    Some(CpuTimes {
        busy: f[0] + f[1] + f[2] + f[5] + f[6] + f[7],
        softirq: f[6],
    })
}

/// User plus system ticks of a process, from `/proc/PID/stat` (fields 14 and 15).
pub fn parse_pid_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: count from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The sum of one per-CPU `u64` counter as `lookup_percpu` returns it (one value per
/// possible CPU); `None` if a value is not 8 bytes long (not the counter it should be).
pub fn sum_percpu(values: &[Vec<u8>]) -> Option<u64> {
    values.iter().try_fold(0u64, |sum, v| {
        let bytes: [u8; 8] = v.as_slice().try_into().ok()?;
        Some(sum.wrapping_add(u64::from_ne_bytes(bytes)))
    })
}

/// The `sluice run` configuration of run A: one NAT VIP, two-arm on eth0 (uplink) and eth1,
/// pure AF_XDP (`flow_cache = false`, whatever the default: run A2 measures the cache).
pub fn appliance_config(api_socket: &Path, busy_poll: bool) -> String {
    format!(
        "[appliance]\nname = \"bench-lb\"\ninterfaces = [\"eth0\", \"eth1\"]\nxdp_mode = \"auto\"\n\
         busy_poll = {busy_poll}\nflow_cache = false\n\
         umem_frames = 4096\nring_size = 2048\nconntrack_capacity = 65536\n\n\
         [api]\nsocket = \"{}\"\nmetrics = \"\"\n\n\
         [[vip]]\nname = \"bench\"\naddress = \"{VIP}\"\nport = {PORT}\nprotocol = \"udp\"\n\
         scheduler = \"maglev\"\nmode = \"nat\"\n\
         [[vip.backend]]\naddress = \"{BACKEND}\"\nport = {PORT}\n",
        api_socket.display()
    )
}

/// Counters read at the start and the end of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Frames the sink counted (rewritten to the backend).
    pub delivered: u64,
    /// UDP frames the sink counted that were not rewritten to the backend.
    pub stray: u64,
    /// Whole-machine CPU.
    pub cpu: CpuTimes,
    /// When `cpu` was read.
    pub cpu_at: Option<Instant>,
    /// Ticks of the `sluice run` process, when one runs.
    pub lb_process: Option<u64>,
    /// Counters of lb's ingress interface (eth0).
    pub lb_ingress: LinkStats,
    /// Counters of the generator's interface (g0).
    pub generator_link: LinkStats,
}

/// The packet counters of one interface, from `ip -s -j link show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive (for veth: its NAPI ring overflowed, or its XDP program
    /// redirected a frame to an AF_XDP socket whose rx ring was full).
    pub rx_dropped: u64,
    /// Frames dropped on transmit (for veth: XDP frames the peer's ring could not take).
    pub tx_dropped: u64,
}

/// The counters of the first link in `ip -s -j link show` output.
pub fn parse_link_stats(json: &str) -> Option<LinkStats> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let st = v.as_array()?.first()?.get("stats64")?;
    Some(LinkStats {
        rx_packets: st.get("rx")?.get("packets")?.as_u64()?,
        rx_dropped: st.get("rx")?.get("dropped")?.as_u64()?,
        tx_dropped: st.get("tx")?.get("dropped")?.as_u64()?,
    })
}

/// What one run measured, before it is turned into rates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawRun {
    /// Counters before the generator started.
    pub start: Sample,
    /// Counters after the generator stopped and the queues drained.
    pub end: Sample,
    /// Frames the generator offered.
    pub offered: u64,
    /// Wall time of the generator.
    pub elapsed: Duration,
    /// CPU time of the generator thread.
    pub generator_cpu: Duration,
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// What forwarded.
    pub name: String,
    /// Generator wall time, seconds.
    pub seconds: f64,
    /// Frames offered by the generator.
    pub offered: u64,
    /// Frames that reached the sink rewritten to the backend.
    pub delivered: u64,
    /// UDP frames that reached the sink NOT rewritten to the backend (a forwarder passed
    /// them on unchanged); the sink drops them too, and they do not count as delivered.
    pub sink_stray: u64,
    /// Offered rate, millions of packets per second.
    pub offered_mpps: f64,
    /// Delivered rate, millions of packets per second.
    pub delivered_mpps: f64,
    /// Delivered share of offered, percent.
    pub delivered_pct: f64,
    /// Whole-machine busy CPU time per delivered packet, nanoseconds (includes the
    /// generator, the sink and anything else running on the machine).
    pub cpu_ns_per_pkt: f64,
    /// The generator thread's own CPU time per delivered packet, nanoseconds.
    pub generator_ns_per_pkt: f64,
    /// `cpu_ns_per_pkt` minus the generator's share.
    pub without_generator_ns_per_pkt: f64,
    /// Whole-machine softirq time per delivered packet, nanoseconds.
    pub softirq_ns_per_pkt: f64,
    /// The `sluice run` process's CPU time per delivered packet (run A only).
    pub lb_process_ns_per_pkt: Option<f64>,
    /// Average busy CPUs over the run.
    pub busy_cpus: f64,
    /// Frames lb's ingress interface received.
    pub lb_ingress_rx: u64,
    /// Frames lb's ingress interface dropped on receive.
    pub lb_ingress_dropped: u64,
    /// Generator frames the veth could not hand to lb (its ring was full).
    pub generator_xmit_dropped: u64,
    /// Busy CPUs over one quiet second just before the run: other work on the machine,
    /// which `cpu_ns_per_pkt` includes and which competes with the forwarding.
    pub background_busy_cpus: f64,
}

impl RunResult {
    /// Turns raw counters into rates. Counter deltas saturate at zero, so a counter that
    /// went backwards (it cannot, short of a bug) shows as nothing delivered, not as garbage.
    pub fn compute(name: &str, raw: &RawRun) -> RunResult {
        let delivered = raw.end.delivered.saturating_sub(raw.start.delivered);
        let secs = raw.elapsed.as_secs_f64();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let per_pkt = |ns: f64| {
            if delivered > 0 {
                ns / delivered as f64
            } else {
                f64::INFINITY
            }
        };
        let busy_ns = raw.end.cpu.busy.saturating_sub(raw.start.cpu.busy) as f64 * NS_PER_TICK;
        // The CPU counters span the flood plus the drain and the sampling around it.
        let cpu_secs = match (raw.start.cpu_at, raw.end.cpu_at) {
            (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
            _ => secs,
        };
        let softirq_ns =
            raw.end.cpu.softirq.saturating_sub(raw.start.cpu.softirq) as f64 * NS_PER_TICK;
        let gen_ns = raw.generator_cpu.as_nanos() as f64;
        let lb_ns = match (raw.start.lb_process, raw.end.lb_process) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 * NS_PER_TICK),
            _ => None,
        };
        RunResult {
            name: name.to_string(),
            seconds: secs,
            offered: raw.offered,
            delivered,
            sink_stray: raw.end.stray.saturating_sub(raw.start.stray),
            offered_mpps: per_sec(raw.offered) / 1e6,
            delivered_mpps: per_sec(delivered) / 1e6,
            delivered_pct: if raw.offered > 0 {
                100.0 * delivered as f64 / raw.offered as f64
            } else {
                0.0
            },
            cpu_ns_per_pkt: per_pkt(busy_ns),
            generator_ns_per_pkt: per_pkt(gen_ns),
            without_generator_ns_per_pkt: per_pkt((busy_ns - gen_ns).max(0.0)),
            softirq_ns_per_pkt: per_pkt(softirq_ns),
            lb_process_ns_per_pkt: lb_ns.map(per_pkt),
            lb_ingress_rx: raw
                .end
                .lb_ingress
                .rx_packets
                .saturating_sub(raw.start.lb_ingress.rx_packets),
            lb_ingress_dropped: raw
                .end
                .lb_ingress
                .rx_dropped
                .saturating_sub(raw.start.lb_ingress.rx_dropped),
            generator_xmit_dropped: raw
                .end
                .generator_link
                .tx_dropped
                .saturating_sub(raw.start.generator_link.tx_dropped),
            background_busy_cpus: 0.0,
            busy_cpus: if cpu_secs > 0.0 {
                busy_ns / 1e9 / cpu_secs
            } else {
                0.0
            },
        }
    }
}

/// The whole benchmark's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    /// Frame length without FCS.
    pub frame_len: usize,
    /// Generator seconds per run.
    pub seconds: u64,
    /// Whether the appliance's workers spun (`busy_poll`).
    pub busy_poll: bool,
    /// CPUs on this machine.
    pub cpus: usize,
    /// Every round, in order.
    pub rounds: Vec<Round>,
    /// Run A: Sluice (the round with the median delivered rate).
    pub sluice: RunResult,
    /// Run B: the kernel with nftables DNAT (the round with the median delivered rate).
    pub nftables: RunResult,
    /// Run A2: Sluice with the XDP flow cache (median round), when measured.
    pub cache: Option<RunResult>,
    /// Run C: the XDP_REDIRECT ceiling (median round), when measured.
    pub ceiling: Option<RunResult>,
    /// The flow cache's delivered rate over the ceiling's (target: at least 0.8).
    pub cache_vs_ceiling: f64,
    /// The flow cache's delivered rate over nftables' (target: at least 4).
    pub cache_vs_nftables: f64,
    /// Both flow-cache targets met.
    pub cache_targets_met: bool,
    /// Sluice's delivered rate over nftables'.
    pub delivered_ratio: f64,
    /// Sluice's CPU per packet over nftables'.
    pub cpu_per_pkt_ratio: f64,
    /// The goal: Sluice delivers at least the nftables rate (in AF_XDP copy mode).
    pub target_met: bool,
    /// How the runs were set up, for the reader of the numbers.
    pub notes: Vec<String>,
}

/// One run A and the runs after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Round {
    /// Run A.
    pub sluice: RunResult,
    /// Run B.
    pub nftables: RunResult,
    /// Run A2: the flow cache.
    pub cache: Option<RunResult>,
    /// Run C: the XDP_REDIRECT ceiling.
    pub ceiling: Option<RunResult>,
}

/// The run with the median delivered rate (the lower middle one for an even count).
fn median_run<'a>(runs: impl Iterator<Item = &'a RunResult>) -> RunResult {
    let mut v: Vec<&RunResult> = runs.collect();
    v.sort_by(|x, y| x.delivered_mpps.total_cmp(&y.delivered_mpps));
    v.get(v.len().saturating_sub(1) / 2)
        .map(|r| (*r).clone())
        .unwrap_or_else(|| RunResult::compute("none", &RawRun::default()))
}

impl BenchReport {
    fn new(seconds: u64, rounds: Vec<Round>) -> BenchReport {
        let a = median_run(rounds.iter().map(|r| &r.sluice));
        let b = median_run(rounds.iter().map(|r| &r.nftables));
        let ratio = |x: f64, y: f64| {
            if y > 0.0 && y.is_finite() {
                x / y
            } else {
                f64::NAN
            }
        };
        let cache = rounds
            .iter()
            .any(|r| r.cache.is_some())
            .then(|| median_run(rounds.iter().filter_map(|r| r.cache.as_ref())));
        let ceiling = rounds
            .iter()
            .any(|r| r.ceiling.is_some())
            .then(|| median_run(rounds.iter().filter_map(|r| r.ceiling.as_ref())));
        let cache_mpps = cache.as_ref().map_or(0.0, |c| c.delivered_mpps);
        let cache_vs_ceiling = ratio(
            cache_mpps,
            ceiling.as_ref().map_or(0.0, |c| c.delivered_mpps),
        );
        let cache_vs_nftables = ratio(cache_mpps, b.delivered_mpps);
        BenchReport {
            cache_targets_met: cache_vs_ceiling >= 0.8 && cache_vs_nftables >= 4.0,
            cache_vs_ceiling,
            cache_vs_nftables,
            cache,
            ceiling,
            frame_len: FRAME_LEN,
            seconds,
            busy_poll: false,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            rounds,
            delivered_ratio: ratio(a.delivered_mpps, b.delivered_mpps),
            cpu_per_pkt_ratio: ratio(a.cpu_ns_per_pkt, b.cpu_ns_per_pkt),
            target_met: a.delivered > 0 && a.delivered_mpps >= b.delivered_mpps,
            sluice: a,
            nftables: b,
            notes: vec![
                "topology: gen -- lb -- sink over two veth pairs (two-arm), 1 queue each".into(),
                "generator: BPF_PROG_TEST_RUN live frames (XDP_TX out of gen's veth), one \
                 flow; its program rewrites the template into every frame, because recycled \
                 live-frame pages keep whatever the kernel's forwarding wrote into them"
                    .into(),
                "sink: bpf/sink.bpf.c on the sink's s0 in native XDP mode counts IPv4 UDP \
                 to the backend's address and port (and, apart, UDP that was not rewritten) \
                 and drops all UDP at XDP (XDP-forwarded frames never become an skb); generator, forwarder and \
                 sink share one CPU, and the sink is measuring apparatus (on real hardware \
                 another machine), so it is as cheap as it can be and the same for every run"
                    .into(),
                "run A: `sluice run` with one NAT VIP and `flow_cache = false` (pure AF_XDP: \
                 every frame goes through the engine); XDP and AF_XDP bind modes as the \
                 appliance logged them (below)"
                    .into(),
                "run B: Sluice stopped; ip_forward=1, nftables `table ip sluicebench` DNAT in \
                 prerouting; GRO on on lb's eth0 so the generator's XDP_TX frames are accepted \
                 without an XDP program"
                    .into(),
                "run A2: the same datapath and config in this process with the XDP flow \
                 cache (`flow_cache = true`): the engine decides the flow, the XDP program \
                 forwards its frames with a DEVMAP redirect"
                    .into(),
                "run C (ceiling): bpf/ceiling.bpf.c on eth0, no lookup: destination \
                 rewritten to the backend, MACs set, DEVMAP redirect to eth1"
                    .into(),
                "the sink's s0 has GRO off: its XDP program already gives the veth the NAPI \
                 that frames XDP-redirected into eth1 need; kernel-forwarded skbs (run B) \
                 meet the same program in veth's skb path, which first copies an skb whose \
                 buffer XDP cannot use in place (e.g. less than 256 bytes of headroom)"
                    .into(),
                "CPU: whole-machine busy time (/proc/stat) over the run divided by delivered \
                 packets, including the generator, the sink and any other load"
                    .into(),
            ],
        }
    }

    /// The table `sluice bench` prints.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "sluice bench: {}-byte UDP frames to {VIP}:{PORT} over veth, {} s per run, {} \
             round(s), {} CPUs, appliance busy_poll {}",
            self.frame_len,
            self.seconds,
            self.rounds.len(),
            self.cpus,
            self.busy_poll
        );
        let head = |s: &mut String, cols: [&str; 11]| {
            let _ = writeln!(
                s,
                "{:<34} {:>8} {:>9} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>6}",
                cols[0],
                cols[1],
                cols[2],
                cols[3],
                cols[4],
                cols[5],
                cols[6],
                cols[7],
                cols[8],
                cols[9],
                cols[10]
            );
        };
        head(
            &mut s,
            [
                "run",
                "offered",
                "delivered",
                "deliv",
                "CPU",
                "gen",
                "w/o gen",
                "softirq",
                "sluice",
                "busy",
                "bg",
            ],
        );
        head(
            &mut s,
            [
                "", "Mpps", "Mpps", "%", "ns/pkt", "ns/pkt", "ns/pkt", "ns/pkt", "ns/pkt", "CPUs",
                "CPUs",
            ],
        );
        let row = |s: &mut String, label: String, r: &RunResult| {
            let _ = writeln!(
                s,
                "{:<34} {:>8.3} {:>9.3} {:>6.1} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>8} {:>6.2} {:>6.2}",
                label,
                r.offered_mpps,
                r.delivered_mpps,
                r.delivered_pct,
                r.cpu_ns_per_pkt,
                r.generator_ns_per_pkt,
                r.without_generator_ns_per_pkt,
                r.softirq_ns_per_pkt,
                r.lb_process_ns_per_pkt
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
                r.busy_cpus,
                r.background_busy_cpus
            );
        };
        let sides = |r: &Round| -> Vec<RunResult> {
            let mut v = vec![r.sluice.clone()];
            v.extend(r.cache.clone());
            v.extend(r.ceiling.clone());
            v.push(r.nftables.clone());
            v
        };
        let medians = sides(&Round {
            sluice: self.sluice.clone(),
            nftables: self.nftables.clone(),
            cache: self.cache.clone(),
            ceiling: self.ceiling.clone(),
        });
        if self.rounds.len() > 1 {
            for (i, round) in self.rounds.iter().enumerate() {
                for r in &sides(round) {
                    row(&mut s, format!("{}: {}", i + 1, r.name), r);
                }
            }
            for r in &medians {
                row(&mut s, format!("median: {}", r.name), r);
            }
        } else {
            for r in &medians {
                row(&mut s, r.name.clone(), r);
            }
        }
        for r in &medians {
            let _ = writeln!(
                s,
                "{}: offered {}, generator xmit drops {}, lb eth0 received {} (dropped {}), \
                 delivered {}, UDP at the sink not rewritten {}",
                r.name,
                r.offered,
                r.generator_xmit_dropped,
                r.lb_ingress_rx,
                r.lb_ingress_dropped,
                r.delivered,
                r.sink_stray
            );
        }
        let _ = writeln!(
            s,
            "sluice / nftables: delivered rate x{:.2}, CPU per packet x{:.2}; target \
             (sluice delivers at least the nftables rate): {}",
            self.delivered_ratio,
            self.cpu_per_pkt_ratio,
            if self.target_met { "met" } else { "NOT met" }
        );
        if let (Some(c), Some(x)) = (&self.cache, &self.ceiling) {
            let _ = writeln!(
                s,
                "flow cache: {:.3} Mpps = x{:.2} the XDP_REDIRECT ceiling ({:.3} Mpps; target \
                 >= 0.8), x{:.2} nftables DNAT (target >= 4): {}",
                c.delivered_mpps,
                self.cache_vs_ceiling,
                x.delivered_mpps,
                self.cache_vs_nftables,
                if self.cache_targets_met {
                    "met"
                } else {
                    "NOT met"
                }
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "  - {n}");
        }
        s
    }
}

/// Reads the whole machine's CPU times.
fn cpu_times() -> Result<CpuTimes, BenchError> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|e| BenchError::Counter {
        what: "/proc/stat".into(),
        detail: e.to_string(),
    })?;
    parse_proc_stat(&text).ok_or_else(|| BenchError::Counter {
        what: "/proc/stat".into(),
        detail: "no parsable aggregate cpu line".into(),
    })
}

/// Busy CPUs over one second in which the bench itself does nothing.
fn background_busy() -> Result<f64, BenchError> {
    let a = cpu_times()?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let b = cpu_times()?;
    Ok(b.busy.saturating_sub(a.busy) as f64 * NS_PER_TICK / 1e9 / t.elapsed().as_secs_f64())
}

/// The bench's traffic generator program, assembled here rather than taken from
/// [`crate::datapath::pktgen`]: live-frame test runs recycle their pages without copying the
/// template in again, and the kernel's forwarding path (run B) rewrites every frame in place
/// (destination MAC, TTL, DNAT) before the page comes back. With a plain `XDP_TX` program
/// the recycled frames then carry the sink's MAC and the lb's kernel drops them as
/// "other host", so run B would measure nothing. This program stores the whole template
/// into each frame before transmitting it, so every repetition sends the same bytes whatever
/// the consumer did to the page.
pub fn restoring_generator(template: &[u8]) -> Option<Vec<u8>> {
    if template.is_empty() || !template.len().is_multiple_of(8) || template.len() > 256 {
        return None;
    }
    let stores = template.len() / 8;
    // opcode, dst | src << 4, off, imm: the eBPF instruction encoding (RFC 9669).
    let insn = |op: u8, dst: u8, src: u8, off: i16, imm: i32| -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = op;
        b[1] = dst | (src << 4);
        b[2..4].copy_from_slice(&off.to_ne_bytes());
        b[4..8].copy_from_slice(&imm.to_ne_bytes());
        b
    };
    let mut code: Vec<[u8; 8]> = vec![
        insn(0x61, 2, 1, 0, 0),                     // r2 = ctx->data (u32)
        insn(0x61, 3, 1, 4, 0),                     // r3 = ctx->data_end (u32)
        insn(0xbf, 4, 2, 0, 0),                     // r4 = r2
        insn(0x07, 4, 0, 0, template.len() as i32), // r4 += len
        // if r4 > r3: skip the stores (each 3 slots) and the XDP_TX exit (2 slots).
        insn(0x2d, 4, 3, (stores * 3 + 2) as i16, 0),
    ];
    for (i, chunk) in template.chunks_exact(8).enumerate() {
        let v = u64::from_ne_bytes(chunk.try_into().ok()?);
        // r5 = imm64 (two slots: low half, then high half), then *(u64 *)(r2 + 8i) = r5.
        code.push(insn(0x18, 5, 0, 0, v as u32 as i32));
        code.push(insn(0, 0, 0, 0, (v >> 32) as u32 as i32));
        code.push(insn(0x7b, 2, 5, (i * 8) as i16, 0));
    }
    code.push(insn(0xb7, 0, 0, 0, 3)); // r0 = XDP_TX
    code.push(insn(0x95, 0, 0, 0, 0)); // exit
    code.push(insn(0xb7, 0, 0, 0, 1)); // short frame: r0 = XDP_DROP
    code.push(insn(0x95, 0, 0, 0, 0)); // exit
    Some(code.concat())
}

/// One ELF64 section header, as far as [`bpf_object`] needs it.
#[derive(Default)]
struct Section {
    name: u32,
    ty: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    info: u32,
    align: u64,
    entsize: u64,
}

const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHF_WRITE: u64 = 0x1;
const SHF_ALLOC: u64 = 0x2;
const SHF_EXECINSTR: u64 = 0x4;

/// Name of the generator program inside [`bpf_object`]'s ELF.
const GEN_PROG: &str = "sluice_bench_gen";

/// A minimal relocatable BPF ELF object holding `code` as the XDP program [`GEN_PROG`]:
/// what clang would emit for it, without needing clang at run time or a build step.
/// Sections: null, `xdp`, `license`, `.symtab`, `.strtab`, `.shstrtab`.
pub fn bpf_object(code: &[u8]) -> Vec<u8> {
    fn align(v: &mut Vec<u8>, to: usize) {
        while !v.len().is_multiple_of(to) {
            v.push(0);
        }
    }
    let u16b = |x: u16| x.to_ne_bytes();
    let u32b = |x: u32| x.to_ne_bytes();
    let u64b = |x: u64| x.to_ne_bytes();
    let shstrtab = b"\0xdp\0license\0.symtab\0.strtab\0.shstrtab\0";
    let name_at = |n: &str| {
        shstrtab
            .windows(n.len() + 2)
            .position(|w| w[0] == 0 && &w[1..=n.len()] == n.as_bytes() && w[n.len() + 1] == 0)
            .map_or(0, |p| p as u32 + 1)
    };
    let strtab: Vec<u8> = [b"\0".as_slice(), GEN_PROG.as_bytes(), b"\0"].concat();
    let license = b"GPL\0";
    // Symbol 0 is the null symbol; symbol 1 the program (global function in section 1).
    let mut symtab = vec![0u8; 24];
    symtab.extend_from_slice(&u32b(1));
    symtab.push(0x12); // STB_GLOBAL << 4 | STT_FUNC
    symtab.push(0); // STV_DEFAULT
    symtab.extend_from_slice(&u16b(1));
    symtab.extend_from_slice(&u64b(0));
    symtab.extend_from_slice(&u64b(code.len() as u64));

    let mut out = vec![0u8; 64];
    let mut place = |data: &[u8], align_to: usize| {
        align(&mut out, align_to);
        let off = out.len();
        out.extend_from_slice(data);
        off as u64
    };
    let code_off = place(code, 8);
    let lic_off = place(license, 1);
    let sym_off = place(&symtab, 8);
    let str_off = place(&strtab, 1);
    let shs_off = place(shstrtab, 1);
    align(&mut out, 8);
    let shoff = out.len() as u64;
    let section = |name: &str, ty: u32, flags: u64, (offset, size): (u64, usize)| Section {
        name: name_at(name),
        ty,
        flags,
        offset,
        size: size as u64,
        ..Section::default()
    };
    let sections = [
        Section::default(),
        Section {
            align: 8,
            ..section(
                "xdp",
                SHT_PROGBITS,
                SHF_ALLOC | SHF_EXECINSTR,
                (code_off, code.len()),
            )
        },
        section(
            "license",
            SHT_PROGBITS,
            SHF_ALLOC | SHF_WRITE,
            (lic_off, license.len()),
        ),
        Section {
            link: 4,
            info: 1,
            align: 8,
            entsize: 24,
            ..section(".symtab", SHT_SYMTAB, 0, (sym_off, symtab.len()))
        },
        section(".strtab", SHT_STRTAB, 0, (str_off, strtab.len())),
        section(".shstrtab", SHT_STRTAB, 0, (shs_off, shstrtab.len())),
    ];
    for sh in &sections {
        out.extend_from_slice(&u32b(sh.name));
        out.extend_from_slice(&u32b(sh.ty));
        out.extend_from_slice(&u64b(sh.flags));
        out.extend_from_slice(&u64b(0)); // addr
        out.extend_from_slice(&u64b(sh.offset));
        out.extend_from_slice(&u64b(sh.size));
        out.extend_from_slice(&u32b(sh.link));
        out.extend_from_slice(&u32b(sh.info));
        out.extend_from_slice(&u64b(sh.align.max(1)));
        out.extend_from_slice(&u64b(sh.entsize));
    }
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(b"\x7fELF");
    h.push(2); // ELFCLASS64
    h.push(if cfg!(target_endian = "little") { 1 } else { 2 });
    h.push(1); // EV_CURRENT
    h.extend_from_slice(&[0; 9]);
    h.extend_from_slice(&u16b(1)); // ET_REL
    h.extend_from_slice(&u16b(247)); // EM_BPF
    h.extend_from_slice(&u32b(1));
    h.extend_from_slice(&u64b(0)); // entry
    h.extend_from_slice(&u64b(0)); // phoff
    h.extend_from_slice(&u64b(shoff));
    h.extend_from_slice(&u32b(0)); // flags
    h.extend_from_slice(&u16b(64)); // ehsize
    h.extend_from_slice(&u16b(0)); // phentsize
    h.extend_from_slice(&u16b(0)); // phnum
    h.extend_from_slice(&u16b(64)); // shentsize
    h.extend_from_slice(&u16b(sections.len() as u16));
    h.extend_from_slice(&u16b(5)); // shstrndx
    out[..64].copy_from_slice(&h);
    out
}

/// The loaded generator program.
struct GenProgram {
    obj: libbpf_rs::Object,
}

/// `BPF_F_TEST_XDP_LIVE_FRAMES` from <linux/bpf.h>.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

impl GenProgram {
    fn load(template: &[u8]) -> Result<GenProgram, String> {
        let code = restoring_generator(template)
            .ok_or_else(|| format!("template of {} bytes: need a multiple of 8", template.len()))?;
        let obj = libbpf_rs::ObjectBuilder::default()
            .open_memory(&bpf_object(&code))
            .and_then(|o| o.load())
            .map_err(|e| format!("loading the generator program: {e}"))?;
        Ok(GenProgram { obj })
    }

    /// Transmits `count` frames out of `ifindex` (in the calling thread's namespace).
    fn send(&mut self, ifindex: u32, frame: &[u8], count: u32) -> Result<(), String> {
        let prog = self
            .obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(GEN_PROG))
            .ok_or_else(|| format!("generator object has no program {GEN_PROG}"))?;
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
        // egress_ifindex (all u32): the frame starts at 0 and arrives on queue 0.
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
        let input = libbpf_rs::ProgramInput {
            context_in: Some(&mut ctx),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat: count,
            ..Default::default()
        };
        prog.test_run(input)
            .map(|_| ())
            .map_err(|e| format!("live-frame test run on ifindex {ifindex}: {e}"))
    }
}

/// Commands to the generator thread, which lives in the gen namespace.
enum GenCmd {
    /// Send this many frames now (readiness probes).
    Burst(u32),
    /// Send for this long, as fast as the generator goes, until done or stopped.
    Flood(Duration),
}

/// What one flood did.
#[derive(Debug, Clone, Copy)]
struct Flood {
    offered: u64,
    elapsed: Duration,
    cpu: Duration,
}

/// The generator thread: loads the generator once, then serves bursts and floods.
struct Generator {
    cmds: Option<mpsc::Sender<GenCmd>>,
    results: mpsc::Receiver<Result<Flood, String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Generator {
    fn start(
        gen_ns: &Netns,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        stop: Arc<AtomicBool>,
    ) -> Result<Self, BenchError> {
        let (cmd_tx, cmd_rx) = mpsc::channel::<GenCmd>();
        let (res_tx, res_rx) = mpsc::channel();
        let thread = gen_ns.in_thread(move || {
            let setup = (|| {
                let ifindex = nix::net::if_::if_nametoindex("g0")
                    .map_err(|e| format!("g0 in the gen namespace: {e}"))?;
                let frame = crate::datapath::pktgen::udp4_frame(
                    src_mac, dst_mac, GEN_ADDR, VIP, GEN_SPORT, PORT, FRAME_LEN,
                );
                let generator = GenProgram::load(&frame)?;
                Ok::<_, String>((ifindex, generator, frame))
            })();
            let (ifindex, mut generator, frame) = match setup {
                Ok(s) => s,
                Err(e) => {
                    let _ = res_tx.send(Err(e));
                    return;
                }
            };
            for cmd in cmd_rx {
                let res = match cmd {
                    GenCmd::Burst(n) => generator.send(ifindex, &frame, n).map(|()| Flood {
                        offered: u64::from(n),
                        elapsed: Duration::ZERO,
                        cpu: Duration::ZERO,
                    }),
                    GenCmd::Flood(d) => flood(&mut generator, ifindex, &frame, d, &stop),
                };
                if res_tx.send(res).is_err() {
                    return;
                }
            }
        })?;
        Ok(Generator {
            cmds: Some(cmd_tx),
            results: res_rx,
            thread: Some(thread),
        })
    }

    fn call(&self, cmd: GenCmd) -> Result<Flood, BenchError> {
        let dead = || BenchError::Generator("the generator thread ended".into());
        self.cmds
            .as_ref()
            .ok_or_else(dead)?
            .send(cmd)
            .map_err(|_| dead())?;
        match self.results.recv() {
            Ok(r) => r.map_err(BenchError::Generator),
            Err(_) => Err(dead()),
        }
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.cmds.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Frames for the next generator call: what the last one (`sent` frames in `took`) says
/// the generator does in [`CALL_TARGET`], or in the `left` time if that is shorter; at
/// least 65536 (a shorter call is mostly fixed cost) and at most 16 Mi (the kernel's cap).
pub fn next_chunk(sent: u32, took: Duration, left: Duration) -> u32 {
    let rate = f64::from(sent) / took.as_secs_f64().max(1e-3);
    let want = rate * left.min(CALL_TARGET).as_secs_f64();
    want.clamp(65_536.0, f64::from(1u32 << 24)) as u32
}

/// The calling thread's CPU time (the generator's work is kernel time in its own context).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or(Duration::ZERO)
}

fn flood(
    generator: &mut GenProgram,
    ifindex: u32,
    frame: &[u8],
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Flood, String> {
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut offered = 0u64;
    let mut chunk = FIRST_CHUNK;
    while t0.elapsed() < duration {
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let t = Instant::now();
        generator.send(ifindex, frame, chunk)?;
        offered += u64::from(chunk);
        chunk = next_chunk(chunk, t.elapsed(), duration.saturating_sub(t0.elapsed()));
    }
    Ok(Flood {
        offered,
        elapsed: t0.elapsed(),
        cpu: thread_cpu().saturating_sub(cpu0),
    })
}

/// The `address` of the first link in `ip -j link show` output.
pub fn parse_ip_link_mac(json: &str) -> Option<[u8; 6]> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let text = v.as_array()?.first()?.get("address")?.as_str()?;
    let bytes: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    <[u8; 6]>::try_from(bytes).ok()
}

fn mac_of(ns: &Netns, ifname: &str) -> Result<[u8; 6], BenchError> {
    let out = ns.run(&["ip", "-j", "link", "show", "dev", ifname])?;
    parse_ip_link_mac(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| BenchError::Counter {
        what: format!("MAC of {ifname} in {}", ns.name),
        detail: "no address in `ip -j link` output".into(),
    })
}

fn link_stats(ns: &Netns, ifname: &str) -> Result<LinkStats, BenchError> {
    let out = ns.run(&["ip", "-s", "-j", "link", "show", "dev", ifname])?;
    parse_link_stats(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| BenchError::Counter {
        what: format!("counters of {ifname} in {}", ns.name),
        detail: "no stats64 in `ip -s -j link` output".into(),
    })
}

fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The object clang built from bpf/sink.bpf.c (see build.rs).
static SINK_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sink.bpf.o"));
const SINK_PROG: &str = "sluice_sink";
const SINK_MAP: &str = "sink_counters";
/// Counter slots of bpf/sink.bpf.c: IPv4 UDP to the backend's address and port.
const SINK_DELIVERED: u32 = 0;
/// Counter slots of bpf/sink.bpf.c: any other IPv4 UDP (not rewritten by the forwarder).
const SINK_STRAY: u32 = 1;

/// What the sink has counted since it was attached, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// IPv4 UDP frames to the backend's address and port.
    pub delivered: u64,
    /// Other IPv4 UDP frames (dropped as well).
    pub stray: u64,
}

/// The sink: bpf/sink.bpf.c, loaded for `backend:port` and (once attached) counting and
/// dropping at s0's driver-mode XDP hook, where a frame costs the least it can (no skb).
/// Dropping it detaches the program (the attachment is a BPF link).
struct SinkProgram {
    // Field order is drop order: the link (the attachment) goes before the object.
    link: Option<libbpf_rs::Link>,
    obj: libbpf_rs::Object,
}

impl SinkProgram {
    /// Loads the program for `backend:port` without attaching it.
    fn load(backend: Ipv4Addr, port: u16) -> Result<SinkProgram, String> {
        let mut open = libbpf_rs::ObjectBuilder::default()
            .open_memory(SINK_OBJ)
            .map_err(|e| format!("opening the sink program: {e}"))?;
        let mut configured = false;
        for mut m in open.maps_mut() {
            if m.name().to_string_lossy().ends_with(".rodata")
                && let Some(v) = m.initial_value_mut()
                && v.len() >= 8
            {
                // struct sink_cfg: backend, port (both in network order), pad.
                v[0..4].copy_from_slice(&backend.octets());
                v[4..6].copy_from_slice(&port.to_be_bytes());
                configured = true;
            }
        }
        if !configured {
            return Err("the sink program has no 8-byte .rodata for its sink_cfg".into());
        }
        let obj = open
            .load()
            .map_err(|e| format!("loading the sink program: {e}"))?;
        Ok(SinkProgram { link: None, obj })
    }

    fn prog(&mut self) -> Result<libbpf_rs::ProgramMut<'_>, String> {
        self.obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(SINK_PROG))
            .ok_or_else(|| format!("sink object has no program {SINK_PROG}"))
    }

    /// Runs `frame` through the loaded program (BPF_PROG_TEST_RUN) and returns its XDP
    /// action; the counters move as they would on s0.
    #[cfg(test)]
    fn test_run(&mut self, frame: &[u8]) -> Result<u32, String> {
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        self.prog()?
            .test_run(input)
            .map(|out| out.return_value)
            .map_err(|e| format!("test-running the sink program: {e}"))
    }

    /// Attaches the program to `ifname` in the calling thread's namespace, in driver
    /// (native) mode: veth runs native XDP on its NAPI before any skb exists, while generic
    /// mode would build the skb first and save nothing.
    fn attach(&mut self, ifname: &str) -> Result<(), String> {
        use libbpf_rs::{Xdp, XdpFlags};
        use std::os::fd::AsFd;

        let ifindex = ifindex(ifname)? as i32;
        let prog = self.prog()?;
        // A link without mode flags takes the driver's hook when the driver has one (veth
        // does); checked below rather than assumed.
        let link = prog
            .attach_xdp(ifindex)
            .map_err(|e| format!("attaching the sink program to {ifname}: {e}"))?;
        let want = libbpf_rs::Program::id_from_fd(prog.as_fd())
            .map_err(|e| format!("the sink program's id: {e}"))?;
        let native = Xdp::new(prog.as_fd())
            .query_id(ifindex, XdpFlags::DRV_MODE)
            .map_err(|e| format!("querying {ifname}'s XDP program: {e}"))?;
        // Dropping the link detaches the program again.
        if native != want {
            return Err(format!(
                "the sink program is not on {ifname}'s native XDP hook (native program id \
                 {native}, the sink's {want})"
            ));
        }
        self.link = Some(link);
        Ok(())
    }

    fn counts(&self) -> Result<SinkCounts, String> {
        use libbpf_rs::{MapCore, MapFlags};

        let map = self
            .obj
            .maps()
            .find(|m| m.name() == std::ffi::OsStr::new(SINK_MAP))
            .ok_or_else(|| format!("sink object has no map {SINK_MAP}"))?;
        let slot = |i: u32| -> Result<u64, String> {
            let per_cpu = map
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| format!("reading {SINK_MAP}[{i}]: {e}"))?
                .ok_or_else(|| format!("{SINK_MAP}[{i}] is missing"))?;
            sum_percpu(&per_cpu).ok_or_else(|| format!("{SINK_MAP}[{i}] is not a u64"))
        };
        Ok(SinkCounts {
            delivered: slot(SINK_DELIVERED)?,
            stray: slot(SINK_STRAY)?,
        })
    }
}

/// The namespaces, files and the appliance process of one benchmark. Dropping it stops the
/// appliance, then the namespaces go (each killing whatever is left inside).
struct Bench {
    dir: PathBuf,
    appliance: Option<Child>,
    generator: Option<Generator>,
    // Field order is drop order: the generator thread leaves gen before gen is deleted, and
    // the sink program leaves s0 before the sink namespace is deleted.
    sink_prog: Option<SinkProgram>,
    gen_ns: Netns,
    lb: Netns,
    sink: Netns,
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.stop_appliance();
        self.generator.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Bench {
    fn build() -> Result<Bench, BenchError> {
        if !netns::is_root() {
            return Err(LabError {
                command: "sluice bench".into(),
                detail: "needs root (network namespaces, XDP, BPF test runs)".into(),
            }
            .into());
        }
        netns::require("ip", "iproute2")?;
        netns::require("nft", "nftables")?;
        netns::require("ethtool", "ethtool")?;
        static BENCHES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            BENCHES.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(format!("sluice-bench-{id}"));
        std::fs::create_dir_all(&dir).map_err(|e| LabError {
            command: format!("mkdir {}", dir.display()),
            detail: e.to_string(),
        })?;
        let ns = |role: &str| Netns::create(&format!("sb{id}{role}"));
        let mut bench = Bench {
            dir,
            appliance: None,
            generator: None,
            sink_prog: None,
            gen_ns: ns("gen")?,
            lb: ns("lb")?,
            sink: ns("sink")?,
        };
        bench.wire(&id)?;
        bench.sink_prog = Some(bench.attach_sink()?);
        Ok(bench)
    }

    fn wire(&self, id: &str) -> Result<(), BenchError> {
        let (g, lb, s) = (&self.gen_ns, &self.lb, &self.sink);
        veth(g, "g0", lb, "eth0", &format!("sb{id}u"))?;
        veth(lb, "eth1", s, "s0", &format!("sb{id}d"))?;
        g.run(&["ip", "addr", "add", &format!("{GEN_ADDR}/24"), "dev", "g0"])?;
        lb.run(&["ip", "addr", "add", LB_UPLINK, "dev", "eth0"])?;
        lb.run(&["ip", "addr", "add", LB_DOWNLINK, "dev", "eth1"])?;
        s.run(&["ip", "addr", "add", &format!("{BACKEND}/24"), "dev", "s0"])?;
        // A permanent neighbour: no run waits for ARP or for a neighbour refresh.
        let sink_mac = mac_text(mac_of(s, "s0")?);
        lb.run(&[
            "ip",
            "neigh",
            "replace",
            &BACKEND.to_string(),
            "lladdr",
            &sink_mac,
            "dev",
            "eth1",
            "nud",
            "permanent",
        ])?;
        lb.run(&["sysctl", "-qw", "net.ipv4.ip_forward=0"])?;
        // s0 keeps veth's default GRO off: XDP_REDIRECT into eth1 (flow cache, ceiling) is
        // dropped unless its peer s0 has NAPI, which GRO or an XDP program enables, and the
        // sink's program (attach_sink) is on s0 for the whole bench. GRO would only add work
        // for the skbs of run B, which the program drops before GRO anyway.
        Ok(())
    }

    /// Loads bpf/sink.bpf.c for the backend and attaches it to s0 (native XDP) from a thread
    /// inside the sink namespace; the returned program stays attached until it is dropped.
    fn attach_sink(&self) -> Result<SinkProgram, BenchError> {
        let failed = |detail: String| LabError {
            command: format!("attach bpf/sink.bpf.c to s0 in {}", self.sink.name),
            detail,
        };
        self.sink
            .in_thread(|| {
                let mut sink = SinkProgram::load(BACKEND, PORT)?;
                sink.attach("s0")?;
                Ok::<_, String>(sink)
            })?
            .join()
            .map_err(|_| failed("the thread entering the namespace panicked".into()))?
            .map_err(|e| failed(e).into())
    }

    fn sink_counts(&self) -> Result<SinkCounts, BenchError> {
        let counter = |detail: String| BenchError::Counter {
            what: "the sink's XDP counters".into(),
            detail,
        };
        self.sink_prog
            .as_ref()
            .ok_or_else(|| counter("the sink program is not attached".into()))?
            .counts()
            .map_err(counter)
    }

    fn delivered(&self) -> Result<u64, BenchError> {
        Ok(self.sink_counts()?.delivered)
    }

    fn sample(&mut self) -> Result<Sample, BenchError> {
        let lb_process = match &self.appliance {
            Some(c) => Some(
                std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
                    .ok()
                    .and_then(|t| parse_pid_stat(&t))
                    .ok_or_else(|| BenchError::Counter {
                        what: "the sluice process's CPU time".into(),
                        detail: format!("/proc/{}/stat unreadable (did it exit?)", c.id()),
                    })?,
            ),
            None => None,
        };
        let sink = self.sink_counts()?;
        Ok(Sample {
            delivered: sink.delivered,
            stray: sink.stray,
            cpu: cpu_times()?,
            cpu_at: Some(Instant::now()),
            lb_process,
            lb_ingress: link_stats(&self.lb, "eth0")?,
            generator_link: link_stats(&self.gen_ns, "g0")?,
        })
    }

    fn generator(&self) -> Result<&Generator, BenchError> {
        self.generator
            .as_ref()
            .ok_or_else(|| BenchError::Generator("not started".into()))
    }

    /// Sends small bursts until one reaches the sink.
    fn wait_forwarding(&mut self, run: &str, stop: &AtomicBool) -> Result<(), BenchError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            if stop.load(Ordering::Relaxed) {
                return Err(BenchError::Interrupted);
            }
            if let Some(c) = self.appliance.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(BenchError::NotForwarding {
                    run: run.into(),
                    detail: format!("sluice run exited ({status}); log:\n{}", self.log_tail()),
                });
            }
            let before = self.delivered()?;
            self.generator()?.call(GenCmd::Burst(64))?;
            std::thread::sleep(Duration::from_millis(100));
            if self.delivered()? > before {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let log = if self.appliance.is_some() {
            format!("; log:\n{}", self.log_tail())
        } else {
            String::new()
        };
        Err(BenchError::NotForwarding {
            run: run.into(),
            detail: format!(
                "no probe frame reached the sink within {} s{log}",
                READY_TIMEOUT.as_secs()
            ),
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("sluice.log")
    }

    /// The appliance's "datapath interface up" log lines (XDP attach mode, AF_XDP bind mode).
    fn datapath_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("datapath interface up"))
            .map(|l| l.trim().to_string())
            .collect()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn start_appliance(&mut self, sluice: &Path, busy_poll: bool) -> Result<(), BenchError> {
        let cfg = self.dir.join("sluice.toml");
        std::fs::write(
            &cfg,
            appliance_config(&self.dir.join("api.sock"), busy_poll),
        )
        .map_err(|e| LabError {
            command: format!("write {}", cfg.display()),
            detail: e.to_string(),
        })?;
        let log = std::fs::File::create(self.log_path()).ok();
        let child = self.lb.spawn(
            &[
                &sluice.to_string_lossy(),
                "run",
                "--config",
                &cfg.to_string_lossy(),
            ],
            log,
        )?;
        self.appliance = Some(child);
        Ok(())
    }

    /// SIGTERM, so the appliance detaches its XDP program itself; SIGKILL after 15 s.
    /// Returns whether it exited cleanly.
    fn stop_appliance(&mut self) -> bool {
        let Some(mut child) = self.appliance.take() else {
            return false;
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }

    /// One measured run: counters, flood, drain, counters.
    fn measure(&mut self, stop: &AtomicBool, seconds: u64) -> Result<RawRun, BenchError> {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        let start = self.sample()?;
        let flood = self
            .generator()?
            .call(GenCmd::Flood(Duration::from_secs(seconds)))
            .map_err(|e| match e {
                BenchError::Generator(m) if m == "interrupted" => BenchError::Interrupted,
                e => e,
            })?;
        // Let the rings and backlogs drain so every delivered frame is counted.
        std::thread::sleep(Duration::from_millis(200));
        let end = self.sample()?;
        Ok(RawRun {
            start,
            end,
            offered: flood.offered,
            elapsed: flood.elapsed,
            generator_cpu: flood.cpu,
        })
    }
}

/// Names of the sides.
const RUN_A: &str = "sluice (AF_XDP, NAT)";
const RUN_B: &str = "kernel + nftables DNAT";
const RUN_CACHE: &str = "sluice + XDP flow cache (NAT)";
const RUN_CEILING: &str = "XDP_REDIRECT ceiling";

/// The object clang built from bpf/ceiling.bpf.c (see build.rs).
static CEILING_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ceiling.bpf.o"));
const CEILING_PROG: &str = "sluice_ceiling";

/// Something that forwards from a thread inside lb's namespace until told to stop.
struct LbTask {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<Result<String, String>>,
}

impl LbTask {
    /// Starts `f` in `ns` and waits until it says it is ready (or failed). `f` gets the
    /// ready sender and the stop receiver, and returns a line for the report.
    fn start(
        ns: &Netns,
        run: &str,
        f: impl FnOnce(mpsc::Sender<Result<(), String>>, mpsc::Receiver<()>) -> Result<String, String>
        + Send
        + 'static,
    ) -> Result<LbTask, BenchError> {
        let (stop_tx, stop_rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let handle = ns.in_thread(move || f(ready_tx, stop_rx))?;
        let not = |detail: String| BenchError::NotForwarding {
            run: run.to_string(),
            detail,
        };
        match ready_rx.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(())) => Ok(LbTask {
                stop: stop_tx,
                handle,
            }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(not(e))
            }
            Err(_) => {
                let _ = stop_tx.send(());
                let r = handle.join();
                Err(not(format!("did not start: {r:?}")))
            }
        }
    }

    fn finish(self) -> Result<String, String> {
        let _ = self.stop.send(());
        self.handle
            .join()
            .unwrap_or_else(|_| Err("the forwarding thread panicked".into()))
    }
}

/// MACs the in-namespace runs need: lb's eth0 and eth1, the generator's g0, the sink's s0.
#[derive(Debug, Clone, Copy)]
struct Macs {
    up: [u8; 6],
    down: [u8; 6],
    gen_mac: [u8; 6],
    sink: [u8; 6],
}

fn ifindex(name: &str) -> Result<u32, String> {
    nix::net::if_::if_nametoindex(name).map_err(|e| format!("interface {name}: {e}"))
}

/// Run A2's forwarder: the datapath with the flow cache, on the bench config, in-process.
fn cached_datapath(
    config_text: &str,
    macs: Macs,
    ready: &mpsc::Sender<Result<(), String>>,
    stop: &mpsc::Receiver<()>,
) -> Result<String, String> {
    use crate::datapath::flowcache::{CACHE_ENTRIES, FlowCache};
    use crate::datapath::{Datapath, DatapathConfig, Proto, ReturnKey, VipKey};
    use crate::engine::{CounterSnapshot, LbHandler, Published};
    use crate::lb::{Neighbor, Tables};
    use wire::MacAddr;

    let mut c = crate::config::Config::from_toml_str(config_text).map_err(|e| e.to_string())?;
    c.appliance.flow_cache = true;
    let (up, down) = (ifindex("eth0")?, ifindex("eth1")?);
    let mut t = Tables::build(&c, &|_, _| true, 1).map_err(|e| e.to_string())?;
    t.set_neighbor(
        0,
        Neighbor {
            ifindex: down,
            src_mac: MacAddr(macs.down),
            dst_mac: MacAddr(macs.sink),
        },
    );
    t.set_gateway(
        false,
        Neighbor {
            ifindex: up,
            src_mac: MacAddr(macs.up),
            dst_mac: MacAddr(macs.gen_mac),
        },
    );
    let published = Arc::new(Published::new(t));
    let cache = Arc::new(FlowCache::create(CACHE_ENTRIES).map_err(|e| e.to_string())?);
    let capacity = c.appliance.conntrack_capacity as usize;
    let factory = {
        let published = Arc::clone(&published);
        let cache = Arc::clone(&cache);
        move |w: usize, n: usize| -> Box<dyn crate::datapath::FrameHandler> {
            Box::new(
                LbHandler::new(
                    Arc::clone(&published),
                    capacity,
                    w as u16,
                    n as u16,
                    Arc::new(std::sync::Mutex::new(CounterSnapshot::default())),
                    Arc::new(std::sync::atomic::AtomicU64::new(0)),
                )
                .with_flow_cache(Arc::clone(&cache)),
            )
        }
    };
    let dp = Datapath::start_with_cache(
        DatapathConfig::from(&c.appliance),
        Some(Arc::clone(&cache)),
        factory,
    )
    .map_err(|e| e.to_string())?;
    dp.set_vips(&[VipKey {
        addr: VIP.into(),
        port: PORT,
        proto: Proto::Udp,
    }])
    .map_err(|e| e.to_string())?;
    dp.set_return_keys(&[ReturnKey::Backend {
        addr: BACKEND.into(),
        port: PORT,
        proto: Proto::Udp,
    }])
    .map_err(|e| e.to_string())?;
    let modes: Vec<String> = dp
        .interfaces()
        .iter()
        .map(|i| format!("{} {}", i.name, i.xdp_mode.name()))
        .collect();
    let _ = ready.send(Ok(()));
    let _ = stop.recv();
    let st = crate::control::cache::stats(&cache);
    let engine = dp
        .stats()
        .map(|s| s.workers.iter().map(|w| w.rx).sum::<u64>())
        .unwrap_or(0);
    drop(dp);
    Ok(format!(
        "flow cache run: XDP {}; cache hits {}, misses {}, entries {}; frames the engine \
         saw {engine}",
        modes.join(", "),
        st.hits,
        st.misses,
        st.entries
    ))
}

/// Run C's forwarder: bpf/ceiling.bpf.c on eth0, redirecting into eth1.
fn ceiling(
    macs: Macs,
    ready: &mpsc::Sender<Result<(), String>>,
    stop: &mpsc::Receiver<()>,
) -> Result<String, String> {
    use libbpf_rs::{MapCore, MapFlags, Xdp, XdpFlags};
    use std::os::fd::AsFd;

    let mut open = libbpf_rs::ObjectBuilder::default()
        .open_memory(CEILING_OBJ)
        .map_err(|e| format!("opening the ceiling program: {e}"))?;
    for mut m in open.maps_mut() {
        if m.name().to_string_lossy().ends_with(".rodata")
            && let Some(v) = m.initial_value_mut()
            && v.len() >= 20
        {
            // struct ceiling_cfg: dst_mac, src_mac, vip, backend.
            v[0..6].copy_from_slice(&macs.sink);
            v[6..12].copy_from_slice(&macs.down);
            v[12..16].copy_from_slice(&VIP.octets());
            v[16..20].copy_from_slice(&BACKEND.octets());
        }
    }
    let obj = open
        .load()
        .map_err(|e| format!("loading the ceiling program: {e}"))?;
    let (up, down) = (ifindex("eth0")?, ifindex("eth1")?);
    let port = obj
        .maps()
        .find(|m| m.name() == std::ffi::OsStr::new("out_port"))
        .ok_or("ceiling program has no map out_port")?;
    port.update(&0u32.to_ne_bytes(), &down.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| format!("ceiling egress: {e}"))?;
    let prog = obj
        .progs()
        .find(|p| p.name() == std::ffi::OsStr::new(CEILING_PROG))
        .ok_or("ceiling object has no program")?;
    let xdp = Xdp::new(prog.as_fd());
    xdp.attach(up as i32, XdpFlags::DRV_MODE)
        .map_err(|e| format!("attaching the ceiling program to eth0 (native): {e}"))?;
    let _ = ready.send(Ok(()));
    let _ = stop.recv();
    xdp.detach(up as i32, XdpFlags::DRV_MODE)
        .map_err(|e| format!("detaching the ceiling program: {e}"))?;
    Ok("ceiling run: XDP eth0 native, DEVMAP redirect to eth1".into())
}

impl Bench {
    /// Run A: `sluice run` forwards. Returns the result and the appliance's datapath log lines.
    fn run_sluice(
        &mut self,
        options: &BenchOptions,
        stop: &AtomicBool,
    ) -> Result<(RunResult, Vec<String>), BenchError> {
        self.start_appliance(&options.sluice, options.busy_poll)?;
        eprintln!(
            "bench: run A: started sluice run in {}; waiting until it forwards",
            self.lb.name
        );
        self.wait_forwarding(RUN_A, stop)?;
        let datapath = self.datapath_lines();
        let name = if datapath.is_empty() {
            RUN_A.to_string()
        } else if !datapath.iter().any(|l| l.contains("zero-copy")) {
            "sluice (AF_XDP copy, NAT)".to_string()
        } else {
            "sluice (AF_XDP zero-copy, NAT)".to_string()
        };
        let background = background_busy()?;
        eprintln!("bench: run A: flooding for {} s", options.seconds);
        let raw = self.measure(stop, options.seconds)?;
        if !self.stop_appliance() {
            eprintln!(
                "bench: warning: sluice run did not exit cleanly; log:\n{}",
                self.log_tail()
            );
        }
        let mut r = RunResult::compute(&name, &raw);
        r.background_busy_cpus = background;
        Ok((r, datapath))
    }

    /// Run B: the kernel forwards (Sluice must be stopped); undoes its setup afterwards so
    /// the next round's run A finds the namespace as run A left it.
    fn run_kernel(&mut self, seconds: u64, stop: &AtomicBool) -> Result<RunResult, BenchError> {
        eprintln!(
            "bench: run B: sluice stopped; ip_forward=1, nftables DNAT, GRO on on {}'s eth0 \
             (so XDP_TX'd generator frames are accepted without an XDP program)",
            self.lb.name
        );
        let lb = &self.lb;
        lb.run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        lb.run(&["ethtool", "-K", "eth0", "gro", "on"])?;
        lb.run(&["nft", "add", "table", "ip", "sluicebench"])?;
        lb.run(&[
            "nft",
            "add",
            "chain",
            "ip",
            "sluicebench",
            "prerouting",
            "{ type nat hook prerouting priority dstnat; policy accept; }",
        ])?;
        lb.run(&[
            "nft",
            "add",
            "rule",
            "ip",
            "sluicebench",
            "prerouting",
            "ip",
            "daddr",
            &VIP.to_string(),
            "udp",
            "dport",
            &PORT.to_string(),
            "dnat",
            "to",
            &format!("{BACKEND}:{PORT}"),
        ])?;
        self.wait_forwarding(RUN_B, stop)?;
        let background = background_busy()?;
        eprintln!("bench: run B: flooding for {seconds} s");
        let raw = self.measure(stop, seconds)?;
        let lb = &self.lb;
        lb.run(&["nft", "delete", "table", "ip", "sluicebench"])?;
        lb.run(&["sysctl", "-qw", "net.ipv4.ip_forward=0"])?;
        lb.run(&["ethtool", "-K", "eth0", "gro", "off"])?;
        let mut r = RunResult::compute(RUN_B, &raw);
        r.background_busy_cpus = background;
        Ok(r)
    }
}

impl Bench {
    fn macs(&self) -> Result<Macs, BenchError> {
        Ok(Macs {
            up: mac_of(&self.lb, "eth0")?,
            down: mac_of(&self.lb, "eth1")?,
            gen_mac: mac_of(&self.gen_ns, "g0")?,
            sink: mac_of(&self.sink, "s0")?,
        })
    }

    /// Measures whatever `task` forwards; returns the result and the task's report line.
    fn run_task(
        &mut self,
        name: &str,
        task: LbTask,
        seconds: u64,
        stop: &AtomicBool,
    ) -> Result<(RunResult, String), BenchError> {
        let measured = self.wait_forwarding(name, stop).and_then(|()| {
            let background = background_busy()?;
            eprintln!("bench: {name}: flooding for {seconds} s");
            Ok((background, self.measure(stop, seconds)?))
        });
        let line = task.finish().map_err(|detail| BenchError::NotForwarding {
            run: name.to_string(),
            detail,
        })?;
        let (background, raw) = measured?;
        let mut r = RunResult::compute(name, &raw);
        r.background_busy_cpus = background;
        Ok((r, line))
    }

    /// Run A2: the datapath with the flow cache, in this process.
    fn run_cache(
        &mut self,
        options: &BenchOptions,
        stop: &AtomicBool,
    ) -> Result<(RunResult, String), BenchError> {
        let macs = self.macs()?;
        let text = appliance_config(&self.dir.join("api-cache.sock"), options.busy_poll);
        eprintln!(
            "bench: run A2: datapath with the flow cache in {}",
            self.lb.name
        );
        let task = LbTask::start(&self.lb, RUN_CACHE, move |ready, stop_rx| {
            let r = cached_datapath(&text, macs, &ready, &stop_rx);
            if let Err(e) = &r {
                let _ = ready.send(Err(e.clone()));
            }
            r
        })?;
        self.run_task(RUN_CACHE, task, options.seconds, stop)
    }

    /// Run C: the XDP_REDIRECT ceiling.
    fn run_ceiling(
        &mut self,
        seconds: u64,
        stop: &AtomicBool,
    ) -> Result<(RunResult, String), BenchError> {
        let macs = self.macs()?;
        eprintln!(
            "bench: run C: XDP_REDIRECT ceiling on {}'s eth0",
            self.lb.name
        );
        let task = LbTask::start(&self.lb, RUN_CEILING, move |ready, stop_rx| {
            let r = ceiling(macs, &ready, &stop_rx);
            if let Err(e) = &r {
                let _ = ready.send(Err(e.clone()));
            }
            r
        })?;
        self.run_task(RUN_CEILING, task, seconds, stop)
    }
}

/// Runs the rounds and returns the report; progress goes to stderr. Every namespace is
/// removed before it returns, also on error and when `stop` is set (Ctrl-C).
pub fn run(options: &BenchOptions, stop: Arc<AtomicBool>) -> Result<BenchReport, BenchError> {
    let options = BenchOptions {
        seconds: options.seconds.max(1),
        rounds: options.rounds.max(1),
        ..options.clone()
    };
    let mut bench = Bench::build()?;
    eprintln!(
        "bench: namespaces {} -- {} -- {} up",
        bench.gen_ns.name, bench.lb.name, bench.sink.name
    );
    let gen_mac = mac_of(&bench.gen_ns, "g0")?;
    let lb_mac = mac_of(&bench.lb, "eth0")?;
    bench.generator = Some(Generator::start(
        &bench.gen_ns,
        gen_mac,
        lb_mac,
        Arc::clone(&stop),
    )?);
    let mut rounds = Vec::new();
    let mut datapath = Vec::new();
    let mut forwarders = Vec::new();
    for round in 1..=options.rounds {
        eprintln!("bench: round {round} of {}", options.rounds);
        let (sluice, lines) = bench.run_sluice(&options, &stop)?;
        datapath = lines;
        let (cache, cache_line) = bench.run_cache(&options, &stop)?;
        let (ceiling, ceiling_line) = bench.run_ceiling(options.seconds, &stop)?;
        forwarders = vec![cache_line, ceiling_line];
        let nftables = bench.run_kernel(options.seconds, &stop)?;
        rounds.push(Round {
            sluice,
            nftables,
            cache: Some(cache),
            ceiling: Some(ceiling),
        });
    }
    drop(bench);
    let mut report = BenchReport::new(options.seconds, rounds);
    report.busy_poll = options.busy_poll;
    report
        .notes
        .extend(datapath.iter().map(|l| format!("appliance log: {l}")));
    report.notes.extend(forwarders);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let text = "cpu  100 5 50 1000 7 3 11 2 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n";
        let t = parse_proc_stat(text).expect("parses");
        assert_eq!(t.busy, 100 + 5 + 50 + 3 + 11 + 2);
        assert_eq!(t.softirq, 11);
        assert_eq!(
            parse_proc_stat("cpu0 1 2 3\n"),
            None,
            "per-CPU lines are not the total"
        );
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None, "too few fields");
    }

    #[test]
    fn pid_stat_survives_odd_command_names() {
        let text = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 5 0 1000 0 0";
        assert_eq!(parse_pid_stat(text), Some(325));
        assert_eq!(parse_pid_stat("4242 (short) S 1"), None);
        assert_eq!(parse_pid_stat("no parenthesis"), None);
    }

    /// bpf/sink.bpf.c through BPF_PROG_TEST_RUN (not attached anywhere, so only these
    /// frames move its counters): what it counts, what it drops, what it leaves the kernel.
    #[test]
    fn sink_program_counts_backend_frames_and_drops_all_udp() {
        use libbpf_rs::libbpf_sys::{XDP_DROP, XDP_PASS};

        assert!(
            netns::is_root(),
            "this test loads bpf/sink.bpf.c into the kernel: run it as root"
        );
        let mut sink = SinkProgram::load(BACKEND, PORT).expect("the sink program loads");
        let mac = [0x02, 0, 0, 0, 0, 1];
        let udp = |dst: Ipv4Addr, dport: u16| {
            crate::datapath::pktgen::udp4_frame(mac, mac, GEN_ADDR, dst, GEN_SPORT, dport, 64)
        };
        let edit = |mut f: Vec<u8>, at: usize, bytes: &[u8]| {
            f[at..at + bytes.len()].copy_from_slice(bytes);
            f
        };
        let backend = udp(BACKEND, PORT);
        // One 4-byte IP option (ihl 6): the UDP header starts 4 bytes later.
        let mut options = backend.clone();
        options.splice(34..34, [1u8, 1, 1, 0]);
        options[14] = 0x46;
        let mut arp = edit(vec![0u8; 42], 12, &[0x08, 0x06]);
        arp[14..16].copy_from_slice(&[0, 1]);
        /// One frame, the XDP action it gets, and the counters after it (cumulative).
        struct Case {
            what: &'static str,
            frame: Vec<u8>,
            action: u32,
            after: (u64, u64),
        }
        let case = |what, frame, action, after| Case {
            what,
            frame,
            action,
            after,
        };
        let cases = [
            case(
                "rewritten to the backend",
                backend.clone(),
                XDP_DROP,
                (1, 0),
            ),
            case("with an IP option", options, XDP_DROP, (2, 0)),
            case("still to the VIP", udp(VIP, PORT), XDP_DROP, (2, 1)),
            case(
                "backend, other port",
                udp(BACKEND, PORT + 1),
                XDP_DROP,
                (2, 2),
            ),
            case(
                "a later fragment to the backend",
                edit(backend.clone(), 20, &[0x00, 0x02]),
                XDP_DROP,
                (2, 3),
            ),
            case(
                "UDP header cut short",
                backend[..14 + 20 + 4].to_vec(),
                XDP_DROP,
                (2, 4),
            ),
            case(
                "TCP to the backend",
                edit(backend.clone(), 23, &[6]),
                XDP_PASS,
                (2, 4),
            ),
            case("ARP", arp, XDP_PASS, (2, 4)),
            case(
                "IPv4 header cut short",
                backend[..30].to_vec(),
                XDP_PASS,
                (2, 4),
            ),
        ];
        for c in cases {
            let got = sink.test_run(&c.frame).expect("test run");
            assert_eq!(got, c.action, "{}: XDP action (1 drop, 2 pass)", c.what);
            let (delivered, stray) = c.after;
            assert_eq!(
                sink.counts().expect("counters"),
                SinkCounts { delivered, stray },
                "{}: counters after it",
                c.what
            );
        }
    }

    #[test]
    fn per_cpu_counters_are_summed() {
        let cpus = [7u64, 0, u64::from(u32::MAX) + 5]
            .map(|n| n.to_ne_bytes().to_vec())
            .to_vec();
        assert_eq!(sum_percpu(&cpus), Some(7 + u64::from(u32::MAX) + 5));
        assert_eq!(sum_percpu(&[]), Some(0), "no CPUs, nothing counted");
        assert_eq!(
            sum_percpu(&[vec![1, 0, 0, 0, 0, 0, 0, 0], vec![1, 0, 0, 0]]),
            None,
            "a 4-byte value is not the sink's u64 counter"
        );
    }

    /// Decodes one eBPF instruction: (opcode, dst, src, off, imm).
    fn decode(i: &[u8]) -> (u8, u8, u8, i16, i32) {
        (
            i[0],
            i[1] & 0xf,
            i[1] >> 4,
            i16::from_ne_bytes([i[2], i[3]]),
            i32::from_ne_bytes([i[4], i[5], i[6], i[7]]),
        )
    }

    #[test]
    fn generator_program_stores_the_template_then_transmits() {
        let template: Vec<u8> = (0..16u8).map(|b| b.wrapping_mul(37)).collect();
        let code = restoring_generator(&template).expect("16 bytes is fine");
        let insns: Vec<_> = code.chunks_exact(8).map(decode).collect();
        // 5 setup + 2 stores x 3 slots + 2 (XDP_TX exit) + 2 (drop exit).
        assert_eq!(insns.len(), 15);
        assert_eq!(
            insns[3],
            (0x07, 4, 0, 0, 16),
            "bounds check covers the template"
        );
        let (op, dst, src, off, _) = insns[4];
        assert_eq!((op, dst, src), (0x2d, 4, 3), "if data + len > data_end");
        let target = 4 + 1 + off as usize;
        assert_eq!(
            insns[target],
            (0xb7, 0, 0, 0, 1),
            "short frames are dropped"
        );
        assert_eq!(
            insns[target - 2],
            (0xb7, 0, 0, 0, 3),
            "full frames go out (XDP_TX)"
        );
        let mut rebuilt = vec![0u8; 16];
        for k in 0..2 {
            let (lo, hi, st) = (insns[5 + 3 * k], insns[6 + 3 * k], insns[7 + 3 * k]);
            assert_eq!((lo.0, lo.1), (0x18, 5), "ld_imm64 r5");
            assert_eq!(
                st,
                (0x7b, 2, 5, (k * 8) as i16, 0),
                "*(u64 *)(data + 8k) = r5"
            );
            let v = u64::from(lo.4 as u32) | (u64::from(hi.4 as u32) << 32);
            rebuilt[k * 8..k * 8 + 8].copy_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(
            rebuilt, template,
            "the stores write back exactly the template"
        );
        assert_eq!(restoring_generator(&[0; 12]), None, "not a multiple of 8");
        assert_eq!(restoring_generator(&[]), None);
        assert!(restoring_generator(&[0; 64]).is_some());
    }

    #[test]
    fn bpf_object_is_an_elf_libbpf_can_read() {
        let code = restoring_generator(&[7u8; 64]).expect("program");
        let elf = bpf_object(&code);
        let u16_at = |o: usize| u16::from_ne_bytes([elf[o], elf[o + 1]]) as usize;
        let u32_at = |o: usize| u32::from_ne_bytes(elf[o..o + 4].try_into().expect("4")) as usize;
        let u64_at = |o: usize| u64::from_ne_bytes(elf[o..o + 8].try_into().expect("8")) as usize;
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(elf[4], 2, "64-bit");
        assert_eq!(u16_at(16), 1, "relocatable");
        assert_eq!(u16_at(18), 247, "EM_BPF");
        let (shoff, shnum, shstrndx) = (u64_at(40), u16_at(60), u16_at(62));
        assert_eq!(shnum, 6);
        let sh = |i: usize| shoff + 64 * i;
        let str_at = |table: usize, idx: usize| {
            let start = u64_at(sh(table) + 24) + idx;
            let end = start + elf[start..].iter().position(|&b| b == 0).expect("NUL");
            String::from_utf8_lossy(&elf[start..end]).into_owned()
        };
        let names: Vec<String> = (0..shnum)
            .map(|i| str_at(shstrndx, u32_at(sh(i))))
            .collect();
        assert_eq!(
            names,
            ["", "xdp", "license", ".symtab", ".strtab", ".shstrtab"]
        );
        let (off, size) = (u64_at(sh(1) + 24), u64_at(sh(1) + 32));
        assert_eq!(&elf[off..off + size], code.as_slice(), "the program text");
        assert_eq!(u64_at(sh(1) + 8), 0x6, "alloc + exec");
        let lic = u64_at(sh(2) + 24);
        assert_eq!(&elf[lic..lic + 4], b"GPL\0");
        // Symbol 1 is a global function in section 1 covering the whole program.
        let (sym, strtab) = (u64_at(sh(3) + 24) + 24, u32_at(sh(3) + 40));
        assert_eq!(strtab, 4, ".symtab links .strtab");
        assert_eq!(str_at(strtab, u32_at(sym)), GEN_PROG);
        assert_eq!(elf[sym + 4], 0x12);
        assert_eq!(u16_at(sym + 6), 1);
        assert_eq!(u64_at(sym + 16), code.len());
    }

    #[test]
    fn generator_calls_last_about_half_a_second() {
        let ms = Duration::from_millis;
        // 1 M frames in 250 ms is 4 Mpps: 2 M frames make the next half second.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(4000)), 2_000_000);
        // Near the deadline, only what fits the time left.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(100)), 400_000);
        // Never below the floor (mostly fixed cost) nor above the kernel's cap.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(0)), 65_536);
        assert_eq!(next_chunk(u32::MAX, ms(0), ms(4000)), 1 << 24);
    }

    #[test]
    fn link_stats_are_parsed() {
        let json = r#"[{"ifname":"eth0","stats64":{"rx":{"bytes":1,"packets":70,"errors":0,
            "dropped":3},"tx":{"bytes":2,"packets":9,"errors":0,"dropped":5}}}]"#;
        assert_eq!(
            parse_link_stats(json),
            Some(LinkStats {
                rx_packets: 70,
                rx_dropped: 3,
                tx_dropped: 5
            })
        );
        assert_eq!(parse_link_stats(r#"[{"ifname":"eth0"}]"#), None);
    }

    #[test]
    fn link_mac_is_parsed() {
        let json = r#"[{"ifindex":3,"ifname":"eth0","address":"02:ab:0c:00:10:ff"}]"#;
        assert_eq!(
            parse_ip_link_mac(json),
            Some([0x02, 0xab, 0x0c, 0x00, 0x10, 0xff])
        );
        assert_eq!(parse_ip_link_mac(r#"[{"address":"02:ab"}]"#), None);
        assert_eq!(parse_ip_link_mac("[]"), None);
    }

    #[test]
    fn generated_config_is_valid_and_two_arm() {
        let dir = std::env::temp_dir().join(format!("sluice-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("sluice.toml");
        std::fs::write(&path, appliance_config(&dir.join("api.sock"), true)).expect("write");
        let cfg = crate::config::load_with_env(&path, Vec::new());
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = cfg.expect("the bench config validates");
        assert_eq!(cfg.appliance.interfaces, ["eth0", "eth1"]);
        assert_eq!(cfg.vips.len(), 1);
        let v = &cfg.vips[0];
        assert_eq!(v.address, std::net::IpAddr::V4(VIP));
        assert_eq!(v.port, PORT);
        assert_eq!(v.mode, crate::config::Mode::Nat);
        assert_eq!(v.backends.len(), 1);
        assert_eq!(v.backends[0].address, std::net::IpAddr::V4(BACKEND));
        assert_eq!(cfg.api.metrics, None, "no metrics listener in the bench");
        assert!(cfg.appliance.busy_poll);
        assert!(!cfg.appliance.flow_cache, "run A is pure AF_XDP");
    }

    fn raw(delivered: u64, busy_ticks: u64, offered: u64, secs: u64) -> RawRun {
        RawRun {
            start: Sample {
                delivered: 1000,
                stray: 40,
                cpu: CpuTimes {
                    busy: 5000,
                    softirq: 700,
                },
                lb_process: Some(10),
                ..Sample::default()
            },
            end: Sample {
                delivered: 1000 + delivered,
                stray: 43,
                cpu: CpuTimes {
                    busy: 5000 + busy_ticks,
                    softirq: 700 + busy_ticks / 2,
                },
                lb_process: Some(10 + busy_ticks / 4),
                ..Sample::default()
            },
            offered,
            elapsed: Duration::from_secs(secs),
            generator_cpu: Duration::from_millis(busy_ticks * 10 / 4),
        }
    }

    #[test]
    fn rates_and_cpu_per_packet_come_from_deltas() {
        // 2 s, 4 M delivered of 10 M offered, 300 ticks = 3 s of CPU.
        let r = RunResult::compute("x", &raw(4_000_000, 300, 10_000_000, 2));
        assert_eq!(r.delivered, 4_000_000);
        assert_eq!(r.sink_stray, 3, "UDP the sink saw not rewritten, apart");
        assert!((r.offered_mpps - 5.0).abs() < 1e-9);
        assert!((r.delivered_mpps - 2.0).abs() < 1e-9);
        assert!((r.delivered_pct - 40.0).abs() < 1e-9);
        assert!(
            (r.cpu_ns_per_pkt - 750.0).abs() < 1e-9,
            "{}",
            r.cpu_ns_per_pkt
        );
        assert!((r.softirq_ns_per_pkt - 375.0).abs() < 1e-9);
        assert!((r.generator_ns_per_pkt - 187.5).abs() < 1e-9);
        assert!((r.without_generator_ns_per_pkt - 562.5).abs() < 1e-9);
        assert!((r.lb_process_ns_per_pkt.expect("lb") - 187.5).abs() < 1e-9);
        assert!((r.busy_cpus - 1.5).abs() < 1e-9);
    }

    fn one_round(sluice: RunResult, nftables: RunResult) -> BenchReport {
        BenchReport::new(
            1,
            vec![Round {
                sluice,
                nftables,
                cache: None,
                ceiling: None,
            }],
        )
    }

    #[test]
    fn rounds_report_each_side_at_its_median_round() {
        let run = |name: &str, delivered: u64| {
            RunResult::compute(name, &raw(delivered, 300, 6_000_000, 1))
        };
        let rounds = vec![
            Round {
                sluice: run("a", 1_000_000),
                nftables: run("b", 2_500_000),
                cache: None,
                ceiling: None,
            },
            Round {
                sluice: run("a", 3_000_000),
                nftables: run("b", 1_500_000),
                cache: None,
                ceiling: None,
            },
            Round {
                sluice: run("a", 2_000_000),
                nftables: run("b", 2_000_000),
                cache: None,
                ceiling: None,
            },
        ];
        let rep = BenchReport::new(1, rounds);
        assert_eq!(rep.sluice.delivered, 2_000_000);
        assert_eq!(rep.nftables.delivered, 2_000_000);
        assert!((rep.delivered_ratio - 1.0).abs() < 1e-9);
        let t = rep.table();
        assert_eq!(
            t.lines().filter(|l| l.starts_with("median: ")).count(),
            2,
            "{t}"
        );
        assert!(t.lines().any(|l| l.starts_with("3: a")), "{t}");
        // An even count takes the lower middle round of each side.
        let two = BenchReport::new(
            1,
            vec![
                Round {
                    sluice: run("a", 1_000_000),
                    nftables: run("b", 1_000_000),
                    cache: None,
                    ceiling: None,
                },
                Round {
                    sluice: run("a", 3_000_000),
                    nftables: run("b", 3_000_000),
                    cache: None,
                    ceiling: None,
                },
            ],
        );
        assert_eq!(two.sluice.delivered, 1_000_000);
    }

    #[test]
    fn the_flow_cache_is_compared_with_the_ceiling_and_nftables() {
        let run = |name: &str, delivered: u64| {
            RunResult::compute(name, &raw(delivered, 300, 9_000_000, 1))
        };
        let round = |cache: u64| Round {
            sluice: run("a", 1_000_000),
            nftables: run("b", 1_000_000),
            cache: Some(run("cache", cache)),
            ceiling: Some(run("ceiling", 5_000_000)),
        };
        let met = BenchReport::new(1, vec![round(4_500_000)]);
        assert!((met.cache_vs_ceiling - 0.9).abs() < 1e-9);
        assert!((met.cache_vs_nftables - 4.5).abs() < 1e-9);
        assert!(met.cache_targets_met);
        let t = met.table();
        assert!(t.lines().any(|l| l.starts_with("cache ")), "{t}");
        assert!(t.lines().any(|l| l.starts_with("ceiling ")), "{t}");
        assert!(t.contains("x0.90 the XDP_REDIRECT ceiling"), "{t}");
        // 3.9 Mpps: 0.78 of the ceiling and 3.9x nftables, both short.
        let short = BenchReport::new(1, vec![round(3_900_000)]);
        assert!(!short.cache_targets_met);
        assert!(short.table().contains("NOT met"));
        // Without the cache runs the report has no such line.
        let old = one_round(run("a", 1), run("b", 1));
        assert!(old.cache.is_none() && !old.table().contains("flow cache:"));
    }

    #[test]
    fn nothing_delivered_is_not_a_division_by_zero() {
        let r = RunResult::compute("x", &raw(0, 100, 1_000_000, 1));
        assert_eq!(r.delivered_mpps, 0.0);
        assert!(r.cpu_ns_per_pkt.is_infinite());
        let report = one_round(r.clone(), r);
        assert!(report.delivered_ratio.is_nan());
        assert!(report.table().contains("delivered rate x"));
    }

    #[test]
    fn report_table_and_json_carry_both_rows_and_the_ratio() {
        let a = RunResult::compute("sluice", &raw(3_000_000, 300, 6_000_000, 1));
        let b = RunResult::compute("nft", &raw(2_000_000, 300, 6_000_000, 1));
        let rep = one_round(a, b);
        assert!((rep.delivered_ratio - 1.5).abs() < 1e-9);
        assert!(rep.target_met);
        assert!(rep.table().contains("rate): met"));
        let slower = one_round(rep.nftables.clone(), rep.sluice.clone());
        assert!(!slower.target_met);
        assert!(slower.table().contains("NOT met"));
        assert!((rep.cpu_per_pkt_ratio - 2.0 / 3.0).abs() < 1e-9);
        let t = rep.table();
        assert!(t.contains("x1.50"), "{t}");
        assert!(
            t.contains("delivered 3000000, UDP at the sink not rewritten 3"),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("sluice ") && l.contains("3.000")),
            "{t}"
        );
        assert!(
            t.lines()
                .any(|l| l.starts_with("nft ") && l.contains("2.000")),
            "{t}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&rep).expect("serialises"))
                .expect("valid json");
        assert_eq!(json["sluice"]["delivered"], 3_000_000);
        assert_eq!(json["nftables"]["delivered"], 2_000_000);
        assert_eq!(json["frame_len"], 64);
    }
}
