//! Issue 48: QUIC-LB connection-ID routing with real QUIC endpoints. Quinn servers in the
//! lab's backend namespaces issue connection IDs as `sluice quic-lb config` tells each one
//! (through `lb::quic`'s codec: four-pass for NAT, single-pass for FullNAT, plaintext with
//! IDs set by hand for DR), and serve a 10 MiB body that says which backend sent it. A quinn
//! client in the client namespace downloads it through a Maglev VIP of each mode and family
//! and, mid-transfer, moves three times to a new UDP port (IPv6: a new source address too),
//! each new 5-tuple one that Maglev maps to another backend (`sluice::trace`, the engine's
//! own choice, says which). With `[vip.quic_lb]` every download completes byte for byte from
//! one backend, which saw the client's new addresses, and the VIP's `routed` counter moved;
//! without it the same download stalls at the first move. The QUIC ends are in
//! `quic_lb/endpoints.rs`. Needs root.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use lab::testing::{file_text, poll};
use lab::{Lab, LabMode, LabOptions, backend_addr};
use sluice::config::Config;

#[path = "quic_lb/endpoints.rs"]
mod endpoints;

use endpoints::{
    BODY, Cert, Download, Listen, Plan, REBINDS, Served, ServerSpec, Servers, backend_index,
    download, server_specs,
};

/// The VIPs' port, and the backends' in NAT and FullNAT (DR keeps the VIP's).
const VIP_PORT: u16 = 443;
const NAT_PORT: u16 = 4433;
const FULLNAT_PORT: u16 = 4434;
/// Extra client addresses for the IPv6 moves, unused in the lab's client subnet
/// (2001:db8:c::/64: the router is ::1, the client ::2).
const CLIENT6_EXTRA: std::ops::Range<u16> = 0xa0..0xb0;

/// One UDP VIP on port 443 of the lab's mode VIP addresses.
#[derive(Debug, Clone)]
struct QuicVip {
    mode: LabMode,
    v6: bool,
    name: String,
    addr: SocketAddr,
}

impl QuicVip {
    fn all() -> Vec<QuicVip> {
        let mut out = Vec::new();
        for mode in [LabMode::Nat, LabMode::FullNat, LabMode::Dr] {
            for v6 in [false, true] {
                let fam = if v6 { "6" } else { "4" };
                out.push(QuicVip {
                    mode,
                    v6,
                    name: format!("{}{fam}-quic", mode.name()),
                    addr: SocketAddr::new(mode.vip(v6), VIP_PORT),
                });
            }
        }
        out
    }

    /// Backend `i` of this VIP as the config names it.
    fn backend(&self, i: usize) -> SocketAddr {
        let a: IpAddr = backend_addr(i, self.v6).parse().expect("lab address");
        let port = match self.mode {
            LabMode::Nat => NAT_PORT,
            LabMode::FullNat => FULLNAT_PORT,
            _ => VIP_PORT,
        };
        SocketAddr::new(a, port)
    }

    /// Where backend `i`'s server listens: its backend address, or in DR the VIP, which
    /// the lab's backends hold on lo (so replies leave from the VIP).
    fn listen(&self, i: usize) -> SocketAddr {
        match self.mode {
            LabMode::Dr => self.addr,
            _ => self.backend(i),
        }
    }

