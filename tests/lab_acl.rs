//! Source lists in a lab (issue 46): 100 downloads from the client through a VIP whose
//! `allow` list admits it survive a change of that list that still allows them; a `deny` of
//! the client's address added by one reload then ends all 100 (nothing of them is forwarded
//! any more, so none completes), with the flow cache on (NAT) and off (FullNAT), and the
//! drops are counted for the VIP and its list. Needs root.

use std::net::SocketAddr;
use std::time::Duration;

use lab::testing::{file_text, sample, slow_downloads, tail, wait_until};
use lab::{LabMode, LabOptions};

/// How long each download may take to get its headers.
const HEADERS: Duration = Duration::from_secs(10);
const DOWNLOADS: usize = 100;

/// `config` with `lines` added to the VIP `name`'s table.
fn with_lists(config: &str, name: &str, lines: &str) -> String {
    let at = config
        .find(&format!("name = \"{name}\"\n"))
        .unwrap_or_else(|| panic!("{name} in the lab config"));
    let end = at + config[at..].find('\n').expect("line end") + 1;
    format!("{}{lines}\n{}", &config[..end], &config[end..])
}

fn one_lab(mode: LabMode, cache: bool) {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![mode],
        flow_cache: Some(cache),
        prefix: "ac",
        ..LabOptions::default()
    });
    let name = format!("{}4-tcp", mode.name());
    let sock = lab.dir.join("api.sock");
    let full = lab.config(&sock);
    let allow = "allow = [\"198.51.100.0/24\"]";
    lab.write_config(&with_lists(&full, &name, allow))
        .expect("config");
    let vip = SocketAddr::new(mode.vip(false), 80);
    let log = lab.start_serving(lab::sluice!().path(), &[vip]);
    let why = || tail(&file_text(&log), 30);
    // A small receive buffer, so each 1 MB download lasts seconds.
    lab.client
        .try_sh("sysctl -qw net.ipv4.tcp_rmem='4096 8192 16384'")
        .expect("sysctl");
    let (downloads, _) = slow_downloads(
        &lab.client,
        vip,
        Duration::from_millis(40),
        DOWNLOADS,
        HEADERS,
    );
    let api = lab.api_at(0);
    let metrics = || api.call(|c| c.metrics()).expect("GET /metrics");
    let flows = || {
        sample(
            &metrics(),
            &format!("sluice_vip_active_flows{{vip=\"{name}\"}}"),
        )
    };
    assert!(
        flows().unwrap_or(0.0) >= DOWNLOADS as f64,
        "{:?} flows",
        flows()
    );

    // An allow-list change that still admits the client: every download goes on.
    let wider = "allow = [\"198.51.100.0/25\", \"203.0.113.0/24\"]";
    lab.write_config(&with_lists(&full, &name, wider))
        .expect("config");
    assert!(lab.reload(), "SIGHUP");
    std::thread::sleep(Duration::from_secs(2));
    let running = downloads.iter().filter(|d| !d.is_finished()).count();
    assert_eq!(
        running, DOWNLOADS,
        "{mode:?}: the allow change disturbed a download"
    );
    assert!(
        flows().unwrap_or(0.0) >= DOWNLOADS as f64,
        "{:?} flows",
        flows()
    );

    // Deny the client's own address: one reload ends all 100.
    let denied = format!("{wider}\ndeny = [\"198.51.100.2/32\"]");
    lab.write_config(&with_lists(&full, &name, &denied))
        .expect("config");
    assert!(lab.reload(), "SIGHUP");
    let dropped = format!("sluice_acl_dropped_total{{vip=\"{name}\",list=\"deny\"}}");
    wait_until(
        "the denied source's flows to end and its drops to be counted",
        Duration::from_secs(10),
        || flows() == Some(0.0) && sample(&metrics(), &dropped).unwrap_or(0.0) > 0.0,
        || format!("{mode:?}: {:?} flows\n{}", flows(), why()),
    );
    // Not a byte more reaches the client: every download ends unfinished (its read times
    // out), none with the whole blob.
    let mut completed = 0;
    for d in downloads {
        if d.join().expect("download thread").is_ok() {
            completed += 1;
        }
    }
    assert_eq!(completed, 0, "{mode:?}: a denied download completed");
    assert_eq!(flows(), Some(0.0), "{mode:?}: no flow came back");
}

#[test]
fn a_deny_ends_a_hundred_open_connections_in_one_commit_and_an_allow_change_none() {
    let _one = lab::testing::serial();
    one_lab(LabMode::Nat, true);
    one_lab(LabMode::FullNat, false);
}
