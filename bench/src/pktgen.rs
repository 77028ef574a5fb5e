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
            // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index,
            // egress_ifindex (all u32): the frame starts at 0 and arrives on queue 0.
            let mut ctx = [0u8; 24];
            ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
            ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
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
/// for generator templates.
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
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    let udp_len = ip_len - 20;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[20..22].copy_from_slice(&0x4000u16.to_be_bytes()); // DF
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&src.octets());
    f[30..34].copy_from_slice(&dst.octets());
    let c = fold(sum(&f[14..34]));
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let pseudo = sum(&src.octets()) + sum(&dst.octets()) + 17 + u32::from(udp_len);
    let c = match fold(pseudo + sum(&f[34..])) {
        0 => 0xffff,
        c => c,
    };
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

fn sum(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
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
        // A correct header sums (with its checksum) to all ones, which folds to zero.
        assert_eq!(fold(sum(&f[14..34])), 0, "IPv4 header checksum");
        let pseudo = sum(&f[26..34]) + 17 + u32::from(u16::from_be_bytes([f[38], f[39]]));
        assert_eq!(fold(pseudo + sum(&f[34..])), 0, "UDP checksum");
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
}