    /// The `[vip.quic_lb]` of this VIP's mode: one encoding per mode.
    fn quic_lb(&self) -> &'static str {
        match self.mode {
            LabMode::Nat => {
                "config_id = 1\nserver_id_len = 2\nnonce_len = 6\n\
                 key = \"8f95f09245765f80256934e50c66207f\"\n"
            }
            LabMode::FullNat => {
                "config_id = 2\nserver_id_len = 3\nnonce_len = 13\n\
                 key = \"fdf726a9893ec05c0632d3956680baf0\"\n"
            }
            _ => "config_id = 3\nserver_id_len = 2\nnonce_len = 5\n",
        }
    }

    /// Its `[[vip]]` section for `backends` backends, with `[vip.quic_lb]` or without.
    fn section(&self, backends: usize, quic: bool) -> String {
        let mode = match self.mode {
            LabMode::Nat => "mode = \"nat\"\n".to_string(),
            LabMode::FullNat => {
                let snat = if self.v6 { lab::SNAT6 } else { lab::SNAT4 };
                format!("mode = \"fullnat\"\nsnat = [\"{snat}\"]\n")
            }
            _ => "mode = \"dr\"\n".to_string(),
        };
        let mut s = format!(
            "[[vip]]\nname = \"{}\"\naddress = \"{}\"\nport = {VIP_PORT}\nprotocol = \"udp\"\n\
             scheduler = \"maglev\"\n{mode}",
            self.name,
            self.addr.ip()
        );
        if quic {
            s.push_str(&format!("[vip.quic_lb]\n{}", self.quic_lb()));
        }
        for i in 0..backends {
            let b = self.backend(i);
            s.push_str(&format!("[[vip.backend]]\naddress = \"{}\"\n", b.ip()));
            if self.mode != LabMode::Dr {
                s.push_str(&format!("port = {}\n", b.port()));
            } else if quic {
                s.push_str(&format!("quic_server_id = \"0a{:02x}\"\n", i + 1));
            }
        }
        s.push('\n');
        s
    }
}

/// The backend index the VIP's scheduler gives the flow `src` -> `vip` (no CID).
fn maps_to(cfg: &Config, src: SocketAddr, vip: SocketAddr) -> usize {
    let flow = format!("udp {src} -> {vip}");
    let r = sluice::trace::trace(cfg, &flow, None).unwrap_or_else(|e| panic!("{flow}: {e}"));
    r.chosen
        .unwrap_or_else(|| panic!("{flow}: no backend ({})", r.reason))
}

/// The plan of the client of VIP number `k`: its own ports (20000 + 1000 k on), and enough
/// candidates that whichever backend serves it has [`REBINDS`] moves mapped elsewhere.
fn plan(cfg: &Config, vip: &QuicVip, k: usize, backends: usize) -> Plan {
    let base = 20_000 + 1_000 * u16::try_from(k).expect("few VIPs");
    let client = |i: u16| -> SocketAddr {
        let ip: IpAddr = if !vip.v6 {
            "198.51.100.2".parse().expect("literal")
        } else if i == 0 {
            "2001:db8:c::2".parse().expect("literal")
        } else {
            let n = CLIENT6_EXTRA.start + (i - 1) % CLIENT6_EXTRA.len() as u16;
            format!("2001:db8:c::{n:x}").parse().expect("literal")
        };
        SocketAddr::new(ip, base + i)
    };
    let first = client(0);
    let mut moves = Vec::new();
    for i in 1..500 {
        let to = client(i);
        moves.push((to, maps_to(cfg, to, vip.addr)));
        let enough =
            (0..backends).all(|b| moves.iter().filter(|(_, m)| *m != b).count() >= REBINDS);
        if enough {
            break;
        }
    }
    Plan {
        name: vip.name.clone(),
        vip: vip.addr,
        first,
        first_maps_to: maps_to(cfg, first, vip.addr),
        moves,
    }
}

/// A lab with the six QUIC VIPs (with `[vip.quic_lb]` or without), its appliance serving
/// and the QUIC servers up.
struct QuicLab {
    // Dropped first: the servers' threads end before their namespaces go.
    servers: Servers,
    cert: Cert,
    cfg: Config,
    vips: Vec<QuicVip>,
    lab: Lab,
}

impl QuicLab {
    fn start(prefix: &'static str, quic: bool) -> QuicLab {
        lab::netns::require_program("python3", "python3");
        let mut lab = lab::testing::build(LabOptions {
            modes: vec![LabMode::Nat, LabMode::FullNat, LabMode::Dr],
            prefix,
            ..LabOptions::default()
        });
        let vips = QuicVip::all();
        let base = lab.config(&lab.api_socket_at(0));
        let with = |q: bool| -> String {
            let n = lab.backends.len();
            let extra: String = vips.iter().map(|v| v.section(n, q)).collect();
            format!("{base}{extra}")
        };
        // The servers' configuration comes from the config with quic_lb, whether or not
        // the appliance runs with it: the control differs in the appliance alone.
        let quic_file = lab.dir.join("with-quic-lb.toml");
        std::fs::write(&quic_file, with(true)).expect("write the quic_lb config");
        let specs: Vec<Vec<ServerSpec>> = vips
            .iter()
            .map(|v| server_specs(&quic_lb_config(&quic_file, &v.name)))
            .collect();
        let listen = (0..lab.backends.len())
            .map(|i| {
                let on = |(v, s): (&QuicVip, &Vec<ServerSpec>)| Listen {
                    vip: v.name.clone(),
                    at: v.listen(i),
                    spec: s
                        .iter()
                        .find(|s| s.backend == v.backend(i))
                        .cloned()
                        .expect("spec"),
                };
                vips.iter().zip(&specs).map(on).collect()
            })
            .collect();
        lab.write_config(&with(quic)).expect("write the config");
        prepare_namespaces(&lab);
        let cert = Cert::new();
        let servers = Servers::start(&lab.backends, listen, &cert);
        let nat80 = SocketAddr::new(LabMode::Nat.vip(false), 80);
        lab.start_serving(lab::sluice!().path(), &[nat80]);
        let cfg = sluice::config::load(&lab.config_path()).expect("the lab config loads");
        QuicLab {
            servers,
            cert,
            cfg,
            vips,
            lab,
        }
    }

