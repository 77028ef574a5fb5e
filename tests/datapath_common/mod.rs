//! What the datapath tests share that needs the appliance library (everything else is in
//! `lab::testing`): a flow cache on the golden fixtures' interfaces.

use sluice::datapath::flowcache::{FlowCache, Hairpin};
use testkit::golden;

/// A flow cache sending on both golden interfaces, lo (`golden::UPLINK`) and the veth of
/// index 2 (`golden::BACKENDS`), with XDP_TX; call it inside a
/// `lab::testing::golden_netns` namespace.
pub fn golden_cache() -> FlowCache {
    let cache = FlowCache::create(1024).expect("flow cache maps (root?)");
    cache
        .add_egress(0, golden::UPLINK, Hairpin::XdpTx)
        .expect("egress lo");
    cache
        .add_egress(1, golden::BACKENDS, Hairpin::XdpTx)
        .expect("egress of index 2");
    cache
}
