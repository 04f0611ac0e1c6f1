//! How heddle reaches a REAPI server: the endpoint (plain HTTP/2 or TLS), the timeouts, and the
//! headers every call carries (a bearer token, BuildBuddy's API key). Credentials come from
//! the environment only, never from a pipeline, a lock file or a config file a team shares,
//! and are never printed: errors name a header, not its value.

use std::sync::Arc;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
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
    /// `grpcs://`: TLS, with these roots.
    pub tls: Option<ReapiTls>,
    pub headers: ReapiHeaders,
}

impl ReapiOptions {
    /// The options of a `grpc://` (`tls` false) or `grpcs://` remote named `remote`.
    pub fn from_env(
        tls: bool,
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<ReapiOptions, RemoteError> {
        Ok(ReapiOptions {
            tls: tls.then(|| ReapiTls::from_env(env)),
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
            .tls_config(tls.client_config(remote)?)
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
/// The server's name is checked against the host in the URL.
#[derive(Debug, Clone, Default)]
pub struct ReapiTls {
    pub extra_ca: Option<std::path::PathBuf>,
}

impl ReapiTls {
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> ReapiTls {
        ReapiTls {
            extra_ca: env(CA_FILE_VAR).filter(|v| !v.is_empty()).map(Into::into),
        }
    }

    fn client_config(&self, remote: &str) -> Result<ClientTlsConfig, RemoteError> {
        let mut config = ClientTlsConfig::new().with_native_roots();
        if let Some(path) = &self.extra_ca {
            let pem = std::fs::read(path).map_err(|source| RemoteError::TlsCa {
                path: path.clone(),
                remote: remote.to_string(),
                source,
            })?;
            config = config.ca_certificate(Certificate::from_pem(pem));
        }
        Ok(config)
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
}
