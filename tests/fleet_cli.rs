//! `sluice fleet` as an operator uses it against a real three-member etcd cluster (Debian's
//! etcd-server, on the loopback of a namespace the test creates), with no appliance running:
//! member reports are written with etcdctl as members write them. It checks what the fleet
//! chapter of the manual promises: `--json` and `--config` are taken before or after the
//! subcommand; the status document names the member whose file was given, with the revision
//! it runs and its tables' digest as it reported them; a push that does not validate names
//! the pushed file, and each of its errors once; a member that refused a revision the others
//! activated is reported in `refused` and in the table. Needs root, etcd-server and
//! etcd-client.

use std::net::IpAddr;
use std::path::Path;

use lab::etcd::EtcdCluster;
use lab::netns::Netns;
use lab::testing::{Said, TempDir};

/// Client ports 23900, 23910, 23920 (peers one above): apart from tests/fleet.rs's.
const ETCD_PORT: u16 = 23900;
const FLEET: &str = "dcf";
const DIGEST: &str = "00c0ffee12345678";

const GOOD: &str = r#"
[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
mode = "dr"

[[vip.backend]]
address = "10.1.0.11"
"#;

const BAD: &str = r#"
[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
mode = "dr"
scheduler = "fastest"

[[vip.backend]]
address = "10.1.0.11"
weight = 70000
"#;

fn sluice(ns: &Netns, args: &[&str]) -> Said {
    lab::sluice!().inside(ns).run(args)
}

/// Puts `value` at the fleet's `key`; a member's keys go under a lease, as a member writes
/// them (the fleet does not count a member key written without one).
fn put(etcd: &EtcdCluster, ns: &Netns, key: &str, value: &str) {
    let mut args = vec![
        "put".to_string(),
        format!("/sluice/{FLEET}/{key}"),
        value.to_string(),
    ];
    if key.starts_with("members/") || key.starts_with("health/") {
        let out = etcd
            .ctl(ns, &["lease", "grant", "300"])
            .unwrap_or_else(|e| panic!("etcdctl lease grant: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // "lease 694d9b0b2a4f4c1a granted with TTL(300s)"
        let id = text
            .split_whitespace()
            .nth(1)
            .filter(|_| out.status.success())
            .unwrap_or_else(|| panic!("etcdctl lease grant: {out:?}"));
        args.push(format!("--lease={id}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = etcd
        .ctl(ns, &args)
        .unwrap_or_else(|e| panic!("etcdctl put {key}: {e}"));
    assert!(out.status.success(), "etcdctl put {key}: {out:?}");
}

fn member_file(dir: &Path, endpoints: &[String]) -> String {
    let eps: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    format!(
        "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n[api]\nsocket = \"{}\"\n\n\
         [fleet]\nname = \"{FLEET}\"\nendpoints = [{}]\nstate_dir = \"{}\"\n",
        dir.join("api.sock").display(),
        eps.join(", "),
        dir.display()
    )
}

#[test]
fn fleet_status_and_push_say_what_an_operator_needs() {
    lab::netns::require_root();
    let ns = Netns::new("dc");
    let tmp = TempDir::new("dc-fleet-cli");
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let etcd_dir = tmp.dir().join("etcd");
    std::fs::create_dir_all(&etcd_dir).expect("etcd dir");
    let etcd =
        EtcdCluster::start(&ns, ip, ETCD_PORT, &etcd_dir).unwrap_or_else(|e| panic!("etcd: {e}"));
    let member = tmp.dir().join("lb1.toml");
    std::fs::write(&member, member_file(tmp.dir(), &etcd.endpoints())).expect("member file");
    let m = member.to_string_lossy().into_owned();
    let bad = tmp.dir().join("bad-fleet.toml");
    std::fs::write(&bad, BAD).expect("bad file");
    let good = tmp.dir().join("fleet.toml");
    std::fs::write(&good, GOOD).expect("good file");

    // A bad push names the pushed file, and each error once.
    let said = sluice(
        &ns,
        &["fleet", "--config", &m, "push", &bad.to_string_lossy()],
    );
    assert!(!said.ok(), "a bad file is not pushed: {said:?}");
    let first = said.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("sluice fleet: {}: not pushed", bad.display())),
        "the first line names the pushed file: {}",
        said.stderr
    );
    for e in ["\"fastest\" is not one of", "70000 is out of range"] {
        assert_eq!(
            said.stderr.matches(e).count(),
            1,
            "{e:?} once: {}",
            said.stderr
        );
    }

    // A good push, then lb1 running it and lb3 refusing it after the activation.
    let said = sluice(
        &ns,
        &["fleet", "push", &good.to_string_lossy(), "--config", &m],
    );
    assert!(said.ok(), "push: {said:?}");
    let rev: u64 = said
        .stdout
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("pushed ... as revision R: {:?}", said.stdout));
    put(
        &etcd,
        &ns,
        "members/lb1",
        &format!(
            r#"{{"prepared":{rev},"readiness":"ready","running":{rev},"activated_at_ms":5,"sync_lag_ms":3,"fingerprint":"{DIGEST}"}}"#
        ),
    );
    put(
        &etcd,
        &ns,
        "members/lb3",
        &format!(
            r#"{{"prepared":{rev},"readiness":"refused","error":"vip \"web\".address: contradicts the fleet","running":0}}"#
        ),
    );
    put(
        &etcd,
        &ns,
        "activate",
        &format!(r#"{{"revision":{rev},"by":"lb1","at_ms":2,"all_ready":false}}"#),
    );

    // A member key written by hand without a lease: not a live member, and said so.
    let out = etcd
        .ctl(
            &ns,
            &[
                "put",
                &format!("/sluice/{FLEET}/members/lb9"),
                r#"{"prepared":1,"readiness":"ready","running":1}"#,
            ],
        )
        .expect("etcdctl put");
    assert!(out.status.success(), "{out:?}");

    // --json before and after the subcommand, --config after it.
    let before = sluice(&ns, &["fleet", "--json", "--config", &m, "status"]);
    let after = sluice(&ns, &["fleet", "status", "--json", "--config", &m]);
    assert!(before.ok() && after.ok(), "{before:?}\n{after:?}");
    let doc: api::FleetStatus = serde_json::from_str(&after.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}: {}", after.stdout));
    let doc_before: api::FleetStatus = serde_json::from_str(&before.stdout).expect("json");
    assert_eq!(doc, doc_before, "the same document either way");
    assert_eq!(doc.member, "lb1", "the member whose file was given");
    assert_eq!(doc.running_revision, rev, "lb1 runs the pushed revision");
    assert_eq!(
        doc.table_fingerprint, DIGEST,
        "lb1's tables as it reported them"
    );
    assert!(
        doc.members.iter().all(|x| x.name != "lb9"),
        "a leaseless member key counted: {doc:?}"
    );
    let lb9 = format!("/sluice/{FLEET}/members/lb9");
    assert!(
        doc.ignored_keys
            .get(&lb9)
            .is_some_and(|why| why.contains("without a lease")),
        "{:?}",
        doc.ignored_keys
    );
    let lb1 = doc.members.iter().find(|x| x.name == "lb1").expect("lb1");
    assert_eq!(lb1.table_fingerprint, DIGEST);
    let refused = doc.refused.as_ref().unwrap_or_else(|| {
        panic!("lb3's refusal of the activated revision is in `refused`: {doc:?}")
    });
    assert_eq!(refused.revision, rev);
    assert_eq!(refused.by[0].0, "lb3");

    let table = sluice(&ns, &["fleet", "status", "--config", &m]);
    assert!(table.ok(), "{table:?}");
    assert!(
        table.stdout.contains(&format!(
            "revision {rev} refused by lb3: vip \"web\".address"
        )),
        "{}",
        table.stdout
    );
    assert!(
        table.stdout.contains("activated on the others"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains(DIGEST), "{}", table.stdout);
    assert!(
        table
            .stdout
            .contains(&format!("ignored {lb9}: written without a lease")),
        "{}",
        table.stdout
    );

    // push and rebase take --json too, before or after the subcommand.
    let said = sluice(
        &ns,
        &[
            "fleet",
            "push",
            &good.to_string_lossy(),
            "--json",
            "--config",
            &m,
        ],
    );
    assert!(said.ok(), "push --json: {said:?}");
    let pushed: serde_json::Value = serde_json::from_str(&said.stdout)
        .unwrap_or_else(|e| panic!("push --json: {e}: {}", said.stdout));
    assert_eq!(pushed["pushed"], good.to_string_lossy().as_ref());
    assert!(
        pushed["revision"].as_u64().is_some_and(|r| r > rev),
        "a new revision: {pushed}"
    );
    let said = sluice(&ns, &["fleet", "--json", "--config", &m, "rebase"]);
    assert!(said.ok(), "rebase --json: {said:?}");
    let rebased: serde_json::Value = serde_json::from_str(&said.stdout)
        .unwrap_or_else(|e| panic!("rebase --json: {e}: {}", said.stdout));
    assert!(rebased["epoch"]["id"].is_string(), "{rebased}");
    assert_eq!(rebased["config_revision"], pushed["revision"], "{rebased}");
}

/// `sluice trace` on a fleet member traces what it forwards with: its file merged with the
/// fleet's last activated revision (kept under `[fleet] state_dir`), not its file alone,
/// which holds no VIP. No etcd is asked.
#[test]
fn trace_on_a_member_traces_the_fleets_revision() {
    let tmp = TempDir::new("dc-fleet-trace");
    let member = tmp.dir().join("lb1.toml");
    let m = member.to_string_lossy().into_owned();
    std::fs::write(
        &member,
        member_file(tmp.dir(), &["http://127.0.0.1:1".to_string()]),
    )
    .expect("member file");
    let flow = "tcp 198.51.100.7:40000 -> 192.0.2.10:80";
    let alone = lab::sluice!().run(&["trace", "--config", &m, "--flow", flow]);
    assert!(
        alone.stderr.contains("without an activated revision") || !alone.ok(),
        "{alone:?}"
    );
    let kept = serde_json::json!({ "fleet": FLEET, "revision": 42, "text": GOOD });
    std::fs::write(
        tmp.dir().join(format!("fleet-{FLEET}.last-good.json")),
        kept.to_string(),
    )
    .expect("last good file");
    let traced = lab::sluice!().run(&["trace", "--config", &m, "--flow", flow]);
    assert!(traced.ok(), "{traced:?}");
    assert!(
        traced.stderr.contains("tracing the fleet's revision 42"),
        "{traced:?}"
    );
    assert!(traced.stdout.contains("web"), "the fleet's VIP: {traced:?}");
}

/// The next update of a fleet session that is a view or a refusal, within `limit`.
async fn next_update(
    updates: &mut tokio::sync::mpsc::Receiver<fleet::client::Update>,
    limit: std::time::Duration,
) -> fleet::client::Update {
    tokio::time::timeout(limit, updates.recv())
        .await
        .expect("a session update in time")
        .expect("the session is alive")
}

/// The first refusal (`Down`) a session reports within `limit`: its error.
async fn refused(
    updates: &mut tokio::sync::mpsc::Receiver<fleet::client::Update>,
    limit: std::time::Duration,
) -> String {
    let t0 = tokio::time::Instant::now();
    loop {
        let left = limit.saturating_sub(t0.elapsed());
        if let fleet::client::Update::Down { error, .. } = next_update(updates, left).await {
            return error;
        }
    }
}

/// A member name is one appliance's (issue 45): sessions of the member client, as
/// `sluice run` starts them, against real etcd. A second appliance with the same name is
/// refused with the holder named and writes nothing; when it goes, the first's keys stay;
/// a younger process of the first appliance (a takeover, a restart after a crash) takes
/// the name, and the older one is then refused. Before, the second overwrote the first's
/// report and its leaving deleted the first's keys.
#[test]
fn a_member_name_is_one_appliances() {
    use fleet::client::{self, Settings, Update};
    use std::time::Duration;
    lab::netns::require_root();
    let ns = Netns::new("dn");
    let tmp = TempDir::new("dn-fleet-names");
    let etcd_dir = tmp.dir().join("etcd");
    std::fs::create_dir_all(&etcd_dir).expect("etcd dir");
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let etcd =
        EtcdCluster::start(&ns, ip, ETCD_PORT, &etcd_dir).unwrap_or_else(|e| panic!("etcd: {e}"));
    let settings = |appliance: &str, started_ms: u64| Settings {
        endpoints: etcd.endpoints(),
        user: None,
        tls: None,
        keys: fleet::Keys::new("/sluice", FLEET),
        member: "lb1".into(),
        lease_ttl: Duration::from_secs(3),
        holder: fleet::Holder {
            appliance: appliance.into(),
            started_ms,
        },
    };
    let (a, b, c) = (
        settings("m1:/run/a.sock", 1_000),
        settings("m2:/run/a.sock", 2_000),
        settings("m1:/run/a.sock", 3_000),
    );
    let name = ns.name.clone();
    let run = std::thread::spawn(move || {
        lab::netns::enter(&name);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let holder_now = |s: &Settings| {
                let s = s.clone();
                async move {
                    let mut conn = client::connect(&s).await.expect("connect");
                    let v = client::read(&mut conn, &s.keys).await.expect("read");
                    v.members.get("lb1").map(|r| r.holder.appliance.clone())
                }
            };
            let wait = Duration::from_secs(10);
            let (a_req, mut a_upd) = client::spawn(a.clone());
            match next_update(&mut a_upd, wait).await {
                Update::View { .. } => {}
                other => panic!("the first lb1 joins: {other:?}"),
            }
            assert_eq!(holder_now(&a).await.as_deref(), Some("m1:/run/a.sock"));

            // Another appliance named lb1: refused, the holder named, nothing written.
            let (b_req, mut b_upd) = client::spawn(b.clone());
            let e = refused(&mut b_upd, wait).await;
            assert!(
                e.contains("\"lb1\" is taken") && e.contains("m1:/run/a.sock"),
                "the refusal names the holder: {e}"
            );
            assert_eq!(holder_now(&a).await.as_deref(), Some("m1:/run/a.sock"));
            // It goes: the first's keys stay.
            drop(b_req);
            drop(b_upd);
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(
                holder_now(&a).await.as_deref(),
                Some("m1:/run/a.sock"),
                "the refused one's leaving deleted nothing"
            );

            // A younger process of the first appliance takes the name; the older is
            // refused from then on and cannot take it back.
            let (c_req, mut c_upd) = client::spawn(c.clone());
            let t0 = tokio::time::Instant::now();
            loop {
                match next_update(&mut c_upd, wait).await {
                    Update::View { .. } => break,
                    Update::Down { error, .. } => {
                        assert!(
                            t0.elapsed() < wait,
                            "the younger process never joined: {error}"
                        )
                    }
                    _ => {}
                }
            }
            let e = refused(&mut a_upd, wait).await;
            assert!(
                e.contains("newer process"),
                "the older process is told: {e}"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = client::connect(&c).await.expect("connect");
            let mut now = now;
            let v = client::read(&mut now, &c.keys).await.expect("read");
            let held = v.members.get("lb1").map(|r| r.holder.clone());
            assert_eq!(
                held,
                Some(c.holder.clone()),
                "the younger process holds lb1"
            );

            // It stops (SIGTERM): it leaves, and stays gone. Before, the session went on
            // after the lease was revoked: the watch saw the name deleted and claimed it
            // again, the keep-alive said "lease expired", and a new session reported the
            // stopped member live for another lease ttl.
            // The refused older process goes first, so nothing else may claim lb1.
            drop((a_req, a_upd));
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (reply, left) = tokio::sync::oneshot::channel();
            c_req
                .send(client::Request::Leave { reply })
                .await
                .expect("the session takes requests");
            tokio::time::timeout(wait, left)
                .await
                .expect("leave answered in time")
                .expect("leave answered");
            loop {
                match tokio::time::timeout(wait, c_upd.recv()).await {
                    Ok(None) => break,
                    Ok(Some(u)) => assert!(
                        !matches!(u, Update::Down { .. }),
                        "a member that left reports no failure: {u:?}"
                    ),
                    Err(_) => panic!("the client still runs {wait:?} after leaving"),
                }
            }
            // Longer than the lease ttl (3 s): a name claimed again would be back by now.
            tokio::time::sleep(Duration::from_secs(4)).await;
            let mut conn = client::connect(&c).await.expect("connect");
            let v = client::read(&mut conn, &c.keys).await.expect("read");
            assert!(
                !v.members.contains_key("lb1"),
                "the member that left is not live again: {:?}",
                v.members.get("lb1")
            );
            drop(c_req);
        });
    });
    run.join().expect("the sessions' thread");
}
