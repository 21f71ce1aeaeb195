//! How a clone source is reached over TLS: the `sslmode` its DSN asks for (libpq's names and
//! meanings) or the default for its host, the roots a verifying mode trusts, the rustls
//! connector the snapshot connects with, and the same roots as PEM for `pg_dump`'s libpq, so
//! both connections to production trust exactly the same certificates.
//!
//! The default is `verify-full` for a host that is not loopback (libpq's `prefer` would fall
//! back to cleartext and check no certificate: it protects against no one on the path), and
//! libpq's `prefer` on loopback and Unix sockets, where there is no path to protect. A weaker
//! mode the operator asks for off loopback is kept, with a warning ([`SourceTls::warning`])
//! that `sources add`, `sources ls`, `doctor` and the panel show.
//!
//! Nothing here is secret: the mode, a CA file's path and whether the host is loopback are
//! all an operator is shown of a DSN.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, danger::DangerousClientConfigBuilder};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`, as the snapshot and `pg_dump` both apply it. `allow` is taken as `prefer`
/// (both check nothing; `prefer` at least tries TLS first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub const ALLOWED: &'static str = "disable, allow, prefer, require, verify-ca, verify-full";

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "disable" => Self::Disable,
            "allow" | "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// Whether the server's certificate is checked against roots.
    pub fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyFull)
    }

    /// What tokio-postgres is told: whether TLS is tried, and whether it is required (the
    /// certificate checks are the connector's).
    pub(crate) fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            Self::Disable => Driver::Disable,
            Self::Prefer => Driver::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => Driver::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a verifying mode trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The certificates of the machine sandboxd runs on (`sslrootcert=system`, or none named).
    System,
    /// The PEM file named by `sslrootcert=/path` (the CA that signed production's certificate).
    File(PathBuf),
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How one source is reached: its TLS mode, whether the DSN named it, what it trusts, and
/// whether every address it names is loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTls {
    pub mode: SslMode,
    /// The DSN named the mode; false: the default for its host.
    pub explicit: bool,
    /// What the mode trusts; None when it checks no certificate.
    pub roots: Option<Roots>,
    /// Every address the DSN names is loopback or a Unix socket.
    pub loopback: bool,
}

impl SourceTls {
    /// The posture of a DSN whose `sslmode` is `mode` and `sslrootcert` is `root_cert` (either
    /// absent), for a host that is loopback or not. Follows libpq: `require` with a CA file
    /// checks the chain like `verify-ca`, and the system roots go only with `verify-full`.
    pub fn new(
        mode: Option<&str>,
        root_cert: Option<&str>,
        loopback: bool,
    ) -> Result<Self, String> {
        let explicit = mode.is_some();
        let mut mode = match mode {
            Some(text) => SslMode::parse(text)
                .ok_or_else(|| format!("its sslmode is not one of {}", SslMode::ALLOWED))?,
            None if loopback => SslMode::Prefer,
            None => SslMode::VerifyFull,
        };
        let named = match root_cert {
            None | Some("system") => None,
            Some(path) if Path::new(path).is_absolute() => Some(PathBuf::from(path)),
            Some(_) => {
                return Err(
                    "its sslrootcert must be an absolute path to a PEM file, or \
                            `system`"
                        .into(),
                );
            }
        };
        if mode == SslMode::Require && named.is_some() {
            mode = SslMode::VerifyCa;
        }
        let roots = mode.verifies().then_some(match named {
            Some(path) => Roots::File(path),
            None => Roots::System,
        });
        if mode == SslMode::VerifyCa && roots == Some(Roots::System) {
            return Err(
                "sslmode=verify-ca with the system roots would accept a certificate \
                        any public CA issued for any name: use verify-full, or name the CA \
                        that signed the server's certificate with sslrootcert=/path"
                    .into(),
            );
        }
        Ok(Self {
            mode,
            explicit,
            roots,
            loopback,
        })
    }

