//! DR rows: only the MACs change (backends hold the VIP on lo), whatever the TTL, the
//! tags or the port.

use lb::Tables;

use super::build::{ACK, Pkt, SYN, TCP, UDP, tcp, udp};
use super::setup::mac_of;
use super::{BACKENDS, Fixture, OUR_MAC};

const C4: &str = "198.51.100.7";
const C6: &str = "2001:db8:c::7";

pub(super) const ROWS: &[super::Row] = &[tcp4, udp4_any_port, tcp6, vlan_tagged, ttl_1, qinq];

/// `p` as DR forwards it to `vip`'s backend: new MACs, nothing else.
fn macs_only(p: &Pkt, t: &Tables, vip: &str) -> Vec<u8> {
    p.clone().macs(mac_of(t, vip), OUR_MAC).build()
}

/// The dr4 flow: client 198.51.100.7:40000 -> 192.0.2.30:80.
pub(super) fn dr4_syn() -> Pkt {
    Pkt::new(C4, "192.0.2.30", TCP, tcp(40000, 80, SYN, 1, b""))
}

/// The dr6 flow: client [2001:db8:c::7]:40000 -> [2001:db8::30]:80.
pub(super) fn dr6_syn() -> Pkt {
    Pkt::new(C6, "2001:db8::30", TCP, tcp(40000, 80, SYN, 1, b""))
}

fn tcp4(t: &Tables) -> Fixture {
    let d = dr4_syn();
    let out = macs_only(&d, t, "dr4");
    Fixture::tx("dr4 tcp: macs only", d.build(), BACKENDS, out)
}

fn udp4_any_port(t: &Tables) -> Fixture {
    let d = Pkt::new(C4, "192.0.2.30", UDP, udp(1234, 9999, b"any port"));
    let out = macs_only(&d, t, "dr4u");
    Fixture::tx(
        "dr4u udp to a port-0 vip: macs only",
        d.build(),
        BACKENDS,
        out,
    )
}

fn tcp6(t: &Tables) -> Fixture {
    let d = dr6_syn();
    let out = macs_only(&d, t, "dr6");
    Fixture::tx("dr6 tcp: macs only", d.build(), BACKENDS, out)
}

fn vlan_tagged(t: &Tables) -> Fixture {
    let d = Pkt::new(C4, "192.0.2.30", TCP, tcp(40001, 80, SYN, 1, b"")).vlans(&[200]);
    let out = macs_only(&d, t, "dr4");
    Fixture::tx("dr4 vlan-tagged: tag kept", d.build(), BACKENDS, out)
}

fn ttl_1(t: &Tables) -> Fixture {
    let d = Pkt::new(C4, "192.0.2.30", TCP, tcp(40002, 80, SYN, 1, b"")).ttl(1);
    let out = macs_only(&d, t, "dr4");
    Fixture::tx(
        "dr4 ttl 1: dr does not decrement, forwarded",
        d.build(),
        BACKENDS,
        out,
    )
}

fn qinq(t: &Tables) -> Fixture {
    let d = Pkt::new(C4, "192.0.2.30", TCP, tcp(40003, 80, ACK, 1, b"")).vlans(&[10, 20]);
    let out = macs_only(&d, t, "dr4");
    Fixture::tx(
        "dr4 double-tagged (q-in-q): both tags kept",
        d.build(),
        BACKENDS,
        out,
    )
}
