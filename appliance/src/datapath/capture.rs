//! `sluice capture` in the datapath: the frames of a few endpoints as the appliance received
//! and sent them, from the two places that see them and tcpdump does not (issue 46).
//!
//! - The XDP program (bpf/capture.h) copies a matching frame into a ring buffer as it
//!   arrives and again as it leaves when the program forwards it itself (a flow cache hit, a
//!   stateless or outbound answer): [`XdpMaps`] arms it and reads the ring.
//! - The workers copy the frames the engine receives and sends ([`Tap`]): a frame the engine
//!   took in because it matched is copied on its way out whatever it became (a NAT rewrite
//!   changes both addresses), and a frame that did not match is copied on its way out when
//!   what it became matches.
//!
//! Both are off unless a capture runs: the program then looks up one array slot per frame
//! (`capture_conf`), the workers load one flag ([`Tap::is_on`]). While a capture runs, the
//! workers take a lock per matching frame; the capture is a diagnostic, not a datapath.

use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use super::DatapathError;
use super::abi::{
    capture_conf, capture_head, capture_key, capture_stage, defines, ip_family, maps,
};
use super::steer::bpf_err;

/// Bytes of a frame a record keeps at most (bpf/consts.h CAPTURE_SNAP_MAX).
pub const SNAP_MAX: u32 = defines::CAPTURE_SNAP_MAX;
/// Endpoints a capture may name (the program's `capture_match`).
pub const MAX_ENDPOINTS: usize = maps::CAPTURE_MATCH.entries as usize;

/// Where a frame was copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    /// As the XDP program received it.
    XdpIn,
    /// As the XDP program forwarded it itself.
    XdpOut,
    /// As the engine received it.
    EngineIn,
    /// As the engine sent it.
    EngineOut,
}

impl Stage {
    /// Every stage, in the order of the capture file's interfaces.
    pub const ALL: [Stage; 4] = [
        Stage::XdpIn,
        Stage::XdpOut,
        Stage::EngineIn,
        Stage::EngineOut,
    ];

    /// The name of the capture file's interface for this stage.
    pub fn name(self) -> &'static str {
        match self {
            Stage::XdpIn => "xdp-in",
            Stage::XdpOut => "xdp-out",
            Stage::EngineIn => "engine-in",
            Stage::EngineOut => "engine-out",
        }
    }

    /// What the stage's frames are, for the capture file.
    pub fn description(self) -> &'static str {
        match self {
            Stage::XdpIn => "frames as the XDP program received them",
            Stage::XdpOut => "frames the XDP program forwarded itself (flow cache, answers)",
            Stage::EngineIn => "frames as the engine received them",
            Stage::EngineOut => "frames as the engine sent them",
        }
    }
}

/// One endpoint of a capture: an address, and a port or any port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub addr: IpAddr,
    pub port: Option<u16>,
}

/// One copied frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub stage: Stage,
    /// The interface it arrived on (or, out of the engine, left by).
    pub ifindex: u32,
    /// When, on the CLOCK_MONOTONIC clock.
    pub mono_ns: u64,
    /// The frame's length.
    pub len: u32,
    /// Its first bytes, up to the snap length.
    pub data: Vec<u8>,
}

/// The addresses and ports of a frame (Ethernet and its VLAN tags as `wire::l3_offset` walks them, IPv4 or IPv6): the
/// ports only for TCP and UDP right after the IP header, and not in a later fragment.
fn endpoints_of(frame: &[u8]) -> Option<[(IpAddr, Option<u16>); 2]> {
    let eth = wire::EthernetFrame::new_checked(frame).ok()?;
    let (l3, ethertype, _) = wire::l3_offset(&eth).ok()?;
    let ip = frame.get(l3..)?;
    let (src, dst, proto, l4, later_fragment) = match ethertype {
        wire::EtherType::Ipv4 => {
            let h = ip.get(..20)?;
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let src: [u8; 4] = h[12..16].try_into().ok()?;
            let dst: [u8; 4] = h[16..20].try_into().ok()?;
            let offset = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
            (src.into(), dst.into(), h[9], ihl, offset != 0)
        }
        wire::EtherType::Ipv6 => {
            let h = ip.get(..40)?;
            let src: [u8; 16] = h[8..24].try_into().ok()?;
            let dst: [u8; 16] = h[24..40].try_into().ok()?;
            (src.into(), dst.into(), h[6], 40, false)
        }
        _ => return None,
    };
    let ports = (proto == 6 || proto == 17)
        .then(|| ip.get(l4..l4 + 4))
        .flatten()
        .filter(|_| !later_fragment)
        .map(|p| {
            (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            )
        });
    Some([(src, ports.map(|p| p.0)), (dst, ports.map(|p| p.1))])
}

