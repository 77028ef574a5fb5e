//! One XDP program replacing another on an interface in one step (`XDP_FLAGS_REPLACE`):
//! every frame meets one program or the other, never none, so a new process taking over
//! the datapath (or starting after a crash) leaves no gap in which the kernel would see the
//! flows' frames. libbpf-rs's `Xdp::replace` sends no mode flag, which fails for a program
//! attached in generic (skb) mode.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Where the program being replaced is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The driver's (native) hook.
    Native,
    /// The generic (skb) hook.
    Generic,
}

/// Attaches `prog` to `ifindex` in place of `old`, which must be what is attached there in
/// `mode`; the kernel refuses (EEXIST) when it is not, and changes nothing.
pub fn replace(
    ifindex: u32,
    prog: BorrowedFd<'_>,
    old: BorrowedFd<'_>,
    mode: Mode,
) -> io::Result<()> {
    let flags = libbpf_sys::XDP_FLAGS_REPLACE
        | match mode {
            Mode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
            Mode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
        };
    let opts = libbpf_sys::bpf_xdp_attach_opts {
        sz: size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
        old_prog_fd: old.as_raw_fd(),
        ..Default::default()
    };
    let ifindex =
        i32::try_from(ifindex).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: both descriptors are borrowed for the call and `opts` is a fully initialised
    // struct of the size it declares; libbpf reads it and keeps no pointer past the call.
    let ret = unsafe { libbpf_sys::bpf_xdp_attach(ifindex, prog.as_raw_fd(), flags, &opts) };
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret));
    }
    Ok(())
}

/// The ids of the XDP programs attached to `ifindex`: in the driver's (native) hook and in
/// the generic one (0: none).
pub fn attached(ifindex: u32) -> io::Result<(u32, u32)> {
    let ifindex =
        i32::try_from(ifindex).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut opts = libbpf_sys::bpf_xdp_query_opts {
        sz: size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: `opts` is a fully initialised struct of the size it declares; libbpf fills
    // it in and keeps no pointer past the call.
    let ret = unsafe { libbpf_sys::bpf_xdp_query(ifindex, 0, &mut opts) };
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret));
    }
    Ok((opts.drv_prog_id, opts.skb_prog_id))
}
