//! `sluice bench --cps`: the connection-rate bench. Short TCP connections (connect, a small
//! HTTP GET, the response, close) through a NAT VIP and a DR VIP of `sluice run`, against
//! the kernel on the same namespaces, with the same client ([`crate::client`]) and the same
//! backend (Debian's nginx), side by side in one run:
//!
//! ```text
//!   cl ── c0 ═════ eth0 ── lb ── eth1 ═════ b0 ── be (nginx on :80, 192.0.2.21 on lo)
//!  10.81.1.2      10.81.1.1      10.81.2.1      10.81.2.2
//!    └─ d0 10.81.3.2 ═══════════════════════════ d1 10.81.3.1 ┘  (the direct link)
//! ```
//! Every new TCP flow passes through the appliance's engine (the handshake never hits the
//! flow cache), so this is the engine's figure. The runs: "direct" (client to nginx over
//! the direct link, nothing in between: what client and backend manage on this machine, the
//! figure every other run should stay under), the kernel with an nftables DNAT rule (the NAT
//! VIP's peer), the kernel routing the DR VIP to the backend that holds it (the DR VIP's
//! peer: the same frames on the wire as DR, only the forwarder differs), and Sluice with
//! both VIPs. In every run the backend's replies come back through lb (its default route),
//! as two-arm NAT needs; DR's replies are forwarded by lb's kernel, for Sluice and the
//! kernel alike. Each round alternates the order of the runs.

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lab::netns::{self, LabError, Netns, try_veth_mq};

use crate::BenchError;
use crate::appliance::{self, Appliance};
use crate::client::{ClientOptions, ClientResult};
use crate::counters::{cpu_times, mac_of, mac_text};
use crate::cps_report::{CpsReport, CpsRun, FloodSeen, RunKind, SyncSeen};
use crate::idle::process_ticks;

/// The NAT VIP (TCP port 80).
pub const CPS_NAT_VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);
/// The DR VIP (TCP port 80), also on the backend's loopback.
pub const CPS_DR_VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 21);
/// The backend, behind lb.
pub const CPS_BACKEND: Ipv4Addr = Ipv4Addr::new(10, 81, 2, 2);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 81, 1, 2);
/// The backend's end of the direct link, and the client's.
const BACKEND_DIRECT: Ipv4Addr = Ipv4Addr::new(10, 81, 3, 1);
const CLIENT_DIRECT: Ipv4Addr = Ipv4Addr::new(10, 81, 3, 2);
const HTTP: u16 = 80;
/// The `--sync` runs' `[sync] listen` (lb, on the backends' link) and their one peer: a
/// socket in be that counts what it receives. A counting socket, not a second appliance:
/// what is measured is what sync costs the appliance that sends.
pub const SYNC_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 81, 2, 1)), 7947);
/// See [`SYNC_LISTEN`].
pub const SYNC_PEER: SocketAddr = SocketAddr::new(IpAddr::V4(CPS_BACKEND), 7947);

/// What `sluice bench --cps` measures.
#[derive(Debug, Clone)]
pub struct CpsOptions {
    /// Client seconds per run.
    pub seconds: u64,
    /// Rounds; the report gives each run's medians.
    pub rounds: usize,
    /// The `sluice` binary.
    pub sluice: PathBuf,
    /// Connections in flight.
    pub concurrency: usize,
    /// Client threads.
    pub threads: usize,
    /// Queues on every veth (the appliance runs one worker per queue).
    pub queues: u32,
    /// Run the appliance with `busy_poll = true`.
    pub busy_poll: bool,
    /// Also run Sluice with `[flood] enabled = false`, next to the default run in each
    /// round: what flood mode's shedding costs the one busy client address.
    pub flood_off: bool,
    /// Also run Sluice with `syn_proxy = "always"` on the NAT VIP, next to the default run
    /// in each round: what the SYN proxy's cookie handshake costs a connection.
    pub syn_proxy: bool,
    /// Also run Sluice with `[sync]` to one peer, next to the default run in each round:
    /// what connection sync costs a connection, and the bytes it sends for one.
    pub sync: bool,
    /// Also run this other `sluice` binary (an older build) with the default settings in
    /// each round: before and after in one invocation.
    pub baseline: Option<PathBuf>,
}