/// Whether either address of `frame` (with its port, where the endpoint names one) is one of
/// `endpoints`.
pub fn matches(endpoints: &[Endpoint], frame: &[u8]) -> bool {
    let Some(ends) = endpoints_of(frame) else {
        return false;
    };
    ends.iter().any(|(addr, port)| {
        endpoints
            .iter()
            .any(|e| e.addr == *addr && (e.port.is_none() || e.port == *port))
    })
}

#[derive(Debug)]
struct TapRun {
    endpoints: Vec<Endpoint>,
    snaplen: usize,
    records: Vec<Record>,
    /// Records the run keeps at most; matching frames beyond are counted in `lost`.
    room: usize,
    lost: u64,
}

/// The workers' side of a capture: off unless one runs.
#[derive(Debug, Default)]
pub struct Tap {
    on: AtomicBool,
    run: Mutex<Option<TapRun>>,
}

impl Tap {
    /// Whether a capture runs: the one load per frame the workers pay when none does.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<TapRun>> {
        self.run.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts a capture of `endpoints`, keeping `room` records of at most `snaplen` bytes.
    pub fn start(&self, endpoints: Vec<Endpoint>, snaplen: u32, room: usize) {
        *self.lock() = Some(TapRun {
            endpoints,
            snaplen: snaplen.min(SNAP_MAX) as usize,
            records: Vec::new(),
            room,
            lost: 0,
        });
        self.on.store(true, Ordering::Release);
    }

    /// Ends the capture: its records and the matching frames it had no room for.
    pub fn stop(&self) -> (Vec<Record>, u64) {
        self.on.store(false, Ordering::Release);
        self.lock()
            .take()
            .map(|r| (r.records, r.lost))
            .unwrap_or_default()
    }

    /// Records so far.
    pub fn len(&self) -> usize {
        self.lock().as_ref().map_or(0, |r| r.records.len())
    }

    /// Whether no record was taken yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A frame as it reached the engine: copied when it matches, and whether it did (then
    /// its way out is copied too: [`Tap::sent`]).
    pub fn received(&self, frame: &[u8], ifindex: u32, now: u64) -> bool {
        self.copy(Stage::EngineIn, frame, ifindex, now, false)
    }

    /// A frame as the engine sent it: copied when it matched on its way in (`took_in`) or
    /// matches now.
    pub fn sent(&self, frame: &[u8], ifindex: u32, now: u64, took_in: bool) {
        self.copy(Stage::EngineOut, frame, ifindex, now, took_in);
    }

    fn copy(&self, stage: Stage, frame: &[u8], ifindex: u32, now: u64, force: bool) -> bool {
        let mut g = self.lock();
        let Some(run) = g.as_mut() else {
            return false;
        };
        if !force && !matches(&run.endpoints, frame) {
            return false;
        }
        if run.records.len() >= run.room {
            run.lost += 1;
            return true;
        }
        run.records.push(Record {
            stage,
            ifindex,
            mono_ns: now,
            len: frame.len() as u32,
            data: frame[..frame.len().min(run.snaplen)].to_vec(),
        });
        true
    }
}

/// The XDP program's capture maps (bpf/capture.h), held beyond the program's borrow.
#[derive(Debug)]
pub struct XdpMaps {
    pub(super) conf: MapHandle,
    pub(super) matches: MapHandle,
    pub(super) ring: MapHandle,
}

