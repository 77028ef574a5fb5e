//! Where an update bundle comes from: a file or block device on the appliance, or an HTTP(S)
//! URL. A download is streamed straight into the slot, never stored whole: the state
//! partition may be smaller than a bundle, and every member is checked against the
//! manifest's sha256 before anything becomes bootable anyway. The whole bundle's sha256
//! (`--sha256`) is checked before a download writes its boot entry; a file's before a byte
//! is written.

use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::ImageError;

/// An update bundle's origin, as the operator named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file or block device (`/dev/disk/by-id/...`) holding the tar.
    File(PathBuf),
    /// An `http://` or `https://` URL (https checked against the system's CA certificates).
    Url(String),
}

impl Source {
    /// `http://` and `https://` name a URL, anything else a path.
    pub fn parse(s: &str) -> Source {
        let lower = s.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            Source::Url(s.to_string())
        } else {
            Source::File(PathBuf::from(s))
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Url(u) => f.write_str(u),
        }
    }
}

/// Starts the download of `url`: an error for anything but a 200 answer.
pub fn get(url: &str) -> Result<Summing<Box<dyn Read + Send>>, ImageError> {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .http_status_as_error(false)
        .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let fetch = |reason: String| ImageError::Fetch {
        url: url.to_string(),
        reason,
    };
    let resp = agent.get(url).call().map_err(|e| fetch(e.to_string()))?;
    let status = resp.status();
    if status != ureq::http::StatusCode::OK {
        return Err(fetch(format!("the server answered {status}")));
    }
    let body = resp.into_body().into_with_config().reader();
    Ok(Summing::new(Box::new(body)))
}

/// Passes bytes through and keeps the sha256 of all of them.
pub struct Summing<R> {
    r: R,
    hash: Sha256,
}

/// The most a bundle may carry after its tar end marker (tar pads archives to 10 KiB
/// records; anything far beyond is not a bundle of ours).
const TRAILER_MAX: u64 = 1 << 20;

impl<R: Read> Summing<R> {
    fn new(r: R) -> Summing<R> {
        Summing {
            r,
            hash: Sha256::new(),
        }
    }

    /// Reads what is left (the archive's padding) and returns the sha256 of everything.
    pub fn finish(mut self) -> Result<String, ImageError> {
        let rest = io::copy(&mut (&mut self).take(TRAILER_MAX + 1), &mut io::sink())
            .map_err(ImageError::Read)?;
        if rest > TRAILER_MAX {
            return Err(ImageError::NotABundle(format!(
                "more than {TRAILER_MAX} bytes follow the archive's end"
            )));
        }
        Ok(super::bundle::hex(&self.hash.finalize()))
    }
}

impl<R: Read> Read for Summing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.r.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}
