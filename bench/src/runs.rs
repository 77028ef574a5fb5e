//! The bench's runs, each measured the same way on the same namespaces: A, `sluice run`
//! (pure AF_XDP); A2, `sluice run` with the XDP flow cache; C, the XDP_REDIRECT ceiling;
//! B, the kernel's forwarding with an nftables DNAT rule.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;

use lab::netns::Netns;

use crate::counters::background_busy;
use crate::report::RunResult;
use crate::topology::Bench;
use crate::{BACKEND, BenchError, BenchOptions, PORT, READY_TIMEOUT, VIP};

/// Names of the sides.
const RUN_A: &str = "sluice (AF_XDP, NAT)";
const RUN_B: &str = "kernel + nftables DNAT";
const RUN_CACHE: &str = "sluice + XDP flow cache (NAT)";
const RUN_CEILING: &str = "XDP_REDIRECT ceiling";
const RUN_CEILING_LOOKUP: &str = "XDP_REDIRECT ceiling + LRU hash lookup";

/// The `sluice run` configuration of runs A and A2: one NAT VIP, two-arm on eth0 (uplink)
/// and eth1, the XDP flow cache on (A2) or off (A: pure AF_XDP, whatever the default),
/// flood mode as by default (`flood`) or off (`[flood] enabled = false`: the many-flows
/// runs, which measure the engine and the cache, not the flood defence).
pub fn appliance_config(
    api_socket: &Path,
    busy_poll: bool,
    flow_cache: bool,
    flood: bool,
) -> String {
    sized_config(api_socket, busy_poll, flow_cache, flood, 65_536)
}

/// [`appliance_config`] with a connection table of `capacity` entries (the many-flows runs:
/// twice the flows, so that the table is never what they measure).
pub(crate) fn sized_config(
    api_socket: &Path,
    busy_poll: bool,
    flow_cache: bool,
    flood: bool,
    capacity: u64,
) -> String {
    let flood = if flood {
        String::new()
    } else {
        "[flood]\nenabled = false\n\n".to_string()
    };
    format!(
        "[appliance]\nname = \"bench-lb\"\ninterfaces = [\"eth0\", \"eth1\"]\nxdp_mode = \"auto\"\n\
         busy_poll = {busy_poll}\nflow_cache = {flow_cache}\n\
         umem_frames = 4096\nring_size = 2048\nconntrack_capacity = {capacity}\n\n\
         {flood}[api]\nsocket = \"{}\"\nmetrics = \"\"\n\n\
         [[vip]]\nname = \"bench\"\naddress = \"{VIP}\"\nport = {PORT}\nprotocol = \"udp\"\n\
         scheduler = \"maglev\"\nmode = \"nat\"\n\
         [[vip.backend]]\naddress = \"{BACKEND}\"\nport = {PORT}\n",
        api_socket.display()
    )
}

/// What one `sluice run` run measured and what it said about itself.
pub(crate) struct ApplianceRun {
    pub(crate) result: RunResult,
    /// The appliance's "datapath interface up" log lines (XDP and AF_XDP bind modes).
    pub(crate) datapath: Vec<String>,
    /// The flow cache's counters at the end of the run, from the API (A2 only).
    pub(crate) cache: Option<String>,
    /// The appliance's status at the end of the run, from the API.
    pub(crate) status: api::Status,
    /// How much the process's resident memory grew over the flood, bytes.
    pub(crate) rss_growth: u64,
    /// The process's BPF maps, as the kernel accounts them.
    pub(crate) maps: Vec<crate::memory::MapMemory>,
}

impl Bench {
    /// Run A (`flow_cache` off) or A2 (on): `sluice run` forwards.
    pub(crate) fn run_sluice(
        &mut self,
        options: &BenchOptions,
        flow_cache: bool,
        stop: &AtomicBool,
    ) -> Result<ApplianceRun, BenchError> {
        let run = if flow_cache { "A2" } else { "A" };
        self.start_appliance(&options.sluice, options.busy_poll, flow_cache)?;
        eprintln!(
            "bench: run {run}: started sluice run in {}{}; waiting until it forwards",
            self.lb.name,
            if flow_cache {
                " with the flow cache"
            } else {
                ""
            }
        );
        let label = self.run_label(flow_cache, options.capture);
        let label = label.as_str();
        self.wait_forwarding(label, stop)?;
        let warm = self.warm_up(stop)?;
        let cached = warm
            .cached
            .map_or_else(String::new, |c| format!(", {c} flow-cache entries"));
        eprintln!(
            "bench: run {run}: warm-up: {} of {} flows in the connection table, {} established \
             (answered by the backend){cached}, after {} pass(es), {:.1} s",
            warm.entries,
            self.space.flows,
            warm.established,
            warm.passes,
            warm.took.as_secs_f64()
        );
        let datapath = self.datapath_lines();
        let name = if flow_cache || datapath.is_empty() {
            label.to_string()
        } else if !datapath.iter().any(|l| l.contains("zero-copy")) {
            "sluice (AF_XDP copy, NAT)".to_string()
        } else {
            "sluice (AF_XDP zero-copy, NAT)".to_string()
        };
        let name = if self.queues > 1 {
            format!("{name}, {} queues", self.queues)
        } else {
            name
        };
        let background = background_busy()?;
        let pid = self.appliance_pid();
        let rss0 = pid.and_then(crate::memory::rss_bytes);
        eprintln!("bench: run {run}: flooding for {} s", options.seconds);
        let raw = self.measure_run(options, run, stop)?;
        let rss1 = pid.and_then(crate::memory::rss_bytes);
        let maps = pid.map(crate::memory::bpf_maps).unwrap_or_default();
        let status = fetch_status(&self.api_socket())?;
        let cache = (flow_cache || self.queues > 1).then(|| status_line(&status, &name));
        if !self.stop_appliance() {
            eprintln!(
                "bench: warning: sluice run did not exit cleanly; log:\n{}",
                self.log_tail()
            );
        }
        let mut result = RunResult::compute(&name, &raw);
        result.background_busy_cpus = background;
        Ok(ApplianceRun {
            result,
            datapath,
            cache,
            status,
            rss_growth: rss0.zip(rss1).map_or(0, |(a, b)| b.saturating_sub(a)),
            maps,
        })
    }

