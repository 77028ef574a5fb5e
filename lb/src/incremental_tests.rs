//! Property tests of incremental builds: a chain of versions, each built against the one
//! before ([`Tables::build_from`]), must equal a full build of the same inputs after every
//! change, and a VIP whose ring inputs did not change must keep the very same ring.

use std::collections::HashSet;
use std::sync::Arc;

use proptest::prelude::*;

use super::tables::Tables;
use config::{BackendState, Config, Mode, Scheduler, Vip};
use testkit::unit::{backend, vip, with_vips as config};

/// One change between versions.
#[derive(Debug, Clone)]
enum Change {
    /// Flip the health of backend `b` of VIP `v` (indexes wrap).
    Health(usize, usize),
    Weight(usize, usize, u32),
    State(usize, usize, u8),
    AddBackend(usize, u8),
    RemoveBackend(usize, usize),
    AddVip(u8),
    RemoveVip(usize),
    TableSize(usize, bool),
    Scheduler(usize),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        4 => (any::<usize>(), any::<usize>()).prop_map(|(v, b)| Change::Health(v, b)),
        2 => (any::<usize>(), any::<usize>(), 0u32..5).prop_map(|(v, b, w)| Change::Weight(v, b, w)),
        2 => (any::<usize>(), any::<usize>(), 0u8..3).prop_map(|(v, b, s)| Change::State(v, b, s)),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(v, a)| Change::AddBackend(v, a)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(v, b)| Change::RemoveBackend(v, b)),
        1 => any::<u8>().prop_map(Change::AddVip),
        1 => any::<usize>().prop_map(Change::RemoveVip),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(v, big)| Change::TableSize(v, big)),
        1 => any::<usize>().prop_map(Change::Scheduler),
    ]
}

/// The inputs of a version: the config and the (vip, backend address) pairs that are down.
#[derive(Debug, Clone)]
struct World {
    config: Config,
    down: HashSet<(String, std::net::IpAddr)>,
}

fn new_vip(n: u8) -> Vip {
    let backends = (0..3 + n % 4)
        .map(|i| backend(&format!("10.{n}.0.{}", i + 1), 80, 1))
        .collect();
    let mut v = vip(
        &format!("v{n}"),
        &format!("192.0.2.{n}"),
        80,
        Mode::Dr,
        backends,
    );
    v.maglev_table_size = 251;
    v
}

impl World {
    fn apply(&mut self, c: &Change) {
        let vips = &mut self.config.vips;
        let pick = |vips: &mut Vec<Vip>, v: usize| {
            let n = vips.len();
            (n > 0).then(|| v % n)
        };
        match *c {
            Change::Health(v, b) => {
                if let Some(v) = pick(vips, v)
                    && !vips[v].backends.is_empty()
                {
                    let vip = &vips[v];
                    let key = (
                        vip.name.clone(),
                        vip.backends[b % vip.backends.len()].address,
                    );
                    if !self.down.remove(&key) {
                        self.down.insert(key);
                    }
                }
            }
            Change::Weight(v, b, w) => {
                if let Some(v) = pick(vips, v)
                    && !vips[v].backends.is_empty()
                {
                    let n = vips[v].backends.len();
                    vips[v].backends[b % n].weight = w;
                }
            }
            Change::State(v, b, s) => {
                if let Some(v) = pick(vips, v)
                    && !vips[v].backends.is_empty()
                {
                    let n = vips[v].backends.len();
                    vips[v].backends[b % n].state = [
                        BackendState::Active,
                        BackendState::Drain,
                        BackendState::Disabled,
                    ][usize::from(s)];
                }
            }
            Change::AddBackend(v, a) => {
                if let Some(v) = pick(vips, v) {
                    let addr: std::net::IpAddr = format!("10.200.{v}.{a}").parse().unwrap();
                    if vips[v].backends.iter().all(|b| b.address != addr) {
                        vips[v].backends.push(backend(&addr.to_string(), 80, 1));
                    }
                }
            }
            Change::RemoveBackend(v, b) => {
                if let Some(v) = pick(vips, v)
                    && !vips[v].backends.is_empty()
                {
                    let n = vips[v].backends.len();
                    vips[v].backends.remove(b % n);
                }
            }
            Change::AddVip(n) => {
                if vips.iter().all(|v| v.name != format!("v{n}")) {
                    let at = usize::from(n) % (vips.len() + 1);
                    vips.insert(at, new_vip(n));
                }
            }
            Change::RemoveVip(v) => {
                if let Some(v) = pick(vips, v) {
                    vips.remove(v);
                }
            }
            Change::TableSize(v, big) => {
                if let Some(v) = pick(vips, v) {
                    vips[v].maglev_table_size = if big { 257 } else { 251 };
                }
            }
            Change::Scheduler(v) => {
                if let Some(v) = pick(vips, v) {
                    vips[v].scheduler = match vips[v].scheduler {
                        Scheduler::Maglev => Scheduler::Sh,
                        _ => Scheduler::Maglev,
                    };
                }
            }
        }
    }

