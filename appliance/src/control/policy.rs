//! The health policy between the prober and the tables: a backend decided by several
//! checks (keepalived's several checkers) is up when all of them pass, or any, as its VIP's
//! `health_combine` says; an agent check's answer (`50%`, `drain`, `maint`) is applied over
//! the operator's weight and state as the backend's own wish, never written into the
//! operator's overrides; and a change of a VIP's quorum is told as an event. Pure apart from
//! the state it is handed.

use std::collections::HashMap;
use std::time::Instant;

use health::{AgentAdmin, AgentState, ProbeKey};

use super::batch::HealthBatch;
use super::probes::{self, Targets};
use crate::config::{self, BackendState, Combine, Config, Vip};
use crate::lb::fallback::QuorumState;
use crate::lb::{BackendId, Tables};

/// Each backend's agent's last answer.
pub type Agents = HashMap<BackendId, AgentState>;

/// What the control loop learned from the prober beyond each backend's verdict.
#[derive(Debug, Default, Clone)]
pub struct PolicyState {
    /// The last state of every probe a transition reported.
    pub probes: HashMap<ProbeKey, bool>,
    /// The backends decided by more than one probe.
    pub combined: Combined,
    /// Each backend's agent's last answer.
    pub agents: Agents,
    /// An agent answered anew since the last commit: the next one prepares in full.
    pub agents_changed: bool,
}

impl PolicyState {
    /// The first version's multi-check backends and agent answers.
    pub fn of(combined: Combined, agents: Agents) -> PolicyState {
        PolicyState {
            combined,
            agents,
            ..PolicyState::default()
        }
    }

    /// Takes a new version's multi-check backends and agent answers; probes no longer run
    /// are forgotten.
    pub fn adopt(&mut self, combined: Combined, agents: Agents, targets: &Targets) {
        self.combined = combined;
        self.agents = agents;
        self.probes.retain(|k, _| targets.contains_key(k));
    }
}

/// The backends decided by more than one probe: their probes (with each one's state before
/// its first verdict) and how they combine.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Combined {
    of: HashMap<BackendId, (Combine, Vec<(ProbeKey, bool)>)>,
}

impl Combined {
    /// The multi-check backends of `config`.
    pub fn of(config: &Config) -> Combined {
        let checks = probes::shared_checks(config);
        let mut of = HashMap::new();
        for v in &config.vips {
            for b in &v.backends {
                if v.checks_of(b).len() < 2 {
                    continue;
                }
                let probes = probes::probes_of(&checks, v, b)
                    .into_iter()
                    .map(|t| {
                        let initial = t.check.initial == config::InitialHealth::Up;
                        (t.key(), initial)
                    })
                    .collect();
                of.insert(BackendId::of(v, b), (v.health_combine, probes));
            }
        }
        Combined { of }
    }

    /// The verdict of `pair` given each probe's state (`state`; a probe without one is at
    /// its initial state); `single` is the verdict of a backend of one probe.
    pub fn verdict(
        &self,
        pair: &BackendId,
        single: bool,
        state: impl Fn(&ProbeKey) -> Option<bool>,
    ) -> bool {
        let Some((combine, probes)) = self.of.get(pair) else {
            return single;
        };
        let mut each = probes
            .iter()
            .map(|(k, initial)| state(k).unwrap_or(*initial));
        match combine {
            Combine::All => each.all(|up| up),
            Combine::Any => each.any(|up| up),
        }
    }

    /// Whether `pair` is decided by more than one probe.
    pub fn contains(&self, pair: &BackendId) -> bool {
        self.of.contains_key(pair)
    }
}

/// Backend `b`'s health before any of its checks has decided: each check's `initial`,
/// combined as its VIP says; a backend without checks is healthy.
pub fn initial_up(config: &Config, v: &Vip, b: &config::Backend) -> bool {
    let mut each = v
        .checks_of(b)
        .iter()
        .filter_map(|n| config.health_check(n))
        .map(|c| c.initial == config::InitialHealth::Up);
    match v.health_combine {
        Combine::All => each.all(|up| up),
        Combine::Any => each.any(|up| up) || v.checks_of(b).is_empty(),
    }
}

/// One transition of the probe `tr.key`, deciding `pairs`: the probe's state is kept, each
/// pair's verdict (combined with its other probes' where it has several) joins the batch,
/// and an agent's new answer is kept for the next full commit.
pub fn record(
    p: &mut PolicyState,
    tr: &health::Transition,
    pairs: &[BackendId],
    batch: &mut HealthBatch,
    now: Instant,
) {
    let up = tr.to == health::Health::Up;
    if let Some(a) = tr.agent {
        for pair in pairs {
            p.agents_changed |= p.agents.insert(pair.clone(), a) != Some(a);
        }
        if tr.from == tr.to {
            // The answer alone changed: no verdict, but a version to apply it.
            batch.add_each(std::iter::empty(), now);
            return;
        }
    }
    p.probes.insert(tr.key.clone(), up);
    let probes = &p.probes;
    let verdicts = pairs.iter().map(|pair| {
        let v = p.combined.verdict(pair, up, |k| probes.get(k).copied());
        (pair, v)
    });
    batch.add_each(verdicts, now);
}

