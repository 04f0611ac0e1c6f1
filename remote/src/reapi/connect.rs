//! How heddle reaches a REAPI server: the endpoint (plain HTTP/2 or TLS), the timeouts, the
//! headers every call carries (a bearer token, BuildBuddy's API key) and the client certificate
//! a `grpcs://` server may ask for (mTLS). Credentials come from the environment only, never from a pipeline, a lock file or a config file a team shares,
//! and are never printed: errors name a header, not its value.

use std::path::PathBuf;
use std::sync::Arc;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::backend::Timeouts;
use crate::RemoteError;

/// The channel every client of one remote shares, with its headers added to each call.
pub type Transport = InterceptedService<Channel, AddHeaders>;

/// The environment variable holding headers for every call, `name=value`, one per line or
/// comma-separated: `authorization=Bearer <token>`, `x-buildbuddy-api-key=<key>`.
pub const HEADERS_VAR: &str = "HEDDLE_REMOTE_HEADERS";

/// How to reach one REAPI remote, read from the environment.
#[derive(Debug, Clone, Default)]
pub struct ReapiOptions {
    /// `grpcs://`: TLS, with these roots and this client certificate.
    pub tls: Option<ReapiTls>,
    pub headers: ReapiHeaders,
}

impl ReapiOptions {
    /// The options of a `grpc://` (`tls` false) or `grpcs://` remote named `remote`. A client
    /// certificate for a `grpc://` remote is an error: whoever set one expects TLS.
    pub fn from_env(
        tls: bool,
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<ReapiOptions, RemoteError> {
        let client = ReapiClientCert::from_env(env, remote)?;
        if !tls && client.is_some() {
            return Err(ReapiClientCert::needs_tls(remote));
        }
        Ok(ReapiOptions {
            tls: tls.then(|| ReapiTls::from_env(env, client)),
            headers: ReapiHeaders::parse(env(HEADERS_VAR).as_deref().unwrap_or(""), remote)?,
        })
    }
}

/// The headers every call carries. `Debug` shows names only.
#[derive(Clone, Default)]
pub struct ReapiHeaders(Arc<Vec<(AsciiMetadataKey, AsciiMetadataValue)>>);

impl std::fmt::Debug for ReapiHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k.as_str()))
            .finish()
    }
}

impl ReapiHeaders {
    /// `name=value` entries, one per line or comma-separated; blank entries are ignored.
    pub fn parse(text: &str, remote: &str) -> Result<ReapiHeaders, RemoteError> {
        let bad = |reason: String| RemoteError::BadHeader {
            remote: remote.to_string(),
            reason,
        };
        let mut headers = Vec::new();
        for entry in text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(bad(format!(
                    "an entry of {HEADERS_VAR} has no `=`: expected name=value"
                )));
            };
            let name = name.trim().to_ascii_lowercase();
            if name.ends_with("-bin") {
                return Err(bad(format!(
                    "{name:?}: binary (-bin) headers are not supported"
                )));
            }
            let key = AsciiMetadataKey::from_bytes(name.as_bytes())
                .map_err(|_| bad(format!("{name:?} is not a header name")))?;
            let value = value.trim();
            // `http` lets bytes over 0x7f through; a token or key is printable ASCII.
            let printable = value.bytes().all(|b| (b' '..=b'~').contains(&b));
            let value = AsciiMetadataValue::try_from(value)
                .ok()
                .filter(|_| printable)
                .ok_or_else(|| {
                    bad(format!(
                        "the value of header {name:?} is not printable ASCII"
                    ))
                })?;
            headers.push((key, value));
        }
        Ok(ReapiHeaders(Arc::new(headers)))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

/// Adds the remote's headers to each call.
#[derive(Clone)]
pub struct AddHeaders(ReapiHeaders);

impl Interceptor for AddHeaders {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        for (key, value) in self.0 .0.iter() {
            request.metadata_mut().insert(key.clone(), value.clone());
        }
        Ok(request)
    }
}

/// The lazily connected transport to `authority` (no request is made here).
pub fn transport(
    authority: &str,
    options: ReapiOptions,
    remote: &str,
    timeouts: Timeouts,
) -> Result<Transport, RemoteError> {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}")).map_err(|e| {
        RemoteError::BadUrl {
            url: remote.to_string(),
            reason: e.to_string(),
        }
    })?;
    if let Some(tls) = &options.tls {
        endpoint = endpoint
            .tls_config(tls.client_config(authority, remote)?)
            .map_err(|source| RemoteError::TlsSetup {
                remote: remote.to_string(),
                source,
            })?;
    }
    let endpoint = endpoint
        .connect_timeout(timeouts.request)
        .tcp_nodelay(true)
        // A connection whose peer vanished (a server host that died without closing it)
        // is noticed within the idle timeout, not at the next TCP retransmit limit.
        .http2_keep_alive_interval(timeouts.idle)
        .keep_alive_timeout(timeouts.idle);
    Ok(InterceptedService::new(
        endpoint.connect_lazy(),
        AddHeaders(options.headers),
    ))
}

