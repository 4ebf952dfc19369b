//! TLS to PostgreSQL (rustls, with the ring provider, as the Redis scope's), as the URL's
//! `sslmode` and `sslrootcert` ask, with libpq's meanings:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | signed by a trusted root (any host name) |
//! | `verify-full` | always | signed by a trusted root, and naming the URL's host |
//!
//! The trusted roots are the PEM certificates of the file `sslrootcert` names, or, without it
//! (or with `sslrootcert=system`), the platform's (what `SSL_CERT_FILE` or `SSL_CERT_DIR` name,
//! else the system's store). Without a check of the certificate (`prefer`, `require`) the
//! connection is encrypted but anyone on the path could pose as the server, as with libpq.
//! Where the server allows it, the password is bound to the TLS channel
//! (SCRAM-SHA-256-PLUS), so a server that is not the one the certificate names never learns it.
//!
//! `sslcert` and `sslkey` (together) name PEM files of a client certificate and its key, which
//! the client presents where the server asks for one (`cert` authentication in `pg_hba.conf`).

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::{Error as PemError, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::{Error, Result};

/// The URL's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The URL's TLS options. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsOptions {
    pub(crate) mode: Mode,
    /// `sslrootcert`: a PEM file of trusted roots; `None` for the platform's.
    pub(crate) root: Option<String>,
    /// `sslcert` and `sslkey`: PEM files of the client's certificate (its chain) and key, sent
    /// where the server asks for one (its `cert` authentication, or `clientcert=`).
    pub(crate) cert: Option<String>,
    pub(crate) key: Option<String>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            mode: Mode::Prefer,
            root: None,
            cert: None,
            key: None,
        }
    }
}

impl TlsOptions {
    /// Takes one URL option if it is a TLS one: whether it was.
    pub(crate) fn take(&mut self, name: &str, value: &str) -> Result<bool> {
        match name {
            "sslmode" => {
                self.mode = match value {
                    "disable" => Mode::Disable,
                    "prefer" => Mode::Prefer,
                    "require" => Mode::Require,
                    "verify-ca" => Mode::VerifyCa,
                    "verify-full" => Mode::VerifyFull,
                    _ => {
                        return Err(Error::InvalidArgument(
                            "sslmode: disable, prefer, require, verify-ca or verify-full",
                        ));
                    }
                }
            }
            "sslrootcert" => {
                if value.is_empty() {
                    return Err(Error::InvalidArgument(
                        "sslrootcert: a PEM file of root certificates, or system",
                    ));
                }
                self.root = (value != "system").then(|| value.to_owned());
            }
            "sslcert" | "sslkey" => {
                if value.is_empty() {
                    return Err(Error::InvalidArgument(
                        "sslcert and sslkey: PEM files of the client's certificate and key",
                    ));
                }
                let slot = if name == "sslcert" {
                    &mut self.cert
                } else {
                    &mut self.key
                };
                *slot = Some(value.to_owned());
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks what one option cannot: `sslcert` and `sslkey` come together.
    pub(crate) fn check(&self) -> Result<()> {
        if self.cert.is_some() != self.key.is_some() {
            return Err(Error::InvalidArgument(
                "sslcert and sslkey go together: the client's certificate and its key",
            ));
        }
        Ok(())
    }

    /// The client's TLS mode: whether it asks the server for TLS, and whether it goes on
    /// without it.
    pub(crate) fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The TLS connector every session of the scope connects with (made once per open: it
    /// reads the roots). `InvalidArgument` for a root file that cannot be read or holds no
    /// certificate.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|_| Error::InvalidArgument("TLS: ring offers no safe protocol version"))?;
        let check = match (self.mode, &self.root) {
            (Mode::Disable | Mode::Prefer, _) | (Mode::Require, None) => Check::Nothing,
            (Mode::Require | Mode::VerifyCa, _) => Check::Chain,
            (Mode::VerifyFull, _) => Check::ChainAndName,
        };
        let builder = if check == Check::Nothing {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(
                    provider.signature_verification_algorithms,
                )))
        } else {
            let roots = Arc::new(self.roots()?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                .build()
                .map_err(|_| Error::InvalidArgument("TLS: the trusted roots cannot be used"))?;
            if check == Check::ChainAndName {
                builder.with_webpki_verifier(webpki)
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(webpki)))
            }
        };
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                    .map_err(|e| {
                        pem_error(
                            e,
                            "sslcert: the file cannot be read",
                            "sslcert: the file is not PEM",
                        )
                    })?;
                if chain.is_empty() {
                    return Err(Error::InvalidArgument(
                        "sslcert: no certificate in the file",
                    ));
                }
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    pem_error(
                        e,
                        "sslkey: the file cannot be read",
                        "sslkey: no private key in the file",
                    )
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|_| {
                    Error::InvalidArgument(
                        "sslkey: not the key of sslcert's certificate, or of a kind TLS cannot use",
                    )
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(MakeRustlsConnect::new(config))
    }

    /// The trusted roots: `sslrootcert`'s, or the platform's.
    fn roots(&self) -> Result<RootCertStore> {
        let mut roots = RootCertStore::empty();
        let certs = match &self.root {
            Some(path) => CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    pem_error(
                        e,
                        "sslrootcert: the file cannot be read",
                        "sslrootcert: the file is not PEM",
                    )
                })?,
            None => rustls_native_certs::load_native_certs().certs,
        };
        roots.add_parsable_certificates(certs);
        if roots.is_empty() {
            return Err(Error::InvalidArgument(if self.root.is_some() {
                "sslrootcert: no certificate in the file"
            } else {
                "sslmode asks for the server's certificate to be checked, and the platform has \
                 no root certificates: name a PEM file of them with sslrootcert"
            }));
        }
        Ok(roots)
    }
}