impl XdpMaps {
    /// Handles on `steer`'s capture maps, which outlive its borrow.
    pub fn of(steer: &super::steer::Steer) -> Result<XdpMaps, DatapathError> {
        let handle = |def| {
            MapHandle::try_from(&steer.map(def)?)
                .map_err(|e| bpf_err("opening the capture maps", e))
        };
        Ok(XdpMaps {
            conf: handle(maps::CAPTURE_CONF)?,
            matches: handle(maps::CAPTURE_MATCH)?,
            ring: handle(maps::CAPTURE_RING)?,
        })
    }

    /// Another handle on the same maps.
    pub fn try_clone(&self) -> Result<XdpMaps, DatapathError> {
        let dup = |m: &MapHandle| {
            MapHandle::try_from(m).map_err(|e| bpf_err("opening the capture maps", e))
        };
        Ok(XdpMaps {
            conf: dup(&self.conf)?,
            matches: dup(&self.matches)?,
            ring: dup(&self.ring)?,
        })
    }

    /// Has the program copy the frames of `endpoints` (at most `snaplen` bytes of each).
    pub fn arm(&self, endpoints: &[Endpoint], snaplen: u32) -> Result<(), DatapathError> {
        self.clear_matches()?;
        for e in endpoints {
            let mut k = capture_key {
                port: e.port.unwrap_or(0).to_be(),
                ..Default::default()
            };
            match e.addr {
                IpAddr::V4(a) => {
                    k.addr[..4].copy_from_slice(&a.octets());
                    k.family = ip_family::FAMILY_V4;
                }
                IpAddr::V6(a) => {
                    k.addr = a.octets();
                    k.family = ip_family::FAMILY_V6;
                }
            }
            self.matches
                .update(&k.to_bytes(), &[1], MapFlags::ANY)
                .map_err(|e| bpf_err("writing the capture's endpoints", e))?;
        }
        self.set(true, snaplen.clamp(1, SNAP_MAX))
    }

    /// Stops the program copying frames (also what a process that starts does, in case the
    /// one before it died with a capture running).
    pub fn disarm(&self) -> Result<(), DatapathError> {
        self.set(false, 0)?;
        self.clear_matches()
    }

    fn set(&self, on: bool, snaplen: u32) -> Result<(), DatapathError> {
        let c = capture_conf {
            on: u32::from(on),
            snaplen,
        };
        self.conf
            .update(&0u32.to_ne_bytes(), &c.to_bytes(), MapFlags::ANY)
            .map_err(|e| bpf_err("switching the capture", e))
    }

    fn clear_matches(&self) -> Result<(), DatapathError> {
        let keys: Vec<Vec<u8>> = self.matches.keys().collect();
        for k in keys {
            // Gone already: nothing to clear.
            let _ = self.matches.delete(&k);
        }
        Ok(())
    }

    /// Reads the ring until `done` says so (it is asked after every wait of at most
    /// `wait`), handing each record to `each`. The caller drains once before arming, so
    /// records a capture before it left are not taken for its own.
    pub fn read(
        &self,
        wait: std::time::Duration,
        mut each: impl FnMut(Record),
        mut done: impl FnMut() -> bool,
    ) -> Result<(), DatapathError> {
        let mut b = libbpf_rs::RingBufferBuilder::new();
        b.add(&self.ring, |bytes: &[u8]| {
            if let Some(r) = record(bytes) {
                each(r);
            }
            0
        })
        .map_err(|e| bpf_err("reading the capture ring", e))?;
        let ring = b
            .build()
            .map_err(|e| bpf_err("reading the capture ring", e))?;
        loop {
            ring.poll(wait)
                .map_err(|e| bpf_err("reading the capture ring", e))?;
            if done() {
                // What came while deciding.
                ring.consume()
                    .map_err(|e| bpf_err("reading the capture ring", e))?;
                return Ok(());
            }
        }
    }
}

