//! The client's address through FullNAT (`client_address`), against real servers. Needs
//! root, nginx and tcpdump (scripts/setup.sh installs them).
//!
//! proxy-v2: nginx (Debian's) is the backend of the lab's FullNAT TCP VIPs with `listen ...
//! proxy_protocol` and an access log of `$proxy_protocol_addr`; for IPv4 and IPv6, with the
//! flow cache on and off: every logged address is the real client's (and the connection's
//! own peer the SNAT address), a 1 MB download and a 1 MB upload (WebDAV PUT) arrive intact,
//! 20 requests share one keep-alive connection, and connections closed (FIN) or reset (RST)
//! before any data leave nothing behind: the next request works and nginx logs no error
//! request. toa: tcpdump at the backend sees the TOA option with the client's address and
//! port on the handshake's ACK, and the request through the VIP works.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab::netns::{Netns, require_program, require_root};
use lab::testing::{Api, Nginx, file_text};
use lab::{BLOB_SIZE, Lab, LabMode, LabOptions, SNAT4, SNAT6, blob};

/// The lab client's addresses (lab/src/topology.rs).
const CLIENT4: &str = "198.51.100.2";
const CLIENT6: &str = "2001:db8:c::2";
/// nginx's PROXY-protocol port and its plain one (for toa).
const PROXY_PORT: u16 = 8081;
const PLAIN_PORT: u16 = 8082;

/// Writes a document root with `/blob` and `/whoami` in `dir` and starts nginx in `ns`:
/// PROXY-protocol on [`PROXY_PORT`] (access log `access.log`), plain on [`PLAIN_PORT`]
/// (`plain.log`), both logging the PROXY header's address, the peer and the connection.
fn start_nginx(ns: &Netns, dir: &Path) -> Nginx {
    let www = dir.join("www");
    std::fs::create_dir_all(www.join("up")).expect("www");
    std::fs::write(www.join("blob"), blob()).expect("blob");
    std::fs::write(www.join("whoami"), "nginx\n").expect("whoami");
    let d = dir.display();
    let http = format!(
        "  log_format px '$proxy_protocol_addr $proxy_protocol_port $remote_addr \
         $connection $connection_requests $request_method $request_uri $status';\n\
           keepalive_requests 1000;\n\
           client_max_body_size 4m;\n\
           server {{\n\
             listen {PROXY_PORT} proxy_protocol;\n\
             listen [::]:{PROXY_PORT} proxy_protocol ipv6only=on;\n\
             access_log {d}/access.log px;\n\
             root {d}/www;\n\
             location /up/ {{ dav_methods PUT; create_full_put_path on; }}\n\
           }}\n\
           server {{\n\
             listen {PLAIN_PORT};\n\
             listen [::]:{PLAIN_PORT} ipv6only=on;\n\
             access_log {d}/plain.log px;\n\
             root {d}/www;\n\
           }}\n"
    );
    Nginx::start(ns, dir, 256, &http, PLAIN_PORT)
}

