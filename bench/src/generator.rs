//! The bench's traffic generator: bpf/generator.bpf.c run through live-frame BPF test runs
//! (`BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES`) from a thread inside the gen
//! namespace, in calls sized so the run ends near its deadline and notices Ctrl-C.
//!
//! The program is not bpf/pktgen.bpf.c (see [`crate::pktgen`]): live-frame test runs recycle
//! their pages without copying the template in again, and the kernel's forwarding path
//! (run B) rewrites every frame in place (destination MAC, TTL, DNAT) before the page comes
//! back. With a plain `XDP_TX` program the recycled frames then carry the sink's MAC and the
//! lb's kernel drops them as "other host", so run B would measure nothing. This program
//! stores the whole template into each frame before transmitting it, so every repetition
//! sends the same bytes whatever the consumer did to the page.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::mem::offset_of;
use std::net::Ipv4Addr;

use lab::netns::Netns;

use crate::abi::generator::{gen_cfg, rodata};
use crate::abi::{put, xdp_ctx};
use crate::{BenchError, FRAME_LEN, GEN_ADDR, GEN_SPORT, PORT, VIP};

/// Source ports per source address in a flow space: many clients with a few hundred
/// connections each, as in front of real services (and as flood mode, which counts per
/// source address, meets them).
pub const PORTS_PER_ADDR: u32 = 256;
/// The first source port of a flow space.
pub const FIRST_PORT: u16 = 10_000;
/// The first source address of a flow space: the bench's client network 10.82.0.0/16,
/// which lb routes to the gen namespace ([`CLIENT_NET`]), so the bench spoofs nothing
/// outside its lab.
pub const FIRST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 1);
/// The client network behind gen, as lb routes it.
pub const CLIENT_NET: &str = "10.82.0.0/16";
/// Source addresses a space may use: 10.82.0.1 to 10.82.255.254.
const MAX_ADDRS: u32 = 65_534;
/// The most flows a space holds: every address of the client network times the ports.
pub const MAX_FLOWS: u32 = MAX_ADDRS * PORTS_PER_ADDR;

/// The flows a generator cycles through: flow i comes from `FIRST_ADDR + i / ports` and
/// port `FIRST_PORT + i % ports`, to the VIP. One flow is the template's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpace {
    /// How many flows (1: the template's single flow).
    pub flows: u32,
    /// Source ports per address.
    pub ports: u32,
}

impl FlowSpace {
    /// The template's single flow.
    pub const ONE: FlowSpace = FlowSpace { flows: 1, ports: 1 };

    /// A space of `flows` flows (at least 1), as few addresses as the ports allow; `None`
    /// above [`MAX_FLOWS`].
    pub fn new(flows: u32) -> Option<FlowSpace> {
        (flows <= MAX_FLOWS).then(|| FlowSpace {
            flows: flows.max(1),
            ports: flows.clamp(1, PORTS_PER_ADDR),
        })
    }

    /// Source addresses the space uses.
    pub fn addresses(&self) -> u32 {
        self.flows.div_ceil(self.ports)
    }

    /// Flow `i`'s source address and port (`i` taken modulo the flow count), as the
    /// generator program sends it; the single flow is the template's.
    pub fn flow(&self, i: u64) -> (Ipv4Addr, u16) {
        if self.flows <= 1 {
            return (GEN_ADDR, GEN_SPORT);
        }
        let i = i % u64::from(self.flows);
        let addr = u32::from(FIRST_ADDR) + (i / u64::from(self.ports)) as u32;
        let port = u32::from(FIRST_PORT) + (i % u64::from(self.ports)) as u32;
        (Ipv4Addr::from(addr), port as u16)
    }
}

/// Frames in the first generator call of a flood. Every live-frame test run has a fixed
/// cost during which nothing is sent, so calls must be long; [`next_chunk`] sizes the
/// following ones from the rate seen. The same fixed cost is why the generator cannot be
/// paced to a chosen rate.
const FIRST_CHUNK: u32 = 250_000;
/// Target length of one generator call: long enough that the fixed cost is a small part
/// of the offer, short enough that the run ends close to its deadline and notices Ctrl-C
/// within a second.
const CALL_TARGET: Duration = Duration::from_millis(500);

