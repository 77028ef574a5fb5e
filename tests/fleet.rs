//! A fleet of three appliances driven by a real three-member etcd cluster (Debian's
//! etcd-server, in the lab router's namespace): DR VIPs behind BIRD with ECMP, the VIPs
//! pushed with `sluice fleet push`, never in the appliances' files. One lab runs the whole
//! story, in order: a push reaches every member through the two-phase activation (spread
//! printed, table fingerprints over the API identical); a backend one member cannot reach
//! is a disagreement, not a flip; the etcd leader killed, then all of etcd stopped, leave
//! forwarding alone and the members stale, and they converge when etcd is back; a member cut
//! off from etcd past its lease is not waited for, and catches up before it announces again.
//! Needs root, bird2, nftables and etcd-server/etcd-client.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use lab::etcd::EtcdCluster;
use lab::{Lab, LabMode, LabOptions};

const MEMBERS: usize = 3;
const ETCD_PORT: u16 = 23790;

fn sluice() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluice"))
}

struct Fleet {
    lab: Lab,
    etcd: EtcdCluster,
    /// The fleet's configuration as the lab wrote it for one appliance (VIPs and checks).
    doc: toml::Table,
    pushes: u32,
}

/// The lab's config for appliance `k` split into the member file (with `[fleet]`) and the
/// fleet's sections.
fn split(text: &str, endpoints: &[String]) -> (String, toml::Table) {
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
        let lab = Lab::build(LabOptions {
            modes: vec![LabMode::Dr],
            appliances: Some(MEMBERS),
            bgp: Some(true),
            prefix: "fl",
            ..LabOptions::default()
        })
        .unwrap_or_else(|e| panic!("lab: {e}"));
        let dir = lab.dir.join("etcd");
        std::fs::create_dir_all(&dir).expect("etcd dir");
        let ip: IpAddr = lab::ROUTER_LAN4.parse().unwrap();
        let etcd = EtcdCluster::start(&lab.router, ip, ETCD_PORT, &dir)
            .unwrap_or_else(|e| panic!("etcd: {e}"));
        let mut doc = None;
        for k in 0..MEMBERS {
            let (local, fleet) =
                split(&lab.config_for(k, &lab.api_socket_at(k)), &etcd.endpoints());
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
        let out = self.ns(0).output(&[
            &sluice().to_string_lossy(),
            "fleet",
            "--config",
            &cfg.to_string_lossy(),
            "push",
            &file.to_string_lossy(),
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "push failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.rsplit(' ')
            .next()
            .and_then(|r| r.trim().parse().ok())
            .unwrap_or_else(|| panic!("no revision in {text:?}"))
    }

    /// `GET /v1/fleet` of appliance `k`.
    fn status(&self, k: usize) -> Option<api::FleetStatus> {
        let sock = self.lab.api_socket_at(k);
        let out = std::process::Command::new("curl")
            .args(["-sf", "--max-time", "2", "--unix-socket"])
            .arg(&sock)
            .arg("http://localhost/v1/fleet")
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
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
        (0..MEMBERS)
            .map(|k| {
                let t = std::fs::read_to_string(self.lab.log_path_at(k)).unwrap_or_default();
                let tail: Vec<&str> = t.lines().rev().take(25).collect();
                format!(
                    "--- lb{} ---\n{}",
                    k + 1,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn events(&self, k: usize) -> String {
        let out = self.ns(k).output(&[
            &sluice().to_string_lossy(),
            "ctl",
            "--socket",
            &self.lab.api_socket_at(k).to_string_lossy(),
            "events",
        ]);
        String::from_utf8_lossy(&out.stdout).to_string()
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
    f.lab.spawn_appliances(sluice()).expect("start");
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
    f.traffic_ok("after a push");

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
    f.etcd.start_all(&f.lab.router).expect("etcd back");
    f.wait_all("reconnected", Duration::from_secs(30), |s| !s.stale);
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
}