    /// Every VIP's client, at once; what each saw.
    fn download_all(&self) -> Vec<(Plan, Download)> {
        let n = self.lab.backends.len();
        let plans: Vec<Plan> = (self.vips.iter().enumerate())
            .map(|(k, v)| plan(&self.cfg, v, k, n))
            .collect();
        let threads: Vec<_> = plans
            .iter()
            .map(|p| {
                let (p, cert) = (p.clone(), self.cert.clone());
                let run = move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(download(p, cert))
                };
                self.lab.client.in_thread(run).expect("client thread")
            })
            .collect();
        let got = threads.into_iter().map(|t| t.join().expect("client"));
        plans.into_iter().zip(got).collect()
    }

    /// The appliance's `sluice_vip_quic_lb_packets_total` of `vip` with `outcome`.
    fn counter(&self, vip: &str, outcome: &str) -> Option<u64> {
        let text = lab::sluice!().ctl_ok(&self.lab.api_socket_at(0), &["metrics"]);
        let (v, o) = (format!("vip=\"{vip}\""), format!("outcome=\"{outcome}\""));
        text.lines()
            .filter(|l| l.starts_with("sluice_vip_quic_lb_packets_total{"))
            .find(|l| l.contains(&v) && l.contains(&o))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|x| x as u64)
    }

    fn log(&self) -> String {
        lab::testing::tail(&file_text(&self.lab.log_path_at(0)), 40)
    }
}

/// `sluice quic-lb config --config FILE --vip NAME`'s output.
fn quic_lb_config(file: &std::path::Path, vip: &str) -> String {
    let file = file.to_string_lossy();
    let said = lab::sluice!().run(&["quic-lb", "config", "--config", &file, "--vip", vip]);
    assert!(
        said.ok(),
        "sluice quic-lb config --vip {vip}: {}",
        said.stderr
    );
    said.stdout
}

/// The NAT backends' replies from [`NAT_PORT`] return through the appliance (as the lab's
/// from 8080 do), and the client holds the extra IPv6 addresses its moves come from.
fn prepare_namespaces(lab: &Lab) {
    let port = NAT_PORT.to_string();
    for be in &lab.backends {
        be.run(&["ip", "rule", "add", "sport", &port, "lookup", "100"]);
        be.run(&["ip", "-6", "rule", "add", "sport", &port, "lookup", "100"]);
    }
    for n in CLIENT6_EXTRA {
        let a = format!("2001:db8:c::{n:x}/64");
        lab.client
            .run(&["ip", "-6", "addr", "add", &a, "dev", "eth0", "nodad"]);
    }
}

fn measure(prefix: &str, p: &Plan, d: &Download) {
    let moved: Vec<String> = d
        .moved
        .iter()
        .map(|(a, m)| format!("{a}->be{}", m + 1))
        .collect();
    println!(
        "MEASURE {prefix} {}: {} bytes in {:.1}s from {} (the first 5-tuple {} maps to be{}), \
         {} moves {moved:?}, error {:?}",
        d.vip,
        d.bytes,
        d.took.as_secs_f64(),
        d.backend,
        p.first,
        p.first_maps_to + 1,
        d.moved.len(),
        d.error
    );
}

