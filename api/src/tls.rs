//! TLS to the TCP API (`[api] tls_cert`): how a client trusts the appliance's certificate.
//! An appliance usually has a certificate of its own CA or a self-signed one, so besides
//! the system's CAs a client may name the CA file, or pin the one certificate by its
//! SHA-256 (`openssl x509 -in cert.pem -outform der | sha256sum`), which then needs neither
//! a CA nor a name that matches.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// How the appliance's certificate is trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// It chains to the system's CA certificates.
    System,
    /// It chains to the CA certificates in this PEM file.
    Ca(PathBuf),
    /// It is the certificate with this SHA-256 (of its DER form).
    Pin([u8; 32]),
}

/// TLS settings of a TCP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The name (or address) the certificate must be for (not checked with a pin).
    pub server_name: String,
    pub trust: Trust,
}

/// Why TLS to the appliance failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--ca-file {}: {reason} (a PEM file of the CA certificates)", .path.display())]
    Ca { path: PathBuf, reason: String },
    #[error("the system's CA certificates: {0}")]
    System(String),
    #[error("{0:?} is not a name or address a certificate can be for")]
    Name(String),
    #[error(
        "TLS with the appliance failed: {0} (does [api] serve TLS, and do --ca-file or \
         --pin-sha256 name its certificate?)"
    )]
    Handshake(#[source] std::io::Error),
    #[error("TLS settings: {0}")]
    Config(#[source] rustls::Error),
}

/// A pin from its hex form (64 digits, either case, `:` allowed between bytes).
pub fn parse_pin(hex: &str) -> Option<[u8; 32]> {
    let digits: Vec<u8> = hex.bytes().filter(|&b| b != b':').collect();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Tls {
    /// The client side of a handshake with these settings.
    fn config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?;
        let mut cfg = match &self.trust {
            Trust::Pin(pin) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Pinned {
                    pin: *pin,
                    algorithms: provider().signature_verification_algorithms,
                }))
                .with_no_client_auth(),
            Trust::Ca(path) => {
                let bad = |reason: String| TlsError::Ca {
                    path: path.clone(),
                    reason,
                };
                let mut roots = rustls::RootCertStore::empty();
                use rustls::pki_types::pem::PemObject;
                for c in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
                    roots
                        .add(c.map_err(|e| bad(e.to_string()))?)
                        .map_err(|e| bad(e.to_string()))?;
                }
                if roots.is_empty() {
                    return Err(bad("no certificate in it".into()));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            Trust::System => {
                let found = rustls_native_certs::load_native_certs();
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(found.certs);
                if roots.is_empty() {
                    return Err(TlsError::System(format!(
                        "none found ({} errors)",
                        found.errors.len()
                    )));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
        };
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }

    /// The TLS handshake over `tcp`.
    pub(crate) async fn connect(
        &self,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, TlsError> {
        let name = ServerName::try_from(self.server_name.clone())
            .map_err(|_| TlsError::Name(self.server_name.clone()))?;
        tokio_rustls::TlsConnector::from(Arc::new(self.config()?))
            .connect(name, tcp)
            .await
            .map_err(TlsError::Handshake)
    }
}

/// Accepts the one certificate whose SHA-256 is the pin (and checks the handshake's
/// signatures with it as usual).
#[derive(Debug)]
struct Pinned {
    pin: [u8; 32],
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if Sha256::digest(end_entity.as_ref()).as_slice() == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_read_in_either_case_with_or_without_colons() {
        let hex = "00ff".repeat(16);
        let want: Vec<u8> = (0..32).map(|i| if i % 2 == 0 { 0 } else { 0xff }).collect();
        assert_eq!(parse_pin(&hex).map(|p| p.to_vec()), Some(want.clone()));
        assert_eq!(
            parse_pin(&hex.to_uppercase()).map(|p| p.to_vec()),
            Some(want.clone())
        );
        let colons: Vec<String> = want.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(parse_pin(&colons.join(":")).map(|p| p.to_vec()), Some(want));
        assert_eq!(parse_pin("abc"), None);
        assert_eq!(parse_pin(&"zz".repeat(32)), None);
    }
}
