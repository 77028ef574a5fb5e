//! A fleet of three appliances driven by a real three-member etcd cluster (Debian's
//! etcd-server, in the lab router's namespace): DR VIPs behind BIRD with ECMP, the VIPs
//! pushed with `sluice fleet push`, never in the appliances' files. One lab runs the whole
//! story, in order: a push reaches every member through the two-phase activation (spread
//! printed, table fingerprints over the API identical); a backend one member cannot reach
//! is a disagreement, not a flip; the etcd leader killed, then all of etcd stopped, leave
//! forwarding alone and the members stale, and they converge when etcd is back; a member cut
//! off from etcd past its lease is not waited for, and catches up before it announces again.
//! Around that story: etcd runs with authentication on (the members log in as a user that may
//! touch only the fleet's prefix; a wrong password is refused with an error naming the
//! keys to fix); 20 pushes under a steady client and 4 long downloads; a revision one member
//! refuses (its file contradicts it) and an invalid one written behind `push`'s back, both
//! reported and neither run; a drain through one member's API changing every member's
//! tables; a member restarted while etcd is down starting on its last good revision from
//! disk. Needs root, bird2, nftables and etcd-server/etcd-client.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lab::etcd::EtcdCluster;
use lab::testing::{Api, Said, SteadyReport, slow_downloads, steady_client};
use lab::{Lab, LabMode, LabOptions, blob};

const MEMBERS: usize = 3;
const ETCD_PORT: u16 = 23790;
/// The etcd user the members log in as (it may read and write under `/sluice/` only).
const ETCD_USER: &str = "sluice";
const ETCD_PASSWORD: &str = "fl4-members-secret";
/// Pushes in the steady-load round.
const PUSHES: u32 = 20;
/// The steady client's pace, and how long one of its requests may take (room for a lost
/// SYN on a loaded machine).
const CLIENT_EVERY: Duration = Duration::from_millis(50);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between a download's 8 KB reads: at least 128 reads, about 15 s, longer than the
/// pushes take on an idle machine.
const DOWNLOAD_PACE: Duration = Duration::from_millis(120);

/// `sluice fleet --config CFG ARGS` in `ns`.
fn fleetctl(ns: &lab::netns::Netns, cfg: &Path, args: &[&str]) -> Said {
    let mut all = vec!["fleet", "--config"];
    let cfg = cfg.to_string_lossy();
    all.push(&cfg);
    all.extend_from_slice(args);
    lab::sluice!().inside(ns).run(&all)
}

struct Fleet {
    lab: Lab,
    etcd: EtcdCluster,
    /// The fleet's configuration as the lab wrote it for one appliance (VIPs and checks).
    doc: toml::Table,
    pushes: u32,
}

/// The lab's config for appliance `k` split into the member file (with `[fleet]`, logging
/// in with `password_file`, keeping its last good revision under `state_dir`) and the
/// fleet's sections.
fn split(
    text: &str,
    endpoints: &[String],
    state_dir: &Path,
    password_file: &Path,
) -> (String, toml::Table) {
    let all: toml::Table = text.parse().expect("lab config");
    let (fleet, mut local): (toml::Table, toml::Table) = all
        .into_iter()
        .partition(|(k, _)| ["vip", "health_check", "flood"].contains(&k.as_str()));
    let eps: Vec<toml::Value> = endpoints.iter().map(|e| e.clone().into()).collect();
    let mut f = toml::Table::new();
    f.insert("name".into(), "fl".into());
    f.insert("endpoints".into(), eps.into());
    f.insert("lease_ttl".into(), "3s".into());
    f.insert("activation_timeout".into(), "4s".into());
    f.insert("state_dir".into(), state_dir.display().to_string().into());
    f.insert("user".into(), ETCD_USER.into());
    f.insert(
        "password_file".into(),
        password_file.display().to_string().into(),
    );
    local.insert("fleet".into(), f.into());
    (toml::to_string(&local).expect("toml"), fleet)
}

