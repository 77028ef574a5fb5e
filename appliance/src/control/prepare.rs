//! The pure half of a change: config, the operator's overrides, health verdicts and next hops
//! in, the next table version out (with what the XDP program must steer and what the prober
//! must probe), or why it cannot be built. Nothing here reads a file, a socket or the clock
//! (the caller passes `now` on both clocks) or starts a thread (the rings of many VIPs are
//! built by the [`Executor`] the caller passes), and the running state is not touched: the
//! commit applies a [`Prepared`] or drops it.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use super::neighbours::NextHops;
pub use super::probes::{Targets, health_targets};

use super::change::{Override, PrepareError};
use super::policy::{self, Agents, Combined};
use super::slowstart::{Ramps, Readiness};
use crate::config::{self, Backend, Config, Mode, Vip};
use crate::lb::BackendId;
use crate::lb::Tables;
use crate::lb::exec::Executor;
use crate::lb::steering::{AclKey, ReturnKey, VipKey};

/// What the XDP program steers to the workers: VIP keys and return-traffic keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steering {
    /// Traffic to a VIP.
    pub vips: Vec<VipKey>,
    /// Return traffic the engine owns (NAT backends, FullNAT local addresses).
    pub returns: Vec<ReturnKey>,
    /// The allow and deny lists of the VIPs that have them (not tenant VIPs: the engine
    /// checks those).
    pub acls: Vec<AclKey>,
}

/// The backends' health as a change sees it.
#[derive(Debug, Clone, Copy)]
pub enum HealthSource<'a> {
    /// The verdicts the control loop holds (from the prober's transitions).
    Verdicts(&'a HashMap<BackendId, bool>),
    /// The prober's status: for a reload, so that a pair the new config adds to a probe
    /// already running gets that probe's state instead of waiting for a transition.
    Prober(&'a [health::Status]),
}

/// Everything [`prepare`] builds from.
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    /// The running version: the new one shares its rings where their inputs are the same
    /// (`None` builds every ring).
    pub running: Option<&'a Tables>,
    /// The config file as loaded.
    pub file: &'a Arc<Config>,
    /// The operator's changes to backends, layered over the file.
    pub overrides: &'a HashMap<BackendId, Override>,
    pub health: HealthSource<'a>,
    pub next_hops: &'a NextHops,
    /// This host's addresses: replies to its own traffic (health probes) are the kernel's.
    pub host_addresses: &'a [IpAddr],
    /// The version the tables get.
    pub version: u64,
    pub now: Instant,
    /// `now` on the workers' clock (CLOCK_MONOTONIC, ns): outbound drains run on it.
    pub now_ns: u64,
    /// A new config: BGP waits for the health checks to settle again.
    pub resettle: bool,
    /// The slow-start ramps of the running version (`Ramps::default()` for the first).
    pub ramps: &'a Ramps,
    /// The agents' last answers (with [`HealthSource::Verdicts`]; a reload reads the
    /// prober's).
    pub agents: &'a Agents,
    /// Builds many VIPs' rings at once (the control plane's cores; `lb::exec::Serial` in
    /// tests and tools).
    pub exec: &'a dyn Executor,
}

/// The next version, built and not yet running.
#[derive(Debug)]
pub struct Prepared {
    pub file_config: Arc<Config>,
    /// `file_config` with the overrides: what the tables were built from.
    pub config: Arc<Config>,
    /// The overrides that still apply (equal or orphaned ones dropped).
    pub overrides: HashMap<BackendId, Override>,
    pub health: HashMap<BackendId, bool>,
    pub tables: Tables,
    pub steering: Steering,
    pub targets: Targets,
    /// When BGP stops waiting for health checks, when this change restarts the wait.
    pub settle_by: Option<Instant>,
    /// The slow-start ramps this version was built with, and when their next level (or the
    /// end of an outbound drain) is due.
    pub ramps: Ramps,
    pub ramp_due: Option<Instant>,
    /// The backends several probes decide, and the agents' answers this version applies.
    pub combined: Combined,
    pub agents: Agents,
}

