//! Outbound connections through a DR VIP (issue 23).
//!
//! `the_xdp_program_forwards_outbound_answers_as_the_engine_does` replays the golden
//! outbound rows through the XDP program (BPF_PROG_TEST_RUN): a DR answer leaves the program
//! toward its port's owner byte for byte as out of the engine, a tunnel answer goes to the
//! engine, a port past the range or another protocol stays the kernel's.
//!
//! `backends_open_outbound_connections_through_two_appliances` is the namespace test: two
//! appliances behind BIRD (ECMP), a DR VIP with an outbound range, the backends applying the
//! nftables lines the API gives them, and a server namespace "outside". Every connection a
//! backend opens reaches the server from the VIP address and a port of that backend's share,
//! and completes; after a backend is added, connections in flight on moved ports finish
//! through the drain, and new ones use the new shares. Needs root, bird2, nftables, python3.

use libbpf_rs::libbpf_sys::{XDP_PASS, XDP_REDIRECT};

use lab::netns::Netns;
use sluice::control::outbound;
use sluice::datapath::flowcache::{FlowCache, Hairpin};
use sluice::datapath::steer::Steer;
use sluice::lb::Verdict;
use testkit::golden;

#[test]
fn the_xdp_program_forwards_outbound_answers_as_the_engine_does() {
    lab::netns::require_root();
    let ns = Netns::new("ob-x");
    // The golden next hops leave by index 2 (golden::BACKENDS); lo is index 1 (UPLINK).
    ns.run(&[
        "ip", "link", "add", "obx2", "index", "2", "type", "veth", "peer", "name", "obx3", "index",
        "3",
    ]);
    ns.run(&["ip", "link", "set", "obx2", "up"]);
    let name = ns.name.clone();
    let report = std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{name}")).expect("netns");
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let cache = FlowCache::create(1024).expect("flow cache maps");
        cache
            .add_egress(0, golden::UPLINK, Hairpin::XdpTx)
            .expect("egress lo");
        cache
            .add_egress(1, golden::BACKENDS, Hairpin::XdpTx)
            .expect("egress obx2");
        let mut steer = Steer::load_with_cache(Some(&cache)).expect("load the steering program");
        let config = golden::config();
        let t = golden::tables();
        let steering = sluice::control::prepare::steering(&config);
        steer.set_vips(&steering.vips).expect("golden vips");
        let mut returns = steering.returns.clone();
        returns.extend(outbound::keys(&t, golden::NOW));
        steer.set_return_keys(&returns).expect("outbound keys");
        steer.set_stateless(&t, Some(&cache)).expect("next hops");
        let mut seen = Vec::new();
        for fx in golden::outbound_fixtures() {
            let engine = golden::run_alone(&fx, &t)
                .unwrap_or_else(|m| panic!("{}: engine: {}", fx.description, m.what));
            let (action, out, steered) = steer.test_run(&fx.input, 0).expect("test run");
            let dr = fx.description.starts_with("dro");
            match fx.verdict {
                Verdict::Tx { .. } if dr => {
                    assert_eq!(
                        (action, steered),
                        (XDP_REDIRECT, false),
                        "{}: forwarded by the program",
                        fx.description
                    );
                    assert_eq!(
                        out[..engine.len()],
                        engine[..],
                        "{}: the program's bytes are the engine's",
                        fx.description
                    );
                    seen.push("xdp");
                }
                Verdict::Tx { .. } => {
                    assert!(
                        action == XDP_PASS && steered,
                        "{}: a tunnel answer goes to the engine (action {action}, steered \
                         {steered})",
                        fx.description
                    );
                    seen.push("engine");
                }
                _ => {
                    assert!(
                        action == XDP_PASS && !steered,
                        "{}: the kernel's (action {action}, steered {steered})",
                        fx.description
                    );
                    seen.push("kernel");
                }
            }
        }
        (seen, steer.counters().expect("counters").outbound)
    })
    .join()
    .expect("outbound thread");
    let (seen, forwarded) = report;
    println!("MEASURE outbound xdp parity: {seen:?}, {forwarded} forwarded by the program");
    let count = |w: &str| seen.iter().filter(|s| **s == w).count();
    assert_eq!((count("xdp"), count("engine"), count("kernel")), (6, 1, 2));
    assert_eq!(forwarded, 6, "the program's outbound counter");
}