    /// Run B: the kernel forwards (Sluice must be stopped); undoes its setup afterwards so
    /// the next round's run A finds the namespace as run A left it.
    pub(crate) fn run_kernel(
        &mut self,
        seconds: u64,
        stop: &AtomicBool,
    ) -> Result<RunResult, BenchError> {
        eprintln!(
            "bench: run B: sluice stopped; ip_forward=1, nftables DNAT, GRO on on {}'s eth0 \
             (so XDP_TX'd generator frames are accepted without an XDP program)",
            self.lb.name
        );
        let lb = &self.lb;
        lb.try_run(&["sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
        lb.try_run(&["ethtool", "-K", "eth0", "gro", "on"])?;
        lb.try_run(&["nft", "add", "table", "ip", "sluicebench"])?;
        lb.try_run(&[
            "nft",
            "add",
            "chain",
            "ip",
            "sluicebench",
            "prerouting",
            "{ type nat hook prerouting priority dstnat; policy accept; }",
        ])?;
        lb.try_run(&[
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
        lb.try_run(&["nft", "delete", "table", "ip", "sluicebench"])?;
        lb.try_run(&["sysctl", "-qw", "net.ipv4.ip_forward=0"])?;
        lb.try_run(&["ethtool", "-K", "eth0", "gro", "off"])?;
        let mut r = RunResult::compute(RUN_B, &raw);
        r.background_busy_cpus = background;
        Ok(r)
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

    /// Run C: the XDP_REDIRECT ceiling; run CL with `lookup` (one LRU hash lookup a frame).
    pub(crate) fn run_ceiling(
        &mut self,
        seconds: u64,
        lookup: Option<crate::ceiling::Lookup>,
        stop: &AtomicBool,
    ) -> Result<(RunResult, String), BenchError> {
        let macs = self.macs()?;
        let (run, label) = match lookup {
            None => ("C", RUN_CEILING),
            Some(_) => ("CL", RUN_CEILING_LOOKUP),
        };
        eprintln!("bench: run {run}: {label} on {}'s eth0", self.lb.name);
        let task = LbTask::start(&self.lb, label, move |ready, stop_rx| {
            let r = crate::ceiling::ceiling(macs, lookup, &ready, &stop_rx);
            if let Err(e) = &r {
                let _ = ready.send(Err(e.clone()));
            }
            r
        })?;
        self.run_task(label, task, seconds, stop)
    }
}

/// The appliance's status document from its API.
pub(crate) fn fetch_status(api_socket: &Path) -> Result<api::Status, BenchError> {
    api_call(api_socket, "status", |c| async move { c.status().await })
}

/// The appliance's metrics (Prometheus text) from its API.
pub(crate) fn fetch_metrics(api_socket: &Path) -> Result<String, BenchError> {
    api_call(api_socket, "metrics", |c| async move { c.metrics().await })
}

/// One call of the appliance's API at `api_socket` (`what` names it in an error).
fn api_call<T, F, Fut>(api_socket: &Path, what: &str, call: F) -> Result<T, BenchError>
where
    F: FnOnce(api::Client) -> Fut,
    Fut: std::future::Future<Output = Result<T, api::ClientError>>,
{
    let failed = |detail: String| BenchError::Counter {
        what: format!("the appliance's {what} from {}", api_socket.display()),
        detail,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let client = api::Client::new(api::Endpoint::Unix(api_socket.to_path_buf()));
    rt.block_on(call(client)).map_err(|e| failed(e.to_string()))
}

/// The sum of the samples of `name` in Prometheus `text` whose labels contain `only`
/// (every sample for `""`).
pub(crate) fn metric_sum(text: &str, name: &str, only: &str) -> u64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            labels
                .contains(only)
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum::<f64>() as u64
}

/// What the appliance says about run `name`: XDP modes, the flow cache's counters (when
/// on) and the frames each worker took.
fn status_line(status: &api::Status, name: &str) -> String {
    let modes: Vec<String> = status
        .interfaces
        .iter()
        .map(|i| format!("{} {}", i.name, i.xdp_mode))
        .collect();
    let cache = status.flow_cache.map_or_else(String::new, |c| {
        format!(
            "cache hits {}, misses {}, entries {}; ",
            c.hits, c.misses, c.entries
        )
    });
    let workers: Vec<String> = status
        .workers
        .iter()
        .map(|w| format!("{} {}", w.id, w.rx_packets))
        .collect();
    format!(
        "{name}: XDP {}; {cache}frames the engine saw {} (per worker: {})",
        modes.join(", "),
        status.totals.rx_packets,
        workers.join(", ")
    )
}

/// Something that forwards from a thread inside lb's namespace until told to stop.
pub(crate) struct LbTask {
    stop: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<Result<String, String>>,
}

/// A `sluice capture` running beside a measurement (`--capture`).
pub(crate) struct RunningCapture(std::process::Child);

impl Bench {
    /// What the report calls the run.
    fn run_label(&self, flow_cache: bool, capture: bool) -> String {
        let label = match (flow_cache, self.flood) {
            (true, true) => RUN_CACHE.to_string(),
            (true, false) => format!("{RUN_CACHE}, flood mode off"),
            (false, true) => RUN_A.to_string(),
            (false, false) => format!("{RUN_A}, flood mode off"),
        };
        if !self.flood && capture {
            format!("{label}, a capture running")
        } else {
            label
        }
    }

    /// [`Bench::measure`], with a capture running through it in runs A and A2 with
    /// `--capture`.
    fn measure_run(
        &mut self,
        options: &BenchOptions,
        run: &str,
        stop: &AtomicBool,
    ) -> Result<crate::counters::RawRun, BenchError> {
        let capture = (!self.flood && options.capture)
            .then(|| self.start_capture(options))
            .transpose()?;
        let raw = self.measure(stop, options.seconds);
        let captured = capture.map(|c| self.end_capture(c));
        let raw = raw?;
        if let Some(c) = captured {
            eprintln!("bench: run {run}: {}", c?);
        }
        Ok(raw)
    }

    /// Starts `sluice capture` of [`crate::CAPTURE_ENDPOINT`] for the measurement and a
    /// second more, and gives it half a second to arm.
    fn start_capture(&self, options: &BenchOptions) -> Result<RunningCapture, BenchError> {
        let child = std::process::Command::new(&options.sluice)
            .arg("capture")
            .arg("--socket")
            .arg(self.api_socket())
            .args(["--endpoint", crate::CAPTURE_ENDPOINT, "-c", "10000", "-w"])
            .arg("/dev/null")
            .arg("--duration")
            .arg(format!("{}s", options.seconds + 1))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| BenchError::NotForwarding {
                run: "A2 with a capture".into(),
                detail: format!("cannot start sluice capture: {e}"),
            })?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        Ok(RunningCapture(child))
    }

    /// Waits for the capture to end by itself: what it said, or why it failed (a capture
    /// that ended early did not cover the measurement).
    fn end_capture(&self, c: RunningCapture) -> Result<String, BenchError> {
        let out =
            c.0.wait_with_output()
                .map_err(|e| BenchError::NotForwarding {
                    run: "A2 with a capture".into(),
                    detail: format!("sluice capture: {e}"),
                })?;
        let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if !out.status.success() {
            return Err(BenchError::NotForwarding {
                run: "A2 with a capture".into(),
                detail: format!("sluice capture failed: {said}"),
            });
        }
        Ok(format!("a capture ran through it: {said}"))
    }
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

#[cfg(test)]
mod tests {
    use super::metric_sum;

    #[test]
    fn metric_sums_add_the_samples_whose_labels_match() {
        let text = "# HELP sluice_sync_records_total Flow records\n\
                    sluice_sync_records_total{direction=\"sent\",kind=\"established\"} 10\n\
                    sluice_sync_records_total{direction=\"sent\",kind=\"ended\"} 7\n\
                    sluice_sync_records_total{direction=\"received\",kind=\"ended\"} 99\n\
                    sluice_sync_sent_bytes_total 1234\n\
                    sluice_sync_sent_bytes_totally 5\n";
        let sum = |n, o| metric_sum(text, n, o);
        assert_eq!(sum("sluice_sync_records_total", "direction=\"sent\""), 17);
        assert_eq!(sum("sluice_sync_records_total", ""), 116);
        assert_eq!(sum("sluice_sync_sent_bytes_total", ""), 1234);
        assert_eq!(sum("sluice_sync_left_out_total", ""), 0);
    }
}
