//! Where `sluice ctl` and `sluice console` find the appliance's API: the unix socket, or the
//! TCP API (`--url`) with its bearer token and TLS (`https://`, the default: the CA file,
//! a certificate pin, or the system's CAs; `http://` only for `[api] plain_tcp = true`).

use std::path::PathBuf;

use sluice::config;

/// Where the appliance's API is.
#[derive(clap::Args, Clone)]
pub struct ApiArgs {
    /// The API's unix socket.
    #[arg(long, global = true, default_value = config::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// The TCP API (`[api] listen`) instead of the socket: https://HOST:PORT (or HOST:PORT;
    /// http:// only when the appliance serves plain TCP); needs --token-file.
    #[arg(long, global = true, requires = "token_file")]
    url: Option<String>,
    /// File holding the bearer token for --url.
    #[arg(long, global = true)]
    token_file: Option<PathBuf>,
    /// The CA certificates (PEM) the appliance's certificate chains to (else the system's).
    #[arg(long, global = true, conflicts_with = "pin_sha256")]
    ca_file: Option<PathBuf>,
    /// The SHA-256 of the appliance's certificate (64 hex digits, of its DER form:
    /// `openssl x509 -in cert.pem -outform der | sha256sum`): that certificate and no other.
    #[arg(long, global = true)]
    pin_sha256: Option<String>,
}

/// `--url` and its options cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiArgsError {
    #[error("--token-file {}: {source}", .path.display())]
    Token {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--pin-sha256 {0:?}: not 64 hex digits")]
    Pin(String),
    #[error(
        "--url {0:?}: plain http:// carries no certificate to check; drop --ca-file and --pin-sha256"
    )]
    PlainWithTls(String),
}

impl ApiArgs {
    pub fn endpoint(&self) -> Result<api::Endpoint, ApiArgsError> {
        let Some(url) = &self.url else {
            return Ok(api::Endpoint::Unix(self.socket.clone()));
        };
        let path = self.token_file.clone().unwrap_or_default();
        let token = std::fs::read_to_string(&path)
            .map_err(|source| ApiArgsError::Token { path, source })?
            .trim()
            .to_string();
        let lower = url.to_ascii_lowercase();
        let (plain, rest) = if lower.starts_with("http://") {
            (true, &url[7..])
        } else if lower.starts_with("https://") {
            (false, &url[8..])
        } else {
            (false, url.as_str())
        };
        let addr = rest.trim_end_matches('/').to_string();
        if plain {
            if self.ca_file.is_some() || self.pin_sha256.is_some() {
                return Err(ApiArgsError::PlainWithTls(url.clone()));
            }
            return Ok(api::Endpoint::Tcp {
                addr,
                token,
                tls: None,
            });
        }
        let trust = match (&self.ca_file, &self.pin_sha256) {
            (_, Some(pin)) => api::Trust::Pin(
                api::tls::parse_pin(pin).ok_or_else(|| ApiArgsError::Pin(pin.clone()))?,
            ),
            (Some(ca), None) => api::Trust::Ca(ca.clone()),
            (None, None) => api::Trust::System,
        };
        Ok(api::Endpoint::Tcp {
            tls: Some(api::Tls {
                server_name: host(&addr),
                trust,
            }),
            addr,
            token,
        })
    }
}

/// The host of `HOST:PORT` or `[V6]:PORT`, for the certificate's name.
fn host(addr: &str) -> String {
    if let Some(v6) = addr.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6).to_string();
    }
    addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str, ca: bool, pin: Option<&str>, token: &std::path::Path) -> ApiArgs {
        ApiArgs {
            socket: "/run/sluice/api.sock".into(),
            url: Some(url.into()),
            token_file: Some(token.into()),
            ca_file: ca.then(|| "/etc/sluice/ca.pem".into()),
            pin_sha256: pin.map(str::to_string),
        }
    }

    #[test]
    fn urls_are_tls_unless_they_say_http() {
        let token = std::env::temp_dir().join(format!("ctl-token-{}", std::process::id()));
        std::fs::write(&token, "0123456789abcdef\n").expect("token");
        let e = args("10.0.0.1:9400", true, None, &token)
            .endpoint()
            .expect("tls");
        let api::Endpoint::Tcp {
            addr,
            token: t,
            tls,
        } = e
        else {
            panic!("tcp");
        };
        assert_eq!(
            (addr.as_str(), t.as_str()),
            ("10.0.0.1:9400", "0123456789abcdef")
        );
        let tls = tls.expect("TLS by default");
        assert_eq!(tls.server_name, "10.0.0.1");
        assert_eq!(tls.trust, api::Trust::Ca("/etc/sluice/ca.pem".into()));
        let e = args(
            "https://[2001:db8::1]:9400/",
            false,
            Some(&"ab".repeat(32)),
            &token,
        )
        .endpoint()
        .expect("pin");
        let api::Endpoint::Tcp { addr, tls, .. } = e else {
            panic!("tcp");
        };
        assert_eq!(addr, "[2001:db8::1]:9400");
        let tls = tls.expect("tls");
        assert_eq!(tls.server_name, "2001:db8::1");
        assert_eq!(tls.trust, api::Trust::Pin([0xab; 32]));
        let e = args("http://lb1:9400", false, None, &token)
            .endpoint()
            .expect("plain");
        assert!(matches!(e, api::Endpoint::Tcp { tls: None, .. }), "{e:?}");
        assert!(
            args("http://lb1:9400", true, None, &token)
                .endpoint()
                .is_err()
        );
        assert!(
            args("lb1:9400", false, Some("xyz"), &token)
                .endpoint()
                .is_err()
        );
        let _ = std::fs::remove_file(&token);
    }
}
