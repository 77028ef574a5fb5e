//! Source-list rows (issue 46): a VIP's `allow` and `deny` decide before any state, the
//! longest matching prefix wins whichever list holds it, a shared `[[prefix_list]]` counts
//! as written in place, and the same verdict holds for every mode, ICMP echo, a backend's
//! reply toward a denied client and a tenant VIP. acl4 (NAT) allows 198.51.100.0/24 and
//! the partners' 203.0.113.0/24 but denies 198.51.100.128/25 except 198.51.100.192/26;
//! aclf6 (FullNAT) denies 2001:db8:c::/64 and the partners; acldr denies the partners;
//! acltun (IPIP) allows 198.51.100.0/24 only; tenant 400 denies 198.51.100.0/29. Each mode's
//! other family: acl6 (NAT) allows 2001:db8:d::/48 but denies 2001:db8:d:1::/64 except
//! 2001:db8:d:1:1::/80; aclf4 (FullNAT) allows 0.0.0.0/0 but denies 198.51.100.128/25;
//! acldr6 denies the partners; acltun6 (IPIP) allows 2001:db8:c::/48 only.

use lb::{DropReason, Tables};

use super::build::{ICMP, Pkt, SYN, TCP, icmp, tcp};
use super::fullnat::to_backend;
use super::setup::{flow_hash, mac_of, snat_port};
use super::tunnel::{Tun, encapsulated};
use super::{BACKENDS, Counter, Fixture, OUR_MAC, ROUTER_MAC, UPLINK};

pub(super) const ROWS: &[super::Row] = &[
    nat_allowed,
    nat_denied_by_deny,
    nat_allowed_by_longer_allow,
    nat_denied_by_no_allow,
    nat_allowed_by_prefix_list,
    nat_reply_to_denied_client,
    echo_denied,
    echo_allowed,
    fullnat6_allowed,
    fullnat6_denied,
    fullnat6_denied_by_prefix_list,
    dr_allowed,
    dr_denied,
    tunnel_allowed,
    tunnel_denied,
    tenant_denied,
    nat6_allowed,
    nat6_denied_by_longer_deny,
    nat6_allowed_by_longer_allow,
    nat6_denied_by_no_allow,
    fullnat4_allowed,
    fullnat4_denied,
    dr6_allowed,
    dr6_denied,
    tunnel6_allowed,
    tunnel6_denied,
];

const ACL4: &str = "192.0.2.150";
const ACLF6: &str = "2001:db8::150";
const ACLDR: &str = "192.0.2.152";
const ACLTUN: &str = "192.0.2.153";
const ACL6: &str = "2001:db8::151";
const ACLF4: &str = "192.0.2.154";
const ACLDR6: &str = "2001:db8::152";
const ACLTUN6: &str = "2001:db8::153";

fn syn(client: &str, vip: &str, dport: u16) -> Pkt {
    Pkt::new(client, vip, TCP, tcp(40000, dport, SYN, 1000, b""))
}

/// `p` as acl4 (NAT) forwards it to 10.0.0.71:8080.
fn dnat(p: &Pkt, t: &Tables) -> Vec<u8> {
    dnat_to(p, t, "acl4", "10.0.0.71")
}

/// `p` as the NAT VIP `vip` forwards it to `backend`:8080.
fn dnat_to(p: &Pkt, t: &Tables, vip: &str, backend: &str) -> Vec<u8> {
    let out = p.clone().dport(8080).macs(mac_of(t, vip), OUR_MAC);
    out.dst(backend).ttl(p.ttl - 1).build()
}

fn nat_allowed(t: &Tables) -> Fixture {
    let p = syn("198.51.100.7", ACL4, 80);
    let out = dnat(&p, t);
    Fixture::tx(
        "acl4 nat: 198.51.100.7 allowed by allow 198.51.100.0/24",
        p.build(),
        BACKENDS,
        out,
    )
}

fn nat_denied_by_deny(_: &Tables) -> Fixture {
    let p = syn("198.51.100.130", ACL4, 80);
    Fixture::drop(
        "acl4 nat: 198.51.100.130 denied by deny 198.51.100.128/25 (longer than the allow)",
        p.build(),
        DropReason::Denied,
    )
}

fn nat_allowed_by_longer_allow(t: &Tables) -> Fixture {
    let p = syn("198.51.100.200", ACL4, 80);
    let out = dnat(&p, t);
    Fixture::tx(
        "acl4 nat: 198.51.100.200 allowed by allow 198.51.100.192/26 inside the deny",
        p.build(),
        BACKENDS,
        out,
    )
}

fn nat_denied_by_no_allow(_: &Tables) -> Fixture {
    let p = syn("100.64.0.7", ACL4, 80);
    Fixture::drop(
        "acl4 nat: 100.64.0.7 matches no rule of a vip with an allow list: denied",
        p.build(),
        DropReason::Denied,
    )
}