/// Builds the next version from `i`, or says why it cannot be built.
pub fn prepare(i: Inputs<'_>) -> Result<Prepared, PrepareError> {
    let mut overrides = i.overrides.clone();
    // Without overrides the effective config is the file's: shared, not copied (at 10,000
    // VIPs a copy is tens of megabytes).
    let config = if overrides.is_empty() {
        Arc::clone(i.file)
    } else {
        Arc::new(effective(i.file, &mut overrides))
    };
    let targets = health_targets(&config);
    let combined = Combined::of(&config);
    let (health, agents) = match i.health {
        HealthSource::Verdicts(v) => (v.clone(), i.agents.clone()),
        HealthSource::Prober(status) => (
            policy::verdicts(status, &targets, &combined),
            policy::agents(status, &targets),
        ),
    };
    // The agents' wishes go over the operator's settings, in a copy the tables are built
    // from (the file and the overrides stay as the operator wrote them).
    let config = match policy::with_agents(&config, &agents) {
        Some(c) => Arc::new(c),
        None => config,
    };
    let healthy = |v: &Vip, b: &Backend| healthy(&config, &health, v, b);
    let ready = |v: &Vip, b: &Backend| readiness(&config, &health, v, b);
    let ramps = i.ramps.next(&config, &ready, i.now);
    // Ramping backends' weights are lowered in a copy: the config keeps the weights the
    // operator set (the API shows both).
    let ramped = (!ramps.is_empty()).then(|| {
        let mut c = (*config).clone();
        let due = ramps.apply(&mut c, i.now);
        (c, due)
    });
    let (built_from, ramp_due) = match &ramped {
        Some((c, due)) => (c, *due),
        None => (&*config, None),
    };
    let mut tables = Tables::build_from(built_from, &healthy, i.version, i.running, i.exec)?;
    let egress = super::neighbours::egress(&config, &tables, i.next_hops);
    tables.set_egress(egress);
    tables.set_local_addresses(i.host_addresses);
    // The outbound drains run on the workers' clock.
    let now_ns = i.now_ns;
    tables.set_outbound(&config, i.running, now_ns);
    let mut steering = steering(&config);
    steering
        .returns
        .extend(super::outbound::keys(&tables, now_ns));
    // A version is due when a drain ends, like a slow-start level: its keys give the moved
    // ports to their new owners.
    let ramp_due = match (ramp_due, super::outbound::drain_due(&tables, i.now, now_ns)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Prepared {
        file_config: Arc::clone(i.file),
        steering,
        settle_by: i.resettle.then(|| i.now + settle_time(&config)),
        config,
        overrides,
        health,
        tables,
        targets,
        ramps,
        ramp_due,
        combined,
        agents,
    })
}

/// A health batch's version ([`prepare_health`]): the tables, and the readiness of every
/// backend of the VIPs it rebuilt, for [`Ramps::note`].
#[derive(Debug)]
pub struct HealthVersion {
    pub tables: Tables,
    pub ready: Vec<(BackendId, Readiness)>,
}

/// What a health batch's version ([`prepare_health`]) is built from.
#[derive(Clone, Copy)]
pub struct HealthInputs<'a> {
    /// The running tables, built from `config`.
    pub running: &'a Tables,
    /// The running config, overrides applied.
    pub config: &'a Config,
    /// Every verdict, the batch's included.
    pub health: &'a HashMap<BackendId, bool>,
    /// The running version's slow-start ramps.
    pub ramps: &'a Ramps,
    pub host_addresses: &'a [IpAddr],
    /// The version the tables get.
    pub version: u64,
    pub exec: &'a dyn Executor,
}

/// The next version when only health verdicts changed since `running` was built from
/// `config`: the VIPs of the `changed` pairs get their verdicts from `health` and new
/// rings, everything else is the running version's (see [`Tables::with_health`]). `None`
/// when a full [`prepare`] is needed: `running` was not built from `config`, a backend
/// ramps (`ramps`), or a touched VIP has a backend with slow start (its recovery may start
/// a ramp).
pub fn prepare_health<'a>(
    i: HealthInputs<'_>,
    changed: impl IntoIterator<Item = &'a BackendId>,
) -> Option<Result<HealthVersion, PrepareError>> {
    let (config, health) = (i.config, i.health);
    if !i.ramps.is_empty() {
        return None;
    }
    let names: HashSet<&str> = changed.into_iter().map(|id| id.vip.as_str()).collect();
    let slots: Vec<usize> = config
        .vips
        .iter()
        .enumerate()
        .filter(|(_, v)| names.contains(v.name.as_str()))
        .map(|(slot, _)| slot)
        .collect();
    let touched = || slots.iter().map(|&s| &config.vips[s]);
    if touched().any(|v| v.backends.iter().any(|b| b.slow_start(v).is_some())) {
        return None;
    }
    let healthy = |v: &Vip, b: &Backend| healthy(config, health, v, b);
    let tables = match i
        .running
        .with_health(config, &healthy, &slots, i.version, i.exec)?
    {
        Ok(t) => t,
        Err(e) => return Some(Err(e.into())),
    };
    let mut tables = tables;
    tables.set_local_addresses(i.host_addresses);
    let ready = touched()
        .flat_map(|v| v.backends.iter().map(move |b| (v, b)))
        .map(|(v, b)| (BackendId::of(v, b), readiness(config, health, v, b)))
        .collect();
    Some(Ok(HealthVersion { tables, ready }))
}

