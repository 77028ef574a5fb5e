//! The bench's sink: bpf/sink.bpf.c on the sink namespace's s0, counting the frames that
//! arrive rewritten to the backend (and, apart, UDP that was not) and dropping them at the
//! driver's XDP hook, so the sink costs the same little for every forwarder.

use std::net::Ipv4Addr;

use std::mem::offset_of;

use crate::abi::put;
use crate::abi::sink::{rodata, sink_cfg, sink_counter};
use crate::counters::sum_percpu;
use crate::ifindex;

/// The object clang built from bpf/sink.bpf.c (see build.rs).
static SINK_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sink.bpf.o"));
const SINK_PROG: &str = "sluice_sink";
const SINK_MAP: &str = "sink_counters";

/// What the sink has counted since it was attached, summed over CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkCounts {
    /// IPv4 UDP frames to the backend's address and port.
    pub delivered: u64,
    /// Other IPv4 UDP frames (dropped as well).
    pub stray: u64,
}

/// The sink: bpf/sink.bpf.c, loaded for `backend:port` and (once attached) counting and
/// dropping at s0's driver-mode XDP hook, where a frame costs the least it can (no skb).
/// Dropping it detaches the program (the attachment is a BPF link).
pub(crate) struct SinkProgram {
    // Field order is drop order: the link (the attachment) goes before the object.
    link: Option<libbpf_rs::Link>,
    obj: libbpf_rs::Object,
}

impl SinkProgram {
    /// Loads the program for `backend:port` without attaching it.
    pub(crate) fn load(backend: Ipv4Addr, port: u16) -> Result<SinkProgram, String> {
        let mut open = libbpf_rs::ObjectBuilder::default()
            .open_memory(SINK_OBJ)
            .map_err(|e| format!("opening the sink program: {e}"))?;
        let mut configured = false;
        for mut m in open.maps_mut() {
            if m.name().to_string_lossy().ends_with(".rodata")
                && let Some(v) = m.initial_value_mut()
            {
                // struct sink_cfg: backend and port, both in network order.
                let at = offset_of!(rodata, cfg);
                configured = put(v, at + offset_of!(sink_cfg, backend), &backend.octets())
                    && put(v, at + offset_of!(sink_cfg, port), &port.to_be_bytes());
            }
        }
        if !configured {
            return Err("the sink program's .rodata holds no sink_cfg".into());
        }
        let obj = open
            .load()
            .map_err(|e| format!("loading the sink program: {e}"))?;
        Ok(SinkProgram { link: None, obj })
    }

