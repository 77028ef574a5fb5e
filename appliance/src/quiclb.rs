//! `sluice quic-lb config` and the connection-ID half of `sluice trace --cid`: what a VIP's
//! QUIC servers must be configured with (config ID, lengths, key, each one's server ID), and
//! where a given connection ID goes, both from the same config and code the datapath uses
//! (`config::quic` for the server IDs, `lb::quic` to decode).

use std::fmt;
use std::net::SocketAddr;

use crate::config::quic::{Encoding, hex_octets};
use crate::config::{Config, ServerId};
use crate::lb::quic::{Route, VipQuic};
use crate::lb::tables::Tables;
use crate::trace::TraceReport;

/// Why a QUIC-LB answer could not be given.
#[derive(Debug, thiserror::Error)]
pub enum QuicLbError {
    /// No VIP has that name.
    #[error("no vip named {0:?} in the configuration")]
    NoVip(String),
    /// The VIP routes by 5-tuple.
    #[error(
        "vip {0:?} has no [vip.quic_lb]: add one (see the README, \"QUIC connection-ID routing\")"
    )]
    NotQuic(String),
    /// Two backends share a server ID.
    #[error("vip {vip:?}: {why}")]
    Clash {
        /// VIP name.
        vip: String,
        /// The clash and its fix.
        why: String,
    },
    /// `--cid` is not hex.
    #[error(
        "cannot read connection ID {0:?}: write its octets in hex (for example 4a627206ce0102030405)"
    )]
    BadCid(String),
}

/// One backend's server configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The backend.
    pub backend: SocketAddr,
    /// Its server ID.
    pub server_id: ServerId,
    /// Whether the operator set it (`quic_server_id`) rather than Sluice deriving it.
    pub set: bool,
}

/// What `sluice quic-lb config --vip NAME` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VipServers {
    /// VIP name.
    pub vip: String,
    /// `config_id`.
    pub config_id: u8,
    /// The encoding the parameters select.
    pub encoding: Encoding,
    /// `server_id_len`.
    pub server_id_len: u8,
    /// `nonce_len`.
    pub nonce_len: u8,
    /// The key in hex, for the encrypted encodings.
    pub key: Option<String>,
    /// Each backend's.
    pub servers: Vec<ServerConfig>,
}

/// The server configuration of every backend of `vip`.
pub fn server_config(cfg: &Config, vip: &str) -> Result<VipServers, QuicLbError> {
    let v = cfg
        .vip(vip)
        .ok_or_else(|| QuicLbError::NoVip(vip.to_string()))?;
    let q = v
        .quic_lb
        .as_ref()
        .ok_or_else(|| QuicLbError::NotQuic(vip.to_string()))?;
    let ids = q
        .server_ids(v.backends.iter().map(|b| (b.address, b.port)))
        .map_err(|c| QuicLbError::Clash {
            vip: vip.to_string(),
            why: c.to_string(),
        })?;
    let servers = v
        .backends
        .iter()
        .zip(ids)
        .map(|(b, server_id)| ServerConfig {
            backend: SocketAddr::new(b.address, b.port),
            server_id,
            set: q
                .assigned
                .iter()
                .any(|(a, p, _)| *a == b.address && *p == b.port),
        })
        .collect();
    Ok(VipServers {
        vip: v.name.clone(),
        config_id: q.config_id,
        encoding: q.encoding(),
        server_id_len: q.server_id_len,
        nonce_len: q.nonce_len,
        key: q
            .key
            .map(|k| k.iter().map(|b| format!("{b:02x}")).collect()),
        servers,
    })
}

impl fmt::Display for VipServers {
    /// A comment block, then one line per backend of `key=value` words a server's start-up
    /// script can read (`config_id server_id server_id_len nonce_len encoding [key]`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cid = 1 + self.server_id_len + self.nonce_len;
        writeln!(
            f,
            "# vip {}: QUIC-LB config id {}, {} encoding; connection IDs of {cid} octets",
            self.vip,
            self.config_id,
            self.encoding.name()
        )?;
        writeln!(
            f,
            "# first octet: config id in its top 3 bits; then server ID ({} octets) and nonce \
             ({} octets){}",
            self.server_id_len,
            self.nonce_len,
            if self.key.is_some() {
                ", encrypted with the key"
            } else {
                " in clear"
            }
        )?;
        for s in &self.servers {
            write!(
                f,
                "backend={} config_id={} server_id={} server_id_len={} nonce_len={} encoding={}",
                s.backend,
                self.config_id,
                s.server_id,
                self.server_id_len,
                self.nonce_len,
                self.encoding.name()
            )?;
            if let Some(k) = &self.key {
                write!(f, " key={k}")?;
            }
            writeln!(f, " source={}", if s.set { "set" } else { "derived" })?;
        }
        Ok(())
    }
}

