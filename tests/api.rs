//! The local API against a running appliance in a lab: every route, its errors (malformed
//! JSON, unknown VIPs and backends, wrong methods, a rejected reload), every JSON reply
//! validated against docs/api/openapi.json, the Prometheus scrape parsed by the Prometheus
//! project's own Python parser, and `sluice ctl` over the same socket. Needs root.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use api::BackendAction;
use hyper::{Method, StatusCode};
use lab::testing::{Said, file_text, wait_for};
use lab::{Lab, LabMode, LabOptions, http_get};
use serde_json::Value;

const DOC: &str = include_str!("../docs/api/openapi.json");
/// How often a wait asks again.
const POLL: Duration = Duration::from_millis(100);

/// Validates replies against the OpenAPI document and remembers which operations were seen.
struct Checker {
    doc: Value,
    seen: BTreeSet<(String, String, u16)>,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            doc: serde_json::from_str(DOC).expect("openapi.json is JSON"),
            seen: BTreeSet::new(),
        }
    }

    /// Checks `body` against the schema of (`template`, `method`, `status`).
    fn check(&mut self, method: &str, template: &str, status: StatusCode, body: &[u8]) {
        let op = &self.doc["paths"][template][method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in openapi.json");
        let code = status.as_u16().to_string();
        let resp = &op["responses"][&code];
        assert!(
            resp.is_object(),
            "{method} {template} answered {status}, which openapi.json does not list: {}",
            String::from_utf8_lossy(body)
        );
        self.seen
            .insert((method.to_string(), template.to_string(), status.as_u16()));
        let Some(schema) = resp["content"]
            .get("application/json")
            .map(|c| &c["schema"])
        else {
            return;
        };
        let value: Value = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "{method} {template}: reply is not JSON ({e}): {}",
                String::from_utf8_lossy(body)
            )
        });
        // The whole document as the root, so `#/components/schemas/...` references resolve.
        let mut root = self.doc.clone();
        root["allOf"] = Value::Array(vec![schema.clone()]);
        let validator = jsonschema::validator_for(&root).expect("schema compiles");
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {template} ({status}) does not match openapi.json:\n{}\n{}",
            errors.join("\n"),
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
    }
}

/// The API over the lab's socket, each reply checked against openapi.json.
struct Api(lab::testing::Api);

impl Api {
    fn new(socket: &Path) -> Api {
        Api(lab::testing::Api::unix(socket))
    }

    fn raw(&self, method: Method, path: &str, body: Option<&str>) -> (StatusCode, Vec<u8>) {
        let (s, b) = self
            .0
            .call(|c| c.raw(method.clone(), path, body.map(|b| b.as_bytes().to_vec())))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        (s, b.to_vec())
    }

