//! Where an update bundle comes from: a file or block device on the appliance, or an HTTP(S)
//! URL. Either is read once, front to back, through one descriptor: each member is hashed
//! from the bytes written, so what is checked is what is installed, even on a device
//! someone else writes to meanwhile. A download is streamed straight into the slot, never
//! stored whole: the state partition may be smaller than a bundle. The whole bundle's
//! sha256 (`--sha256`) is known at its end and checked before the boot entry is written.
//!
//! A download asked for over https stays on https (a redirect to plain http is refused: a
//! man in the middle could answer it); plain http is allowed, the signature is what
//! vouches for a bundle (see [`super::trust`]). No byte for [`Download::idle`], or a body
//! longer than [`Download::body`], fails the download instead of hanging the update.

use std::fs::File;
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

/// How a download is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// The CA certificates (PEM) an https server's certificate must chain to, instead of
    /// the system's (a mirror with a CA of its own).
    pub ca: Option<PathBuf>,
    /// The connection, and the answer's headers after the request.
    pub connect: Duration,
    /// The longest wait for the next byte of the body.
    pub idle: Duration,
    /// The whole body.
    pub body: Duration,
}

impl Default for Download {
    fn default() -> Download {
        Download {
            ca: None,
            connect: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            body: Duration::from_secs(3600),
        }
    }
}

/// Opens the bundle for one pass: the file, or the download of the URL (an error for
/// anything but a 200 answer).
pub fn open(source: &Source, how: &Download) -> Result<Summing<Box<dyn Read + Send>>, ImageError> {
    match source {
        Source::File(path) => {
            let f = File::open(path).map_err(|source| ImageError::Open {
                path: path.clone(),
                source,
            })?;
            Ok(Summing::new(Box::new(io::BufReader::with_capacity(
                1 << 20,
                f,
            ))))
        }
        Source::Url(url) => get(url, how),
    }
}

/// The certificates an https server's must chain to.
fn roots(how: &Download) -> Result<ureq::tls::RootCerts, ImageError> {
    let Some(path) = &how.ca else {
        return Ok(ureq::tls::RootCerts::PlatformVerifier);
    };
    let bad = |reason: String| ImageError::Ca {
        path: path.clone(),
        reason,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| bad(e.to_string()))? {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(ureq::tls::RootCerts::new_with_certs(&certs))
}

fn get(url: &str, how: &Download) -> Result<Summing<Box<dyn Read + Send>>, ImageError> {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(roots(how)?)
        .build();
    let https = url.to_ascii_lowercase().starts_with("https://");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(tls)
        .https_only(https)
        .timeout_connect(Some(how.connect))
        .timeout_recv_response(Some(how.connect))
        .timeout_per_read(Some(how.idle))
        .timeout_recv_body(Some(how.body))
        .http_status_as_error(false)
        .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let resp = agent.get(url).call().map_err(|e| match e {
        ureq::Error::RequireHttpsOnly(reason) => ImageError::Downgrade {
            url: url.to_string(),
            reason,
        },
        e => ImageError::Fetch {
            url: url.to_string(),
            reason: e.to_string(),
        },
    })?;
    let status = resp.status();
    if status != ureq::http::StatusCode::OK {
        return Err(ImageError::Fetch {
            url: url.to_string(),
            reason: format!("the server answered {status}"),
        });
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
