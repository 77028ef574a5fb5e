//! The alert rules and the Grafana dashboard as Prometheus reads them: `promtool check
//! rules` accepts docs/prometheus/sluice.rules.yml, `promtool test rules` fires each tested
//! alert on the series that should fire it (docs/prometheus/sluice.rules.test.yml), and
//! every query of docs/grafana/sluice.json parses as PromQL (each is checked as a recording
//! rule, Grafana's variables replaced by what they expand to). That the series they read are
//! exported is checked against the exposition in control/metrics.rs's unit tests. Needs
//! promtool (Debian's prometheus, installed by scripts/setup.sh).

use std::path::Path;
use std::process::Command;

use lab::testing::{TempDir, repo};

fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool is missing ({e}): scripts/setup.sh installs Debian's prometheus")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_alert_rules_load_and_fire_as_tested() {
    let dir = repo().join("docs/prometheus");
    let said = promtool(&dir, &["check", "rules", "sluice.rules.yml"]);
    assert!(said.contains("SUCCESS"), "{said}");
    promtool(&dir, &["test", "rules", "sluice.rules.test.yml"]);
}

/// Every `expr` of the dashboard's panels and variables, in order.
fn queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => queries(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| queries(x, out)),
        _ => {}
    }
}

#[test]
fn every_dashboard_query_parses() {
    let text = std::fs::read_to_string(repo().join("docs/grafana/sluice.json")).expect("read");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    queries(&dash["panels"], &mut exprs);
    assert!(exprs.len() > 20, "{exprs:?}");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$vip", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: {}\n",
            serde_json::to_string(&e).expect("quoted")
        ));
    }
    let tmp = TempDir::new("dc-dash");
    std::fs::write(tmp.dir().join("dashboard.rules.yml"), rules).expect("write");
    let said = promtool(tmp.dir(), &["check", "rules", "dashboard.rules.yml"]);
    assert!(
        said.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{said}"
    );
}