/// Where the datagram of `report`'s flow goes when its DCID is `cid` (hex): the backend
/// its server ID names, or the flow's own answer as the fallback, with the reason.
pub fn trace_cid(cfg: &Config, report: &mut TraceReport, cid: &str) -> Result<(), QuicLbError> {
    let octets = hex_octets(cid).ok_or_else(|| QuicLbError::BadCid(cid.to_string()))?;
    let tables = Tables::build(cfg, &|_, _| true, 0).map_err(|e| QuicLbError::Clash {
        vip: report.vip.clone(),
        why: e.to_string(),
    })?;
    let Some(slot) = tables.vips.iter().position(|v| v.name == report.vip) else {
        return Err(QuicLbError::NoVip(report.vip.clone()));
    };
    let v = &tables.vips[slot];
    let q: &VipQuic = v
        .quic
        .as_deref()
        .ok_or_else(|| QuicLbError::NotQuic(report.vip.clone()))?;
    // As a short-header datagram carries it: the first byte, then the DCID.
    let mut datagram = vec![0x40];
    datagram.extend_from_slice(&octets);
    let why = match q.route(&datagram) {
        Route::Backend { id, slot } if tables.backends[slot as usize].keeps_flows() => {
            let i = slot as usize - v.backends.start as usize;
            if report.chosen != Some(i) {
                // Its egress lines were the 5-tuple's backend's: not shown rather than wrong.
                report.egress.clear();
            }
            report.chosen = Some(i);
            format!(
                "QUIC-LB: connection ID {cid} carries server ID {id}, backend {}'s",
                report.backends[i]
            )
        }
        Route::Backend { id, slot } => format!(
            "QUIC-LB: server ID {id} is backend {}'s, which keeps no flows (disabled); \
             fallback: {}",
            tables.backends[slot as usize].ip(),
            report.reason
        ),
        Route::UnknownServer(id) => format!(
            "QUIC-LB: server ID {id} is no backend's (removed, or a client's own DCID); \
             fallback: {}",
            report.reason
        ),
        Route::UnknownConfig => format!(
            "QUIC-LB: config id {} is not the VIP's ({}); fallback: {}",
            octets.first().map_or(0, |b| b >> 5),
            q.codec.config_id,
            report.reason
        ),
        Route::Undecodable => format!(
            "QUIC-LB: {} octets are shorter than the VIP's connection IDs ({}); fallback: {}",
            octets.len(),
            q.codec.cid_len(),
            report.reason
        ),
    };
    report.reason = why;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
[appliance]
name = "lb1"
interfaces = ["eth0"]

[[vip]]
name = "h3"
address = "192.0.2.10"
port = 443
protocol = "udp"
mode = "dr"
[vip.quic_lb]
config_id = 1
key = "8f95f09245765f80256934e50c66207f"

[[vip.backend]]
address = "10.1.0.11"
quic_server_id = "0a0b"

[[vip.backend]]
address = "10.1.0.12"

[[vip.backend]]
address = "10.1.0.13"
state = "drain"
"#;

    #[test]
    fn prints_every_backends_server_configuration() {
        let cfg = testkit::unit::parse(TOML);
        let s = server_config(&cfg, "h3").unwrap();
        let text = s.to_string();
        assert!(
            text.contains(
                "backend=10.1.0.11:443 config_id=1 server_id=0a0b server_id_len=2 nonce_len=6 \
                 encoding=four-pass key=8f95f09245765f80256934e50c66207f source=set"
            ),
            "{text}"
        );
        let derived = crate::config::quic::derive("10.1.0.12".parse().unwrap(), 443, 2);
        assert!(text.contains(&format!("server_id={derived} ")), "{text}");
        assert!(matches!(
            server_config(&cfg, "nope"),
            Err(QuicLbError::NoVip(_))
        ));
    }

    #[test]
    fn trace_follows_a_cid_and_says_why() {
        let cfg = testkit::unit::parse(TOML);
        let s = server_config(&cfg, "h3").unwrap();
        let codec = crate::lb::quic::Codec::new(cfg.vips[0].quic_lb.as_ref().unwrap());
        let flow = "udp 198.51.100.7:5000 -> 192.0.2.10:443";
        for (i, srv) in s.servers.iter().enumerate() {
            let cid: String = codec
                .encode(srv.server_id.as_bytes(), &[9; 6])
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let mut r = crate::trace::trace(&cfg, flow, None).unwrap();
            trace_cid(&cfg, &mut r, &cid).unwrap();
            assert_eq!(r.chosen, Some(i), "{}", r.reason);
            assert!(
                r.reason.contains(&srv.server_id.to_string()),
                "{}",
                r.reason
            );
        }
        let mut r = crate::trace::trace(&cfg, flow, None).unwrap();
        let normal = r.chosen;
        trace_cid(&cfg, &mut r, "e1020304050607080900").unwrap();
        assert_eq!(r.chosen, normal);
        assert!(
            r.reason.contains("config id 7 is not the VIP's (1)"),
            "{}",
            r.reason
        );
        assert!(trace_cid(&cfg, &mut r, "xyz").is_err());
    }
}