/// A ring record: its head, then the frame's bytes.
fn record(bytes: &[u8]) -> Option<Record> {
    let h = capture_head::from_bytes(bytes)?;
    let data = bytes.get(capture_head::LEN..capture_head::LEN + h.caplen as usize)?;
    let stage = match h.stage {
        capture_stage::CAP_XDP_IN => Stage::XdpIn,
        capture_stage::CAP_XDP_OUT => Stage::XdpOut,
        _ => return None,
    };
    Some(Record {
        stage,
        ifindex: h.ifindex,
        mono_ns: h.ts,
        len: h.len,
        data: data.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn syn(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[14 + 12..14 + 16].copy_from_slice(&src);
        f[14 + 16..14 + 20].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    fn ep(a: [u8; 4], port: Option<u16>) -> Endpoint {
        Endpoint {
            addr: Ipv4Addr::from(a).into(),
            port,
        }
    }

    #[test]
    fn a_frame_matches_by_either_address_and_the_port_when_one_is_named() {
        let f = syn([10, 0, 0, 1], 40000, [10, 0, 1, 10], 80);
        assert!(matches(&[ep([10, 0, 1, 10], Some(80))], &f));
        assert!(matches(&[ep([10, 0, 1, 10], None)], &f));
        assert!(matches(&[ep([10, 0, 0, 1], Some(40000))], &f), "source");
        assert!(!matches(&[ep([10, 0, 1, 10], Some(443))], &f));
        assert!(!matches(&[ep([10, 0, 1, 11], None)], &f));
        for n in 0..f.len() {
            // A cut frame never panics; one without its ports matches by address only.
            let _ = matches(&[ep([10, 0, 1, 10], Some(80))], &f[..n]);
        }
        assert!(matches(&[ep([10, 0, 1, 10], None)], &f[..34]));
        assert!(!matches(&[ep([10, 0, 1, 10], Some(80))], &f[..34]));
    }

    #[test]
    fn the_tap_copies_matching_frames_and_their_way_out_and_counts_what_had_no_room() {
        let tap = Tap::default();
        let f = syn([10, 0, 0, 1], 40000, [10, 0, 1, 10], 80);
        let other = syn([10, 0, 0, 2], 40000, [10, 0, 1, 99], 80);
        assert!(!tap.is_on() && !tap.received(&f, 1, 0), "off: nothing");
        tap.start(vec![ep([10, 0, 1, 10], Some(80))], 40, 3);
        assert!(tap.is_on());
        assert!(tap.received(&f, 1, 5));
        // Rewritten to a backend: copied because it matched on the way in.
        let out = syn([10, 0, 0, 1], 40000, [10, 0, 2, 1], 8080);
        tap.sent(&out, 2, 6, true);
        assert!(!tap.received(&other, 1, 7));
        tap.sent(&other, 2, 8, false);
        assert!(tap.received(&f, 1, 9));
        assert!(tap.received(&f, 1, 10), "matched, no room: lost");
        let (records, lost) = tap.stop();
        assert!(!tap.is_on());
        assert_eq!(lost, 1);
        let stages: Vec<_> = records.iter().map(|r| r.stage).collect();
        assert_eq!(stages, [Stage::EngineIn, Stage::EngineOut, Stage::EngineIn]);
        assert_eq!(records[1].data, out[..40], "cut at the snap length");
        assert_eq!(records[1].len, out.len() as u32);
        assert_eq!((records[1].ifindex, records[1].mono_ns), (2, 6));
    }

    #[test]
    fn a_ring_record_is_its_head_then_the_frame() {
        let h = capture_head {
            ts: 42,
            ifindex: 3,
            len: 60,
            caplen: 4,
            stage: capture_stage::CAP_XDP_OUT,
            ..Default::default()
        };
        let mut b = h.to_bytes().to_vec();
        b.extend_from_slice(&[1, 2, 3, 4, 0, 0]);
        let r = record(&b).expect("a record");
        assert_eq!(
            (r.stage, r.ifindex, r.mono_ns, r.len, r.data),
            (Stage::XdpOut, 3, 42, 60, vec![1, 2, 3, 4])
        );
        assert!(record(&b[..capture_head::LEN + 3]).is_none(), "cut short");
    }
}