/// `unreadable` for a file that cannot be read, else `malformed`.
fn pem_error(e: PemError, unreadable: &'static str, malformed: &'static str) -> Error {
    Error::InvalidArgument(if matches!(e, PemError::Io(_)) {
        unreadable
    } else {
        malformed
    })
}

/// What is checked of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// Accepts any certificate (`prefer`, and `require` without roots: libpq's meaning), but still
/// checks that the server holds the key of the certificate it sent, so the channel is
/// encrypted to whoever answered.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain to a trusted root, its validity and its use are checked as
/// `verify-full` checks them; only the host name is not.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // webpki checks the name last, after the chain, the dates and the key usage: a
        // name error means everything else held.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_libpq_values_and_refuse_others() {
        let mut t = TlsOptions::default();
        assert_eq!((t.mode, t.ssl_mode()), (Mode::Prefer, SslMode::Prefer));
        for (value, mode, ssl) in [
            ("disable", Mode::Disable, SslMode::Disable),
            ("prefer", Mode::Prefer, SslMode::Prefer),
            ("require", Mode::Require, SslMode::Require),
            ("verify-ca", Mode::VerifyCa, SslMode::Require),
            ("verify-full", Mode::VerifyFull, SslMode::Require),
        ] {
            assert_eq!(t.take("sslmode", value), Ok(true));
            assert_eq!((t.mode, t.ssl_mode()), (mode, ssl), "{value}");
        }
        for bad in ["allow", "VERIFY-FULL", ""] {
            assert!(
                matches!(t.take("sslmode", bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
        assert_eq!(t.take("sslrootcert", "/etc/ca.pem"), Ok(true));
        assert_eq!(t.root.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(t.take("sslrootcert", "system"), Ok(true));
        assert_eq!(t.root, None);
        assert!(t.take("sslrootcert", "").is_err());
        assert_eq!(t.take("prefix", "x"), Ok(false));
        assert_eq!(t.take("sslcert", "/etc/client.crt"), Ok(true));
        assert!(matches!(t.check(), Err(Error::InvalidArgument(m)) if m.contains("together")));
        assert_eq!(t.take("sslkey", "/etc/client.key"), Ok(true));
        assert_eq!(t.check(), Ok(()));
        assert_eq!(
            (t.cert.as_deref(), t.key.as_deref()),
            (Some("/etc/client.crt"), Some("/etc/client.key"))
        );
        assert!(t.take("sslkey", "").is_err());
    }

    #[test]
    fn a_root_file_that_is_missing_or_empty_is_refused_at_open() {
        let dir = std::env::temp_dir().join(format!("keylock-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        for path in [dir.join("missing.pem"), empty] {
            let t = TlsOptions {
                mode: Mode::VerifyFull,
                root: Some(path.display().to_string()),
                ..TlsOptions::default()
            };
            let err = t.connector().err().expect("refused");
            assert!(
                matches!(&err, Error::InvalidArgument(m) if m.starts_with("sslrootcert")),
                "{err:?}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
        // Without a check, no roots are read.
        for mode in [Mode::Disable, Mode::Prefer, Mode::Require] {
            let t = TlsOptions {
                mode,
                ..TlsOptions::default()
            };
            assert!(t.connector().is_ok(), "{mode:?}");
        }
    }
}
