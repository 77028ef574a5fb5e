//! The bench's namespaces and what it does to them: gen -- lb -- sink on two veth pairs,
//! the sink program on s0, the generator thread in gen, `sluice run` in lb, and the samples
//! of every counter a run compares before and after its flood.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::netns::{self, LabError, Netns, try_veth_mq};

use crate::appliance::{self, Appliance};
use crate::counters::{RawRun, Sample, cpu_times, link_stats, mac_of, mac_text};
use crate::generator::{Flood, FlowSpace, GenCmd, Generator};
use crate::runs::sized_config;
use crate::sink::{SinkCounts, SinkProgram};
use crate::{BACKEND, BenchError, GEN_ADDR, LB_DOWN_ADDR, LB_UPLINK, PORT};

/// Frames per burst of the many-flows warm-up (half the appliance's ring).
const WARM_BURST: u32 = 1024;
/// The longest warm-up.
const WARM_LIMIT: Duration = Duration::from_secs(90);

/// What a warm-up reached.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WarmUp {
    /// Connection-table entries at the end.
    pub(crate) entries: u64,
    /// Established UDP entries (the backend answered), the most seen.
    pub(crate) established: u64,
    /// Flow-cache entries after the last pass (None: the cache is off).
    pub(crate) cached: Option<u64>,
    pub(crate) passes: u32,
    pub(crate) took: Duration,
}

/// MACs the in-namespace forwarders need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Macs {
    /// lb's eth1, towards the sink.
    pub(crate) down: [u8; 6],
    /// The sink's s0.
    pub(crate) sink: [u8; 6],
}

/// The namespaces, files and the appliance process of one benchmark. Dropping it stops the
/// appliance, then the namespaces go (each killing whatever is left inside).
pub(crate) struct Bench {
    pub(crate) dir: PathBuf,
    appliance: Option<Appliance>,
    /// One per queue (the first also sends the probe bursts).
    pub(crate) generators: Vec<Generator>,
    /// Queues of every veth (and so the appliance's workers).
    pub(crate) queues: u32,
    /// The flows every generator cycles through.
    pub(crate) space: FlowSpace,
    /// Flood mode as by default in the appliance's config (false: `enabled = false`).
    pub(crate) flood: bool,
    // Field order is drop order: the generator thread leaves gen before gen is deleted, and
    // the sink program leaves s0 before the sink namespace is deleted.
    sink_prog: Option<SinkProgram>,
    pub(crate) gen_ns: Netns,
    pub(crate) lb: Netns,
    pub(crate) sink: Netns,
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.stop_appliance();
        self.generators.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Bench {
    /// The namespaces, with `queues` rx/tx queues on every veth.
    pub(crate) fn build(queues: u32, space: FlowSpace) -> Result<Bench, BenchError> {
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
            generators: Vec::new(),
            queues: queues.max(1),
            space,
            flood: true,
            sink_prog: None,
            gen_ns: ns("gen")?,
            lb: ns("lb")?,
            sink: ns("sink")?,
        };
        bench.wire()?;
        bench.sink_prog = Some(bench.attach_sink()?);
        Ok(bench)
    }