    /// One line for an operator: the mode, what it checks, against what, and whether it is
    /// the default.
    pub fn summary(&self) -> String {
        let what = match (self.mode, &self.roots) {
            (SslMode::Disable, _) => "no TLS".to_owned(),
            (SslMode::Prefer, _) => "TLS when the server offers it, no certificate check".into(),
            (SslMode::Require, _) => "TLS, no certificate check".to_owned(),
            (SslMode::VerifyCa, roots) => format!(
                "TLS, the certificate's chain checked against {} (not its host name)",
                roots_text(roots.as_ref())
            ),
            (SslMode::VerifyFull, roots) => format!(
                "TLS, the certificate's chain and host name checked against {}",
                roots_text(roots.as_ref())
            ),
        };
        let default = match (self.explicit, self.loopback) {
            (true, _) => "",
            (false, true) => " (the default for a loopback host)",
            (false, false) => " (the default for a host that is not loopback)",
        };
        format!("{}: {what}{default}", self.mode)
    }

    /// Short, for an error: `sslmode=verify-full, roots /etc/ca.pem`.
    pub fn short(&self) -> String {
        match &self.roots {
            Some(roots) => format!("sslmode={}, roots {roots}", self.mode),
            None => format!("sslmode={}", self.mode),
        }
    }

    /// Why this source's connection protects nothing on the network, when its host is not
    /// loopback and its mode checks no certificate; None otherwise.
    pub fn warning(&self) -> Option<String> {
        if self.loopback || self.mode.verifies() {
            return None;
        }
        let risk = match self.mode {
            SslMode::Disable => {
                "production's statistics and sample values cross the network in cleartext"
            }
            SslMode::Prefer => {
                "the connection falls back to cleartext and checks no certificate, so anyone \
                 on the path can read it or pose as production"
            }
            _ => {
                "the connection is encrypted but the server's certificate is not checked, so \
                 anyone on the path can pose as production"
            }
        };
        Some(format!(
            "sslmode={} on a host that is not loopback: {risk}; use sslmode=verify-full with \
             sslrootcert=<the PEM file of the CA that signed the server's certificate>",
            self.mode
        ))
    }

    /// The trusted certificates, read now (a CA file is read at each snapshot, so a renewed
    /// one is picked up). None for a mode that checks none.
    pub(crate) fn load_roots(&self) -> Result<Option<Vec<CertificateDer<'static>>>, String> {
        let Some(roots) = &self.roots else {
            return Ok(None);
        };
        let certs = match roots {
            Roots::File(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|e| format!("reading sslrootcert {}: {e}", path.display()))?;
                let certs = CertificateDer::pem_slice_iter(&bytes)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("sslrootcert {} is not PEM: {e}", path.display()))?;
                if certs.is_empty() {
                    return Err(format!(
                        "sslrootcert {} holds no PEM certificate",
                        path.display()
                    ));
                }
                certs
            }
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                if found.certs.is_empty() {
                    return Err("this machine has no system root certificates; name the CA \
                                that signed the server's certificate with sslrootcert=/path"
                        .into());
                }
                found.certs
            }
        };
        Ok(Some(certs))
    }

    /// The same roots as one PEM text, for `pg_dump`'s `sslrootcert`; None for a mode that
    /// checks none.
    pub(crate) fn roots_pem(&self) -> Result<Option<String>, String> {
        Ok(self.load_roots()?.map(|certs| {
            let blocks: Vec<pem::Pem> = certs
                .iter()
                .map(|cert| pem::Pem::new("CERTIFICATE", cert.to_vec()))
                .collect();
            pem::encode_many(&blocks)
        }))
    }

    /// The connector the snapshot connects with: rustls, checking what the mode checks.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder: DangerousClientConfigBuilder =
            ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("setting up TLS: {e}"))?
                .dangerous();
        let verifier: Arc<dyn ServerCertVerifier> = match self.load_roots()? {
            None => Arc::new(NoCertificateCheck(provider)),
            Some(certs) => {
                let mut store = RootCertStore::empty();
                let (added, _) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!(
                        "no usable root certificate in {}",
                        roots_text(self.roots.as_ref())
                    ));
                }
                let full = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
                    .build()
                    .map_err(|e| format!("setting up TLS verification: {e}"))?;
                if self.mode == SslMode::VerifyCa {
                    Arc::new(ChainOnly(full))
                } else {
                    full
                }
            }
        };
        let config = builder
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

