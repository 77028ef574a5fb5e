//! The one builder of configurations for unit tests: a VIP and a backend with every field at
//! its default ([`vip`], [`backend`]), an appliance holding given VIPs ([`with_vips`]), a
//! configuration text parsed or the test stopped with the reason ([`parse`]), and the DR VIP
//! with outbound ports the outbound tests share ([`outbound_dr`]).
//!
//! Only `config`'s types cross this module's boundary: they are one copy in every build, so
//! `lb`'s own unit tests (which link a second copy of `lb` through this crate) take them too.
//! A new field of `Vip` or `Backend` is written here once, not in each test file.

use config::{Backend, BackendState, Config, HashFields, Mode, Protocol, Scheduler, Vip};

/// The appliance every built configuration runs on: one interface, small sizes.
const APPLIANCE: &str = "[appliance]\nname = \"test\"\ninterfaces = [\"eth0\"]\n\
                         conntrack_capacity = 1024\nmaglev_table_size = 65537\n";

/// A configuration text, parsed and validated; a text the parser refuses stops the test with
/// the parser's message.
pub fn parse(text: &str) -> Config {
    Config::from_toml_str(text).unwrap_or_else(|e| panic!("the test's configuration: {e}"))
}

/// An active backend of weight `weight` at `addr:port`, nothing else set.
pub fn backend(addr: &str, port: u16, weight: u32) -> Backend {
    Backend {
        address: addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")),
        port,
        weight,
        state: BackendState::Active,
        max_connections: None,
        resume_connections: None,
        slow_start: None,
        vtep: None,
        health_checks: None,
        inhibit_on_failure: None,
        sorry: false,
    }
}

/// `n` active backends `10.9.0.1` to `10.9.0.n`, port 80, weight 1.
pub fn backends(n: u8) -> Vec<Backend> {
    (1..=n)
        .map(|i| backend(&format!("10.9.0.{i}"), 80, 1))
        .collect()
}

/// A TCP VIP on Maglev (5-tuple, 65,537 slots) with these backends and every other field at
/// its default. Not validated: a test may build what a file could not say.
pub fn vip(name: &str, addr: &str, port: u16, mode: Mode, backends: Vec<Backend>) -> Vip {
    Vip {
        name: name.into(),
        address: addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}")),
        port,
        protocol: Protocol::Tcp,
        mode,
        scheduler: Scheduler::Maglev,
        hash: HashFields::FiveTuple,
        maglev_table_size: 65537,
        health_checks: Vec::new(),
        health_combine: config::Combine::All,
        inhibit_on_failure: false,
        fallback: config::Fallback::default(),
        announce: config::Announce::default(),
        health_via_vip: false,
        client_address: Default::default(),
        syn_proxy: Default::default(),
        snat: Vec::new(),
        communities: Vec::new(),
        backends,
        scheduler_flags: Vec::new(),
        persistence: None,
        persistence_netmask: 32,
        overflow: config::Overflow::Drop,
        slow_start: None,
        udp_one_packet: false,
        outbound: None,
        tenant_vni: None,
        quic_lb: None,
        acl: Default::default(),
    }
}

/// The test appliance (one interface, a 1,024-entry connection table) holding `vips` as
/// given (not validated).
pub fn with_vips(vips: Vec<Vip>) -> Config {
    // A file needs a VIP to validate: this one is replaced.
    let mut c = parse(&format!(
        "{APPLIANCE}[[vip]]\nname = \"replaced\"\naddress = \"192.0.2.254\"\nport = 80\n\
         [[vip.backend]]\naddress = \"10.9.9.9\"\n"
    ));
    c.vips = vips;
    c
}

/// A DR VIP `web` (192.0.2.10:80) with outbound ports 40000-40999 drained over `drain`
/// (`"10s"`), and one backend per `(address, state)` pair.
pub fn outbound_dr(backends: &[(&str, &str)], drain: &str) -> Config {
    let mut s = format!(
        "{APPLIANCE}\n[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
         mode = \"dr\"\noutbound = \"40000-40999\"\noutbound_drain = \"{drain}\"\n"
    );
    for (a, state) in backends {
        s.push_str(&format!(
            "[[vip.backend]]\naddress = \"{a}\"\nstate = \"{state}\"\n"
        ));
    }
    parse(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_vip_in_a_file_validates() {
        // What the builder leaves at its default is what a file that does not name the
        // field gets (the weight is the caller's: a file's default is 100): the built VIP,
        // written as text, parses back equal.
        let built = vip("web", "192.0.2.10", 80, Mode::Nat, backends(2));
        let text = format!(
            "{APPLIANCE}\n[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
             mode = \"nat\"\n[[vip.backend]]\naddress = \"10.9.0.1\"\nport = 80\nweight = 1\n\
             [[vip.backend]]\naddress = \"10.9.0.2\"\nport = 80\nweight = 1\n"
        );
        let parsed = parse(&text);
        assert_eq!(parsed.vips, vec![built]);
        assert_eq!(with_vips(parsed.vips.clone()), parsed);
    }

    #[test]
    fn the_outbound_vip_has_its_backends_and_drain() {
        let c = outbound_dr(&[("10.1.0.11", "active"), ("10.1.0.12", "disabled")], "20s");
        let v = &c.vips[0];
        assert_eq!(v.mode, Mode::Dr);
        assert_eq!(v.backends.len(), 2);
        assert_eq!(v.backends[1].state, BackendState::Disabled);
        assert!(v.outbound.is_some());
    }
}
