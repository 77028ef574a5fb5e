//! Numbers, durations, times and addresses as `sluice ctl` and the console print them: short
//! enough for an 80-column serial console, the unit in the column header where there is one.
//! One spelling per kind of value, so an operator reads the same `5m 03s` or `4.56M` in both.

use crate::model::Vip;

/// `950`, `12.3k`, `4.56M`, `1.20G`; `-` when there is no value (yet).
pub fn si(v: Option<f64>) -> String {
    let Some(v) = v else {
        return "-".to_string();
    };
    let (v, unit) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        return format!("{v:.0}");
    };
    if v >= 100.0 {
        format!("{v:.0}{unit}")
    } else if v >= 10.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

/// Bits per second with the unit: `1.20 Gb/s`.
pub fn bits(v: Option<f64>) -> String {
    match v {
        None => "-".to_string(),
        Some(b) if b < 1e3 => format!("{b:.0} b/s"),
        Some(_) => {
            let s = si(v);
            let (num, unit) = s.split_at(s.len() - 1);
            format!("{num} {unit}b/s")
        }
    }
}

/// `1,234,567`.
pub fn grouped(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `3d 04h`, `5h 03m`, `12m 09s`, `42s`.
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h:02}h")
    } else if h > 0 {
        format!("{h}h {m:02}m")
    } else if m > 0 {
        format!("{m}m {s:02}s")
    } else {
        format!("{s}s")
    }
}

/// Unix milliseconds as `HH:MM:SS` (UTC).
pub fn clock(time_ms: u64) -> String {
    let s = time_ms / 1000 % 86400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// A share (0..1) as a percentage: `12.5%`.
pub fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// A share (0..1) as a percentage without the sign, one decimal below 100: `12.5`, `100`.
pub fn share(v: f64) -> String {
    if v >= 0.9995 {
        "100".to_string()
    } else {
        format!("{:.1}", v * 100.0)
    }
}

/// Bytes in binary units: `512B`, `2.0KiB`, `3.4MiB`, `1.2GiB`.
pub fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n}B"),
        1024..1_048_576 => format!("{:.1}KiB", n as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1}MiB", n as f64 / 1_048_576.0),
        _ => format!("{:.1}GiB", n as f64 / 1_073_741_824.0),
    }
}

/// A ratio such as a VIP's hash imbalance: `1.02`; `-` when there is none.
pub fn ratio(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{x:.2}"),
        None => "-".to_string(),
    }
}

/// A VIP's forwarding mode with its tunnel encapsulation: `nat`, `tunnel/gue`.
pub fn mode(v: &Vip) -> String {
    match &v.encap {
        Some(e) => format!("{}/{e}", v.mode),
        None => v.mode.clone(),
    }
}

/// An address and port: `192.0.2.10:80`, `[2001:db8::1]:80`; port 0 (every port) is `*`.
pub fn addr_port(address: &str, port: u16) -> String {
    let port = if port == 0 {
        "*".to_string()
    } else {
        port.to_string()
    };
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// A VIP's address, port and protocol: `192.0.2.10:80/tcp`, `[2001:db8::10]:443/tcp`,
/// `192.0.2.10:*/udp`; a tenant VIP's with its VNI, `10.0.0.5:80/tcp vni 100` (tenants may
/// reuse each other's addresses, the VNI tells them apart).
pub fn vip_addr(v: &Vip) -> String {
    let mut s = format!("{}/{}", addr_port(&v.address, v.port), v.protocol);
    if let Some(vni) = v.tenant_vni {
        s.push_str(&format!(" vni {vni}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(si(None), "-");
        assert_eq!(si(Some(950.4)), "950");
        assert_eq!(si(Some(12_345.0)), "12.3k");
        assert_eq!(si(Some(4_560_000.0)), "4.56M");
        assert_eq!(si(Some(250_000_000.0)), "250M");
        assert_eq!(bits(Some(1.2e9)), "1.20 Gb/s");
        assert_eq!(bits(Some(800.0)), "800 b/s");
        assert_eq!(grouped(1_048_576), "1,048,576");
        assert_eq!(grouped(999), "999");
        assert_eq!(percent(0.125), "12.5%");
    }

    #[test]
    fn durations_and_clock() {
        assert_eq!(duration(42), "42s");
        assert_eq!(duration(729), "12m 09s");
        assert_eq!(duration(5 * 3600 + 180), "5h 03m");
        assert_eq!(duration(3 * 86400 + 4 * 3600 + 59), "3d 04h");
        assert_eq!(clock(1_764_460_800_000 + 3_723_000), "01:02:03");
    }

    #[test]
    fn shares_ratios_and_bytes() {
        assert_eq!(share(0.5017), "50.2");
        assert_eq!(share(1.0), "100");
        assert_eq!(ratio(Some(1.0234)), "1.02");
        assert_eq!(ratio(None), "-");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(2048), "2.0KiB");
        assert_eq!(bytes(3 * 1_048_576 + 400_000), "3.4MiB");
    }

    #[test]
    fn addresses() {
        assert_eq!(addr_port("192.0.2.10", 80), "192.0.2.10:80");
        assert_eq!(addr_port("2001:db8::1", 80), "[2001:db8::1]:80");
        assert_eq!(addr_port("192.0.2.10", 0), "192.0.2.10:*");
        let mut v: Vip = serde_json::from_value(serde_json::json!({
            "name": "t", "address": "10.0.0.5", "port": 80, "protocol": "tcp",
            "mode": "tunnel", "encap": "vxlan", "scheduler": "maglev", "hash": "5-tuple",
            "announced": false, "withdrawn_by_operator": false, "backends_eligible": 1,
            "backends_healthy": 1, "backends_total": 1, "packets": 0, "bytes": 0,
            "new_flows": 0, "active_flows": 0, "hash_imbalance": null
        }))
        .expect("a VIP document");
        assert_eq!(vip_addr(&v), "10.0.0.5:80/tcp");
        assert!(
            !serde_json::to_string(&v).unwrap().contains("tenant_vni"),
            "omitted for an underlay VIP"
        );
        v.tenant_vni = Some(100);
        assert_eq!(vip_addr(&v), "10.0.0.5:80/tcp vni 100");
        assert!(
            serde_json::to_string(&v)
                .unwrap()
                .contains("\"tenant_vni\":100")
        );
    }
}