/// The object clang built from bpf/generator.bpf.c (see build.rs).
static GENERATOR_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/generator.bpf.o"));
/// Name of the program inside it.
const GEN_PROG: &str = "sluice_bench_gen";
/// The longest template: `struct gen_cfg`'s `template` (bpf/generator.bpf.c's
/// `GEN_WORDS_MAX` words of 8 bytes).
const TEMPLATE_MAX: usize = field_size(|c: &gen_cfg| &c.template);

/// Bytes of a struct's field, named by a function that borrows it.
const fn field_size<T, F>(_field: fn(&T) -> &F) -> usize {
    size_of::<F>()
}
/// `BPF_F_TEST_XDP_LIVE_FRAMES` from <linux/bpf.h>.
const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;

/// The loaded generator program, its template set.
struct GenProgram {
    obj: libbpf_rs::Object,
}

impl GenProgram {
    /// Loads bpf/generator.bpf.c with `template` (a multiple of 8 bytes, at most
    /// [`TEMPLATE_MAX`]) and the flow space in its read-only `struct gen_cfg`.
    fn load(template: &[u8], space: FlowSpace) -> Result<GenProgram, String> {
        if template.is_empty() || !template.len().is_multiple_of(8) || template.len() > TEMPLATE_MAX
        {
            return Err(format!(
                "template of {} bytes: need a multiple of 8, at most {TEMPLATE_MAX}",
                template.len()
            ));
        }
        let mut open = libbpf_rs::ObjectBuilder::default()
            .open_memory(GENERATOR_OBJ)
            .map_err(|e| format!("opening the generator program: {e}"))?;
        let mut configured = false;
        for mut m in open.maps_mut() {
            if m.name().to_string_lossy().ends_with(".rodata")
                && let Some(v) = m.initial_value_mut()
            {
                // struct gen_cfg: the template's length in 8-byte words, the template, the
                // flow space (its first address in host order).
                let at = offset_of!(rodata, cfg);
                let words = (template.len() / 8) as u32;
                let fields: [(usize, &[u8]); 6] = [
                    (offset_of!(gen_cfg, words), &words.to_ne_bytes()),
                    (offset_of!(gen_cfg, template), template),
                    (offset_of!(gen_cfg, flows), &space.flows.to_ne_bytes()),
                    (offset_of!(gen_cfg, ports), &space.ports.to_ne_bytes()),
                    (
                        offset_of!(gen_cfg, addr0),
                        &u32::from(FIRST_ADDR).to_ne_bytes(),
                    ),
                    (
                        offset_of!(gen_cfg, port0),
                        &u32::from(FIRST_PORT).to_ne_bytes(),
                    ),
                ];
                configured = fields.iter().all(|(o, b)| put(v, at + o, b));
            }
        }
        if !configured {
            return Err("the generator program's .rodata holds no gen_cfg".into());
        }
        let obj = open
            .load()
            .map_err(|e| format!("loading the generator program: {e}"))?;
        Ok(GenProgram { obj })
    }

