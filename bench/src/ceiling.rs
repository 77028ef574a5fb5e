//! Run C's forwarder: bpf/ceiling.bpf.c on lb's eth0, the least an XDP forwarder of the
//! bench's VIP can do (rewrite to the backend, set the MACs, DEVMAP redirect into eth1):
//! what the flow cache is measured against. Run CL (`--flows`) adds one lookup per frame in
//! an LRU hash of the flow cache's own geometry, filled with the generator's flows.

use std::mem::offset_of;
use std::sync::mpsc;

use crate::abi::ceiling::{cache_key4, ceiling_cfg, rodata};
use crate::abi::put;
use crate::generator::FlowSpace;
use crate::topology::Macs;
use crate::{BACKEND, PORT, VIP, ifindex};

/// Bytes of the cache's IPv4 key (the appliance's bpf/structs.h `struct cache_key4`, which
/// bpf/ceiling.bpf.c includes), the only key run CL fills.
pub(crate) const KEY_LEN: usize = size_of::<cache_key4>();

/// Run CL's map: the appliance's IPv4 flow-cache map's value size and capacity (read from
/// the kernel in the same round's run A2; its key is [`KEY_LEN`] bytes), and the flows to
/// fill it with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup {
    pub(crate) value_size: u32,
    pub(crate) entries: u32,
    pub(crate) space: FlowSpace,
}

/// The cache's IPv4 key of flow `i` of `space` (`struct cache_key4`: addresses and ports
/// in network order, the protocol, padding zero).
fn flow_key(space: &FlowSpace, i: u64) -> [u8; KEY_LEN] {
    let (src, sport) = space.flow(i);
    let mut k = [0u8; KEY_LEN];
    put(&mut k, offset_of!(cache_key4, src), &src.octets());
    put(&mut k, offset_of!(cache_key4, dst), &VIP.octets());
    put(&mut k, offset_of!(cache_key4, sport), &sport.to_be_bytes());
    put(&mut k, offset_of!(cache_key4, dport), &PORT.to_be_bytes());
    put(&mut k, offset_of!(cache_key4, proto), &[17]);
    k
}

/// The object clang built from bpf/ceiling.bpf.c (see build.rs).
static CEILING_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/ceiling.bpf.o"));
const CEILING_PROG: &str = "sluice_ceiling";

/// Run C's forwarder (CL's with `lookup`): bpf/ceiling.bpf.c on eth0, redirecting into
/// eth1.
pub(crate) fn ceiling(
    macs: Macs,
    lookup: Option<Lookup>,
    ready: &mpsc::Sender<Result<(), String>>,
    stop: &mpsc::Receiver<()>,
) -> Result<String, String> {
    use libbpf_rs::{MapCore, MapFlags, Xdp, XdpFlags};
    use std::os::fd::AsFd;

    let mut open = libbpf_rs::ObjectBuilder::default()
        .open_memory(CEILING_OBJ)
        .map_err(|e| format!("opening the ceiling program: {e}"))?;
    let mut configured = false;
    for mut m in open.maps_mut() {
        if m.name().to_string_lossy().ends_with(".rodata")
            && let Some(v) = m.initial_value_mut()
        {
            let at = offset_of!(rodata, cfg);
            let lookup_on = u32::from(lookup.is_some()).to_ne_bytes();
            configured = put(v, at + offset_of!(ceiling_cfg, dst_mac), &macs.sink)
                && put(v, at + offset_of!(ceiling_cfg, src_mac), &macs.down)
                && put(v, at + offset_of!(ceiling_cfg, vip), &VIP.octets())
                && put(v, at + offset_of!(ceiling_cfg, backend), &BACKEND.octets())
                && put(v, at + offset_of!(ceiling_cfg, lookup), &lookup_on);
        }
        if let Some(l) = &lookup
            && m.name() == std::ffi::OsStr::new("flows")
        {
            let geometry = m
                .set_value_size(l.value_size)
                .and_then(|()| m.set_max_entries(l.entries));
            geometry.map_err(|e| format!("sizing the ceiling's flow map: {e}"))?;
        }
    }
    if !configured {
        return Err("the ceiling program's .rodata holds no ceiling_cfg".into());
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
    if let Some(l) = &lookup {
        let flows = obj
            .maps()
            .find(|m| m.name() == std::ffi::OsStr::new("flows"))
            .ok_or("ceiling program has no map flows")?;
        let value = vec![0u8; l.value_size as usize];
        for i in 0..u64::from(l.space.flows) {
            let key = flow_key(&l.space, i);
            flows
                .update(&key, &value, MapFlags::ANY)
                .map_err(|e| format!("filling the ceiling's flow map: {e}"))?;
        }
    }
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
    Ok(match lookup {
        None => "ceiling run: XDP eth0 native, DEVMAP redirect to eth1".into(),
        Some(l) => format!(
            "ceiling run with a lookup: XDP eth0 native, an LRU hash of {} entries of \
             {}+{} bytes holding {} flows, DEVMAP redirect to eth1",
            l.entries, KEY_LEN, l.value_size, l.space.flows
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_keys_are_the_caches_ipv4_keys() {
        let space = FlowSpace::new(65_536).expect("fits");
        let k = flow_key(&space, 1);
        let (src, sport) = space.flow(1);
        assert_eq!(k.len(), 16);
        assert_eq!(&k[0..4], &src.octets());
        assert_eq!(&k[4..8], &VIP.octets());
        assert_eq!(u16::from_be_bytes([k[8], k[9]]), sport);
        assert_eq!(u16::from_be_bytes([k[10], k[11]]), PORT);
        assert_eq!(&k[12..], &[17, 0, 0, 0]);
        assert_ne!(flow_key(&space, 0), k, "flows differ");
    }
}
