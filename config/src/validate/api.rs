//! `[api]`: where the local API and the Prometheus exposition listen, and the bearer token
//! a TCP listener needs.

use std::path::PathBuf;

use crate::error::ConfigErrors;
use crate::model::Api;
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
    t.finish(errs);
    Some(Api {
        socket,
        metrics,
        listen,
        token_file,
    })
}
