//! `POST /v1/capture` (`sluice capture`): arms the datapath's two capture points
//! (`datapath::capture`), collects until the request's frame count or duration, disarms and
//! answers with the frames as pcapng, one interface per stage and direction (Wireshark shows
//! "xdp-in" beside "engine-out"), each packet's comment naming the Ethernet interface.
//!
//! One capture runs at a time (a second gets 409). The whole capture is collected before the
//! reply, so a request holds at most `MAX_COUNT` frames of at most `SNAP_MAX` bytes.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::CaptureRequest;

use crate::config::Config;
use crate::datapath::capture::{Endpoint, Record, SNAP_MAX, Stage, Tap, XdpMaps};
use crate::datapath::{Datapath, DatapathError};

/// Frames one capture takes at most.
pub const MAX_COUNT: u32 = 10_000;
/// The longest capture.
pub const MAX_DURATION: Duration = Duration::from_secs(600);
/// The shortest snap length (the headers of a tunnelled IPv6 TCP frame fit in it).
pub const MIN_SNAPLEN: u32 = 64;
/// How long the reader waits on the ring before it looks at the clock and the count.
const POLL: Duration = Duration::from_millis(20);

/// What a capture needs of the running datapath; empty without one.
#[derive(Debug, Default)]
pub struct Hub {
    points: Mutex<Option<(Arc<Tap>, XdpMaps)>>,
    /// (ifindex, name) of the datapath's interfaces.
    interfaces: Mutex<Vec<(u32, String)>>,
    busy: AtomicBool,
    /// Captures run to the end (`sluice_captures_total`).
    pub runs: AtomicU64,
    /// Frames they delivered.
    pub frames: AtomicU64,
    /// Frames that matched but did not fit in their count.
    pub over_count: AtomicU64,
}

