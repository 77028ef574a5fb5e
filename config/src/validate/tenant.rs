//! `tenant_vni` on a `[[vip]]` and `vtep` on its backends (issue 23): a VIP in a tenant's
//! virtual network. Its traffic arrives VXLAN-encapsulated with the VNI and leaves toward
//! the backends in VXLAN too (mode "tunnel", tunnel "vxlan", whose `vni` defaults to the
//! tenant's), so the appliance never routes a tenant address in the underlay: each backend
//! names the underlay address of its host (`vtep`), and its `address` is the tenant's own.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::error::ConfigErrors;
use crate::model::{Backend, Encap, Mode};
use crate::reader::Table;

/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = 0xff_ffff;

/// Reads `tenant_vni` and checks the VIP's mode can carry it.
pub(super) fn tenant_vni(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    errs: &mut ConfigErrors,
) -> Option<u32> {
    let vni = t.int("tenant_vni", 0..=i64::from(MAX_VNI), errs)? as u32;
    if let Some(m) = mode
        && !matches!(m, Mode::Tunnel(Encap::Vxlan { .. }))
    {
        let shown = match m {
            Mode::Tunnel(e) => format!("mode \"tunnel\" with tunnel {:?}", e.name()),
            other => format!("mode {:?}", other.name()),
        };
        errs.push(
            t.key("tenant_vni"),
            format!(
                "needs mode = \"tunnel\" with tunnel = \"vxlan\", not {shown}: a tenant's \
                 backends are reached in its virtual network, never routed in the underlay"
            ),
        );
        return None;
    }
    for (k, why) in [
        (
            "outbound",
            "outbound connections of tenant backends are not supported",
        ),
        ("snat", "a tenant VIP does not rewrite addresses"),
    ] {
        if t.has(k) {
            errs.push(t.key(k), format!("not valid with tenant_vni: {why}"));
        }
    }
    Some(vni)
}

/// The VXLAN VNI toward the backends: `vni` as written, else the tenant's.
pub(super) fn backend_vni(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    tenant: Option<u32>,
) -> Option<Mode> {
    match (mode, tenant) {
        (Some(Mode::Tunnel(Encap::Vxlan { port, .. })), Some(vni)) if !t.has("vni") => {
            Some(Mode::Tunnel(Encap::Vxlan { port, vni }))
        }
        _ => mode,
    }
}

/// Reads a backend's `vtep`: required for a tenant VIP's backends, refused for the others.
pub(super) fn vtep(b: &mut Table<'_>, tenant: bool, errs: &mut ConfigErrors) -> Option<IpAddr> {
    if !tenant {
        b.reject(
            "vtep",
            "without tenant_vni on the VIP (only a tenant's backends sit behind a VTEP)",
            errs,
        );
        return None;
    }
    if !b.has("vtep") {
        errs.push(
            b.key("vtep"),
            "missing: a tenant VIP's backend needs the underlay address of its host (vtep)",
        );
        return None;
    }
    let a = b.ip("vtep", errs)?;
    if a.is_unspecified() || a.is_multicast() || a.is_loopback() {
        errs.push(
            b.key("vtep"),
            format!("\"{a}\" cannot be a VTEP (unspecified, multicast or loopback)"),
        );
        return None;
    }
    Some(a)
}

/// Why backend `b` cannot join its VIP's pool, whose backends' VTEPs and ports are `vteps`
/// (each with the address of the first backend behind it), if another backend of the VIP
/// has its VTEP and port: the appliance would not know which of the two a flow's frames
/// are for.
pub(super) fn ambiguous(vteps: &HashMap<(IpAddr, u16), IpAddr>, b: &Backend) -> Option<String> {
    let vtep = b.vtep?;
    let o = vteps.get(&(vtep, b.port))?;
    Some(format!(
        "\"{vtep}\" port {} is already backend {o}'s VTEP: two backends of one VIP behind one \
         VTEP are ambiguous (give them different ports or VIPs)",
        b.port
    ))
}