fn nat_allowed_by_prefix_list(t: &Tables) -> Fixture {
    let p = syn("203.0.113.9", ACL4, 80);
    let out = dnat(&p, t);
    Fixture::tx(
        "acl4 nat: 203.0.113.9 allowed through prefix_list partners",
        p.build(),
        BACKENDS,
        out,
    )
}

fn nat_reply_to_denied_client(_: &Tables) -> Fixture {
    let p = Pkt::new(
        "10.0.0.71",
        "198.51.100.130",
        TCP,
        tcp(8080, 40000, 0x12, 5000, b""),
    );
    Fixture::drop(
        "acl4 nat: a backend's reply toward a denied client is not forwarded",
        p.build(),
        DropReason::Denied,
    )
    .arriving_on(BACKENDS)
}

fn echo_denied(_: &Tables) -> Fixture {
    let e = Pkt::new(
        "198.51.100.130",
        ACL4,
        ICMP,
        icmp(8, 0, [0, 1, 0, 1], b"ping"),
    );
    Fixture::drop(
        "acl4 icmp echo from a denied source: dropped, no reply",
        e.build(),
        DropReason::Denied,
    )
}

fn echo_allowed(_: &Tables) -> Fixture {
    let rest = [0, 1, 0, 2];
    let e = Pkt::new("198.51.100.7", ACL4, ICMP, icmp(8, 0, rest, b"ping"));
    let out = Pkt::new(ACL4, "198.51.100.7", ICMP, icmp(0, 0, rest, b"ping"))
        .macs(ROUTER_MAC, OUR_MAC)
        .build();
    Fixture::tx(
        "acl4 icmp echo from an allowed source: answered",
        e.build(),
        UPLINK,
        out,
    )
    .counting(Counter::EchoReplies)
}

fn fullnat6_allowed(t: &Tables) -> Fixture {
    let c = "2001:db8:d::7";
    let p = syn(c, ACLF6, 443);
    let h = flow_hash(c, ACLF6, 40000, 443, TCP);
    let lport = snat_port(TCP, "2001:db8:a::71", 8443, "2001:db8:f::150", h);
    let out = to_backend(
        &p,
        mac_of(t, "aclf6"),
        ("2001:db8:f::150", lport),
        ("2001:db8:a::71", 8443),
    );
    Fixture::tx(
        "aclf6 fullnat: 2001:db8:d::7 matches no deny: allowed",
        p.build(),
        BACKENDS,
        out,
    )
}

fn fullnat6_denied(_: &Tables) -> Fixture {
    let p = syn("2001:db8:c::7", ACLF6, 443);
    Fixture::drop(
        "aclf6 fullnat: 2001:db8:c::7 denied by deny 2001:db8:c::/64, no port taken",
        p.build(),
        DropReason::Denied,
    )
}

fn fullnat6_denied_by_prefix_list(_: &Tables) -> Fixture {
    let p = syn("2001:db8:e::9", ACLF6, 443);
    Fixture::drop(
        "aclf6 fullnat: 2001:db8:e::9 denied by prefix_list partners (its ipv6 half)",
        p.build(),
        DropReason::Denied,
    )
}

fn dr_allowed(t: &Tables) -> Fixture {
    let p = syn("198.51.100.7", ACLDR, 80);
    let out = p.clone().macs(mac_of(t, "acldr"), OUR_MAC).build();
    Fixture::tx(
        "acldr dr: 198.51.100.7 not on the deny list: macs only",
        p.build(),
        BACKENDS,
        out,
    )
}

fn dr_denied(_: &Tables) -> Fixture {
    let p = syn("203.0.113.9", ACLDR, 80);
    Fixture::drop(
        "acldr dr: 203.0.113.9 denied by prefix_list partners",
        p.build(),
        DropReason::Denied,
    )
}

const TUN: Tun = Tun {
    vip: "acltun",
    client: "198.51.100.7",
    addr: ACLTUN,
    backend: "10.0.0.73",
    udp_port: None,
    vni: None,
};

fn tunnel_allowed(t: &Tables) -> Fixture {
    let p = Pkt::new(TUN.client, ACLTUN, TCP, tcp(40000, 80, SYN, 77, b""));
    let out = encapsulated(t, &TUN, &p);
    Fixture::tx(
        "acltun ipip: 198.51.100.7 allowed: encapsulated",
        p.build(),
        BACKENDS,
        out,
    )
}

fn tunnel_denied(_: &Tables) -> Fixture {
    let p = syn("203.0.113.9", ACLTUN, 80);
    Fixture::drop(
        "acltun ipip: 203.0.113.9 outside the allow list: denied",
        p.build(),
        DropReason::Denied,
    )
}

