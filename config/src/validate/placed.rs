//! Where the VIPs accepted so far sit on the wire, so that each new `[[vip]]` is checked
//! against the others in time independent of how many there are: a VIP may clash only with
//! VIPs of its own tenant, address and protocol, and among those only through its port
//! (served twice, or port 0 beside any other) or an `outbound` range (see
//! `outbound::clash_with`). A file of 100,000 VIPs is checked in one pass instead of
//! comparing every VIP with every earlier one.
//!
//! The answer is the one a scan of the earlier VIPs in file order gives (the earliest VIP
//! that clashes, and the message for that pair), which the tests check against that scan.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use crate::PortRange;
use crate::model::{Protocol, Vip};

/// The accepted VIPs by (tenant, address, protocol).
#[derive(Debug, Default)]
pub(super) struct Placed {
    groups: HashMap<(Option<u32>, IpAddr, Protocol), Group>,
}

/// The accepted VIPs of one tenant, address and protocol, as indices into the accepted list.
/// They never clash with each other, so each port is served once, a port-0 VIP is alone in
/// its group, and the outbound ranges are disjoint.
#[derive(Debug)]
struct Group {
    /// The group's earliest VIP.
    first: usize,
    /// Port (never 0) -> the VIP that serves it.
    ports: BTreeMap<u16, usize>,
    /// The VIP that serves every port (port 0).
    all_ports: Option<usize>,
    /// The outbound ranges by first port, with their VIPs.
    ranges: BTreeMap<u16, (PortRange, usize)>,
    /// The earliest VIP with an outbound range.
    first_range: Option<usize>,
}

impl Placed {
    /// Why `vip` cannot join `accepted` (the VIPs added so far, in file order), if it cannot.
    pub(super) fn clash(&self, accepted: &[Vip], vip: &Vip) -> Option<String> {
        let g = self
            .groups
            .get(&(vip.tenant_vni, vip.address, vip.protocol))?;
        if let Some(o) = g.outbound_clash(vip) {
            return super::outbound::clash_with(vip, &accepted[o]);
        }
        g.overlap(vip).map(|o| overlap_message(vip, &accepted[o]))
    }

    /// Records `vip`, accepted as the `index`-th VIP.
    pub(super) fn add(&mut self, index: usize, vip: &Vip) {
        let g = self
            .groups
            .entry((vip.tenant_vni, vip.address, vip.protocol))
            .or_insert_with(|| Group {
                first: index,
                ports: BTreeMap::new(),
                all_ports: None,
                ranges: BTreeMap::new(),
                first_range: None,
            });
        if vip.port == 0 {
            g.all_ports.get_or_insert(index);
        } else {
            g.ports.entry(vip.port).or_insert(index);
        }
        if let Some(o) = vip.outbound {
            g.ranges.insert(o.range.first, (o.range, index));
            g.first_range.get_or_insert(index);
        }
    }
}

impl Group {
    /// The earliest VIP whose outbound range or ports clash with `vip`'s (any of the three
    /// cases of `outbound::clash_with`).
    fn outbound_clash(&self, vip: &Vip) -> Option<usize> {
        let mut found: Option<usize> = None;
        let mut take = |i: usize| found = Some(found.map_or(i, |f| f.min(i)));
        if let Some(a) = vip.outbound.map(|o| o.range) {
            // Its range overlaps theirs: the disjoint ranges that end at or after a.first,
            // among those that start at or before a.last.
            for (r, i) in self.ranges.range(..=a.last).rev().map(|(_, v)| v) {
                if r.last < a.first {
                    break;
                }
                take(*i);
            }
            // Its range holds a port they serve.
            self.all_ports.into_iter().for_each(&mut take);
            for (_, i) in self.ports.range(a.first..=a.last) {
                take(*i);
            }
        }
        // Its port is in their range.
        if vip.port == 0 {
            self.first_range.into_iter().for_each(&mut take);
        } else if let Some((_, (r, i))) = self.ranges.range(..=vip.port).next_back()
            && r.contains(vip.port)
        {
            take(*i);
        }
        found
    }

    /// The earliest VIP serving `vip`'s port (either serving every port counts).
    fn overlap(&self, vip: &Vip) -> Option<usize> {
        if vip.port == 0 {
            return Some(self.first);
        }
        let served = self.ports.get(&vip.port).copied();
        match (served, self.all_ports) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `vip` serves a port `o` serves, on the same tenant, address and protocol.
fn overlap_message(vip: &Vip, o: &Vip) -> String {
    format!(
        "{} {}:{} overlaps vip {:?}",
        vip.protocol.name(),
        vip.address,
        vip.port,
        o.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::model::OutboundPorts;
    use proptest::prelude::*;
    use std::time::Duration;

    /// The scan the index replaces: every earlier VIP in file order, outbound clashes
    /// first, then ports.
    fn scan(before: &[Vip], vip: &Vip) -> Option<String> {
        let same = |o: &&Vip| {
            o.tenant_vni == vip.tenant_vni && o.address == vip.address && o.protocol == vip.protocol
        };
        if let Some(why) = before
            .iter()
            .filter(same)
            .find_map(|o| crate::validate::outbound::clash_with(vip, o))
        {
            return Some(why);
        }
        before
            .iter()
            .filter(same)
            .find(|o| o.port == vip.port || o.port == 0 || vip.port == 0)
            .map(|o| overlap_message(vip, o))
    }

    fn template() -> Vip {
        let text = "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\
                    [[vip]]\nname = \"t\"\naddress = \"192.0.2.1\"\nport = 80\nmode = \"dr\"\n\
                    [[vip.backend]]\naddress = \"10.0.0.1\"\n";
        Config::from_toml_str(text).expect("template").vips[0].clone()
    }

    /// A VIP from a small space of tenants, addresses, protocols, ports and ranges, so
    /// that clashes of every kind are common.
    fn spot() -> impl Strategy<Value = (Option<u32>, u8, bool, u16, Option<(u16, u16)>)> {
        let ports = prop::sample::select(vec![0u16, 53, 80, 1500, 2000, 40000, 45000, 50000]);
        let ranges = prop::option::of(prop::sample::select(vec![
            (1024u16, 2048u16),
            (1500, 1500),
            (40000, 49999),
            (44000, 46000),
            (49999, 60000),
            (2049, 39999),
        ]));
        (
            prop::option::of(0u32..2),
            0u8..2,
            any::<bool>(),
            ports,
            ranges,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]
        #[test]
        fn the_index_answers_as_the_scan_does(spots in prop::collection::vec(spot(), 1..40)) {
            let t = template();
            let (mut a, mut b) = (Vec::<Vip>::new(), Vec::<Vip>::new());
            let mut placed = Placed::default();
            for (n, (tenant, addr, udp, port, range)) in spots.into_iter().enumerate() {
                let mut v = t.clone();
                v.name = format!("v{n}");
                v.tenant_vni = tenant;
                v.address = IpAddr::from([192, 0, 2, addr]);
                v.protocol = if udp { Protocol::Udp } else { Protocol::Tcp };
                v.port = port;
                v.outbound = range.map(|(f, l)| OutboundPorts {
                    range: PortRange { first: f, last: l },
                    drain: Duration::ZERO,
                });
                let want = scan(&a, &v);
                let got = placed.clash(&b, &v);
                prop_assert_eq!(&got, &want, "vip {}", n);
                if want.is_none() {
                    a.push(v.clone());
                    placed.add(b.len(), &v);
                    b.push(v);
                }
            }
        }
    }
}