    fn prog(&self) -> Result<libbpf_rs::ProgramMut<'_>, String> {
        self.obj
            .progs_mut()
            .find(|p| p.name() == std::ffi::OsStr::new(GEN_PROG))
            .ok_or_else(|| format!("generator object has no program {GEN_PROG}"))
    }

    /// Transmits `count` frames out of `ifindex` (in the calling thread's namespace).
    fn send(&mut self, ifindex: u32, frame: &[u8], count: u32) -> Result<(), String> {
        let mut ctx = xdp_ctx(frame.len() as u32, ifindex);
        let input = libbpf_rs::ProgramInput {
            context_in: Some(&mut ctx),
            data_in: Some(frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat: count,
            ..Default::default()
        };
        self.prog()?
            .test_run(input)
            .map(|_| ())
            .map_err(|e| format!("live-frame test run on ifindex {ifindex}: {e}"))
    }

    /// Runs `frame` through the program once (not live: nothing is sent) and returns its
    /// XDP action and the frame as the program left it.
    #[cfg(test)]
    fn test_run(&self, frame: &[u8]) -> Result<(u32, Vec<u8>), String> {
        let mut out = vec![0u8; frame.len()];
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..Default::default()
        };
        let action = self
            .prog()?
            .test_run(input)
            .map(|o| o.return_value)
            .map_err(|e| format!("test-running the generator program: {e}"))?;
        Ok((action, out))
    }
}

/// Commands to the generator thread, which lives in the gen namespace.
pub(crate) enum GenCmd {
    /// Send this many frames now (readiness probes).
    Burst(u32),
    /// Send for this long, as fast as the generator goes, until done or stopped.
    Flood(Duration),
}

/// What one flood did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flood {
    pub(crate) offered: u64,
    pub(crate) elapsed: Duration,
    pub(crate) cpu: Duration,
}