/// The lines of nginx's access log `log` whose request URI contains `tag`, split in words.
fn logged(nginx: &Nginx, log: &str, tag: &str) -> Vec<Vec<String>> {
    nginx
        .file(log)
        .lines()
        .filter(|l| l.contains(tag))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// A lab with one FullNAT appliance and one backend (no health checks: nginx on the
/// backend expects the PROXY header, which a check to the backend's own address would not
/// send), and an nginx there.
fn lab(flow_cache: bool) -> (Lab, PathBuf) {
    require_root();
    require_program("nginx", "nginx");
    require_program("tcpdump", "tcpdump");
    let lab = lab::testing::build(LabOptions {
        backends: 1,
        modes: vec![LabMode::FullNat],
        health_checks: false,
        flow_cache: Some(flow_cache),
        prefix: "px",
        ..LabOptions::default()
    });
    let dir = lab.dir.join("nginx");
    (lab, dir)
}

/// The lab's config with its FullNAT TCP VIPs sent to nginx's `port` with `client_address`.
fn config(lab: &Lab, client_address: &str, port: u16) -> String {
    let cfg = lab.config(&lab.api_socket_at(0));
    let mut out = String::new();
    for block in cfg.split("\n\n") {
        let mut b = block.to_string();
        if b.contains("name = \"fullnat4-tcp\"") || b.contains("name = \"fullnat6-tcp\"") {
            b = b.replace(
                "mode = \"fullnat\"\n",
                &format!("mode = \"fullnat\"\nclient_address = \"{client_address}\"\n"),
            );
            b = b.replace(
                &format!("port = {}", LabMode::FullNat.backend_port()),
                &format!("port = {port}"),
            );
            assert!(b.contains("client_address"), "vip block:\n{b}");
        }
        out.push_str(&b);
        out.push_str("\n\n");
    }
    out
}

fn url(vip: IpAddr, path: &str) -> String {
    match vip {
        IpAddr::V4(a) => format!("http://{a}{path}"),
        IpAddr::V6(a) => format!("http://[{a}]{path}"),
    }
}

/// Runs a shell script in the client namespace; panics with its output unless it succeeds.
fn client_sh(lab: &Lab, script: &str) -> String {
    let o = lab.client.sh(script);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "client: {script}\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Everything proxy-v2 must show for one family (see the module docs).
fn proxy_checks(lab: &Lab, nginx: &Nginx, v6: bool, tag: &str) {
    let vip = LabMode::FullNat.vip(v6);
    let (client, snat) = if v6 {
        (CLIENT6, SNAT6)
    } else {
        (CLIENT4, SNAT4)
    };
    let tmp = lab.dir.join(format!("client-{tag}"));
    std::fs::create_dir_all(&tmp).expect("tmp");
    let t = tmp.display();
    // 1 MB down, 1 MB up.
    client_sh(
        lab,
        &format!(
            "curl -sS --fail --max-time 20 -o {t}/down '{}'",
            url(vip, &format!("/blob?{tag}-down"))
        ),
    );
    let down = std::fs::read(tmp.join("down")).expect("download");
    assert!(
        down.len() == BLOB_SIZE && down == blob(),
        "{tag}: download differs ({} bytes)",
        down.len()
    );
    let up: Vec<u8> = blob().iter().rev().copied().collect();
    std::fs::write(tmp.join("up"), &up).expect("up");
    client_sh(
        lab,
        &format!(
            "curl -sS --fail --max-time 20 -T {t}/up '{}'",
            url(vip, &format!("/up/{tag}?{tag}-up"))
        ),
    );
    let stored = std::fs::read(nginx.dir().join("www/up").join(tag)).expect("uploaded file");
    assert!(
        stored == up,
        "{tag}: upload differs ({} bytes)",
        stored.len()
    );
    // 20 requests on one connection.
    let urls: Vec<String> = (0..20)
        .map(|i| format!("'{}'", url(vip, &format!("/whoami?{tag}-ka{i}"))))
        .collect();
    client_sh(
        lab,
        &format!(
            "curl -sS --fail --max-time 20 -o /dev/null {}",
            urls.join(" -o /dev/null ")
        ),
    );
    // Closed (FIN) and reset (RST) before any data, then a request that must work.
    let addr = SocketAddr::new(vip, 80);
    client_sh(
        lab,
        &format!(
            "python3 -c 'import socket,struct,time\n\
             for linger in (False, True):\n\
             \x20   s = socket.create_connection((\"{}\", {}), timeout=5)\n\
             \x20   if linger: s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack(\"ii\", 1, 0))\n\
             \x20   time.sleep(0.2)\n\
             \x20   s.close()\n'",
            addr.ip(),
            addr.port()
        ),
    );
    std::thread::sleep(Duration::from_millis(300));
    client_sh(
        lab,
        &format!(
            "curl -sS --fail --max-time 10 -o /dev/null '{}'",
            url(vip, &format!("/whoami?{tag}-after"))
        ),
    );

    let lines = logged(nginx, "access.log", tag);
    assert_eq!(
        lines.len(),
        23,
        "{tag}: access log:\n{}",
        nginx.file("access.log")
    );
    for l in &lines {
        assert_eq!(l[0], client, "{tag}: $proxy_protocol_addr in {l:?}");
        assert_eq!(
            l[2], snat,
            "{tag}: the peer nginx sees is the SNAT address: {l:?}"
        );
        assert!(l[7].starts_with('2'), "{tag}: status in {l:?}");
    }
    let ka: Vec<&Vec<String>> = lines.iter().filter(|l| l[6].contains("-ka")).collect();
    assert_eq!(ka.len(), 20, "{tag}: keep-alive requests logged");
    assert!(
        ka.iter().all(|l| l[3] == ka[0][3]),
        "{tag}: 20 requests, one connection: {ka:?}"
    );
    let reqs: Vec<&str> = ka.iter().map(|l| l[4].as_str()).collect();
    assert_eq!(
        reqs.last(),
        Some(&"20"),
        "{tag}: $connection_requests {reqs:?}"
    );
    let errors = nginx.file("error.log");
    assert!(
        !errors.contains("broken header") && !errors.contains("[error]"),
        "{tag}: nginx complained:\n{errors}"
    );
}

fn proxy_v2(flow_cache: bool) {
    let (mut lab, dir) = lab(flow_cache);
    let nginx = start_nginx(&lab.backends[0], &dir);
    lab.write_config(&config(&lab, "proxy-v2", PROXY_PORT))
        .expect("config");
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    for v6 in [false, true] {
        let vip = SocketAddr::new(LabMode::FullNat.vip(v6), 80);
        let up = lab.wait_vip(vip, Duration::from_secs(20)).expect("client");
        assert!(
            up,
            "{vip} never answered:\n{}\n{}",
            file_text(&log),
            nginx.file("error.log")
        );
        let tag = format!("{}{}", if v6 { "v6" } else { "v4" }, u8::from(flow_cache));
        proxy_checks(&lab, &nginx, v6, &tag);
    }
    let status = Api::unix(&lab.api_socket_at(0))
        .call(|c| c.status())
        .expect("status");
    match (&status.flow_cache, flow_cache) {
        // The downloads' ACKs and the uploads' data are shifted in the kernel.
        (Some(c), true) => assert!(c.hits > 1000, "the cache forwarded little: {c:?}"),
        (None, false) => {}
        (c, _) => panic!("flow cache status {c:?} with flow_cache = {flow_cache}"),
    }
    println!(
        "MEASURE client_address proxy-v2 (flow_cache {flow_cache}): {:?}",
        status.flow_cache
    );
    assert!(lab.stop_appliance(), "clean exit");
}

#[test]
fn proxy_v2_reaches_nginx_with_the_flow_cache_on() {
    proxy_v2(true);
}

#[test]
fn proxy_v2_reaches_nginx_with_the_flow_cache_off() {
    proxy_v2(false);
}

/// The TOA options in a pcap file (Ethernet): (family is IPv6, port, address bytes).
fn toa_options(pcap: &[u8]) -> Vec<(bool, u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let caplen = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let p = &pcap[at + 16..(at + 16 + caplen).min(pcap.len())];
        at += 16 + caplen;
        if p.len() < 14 {
            continue;
        }
        let (l4, proto) = match u16::from_be_bytes([p[12], p[13]]) {
            0x0800 => (14 + usize::from(p[14] & 0x0f) * 4, p[23]),
            0x86dd => (14 + 40, p[20]),
            _ => continue,
        };
        if proto != 6 || p.len() < l4 + 20 {
            continue;
        }
        let hlen = usize::from(p[l4 + 12] >> 4) * 4;
        let mut o = l4 + 20;
        while o + 1 < (l4 + hlen).min(p.len()) {
            match p[o] {
                0 => break,
                1 => o += 1,
                k => {
                    let len = usize::from(p[o + 1]);
                    if len < 2 || o + len > p.len() {
                        break;
                    }
                    if k == 254 && (len == 8 || len == 20) {
                        let port = u16::from_be_bytes([p[o + 2], p[o + 3]]);
                        out.push((len == 20, port, p[o + 4..o + len].to_vec()));
                    }
                    o += len;
                }
            }
        }
    }
    out
}

#[test]
fn toa_carries_the_client_address_and_port_to_the_backend() {
    let (mut lab, dir) = lab(true);
    let nginx = start_nginx(&lab.backends[0], &dir);
    lab.write_config(&config(&lab, "toa", PLAIN_PORT))
        .expect("config");
    let pcap = dir.join("toa.pcap");
    let mut dump = lab.backends[0].capture(
        Duration::from_secs(300),
        &[
            "-i",
            "eth0",
            "-U",
            "-s",
            "200",
            "-w",
            &pcap.to_string_lossy(),
            &format!("tcp port {PLAIN_PORT}"),
        ],
    );
    let vips = [false, true].map(|v6| SocketAddr::new(LabMode::FullNat.vip(v6), 80));
    lab.start_serving(lab::sluice!().path(), &vips);
    for (vip, port) in vips.into_iter().zip([41001u16, 41002]) {
        let body = client_sh(
            &lab,
            &format!(
                "curl -sS --fail --max-time 10 --local-port {port} '{}'",
                url(vip.ip(), "/whoami?toa")
            ),
        );
        assert_eq!(body, "nginx\n");
    }
    let c4: IpAddr = CLIENT4.parse().unwrap();
    let c6: IpAddr = CLIENT6.parse().unwrap();
    let want4 = (
        false,
        41001u16,
        match c4 {
            IpAddr::V4(a) => a.octets().to_vec(),
            _ => unreachable!(),
        },
    );
    let want6 = (
        true,
        41002u16,
        match c6 {
            IpAddr::V6(a) => a.octets().to_vec(),
            _ => unreachable!(),
        },
    );
    // tcpdump writes each packet as it gets it; wait until both are in the file.
    let deadline = Instant::now() + Duration::from_secs(20);
    let read = || toa_options(&std::fs::read(&pcap).unwrap_or_default());
    while !(read().contains(&want4) && read().contains(&want6)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    lab::netns::stop_capture(&mut dump);
    let seen = read();
    assert!(
        seen.contains(&want4),
        "no IPv4 TOA with {CLIENT4}:41001 at the backend: {seen:?} ({} bytes captured)",
        std::fs::metadata(&pcap).map(|m| m.len()).unwrap_or(0)
    );
    assert!(
        seen.contains(&want6),
        "no IPv6 TOA with {CLIENT6}:41002 at the backend: {seen:?}"
    );
    // Every option seen names the client (wait_vip's own connections carry one too, from
    // their own ports).
    assert!(
        seen.iter().all(|s| s.2 == want4.2 || s.2 == want6.2),
        "a TOA option that is not the client's: {seen:?}"
    );
    drop(nginx);
    assert!(lab.stop_appliance(), "clean exit");
}