fn roots_text(roots: Option<&Roots>) -> String {
    match roots {
        Some(Roots::File(path)) => format!("the CA in {}", path.display()),
        Some(Roots::System) | None => "this machine's system roots".to_owned(),
    }
}

/// `prefer` and `require`: encrypted, the certificate taken as shown (libpq checks none in
/// these modes either), the handshake's signatures still checked.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked against the roots, the host name is not. The WebPKI
/// verifier checks the chain before the name, so a name error means the chain passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
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
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
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
    fn the_default_verifies_off_loopback_and_prefers_on_it() {
        let remote = SourceTls::new(None, None, false).expect("valid");
        assert_eq!(remote.mode, SslMode::VerifyFull);
        assert_eq!(remote.roots, Some(Roots::System));
        assert!(!remote.explicit);
        assert_eq!(remote.warning(), None);
        assert!(
            remote.summary().contains("not loopback"),
            "{}",
            remote.summary()
        );
        let local = SourceTls::new(None, None, true).expect("valid");
        assert_eq!(local.mode, SslMode::Prefer);
        assert_eq!(local.roots, None);
        assert_eq!(local.warning(), None, "loopback has no path to protect");
    }

    #[test]
    fn weak_modes_off_loopback_are_kept_with_a_warning() {
        for mode in ["disable", "allow", "prefer", "require"] {
            let tls = SourceTls::new(Some(mode), None, false).expect("valid");
            assert!(!tls.mode.verifies());
            let warning = tls.warning().expect("a warning");
            assert!(warning.contains("not loopback"), "{warning}");
            assert!(warning.contains("verify-full"), "{warning}");
            assert_eq!(
                SourceTls::new(Some(mode), None, true)
                    .expect("valid")
                    .warning(),
                None
            );
        }
        assert_eq!(
            SourceTls::new(Some("allow"), None, false)
                .expect("valid")
                .mode,
            SslMode::Prefer
        );
    }

    #[test]
    fn a_ca_file_follows_libpq() {
        let ca = SourceTls::new(Some("verify-full"), Some("/etc/ca.pem"), false).expect("valid");
        assert_eq!(ca.roots, Some(Roots::File("/etc/ca.pem".into())));
        assert_eq!(ca.short(), "sslmode=verify-full, roots /etc/ca.pem");
        assert!(ca.summary().contains("/etc/ca.pem"), "{}", ca.summary());
        // libpq: `require` with a root file checks the chain.
        let require = SourceTls::new(Some("require"), Some("/etc/ca.pem"), false).expect("valid");
        assert_eq!(require.mode, SslMode::VerifyCa);
        assert_eq!(require.warning(), None);
        let default = SourceTls::new(None, Some("/etc/ca.pem"), false).expect("valid");
        assert_eq!(default.mode, SslMode::VerifyFull);
        let system = SourceTls::new(Some("verify-full"), Some("system"), false).expect("valid");
        assert_eq!(system.roots, Some(Roots::System));
        for (mode, root, names) in [
            (Some("verify-ca"), Some("system"), "verify-full"),
            (Some("verify-ca"), None, "verify-full"),
            (Some("verify-full"), Some("ca.pem"), "absolute"),
            (Some("verify-everything"), None, "verify-ca, verify-full"),
        ] {
            let err = SourceTls::new(mode, root, false).expect_err(names);
            assert!(err.contains(names), "{err}");
        }
    }

    #[test]
    fn a_ca_file_that_holds_no_certificate_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").expect("write");
        let path = path.to_str().expect("utf-8").to_owned();
        let tls = SourceTls::new(Some("verify-full"), Some(&path), false).expect("valid");
        let err = tls.load_roots().expect_err("no certificate");
        assert!(err.contains(&path), "{err}");
        let missing =
            SourceTls::new(Some("verify-ca"), Some("/nonexistent/ca.pem"), false).expect("valid");
        let err = missing.connector().err().expect("unreadable");
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        // A mode that checks nothing reads no file at all.
        assert_eq!(
            SourceTls::new(Some("require"), None, false)
                .expect("valid")
                .roots_pem(),
            Ok(None)
        );
    }
}
