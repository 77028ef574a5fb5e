//! `[[vip]] client_address`: how a FullNAT TCP VIP tells its backends who the client is.
//! Only FullNAT hides the client (the other modes keep its address as the source), and both
//! ways of passing it ride on a TCP stream, so every other VIP refuses the key.

use crate::error::ConfigErrors;
use crate::model::{ClientAddress, Mode, Protocol};
use crate::reader::Table;

/// `client_address`: "none" (default), "proxy-v2" or "toa"; anything but "none" needs mode
/// "fullnat" and protocol "tcp".
pub(super) fn client_address(
    t: &mut Table<'_>,
    mode: Option<Mode>,
    protocol: Protocol,
    errs: &mut ConfigErrors,
) -> ClientAddress {
    let choices = [
        ("none", ClientAddress::None),
        ("proxy-v2", ClientAddress::ProxyV2),
        ("toa", ClientAddress::Toa),
    ];
    let Some(ca) = t.choice("client_address", &choices, errs) else {
        return ClientAddress::None;
    };
    if ca == ClientAddress::None {
        return ca;
    }
    if let Some(m) = mode
        && m != Mode::FullNat
    {
        errs.push(
            t.key("client_address"),
            format!(
                "{:?} needs mode \"fullnat\": mode {:?} keeps the client's address as the \
                 source, the backend sees it already",
                ca.name(),
                m.name()
            ),
        );
        return ClientAddress::None;
    }
    if protocol != Protocol::Tcp {
        errs.push(
            t.key("client_address"),
            format!(
                "{:?} needs protocol \"tcp\": the header and the option ride on a TCP stream",
                ca.name()
            ),
        );
        return ClientAddress::None;
    }
    ca
}

#[cfg(test)]
mod tests {
    use crate::{ClientAddress, Config};

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
    fn fullnat_tcp_vips_take_each_kind_and_default_to_none() {
        let fnat = "mode = \"fullnat\"\nsnat = [\"10.9.0.1\"]\n";
        let c = Config::from_toml_str(&vip(fnat)).expect("valid");
        assert_eq!(c.vips[0].client_address, ClientAddress::None);
        for (name, want) in [
            ("none", ClientAddress::None),
            ("proxy-v2", ClientAddress::ProxyV2),
            ("toa", ClientAddress::Toa),
        ] {
            let text = vip(&format!("{fnat}client_address = \"{name}\"\n"));
            let c = Config::from_toml_str(&text).expect("valid");
            assert_eq!(c.vips[0].client_address, want);
            assert_eq!(want.name(), name);
        }
    }

    #[test]
    fn other_modes_protocols_and_names_are_refused_at_the_key() {
        let key = "vip \"web\".client_address";
        let m = error_at(&vip("client_address = \"proxy-v2\"\n"), key);
        assert!(m.contains("needs mode \"fullnat\""), "{m}");
        let udp = "mode = \"fullnat\"\nsnat = [\"10.9.0.1\"]\nprotocol = \"udp\"\n";
        let m = error_at(&vip(&format!("{udp}client_address = \"toa\"\n")), key);
        assert!(m.contains("needs protocol \"tcp\""), "{m}");
        let m = error_at(&vip("client_address = \"xff\"\n"), key);
        assert!(
            m.contains("\"xff\" is not one of none, proxy-v2, toa"),
            "{m}"
        );
        // "none" is what every VIP has anyway.
        Config::from_toml_str(&vip("mode = \"dr\"\nclient_address = \"none\"\n")).expect("valid");
    }
}
