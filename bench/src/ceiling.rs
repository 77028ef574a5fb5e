//! Run C's forwarder: bpf/ceiling.bpf.c on lb's eth0, the least an XDP forwarder of the
//! bench's VIP can do (rewrite to the backend, set the MACs, DEVMAP redirect into eth1):
//! what the flow cache is measured against.

use std::sync::mpsc;

use crate::topology::Macs;
use crate::{BACKEND, VIP, ifindex};

/// The object clang built from bpf/ceiling.bpf.c (see build.rs).
static CEILING_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ceiling.bpf.o"));
const CEILING_PROG: &str = "sluice_ceiling";

/// Run C's forwarder: bpf/ceiling.bpf.c on eth0, redirecting into eth1.
pub(crate) fn ceiling(
    macs: Macs,
    ready: &mpsc::Sender<Result<(), String>>,
    stop: &mpsc::Receiver<()>,
) -> Result<String, String> {
    use libbpf_rs::{MapCore, MapFlags, Xdp, XdpFlags};
    use std::os::fd::AsFd;

    let mut open = libbpf_rs::ObjectBuilder::default()
        .open_memory(CEILING_OBJ)
        .map_err(|e| format!("opening the ceiling program: {e}"))?;
    for mut m in open.maps_mut() {
        if m.name().to_string_lossy().ends_with(".rodata")
            && let Some(v) = m.initial_value_mut()
            && v.len() >= 20
        {
            // struct ceiling_cfg: dst_mac, src_mac, vip, backend.
            v[0..6].copy_from_slice(&macs.sink);
            v[6..12].copy_from_slice(&macs.down);
            v[12..16].copy_from_slice(&VIP.octets());
            v[16..20].copy_from_slice(&BACKEND.octets());
        }
    }
    let obj = open
        .load()
        .map_err(|e| format!("loading the ceiling program: {e}"))?;
    let (up, down) = (ifindex("eth0")?, ifindex("eth1")?);
    let port = obj
        .maps()
        .find(|m| m.name() == std::ffi::OsStr::new("out_port"))
        .ok_or("ceiling program has no map out_port")?;
    port.update(&0u32.to_ne_bytes(), &down.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| format!("ceiling egress: {e}"))?;
    let prog = obj
        .progs()
        .find(|p| p.name() == std::ffi::OsStr::new(CEILING_PROG))
        .ok_or("ceiling object has no program")?;
    let xdp = Xdp::new(prog.as_fd());
    xdp.attach(up as i32, XdpFlags::DRV_MODE)
        .map_err(|e| format!("attaching the ceiling program to eth0 (native): {e}"))?;
    let _ = ready.send(Ok(()));
    let _ = stop.recv();
    xdp.detach(up as i32, XdpFlags::DRV_MODE)
        .map_err(|e| format!("detaching the ceiling program: {e}"))?;
    Ok("ceiling run: XDP eth0 native, DEVMAP redirect to eth1".into())
}