impl Fleet {
    fn start() -> Fleet {
        lab::netns::require_root();
        lab::netns::require_program("bird", "bird2");
        lab::netns::require_program("nft", "nftables");
        lab::netns::require_program("etcd", "etcd-server");
        lab::netns::require_program("etcdctl", "etcd-client");
        let lab = lab::testing::build(LabOptions {
            modes: vec![LabMode::Dr],
            appliances: Some(MEMBERS),
            bgp: Some(true),
            prefix: "fl",
            ..LabOptions::default()
        });
        let dir = lab.dir.join("etcd");
        std::fs::create_dir_all(&dir).expect("etcd dir");
        let ip: IpAddr = lab::ROUTER_LAN4.parse().unwrap();
        let mut etcd = EtcdCluster::start(&lab.router, ip, ETCD_PORT, &dir)
            .unwrap_or_else(|e| panic!("etcd: {e}"));
        etcd.enable_auth(&lab.router, ETCD_USER, ETCD_PASSWORD, "/sluice/")
            .unwrap_or_else(|e| panic!("etcd auth: {e}"));
        let pw = lab.dir.join("etcd.password");
        std::fs::write(&pw, format!("{ETCD_PASSWORD}\n")).expect("password file");
        let mut doc = None;
        for k in 0..MEMBERS {
            let (local, fleet) = split(
                &lab.config_for(k, &lab.api_socket_at(k)),
                &etcd.endpoints(),
                &lab.dir.join(format!("state{k}")),
                &pw,
            );
            lab.write_config_at(k, &local).expect("write");
            doc.get_or_insert(fleet);
        }
        Fleet {
            lab,
            etcd,
            doc: doc.expect("a doc"),
            pushes: 0,
        }
    }

    fn ns(&self, k: usize) -> &lab::netns::Netns {
        self.lab.appliance_ns(k)
    }

    /// `sluice fleet --config CFG ARGS` in appliance `k`'s namespace.
    fn fleetctl(&self, k: usize, cfg: &Path, args: &[&str]) -> Said {
        fleetctl(self.ns(k), cfg, args)
    }

    /// `sluice ctl ARGS` against appliance `k`; its stdout, after asserting success.
    fn ctl(&self, k: usize, args: &[&str]) -> String {
        lab::sluice!()
            .inside(self.ns(k))
            .ctl_ok(&self.lab.api_socket_at(k), args)
    }

    /// `sluice fleet push` (from lb1's namespace) of the doc with `weight` for the last
    /// backend of every VIP; returns the revision.
    fn push(&mut self, weight: u32) -> u64 {
        self.pushes += 1;
        let mut doc = self.doc.clone();
        for v in doc["vip"].as_array_mut().expect("vips") {
            let b = v["backend"].as_array_mut().expect("backends");
            let last = b
                .last_mut()
                .and_then(|x| x.as_table_mut())
                .expect("a backend");
            last.insert("weight".into(), i64::from(weight).into());
        }
        let file = self.lab.dir.join(format!("fleet-{}.toml", self.pushes));
        std::fs::write(&file, toml::to_string(&doc).unwrap()).expect("write doc");
        let cfg = self.lab.config_path_at(0);
        let out = self.fleetctl(0, &cfg, &["push", &file.to_string_lossy()]);
        assert!(out.ok(), "push failed: {}{}", out.stdout, out.stderr);
        out.stdout
            .rsplit(' ')
            .next()
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or_else(|| panic!("no revision in {:?}", out.stdout))
    }

    /// `GET /v1/fleet` of appliance `k` (`None` when it does not answer within 2 s).
    fn status(&self, k: usize) -> Option<api::FleetStatus> {
        self.api(k).call(|c| c.fleet()).ok().flatten()
    }

    /// A client of appliance `k`'s API that gives up on a call after 2 s.
    fn api(&self, k: usize) -> Api {
        Api::unix(&self.lab.api_socket_at(k)).with_timeout(Duration::from_secs(2))
    }