/// The prober's current verdict for every VIP/backend pair of `targets`, several probes
/// combined as `combined` says.
pub fn verdicts(
    status: &[health::Status],
    targets: &Targets,
    combined: &Combined,
) -> HashMap<BackendId, bool> {
    let states: HashMap<&ProbeKey, bool> = status
        .iter()
        .map(|s| (&s.key, s.state == health::Health::Up))
        .collect();
    let mut out = HashMap::new();
    for s in status {
        if let Some(pairs) = targets.get(&s.key) {
            let up = s.state == health::Health::Up;
            for pair in pairs {
                let v = combined.verdict(pair, up, |k| states.get(k).copied());
                out.insert(pair.clone(), v);
            }
        }
    }
    out
}

/// The agents' last answers in the prober's status, for every pair of `targets`.
pub fn agents(status: &[health::Status], targets: &Targets) -> Agents {
    let mut out = Agents::new();
    for s in status {
        if let (Some(a), Some(pairs)) = (s.agent, targets.get(&s.key)) {
            for pair in pairs {
                out.insert(pair.clone(), a);
            }
        }
    }
    out
}

/// `config` with every agent's answer applied: weights scaled by its percentage, `drain`
/// and `maint` as a drain of an active backend. `None` when no answer changes anything.
pub fn with_agents(config: &Config, agents: &Agents) -> Option<Config> {
    let wants = |a: &AgentState| *a != AgentState::READY;
    if !agents.values().any(wants) {
        return None;
    }
    let mut out = config.clone();
    for v in &mut out.vips {
        let name = v.name.clone();
        for b in &mut v.backends {
            let Some(a) = agents.get(&BackendId::new(&name, b.underlay(), b.port)) else {
                continue;
            };
            b.weight = a.weight(b.weight, MAX_WEIGHT);
            if a.admin != AgentAdmin::Ready && b.state == BackendState::Active {
                b.state = BackendState::Drain;
            }
        }
    }
    Some(out)
}

/// The largest weight a backend may have (`weight` in `[[vip.backend]]`).
const MAX_WEIGHT: u32 = 65535;

/// The agent's answer for the API: `drain`, `ready 50%`; `None` without an agent.
pub fn agent_word(agents: &Agents, id: &BackendId) -> Option<String> {
    agents.get(id).map(ToString::to_string)
}

/// Events for the VIPs of `config` (which `new` was built from) that set a quorum or have
/// sorry backends and whose quorum state differs between `old` and `new`. A VIP without
/// either has its quorum while a backend is up: its health events say so already.
pub fn quorum_events(config: &Config, old: &Tables, new: &Tables) -> Vec<String> {
    let watched = |slot: usize| {
        config.vips.get(slot).is_some_and(|v| {
            v.fallback != config::Fallback::default() || v.backends.iter().any(|b| b.sorry)
        })
    };
    // By name only where the VIPs moved (a reload), built at the first such VIP.
    let mut by_name: Option<HashMap<&str, QuorumState>> = None;
    let mut out = Vec::new();
    for (slot, v) in new.vips.iter().enumerate() {
        if !watched(slot) {
            continue;
        }
        let was = match old.vips.get(slot) {
            Some(o) if o.name == v.name => Some(o.quorum),
            _ => by_name
                .get_or_insert_with(|| {
                    old.vips
                        .iter()
                        .map(|o| (o.name.as_str(), o.quorum))
                        .collect()
                })
                .get(v.name.as_str())
                .copied(),
        };
        if let Some(was) = was.filter(|w| *w != v.quorum) {
            out.push(quorum_event(&v.name, was, v.quorum));
        }
    }
    out
}

/// What changed with VIP `name`'s quorum, from `was` to `q`.
fn quorum_event(name: &str, was: QuorumState, q: QuorumState) -> String {
    match (q.up, q.sorry, q.withdraw) {
        (true, _, _) if was.sorry => format!(
            "vip {name}: quorum regained: the primary backends take new flows again, the sorry \
             backends keep their flows"
        ),
        (true, _, _) => format!("vip {name}: quorum regained"),
        (false, true, _) => {
            format!("vip {name}: quorum lost: the sorry backends take the new flows")
        }
        (false, false, true) => format!("vip {name}: quorum lost: withdrawn from BGP"),
        (false, false, false) => {
            format!("vip {name}: quorum lost: the primary backends still up go on serving")
        }
    }
}

/// The VIP's quorum as the API shows it: `up`, `sorry` (its sorry backends serve),
/// `withdrawn` or `lost` (its primaries serve on).
pub fn quorum_word(t: &Tables, slot: usize) -> &'static str {
    match t.vips.get(slot).map(|v| v.quorum) {
        Some(q) if q.up => "up",
        Some(q) if q.sorry => "sorry",
        Some(q) if q.withdraw => "withdrawn",
        Some(_) => "lost",
        None => "up",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[health_check]]