/// The environment variable naming a PEM file of CA certificates a `grpcs://` remote's
/// certificate may chain to, besides the system's (a team's own CA, a self-signed server).
pub const CA_FILE_VAR: &str = "HEDDLE_REMOTE_CA_FILE";

/// How a `grpcs://` remote is trusted: the platform's root certificates (rustls-native-certs:
/// the system store, or the file `SSL_CERT_FILE` names), plus the file [`CA_FILE_VAR`] names.
/// The server's name is checked against the host in the URL. With `client`, heddle shows the
/// server that certificate when asked (mTLS).
#[derive(Debug, Clone, Default)]
pub struct ReapiTls {
    pub extra_ca: Option<PathBuf>,
    pub client: Option<ReapiClientCert>,
}

impl ReapiTls {
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        client: Option<ReapiClientCert>,
    ) -> ReapiTls {
        ReapiTls {
            extra_ca: env(CA_FILE_VAR).filter(|v| !v.is_empty()).map(Into::into),
            client,
        }
    }

    fn client_config(&self, authority: &str, remote: &str) -> Result<ClientTlsConfig, RemoteError> {
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(path) = &self.extra_ca {
            let pem = std::fs::read(path).map_err(|source| RemoteError::TlsCa {
                path: path.clone(),
                remote: remote.to_string(),
                source,
            })?;
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(client) = &self.client {
            config = config.identity(client.identity(authority, remote)?);
        }
        Ok(config)
    }
}

/// The environment variable naming the PEM file of the client certificate (and any
/// intermediates after it) a `grpcs://` remote that checks clients' certificates is shown.
pub const CLIENT_CERT_VAR: &str = "HEDDLE_REMOTE_CLIENT_CERT";
/// The environment variable naming the PEM file of [`CLIENT_CERT_VAR`]'s private key.
pub const CLIENT_KEY_VAR: &str = "HEDDLE_REMOTE_CLIENT_KEY";

