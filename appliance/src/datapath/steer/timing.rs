//! The steering program's own time per frame, from BPF_PROG_TEST_RUN's repeat (the kernel
//! runs the program `repeat` times on the frame and reports the mean): what the xdp bench
//! compares between builds and with a capture running, on a machine whose kernel refuses the
//! live frames the packet-rate bench's generator sends.

use super::super::abi::xdp_md;
use super::{DatapathError, Steer, bpf_err};

/// A test run's context: `frame` arriving on `ingress`.
pub(super) fn test_ctx(frame: &[u8], ingress: u32) -> [u8; xdp_md::LEN] {
    xdp_md {
        data_end: frame.len() as u32,
        ingress_ifindex: ingress,
        ..Default::default()
    }
    .to_bytes()
}

impl Steer {
    /// Runs the program `repeat` times on `frame` arriving on `ingress` (0: the test run's
    /// loopback): its XDP action and the kernel's mean time per run, in nanoseconds.
    pub fn time_run(
        &self,
        frame: &[u8],
        ingress: u32,
        repeat: u32,
    ) -> Result<(u32, u32), DatapathError> {
        let prog = self.prog_mut()?;
        let mut ctx = test_ctx(frame, ingress);
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            context_in: (ingress != 0).then_some(&mut ctx[..]),
            repeat,
            ..Default::default()
        };
        let res = prog
            .test_run(input)
            .map_err(|e| bpf_err("test-running the steering program", e))?;
        Ok((res.return_value, res.duration.as_nanos() as u32))
    }
}