    /// Waits until `ok` holds for every member's fleet document; returns how long it took.
    fn wait_all(
        &self,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&api::FleetStatus) -> bool,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            let all: Vec<_> = (0..MEMBERS).map(|k| self.status(k)).collect();
            if all.iter().all(|s| s.as_ref().is_some_and(&ok)) {
                return t0.elapsed();
            }
            if t0.elapsed() > timeout {
                panic!(
                    "{what}: not on every member after {timeout:?}:\n{all:#?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_running(&self, rev: u64, timeout: Duration) -> Duration {
        self.wait_all(&format!("running revision {rev}"), timeout, |s| {
            s.running_revision == rev
        })
    }

    fn fingerprints(&self) -> BTreeSet<String> {
        (0..MEMBERS)
            .filter_map(|k| self.status(k))
            .map(|s| s.table_fingerprint)
            .collect()
    }

    /// Equal fingerprints, polled a little: the members apply a fleet health change each
    /// from its own watch.
    fn wait_identical(&self, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            let f = self.fingerprints();
            if f.len() == 1 {
                return f.into_iter().next().unwrap();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{what}: tables differ: {f:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Requests through the DR VIP from the client: every one answered.
    fn traffic_ok(&self, what: &str) {
        let stop = Arc::new(AtomicBool::new(false));
        let r = self
            .lab
            .from_client(move || lab::exercise_vip(LabMode::Dr, false, 30, stop))
            .expect("client");
        assert!(r.ok(), "{what}: {r:?}\n{}", self.logs());
    }

    fn wait_next_hops(&self, n: usize, timeout: Duration) {
        let vip = LabMode::Dr.vip(false);
        let t0 = Instant::now();
        while self.lab.next_hops(vip).map(|h| h.len()).unwrap_or(0) != n {
            assert!(
                t0.elapsed() < timeout,
                "router never had {n} next hops for {vip}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn nft(&self, k: usize, rules: &str) {
        self.ns(k).sh(&format!(
            "nft add table inet fl; nft add chain inet fl out '{{ type filter hook output priority 0; }}'; \
             nft add chain inet fl in '{{ type filter hook input priority 0; }}'; {rules}"
        ));
    }

    fn nft_clear(&self, k: usize) {
        self.ns(k).sh("nft delete table inet fl");
    }

    fn logs(&self) -> String {
        self.lab.logs_tail(25)
    }

    fn events(&self, k: usize) -> String {
        let socket = self.lab.api_socket_at(k);
        lab::sluice!()
            .inside(self.ns(k))
            .ctl(&socket, &["events"])
            .stdout
    }

    /// The fleet revisions member `k` switched to, in order (its event log).
    fn activated(&self, k: usize) -> Vec<u64> {
        self.events(k)
            .lines()
            .filter_map(|l| {
                let rest = &l[l.find("fleet: revision ")? + "fleet: revision ".len()..];
                let (rev, tail) = rest.split_once(' ')?;
                tail.starts_with("running").then(|| rev.parse().ok())?
            })
            .collect()
    }

    /// Backend `backend`'s state on member `k`'s VIP `vip`.
    fn backend_state(&self, k: usize, vip: &str, backend: &str) -> Option<String> {
        let list = self.api(k).call(|c| c.backends(vip)).ok()?;
        list.into_iter().find(|b| b.id == backend).map(|b| b.state)
    }

    /// Appliance `k`'s member file.
    fn member_file(&self, k: usize) -> PathBuf {
        self.lab.config_path_at(k)
    }
}

/// A member file whose password is wrong: `sluice fleet status` says what to fix.
fn wrong_password_is_a_clear_error(f: &Fleet) {
    let pw = f.lab.dir.join("wrong.password");
    std::fs::write(&pw, "not-the-password\n").expect("write");
    let good = f.lab.dir.join("etcd.password").display().to_string();
    let text = std::fs::read_to_string(f.member_file(0)).expect("member file");
    assert!(text.contains(&good), "the member file names {good}");
    let cfg = f.lab.dir.join("wrong-password.toml");
    std::fs::write(&cfg, text.replace(&good, &pw.display().to_string())).expect("write");
    let out = f.fleetctl(0, &cfg, &["status"]);
    let err = &out.stderr;
    assert!(!out.ok(), "a wrong password was let in: {err}");
    assert!(
        err.contains(&format!("etcd refused user \"{ETCD_USER}\""))
            && err.contains("authentication failed")
            && err.contains("password_file"),
        "not a clear error: {err}"
    );
    println!("MEASURE wrong etcd password: {}", err.trim());
}

/// 20 pushes, each waited for on every member, under a steady client and 4 slow downloads
/// through the DR VIP: no request fails, the downloads arrive intact, and every member
/// switched to every one of the 20 revisions in push order. None is superseded here (the
/// next push waits until every member runs the previous one), so none may be skipped.
fn pushes_under_load(f: &mut Fleet) {
    let vip = SocketAddr::new(LabMode::Dr.vip(false), 80);
    let started = Duration::from_secs(10);
    let (downloads, _) = slow_downloads(&f.lab.client, vip, DOWNLOAD_PACE, 4, started);
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let client = f
        .lab
        .client
        .in_thread(move || steady_client(vip, CLIENT_EVERY, CLIENT_TIMEOUT, st))
        .expect("client thread");
    let before: Vec<usize> = (0..MEMBERS).map(|k| f.activated(k).len()).collect();
    let t0 = Instant::now();
    let mut revs = Vec::new();
    for i in 0..PUSHES {
        let r = f.push(30 + i);
        f.wait_running(r, Duration::from_secs(20));
        revs.push(r);
    }
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let SteadyReport {
        attempts,
        answered,
        first_error,
        ..
    } = client.join().expect("client");
    let expected = blob();
    let intact = downloads
        .into_iter()
        .map(|d| d.join().expect("download"))
        .filter(|d| d.as_ref().is_ok_and(|b| *b == expected))
        .count();
    println!(
        "MEASURE {PUSHES} pushes under load in {took:?}: steady client {answered}/{attempts} \
         answered, {intact}/4 downloads intact"
    );
    assert_eq!(
        (answered, intact),
        (attempts, 4),
        "requests failed or downloads broke during the pushes: {first_error:?}\n{}",
        f.logs()
    );
    assert!(attempts > 20, "the steady client hardly ran ({attempts})");
    for (k, skip) in before.iter().enumerate() {
        let got: Vec<u64> = f.activated(k).into_iter().skip(*skip).collect();
        assert_eq!(
            got,
            revs,
            "lb{} did not switch to every revision in order",
            k + 1
        );
    }
}

/// A revision lb3's file contradicts, then one that is not TOML at all (written with
/// etcdctl, as `push` would refuse it): each is refused, reported by `/v1/fleet` and
/// `sluice fleet status`, and never run; the fleet keeps `running`, forwarding carries on.
fn refused_revisions(f: &mut Fleet, running: u64) {
    let lb3 = f.member_file(2);
    let file = std::fs::read_to_string(&lb3).expect("lb3's file");
    let vip = f.doc["vip"][0]["name"].as_str().expect("name").to_string();
    let wrong = format!("{file}\n[[vip]]\nname = \"{vip}\"\naddress = \"192.0.2.250\"\n");
    std::fs::write(&lb3, wrong).expect("write");
    let bad = f.push(90);
    f.wait_all("lb3's refusal reported", Duration::from_secs(20), |s| {
        s.refused.as_ref().is_some_and(|r| {
            r.revision == bad
                && r.by
                    .iter()
                    .any(|(m, e)| m == "lab-lb3" && e.contains(&format!("vip \"{vip}\".address")))
        })
    });
    let text = f.fleetctl(0, &f.member_file(0), &["status"]).stdout;
    assert!(
        text.contains(&format!("revision {bad} refused by lab-lb3")),
        "sluice fleet status:\n{text}"
    );
    for k in 0..MEMBERS {
        let s = f.status(k).map(|s| s.running_revision);
        assert_eq!(s, Some(running), "lb{}: the refused revision ran", k + 1);
    }
    std::fs::write(&lb3, &file).expect("restore lb3's file");
    // Its file fixed and reloaded, lb3 prepares the revision again: the fleet activates it
    // (before, lb3 stayed refusing until the next push or a restart).
    f.ctl(2, &["reload"]);
    f.wait_running(bad, Duration::from_secs(20));
    let running = bad;

    let key = "/sluice/fl/config";
    f.etcd
        .ctl(&f.lab.router, &["put", key, "[[vip]\nname = "])
        .unwrap_or_else(|e| panic!("etcdctl put: {e}"));
    f.wait_all(
        "the invalid revision refused",
        Duration::from_secs(20),
        |s| {
            let rev = s.config_revision;
            rev > bad
                && s.refused.as_ref().is_some_and(|r| r.revision == rev)
                && s.members.len() == MEMBERS
                && s.members.iter().all(|m| {
                    m.prepared == rev
                        && m.readiness == "refused"
                        && m.error
                            .as_ref()
                            .is_some_and(|e| e.contains("not valid TOML"))
                })
        },
    );
    for k in 0..MEMBERS {
        let s = f.status(k).expect("status");
        assert_eq!(
            (s.running_revision, s.activated_revision),
            (running, running),
            "lb{}: a refused revision ran",
            k + 1
        );
    }
    f.traffic_ok("after refused revisions");
}

/// With lb3 out of etcd, two members are live: a backend lb2 alone cannot reach is a
/// disagreement and stays up for both (the default quorum is a strict majority of them; it
/// was both, so one member's failing probes took the backend down for the fleet).
fn two_live_members_disagree(f: &Fleet) {
    let be = first_backend(&f.doc);
    let both = |ok: &dyn Fn(&api::FleetStatus) -> bool| {
        (0..2).all(|k| f.status(k).is_some_and(|s| ok(&s)))
    };
    let fp = f.status(0).expect("lb1").table_fingerprint;
    f.nft(1, &format!(
        "nft add rule inet fl out ip daddr {be} drop; nft add rule inet fl in ip saddr {be} drop"
    ));
    let t0 = Instant::now();
    while !both(&|s| {
        s.members.len() == 2
            && s.disagreements
                .iter()
                .any(|d| d.fleet_up && d.members == ["lab-lb2"])
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "lb2's failing probes: {:#?}",
            f.status(0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for k in 0..2 {
        let s = f.status(k).expect("status");
        assert_eq!(
            s.table_fingerprint,
            fp,
            "lb{}: the backend stayed up",
            k + 1
        );
    }
    f.nft_clear(1);
    let t0 = Instant::now();
    while !both(&|s| s.disagreements.is_empty()) {
        assert!(t0.elapsed() < Duration::from_secs(15), "agreement again");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Keys written behind the members' backs: a member key without a lease (lb9, which would
/// count as a live member forever and make every activation wait its timeout) and an
/// `activate` naming a revision far above the config's (which stalled activation). Both are
/// named in the status and ignored: the next push is activated with every live member ready
/// (`all_ready`, which lb9 would have prevented), and the weights go back.
fn hand_edits(f: &mut Fleet) {
    let root = "/sluice/fl/";
    let lb9 = format!("{root}members/lab-lb9");
    let report = r#"{"prepared":1,"readiness":"ready","running":1}"#;
    let bogus = r#"{"revision":99999999,"by":"hand","at_ms":0,"all_ready":true}"#;
    for (k, v) in [(lb9.as_str(), report), (&format!("{root}activate"), bogus)] {
        f.etcd
            .ctl(&f.lab.router, &["put", k, v])
            .unwrap_or_else(|e| panic!("etcdctl put {k}: {e}"));
    }
    let text = f.fleetctl(0, &f.member_file(0), &["status"]).stdout;
    for named in [
        format!("ignored {lb9}: written without a lease"),
        "names revision 99999999".to_string(),
    ] {
        assert!(text.contains(&named), "status names {named:?}:\n{text}");
    }
    let r = f.push(55);
    f.wait_running(r, Duration::from_secs(20));
    let out = f
        .etcd
        .ctl(
            &f.lab.router,
            &["get", &format!("{root}activate"), "--print-value-only"],
        )
        .unwrap_or_else(|e| panic!("etcdctl get: {e}"));
    let a: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("activate: {e}: {out:?}"));
    assert_eq!(a["revision"], r, "{a}");
    assert_eq!(a["all_ready"], true, "lb9 was not waited for: {a}");
    f.etcd
        .ctl(&f.lab.router, &["del", &lb9])
        .unwrap_or_else(|e| panic!("etcdctl del {lb9}: {e}"));
    let back = f.push(50);
    f.wait_running(back, Duration::from_secs(15));
}

/// A drain through lb1's API is a fleet-wide write: every member's backend is drained and
/// the tables change together (identical fingerprints, new ones); undrain restores them.
fn fleet_wide_drain(f: &Fleet) {
    let vip = f.doc["vip"][0]["name"].as_str().expect("name").to_string();
    let be = format!("{}:{}", first_backend(&f.doc), LabMode::Dr.backend_port());
    let fp0 = f.wait_identical("before the drain");
    f.ctl(0, &["drain", &vip, &be]);
    let t0 = Instant::now();
    let mut seen: Vec<Option<Duration>> = vec![None; MEMBERS];
    while seen.iter().any(Option::is_none) {
        for (k, at) in seen.iter_mut().enumerate() {
            if at.is_none() && f.backend_state(k, &vip, &be).as_deref() == Some("drain") {
                *at = Some(t0.elapsed());
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "drained on {seen:?} only\n{}",
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let drained = f.wait_identical("drained");
    assert_ne!(drained, fp0, "the drain changed no table");
    println!("MEASURE fleet-wide drain: seen drained by each member after {seen:?}");
    f.ctl(1, &["undrain", &vip, &be]);
    let t0 = Instant::now();
    while f.fingerprints() != BTreeSet::from([fp0.clone()]) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "undrain through lb2 did not restore every table: {:?}",
            f.fingerprints()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn first_backend(doc: &toml::Table) -> String {
    doc["vip"][0]["backend"][0]["address"]
        .as_str()
        .expect("address")
        .to_string()
}

#[test]
fn a_fleet_of_three_follows_etcd() {
    let mut f = Fleet::start();
    let r1 = f.push(100);
    wrong_password_is_a_clear_error(&f);
    f.lab
        .spawn_appliances(lab::sluice!().path())
        .expect("start");
    f.wait_running(r1, Duration::from_secs(40));
    f.wait_next_hops(MEMBERS, Duration::from_secs(40));
    f.wait_all("every backend up", Duration::from_secs(20), |s| {
        s.disagreements.is_empty()
    });
    f.traffic_ok("first revision");

    // A push: two-phase activation on every member, identical tables.
    let r2 = f.push(50);
    let took = f.wait_running(r2, Duration::from_secs(15));
    let s = f.status(0).expect("status");
    println!(
        "MEASURE fleet push: revision {r2} on all {MEMBERS} members in {took:?}, activation spread {:?} ms, sync lag {:?} ms",
        s.activation_spread_ms,
        s.members.iter().map(|m| m.sync_lag_ms).collect::<Vec<_>>()
    );
    let fp = f.wait_identical("after a push");
    println!("MEASURE table fingerprint on every member: {fp}");
    // An operator's backup, restored at the end.
    let snap = f.lab.dir.join("etcd-backup.db");
    f.etcd
        .snapshot(&f.lab.router, &snap)
        .unwrap_or_else(|e| panic!("etcd snapshot: {e}"));
    f.traffic_ok("after a push");

    pushes_under_load(&mut f);
    fleet_wide_drain(&f);
    let running = f.status(0).expect("status").running_revision;
    refused_revisions(&mut f, running);
    let back = f.push(50);
    f.wait_running(back, Duration::from_secs(15));
    assert_eq!(f.wait_identical("back on the first weights"), fp);
    hand_edits(&mut f);

    // A backend lb3 alone cannot reach: a disagreement, the same tables everywhere.
    let be = first_backend(&f.doc);
    f.nft(2, &format!(
        "nft add rule inet fl out ip daddr {be} drop; nft add rule inet fl in ip saddr {be} drop"
    ));
    f.wait_all("disagreement reported", Duration::from_secs(15), |s| {
        s.disagreements
            .iter()
            .any(|d| d.fleet_up && d.members == ["lab-lb3"])
    });
    assert_eq!(
        f.wait_identical("one member's disagreement"),
        fp,
        "the fleet kept its tables"
    );
    f.nft_clear(2);
    f.wait_all("agreement again", Duration::from_secs(15), |s| {
        s.disagreements.is_empty()
    });

    // The etcd leader killed: the members carry on; a push still lands.
    let leader = f.etcd.leader(&f.lab.router).expect("an etcd leader");
    f.etcd.kill_member(leader);
    let t0 = Instant::now();
    while f.etcd.leader(&f.lab.router).is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "etcd elected no new leader"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "MEASURE etcd leader {leader} killed: a new leader after {:?}",
        t0.elapsed()
    );
    let r3 = f.push(60);
    f.wait_running(r3, Duration::from_secs(20));
    // All of etcd stopped: forwarding unaffected, last version kept, stale everywhere.
    f.etcd.stop_all();
    f.wait_all("stale", Duration::from_secs(20), |s| {
        s.stale && s.running_revision == r3
    });
    f.traffic_ok("etcd down");
    f.wait_next_hops(MEMBERS, Duration::from_secs(5));
    // lb2 restarted while etcd is down: it starts on the last revision it activated, kept
    // on disk, says so, and announces again.
    assert!(f.lab.stop_appliance_at(1), "lb2 did not stop cleanly");
    f.lab
        .spawn_appliance_at(1, lab::sluice!().path())
        .expect("lb2 again");
    let t0 = Instant::now();
    while !f
        .status(1)
        .is_some_and(|s| s.running_revision == r3 && s.stale && s.running_from_disk)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "lb2 did not start on revision {r3} from disk: {:?}\n{}",
            f.status(1),
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    f.wait_next_hops(MEMBERS, Duration::from_secs(40));
    println!(
        "MEASURE lb2 restarted without etcd: on revision {r3} from disk and announcing after {:?}",
        t0.elapsed()
    );
    f.traffic_ok("lb2 restarted while etcd is down");
    f.etcd.start_all(&f.lab.router).expect("etcd back");
    f.wait_all("reconnected", Duration::from_secs(30), |s| {
        !s.stale && !s.running_from_disk
    });
    let r4 = f.push(70);
    f.wait_running(r4, Duration::from_secs(20));
    f.wait_identical("etcd back");

    // lb3 cut off from etcd past its lease: the others activate without waiting for it.
    let ports: Vec<String> = f.etcd.client_ports().iter().map(u16::to_string).collect();
    f.nft(
        2,
        &format!(
            "nft add rule inet fl out ip daddr {} tcp dport '{{ {} }}' drop",
            lab::ROUTER_LAN4,
            ports.join(", ")
        ),
    );
    let t0 = Instant::now();
    while f
        .status(0)
        .is_none_or(|s| s.members.iter().any(|m| m.name == "lab-lb3"))
    {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "lb3's lease never expired"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r5 = f.push(80);
    let t0 = Instant::now();
    for k in 0..2 {
        while f.status(k).is_none_or(|s| s.running_revision != r5) {
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "lb{} never ran {r5}",
                k + 1
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let without = t0.elapsed();
    assert_eq!(
        f.status(2).map(|s| s.running_revision),
        Some(r4),
        "lb3 is cut off"
    );
    two_live_members_disagree(&f);
    f.nft_clear(2);
    f.wait_running(r5, Duration::from_secs(20));
    let ev = f.events(2);
    assert!(
        ev.contains(&format!("caught up with revision {r5}")),
        "lb3's events:\n{ev}"
    );
    println!(
        "MEASURE partitioned member: others on {r5} in {without:?} without it; it caught up before announcing"
    );
    f.wait_identical("lb3 back");
    f.wait_next_hops(MEMBERS, Duration::from_secs(30));
    f.traffic_ok("lb3 back");
    restored_from_a_snapshot(&mut f, &snap, r5);
}

/// etcd restored from the backup taken after the second push: its history went back (the
/// keys and revisions of then, a new cluster ID). Every member refuses it and keeps
/// forwarding on `running`; a push there is activated nowhere, so the fleet's tables stay
/// one (before, members running higher revisions counted as ready and restarted ones ran
/// the old keys: the fleet split). `sluice fleet rebase` then makes every member follow
/// etcd as it is, and the push is activated everywhere.
fn restored_from_a_snapshot(f: &mut Fleet, snap: &Path, running: u64) {
    let before = f.wait_identical("before the restore");
    f.etcd
        .restore(&f.lab.router, snap)
        .unwrap_or_else(|e| panic!("etcd restore: {e}"));
    let refusing = |s: &api::FleetStatus| {
        s.running_revision == running
            && s.last_error.as_deref().is_some_and(|e| {
                e.contains("etcd is another cluster") || e.contains("history went back")
            })
    };
    let took = f.wait_all(
        "the restored history refused",
        Duration::from_secs(40),
        refusing,
    );
    let pushed = f.push(90);
    // Longer than the activation timeout (4 s): nobody activates it, nothing moves.
    std::thread::sleep(Duration::from_secs(6));
    for k in 0..MEMBERS {
        let s = f.status(k).expect("status");
        assert!(
            refusing(&s),
            "lb{} after a push to the restored etcd: {s:#?}",
            k + 1
        );
    }
    assert_eq!(
        f.wait_identical("the restored history refused"),
        before,
        "one set of tables"
    );
    f.traffic_ok("etcd restored, its history refused");
    let ev = f.events(0);
    assert!(
        ev.contains("etcd is another cluster") && ev.contains("fleet rebase"),
        "lb1's events name the refusal and the fix:\n{ev}"
    );
    let cfg = f.member_file(0);
    let out = f.fleetctl(0, &cfg, &["rebase"]);
    assert!(out.ok(), "rebase: {}{}", out.stdout, out.stderr);
    let rebased = f.wait_running(pushed, Duration::from_secs(30));
    let after = f.wait_identical("re-based");
    assert_ne!(after, before, "the push's weights run");
    println!(
        "MEASURE etcd restored from a snapshot: every member refused it after {took:?} and ran \
         revision {running} through a push to it (revision {pushed}); after `sluice fleet \
         rebase` every member ran {pushed} in {rebased:?}"
    );
    f.wait_all("following again", Duration::from_secs(10), |s| {
        s.last_error.is_none() && !s.stale
    });
    f.traffic_ok("re-based");
}

/// `openssl ARGS` in `dir`, asserting success.
fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA `{name}-ca.pem` and, signed by it, a server certificate for 127.0.0.1.
fn certificates(dir: &Path, name: &str) {
    let (ca, ca_key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            &format!("/CN=fl4 test CA {name}"),
            "-keyout",
            &ca_key,
            "-out",
            &ca,
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=etcd",
            "-keyout",
            &format!("{name}-server.key"),
            "-out",
            "server.csr",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "server.ext",
            "-out",
            &format!("{name}-server.pem"),
        ],
    );
}

/// etcd serving its clients over TLS: `sluice fleet push` and `status` reach it with
/// `tls_ca`, and a member trusting another CA is refused.
#[test]
fn a_fleet_over_tls() {
    lab::netns::require_root();
    lab::netns::require_program("etcd", "etcd-server");
    lab::netns::require_program("openssl", "openssl");
    let ns = lab::netns::Netns::new("fl4tl");
    let dir = std::env::temp_dir().join(format!("sluice-{}", ns.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    certificates(&dir, "good");
    certificates(&dir, "other");
    let tls = lab::etcd::EtcdTls {
        ca: dir.join("good-ca.pem"),
        cert: dir.join("good-server.pem"),
        key: dir.join("good-server.key"),
    };
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let etcd = lab::etcd::EtcdCluster::start_with(&ns, ip, 23890, &dir, Some(tls))
        .unwrap_or_else(|e| panic!("etcd over TLS: {e}"));
    let eps: Vec<String> = etcd.endpoints();
    assert!(eps.iter().all(|e| e.starts_with("https://")), "{eps:?}");
    let member = |ca: &str| {
        let list: Vec<String> = eps.iter().map(|e| format!("{e:?}")).collect();
        format!(
            "[appliance]\nname = \"fl4-tls\"\ninterfaces = [\"eth0\"]\n\n[fleet]\nname = \"tls\"\n\
             endpoints = [{}]\ntls_ca = \"{}\"\n",
            list.join(", "),
            dir.join(ca).display()
        )
    };
    let good = dir.join("member.toml");
    std::fs::write(&good, member("good-ca.pem")).expect("write");
    let doc = dir.join("fleet.toml");
    std::fs::write(
        &doc,
        "[[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\nprotocol = \"tcp\"\n\
         [[vip.backend]]\naddress = \"10.0.0.21\"\n",
    )
    .expect("write");
    let run = |cfg: &Path, args: &[&str]| fleetctl(&ns, cfg, args);
    let out = run(&good, &["push", &doc.display().to_string()]);
    let text = &out.stdout;
    assert!(
        out.ok() && text.contains("as revision"),
        "push over TLS: {text}{}",
        out.stderr
    );
    let rev: u64 = text
        .rsplit(' ')
        .next()
        .and_then(|r| r.trim().parse().ok())
        .expect("rev");
    let out = run(&good, &["status"]);
    let status = &out.stdout;
    assert!(
        out.ok() && status.contains(&format!("config revision {rev}")),
        "status over TLS: {status}{}",
        out.stderr
    );
    let stranger = dir.join("stranger.toml");
    std::fs::write(&stranger, member("other-ca.pem")).expect("write");
    let out = run(&stranger, &["status"]);
    let err = &out.stderr;
    assert!(
        !out.ok() && err.contains("certificate was refused") && err.contains("tls_ca"),
        "a member trusting another CA: {err}"
    );
    println!(
        "MEASURE etcd over TLS: push revision {rev} and status; another CA: {}",
        err.trim()
    );
    drop(etcd);
    let _ = std::fs::remove_dir_all(&dir);
}
