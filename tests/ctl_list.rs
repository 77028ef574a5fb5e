//! `sluice ctl list` against a running appliance in a lab: the ipvsadm-shaped lines parse as
//! ipvsadm's do, and their connection counts follow real connections through a NAT VIP
//! (held open: ActiveConn; closed: InActConn until the closing timeout). Needs root.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use lab::testing::wait_for;
use lab::{LabMode, LabOptions};

/// Connections the client holds open through the NAT VIP.
const HELD: usize = 6;
/// How often a wait asks `sluice ctl list` again.
const POLL: Duration = Duration::from_millis(200);

/// One `  -> address:port Forward Weight ActiveConn InActConn` line.
#[derive(Debug)]
struct Real {
    addr: SocketAddr,
    forward: String,
    weight: u32,
    active: u64,
    inactive: u64,
}

/// The service line starting with `head` and its backends; panics on any line that does not
/// have ipvsadm's shape.
fn service(list: &str, head: &str) -> (String, Vec<Real>) {
    let mut lines = list.lines();
    let version = lines.next().unwrap_or_default();
    assert!(
        version.starts_with("Sluice ") && version.contains("config version"),
        "{list}"
    );
    assert_eq!(
        lines.next(),
        Some("Prot LocalAddress:Port Scheduler Flags"),
        "{list}"
    );
    assert_eq!(
        lines.next(),
        Some("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn"),
        "{list}"
    );
    let mut found: Option<(String, Vec<Real>)> = None;
    for l in lines {
        if let Some(rest) = l.strip_prefix("  -> ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            assert_eq!(f.len(), 5, "backend line {l:?}");
            let real = Real {
                addr: f[0].parse().unwrap_or_else(|_| panic!("address in {l:?}")),
                forward: f[1].to_string(),
                weight: f[2].parse().unwrap_or_else(|_| panic!("weight in {l:?}")),
                active: f[3]
                    .parse()
                    .unwrap_or_else(|_| panic!("ActiveConn in {l:?}")),
                inactive: f[4]
                    .parse()
                    .unwrap_or_else(|_| panic!("InActConn in {l:?}")),
            };
            if let Some((_, reals)) = found.as_mut().filter(|(h, _)| h.starts_with(head)) {
                reals.push(real);
            }
        } else {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(
                f.len() >= 3 && matches!(f[0], "TCP" | "UDP"),
                "service line {l:?}"
            );
            if l.starts_with(head) {
                found = Some((l.to_string(), Vec::new()));
            } else if found.as_ref().is_some_and(|(h, _)| h.starts_with(head)) {
                // The next service: keep what was found.
                return found.unwrap_or_default();
            }
        }
    }
    found.unwrap_or_else(|| panic!("no service line {head:?} in:\n{list}"))
}

#[test]
fn list_follows_real_connections() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat, LabMode::Dr],
        prefix: "ia",
        ..LabOptions::default()
    });
    let sluice = lab::sluice!();
    let socket = lab.api_socket_at(0);
    let vip = SocketAddr::new(LabMode::Nat.vip(false), 80);
    lab.start_serving(sluice.path(), &[vip]);
    let head = format!("TCP  {vip} ");

    let held: Vec<TcpStream> = lab
        .from_client(move || {
            (0..HELD)
                .map(|_| {
                    // A lost SYN on a busy machine is retried, as a client would.
                    (0..5)
                        .find_map(|_| TcpStream::connect_timeout(&vip, Duration::from_secs(2)).ok())
                        .expect("connect through the VIP")
                })
                .collect()
        })
        .expect("client");
    // Each held connection is established TCP on its backend: ActiveConn.
    let (line, reals) = wait_for(
        "the held connections as ActiveConn",
        Duration::from_secs(10),
        POLL,
        || {
            let (line, reals) = service(&sluice.ctl_ok(&socket, &["list"]), &head);
            let active: u64 = reals.iter().map(|r| r.active).sum();
            (active == HELD as u64).then_some((line, reals))
        },
    );
    println!("{line}\n{reals:#?}");
    assert!(
        line.ends_with(" mh (mh-port)"),
        "maglev with the 5-tuple hash is mh-port: {line}"
    );
    assert_eq!(reals.len(), 3, "{reals:?}");
    for r in &reals {
        assert_eq!(r.forward, "Masq", "{r:?}");
        assert_eq!(r.addr.port(), 8080, "{r:?}");
        assert!(r.weight > 0, "healthy backends take new flows: {r:?}");
    }
    let dr = service(
        &sluice.ctl_ok(&socket, &["list"]),
        &format!("TCP  {} ", SocketAddr::new(LabMode::Dr.vip(false), 80)),
    );
    assert!(
        dr.1.iter()
            .all(|r| r.forward == "Route" && r.addr.port() == 80),
        "{dr:?}"
    );

    // Closed: no longer active; closing entries are InActConn until tcp_closing expires them.
    drop(held);
    wait_for(
        "the closed connections to leave ActiveConn",
        Duration::from_secs(10),
        POLL,
        || {
            let (_, reals) = service(&sluice.ctl_ok(&socket, &["list"]), &head);
            let active: u64 = reals.iter().map(|r| r.active).sum();
            let inactive: u64 = reals.iter().map(|r| r.inactive).sum();
            (active == 0 && inactive >= 1).then_some(())
        },
    );

    let stats = sluice.ctl_ok(&socket, &["list", "--stats"]);
    let row = stats
        .lines()
        .find(|l| l.starts_with(&head.trim_end().to_string()))
        .unwrap_or_else(|| panic!("no {head:?} in:\n{stats}"));
    let cols: Vec<&str> = row.split_whitespace().skip(2).collect();
    assert_eq!(cols.len(), 5, "{row}");
    let conns: u64 = cols[0].parse().expect("Conns");
    assert!(conns >= HELD as u64, "every connection counted: {row}");
    // Each backend's Conns: the new flows scheduled to it; together the VIP's.
    let per_backend: Vec<u64> = stats
        .lines()
        .skip_while(|l| !l.starts_with(&head.trim_end().to_string()))
        .skip(1)
        .take_while(|l| l.starts_with("  -> "))
        .map(|l| {
            let c = l.split_whitespace().nth(2).unwrap_or_default();
            c.parse()
                .unwrap_or_else(|_| panic!("backend Conns {c:?} in {l:?}:\n{stats}"))
        })
        .collect();
    assert!(!per_backend.is_empty(), "no backend lines:\n{stats}");
    assert_eq!(
        per_backend.iter().sum::<u64>(),
        conns,
        "backends' Conns do not add up to the VIP's:\n{stats}"
    );
    let words = |text: &str| -> Vec<String> {
        text.lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        words(&stats),
        [
            "Prot",
            "LocalAddress:Port",
            "Conns",
            "InPkts",
            "OutPkts",
            "InBytes",
            "OutBytes"
        ],
        "{stats}"
    );
    let rate = sluice.ctl_ok(&socket, &["list", "--rate"]);
    assert_eq!(
        words(&rate),
        [
            "Prot",
            "LocalAddress:Port",
            "CPS",
            "InPPS",
            "OutPPS",
            "InBPS",
            "OutBPS"
        ],
        "{rate}"
    );
    assert!(
        rate.lines().any(|l| l.starts_with(head.trim_end())),
        "{rate}"
    );
}