/// Why a capture was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The request is not one the appliance can run; `field` names the part.
    #[error("{message}")]
    Invalid {
        message: String,
        field: &'static str,
    },
    #[error("no VIP named {0:?}")]
    UnknownVip(String),
    #[error("a capture is running already; one runs at a time")]
    Busy,
    #[error("no datapath runs, so there is nothing to capture")]
    NoDatapath,
    #[error("capture failed: {0}")]
    Datapath(#[from] DatapathError),
    #[error("writing the capture file failed: {0}")]
    Write(#[from] std::io::Error),
}

/// A finished capture.
#[derive(Debug)]
pub struct Captured {
    /// The pcapng file.
    pub pcapng: Vec<u8>,
    pub frames: usize,
    /// Frames that matched but did not fit in the count.
    pub lost: u64,
}

impl Hub {
    /// Takes the capture points of a datapath that just started (and disarms the program's).
    pub fn attach(&self, dp: &Datapath) -> Result<(), DatapathError> {
        let points = dp.capture()?;
        *lock(&self.points) = Some(points);
        *lock(&self.interfaces) = dp
            .interfaces()
            .iter()
            .map(|i| (i.ifindex, i.name.clone()))
            .collect();
        Ok(())
    }

    /// Runs `req` against `config` (blocking: for `spawn_blocking`).
    pub fn run(
        &self,
        config: Option<&Config>,
        req: &CaptureRequest,
    ) -> Result<Captured, CaptureError> {
        let (endpoints, duration) = check(config, req)?;
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(CaptureError::Busy);
        }
        /// Frees the slot however the capture ends (a panic included).
        struct Slot<'a>(&'a AtomicBool);
        impl Drop for Slot<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _slot = Slot(&self.busy);
        self.run_one(&endpoints, duration, req)
    }

    fn run_one(
        &self,
        endpoints: &[Endpoint],
        duration: Duration,
        req: &CaptureRequest,
    ) -> Result<Captured, CaptureError> {
        let (tap, maps) = {
            let g = lock(&self.points);
            let (tap, maps) = g.as_ref().ok_or(CaptureError::NoDatapath)?;
            (Arc::clone(tap), maps.try_clone()?)
        };
        let count = req.count as usize;
        // What a capture before this one left in the ring is not this one's.
        maps.read(Duration::ZERO, |_| {}, || true)?;
        tap.start(endpoints.to_vec(), req.snaplen, count);
        let xdp = RefCell::new(Vec::new());
        let lost = Cell::new(0u64);
        let keep = |r: Record| {
            let mut x = xdp.borrow_mut();
            if x.len() < count {
                x.push(r);
            } else {
                lost.set(lost.get() + 1);
            }
        };
        let armed = maps.arm(endpoints, req.snaplen);
        let deadline = Instant::now() + duration;
        let read = armed.and_then(|()| {
            maps.read(POLL, keep, || {
                xdp.borrow().len() + tap.len() >= count || Instant::now() >= deadline
            })
        });
        let disarmed = maps.disarm();
        let (engine, engine_lost) = tap.stop();
        read?;
        disarmed?;
        // Frames copied before the program saw the switch.
        maps.read(Duration::ZERO, keep, || true)?;
        let mut lost = lost.get();
        let mut all = xdp.into_inner();
        all.extend(engine);
        all.sort_by_key(|r| r.mono_ns);
        lost += engine_lost + all.len().saturating_sub(count) as u64;
        all.truncate(count);
        let names = lock(&self.interfaces).clone();
        let pcapng = pcapng(&all, &names, req.snaplen, lost)?;
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.frames.fetch_add(all.len() as u64, Ordering::Relaxed);
        self.over_count.fetch_add(lost, Ordering::Relaxed);
        Ok(Captured {
            pcapng,
            frames: all.len(),
            lost,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn invalid(message: String, field: &'static str) -> CaptureError {
    CaptureError::Invalid { message, field }
}

/// The request's endpoints and duration, or why it cannot run.
fn check(
    config: Option<&Config>,
    req: &CaptureRequest,
) -> Result<(Vec<Endpoint>, Duration), CaptureError> {
    if !(1..=MAX_COUNT).contains(&req.count) {
        return Err(invalid(
            format!("count must be 1 to {MAX_COUNT}, not {}", req.count),
            "count",
        ));
    }
    let duration = Duration::from_millis(req.duration_ms);
    if req.duration_ms == 0 || duration > MAX_DURATION {
        return Err(invalid(
            format!(
                "duration_ms must be 1 to {}, not {}",
                MAX_DURATION.as_millis(),
                req.duration_ms
            ),
            "duration_ms",
        ));
    }
    if !(MIN_SNAPLEN..=SNAP_MAX).contains(&req.snaplen) {
        return Err(invalid(
            format!(
                "snaplen must be {MIN_SNAPLEN} to {SNAP_MAX}, not {}",
                req.snaplen
            ),
            "snaplen",
        ));
    }
    let mut endpoints = Vec::new();
    if let Some(name) = &req.vip {
        let vip = config
            .and_then(|c| c.vips.iter().find(|v| &v.name == name))
            .ok_or_else(|| CaptureError::UnknownVip(name.clone()))?;
        endpoints.extend(vip_endpoints(vip));
    }
    for e in &req.endpoints {
        endpoints.push(parse_endpoint(e)?);
    }
    if endpoints.is_empty() {
        return Err(invalid(
            "name a VIP or at least one endpoint to capture".into(),
            "vip",
        ));
    }
    endpoints.sort_by_key(|e| (e.addr, e.port));
    endpoints.dedup();
    if endpoints.len() > crate::datapath::capture::MAX_ENDPOINTS {
        return Err(invalid(
            format!(
                "{} endpoints; a capture takes at most {}",
                endpoints.len(),
                crate::datapath::capture::MAX_ENDPOINTS
            ),
            "endpoints",
        ));
    }
    Ok((endpoints, duration))
}

/// A VIP's frames: to and from its address and port, and to and from its backends (NAT's and
/// FullNAT's return traffic, which carries no VIP address on its way in). A tenant VIP's
/// frames are VXLAN between VTEPs: they are matched by the VTEP addresses.
fn vip_endpoints(vip: &crate::config::model::Vip) -> Vec<Endpoint> {
    let port = |p: u16| (p != 0).then_some(p);
    let mut v = vec![Endpoint {
        addr: vip.address,
        port: port(vip.port),
    }];
    for b in &vip.backends {
        v.push(match b.vtep {
            Some(vtep) => Endpoint {
                addr: vtep,
                port: None,
            },
            None => Endpoint {
                addr: b.address,
                port: port(b.port).or(port(vip.port)),
            },
        });
    }
    v
}

/// `ADDR`, `ADDR:PORT` or `[V6]:PORT`.
fn parse_endpoint(s: &str) -> Result<Endpoint, CaptureError> {
    if let Ok(addr) = s.parse::<IpAddr>() {
        return Ok(Endpoint { addr, port: None });
    }
    s.parse::<SocketAddr>()
        .map(|a| Endpoint {
            addr: a.ip(),
            port: Some(a.port()),
        })
        .map_err(|_| {
            invalid(
                format!("{s:?} is not an endpoint: ADDR, ADDR:PORT or [V6]:PORT"),
                "endpoints",
            )
        })
}

/// Nanoseconds to add to CLOCK_MONOTONIC for the Unix time.
fn unix_offset() -> u64 {
    let mono = crate::datapath::monotonic_ns();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    unix.saturating_sub(mono)
}

/// `records` as pcapng: an interface per stage, each packet's comment its Ethernet interface;
/// `lost` in the last stage's statistics.
fn pcapng(
    records: &[Record],
    names: &[(u32, String)],
    snaplen: u32,
    lost: u64,
) -> std::io::Result<Vec<u8>> {
    let interfaces: Vec<wire::pcapng::Interface> = Stage::ALL
        .iter()
        .map(|s| wire::pcapng::Interface {
            name: s.name().into(),
            description: s.description().into(),
            snaplen,
        })
        .collect();
    let mut w = wire::pcapng::Writer::new(Vec::new(), &interfaces)?;
    let offset = unix_offset();
    for r in records {
        let at = Stage::ALL.iter().position(|s| *s == r.stage).unwrap_or(0) as u32;
        let name = names
            .iter()
            .find(|(i, _)| *i == r.ifindex)
            .map_or_else(|| format!("ifindex {}", r.ifindex), |(_, n)| n.clone());
        w.write_packet(at, r.mono_ns + offset, r.len, &r.data, Some(&name))?;
    }
    let drops = if lost > 0 {
        vec![(Stage::ALL.len() as u32 - 1, lost)]
    } else {
        Vec::new()
    };
    w.finish(&drops, crate::datapath::monotonic_ns() + offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(count: u32, duration_ms: u64, snaplen: u32) -> CaptureRequest {
        CaptureRequest {
            vip: None,
            endpoints: vec!["10.0.0.1:80".into(), "2001:db8::1".into()],
            count,
            duration_ms,
            snaplen,
        }
    }

    #[test]
    fn a_request_out_of_bounds_is_refused_naming_its_field() {
        for (r, field) in [
            (req(0, 1000, 256), "count"),
            (req(MAX_COUNT + 1, 1000, 256), "count"),
            (req(10, 0, 256), "duration_ms"),
            (req(10, 600_001, 256), "duration_ms"),
            (req(10, 1000, 63), "snaplen"),
            (req(10, 1000, SNAP_MAX + 1), "snaplen"),
        ] {
            match check(None, &r) {
                Err(CaptureError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{r:?}: {other:?}"),
            }
        }
        let mut bad = req(10, 1000, 256);
        bad.endpoints = vec!["10.0.0.1:http".into()];
        assert!(matches!(
            check(None, &bad),
            Err(CaptureError::Invalid {
                field: "endpoints",
                ..
            })
        ));
        let mut none = req(10, 1000, 256);
        none.endpoints.clear();
        assert!(matches!(
            check(None, &none),
            Err(CaptureError::Invalid { field: "vip", .. })
        ));
        none.vip = Some("web".into());
        assert!(matches!(
            check(None, &none),
            Err(CaptureError::UnknownVip(_))
        ));
        let (eps, d) = check(None, &req(10, 1500, 256)).expect("valid");
        assert_eq!(d, Duration::from_millis(1500));
        assert_eq!(
            eps,
            [
                Endpoint {
                    addr: "10.0.0.1".parse().unwrap(),
                    port: Some(80)
                },
                Endpoint {
                    addr: "2001:db8::1".parse().unwrap(),
                    port: None
                }
            ]
        );
    }

    #[test]
    fn one_capture_at_a_time_and_a_failed_one_frees_its_slot() {
        let hub = Hub::default();
        let r = req(10, 1000, 256);
        assert!(matches!(hub.run(None, &r), Err(CaptureError::NoDatapath)));
        assert!(
            matches!(hub.run(None, &r), Err(CaptureError::NoDatapath)),
            "the failed capture left its slot taken"
        );
        hub.busy.store(true, Ordering::Release);
        assert!(matches!(hub.run(None, &r), Err(CaptureError::Busy)));
    }

    #[test]
    fn the_file_has_an_interface_per_stage_and_names_the_ethernet_interface() {
        let rec = |stage, mono_ns| Record {
            stage,
            ifindex: 7,
            mono_ns,
            len: 60,
            data: vec![0xab; 60],
        };
        let records = [rec(Stage::XdpIn, 10), rec(Stage::EngineOut, 20)];
        let b = pcapng(&records, &[(7, "eth1".into())], 128, 3).expect("written");
        let c = wire::pcapng::read(&b).expect("read back");
        let names: Vec<_> = c.interfaces.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["xdp-in", "xdp-out", "engine-in", "engine-out"]);
        let got: Vec<_> = c
            .packets
            .iter()
            .map(|p| (p.interface, p.comment.as_deref(), p.data.len()))
            .collect();
        assert_eq!(got, [(0, Some("eth1"), 60), (3, Some("eth1"), 60)]);
        assert!(c.packets[1].ts_unix_ns - c.packets[0].ts_unix_ns == 10);
        assert_eq!(c.drops, [(3, 3)]);
    }
}