    fn build(&self, version: u64, previous: Option<&Tables>) -> Tables {
        let healthy =
            |v: &Vip, b: &config::Backend| !self.down.contains(&(v.name.clone(), b.address));
        Tables::build_from(&self.config, &healthy, version, previous, &Threads).expect("tables")
    }
}

/// Four threads at once, as the control plane's executor runs a storm's rings (tests may
/// start threads; the library may not).
struct Threads;

impl crate::exec::Executor for Threads {
    fn width(&self) -> usize {
        4
    }

    fn run<'a>(&self, jobs: Vec<crate::exec::Job<'a>>) {
        std::thread::scope(|s| {
            for job in jobs {
                s.spawn(job);
            }
        });
    }
}

/// Everything a worker reads, compared field by field.
fn assert_same(a: &Tables, b: &Tables) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.vips.len(), b.vips.len());
    for (x, y) in a.vips.iter().zip(&b.vips) {
        prop_assert_eq!(&x.name, &y.name);
        prop_assert_eq!(&x.backends, &y.backends);
        prop_assert_eq!(&*x.ring, &*y.ring, "ring of {}", x.name);
        prop_assert_eq!(&x.buckets, &y.buckets);
    }
    prop_assert_eq!(&a.backends, &b.backends);
    prop_assert_eq!(&a.eligible, &b.eligible);
    prop_assert_eq!(&a.weights, &b.weights);
    prop_assert_eq!(a.fingerprint(), b.fingerprint());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn incremental_builds_equal_full_builds(changes in proptest::collection::vec(change(), 1..30)) {
        let mut w = World {
            config: config((0..5).map(new_vip).collect()),
            down: HashSet::new(),
        };
        let mut running = w.build(1, None);
        for (i, c) in changes.iter().enumerate() {
            let before = w.clone();
            w.apply(c);
            let version = i as u64 + 2;
            let next = w.build(version, Some(&running));
            let full = w.build(version, None);
            assert_same(&next, &full)?;
            // A VIP whose config and health did not change keeps the running ring itself.
            for v in &next.vips {
                let same_inputs = before.config.vip(&v.name) == w.config.vip(&v.name)
                    && before.down.iter().filter(|d| d.0 == v.name).eq(w.down.iter().filter(|d| d.0 == v.name));
                if let Some(old) = running.vips.iter().find(|o| o.name == v.name)
                    && same_inputs
                {
                    prop_assert!(Arc::ptr_eq(&old.ring, &v.ring), "{} rebuilt after {:?}", v.name, c);
                }
            }
            prop_assert!(next.rings_built as usize <= 1 + usize::from(matches!(c, Change::AddVip(_))),
                "{} rings built for one change {:?}", next.rings_built, c);
            running = next;
        }
    }
}

