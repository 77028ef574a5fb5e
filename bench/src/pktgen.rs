//! A kernel-side traffic generator for packet-rate benchmarks and tests.
//!
//! Userspace generators cannot saturate an AF_XDP datapath on a small machine; the kernel's
//! `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` can: it turns one template frame
//! into `count` real frames and runs bpf/pktgen.bpf.c on each, which transmits them out of
//! the chosen interface with `XDP_TX`, with no userspace copy per frame.
//! The far end of the link must run a native XDP program (the steering program does) or
//! have GRO on, or veth drops XDP-transmitted frames.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use libbpf_rs::{Object, ObjectBuilder, ProgramInput};
use wire::{EtherType, EthernetRepr, FrameRepr, IpProtocol, Ipv4Repr, L4Repr, MacAddr, UdpRepr};

/// Where build.rs put the object clang built from bpf/pktgen.bpf.c (tests attach it as
/// "some other XDP program").
pub const OBJECT_PATH: &str = concat!(env!("OUT_DIR"), "/pktgen.bpf.o");
static PKTGEN_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/pktgen.bpf.o"));
const PROG_NAME: &str = "sluice_pktgen";
/// `BPF_F_TEST_XDP_LIVE_FRAMES` from <linux/bpf.h>.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// The kernel caps `repeat` per call; larger counts are split into runs of this size.
const MAX_PER_RUN: u32 = 1 << 24;

/// Why the generator could not send.
#[derive(Debug, thiserror::Error)]
pub enum PktgenError {
    /// The kernel refused the program.
    #[error("loading the traffic generator bpf/pktgen.bpf.c (needs root or CAP_BPF): {0}")]
    Load(#[source] libbpf_rs::Error),
    /// The object lacks the program (built from another source).
    #[error("the generator object has no program {PROG_NAME}: rebuild the bench crate")]
    NoProgram,
    /// A template the kernel cannot turn into frames.
    #[error("generator frame of {0} bytes: must hold an Ethernet header and fit a page")]
    Frame(usize),
    /// A live-frame test run failed.
    #[error("live-frame test run on ifindex {ifindex}: {source}")]
    Send {
        /// The interface the frames were to leave by.
        ifindex: u32,
        #[source]
        source: libbpf_rs::Error,
    },
}

/// The loaded generator program.
pub struct Pktgen {
    obj: Object,
}

impl std::fmt::Debug for Pktgen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pktgen")
    }
}

impl Pktgen {
    /// Loads the generator (needs CAP_BPF / root).
    pub fn load() -> Result<Pktgen, PktgenError> {
        let obj = ObjectBuilder::default()
            .open_memory(PKTGEN_OBJ)
            .and_then(|o| o.load())
            .map_err(PktgenError::Load)?;
        Ok(Pktgen { obj })
    }

    /// Transmits `count` copies of `frame` out of interface `ifindex` (which must be in the
    /// calling thread's network namespace) and returns how long the kernel took.
    pub fn send(&self, ifindex: u32, frame: &[u8], count: u32) -> Result<Duration, PktgenError> {
        if frame.len() < 14 || frame.len() > 3000 {
            return Err(PktgenError::Frame(frame.len()));
        }
        let prog = self
            .obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(PROG_NAME))
            .ok_or(PktgenError::NoProgram)?;
        let started = Instant::now();
        let mut left = count;
        while left > 0 {
            let n = left.min(MAX_PER_RUN);
            let mut ctx = crate::abi::xdp_ctx(frame.len() as u32, ifindex);
            let input = ProgramInput {
                context_in: Some(&mut ctx),
                data_in: Some(frame),
                flags: BPF_F_TEST_XDP_LIVE_FRAMES,
                repeat: n,
                ..Default::default()
            };
            prog.test_run(input)
                .map_err(|source| PktgenError::Send { ifindex, source })?;
            left -= n;
        }
        Ok(started.elapsed())
    }
}

/// A UDP/IPv4 frame of exactly `len` bytes (at least 42) with valid IPv4 and UDP checksums,
/// for generator templates: TTL 64, DF, payload bytes counting up from 0. Built with wire's
/// frame builder, which derives lengths and checksums from the layers.
pub fn udp4_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    len: usize,
) -> Vec<u8> {
    let len = len.max(42);
    let payload: Vec<u8> = (0..len - 42).map(|i| i as u8).collect();
    let frame = FrameRepr {
        ethernet: EthernetRepr {
            src: MacAddr(src_mac),
            dst: MacAddr(dst_mac),
            vlan_tci: None,
            ethertype: EtherType::Ipv4,
        },
        ip: Ipv4Repr::new(src, dst, IpProtocol::Udp, 0).into(),
        l4: L4Repr::Udp(UdpRepr {
            src_port: sport,
            dst_port: dport,
            payload: &payload,
        }),
    };
    let mut f = vec![0u8; len];
    frame
        .emit(&mut f, true)
        .expect("the buffer is exactly the frame's length");
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_frames_have_valid_checksums() {
        let f = udp4_frame(
            [2; 6],
            [4; 6],
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            1000,
            9,
            64,
        );
        assert_eq!(f.len(), 64);
        FrameRepr::parse(&f, true).expect("lengths and both checksums verify");
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        assert_eq!(
            udp4_frame(
                [0; 6],
                [0; 6],
                Ipv4Addr::LOCALHOST,
                Ipv4Addr::LOCALHOST,
                1,
                2,
                10
            )
            .len(),
            42
        );
    }

    /// The bench's own template, byte for byte as the generator has always sent it.
    #[test]
    fn the_bench_template_is_unchanged() {
        let f = udp4_frame(
            [2, 0, 0, 0, 0, 9],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(10, 80, 1, 2),
            Ipv4Addr::new(192, 0, 2, 10),
            40000,
            5001,
            64,
        );
        let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "0200000000010200000000090800450000320000400040116d5f0a500102c000020a9c40138900\
             1e1413000102030405060708090a0b0c0d0e0f101112131415"
        );
    }
}