/// With `[vip.quic_lb]`: every download completes, every byte right, from one backend that
/// saw each of the client's moves, although each move's 5-tuple maps to another backend.
#[test]
fn a_rebinding_client_keeps_its_backend_by_connection_id() {
    let _serial = lab::testing::serial();
    let q = QuicLab::start("ql", true);
    let got = q.download_all();
    for (p, d) in &got {
        measure("quic_lb", p, d);
    }
    for (p, d) in &got {
        let ctx = || format!("{d:?}\nappliance log:\n{}", q.log());
        assert!(
            d.error.is_none(),
            "{}: the download failed: {}",
            d.vip,
            ctx()
        );
        assert_eq!(d.bytes, BODY, "{}: {}", d.vip, ctx());
        assert_eq!(d.bad, None, "{}: a byte differs", d.vip);
        assert_eq!(d.moved.len(), REBINDS, "{}: {}", d.vip, ctx());
        let serving = backend_index(&d.backend).expect("backend");
        for (to, maps) in &d.moved {
            assert_ne!(*maps, serving, "{}: {to} was to map elsewhere", p.name);
        }
    }
    // Each server logs a connection once its client has closed it.
    let want = got.len();
    let logged = poll(Duration::from_secs(20), Duration::from_millis(100), || {
        q.servers.served().len() >= want
    });
    let served = q.servers.served();
    assert!(logged.is_some(), "servers logged {served:?}");
    for ((p, d), v) in got.iter().zip(&q.vips) {
        let mine: Vec<&Served> = served.iter().filter(|s| s.vip == d.vip).collect();
        assert_eq!(
            mine.len(),
            1,
            "{}: one connection, on one backend: {mine:?}",
            d.vip
        );
        let s = mine[0];
        println!(
            "MEASURE quic_lb {} server {}: {} bytes, client addresses {:?}",
            s.vip, s.backend, s.bytes, s.addresses
        );
        assert_eq!(s.backend, d.backend, "{s:?}");
        assert_eq!((s.bytes, &s.error), (BODY, &None), "{s:?}");
        // FullNAT shows the server a new SNAT port per move, the others the client's own.
        let mut seen = vec![p.first];
        seen.extend(d.moved.iter().map(|(a, _)| *a));
        if v.mode == LabMode::FullNat {
            assert_eq!(s.addresses.len(), seen.len(), "every move: {s:?}");
        } else {
            assert_eq!(s.addresses, seen, "{}: the server saw every move", d.vip);
        }
    }
    // The engine's counters reach the API within a second or two.
    for v in &q.vips {
        let counted = poll(Duration::from_secs(10), Duration::from_millis(250), || {
            q.counter(&v.name, "routed").unwrap_or(0) >= REBINDS as u64
        });
        let c: Vec<String> = ["routed", "fallback", "unknown_config", "decode_failure"]
            .iter()
            .map(|o| format!("{o}={:?}", q.counter(&v.name, o)))
            .collect();
        println!("MEASURE quic_lb {} counters: {}", v.name, c.join(" "));
        assert!(counted.is_some(), "{}: {c:?}\n{}", v.name, q.log());
    }
}

/// The control: the same servers, client and moves through the same VIPs without
/// `[vip.quic_lb]`: each download stalls at its first move, whose 5-tuple Maglev sends to
/// another backend.
#[test]
fn without_quic_lb_a_rebinding_client_loses_its_download() {
    let _serial = lab::testing::serial();
    let q = QuicLab::start("qm", false);
    let got = q.download_all();
    for (p, d) in &got {
        measure("control", p, d);
    }
    for (p, d) in &got {
        let serving = backend_index(&d.backend);
        assert_eq!(
            serving,
            Some(p.first_maps_to),
            "{}: the first 5-tuple goes where Maglev says: {d:?}",
            d.vip
        );
        assert!(
            d.error.is_some(),
            "{}: completed without quic_lb: {d:?}",
            d.vip
        );
        assert_eq!(
            d.moved.len(),
            1,
            "{}: it broke at the first move: {d:?}",
            d.vip
        );
        assert!(d.bytes < BODY / 2, "{d:?}");
        assert_eq!(d.bad, None, "{}: a byte differs", d.vip);
    }
    assert!(
        q.counter(&q.vips[0].name, "routed").is_none(),
        "no QUIC-LB counters without quic_lb"
    );
}