#[test]
fn one_health_change_rebuilds_one_ring_of_many() {
    let mut w = World {
        config: config((0..50).map(new_vip).collect()),
        down: HashSet::new(),
    };
    let first = w.build(1, None);
    assert_eq!(first.rings_built, 50);
    w.apply(&Change::Health(7, 0));
    let second = w.build(2, Some(&first));
    assert_eq!(second.rings_built, 1, "only v7's ring");
    let rebuilt: Vec<&str> = first
        .vips
        .iter()
        .zip(&second.vips)
        .filter(|(a, b)| !Arc::ptr_eq(&a.ring, &b.ring))
        .map(|(_, b)| b.name.as_str())
        .collect();
    assert_eq!(rebuilt, ["v7"]);
    assert_ne!(first.fingerprint(), second.fingerprint());
    w.apply(&Change::Health(7, 0));
    let third = w.build(3, Some(&second));
    assert_eq!(
        third.fingerprint(),
        first.fingerprint(),
        "back up: the same tables"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A chain of health-only versions ([`Tables::with_health`], the VIPs each batch
    /// touched) equals full builds, and the VIPs a batch did not touch keep their rings.
    #[test]
    fn health_versions_equal_full_builds(
        batches in proptest::collection::vec(
            proptest::collection::vec((any::<usize>(), any::<usize>()), 1..6), 1..12),
        sh in any::<bool>(),
    ) {
        let mut vips: Vec<Vip> = (0..5).map(new_vip).collect();
        if sh {
            vips[1].scheduler = Scheduler::Sh;
        }
        let mut w = World { config: config(vips), down: HashSet::new() };
        let mut running = w.build(1, None);
        for (i, batch) in batches.iter().enumerate() {
            let mut touched = Vec::new();
            for &(v, b) in batch {
                w.apply(&Change::Health(v, b));
                touched.push(v % w.config.vips.len());
            }
            touched.sort_unstable();
            touched.dedup();
            let version = i as u64 + 2;
            let healthy = |v: &Vip, b: &config::Backend| {
                !w.down.contains(&(v.name.clone(), b.address))
            };
            let next = running
                .with_health(&w.config, &healthy, &touched, version, &Threads)
                .expect("the config these tables were built from")
                .expect("tables");
            prop_assert_eq!(next.version, version);
            assert_same(&next, &w.build(version, None))?;
            prop_assert!(next.rings_built as usize <= touched.len());
            for (slot, (old, new)) in running.vips.iter().zip(&next.vips).enumerate() {
                if !touched.contains(&slot) {
                    prop_assert!(Arc::ptr_eq(&old.ring, &new.ring), "{} rebuilt", new.name);
                }
            }
            running = next;
        }
    }
}

#[test]
fn a_health_version_needs_the_config_its_tables_came_from() {
    let w = World {
        config: config((0..4).map(new_vip).collect()),
        down: HashSet::new(),
    };
    let t = w.build(1, None);
    let up = |_: &Vip, _: &config::Backend| true;
    let mut other = w.config.clone();
    other.vips.remove(2);
    assert!(
        t.with_health(&other, &up, &[1], 2, &Threads).is_none(),
        "a VIP fewer"
    );
    let mut other = w.config.clone();
    other.vips[1].backends.pop();
    assert!(
        t.with_health(&other, &up, &[1], 2, &Threads).is_none(),
        "a backend fewer"
    );
    let mut other = w.config.clone();
    other.vips[1].backends[0].address = "10.99.0.1".parse().expect("literal");
    assert!(
        t.with_health(&other, &up, &[1], 2, &Threads).is_none(),
        "another backend"
    );
    let same = t
        .with_health(&w.config, &up, &[1], 2, &Threads)
        .expect("same config");
    assert_eq!(same.expect("tables").fingerprint(), t.fingerprint());
}

/// A storm that touches more VIPs than one thread builds for (their rings built on every
/// core) gives the tables a full build gives, and counts each ring it built once.
#[test]
fn a_storm_over_many_vips_builds_their_rings_in_parallel_as_a_full_build_would() {
    let mut w = World {
        config: config((0..80).map(new_vip).collect()),
        down: HashSet::new(),
    };
    let running = w.build(1, None);
    let touched: Vec<usize> = (0..80).filter(|v| v % 3 != 1).collect();
    for &v in &touched {
        w.apply(&Change::Health(v, v));
    }
    let healthy = |v: &Vip, b: &config::Backend| !w.down.contains(&(v.name.clone(), b.address));
    let next = running
        .with_health(&w.config, &healthy, &touched, 2, &Threads)
        .expect("the config these tables were built from")
        .expect("tables");
    assert_same(&next, &w.build(2, None)).expect("equal to a full build");
    assert_eq!(next.rings_built as usize, touched.len());
    for (slot, (old, new)) in running.vips.iter().zip(&next.vips).enumerate() {
        assert_eq!(
            Arc::ptr_eq(&old.ring, &new.ring),
            !touched.contains(&slot),
            "{}",
            new.name
        );
    }
}
