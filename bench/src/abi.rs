//! The bench's BPF programs as the Rust side sees them: each object's structs, read-only
//! config and codes, generated from its BTF by build.rs (as the appliance's datapath/abi.rs
//! is), and the one way the bench writes a field into bytes a program reads (its config
//! before loading, a test run's `xdp_md`): at the field's `offset_of!` in the generated
//! struct, so no offset is counted by hand and a field moved in the C moves here too.

macro_rules! program_types {
    ($($name:ident),*) => {$(
        #[doc = concat!("The generated types of bpf/", stringify!($name), ".bpf.c.")]
        #[allow(
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            dead_code,
            unreachable_pub,
            missing_docs,
            clippy::all
        )]
        pub(crate) mod $name {
            include!(concat!(env!("OUT_DIR"), "/", stringify!($name), "_types.rs"));
        }
    )*};
}
program_types!(ceiling, generator, pktgen, sink);

/// Writes `bytes` into `buf` at `at`; false (and nothing written) when `buf` is too short.
pub(crate) fn put(buf: &mut [u8], at: usize, bytes: &[u8]) -> bool {
    match buf.get_mut(at..at + bytes.len()) {
        Some(b) => {
            b.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

/// Bytes of `struct xdp_md`, a test run's context.
pub(crate) const XDP_MD_LEN: usize = size_of::<pktgen::xdp_md>();

/// The `struct xdp_md` of a test run whose frame (of `len` bytes) arrives on interface
/// `ingress`, queue 0.
pub(crate) fn xdp_ctx(len: u32, ingress: u32) -> [u8; XDP_MD_LEN] {
    use pktgen::xdp_md;
    use std::mem::offset_of;

    let mut ctx = [0u8; XDP_MD_LEN];
    put(&mut ctx, offset_of!(xdp_md, data_end), &len.to_ne_bytes());
    put(
        &mut ctx,
        offset_of!(xdp_md, ingress_ifindex),
        &ingress.to_ne_bytes(),
    );
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_runs_context_has_the_frames_end_and_interface() {
        let ctx = xdp_ctx(64, 7);
        let back = |at: usize| u32::from_ne_bytes([ctx[at], ctx[at + 1], ctx[at + 2], ctx[at + 3]]);
        use std::mem::offset_of;
        assert_eq!(back(offset_of!(pktgen::xdp_md, data)), 0);
        assert_eq!(back(offset_of!(pktgen::xdp_md, data_end)), 64);
        assert_eq!(back(offset_of!(pktgen::xdp_md, ingress_ifindex)), 7);
        assert_eq!(back(offset_of!(pktgen::xdp_md, rx_queue_index)), 0);
        assert!(
            !put(&mut [0u8; 3], 0, &[1, 2, 3, 4]),
            "too short: nothing written"
        );
    }
}