    fn prog(&mut self) -> Result<libbpf_rs::ProgramMut<'_>, String> {
        self.obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(SINK_PROG))
            .ok_or_else(|| format!("sink object has no program {SINK_PROG}"))
    }

    /// Runs `frame` through the loaded program (BPF_PROG_TEST_RUN) and returns its XDP
    /// action; the counters move as they would on s0.
    #[cfg(test)]
    fn test_run(&mut self, frame: &[u8]) -> Result<u32, String> {
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        self.prog()?
            .test_run(input)
            .map(|out| out.return_value)
            .map_err(|e| format!("test-running the sink program: {e}"))
    }

    /// Attaches the program to `ifname` in the calling thread's namespace, in driver
    /// (native) mode: veth runs native XDP on its NAPI before any skb exists, while generic
    /// mode would build the skb first and save nothing.
    pub(crate) fn attach(&mut self, ifname: &str) -> Result<(), String> {
        use libbpf_rs::{Xdp, XdpFlags};
        use std::os::fd::AsFd;

        let ifindex = ifindex(ifname)? as i32;
        let prog = self.prog()?;
        // A link without mode flags takes the driver's hook when the driver has one (veth
        // does); checked below rather than assumed.
        let link = prog
            .attach_xdp(ifindex)
            .map_err(|e| format!("attaching the sink program to {ifname}: {e}"))?;
        let want = libbpf_rs::Program::id_from_fd(prog.as_fd())
            .map_err(|e| format!("the sink program's id: {e}"))?;
        let native = Xdp::new(prog.as_fd())
            .query_id(ifindex, XdpFlags::DRV_MODE)
            .map_err(|e| format!("querying {ifname}'s XDP program: {e}"))?;
        // Dropping the link detaches the program again.
        if native != want {
            return Err(format!(
                "the sink program is not on {ifname}'s native XDP hook (native program id \
                 {native}, the sink's {want})"
            ));
        }
        self.link = Some(link);
        Ok(())
    }

    pub(crate) fn counts(&self) -> Result<SinkCounts, String> {
        use libbpf_rs::{MapCore, MapFlags};

        let map = self
            .obj
            .maps()
            .find(|m| m.name() == std::ffi::OsStr::new(SINK_MAP))
            .ok_or_else(|| format!("sink object has no map {SINK_MAP}"))?;
        let slot = |i: u32| -> Result<u64, String> {
            let per_cpu = map
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| format!("reading {SINK_MAP}[{i}]: {e}"))?
                .ok_or_else(|| format!("{SINK_MAP}[{i}] is missing"))?;
            sum_percpu(&per_cpu).ok_or_else(|| format!("{SINK_MAP}[{i}] is not a u64"))
        };
        Ok(SinkCounts {
            delivered: slot(sink_counter::SINK_DELIVERED.0)?,
            stray: slot(sink_counter::SINK_STRAY.0)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BACKEND, GEN_ADDR, GEN_SPORT, PORT, VIP};

    /// bpf/sink.bpf.c through BPF_PROG_TEST_RUN (not attached anywhere, so only these
    /// frames move its counters): what it counts, what it drops, what it leaves the kernel.
    #[test]
    fn sink_program_counts_backend_frames_and_drops_all_udp() {
        use libbpf_rs::libbpf_sys::{XDP_DROP, XDP_PASS};

        assert!(
            lab::netns::is_root(),
            "this test loads bpf/sink.bpf.c into the kernel: run it as root"
        );
        let mut sink = SinkProgram::load(BACKEND, PORT).expect("the sink program loads");
        let mac = [0x02, 0, 0, 0, 0, 1];
        let udp = |dst: Ipv4Addr, dport: u16| {
            crate::pktgen::udp4_frame(mac, mac, GEN_ADDR, dst, GEN_SPORT, dport, 64)
        };
        let edit = |mut f: Vec<u8>, at: usize, bytes: &[u8]| {
            f[at..at + bytes.len()].copy_from_slice(bytes);
            f
        };
        let backend = udp(BACKEND, PORT);
        // One 4-byte IP option (ihl 6): the UDP header starts 4 bytes later.
        let mut options = backend.clone();
        options.splice(34..34, [1u8, 1, 1, 0]);
        options[14] = 0x46;
        let mut arp = edit(vec![0u8; 42], 12, &[0x08, 0x06]);
        arp[14..16].copy_from_slice(&[0, 1]);
        /// One frame, the XDP action it gets, and the counters after it (cumulative).
        struct Case {
            what: &'static str,
            frame: Vec<u8>,
            action: u32,
            after: (u64, u64),
        }
        let case = |what, frame, action, after| Case {
            what,
            frame,
            action,
            after,
        };
        let cases = [
            case(
                "rewritten to the backend",
                backend.clone(),
                XDP_DROP,
                (1, 0),
            ),
            case("with an IP option", options, XDP_DROP, (2, 0)),
            case("still to the VIP", udp(VIP, PORT), XDP_DROP, (2, 1)),
            case(
                "backend, other port",
                udp(BACKEND, PORT + 1),
                XDP_DROP,
                (2, 2),
            ),
            case(
                "a later fragment to the backend",
                edit(backend.clone(), 20, &[0x00, 0x02]),
                XDP_DROP,
                (2, 3),
            ),
            case(
                "UDP header cut short",
                backend[..14 + 20 + 4].to_vec(),
                XDP_DROP,
                (2, 4),
            ),
            case(
                "TCP to the backend",
                edit(backend.clone(), 23, &[6]),
                XDP_PASS,
                (2, 4),
            ),
            case("ARP", arp, XDP_PASS, (2, 4)),
            case(
                "IPv4 header cut short",
                backend[..30].to_vec(),
                XDP_PASS,
                (2, 4),
            ),
        ];
        for c in cases {
            let got = sink.test_run(&c.frame).expect("test run");
            assert_eq!(got, c.action, "{}: XDP action (1 drop, 2 pass)", c.what);
            let (delivered, stray) = c.after;
            assert_eq!(
                sink.counts().expect("counters"),
                SinkCounts { delivered, stray },
                "{}: counters after it",
                c.what
            );
        }
    }
}
