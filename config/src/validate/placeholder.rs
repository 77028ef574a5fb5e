//! Placeholders that `sluice import` writes for facts only the appliance knows (its name,
//! interfaces, BGP): any string value `"<fill in: WHAT>"` is an error that says what to
//! fill in, and replaces the other errors at the same key (a placeholder AS number is
//! also "not an integer", which would only confuse).

use config::{Map, Value, ValueKind};

use crate::error::ConfigErrors;
use crate::reader::element_path;

/// What every placeholder starts with (`crate::import::keepalived::PLACEHOLDER`).
const PREFIX: &str = "<fill in: ";

/// Replaces the errors at each placeholder's key by one that says what to fill in.
pub(super) fn placeholders(root: &Map<String, Value>, errs: &mut ConfigErrors) {
    // Most files have none: look before building every key path.
    if !any(root) {
        return;
    }
    let mut found = Vec::new();
    walk("", root, &mut found);
    let keys: std::collections::HashSet<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    errs.0.retain(|e| !keys.contains(e.key.as_str()));
    for (key, what) in found {
        errs.push(
            key,
            format!("placeholder left by `sluice import`: fill in {what}"),
        );
    }
}

/// Whether any string in `map` (at any depth) is a placeholder.
fn any(map: &Map<String, Value>) -> bool {
    fn value(v: &Value) -> bool {
        match &v.kind {
            ValueKind::String(s) => s.starts_with(PREFIX),
            ValueKind::Table(t) => any(t),
            ValueKind::Array(items) => items.iter().any(value),
            _ => false,
        }
    }
    map.values().any(value)
}

fn key(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_string()
    } else {
        format!("{prefix}.{k}")
    }
}

/// Collects (key path as the validators spell it, what to fill in).
fn walk(prefix: &str, map: &Map<String, Value>, found: &mut Vec<(String, String)>) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for k in keys {
        let path = key(prefix, k);
        match &map[k].kind {
            ValueKind::String(s) => {
                if let Some(what) = what(s) {
                    found.push((path, what));
                }
            }
            ValueKind::Table(t) => walk(&path, t, found),
            ValueKind::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    match &item.kind {
                        ValueKind::String(s) => {
                            if let Some(what) = what(s) {
                                found.push((format!("{path}[{i}]"), what));
                            }
                        }
                        ValueKind::Table(t) => walk(&element_path(prefix, k, i, t), t, found),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

fn what(s: &str) -> Option<String> {
    let rest = s.strip_prefix(PREFIX)?;
    Some(rest.strip_suffix('>').unwrap_or(rest).to_string())
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn placeholders_name_what_to_fill_in_and_hide_the_type_errors() {
        let text = r#"
[appliance]
name = "<fill in: this appliance's name>"
interfaces = ["<fill in: datapath interface, e.g. eth0>"]
[bgp]
asn = "<fill in: this appliance's AS number>"
router_id = "10.0.0.1"
[[bgp.peer]]
address = "<fill in: the router's address>"
asn = 65000
[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
[[vip.backend]]
address = "10.1.0.11"
"#;
        let errs = Config::from_toml_str(text).expect_err("placeholders are errors");
        let keys: Vec<&str> = errs.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "appliance.interfaces[0]",
                "appliance.name",
                "bgp.asn",
                "bgp.peer[0].address"
            ],
            "{errs}"
        );
        assert_eq!(
            errs.find("bgp.asn").map(|e| e.message.as_str()),
            Some("placeholder left by `sluice import`: fill in this appliance's AS number")
        );
    }
}