name = "a"
kind = "tcp"

[[health_check]]
name = "b"
kind = "tcp"
port = 9000
initial = "up"

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
health_check = ["a", "b"]
[[vip.backend]]
address = "10.1.0.11"
[[vip.backend]]
address = "10.1.0.12"
health_check = "a"
"#;

    fn id(a: &str) -> BackendId {
        BackendId::new("web", a.parse().expect("literal"), 80)
    }

    #[test]
    fn several_checks_combine_all_or_any() {
        let c = testkit::unit::parse(CFG);
        let combined = Combined::of(&c);
        assert!(combined.contains(&id("10.1.0.11")));
        assert!(
            !combined.contains(&id("10.1.0.12")),
            "one check: its own verdict"
        );
        let (_, probes) = &combined.of[&id("10.1.0.11")];
        let (a, b) = (probes[0].0.clone(), probes[1].0.clone());
        assert_eq!((a.port, b.port), (80, 9000));
        let with = |sa: Option<bool>, sb: Option<bool>| {
            let (a, b) = (a.clone(), b.clone());
            move |k: &ProbeKey| {
                if *k == a {
                    sa
                } else if *k == b {
                    sb
                } else {
                    None
                }
            }
        };
        // `a` starts down, `b` up: all-of is down until `a` passes.
        assert!(!combined.verdict(&id("10.1.0.11"), true, with(None, None)));
        assert!(combined.verdict(&id("10.1.0.11"), true, with(Some(true), None)));
        assert!(!combined.verdict(&id("10.1.0.11"), true, with(Some(true), Some(false))));
        assert!(combined.verdict(&id("10.1.0.12"), true, with(None, None)));
        assert!(!initial_up(&c, &c.vips[0], &c.vips[0].backends[0]));
        let any = Config::from_toml_str(
            &CFG.replace("port = 80\n", "port = 80\nhealth_combine = \"any\"\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let combined = Combined::of(&any);
        assert!(
            combined.verdict(&id("10.1.0.11"), false, with(Some(false), None)),
            "b's initial up"
        );
        assert!(!combined.verdict(&id("10.1.0.11"), false, with(Some(false), Some(false))));
        assert!(initial_up(&any, &any.vips[0], &any.vips[0].backends[0]));
    }

    #[test]
    fn agents_scale_weights_and_drain_over_the_operator_s_settings() {
        let c = testkit::unit::parse(CFG);
        let mut agents = Agents::new();
        agents.insert(id("10.1.0.11"), AgentState::READY);
        assert!(
            with_agents(&c, &agents).is_none(),
            "ready at full weight: nothing to do"
        );
        agents.insert(
            id("10.1.0.11"),
            AgentState {
                admin: AgentAdmin::Ready,
                weight_percent: Some(50),
            },
        );
        agents.insert(
            id("10.1.0.12"),
            AgentState {
                admin: AgentAdmin::Maint,
                weight_percent: None,
            },
        );
        let out = with_agents(&c, &agents).expect("changed");
        let b = &out.vips[0].backends;
        assert_eq!((b[0].weight, b[0].state), (50, BackendState::Active));
        assert_eq!((b[1].weight, b[1].state), (100, BackendState::Drain));
        assert_eq!(
            c.vips[0].backends[1].state,
            BackendState::Active,
            "the file's own"
        );
        assert_eq!(
            agent_word(&agents, &id("10.1.0.11")).as_deref(),
            Some("ready 50%")
        );
    }

    #[test]
    fn quorum_events_tell_of_vips_with_a_quorum_or_sorry_backends_only() {
        let text = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
[[vip.backend]]
address = "10.1.0.12"
role = "sorry"

[[vip]]
name = "plain"
address = "192.0.2.11"
port = 80
[[vip.backend]]
address = "10.1.0.21"
"#;
        let c = testkit::unit::parse(text);
        let up = Tables::build(&c, &|_, _| true, 1).expect("tables");
        let sorry = |_: &Vip, b: &config::Backend| b.sorry;
        let down = Tables::build_from(&c, &sorry, 2, Some(&up), &crate::lb::Serial).expect("t");
        assert_eq!(
            quorum_events(&c, &up, &down),
            ["vip web: quorum lost: the sorry backends take the new flows"],
            "the plain VIP lost its only backend: its health events tell"
        );
        assert_eq!(quorum_word(&down, 0), "sorry");
        assert_eq!(quorum_word(&down, 1), "lost");
        let back =
            Tables::build_from(&c, &|_, _| true, 3, Some(&down), &crate::lb::Serial).expect("t");
        assert_eq!(
            quorum_events(&c, &down, &back),
            [
                "vip web: quorum regained: the primary backends take new flows again, the \
                 sorry backends keep their flows"
            ]
        );
        assert!(quorum_events(&c, &back, &back).is_empty());
    }
}
