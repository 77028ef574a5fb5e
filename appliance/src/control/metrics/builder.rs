//! Building a registry of metric families: families by name, labels as pairs, and the
//! one-line setters every family module uses.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(super) type Labels = Vec<(String, String)>;

pub(super) fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Builds families and registers them by name.
pub(super) struct Builder {
    pub(super) reg: Registry,
}

impl Builder {
    pub(super) fn counter(&mut self, name: &str, help: &str) -> Family<Labels, Counter> {
        let f = Family::<Labels, Counter>::default();
        self.reg.register(name, help, f.clone());
        f
    }

    pub(super) fn gauge(&mut self, name: &str, help: &str) -> Family<Labels, Gauge> {
        let f = Family::<Labels, Gauge>::default();
        self.reg.register(name, help, f.clone());
        f
    }

    pub(super) fn fgauge(
        &mut self,
        name: &str,
        help: &str,
    ) -> Family<Labels, Gauge<f64, AtomicU64>> {
        let f = Family::<Labels, Gauge<f64, AtomicU64>>::default();
        self.reg.register(name, help, f.clone());
        f
    }
}

pub(super) fn set(f: &Family<Labels, Counter>, l: Labels, v: u64) {
    f.get_or_create(&l).inc_by(v);
}

pub(super) fn gset(f: &Family<Labels, Gauge>, l: Labels, v: i64) {
    f.get_or_create(&l).set(v);
}

impl Builder {
    /// An unlabelled counter with value `v`.
    pub(super) fn counter1(&mut self, name: &str, help: &str, v: u64) {
        let c = Counter::<u64>::default();
        c.inc_by(v);
        self.reg.register(name, help, c);
    }

    /// An unlabelled gauge with value `v`.
    pub(super) fn gauge1(&mut self, name: &str, help: &str, v: i64) {
        let g = Gauge::<i64>::default();
        g.set(v);
        self.reg.register(name, help, g);
    }
}
