//! `[appliance]`: the interfaces to serve, the datapath's rings and tables, and the
//! connection-table timeouts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use super::{MAX_DURATION, check_name, is_prime};
use crate::error::ConfigErrors;
use crate::model::{Appliance, IcmpLimits, Timeouts, XdpMode};
use crate::reader::Table;

/// The UMEM and ring sizes of each AF_XDP socket.
struct Rings {
    umem_frames: u32,
    ring_size: u32,
}

pub(super) fn appliance(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Appliance> {
    let name = t.req_string("name", errs);
    check_name(&t, name.as_ref(), errs);
    let interfaces = interfaces(&mut t, errs);
    let xdp_mode = t
        .choice(
            "xdp_mode",
            &[
                ("auto", XdpMode::Auto),
                ("native", XdpMode::Native),
                ("generic", XdpMode::Generic),
            ],
            errs,
        )
        .unwrap_or(XdpMode::Auto);
    let busy_poll = t.bool("busy_poll", errs).unwrap_or(false);
    // On by default: the cache only repeats, byte for byte, what the engine decided for an
    // established flow, and every commit evicts what the new tables would not repeat;
    // `false` leaves every frame to the engine (pure AF_XDP).
    let flow_cache = t.bool("flow_cache", errs).unwrap_or(true);
    let pin_workers = t.bool("pin_workers", errs).unwrap_or(false);
    let Rings {
        umem_frames,
        ring_size,
    } = rings(&mut t, errs);
    let conntrack_capacity = t
        .int("conntrack_capacity", 1024..=1 << 26, errs)
        .unwrap_or(1 << 18) as u32;
    // Embryonic entries (SYNs and first datagrams not yet answered) one client address may
    // hold per worker table: enough for a NAT gateway's burst of handshakes, far below what
    // a spoofed flood from one source would take; 0 turns the budget off.
    let embryonic_per_source = t
        .int("embryonic_per_source", 0..=65535, errs)
        .unwrap_or(1024) as u16;
    let maglev_table_size = maglev_table_size(&mut t, errs);
    let health_batch = super::scale::health_batch(&mut t, errs);
    let health_batch_delay = super::scale::health_batch_delay(&mut t, health_batch, errs);
    let timeouts = match t.table("timeouts", errs) {
        Some(tt) => timeouts(tt, errs),
        None => Timeouts::default(),
    };
    let icmp_limits = match t.table("icmp_limits", errs) {
        Some(tt) => icmp_limits(tt, errs),
        None => IcmpLimits::default(),
    };
    let state_dir = state_dir(&mut t, errs);
    t.finish(errs);
    Some(Appliance {
        name: name?,
        interfaces,
        xdp_mode,
        busy_poll,
        flow_cache,
        pin_workers,
        umem_frames,
        ring_size,
        conntrack_capacity,
        embryonic_per_source,
        maglev_table_size,
        health_batch,
        health_batch_delay,
        timeouts,
        icmp_limits,
        state_dir,
    })
}

/// `state_dir`: an absolute directory for the operator's overrides (see `control::kept`).
fn state_dir(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<PathBuf> {
    let dir = PathBuf::from(t.string("state_dir", errs)?);
    if !dir.is_absolute() {
        errs.push(
            t.key("state_dir"),
            format!("{:?} must be an absolute path", dir.display().to_string()),
        );
        return None;
    }
    Some(dir)
}

/// `interfaces`: at least one, each a valid Linux interface name, none twice.
fn interfaces(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<String> {
    let mut interfaces = Vec::new();
    match t.strings("interfaces", errs) {
        None => {
            if !t.has("interfaces") {
                errs.push(
                    t.key("interfaces"),
                    "missing (required): at least one interface",
                );
            }
        }
        Some(list) if list.is_empty() => {
            errs.push(
                t.key("interfaces"),
                "empty: at least one interface is required",
            );
        }
        Some(list) => {
            let mut seen = HashSet::new();
            for (path, ifname) in list {
                let ok = !ifname.is_empty()
                    && ifname.len() <= 15
                    && !ifname.contains(['/', ':', ' ', '\t', '\n'])
                    && ifname != "."
                    && ifname != "..";
                if !ok {
                    errs.push(path, format!("{ifname:?} is not a valid interface name"));
                } else if !seen.insert(ifname.clone()) {
                    errs.push(path, format!("interface {ifname:?} listed twice"));
                } else {
                    interfaces.push(ifname);
                }
            }
        }
    }
    interfaces
}

/// `umem_frames` and `ring_size`: a power-of-two ring, and a UMEM that fills rx and tx.
fn rings(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Rings {
    let umem_frames = t.int("umem_frames", 256..=1 << 20, errs).unwrap_or(8192) as u32;
    let ring_size = t.int("ring_size", 64..=1 << 16, errs).unwrap_or(2048) as u32;
    if !ring_size.is_power_of_two() {
        errs.push(
            t.key("ring_size"),
            format!("{ring_size} is not a power of two"),
        );
    }
    if ring_size * 2 > umem_frames {
        errs.push(
            t.key("umem_frames"),
            format!("{umem_frames} frames cannot fill rx and tx rings of {ring_size} (need at least {})", ring_size * 2),
        );
    }
    Rings {
        umem_frames,
        ring_size,
    }
}

/// `maglev_table_size`: every VIP's ring size unless it sets its own; Maglev's permutation
/// needs a prime. Unset, each VIP's comes from its pool's size.
fn maglev_table_size(t: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<u32> {
    let m = t.int("maglev_table_size", 13..=(1 << 24), errs)? as u32;
    if !is_prime(m) {
        errs.push(
            t.key("maglev_table_size"),
            format!("{m} is not a prime (Maglev needs a prime table size, e.g. 65537)"),
        );
    }
    Some(m)
}

/// `[appliance.icmp_limits]`, each key defaulting on its own.
fn icmp_limits(mut tt: Table<'_>, errs: &mut ConfigErrors) -> IcmpLimits {
    let d = IcmpLimits::default();
    let rate = 0..=10_000_000;
    let out = IcmpLimits {
        per_vip: tt
            .int("per_vip", rate.clone(), errs)
            .map_or(d.per_vip, |v| v as u32),
        per_family: tt
            .int("per_family", rate, errs)
            .map_or(d.per_family, |v| v as u32),
        burst: tt
            .int("burst", 1..=1_000_000, errs)
            .map_or(d.burst, |v| v as u32),
    };
    tt.finish(errs);
    out
}

/// `[appliance.timeouts]`, each key defaulting on its own.
fn timeouts(mut tt: Table<'_>, errs: &mut ConfigErrors) -> Timeouts {
    let d = Timeouts::default();
    let r = Duration::from_secs(1)..=MAX_DURATION;
    let out = Timeouts {
        tcp_syn: tt.duration("tcp_syn", r.clone(), errs).unwrap_or(d.tcp_syn),
        tcp_established: tt
            .duration("tcp_established", r.clone(), errs)
            .unwrap_or(d.tcp_established),
        tcp_closing: tt
            .duration("tcp_closing", r.clone(), errs)
            .unwrap_or(d.tcp_closing),
        udp: tt.duration("udp", r.clone(), errs).unwrap_or(d.udp),
        udp_new: tt.duration("udp_new", r, errs).unwrap_or(d.udp_new),
    };
    tt.finish(errs);
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::Config;

    const VIP: &str = "[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
        protocol = \"tcp\"\n[[vip.backend]]\naddress = \"10.0.0.21\"\n";

    #[test]
    fn state_dir_is_optional_and_must_be_absolute() {
        let text = format!("[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n{VIP}");
        let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.appliance.state_dir, None);
        let text = format!(
            "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\nstate_dir = \"/srv/lb\"\n{VIP}"
        );
        let c = Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.appliance.state_dir, Some(PathBuf::from("/srv/lb")));
        let text = format!(
            "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\nstate_dir = \"srv/lb\"\n{VIP}"
        );
        let e = Config::from_toml_str(&text)
            .expect_err("relative")
            .to_string();
        assert!(
            e.contains("appliance.state_dir: \"srv/lb\" must be an absolute path"),
            "{e}"
        );
    }
}
