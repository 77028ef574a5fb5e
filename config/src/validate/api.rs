//! `[api]`: where the local API and the Prometheus exposition listen, and what a TCP
//! listener needs: a bearer token, and TLS (`tls_cert`, `tls_key`) unless the file says
//! `plain_tcp = true`, so the token crosses the network in clear text only when asked to.

use std::path::PathBuf;

use crate::error::ConfigErrors;
use crate::model::{Api, ApiTls};
use crate::reader::Table;

/// Default Prometheus exposition address.
pub const DEFAULT_METRICS: &str = "127.0.0.1:9300";
/// Default API socket.
pub const DEFAULT_SOCKET: &str = "/run/sluice/api.sock";

pub(super) fn default_api() -> Api {
    Api {
        socket: PathBuf::from(DEFAULT_SOCKET),
        metrics: DEFAULT_METRICS.parse().ok(),
        listen: None,
        token_file: None,
        tls: None,
    }
}

pub(super) fn api(mut t: Table<'_>, errs: &mut ConfigErrors) -> Option<Api> {
    let d = default_api();
    let socket = match t.string("socket", errs) {
        Some(s) if s.starts_with('/') => PathBuf::from(s),
        Some(s) => {
            errs.push(t.key("socket"), format!("{s:?} is not an absolute path"));
            d.socket
        }
        None => d.socket,
    };
    let metrics = if t.has("metrics") {
        match t.string("metrics", errs).as_deref() {
            // An empty string turns the exposition off.
            Some("") => None,
            Some(_) => t.socket_addr("metrics", errs),
            None => None,
        }
    } else {
        d.metrics
    };
    let listen = t.socket_addr("listen", errs);
    let token_file = t.string("token_file", errs).map(PathBuf::from);
    if listen.is_some() && token_file.is_none() {
        errs.push(
            t.key("token_file"),
            "missing: an API on a TCP address (api.listen) needs a bearer token file",
        );
    }
    let has_listen = t.has("listen");
    let tls = tls(&mut t, has_listen, errs);
    t.finish(errs);
    Some(Api {
        socket,
        metrics,
        listen,
        token_file,
        tls,
    })
}

/// `tls_cert`, `tls_key` and `plain_tcp`: with `listen`, either both files or
/// `plain_tcp = true`; without, none of them.
fn tls(t: &mut Table<'_>, listen: bool, errs: &mut ConfigErrors) -> Option<ApiTls> {
    let cert = t.string("tls_cert", errs).map(PathBuf::from);
    let key = t.string("tls_key", errs).map(PathBuf::from);
    let plain = t.bool("plain_tcp", errs);
    if !listen {
        for k in ["tls_cert", "tls_key", "plain_tcp"] {
            t.reject(k, "without api.listen (it is the TCP listener's)", errs);
        }
        return None;
    }
    match (cert, key, plain == Some(true)) {
        (Some(cert), Some(key), false) => return Some(ApiTls { cert, key }),
        (None, None, true) => {}
        (Some(_), Some(_), true) => errs.push(
            t.key("plain_tcp"),
            "true beside tls_cert and tls_key: the TCP API serves TLS or plain TCP, not both",
        ),
        (Some(_), None, _) => errs.push(
            t.key("tls_key"),
            "missing: tls_cert needs its private key (a PEM file)",
        ),
        (None, Some(_), _) => errs.push(
            t.key("tls_cert"),
            "missing: tls_key needs its certificate chain (a PEM file)",
        ),
        (None, None, false) => errs.push(
            t.key("tls_cert"),
            "missing: the API on a TCP address (api.listen) serves TLS with tls_cert and \
             tls_key (PEM files), so its bearer token never crosses the network in clear \
             text; plain_tcp = true serves it without TLS",
        ),
    }
    None
}
