//! The TLS files a team gives heddle for its remote cache: CA certificates to trust besides the
//! system's (a team's own CA, a self-signed server) and a client certificate with its key, for a
//! server that checks clients' certificates (mTLS: nginx's `ssl_verify_client`, BuildGrid's
//! `tls-client-certs`). The same three variables serve every remote that speaks TLS
//! (`grpcs://`, `webdav+https://`, S3 at an `https://` endpoint); this module reads and checks the
//! files once, and each client library is handed the checked bytes (tonic in `reapi/connect.rs`,
//! reqwest in `http_client.rs`).
//!
//! The files come from the environment only, never from a pipeline, a lock file or a config file
//! a team shares. They are read and checked when the remote is opened, with rustls (on aws-lc,
//! the provider both tonic and reqwest use here), so a wrong path, a file of the wrong kind or a
//! key that is not the certificate's is reported before any request, naming the variable, the
//! file and the reason; otherwise it would surface as a failed handshake on the first call, or
//! as a server's "no certificate" answer. The key's bytes are never printed.

use std::path::PathBuf;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::RemoteError;

/// The environment variable naming a PEM file of CA certificates a TLS remote's certificate may
/// chain to, besides the system's.
pub const CA_FILE_VAR: &str = "HEDDLE_REMOTE_CA_FILE";
/// The environment variable naming the PEM file of the client certificate (and any
/// intermediates after it) shown to a TLS remote that asks for one.
pub const CLIENT_CERT_VAR: &str = "HEDDLE_REMOTE_CLIENT_CERT";
/// The environment variable naming the PEM file of [`CLIENT_CERT_VAR`]'s private key.
pub const CLIENT_KEY_VAR: &str = "HEDDLE_REMOTE_CLIENT_KEY";

/// The TLS files the environment names for one remote: neither, either or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// [`CA_FILE_VAR`]: trusted besides the platform's roots, never instead of them.
    pub extra_ca: Option<PathBuf>,
    pub client: Option<ClientCertFiles>,
}

impl TlsFiles {
    /// [`CA_FILE_VAR`] and the client certificate pair ([`ClientCertFiles::from_env`]) for the
    /// remote named `remote`; an empty value is unset. No file is read here.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<TlsFiles, RemoteError> {
        Ok(TlsFiles {
            extra_ca: env(CA_FILE_VAR).filter(|v| !v.is_empty()).map(Into::into),
            client: ClientCertFiles::from_env(env, remote)?,
        })
    }

    /// The CA file's PEM and its certificates, each checked to be one rustls can take as a
    /// trust anchor; `None` when [`CA_FILE_VAR`] is unset.
    pub fn read_ca(&self, remote: &str) -> Result<Option<CaCerts>, RemoteError> {
        let Some(path) = &self.extra_ca else {
            return Ok(None);
        };
        let bad = |source| RemoteError::TlsCa {
            var: CA_FILE_VAR,
            path: path.clone(),
            remote: remote.to_string(),
            source,
        };
        let pem = std::fs::read(path).map_err(bad)?;
        let der = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(invalid(format!("a PEM block does not parse: {e}"))))?;
        if der.is_empty() {
            return Err(bad(invalid(
                "no PEM certificate in it (a -----BEGIN CERTIFICATE----- line)".to_string(),
            )));
        }
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in der.iter().enumerate() {
            roots.add(cert.clone()).map_err(|e| {
                bad(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    CaRefused {
                        index: i + 1,
                        source: e,
                    },
                ))
            })?;
        }
        Ok(Some(CaCerts { pem, der }))
    }
}

/// Why rustls would not trust the CA file's `index`th certificate (counted from 1).
#[derive(Debug, thiserror::Error)]
#[error("certificate {index} in it is not one rustls can trust")]
struct CaRefused {
    index: usize,
    #[source]
    source: rustls::Error,
}

fn invalid(reason: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, reason)
}

/// The CA file's contents: the PEM as read (tonic takes it whole) and its certificates.
pub struct CaCerts {
    pub pem: Vec<u8>,
    pub der: Vec<CertificateDer<'static>>,
}