fn tenant_denied(_: &Tables) -> Fixture {
    let inner = super::tenant::inner(false, 80, SYN);
    let frame = super::tenant::arrival(super::tenant::US4, 400, 0x08, &inner);
    Fixture::drop(
        "tenant400 vxlan: inner source 198.51.100.7 denied by deny 198.51.100.0/29",
        frame,
        DropReason::Denied,
    )
}

fn nat6_allowed(t: &Tables) -> Fixture {
    let p = syn("2001:db8:d::7", ACL6, 80);
    let out = dnat_to(&p, t, "acl6", "2001:db8:a::74");
    Fixture::tx(
        "acl6 nat: 2001:db8:d::7 allowed by allow 2001:db8:d::/48",
        p.build(),
        BACKENDS,
        out,
    )
}

fn nat6_denied_by_longer_deny(_: &Tables) -> Fixture {
    let p = syn("2001:db8:d:1::7", ACL6, 80);
    Fixture::drop(
        "acl6 nat: 2001:db8:d:1::7 denied by deny 2001:db8:d:1::/64 inside the allow",
        p.build(),
        DropReason::Denied,
    )
}

fn nat6_allowed_by_longer_allow(t: &Tables) -> Fixture {
    let p = syn("2001:db8:d:1:1::7", ACL6, 80);
    let out = dnat_to(&p, t, "acl6", "2001:db8:a::74");
    Fixture::tx(
        "acl6 nat: 2001:db8:d:1:1::7 allowed by allow 2001:db8:d:1:1::/80 inside the deny",
        p.build(),
        BACKENDS,
        out,
    )
}

fn nat6_denied_by_no_allow(_: &Tables) -> Fixture {
    let p = syn("2001:db8:c::7", ACL6, 80);
    Fixture::drop(
        "acl6 nat: 2001:db8:c::7 matches no rule of a vip with an allow list: denied",
        p.build(),
        DropReason::Denied,
    )
}

fn fullnat4_allowed(t: &Tables) -> Fixture {
    let c = "198.51.100.7";
    let p = syn(c, ACLF4, 443);
    let h = flow_hash(c, ACLF4, 40000, 443, TCP);
    let lport = snat_port(TCP, "10.0.0.74", 8443, "10.1.0.150", h);
    let out = to_backend(
        &p,
        mac_of(t, "aclf4"),
        ("10.1.0.150", lport),
        ("10.0.0.74", 8443),
    );
    Fixture::tx(
        "aclf4 fullnat: 198.51.100.7 allowed by allow 0.0.0.0/0",
        p.build(),
        BACKENDS,
        out,
    )
}

fn fullnat4_denied(_: &Tables) -> Fixture {
    let p = syn("198.51.100.130", ACLF4, 443);
    Fixture::drop(
        "aclf4 fullnat: 198.51.100.130 denied by deny 198.51.100.128/25, no port taken",
        p.build(),
        DropReason::Denied,
    )
}

fn dr6_allowed(t: &Tables) -> Fixture {
    let p = syn("2001:db8:c::7", ACLDR6, 80);
    let out = p.clone().macs(mac_of(t, "acldr6"), OUR_MAC).build();
    Fixture::tx(
        "acldr6 dr: 2001:db8:c::7 not on the deny list: macs only",
        p.build(),
        BACKENDS,
        out,
    )
}

fn dr6_denied(_: &Tables) -> Fixture {
    let p = syn("2001:db8:e::9", ACLDR6, 80);
    Fixture::drop(
        "acldr6 dr: 2001:db8:e::9 denied by prefix_list partners (its ipv6 half)",
        p.build(),
        DropReason::Denied,
    )
}

const TUN6: Tun = Tun {
    vip: "acltun6",
    client: "2001:db8:c::7",
    addr: ACLTUN6,
    backend: "2001:db8:a::76",
    udp_port: None,
    vni: None,
};

fn tunnel6_allowed(t: &Tables) -> Fixture {
    let p = Pkt::new(TUN6.client, ACLTUN6, TCP, tcp(40000, 80, SYN, 77, b""));
    let out = encapsulated(t, &TUN6, &p);
    Fixture::tx(
        "acltun6 ipip: 2001:db8:c::7 allowed by allow 2001:db8:c::/48: encapsulated 6in6",
        p.build(),
        BACKENDS,
        out,
    )
}

fn tunnel6_denied(_: &Tables) -> Fixture {
    let p = syn("2001:db8:e::9", ACLTUN6, 80);
    Fixture::drop(
        "acltun6 ipip: 2001:db8:e::9 outside the allow list: denied",
        p.build(),
        DropReason::Denied,
    )
}
