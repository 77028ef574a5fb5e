//! `[[vip]] syn_proxy`: when the appliance answers a VIP's SYNs itself with a SYN cookie.
//! The proxy shifts the backend's sequence numbers on their way to the client, so it needs
//! a mode that sees both directions of a TCP stream: NAT or FullNAT, protocol "tcp".

use crate::error::ConfigErrors;
use crate::model::{Mode, Protocol, SynProxy};
use crate::reader::Table;

/// `syn_proxy`: "off", "flood" (the default of NAT and FullNAT TCP VIPs: while flood mode is
/// on) or "always"; the other VIPs take only "off", which is also what they get unset. With
/// proxied flows in the XDP flow cache, `sluice bench --cps --syn-proxy` measured the proxied
/// connection rate at the plain one's (median 0.99x), so a flood gets the proxy unasked.
pub(super) fn syn_proxy(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    protocol: Protocol,
    errs: &mut ConfigErrors,
) -> SynProxy {
    let proxied = matches!(mode, Some(Mode::Nat | Mode::FullNat)) && protocol == Protocol::Tcp;
    let Some(sp) = t.choice("syn_proxy", &SynProxy::ALL, errs) else {
        return if proxied {
            SynProxy::Flood
        } else {
            SynProxy::Off
        };
    };
    if sp == SynProxy::Off || proxied {
        return sp;
    }
    let why = if protocol != Protocol::Tcp {
        "protocol \"tcp\": the proxy answers TCP handshakes".to_string()
    } else {
        format!(
            "mode \"nat\" or \"fullnat\": mode {:?} does not see the backend's answers, \
             whose sequence numbers the proxy shifts",
            mode.map_or("?", Mode::name)
        )
    };
    errs.push(t.key("syn_proxy"), format!("{:?} needs {why}", sp.name()));
    SynProxy::Off
}

#[cfg(test)]
mod tests {
    use crate::{Config, SynProxy};

    fn vip(extra: &str) -> String {
        format!(
            "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n[[vip]]\nname = \"web\"\n\
             address = \"192.0.2.10\"\nport = 80\n{extra}\n[[vip.backend]]\naddress = \"10.1.0.11\"\n"
        )
    }

    fn error_at(text: &str, key: &str) -> String {
        let errs = Config::from_toml_str(text).expect_err("invalid");
        errs.find(key)
            .unwrap_or_else(|| panic!("no error at {key:?}: {errs}"))
            .message
            .clone()
    }

    #[test]
    fn nat_and_fullnat_tcp_vips_default_to_flood_and_take_every_setting() {
        let nat = "mode = \"nat\"\n";
        let c = Config::from_toml_str(&vip(nat)).expect("valid");
        assert_eq!(c.vips[0].syn_proxy, SynProxy::Flood);
        for (name, want) in SynProxy::ALL {
            for mode in [nat, "mode = \"fullnat\"\nsnat = [\"10.9.0.1\"]\n"] {
                let text = vip(&format!("{mode}syn_proxy = \"{name}\"\n"));
                let c = Config::from_toml_str(&text).expect("valid");
                assert_eq!(c.vips[0].syn_proxy, want, "{mode}{name}");
            }
        }
    }

    #[test]
    fn other_vips_are_off_and_refuse_the_proxy_naming_why() {
        let c = Config::from_toml_str(&vip("mode = \"dr\"\n")).expect("valid");
        assert_eq!(c.vips[0].syn_proxy, SynProxy::Off);
        let udp = "mode = \"nat\"\nprotocol = \"udp\"\n";
        let c = Config::from_toml_str(&vip(udp)).expect("valid");
        assert_eq!(c.vips[0].syn_proxy, SynProxy::Off);
        let key = "vip \"web\".syn_proxy";
        let m = error_at(&vip("mode = \"dr\"\nsyn_proxy = \"always\"\n"), key);
        assert!(
            m.contains("\"always\" needs mode \"nat\" or \"fullnat\""),
            "{m}"
        );
        let m = error_at(&vip(&format!("{udp}syn_proxy = \"flood\"\n")), key);
        assert!(m.contains("needs protocol \"tcp\""), "{m}");
        let m = error_at(&vip("mode = \"nat\"\nsyn_proxy = \"on\"\n"), key);
        assert!(m.contains("is not one of off, flood, always"), "{m}");
        Config::from_toml_str(&vip(
            "mode = \"tunnel\"\ntunnel = \"ipip\"\nsyn_proxy = \"off\"\n",
        ))
        .expect("valid");
    }
}
