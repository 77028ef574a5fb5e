//! The VIPs' allow and deny lists (issue 46): frames dropped per VIP and list, the XDP
//! program's drops (`datapath/bpf/acl.h`) and the engine's (`lb::acl`) together, so the
//! count is the same whichever stage a frame was refused at.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::builder::{Builder, labels, set};
use crate::control::model::View;
use crate::lb::Tables;

/// Registers `sluice_acl_dropped_total`: a series for every list of every VIP of the
/// running tables (at zero before its first drop), and for any list the program still
/// counted under.
pub(super) fn families(b: &mut Builder, view: &View, tables: &Tables) {
    let dropped = b.counter(
        "sluice_acl_dropped",
        "Frames dropped because the VIP's allow and deny lists refused their source, by the \
         list that decided (\"allow\": no rule matched a VIP with an allow list), in the XDP \
         program and in the engine together",
    );
    let mut sums: BTreeMap<(String, String), u64> = BTreeMap::new();
    for v in &tables.vips {
        for c in v.acl.iter().flat_map(|a| a.counters.iter()) {
            *sums.entry((v.name.clone(), c.list.clone())).or_default() +=
                c.dropped.load(Ordering::Relaxed);
        }
    }
    for (k, n) in view.datapath.iter().flat_map(|d| d.acl_drops.iter()) {
        *sums.entry(k.clone()).or_default() += n;
    }
    for ((vip, list), n) in sums {
        set(&dropped, labels(&[("vip", &vip), ("list", &list)]), n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::DatapathStats;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    #[test]
    fn the_program_and_the_engine_count_under_one_series_per_vip_and_list() {
        let config = testkit::golden::config();
        let tables = Tables::build(&config, &|_, _| true, 1).expect("tables");
        let acl4 = tables.vips.iter().find(|v| v.name == "acl4").unwrap();
        let a = acl4.acl.as_ref().expect("acl4 has lists");
        // Two engine drops under "deny" (198.51.100.130), one under "allow" (no rule).
        assert!(!a.admits(crate::lb::hash::addr_to_u128(
            "198.51.100.130".parse().unwrap()
        )));
        assert!(!a.admits(crate::lb::hash::addr_to_u128(
            "198.51.100.131".parse().unwrap()
        )));
        assert!(!a.admits(crate::lb::hash::addr_to_u128("100.64.0.1".parse().unwrap())));
        let view = View {
            datapath: Some(DatapathStats {
                workers: Vec::new(),
                interfaces: Vec::new(),
                steer: Default::default(),
                acl_drops: vec![(("acl4".into(), "deny".into()), 40)],
            }),
            ..View::default()
        };
        let mut b = Builder {
            reg: Registry::default(),
        };
        families(&mut b, &view, &tables);
        let mut out = String::new();
        encode(&mut out, &b.reg).expect("encode");
        for line in [
            "sluice_acl_dropped_total{vip=\"acl4\",list=\"deny\"} 42",
            "sluice_acl_dropped_total{vip=\"acl4\",list=\"allow\"} 1",
            "sluice_acl_dropped_total{vip=\"aclf6\",list=\"partners\"} 0",
            "sluice_acl_dropped_total{vip=\"acldr\",list=\"partners\"} 0",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
        assert!(
            !out.contains("vip=\"nat4\""),
            "a VIP without lists has no series"
        );
    }
}