/// How a backend stands for slow start: up (takes new flows) and decided (no check, or its
/// check has given a verdict).
fn readiness(
    config: &Config,
    health: &HashMap<BackendId, bool>,
    v: &Vip,
    b: &Backend,
) -> Readiness {
    Readiness {
        up: b.state == config::BackendState::Active
            && b.weight > 0
            && healthy(config, health, v, b),
        decided: v.checks_of(b).is_empty() || health.contains_key(&BackendId::of(v, b)),
    }
}

/// Whether a backend takes new flows as far as health goes: its checks' verdict, or their
/// initial state before one; a backend without a check is healthy.
fn healthy(config: &Config, health: &HashMap<BackendId, bool>, v: &Vip, b: &Backend) -> bool {
    if v.checks_of(b).is_empty() {
        return true;
    }
    health
        .get(&BackendId::of(v, b))
        .copied()
        .unwrap_or_else(|| policy::initial_up(config, v, b))
}

/// What the XDP program must steer to the engine for `config`.
pub fn steering(config: &Config) -> Steering {
    let mut vips = Vec::new();
    let mut ret = Vec::new();
    let mut acls = Vec::new();
    for (slot, v) in config.vips.iter().enumerate() {
        if !v.acl.is_open() && v.tenant_vni.is_none() {
            acls.push(AclKey {
                slot: slot as u32,
                vip: v.name.clone(),
                v6: v.address.is_ipv6(),
                acl: v.acl.clone(),
            });
        }
        vips.push(VipKey {
            addr: v.address,
            port: v.port,
            proto: v.protocol,
            mode: v.mode,
            slot: slot as u32,
            tenant_vni: v.tenant_vni,
        });
        match v.mode {
            Mode::Nat => {
                for b in &v.backends {
                    ret.push(ReturnKey::Backend {
                        addr: b.address,
                        port: b.port,
                        proto: v.protocol,
                    });
                }
            }
            Mode::FullNat => {
                for a in &v.snat {
                    ret.push(ReturnKey::Local {
                        addr: *a,
                        port: 0,
                        proto: v.protocol,
                    });
                }
            }
            Mode::Dr | Mode::Tunnel(_) => {}
        }
    }
    ret.sort_by_key(|k| format!("{k:?}"));
    ret.dedup();
    Steering {
        vips,
        returns: ret,
        acls,
    }
}

/// The pairs BGP still waits for: while `settling`, those whose probes have not decided;
/// always, those whose decided verdict the tables do not show yet. The prober decides
/// before the loop has applied the transition (it waits in the channel behind earlier
/// commits); a first announcement then would pin new flows to a pool without that backend,
/// which other appliances do not share. Such a wait lasts one pass of the loop.
pub fn undecided<'a>(
    status: &[health::Status],
    targets: &'a Targets,
    applied: &HashMap<BackendId, bool>,
    settling: bool,
) -> HashSet<&'a BackendId> {
    let mut out = HashSet::new();
    for s in status {
        let Some(pairs) = targets.get(&s.key) else {
            continue;
        };
        let up = s.state == health::Health::Up;
        for p in pairs {
            let queued = s.decided && applied.get(p).copied().unwrap_or(false) != up;
            if queued || (settling && !s.decided) {
                out.insert(p);
            }
        }
    }
    out
}

/// How long after a (re)start the announcer waits at most for health checks to decide:
/// long enough for `rise` or `fall` results of the slowest check.
pub fn settle_time(config: &Config) -> Duration {
    config
        .health_checks
        .iter()
        .map(|c| c.interval * (c.rise.max(c.fall) + 1) + c.timeout + c.jitter)
        .max()
        .unwrap_or_default()
}

