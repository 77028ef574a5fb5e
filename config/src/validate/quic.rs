//! `[vip.quic_lb]` and a backend's `quic_server_id` (issue 48): the QUIC-LB parameters
//! (config rotation codepoint, server ID and nonce lengths within the draft's limits, the
//! AES key of the encrypted encodings) and the server IDs, each backend's own and none
//! shared (`crate::quic` derives the ones not set).

use std::net::IpAddr;

use crate::error::ConfigErrors;
use crate::model::{Backend, Protocol};
use crate::quic::{
    FAILOVER_CONFIG_ID, MAX_PLAINTEXT_LEN, MAX_SERVER_ID_LEN, MIN_NONCE_LEN, QuicLb, ServerId,
    hex_octets,
};
use crate::reader::Table;

/// `server_id_len` when not set: 65,536 IDs, few enough collisions among derived ones for
/// pools of a few dozen (a clash is reported, never resolved silently).
const DEFAULT_SERVER_ID_LEN: i64 = 2;
/// `nonce_len` when not set: with the default server ID, an 8-octet plaintext block and a
/// 9-octet connection ID.
const DEFAULT_NONCE_LEN: i64 = 6;

/// Reads `[vip.quic_lb]` (its server IDs come later, from the backends: [`finish`]).
pub(super) fn quic_lb(
    t: &mut Table<'_>,
    protocol: Protocol,
    one_packet: bool,
    errs: &mut ConfigErrors,
) -> Option<QuicLb> {
    let mut q = t.table("quic_lb", errs)?;
    let at = q.path.clone();
    let config_id = match q.int("config_id", 0..=i64::from(FAILOVER_CONFIG_ID), errs) {
        Some(7) => {
            errs.push(
                q.key("config_id"),
                format!(
                    "{FAILOVER_CONFIG_ID} is reserved for servers without a configuration: use \
                     0 to 6"
                ),
            );
            None
        }
        other => other,
    };
    let sid = q
        .int("server_id_len", 1..=i64::from(MAX_SERVER_ID_LEN), errs)
        .unwrap_or(DEFAULT_SERVER_ID_LEN) as u8;
    let nonce = q
        .int("nonce_len", i64::from(MIN_NONCE_LEN)..=18, errs)
        .unwrap_or(DEFAULT_NONCE_LEN) as u8;
    let key = key(&mut q, errs);
    q.finish(errs);
    let mut ok = true;
    if sid + nonce > MAX_PLAINTEXT_LEN {
        errs.push(
            at.clone(),
            format!(
                "server_id_len {sid} + nonce_len {nonce} is over {MAX_PLAINTEXT_LEN} octets (a \
                 QUIC connection ID holds 20, one of them the config octet): shorten one"
            ),
        );
        ok = false;
    }
    if protocol != Protocol::Udp {
        errs.push(
            at.clone(),
            "needs protocol = \"udp\": QUIC runs over UDP".to_string(),
        );
        ok = false;
    }
    if one_packet {
        errs.push(
            at,
            "cannot work with udp_one_packet: a handshake whose connection ID does not route \
             must stay on the backend first chosen, which needs a connection-table entry",
        );
        ok = false;
    }
    ok.then_some(QuicLb {
        config_id: config_id.unwrap_or(0) as u8,
        server_id_len: sid,
        nonce_len: nonce,
        key,
        assigned: Vec::new(),
    })
}

/// `key`: 16 octets in hex.
fn key(q: &mut Table<'_>, errs: &mut ConfigErrors) -> Option<[u8; 16]> {
    let text = q.string("key", errs)?;
    match hex_octets(&text).and_then(|v| <[u8; 16]>::try_from(v).ok()) {
        Some(k) => Some(k),
        None => {
            errs.push(
                q.key("key"),
                "is not an AES-128 key: write 32 hex digits (16 octets), for example the \
                 output of `openssl rand -hex 16`",
            );
            None
        }
    }
}

/// A backend's `quic_server_id` (hex, `server_id_len` octets); refused without `quic_lb`.
pub(super) fn backend_server_id(
    b: &mut Table<'_>,
    quic: Option<&QuicLb>,
    errs: &mut ConfigErrors,
) -> Option<ServerId> {
    let Some(len) = quic.map(|q| q.server_id_len) else {
        b.reject("quic_server_id", "without [vip.quic_lb]", errs);
        return None;
    };
    let text = b.string("quic_server_id", errs)?;
    match ServerId::from_hex(&text) {
        Some(id) if id.as_bytes().len() == usize::from(len) => Some(id),
        _ => {
            errs.push(
                b.key("quic_server_id"),
                format!(
                    "{text:?} is not a server ID of quic_lb.server_id_len {len} octets: write \
                     {} hex digits",
                    2 * len
                ),
            );
            None
        }
    }
}

/// The VIP's QUIC-LB configuration with the backends' set IDs, or `None` (and an error at
/// `path`) when two backends would share a server ID.
pub(super) fn finish(
    path: &str,
    mut q: QuicLb,
    backends: &[Backend],
    set: Vec<(IpAddr, u16, ServerId)>,
    errs: &mut ConfigErrors,
) -> Option<QuicLb> {
    q.assigned = set;
    match q.server_ids(backends.iter().map(|b| (b.address, b.port))) {
        Ok(_) => Some(q),
        Err(clash) => {
            errs.push(path, clash.to_string());
            None
        }
    }
}