/// How a Sluice run of the connection-rate bench is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Flood mode on (the default); off adds `[flood] enabled = false`.
    pub flood: bool,
    /// The NAT VIP has `syn_proxy = "always"`.
    pub syn_proxy: bool,
    /// `[sync]` with one peer: a counting socket in be ([`SYNC_PEER`]).
    pub sync: bool,
}

impl Variant {
    /// The appliance's defaults.
    pub const DEFAULT: Variant = Variant {
        flood: true,
        syn_proxy: false,
        sync: false,
    };
}

/// The `sluice run` configuration of the connection-rate bench: both VIPs on the one
/// backend, two-arm on eth0 and eth1, no health check (nginx is up before the appliance),
/// as `variant` says.
pub fn cps_config(api_socket: &Path, busy_poll: bool, variant: Variant) -> String {
    let vip = |name: &str, addr: Ipv4Addr, mode: &str| {
        let proxy = if variant.syn_proxy && mode == "nat" {
            "syn_proxy = \"always\"\n"
        } else {
            ""
        };
        format!(
            "[[vip]]\nname = \"{name}\"\naddress = \"{addr}\"\nport = {HTTP}\nprotocol = \"tcp\"\n\
             scheduler = \"maglev\"\nmode = \"{mode}\"\n{proxy}\
             [[vip.backend]]\naddress = \"{CPS_BACKEND}\"\nport = {HTTP}\n\n"
        )
    };
    let flood = variant.flood;
    // The peer never answers the catch-up request: the appliance waits a second for it.
    let sync = if variant.sync {
        format!(
            "[sync]\nlisten = \"{SYNC_LISTEN}\"\npeers = [\"{SYNC_PEER}\"]\nkey_file = \"{}\"\n\
             catch_up_timeout = \"1s\"\n\n",
            sync_key_path(api_socket).display()
        )
    } else {
        String::new()
    };
    format!(
        "[appliance]\nname = \"bench-cps\"\ninterfaces = [\"eth0\", \"eth1\"]\nxdp_mode = \"auto\"\n\
         busy_poll = {busy_poll}\n\n[api]\nsocket = \"{}\"\nmetrics = \"\"\n\n{}{sync}{}{}",
        api_socket.display(),
        if flood {
            ""
        } else {
            "[flood]\nenabled = false\n\n"
        },
        vip("nat", CPS_NAT_VIP, "nat"),
        vip("dr", CPS_DR_VIP, "dr"),
    )
}

/// The `--sync` runs' key file, beside the API socket.
fn sync_key_path(api_socket: &Path) -> PathBuf {
    api_socket.with_file_name("sync.key")
}

/// The namespaces, nginx and the appliance of one connection-rate bench. Dropping it stops
/// the appliance; the namespaces go after it, killing nginx.
pub(crate) struct CpsBench {
    pub(crate) dir: PathBuf,
    appliance: Option<Appliance>,
    nginx: Option<Child>,
    pub(crate) cl: Netns,
    pub(crate) lb: Netns,
    pub(crate) be: Netns,
    /// The `--sync` runs' peer, while they run.
    sync_peer: Option<SyncSink>,
}

/// A UDP socket in be on [`SYNC_PEER`] that counts the datagrams and bytes it receives
/// until dropped.
struct SyncSink {
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicU64; 2]>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SyncSink {
    fn start(be: &Netns) -> Result<SyncSink, BenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
        let (tx, rx) = std::sync::mpsc::channel();
        let (st, c) = (Arc::clone(&stop), Arc::clone(&counts));
        let thread = be.in_thread(move || {
            let s = match UdpSocket::bind(SYNC_PEER) {
                Ok(s) => s,
                Err(e) => return drop(tx.send(Err(e.to_string()))),
            };
            // Without its timeout the loop would never see `stop`: then it does not run.
            let timeout = s.set_read_timeout(Some(Duration::from_millis(100)));
            let failed = timeout.is_err();
            let _ = tx.send(timeout.map_err(|e| e.to_string()));
            if failed {
                return;
            }
            let mut buf = vec![0u8; 65536];
            while !st.load(Ordering::Relaxed) {
                if let Ok(n) = s.recv(&mut buf) {
                    c[0].fetch_add(1, Ordering::Relaxed);
                    c[1].fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        })?;
        let sink = SyncSink {
            stop,
            counts,
            thread: Some(thread),
        };
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => Ok(sink),
            Ok(Err(e)) => Err(lab_err(format!("bind the sync peer {SYNC_PEER} in be"), e)),
            Err(_) => Err(lab_err(
                format!("bind the sync peer {SYNC_PEER} in be"),
                "no answer",
            )),
        }
    }

    /// Datagrams and bytes received so far.
    fn counts(&self) -> (u64, u64) {
        let c = &self.counts;
        (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed))
    }
}