/// The config the tables are built from: the file's, with the operator's overrides.
/// Overrides of backends the file no longer has are dropped; an override equal to the
/// file's value is dropped too, so `undrain` after `drain` leaves no trace.
pub fn effective(file: &Config, overrides: &mut HashMap<BackendId, Override>) -> Config {
    let mut out = file.clone();
    let mut seen = HashSet::new();
    for v in &mut out.vips {
        for b in &mut v.backends {
            let key = BackendId::new(&v.name, b.underlay(), b.port);
            if let Some(o) = overrides.get_mut(&key) {
                if o.state == Some(b.state) {
                    o.state = None;
                }
                if o.weight == Some(b.weight) {
                    o.weight = None;
                }
                if let Some(s) = o.state {
                    b.state = s;
                }
                if let Some(w) = o.weight {
                    b.weight = w;
                }
                seen.insert(key);
            }
        }
    }
    overrides.retain(|k, o| seen.contains(k) && (o.state.is_some() || o.weight.is_some()));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::BackendState;
    use crate::lb::exec::Serial;

    pub(crate) const CFG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
port = 8080
[[vip.backend]]
address = "10.1.0.12"
port = 8080
state = "drain"
[[vip.backend]]
address = "10.1.0.12"
port = 8081
"#;

    fn cfg() -> Config {
        testkit::unit::parse(CFG)
    }

    #[test]
    fn a_verdict_the_tables_do_not_show_yet_is_undecided() {
        let text = checked();
        let c = testkit::unit::parse(&text);
        let targets = health_targets(&c);
        let (probe, pairs) = targets.iter().next().expect("a probe");
        let id = pairs[0].clone();
        let status = |decided, state| health::Status {
            key: probe.clone(),
            users: 1,
            state,
            decided,
            last_outcome: None,
            last_failure: None,
            successes: 0,
            failures: 0,
            last_change: None,
            started: 0,
            passed: 0,
            failed: 0,
            last_start: None,
            next_due: None,
            in_flight: false,
            agent: None,
        };
        let up = [status(true, health::Health::Up)];
        let applied_down = HashMap::from([(id.clone(), false)]);
        let applied_up = HashMap::from([(id.clone(), true)]);
        for settling in [true, false] {
            let queued = undecided(&up, &targets, &applied_down, settling);
            assert!(
                queued.contains(&id),
                "transition queued, settling {settling}"
            );
            let applied = undecided(&up, &targets, &applied_up, settling);
            assert!(
                !applied.contains(&id),
                "transition applied, settling {settling}"
            );
            let down = [status(true, health::Health::Down)];
            let none = undecided(&down, &targets, &HashMap::new(), settling);
            assert!(!none.contains(&id), "down and applied, settling {settling}");
        }
        let pending = [status(false, health::Health::Down)];
        assert!(undecided(&pending, &targets, &applied_down, true).contains(&id));
        assert!(
            !undecided(&pending, &targets, &applied_down, false).contains(&id),
            "after the settle time an undecided probe no longer holds the VIP back"
        );
    }

    fn key(a: &str, p: u16) -> BackendId {
        BackendId::new("web", a.parse().expect("literal"), p)
    }

    #[test]
    fn overrides_layer_over_the_file_and_vanish_when_equal_or_orphaned() {
        let file = cfg();
        let mut ov = HashMap::new();
        ov.insert(
            key("10.1.0.11", 8080),
            Override {
                state: Some(BackendState::Disabled),
                weight: Some(7),
            },
        );
        // Undrain of a backend the file drains: an override to active.
        ov.insert(
            key("10.1.0.12", 8080),
            Override {
                state: Some(BackendState::Active),
                weight: None,
            },
        );
        // Equal to the file: dropped.
        ov.insert(
            key("10.1.0.12", 8081),
            Override {
                state: Some(BackendState::Active),
                weight: Some(100),
            },
        );
        // A backend the file does not have: dropped.
        ov.insert(
            key("10.1.0.99", 80),
            Override {
                state: Some(BackendState::Drain),
                weight: None,
            },
        );
        let eff = effective(&file, &mut ov);
        let b = &eff.vips[0].backends;
        assert_eq!((b[0].state, b[0].weight), (BackendState::Disabled, 7));
        assert_eq!(b[1].state, BackendState::Active);
        assert_eq!((b[2].state, b[2].weight), (BackendState::Active, 100));
        let mut keys: Vec<_> = ov.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, vec![key("10.1.0.11", 8080), key("10.1.0.12", 8080)]);
    }

    /// The first version of `text` with `health`, as `sluice run` prepares it.
    fn first(text: &str, health: &HashMap<BackendId, bool>, version: u64) -> Prepared {
        let file = Arc::new(testkit::unit::parse(text));
        prepare(Inputs {
            running: None,
            file: &file,
            overrides: &HashMap::new(),
            health: HealthSource::Verdicts(health),
            next_hops: &NextHops::default(),
            host_addresses: &[],
            version,
            now: Instant::now(),
            now_ns: 0,
            resettle: false,
            ramps: &Ramps::default(),
            agents: &Agents::new(),
            exec: &Serial,
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn checked() -> String {
        CFG.replace("port = 80\n", "port = 80\nhealth_check = \"tcp\"\n")
            + "\n[[health_check]]\nname = \"tcp\"\nkind = \"tcp\"\n"
    }

    #[test]
    fn equal_configs_give_equal_fingerprints_and_a_weight_change_another() {
        use crate::control::fleet::fingerprint;
        let none = HashMap::new();
        // Two appliances that parsed the same text on their own, at other versions.
        let a = fingerprint(&first(CFG, &none, 3).tables);
        let b = fingerprint(&first(CFG, &none, 9).tables);
        assert_eq!(a, b);
        assert_eq!(a.len(), 16, "{a}");
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        let heavier = CFG.replacen("port = 8080\n", "port = 8080\nweight = 5\n", 1);
        assert_ne!(fingerprint(&first(&heavier, &none, 3).tables), a, "weight");
        // Checked backends start down: one verdict up, then down.
        let text = checked();
        let up = HashMap::from([(key("10.1.0.11", 8080), true)]);
        let down = HashMap::from([(key("10.1.0.11", 8080), false)]);
        assert_ne!(
            fingerprint(&first(&text, &down, 3).tables),
            fingerprint(&first(&text, &up, 3).tables),
            "health"
        );
    }

    /// A health batch's version 2 of `running`.
    fn version_2<'a>(
        running: &'a Tables,
        config: &'a Config,
        health: &'a HashMap<BackendId, bool>,
        ramps: &'a Ramps,
    ) -> HealthInputs<'a> {
        HealthInputs {
            running,
            config,
            health,
            ramps,
            host_addresses: &[],
            version: 2,
            exec: &Serial,
        }
    }

    #[test]
    fn a_health_version_equals_a_full_build_and_rebuilds_only_its_vip() {
        use crate::control::fleet::fingerprint;
        let text = checked().replace("name = \"lb1\"", "name = \"lb1\"\nmaglev_table_size = 1009")
            + "\n[[vip]]\nname = \"other\"\naddress = \"192.0.2.11\"\nport = 80\n\
               [[vip.backend]]\naddress = \"10.2.0.1\"\nport = 80\n";
        let ups = [
            ("10.1.0.11", 8080),
            ("10.1.0.12", 8080),
            ("10.1.0.12", 8081),
        ];
        let mut health: HashMap<BackendId, bool> =
            ups.iter().map(|&(a, p)| (key(a, p), true)).collect();
        let running = first(&text, &health, 1);
        let id = key("10.1.0.11", 8080);
        health.insert(id.clone(), false);
        let fast = prepare_health(
            version_2(&running.tables, &running.config, &health, &running.ramps),
            [&id],
        )
        .expect("built from this config")
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(fast.ready.len(), 3, "web's backends");
        let ready: HashMap<_, _> = fast.ready.iter().cloned().collect();
        assert!(ready.values().all(|r| r.decided));
        assert!(!ready[&id].up, "down");
        assert!(!ready[&key("10.1.0.12", 8080)].up, "drained");
        assert!(ready[&key("10.1.0.12", 8081)].up);
        let fast = fast.tables;
        let full = first(&text, &health, 2).tables;
        assert_eq!(fast.version, 2);
        assert_eq!(fingerprint(&fast), fingerprint(&full));
        assert_ne!(fingerprint(&fast), fingerprint(&running.tables));
        assert_eq!(fast.rings_built, 1, "web's ring only");
        assert!(Arc::ptr_eq(
            &fast.vips[1].ring,
            &running.tables.vips[1].ring
        ));
        assert!(!fast.eligible[0] && full.eligible == fast.eligible);
        let other = first(CFG, &HashMap::new(), 1);
        let none = Ramps::default();
        assert!(
            prepare_health(
                version_2(&running.tables, &other.config, &health, &none),
                [&id]
            )
            .is_none(),
            "tables of another config"
        );
        let slow = text.replace(
            "port = 80\nhealth_check",
            "port = 80\nslow_start = \"9s\"\nhealth_check",
        );
        let slow = first(&slow, &health, 1);
        assert!(
            prepare_health(version_2(&slow.tables, &slow.config, &health, &none), [&id]).is_none(),
            "a VIP with slow start prepares in full (a recovery may ramp)"
        );
    }

    #[test]
    fn prepare_builds_the_next_version_from_its_inputs_alone() {
        let file = Arc::new(cfg());
        let mut overrides = HashMap::new();
        overrides.insert(
            key("10.1.0.11", 8080),
            Override {
                state: Some(BackendState::Disabled),
                weight: None,
            },
        );
        let now = Instant::now();
        let p = prepare(Inputs {
            running: None,
            file: &file,
            overrides: &overrides,
            health: HealthSource::Verdicts(&HashMap::new()),
            next_hops: &NextHops::default(),
            host_addresses: &[],
            version: 7,
            now,
            now_ns: 0,
            resettle: true,
            ramps: &Ramps::default(),
            agents: &Agents::new(),
            exec: &Serial,
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.tables.version, 7);
        assert_eq!(p.config.vips[0].backends[0].state, BackendState::Disabled);
        assert_eq!(p.overrides, overrides);
        assert_eq!(p.steering.vips.len(), 1);
        assert_eq!(
            p.steering.returns.len(),
            3,
            "NAT: one return key per backend"
        );
        assert!(p.targets.is_empty(), "no health checks configured");
        assert_eq!(p.settle_by, Some(now), "no checks: nothing to wait for");
    }

    #[test]
    fn a_recovered_backend_ramps_and_each_step_rebuilds_only_its_vip_s_ring() {
        let text = CFG.replace(
            "port = 80\n",
            "port = 80\nslow_start = \"9s\"\nhealth_check = \"tcp\"\n",
        ) + "\n[[vip]]\nname = \"other\"\naddress = \"192.0.2.11\"\nport = 80\n\
               [[vip.backend]]\naddress = \"10.1.0.21\"\n\
               \n[[health_check]]\nname = \"tcp\"\nkind = \"tcp\"\ninitial = \"up\"\n";
        let file = Arc::new(testkit::unit::parse(&text));
        let t0 = Instant::now();
        let build = |health: &HashMap<BackendId, bool>, ramps: &Ramps, running, now| {
            prepare(Inputs {
                running,
                file: &file,
                overrides: &HashMap::new(),
                health: HealthSource::Verdicts(health),
                next_hops: &NextHops::default(),
                host_addresses: &[],
                version: 1,
                now,
                now_ns: 0,
                resettle: false,
                ramps,
                agents: &Agents::new(),
                exec: &Serial,
            })
            .unwrap_or_else(|e| panic!("{e}"))
        };
        let first = build(&HashMap::new(), &Ramps::default(), None, t0);
        assert!(
            first.ramps.is_empty() && first.ramp_due.is_none(),
            "no ramp at start-up"
        );
        let id = key("10.1.0.12", 8081);
        let down = HashMap::from([(id.clone(), false)]);
        let p = build(&down, &first.ramps, Some(&first.tables), t0);
        let up = HashMap::from([(id.clone(), true)]);
        let back = t0 + Duration::from_secs(1);
        let p = build(&up, &p.ramps, Some(&p.tables), back);
        assert_eq!(p.ramps.len(), 1);
        assert_eq!(p.ramp_due, Some(back + Duration::from_secs(1)));
        assert_eq!(
            p.config.vips[0].backends[2].weight, 100,
            "the config keeps its weight"
        );
        assert_eq!(
            p.tables.backends[2].weight, 10,
            "the tables carry the level"
        );
        let step = build(
            &up,
            &p.ramps,
            Some(&p.tables),
            back + Duration::from_secs(1),
        );
        assert_eq!(step.tables.backends[2].weight, 20);
        assert_eq!(step.tables.rings_built, 1, "only the ramping VIP's ring");
        let end = build(
            &up,
            &step.ramps,
            Some(&step.tables),
            back + Duration::from_secs(9),
        );
        assert!(end.ramps.is_empty() && end.ramp_due.is_none());
        assert_eq!(end.tables.backends[2].weight, 100);
    }
}