/// A client certificate and its key, as PEM files (bazel's `--tls_client_certificate` and
/// `--tls_client_key`). The files are read when the remote is opened, once per run; the key's
/// bytes are never printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapiClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ReapiClientCert {
    /// [`CLIENT_CERT_VAR`] and [`CLIENT_KEY_VAR`], both or neither (an empty value is unset);
    /// one without the other is an error naming the one missing.
    pub fn from_env(
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<Option<ReapiClientCert>, RemoteError> {
        let var = |name| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let missing = |set: &str, unset: &str| RemoteError::ClientCert {
            remote: remote.to_string(),
            reason: format!("{set} is set but {unset} is not: set both or neither"),
        };
        match (var(CLIENT_CERT_VAR), var(CLIENT_KEY_VAR)) {
            (None, None) => Ok(None),
            (Some(cert), Some(key)) => Ok(Some(ReapiClientCert { cert, key })),
            (Some(_), None) => Err(missing(CLIENT_CERT_VAR, CLIENT_KEY_VAR)),
            (None, Some(_)) => Err(missing(CLIENT_KEY_VAR, CLIENT_CERT_VAR)),
        }
    }

    /// The error for a client certificate set for a remote that would not send it (`grpc://`,
    /// S3, WebDAV): whoever set one expects the server to see it.
    pub fn needs_tls(remote: &str) -> RemoteError {
        RemoteError::ClientCert {
            remote: remote.to_string(),
            reason: format!(
                "{CLIENT_CERT_VAR} and {CLIENT_KEY_VAR} are set but only a grpcs:// (TLS) \
                 remote is sent a client certificate"
            ),
        }
    }

    /// Both files read and checked as a pair: each one a file of that kind of PEM block, and the
    /// key the certificate's. `authority` is only there to build a throwaway TLS setup with the
    /// pair alone, so that whatever rustls refuses is blamed on these two files.
    fn identity(&self, authority: &str, remote: &str) -> Result<Identity, RemoteError> {
        let read = |what: &'static str, path: &PathBuf, marker: &str| {
            let bad = |source| RemoteError::TlsClientFile {
                what,
                path: path.clone(),
                remote: remote.to_string(),
                source,
            };
            let pem = std::fs::read(path).map_err(bad)?;
            let text = String::from_utf8_lossy(&pem);
            let found = text.lines().any(|l| {
                let l = l.trim();
                l.starts_with("-----BEGIN ") && l.ends_with(marker)
            });
            if !found {
                return Err(bad(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("no PEM {what} in it (a -----BEGIN ...{marker} line)"),
                )));
            }
            Ok(pem)
        };
        let cert = read("certificate", &self.cert, " CERTIFICATE-----")?;
        let key = read("private key", &self.key, " PRIVATE KEY-----")?;
        let identity = Identity::from_pem(cert, key);
        Endpoint::from_shared(format!("https://{authority}"))
            .and_then(|e| e.tls_config(ClientTlsConfig::new().identity(identity.clone())))
            .map_err(|source| RemoteError::TlsClientPair {
                cert: self.cert.clone(),
                key: self.key.clone(),
                remote: remote.to_string(),
                source,
            })?;
        Ok(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_per_line_or_comma_and_hide_their_values() {
        let h = ReapiHeaders::parse(
            "Authorization=Bearer a.b.c\n x-buildbuddy-api-key = k1 ,\n",
            "r",
        )
        .unwrap();
        assert_eq!(
            h.names().collect::<Vec<_>>(),
            ["authorization", "x-buildbuddy-api-key"]
        );
        assert_eq!(
            format!("{h:?}"),
            r#"["authorization", "x-buildbuddy-api-key"]"#
        );
        assert_eq!(h.0[0].1, "Bearer a.b.c");
    }

    #[test]
    fn a_bad_header_is_refused_without_its_value() {
        for (text, reason) in [
            (
                "token",
                "an entry of HEDDLE_REMOTE_HEADERS has no `=`: expected name=value",
            ),
            ("bad name=x", "\"bad name\" is not a header name"),
            (
                "k-bin=x",
                "\"k-bin\": binary (-bin) headers are not supported",
            ),
            (
                "k=caf\u{e9}",
                "the value of header \"k\" is not printable ASCII",
            ),
        ] {
            let e = ReapiHeaders::parse(text, "grpc://h:1").unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("failed to read the headers for remote cache grpc://h:1: {reason}")
            );
        }
    }

    fn env_of<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_client_certificate_is_both_variables_or_neither() {
        let read = |vars: &[(&str, &str)]| ReapiClientCert::from_env(&env_of(vars), "grpcs://h:1");
        assert_eq!(read(&[]).unwrap(), None);
        assert_eq!(
            read(&[(CLIENT_CERT_VAR, ""), (CLIENT_KEY_VAR, "")]).unwrap(),
            None,
            "an empty value is unset"
        );
        assert_eq!(
            read(&[(CLIENT_CERT_VAR, "/c.pem"), (CLIENT_KEY_VAR, "/k.pem")]).unwrap(),
            Some(ReapiClientCert {
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

    #[test]
    fn a_client_certificate_goes_only_to_a_grpcs_remote() {
        let vars = [(CLIENT_CERT_VAR, "/c.pem"), (CLIENT_KEY_VAR, "/k.pem")];
        let o = ReapiOptions::from_env(true, &env_of(&vars), "grpcs://h:1/i").unwrap();
        assert_eq!(
            o.tls.unwrap().client.unwrap(),
            ReapiClientCert {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            }
        );
        let e = ReapiOptions::from_env(false, &env_of(&vars), "grpc://h:1/i").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to use a client certificate for remote cache grpc://h:1/i: \
             HEDDLE_REMOTE_CLIENT_CERT and HEDDLE_REMOTE_CLIENT_KEY are set but only a grpcs:// \
             (TLS) remote is sent a client certificate"
        );
        assert!(ReapiOptions::from_env(false, &env_of(&[]), "grpc://h:1/i")
            .unwrap()
            .tls
            .is_none());
    }

    /// A file that cannot be read or holds no PEM block of its kind is named in the error, and
    /// the key's bytes never are.
    #[test]
    fn an_unreadable_or_wrong_client_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert_text = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let key_text = "-----BEGIN PRIVATE KEY-----\nS3CR3T\n-----END PRIVATE KEY-----\n";
        let file = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let (cert, key) = (file("c.pem", cert_text), file("k.pem", key_text));
        let missing = dir.path().join("missing.pem");
        for (pair, what, path, cause) in [
            (
                (missing.clone(), key.clone()),
                "certificate",
                &missing,
                "No such file",
            ),
            (
                (cert.clone(), missing.clone()),
                "private key",
                &missing,
                "No such file",
            ),
            (
                (key.clone(), key.clone()),
                "certificate",
                &key,
                "no PEM certificate in it",
            ),
            (
                (cert.clone(), cert.clone()),
                "private key",
                &cert,
                "no PEM private key in it",
            ),
        ] {
            let client = ReapiClientCert {
                cert: pair.0,
                key: pair.1,
            };
            let e = client.identity("h:1", "grpcs://h:1").unwrap_err();
            let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
            assert!(
                chain.starts_with(&format!(
                    "failed to read the client {what} {} for remote cache grpcs://h:1: ",
                    path.display()
                )),
                "{chain}"
            );
            assert!(chain.contains(cause), "{chain}");
            assert!(!chain.contains("S3CR3T"), "{chain}");
        }
        // Both files of the right kind, but not a certificate rustls can parse.
        let e = ReapiClientCert { cert, key }
            .identity("h:1", "grpcs://h:1")
            .unwrap_err();
        assert!(matches!(e, RemoteError::TlsClientPair { .. }), "{e:?}");
        assert!(!format!("{e:?}").contains("S3CR3T"));
    }
}