impl Drop for SyncSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for CpsBench {
    fn drop(&mut self) {
        self.stop_appliance();
        if let Some(mut n) = self.nginx.take() {
            let _ = n.kill();
            let _ = n.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn lab_err(command: String, detail: impl ToString) -> BenchError {
    BenchError::Lab(LabError {
        command,
        detail: detail.to_string(),
    })
}

impl CpsBench {
    /// The namespaces and links, nginx started and answering on both of its addresses.
    pub(crate) fn build(queues: u32, with_nginx: bool) -> Result<CpsBench, BenchError> {
        if !netns::is_root() {
            return Err(lab_err(
                "sluice bench".into(),
                "needs root (network namespaces, XDP)",
            ));
        }
        netns::require("ip", "iproute2")?;
        netns::require("nft", "nftables")?;
        netns::require("ethtool", "ethtool")?;
        if with_nginx {
            netns::require("nginx", "nginx")?;
        }
        let id = netns::unique("pf7");
        let dir = std::env::temp_dir().join(format!("sluice-bench-{id}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| lab_err(format!("mkdir {}", dir.display()), e))?;
        let mut bench = CpsBench {
            dir,
            appliance: None,
            nginx: None,
            cl: Netns::create(&format!("{id}cl"))?,
            lb: Netns::create(&format!("{id}lb"))?,
            be: Netns::create(&format!("{id}be"))?,
            sync_peer: None,
        };
        bench.wire(queues)?;
        if with_nginx {
            bench.start_nginx()?;
        }
        Ok(bench)
    }

    fn wire(&self, queues: u32) -> Result<(), BenchError> {
        let (cl, lb, be) = (&self.cl, &self.lb, &self.be);
        try_veth_mq(cl, "c0", lb, "eth0", queues)?;
        try_veth_mq(lb, "eth1", be, "b0", queues)?;
        try_veth_mq(cl, "d0", be, "d1", queues)?;
        cl.try_sh(&format!(
            "ip addr add {CLIENT}/24 dev c0 && ip addr add {CLIENT_DIRECT}/24 dev d0 && \
             ip route add 192.0.2.0/24 via 10.81.1.1 && \
             sysctl -qw net.ipv4.ip_local_port_range='1024 65535'"
        ))?;
        lb.try_sh(
            "ip addr add 10.81.1.1/24 dev eth0 && ip addr add 10.81.2.1/24 dev eth1 && \
             sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
             net.ipv4.conf.default.rp_filter=0",
        )?;
        // DR: the backend takes the VIP's frames (VIP on lo) but never answers ARP for it.
        be.try_sh(&format!(
            "ip addr add {CPS_BACKEND}/24 dev b0 && ip addr add {BACKEND_DIRECT}/24 dev d1 && \
             ip addr add {CPS_DR_VIP}/32 dev lo && ip route add default via 10.81.2.1 && \
             sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 \
             net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 \
             net.core.somaxconn=4096 net.ipv4.tcp_max_syn_backlog=4096"
        ))?;
        // Permanent neighbours: no run waits for ARP.
        let (client_mac, backend_mac) = (mac_of(cl, "c0")?, mac_of(be, "b0")?);
        for (addr, mac, dev) in [
            (CLIENT, client_mac, "eth0"),
            (CPS_BACKEND, backend_mac, "eth1"),
        ] {
            lb.try_sh(&format!(
                "ip neigh replace {addr} lladdr {} dev {dev} nud permanent",
                mac_text(mac)
            ))?;
        }
        // GRO gives the client's and backend's veths NAPI, which frames the appliance's XDP
        // program redirects into lb's veths (the flow cache) need to be received.
        for (ns, dev) in [(cl, "c0"), (be, "b0")] {
            ns.try_run(&["ethtool", "-K", dev, "gro", "on"])?;
        }
        Ok(())
    }

    fn start_nginx(&mut self) -> Result<(), BenchError> {
        let d = self.dir.join("nginx");
        std::fs::create_dir_all(&d).map_err(|e| lab_err(format!("mkdir {}", d.display()), e))?;
        let p = d.display();
        let conf = format!(
            "user root;\nworker_processes auto;\ndaemon off;\npid {p}/nginx.pid;\n\
             error_log {p}/error.log warn;\nworker_rlimit_nofile 16384;\n\
             events {{ worker_connections 8192; }}\n\
             http {{\n  access_log off;\n  keepalive_timeout 0;\n\
               client_body_temp_path {p}/body; proxy_temp_path {p}/proxy;\n\
               fastcgi_temp_path {p}/fastcgi; uwsgi_temp_path {p}/uwsgi; scgi_temp_path {p}/scgi;\n\
               server {{ listen {HTTP} reuseport backlog=4096; \
             location / {{ return 200 \"ok\\n\"; }} }}\n}}\n"
        );
        let path = d.join("nginx.conf");
        std::fs::write(&path, conf).map_err(|e| lab_err(format!("write {}", path.display()), e))?;
        let log = File::create(d.join("stderr.log")).ok();
        let child = self.be.try_spawn(
            &[
                "nginx",
                "-p",
                &d.to_string_lossy(),
                "-c",
                &path.to_string_lossy(),
            ],
            log,
        )?;
        self.nginx = Some(child);
        let direct = SocketAddr::from((BACKEND_DIRECT, HTTP));
        self.wait_answers("nginx", direct, &AtomicBool::new(false))
            .map_err(|e| match e {
                BenchError::NotForwarding { run, detail } => BenchError::NotForwarding {
                    run,
                    detail: format!(
                        "{detail}; nginx error log:\n{}",
                        std::fs::read_to_string(d.join("error.log")).unwrap_or_default()
                    ),
                },
                e => e,
            })
    }

    /// Polls `target` with single GETs from the client namespace until one answers `200`.
    pub(crate) fn wait_answers(
        &mut self,
        run: &str,
        target: SocketAddr,
        stop: &AtomicBool,
    ) -> Result<(), BenchError> {
        let cl = &self.cl;
        appliance::wait_ready(run, self.appliance.as_mut(), &self.dir, stop, || {
            let got = cl
                .in_thread(move || lab::http_get(target, "/", Duration::from_millis(500)))?
                .join();
            let last = match got {
                Ok(Ok((200, _))) => return Ok(None),
                Ok(Ok((code, _))) => format!("HTTP {code}"),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "the probing thread panicked".into(),
            };
            Ok(Some(format!("no answer from {target} (last: {last})")))
        })
    }

    /// The API socket of the appliance.
    pub(crate) fn api_socket(&self) -> PathBuf {
        self.dir.join("api.sock")
    }

    pub(crate) fn log_tail(&self) -> String {
        appliance::log_tail(&self.dir)
    }

    /// Starts `sluice run` in lb with [`cps_config`]; its process id.
    pub(crate) fn start_appliance(
        &mut self,
        sluice: &Path,
        busy_poll: bool,
        variant: Variant,
    ) -> Result<u32, BenchError> {
        let config = cps_config(&self.api_socket(), busy_poll, variant);
        if variant.sync {
            let key = sync_key_path(&self.api_socket());
            std::fs::write(
                &key,
                "sluice bench --cps --sync: a key of at least 32 bytes\n",
            )
            .map_err(|e| lab_err(format!("write {}", key.display()), e))?;
        }
        let a = Appliance::start(&self.lb, sluice, &self.dir, &config)?;
        let pid = a.pid();
        self.appliance = Some(a);
        Ok(pid)
    }

    /// Stops the appliance ([`Appliance::stop`]); whether it exited cleanly.
    pub(crate) fn stop_appliance(&mut self) -> bool {
        self.appliance.take().is_some_and(Appliance::stop)
    }

    /// Adds (or removes) the kernel's forwarding for both VIPs: nftables DNAT for the NAT
    /// VIP, a route to the backend for the DR VIP.
    fn kernel_forwarding(&self, on: bool) -> Result<(), BenchError> {
        if on {
            self.lb.try_sh(&format!(
                "nft add table ip sluicecps && \
                 nft add chain ip sluicecps prerouting \
                 '{{ type nat hook prerouting priority dstnat; policy accept; }}' && \
                 nft add rule ip sluicecps prerouting ip daddr {CPS_NAT_VIP} tcp dport {HTTP} \
                 dnat to {CPS_BACKEND}:{HTTP} && \
                 ip route add {CPS_DR_VIP}/32 via {CPS_BACKEND} dev eth1"
            ))?;
        } else {
            self.lb.try_sh(&format!(
                "nft delete table ip sluicecps; ip route del {CPS_DR_VIP}/32; true"
            ))?;
        }
        Ok(())
    }
}

impl CpsBench {
    /// One measured client run against `kind`'s target, the appliance being `appliance`.
    fn measure(
        &mut self,
        kind: RunKind,
        options: &CpsOptions,
        appliance: Option<u32>,
        stop: &Arc<AtomicBool>,
    ) -> Result<CpsRun, BenchError> {
        let target = SocketAddr::from((kind.target(CPS_NAT_VIP, CPS_DR_VIP, BACKEND_DIRECT), HTTP));
        self.wait_answers(kind.label(), target, stop)?;
        eprintln!(
            "bench: {}: {} connections in flight for {} s",
            kind.label(),
            options.concurrency,
            options.seconds
        );
        let client = ClientOptions {
            target,
            concurrency: options.concurrency,
            threads: options.threads,
            duration: Duration::from_secs(options.seconds),
        };
        let flood = |on: bool| -> Result<Option<api::Flood>, BenchError> {
            if !on {
                return Ok(None);
            }
            Ok(crate::runs::fetch_status(&self.api_socket())?.flood)
        };
        let flood0 = flood(appliance.is_some())?;
        let sync0 = self.sync_seen(appliance)?;
        let cpu0 = cpu_times()?;
        let lb0 = appliance.map(process_ticks).transpose()?;
        let stop2 = Arc::clone(stop);
        let r: ClientResult = self
            .cl
            .in_thread(move || crate::client::run(&client, &stop2))?
            .join()
            .map_err(|_| BenchError::Generator("the client thread panicked".into()))?;
        let cpu1 = cpu_times()?;
        let lb1 = appliance.map(process_ticks).transpose()?;
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        let lb_ticks = lb0.zip(lb1).map(|(a, b)| b.saturating_sub(a));
        let mut run = CpsRun::compute(kind, &r, cpu1.busy.saturating_sub(cpu0.busy), lb_ticks);
        run.flood = flood0
            .zip(flood(appliance.is_some())?)
            .map(|(a, b)| FloodSeen::between(&a, &b));
        run.sync = sync0
            .zip(self.sync_seen(appliance)?)
            .map(|(a, b)| SyncSeen::between(&a, &b));
        Ok(run)
    }

    /// Sync's counters so far (the appliance's and its peer's), while a `--sync` run's
    /// appliance runs.
    fn sync_seen(&self, appliance: Option<u32>) -> Result<Option<SyncSeen>, BenchError> {
        let Some(peer) = self.sync_peer.as_ref().filter(|_| appliance.is_some()) else {
            return Ok(None);
        };
        let text = crate::runs::fetch_metrics(&self.api_socket())?;
        let sum = |name: &str, only: &str| crate::runs::metric_sum(&text, name, only);
        let (peer_datagrams, peer_bytes) = peer.counts();
        Ok(Some(SyncSeen {
            records: sum("sluice_sync_records_total", "direction=\"sent\""),
            sent_bytes: sum("sluice_sync_sent_bytes_total", ""),
            peer_datagrams,
            peer_bytes,
            left_out: sum("sluice_sync_left_out_total", ""),
        }))
    }

    /// Every Sluice variant of a round: the default, then with flood mode off and the
    /// baseline binary when asked for.
    fn all_sluice_runs(
        &mut self,
        options: &CpsOptions,
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<CpsRun>, BenchError> {
        let mut runs = self.sluice_runs(
            &options.sluice,
            Variant::DEFAULT,
            &[RunKind::SluiceNat, RunKind::SluiceDr],
            options,
            stop,
        )?;
        if options.flood_off {
            let off = Variant {
                flood: false,
                ..Variant::DEFAULT
            };
            runs.extend(self.sluice_runs(
                &options.sluice,
                off,
                &[RunKind::SluiceNatFloodOff, RunKind::SluiceDrFloodOff],
                options,
                stop,
            )?);
        }
        if options.syn_proxy {
            let proxy = Variant {
                syn_proxy: true,
                ..Variant::DEFAULT
            };
            runs.extend(self.sluice_runs(
                &options.sluice,
                proxy,
                &[RunKind::SluiceNatSynProxy],
                options,
                stop,
            )?);
        }
        if options.sync {
            self.sync_peer = Some(SyncSink::start(&self.be)?);
            let synced = Variant {
                sync: true,
                ..Variant::DEFAULT
            };
            let got = self.sluice_runs(
                &options.sluice,
                synced,
                &[RunKind::SluiceNatSync, RunKind::SluiceDrSync],
                options,
                stop,
            );
            self.sync_peer = None;
            runs.extend(got?);
        }
        if let Some(old) = &options.baseline {
            runs.extend(self.sluice_runs(
                old,
                Variant::DEFAULT,
                &[RunKind::BaselineNat, RunKind::BaselineDr],
                options,
                stop,
            )?);
        }
        Ok(runs)
    }

    /// One Sluice variant's runs: `sluice` started as `variant` says, the VIPs measured as
    /// `kinds`, stopped.
    fn sluice_runs(
        &mut self,
        sluice: &Path,
        variant: Variant,
        kinds: &[RunKind],
        options: &CpsOptions,
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<CpsRun>, BenchError> {
        let pid = self.start_appliance(sluice, options.busy_poll, variant)?;
        eprintln!(
            "bench: started {} in {}{}{}{}",
            sluice.display(),
            self.lb.name,
            if variant.flood {
                ""
            } else {
                ", flood mode off"
            },
            if variant.syn_proxy {
                ", the NAT VIP with syn_proxy = always"
            } else {
                ""
            },
            if variant.sync {
                ", [sync] to one peer"
            } else {
                ""
            }
        );
        let runs = kinds
            .iter()
            .copied()
            .map(|k| self.measure(k, options, Some(pid), stop))
            .collect::<Result<Vec<_>, _>>();
        if !self.stop_appliance() {
            eprintln!(
                "bench: warning: sluice run did not exit cleanly; log:\n{}",
                self.log_tail()
            );
        }
        runs
    }

    /// The kernel's two runs: DNAT and the route added, measured, removed.
    fn kernel_runs(
        &mut self,
        options: &CpsOptions,
        stop: &Arc<AtomicBool>,
    ) -> Result<Vec<CpsRun>, BenchError> {
        self.kernel_forwarding(true)?;
        let runs = [RunKind::KernelNat, RunKind::KernelDr]
            .into_iter()
            .map(|k| self.measure(k, options, None, stop))
            .collect::<Result<Vec<_>, _>>();
        self.kernel_forwarding(false)?;
        runs
    }
}

/// Runs the rounds of the connection-rate bench and returns the report; progress goes to
/// stderr. Every namespace is removed before it returns, also on error and on Ctrl-C.
pub fn run_cps(options: &CpsOptions, stop: Arc<AtomicBool>) -> Result<CpsReport, BenchError> {
    let options = CpsOptions {
        seconds: options.seconds.max(1),
        rounds: options.rounds.max(1),
        concurrency: options.concurrency.max(1),
        threads: options.threads.max(1),
        queues: options.queues.max(1),
        ..options.clone()
    };
    let load_before = loadavg();
    let mut bench = CpsBench::build(options.queues, true)?;
    eprintln!(
        "bench: namespaces {} -- {} -- {} up, nginx answering",
        bench.cl.name, bench.lb.name, bench.be.name
    );
    let mut rounds = Vec::new();
    for round in 1..=options.rounds {
        eprintln!("bench: round {round} of {}", options.rounds);
        let mut runs = Vec::new();
        // Odd rounds go direct, kernel, Sluice; even rounds the other way round.
        for step in 0..3 {
            let step = if round % 2 == 1 { step } else { 2 - step };
            match step {
                0 => runs.push(bench.measure(RunKind::Direct, &options, None, &stop)?),
                1 => runs.extend(bench.kernel_runs(&options, &stop)?),
                _ => runs.extend(bench.all_sluice_runs(&options, &stop)?),
            }
        }
        rounds.push(runs);
    }
    drop(bench);
    Ok(CpsReport::new(&options, rounds, load_before, loadavg()))
}

/// `/proc/loadavg`'s first three fields, for the report (the machine is shared).
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
