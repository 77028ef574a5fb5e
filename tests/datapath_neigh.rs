//! Route and neighbour resolution through rtnetlink (`datapath::neigh`), in namespaces:
//! a live peer is resolved (the resolver makes the kernel ARP for it), a route through a
//! gateway resolves to the gateway's MAC, a silent next hop and a missing route fail with
//! their own errors, and neighbour and route changes arrive on the watch channel.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use lab::netns::{Netns, link, require_program, require_root};
use lab::testing::async_in;
use sluice::datapath::neigh::{NeighError, NetChange, Resolver, watch};

#[test]
fn resolves_peers_and_gateways_and_reports_what_it_cannot() {
    require_root();
    require_program("ip", "iproute2");
    let me = Netns::new("nbm");
    let peer = Netns::new("nbp");
    link(&me, "m0", &peer, "p0", "10.73.0");
    me.run(&["ip", "route", "add", "10.99.0.0/16", "via", "10.73.0.2"]);
    let my_mac = me.mac("m0");
    let peer_mac = peer.mac("p0");
    let ns = me.name.clone();
    async_in(&me, move || async move {
        let r = Resolver::new()
            .expect("resolver")
            .with_wait(Duration::from_millis(1500));
        let mut changes = watch().expect("watch");

        // The neighbour table is empty: resolving makes the kernel ARP for the peer.
        let n = r
            .resolve(IpAddr::V4(Ipv4Addr::new(10, 73, 0, 2)))
            .await
            .expect("peer");
        assert_eq!(n.dst_mac, peer_mac);
        assert_eq!(n.src_mac, my_mac);
        assert_eq!(n.src_ip, IpAddr::V4(Ipv4Addr::new(10, 73, 0, 1)));
        assert_eq!(n.next_hop, IpAddr::V4(Ipv4Addr::new(10, 73, 0, 2)));

        // Behind a gateway: the frame goes to the gateway's MAC.
        let n = r
            .resolve(IpAddr::V4(Ipv4Addr::new(10, 99, 3, 4)))
            .await
            .expect("via gateway");
        assert_eq!(n.next_hop, IpAddr::V4(Ipv4Addr::new(10, 73, 0, 2)));
        assert_eq!(n.dst_mac, peer_mac);

        // Nobody answers for .77: no MAC is invented, the failure is counted.
        let e = r
            .resolve(IpAddr::V4(Ipv4Addr::new(10, 73, 0, 77)))
            .await
            .expect_err("silent");
        assert!(matches!(e, NeighError::Unresolved { .. }), "{e}");
        assert_eq!(r.unresolved_count(), 1);

        let e = r
            .resolve(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 1)))
            .await
            .expect_err("no route");
        assert!(matches!(e, NeighError::NoRoute(_)), "{e}");

        // Changes the control plane must react to arrive on the watch channel.
        let ns_name = ns.clone();
        let cmd = |args: &[&str]| {
            let mut full = vec!["netns", "exec", ns_name.as_str()];
            full.extend_from_slice(args);
            let st = std::process::Command::new("ip")
                .args(&full)
                .status()
                .expect("ip");
            assert!(st.success(), "{args:?}");
        };
        cmd(&[
            "ip",
            "neigh",
            "replace",
            "10.73.0.50",
            "lladdr",
            "02:00:00:00:00:50",
            "dev",
            "m0",
        ]);
        cmd(&["ip", "route", "add", "10.98.0.0/16", "via", "10.73.0.2"]);
        let mut saw_neigh = false;
        let mut saw_route = false;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !(saw_neigh && saw_route) {
            let c = tokio::time::timeout_at(deadline, changes.recv())
                .await
                .expect("changes arrive in time")
                .expect("channel open");
            match c {
                NetChange::Neighbour { addr, mac, .. }
                    if addr == IpAddr::V4(Ipv4Addr::new(10, 73, 0, 50)) =>
                {
                    assert_eq!(mac, Some([2, 0, 0, 0, 0, 0x50]));
                    saw_neigh = true;
                }
                NetChange::Route {
                    destination: Some((d, 16)),
                    removed: false,
                } if d == IpAddr::V4(Ipv4Addr::new(10, 98, 0, 0)) => {
                    saw_route = true;
                }
                _ => {}
            }
        }
    })
    .join()
    .expect("resolver thread");
}