/// A client certificate and its key, as PEM files (bazel's `--tls_client_certificate` and
/// `--tls_client_key`). The files are read when the remote is opened, once per run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClientCertFiles {
    /// [`CLIENT_CERT_VAR`] and [`CLIENT_KEY_VAR`], both or neither (an empty value is unset);
    /// one without the other is an error naming the one missing.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<Option<ClientCertFiles>, RemoteError> {
        let var = |name| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let missing = |set: &str, unset: &str| RemoteError::ClientCert {
            remote: remote.to_string(),
            reason: format!("{set} is set but {unset} is not: set both or neither"),
        };
        match (var(CLIENT_CERT_VAR), var(CLIENT_KEY_VAR)) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(ClientCertFiles { cert, key })),
            (Some(_), None) => Err(missing(CLIENT_CERT_VAR, CLIENT_KEY_VAR)),
            (None, Some(_)) => Err(missing(CLIENT_KEY_VAR, CLIENT_CERT_VAR)),
        }
    }

    /// The error for a client certificate set for a remote that would not send it (`grpc://`,
    /// `http://`, an S3 endpoint over http, a directory): whoever set one expects the server
    /// to see it.
    pub fn needs_tls(remote: &str) -> RemoteError {
        RemoteError::ClientCert {
            remote: remote.to_string(),
            reason: format!(
                "{CLIENT_CERT_VAR} and {CLIENT_KEY_VAR} are set but this remote does not use \
                 TLS, so the certificate would not be sent: use https (webdav+https://, an \
                 https:// S3 endpoint) or grpcs://"
            ),
        }
    }

    /// Both files read and checked as a pair: each one a file of that kind of PEM block, and the
    /// key the certificate's (rustls's own check, the one a handshake would make).
    pub fn read(&self, remote: &str) -> Result<ClientIdentity, RemoteError> {
        let bad = |what: &'static str, var: &'static str, path: &PathBuf| {
            let remote = remote.to_string();
            let path = path.clone();
            move |source| RemoteError::TlsClientFile {
                what,
                var,
                path,
                remote,
                source,
            }
        };
        let bad_cert = bad("certificate", CLIENT_CERT_VAR, &self.cert);
        let cert_pem = std::fs::read(&self.cert).map_err(bad_cert.clone())?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad_cert.clone()(invalid(format!("a PEM block does not parse: {e}"))))?;
        if chain.is_empty() {
            return Err(bad_cert(invalid(
                "no PEM certificate in it (a -----BEGIN CERTIFICATE----- line)".to_string(),
            )));
        }
        let bad_key = bad("private key", CLIENT_KEY_VAR, &self.key);
        let key_pem = std::fs::read(&self.key).map_err(bad_key.clone())?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            bad_key(invalid(match e {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "no PEM private key in it (a -----BEGIN ... PRIVATE KEY----- line)".to_string()
                }
                e => format!("a PEM block does not parse: {e}"),
            }))
        })?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|source| {
            RemoteError::TlsClientPair {
                cert: self.cert.clone(),
                key: self.key.clone(),
                remote: remote.to_string(),
                source,
            }
        })?;
        Ok(ClientIdentity { cert_pem, key_pem })
    }
}

/// A client certificate (chain) and its key as PEM, checked as a pair. `Debug` hides the key.
#[derive(Clone)]
pub struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").finish_non_exhaustive()
    }
}

impl ClientIdentity {
    /// The chain and the key in one PEM buffer, as reqwest's `Identity::from_pem` takes them.
    pub fn combined_pem(&self) -> Vec<u8> {
        let mut pem = self.cert_pem.clone();
        if !pem.ends_with(b"\n") {
            pem.push(b'\n');
        }
        pem.extend_from_slice(&self.key_pem);
        pem
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An environment of exactly `vars`, for the `from_env` readers (also REAPI's).
    pub(crate) fn env_of<'a>(
        vars: &'a [(&'a str, &'a str)],
    ) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_client_certificate_is_both_variables_or_neither() {
        let read = |vars: &[(&str, &str)]| ClientCertFiles::from_env(&env_of(vars), "grpcs://h:1");
        assert_eq!(read(&[]).unwrap(), None);
        assert_eq!(
            read(&[(CLIENT_CERT_VAR, ""), (CLIENT_KEY_VAR, "")]).unwrap(),
            None,
            "an empty value is unset"
        );
        assert_eq!(
            read(&[(CLIENT_CERT_VAR, "/c.pem"), (CLIENT_KEY_VAR, "/k.pem")]).unwrap(),
            Some(ClientCertFiles {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            })
        );
        for (vars, reason) in [
            (
                [(CLIENT_CERT_VAR, "/c.pem"), (CLIENT_KEY_VAR, "")],
                "HEDDLE_REMOTE_CLIENT_CERT is set but HEDDLE_REMOTE_CLIENT_KEY is not: set both or neither",
            ),
            (
                [(CLIENT_KEY_VAR, "/k.pem"), ("OTHER", "")],
                "HEDDLE_REMOTE_CLIENT_KEY is set but HEDDLE_REMOTE_CLIENT_CERT is not: set both or neither",
            ),
        ] {
            let e = read(&vars).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "failed to use a client certificate for remote cache grpcs://h:1: {reason}"
                )
            );
        }
    }

    /// A file that cannot be read or holds no PEM block of its kind is named in the error, and
    /// the key's bytes never are.
    #[test]
    fn an_unreadable_or_wrong_client_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert_text = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key_text = "-----BEGIN PRIVATE KEY-----\nS3CR3TS3\n-----END PRIVATE KEY-----\n";
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (cert, key) = (file("c.pem", cert_text), file("k.pem", key_text));
        let missing = dir.path().join("missing.pem");
        for (pair, (what, var), path, cause) in [
            (
                (missing.clone(), key.clone()),
                ("certificate", CLIENT_CERT_VAR),
                &missing,
                "No such file",
            ),
            (
                (cert.clone(), missing.clone()),
                ("private key", CLIENT_KEY_VAR),
                &missing,
                "No such file",
            ),
            (
                (key.clone(), key.clone()),
                ("certificate", CLIENT_CERT_VAR),
                &key,
                "no PEM certificate in it",
            ),
            (
                (cert.clone(), cert.clone()),
                ("private key", CLIENT_KEY_VAR),
                &cert,
                "no PEM private key in it",
            ),
        ] {
            let client = ClientCertFiles {
                cert: pair.0,
                key: pair.1,
            };
            let e = client.read("grpcs://h:1").unwrap_err();
            let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
            assert!(
                chain.starts_with(&format!(
                    "failed to read the client {what} {} ({var}) for remote cache grpcs://h:1: ",
                    path.display()
                )),
                "{chain}"
            );
            assert!(chain.contains(cause), "{chain}");
            assert!(!chain.contains("S3CR3T"), "{chain}");
        }
        // Both files of the right kind, but not a key (nor a certificate) rustls can parse.
        let e = ClientCertFiles { cert, key }
            .read("grpcs://h:1")
            .unwrap_err();
        assert!(matches!(e, RemoteError::TlsClientPair { .. }), "{e:?}");
        assert!(!format!("{e:?}").contains("S3CR3T"));
    }
}
