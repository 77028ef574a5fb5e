//! `sluice lab` from start to end: build the lab, start the appliances, wait until they
//! serve, send traffic through every VIP, print the report, optionally hand the terminal to
//! the console, stop the appliances and tear everything down.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::netns::{LabError, Result};
use crate::{
    CLI_APPLIANCES, Lab, LabMode, LabOptions, VipReport, console, exercise_vip, format_reports,
    wait_for_routes,
};

/// `sluice lab`: build, start the appliances (`sluice` is the binary to run them with),
/// exercise every VIP, report, tear down. Returns whether every VIP worked.
pub fn run_lab(options: LabOptions, sluice: &Path, stop: Arc<AtomicBool>) -> Result<bool> {
    let mut options = options;
    let n = options.appliances.unwrap_or(CLI_APPLIANCES);
    options.appliances = Some(n);
    let names: Vec<String> = (1..=n).map(|k| format!("lb{k}")).collect();
    println!(
        "lab: building namespaces (client, router, {}, {} backends)",
        names.join(", "),
        options.backends
    );
    let mut lab = Lab::build(options)?;
    println!(
        "lab: namespaces sl{}* up, backends serving{}; starting sluice run on {}",
        lab.id,
        if lab.bgp() {
            ", BIRD on the router"
        } else {
            ""
        },
        names.join(", ")
    );
    let logs = lab.spawn_appliances(sluice)?;
    if lab.bgp() {
        wait_for_bgp(&lab, &logs)?;
    }
    let first = wait_until_serving(&lab, &logs)?;
    let packets_before: Vec<(u64, u64)> = (0..lab.appliance_count())
        .map(|k| lab.client_packets_to(k).unwrap_or_default())
        .collect();
    let reports = exercise_every_vip(&lab, &stop)?;
    println!("\n{}", format_reports(&reports));
    if lab.bgp() {
        print_ecmp_shares(&lab, &packets_before);
    }
    if lab.options.console && !stop.load(Ordering::Relaxed) {
        console::open_console(&lab, sluice, first)?;
    }
    let mut clean = true;
    for k in 0..lab.appliance_count() {
        clean &= lab.stop_appliance_at(k);
    }
    print!("{}", tails(&logs));
    println!(
        "lab: appliances exited {}; tearing down",
        if clean { "cleanly" } else { "with an error" }
    );
    Ok(clean && reports.iter().all(VipReport::ok))
}

/// The last lines of every appliance's log, for the end of the run and for errors.
fn tails(logs: &[PathBuf]) -> String {
    let mut s = String::new();
    for (k, log) in logs.iter().enumerate() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let _ = writeln!(s, "lb{} log (last lines):", k + 1);
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[lines.len().saturating_sub(25)..] {
            let _ = writeln!(s, "  {line}");
        }
    }
    s
}

/// Waits until the router has learnt every VIP over BGP, then shows the ECMP routes of
/// the VIPs every appliance serves.
fn wait_for_bgp(lab: &Lab, logs: &[PathBuf]) -> Result<()> {
    match wait_for_routes(lab, Duration::from_secs(30)) {
        Some(t) => println!(
            "lab: router has every VIP route from BGP {:.1} s after start",
            t.as_secs_f64()
        ),
        None => {
            let bird = lab.birdc(&["show", "protocols"]).unwrap_or_default();
            return Err(LabError {
                command: "bgp".into(),
                detail: format!(
                    "the router did not learn every VIP within 30 s\n{bird}\n{}",
                    tails(logs)
                ),
            });
        }
    }
    for mode in [LabMode::Dr, LabMode::Vxlan] {
        if !lab.options.modes.contains(&mode) {
            continue;
        }
        for v6 in [false, true] {
            let route = lab.router_route(mode.vip(v6)).unwrap_or_default();
            println!("router: ip route show {}   ({})", mode.vip(v6), mode.name());
            for line in route.lines() {
                println!("  {line}");
            }
        }
    }
    Ok(())
}

/// Waits until every appliance has its backends up and the first mode's IPv4 VIP answers;
/// returns that mode.
fn wait_until_serving(lab: &Lab, logs: &[PathBuf]) -> Result<LabMode> {
    for k in 0..lab.appliance_count() {
        if lab.wait_healthy(k, Duration::from_secs(20)).is_none() {
            println!(
                "lab: lb{} still has backends down after 20 s (see its log)",
                k + 1
            );
        }
    }
    let first = lab.options.modes.first().copied().unwrap_or(LabMode::Nat);
    let ready = lab.wait_vip(
        SocketAddr::new(first.vip(false), 80),
        Duration::from_secs(20),
    )?;
    if !ready {
        return Err(LabError {
            command: "sluice run".into(),
            detail: format!("the first VIP did not answer within 20 s\n{}", tails(logs)),
        });
    }
    Ok(first)
}

/// Sends the lab's traffic through every VIP of every mode, both families, from the client.
fn exercise_every_vip(lab: &Lab, stop: &Arc<AtomicBool>) -> Result<Vec<VipReport>> {
    let mut reports = Vec::new();
    for mode in lab.options.modes.clone() {
        for v6 in [false, true] {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let (n, st) = (lab.options.requests, Arc::clone(stop));
            reports.push(lab.from_client(move || exercise_vip(mode, v6, n, st))?);
        }
    }
    Ok(reports)
}

/// Prints how many of the client's packets the router sent to each appliance since
/// `before` (the ECMP spread).
fn print_ecmp_shares(lab: &Lab, before: &[(u64, u64)]) {
    let shares: Vec<String> = (0..lab.appliance_count())
        .map(|k| {
            let (v4, v6) = lab.client_packets_to(k).unwrap_or_default();
            let (b4, b6) = before[k];
            format!(
                "lb{}: {} IPv4 + {} IPv6",
                k + 1,
                v4.saturating_sub(b4),
                v6.saturating_sub(b6)
            )
        })
        .collect();
    println!(
        "client packets the router forwarded to each appliance (ECMP): {}\n\
         (NAT and FullNAT VIPs are served by lb1 only: their replies must return through it)\n",
        shares.join(", ")
    );
}
