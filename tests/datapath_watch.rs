//! The datapath watch (issue 52), one fault each, done to a running `sluice run` the way
//! another tool or a colleague would: its XDP program detached (`ip link set dev eth0 xdp
//! off`) is attached again within a second; another program attached in its place (`ip
//! -force link set ... xdp obj`) is named in an event, not fought, and its VIPs withdrawn
//! from BGP until `sluice ctl datapath reclaim`; a queue count raised with `ethtool -L` gets
//! sockets on every queue again; a link down and up is shown and survived. Needs root,
//! clang, ethtool and (for the BGP test) bird2.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use lab::testing::{TempDir, poll};
use lab::{Lab, LabMode, LabOptions, http_get};

/// The VIP every test sends to: the lab's DR VIP.
fn vip() -> SocketAddr {
    SocketAddr::new(LabMode::Dr.vip(false), 80)
}

/// A DR lab with one appliance; `bgp`: BIRD on the router learns the VIP from it.
fn lab(bgp: bool, queues: u32) -> Lab {
    lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr],
        appliances: Some(1),
        bgp: Some(bgp),
        queues,
        prefix: "dw",
        ..LabOptions::default()
    })
}

/// The XDP program attached to the appliance's eth0: (id, name), if any.
fn xdp_prog(lab: &Lab) -> Option<(u32, String)> {
    let out = lab.lb.run(&["ip", "-d", "link", "show", "dev", "eth0"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = text.find("prog/xdp id ")?;
    let mut words = text[at + "prog/xdp id ".len()..].split_whitespace();
    let id = words.next()?.parse().ok()?;
    let name = match (words.next(), words.next()) {
        (Some("name"), Some(n)) => n.to_string(),
        _ => String::new(),
    };
    Some((id, name))
}

/// Appliance eth0's state in `sluice ctl status` (`forwarding`, `foreign`, ...) and its
/// words.
fn state(lab: &Lab) -> (String, String, u32) {
    let s: api::Status = lab::sluice!().ctl_json(&lab.api_socket_at(0), &["status"]);
    let i = s.interfaces.first().expect("an interface in the status");
    (i.state.clone(), i.state_detail.clone(), i.queues)
}

/// The datapath events so far.
fn events(lab: &Lab) -> Vec<String> {
    lab.api_at(0)
        .call(|c| c.events(0))
        .expect("events")
        .into_iter()
        .filter(|e| e.kind == "datapath")
        .map(|e| e.message)
        .collect()
}

/// Waits up to `limit` for `cond`; fails with `what` and the appliance's log otherwise.
fn within(lab: &Lab, limit: Duration, what: &str, cond: impl FnMut() -> bool) -> Duration {
    poll(limit, Duration::from_millis(20), cond).unwrap_or_else(|| {
        panic!(
            "{what} not within {limit:?}\nevents: {:#?}\n{}",
            events(lab),
            lab.log_tail(0, 40)
        )
    })
}

/// Of `n` requests to the VIP from the client (each its own connection), how many answered.
fn answered(lab: &Lab, n: usize) -> usize {
    let vip = vip();
    lab.from_client(move || {
        (0..n)
            .filter(|_| {
                matches!(
                    http_get(vip, "/whoami", Duration::from_secs(2)),
                    Ok((200, _))
                )
            })
            .count()
    })
    .expect("client")
}

/// A trivial XDP program (`xdp_pass`, passes everything) built with clang into `dir`.
fn pass_program(dir: &TempDir) -> PathBuf {
    lab::netns::require_program("clang", "clang");
    let src = dir.path("pass.c");
    std::fs::write(
        &src,
        "#include <linux/bpf.h>\n\
         __attribute__((section(\"xdp\"), used)) int xdp_pass(struct xdp_md *c) { return XDP_PASS; }\n\
         char _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
    )
    .expect("write pass.c");
    let obj = PathBuf::from(dir.path("pass.o"));
    let arch = std::env::consts::ARCH;
    let out = Command::new("clang")
        .args([
            "-O2",
            "-target",
            "bpf",
            &format!("-I/usr/include/{arch}-linux-gnu"),
        ])
        .args(["-c", &src, "-o"])
        .arg(&obj)
        .output()
        .expect("run clang");
    assert!(
        out.status.success(),
        "clang: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    obj
}

#[test]
fn a_detached_program_is_attached_again_within_a_second() {
    let _one = lab::testing::serial();
    let mut lab = lab(false, 1);
    lab.start_serving(lab::sluice!().path(), &[vip()]);
    let (ours, name) = xdp_prog(&lab).expect("the appliance's program is attached");
    assert_eq!(name, "sluice_steer");
    lab.lb
        .run(&["ip", "link", "set", "dev", "eth0", "xdp", "off"]);
    // In case it runs in the generic hook (nothing there: no harm).
    let _ = lab
        .lb
        .try_run(&["ip", "link", "set", "dev", "eth0", "xdpgeneric", "off"]);
    let t0 = Instant::now();
    let took = within(
        &lab,
        Duration::from_secs(1),
        "the program attached again",
        || xdp_prog(&lab).is_some_and(|(id, _)| id == ours),
    );
    println!("MEASURE reattached after {:?}", t0.elapsed().max(took));
    within(&lab, Duration::from_secs(2), "the event", || {
        events(&lab).iter().any(|e| e.contains("attached again"))
    });
    assert_eq!(state(&lab).0, "forwarding");
    assert_eq!(answered(&lab, 20), 20, "the VIP serves after the re-attach");
    let metrics = lab.api_at(0).call(|c| c.metrics()).expect("metrics");
    assert!(
        metrics.contains("sluice_datapath_watch_events_total{event=\"reattached\"} 1"),
        "{metrics}"
    );
    assert!(lab.stop_appliance(), "clean exit");
}

#[test]
fn another_program_in_our_place_is_named_and_left_until_reclaimed() {
    lab::netns::require_program("bird", "bird2");
    let _one = lab::testing::serial();
    let dir = TempDir::new("dw-pass");
    let obj = pass_program(&dir);
    let mut lab = lab(true, 1);
    lab.start_routed(lab::sluice!().path());
    let routed = |lab: &Lab| {
        lab::testing::kernel_route(&lab.router, &format!("{}/32", vip().ip())).contains("via")
    };
    assert!(routed(&lab), "the router has the VIP's route");
    let mode = match lab.lb.run(&["ip", "link", "show", "dev", "eth0"]) {
        o if String::from_utf8_lossy(&o.stdout).contains("xdpgeneric") => "xdpgeneric",
        _ => "xdpdrv",
    };
    let obj_arg = obj.to_string_lossy().into_owned();
    lab.lb.run(&[
        "ip", "-force", "link", "set", "dev", "eth0", mode, "obj", &obj_arg, "sec", "xdp",
    ]);
    let (theirs, name) = xdp_prog(&lab).expect("the other program is attached");
    assert_eq!(name, "xdp_pass");
    within(&lab, Duration::from_secs(1), "the state foreign", || {
        state(&lab).0 == "foreign"
    });
    let detail = state(&lab).1;
    assert!(
        detail.contains(&format!("id {theirs} (xdp_pass)")),
        "{detail}"
    );
    within(&lab, Duration::from_secs(5), "the VIP withdrawn", || {
        !routed(&lab)
    });
    // Not fought: the other program stays, the route stays away, one event names it.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(xdp_prog(&lab), Some((theirs, "xdp_pass".to_string())));
    assert!(
        !routed(&lab),
        "the VIP came back while another program holds eth0"
    );
    let named: Vec<String> = events(&lab)
        .into_iter()
        .filter(|e| {
            e.starts_with("datapath eth0:") && e.contains(&format!("id {theirs} (xdp_pass)"))
        })
        .collect();
    assert_eq!(named.len(), 1, "one event names the holder: {named:#?}");
    let said = lab::sluice!().ctl_ok(&lab.api_socket_at(0), &["datapath", "reclaim"]);
    assert!(said.contains("xdp_pass"), "{said}");
    assert_eq!(
        xdp_prog(&lab).map(|(_, n)| n),
        Some("sluice_steer".to_string())
    );
    within(
        &lab,
        Duration::from_secs(10),
        "the VIP announced again",
        || routed(&lab),
    );
    assert_eq!(state(&lab).0, "forwarding");
    assert_eq!(answered(&lab, 20), 20, "the VIP serves after the reclaim");
    assert!(lab.stop_appliance(), "clean exit");
}

#[test]
fn a_raised_queue_count_gets_sockets_on_every_queue() {
    lab::netns::require_program("ethtool", "ethtool");
    let _one = lab::testing::serial();
    let mut lab = lab(false, 4);
    // The appliance starts on one queue; the router's end sends on one.
    lab.lb.run(&["ethtool", "-L", "eth0", "rx", "1", "tx", "1"]);
    lab.router
        .run(&["ethtool", "-L", "lb1", "rx", "1", "tx", "1"]);
    lab.start_serving(lab::sluice!().path(), &[vip()]);
    assert_eq!(state(&lab).2, 1, "one queue served at start");
    lab.lb.run(&["ethtool", "-L", "eth0", "rx", "4", "tx", "4"]);
    lab.router
        .run(&["ethtool", "-L", "lb1", "rx", "4", "tx", "4"]);
    within(&lab, Duration::from_secs(2), "four queues served", || {
        state(&lab).2 == 4
    });
    assert!(
        events(&lab)
            .iter()
            .any(|e| e.contains("queue count changed from 1 to 4")),
        "{:#?}",
        events(&lab)
    );
    assert_eq!(state(&lab).0, "forwarding");
    let n = 60;
    let ok = answered(&lab, n);
    assert_eq!(
        ok,
        n,
        "flows spread over four queues all answered\n{}",
        lab.log_tail(0, 30)
    );
    assert!(lab.stop_appliance(), "clean exit");
}

#[test]
fn a_link_down_and_up_is_shown_and_survived() {
    let _one = lab::testing::serial();
    let mut lab = lab(false, 1);
    lab.start_serving(lab::sluice!().path(), &[vip()]);
    lab.lb.run(&["ip", "link", "set", "dev", "eth0", "down"]);
    within(&lab, Duration::from_secs(1), "the state link_down", || {
        state(&lab).0 == "link_down"
    });
    lab.lb.run(&["ip", "link", "set", "dev", "eth0", "up"]);
    within(&lab, Duration::from_secs(1), "the state forwarding", || {
        state(&lab).0 == "forwarding"
    });
    let said = events(&lab);
    assert!(
        said.iter().any(|e| e.contains("eth0: link down")),
        "{said:#?}"
    );
    assert!(
        said.iter().any(|e| e.contains("eth0: forwarding")),
        "{said:#?}"
    );
    // The router's neighbour entry and the backends settle after the link comes back.
    let back = lab
        .wait_vip(vip(), Duration::from_secs(10))
        .expect("client");
    assert!(back, "the VIP answers after the link came back");
    assert_eq!(
        answered(&lab, 20),
        20,
        "the VIP serves after the link came back"
    );
    assert!(lab.stop_appliance(), "clean exit");
}

/// Appliance lb1's faults, each done while a steady client (a new connection every 20 ms,
/// each given 4 s: a lost SYN is sent again after 1 s) requests through the DR VIP, which
/// BIRD spreads over lb1 and lb2 by ECMP (per-flow hash): the client keeps at least 99.9%
/// of its requests through each fault, and lb1 is back in the route after it.
#[test]
fn the_client_keeps_its_requests_through_each_fault_of_one_of_two_appliances() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    lab::netns::require_program("bird", "bird2");
    lab::netns::require_program("ethtool", "ethtool");
    let _one = lab::testing::serial();
    let dir = TempDir::new("dw-pair-pass");
    let obj = pass_program(&dir).to_string_lossy().into_owned();
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Dr],
        appliances: Some(2),
        bgp: Some(true),
        queues: 2,
        prefix: "dw",
        ..LabOptions::default()
    });
    // lb1 starts on one queue of two; the queue fault raises it to two.
    lab.lb.run(&["ethtool", "-L", "eth0", "rx", "1", "tx", "1"]);
    lab.router
        .run(&["ethtool", "-L", "lb1", "rx", "1", "tx", "1"]);
    lab.start_routed(lab::sluice!().path());
    let hops = |lab: &Lab| lab.next_hops(vip().ip()).map_or(0, |h| h.len());
    assert_eq!(hops(&lab), 2, "the router spreads the VIP over both");
    let ours = xdp_prog(&lab).expect("lb1's program").0;
    let mode = match lab.lb.run(&["ip", "link", "show", "dev", "eth0"]) {
        o if String::from_utf8_lossy(&o.stdout).contains("xdpgeneric") => "xdpgeneric",
        _ => "xdpdrv",
    };
    type Fault<'a> = (&'a str, Box<dyn Fn(&Lab) + 'a>);
    let faults: Vec<Fault<'_>> = vec![
        (
            "program detached",
            Box::new(|lab: &Lab| {
                lab.lb
                    .run(&["ip", "link", "set", "dev", "eth0", "xdp", "off"]);
                let _ = lab
                    .lb
                    .try_run(&["ip", "link", "set", "dev", "eth0", "xdpgeneric", "off"]);
                within(lab, Duration::from_secs(1), "attached again", || {
                    xdp_prog(lab).is_some_and(|(id, _)| id == ours)
                });
            }),
        ),
        (
            "another program in its place",
            Box::new(|lab: &Lab| {
                let set = ["ip", "-force", "link", "set", "dev", "eth0", mode, "obj"];
                let mut args = set.to_vec();
                args.extend([obj.as_str(), "sec", "xdp"]);
                lab.lb.run(&args);
                within(lab, Duration::from_secs(5), "lb1 withdrawn", || {
                    hops(lab) == 1
                });
                std::thread::sleep(Duration::from_secs(1));
                lab::sluice!().ctl_ok(&lab.api_socket_at(0), &["datapath", "reclaim"]);
            }),
        ),
        (
            "queue count raised",
            Box::new(|lab: &Lab| {
                lab.lb.run(&["ethtool", "-L", "eth0", "rx", "2", "tx", "2"]);
                lab.router
                    .run(&["ethtool", "-L", "lb1", "rx", "2", "tx", "2"]);
                within(lab, Duration::from_secs(2), "two queues served", || {
                    state(lab).2 == 2
                });
            }),
        ),
        (
            "link down and up",
            Box::new(|lab: &Lab| {
                lab.lb.run(&["ip", "link", "set", "dev", "eth0", "down"]);
                within(lab, Duration::from_secs(1), "link_down", || {
                    state(lab).0 == "link_down"
                });
                lab.lb.run(&["ip", "link", "set", "dev", "eth0", "up"]);
            }),
        ),
    ];
    for (what, fault) in faults {
        let stop = Arc::new(AtomicBool::new(false));
        let st = Arc::clone(&stop);
        let client = lab
            .client
            .in_thread(move || {
                lab::testing::steady_client(
                    vip(),
                    Duration::from_millis(20),
                    Duration::from_secs(4),
                    st,
                )
            })
            .expect("client thread");
        std::thread::sleep(Duration::from_secs(1));
        let t0 = Instant::now();
        fault(&lab);
        within(&lab, Duration::from_secs(10), "lb1 forwarding", || {
            state(&lab).0 == "forwarding"
        });
        within(
            &lab,
            Duration::from_secs(15),
            "lb1 back in the route",
            || hops(&lab) == 2,
        );
        let back = t0.elapsed();
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let r = client.join().expect("client");
        println!(
            "MEASURE {what}: lb1 back in {back:?}; the client had {}/{} answered, {} after 1 s \
             or more",
            r.answered,
            r.attempts,
            r.slower_than(Duration::from_secs(1))
        );
        assert!(r.attempts >= 100, "{what}: the client hardly ran: {r:?}");
        assert!(
            r.answered * 1000 >= r.attempts * 999,
            "{what}: the client kept {}/{} ({:?})\nevents: {:#?}\n{}",
            r.answered,
            r.attempts,
            r.first_error,
            events(&lab),
            lab.log_tail(0, 30)
        );
    }
    assert_eq!(
        xdp_prog(&lab).map(|(_, n)| n).as_deref(),
        Some("sluice_steer")
    );
}
