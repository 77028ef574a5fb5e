//! The lab's traffic: what the client sends through a VIP (HTTP requests, a 1 MB download,
//! UDP requests) and the report of what came back.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::LabMode;

/// Size of the `/blob` body every backend serves.
pub const BLOB_SIZE: usize = 1 << 20;

/// The deterministic body of `/blob` (must match backend.py).
pub fn blob() -> Vec<u8> {
    (0..BLOB_SIZE)
        .map(|i| ((i * 7 + i / 251) % 256) as u8)
        .collect()
}

/// CRC-32 (IEEE), as Python's `zlib.crc32` computes it: what the lab backend answers a
/// `POST /upload` with.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// One HTTP/1.1 request over a new connection (`Connection: close`), with `body` (empty for
/// a GET): the response's body.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: lab\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    s.write_all(body)?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    Ok(buf[split + 4..].to_vec())
}

/// `POST /upload` of `body` over a new connection: the backend's answer, `"<length> <crc32>"`
/// (compare with [`crc32`]).
pub fn upload(addr: SocketAddr, body: &[u8], timeout: Duration) -> std::io::Result<String> {
    let answer = http_request(addr, "POST", "/upload", body, timeout)?;
    Ok(String::from_utf8_lossy(&answer).trim().to_string())
}

/// One HTTP/1.1 GET over a new connection; returns the status and body.
pub fn http_get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    Ok((status, buf[split + 4..].to_vec()))
}

/// Asks `addr` for `/whoami` every 200 ms, each try given `try_timeout`, until an HTTP
/// answer comes or `limit` passes; whether one came. Run it in the client's namespace.
pub fn wait_answer(addr: SocketAddr, try_timeout: Duration, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if http_get(addr, "/whoami", try_timeout).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// GET /blob, reading `pace` apart in 8 KB steps so that the transfer lasts seconds; sends
/// the serving backend's name once the headers arrive and returns the body.
pub fn slow_download(
    addr: SocketAddr,
    pace: Duration,
    started: std::sync::mpsc::Sender<String>,
) -> std::io::Result<Vec<u8>> {
    // Long enough for the router to drop a dead next hop and TCP to retransmit after it.
    slow_download_for(addr, pace, Duration::from_secs(30), started)
}

/// [`slow_download`] giving up when no byte came for `read_timeout` (a test that expects
/// its downloads to be cut waits this long for them to say so).
pub fn slow_download_for(
    addr: SocketAddr,
    pace: Duration,
    read_timeout: Duration,
    started: std::sync::mpsc::Sender<String>,
) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(read_timeout))?;
    write!(
        s,
        "GET /blob HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
    )?;
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut told = false;
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&chunk[..n]);
        if !told && let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_string();
            let name = head
                .lines()
                .find_map(|l| l.strip_prefix("X-Backend: "))
                .unwrap_or("?")
                .to_string();
            let _ = started.send(name);
            told = true;
        }
        std::thread::sleep(pace);
    }
    let end = data
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of headers"))?;
    Ok(data[end + 4..].to_vec())
}

/// One UDP request/response; returns the reply.
pub fn udp_ask(addr: SocketAddr, payload: &[u8], timeout: Duration) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if addr.is_ipv6() {
        "[::]:0".parse().expect("literal")
    } else {
        "0.0.0.0:0".parse().expect("literal")
    };
    let s = UdpSocket::bind(bind)?;
    s.set_read_timeout(Some(timeout))?;
    s.connect(addr)?;
    s.send(payload)?;
    let mut buf = [0u8; 2048];
    let n = s.recv(&mut buf)?;
    Ok(buf[..n].to_vec())
}

/// What the client saw through one VIP.
#[derive(Debug, Clone, Default)]
pub struct VipReport {
    pub vip: String,
    pub mode: String,
    pub requests: usize,
    pub per_backend: BTreeMap<String, usize>,
    pub failures: usize,
    pub first_error: Option<String>,
    pub blob_intact: bool,
    pub udp_replies: usize,
    pub udp_sent: usize,
}

impl VipReport {
    /// Everything answered, the blob arrived intact and UDP answered.
    pub fn ok(&self) -> bool {
        self.failures == 0 && self.blob_intact && self.udp_replies == self.udp_sent
    }
}

/// Sends `requests` HTTP requests, one 1 MB download and a few UDP requests through a VIP.
/// Run it from the client namespace.
pub fn exercise_vip(mode: LabMode, v6: bool, requests: usize, stop: Arc<AtomicBool>) -> VipReport {
    let vip = mode.vip(v6);
    let addr = SocketAddr::new(vip, 80);
    let mut r = VipReport {
        vip: addr.to_string(),
        mode: mode.name().into(),
        requests,
        ..VipReport::default()
    };
    let timeout = Duration::from_secs(3);
    for _ in 0..requests {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        match http_get(addr, "/whoami", timeout) {
            Ok((200, body)) => {
                *r.per_backend
                    .entry(String::from_utf8_lossy(&body).into_owned())
                    .or_default() += 1
            }
            Ok((status, _)) => {
                r.failures += 1;
                r.first_error.get_or_insert(format!("status {status}"));
            }
            Err(e) => {
                r.failures += 1;
                r.first_error.get_or_insert(e.to_string());
            }
        }
    }
    match http_get(addr, "/blob", Duration::from_secs(10)) {
        Ok((200, body)) => r.blob_intact = body == blob(),
        Ok((status, _)) => {
            r.first_error
                .get_or_insert(format!("blob: status {status}"));
        }
        Err(e) => {
            r.first_error.get_or_insert(format!("blob: {e}"));
        }
    }
    for i in 0..4 {
        r.udp_sent += 1;
        match udp_ask(addr, format!("ping{i}").as_bytes(), timeout) {
            Ok(reply) if reply.ends_with(format!(":ping{i}").as_bytes()) => r.udp_replies += 1,
            Ok(reply) => {
                r.first_error.get_or_insert(format!(
                    "udp: unexpected reply {:?}",
                    String::from_utf8_lossy(&reply)
                ));
            }
            Err(e) => {
                r.first_error.get_or_insert(format!("udp: {e}"));
            }
        }
    }
    r
}

/// Formats the reports as the table `sluice lab` prints.
pub fn format_reports(reports: &[VipReport]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:<22} {:>5} {:>6}  {:<28} {:<9} udp",
        "mode", "vip", "ok", "failed", "requests per backend", "1MB body"
    );
    for r in reports {
        let spread: Vec<String> = r
            .per_backend
            .iter()
            .map(|(b, n)| format!("{b}={n}"))
            .collect();
        let _ = writeln!(
            s,
            "{:<14} {:<22} {:>5} {:>6}  {:<28} {:<9} {}/{}{}",
            r.mode,
            r.vip,
            r.requests - r.failures,
            r.failures,
            spread.join(" "),
            if r.blob_intact { "intact" } else { "BROKEN" },
            r.udp_replies,
            r.udp_sent,
            r.first_error
                .as_ref()
                .map(|e| format!("  ({e})"))
                .unwrap_or_default()
        );
    }
    s
}