    /// A request whose reply is checked against `template`'s schema; returns the JSON.
    fn call(
        &self,
        chk: &mut Checker,
        method: Method,
        path: &str,
        template: &str,
        body: Option<&str>,
        want: StatusCode,
    ) -> Value {
        let (status, bytes) = self.raw(method.clone(), path, body);
        assert_eq!(
            status,
            want,
            "{method} {path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        chk.check(method.as_str(), template, status, &bytes);
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    }
}

/// Parses an exposition with prometheus_client's OpenMetrics parser (python3); returns
/// `name{labels} value` lines of every sample.
fn parse_metrics(text: &str) -> Vec<String> {
    lab::netns::require_program("/usr/bin/python3", "python3");
    let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        print(f"{fam.type} {s.name}{{{labels}}} {s.value}")
"#;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3");
    assert!(
        out.status.success(),
        "the Prometheus parser rejected the exposition (python3-prometheus-client is installed by scripts/setup.sh):\n{}\n--- exposition ---\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn sample(lines: &[String], prefix: &str) -> f64 {
    lines
        .iter()
        .find_map(|l| {
            let rest = l.split_once(' ')?.1;
            rest.strip_prefix(prefix)?.trim().parse::<f64>().ok()
        })
        .unwrap_or_else(|| panic!("no sample {prefix} in\n{}", lines.join("\n")))
}

#[test]
fn every_route_against_a_running_appliance() {
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        ..LabOptions::default()
    });
    // And a DR VIP with an outbound range, for GET /v1/vips/{vip}/outbound.
    let socket = lab.api_socket_at(0);
    let cfg = lab.config(&socket)
        + "[[vip]]\nname = \"dr4-out\"\naddress = \"192.0.2.12\"\nport = 80\nmode = \"dr\"\n\
           outbound = \"40000-40999\"\n[[vip.backend]]\naddress = \"10.0.0.21\"\n\
           [[vip.backend]]\naddress = \"10.0.0.22\"\n";
    lab.write_config(&cfg).expect("write config");
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    let log_text = || file_text(&log);
    wait_for("the API socket", Duration::from_secs(20), POLL, || {
        socket.exists().then_some(())
    });
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "the API socket must be root-only");

    let api = Api::new(&socket);
    let mut chk = Checker::new();

    // Reads.
    let status = api.call(
        &mut chk,
        Method::GET,
        "/v1/status",
        "/v1/status",
        None,
        StatusCode::OK,
    );
    assert_eq!(status["appliance"], "lab-lb1");
    assert!(
        status["config_version"].as_u64().unwrap_or(0) >= 1,
        "{status}"
    );
    assert!(!status["workers"].as_array().expect("workers").is_empty());
    assert_eq!(status["interfaces"][0]["name"], "eth0");
    let vips = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips",
        "/v1/vips",
        None,
        StatusCode::OK,
    );
    let names: Vec<&str> = vips
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["nat4-tcp", "nat4-udp", "nat6-tcp", "nat6-udp", "dr4-out"]
    );
    let one = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips/nat4-tcp",
        "/v1/vips/{vip}",
        None,
        StatusCode::OK,
    );
    assert_eq!(
        (one["mode"].as_str(), one["port"].as_u64()),
        (Some("nat"), Some(80))
    );
    // Maglev over three equal backends: each within 1% of a third of the ring.
    let imbalance = one["hash_imbalance"].as_f64().expect("imbalance");
    assert!((1.0..1.01).contains(&imbalance), "imbalance {imbalance}");
    let e = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips/nope",
        "/v1/vips/{vip}",
        None,
        StatusCode::NOT_FOUND,
    );
    assert_eq!(e["field"], "vip");
    let e = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips/nope/backends",
        "/v1/vips/{vip}/backends",
        None,
        StatusCode::NOT_FOUND,
    );
    assert_eq!(e["field"], "vip");
    let o = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips/dr4-out/outbound",
        "/v1/vips/{vip}/outbound",
        None,
        StatusCode::OK,
    );
    assert_eq!(o["range"], "40000-40999");
    assert_eq!(o["backends"][0]["ports"], "40000-40499");
    assert_eq!(o["backends"][1]["ports"], "40500-40999");
    // A VIP without an outbound range.
    let e = api.call(
        &mut chk,
        Method::GET,
        "/v1/vips/nat4-tcp/outbound",
        "/v1/vips/{vip}/outbound",
        None,
        StatusCode::NOT_FOUND,
    );
    assert!(
        e["error"]
            .as_str()
            .is_some_and(|m| m.contains("no outbound range")),
        "{e}"
    );
    let backends = wait_for("every backend up", Duration::from_secs(20), POLL, || {
        let b = api.call(
            &mut chk,
            Method::GET,
            "/v1/vips/nat4-tcp/backends",
            "/v1/vips/{vip}/backends",
            None,
            StatusCode::OK,
        );
        b.as_array()?
            .iter()
            .all(|x| x["health"] == "up")
            .then_some(b)
    });
    let ids: Vec<&str> = backends
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|b| b["id"].as_str())
        .collect();
    assert_eq!(ids, ["10.0.0.21:8080", "10.0.0.22:8080", "10.0.0.23:8080"]);

    // Traffic shows up per VIP and backend.
    let vip = SocketAddr::new(LabMode::Nat.vip(false), 80);
    let served = lab
        .from_client(move || {
            (0..30)
                .filter(|_| http_get(vip, "/whoami", Duration::from_secs(3)).is_ok())
                .count()
        })
        .expect("client");
    assert_eq!(served, 30, "requests through the VIP:\n{}", log_text());
    let one = wait_for("VIP counters", Duration::from_secs(5), POLL, || {
        let v = api.call(
            &mut chk,
            Method::GET,
            "/v1/vips/nat4-tcp",
            "/v1/vips/{vip}",
            None,
            StatusCode::OK,
        );
        (v["new_flows"].as_u64()? >= 30).then_some(v)
    });
    assert!(one["packets"].as_u64().unwrap_or(0) >= 30 * 5, "{one}");

    // Writes: drain, weight, and their errors.
    let before = api.0.call(|c| c.status()).expect("status").config_version;
    let c = api.call(
        &mut chk,
        Method::POST,
        "/v1/vips/nat4-tcp/backends/10.0.0.21%3A8080/drain",
        "/v1/vips/{vip}/backends/{backend}/{action}",
        None,
        StatusCode::OK,
    );
    assert_eq!(c["synced"], true, "{c}");
    assert!(c["version"].as_u64().unwrap_or(0) > before, "{c}");
    let b = api.0.call(|c| c.backends("nat4-tcp")).expect("backends");
    assert_eq!(
        (b[0].state.as_str(), b[0].state_overridden),
        ("drain", true)
    );
    assert!(!b[0].eligible && b[0].ring_share == 0.0, "{:?}", b[0]);
    // New flows avoid the drained backend.
    let names = lab
        .from_client(move || {
            (0..30)
                .filter_map(|_| http_get(vip, "/whoami", Duration::from_secs(3)).ok())
                .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
                .collect::<Vec<_>>()
        })
        .expect("client");
    assert_eq!(names.len(), 30);
    assert!(
        !names.iter().any(|n| n == "be1"),
        "drained be1 got new flows: {names:?}"
    );
    // The address alone names a backend when it is unique in the VIP.
    let c = api.call(
        &mut chk,
        Method::POST,
        "/v1/vips/nat4-tcp/backends/10.0.0.21/undrain",
        "/v1/vips/{vip}/backends/{backend}/{action}",
        None,
        StatusCode::OK,
    );
    assert!(
        c["message"].as_str().unwrap_or("").contains("undrain"),
        "{c}"
    );
    for (path, status, field) in [
        (
            "/v1/vips/nope/backends/10.0.0.21/drain",
            StatusCode::NOT_FOUND,
            "vip",
        ),
        (
            "/v1/vips/nat4-tcp/backends/10.0.0.99/drain",
            StatusCode::NOT_FOUND,
            "backend",
        ),
        (
            "/v1/vips/nat4-tcp/backends/not-an-address/drain",
            StatusCode::BAD_REQUEST,
            "backend",
        ),
        (
            "/v1/vips/nat4-tcp/backends/10.0.0.21/explode",
            StatusCode::NOT_FOUND,
            "action",
        ),
    ] {
        let e = api.call(
            &mut chk,
            Method::POST,
            path,
            "/v1/vips/{vip}/backends/{backend}/{action}",
            None,
            status,
        );
        assert_eq!(e["field"], field, "{path}: {e}");
    }
    let c = api.call(
        &mut chk,
        Method::PUT,
        "/v1/vips/nat4-tcp/backends/10.0.0.22%3A8080/weight",
        "/v1/vips/{vip}/backends/{backend}/weight",
        Some(r#"{"weight": 50}"#),
        StatusCode::OK,
    );
    assert_eq!(c["synced"], true);
    let b = api.0.call(|c| c.backends("nat4-tcp")).expect("backends");
    assert_eq!((b[1].weight, b[1].weight_overridden), (50, true));
    assert!(
        (b[1].ideal_share - 0.2).abs() < 1e-9,
        "50 of 250: {:?}",
        b[1]
    );
    assert!((b[1].ring_share - 0.2).abs() < 0.01, "{:?}", b[1]);
    for (body, field) in [
        ("{", "body"),
        ("[1]", "body"),
        ("{}", "weight"),
        (r#"{"weight": "heavy"}"#, "weight"),
        (r#"{"weight": 70000}"#, "weight"),
        (r#"{"weight": 5, "colour": "red"}"#, "colour"),
    ] {
        let e = api.call(
            &mut chk,
            Method::PUT,
            "/v1/vips/nat4-tcp/backends/10.0.0.22%3A8080/weight",
            "/v1/vips/{vip}/backends/{backend}/weight",
            Some(body),
            StatusCode::BAD_REQUEST,
        );
        assert_eq!(e["field"], field, "{body}: {e}");
    }
    let e = api.call(
        &mut chk,
        Method::PUT,
        "/v1/vips/nat4-tcp/backends/10.0.0.99%3A8080/weight",
        "/v1/vips/{vip}/backends/{backend}/weight",
        Some(r#"{"weight": 5}"#),
        StatusCode::NOT_FOUND,
    );
    assert_eq!(e["field"], "backend");
    // No BGP in this lab: withdraw and announce are refused, and say why.
    for action in ["withdraw", "announce"] {
        let e = api.call(
            &mut chk,
            Method::POST,
            &format!("/v1/vips/nat4-tcp/{action}"),
            &format!("/v1/vips/{{vip}}/{action}"),
            None,
            StatusCode::CONFLICT,
        );
        assert!(e["error"].as_str().unwrap_or("").contains("BGP"), "{e}");
        let e = api.call(
            &mut chk,
            Method::POST,
            &format!("/v1/vips/nope/{action}"),
            &format!("/v1/vips/{{vip}}/{action}"),
            None,
            StatusCode::NOT_FOUND,
        );
        assert_eq!(e["field"], "vip");
    }

    // Reload: a broken file is rejected whole with every error; a good one runs, and the
    // operator's weight survives it.
    let running = api.0.call(|c| c.status()).expect("status").config_version;
    let good = std::fs::read_to_string(lab.config_path()).expect("config");
    let broken = good
        .replace("port = 8080", "port = 0")
        .replace("interval = \"500ms\"", "interval = \"soon\"");
    lab.write_config(&broken).expect("write");
    let e = api.call(
        &mut chk,
        Method::POST,
        "/v1/reload",
        "/v1/reload",
        None,
        StatusCode::UNPROCESSABLE_ENTITY,
    );
    let errors = e["errors"].as_array().map(Vec::len).unwrap_or(0);
    assert!(errors >= 3, "every error comes back: {e}");
    assert!(
        e["errors"].to_string().contains("interval"),
        "errors name their keys: {e}"
    );
    let now = api.0.call(|c| c.status()).expect("status").config_version;
    assert_eq!(now, running, "a rejected reload changes nothing");
    lab.write_config(&good).expect("write");
    let c = api.call(
        &mut chk,
        Method::POST,
        "/v1/reload",
        "/v1/reload",
        None,
        StatusCode::OK,
    );
    assert!(c["version"].as_u64().unwrap_or(0) > running, "{c}");
    let b = api.0.call(|c| c.backends("nat4-tcp")).expect("backends");
    assert_eq!(b[1].weight, 50, "the API's weight outlives a reload");

    // Events: commits, operator actions, reloads; `since` filters; bad parameters named.
    let ev = api.call(
        &mut chk,
        Method::GET,
        "/v1/events",
        "/v1/events",
        None,
        StatusCode::OK,
    );
    let ev = ev.as_array().expect("events").clone();
    for kind in ["commit", "operator", "reload", "health"] {
        assert!(
            ev.iter().any(|e| e["kind"] == kind),
            "no {kind} event in {ev:?}"
        );
    }
    assert!(
        ev.iter()
            .any(|e| e["message"].as_str().unwrap_or("").contains("rejected"))
    );
    let last = ev.last().and_then(|e| e["seq"].as_u64()).expect("seq");
    let later = api.call(
        &mut chk,
        Method::GET,
        &format!("/v1/events?since={}", last - 1),
        "/v1/events",
        None,
        StatusCode::OK,
    );
    assert_eq!(later.as_array().map(Vec::len), Some(1));
    for (q, field) in [("since=soon", "since"), ("sinse=3", "sinse")] {
        let e = api.call(
            &mut chk,
            Method::GET,
            &format!("/v1/events?{q}"),
            "/v1/events",
            None,
            StatusCode::BAD_REQUEST,
        );
        assert_eq!(e["field"], field);
    }
    let bgp = api.call(
        &mut chk,
        Method::GET,
        "/v1/bgp",
        "/v1/bgp",
        None,
        StatusCode::OK,
    );
    assert_eq!(bgp["enabled"], false);

    // Wrong methods and unknown routes: JSON errors, no panics.
    for (m, path) in [
        (Method::DELETE, "/v1/status"),
        (Method::GET, "/v1/reload"),
        (Method::POST, "/v1/vips/nat4-tcp/backends/10.0.0.22/weight"),
        (Method::PUT, "/v1/vips"),
    ] {
        let (s, body) = api.raw(m.clone(), path, None);
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{m} {path}");
        let v: Value = serde_json::from_slice(&body).expect("JSON 405");
        assert!(v["error"].is_string());
    }
    let (s, body) = api.raw(Method::GET, "/v2/everything", None);
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(serde_json::from_slice::<Value>(&body).expect("JSON 404")["error"].is_string());

    // A short capture: pcapng with an interface per stage (frames or not); a request out of
    // bounds names its field; an unknown VIP is a 404.
    let (s, body) = api.raw(
        Method::POST,
        "/v1/capture",
        Some(r#"{"vip":"nat4-tcp","count":5,"duration_ms":300,"snaplen":128}"#),
    );
    chk.check("POST", "/v1/capture", s, &body);
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let file = wire::pcapng::read(&body).expect("the capture is pcapng");
    assert_eq!(file.interfaces.len(), 4, "an interface per stage");
    assert!(file.packets.len() <= 5, "at most its count");
    let (s, body) = api.raw(
        Method::POST,
        "/v1/capture",
        Some(r#"{"vip":"nat4-tcp","count":0,"duration_ms":300,"snaplen":128}"#),
    );
    chk.check("POST", "/v1/capture", s, &body);
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).expect("JSON 400")["field"],
        "count"
    );
    let (s, body) = api.raw(
        Method::POST,
        "/v1/capture",
        Some(r#"{"vip":"nope","count":5,"duration_ms":300,"snaplen":128}"#),
    );
    chk.check("POST", "/v1/capture", s, &body);
    assert_eq!(s, StatusCode::NOT_FOUND);

    // The document itself, and metrics.
    let (s, body) = api.raw(Method::GET, "/openapi.json", None);
    assert_eq!(s, StatusCode::OK);
    chk.check("GET", "/openapi.json", s, &body);
    assert_eq!(String::from_utf8_lossy(&body), DOC);
    let (s, body) = api.raw(Method::GET, "/metrics", None);
    assert_eq!(s, StatusCode::OK);
    chk.check("GET", "/metrics", s, &body);
    let samples = parse_metrics(&String::from_utf8_lossy(&body));
    assert!(sample(&samples, "sluice_vip_packets_total{vip=\"nat4-tcp\"}") >= 150.0);
    assert!(sample(&samples, "sluice_vip_new_flows_total{vip=\"nat4-tcp\"}") >= 60.0);
    assert_eq!(
        sample(
            &samples,
            "sluice_backend_healthy{backend=\"10.0.0.21:8080\",vip=\"nat4-tcp\"}"
        ),
        1.0
    );
    assert_eq!(
        sample(
            &samples,
            "sluice_backend_weight{backend=\"10.0.0.22:8080\",vip=\"nat4-tcp\"}"
        ),
        50.0
    );
    let imb = sample(
        &samples,
        "sluice_vip_hash_imbalance_ratio{vip=\"nat4-tcp\"}",
    );
    assert!((1.0..1.02).contains(&imb), "imbalance {imb}");
    assert!(sample(&samples, "sluice_config_version{}") >= 4.0);
    assert_eq!(sample(&samples, "sluice_workers_unsynced{}"), 0.0);
    assert!(sample(&samples, "sluice_config_reloads_rejected_total{}") >= 1.0);
    assert!(sample(&samples, "sluice_api_errors_total{}") >= 10.0);
    assert!(
        samples
            .iter()
            .any(|l| l.starts_with("counter sluice_dropped_packets_total{reason=")),
        "drops by reason"
    );

    // Every documented operation was exercised with a success status (withdraw and
    // announce need BGP: `withdraw_and_announce_with_a_router` covers them; /v1/fleet needs
    // a fleet: tests/fleet.rs reads it from every member).
    let doc: Value = serde_json::from_str(DOC).expect("json");
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        if path.ends_with("/withdraw") || path.ends_with("/announce") || path == "/v1/fleet" {
            continue;
        }
        for m in ops.as_object().expect("ops").keys() {
            let hit = chk
                .seen
                .iter()
                .any(|(sm, sp, st)| sm.eq_ignore_ascii_case(m) && sp == path && *st < 300);
            assert!(
                hit,
                "{m} {path} is documented but the test never got a 2xx from it"
            );
        }
    }

    // sluice ctl over the same socket.
    let Said {
        code,
        stdout: out,
        stderr: err,
    } = lab::sluice!().ctl(&socket, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lab-lb1") && out.contains("workers run it"),
        "{out}"
    );
    let Said {
        code, stdout: out, ..
    } = lab::sluice!().ctl(&socket, &["vips"]);
    assert_eq!(code, 0);
    let row = format!("{}:80/tcp", LabMode::Nat.vip(false));
    assert!(
        out.starts_with("VIP")
            && out
                .lines()
                .any(|l| l.starts_with("nat4-tcp") && l.contains(&row)),
        "{out}"
    );
    let Said {
        code, stdout: out, ..
    } = lab::sluice!().ctl(&socket, &["backends", "nat4-tcp"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("10.0.0.22:8080") && out.contains("50*"),
        "{out}"
    );
    let Said {
        code,
        stdout: out,
        stderr: err,
    } = lab::sluice!().ctl(&socket, &["drain", "nat4-tcp", "10.0.0.23:8080"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("running on every worker"), "{out}");
    let Said {
        code, stdout: out, ..
    } = lab::sluice!().ctl(&socket, &["--json", "backends", "nat4-tcp"]);
    assert_eq!(code, 0);
    let parsed: Vec<api::Backend> = serde_json::from_str(&out).expect("--json parses");
    assert_eq!(parsed[2].state, "drain");
    let Said {
        code, stderr: err, ..
    } = lab::sluice!().ctl(&socket, &["weight", "nat4-tcp", "10.0.0.99:8080", "3"]);
    assert_eq!(code, 1, "an API error exits 1");
    assert!(err.contains("no backend"), "{err}");
    let Said {
        code, stderr: err, ..
    } = lab::sluice!().ctl(Path::new("/nonexistent/api.sock"), &["status"]);
    assert_eq!(code, 2, "an unreachable appliance exits 2");
    assert!(err.contains("cannot reach"), "{err}");
    let Said {
        code, stdout: out, ..
    } = lab::sluice!().ctl(&socket, &["events"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("operator: drain 10.0.0.23:8080 of VIP nat4-tcp"),
        "{out}"
    );
    // The client's helper agrees with the raw route.
    let c = api
        .0
        .call(|c| c.backend_action("nat4-tcp", "10.0.0.23:8080", BackendAction::Undrain))
        .expect("undrain");
    assert!(c.synced);

    readme_examples_work(&socket);

    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
    assert!(!socket.exists(), "the socket is removed on exit");
}

/// Runs the manual's API examples (docs/manual/operate.md), with the lab's socket, VIP and backends substituted for
/// the example config's: each must exit 0, and each curl must print JSON (or metrics).
fn readme_examples_work(socket: &Path) {
    lab::netns::require_program("curl", "curl");
    let readme = include_str!("../docs/manual/operate.md");
    let start = readme
        .find("<!-- api-examples")
        .expect("api-examples marker in docs/manual/operate.md");
    let end = readme[start..]
        .find("<!-- /api-examples -->")
        .expect("end marker")
        + start;
    let bin = lab::sluice!();
    let sock = socket.display().to_string();
    let mut ran = 0;
    for line in readme[start..end].lines() {
        let line = line.split(" # ").next().unwrap_or("").trim();
        if !(line.starts_with("sluice ctl") || line.starts_with("curl ")) {
            continue;
        }
        let cmd = line
            .replace(
                "sluice ctl",
                &format!("{} ctl --socket {sock}", bin.path().display()),
            )
            .replace("/run/sluice/api.sock", &sock)
            .replace(" web ", " nat4-tcp ")
            .replace("/web/", "/nat4-tcp/")
            .replace("backends web", "backends nat4-tcp")
            .replace("10.1.0.11", "10.0.0.21")
            .replace("10.1.0.12", "10.0.0.22");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .expect("sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && !stdout.trim().is_empty(),
            "manual example failed: {line}\n(ran: {cmd})\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if line.starts_with("curl ") && !line.ends_with("/metrics") {
            let v: Value = serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("{line}: not JSON ({e}): {stdout}"));
            assert!(v.get("error").is_none(), "{line}: {v}");
        }
        ran += 1;
    }
    assert!(ran >= 14, "only {ran} manual examples found");
}

#[test]
fn withdraw_and_announce_with_a_router() {
    lab::netns::require_root();
    lab::netns::require_program("bird", "bird2");
    lab::netns::require_program("birdc", "bird2");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        appliances: Some(1),
        bgp: Some(true),
        ..LabOptions::default()
    });
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    let log_text = || file_text(&log);
    let vip = LabMode::Nat.vip(false);
    let routed = |lab: &Lab| lab.next_hops(vip).map(|h| !h.is_empty()).unwrap_or(false);
    wait_for(
        "the router to learn the VIP",
        Duration::from_secs(30),
        POLL,
        || routed(&lab).then_some(()),
    );
    let socket = lab.api_socket_at(0);
    let api = Api::new(&socket);
    let mut chk = Checker::new();
    let bgp = wait_for(
        "an Established session",
        Duration::from_secs(10),
        POLL,
        || {
            let b = api.call(
                &mut chk,
                Method::GET,
                "/v1/bgp",
                "/v1/bgp",
                None,
                StatusCode::OK,
            );
            (b["peers"][0]["state"] == "Established").then_some(b)
        },
    );
    assert!(
        bgp["announced"].to_string().contains(&format!("{vip}/32")),
        "{bgp}"
    );
    let c = api.call(
        &mut chk,
        Method::POST,
        "/v1/vips/nat4-tcp/withdraw",
        "/v1/vips/{vip}/withdraw",
        None,
        StatusCode::OK,
    );
    assert!(
        c["message"].as_str().unwrap_or("").contains("withdraw"),
        "{c}"
    );
    // nat4-udp shares the address and still wants it: the address stays announced.
    std::thread::sleep(Duration::from_secs(1));
    assert!(routed(&lab), "a VIP on the same address still serves");
    api.call(
        &mut chk,
        Method::POST,
        "/v1/vips/nat4-udp/withdraw",
        "/v1/vips/{vip}/withdraw",
        None,
        StatusCode::OK,
    );
    wait_for(
        "the router to drop the VIP",
        Duration::from_secs(10),
        POLL,
        || (!routed(&lab)).then_some(()),
    );
    let v = api.0.call(|c| c.vip("nat4-tcp")).expect("vip");
    assert!(v.withdrawn_by_operator && !v.announced, "{v:?}");
    let Said {
        code,
        stdout: out,
        stderr: err,
    } = lab::sluice!().ctl(&socket, &["vips"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("withdrawn (operator)"), "{out}");
    for name in ["nat4-tcp", "nat4-udp"] {
        api.call(
            &mut chk,
            Method::POST,
            &format!("/v1/vips/{name}/announce"),
            "/v1/vips/{vip}/announce",
            None,
            StatusCode::OK,
        );
    }
    wait_for(
        "the router to learn the VIP again",
        Duration::from_secs(10),
        POLL,
        || routed(&lab).then_some(()),
    );
    let ev = api.0.call(|c| c.events(0)).expect("events");
    assert!(
        ev.iter()
            .any(|e| e.kind == "bgp" && e.message.contains("Established")),
        "BGP session event: {ev:?}"
    );
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}

#[test]
fn tcp_listener_serves_tls_wants_the_token_and_metrics_listener_serves_metrics_only() {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    lab::netns::require_root();
    lab::netns::require_program("curl", "curl");
    let mut lab = lab::testing::build(LabOptions {
        modes: vec![LabMode::Nat],
        health_checks: false,
        ..LabOptions::default()
    });
    let token = "0123456789abcdef-lab-token";
    // The API's certificate: self-signed for 127.0.0.1, its key root's alone.
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).expect("cert");
    let (cert_file, key_file) = (lab.dir.join("api.pem"), lab.dir.join("api.key"));
    std::fs::write(&cert_file, cert.cert.pem()).expect("cert");
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).expect("key");
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).expect("chmod key");
    let pin: String = sha2::Sha256::digest(cert.cert.der())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let tls = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert_file.display(),
        key_file.display()
    );
    let (cfg, token_file) = lab.config_with_listeners(token, &tls);
    lab.write_config(&cfg).expect("write");
    let log = lab.start_appliance(lab::sluice!().path()).expect("start");
    let log_text = || file_text(&log);
    // curl inside the appliance's namespace: the listeners are on its loopback.
    let curl = |args: &[&str]| -> (String, String) {
        // Through sh so a refused connection (curl exits 7, code 000) is an answer too.
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        let out = lab
            .lb
            .try_sh(&format!(
                "curl -s -o /dev/stderr -w '%{{http_code}}' {}; true",
                quoted.join(" ")
            ))
            .expect("curl");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let ca = cert_file.to_string_lossy().into_owned();
    let (code, body) = wait_for("the TCP API", Duration::from_secs(20), POLL, || {
        let r = curl(&["--cacert", &ca, "https://127.0.0.1:9400/v1/status"]);
        (r.0 != "000").then_some(r)
    });
    assert_eq!(code, "401", "no token: {body}\n{}", log_text());
    let v: Value = serde_json::from_str(&body).expect("JSON 401");
    assert_eq!(v["field"], "Authorization");
    let (code, _) = curl(&[
        "--cacert",
        &ca,
        "-H",
        "Authorization: Bearer wrong-token-wrong-token",
        "https://127.0.0.1:9400/v1/status",
    ]);
    assert_eq!(code, "401", "wrong token");
    let auth = format!("Authorization: Bearer {token}");
    let (code, body) = curl(&[
        "--cacert",
        &ca,
        "-H",
        &auth,
        "https://127.0.0.1:9400/v1/status",
    ]);
    assert_eq!(code, "200", "{body}");
    let s: api::Status = serde_json::from_str(&body).expect("status");
    assert_eq!(s.appliance, "lab-lb1");
    // Nothing in clear text: plain HTTP to the TLS port gets no HTTP answer.
    let (code, _) = curl(&["-H", &auth, "http://127.0.0.1:9400/v1/status"]);
    assert_eq!(code, "000", "plain HTTP answered");
    // sluice ctl over TLS: by the CA file, and by the certificate's pin.
    let token_arg = token_file.to_string_lossy().into_owned();
    for trust in [["--ca-file", ca.as_str()], ["--pin-sha256", pin.as_str()]] {
        let out = lab
            .lb
            .try_run(&[
                &lab::sluice!().path().to_string_lossy(),
                "ctl",
                "--url",
                "https://127.0.0.1:9400",
                "--token-file",
                &token_arg,
                trust[0],
                trust[1],
                "vips",
            ])
            .expect("sluice ctl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("nat4-tcp"),
            "{trust:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A certificate it does not trust: refused with a TLS error.
    let e = lab
        .lb
        .try_run(&[
            &lab::sluice!().path().to_string_lossy(),
            "ctl",
            "--url",
            "127.0.0.1:9400",
            "--token-file",
            &token_arg,
            "--pin-sha256",
            &"00".repeat(32),
            "status",
        ])
        .expect_err("a wrong pin is refused");
    assert!(
        e.to_string().contains("TLS with the appliance failed"),
        "{e}"
    );
    let (code, body) = curl(&["http://127.0.0.1:9300/metrics"]);
    assert_eq!(code, "200");
    let samples = parse_metrics(&body);
    assert!(sample(&samples, "sluice_config_version{}") >= 1.0);
    assert!(
        sample(
            &samples,
            "sluice_api_connections_unauthorized_total{listener=\"tcp\"}"
        ) >= 4.0,
        "two 401s, plain HTTP and the wrong pin are counted"
    );
    let (code, _) = curl(&["http://127.0.0.1:9300/v1/status"]);
    assert_eq!(code, "404", "the metrics listener serves metrics only");
    assert!(lab.stop_appliance(), "clean exit:\n{}", log_text());
}