    fn wire(&self) -> Result<(), BenchError> {
        let (g, lb, s) = (&self.gen_ns, &self.lb, &self.sink);
        try_veth_mq(g, "g0", lb, "eth0", self.queues)?;
        try_veth_mq(lb, "eth1", s, "s0", self.queues)?;
        g.try_run(&["ip", "addr", "add", &format!("{GEN_ADDR}/24"), "dev", "g0"])?;
        lb.try_run(&["ip", "addr", "add", LB_UPLINK, "dev", "eth0"])?;
        lb.try_run(&[
            "ip",
            "addr",
            "add",
            &format!("{LB_DOWN_ADDR}/24"),
            "dev",
            "eth1",
        ])?;
        s.try_run(&["ip", "addr", "add", &format!("{BACKEND}/24"), "dev", "s0"])?;
        // A permanent neighbour: no run waits for ARP or for a neighbour refresh.
        let sink_mac = mac_text(mac_of(s, "s0")?);
        lb.try_run(&[
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
        // The generator's many-flows sources live on a client network behind gen.
        lb.try_run(&[
            "ip",
            "route",
            "add",
            crate::generator::CLIENT_NET,
            "via",
            &GEN_ADDR.to_string(),
            "dev",
            "eth0",
        ])?;
        lb.try_run(&["sysctl", "-qw", "net.ipv4.ip_forward=0"])?;
        crate::answer::route_answers(s, &mac_text(mac_of(lb, "eth1")?))?;
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
        counts_of(self.sink_prog.as_ref())
    }

    fn sample(&mut self) -> Result<Sample, BenchError> {
        let lb_process = match &self.appliance {
            Some(a) => Some(crate::idle::process_ticks(a.pid())?),
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
        self.generators
            .first()
            .ok_or_else(|| BenchError::Generator("not started".into()))
    }

    /// Starts one generator per queue, each pinned to its own CPU when there are several.
    pub(crate) fn start_generators(&mut self, stop: &Arc<AtomicBool>) -> Result<(), BenchError> {
        let gen_mac = mac_of(&self.gen_ns, "g0")?;
        let lb_mac = mac_of(&self.lb, "eth0")?;
        for k in 0..self.queues {
            self.generators.push(Generator::start(
                &self.gen_ns,
                gen_mac,
                lb_mac,
                Arc::clone(stop),
                k as u16,
                self.queues > 1,
                self.space,
            )?);
        }
        Ok(())
    }

    /// Sends small bursts until one reaches the sink.
    pub(crate) fn wait_forwarding(
        &mut self,
        run: &str,
        stop: &AtomicBool,
    ) -> Result<(), BenchError> {
        let generator = self
            .generators
            .first()
            .ok_or_else(|| BenchError::Generator("not started".into()))?;
        let sink = self.sink_prog.as_ref();
        let delivered = || counts_of(sink).map(|c| c.delivered);
        appliance::wait_ready(run, self.appliance.as_mut(), &self.dir, stop, || {
            let before = delivered()?;
            generator.call(GenCmd::Burst(64))?;
            std::thread::sleep(Duration::from_millis(100));
            Ok((delivered()? <= before).then(|| "no probe frame reached the sink".to_string()))
        })
    }

    /// Passes of one frame per flow (in bursts of [`WARM_BURST`], a pause between them so
    /// that the appliance's ring takes them), each followed by one answer per flow from the
    /// backend ([`crate::answer`]), until the connection table holds every flow established,
    /// so the timed window measures forwarding established flows, not the engine deciding
    /// flows it has not seen (and, with the cache, not flows the cache may not take). A last
    /// pass arms the flow cache. Gives up after three passes without growth or
    /// [`WARM_LIMIT`].
    pub(crate) fn warm_up(&self, stop: &AtomicBool) -> Result<WarmUp, BenchError> {
        let generator = self.generator()?;
        let forward = || -> Result<(), BenchError> {
            let mut sent = 0;
            while sent < self.space.flows {
                let n = WARM_BURST.min(self.space.flows - sent);
                generator.call(GenCmd::Burst(n))?;
                sent += n;
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(())
        };
        let t0 = Instant::now();
        let want = u64::from(self.space.flows);
        let mut seen = WarmUp::default();
        let mut stale = 0u32;
        while !stop.load(Ordering::Relaxed) && t0.elapsed() < WARM_LIMIT && stale < 3 {
            forward()?;
            crate::answer::answer_flows(&self.sink, self.space)?;
            seen.passes += 1;
            // The workers' counters reach the API about once a second.
            std::thread::sleep(Duration::from_millis(1100));
            let status = crate::runs::fetch_status(&self.api_socket())?;
            let (entries, established) =
                (status.conntrack_entries, status.conntrack.established_udp);
            stale = if established > seen.established {
                0
            } else {
                stale + 1
            };
            seen.entries = entries;
            seen.established = seen.established.max(established);
            if entries >= want && established >= want {
                break;
            }
        }
        forward()?;
        std::thread::sleep(Duration::from_millis(1100));
        seen.cached = crate::runs::fetch_status(&self.api_socket())?
            .flow_cache
            .map(|c| c.entries);
        seen.took = t0.elapsed();
        Ok(seen)
    }

    fn log_path(&self) -> PathBuf {
        appliance::log_path(&self.dir)
    }

    /// The API socket of the `sluice run` the bench starts.
    pub(crate) fn api_socket(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    /// The appliance's "datapath interface up" log lines (XDP attach mode, AF_XDP bind mode).
    pub(crate) fn datapath_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("datapath interface up"))
            .map(|l| l.trim().to_string())
            .collect()
    }

    pub(crate) fn log_tail(&self) -> String {
        appliance::log_tail(&self.dir)
    }

    /// Starts `sluice run` in lb with the bench config; its output goes to the log.
    pub(crate) fn start_appliance(
        &mut self,
        sluice: &Path,
        busy_poll: bool,
        flow_cache: bool,
    ) -> Result<(), BenchError> {
        let capacity = (2 * u64::from(self.space.flows))
            .next_power_of_two()
            .max(65_536);
        let config = sized_config(
            &self.api_socket(),
            busy_poll,
            flow_cache,
            self.flood,
            capacity,
        );
        self.appliance = Some(Appliance::start(&self.lb, sluice, &self.dir, &config)?);
        Ok(())
    }

    /// The running appliance's process id.
    pub(crate) fn appliance_pid(&self) -> Option<u32> {
        self.appliance.as_ref().map(Appliance::pid)
    }

    /// Stops the appliance ([`Appliance::stop`]); whether it exited cleanly.
    pub(crate) fn stop_appliance(&mut self) -> bool {
        self.appliance.take().is_some_and(Appliance::stop)
    }

    /// One measured run: counters, flood, drain, counters.
    pub(crate) fn measure(
        &mut self,
        stop: &AtomicBool,
        seconds: u64,
    ) -> Result<RawRun, BenchError> {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        let start = self.sample()?;
        self.generator()?;
        for g in &self.generators {
            g.ask(GenCmd::Flood(Duration::from_secs(seconds)))?;
        }
        let mut flood = Flood {
            offered: 0,
            elapsed: Duration::ZERO,
            cpu: Duration::ZERO,
        };
        for g in &self.generators {
            let f = g.answer().map_err(|e| match e {
                BenchError::Generator(m) if m == "interrupted" => BenchError::Interrupted,
                e => e,
            })?;
            flood.offered += f.offered;
            flood.elapsed = flood.elapsed.max(f.elapsed);
            flood.cpu += f.cpu;
        }
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

impl Bench {
    /// The MACs the in-namespace forwarders write into frames.
    pub(crate) fn macs(&self) -> Result<Macs, BenchError> {
        Ok(Macs {
            down: mac_of(&self.lb, "eth1")?,
            sink: mac_of(&self.sink, "s0")?,
        })
    }
}

/// The sink program's counters.
fn counts_of(sink: Option<&SinkProgram>) -> Result<SinkCounts, BenchError> {
    let counter = |detail: String| BenchError::Counter {
        what: "the sink's XDP counters".into(),
        detail,
    };
    sink.ok_or_else(|| counter("the sink program is not attached".into()))?
        .counts()
        .map_err(counter)
}