/// The generator thread: loads the generator once, then serves bursts and floods.
pub(crate) struct Generator {
    cmds: Option<mpsc::Sender<GenCmd>>,
    results: mpsc::Receiver<Result<Flood, String>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Generator {
    /// A generator thread in `gen_ns` sending one flow from source port `GEN_SPORT + k`,
    /// pinned to CPU `k` when `pin`: a veth frame arrives on the receive queue of the CPU
    /// that sent it, so one pinned generator per CPU feeds one queue each.
    pub(crate) fn start(
        gen_ns: &Netns,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        stop: Arc<AtomicBool>,
        k: u16,
        pin: bool,
        space: FlowSpace,
    ) -> Result<Self, BenchError> {
        let (cmd_tx, cmd_rx) = mpsc::channel::<GenCmd>();
        let (res_tx, res_rx) = mpsc::channel();
        let thread = gen_ns.in_thread(move || {
            let setup = (|| {
                if pin {
                    let mut set = nix::sched::CpuSet::new();
                    set.set(usize::from(k))
                        .and_then(|()| {
                            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                        })
                        .map_err(|e| format!("pinning generator {k} to CPU {k}: {e}"))?;
                }
                let ifindex = nix::net::if_::if_nametoindex("g0")
                    .map_err(|e| format!("g0 in the gen namespace: {e}"))?;
                let frame = crate::pktgen::udp4_frame(
                    src_mac,
                    dst_mac,
                    GEN_ADDR,
                    VIP,
                    GEN_SPORT + k,
                    PORT,
                    FRAME_LEN,
                );
                let generator = GenProgram::load(&frame, space)?;
                Ok::<_, String>((ifindex, generator, frame))
            })();
            let (ifindex, mut generator, frame) = match setup {
                Ok(s) => s,
                Err(e) => {
                    let _ = res_tx.send(Err(e));
                    return;
                }
            };
            for cmd in cmd_rx {
                let res = match cmd {
                    GenCmd::Burst(n) => generator.send(ifindex, &frame, n).map(|()| Flood {
                        offered: u64::from(n),
                        elapsed: Duration::ZERO,
                        cpu: Duration::ZERO,
                    }),
                    GenCmd::Flood(d) => flood(&mut generator, ifindex, &frame, d, &stop),
                };
                if res_tx.send(res).is_err() {
                    return;
                }
            }
        })?;
        Ok(Generator {
            cmds: Some(cmd_tx),
            results: res_rx,
            thread: Some(thread),
        })
    }

    pub(crate) fn call(&self, cmd: GenCmd) -> Result<Flood, BenchError> {
        self.ask(cmd)?;
        self.answer()
    }

    /// Sends `cmd` without waiting for its result ([`Generator::answer`]).
    pub(crate) fn ask(&self, cmd: GenCmd) -> Result<(), BenchError> {
        self.cmds
            .as_ref()
            .ok_or_else(dead)?
            .send(cmd)
            .map_err(|_| dead())
    }

    /// Waits for the result of the last [`Generator::ask`].
    pub(crate) fn answer(&self) -> Result<Flood, BenchError> {
        match self.results.recv() {
            Ok(r) => r.map_err(BenchError::Generator),
            Err(_) => Err(dead()),
        }
    }
}

fn dead() -> BenchError {
    BenchError::Generator("the generator thread ended".into())
}

impl Generator {}

impl Drop for Generator {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        self.cmds.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Frames for the next generator call: what the last one (`sent` frames in `took`) says
/// the generator does in [`CALL_TARGET`], or in the `left` time if that is shorter; at
/// least 65536 (a shorter call is mostly fixed cost) and at most 16 Mi (the kernel's cap).
pub fn next_chunk(sent: u32, took: Duration, left: Duration) -> u32 {
    let rate = f64::from(sent) / took.as_secs_f64().max(1e-3);
    let want = rate * left.min(CALL_TARGET).as_secs_f64();
    want.clamp(65_536.0, f64::from(1u32 << 24)) as u32
}

/// The calling thread's CPU time (the generator's work is kernel time in its own context).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or(Duration::ZERO)
}

fn flood(
    generator: &mut GenProgram,
    ifindex: u32,
    frame: &[u8],
    duration: Duration,
    stop: &AtomicBool,
) -> Result<Flood, String> {
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut offered = 0u64;
    let mut chunk = FIRST_CHUNK;
    while t0.elapsed() < duration {
        if stop.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        let t = Instant::now();
        generator.send(ifindex, frame, chunk)?;
        offered += u64::from(chunk);
        chunk = next_chunk(chunk, t.elapsed(), duration.saturating_sub(t0.elapsed()));
    }
    Ok(Flood {
        offered,
        elapsed: t0.elapsed(),
        cpu: thread_cpu().saturating_sub(cpu0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bpf/generator.bpf.c through BPF_PROG_TEST_RUN: whatever the frame holds, the program
    /// writes the template back into it and transmits it; a frame shorter than the
    /// template is dropped untouched.
    #[test]
    fn generator_program_stores_the_template_then_transmits() {
        use libbpf_rs::libbpf_sys::{XDP_DROP, XDP_TX};

        assert!(
            lab::netns::is_root(),
            "this test loads bpf/generator.bpf.c into the kernel: run it as root"
        );
        let template: Vec<u8> = (0..64u8).map(|b| b.wrapping_mul(37)).collect();
        let generator =
            GenProgram::load(&template, FlowSpace::ONE).expect("the generator program loads");
        // A page the forwarder rewrote: other bytes everywhere.
        let rewritten = vec![0xa5u8; template.len()];
        let (action, out) = generator.test_run(&rewritten).expect("test run");
        assert_eq!(action, XDP_TX, "full frames go out");
        assert_eq!(out, template, "the stores write back exactly the template");
        let short = vec![0xa5u8; template.len() - 8];
        let (action, out) = generator.test_run(&short).expect("test run");
        assert_eq!(action, XDP_DROP, "short frames are dropped");
        assert_eq!(out, short, "and left as they were");
        // The longest template fits too.
        assert!(GenProgram::load(&[7u8; TEMPLATE_MAX], FlowSpace::ONE).is_ok());
    }

    /// bpf/generator.bpf.c with a flow space: consecutive frames are consecutive flows of
    /// [`FlowSpace::flow`] (wrapping round), and both checksums stay valid.
    #[test]
    fn generator_program_walks_the_flow_space_with_valid_checksums() {
        assert!(
            lab::netns::is_root(),
            "this test loads bpf/generator.bpf.c into the kernel: run it as root"
        );
        // The counter is per CPU: stay on one.
        let mut one = nix::sched::CpuSet::new();
        one.set(0).expect("cpu set");
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &one).expect("pin");
        let template =
            crate::pktgen::udp4_frame([2; 6], [4; 6], GEN_ADDR, VIP, GEN_SPORT, PORT, FRAME_LEN);
        let space = FlowSpace { flows: 5, ports: 2 };
        let generator = GenProgram::load(&template, space).expect("the generator program loads");
        for i in 0..7u64 {
            let (action, out) = generator.test_run(&template).expect("test run");
            assert_eq!(action, libbpf_rs::libbpf_sys::XDP_TX);
            let ip = wire::Ipv4Packet::new_checked(&out[14..]).expect("IPv4");
            let (addr, port) = space.flow(i);
            assert_eq!(ip.src(), addr, "frame {i}");
            assert_eq!(ip.dst(), VIP);
            assert!(ip.verify_checksum(), "frame {i}: IPv4 checksum");
            let udp = wire::UdpPacket::new_checked(&out[34..]).expect("UDP");
            assert_eq!(udp.src_port(), port, "frame {i}");
            assert!(udp.verify_checksum_v4(addr, VIP), "frame {i}: UDP checksum");
        }
    }

    #[test]
    fn flow_spaces_vary_addresses_times_ports_inside_the_lab() {
        assert_eq!(FlowSpace::new(1), Some(FlowSpace::ONE));
        assert_eq!(
            FlowSpace::ONE.flow(7),
            (GEN_ADDR, GEN_SPORT),
            "one flow: the template's"
        );
        let small = FlowSpace::new(256).unwrap();
        assert_eq!((small.ports, small.addresses()), (256, 1));
        assert_eq!(small.flow(0), (FIRST_ADDR, FIRST_PORT));
        assert_eq!(small.flow(255), (FIRST_ADDR, FIRST_PORT + 255));
        assert_eq!(small.flow(256), small.flow(0), "wraps round");
        let mid = FlowSpace::new(65_536).unwrap();
        assert_eq!(mid.addresses(), 256);
        assert_eq!(mid.flow(256), (Ipv4Addr::new(10, 82, 0, 2), FIRST_PORT));
        let big = FlowSpace::new(1_000_000).unwrap();
        assert_eq!(big.addresses(), 3_907);
        let (last, port) = big.flow(999_999);
        assert_eq!(last, Ipv4Addr::new(10, 82, 15, 67), "address 3,907");
        assert_eq!(port, FIRST_PORT + 63, "999,999 is 3,906 x 256 + 63");
        // Every flow is distinct.
        let all: std::collections::HashSet<_> = (0..65_536).map(|i| mid.flow(i)).collect();
        assert_eq!(all.len(), 65_536);
        // The largest space still ends inside 10.82.0.0/16, below its broadcast address.
        let max = FlowSpace::new(MAX_FLOWS).unwrap();
        assert_eq!(
            max.flow(u64::from(MAX_FLOWS) - 1).0,
            Ipv4Addr::new(10, 82, 255, 254)
        );
        assert_eq!(FlowSpace::new(MAX_FLOWS + 1), None);
    }

    #[test]
    fn templates_must_be_whole_words_and_fit() {
        for bad in [0, 12, TEMPLATE_MAX + 8] {
            let err = GenProgram::load(&vec![0u8; bad], FlowSpace::ONE)
                .err()
                .expect("refused");
            assert!(err.contains("multiple of 8"), "{bad} bytes: {err}");
        }
    }

    #[test]
    fn generator_calls_last_about_half_a_second() {
        let ms = Duration::from_millis;
        // 1 M frames in 250 ms is 4 Mpps: 2 M frames make the next half second.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(4000)), 2_000_000);
        // Near the deadline, only what fits the time left.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(100)), 400_000);
        // Never below the floor (mostly fixed cost) nor above the kernel's cap.
        assert_eq!(next_chunk(1_000_000, ms(250), ms(0)), 65_536);
        assert_eq!(next_chunk(u32::MAX, ms(0), ms(4000)), 1 << 24);
    }
}
